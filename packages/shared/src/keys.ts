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
  /**
   * A key of the intake queue (BullMQ's meta hash): a pipeline carrying it goes to the queue's node
   * on a Redis Cluster, so a keyless command in it (INFO) is asked of that node. (A commit's WAIT
   * rides its own job's key instead: packages/router/src/intake/intake.ts.)
   */
  readonly intakeQueueKey: string;
  /** Kafka consumer group of the spill drainer. */
  readonly drainGroup: string;
  /**
   * ZSET tenantId → when Kafka last acknowledged a spill record of it (ms): the drainer's "who else
   * is behind this look-ahead" (packages/router/src/spill/activity.ts). Trimmed to a day by the
   * spill producer; expires a day after the last spill.
   */
  readonly spillActivity: string;

  tenant(tenantId: string): string;
  endpoints(tenantId: string): string;
  /**
   * STRING: the revision of a tenant's fan-out config (the tenant and its endpoints), a random token
   * set after every write of either. The intake reads it with the dedup reserve and stamps it on the
   * job; a worker whose view carries the same token fans out on that view without reading the
   * config again (docs/architecture.md, "Config revisions"). Owner: the tenant (deleted with it).
   */
  configRev(tenantId: string): string;
  /** LIST of DlqItem JSON, oldest first; capped (SPILLWAY_DLQ_CAP) and aged (SPILLWAY_DLQ_TTL) by archiving to Kafka. */
  dlq(tenantId: string): string;
  /** Lock of the one process archiving a tenant's DLQ overflow at a time. */
  dlqArchiving(tenantId: string): string;
  rate(tenantId: string, name: string): string;
  tenantKeys(tenantId: string): string;
  tenantCounters(tenantId: string): string;
  /** STRING: events the events API accepted for the tenant on one UTC day (`YYYYMMDD`); expires after the next day. */
  eventQuota(tenantId: string, day: string): string;
  /**
   * Base of the tenant's dedup fingerprints (docs/storage.md): `<base>:<slot>:<epoch>:<bucket>`
   * strings of 8-byte fingerprints, `<base>:<slot>:m` their slot's epoch hash, `<base>:<slot>:f` its
   * epoch filter, `<base>:w:<n>` and `<base>:w` the window masks, and `<base>:p:<hex>` the
   * short-lived pending marker of one id being accepted.
   */
  dedupBase(tenantId: string): string;
  /** Base of the tenant's event-id index over the event log: the same layout, 3-byte entries. */
  eventIdIndex(tenantId: string): string;
  /**
   * Base of a history topic's minute index: HASHes `<base>:<hour>`, field `<minute>:<partition>` →
   * `first:last:count` offsets of the tenant's records in that minute.
   */
  historyMinutes(tenantId: string, kind: 'events' | 'attempts' | 'dlq'): string;
  /** ZSET of an endpoint's failed attempts (member: the attempt in short form, score: its time). */
  failedAttempts(tenantId: string, endpointId: string): string;
  /** ZSET of an endpoint's delivered attempts that came after a failure, by a resend, or late (after a pause). */
  laterAttempts(tenantId: string, endpointId: string): string;
  /** HASH endpointId → when its current run of failed attempts began (ms); a delivery deletes it. */
  endpointHealth(tenantId: string): string;
  /** Marker that an operator notification about `subject` went out (expires after an hour). */
  notified(tenantId: string, kind: string, subject: string): string;
  /**
   * ZSET of the tenant's deliveries that failed for good (member `<eventId> <endpointId>`, score:
   * when); a later attempt that answers (a retry, resend or recover) removes it.
   */
  failedEvents(tenantId: string): string;
  /**
   * Base of the tenant's resend and recover operations: `<base>:<requestId>` STRING the operation
   * JSON (idempotency: SET NX), `<base>:<requestId>:n` HASH its delivered/failed counts; both
   * expire a day after the operation started.
   */
  operations(tenantId: string): string;
  /**
   * Per-key ordering (the router's ordering/ store): per keyed event a STRING, its sequence
   * number; per (tenant, orderingKey) a HASH of the
   * sequence counter, the fanned-out watermark and fanned-out sequence numbers above it; a ZSET
   * of endpoints waiting for that watermark; per (tenant, endpoint, key) a HASH (last finished
   * sequence number, the lease, the tasks by sequence number) and a ZSET of pending sequence
   * numbers; per tenant a ZSET of (endpoint, key) pairs by when to look at them next.
   */
  orderEvent(tenantId: string, eventId: string): string;
  orderKey(tenantId: string, key: string): string;
  orderWaiting(tenantId: string, key: string): string;
  orderEndpoint(tenantId: string, endpointId: string, key: string): string;
  orderPending(tenantId: string, endpointId: string, key: string): string;
  orderDue(tenantId: string): string;
  /** ZSET tenant id → when a worker should next look at its ordered keys (global: found from nothing). */
  readonly orderedTenants: string;
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
    intakeQueueKey: `{${prefix}}:intake:meta`,
    retryQueue: 'retry',
    drainGroup: `${prefix}-drain`,
    spillActivity: `${prefix}:spill-activity`,
    tenant: (tenantId: string) => `${t(tenantId)}:tenant`,
    endpoints: (tenantId: string) => `${t(tenantId)}:endpoints`,
    configRev: (tenantId: string) => `${t(tenantId)}:rev`,
    dlq: (tenantId: string) => `${t(tenantId)}:dlq`,
    dlqArchiving: (tenantId: string) => `${t(tenantId)}:dlq:archiving`,
    rate: (tenantId: string, name: string) => `${t(tenantId)}:rate:${name}`,
    tenantKeys: (tenantId: string) => `${t(tenantId)}:keys`,
    tenantCounters: (tenantId: string) => `${t(tenantId)}:counters`,
    dedupBase: (tenantId: string) => `${t(tenantId)}:dd`,
    eventIdIndex: (tenantId: string) => `${t(tenantId)}:ix`,
    historyMinutes: (tenantId: string, kind: 'events' | 'attempts' | 'dlq') =>
      `${t(tenantId)}:${kind === 'events' ? 'el' : kind === 'attempts' ? 'al' : 'ql'}`,
    failedAttempts: (tenantId: string, endpointId: string) => `${t(tenantId)}:fa:${endpointId}`,
    laterAttempts: (tenantId: string, endpointId: string) => `${t(tenantId)}:la:${endpointId}`,
    failedEvents: (tenantId: string) => `${t(tenantId)}:fe`,
    endpointHealth: (tenantId: string) => `${t(tenantId)}:health`,
    notified: (tenantId: string, kind: string, subject: string) =>
      `${t(tenantId)}:notified:${kind}:${subject}`,
    operations: (tenantId: string) => `${t(tenantId)}:op`,
    eventQuota: (tenantId: string, day: string) => `${t(tenantId)}:quota:${day}`,
    apiKeys: `${prefix}:apikeys`,
    orderEvent: (tenantId: string, eventId: string) => `${t(tenantId)}:oev:${eventId}`,
    orderKey: (tenantId: string, key: string) => `${t(tenantId)}:ok:${key}`,
    orderWaiting: (tenantId: string, key: string) => `${t(tenantId)}:okw:${key}`,
    orderEndpoint: (tenantId: string, endpointId: string, key: string) =>
      `${t(tenantId)}:oe:${endpointId}:${key}`,
    orderPending: (tenantId: string, endpointId: string, key: string) =>
      `${t(tenantId)}:oq:${endpointId}:${key}`,
    orderDue: (tenantId: string) => `${t(tenantId)}:odue`,
    orderedTenants: `${prefix}:otenants`,
  });
}
