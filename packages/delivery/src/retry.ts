import { parseDuration, type RetryPolicy } from '@spillway/shared';

/**
 * Retry timing. The router owns the schedule's durable side (BullMQ delayed jobs, the DLQ); this
 * module only decides how long to wait.
 */

/** Longest we ever honour a receiver's Retry-After: past this it is a misconfiguration, not backpressure. */
export const MAX_RETRY_AFTER_MS = 3_600_000;

/**
 * Delay before the next attempt, or undefined when the schedule is exhausted (→ DLQ).
 *
 * `attemptsMade` counts attempts already made (1 after the first failure); at most `maxAttempts`
 * are made (default: the schedule's length + 1), and past the end of the schedule its last delay
 * repeats. The scheduled delay gets ±20 % jitter so a burst of failures does not come back as a
 * burst. A `Retry-After` from a 429/503 replaces the scheduled delay when it is longer, bounded by
 * twice the scheduled delay and by one hour, so a receiver cannot park a delivery for days.
 */
export function nextRetryDelay(
  scheduleMs: readonly number[],
  attemptsMade: number,
  retryAfterMs?: number,
  random: () => number = Math.random,
  maxAttempts: number = scheduleMs.length + 1,
): number | undefined {
  if (
    !Number.isInteger(attemptsMade) ||
    attemptsMade < 1 ||
    attemptsMade >= maxAttempts ||
    scheduleMs.length === 0
  )
    return undefined;
  const base = scheduleMs[Math.min(attemptsMade, scheduleMs.length) - 1]!;
  const jittered = Math.max(1, Math.round(base * (0.8 + 0.4 * random())));
  if (retryAfterMs === undefined || !Number.isFinite(retryAfterMs) || retryAfterMs <= jittered)
    return jittered;
  return Math.round(Math.min(retryAfterMs, base * 2, MAX_RETRY_AFTER_MS));
}

/** Parses `Retry-After` (delta-seconds or an HTTP date) into milliseconds; undefined when absent or bad. */
export function parseRetryAfter(
  value: string | string[] | undefined,
  nowMs: number = Date.now(),
): number | undefined {
  const v = Array.isArray(value) ? value[0] : value;
  if (v === undefined) return undefined;
  const t = v.trim();
  if (/^\d+$/.test(t)) return Math.min(Number(t) * 1000, MAX_RETRY_AFTER_MS);
  const date = Date.parse(t);
  if (Number.isNaN(date)) return undefined;
  return Math.min(Math.max(0, date - nowMs), MAX_RETRY_AFTER_MS);
}

/** An endpoint's retry policy resolved against the installation's default schedule. */
export interface RetrySchedule {
  scheduleMs: readonly number[];
  maxAttempts: number;
}

/** Resolved schedules by policy object (a policy is read on every failed attempt; endpoints are re-read twice a second). */
const schedules = new WeakMap<RetryPolicy, RetrySchedule>();

/**
 * The schedule a task of an endpoint follows: the endpoint's `retry.schedule` and `maxAttempts`
 * where given, the installation's SPILLWAY_RETRY_SCHEDULE (`defaultMs`) otherwise. The admin API
 * validates the durations; one that does not parse here falls back to the default.
 */
export function retrySchedule(policy: RetryPolicy | undefined, defaultMs: readonly number[]): RetrySchedule {
  if (!policy || (policy.schedule === undefined && policy.maxAttempts === undefined))
    return { scheduleMs: defaultMs, maxAttempts: defaultMs.length + 1 };
  let s = schedules.get(policy);
  if (s) return s;
  let scheduleMs: readonly number[] = defaultMs;
  if (policy.schedule) {
    const parsed = policy.schedule.map((d) => parseDuration(d));
    if (parsed.every((d) => d !== undefined)) scheduleMs = parsed as number[];
  }
  s = { scheduleMs, maxAttempts: policy.maxAttempts ?? scheduleMs.length + 1 };
  schedules.set(policy, s);
  return s;
}
