import { EventEmitter } from 'node:events';
import { channels, type Logger, packageLogger } from '@spillway/shared';
import CircuitBreaker from 'opossum';
import { breakerState as breakerGauge } from './metrics.ts';

/**
 * One opossum breaker per endpoint, created on first use and looked up in plain maps (tenant →
 * endpoint): every task asks for its endpoint's breaker two or three times, so the lookup must cost
 * no more than a Map get. An endpoint's breaker unused for `idleMs` is `shutdown()` (timers and
 * listeners released) by a sweep on the shared timer; past `max` breakers the least recently used
 * goes. All breakers rotate their rolling-window buckets off that one timer instead of one
 * setInterval each.
 */

export type BreakerStateName = 'closed' | 'open' | 'half-open';

export interface BreakerOptions {
  /** Attempts in the rolling window before the error rate is judged (≥ 10). Default 10. */
  volumeThreshold?: number;
  /** Failure percentage (of attempts in the window) that opens the breaker. Default 50. */
  errorThresholdPercentage?: number;
  /** How long an open breaker waits before letting one probe through (half-open). Default 30 s. */
  resetTimeoutMs?: number;
  /** Rolling statistics window. Default 10 s in 10 buckets. */
  rollingCountTimeoutMs?: number;
  rollingCountBuckets?: number;
  /** Breakers kept at once; least recently used are shut down. Default 10 000. */
  max?: number;
  /** A breaker unused for this long is shut down. Default 10 min. */
  idleMs?: number;
}

/** Thrown by an attempt that failed; `counts` says whether the breaker should hold it against the endpoint. */
export class AttemptFailure extends Error {
  readonly counts: boolean;
  readonly payload: unknown;
  constructor(message: string, counts: boolean, payload: unknown) {
    super(message);
    this.name = 'AttemptFailure';
    this.counts = counts;
    this.payload = payload;
  }
}

type Run = () => Promise<unknown>;

interface Entry {
  breaker: CircuitBreaker<[Run], unknown>;
  openedAt: number;
  tenantId: string;
  endpointId: string;
  /** The shared clock (Breakers#clock) when the breaker was last asked for. */
  usedAt: number;
}

/** How often idle breakers are swept. */
const SWEEP_MS = 30_000;

export class Breakers {
  readonly #opts: Required<BreakerOptions>;
  readonly #byTenant = new Map<string, Map<string, Entry>>();
  #size = 0;
  /** Date.now() as of the last timer tick: "last used" needs no finer clock than the idle limit. */
  #clock = Date.now();
  #swept = Date.now();
  readonly #rotate = new EventEmitter();
  readonly #timer: NodeJS.Timeout;
  readonly #logger: Logger | undefined;

  constructor(opts: BreakerOptions = {}, logger?: Logger) {
    this.#opts = {
      volumeThreshold: 10,
      errorThresholdPercentage: 50,
      resetTimeoutMs: 30_000,
      rollingCountTimeoutMs: 10_000,
      rollingCountBuckets: 10,
      max: 10_000,
      idleMs: 600_000,
      ...opts,
    };
    // Below 10 attempts a couple of unlucky timeouts would open a healthy endpoint's breaker.
    this.#opts.volumeThreshold = Math.max(10, this.#opts.volumeThreshold);
    this.#logger = logger && packageLogger(logger, 'delivery');
    this.#rotate.setMaxListeners(0);
    this.#timer = setInterval(
      () => {
        this.#clock = Date.now();
        this.#rotate.emit('rotate');
        if (this.#clock - this.#swept >= Math.min(SWEEP_MS, this.#opts.idleMs)) this.#sweep();
      },
      Math.max(10, Math.floor(this.#opts.rollingCountTimeoutMs / this.#opts.rollingCountBuckets)),
    );
    this.#timer.unref();
  }

  #find(tenantId: string, endpointId: string): Entry | undefined {
    return this.#byTenant.get(tenantId)?.get(endpointId);
  }

  /** Shuts down breakers idle for idleMs (an open one is kept: it is not idle, it is waiting). */
  #sweep(): void {
    this.#swept = this.#clock;
    const before = this.#clock - this.#opts.idleMs;
    for (const eps of this.#byTenant.values())
      for (const e of eps.values()) if (e.usedAt < before && !e.breaker.opened) this.#drop(e);
  }

  #drop(e: Entry): void {
    const eps = this.#byTenant.get(e.tenantId);
    if (!eps?.delete(e.endpointId)) return;
    if (eps.size === 0) this.#byTenant.delete(e.tenantId);
    this.#size--;
    e.breaker.shutdown();
    breakerGauge.remove(e.tenantId, e.endpointId);
  }

  /** Past `max`: the least recently used breaker goes (a scan, only when a new one would overflow). */
  #evictOldest(): void {
    let oldest: Entry | undefined;
    for (const eps of this.#byTenant.values())
      for (const e of eps.values()) if (!oldest || e.usedAt < oldest.usedAt) oldest = e;
    if (oldest) this.#drop(oldest);
  }

  /** The endpoint's breaker, created lazily. */
  get(tenantId: string, endpointId: string): Entry {
    const found = this.#find(tenantId, endpointId);
    if (found) {
      found.usedAt = this.#clock;
      return found;
    }
    if (this.#size >= this.#opts.max) this.#evictOldest();
    const breaker: CircuitBreaker<[Run], unknown> = new CircuitBreaker<[Run], unknown>(
      (run: Run): Promise<unknown> => run(),
      {
        name: `${tenantId}/${endpointId}`,
        // undici's header/body timeouts (the endpoint's timeoutMs) end every attempt; a second
        // timer per fire here only cost CPU.
        timeout: false,
        volumeThreshold: this.#opts.volumeThreshold,
        errorThresholdPercentage: this.#opts.errorThresholdPercentage,
        resetTimeout: this.#opts.resetTimeoutMs,
        rollingCountTimeout: this.#opts.rollingCountTimeoutMs,
        rollingCountBuckets: this.#opts.rollingCountBuckets,
        rollingPercentilesEnabled: false,
        enableSnapshots: false,
        rotateBucketController: this.#rotate,
        // The receiver's own 4xx (bad payload, auth) says nothing about its health; 408 and 429 do.
        errorFilter: (err: unknown) => err instanceof AttemptFailure && !err.counts,
      } as CircuitBreaker.Options,
    );
    const entry: Entry = { breaker, openedAt: 0, tenantId, endpointId, usedAt: this.#clock };
    const log = (state: BreakerStateName, value: number) => {
      breakerGauge.set({ tenant: tenantId, endpoint: endpointId }, value);
      this.#logger?.info({ tenantId, endpointId, state }, 'endpoint breaker state');
      if (channels.breakerChange.hasSubscribers)
        channels.breakerChange.publish({ tenantId, endpointId, state });
    };
    breaker.on('open', () => {
      entry.openedAt = Date.now();
      log('open', 2);
    });
    breaker.on('halfOpen', () => log('half-open', 1));
    breaker.on('close', () => log('closed', 0));
    breakerGauge.set({ tenant: tenantId, endpoint: endpointId }, 0);
    let eps = this.#byTenant.get(tenantId);
    if (!eps) {
      eps = new Map();
      this.#byTenant.set(tenantId, eps);
    }
    eps.set(endpointId, entry);
    this.#size++;
    return entry;
  }

  /** Without creating one: an endpoint never tried is closed. */
  state(tenantId: string, endpointId: string): BreakerStateName {
    const e = this.#find(tenantId, endpointId);
    if (!e) return 'closed';
    return stateOf(e.breaker);
  }

  /**
   * Whether an attempt may be made now; when not, how long until the breaker is likely to let a
   * probe through (the task waits on the retry schedule meanwhile, holding nothing).
   */
  admit(tenantId: string, endpointId: string): { ok: true } | { ok: false; retryAfterMs: number } {
    const e = this.#find(tenantId, endpointId);
    if (!e) return { ok: true };
    const b = e.breaker;
    if (b.closed || b.pendingClose) return { ok: true };
    return { ok: false, retryAfterMs: this.retryAfter(e) };
  }

  retryAfter(e: Entry): number {
    const reset = this.#opts.resetTimeoutMs;
    // Half-open with the probe already out: check back soon, the probe decides.
    if (e.breaker.halfOpen) return Math.max(100, Math.min(reset, 1_000));
    return Math.max(100, e.openedAt + reset - Date.now());
  }

  close(): void {
    clearInterval(this.#timer);
    for (const eps of [...this.#byTenant.values()]) for (const e of [...eps.values()]) this.#drop(e);
  }
}

export function stateOf(
  b: CircuitBreaker<never[], unknown> | CircuitBreaker<[Run], unknown>,
): BreakerStateName {
  if (b.halfOpen) return 'half-open';
  if (b.opened) return 'open';
  return 'closed';
}
