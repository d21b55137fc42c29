import { counter, gauge, histogram } from '@spillway/shared';

/**
 * Delivery and limiter metrics on the shared registry. Created once per process (module scope) so
 * several Dispatchers in one process (tests, `--role all`) share them instead of failing to register.
 */

export const attemptsTotal = counter({
  name: 'spillway_delivery_attempts_total',
  help: 'Delivery attempts by outcome (delivered, retry, fail, deferred)',
  labelNames: ['outcome'],
});

export const attemptSeconds = histogram({
  name: 'spillway_delivery_attempt_duration_seconds',
  help: 'Time from request start to response (or failure) per outbound attempt',
  labelNames: ['outcome'],
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
});

export const breakerState = gauge({
  name: 'spillway_delivery_breaker_state',
  help: 'Endpoint circuit breaker state: 0 closed, 1 half-open, 2 open',
  labelNames: ['tenant', 'endpoint'],
});

export const inFlightGauge = gauge({
  name: 'spillway_delivery_in_flight',
  help: 'Outbound requests open per tenant in this worker',
  labelNames: ['tenant'],
});

export const limiterRedisCalls = counter({
  name: 'spillway_limiter_redis_calls_total',
  help: 'Lease calls made to Redis by the rate limiter',
});

export const limiterRedisErrors = counter({
  name: 'spillway_limiter_redis_errors_total',
  help: 'Lease calls that failed (Redis unreachable or slow)',
});

export const limiterTokensGranted = counter({
  name: 'spillway_limiter_tokens_granted_total',
  help: 'Tokens leased from Redis',
});

export const limiterTokensUsed = counter({
  name: 'spillway_limiter_tokens_used_total',
  help: 'Tokens spent (source=lease from Redis, source=fallback from the local fail-open bucket)',
  labelNames: ['source'],
});

export const limiterTokensExpired = counter({
  name: 'spillway_limiter_tokens_expired_total',
  help: 'Leased tokens dropped unspent when their lease expired',
});
