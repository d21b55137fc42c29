import { type Job, type Processor, type RedisClient, Worker, type WorkerOptions } from 'bullmq';

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
 * A BullMQ worker that fetches only while its FetchGate is open. Three of BullMQ's worker methods
 * are overridden (bullmq is pinned in package.json; `fetch-gate.test.ts` runs the real loop):
 *
 * - `moveToActive` (every fetch of the main loop goes through it) waits while the gate is closed.
 *   It returns no job instead of waiting when a job it fetched earlier has not been started: the
 *   main loop starts the jobs it holds only after a fetch returns, so waiting there would keep the
 *   very jobs that can open the gate from running.
 * - `nextJobFromJobData` (where a fetched job is made, from a fetch or from a completion's
 *   fetch-next) counts the job in the gate.
 * - `processJob` asks for a fetch-next on completion only while the gate is open, and counts a job
 *   out when it ends, whatever became of it (the processor counts it out earlier, at room).
 */
export class GatedWorker<T> extends Worker<T> {
  readonly gate: FetchGate;
  #unstarted = 0;

  constructor(name: string, processor: Processor<T>, opts: WorkerOptions, gate: FetchGate) {
    super(name, processor, { ...opts, autorun: false });
    this.gate = gate;
    this.run().catch((err) => this.emit('error', err as Error));
  }

  protected override async moveToActive(client: RedisClient, token: string, name?: string): Promise<Job<T>> {
    for (;;) {
      if (this.closing || this.paused) return undefined as unknown as Job<T>;
      if (this.gate.isOpen()) return super.moveToActive(client, token, name);
      if (this.#unstarted > 0) return undefined as unknown as Job<T>;
      await this.gate.changed();
    }
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
