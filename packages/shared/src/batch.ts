export interface BatchedWriterOptions<B> {
  /** How long the first buffered item waits for company before the batch is written. */
  flushMs: number;
  /** Takes everything buffered (emptying the buffer); undefined when there is nothing to write. */
  take: () => B | undefined;
  /**
   * Writes one batch. A rejection is not reported further (the owner logs it in `write`); a serial
   * writer then stops taking until the next `schedule()`/`flush()`, so an owner that puts a failed
   * batch back and schedules a later retry does not spin.
   */
  write: (batch: B) => Promise<void>;
  /**
   * One write at a time: what is buffered while a write runs goes in the next one, started as soon
   * as it ends (a producer with one request in flight). Default: writes may overlap.
   */
  serial?: boolean;
  /**
   * Serial only: at least this long from the start of one write to the start of the next, so a
   * busy writer sends fewer, larger batches instead of one per round trip (each write has a fixed
   * cost: a Kafka produce, a Redis pipeline, a rewrite of every index bucket it touches). `flush()`
   * does not wait for it. Default 0: the next write starts as soon as one ends.
   */
  spacingMs?: number;
}

/**
 * The skeleton every batching writer shares (delivery records, tenant counters, retry jobs, spill
 * records): the owner buffers items in its own shape and calls `schedule()`; after `flushMs` (or on
 * `flush()`) the writer takes the buffer and writes it. `flush()` resolves once what was buffered
 * when it was called has been written (or its write failed), so `close()` is `flush()`; it does not
 * wait for items that arrive later, so it ends under steady load too.
 */
export class BatchedWriter<B> {
  readonly #o: BatchedWriterOptions<B>;
  #timer: NodeJS.Timeout | undefined;
  /** Writes in flight (overlapping writers). */
  readonly #writing = new Set<Promise<void>>();
  /** The running write loop of a serial writer. */
  #pump: Promise<void> | undefined;
  /** Serial: flush() callers waiting for the next batch the loop takes to be written. */
  #waiters: (() => void)[] = [];
  /** Serial with spacingMs: ends the loop's pause between writes early (flush()). */
  #endPause: (() => void) | undefined;

  constructor(opts: BatchedWriterOptions<B>) {
    this.#o = opts;
  }

  /** Arms the flush timer (no-op while it is armed); `ms` overrides flushMs, e.g. to retry later. */
  schedule(ms: number = this.#o.flushMs): void {
    this.#timer ??= setTimeout(() => void this.flush(), ms);
  }

  /**
   * The owner buffered something: a serial writer that is busy leaves it to its running loop (the
   * next take holds it); otherwise the buffer is flushed at once when `full`, else the timer armed.
   */
  buffered(full: boolean): void {
    if (this.#o.serial && this.busy) return;
    if (full) void this.flush();
    else this.schedule();
  }

  /** True while a write is running. */
  get busy(): boolean {
    return this.#pump !== undefined || this.#writing.size > 0;
  }

  /** Writes what is buffered now; resolves once that (and every write already running) has ended. */
  flush(): Promise<void> {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#o.serial) {
      // The loop's next take holds everything buffered now; it resolves us after writing it.
      const written = new Promise<void>((resolve) => this.#waiters.push(resolve));
      this.#endPause?.();
      this.#pump ??= this.#loop();
      return written;
    }
    const batch = this.#o.take();
    if (batch !== undefined) this.#track(this.#o.write(batch));
    return Promise.allSettled([...this.#writing]).then(() => {});
  }

  async #loop(): Promise<void> {
    // Never finish synchronously: `#pump ??= this.#loop()` must be assigned before the finally
    // below clears it (else a finished loop would look busy forever).
    await undefined;
    try {
      for (;;) {
        const waiters = this.#waiters;
        this.#waiters = [];
        const batch = this.#o.take();
        if (batch === undefined) {
          for (const w of waiters) w();
          return;
        }
        const started = performance.now();
        try {
          await this.#o.write(batch);
        } finally {
          for (const w of waiters) w();
        }
        const left = started + (this.#o.spacingMs ?? 0) - performance.now();
        if (left > 0 && this.#waiters.length === 0) await this.#pause(left);
      }
    } catch {
      // The owner logged it and decides when to try again (schedule()).
    } finally {
      this.#pump = undefined;
      const waiters = this.#waiters;
      this.#waiters = [];
      for (const w of waiters) w();
    }
  }

  /** Waits `ms`, or less if flush() is called meanwhile; never keeps the process alive. */
  #pause(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const t = setTimeout(done, ms);
      t.unref();
      const self = this;
      function done() {
        clearTimeout(t);
        self.#endPause = undefined;
        resolve();
      }
      this.#endPause = done;
    });
  }

  #track(p: Promise<void>): void {
    const done = p.catch(() => {});
    this.#writing.add(done);
    void done.finally(() => this.#writing.delete(done));
  }
}

/**
 * A BatchedWriter over a list of items: `add(item)` buffers it and arms the timer (or flushes at
 * once past `maxItems`); a serial writer that is busy leaves it to the running loop.
 */
export class ListWriter<T> extends BatchedWriter<T[]> {
  #items: T[] = [];
  readonly #maxItems: number;

  constructor(opts: Omit<BatchedWriterOptions<T[]>, 'take'> & { maxItems?: number }) {
    super({ ...opts, take: () => this.#takeAll() });
    this.#maxItems = opts.maxItems ?? Number.POSITIVE_INFINITY;
  }

  add(item: T): void {
    this.#items.push(item);
    this.buffered(this.#items.length >= this.#maxItems);
  }

  #takeAll(): T[] | undefined {
    const items = this.#items;
    this.#items = [];
    return items.length > 0 ? items : undefined;
  }
}
