import { registry } from '@spillway/shared';
import { Counter, Gauge, Histogram } from 'prom-client';

/**
 * Delivery and limiter metrics on the shared registry. Created once per process (module scope) so
 * several Dispatchers in one process (tests, `--role all`) share them instead of failing to register.
 */

function once<T>(name: string, make: () => T): T {
  return (registry.getSingleMetric(name) as T | undefined) ?? make();
}

export const attemptsTotal = once(
  'spillway_delivery_attempts_total',
  () =>
    new Counter({
      name: 'spillway_delivery_attempts_total',
      help: 'Delivery attempts by outcome (delivered, retry, fail, deferred)',
      labelNames: ['outcome'],
      registers: [registry],
    }),
);

export const attemptSeconds = once(
  'spillway_delivery_attempt_duration_seconds',
  () =>
    new Histogram({
      name: 'spillway_delivery_attempt_duration_seconds',
      help: 'Time from request start to response (or failure) per outbound attempt',
      labelNames: ['outcome'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    }),
);

export const breakerState = once(
  'spillway_delivery_breaker_state',
  () =>
    new Gauge({
      name: 'spillway_delivery_breaker_state',
      help: 'Endpoint circuit breaker state: 0 closed, 1 half-open, 2 open',
      labelNames: ['tenant', 'endpoint'],
      registers: [registry],
    }),
);

export const inFlightGauge = once(
  'spillway_delivery_in_flight',
  () =>
    new Gauge({
      name: 'spillway_delivery_in_flight',
      help: 'Outbound requests open per tenant in this worker',
      labelNames: ['tenant'],
      registers: [registry],
    }),
);

export const limiterRedisCalls = once(
  'spillway_limiter_redis_calls_total',
  () =>
    new Counter({
      name: 'spillway_limiter_redis_calls_total',
      help: 'Lease calls made to Redis by the rate limiter',
      registers: [registry],
    }),
);

export const limiterRedisErrors = once(
  'spillway_limiter_redis_errors_total',
  () =>
    new Counter({
      name: 'spillway_limiter_redis_errors_total',
      help: 'Lease calls that failed (Redis unreachable or slow)',
      registers: [registry],
    }),
);

export const limiterTokensGranted = once(
  'spillway_limiter_tokens_granted_total',
  () =>
    new Counter({
      name: 'spillway_limiter_tokens_granted_total',
      help: 'Tokens leased from Redis',
      registers: [registry],
    }),
);

export const limiterTokensUsed = once(
  'spillway_limiter_tokens_used_total',
  () =>
    new Counter({
      name: 'spillway_limiter_tokens_used_total',
      help: 'Tokens spent (source=lease from Redis, source=fallback from the local fail-open bucket)',
      labelNames: ['source'],
      registers: [registry],
    }),
);

export const limiterTokensExpired = once(
  'spillway_limiter_tokens_expired_total',
  () =>
    new Counter({
      name: 'spillway_limiter_tokens_expired_total',
      help: 'Leased tokens dropped unspent when their lease expired',
      registers: [registry],
    }),
);
