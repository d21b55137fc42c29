import type { Endpoint, Logger, Tenant } from '@spillway/shared';
import type { ConfigCache, ConfigStore } from '../config/store.ts';
import { addGaugeSource } from '../metrics.ts';
import type { SpillProducer } from '../spill/producer.ts';
import { Credits } from './credits.ts';
import type { AttemptOutcome, DeliveryPort } from './deliver.ts';
import type { DeliveryTask } from './fanout.ts';
import { type Held, JobOwner, Lane, type Owner, TICK_MS } from './lanes.ts';
import type { LocalCounts, Settler } from './settle.ts';

/** A tenant's config as this worker last loaded it. */
export interface TenantView {
  tenant: Tenant | undefined;
  endpoints: Map<string, Endpoint>;
  at: number;
}

/** What the drainer gets back when it offers a spilled task: the task is in memory (or settling), or it cannot run now. */
export type Admission = 'admitted' | 'blocked';

export interface EngineDeps {
  /** SPILLWAY_WORKER_BODY_BUDGET: body bytes admitted tasks may hold; past it tasks wait or spill. */
  bodyBudgetBytes?: number;
  logger: Logger;
  cache: ConfigCache;
  /** Read past the cache for fan-out (freshView). */
  store?: ConfigStore;
  delivery: DeliveryPort;
  spill: SpillProducer;
  settler: Settler;
  /**
   * Jobs one tenant's tasks may keep active at once (default JOB_SHARE). A job completes only when
   * all of its tasks have left memory; past this share a tenant's further job tasks are spilled,
   * so however slow a tenant is, the other (claimSlots − share) job slots keep moving.
   */
  jobShare?: number;
  /**
   * Tasks a worker keeps in memory at most (held in lanes + waiting for a lane). Jobs are claimed
   * only below it (Engine#room), so a worker takes intake and retry work as fast as it delivers.
   */
  maxTasks?: number;
}

/** Config refresh period for tenants this worker holds: pause/resume acts within 1 s even if a pub/sub message is lost. */
const REFRESH_MS = 500;
/** Default Engine jobShare: an eighth of the worker's job slots (worker.ts CONCURRENCY = 256). */
export const JOB_SHARE = 32;
/** Default Engine maxTasks. */
const MAX_TASKS = 10_000;
/** The drainer is woken at most this often (every settle frees room; waking it per settle would spin it). */
const WAKE_MS = 5;

/**
 * The in-memory heart of a worker: one Lane per tenant (see lanes.ts). A task enters memory only
 * with a credit and room in its lane, goes to delivery when the lane has a free slot, and leaves
 * memory only through a durable hand-off — delivered, retry job added, DLQ entry written, or Kafka
 * ack'd — after which its owner (the job or spill offset it came from) is told (Owner#settle).
 *
 * Where each task goes, decided when it arrives and again whenever its lane changes:
 *   tenant deleted / endpoint deleted → discarded and counted (settles at once);
 *   endpoint disabled                 → its tenant's DLQ as `endpoint_disabled` (replayable);
 *   tenant or endpoint paused         → spill log;
 *   lane has room and a credit        → lane queue → delivery;
 *   lane full but delivering          → waits (job tasks only; the job is claimed because memory had room);
 *   lane full and stalled             → spill log.
 */
export class Engine {
  readonly credits: Credits;
  readonly #d: EngineDeps;
  readonly #views = new Map<string, TenantView>();
  readonly #lanes = new Map<string, Lane>();
  readonly #wakers = new Set<() => void>();
  readonly #roomWaiters: (() => void)[] = [];
  readonly #maxTasks: number;
  readonly #jobShare: number;
  readonly #timer: NodeJS.Timeout;
  readonly #unsubscribe: () => void;
  readonly #ungauge: () => void;
  #tasks = 0;
  #reserved = 0;
  #wakeTimer: NodeJS.Timeout | undefined;
  #lastRefresh = 0;
  #closed = false;

  constructor(deps: EngineDeps) {
    this.#d = deps;
    this.#maxTasks = deps.maxTasks ?? MAX_TASKS;
    this.#jobShare = deps.jobShare ?? JOB_SHARE;
    this.credits = new Credits(deps.bodyBudgetBytes);
    this.#ungauge = addGaugeSource({
      creditsUsed: () => this.credits.entries(),
      tasksInMemory: () => this.#tasks,
      bodyBytes: () => this.credits.bytes,
    });
    this.#unsubscribe = deps.cache.onChange((c) => void this.#reload(c.tenantId));
    this.#timer = setInterval(() => this.#tick(), TICK_MS);
    this.#timer.unref();
  }

  // --- config --------------------------------------------------------------------------------

  /** Loads (through the cache) the tenant and its endpoints. Throws when Redis cannot answer. */
  async view(tid: string): Promise<TenantView> {
    const [tenant, eps] = await Promise.all([this.#d.cache.tenant(tid), this.#d.cache.endpoints(tid)]);
    return this.#setView(tid, tenant, eps);
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
    return this.#setView(tid, tenant, eps);
  }

  #setView(tid: string, tenant: Tenant | undefined, eps: readonly Endpoint[]): TenantView {
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
      const lane = this.#lanes.get(tid);
      if (!v.tenant && !lane) this.#views.delete(tid);
      if (lane) this.#recheck(lane, v);
      this.#wake();
    } catch (err) {
      this.#d.logger.debug({ err, tenantId: tid }, 'config refresh failed');
    }
  }

  // --- wake-ups for the drainer ----------------------------------------------------------------

  /** Called (coalesced, at most every WAKE_MS) when room or credits free up or config changes. */
  onWake(fn: () => void): () => void {
    this.#wakers.add(fn);
    return () => this.#wakers.delete(fn);
  }

  #wake(): void {
    if (this.#wakeTimer) return;
    this.#wakeTimer = setTimeout(() => {
      this.#wakeTimer = undefined;
      for (const w of [...this.#wakers]) w();
    }, WAKE_MS);
  }

  /**
   * Resolves when this worker has room for `n` more tasks (tasks in memory plus those reserved by
   * jobs being taken apart stay below maxTasks; one job is always let in when nothing is held).
   * The room is reserved until the job's tasks are counted in `hold(tasks, n)` — or given back
   * with `unreserve(n)` if the job fails first — so jobs claimed at the same moment cannot all
   * pass one check together.
   */
  async room(n: number): Promise<void> {
    while (
      !this.#closed &&
      this.#tasks + this.#reserved > 0 &&
      this.#tasks + this.#reserved + n > this.#maxTasks
    )
      await new Promise<void>((r) => this.#roomWaiters.push(r));
    this.#reserved += n;
  }

  unreserve(n: number): void {
    this.#reserved -= n;
    this.#released(0);
  }

  /** Tasks in memory now (held in lanes and waiting for one). */
  get tasks(): number {
    return this.#tasks;
  }

  // --- entry points ----------------------------------------------------------------------------

  /**
   * From an intake or retry job: every task is admitted, waits for its lane, or is handed to its
   * next owner (spill log, DLQ, discard). Resolves when all of them have left memory through a
   * durable hand-off — then the job may complete.
   */
  async hold(tasks: readonly DeliveryTask[], reserved = 0): Promise<void> {
    const now = Date.now();
    try {
      for (const tid of new Set(tasks.map((t) => t.tenantId))) {
        const v = this.#views.get(tid);
        if (!v || now - v.at > REFRESH_MS) await this.view(tid);
      }
    } finally {
      this.#reserved -= reserved;
    }
    const owner = new JobOwner(tasks.length);
    for (const task of tasks) {
      const h: Held = { task, owner };
      this.#tasks++;
      if (this.#offer(h, 'job') === 'blocked') this.#spill(h);
    }
    await owner.done;
  }

  /**
   * From the drainer: the task is admitted (`owner.settle` is called once it has left memory), or
   * 'blocked' (nothing happened; the spill record keeps it). The tenant's view must be loaded.
   */
  tryAdmit(task: DeliveryTask, owner: Owner): Admission {
    const h: Held = { task, owner };
    this.#tasks++;
    const a = this.#offer(h, 'drain');
    if (a === 'blocked') this.#tasks--;
    return a;
  }

  /**
   * Places a task that just arrived. 'blocked' = it cannot run now and the caller keeps it (a job
   * spills it, the drainer leaves it in Kafka). Anything else = it is in memory or on its way out.
   */
  #offer(h: Held, from: 'job' | 'drain'): Admission {
    const { task } = h;
    const v = this.#views.get(task.tenantId);
    if (!v) return 'blocked';
    const fate = this.#fate(v, task);
    if (fate === 'blocked') return 'blocked';
    if (fate !== 'run') {
      this.#divert(h, fate);
      return 'admitted';
    }
    const tenant = v.tenant!;
    const lane = this.#lane(task.tenantId);
    const { concurrency, maxInFlight } = limits(tenant);
    // A stalled lane takes nothing more; the drainer also waits for the lane to want more (its
    // look-ahead), while a claimed job's task only needs a credit.
    if (lane.stalled(Date.now())) return 'blocked';
    if (from === 'drain' && !lane.room(concurrency, maxInFlight)) return 'blocked';
    if (!lane.pin(h.owner, this.#jobShare)) return 'blocked';
    if (!this.credits.tryTake(lane.tenantId, maxInFlight, task.event.body)) {
      lane.unpin(h.owner);
      return 'blocked';
    }
    lane.queue.push(h);
    this.#pump(lane);
    return 'admitted';
  }

  /** What must happen to a task given its tenant's current config. */
  #fate(
    v: TenantView,
    task: DeliveryTask,
  ): 'run' | 'blocked' | 'tenant_deleted' | 'endpoint_deleted' | 'endpoint_disabled' {
    if (!v.tenant) return 'tenant_deleted';
    const ep = v.endpoints.get(task.endpointId);
    if (!ep) return 'endpoint_deleted';
    if (ep.status === 'disabled') return 'endpoint_disabled';
    if (v.tenant.status === 'paused' || ep.status === 'paused') return 'blocked';
    // An open breaker refuses attempts: the task waits in the spill log, not in a retry job.
    if (this.#d.delivery.breakerState(task.tenantId, task.endpointId) === 'open') return 'blocked';
    return 'run';
  }

  #lane(tid: string): Lane {
    let lane = this.#lanes.get(tid);
    if (!lane) {
      lane = new Lane(tid);
      this.#lanes.set(tid, lane);
    }
    return lane;
  }

  /**
   * Starts deliveries while the lane has free slots. A task whose tenant or endpoint has a rate
   * first waits for its tokens outside the slots (in `rating`), so one endpoint's rate never holds
   * back the tenant's other endpoints (invariant 5); with its tokens it joins `ready`, which goes
   * before the queue.
   */
  #pump(lane: Lane): void {
    const v = this.#views.get(lane.tenantId);
    const tenant = v?.tenant;
    if (!tenant) return;
    const { concurrency } = limits(tenant);
    while (lane.active < concurrency && (lane.ready.length > 0 || lane.queue.length > 0)) {
      const fromReady = lane.ready.length > 0;
      const h = fromReady ? lane.ready.shift()! : lane.queue.shift()!;
      const ep = v.endpoints.get(h.task.endpointId);
      if (!ep) {
        // Deleted since it entered: recheck sorts it out.
        this.#out(lane, h);
        this.#divert(h, 'endpoint_deleted');
        continue;
      }
      if (!fromReady && this.#d.delivery.rated(tenant, ep)) {
        lane.rating++;
        void this.#rate(lane, h, tenant, ep);
        continue;
      }
      if (lane.active === 0) lane.lastProgress = Date.now();
      lane.active++;
      void this.#run(lane, h, tenant, ep, fromReady);
    }
  }

  async #rate(lane: Lane, h: Held, tenant: Tenant, ep: Endpoint): Promise<void> {
    const refused = await this.#d.delivery.rate(h.task, tenant, ep);
    lane.rating--;
    if (refused) {
      lane.active++;
      await this.#settle(lane, h, refused);
      return;
    }
    // Paused, disabled or deleted while it waited for tokens: it goes where recheck would send it.
    const v = this.#views.get(lane.tenantId);
    const fate = v ? this.#fate(v, h.task) : 'blocked';
    if (fate !== 'run') {
      this.#out(lane, h);
      this.#divert(h, fate === 'blocked' ? 'spill' : fate);
    } else lane.ready.push(h);
    this.#pump(lane);
  }

  async #run(lane: Lane, h: Held, tenant: Tenant, ep: Endpoint, rated: boolean): Promise<void> {
    let outcome: Awaited<ReturnType<DeliveryPort['dispatch']>>;
    try {
      outcome = await this.#d.delivery.dispatch(h.task, tenant, ep, { rated });
    } catch (err) {
      outcome = { kind: 'retry', error: `internal: ${(err as Error).message}` };
    }
    await this.#settle(lane, h, outcome);
  }

  /** The attempt is over: hand the task to its next owner, then free its slot, credit and job. */
  async #settle(lane: Lane, h: Held, outcome: AttemptOutcome): Promise<void> {
    try {
      await this.#d.settler.outcome(h.task, outcome);
    } finally {
      lane.active--;
      lane.completed(Date.now(), outcome.kind === 'delivered' ? outcome.durationMs : undefined);
      this.#out(lane, h);
      h.owner.settle();
      this.#released();
      this.#pump(lane);
    }
  }

  /** A task leaves its lane: its credit goes back and its job is one task less pinned. */
  #out(lane: Lane, h: Held): void {
    this.credits.release(lane.tenantId, h.task.event.body);
    lane.unpin(h.owner);
  }

  /** Bookkeeping after any task left memory: room for the job claimer and the drainer. */
  #released(n = 1): void {
    this.#tasks -= n;
    if (this.#tasks + this.#reserved < this.#maxTasks && this.#roomWaiters.length > 0)
      for (const r of this.#roomWaiters.splice(0)) r();
    if (n > 0) this.#wake();
  }

  /** Hands a task that cannot run here to its next owner; settles it with its current owner after. */
  #divert(h: Held, fate: 'tenant_deleted' | 'endpoint_deleted' | 'endpoint_disabled' | 'spill'): void {
    const done = () => {
      h.owner.settle();
      this.#released();
    };
    if (fate === 'spill') {
      this.#spill(h);
      return;
    }
    if (fate === 'endpoint_disabled') {
      void this.#d.settler.parked(h.task, 'endpoint_disabled').then(done);
      return;
    }
    this.#d.settler.discard(h.task, fate);
    done();
  }

  #spill(h: Held): void {
    this.#d.spill.spill(h.task).then(
      () => {
        // The Kafka record owns the task now: it is part of the tenant's backlog until the drainer resolves it.
        this.#d.settler.spilled(h.task.tenantId);
        h.owner.settle();
        this.#released();
      },
      // Only at shutdown (the producer closed): the task is never settled, so its job or offset
      // keeps it and hands it out again.
      (err) =>
        this.#d.logger.warn(
          { err, tenantId: h.task.tenantId, eventId: h.task.eventId },
          'spill refused; the task stays with its owner',
        ),
    );
  }

  /**
   * After a config change: tasks waiting in the lane (not on the wire) whose tenant or endpoint is
   * now paused, disabled or deleted leave it — to the spill log, the DLQ, or discarded.
   */
  #recheck(lane: Lane, v: TenantView): void {
    const leaving = (x: Held) => this.#fate(v, x.task) !== 'run';
    for (const h of [...lane.ready.take(leaving), ...lane.queue.take(leaving)]) {
      this.#out(lane, h);
      const fate = this.#fate(v, h.task);
      this.#divert(h, fate === 'blocked' || fate === 'run' ? 'spill' : fate);
    }
    this.#pump(lane);
  }

  /** Every TICK_MS: lane rates; stalled lanes give back what waits; a periodic config refresh. */
  #tick(): void {
    const now = Date.now();
    for (const lane of this.#lanes.values()) {
      lane.tick();
      if (lane.queue.length + lane.ready.length > 0 && lane.stalled(now)) this.#unload(lane);
      // An idle lane is forgotten after a while (its rate would be stale anyway).
      if (lane.size === 0 && now - lane.lastProgress > 10_000) this.#lanes.delete(lane.tenantId);
    }
    if (now - this.#lastRefresh >= REFRESH_MS) {
      this.#lastRefresh = now;
      for (const tid of this.#lanes.keys()) void this.#reload(tid);
    }
  }

  /** A stalled lane keeps only what is on the wire: its queue goes to the spill log. */
  #unload(lane: Lane): void {
    for (const h of [...lane.ready.take(() => true), ...lane.queue.take(() => true)]) {
      this.#out(lane, h);
      this.#spill(h);
    }
    this.#wake();
  }

  // --- stats -----------------------------------------------------------------------------------

  /**
   * This worker's per-tenant numbers (for keys.workerStats). queued/inFlight/creditsUsed are "now";
   * spilled/retrying/delivered/failed here are what this worker handed off since it started (the
   * tenant-wide "now"/total numbers come from the shared counters, see records/counters.ts).
   */
  snapshot(): Record<string, WorkerTenantStats> {
    const out: Record<string, WorkerTenantStats> = {};
    const s = this.#d.settler;
    const tids = new Set([...s.tenants(), ...this.#lanes.keys(), ...this.credits.entries().map(([t]) => t)]);
    for (const tid of tids) {
      const c: LocalCounts = s.local(tid);
      const lane = this.#lanes.get(tid);
      const endpoints: WorkerTenantStats['endpoints'] = {};
      for (const [eid, n] of Object.entries(c.endpoints))
        endpoints[eid] = { ...n, breaker: this.#d.delivery.breakerState(tid, eid) };
      out[tid] = {
        queued: lane ? lane.queue.length : 0,
        inFlight: this.#d.delivery.inFlight(tid),
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
    this.#closed = true;
    clearInterval(this.#timer);
    if (this.#wakeTimer) clearTimeout(this.#wakeTimer);
    for (const r of this.#roomWaiters.splice(0)) r();
    this.#unsubscribe();
    this.#ungauge();
  }
}

/** A tenant's delivery limits with the dispatcher's defaults filled in. */
function limits(t: Tenant): { concurrency: number; maxInFlight: number } {
  return { concurrency: t.limits.concurrency || 16, maxInFlight: t.limits.maxInFlight };
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
