/**
 * Every Redis key, channel, BullMQ prefix and Kafka name Spillway uses is built here. Per-tenant
 * keys carry the hash tag `{t:<tenant>}` so that all of one tenant's keys live in one Redis Cluster
 * slot (Lua scripts may touch several of them); BullMQ's prefix is `{<prefix>}` for the same reason.
 */
export interface Keys {
  readonly prefix: string;
  /** Set of tenant ids. */
  readonly tenants: string;
  /** Hash sourceId → Source JSON (ingest looks sources up by id alone). */
  readonly sources: string;
  /** Pub/sub channel for config changes (tenant/endpoint/source updated, paused, resumed). */
  readonly changes: string;
  /** Sorted set of live workers (score = last heartbeat, ms). */
  readonly workers: string;
  workerStats(workerId: string): string;
  /** BullMQ prefix (hash-tagged). */
  readonly bullPrefix: string;
  /** BullMQ queue names. */
  readonly intakeQueue: string;
  readonly retryQueue: string;
  /** Kafka consumer group of the spill drainer. */
  readonly drainGroup: string;

  tenant(tid: string): string;
  endpoints(tid: string): string;
  dedup(tid: string, eventId: string): string;
  event(tid: string, eventId: string): string;
  dlq(tid: string): string;
  rate(tid: string, name: string): string;
  tenantKeys(tid: string): string;
  tenantCounters(tid: string): string;
  /**
   * HASH sha256(api key) hex → `{"tenantId","id"}`: looks a presented tenant API key up without
   * knowing its tenant. Global (not hash-tagged) because the lookup starts from the key alone.
   */
  readonly apiKeys: string;
}

export function tenantTag(tid: string): string {
  return `{t:${tid}}`;
}

export function createKeys(prefix: string): Keys {
  const t = (tid: string) => `${prefix}:${tenantTag(tid)}`;
  return Object.freeze({
    prefix,
    tenants: `${prefix}:tenants`,
    sources: `${prefix}:sources`,
    changes: `${prefix}:changes`,
    workers: `${prefix}:workers`,
    workerStats: (w: string) => `${prefix}:worker:${w}`,
    bullPrefix: `{${prefix}}`,
    intakeQueue: 'intake',
    retryQueue: 'retry',
    drainGroup: `${prefix}-drain`,
    tenant: (tid: string) => `${t(tid)}:tenant`,
    endpoints: (tid: string) => `${t(tid)}:endpoints`,
    dedup: (tid: string, eid: string) => `${t(tid)}:dedup:${eid}`,
    event: (tid: string, eid: string) => `${t(tid)}:ev:${eid}`,
    dlq: (tid: string) => `${t(tid)}:dlq`,
    rate: (tid: string, name: string) => `${t(tid)}:rate:${name}`,
    tenantKeys: (tid: string) => `${t(tid)}:keys`,
    tenantCounters: (tid: string) => `${t(tid)}:counters`,
    apiKeys: `${prefix}:apikeys`,
  });
}
