import { createQueue, createRedis, type RedisClient } from '@spillway/shared';
import type { Job } from 'bullmq';
import { bornAt } from '../config/incarnation.ts';
import { ConfigCache, ConfigStore } from '../config/store.ts';
import { ensureHistoryTopics, historyTopics } from '../history/topics.ts';
import { HistoryWriter } from '../history/writer.ts';
import { type IntakeJobData, promoteDedup, type SeenId } from '../intake/intake.ts';
import { endpointsDisabledTotal, tasksDiscardedTotal } from '../metrics.ts';
import { Notifier } from '../notify/notifier.ts';
import { type OrderedFanout, OrderedStore } from '../ordering/store.ts';
import { TenantCounters } from '../records/counters.ts';
import { DlqArchiver } from '../records/dlq-archive.ts';
import { fingerprint } from '../records/fingerprints.ts';
import { firstError } from '../records/pipeline.ts';
import { startStatsPublisher } from '../records/stats.ts';
import { type RetryJobData, RetryScheduler } from '../retry/scheduler.ts';
import type { RoleContext, RoleHandle } from '../roles/roles.ts';
import type { Runtime } from '../roles/runtime.ts';
import { SpillActivity } from '../spill/activity.ts';
import { Drainer } from '../spill/drainer.ts';
import { SpillProducer } from '../spill/producer.ts';
import { createDeliveryPort, type DeliveryPort, signingImplementation } from './deliver.ts';
import { Engine } from './engine.ts';
import { type DeliveryTask, eventFromWire, fanOut, taskFromWire } from './fanout.ts';
import { FetchGate, GatedWorker } from './fetch-gate.ts';
import { Settler } from './settle.ts';

/*
 * Lock of an active intake/retry job (config.jobLockMs, SPILLWAY_JOB_LOCK). BullMQ renews it every
 * lockDuration/2 while the processor runs (i.e. while the job's tasks are in memory); after a
 * kill -9 another worker takes the job over within lockDuration + stalledInterval
 * (config.jobStalledIntervalMs).
 */
/**
 * Jobs processed at once per queue. Each waits for room (Engine#room) before it is taken apart, and
 * only FETCH_AHEAD of them may wait so (fetch-gate.ts); the rest of the slots are for jobs whose
 * tasks are in lanes. A job stays active while any of its tasks
 * is in a lane; a stalled lane keeps only its requests on the wire (its tenant's concurrency), so a
 * hanging tenant holds at most that many of these slots and the rest keep other tenants moving.
 */
const CONCURRENCY = 256;

/** On close, how long requests already on the wire may take before they are ended (and retried). */
const SHUTDOWN_GRACE_MS = 5000;

export interface WorkerHandle extends RoleHandle {
  readonly engine: Engine;
  readonly history: HistoryWriter;
  readonly dlqArchiver: DlqArchiver;
  readonly drainer: Drainer;
  readonly spill: SpillProducer;
}

/** Worker role: intake jobs → fan-out → credit queues → delivery; spill drainer; retries. */
export async function startWorker({ rt }: RoleContext): Promise<RoleHandle> {
  return createWorker(rt);
}

export async function createWorker(
  rt: Runtime,
  opts: { delivery?: DeliveryPort } = {},
): Promise<WorkerHandle> {
  const { config, keys, logger } = rt;
  const store = new ConfigStore(rt.redis, keys, rt.secrets);
  const cache = new ConfigCache(store, { ttlMs: 500 });
  const sub = createRedis(config.redis, { maxRetriesPerRequest: null });
  sub.on('error', () => {});
  await cache.subscribe(sub, keys, logger);

  const delivery =
    opts.delivery ??
    (await createDeliveryPort({
      targetAllowCidrs: config.targetAllowCidrs,
      breakerResetMs: config.breakerResetMs,
      redis: rt.redis,
      keys,
      logger,
    }));
  const retryQueue = createQueue(rt.redis, keys, keys.retryQueue, logger);
  const activity = new SpillActivity(rt.redis, keys, logger);
  const spill = new SpillProducer(rt.kafka, config.spillTopic, logger, activity);
  const retries = new RetryScheduler(retryQueue, logger);
  const notifier = new Notifier({ redis: rt.redis, keys, logger, target: config.notify });
  /** Disables an endpoint the router gave up on (410 Gone, or sustained failure); tells the operator. */
  const disable = async (
    tid: string,
    eid: string,
    reason: 'gone' | 'failing',
    data: Record<string, unknown> = {},
  ) => {
    let changed = false;
    await store.updateEndpoint(tid, eid, (ep) => {
      if (ep.status === 'disabled') return ep;
      changed = true;
      return { ...ep, status: 'disabled', disabledReason: reason, disabledAt: Date.now() };
    });
    // A new run of failures starts after the operator resumes it.
    await rt.redis.hdel(keys.endpointHealth(tid), eid);
    if (!changed) return;
    endpointsDisabledTotal.inc({ reason });
    void notifier.notify({
      kind: 'endpoint.disabled',
      tenantId: tid,
      subject: eid,
      data: { endpointId: eid, reason, ...data },
    });
  };
  const topics = historyTopics(config);
  const partitions = await ensureHistoryTopics(rt.kafka, config);
  const history = new HistoryWriter({
    kafka: rt.kafka,
    redis: rt.redis,
    keys,
    logger,
    topics,
    partitions,
    retention: config.recordRetention,
    ...(config.endpointDisableAfterMs === undefined ? {} : { disableAfterMs: config.endpointDisableAfterMs }),
    onSustainedFailure: (tid, eid, since) =>
      void disable(tid, eid, 'failing', { failingSince: new Date(since).toISOString() }).catch((err) =>
        logger.warn({ err, tenantId: tid, endpointId: eid }, 'could not disable a failing endpoint'),
      ),
  });
  const dlqArchiver = new DlqArchiver({
    redis: rt.redis,
    keys,
    logger,
    kafka: rt.kafka,
    topic: topics.dlq,
    partitions: partitions.dlq,
    cap: config.dlqCap,
    ttlMs: config.dlqTtlMs,
  });
  const counters = new TenantCounters(rt.redis, keys, logger);
  const settler = new Settler({
    redis: rt.redis,
    keys,
    logger,
    delivery,
    retries,
    history,
    dlqArchiver: {
      cap: config.dlqCap,
      makeRoom: (tid) => dlqArchiver.makeRoom(tid),
      pushed: (tid, length) => {
        dlqArchiver.pushed(tid, length);
        if (length >= config.dlqAlert)
          void notifier.notify({
            kind: 'dlq.threshold',
            tenantId: tid,
            subject: tid,
            data: { dlq: length, threshold: config.dlqAlert },
          });
      },
    },
    counters,
    retryScheduleMs: config.retryScheduleMs,
    disableEndpoint: (tid, eid) => disable(tid, eid, 'gone'),
  });
  const engine = new Engine({
    bodyBudgetBytes: config.workerBodyBudget,
    logger,
    cache,
    store,
    delivery,
    spill,
    settler,
  });

  const intakeGate = new FetchGate();
  const retryGate = new FetchGate();

  const processIntake = async (job: Job<IntakeJobData>) => {
    // Backpressure: a job is taken apart only while this worker has room for its tasks, so intake
    // work is claimed about as fast as it is delivered (see Engine#room), and only while its event
    // log keeps up (HistoryWriter#room: the records waiting for a send stay bounded).
    // The reservation counts events; fan-out may make more tasks of them, which the next claims see.
    const n = job.data.events.length;
    const { events } = job.data;
    await history.room();
    await engine.room(n);
    intakeGate.admitted(job);
    let reserved = n;
    try {
      const tasks: DeliveryTask[] = [];
      const keyed: OrderedFanout[] = [];
      // Fan out on the config as of the events' acceptance or newer, never on an older view:
      // "create an endpoint, then send" always reaches it. The job carries each tenant's config
      // revision as its intake read it (`c`); a view read at that revision is used as it is, and
      // only the other tenants are read, in one round trip (docs/architecture.md, "Config
      // revisions"). A job from an intake before revisions carries none: every tenant is read.
      const revs = new Map<string, string | undefined>();
      for (const w of events) if (!revs.has(w.t)) revs.set(w.t, job.data.c?.[w.t]);
      const reading = engine.viewsAt(revs);
      const fps = events.map((w) => fingerprint(w.i));
      // A lost intake promote is redone: one Lua call per tenant of the job (the ids are appended
      // only if not seen yet). Best-effort, it owns nothing (a failure is logged), so nothing waits
      // for it: it goes after the config read on the wire. A job its intake marked promoted
      // (`progress` 1, `commands/job-promoted-1.lua`) skips it: at one endpoint per event the redo
      // was ~3 µs of worker and ~3 µs of Redis CPU per delivery (docs/benchmarks/profile.md).
      if (job.progress !== 1)
        void promoteDedup(
          rt.redis,
          keys,
          // Deduplicated on its body (GitHub, Shopify: `d`), not on its id.
          events.map(
            (w, i): SeenId => ({ tenantId: w.t, fp: w.d === undefined ? fps[i]! : fingerprint(w.d) }),
          ),
          config.dedupWindowMs,
          true,
        ).then(
          (res) => {
            const err = firstError(res);
            if (err) logger.warn({ err }, 'dedup promote at fan-out failed');
          },
          (err: unknown) => logger.warn({ err }, 'dedup promote at fan-out failed'),
        );
      const views = await reading;
      events.forEach((w, i) => {
        const v = views.get(w.t)!;
        if (!v.tenant || w.r < bornAt(v.tenant)) {
          // Accepted, then its tenant was deleted before fan-out (and maybe created again under
          // its id: the event is the earlier owner's, not the new one's): the one explicit discard.
          tasksDiscardedTotal.inc({ reason: 'tenant_deleted' });
          logger.warn({ tenantId: w.t, eventId: w.i }, 'event of a deleted tenant discarded');
          return;
        }
        const ev = eventFromWire(w);
        const ts = fanOut(ev, [...v.endpoints.values()]);
        // The event log: batched, one produce per flush; nothing here waits for it.
        history.event(
          ev,
          ts.map((t) => t.endpointId),
          fps[i]!,
        );
        if (ev.orderingKey === undefined) tasks.push(...ts);
        else {
          // Every keyed event goes through the ordered store (its order is kept there); its tasks
          // for per-key ordered endpoints stay there, the others are delivered as usual.
          const inOrder = ts.filter((t) => v.endpoints.get(t.endpointId)?.ordering === 'per-key');
          const wake = [...v.endpoints.values()].some((e) => e.ordering === 'per-key');
          keyed.push({ tenantId: ev.tenantId, eventId: ev.id, key: ev.orderingKey, tasks: inOrder, wake });
          for (const t of ts) if (!inOrder.includes(t)) tasks.push(t);
        }
      });
      // Taken apart: the tasks hold what they need of the events. The job stays active until its
      // last task has left memory (a second under load, longer under a backlog) and keeps nothing
      // parsed meanwhile; a retried job is read again from its hash.
      job.data = undefined as unknown as IntakeJobData;
      // The ordered store owns its tasks once this returns (the job still holds them until then).
      await ordered.fanout(keyed);
      const held = engine.hold(tasks, reserved);
      reserved = 0;
      await held;
    } finally {
      if (reserved > 0) engine.unreserve(reserved);
    }
  };

  const processRetry = async (job: Job<RetryJobData>) => {
    const n = job.data.tasks.length;
    await engine.room(n);
    retryGate.admitted(job);
    const tasks = job.data.tasks.map(taskFromWire);
    job.data = undefined as unknown as RetryJobData;
    await engine.hold(tasks, n);
    // The job lets go of its tasks (they were delivered, spilled, re-scheduled or dead-lettered).
    const perTenant = new Map<string, number>();
    for (const t of tasks) perTenant.set(t.tenantId, (perTenant.get(t.tenantId) ?? 0) + 1);
    for (const [tid, n] of perTenant) counters.add(tid, 'retrying', -n);
  };

  const workerOpts = (conn: RedisClient) => ({
    connection: conn as never,
    prefix: keys.bullPrefix,
    concurrency: CONCURRENCY,
    lockDuration: config.jobLockMs,
    stalledInterval: config.jobStalledIntervalMs,
    // A job that stalled (its worker died) is our durable owner: never fail it for stalling.
    maxStalledCount: 1_000_000,
  });
  const intakeConn = createRedis(config.redis, { maxRetriesPerRequest: null });
  const retryConn = createRedis(config.redis, { maxRetriesPerRequest: null });
  for (const c of [intakeConn, retryConn]) c.on('error', () => {});
  const intakeWorker = new GatedWorker<IntakeJobData>(
    keys.intakeQueue,
    processIntake,
    workerOpts(intakeConn),
    intakeGate,
  );
  const retryWorker = new GatedWorker<RetryJobData>(
    keys.retryQueue,
    processRetry,
    workerOpts(retryConn),
    retryGate,
  );
  for (const w of [intakeWorker, retryWorker]) {
    w.on('error', (err) => logger.warn({ err }, 'bullmq worker error'));
    w.on('failed', (job, err) => logger.warn({ jobId: job?.id, err }, 'job failed; it will be retried'));
  }

  const ordered = new OrderedStore({
    redis: rt.redis,
    keys,
    logger,
    engine,
    workerId: rt.workerId,
    timeoutOf: (tid, eid) => engine.viewNow(tid)?.endpoints.get(eid)?.timeoutMs,
  });
  engine.setOrdered(ordered);
  settler.setOrdered(ordered);
  ordered.start();

  const drainer = new Drainer({
    kafka: rt.kafka,
    topic: config.spillTopic,
    groupId: keys.drainGroup,
    engine,
    producer: spill,
    activity,
    logger,
    counters,
    sessionTimeoutMs: config.kafkaSessionTimeoutMs,
  });
  await drainer.start();
  const stopStats = startStatsPublisher(rt.redis, keys, rt.workerId, engine, logger);
  logger.info({ workerId: rt.workerId, signing: signingImplementation }, 'worker started');

  let closing: Promise<void> | undefined;
  return {
    name: 'worker',
    engine,
    drainer,
    spill,
    history,
    dlqArchiver,
    close() {
      closing ??= (async () => {
        await stopStats();
        // Lease no more ordered tasks (those in memory go back to the store with the rest below).
        ordered.close();
        // Claim nothing more; tasks not on the wire go to the spill log; requests on the wire get
        // SHUTDOWN_GRACE_MS to finish, then closing delivery ends them with a retry (job added).
        await Promise.all([intakeWorker.pause(true), retryWorker.pause(true)]).catch(() => {});
        await engine.handOff(SHUTDOWN_GRACE_MS);
        await delivery.close();
        await drainer.close();
        // Active jobs complete as their last tasks reach their next owner.
        await Promise.all([intakeWorker.close(), retryWorker.close()]);
        await retries.close();
        await spill.close();
        await history.close();
        await dlqArchiver.close();
        await counters.close();
        engine.close();
        await retryQueue.close().catch(() => {});
        await cache.close();
        intakeConn.disconnect();
        retryConn.disconnect();
      })();
      return closing;
    },
  };
}
