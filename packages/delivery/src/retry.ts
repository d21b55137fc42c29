/**
 * Retry timing. The router owns the schedule's durable side (BullMQ delayed jobs, the DLQ); this
 * module only decides how long to wait.
 */

/** Longest we ever honour a receiver's Retry-After: past this it is a misconfiguration, not backpressure. */
export const MAX_RETRY_AFTER_MS = 3_600_000;

/**
 * Delay before the next attempt, or undefined when the schedule is exhausted (→ DLQ).
 *
 * `attemptsMade` counts attempts already made (1 after the first failure). The scheduled delay gets
 * ±20 % jitter so a burst of failures does not come back as a burst. A `Retry-After` from a 429/503
 * replaces the scheduled delay when it is longer, bounded by twice the scheduled delay and by one
 * hour, so a receiver cannot park a delivery for days.
 */
export function nextRetryDelay(
  scheduleMs: readonly number[],
  attemptsMade: number,
  retryAfterMs?: number,
  random: () => number = Math.random,
): number | undefined {
  if (!Number.isInteger(attemptsMade) || attemptsMade < 1 || attemptsMade > scheduleMs.length)
    return undefined;
  const base = scheduleMs[attemptsMade - 1]!;
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
