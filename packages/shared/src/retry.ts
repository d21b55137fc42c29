/** Waits `ms` milliseconds. */
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * The pause before try `attempt + 1` of a hand-off that must eventually succeed (a job add, a Kafka
 * send, a config load): 200 ms doubling to a 3 s cap, so a Redis or broker restart is ridden out
 * without hammering it and without waiting long once it is back.
 */
export function retryDelayMs(attempt: number): number {
  return Math.min(200 * 2 ** Math.min(attempt, 4), 3000);
}

/**
 * Runs `attempt` until it resolves, pausing `retryDelayMs` between tries. After each failure
 * `onError(err, attempt)` decides: return `false` to give up (shutting down, the batch was revoked),
 * anything else to try again; it is also the place to log and to reset a broken client.
 * Resolves `true` when the work was done, `false` when `onError` gave up.
 */
export async function retryForever(
  attempt: (n: number) => Promise<void>,
  onError: (err: unknown, n: number) => boolean | undefined | Promise<boolean | undefined>,
): Promise<boolean> {
  for (let n = 0; ; n++) {
    try {
      await attempt(n);
      return true;
    } catch (err) {
      if ((await onError(err, n)) === false) return false;
      await sleep(retryDelayMs(n));
    }
  }
}

/** Rejects with `new Error('timed out after <ms> ms')` unless `p` settles within `ms`. */
export function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`timed out after ${ms} ms`)), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
}
