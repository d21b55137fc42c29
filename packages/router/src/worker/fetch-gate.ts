import type { RedisClient as SharedRedis } from '@spillway/shared';
import { type Job, type RedisClient, Worker, type WorkerOptions } from 'bullmq';
import { withCommands } from '../commands/index.ts';
import { jobRerunsJoinedTotal } from '../metrics.ts';

/**
 * Jobs a queue's worker holds fetched while they wait for room (Engine#room): enough that a job is
 * ready the moment room frees, few enough that waiting costs nothing. With 8, a waiting job's
 * parsed events lived long enough to be promoted, and fan-out at 10 endpoints/event ran ~10 %
 * slower than with parking (docs/benchmarks/profile.md, "Fetch only what can get room"). A job
 * that completes while the gate is open may fetch its successor with its completion, as BullMQ
 * does, so a burst of completions can overshoot it by one job each; the next fetch then waits.
 */
export const FETCH_AHEAD = 2;

/**
 * Counts the jobs a worker has fetched that have not been given room yet, and holds the next fetch
 * while FETCH_AHEAD of them wait. A job not fetched stays in the queue's wait list in Redis: it is
 * neither parsed, nor locked, nor renewed, and another worker with room may take it.
 *
 * Before this, BullMQ fetched a job into every free slot (CONCURRENCY, 256), parsed, and a job
 * without room dropped its data and read it back once it had room: under a preload most jobs were
 * fetched, parsed, dropped, read and parsed again (10–20 µs of worker CPU per delivery at
 * 1 endpoint/event, docs/benchmarks/profile.md).
 */
export class FetchGate {
  readonly #limit: number;
  /** Fetched, not yet given room (a Set: `admitted` may be called more than once per job). */
  readonly #waiting = new Set<Job>();
  #wakers: (() => void)[] = [];
  #stopped = false;

  constructor(limit = FETCH_AHEAD) {
    this.#limit = limit;
  }

  /** Jobs fetched and waiting for room. */
  get waiting(): number {
    return this.#waiting.size;
  }

  /** Whether another job may be fetched now. */
  isOpen(): boolean {
    return this.#stopped || this.#waiting.size < this.#limit;
  }

  fetched(job: Job): void {
    this.#waiting.add(job);
    this.#wake();
  }

  /** The job has room (or ended, or joined another run of itself): it no longer counts. */
  admitted(job: Job): void {
    if (this.#waiting.delete(job)) this.#wake();
  }

  /** Resolves at the next change: a job fetched or admitted, or the gate stopped. */
  changed(): Promise<void> {
    return new Promise((resolve) => this.#wakers.push(resolve));
  }

  /** Closing or pausing: nothing is held back any more. */
  stop(): void {
    this.#stopped = true;
    this.#wake();
  }

  start(): void {
    this.#stopped = false;
  }

  #wake(): void {
    if (this.#wakers.length === 0) return;
    for (const w of this.#wakers.splice(0)) w();
  }
}

/**
 * How long this process remembers that a job's run succeeded. Well under KEYED_JOB_OPTS's hour: a
 * keyed job added again after BullMQ dropped its finished record is a new job, never one of these.
 */
const FINISHED_MEMORY_MS = 5 * 60_000;
/** At most this many finished job ids are remembered (the oldest are forgotten first). */
const FINISHED_MEMORY_MAX = 50_000;

/**
 * One run per job id in this process. A lock renewal missed under load (the event loop late by a
 * lock's length) lets BullMQ's stalled check move a job that this worker is still running back to
 * wait, and this worker may claim it again. BullMQ tracks locks by job id, so when the first run
 * finishes it also stops renewing the second run's lock: the second stalls in turn, a third starts,
 * and every round delivered the job's tasks again (the 1 M storage benchmark saw 86 intake jobs run
 * 14 times each, 8 % of all deliveries duplicated, still growing when it stopped). A second run
 * owns nothing: the tasks are the first run's. It waits for the first and ends as it ends (an error
 * fails the job, so BullMQ retries it; success completes it under the lock it holds).
 *
 * The same holds after the first run succeeded but its completion did not reach Redis before its
 * lock lapsed (Redis down for longer than SPILLWAY_JOB_LOCK: the chaos redis-restart scenario
 * delivered 1–3 events twice in most runs): every task of the job already reached its next owner,
 * so a claim of it within FINISHED_MEMORY_MS ends at once, as a success, and delivers nothing.
 * `joined` is told of each such run (GatedWorker: the job no longer waits for room).
 */
export function oneRunPerJob<T>(
  run: (job: Job<T>) => Promise<void>,
  joined: (job: Job<T>) => void = () => {},
): (job: Job<T>) => Promise<void> {
  const running = new Map<string, Promise<void>>();
  /** Job id → when its run succeeded, oldest first. */
  const finished = new Map<string, number>();
  return async (job) => {
    const id = job.id ?? '';
    const first = running.get(id);
    const now = Date.now();
    const ended = finished.get(id);
    if (first || (ended !== undefined && now - ended < FINISHED_MEMORY_MS)) {
      jobRerunsJoinedTotal.inc({ queue: job.queueName });
      joined(job);
      return first;
    }
    const p = run(job);
    running.set(id, p);
    try {
      await p;
      finished.delete(id);
      finished.set(id, Date.now());
      for (const [k, at] of finished) {
        if (finished.size <= FINISHED_MEMORY_MAX && now - at < FINISHED_MEMORY_MS) break;
        finished.delete(k);
      }
    } finally {
      running.delete(id);
    }
  };
}

/**
 * A BullMQ worker that fetches only while its FetchGate is open, and runs each job id once at a
 * time in this process (oneRunPerJob; a claim that joins another run no longer waits for room). Three of BullMQ's worker methods
 * are overridden (bullmq is pinned in package.json; `fetch-gate.test.ts` runs the real loop):
 *
 * - `moveToActive` (every fetch of the main loop goes through it) waits while the gate is closed.
 *   It returns no job instead of waiting when a job it fetched earlier has not been started: the
 *   main loop starts the jobs it holds only after a fetch returns, so waiting there would keep the
 *   very jobs that can open the gate from running. At a calm rate it asks `#settle` before a fetch
 *   that would find nothing, and takes back the marker that makes the next wait wake at once.
 * - `nextJobFromJobData` (where a fetched job is made, from a fetch or from a completion's
 *   fetch-next) counts the job in the gate.
 * - `processJob` asks for a fetch-next on completion only while the gate is open, and counts a job
 *   out when it ends, whatever became of it (the processor counts it out earlier, at room).
 */
export class GatedWorker<T> extends Worker<T> {
  readonly gate: FetchGate;
  #unstarted = 0;
  /** The last fetch was made right after a wake-up (the worker was drained) and took a job. */
  #afterWake = false;

  constructor(name: string, run: (job: Job<T>) => Promise<void>, opts: WorkerOptions, gate: FetchGate) {
    super(
      name,
      oneRunPerJob(run, (job) => gate.admitted(job)),
      { ...opts, autorun: false },
    );
    this.gate = gate;
    this.run().catch((err) => this.emit('error', err as Error));
  }

  protected override async moveToActive(client: RedisClient, token: string, name?: string): Promise<Job<T>> {
    for (;;) {
      if (this.closing || this.paused) return undefined as unknown as Job<T>;
      if (this.gate.isOpen()) {
        // The last fetch followed a wake-up and took a job: at a calm rate the queue is empty now,
        // and asking the cheap script first spares a moveToActive that would come back empty.
        if (this.#afterWake && !this.#drained) {
          this.#afterWake = false;
          if ((await this.#settle(client)) === 1)
            return this.nextJobFromJobData(undefined as never, undefined as never, token);
        }
        const woke = this.#drained;
        const job = await super.moveToActive(client, token, name);
        if (job) this.#afterWake = woke;
        else if (!this.closing) await this.#settle(client);
        return job;
      }
      if (this.#unstarted > 0) return undefined as unknown as Job<T>;
      await this.gate.changed();
    }
  }

  /**
   * BullMQ's own flag (private in its typings; bullmq is pinned): true from a fetch that found
   * nothing until one that finds a job, i.e. the next fetch follows a blocking wait on the marker.
   */
  get #drained(): boolean {
    return (this as unknown as { drained: boolean }).drained;
  }

  /**
   * Takes back the base marker BullMQ's moveToActive re-adds after every job it takes, unless a job
   * is waiting (`fetch-settle-3.lua`, atomic with respect to adds), so the next blocking wait sleeps
   * until a job is added. 1 when the queue had nothing waiting (the marker, if any, is gone), 0
   * when a job waits, and 0 on an error (the caller then fetches as BullMQ would).
   */
  async #settle(client: RedisClient): Promise<number> {
    const k = this.keys;
    return withCommands(client as unknown as SharedRedis)
      .fetchSettle(k.wait!, k.prioritized!, k.marker!)
      .catch(() => 0);
  }

  protected override async nextJobFromJobData(
    ...args: Parameters<Worker<T>['nextJobFromJobData']>
  ): Promise<Job<T>> {
    const job = await super.nextJobFromJobData(...args);
    if (job) {
      this.#unstarted++;
      this.gate.fetched(job);
    }
    return job;
  }

  override async processJob(job: Job<T>, token: string, fetchNext: () => boolean = () => true) {
    this.#unstarted--;
    try {
      return await super.processJob(job, token, () => fetchNext() && this.gate.isOpen());
    } finally {
      this.gate.admitted(job);
    }
  }

  override pause(doNotWaitActive?: boolean): Promise<void> {
    this.gate.stop();
    return super.pause(doNotWaitActive);
  }

  override resume(): void {
    this.gate.start();
    super.resume();
  }

  override close(force?: boolean): Promise<void> {
    this.gate.stop();
    return super.close(force);
  }
}
