import { metricFactory } from '@spillway/shared';

/**
 * Delivery and limiter metrics on the shared registry. Created once per process (module scope) so
 * several Dispatchers in one process (tests, `--role all`) share them instead of failing to register.
 */
const { counter, gauge, histogram } = metricFactory({
  spillway_delivery_attempts_total: 'Delivery attempts by outcome (delivered, retry, fail, deferred)',
  spillway_delivery_attempt_duration_seconds:
    'Time from request start to response (or failure) per outbound attempt',
  spillway_delivery_breaker_state: 'Endpoint circuit breaker state: 0 closed, 1 half-open, 2 open',
  spillway_delivery_in_flight: 'Outbound requests open per tenant in this worker',
  spillway_limiter_redis_calls_total: 'Lease calls made to Redis by the rate limiter',
  spillway_limiter_redis_errors_total: 'Lease calls that failed (Redis unreachable or slow)',
  spillway_limiter_tokens_granted_total: 'Tokens leased from Redis',
  spillway_limiter_tokens_used_total:
    'Tokens spent (source=lease from Redis, source=fallback from the local fail-open bucket)',
  spillway_limiter_tokens_expired_total: 'Leased tokens dropped unspent when their lease expired',
});
export const attemptsTotal = counter('spillway_delivery_attempts_total', ['outcome']);
export const attemptSeconds = histogram(
  'spillway_delivery_attempt_duration_seconds',
  [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  ['outcome'],
);
export const breakerState = gauge('spillway_delivery_breaker_state', { labelNames: ['tenant', 'endpoint'] });
/** Adds each tenant's open requests to `into` (one per Dispatcher; read at scrape time). */
export type InFlightSource = (into: Map<string, number>) => void;
const inFlightSources = new Set<InFlightSource>();
/**
 * Read from the Dispatchers' own slot counts when scraped, not kept up to date per request: a
 * labelled inc and dec on every attempt cost two label hashes per delivery.
 */
gauge('spillway_delivery_in_flight', {
  labelNames: ['tenant'],
  collect() {
    this.reset();
    const open = new Map<string, number>();
    for (const add of inFlightSources) add(open);
    for (const [tenant, n] of open) this.set({ tenant }, n);
  },
});
/** Registers a Dispatcher's counts with the gauge; the returned function removes them. */
export function addInFlightSource(s: InFlightSource): () => void {
  inFlightSources.add(s);
  return () => inFlightSources.delete(s);
}
export const limiterRedisCalls = counter('spillway_limiter_redis_calls_total');
export const limiterRedisErrors = counter('spillway_limiter_redis_errors_total');
export const limiterTokensGranted = counter('spillway_limiter_tokens_granted_total');
export const limiterTokensUsed = counter('spillway_limiter_tokens_used_total', ['source']);
export const limiterTokensExpired = counter('spillway_limiter_tokens_expired_total');
