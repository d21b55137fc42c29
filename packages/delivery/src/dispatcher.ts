import type { Endpoint, Keys, Logger, RateGate, RedisClient, SpillwayEvent, Tenant } from '@spillway/shared';
import { channels, VERSION } from '@spillway/shared';
import pLimit, { type LimitFunction } from 'p-limit';
import { batchBody, batchId } from './batch.ts';
import { AttemptFailure, type BreakerOptions, type BreakerStateName, Breakers } from './breakers.ts';
import { LeasedLimiter, type LeasedLimiterOptions } from './limiter.ts';
import { addInFlightSource, attemptSeconds, attemptsTotal } from './metrics.ts';
import { type EndpointPlan, planOf } from './plan.ts';
import { TenantPools } from './pools.ts';
import { parseRetryAfter } from './retry.ts';
import { signEd25519, signingSecrets, signPayload } from './sign.ts';
import type { LookupFn } from './ssrf.ts';

/** One delivery of one event to one endpoint, as the router hands it over. */
export interface DeliveryTask {
  tenantId: string;
  eventId: string;
  endpointId: string;
  /** 1-based: the attempt about to be made. */
  attempt: number;
  event: SpillwayEvent;
  /**
   * Set while the router's ordered store owns the task (an endpoint with per-key ordering): its
   * sequence number within (tenant, orderingKey). Never written to a wire form.
   */
  seq?: number;
}

/**
 * Why an attempt did not deliver. `http_<status>` for an answer outside 2xx; the rest name what
 * went wrong before or instead of an answer. Permanent ones (no more attempts): `gone` (HTTP 410,
 * the router disables the endpoint), `target_forbidden` (SSRF guard), `invalid_url`, and a
 * `http_<status>` the endpoint listed in `retry.permanentStatuses` (a `fail`, not a `retry`).
 */
export type FailureReason =
  | `http_${number}`
  | 'timeout'
  | 'aborted'
  | 'shutdown'
  | `connect_error: ${string}`
  | `rate_limiter: ${string}`
  | `internal: ${string}`
  | 'gone'
  | 'target_forbidden'
  | 'invalid_url';

/**
 * What one attempt came to.
 * - `delivered`: a 2xx within the endpoint's timeout.
 * - `retry`: try again on the schedule (`retryAfterMs` from a 429/503 Retry-After, if any).
 * - `fail`: permanent, no more attempts.
 * - `deferred`: no request was made because the endpoint's breaker is open; no slot was held.
 */
export type AttemptOutcome =
  | ({ kind: 'delivered'; status: number; durationMs: number } & AttemptDetail)
  | ({ kind: 'retry'; status?: number; error: FailureReason; retryAfterMs?: number } & AttemptDetail)
  | ({ kind: 'fail'; status?: number; error: FailureReason } & AttemptDetail)
  | { kind: 'deferred'; reason: 'breaker_open'; retryAfterMs: number };

/** What the attempt history keeps of a request that was made (absent when none was). */
export interface AttemptDetail {
  /** Time from sending the request to its end. */
  durationMs?: number;
  /** The first EXCERPT_BYTES of the response body. */
  excerpt?: Buffer;
}

/** Bytes of a response body kept as the attempt's excerpt. */
export const EXCERPT_BYTES = 1024;

export interface DispatcherOptions {
  redis: RedisClient;
  keys: Keys;
  logger: Logger;
  /** SPILLWAY_TARGET_ALLOW_CIDRS: private/loopback ranges deliveries may reach anyway. */
  allowCidrs: string[];
  /** Rate gate for tenant and endpoint rates; default a LeasedLimiter on `redis` (closed with the dispatcher). */
  limiter?: RateGate;
  /** Options for the default LeasedLimiter. */
  limiterOptions?: Omit<LeasedLimiterOptions, 'redis' | 'logger'>;
  /** Default `Spillway/<VERSION>`. */
  userAgent?: string;
  breaker?: BreakerOptions;
  /** Sockets per origin per tenant (capped by the tenant's concurrency). Default 16. */
  connectionsPerOrigin?: number;
  /** Bytes of a response body read before the rest is discarded. Default 64 KiB. */
  maxResponseBytes?: number;
  /** Replaces dns.lookup for outbound connections (tests). */
  lookup?: LookupFn;
}

const DEFAULT_CONCURRENCY = 16;
/** `spillway-event-type` of a batch (each element carries its own `type`). */
export const BATCH_EVENT_TYPE = 'spillway.batch';

interface TenantSlots {
  limit: LimitFunction;
  open: number;
}

/**
 * Turns a delivery task into one HTTP attempt. Steps, in order, each holding as little as it can:
 *   breaker pre-check → rate (tenant, then endpoint; waits holding no slot) → tenant p-limit slot →
 *   endpoint breaker → sign → undici request on the tenant's Agent (SSRF-guarded connector) → classify.
 * Durable state (retry jobs, DLQ, delivery records) is the router's; this only says what happened.
 */
export class Dispatcher {
  readonly #keys: Keys;
  readonly #logger: Logger;
  readonly #limiter: RateGate;
  readonly #ownsLimiter: boolean;
  readonly #userAgent: string;
  readonly #pools: TenantPools;
  readonly #breakers: Breakers;
  readonly #slots = new Map<string, TenantSlots>();
  readonly #maxResponseBytes: number;
  readonly #closing = new AbortController();
  readonly #unregister: () => void;

  constructor(opts: DispatcherOptions) {
    this.#keys = opts.keys;
    this.#logger = opts.logger;
    this.#ownsLimiter = opts.limiter === undefined;
    this.#limiter =
      opts.limiter ?? new LeasedLimiter({ ...opts.limiterOptions, redis: opts.redis, logger: opts.logger });
    this.#userAgent = opts.userAgent ?? `Spillway/${VERSION}`;
    this.#pools = new TenantPools({
      allowCidrs: opts.allowCidrs,
      ...(opts.connectionsPerOrigin === undefined ? {} : { connectionsPerOrigin: opts.connectionsPerOrigin }),
      ...(opts.lookup === undefined ? {} : { lookup: opts.lookup }),
    });
    this.#breakers = new Breakers(opts.breaker, opts.logger);
    this.#maxResponseBytes = opts.maxResponseBytes ?? 64 * 1024;
    this.#unregister = addInFlightSource((into) => {
      for (const [tid, s] of this.#slots) into.set(tid, (into.get(tid) ?? 0) + s.open);
    });
  }

  /**
   * One attempt: breaker pre-check, rate tokens (unless `opts.rated`: the caller already took them
   * with `rate()`), a tenant slot, the request.
   */
  dispatch(
    task: DeliveryTask,
    tenant: Tenant,
    endpoint: Endpoint,
    opts: { rated?: boolean } = {},
  ): Promise<AttemptOutcome> {
    // Chained, not async: one promise fewer per delivery. A throw still arrives as a rejection.
    const started = performance.now();
    let attempt: Promise<AttemptOutcome>;
    try {
      attempt = this.#dispatch([task], undefined, tenant, endpoint, opts.rated === true);
    } catch (err) {
      return Promise.reject(err);
    }
    return attempt.then((outcome) => {
      this.#report([task], undefined, outcome, started);
      return outcome;
    });
  }

  /**
   * One request carrying several events of one endpoint (its `batch` policy): a JSON array signed
   * as one message whose `webhook-id` is the batch's id (see batch.ts). Rate tokens are one per
   * event (unless `opts.rated`); the batch takes one tenant slot; the outcome is the whole batch's.
   */
  async dispatchBatch(
    tasks: readonly DeliveryTask[],
    tenant: Tenant,
    endpoint: Endpoint,
    opts: { rated?: boolean } = {},
  ): Promise<AttemptOutcome> {
    const started = performance.now();
    const id = batchId(
      endpoint.id,
      tasks.map((t) => t.eventId),
    );
    const outcome = await this.#dispatch(tasks, id, tenant, endpoint, opts.rated === true);
    this.#report(tasks, id, outcome, started);
    return outcome;
  }

  #report(
    tasks: readonly DeliveryTask[],
    batch: string | undefined,
    outcome: AttemptOutcome,
    started: number,
  ): void {
    attemptsTotal.inc({ outcome: outcome.kind });
    if (channels.deliveryAttempt.hasSubscribers) {
      const durationMs = performance.now() - started;
      for (const task of tasks)
        channels.deliveryAttempt.publish({
          tenantId: task.tenantId,
          endpointId: task.endpointId,
          eventId: task.eventId,
          attempt: task.attempt,
          outcome: outcome.kind === 'delivered' || outcome.kind === 'deferred' ? outcome.kind : outcome.error,
          ...('status' in outcome && outcome.status !== undefined ? { status: outcome.status } : {}),
          durationMs,
          ...(batch === undefined ? {} : { batchId: batch }),
        });
    }
    if (outcome.kind !== 'delivered') {
      const task = tasks[0]!;
      this.#logger.debug(
        {
          tenantId: task.tenantId,
          eventId: task.eventId,
          endpointId: task.endpointId,
          attempt: task.attempt,
          ...(batch === undefined ? {} : { batchId: batch, events: tasks.length }),
          outcome,
        },
        'delivery attempt',
      );
    }
  }

  /** Whether a task of this tenant and endpoint must take rate tokens before its attempt. */
  rated(tenant: Tenant, endpoint: Endpoint): boolean {
    return Boolean(tenant.limits.rate || endpoint.rate);
  }

  /**
   * Takes the task's rate tokens (tenant, then endpoint), waiting as long as the rates say and
   * holding nothing else meanwhile. Resolves undefined when it has them, or the outcome that ends
   * the attempt instead (shutdown, limiter failure: back on the retry schedule).
   */
  async rate(task: DeliveryTask, tenant: Tenant, endpoint: Endpoint): Promise<AttemptOutcome | undefined> {
    const signal = this.#closing.signal;
    try {
      if (tenant.limits.rate)
        await this.#limiter.acquire(this.#keys.rate(task.tenantId, 'tenant'), tenant.limits.rate, signal);
      if (endpoint.rate)
        await this.#limiter.acquire(
          this.#keys.rate(task.tenantId, `ep:${task.endpointId}`),
          endpoint.rate,
          signal,
        );
      return undefined;
    } catch (err) {
      if (signal.aborted) return { kind: 'retry', error: 'shutdown' };
      // The task must go back on the schedule, never vanish with a rejected promise.
      return { kind: 'retry', error: `rate_limiter: ${(err as Error).message}` };
    }
  }

  /**
   * Not async: a delivery without rates (most) goes straight to its tenant slot, without an extra
   * promise and frame per attempt (a worker allocates ~20 KiB per delivery; docs/benchmarks/profile.md).
   */
  #dispatch(
    tasks: readonly DeliveryTask[],
    batch: string | undefined,
    tenant: Tenant,
    endpoint: Endpoint,
    rated: boolean,
  ): Promise<AttemptOutcome> {
    const plan = planOf(endpoint);
    if (!plan.target) return Promise.resolve({ kind: 'fail', error: 'invalid_url' });
    const task = tasks[0]!;

    // An open breaker would refuse the attempt anyway: do not spend rate tokens on it.
    const pre = this.#breakers.admit(task.tenantId, task.endpointId);
    if (!pre.ok)
      return Promise.resolve({ kind: 'deferred', reason: 'breaker_open', retryAfterMs: pre.retryAfterMs });
    if (!rated && this.rated(tenant, endpoint))
      return this.#rateAll(tasks, tenant, endpoint).then(
        (refused) => refused ?? this.#slot(tasks, batch, tenant, endpoint, plan),
      );
    return this.#slot(tasks, batch, tenant, endpoint, plan);
  }

  /** Rates count events: a batch takes one token per event it carries. The refusal, if any. */
  async #rateAll(
    tasks: readonly DeliveryTask[],
    tenant: Tenant,
    endpoint: Endpoint,
  ): Promise<AttemptOutcome | undefined> {
    for (const t of tasks) {
      const refused = await this.rate(t, tenant, endpoint);
      if (refused) return refused;
    }
    return undefined;
  }

  /**
   * The router starts at most `concurrency` dispatches per tenant, so this limit rarely queues; it
   * is the guard that keeps a tenant's open requests at its concurrency whatever the caller.
   */
  #slot(
    tasks: readonly DeliveryTask[],
    batch: string | undefined,
    tenant: Tenant,
    endpoint: Endpoint,
    plan: EndpointPlan,
  ): Promise<AttemptOutcome> {
    const slots = this.#tenantSlots(tasks[0]!.tenantId, tenant.limits.concurrency || DEFAULT_CONCURRENCY);
    return slots.limit(() => this.#inSlot(tasks, batch, tenant, endpoint, plan, slots));
  }

  /**
   * Holding one of the tenant's slots: breaker, then the request. Chained rather than async, as
   * `#request` is: a promise and a microtask turn fewer per delivery.
   */
  #inSlot(
    tasks: readonly DeliveryTask[],
    batch: string | undefined,
    tenant: Tenant,
    endpoint: Endpoint,
    plan: EndpointPlan,
    slots: TenantSlots,
  ): Promise<AttemptOutcome> {
    const signal = this.#closing.signal;
    if (signal.aborted) return Promise.resolve({ kind: 'retry', error: 'shutdown' });
    const task = tasks[0]!;
    const entry = this.#breakers.get(task.tenantId, task.endpointId);
    const b = entry.breaker;
    if (!b.closed && !b.pendingClose)
      return Promise.resolve({
        kind: 'deferred',
        reason: 'breaker_open',
        retryAfterMs: this.#breakers.retryAfter(entry),
      });
    slots.open++;
    // opossum runs the action inside its own try: a throw before the request arrives here as a
    // rejection (and counts against the breaker, as a rejected attempt does).
    return b
      .fire(() => this.#request(tasks, batch, endpoint, plan, tenant))
      .then(
        (o) => {
          slots.open--;
          return o as AttemptOutcome;
        },
        (err: unknown): AttemptOutcome => {
          slots.open--;
          if (err instanceof AttemptFailure) return err.payload as AttemptOutcome;
          const code = (err as { code?: string }).code;
          if (code === 'EOPENBREAKER')
            return {
              kind: 'deferred',
              reason: 'breaker_open',
              retryAfterMs: this.#breakers.retryAfter(entry),
            };
          if (code === 'ETIMEDOUT') return { kind: 'retry', error: 'timeout' };
          return { kind: 'retry', error: `connect_error: ${(err as Error).message}` };
        },
      );
  }

  /**
   * `webhook-signature`: `v1,<HMAC>` per live whsec_ secret (the endpoint's `signatures` include
   * `v1`, the default) and `v1a,<Ed25519>` (they include `v1a`), space-separated, so a receiver
   * migrating from one to the other verifies whichever it knows.
   */
  #signature(endpoint: Endpoint, plan: EndpointPlan, id: string, ts: number, body: Buffer): string {
    const v1 = plan.hmac ? signPayload(signingSecrets(endpoint), id, ts, body) : '';
    if (!plan.ed25519) return v1;
    const v1a = signEd25519(plan.ed25519, id, ts, body);
    return v1 === '' ? v1a : `${v1} ${v1a}`;
  }

  /**
   * One HTTP attempt carrying one event, or a batch of them (`batch` = its id). Resolves on 2xx;
   * rejects with AttemptFailure (carrying the outcome) otherwise. Chained rather than async (a
   * promise and a microtask turn fewer per delivery): a throw before the request is turned into a
   * rejection by the breaker that fires it (`#inSlot`).
   */
  #request(
    tasks: readonly DeliveryTask[],
    batch: string | undefined,
    endpoint: Endpoint,
    plan: EndpointPlan,
    tenant: Tenant,
  ): Promise<AttemptOutcome> {
    const started = performance.now();
    const ts = Math.floor(Date.now() / 1000);
    const task = tasks[0]!;
    const id = batch ?? task.eventId;
    const body = batch === undefined ? task.event.body : batchBody(tasks.map((t) => t.event));
    const headers: Record<string, string> = {
      'content-type': batch === undefined ? task.event.contentType : 'application/json',
      'webhook-id': id,
      'webhook-timestamp': String(ts),
      'webhook-signature': this.#signature(endpoint, plan, id, ts, body),
      'spillway-event-type': batch === undefined ? task.event.type : BATCH_EVENT_TYPE,
      'user-agent': this.#userAgent,
    };
    if (batch !== undefined) headers['spillway-batch-count'] = String(tasks.length);
    // Static headers and credentials never replace Spillway's own (the admin API refuses those names).
    if (plan.headers) for (const k in plan.headers) headers[k] ??= plan.headers[k]!;
    // undici's header and body timeouts bound the attempt; close() destroys the Agents, which
    // aborts whatever is still open. No per-attempt AbortSignal: composing one per request was
    // ~8 % of a worker's CPU.
    const timeoutMs = endpoint.timeoutMs;
    const url = plan.target!;
    const agent = this.#pools.agent(task.tenantId, tenant.limits.concurrency || DEFAULT_CONCURRENCY);
    let excerpt: Buffer | undefined;
    const done = (o: AttemptOutcome, counts: boolean): AttemptOutcome => {
      const took = performance.now() - started;
      attemptSeconds.observe({ outcome: o.kind }, took / 1000);
      if (o.kind !== 'deferred') {
        o.durationMs ??= Math.round(took);
        if (excerpt) o.excerpt = excerpt;
      }
      if (o.kind === 'delivered') return o;
      throw new AttemptFailure('error' in o ? o.error : o.kind, counts, o);
    };
    return new Promise<AttemptHandler>((resolve, reject) => {
      agent.dispatch(
        {
          origin: url.origin,
          path: url.path,
          method: 'POST',
          headers,
          body,
          headersTimeout: timeoutMs,
          bodyTimeout: timeoutMs,
        },
        new AttemptHandler(this.#maxResponseBytes, resolve, reject),
      );
    }).then(
      (h) => {
        const status = h.status;
        excerpt = h.excerpt;
        const retryAfter = h.retryAfter;
        const durationMs = Math.round(performance.now() - started);
        if (status >= 200 && status < 300) return done({ kind: 'delivered', status, durationMs }, false);
        if (status === 410) return done({ kind: 'fail', status, error: 'gone' }, false);
        const counts = status >= 500 || status < 400 || status === 408 || status === 429;
        // The endpoint said this answer will not change by waiting (its retry.permanentStatuses).
        if (plan.permanent?.has(status))
          return done({ kind: 'fail', status, error: `http_${status}` }, counts);
        if (status === 429 || status === 503) {
          const ra = parseRetryAfter(retryAfter);
          return done(
            {
              kind: 'retry',
              status,
              error: `http_${status}`,
              ...(ra === undefined ? {} : { retryAfterMs: ra }),
            },
            counts,
          );
        }
        return done({ kind: 'retry', status, error: `http_${status}` }, counts);
      },
      (err: unknown) => {
        // This worker's own close cut the attempt short: it says nothing about the endpoint. Neither
        // does an SSRF refusal (the target's address): the breaker ignores both.
        if (this.#closing.signal.aborted) return done({ kind: 'retry', error: 'shutdown' }, false);
        const o = classifyError(err);
        return done(o, !('error' in o && o.error === 'target_forbidden'));
      },
    );
  }

  #tenantSlots(tenantId: string, concurrency: number): TenantSlots {
    let s = this.#slots.get(tenantId);
    if (!s) {
      s = { limit: pLimit(concurrency), open: 0 };
      this.#slots.set(tenantId, s);
    } else if (s.limit.concurrency !== concurrency) {
      // PATCHed limits take effect without dropping queued tasks.
      s.limit.concurrency = concurrency;
    }
    return s;
  }

  breakerState(tenantId: string, endpointId: string): BreakerStateName {
    return this.#breakers.state(tenantId, endpointId);
  }

  /** Requests this worker has open for the tenant right now (never above its concurrency). */
  inFlight(tenantId: string): number {
    return this.#slots.get(tenantId)?.open ?? 0;
  }

  /** Tasks waiting for one of the tenant's concurrency slots. */
  pending(tenantId: string): number {
    return this.#slots.get(tenantId)?.limit.pendingCount ?? 0;
  }

  /** Aborts in-flight attempts (they come back as `retry`), then releases sockets, breakers and the limiter. */
  async close(): Promise<void> {
    this.#closing.abort();
    this.#unregister();
    await this.#pools.close();
    this.#breakers.close();
    if (this.#ownsLimiter) await this.#limiter.close();
  }
}

/**
 * undici's dispatch handler for one attempt: the status, Retry-After (only on 429/503) and the first
 * EXCERPT_BYTES of the body, read up to `limit` bytes. No response stream, no parsed header object,
 * no async resource per attempt (what `request()` adds on top; docs/benchmarks/profile.md). Resolves
 * with itself when the answer is known: at the body's end, or with the headers' status when the
 * body is cut off (past the limit: the socket is dropped, the answer stands); rejects when no
 * answer came. It has the handler shape undici's clients call directly (onConnect, onHeaders with
 * the raw headers, onData, onComplete, onError); a handler of the newer controller shape
 * (`onRequestStart`, ...) is wrapped per request, and the wrapper parses every header.
 */
class AttemptHandler {
  status = 0;
  retryAfter: string | undefined;
  excerpt: Buffer | undefined;
  #read = 0;
  #abort: ((err?: Error) => void) | undefined;
  #settled = false;
  readonly #limit: number;
  readonly #resolve: (h: AttemptHandler) => void;
  readonly #reject: (err: Error) => void;

  constructor(limit: number, resolve: (h: AttemptHandler) => void, reject: (err: Error) => void) {
    this.#limit = limit;
    this.#resolve = resolve;
    this.#reject = reject;
  }

  onConnect(abort: (err?: Error) => void): void {
    this.#abort = abort;
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[]): boolean {
    if (statusCode < 200) return true; // 1xx: the real answer follows
    this.status = statusCode;
    if (statusCode === 429 || statusCode === 503)
      for (let i = 0; i + 1 < rawHeaders.length; i += 2)
        if (
          rawHeaders[i]!.length === 11 &&
          rawHeaders[i]!.toString('latin1').toLowerCase() === 'retry-after'
        ) {
          this.retryAfter = rawHeaders[i + 1]!.toString('latin1');
          break;
        }
    return true;
  }

  onData(chunk: Buffer): boolean {
    const ex = this.excerpt;
    if (!ex) this.excerpt = chunk.length > EXCERPT_BYTES ? chunk.subarray(0, EXCERPT_BYTES) : chunk;
    else if (ex.length < EXCERPT_BYTES) this.excerpt = Buffer.concat([ex, chunk]).subarray(0, EXCERPT_BYTES);
    this.#read += chunk.length;
    if (this.#read > this.#limit) {
      // Enough read: the answer stands, the rest goes with the socket.
      this.#settle();
      this.#abort?.();
      return false;
    }
    return true;
  }

  onComplete(): void {
    this.#settle();
  }

  onError(err: Error): void {
    if (this.status !== 0) this.#settle();
    else if (!this.#settled) {
      this.#settled = true;
      this.#reject(err);
    }
  }

  #settle(): void {
    if (this.#settled) return;
    this.#settled = true;
    this.#resolve(this);
  }
}

function errorChain(err: unknown): { code?: string; name?: string; message?: string }[] {
  const out: { code?: string; name?: string; message?: string }[] = [];
  let e: unknown = err;
  for (let i = 0; i < 5 && e && typeof e === 'object'; i++) {
    out.push(e as { code?: string; name?: string; message?: string });
    e = (e as { cause?: unknown }).cause;
  }
  return out;
}

/** Maps a failed request to an outcome: `target_forbidden` is permanent, the rest retry. */
export function classifyError(err: unknown, signal?: AbortSignal): AttemptOutcome {
  const chain = errorChain(err);
  if (chain.some((e) => e.code === 'SPW_ERR_TARGET_FORBIDDEN'))
    return { kind: 'fail', error: 'target_forbidden' };
  const timeout =
    chain.some(
      (e) =>
        e.name === 'TimeoutError' ||
        e.code === 'UND_ERR_HEADERS_TIMEOUT' ||
        e.code === 'UND_ERR_BODY_TIMEOUT' ||
        e.code === 'UND_ERR_CONNECT_TIMEOUT',
    ) ||
    (signal?.aborted && (signal.reason as { name?: string } | undefined)?.name === 'TimeoutError');
  if (timeout) return { kind: 'retry', error: 'timeout' };
  if (signal?.aborted) return { kind: 'retry', error: 'aborted' };
  const first = chain[0];
  if (chain.some((e) => e.code === 'UND_ERR_DESTROYED' || e.code === 'UND_ERR_CLOSED'))
    return { kind: 'retry', error: 'shutdown' };
  return { kind: 'retry', error: `connect_error: ${first?.code ?? first?.message ?? String(err)}` };
}
