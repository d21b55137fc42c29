import { Agent, buildConnector } from 'undici';
import { assertLiteralAllowed, guardedLookup, type LookupFn } from './ssrf.ts';

/**
 * One undici Agent per tenant. A tenant's slow or hanging receivers can only exhaust that tenant's
 * sockets: the Agent bounds connections per origin and the number of origins, and nothing is shared
 * with other tenants. Every Agent connects through the SSRF-guarded connector.
 */

export interface PoolOptions {
  allowCidrs: readonly string[];
  /**
   * Sockets per origin per tenant, at most (default 64): a tenant gets as many as its concurrency
   * up to this, so the requests its concurrency allows are all on the wire. With 16 while tenants
   * of concurrency 64 were measured, 48 of their 64 open requests waited in undici's queue for a
   * socket, and a worker busy with other work left the receiver idle (docs/benchmarks/profile.md).
   */
  connectionsPerOrigin?: number;
  /** Distinct origins one tenant may hold sockets to at once. */
  maxOrigins?: number;
  /** Connect timeout (TCP + TLS). */
  connectTimeoutMs?: number;
  /** Replaces dns.lookup (tests point names at refused addresses without touching real DNS). */
  lookup?: LookupFn;
}

export class TenantPools {
  readonly #agents = new Map<string, Agent>();
  readonly #opts: Required<Omit<PoolOptions, 'lookup'>> & { lookup?: LookupFn };
  readonly #connect: buildConnector.connector;

  constructor(opts: PoolOptions) {
    this.#opts = { connectionsPerOrigin: 64, maxOrigins: 256, connectTimeoutMs: 10_000, ...opts };
    const allow = [...opts.allowCidrs];
    const base = buildConnector({
      timeout: this.#opts.connectTimeoutMs,
      // net.connect / tls.connect take `lookup`: the socket connects to the address it returns,
      // which is the address that was checked.
      lookup: guardedLookup(allow, opts.lookup),
    } as buildConnector.BuildOptions);
    this.#connect = (options, callback) => {
      try {
        assertLiteralAllowed(options.hostname, allow);
      } catch (err) {
        callback(err as Error, null);
        return;
      }
      base(options, callback);
    };
  }

  /** The tenant's Agent, created on first use. `connections` is at most the tenant's concurrency. */
  agent(tenantId: string, concurrency: number): Agent {
    let a = this.#agents.get(tenantId);
    if (!a) {
      a = new Agent({
        connect: this.#connect,
        connections: Math.max(1, Math.min(concurrency, this.#opts.connectionsPerOrigin)),
        maxOrigins: this.#opts.maxOrigins,
        keepAliveTimeout: 4_000,
        keepAliveMaxTimeout: 30_000,
        // Small: a receiver's answer is read only to free the socket, never stored.
        maxResponseSize: 1 << 20,
      });
      this.#agents.set(tenantId, a);
    }
    return a;
  }

  /** Drops a tenant's Agent (tenant deleted); in-flight requests are aborted. */
  async drop(tenantId: string): Promise<void> {
    const a = this.#agents.get(tenantId);
    if (!a) return;
    this.#agents.delete(tenantId);
    await a.destroy().catch(() => {});
  }

  async close(): Promise<void> {
    const all = [...this.#agents.values()];
    this.#agents.clear();
    await Promise.all(all.map((a) => a.destroy().catch(() => {})));
  }
}
