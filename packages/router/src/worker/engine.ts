import { type BatchPolicy, type Endpoint, type Logger, retryForever, type Tenant } from '@spillway/shared';
import type { ConfigCache, ConfigStore } from '../config/store.ts';
import { addGaugeSource } from '../metrics.ts';
import type { SpillProducer } from '../spill/producer.ts';
import { Credits } from './credits.ts';
import type { AttemptOutcome, DeliveryPort } from './deliver.ts';
import { type DeliveryTask, staleTask } from './fanout.ts';
import { type Held, JobOwner, Lane, type Owner, TICK_MS } from './lanes.ts';
import type { LocalCounts, Settler } from './settle.ts';
import { Turns } from './turns.ts';

/** The ordered store as the engine sees it (ordering/store.ts). */
export interface OrderedIntake {
  /** A task of an ordered endpoint that did not come from it: to the tail of its key. */
  enqueue(task: DeliveryTask): Promise<void>;
  /** A leased task leaving memory unfinished: the store keeps it, looked at again after `delayMs`. */
  release(task: DeliveryTask, delayMs: number): Promise<void>;
}

/** A leased ordered task that cannot stay in memory is looked at again this much later. */
const ORDERED_RELEASE_MS = 1000;

/**
 * Where a task that cannot run here goes: discarded (its tenant or endpoint was deleted, or it was
 * made for an earlier incarnation of the endpoint's id: `stale`, counted as `endpoint_deleted`),
 * the DLQ (endpoint disabled), or the spill log.
 */
type Fate = 'tenant_deleted' | 'endpoint_deleted' | 'stale' | 'endpoint_disabled' | 'spill';

/** A tenant's config as this worker last loaded it. */
export interface TenantView {
  tenant: Tenant | undefined;
  endpoints: Map<string, Endpoint>;
  at: number;
  /**
   * The config revision read just before this view (keys.configRev), when it was read past the
   * cache (viewsAt); undefined for a view loaded through the cache, which fan-out never reuses.
   */
  rev?: string | undefined;
}

/** What the drainer gets back when it offers a spilled task: the task is in memory (or settling), or it cannot run now. */
export type Admission = 'admitted' | 'blocked';

export interface EngineDeps {
  /** SPILLWAY_WORKER_BODY_BUDGET: body bytes admitted tasks may hold; past it tasks wait or spill. */
  bodyBudgetBytes?: number;
  logger: Logger;
  cache: ConfigCache;
  /** Read past the cache for fan-out (freshViews). */
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
/**
 * Jobs are taken apart while the tasks in memory stay below about CLAIM_S of this worker's measured
 * delivery rate (at least CLAIM_MIN, at most maxTasks): a worker takes intake and retry work as
 * fast as it delivers it, so an ordinary preload waits in its jobs, not in the spill log.
 */
const CLAIM_S = 1;
const CLAIM_MIN = 2048;
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
 * A batched endpoint's tasks wait in its open batch, which takes one slot when it closes (#pump).
 * A task of a per-key ordered endpoint that did not come from the ordered store goes to the tail
 * of its key there; tasks the store leases (`task.seq`) go through the lanes with the store as
 * their owner, and "spill" means handing them back to it (ordering/store.ts).
 */
export class Engine {
  readonly credits: Credits;
  readonly #d: EngineDeps;
  readonly #views = new Map<string, TenantView>();
  readonly #lanes = new Map<string, Lane>();
  /** Failed attempts are settled one per event-loop turn (turns.ts). */
  readonly #failures = new Turns();
  readonly #wakers = new Set<() => void>();
  /** Jobs waiting for room (Engine#room), first come first served. */
  readonly #roomWaiters: { n: number; resolve: () => void }[] = [];
  readonly #maxTasks: number;
  readonly #jobShare: number;
  readonly #timer: NodeJS.Timeout;
  readonly #unsubscribe: () => void;
  readonly #ungauge: () => void;
  #tasks = 0;
  #reserved = 0;
  /**
   * Tasks held beyond their lanes' JOB_LOOKAHEAD_S of measured delivery, as of the last tick
   * (Lane#surplus): a slow tenant's backlog that its credits and job share let it keep. They count
   * against maxTasks, not against the claim, so they never make other tenants' jobs wait.
   */
  #surplus = 0;
  /** Deliveries per second of every lane together (sum of the lanes' EWMA rates). */
  #deliveryRate = 0;
  #wakeTimer: NodeJS.Timeout | undefined;
  #lastRefresh = 0;
  #closed = false;
  /** Shutting down: nothing new is dispatched, nothing new admitted (Engine#handOff). */
  #leaving = false;
  #ordered: OrderedIntake | undefined;

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
    this.#unsubscribe = deps.cache.onChange((c) => void this.#reload([c.tenantId]));
    this.#timer = setInterval(() => this.#tick(), TICK_MS);
    this.#timer.unref();
  }

  /** The worker's ordered store (it needs the engine, so it is set after). */
  setOrdered(o: OrderedIntake): void {
    this.#ordered = o;
  }

  // --- config --------------------------------------------------------------------------------

  /**
   * The tenant and its endpoints: a view read at a revision and confirmed current within the last
   * two refresh periods (#refresh, #reload) as it is, else loaded through the cache. Throws when
   * Redis cannot answer.
   */
  async view(tid: string): Promise<TenantView> {
    const v = this.#views.get(tid);
    if (v?.rev !== undefined && Date.now() - v.at <= 2 * REFRESH_MS) return v;
    const [tenant, eps] = await Promise.all([this.#d.cache.tenant(tid), this.#d.cache.endpoints(tid)]);
    return this.#setView(tid, tenant, eps);
  }

  /**
   * The views fan-out uses for events accepted at the given config revisions (tenant → the
   * revision its intake read, keys.configRev): an endpoint created just before an event was
   * accepted must get the event, even if this worker has not heard of the endpoint yet (pub/sub
   * lag, cache TTL). A view read at that same revision is used as it is; the other tenants are
   * read straight from Redis (past the cache), all in one round trip, and become the views (with
   * the revision read before them). Without a store (tests) the views come through the cache.
   * See docs/architecture.md, "Config revisions".
   */
  async viewsAt(revs: ReadonlyMap<string, string | undefined>): Promise<Map<string, TenantView>> {
    const views = new Map<string, TenantView>();
    const read: string[] = [];
    for (const [tid, rev] of revs) {
      const v = this.#views.get(tid);
      if (rev !== undefined && v?.rev === rev) views.set(tid, v);
      else read.push(tid);
    }
    if (read.length > 0) for (const [tid, v] of await this.#read(read)) views.set(tid, v);
    return views;
  }

  /**
   * Tenants' views read past the cache, all in one round trip, each with the revision read before
   * it; through the cache when there is no store (tests).
   */
  async #read(tids: readonly string[]): Promise<Map<string, TenantView>> {
    const views = new Map<string, TenantView>();
    const store = this.#d.store;
    if (!store) {
      for (const tid of tids) views.set(tid, await this.view(tid));
      return views;
    }
    for (const [tid, c] of await store.readTenantConfigs(tids))
      views.set(tid, this.#setView(tid, c.tenant, c.endpoints, c.rev));
    return views;
  }

  #setView(tid: string, tenant: Tenant | undefined, eps: readonly Endpoint[], rev?: string): TenantView {
    const v: TenantView = { tenant, endpoints: new Map(eps.map((e) => [e.id, e])), at: Date.now(), rev };
    this.#views.set(tid, v);
    return v;
  }

  viewNow(tid: string): TenantView | undefined {
    return this.#views.get(tid);
  }

  /**
   * Every REFRESH_MS for the tenants this worker holds, so pause/resume acts even if a change
   * message is lost: one round trip reads their config revisions; a view at its tenant's revision
   * is current (confirmed: `at` moves) and its lane is looked at again as after a reload (breakers
   * that half-opened meanwhile), the others are read again, together.
   */
  async #refresh(tids: readonly string[]): Promise<void> {
    const store = this.#d.store;
    let stale = tids;
    if (store && tids.length > 0) {
      try {
        const revs = await store.readRevisions(tids);
        const now = Date.now();
        stale = tids.filter((tid) => {
          const v = this.#views.get(tid);
          const rev = revs.get(tid);
          if (rev === undefined || v?.rev !== rev) return true;
          v.at = now;
          const lane = this.#lanes.get(tid);
          if (lane) this.#recheck(lane, v);
          return false;
        });
        if (stale.length < tids.length) this.#wake();
      } catch (err) {
        this.#d.logger.debug({ err }, 'config revision check failed');
      }
    }
    void this.#reload(stale);
  }

  /** Tenants whose config changed (or may have): read again, in one round trip, and their lanes looked at again. */
  async #reload(tids: readonly string[]): Promise<void> {
    if (tids.length === 0) return;
    try {
      for (const [tid, v] of await this.#read(tids)) {
        const lane = this.#lanes.get(tid);
        if (!v.tenant && !lane) this.#views.delete(tid);
        if (lane) this.#recheck(lane, v);
      }
      this.#wake();
    } catch (err) {
      this.#d.logger.debug({ err, tenantIds: tids }, 'config refresh failed');
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
  room(n: number): Promise<void> {
    if (this.#roomWaiters.length === 0 && this.#fits(n)) {
      this.#reserved += n;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => this.#roomWaiters.push({ n, resolve }));
  }

  /**
   * Whether `n` more tasks fit now (one job is always let in when nothing is held): within
   * maxTasks in all, and within the claim leaving out what slow lanes hold beyond their lookahead.
   * Without that exception one tenant whose credits exceed the claim (a slow but answering receiver,
   * a backlog of thousands) filled it, and every other tenant's jobs queued behind its own for as
   * long as its backlog took to deliver (router-isolation.test.ts, the rated tenant).
   */
  #fits(n: number): boolean {
    if (this.#closed) return true;
    const held = this.#tasks + this.#reserved;
    if (held === 0) return true;
    // The surplus is the last tick's: never let it count for more than is held now.
    return held + n <= this.#maxTasks && Math.max(0, held - this.#surplus) + n <= this.#claimLimit();
  }

  /** Lets waiting jobs in, in the order they came, while they fit. */
  #admitWaiters(): void {
    const q = this.#roomWaiters;
    while (q.length > 0 && this.#fits(q[0]!.n)) {
      const w = q.shift()!;
      this.#reserved += w.n;
      w.resolve();
    }
  }

  /** Tasks in memory (plus reserved, less the surplus) below which another job is taken apart; #fits caps all at maxTasks. */
  #claimLimit(): number {
    return Math.max(CLAIM_MIN, Math.ceil(this.#deliveryRate * CLAIM_S));
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
  tryAdmit(task: DeliveryTask, owner: Owner, from: 'drain' | 'ordered' = 'drain'): Admission {
    const h: Held = { task, owner };
    this.#tasks++;
    const a = this.#offer(h, from);
    if (a === 'blocked') this.#tasks--;
    return a;
  }

  /**
   * Places a task that just arrived. 'blocked' = it cannot run now and the caller keeps it (a job
   * spills it, the drainer leaves it in Kafka). Anything else = it is in memory or on its way out.
   */
  #offer(h: Held, from: 'job' | 'drain' | 'ordered'): Admission {
    const { task } = h;
    const v = this.#views.get(task.tenantId);
    if (!v || this.#leaving) return 'blocked';
    const fate = this.#fate(v, task);
    if (
      (runs(fate) || fate === 'blocked') &&
      task.seq === undefined &&
      this.#ordered &&
      task.event.orderingKey !== undefined &&
      v.endpoints.get(task.endpointId)?.ordering === 'per-key'
    ) {
      // A task of a per-key ordered endpoint that did not come from the ordered store (a replay
      // from the DLQ, or one from before the endpoint was ordered): it joins the tail of its key.
      const ordered = this.#ordered;
      void retryForever(
        () => ordered.enqueue(task),
        (err) => void this.#d.logger.warn({ err, eventId: task.eventId }, 'ordered enqueue failed; retrying'),
      ).then(() => {
        h.owner.settle();
        this.#released();
      });
      return 'admitted';
    }
    if (fate === 'blocked') return 'blocked';
    if (!runs(fate)) {
      this.#divert(h, fate);
      return 'admitted';
    }
    const tenant = v.tenant!;
    const lane = this.#lane(task.tenantId);
    const { concurrency, maxInFlight } = limits(tenant);
    // A stalled lane takes nothing more; the drainer also waits for the lane to want more (its
    // look-ahead), while a claimed job's task only needs a credit, as does a leased ordered task
    // (one per key at most, and every key must be able to move).
    if (lane.stalled(Date.now())) return 'blocked';
    if (from === 'drain' && !lane.room(concurrency, maxInFlight)) return 'blocked';
    if (!lane.takesJobTask(h.owner, concurrency, maxInFlight, this.#jobShare)) return 'blocked';
    if (!this.credits.tryTake(lane.tenantId, maxInFlight, task.event.body)) {
      lane.unpin(h.owner);
      return 'blocked';
    }
    // The first task of a half-open endpoint is its probe; #fate holds back the rest until it leaves.
    if (fate === 'probe') lane.probes.set(task.endpointId, task);
    lane.queue.push(h);
    this.#pump(lane);
    return 'admitted';
  }

  /**
   * What must happen to a task given its tenant's current config. 'probe' runs as 'run' does; it
   * says the endpoint's breaker is half-open and no task is its probe yet (this one may become it).
   */
  #fate(v: TenantView, task: DeliveryTask): TaskFate {
    if (!v.tenant) return 'tenant_deleted';
    const ep = v.endpoints.get(task.endpointId);
    if (!ep) return 'endpoint_deleted';
    // Made for an earlier incarnation of the id (deleted and created again): not the new owner's.
    if (staleTask(task, ep)) return 'stale';
    if (ep.status === 'disabled') return 'endpoint_disabled';
    if (v.tenant.status === 'paused' || ep.status === 'paused') return 'blocked';
    // An open breaker refuses attempts: the task waits in the spill log, not in a retry job. A
    // half-open one lets one probe through: the lane takes one task for it and no more, since every
    // other attempt would be refused at once and put on the retry schedule (a round trip through
    // Redis per task, and the lane's credits, for nothing).
    const breaker = this.#d.delivery.breakerState(task.tenantId, task.endpointId);
    if (breaker === 'open') return 'blocked';
    if (breaker === 'half-open') {
      const probe = this.#lanes.get(task.tenantId)?.probes.get(task.endpointId);
      if (probe === undefined) return 'probe';
      if (probe !== task) return 'blocked';
    }
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
   * before the queue. A task of a batched endpoint (its `batch` policy) joins the endpoint's open
   * batch instead of taking a slot; a batch takes one slot when it closes — full (maxEvents or
   * maxBytes), or lingerMs after it opened (at once, with lingerMs 0, when nothing else waits) —
   * and closed batches go first.
   */
  #pump(lane: Lane): void {
    const v = this.#views.get(lane.tenantId);
    const tenant = v?.tenant;
    if (!tenant || this.#leaving) return;
    const { concurrency } = limits(tenant);
    for (;;) {
      while (lane.active < concurrency) {
        const due = lane.takeDue();
        if (due) {
          this.#startBatch(lane, due, tenant, v);
          continue;
        }
        if (lane.ready.length === 0 && lane.queue.length === 0) break;
        const fromReady = lane.ready.length > 0;
        const h = fromReady ? lane.ready.shift()! : lane.queue.shift()!;
        const ep = v.endpoints.get(h.task.endpointId);
        if (!ep || staleTask(h.task, ep)) {
          // Deleted (or deleted and created again) since it entered: recheck sorts it out.
          this.#out(lane, h);
          this.#divert(h, ep ? 'stale' : 'endpoint_deleted');
          continue;
        }
        if (!fromReady && this.#d.delivery.rated(tenant, ep)) {
          lane.rating++;
          void this.#rate(lane, h, tenant, ep);
          continue;
        }
        if (ep.batch) {
          this.#batch(lane, h, ep.batch);
          continue;
        }
        if (lane.active === 0) lane.lastProgress = Date.now();
        lane.active++;
        void this.#run(lane, h, tenant, ep, fromReady);
      }
      if (lane.active >= concurrency || lane.batches.size === 0) return;
      // A slot is free and nothing else waits: batches that do not linger go as they are.
      let closed = false;
      for (const [id, b] of lane.batches)
        if (b.lingerMs === 0) {
          lane.closeBatch(id);
          closed = true;
        }
      if (!closed) return;
    }
  }

  /** Puts a task of a batched endpoint in its open batch; closes the batch when it is full. */
  #batch(lane: Lane, h: Held, policy: BatchPolicy): void {
    const id = h.task.endpointId;
    const bytes = this.#d.delivery.batchElementBytes(h.task.event);
    const open = lane.batches.get(id);
    // One more would pass maxBytes: the open batch goes as it is (a single larger event goes alone).
    if (open && open.bytes + bytes > policy.maxBytes) lane.closeBatch(id);
    const b = lane.addToBatch(h, bytes, policy.lingerMs);
    if (b.items.length >= policy.maxEvents || b.bytes >= policy.maxBytes) {
      lane.closeBatch(id);
      return;
    }
    if (b.items.length === 1 && policy.lingerMs > 0) {
      // One timer per batch, not per task.
      b.timer = setTimeout(() => {
        if (lane.batches.get(id) !== b) return;
        lane.closeBatch(id);
        this.#pump(lane);
      }, policy.lingerMs);
      b.timer.unref();
    }
  }

  #startBatch(lane: Lane, hs: Held[], tenant: Tenant, v: TenantView): void {
    const ep = v.endpoints.get(hs[0]!.task.endpointId);
    // Tasks of a deleted endpoint, or of an earlier incarnation of its id (deleted and created
    // again since they joined the batch), leave it: discarded and counted.
    const run: Held[] = [];
    for (const h of hs) {
      if (ep && !staleTask(h.task, ep)) run.push(h);
      else {
        this.#out(lane, h);
        this.#divert(h, ep ? 'stale' : 'endpoint_deleted');
      }
    }
    if (!ep || run.length === 0) return;
    if (lane.active === 0) lane.lastProgress = Date.now();
    lane.active++;
    void this.#runBatch(lane, run, tenant, ep);
  }

  /**
   * One request for the batch's tasks (their rate tokens were taken one per task before they
   * joined it). Every task gets the batch's outcome: all delivered, all retried (the same delay
   * for the same attempt number, so they come back together), or all dead-lettered, each with its
   * own attempt count; then each gives back its credit and is settled with its own owner.
   */
  async #runBatch(lane: Lane, hs: Held[], tenant: Tenant, ep: Endpoint): Promise<void> {
    const tasks = hs.map((h) => h.task);
    let outcome: AttemptOutcome;
    try {
      outcome = await this.#d.delivery.dispatchBatch(tasks, tenant, ep, { rated: true });
    } catch (err) {
      outcome = { kind: 'retry', error: `internal: ${(err as Error).message}` };
    }
    try {
      await this.#d.settler.outcomes(tasks, outcome, ep);
    } finally {
      lane.active--;
      lane.completed(Date.now(), outcome.kind === 'delivered' ? outcome.durationMs : undefined, hs.length);
      for (const h of hs) {
        this.#out(lane, h);
        h.owner.settle();
      }
      this.#released(hs.length);
      this.#pump(lane);
    }
  }

  async #rate(lane: Lane, h: Held, tenant: Tenant, ep: Endpoint): Promise<void> {
    const refused = await this.#d.delivery.rate(h.task, tenant, ep);
    lane.rating--;
    if (refused) {
      lane.active++;
      await this.#settle(lane, h, refused, ep);
      return;
    }
    // Paused, disabled or deleted while it waited for tokens: it goes where recheck would send it.
    const v = this.#views.get(lane.tenantId);
    const fate = v && !this.#leaving ? this.#fate(v, h.task) : 'blocked';
    if (!runs(fate)) {
      this.#out(lane, h);
      this.#divert(h, fate === 'blocked' ? 'spill' : fate);
    } else lane.ready.push(h);
    this.#pump(lane);
  }

  /**
   * One task's attempt, then its settling. Chained rather than async (and `#settle` returns no
   * promise when the settler has none): each async layer was a promise and a microtask turn per
   * delivery (docs/benchmarks/profile.md). A rejection of the chain is what an await would have
   * thrown: a bug, not an outcome.
   */
  #run(lane: Lane, h: Held, tenant: Tenant, ep: Endpoint, rated: boolean): Promise<void> {
    let attempt: Promise<AttemptOutcome>;
    try {
      attempt = this.#d.delivery.dispatch(h.task, tenant, ep, { rated });
    } catch (err) {
      attempt = Promise.reject(err);
    }
    return attempt.then(
      (outcome) =>
        outcome.kind === 'delivered'
          ? this.#settle(lane, h, outcome, ep)
          : // A failure waits its turn: a burst of them (an endpoint's requests timing out together)
            // is settled one per event-loop turn, with other tenants' I/O between (turns.ts).
            this.#failures.next().then(() => this.#settle(lane, h, outcome, ep)),
      (err: unknown) =>
        this.#settle(lane, h, { kind: 'retry', error: `internal: ${(err as Error).message}` }, ep),
    );
  }

  /**
   * The attempt is over: hand the task to its next owner, then free its slot, credit and job (after
   * the hand-off, whether it succeeded or threw). Undefined when the hand-off was synchronous.
   */
  #settle(lane: Lane, h: Held, outcome: AttemptOutcome, ep: Endpoint): Promise<void> | undefined {
    let handOff: Promise<void> | undefined;
    try {
      handOff = this.#d.settler.outcome(h.task, outcome, ep);
    } catch (err) {
      this.#settled(lane, h, outcome);
      throw err;
    }
    if (handOff === undefined) {
      this.#settled(lane, h, outcome);
      return undefined;
    }
    return handOff.finally(() => this.#settled(lane, h, outcome));
  }

  #settled(lane: Lane, h: Held, outcome: AttemptOutcome): void {
    lane.active--;
    // A deferral (breaker open) was no attempt: counted in the rate it would make a lane whose
    // endpoint refuses everything look fast, and the drainer would feed it at that rate.
    lane.completed(
      Date.now(),
      outcome.kind === 'delivered' ? outcome.durationMs : undefined,
      outcome.kind === 'deferred' ? 0 : 1,
    );
    this.#out(lane, h);
    h.owner.settle();
    this.#released();
    this.#pump(lane);
  }

  /** A task leaves its lane: its credit goes back and its job is one task less pinned. */
  #out(lane: Lane, h: Held): void {
    this.credits.release(lane.tenantId, h.task.event.body);
    lane.unpin(h.owner);
    if (lane.probes.size > 0 && lane.probes.get(h.task.endpointId) === h.task)
      lane.probes.delete(h.task.endpointId);
  }

  /** Bookkeeping after any task left memory: room for the job claimer and the drainer. */
  #released(n = 1): void {
    this.#tasks -= n;
    if (this.#roomWaiters.length > 0) this.#admitWaiters();
    if (n > 0) this.#wake();
  }

  /** Hands a task that cannot run here to its next owner; settles it with its current owner after. */
  #divert(h: Held, fate: Fate): void {
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
    if (fate === 'stale') this.#d.settler.discard(h.task, 'endpoint_deleted', true);
    else this.#d.settler.discard(h.task, fate);
    done();
  }

  #spill(h: Held): void {
    if (h.task.seq !== undefined && this.#ordered) {
      // A leased ordered task: its owner is the ordered store, which keeps it (and its key waits).
      void this.#ordered.release(h.task, ORDERED_RELEASE_MS).then(() => {
        h.owner.settle();
        this.#released();
      });
      return;
    }
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
    // Each task's fate is judged once: the one that picked it is where it goes.
    const fates = new Map<Held, Exclude<TaskFate, 'run' | 'probe'>>();
    const leaving = (x: Held) => {
      const fate = this.#fate(v, x.task);
      if (runs(fate)) return false;
      fates.set(x, fate);
      return true;
    };
    for (const h of lane.takeWaiting(leaving)) {
      this.#out(lane, h);
      const fate = fates.get(h)!;
      this.#divert(h, fate === 'blocked' ? 'spill' : fate);
    }
    this.#pump(lane);
  }

  /** Every TICK_MS: lane rates; stalled lanes give back what waits; a periodic config refresh. */
  #tick(): void {
    const now = Date.now();
    let rate = 0;
    let surplus = 0;
    for (const lane of this.#lanes.values()) {
      lane.tick();
      rate += lane.rate;
      if (lane.waiting > 0 && lane.stalled(now)) this.#unload(lane);
      const tenant = this.#views.get(lane.tenantId)?.tenant;
      if (tenant) {
        const { concurrency, maxInFlight } = limits(tenant);
        surplus += lane.surplus(concurrency, maxInFlight);
      }
      // An idle lane is forgotten after a while (its rate would be stale anyway).
      if (lane.size === 0 && now - lane.lastProgress > 10_000) this.#lanes.delete(lane.tenantId);
    }
    // A higher rate or a larger surplus may make room for a job that waits.
    const roomier = rate > this.#deliveryRate || surplus > this.#surplus;
    this.#deliveryRate = rate;
    this.#surplus = surplus;
    if (roomier) this.#released(0);
    if (now - this.#lastRefresh >= REFRESH_MS) {
      this.#lastRefresh = now;
      void this.#refresh([...this.#lanes.keys()]);
    }
  }

  /** A stalled lane keeps only what is on the wire: its queue goes to the spill log. */
  #unload(lane: Lane): void {
    for (const h of lane.takeWaiting(() => true)) {
      this.#out(lane, h);
      this.#spill(h);
    }
    this.#wake();
  }

  /**
   * Graceful shutdown, step one (SIGTERM, a preStop hook): admit and dispatch nothing more, and give
   * every task that is not on the wire to the spill log (tasks waiting for rate tokens follow as
   * they get them). Resolves when only requests on the wire are left, or after `graceMs`; the
   * caller then closes delivery, which ends those with a retry. Every task thus reaches its next
   * durable owner and the jobs and offsets that held them can complete.
   */
  async handOff(graceMs: number): Promise<void> {
    this.#leaving = true;
    for (const lane of this.#lanes.values()) this.#unload(lane);
    const until = Date.now() + graceMs;
    const onWire = () => [...this.#lanes.values()].reduce((n, l) => n + l.active + l.rating, 0);
    while (onWire() > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
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
        queued: lane ? lane.queued : 0,
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
    this.#admitWaiters();
    this.#unsubscribe();
    this.#ungauge();
  }
}

/** What Engine#fate says of a task: run now ('probe': as its half-open endpoint's probe), wait, or leave. */
type TaskFate = 'run' | 'probe' | 'blocked' | Exclude<Fate, 'spill'>;

/** Whether a task's fate lets it run now ('probe': as its half-open endpoint's probe). */
function runs(fate: TaskFate): fate is 'run' | 'probe' {
  return fate === 'run' || fate === 'probe';
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
