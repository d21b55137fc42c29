import { type Keys, type Logger, type RedisClient, tenantTag } from '@spillway/shared';
import { firstError, pipelineByTag } from './pipeline.ts';

/**
 * Per-tenant counters shared by all workers, in the hash `keys.tenantCounters(tid)`:
 *   spilled                 tasks whose current owner is a Kafka spill record (the backlog in Kafka)
 *   retrying                tasks whose current owner is a retry job (waiting for their next attempt)
 *   delivered, failed       totals (failed = dead-lettered), surviving worker restarts
 *   ep:<eid>:delivered|failed  the same per endpoint
 *
 * `spilled`/`retrying` go up when the hand-off is acknowledged (Kafka ack, job added) and down when
 * that holder lets go of the task (the drainer admitted, dropped or re-appended the record; the
 * retry job finished). They are approximate across crashes: a record or job that is redone after a
 * kill -9 is counted down twice, and deltas not yet flushed when a process dies are lost — readers
 * clamp at 0. They are not owners of anything: writes are batched, best-effort.
 */
export type CounterField = 'spilled' | 'retrying' | 'delivered' | 'failed';

const FLUSH_MS = 250;

export class TenantCounters {
  readonly #redis: RedisClient;
  readonly #keys: Keys;
  readonly #logger: Logger;
  /** tenant → field → delta not yet in Redis. */
  #pending = new Map<string, Map<string, number>>();
  #timer: NodeJS.Timeout | undefined;
  #flushing: Promise<void> = Promise.resolve();

  constructor(redis: RedisClient, keys: Keys, logger: Logger) {
    this.#redis = redis;
    this.#keys = keys;
    this.#logger = logger;
  }

  #pendingOf(tid: string): Map<string, number> {
    let m = this.#pending.get(tid);
    if (!m) {
      m = new Map();
      this.#pending.set(tid, m);
    }
    return m;
  }

  add(tid: string, field: CounterField, n = 1, endpointId?: string): void {
    if (n === 0) return;
    const m = this.#pendingOf(tid);
    m.set(field, (m.get(field) ?? 0) + n);
    if (endpointId !== undefined) {
      const f = `ep:${endpointId}:${field}`;
      m.set(f, (m.get(f) ?? 0) + n);
    }
    this.#timer ??= setTimeout(() => void this.flush(), FLUSH_MS);
  }

  /** Writes the pending deltas (HINCRBY per field). A failed write keeps them for the next flush. */
  flush(): Promise<void> {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    const batch = [...this.#pending.entries()].map(([tid, m]) => ({
      tid,
      fields: [...m.entries()].filter(([, n]) => n !== 0),
    }));
    this.#pending = new Map();
    if (batch.length === 0) return this.#flushing;
    const prev = this.#flushing;
    this.#flushing = (async () => {
      await prev;
      const res = await pipelineByTag(
        this.#redis,
        batch,
        (b) => tenantTag(b.tid),
        (pipe, b) => {
          for (const [f, n] of b.fields) pipe.hincrby(this.#keys.tenantCounters(b.tid), f, n);
        },
      );
      const err = firstError(res);
      if (!err) return;
      this.#logger.warn({ err: err.message }, 'tenant counter write failed; will retry');
      // Put back only the tenants whose writes failed (HINCRBY of the others landed).
      batch.forEach((b, i) => {
        res[i]!.forEach(([e], k) => {
          if (!e) return;
          const [f, n] = b.fields[k]!;
          const m = this.#pendingOf(b.tid);
          m.set(f, (m.get(f) ?? 0) + n);
        });
      });
      this.#timer ??= setTimeout(() => void this.flush(), 1000);
    })();
    return this.#flushing;
  }

  close(): Promise<void> {
    return this.flush();
  }
}

export interface TenantCounterValues {
  spilled: number;
  retrying: number;
  delivered: number;
  failed: number;
  endpoints: Record<string, { delivered: number; failed: number }>;
}

/** Reads a tenant's shared counters; the gauges (spilled, retrying) are clamped at 0 (see above). */
export async function readTenantCounters(
  redis: RedisClient,
  keys: Keys,
  tid: string,
): Promise<TenantCounterValues> {
  const all = await redis.hgetall(keys.tenantCounters(tid));
  const num = (k: string) => Number(all[k] ?? 0) || 0;
  const out: TenantCounterValues = {
    spilled: Math.max(0, num('spilled')),
    retrying: Math.max(0, num('retrying')),
    delivered: num('delivered'),
    failed: num('failed'),
    endpoints: {},
  };
  for (const k of Object.keys(all)) {
    const m = /^ep:(.+):(delivered|failed)$/.exec(k);
    if (!m) continue;
    out.endpoints[m[1]!] ??= { delivered: 0, failed: 0 };
    out.endpoints[m[1]!]![m[2] as 'delivered' | 'failed'] = num(k);
  }
  return out;
}
