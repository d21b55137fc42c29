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
}

export type TenantStatus = 'active' | 'paused';

export interface Tenant {
  id: string;
  limits: TenantLimits;
  status: TenantStatus;
  createdAt: string;
}

export type EndpointStatus = 'active' | 'paused' | 'disabled';

export interface Endpoint {
  id: string;
  tenantId: string;
  url: string;
  /** `*`, `order.*` or exact types. */
  eventTypes: string[];
  /** `whsec_` + base64 of >= 24 random bytes. */
  secret: string;
  /** Secrets still signing during a rotation overlap (both signatures are sent). */
  previousSecrets?: { secret: string; expiresAt: string }[];
  rate?: Rate;
  timeoutMs: number;
  status: EndpointStatus;
  /** Why it was disabled (e.g. `gone` after a 410). */
  disabledReason?: string;
  createdAt: string;
}

export type SourceKind = 'github' | 'stripe' | 'shopify' | 'standard';

export interface Source {
  id: string;
  tenantId: string;
  kind: SourceKind;
  secret: string;
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
   */
  submit(event: SpillwayEvent): Promise<{ id: string; duplicate: boolean }>;
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
