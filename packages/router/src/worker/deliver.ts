import { type AttemptOutcome, Dispatcher, nextRetryDelay } from '@spillway/delivery';
import type { Endpoint, Keys, Logger, RedisClient, Tenant } from '@spillway/shared';
import type { DeliveryTask } from './fanout.ts';

export type { AttemptOutcome };

export type BreakerState = 'closed' | 'open' | 'half-open';

/**
 * The ONE seam between the router and @spillway/delivery. The router codes against `DeliveryPort`
 * (the shape of delivery's `Dispatcher`), so the engine never sees delivery's internals.
 */
export interface DeliveryPort {
  /**
   * One attempt (rate tokens unless `opts.rated`, a slot, the breaker, the request); resolves with
   * what it came to.
   */
  dispatch(
    task: DeliveryTask,
    tenant: Tenant,
    endpoint: Endpoint,
    opts?: { rated?: boolean },
  ): Promise<AttemptOutcome>;
  /** Whether the tenant or endpoint has a rate (tasks then take tokens before they take a slot). */
  rated(tenant: Tenant, endpoint: Endpoint): boolean;
  /** Waits for the task's rate tokens; undefined when taken, else the outcome that ends the attempt. */
  rate(task: DeliveryTask, tenant: Tenant, endpoint: Endpoint): Promise<AttemptOutcome | undefined>;
  /** Requests open for the tenant on this worker now. */
  inFlight(tenantId: string): number;
  /** Delay before the next attempt, or undefined when the schedule is exhausted (→ DLQ). */
  nextRetryDelay(
    scheduleMs: readonly number[],
    attemptsMade: number,
    retryAfterMs?: number,
  ): number | undefined;
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
  const d = new Dispatcher({
    redis: opts.redis,
    keys: opts.keys,
    logger: opts.logger,
    allowCidrs: [...opts.targetAllowCidrs],
  });
  return {
    dispatch: (task, tenant, endpoint, o) => d.dispatch(task, tenant, endpoint, o),
    rated: (tenant, endpoint) => d.rated(tenant, endpoint),
    rate: (task, tenant, endpoint) => d.rate(task, tenant, endpoint),
    inFlight: (tid) => d.inFlight(tid),
    nextRetryDelay: (scheduleMs, attemptsMade, retryAfterMs) =>
      nextRetryDelay(scheduleMs, attemptsMade, retryAfterMs),
    breakerState: (tid, eid) => d.breakerState(tid, eid),
    close: () => d.close(),
  };
}
