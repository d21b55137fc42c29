import type { DeliveryRecord, DlqEntry, Intake } from '@spillway/shared';
import type { HistoryReader } from '../history/reader.ts';

/**
 * What the admin API (and the ingest role) need from the router. Implemented by
 * `createRouterServices(rt)` in ./router-services.ts; the admin package codes against this.
 */

export interface EventView {
  id: string;
  type: string;
  /** ISO-8601. */
  receivedAt: string;
  deliveries: DeliveryRecord[];
}

export interface EndpointStats {
  id: string;
  breaker: 'closed' | 'open' | 'half-open';
  delivered: number;
  failed: number;
}

/** GET /v1/tenants/:tid/stats — summed over all live workers. */
export interface TenantStats {
  status: 'active' | 'paused';
  credits: { used: number; limit: number };
  queued: number;
  inFlight: number;
  spilled: number;
  retrying: number;
  dlq: number;
  delivered: number;
  failed: number;
  endpoints: EndpointStats[];
  /** Present with ?detail=workers. */
  workers?: ({ workerId: string } & Omit<TenantStats, 'status' | 'workers' | 'dlq'>)[];
}

export interface RouterServices {
  /** The durable, group-committed, deduplicating intake (events API and ingest). */
  readonly intake: Intake;
  /** The event log and attempt history (docs/storage.md). */
  readonly history: HistoryReader;
  getEvent(tenantId: string, eventId: string): Promise<EventView | undefined>;
  listDlq(tenantId: string, opts?: { endpointId?: string; limit?: number }): Promise<DlqEntry[]>;
  /** A page of the DLQ from list index `from` (oldest first), the cursor after it, and the count. */
  pageDlq(
    tenantId: string,
    opts: { endpointId?: string; from: number; limit: number },
  ): Promise<{ data: DlqEntry[]; next?: string; total: number }>;
  /** Deletes the tenant's dead letters (of one endpoint, if given); returns how many. */
  purgeDlq(tenantId: string, opts?: { endpointId?: string }): Promise<number>;
  /** Moves DLQ entries back into delivery with a fresh attempt schedule; returns how many. */
  replayDlq(
    tenantId: string,
    opts?: { endpointId?: string; onProgress?: (done: number, total: number) => void },
  ): Promise<number>;
  tenantStats(tenantId: string, opts?: { detail?: boolean }): Promise<TenantStats>;
  close(): Promise<void>;
}
