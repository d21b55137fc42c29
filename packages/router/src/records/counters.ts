import { BatchedWriter, type Keys, type Logger, type RedisClient, tenantTag } from '@spillway/shared';
import { firstError, pipelineByTag } from './pipeline.ts';

/**
 * Per-tenant counters shared by all workers, in the hash `keys.tenantCounters(tenantId)`:
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
/** After a failed write, the deltas put back are tried again this much later. */
const RETRY_MS = 1000;

type Batch = { tenantId: string; fields: [string, number][] }[];

export class TenantCounters {
  readonly #redis: RedisClient;
  readonly #keys: Keys;
  readonly #logger: Logger;
  /**
   * tenant → field → delta not yet in Redis (`fields`), and per endpoint (`eps`, written as
   * `ep:<eid>:<field>`). Kept by endpoint id rather than by the joined field name: a delivery adds
   * one, and a name built per add was a new string to hash every time.
   */
  #pending = new Map<string, { fields: Map<string, number>; eps: Map<string, Map<string, number>> }>();
  /** One write at a time: deltas summed while a write runs go in the next. */
  readonly #writer = new BatchedWriter<Batch>({
    flushMs: FLUSH_MS,
    serial: true,
    take: () => {
      const batch = [...this.#pending.entries()].map(([tenantId, p]) => {
        // Summed by name: a failed write's put-back deltas sit in `fields` under the joined name.
        const fields = p.fields;
        for (const [eid, m] of p.eps)
          for (const [f, n] of m) {
            const name = `ep:${eid}:${f}`;
            fields.set(name, (fields.get(name) ?? 0) + n);
          }
        return { tenantId, fields: [...fields].filter(([, n]) => n !== 0) };
      });
      this.#pending = new Map();
      return batch.length > 0 ? batch : undefined;
    },
    write: (batch) => this.#write(batch),
  });

  constructor(redis: RedisClient, keys: Keys, logger: Logger) {
    this.#redis = redis;
    this.#keys = keys;
    this.#logger = logger;
  }

  #pendingOf(tenantId: string) {
    let p = this.#pending.get(tenantId);
    if (!p) {
      p = { fields: new Map(), eps: new Map() };
      this.#pending.set(tenantId, p);
    }
    return p;
  }

  add(tenantId: string, field: CounterField, n = 1, endpointId?: string): void {
    if (n === 0) return;
    const p = this.#pendingOf(tenantId);
    p.fields.set(field, (p.fields.get(field) ?? 0) + n);
    if (endpointId !== undefined) {
      let m = p.eps.get(endpointId);
      if (!m) {
        m = new Map();
        p.eps.set(endpointId, m);
      }
      m.set(field, (m.get(field) ?? 0) + n);
    }
    this.#writer.schedule();
  }

  /** Writes the pending deltas (HINCRBY per field). A failed write keeps them for the next flush. */
  flush(): Promise<void> {
    return this.#writer.flush();
  }

  async #write(batch: Batch): Promise<void> {
    const res = await pipelineByTag(
      this.#redis,
      batch,
      (b) => tenantTag(b.tenantId),
      (pipe, b) => {
        for (const [f, n] of b.fields) pipe.hincrby(this.#keys.tenantCounters(b.tenantId), f, n);
      },
    );
    const err = firstError(res);
    if (!err) return;
    this.#logger.warn({ err }, 'tenant counter write failed; will retry');
    // Put back only the tenants whose writes failed (HINCRBY of the others landed).
    batch.forEach((b, i) => {
      res[i]!.forEach(([e], k) => {
        if (!e) return;
        const [f, n] = b.fields[k]!;
        const { fields } = this.#pendingOf(b.tenantId);
        fields.set(f, (fields.get(f) ?? 0) + n);
      });
    });
    this.#writer.schedule(RETRY_MS);
    // Stops the serial loop: the put-back deltas wait for RETRY_MS instead of being retried at once.
    throw err;
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
  tenantId: string,
): Promise<TenantCounterValues> {
  const all = await redis.hgetall(keys.tenantCounters(tenantId));
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
