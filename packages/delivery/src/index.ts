/** @spillway/delivery — outbound delivery: dispatcher, signing, SSRF guard, retry timing, leased-token limiter. */

export type { BreakerOptions, BreakerStateName } from './breakers.ts';
export {
  type AttemptOutcome,
  classifyError,
  type DeliveryTask,
  Dispatcher,
  type DispatcherOptions,
  type FailureReason,
} from './dispatcher.ts';
export { LeasedLimiter, type LeasedLimiterOptions, type LeaseRecord, type LimiterStats } from './limiter.ts';
export { MAX_RETRY_AFTER_MS, nextRetryDelay, parseRetryAfter } from './retry.ts';
export { generateSecret, rotateSecret, signingSecrets, signPayload } from './sign.ts';
export { guardedLookup, isForbiddenAddress, type LookupFn } from './ssrf.ts';
