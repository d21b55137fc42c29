/**
 * The process-wide budget of request-body bytes held in memory at once (invariant 4, bounded
 * memory: docs/architecture.md). Bodies must be held whole until the intake made them durable, so
 * the only way to keep ingest memory bounded under a flood of large bodies is to refuse new ones
 * (503 + Retry-After) once the budget is spent, rather than let the heap grow until the process is
 * killed.
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

/**
 * Shares of one BodyBudget (issue 15): a request's bytes are taken from the process budget, from its
 * source's share and from its client address's share, all or nothing, so that no single source or
 * client can hold the whole budget and make ingest refuse everyone else. Addresses are keyed as
 * given (IPv4) or by their /64 (IPv6: one client commonly holds a whole /64).
 */
export class SharedBodyBudget {
  readonly budget: BodyBudget;
  readonly sourceShare: number;
  readonly clientShare: number;
  readonly #bySource = new Map<string, number>();
  readonly #byClient = new Map<string, number>();

  constructor(budget: BodyBudget, sourceShare: number, clientShare: number) {
    for (const [name, v] of [
      ['source share', sourceShare],
      ['client share', clientShare],
    ] as const)
      if (!Number.isSafeInteger(v) || v <= 0)
        throw new RangeError(`body budget ${name} must be a positive integer (got ${v})`);
    this.budget = budget;
    this.sourceShare = sourceShare;
    this.clientShare = clientShare;
  }

  /** Bytes held now by one source / one client key (tests and metrics). */
  heldBySource(source: string): number {
    return this.#bySource.get(source) ?? 0;
  }
  heldByClient(client: string): number {
    return this.#byClient.get(client) ?? 0;
  }

  /** Takes `bytes` for (source, client) if all three fit; never partially. */
  tryReserve(source: string, client: string, bytes: number): boolean {
    if (bytes <= 0) return true;
    const s = this.#bySource.get(source) ?? 0;
    const c = this.#byClient.get(client) ?? 0;
    if (s + bytes > this.sourceShare || c + bytes > this.clientShare) return false;
    if (!this.budget.tryReserve(bytes)) return false;
    this.#bySource.set(source, s + bytes);
    this.#byClient.set(client, c + bytes);
    return true;
  }

  release(source: string, client: string, bytes: number): void {
    if (bytes <= 0) return;
    this.budget.release(bytes);
    const s = (this.#bySource.get(source) ?? 0) - bytes;
    if (s > 0) this.#bySource.set(source, s);
    else this.#bySource.delete(source);
    const c = (this.#byClient.get(client) ?? 0) - bytes;
    if (c > 0) this.#byClient.set(client, c);
    else this.#byClient.delete(client);
  }
}
