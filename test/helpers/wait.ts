/**
 * A fixed pause. Tests use it only to let time pass on purpose (to show that something does NOT
 * happen, or to pace a load); to wait for something, poll it with `waitFor`.
 */
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Polls `pred` every `everyMs` until it is truthy and returns that value; throws naming `what` after `timeoutMs`. */
export async function waitFor<T>(
  pred: () => T | Promise<T>,
  what: string,
  timeoutMs = 20_000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}
