/**
 * The process-wide budget of request-body bytes held in memory at once (DESIGN invariant 4). Bodies
 * must be held whole until the intake made them durable, so the only way to keep ingest memory
 * bounded under a flood of large bodies is to refuse new ones (503 + Retry-After) once the budget is
 * spent, rather than let the heap grow until the process is killed.
 */
export class BodyBudget {
  readonly limit: number;
  #used = 0;
  readonly #onChange: ((delta: number) => void) | undefined;

  /** `onChange` hears every change as a delta (a gauge shared by several budgets adds them up). */
  constructor(limitBytes: number, onChange?: (delta: number) => void) {
    if (!Number.isSafeInteger(limitBytes) || limitBytes <= 0)
      throw new RangeError(`body budget must be a positive integer (got ${limitBytes})`);
    this.limit = limitBytes;
    this.#onChange = onChange;
  }

  get used(): number {
    return this.#used;
  }

  /** Takes `bytes` if they fit; never partially. */
  tryReserve(bytes: number): boolean {
    if (bytes <= 0) return true;
    if (this.#used + bytes > this.limit) return false;
    this.#used += bytes;
    this.#onChange?.(bytes);
    return true;
  }

  release(bytes: number): void {
    if (bytes <= 0) return;
    const released = Math.min(bytes, this.#used);
    this.#used -= released;
    this.#onChange?.(-released);
  }
}
