import type { Logger } from '@spillway/shared';
import type { Queue } from 'bullmq';
import { retryJobsTotal, retryTasksTotal } from '../metrics.ts';
import { type DeliveryTask, taskToWire, type WireTask } from '../worker/fanout.ts';

/** Data of one retry job: tasks that are due at the same time. */
export interface RetryJobData {
  v: 1;
  tasks: WireTask[];
}

export const RETRY_JOB_OPTS = {
  removeOnComplete: { count: 1000, age: 3600 },
  removeOnFail: { count: 5000, age: 7 * 24 * 3600 },
  attempts: 1_000_000,
  backoff: { type: 'fixed', delay: 1000 },
} as const;

const FLUSH_MS = 5;
/** Tasks whose delays differ by less than this share one delayed job. */
const BUCKET_MS = 50;

interface Item {
  task: DeliveryTask;
  delayMs: number;
  resolve: () => void;
}

/**
 * Hands failed tasks to delayed BullMQ retry jobs. When many fail at once (an endpoint down), the
 * tasks of one ≤ 5 ms window and one 50 ms delay bucket become ONE job. `schedule()` resolves once
 * the job is in Redis: only then may the caller drop the task and return its credit. Adds that fail
 * are retried until they succeed (Redis restart), so the caller simply waits.
 */
export class RetryScheduler {
  readonly #queue: Queue;
  readonly #logger: Logger;
  #buf: Item[] = [];
  #timer: NodeJS.Timeout | undefined;
  #inflight = new Set<Promise<void>>();
  #closed = false;

  constructor(queue: Queue, logger: Logger) {
    this.#queue = queue;
    this.#logger = logger;
  }

  schedule(task: DeliveryTask, delayMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      this.#buf.push({ task, delayMs, resolve });
      this.#timer ??= setTimeout(() => this.#flush(), FLUSH_MS);
    });
  }

  #flush(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    const buf = this.#buf;
    this.#buf = [];
    const buckets = new Map<number, Item[]>();
    for (const it of buf) {
      const b = Math.ceil(it.delayMs / BUCKET_MS) * BUCKET_MS;
      const list = buckets.get(b) ?? [];
      list.push(it);
      buckets.set(b, list);
    }
    for (const [delay, items] of buckets) {
      const p = this.#add(delay, items);
      this.#inflight.add(p);
      void p.finally(() => this.#inflight.delete(p));
    }
  }

  async #add(delay: number, items: Item[]): Promise<void> {
    const data: RetryJobData = { v: 1, tasks: items.map((it) => taskToWire(it.task)) };
    for (let attempt = 0; ; attempt++) {
      try {
        await this.#queue.add('retry', data, { ...RETRY_JOB_OPTS, delay });
        retryJobsTotal.inc();
        retryTasksTotal.inc(items.length);
        for (const it of items) it.resolve();
        return;
      } catch (err) {
        if (this.#closed) return;
        this.#logger.warn({ err: (err as Error).message, attempt }, 'retry job add failed; retrying');
        await new Promise((r) => setTimeout(r, Math.min(200 * 2 ** Math.min(attempt, 4), 3000)));
      }
    }
  }

  async close(): Promise<void> {
    this.#flush();
    const t = setTimeout(() => {
      this.#closed = true;
    }, 3000);
    await Promise.allSettled([...this.#inflight]);
    clearTimeout(t);
    this.#closed = true;
  }
}
