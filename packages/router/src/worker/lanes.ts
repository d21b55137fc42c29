import type { DeliveryTask } from './fanout.ts';

/**
 * Whoever owns a task durably while it is in a worker's memory: an intake or retry job (it completes
 * when all of its tasks have settled) or a spill record (its offset resolves). `settle` is called
 * exactly once per task, after the task left memory through a durable hand-off.
 */
export interface Owner {
  settle(): void;
}

/** A job's tasks: the job completes when the last one settles. */
export class JobOwner implements Owner {
  #left: number;
  readonly done: Promise<void>;
  #resolve!: () => void;

  constructor(n: number) {
    this.#left = n;
    this.done = new Promise<void>((r) => {
      this.#resolve = r;
    });
    if (n === 0) this.#resolve();
  }

  settle(): void {
    if (--this.#left === 0) this.#resolve();
  }
}

/** A task in memory, with the owner to tell when it has left. */
export interface Held {
  task: DeliveryTask;
  owner: Owner;
}

/** A FIFO of held tasks with O(1) shift (an array and a head index, compacted as it drains). */
export class Fifo {
  #items: Held[] = [];
  #head = 0;

  get length(): number {
    return this.#items.length - this.#head;
  }

  push(h: Held): void {
    this.#items.push(h);
  }

  peek(): Held | undefined {
    return this.#items[this.#head];
  }

  shift(): Held | undefined {
    if (this.#head >= this.#items.length) return undefined;
    const h = this.#items[this.#head]!;
    this.#items[this.#head++] = undefined as never;
    if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return h;
  }

  /** Removes and returns every task for which `pick` is true, keeping the order of the rest. */
  take(pick: (h: Held) => boolean): Held[] {
    const out: Held[] = [];
    const keep: Held[] = [];
    for (let i = this.#head; i < this.#items.length; i++) {
      const h = this.#items[i]!;
      (pick(h) ? out : keep).push(h);
    }
    this.#items = keep;
    this.#head = 0;
    return out;
  }
}

/** How far ahead of its delivery rate a lane may hold tasks (see Lane#room). */
export const LOOKAHEAD_S = 1;
/** A lane with work but no completion for this long is stalled: it gives its waiting tasks back. */
export const STALL_MS = 1000;
/** Lane rates are measured over ticks of this length (an EWMA). */
export const TICK_MS = 100;

/**
 * One tenant's work in one worker. Each task holds one of the tenant's credits while it is here,
 * and moves: queue → active (handed to delivery, at most `concurrency`) → settled. The lane measures
 * its own delivery rate:
 *   - a tenant that delivers keeps what its jobs bring (up to its credits) and never touches Kafka;
 *   - a lane that stops delivering (work on the wire, no completion for STALL_MS) is stalled: it
 *     gives its queue back to the spill log and takes nothing more until something completes, so a
 *     hanging tenant holds only what is on the wire;
 *   - the drainer brings spilled work back only while the queue is below about LOOKAHEAD_S of the
 *     lane's rate (Lane#room), so a slow tenant's backlog stays in Kafka, not in memory.
 */
export class Lane {
  readonly tenantId: string;
  readonly queue = new Fifo();
  active = 0;
  /** Completions since the last tick, and the EWMA rate (per second) of earlier ticks. */
  #done = 0;
  rate = 0;
  #measured = false;
  /** Last completion (or the time the lane started waiting with nothing active). */
  lastProgress = Date.now();

  constructor(tenantId: string) {
    this.tenantId = tenantId;
  }

  /** Tasks this lane holds now (waiting for a slot or on the wire). */
  get size(): number {
    return this.queue.length + this.active;
  }

  /** How many tasks may wait for a slot: about LOOKAHEAD_S of the measured rate, at least `concurrency`. */
  lookahead(concurrency: number, maxInFlight: number): number {
    const byRate = this.#measured ? Math.ceil(this.rate * LOOKAHEAD_S) : concurrency * 4;
    return Math.max(1, Math.min(maxInFlight, Math.max(concurrency, byRate)));
  }

  /** Whether the drainer may bring one more task into the queue. */
  room(concurrency: number, maxInFlight: number): boolean {
    return this.queue.length < this.lookahead(concurrency, maxInFlight);
  }

  completed(now: number): void {
    this.#done++;
    this.lastProgress = now;
  }

  /** Folds the tick's completions into the rate. */
  tick(): void {
    if (this.#done > 0 || this.active > 0) {
      const r = (this.#done * 1000) / TICK_MS;
      this.rate = this.#measured ? this.rate * 0.7 + r * 0.3 : r;
      this.#measured = this.#measured || this.#done > 0;
    }
    this.#done = 0;
  }

  /** Something is on the wire and nothing completed for STALL_MS. */
  stalled(now: number): boolean {
    return this.active > 0 && now - this.lastProgress > STALL_MS;
  }
}
