/** Past this many waiting, a turn takes this share of them (1/SHARE) instead of one. */
const SHARE = 32;

/**
 * Hands out event-loop turns one at a time: each `next()` resolves in its own `setImmediate`, and
 * the I/O that arrived meanwhile (other tenants' answers, job fetches, Redis replies) runs before
 * the next one. The engine settles failed attempts through it: an endpoint whose sixteen requests
 * time out in one undici timer tick used to have all sixteen settled (history, retry hand-off,
 * the lane's next dispatch) in that same turn, holding the worker's one event loop for every
 * other tenant (docs/benchmarks/profile.md, "A failure burst, settled in turns").
 */
export class Turns {
  readonly #queue: (() => void)[] = [];
  #armed = false;

  next(): Promise<void> {
    return new Promise<void>((resolve) => {
      this.#queue.push(resolve);
      if (!this.#armed) {
        this.#armed = true;
        setImmediate(this.#run);
      }
    });
  }

  /** Waiting for a turn. */
  get waiting(): number {
    return this.#queue.length;
  }

  // An immediate queued from inside an immediate runs in the loop's next iteration, after its
  // poll phase: one waiter per iteration (a thirty-second of the queue once it is longer than
  // that, so a flood of failures drains in ~32·ln(n) turns rather than n), whose continuations
  // run as this callback's microtasks.
  readonly #run = (): void => {
    const n = Math.ceil(this.#queue.length / SHARE);
    for (const resolve of this.#queue.splice(0, n)) resolve();
    if (this.#queue.length > 0) setImmediate(this.#run);
    else this.#armed = false;
  };
}
