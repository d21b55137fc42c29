/**
 * Per-tenant credits of one worker. A credit is taken when a delivery task enters this worker's
 * memory and given back only when the task has left it (delivered, dead-lettered, or handed to
 * another durable holder: a Kafka offset or a retry job). `limit` is the tenant's
 * `limits.maxInFlight`, read at take time so a PATCH applies to the next take.
 *
 * Credits also keep the worker's body bytes under `bodyBudget` (invariant 4: whatever the tenants'
 * limits add up to). Tasks fanned out from one event share its body Buffer, so bytes are counted
 * once per body while any of its tasks is held. One body is always admitted when nothing is held,
 * so an event larger than the budget still moves: the bound is budget + one body.
 */
export class Credits {
  readonly #used = new Map<string, number>();
  readonly #waiters = new Set<() => void>();
  readonly #budget: number;
  /**
   * Held tasks per body. A Map, not a WeakMap: every take is released (the entry goes at zero), and
   * a WeakMap's entries are ephemerons that every garbage collection has to trace; its get/set was
   * ~2 % of a worker's samples at one endpoint per event (docs/benchmarks/profile.md).
   */
  readonly #refs = new Map<Buffer, number>();
  #bytes = 0;

  constructor(bodyBudget = Number.POSITIVE_INFINITY) {
    this.#budget = bodyBudget;
  }

  /** Body bytes held by admitted tasks now. */
  get bytes(): number {
    return this.#bytes;
  }

  used(tenantId: string): number {
    return this.#used.get(tenantId) ?? 0;
  }

  /** Takes one credit if the tenant has one left and the body fits the worker's budget. */
  tryTake(tenantId: string, limit: number, body?: Buffer): boolean {
    const used = this.used(tenantId);
    if (used >= limit) return false;
    if (body) {
      const refs = this.#refs.get(body) ?? 0;
      if (refs === 0) {
        if (this.#bytes > 0 && this.#bytes + body.length > this.#budget) return false;
        this.#bytes += body.length;
      }
      this.#refs.set(body, refs + 1);
    }
    this.#used.set(tenantId, used + 1);
    return true;
  }

  release(tenantId: string, body?: Buffer): void {
    const used = this.used(tenantId);
    if (used <= 0) throw new Error(`credit released twice for tenant ${tenantId}`);
    if (used === 1) this.#used.delete(tenantId);
    else this.#used.set(tenantId, used - 1);
    if (body) {
      const refs = this.#refs.get(body) ?? 0;
      if (refs <= 1) {
        this.#refs.delete(body);
        this.#bytes -= body.length;
      } else this.#refs.set(body, refs - 1);
    }
    // The drainer waits for credits to free up; wake it on every release.
    for (const w of this.#waiters) w();
  }

  /** Calls `fn` on every release until the returned function is called. */
  onRelease(fn: () => void): () => void {
    this.#waiters.add(fn);
    return () => this.#waiters.delete(fn);
  }

  /** Tenants currently holding credits (for stats). */
  entries(): [string, number][] {
    return [...this.#used.entries()];
  }
}
