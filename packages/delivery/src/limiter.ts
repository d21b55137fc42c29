import {
  defineCommands,
  type Logger,
  packageLogger,
  type Rate,
  type RateGate,
  type RedisClient,
  type TakeResult,
  withTimeout,
} from '@spillway/shared';
import {
  limiterRedisCalls,
  limiterRedisErrors,
  limiterTokensExpired,
  limiterTokensGranted,
  limiterTokensUsed,
} from './metrics.ts';

/**
 * Leased-token rate limiter (docs/architecture.md, invariant 5: a rate-limited task holds no slot).
 *
 * The bucket lives in Redis (commands/lease-1.lua, on the Redis clock) so a rate holds across every
 * worker. Asking Redis per token would cost a round trip per delivery, so each worker leases a batch
 * and spends it locally; it leases again when the batch runs low. The price is overshoot: tokens
 * leased but not yet spent can be spent a little later than the bucket granted them, so across all
 * workers the rate over any window exceeds the bucket's by at most the sum of outstanding leases.
 * Leases are sized from the observed local rate (≈ `targetLeaseMs` worth of traffic, at least the
 * number of callers already waiting) and expire after `leaseTtlMs`, which keeps that sum small for
 * slow keys while hot keys still make ≈ 1/lease Redis calls per token.
 */

type LeaseCommand = (
  key: string,
  rate: string,
  burst: string,
  want: string,
  now?: string,
) => Promise<[number, number, string]>;

export interface LeaseRecord {
  key: string;
  at: number;
  want: number;
  granted: number;
  waitMs: number;
}

export interface LeasedLimiterOptions {
  redis: RedisClient;
  logger?: Logger;
  /**
   * What to do while Redis cannot be reached. `closed` (default; delivery): callers wait until
   * Redis answers again. `open`: fall back to a local bucket at rate ÷ `workers` per worker.
   * Either way every failure is logged (throttled) and counted.
   */
  failPolicy?: 'closed' | 'open';
  /** Workers sharing the limits, for the fail-open fallback. Default 1. */
  workers?: number;
  /** Unspent leased tokens are dropped after this long. Default 1 000 ms. */
  leaseTtlMs?: number;
  /** A lease aims to cover this much of the key's observed rate. Default 100 ms. */
  targetLeaseMs?: number;
  /** Largest lease asked for. Default 500. */
  maxLease?: number;
  /** A lease call slower than this counts as Redis being unreachable. Default 1 000 ms. */
  callTimeoutMs?: number;
  /** After a failed call, Redis is tried again this much later. Default 500 ms. */
  retryMs?: number;
  /** Sees every lease answer (tests compute the overshoot bound from it). */
  onLease?: (lease: LeaseRecord) => void;
}

interface Waiter {
  resolve: () => void;
  reject: (err: unknown) => void;
  cleanup?: () => void;
}

interface KeyState {
  key: string;
  rate: Rate;
  tokens: number;
  expiresAt: number;
  waiters: Waiter[];
  leasing: Promise<void> | null;
  timer: NodeJS.Timeout | null;
  /** Redis said the bucket is empty until then: do not ask before. */
  nextAt: number;
  /** Redis failed: do not ask before then (fallback meanwhile). */
  downUntil: number;
  /** Redis's own estimate of when its bucket next holds a whole token (honest Retry-After). */
  tokenAt: number;
  /** Consecutive leases that granted nothing (other workers took the tokens). */
  misses: number;
  /** Observed takes per second (EWMA over ~250 ms windows). */
  observed: number;
  windowStart: number;
  windowCount: number;
  lastUsed: number;
  /** Fail-open local bucket. */
  local: { tokens: number; at: number } | null;
}

export interface LimiterStats {
  redisCalls: number;
  redisErrors: number;
  granted: number;
  used: number;
  expired: number;
  fallbackUsed: number;
}

export class LeasedLimiter implements RateGate {
  readonly #redis: RedisClient;
  readonly #lease: LeaseCommand;
  readonly #logger: Logger | undefined;
  readonly #opts: Required<Omit<LeasedLimiterOptions, 'redis' | 'logger' | 'onLease'>>;
  readonly #onLease: ((l: LeaseRecord) => void) | undefined;
  readonly #keys = new Map<string, KeyState>();
  readonly #stats: LimiterStats = {
    redisCalls: 0,
    redisErrors: 0,
    granted: 0,
    used: 0,
    expired: 0,
    fallbackUsed: 0,
  };
  readonly #sweep: NodeJS.Timeout;
  #lastErrorLog = 0;
  #closed = false;

  constructor(opts: LeasedLimiterOptions) {
    this.#redis = opts.redis;
    this.#logger = opts.logger && packageLogger(opts.logger, 'delivery');
    this.#onLease = opts.onLease;
    this.#opts = {
      failPolicy: opts.failPolicy ?? 'closed',
      workers: Math.max(1, opts.workers ?? 1),
      leaseTtlMs: opts.leaseTtlMs ?? 1_000,
      targetLeaseMs: opts.targetLeaseMs ?? 100,
      maxLease: opts.maxLease ?? 500,
      callTimeoutMs: opts.callTimeoutMs ?? 1_000,
      retryMs: opts.retryMs ?? 500,
    };
    // ioredis runs it with EVALSHA and reloads the script on NOSCRIPT (after a restart or FLUSH).
    const r = defineCommands<{ lease: LeaseCommand }>(this.#redis, new URL('./commands/', import.meta.url), [
      'lease-1',
    ]);
    this.#lease = r.lease.bind(r);
    // Idle keys are forgotten so a worker that saw many tenants does not keep them all.
    this.#sweep = setInterval(() => this.#forgetIdle(), 30_000);
    this.#sweep.unref();
  }

  /** Counters since construction (tests; the same numbers go to Prometheus). */
  stats(): LimiterStats {
    return { ...this.#stats };
  }

  /** Tokens leased to this worker and not yet spent (its share of the overshoot bound). */
  outstanding(key?: string): number {
    const now = Date.now();
    let sum = 0;
    for (const s of this.#keys.values())
      if ((key === undefined || s.key === key) && s.expiresAt > now) sum += s.tokens;
    return sum;
  }

  acquire(key: string, rate: Rate, signal?: AbortSignal): Promise<void> {
    if (this.#closed) return Promise.reject(new Error('limiter closed'));
    if (signal?.aborted) return Promise.reject(signal.reason);
    const s = this.#state(key, rate);
    if (s.waiters.length === 0 && this.#takeLocal(s)) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const w: Waiter = { resolve, reject };
      if (signal) {
        const onAbort = () => {
          const i = s.waiters.indexOf(w);
          if (i >= 0) s.waiters.splice(i, 1);
          reject(signal.reason);
        };
        signal.addEventListener('abort', onAbort, { once: true });
        w.cleanup = () => signal.removeEventListener('abort', onAbort);
      }
      s.waiters.push(w);
      this.#pump(s);
    });
  }

  async tryTake(key: string, rate: Rate): Promise<TakeResult> {
    if (this.#closed) return { ok: false, retryAfterMs: 1_000 };
    const s = this.#state(key, rate);
    if (s.waiters.length === 0 && this.#takeLocal(s)) return { ok: true };
    const now = Date.now();
    // Not held back by the polling backoff: an ingest request is asking once, now.
    if (now >= s.tokenAt && now >= s.downUntil) {
      await (s.leasing ?? this.#leaseNow(s, 1));
      if (s.waiters.length === 0 && this.#takeLocal(s)) return { ok: true };
    } else if (now < s.downUntil && this.#opts.failPolicy === 'open' && this.#takeFallback(s)) {
      return { ok: true };
    }
    const after = Date.now();
    const later = after < s.downUntil ? s.downUntil - after : s.tokenAt - after;
    return { ok: false, retryAfterMs: Math.max(1, Math.ceil(later > 0 ? later : 1_000 / rate.perSecond)) };
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#sweep);
    for (const s of this.#keys.values()) {
      if (s.timer) clearTimeout(s.timer);
      for (const w of s.waiters.splice(0)) {
        w.cleanup?.();
        w.reject(new Error('limiter closed'));
      }
    }
    this.#keys.clear();
  }

  #state(key: string, rate: Rate): KeyState {
    let s = this.#keys.get(key);
    const now = Date.now();
    if (!s) {
      s = {
        key,
        rate,
        tokens: 0,
        expiresAt: 0,
        waiters: [],
        leasing: null,
        timer: null,
        nextAt: 0,
        downUntil: 0,
        misses: 0,
        tokenAt: 0,
        observed: 0,
        windowStart: now,
        windowCount: 0,
        lastUsed: now,
        local: null,
      };
      this.#keys.set(key, s);
    }
    s.rate = rate;
    s.lastUsed = now;
    return s;
  }

  /** Spends one leased token if there is an unexpired one; leases ahead when running low. */
  #takeLocal(s: KeyState): boolean {
    const now = Date.now();
    this.#expire(s, now);
    if (s.tokens >= 1) {
      s.tokens -= 1;
      this.#spent(s, now, 'lease');
      // Lease the next batch before this one runs out, so hot keys never wait on a round trip.
      if (
        s.tokens <= Math.max(0, Math.floor(this.#leaseSize(s, now) / 4)) &&
        !s.leasing &&
        now >= s.nextAt &&
        now >= s.downUntil
      ) {
        void this.#leaseNow(s, this.#leaseSize(s, now));
      }
      return true;
    }
    return false;
  }

  #expire(s: KeyState, now: number): void {
    if (s.tokens > 0 && now >= s.expiresAt) {
      const n = Math.floor(s.tokens);
      this.#stats.expired += n;
      limiterTokensExpired.inc(n);
      s.tokens = 0;
    }
  }

  #spent(s: KeyState, now: number, source: 'lease' | 'fallback'): void {
    s.windowCount++;
    const dt = now - s.windowStart;
    if (dt >= 250) {
      const inst = (s.windowCount * 1000) / dt;
      s.observed = s.observed === 0 ? inst : 0.5 * s.observed + 0.5 * inst;
      s.windowStart = now;
      s.windowCount = 0;
    }
    if (source === 'lease') this.#stats.used++;
    else this.#stats.fallbackUsed++;
    limiterTokensUsed.inc({ source });
  }

  /** ≈ targetLeaseMs of the observed rate, never more than the key's rate can refill in a lease's life. */
  #leaseSize(s: KeyState, now: number): number {
    const dt = now - s.windowStart;
    // A key that went quiet decays towards a lease of 1.
    const observed =
      dt > 1_000
        ? Math.min(s.observed, (s.windowCount * 1000) / dt)
        : Math.max(s.observed, dt > 0 ? (s.windowCount * 1000) / Math.max(dt, 100) : 0);
    const byRate = Math.ceil((observed * this.#opts.targetLeaseMs) / 1000);
    const byTtl = Math.max(1, Math.floor((s.rate.perSecond * this.#opts.leaseTtlMs) / 1000));
    return Math.max(1, Math.min(byRate, byTtl, this.#opts.maxLease));
  }

  /** Serves waiters from local tokens, leasing or scheduling a lease for the rest. */
  #pump(s: KeyState): void {
    if (this.#closed) return;
    const now = Date.now();
    this.#expire(s, now);
    while (s.waiters.length > 0 && s.tokens >= 1) {
      s.tokens -= 1;
      this.#spent(s, now, 'lease');
      const w = s.waiters.shift()!;
      w.cleanup?.();
      w.resolve();
    }
    if (s.waiters.length === 0 || s.leasing || s.timer) return;
    if (now < s.downUntil) {
      if (this.#opts.failPolicy === 'open') {
        while (s.waiters.length > 0 && this.#takeFallback(s)) {
          const w = s.waiters.shift()!;
          w.cleanup?.();
          w.resolve();
        }
        if (s.waiters.length === 0) return;
        const local = Math.ceil((1000 * this.#opts.workers) / s.rate.perSecond);
        this.#schedule(s, Math.min(s.downUntil - now, local));
      } else {
        this.#schedule(s, s.downUntil - now);
      }
      return;
    }
    if (now < s.nextAt) {
      this.#schedule(s, s.nextAt - now);
      return;
    }
    const want = Math.min(this.#opts.maxLease, Math.max(s.waiters.length, this.#leaseSize(s, now)));
    void this.#leaseNow(s, want);
  }

  #schedule(s: KeyState, ms: number): void {
    s.timer = setTimeout(
      () => {
        s.timer = null;
        this.#pump(s);
      },
      Math.max(1, Math.ceil(ms)),
    );
  }

  #leaseNow(s: KeyState, want: number): Promise<void> {
    const p = this.#callRedis(s, want).finally(() => {
      s.leasing = null;
      this.#pump(s);
    });
    s.leasing = p;
    return p;
  }

  async #callRedis(s: KeyState, want: number): Promise<void> {
    this.#stats.redisCalls++;
    limiterRedisCalls.inc();
    try {
      const res = await withTimeout(
        this.#lease(s.key, String(s.rate.perSecond), String(s.rate.burst), String(want)),
        this.#opts.callTimeoutMs,
      );
      const granted = Number(res[0]);
      const waitMs = Number(res[1]);
      const now = Date.now();
      this.#expire(s, now);
      s.tokens += granted;
      s.expiresAt = now + this.#opts.leaseTtlMs;
      s.downUntil = 0;
      s.local = null;
      // Empty bucket: come back when Redis says a token exists; for several waiters, when a
      // few exist, so a throttled key does not cost a call per token.
      // An empty answer means other workers got there first: back off (×2 per miss, up to ×4)
      // instead of polling the bucket in lockstep with them.
      const queued = Math.max(0, s.waiters.length - granted);
      const batch = Math.min(
        queued,
        Math.max(1, Math.floor(s.rate.burst / 2)),
        Math.max(1, Math.ceil((s.rate.perSecond * 100) / 1000)),
      );
      s.misses = granted === 0 ? Math.min(s.misses + 1, 2) : 0;
      const gap = waitMs + (batch > 1 ? ((batch - 1) * 1000) / s.rate.perSecond : 0);
      s.tokenAt = waitMs > 0 ? now + waitMs : 0;
      s.nextAt = granted < want ? now + gap * 2 ** s.misses * (0.75 + Math.random() * 0.5) : 0;
      this.#stats.granted += granted;
      limiterTokensGranted.inc(granted);
      this.#onLease?.({ key: s.key, at: now, want, granted, waitMs });
    } catch (err) {
      this.#stats.redisErrors++;
      limiterRedisErrors.inc();
      s.downUntil = Date.now() + this.#opts.retryMs;
      const now = Date.now();
      if (now - this.#lastErrorLog > 5_000) {
        this.#lastErrorLog = now;
        this.#logger?.warn(
          { key: s.key, err, failPolicy: this.#opts.failPolicy },
          this.#opts.failPolicy === 'open'
            ? 'rate limiter cannot reach Redis: fail-open on a local bucket at rate / workers'
            : 'rate limiter cannot reach Redis: fail-closed, deliveries wait',
        );
      }
    }
  }

  /** Fail-open: a local bucket at rate ÷ workers (burst likewise, at least 1). */
  #takeFallback(s: KeyState): boolean {
    const now = Date.now();
    const rate = s.rate.perSecond / this.#opts.workers;
    const burst = Math.max(1, s.rate.burst / this.#opts.workers);
    if (!s.local) s.local = { tokens: Math.min(1, burst), at: now };
    s.local.tokens = Math.min(burst, s.local.tokens + ((now - s.local.at) * rate) / 1000);
    s.local.at = now;
    if (s.local.tokens < 1) return false;
    s.local.tokens -= 1;
    this.#spent(s, now, 'fallback');
    return true;
  }

  #forgetIdle(): void {
    const cutoff = Date.now() - 60_000;
    for (const [k, s] of this.#keys) {
      if (s.lastUsed < cutoff && s.waiters.length === 0 && !s.leasing && !s.timer) this.#keys.delete(k);
    }
  }
}
