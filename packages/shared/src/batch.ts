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
}

/**
 * The skeleton every batching writer shares (delivery records, tenant counters, retry jobs, spill
 * records): the owner buffers items in its own shape and calls `schedule()`; after `flushMs` (or on
 * `flush()`) the writer takes the buffer and writes it. `flush()` resolves when every write started
 * so far has ended, so `close()` is `flush()`.
 */
export class BatchedWriter<B> {
  readonly #o: BatchedWriterOptions<B>;
  #timer: NodeJS.Timeout | undefined;
  readonly #writing = new Set<Promise<void>>();
  /** The running write loop of a serial writer. */
  #pump: Promise<void> | undefined;

  constructor(opts: BatchedWriterOptions<B>) {
    this.#o = opts;
  }

  /** Arms the flush timer (no-op while it is armed); `ms` overrides flushMs, e.g. to retry later. */
  schedule(ms: number = this.#o.flushMs): void {
    this.#timer ??= setTimeout(() => void this.flush(), ms);
  }

  /** True while a write is running. */
  get busy(): boolean {
    return this.#pump !== undefined || this.#writing.size > 0;
  }

  /** Writes what is buffered now; resolves once every write started so far has ended. */
  flush(): Promise<void> {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#o.serial) this.#pump ??= this.#loop();
    else {
      const batch = this.#o.take();
      if (batch !== undefined) this.#track(this.#o.write(batch));
    }
    return this.idle();
  }

  /** Resolves once no write is running (writes started meanwhile included). */
  async idle(): Promise<void> {
    while (this.#writing.size > 0 || this.#pump) {
      await Promise.allSettled([...this.#writing, this.#pump]);
    }
  }

  async #loop(): Promise<void> {
    // Never finish synchronously: `#pump ??= this.#loop()` must be assigned before the finally
    // below clears it (else a finished loop would look busy forever).
    await undefined;
    try {
      for (let batch = this.#o.take(); batch !== undefined; batch = this.#o.take()) {
        await this.#o.write(batch);
      }
    } catch {
      // The owner logged it and decides when to try again.
    } finally {
      this.#pump = undefined;
    }
  }

  #track(p: Promise<void>): Promise<void> {
    const done = p.catch(() => {});
    this.#writing.add(done);
    void done.finally(() => this.#writing.delete(done));
    return done;
  }
}

/**
 * A BatchedWriter over a list of items: `add(item)` buffers it and arms the timer (or flushes at
 * once past `maxItems`); a serial writer that is busy leaves it to the running loop.
 */
export class ListWriter<T> extends BatchedWriter<T[]> {
  #items: T[] = [];
  readonly #maxItems: number;
  readonly #serial: boolean;

  constructor(opts: Omit<BatchedWriterOptions<T[]>, 'take'> & { maxItems?: number }) {
    super({ ...opts, take: () => this.#takeAll() });
    this.#maxItems = opts.maxItems ?? Number.POSITIVE_INFINITY;
    this.#serial = opts.serial ?? false;
  }

  add(item: T): void {
    this.#items.push(item);
    if (this.#serial && this.busy) return; // the running loop takes it with its next write
    if (this.#items.length >= this.#maxItems) void this.flush();
    else this.schedule();
  }

  #takeAll(): T[] | undefined {
    const items = this.#items;
    this.#items = [];
    return items.length > 0 ? items : undefined;
  }
}
