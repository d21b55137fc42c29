import { Dispatcher, nextRetryDelay } from '@spillway/delivery';
import type { Endpoint, Keys, Logger, RedisClient, Tenant } from '@spillway/shared';
import type { DeliveryTask } from './fanout.ts';

/**
 * The ONE seam between the router and @spillway/delivery. The router codes against `DeliveryPort`
 * (the shape of delivery's `Dispatcher`), so tests may pass their own and the engine never sees
 * delivery's internals.
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
  redis: RedisClient;
  keys: Keys;
  logger: Logger;
  targetAllowCidrs: readonly string[];
}

/** The real delivery: @spillway/delivery's Dispatcher (rate, per-tenant concurrency, breakers, SSRF, signing, timeouts). */
export async function createDeliveryPort(opts: DeliveryPortOptions): Promise<DeliveryPort> {
  const d = new Dispatcher({ redis: opts.redis, keys: opts.keys, logger: opts.logger, allowCidrs: [...opts.targetAllowCidrs] });
  return {
    dispatch: (task, tenant, endpoint) => d.dispatch(task, tenant, endpoint),
    nextRetryDelay: (scheduleMs, attemptsMade, retryAfterMs) => nextRetryDelay(scheduleMs, attemptsMade, retryAfterMs),
    breakerState: (tid, eid) => d.breakerState(tid, eid),
    close: () => d.close(),
  };
}
