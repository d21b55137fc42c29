import type { Keys, RedisClient, Tenant } from '@spillway/shared';
import { tenantTag } from '@spillway/shared';
import { firstError, pipelineByTag } from '../../records/pipeline.ts';
import { readWorkerStats } from '../../records/stats.ts';
import { addWorkerLoad, worseBreaker } from '../router-services.ts';
import type { EndpointStats, RouterServices, TenantStats } from '../services.ts';
import type { Latency, LatencyTracker } from './latency.ts';

/** One overview row: what GET /v1/tenants/:tid/stats says, without the per-endpoint list. */
export interface TenantRow extends Omit<TenantStats, 'endpoints' | 'workers'> {
  id: string;
  /** Per second since the previous snapshot of this stream; null in the first one. */
  deliveredRate: number | null;
  failedRate: number | null;
  /** The worst breaker state any worker reports for any endpoint of the tenant. */
  breaker: EndpointStats['breaker'];
  endpoints: number;
}

export interface OverviewSnapshot {
  at: number;
  tenants: TenantRow[];
}

export interface TenantSnapshot extends TenantStats {
  id: string;
  at: number;
  deliveredRate: number | null;
  failedRate: number | null;
  /** Delivery latency of the attempts logged since the previous snapshot; null when none (or unknown). */
  latency: Latency | null;
  endpoints: (TenantStats['endpoints'][number] & {
    deliveredRate: number | null;
    failedRate: number | null;
  })[];
}

const rate = (now: number, prev: number | undefined, dtMs: number) =>
  prev === undefined || dtMs <= 0 ? null : Math.max(0, ((now - prev) * 1000) / dtMs);

/**
 * Every tenant's numbers in a fixed number of round trips, whatever the tenant count: the tenant
 * set, the live workers' published stats, then ONE pipeline (per cluster slot) with three commands
 * per tenant (record, shared counters, DLQ length). This is what the console's overview stream
 * sends once a second to every open console — one computation per tick however many are open.
 */
export async function readOverview(redis: RedisClient, keys: Keys): Promise<Omit<OverviewSnapshot, 'at'>> {
  const [ids, workers] = await Promise.all([redis.smembers(keys.tenants), readWorkerStats(redis, keys)]);
  ids.sort();
  const res = await pipelineByTag(redis, ids, tenantTag, (pipe, tid) => {
    pipe.get(keys.tenant(tid));
    pipe.hgetall(keys.tenantCounters(tid));
    pipe.llen(keys.dlq(tid));
  });
  const err = firstError(res);
  if (err) throw err;
  const tenants: TenantRow[] = [];
  ids.forEach((tid, i) => {
    const [[, rawTenant], [, counters], [, dlq]] = res[i] as [
      [null, string | null],
      [null, Record<string, string>],
      [null, number],
    ];
    if (!rawTenant) return; // deleted between SMEMBERS and the pipeline
    const t = JSON.parse(rawTenant) as Tenant;
    const num = (k: string) => Number(counters[k] ?? 0) || 0;
    const row: TenantRow = {
      id: tid,
      status: t.status,
      credits: { used: 0, limit: t.limits.maxInFlight },
      queued: 0,
      inFlight: 0,
      // Same sources as tenantStats(): the shared gauges are clamped at 0 (see counters.ts).
      spilled: Math.max(0, num('spilled')),
      retrying: Math.max(0, num('retrying')),
      dlq,
      delivered: num('delivered'),
      failed: num('failed'),
      deliveredRate: null,
      failedRate: null,
      breaker: 'closed',
      endpoints: 0,
    };
    const seen = new Set<string>();
    for (const { t } of addWorkerLoad(row, workers, tid))
      for (const [eid, e] of Object.entries(t.endpoints)) {
        seen.add(eid);
        row.breaker = worseBreaker(row.breaker, e.breaker);
      }
    row.endpoints = seen.size;
    tenants.push(row);
  });
  return { tenants };
}

/** Adds per-second rates to successive snapshots of one stream topic. */
export class RateTracker {
  #prevAt = 0;
  #prev = new Map<string, { delivered: number; failed: number }>();

  /** Returns rates for `key` against the previous call's totals, and remembers these. */
  rates(
    at: number,
    key: string,
    totals: { delivered: number; failed: number },
  ): { deliveredRate: number | null; failedRate: number | null } {
    const p = this.#prev.get(key);
    const dt = at - this.#prevAt;
    this.#prev.set(key, totals);
    return {
      deliveredRate: rate(totals.delivered, p?.delivered, dt),
      failedRate: rate(totals.failed, p?.failed, dt),
    };
  }

  /** Call after a snapshot's keys are all done; drops keys not seen in it. */
  tick(at: number, seen: Iterable<string>): void {
    this.#prevAt = at;
    const keep = new Set(seen);
    for (const k of this.#prev.keys()) if (!keep.has(k)) this.#prev.delete(k);
  }
}

export async function overviewWithRates(
  redis: RedisClient,
  keys: Keys,
  rates: RateTracker,
): Promise<OverviewSnapshot> {
  const { tenants } = await readOverview(redis, keys);
  const at = Date.now();
  for (const row of tenants) Object.assign(row, rates.rates(at, row.id, row));
  rates.tick(
    at,
    tenants.map((t) => t.id),
  );
  return { at, tenants };
}

export async function tenantWithRates(
  services: RouterServices,
  tid: string,
  rates: RateTracker,
  latency?: LatencyTracker,
): Promise<TenantSnapshot> {
  const [stats, lat] = await Promise.all([
    services.tenantStats(tid),
    // The history is an extra: when Kafka cannot be read, the numbers still come, without latency.
    latency ? latency.next().catch(() => null) : null,
  ]);
  const at = Date.now();
  const endpoints = stats.endpoints.map((e) => ({ ...e, ...rates.rates(at, `ep:${e.id}`, e) }));
  const snap: TenantSnapshot = {
    ...stats,
    id: tid,
    at,
    ...rates.rates(at, '', stats),
    latency: lat,
    endpoints,
  };
  rates.tick(at, ['', ...stats.endpoints.map((e) => `ep:${e.id}`)]);
  return snap;
}
