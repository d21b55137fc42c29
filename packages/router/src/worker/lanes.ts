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
  /** Jobs hold worker slots; lanes count the jobs they pin (Lane#pin). */
  readonly pinsSlot = true;
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

/**
 * One batched endpoint's tasks waiting to go out as one request (Engine#pump fills it from the
 * lane's queue while a slot is free; it closes when full, or when its linger ends).
 */
export interface OpenBatch {
  items: Held[];
  /** What each item adds to the request body (delivery's batchElementBytes). */
  sizes: number[];
  bytes: number;
  lingerMs: number;
  timer: NodeJS.Timeout | undefined;
}

/** How far ahead of its delivery rate a lane may hold tasks the drainer brings (see Lane#room). */
export const LOOKAHEAD_S = 1;
/**
 * How far ahead of its delivery rate a lane may hold tasks from intake and retry jobs before its
 * job share applies (see Lane#takesJobTask): a lane that clears what it holds within this long
 * keeps every job it is given; only a lane that holds more than that is held to its share.
 */
export const JOB_LOOKAHEAD_S = 2;
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
  /** Tasks that have their rate tokens and go before the queue. */
  readonly ready = new Fifo();
  /** Tasks waiting for rate tokens (they hold a credit, not a slot). */
  rating = 0;
  /** Requests on the wire (a batch is one). */
  active = 0;
  /** Batched endpoints' open batches, by endpoint id. */
  readonly batches = new Map<string, OpenBatch>();
  /** Closed batches waiting for a slot: they go before anything else. */
  readonly due: Held[][] = [];
  /** Tasks in open and closed batches. */
  #batched = 0;
  /** Completions since the last tick, and the EWMA rate (per second) of earlier ticks. */
  #done = 0;
  rate = 0;
  #measured = false;
  /** Last completion (or the time the lane started waiting with nothing active). */
  lastProgress = Date.now();
  /** Jobs that tasks in this lane keep active, and how many tasks each. */
  readonly #pins = new Map<Owner, number>();
  /**
   * By endpoint id: the one task this lane holds for an endpoint whose breaker is half-open (its
   * probe). Until it leaves, the endpoint's other tasks stay where they are (Engine#fate).
   */
  readonly probes = new Map<string, DeliveryTask>();

  constructor(tenantId: string) {
    this.tenantId = tenantId;
  }

  /** Tasks queued: the queue and the batches it was drawn into (they have not taken rate tokens or a slot). */
  get queued(): number {
    return this.queue.length + this.#batched;
  }

  /** Tasks waiting for a slot: queued, and ready (with their rate tokens). */
  get waiting(): number {
    return this.queued + this.ready.length;
  }

  /** What this lane holds now (tasks waiting, and requests on the wire); 0 = idle. */
  get size(): number {
    return this.waiting + this.rating + this.active;
  }

  /** Adds a task to its endpoint's open batch (opening one); the caller closes it when full. */
  addToBatch(h: Held, bytes: number, lingerMs: number): OpenBatch {
    const id = h.task.endpointId;
    let b = this.batches.get(id);
    if (!b) {
      b = { items: [], sizes: [], bytes: 0, lingerMs, timer: undefined };
      this.batches.set(id, b);
    }
    b.items.push(h);
    b.sizes.push(bytes);
    b.bytes += bytes;
    this.#batched++;
    return b;
  }

  /** The endpoint's open batch goes to `due` (it waits for a slot there); no-op without one. */
  closeBatch(endpointId: string): void {
    const b = this.batches.get(endpointId);
    if (!b) return;
    if (b.timer) clearTimeout(b.timer);
    this.batches.delete(endpointId);
    if (b.items.length > 0) this.due.push(b.items);
  }

  /** The next closed batch, its tasks no longer counted as waiting. */
  takeDue(): Held[] | undefined {
    const items = this.due.shift();
    if (items) this.#batched -= items.length;
    return items;
  }

  /**
   * Removes and returns every waiting task (queue, ready, batches) for which `pick` is true:
   * what leaves on a pause, a disable, a stall or a shutdown. Requests on the wire stay.
   */
  takeWaiting(pick: (h: Held) => boolean): Held[] {
    const out = [...this.ready.take(pick), ...this.queue.take(pick)];
    for (const [id, b] of this.batches) {
      const items: Held[] = [];
      const sizes: number[] = [];
      b.items.forEach((h, i) => {
        if (pick(h)) out.push(h);
        else {
          items.push(h);
          sizes.push(b.sizes[i]!);
        }
      });
      this.#batched -= b.items.length - items.length;
      b.items = items;
      b.sizes = sizes;
      b.bytes = sizes.reduce((n, x) => n + x, 0);
      if (items.length === 0) {
        if (b.timer) clearTimeout(b.timer);
        this.batches.delete(id);
      }
    }
    for (let i = this.due.length - 1; i >= 0; i--) {
      const items = this.due[i]!.filter((h) => !pick(h));
      const gone = this.due[i]!.length - items.length;
      if (gone === 0) continue;
      for (const h of this.due[i]!) if (pick(h)) out.push(h);
      this.#batched -= gone;
      if (items.length === 0) this.due.splice(i, 1);
      else this.due[i] = items;
    }
    return out;
  }

  /** How many tasks may wait for a slot: about LOOKAHEAD_S of the measured rate, at least `concurrency`. */
  lookahead(concurrency: number, maxInFlight: number): number {
    const byRate = this.#measured ? Math.ceil(this.rate * LOOKAHEAD_S) : concurrency * 4;
    return Math.max(1, Math.min(maxInFlight, Math.max(concurrency, byRate)));
  }

  /**
   * Tasks this lane holds beyond about JOB_LOOKAHEAD_S of its measured rate (0 until it has one): what
   * it keeps only through its credits and job share (takesJobTask), which the worker's claim leaves
   * out (Engine#fits). Until its rate is measured a lane counts in full, so a preload's first jobs
   * still wait for the claim.
   */
  surplus(concurrency: number, maxInFlight: number): number {
    if (!this.#measured) return 0;
    return Math.max(0, this.size - Math.ceil(this.#jobLookahead(concurrency, maxInFlight)));
  }

  /** Tasks this lane delivers within about JOB_LOOKAHEAD_S: what it takes from any job. */
  #jobLookahead(concurrency: number, maxInFlight: number): number {
    return (this.lookahead(concurrency, maxInFlight) * JOB_LOOKAHEAD_S) / LOOKAHEAD_S;
  }

  /** Whether the drainer may bring one more task into the queue. */
  room(concurrency: number, maxInFlight: number): boolean {
    return this.queued < this.lookahead(concurrency, maxInFlight);
  }

  /**
   * Whether a job's task may join the queue, pinning its job (false: it goes to the spill log).
   * Within JOB_LOOKAHEAD_S of its rate the lane takes it whatever jobs it comes from: it will be
   * delivered about that soon, so the job slots it pins come back about that soon. Past that, the
   * lane keeps at most `share` jobs active, so a slow tenant can never pin the worker's job slots.
   */
  takesJobTask(owner: Owner, concurrency: number, maxInFlight: number, share: number): boolean {
    const soon = this.queued < this.#jobLookahead(concurrency, maxInFlight);
    return this.pin(owner, soon ? Number.POSITIVE_INFINITY : share);
  }

  /**
   * Counts a job's task into the lane; false when that job would be one more than `share` jobs
   * this lane keeps active (the task must go elsewhere: the job is not pinned by it).
   */
  pin(owner: Owner, share: number): boolean {
    if (!(owner as JobOwner).pinsSlot) return true;
    const n = this.#pins.get(owner);
    if (n === undefined && this.#pins.size >= share) return false;
    this.#pins.set(owner, (n ?? 0) + 1);
    return true;
  }

  unpin(owner: Owner): void {
    const n = this.#pins.get(owner);
    if (n === undefined) return;
    if (n <= 1) this.#pins.delete(owner);
    else this.#pins.set(owner, n - 1);
  }

  /** Jobs this lane keeps active now. */
  get pinned(): number {
    return this.#pins.size;
  }

  /** EWMA of how long a delivered attempt took here (ms); 0 until one was. */
  latency = 0;

  /**
   * An attempt of `tasks` tasks (a batch carries several) ended; `tookMs` is given for delivered
   * ones (they set the stall threshold). The rate counts tasks.
   */
  completed(now: number, tookMs?: number, tasks = 1): void {
    this.#done += tasks;
    this.lastProgress = now;
    if (tookMs !== undefined) this.latency = this.latency === 0 ? tookMs : this.latency * 0.8 + tookMs * 0.2;
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

  /**
   * Something is on the wire and nothing completed for STALL_MS — or for four of this lane's usual
   * delivery times, when those are longer (a slow but answering receiver, or a busy process, is
   * not a stalled one). Timeouts never lengthen it: only delivered attempts count.
   */
  stalled(now: number): boolean {
    return this.active > 0 && now - this.lastProgress > Math.max(STALL_MS, 4 * this.latency);
  }
}
