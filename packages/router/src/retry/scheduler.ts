import { JOB_OPTS, ListWriter, type Logger, retryForever } from '@spillway/shared';
import type { Queue } from 'bullmq';
import { retryJobsTotal, retryTasksTotal } from '../metrics.ts';
import { type DeliveryTask, taskToWire, type WireTask } from '../worker/fanout.ts';

/** Data of one retry job: tasks that are due at the same time. */
export type RetryJobData = { v: 1; tasks: WireTask[] };

const FLUSH_MS = 5;
/**
 * Tasks of one flush whose delays fall in one bucket share one delayed job. A bucket is the power
 * of two at or under a tenth of the delay, at least 50 ms: a task is retried at most a tenth of
 * its delay after it was due (the delays are jittered by ± 20 % anyway), never before. Sixteen
 * requests that time out together (5 s ± 20 %) made ~14 jobs with 50 ms buckets and make 5–7
 * with these; each job costs its own serialisation and script call.
 */
const MIN_BUCKET_MS = 50;

export function retryBucketOf(delayMs: number): number {
  const width = Math.max(MIN_BUCKET_MS, 2 ** Math.floor(Math.log2(Math.max(1, delayMs / 10))));
  return Math.ceil(delayMs / width) * width;
}
/** At close, how long adds that keep failing are retried before the owners keep their tasks. */
const CLOSE_GRACE_MS = 3000;

interface Item {
  task: DeliveryTask;
  delayMs: number;
  resolve: () => void;
}

/**
 * Hands failed tasks to delayed BullMQ retry jobs. When many fail at once (an endpoint down), the
 * tasks of one ≤ 5 ms window and one delay bucket (retryBucketOf) become ONE job. `schedule()`
 * resolves once the job is in Redis: only then may the caller drop the task and return its credit.
 * Adds that fail are retried until they succeed (Redis restart), so the caller simply waits.
 */
export class RetryScheduler {
  readonly #queue: Queue;
  readonly #logger: Logger;
  readonly #writer = new ListWriter<Item>({ flushMs: FLUSH_MS, write: (items) => this.#write(items) });
  #closed = false;

  constructor(queue: Queue, logger: Logger) {
    this.#queue = queue;
    this.#logger = logger;
  }

  schedule(task: DeliveryTask, delayMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      this.#writer.add({ task, delayMs, resolve });
    });
  }

  async #write(items: Item[]): Promise<void> {
    const buckets = new Map<number, Item[]>();
    for (const it of items) {
      const b = retryBucketOf(it.delayMs);
      const list = buckets.get(b) ?? [];
      list.push(it);
      buckets.set(b, list);
    }
    // One add at a time: each job's serialisation runs in its own turn, between Redis round
    // trips, rather than all of a burst's in one (docs/benchmarks/profile.md, "A failure burst,
    // settled in turns").
    for (const [delay, bucket] of buckets) await this.#add(delay, bucket);
  }

  async #add(delay: number, items: Item[]): Promise<void> {
    const data: RetryJobData = { v: 1, tasks: items.map((it) => taskToWire(it.task)) };
    await retryForever(
      async () => {
        await this.#queue.add('retry', data, { ...JOB_OPTS, delay });
        retryJobsTotal.inc();
        retryTasksTotal.inc(items.length);
        for (const it of items) it.resolve();
      },
      (err, attempt) => {
        if (this.#closed) return false;
        this.#logger.warn({ err, attempt }, 'retry job add failed; retrying');
      },
    );
  }

  async close(): Promise<void> {
    const t = setTimeout(() => {
      this.#closed = true;
    }, CLOSE_GRACE_MS);
    await this.#writer.flush();
    clearTimeout(t);
    this.#closed = true;
  }
}
