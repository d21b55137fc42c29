/**
 * The first-stage limit of ingest (issue 15): per client address, in this process, before anything
 * that costs a Redis call or a body read. It counts only requests that were refused (bad or missing
 * signature, unknown source, wrong method...): a provider's verified traffic never spends it, so it
 * can be strict with junk without throttling GitHub's few sending addresses. It is local on purpose
 * (Envoy's local stage): with N ingest processes an address gets N times the allowance, and it
 * costs no round trip. The source's own rate (Redis, shared) is spent only by verified requests.
 */
export interface PreAuthRate {
  /** Refused requests per second an address may make, on average. */
  perSecond: number;
  /** How many it may make at once. */
  burst: number;
}

interface Bucket {
  tokens: number;
  at: number;
}

export class PreAuthLimiter {
  readonly #rate: PreAuthRate;
  readonly #max: number;
  readonly #clock: () => number;
  /** Map order is the LRU order; bounded so a flood of addresses cannot grow memory. */
  readonly #buckets = new Map<string, Bucket>();

  constructor(rate: PreAuthRate, maxEntries = 100_000, clock: () => number = () => performance.now()) {
    if (!(rate.perSecond > 0) || !(rate.burst >= 1))
      throw new RangeError(`pre-auth rate needs perSecond > 0 and burst >= 1 (got ${JSON.stringify(rate)})`);
    this.#rate = rate;
    this.#max = Math.max(1, maxEntries);
    this.#clock = clock;
  }

  #refill(key: string): Bucket | undefined {
    const b = this.#buckets.get(key);
    if (!b) return undefined;
    const now = this.#clock();
    b.tokens = Math.min(this.#rate.burst, b.tokens + ((now - b.at) * this.#rate.perSecond) / 1000);
    b.at = now;
    return b;
  }

  /** 0 when the address may make a request now, else the milliseconds until it may. */
  retryAfterMs(key: string): number {
    const b = this.#refill(key);
    if (!b || b.tokens >= 1) return 0;
    return Math.ceil(((1 - b.tokens) * 1000) / this.#rate.perSecond);
  }

  /** A request from `key` was refused: it spends a token. */
  spend(key: string): void {
    let b = this.#refill(key);
    if (!b) {
      b = { tokens: this.#rate.burst, at: this.#clock() };
      while (this.#buckets.size >= this.#max)
        this.#buckets.delete(this.#buckets.keys().next().value as string);
    } else {
      this.#buckets.delete(key);
    }
    b.tokens = Math.max(0, b.tokens - 1);
    // A full bucket is the default: do not keep one.
    if (b.tokens < this.#rate.burst) this.#buckets.set(key, b);
  }

  get size(): number {
    return this.#buckets.size;
  }
}
