/**
 * Per-tenant credits of one worker. A credit is taken when a delivery task enters this worker's
 * memory and given back only when the task has left it (delivered, dead-lettered, or handed to
 * another durable holder: a Kafka offset or a retry job). `limit` is the tenant's
 * `limits.maxInFlight`, read at take time so a PATCH applies to the next take.
 */
export class Credits {
  readonly #used = new Map<string, number>();
  readonly #waiters = new Set<() => void>();

  used(tenantId: string): number {
    return this.#used.get(tenantId) ?? 0;
  }

  /** Takes one credit if the tenant has one left. */
  tryTake(tenantId: string, limit: number): boolean {
    const used = this.used(tenantId);
    if (used >= limit) return false;
    this.#used.set(tenantId, used + 1);
    return true;
  }

  release(tenantId: string): void {
    const used = this.used(tenantId);
    if (used <= 0) throw new Error(`credit released twice for tenant ${tenantId}`);
    if (used === 1) this.#used.delete(tenantId);
    else this.#used.set(tenantId, used - 1);
    // The drainer waits for credits to free up; wake it on every release.
    for (const w of [...this.#waiters]) w();
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
