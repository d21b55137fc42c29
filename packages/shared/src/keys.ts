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

  tenant(tenantId: string): string;
  endpoints(tenantId: string): string;
  dedup(tenantId: string, eventId: string): string;
  event(tenantId: string, eventId: string): string;
  dlq(tenantId: string): string;
  rate(tenantId: string, name: string): string;
  tenantKeys(tenantId: string): string;
  tenantCounters(tenantId: string): string;
  /**
   * HASH sha256(api key) hex → `{"tenantId","id"}`: looks a presented tenant API key up without
   * knowing its tenant. Global (not hash-tagged) because the lookup starts from the key alone.
   */
  readonly apiKeys: string;
}

export function tenantTag(tenantId: string): string {
  return `{t:${tenantId}}`;
}

export function createKeys(prefix: string): Keys {
  const t = (tenantId: string) => `${prefix}:${tenantTag(tenantId)}`;
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
    tenant: (tenantId: string) => `${t(tenantId)}:tenant`,
    endpoints: (tenantId: string) => `${t(tenantId)}:endpoints`,
    dedup: (tenantId: string, eventId: string) => `${t(tenantId)}:dedup:${eventId}`,
    event: (tenantId: string, eventId: string) => `${t(tenantId)}:ev:${eventId}`,
    dlq: (tenantId: string) => `${t(tenantId)}:dlq`,
    rate: (tenantId: string, name: string) => `${t(tenantId)}:rate:${name}`,
    tenantKeys: (tenantId: string) => `${t(tenantId)}:keys`,
    tenantCounters: (tenantId: string) => `${t(tenantId)}:counters`,
    apiKeys: `${prefix}:apikeys`,
  });
}
