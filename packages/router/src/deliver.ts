import { createHmac } from 'node:crypto';
import { type Endpoint, type Tenant, VERSION } from '@spillway/shared';
import type { DeliveryTask } from './fanout.ts';

/**
 * The ONE seam between the router and @spillway/delivery. The router codes against `DeliveryPort`
 * (the shape of delivery's `Dispatcher`); `createDeliveryPort` picks the implementation. Until
 * @spillway/delivery exports `Dispatcher`, a minimal fetch-based POST stands in (no SSRF guard, no
 * rate limits, no breakers); switching is the one line marked below.
 */
export type AttemptOutcome =
  | { kind: 'delivered'; status: number; durationMs: number }
  | { kind: 'retry'; status?: number; error: string; retryAfterMs?: number }
  | { kind: 'fail'; status?: number; error: string }
  | { kind: 'deferred'; reason: 'breaker_open'; retryAfterMs: number };

export type BreakerState = 'closed' | 'open' | 'half-open';

export interface DeliveryPort {
  dispatch(task: DeliveryTask, tenant: Tenant, endpoint: Endpoint): Promise<AttemptOutcome>;
  /** Delay before the next attempt, or undefined when the schedule is exhausted (→ DLQ). */
  nextRetryDelay(scheduleMs: readonly number[], attemptsMade: number, retryAfterMs?: number): number | undefined;
  breakerState(tenantId: string, endpointId: string): BreakerState;
  close(): Promise<void>;
}

export interface DeliveryPortOptions {
  targetAllowCidrs: readonly string[];
  redis?: unknown;
}

export async function createDeliveryPort(opts: DeliveryPortOptions): Promise<DeliveryPort> {
  // Switch point: when @spillway/delivery exports Dispatcher, construct it here instead.
  void opts;
  return new FetchDelivery();
}

/** Shared by every implementation: the schedule says how long to wait after attempt N. */
export function nextRetryDelay(scheduleMs: readonly number[], attemptsMade: number, retryAfterMs?: number): number | undefined {
  const base = scheduleMs[attemptsMade - 1];
  if (base === undefined) return undefined;
  return retryAfterMs !== undefined && retryAfterMs > base ? retryAfterMs : base;
}

/** Standard Webhooks signature: HMAC-SHA256 over `id.timestamp.body` with the base64 part of `whsec_`. */
function sign(secret: string, id: string, ts: number, body: Buffer): string {
  const key = Buffer.from(secret.startsWith('whsec_') ? secret.slice(6) : secret, 'base64');
  const mac = createHmac('sha256', key).update(`${id}.${ts}.`).update(body).digest('base64');
  return `v1,${mac}`;
}

class FetchDelivery implements DeliveryPort {
  async dispatch(task: DeliveryTask, _tenant: Tenant, endpoint: Endpoint): Promise<AttemptOutcome> {
    const started = performance.now();
    const ts = Math.floor(Date.now() / 1000);
    try {
      const res = await fetch(endpoint.url, {
        method: 'POST',
        body: task.event.body,
        signal: AbortSignal.timeout(endpoint.timeoutMs),
        headers: {
          'content-type': task.event.contentType,
          'webhook-id': task.eventId,
          'webhook-timestamp': String(ts),
          'webhook-signature': sign(endpoint.secret, task.eventId, ts, task.event.body),
          'spillway-event-type': task.event.type,
          'user-agent': `Spillway/${VERSION}`,
        },
      });
      // Bodies are read and discarded so the connection goes back to the pool.
      await res.arrayBuffer().catch(() => {});
      if (res.status >= 200 && res.status < 300) return { kind: 'delivered', status: res.status, durationMs: performance.now() - started };
      if (res.status === 410) return { kind: 'fail', status: 410, error: 'gone' };
      const ra = Number(res.headers.get('retry-after'));
      const out: AttemptOutcome = { kind: 'retry', status: res.status, error: `http_${res.status}` };
      if (Number.isFinite(ra) && ra > 0) out.retryAfterMs = ra * 1000;
      return out;
    } catch (err) {
      const name = (err as Error).name;
      return { kind: 'retry', error: name === 'TimeoutError' ? 'timeout' : `network: ${(err as Error).message}` };
    }
  }

  nextRetryDelay(scheduleMs: readonly number[], attemptsMade: number, retryAfterMs?: number): number | undefined {
    return nextRetryDelay(scheduleMs, attemptsMade, retryAfterMs);
  }

  breakerState(): BreakerState {
    return 'closed';
  }

  async close(): Promise<void> {}
}
