import type { DeliveryRecord, Endpoint, Keys, Logger, RedisClient, Tenant } from '@spillway/shared';
import type { ConfigCache, ConfigStore } from '../config/store.ts';
import { addGaugeSource, dlqWritesTotal } from '../metrics.ts';
import type { TenantCounters as SharedCounters } from '../records/counters.ts';
import { pushDlq, type RecordWriter } from '../records/records.ts';
import type { RetryScheduler } from '../retry/scheduler.ts';
import type { SpillProducer } from '../spill/producer.ts';
import { Credits } from './credits.ts';
import type { DeliveryPort } from './deliver.ts';
import type { DeliveryTask } from './fanout.ts';

/** A tenant's config as this worker last loaded it. */
export interface TenantView {
  tenant: Tenant | undefined;
  endpoints: Map<string, Endpoint>;
  at: number;
}

/** Per-tenant counters this worker publishes for the admin API to sum. */
export interface TenantCounters {
  spilled: number;
  retrying: number;
  delivered: number;
  failed: number;
  endpoints: Record<string, { delivered: number; failed: number }>;
}

/** A task in this worker's memory: it holds a credit until `done`. */
interface Held {
  task: DeliveryTask;
  done: () => void;
  /** Withdraws the task from delivery while it still waits for tokens or a slot (pause). */
  withdraw: AbortController;
}

/** What the drainer gets back when it offers a task. */
export type Admission = Promise<void> | 'blocked' | 'drop';

export interface EngineDeps {
  /** SPILLWAY_WORKER_BODY_BUDGET: body bytes admitted tasks may hold; past it tasks spill. */
  bodyBudgetBytes?: number;
  redis: RedisClient;
  keys: Keys;
  logger: Logger;
  cache: ConfigCache;
  /** Read past the cache for fan-out (freshView). */
  store?: ConfigStore;
  delivery: DeliveryPort;
  spill: SpillProducer;
  retries: RetryScheduler;
  records: RecordWriter;
  /** Shared per-tenant counters in Redis (what GET .../stats shows for spilled, retrying, delivered, failed). */
  counters: SharedCounters;
  retryScheduleMs: readonly number[];
  /** A 410 Gone means the receiver is gone for good: the endpoint is disabled (no more fan-out to it). */
  disableEndpoint?: (tenantId: string, endpointId: string, reason: string) => Promise<void>;
}

/** Config refresh period for tenants this worker holds: pause/resume acts within 1 s even if a pub/sub message is lost. */
const REFRESH_MS = 500;

/**
 * A task admitted from an intake or retry job that is still waiting in delivery (for rate tokens or
 * a concurrency slot) after this long is withdrawn and spilled: the Kafka record takes it over and
 * the job can complete. So a job is held only by requests actually on the wire, and a slow tenant
 * occupies at most `limits.concurrency` of a worker's job slots — it cannot fill them all and
 * hold back other tenants' next jobs (invariant 3).
 */
const JOB_HANDOFF_MS = 500;

/**
 * The in-memory heart of a worker. Tasks enter only with a credit (or go straight to the spill
 * log) and go to delivery at once — which waits for rate tokens holding no slot, then for one of the
 * tenant's concurrency slots — and leave memory only through a durable hand-off: delivered, retry
 * job added, DLQ entry written, or Kafka ack'd (a paused tenant's waiting tasks are withdrawn and
 * spilled).
 * Every entry point returns a promise that resolves exactly then, so the durable owner of the task
 * (intake job, retry job, Kafka offset) is released only after the hand-off.
 */
export class Engine {
  readonly credits: Credits;
  readonly #d: EngineDeps;
  readonly #views = new Map<string, TenantView>();
  /** Tasks in memory per tenant (each holds a credit; delivery applies rate and concurrency). */
  readonly #held = new Map<string, Set<Held>>();
  readonly #counters = new Map<string, TenantCounters>();
  readonly #wakers = new Set<() => void>();
  readonly #refresh: NodeJS.Timeout;
  readonly #unsubscribe: () => void;
  readonly #ungauge: () => void;

  constructor(deps: EngineDeps) {
    this.#d = deps;
    this.credits = new Credits(deps.bodyBudgetBytes);
    this.#ungauge = addGaugeSource({
      creditsUsed: () => this.credits.entries(),
      tasksInMemory: () => {
        let n = 0;
        for (const set of this.#held.values()) n += set.size;
        return n;
      },
      bodyBytes: () => this.credits.bytes,
    });
    this.#unsubscribe = deps.cache.onChange((c) => void this.#reload(c.tenantId));
    this.#refresh = setInterval(() => {
      for (const tid of this.#views.keys()) void this.#reload(tid);
    }, REFRESH_MS);
    this.#refresh.unref();
    this.credits.onRelease(() => this.#wake());
  }

  // --- config --------------------------------------------------------------------------------

  /** Loads (through the cache) the tenant and its endpoints. Throws when Redis cannot answer. */
  async view(tid: string): Promise<TenantView> {
    const [tenant, eps] = await Promise.all([this.#d.cache.tenant(tid), this.#d.cache.endpoints(tid)]);
    const v: TenantView = { tenant, endpoints: new Map(eps.map((e) => [e.id, e])), at: Date.now() };
    this.#views.set(tid, v);
    return v;
  }

  /**
   * Loads the tenant and its endpoints straight from Redis (past the cache) and makes that the
   * view. Fan-out uses it: an endpoint created just before an event was accepted must get the
   * event, even if this worker has not heard of the endpoint yet (pub/sub lag, cache TTL).
   */
  async freshView(tid: string): Promise<TenantView> {
    const store = this.#d.store;
    if (!store) return this.view(tid);
    const [tenant, eps] = await Promise.all([store.getTenant(tid), store.listEndpoints(tid)]);
    const v: TenantView = { tenant, endpoints: new Map(eps.map((e) => [e.id, e])), at: Date.now() };
    this.#views.set(tid, v);
    return v;
  }

  viewNow(tid: string): TenantView | undefined {
    return this.#views.get(tid);
  }

  async #reload(tid: string): Promise<void> {
    try {
      const v = await this.view(tid);
      if (!v.tenant && !this.#held.has(tid)) this.#views.delete(tid);
      this.#withdrawBlocked(tid);
      this.#wake();
    } catch (err) {
      this.#d.logger.debug({ err: (err as Error).message, tid }, 'config refresh failed');
    }
  }

  /** Why a task cannot run now, or undefined. */
  #blocked(v: TenantView, ep: Endpoint): 'paused' | undefined {
    return v.tenant?.status === 'paused' || ep.status === 'paused' ? 'paused' : undefined;
  }

  // --- wake-ups for the drainer ----------------------------------------------------------------

  /** Called whenever a credit frees up or config changes. */
  onWake(fn: () => void): () => void {
    this.#wakers.add(fn);
    return () => this.#wakers.delete(fn);
  }

  #wake(): void {
    for (const w of [...this.#wakers]) w();
  }

  // --- entry points ----------------------------------------------------------------------------

  /**
   * From an intake or retry job: every task is either admitted (credit) or spilled. Resolves when
   * all of them have left memory through a durable hand-off.
   */
  async hold(tasks: readonly DeliveryTask[]): Promise<void> {
    const tids = new Set(tasks.map((t) => t.tenantId));
    for (const tid of tids)
      if (!this.#views.has(tid) || Date.now() - this.#views.get(tid)!.at > REFRESH_MS) await this.view(tid);
    await Promise.all(
      tasks.map((task) => {
        const a = this.tryAdmit(task, JOB_HANDOFF_MS);
        if (a === 'drop') return undefined;
        if (a === 'blocked') return this.#spill(task);
        return a;
      }),
    );
  }

  /**
   * Admits the task if its tenant has a credit and nothing pauses it (the view must be loaded).
   * 'drop' = tenant or endpoint gone/disabled: nothing to deliver. With `handoffMs`, a task still
   * waiting in delivery after that long is withdrawn and spilled (see JOB_HANDOFF_MS).
   */
  tryAdmit(task: DeliveryTask, handoffMs?: number): Admission {
    const v = this.#views.get(task.tenantId);
    if (!v) return 'blocked';
    const ep = v.endpoints.get(task.endpointId);
    if (!v.tenant || !ep || ep.status === 'disabled') {
      this.#d.logger.debug(
        { tid: task.tenantId, eid: task.endpointId },
        'dropping task of a deleted tenant/endpoint',
      );
      return 'drop';
    }
    if (this.#blocked(v, ep)) return 'blocked';
    if (!this.credits.tryTake(task.tenantId, v.tenant.limits.maxInFlight, task.event.body)) return 'blocked';
    return new Promise<void>((done) => {
      const held: Held = { task, done, withdraw: new AbortController() };
      let set = this.#held.get(task.tenantId);
      if (!set) {
        set = new Set();
        this.#held.set(task.tenantId, set);
      }
      set.add(held);
      const handoff =
        handoffMs === undefined ? undefined : setTimeout(() => held.withdraw.abort(), handoffMs);
      // Straight to delivery: it waits for rate tokens holding no slot, then for one of the
      // tenant's concurrency slots; a pause withdraws it from either wait (#withdrawBlocked).
      void this.#attempt(held, v.tenant!, ep).finally(() => {
        clearTimeout(handoff);
        set.delete(held);
        if (set.size === 0 && this.#held.get(task.tenantId) === set) this.#held.delete(task.tenantId);
      });
    });
  }

  #counter(tid: string): TenantCounters {
    let c = this.#counters.get(tid);
    if (!c) {
      c = { spilled: 0, retrying: 0, delivered: 0, failed: 0, endpoints: {} };
      this.#counters.set(tid, c);
    }
    return c;
  }

  #epCounter(tid: string, eid: string): { delivered: number; failed: number } {
    const c = this.#counter(tid);
    c.endpoints[eid] ??= { delivered: 0, failed: 0 };
    return c.endpoints[eid];
  }

  /**
   * A paused tenant/endpoint: its tasks still waiting in delivery are withdrawn and go back to the
   * spill log (requests already on the wire finish).
   */
  #withdrawBlocked(tid: string): void {
    const set = this.#held.get(tid);
    const v = this.#views.get(tid);
    if (!set || !v) return;
    for (const held of set) {
      const ep = v.endpoints.get(held.task.endpointId);
      if (v.tenant && ep && this.#blocked(v, ep)) held.withdraw.abort();
    }
  }

  async #spillHeld(held: Held): Promise<void> {
    await this.#spill(held.task);
    this.#finish(held);
  }

  async #spill(task: DeliveryTask): Promise<void> {
    this.#counter(task.tenantId).spilled++;
    await this.#d.spill.spill(task);
    // The Kafka record owns the task now: it is part of the tenant's backlog until the drainer resolves it.
    this.#d.counters.add(task.tenantId, 'spilled', 1);
  }

  #finish(held: Held): void {
    this.credits.release(held.task.tenantId, held.task.event.body);
    held.done();
  }

  async #attempt(held: Held, tenant: Tenant, ep: Endpoint): Promise<void> {
    const { task } = held;
    let outcome: Awaited<ReturnType<DeliveryPort['dispatch']>>;
    try {
      outcome = await this.#d.delivery.dispatch(task, tenant, ep, { signal: held.withdraw.signal });
    } catch (err) {
      outcome = { kind: 'retry', error: `internal: ${(err as Error).message}` };
    }
    if (outcome.kind === 'withdrawn') {
      await this.#spillHeld(held);
      return;
    }
    const rec: DeliveryRecord = { endpointId: task.endpointId, status: 'pending', attempts: task.attempt };
    if ('status' in outcome && outcome.status !== undefined) rec.lastStatus = outcome.status;
    if (outcome.kind === 'delivered') {
      rec.status = 'delivered';
      this.#d.records.attempt(task, rec);
      this.#counter(task.tenantId).delivered++;
      this.#epCounter(task.tenantId, task.endpointId).delivered++;
      this.#d.counters.add(task.tenantId, 'delivered', 1, task.endpointId);
      this.#finish(held);
      return;
    }
    if (outcome.kind === 'deferred') {
      // No attempt was made (breaker open): same attempt number, later.
      await this.#d.retries.schedule(task, outcome.retryAfterMs);
      this.#counter(task.tenantId).retrying++;
      this.#d.counters.add(task.tenantId, 'retrying', 1);
      this.#finish(held);
      return;
    }
    rec.lastError = outcome.error;
    const delay =
      outcome.kind === 'retry'
        ? this.#d.delivery.nextRetryDelay(this.#d.retryScheduleMs, task.attempt, outcome.retryAfterMs)
        : undefined;
    if (delay !== undefined) {
      rec.status = 'retrying';
      await this.#d.retries.schedule({ ...task, attempt: task.attempt + 1 }, delay);
      this.#d.records.attempt(task, rec);
      this.#counter(task.tenantId).retrying++;
      this.#d.counters.add(task.tenantId, 'retrying', 1);
      this.#finish(held);
      return;
    }
    rec.status = 'failed';
    if (outcome.kind === 'fail' && outcome.error === 'gone' && this.#d.disableEndpoint) {
      await this.#d
        .disableEndpoint(task.tenantId, task.endpointId, 'gone')
        .catch((err) =>
          this.#d.logger.warn(
            { err: (err as Error).message, tid: task.tenantId, eid: task.endpointId },
            'could not disable a gone endpoint',
          ),
        );
    }
    await this.#deadLetter(task, outcome.error);
    this.#d.records.attempt(task, rec);
    this.#counter(task.tenantId).failed++;
    this.#epCounter(task.tenantId, task.endpointId).failed++;
    this.#d.counters.add(task.tenantId, 'failed', 1, task.endpointId);
    this.#finish(held);
  }

  async #deadLetter(task: DeliveryTask, lastError: string): Promise<void> {
    const entry = {
      eventId: task.eventId,
      endpointId: task.endpointId,
      attempts: task.attempt,
      lastError,
      failedAt: new Date().toISOString(),
    };
    for (let attempt = 0; ; attempt++) {
      try {
        await pushDlq(this.#d.redis, this.#d.keys, task, entry);
        dlqWritesTotal.inc();
        return;
      } catch (err) {
        this.#d.logger.warn({ err: (err as Error).message, attempt }, 'DLQ write failed; retrying');
        await new Promise((r) => setTimeout(r, Math.min(200 * 2 ** Math.min(attempt, 4), 3000)));
      }
    }
  }

  // --- stats -----------------------------------------------------------------------------------

  /**
   * This worker's per-tenant numbers (for keys.workerStats). queued/inFlight/creditsUsed are "now";
   * spilled/retrying/delivered/failed here are what this worker handed off since it started (the
   * tenant-wide "now"/total numbers come from the shared counters, see counters.ts).
   */
  snapshot(): Record<string, WorkerTenantStats> {
    const out: Record<string, WorkerTenantStats> = {};
    const tids = new Set([
      ...this.#counters.keys(),
      ...this.#held.keys(),
      ...this.credits.entries().map(([t]) => t),
    ]);
    for (const tid of tids) {
      const c = this.#counter(tid);
      const inFlight = this.#d.delivery.inFlight(tid);
      const endpoints: WorkerTenantStats['endpoints'] = {};
      for (const [eid, n] of Object.entries(c.endpoints))
        endpoints[eid] = { ...n, breaker: this.#d.delivery.breakerState(tid, eid) };
      out[tid] = {
        queued: Math.max(0, (this.#held.get(tid)?.size ?? 0) - inFlight),
        inFlight,
        creditsUsed: this.credits.used(tid),
        spilled: c.spilled,
        retrying: c.retrying,
        delivered: c.delivered,
        failed: c.failed,
        endpoints,
      };
    }
    return out;
  }

  close(): void {
    clearInterval(this.#refresh);
    this.#unsubscribe();
    this.#ungauge();
  }
}

export interface WorkerTenantStats {
  queued: number;
  inFlight: number;
  creditsUsed: number;
  spilled: number;
  retrying: number;
  delivered: number;
  failed: number;
  endpoints: Record<string, { delivered: number; failed: number; breaker: 'closed' | 'open' | 'half-open' }>;
}
