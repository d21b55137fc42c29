/** @spillway/delivery — outbound delivery: dispatcher, signing, SSRF guard, retry timing, leased-token limiter. */
export { Dispatcher, classifyError, type AttemptOutcome, type DeliveryTask, type DispatcherOptions } from './dispatcher.ts';
export type { BreakerOptions, BreakerStateName } from './breakers.ts';
export { LeasedLimiter, type LeasedLimiterOptions, type LeaseRecord, type LimiterStats } from './limiter.ts';
export { nextRetryDelay, parseRetryAfter, MAX_RETRY_AFTER_MS } from './retry.ts';
export { generateSecret, signPayload, signingSecrets, rotateSecret } from './sign.ts';
export { isForbiddenAddress, guardedLookup, type LookupFn } from './ssrf.ts';
