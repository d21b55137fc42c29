/** @spillway/delivery — outbound delivery: dispatcher, signing, SSRF guard, retry timing, leased-token limiter. */

export { batchBody, batchElementBytes, batchId } from './batch.ts';
export type { BreakerOptions, BreakerStateName } from './breakers.ts';
export {
  type AttemptDetail,
  type AttemptOutcome,
  BATCH_EVENT_TYPE,
  classifyError,
  type DeliveryTask,
  Dispatcher,
  type DispatcherOptions,
  EXCERPT_BYTES,
  type FailureReason,
} from './dispatcher.ts';
export { LeasedLimiter, type LeasedLimiterOptions, type LeaseRecord, type LimiterStats } from './limiter.ts';
export { authorization, type EndpointPlan, headerRefusal, planOf } from './plan.ts';
export {
  MAX_RETRY_AFTER_MS,
  nextRetryDelay,
  parseRetryAfter,
  type RetrySchedule,
  retrySchedule,
} from './retry.ts';
export {
  ed25519PublicPem,
  generateEd25519,
  generateSecret,
  parseEd25519PrivateKey,
  rotateSecret,
  signEd25519,
  signingImplementation,
  signingSecrets,
  signPayload,
  WHPK_PREFIX,
  WHSK_PREFIX,
} from './sign.ts';
export { guardedLookup, isForbiddenAddress, type LookupFn } from './ssrf.ts';
