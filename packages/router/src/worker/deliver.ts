import {
  type AttemptOutcome,
  batchElementBytes,
  Dispatcher,
  nextRetryDelay,
  retrySchedule,
  signingImplementation,
} from '@spillway/delivery';
import type { Endpoint, Keys, Logger, RedisClient, SpillwayEvent, Tenant } from '@spillway/shared';
import type { DeliveryTask } from './fanout.ts';

export type { AttemptOutcome };
/**
 * `retrySchedule`: an endpoint's retry policy against the default schedule (delivery's; used by
 * settle.ts). `signingImplementation`: `native` (the signing addon) or `node:crypto`, named in the
 * worker's start-up line.
 */
export { retrySchedule, signingImplementation };

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
  /**
   * One request carrying several tasks of one endpoint (its `batch` policy): one slot, one token
   * per task (unless `opts.rated`); the outcome is the whole batch's.
   */
  dispatchBatch(
    tasks: readonly DeliveryTask[],
    tenant: Tenant,
    endpoint: Endpoint,
    opts?: { rated?: boolean },
  ): Promise<AttemptOutcome>;
  /** What one event adds to a batch's body (a batch closes before it passes maxBytes). */
  batchElementBytes(event: SpillwayEvent): number;
  /** Whether the tenant or endpoint has a rate (tasks then take tokens before they take a slot). */
  rated(tenant: Tenant, endpoint: Endpoint): boolean;
  /** Waits for the task's rate tokens; undefined when taken, else the outcome that ends the attempt. */
  rate(task: DeliveryTask, tenant: Tenant, endpoint: Endpoint): Promise<AttemptOutcome | undefined>;
  /** Requests open for the tenant on this worker now. */
  inFlight(tenantId: string): number;
  /** Delay before the next attempt, or undefined when the schedule (or `maxAttempts`) is exhausted (→ DLQ). */
  nextRetryDelay(
    scheduleMs: readonly number[],
    attemptsMade: number,
    retryAfterMs?: number,
    maxAttempts?: number,
  ): number | undefined;
  breakerState(tenantId: string, endpointId: string): BreakerState;
  close(): Promise<void>;
}

export interface DeliveryPortOptions {
  redis: RedisClient;
  keys: Keys;
  logger: Logger;
  targetAllowCidrs: readonly string[];
  /** An open breaker's wait before its half-open probe (SPILLWAY_BREAKER_RESET). */
  breakerResetMs?: number;
}

/** The real delivery: @spillway/delivery's Dispatcher (rate, per-tenant concurrency, breakers, SSRF, signing, timeouts). */
export async function createDeliveryPort(opts: DeliveryPortOptions): Promise<DeliveryPort> {
  const d = new Dispatcher({
    redis: opts.redis,
    keys: opts.keys,
    logger: opts.logger,
    allowCidrs: [...opts.targetAllowCidrs],
    ...(opts.breakerResetMs === undefined ? {} : { breaker: { resetTimeoutMs: opts.breakerResetMs } }),
  });
  return {
    dispatch: (task, tenant, endpoint, o) => d.dispatch(task, tenant, endpoint, o),
    dispatchBatch: (tasks, tenant, endpoint, o) => d.dispatchBatch(tasks, tenant, endpoint, o),
    batchElementBytes,
    rated: (tenant, endpoint) => d.rated(tenant, endpoint),
    rate: (task, tenant, endpoint) => d.rate(task, tenant, endpoint),
    inFlight: (tid) => d.inFlight(tid),
    nextRetryDelay: (scheduleMs, attemptsMade, retryAfterMs, maxAttempts) =>
      nextRetryDelay(scheduleMs, attemptsMade, retryAfterMs, Math.random, maxAttempts),
    breakerState: (tid, eid) => d.breakerState(tid, eid),
    close: () => d.close(),
  };
}
