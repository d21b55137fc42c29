/** Shared data shapes. Stored as JSON in Redis and carried in BullMQ jobs and Kafka records. */

export interface Rate {
  /** Tokens added per second (fractions allowed). */
  perSecond: number;
  /** Bucket size: how many may go at once after a quiet period. */
  burst: number;
}

export interface TenantLimits {
  /** Credits: delivery tasks this tenant may hold in a worker's memory at once. */
  maxInFlight: number;
  /** Concurrent outbound requests per worker for this tenant. */
  concurrency: number;
  /** Absent = unlimited. */
  rate?: Rate;
  /** Events the events API accepts per UTC day. Absent = SPILLWAY_TENANT_EVENTS_PER_DAY. */
  eventsPerDay?: number;
  /** Rate of the events API for this tenant (429 past it). Absent = SPILLWAY_TENANT_EVENT_RATE. */
  eventRate?: Rate;
}

export type TenantStatus = 'active' | 'paused';

export interface Tenant {
  id: string;
  limits: TenantLimits;
  status: TenantStatus;
  createdAt: string;
  /**
   * This incarnation of the id: random, set when the tenant is created (ConfigStore). A tenant
   * deleted and created again under the same id is another tenant; see Endpoint.gen. Absent on
   * tenants created before incarnations existed.
   */
  gen?: string;
}

export type EndpointStatus = 'active' | 'paused' | 'disabled';

/**
 * An endpoint's own retry policy; each field absent = the installation's default
 * (SPILLWAY_RETRY_SCHEDULE, its length + 1 attempts, only 410 permanent).
 */
export interface RetryPolicy {
  /** Delays between attempts (`100ms`, `5s`, `30m`, `2h`). */
  schedule?: string[];
  /** Attempts in all before the DLQ. Past the end of the schedule its last delay repeats. */
  maxAttempts?: number;
  /** Answers that go to the DLQ at once instead of being retried (410 always does). */
  permanentStatuses?: number[];
}

/** Credentials sent in `authorization` with every delivery to the endpoint. */
export type EndpointAuth =
  | { type: 'basic'; username: string; password: string }
  | { type: 'bearer'; token: string };

/** Signature schemes of `webhook-signature`: `v1` HMAC-SHA256 (whsec_), `v1a` Ed25519 (whsk_/whpk_). */
export type SignatureScheme = 'v1' | 'v1a';

/** An endpoint's Ed25519 key pair (Standard Webhooks `v1a`). */
export interface Ed25519KeyPair {
  /** `whsk_` + base64 of the 32-byte seed followed by the 32-byte public key. Never leaves Spillway. */
  privateKey: string;
  /** `whpk_` + base64 of the 32-byte public key. */
  publicKey: string;
  createdAt: string;
}

/** Several events per request: sent when `maxEvents` or `maxBytes` is reached, or `lingerMs` after the first. */
export interface BatchPolicy {
  maxEvents: number;
  maxBytes: number;
  lingerMs: number;
}

/** `per-key`: events sharing an `orderingKey` are delivered one at a time, in acceptance order. */
export type OrderingMode = 'none' | 'per-key';

/** A replaced secret that still signs (endpoints) or verifies (sources) until `expiresAt`. */
export interface PreviousSecret {
  secret: string;
  /** ISO-8601. */
  expiresAt: string;
}

export interface Endpoint {
  id: string;
  tenantId: string;
  url: string;
  /** `*`, `order.*` or exact types. */
  eventTypes: string[];
  /** `whsec_` + base64 of >= 24 random bytes. */
  secret: string;
  /** Secrets still signing during a rotation overlap (both signatures are sent). */
  previousSecrets?: PreviousSecret[];
  rate?: Rate;
  timeoutMs: number;
  status: EndpointStatus;
  /** Why it was disabled (e.g. `gone` after a 410). */
  disabledReason?: string;
  /**
   * When it was disabled (ms since the epoch). Events accepted before it are still fanned out to it,
   * and their tasks go to the DLQ as `endpoint_disabled` (replayable once it is resumed); events
   * accepted after it are not for it.
   */
  disabledAt?: number;
  /** Absent = the installation's retry schedule. */
  retry?: RetryPolicy;
  /** Static headers sent with every delivery (names lower-case; reserved names refused by the admin API). */
  headers?: Record<string, string>;
  auth?: EndpointAuth;
  /** Schemes signed into `webhook-signature`, in this order. Absent = `["v1"]`. */
  signatures?: SignatureScheme[];
  /** Present once `v1a` was enabled (or a key was given). */
  ed25519?: Ed25519KeyPair;
  batch?: BatchPolicy;
  /** Absent = `none`. */
  ordering?: OrderingMode;
  createdAt: string;
  /**
   * This incarnation of the id: random, set when the endpoint is created (ConfigStore), never
   * changed by an update. Every task carries the gen of the endpoint it was made for, so a task
   * of an endpoint (or tenant) deleted and created again under the same id is discarded, not
   * delivered to the new owner. Absent on endpoints created before incarnations existed.
   */
  gen?: string;
}

export type SourceKind = 'github' | 'stripe' | 'shopify' | 'standard';

export interface Source {
  id: string;
  tenantId: string;
  kind: SourceKind;
  secret: string;
  /** Secrets still accepted during a rotation overlap: a signature by any of them verifies. */
  previousSecrets?: PreviousSecret[];
  allowCidrs?: string[];
  maxBodyBytes: number;
  /** Ingest rate for this source (429 + Retry-After past it). Absent = unlimited. */
  rate?: Rate;
  createdAt: string;
}

/** An accepted event as the router sees it: the raw bytes and what identifies them. */
export interface SpillwayEvent {
  tenantId: string;
  id: string;
  type: string;
  /** Unix milliseconds when it was accepted. */
  receivedAt: number;
  contentType: string;
  /** The exact bytes received (ingest) or the JSON payload (events API). */
  body: Buffer;
  sourceId?: string;
  /** Events sharing a key reach `ordering: "per-key"` endpoints one at a time, in acceptance order. */
  orderingKey?: string;
}

export type DeliveryStatus = 'pending' | 'delivered' | 'retrying' | 'failed';

/** What GET /v1/tenants/:tid/events/:eid shows per endpoint. */
export interface DeliveryRecord {
  endpointId: string;
  status: DeliveryStatus;
  attempts: number;
  lastStatus?: number;
  lastError?: string;
}

export interface DlqEntry {
  eventId: string;
  endpointId: string;
  attempts: number;
  lastError: string;
  failedAt: string;
}

/** The router's durable intake, as the ingest role and the events API see it. */
export interface Intake {
  /**
   * Resolves once the event is durable (or known as a duplicate within the dedup window).
   * Rejects with SPW_ERR_UNAVAILABLE (503 + Retry-After) when Redis cannot take it.
   *
   * `gate`: a decision the caller makes about an event that is not a duplicate (ingest: the
   * source's rate), asked once the intake has reserved its id, and never for a duplicate (so a
   * duplicate spends none of the rate). The event is committed only if the gate resolves true;
   * false (or a rejection) withdraws it: its id is released and the result says `withdrawn`.
   *
   * `dedupKey`: what the event is deduplicated on, when not its id (ingest: a GitHub or Shopify
   * body, whose id header the signature does not cover; docs/ingest.md, "Replays"). The result
   * still carries the event's id.
   */
  submit(
    event: SpillwayEvent,
    opts?: { gate?: () => Promise<boolean>; dedupKey?: string },
  ): Promise<SubmitResult>;
}

export interface SubmitResult {
  id: string;
  duplicate: boolean;
  /** The gate said no: nothing was written for this event. */
  withdrawn?: true;
}

/** Looks up sources for the ingest role (cached, invalidated on change). */
export interface SourceDirectory {
  get(sourceId: string): Promise<Source | undefined>;
}

/** Result of a non-blocking take from a rate limiter. */
export type TakeResult = { ok: true } | { ok: false; retryAfterMs: number };

/**
 * The Redis leased-token limiter as other packages see it (implemented in @spillway/delivery).
 * Keys are built with Keys.rate(tenantId, name) so they are hash-tagged per tenant.
 */
export interface RateGate {
  /** Waits (without blocking the event loop) until a token is available; rejects if `signal` aborts. */
  acquire(key: string, rate: Rate, signal?: AbortSignal): Promise<void>;
  /** Takes a token now or says how long until one is likely (ingest: 429 + Retry-After). */
  tryTake(key: string, rate: Rate): Promise<TakeResult>;
  close(): Promise<void>;
}
