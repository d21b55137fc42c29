import { createRedis, type RedisClient } from '@spillway/shared';
import { type Job, Queue, Worker } from 'bullmq';
import { ConfigCache, ConfigStore } from '../config/store.ts';
import { type FannedOutEvent, fanoutRecords, type IntakeJobData } from '../intake/intake.ts';
import { tasksDiscardedTotal } from '../metrics.ts';
import { TenantCounters } from '../records/counters.ts';
import { RecordWriter, recordMeta } from '../records/records.ts';
import { startStatsPublisher } from '../records/stats.ts';
import { type RetryJobData, RetryScheduler } from '../retry/scheduler.ts';
import type { RoleContext, RoleHandle } from '../roles/roles.ts';
import type { Runtime } from '../roles/runtime.ts';
import { Drainer } from '../spill/drainer.ts';
import { SpillProducer } from '../spill/producer.ts';
import { createDeliveryPort, type DeliveryPort } from './deliver.ts';
import { Engine } from './engine.ts';
import { type DeliveryTask, eventFromWire, fanOut, taskFromWire } from './fanout.ts';
import { Settler } from './settle.ts';

/*
 * Lock of an active intake/retry job (config.jobLockMs, SPILLWAY_JOB_LOCK). BullMQ renews it every
 * lockDuration/2 while the processor runs (i.e. while the job's tasks are in memory); after a
 * kill -9 another worker takes the job over within lockDuration + stalledInterval
 * (config.jobStalledIntervalMs).
 */
/**
 * Jobs processed at once per queue. Each waits for room (Engine#room) before it is taken apart, so
 * this bounds claimed-but-unstarted work, not delivery. A job stays active while any of its tasks
 * is in a lane; a stalled lane keeps only its requests on the wire (its tenant's concurrency), so a
 * hanging tenant holds at most that many of these slots and the rest keep other tenants moving.
 */
const CONCURRENCY = 256;

export interface WorkerHandle extends RoleHandle {
  readonly engine: Engine;
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
  const store = new ConfigStore(rt.redis, keys);
  const cache = new ConfigCache(store, { ttlMs: 500 });
  const sub = createRedis(config.redis, { maxRetriesPerRequest: null });
  sub.on('error', () => {});
  await cache.subscribe(sub, keys, logger);

  const delivery =
    opts.delivery ??
    (await createDeliveryPort({ targetAllowCidrs: config.targetAllowCidrs, redis: rt.redis, keys, logger }));
  const retryQueue = new Queue(keys.retryQueue, { connection: rt.redis as never, prefix: keys.bullPrefix });
  retryQueue.on('error', (err) => logger.warn({ err: err.message }, 'retry queue error'));
  const spill = new SpillProducer(rt.kafka, config.spillTopic, logger);
  const retries = new RetryScheduler(retryQueue, logger);
  const records = new RecordWriter(rt.redis, keys, logger);
  const counters = new TenantCounters(rt.redis, keys, logger);
  const settler = new Settler({
    redis: rt.redis,
    keys,
    logger,
    delivery,
    retries,
    records,
    counters,
    retryScheduleMs: config.retryScheduleMs,
    disableEndpoint: async (tid, eid, reason) => {
      await store.updateEndpoint(tid, eid, (ep) =>
        ep.status === 'disabled' ? ep : { ...ep, status: 'disabled', disabledReason: reason },
      );
    },
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

  const processIntake = async (job: Job<IntakeJobData>) => {
    const events = job.data.events;
    // Backpressure: a job is taken apart only while this worker has room for its tasks, so intake
    // work is claimed about as fast as it is delivered (see Engine#room).
    // The reservation counts events; fan-out may make more tasks of them, which the next claims see.
    await engine.room(events.length);
    let reserved = events.length;
    try {
      const tasks: DeliveryTask[] = [];
      const fanned: FannedOutEvent[] = [];
      // Fan out on config read after the events were accepted (one read per tenant per job), not on
      // this worker's possibly older view: "create an endpoint, then send" always reaches it.
      const tids = [...new Set(events.map((w) => w.t))];
      const views = new Map(
        await Promise.all(tids.map(async (tid) => [tid, await engine.freshView(tid)] as const)),
      );
      for (const w of events) {
        const v = views.get(w.t)!;
        if (!v.tenant) {
          // Accepted, then its tenant was deleted before fan-out: the one explicit discard.
          tasksDiscardedTotal.inc({ reason: 'tenant_deleted' });
          logger.warn({ tenantId: w.t, eventId: w.i }, 'event of a deleted tenant discarded');
          continue;
        }
        const ev = eventFromWire(w);
        const ts = fanOut(ev, [...v.endpoints.values()]);
        fanned.push({
          tenantId: ev.tenantId,
          eventId: ev.id,
          meta: recordMeta(ev.id, ev.type, ev.receivedAt),
          endpointIds: ts.map((t) => t.endpointId),
        });
        tasks.push(...ts);
      }
      // Pending records (and a lost promote) before any attempt can overwrite them: one Lua call per
      // tenant of the job. Best-effort: a failure only leaves the records incomplete.
      await fanoutRecords(rt.redis, keys, fanned, config.dedupWindowMs).catch((err) =>
        logger.warn({ err }, 'fan-out records not written'),
      );
      const held = engine.hold(tasks, reserved);
      reserved = 0;
      await held;
    } finally {
      if (reserved > 0) engine.unreserve(reserved);
    }
  };

  const processRetry = async (job: Job<RetryJobData>) => {
    const tasks = job.data.tasks.map(taskFromWire);
    await engine.room(tasks.length);
    await engine.hold(tasks, tasks.length);
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
  const intakeWorker = new Worker<IntakeJobData>(keys.intakeQueue, processIntake, workerOpts(intakeConn));
  const retryWorker = new Worker<RetryJobData>(keys.retryQueue, processRetry, workerOpts(retryConn));
  for (const w of [intakeWorker, retryWorker]) {
    w.on('error', (err) => logger.warn({ err: err.message }, 'bullmq worker error'));
    w.on('failed', (job, err) =>
      logger.warn({ jobId: job?.id, err: err.message }, 'job failed; it will be retried'),
    );
  }

  const drainer = new Drainer({
    kafka: rt.kafka,
    topic: config.spillTopic,
    groupId: keys.drainGroup,
    engine,
    producer: spill,
    logger,
    counters,
    sessionTimeoutMs: config.kafkaSessionTimeoutMs,
  });
  await drainer.start();
  const stopStats = startStatsPublisher(rt.redis, keys, rt.workerId, engine, logger);
  logger.info({ workerId: rt.workerId }, 'worker started');

  let closing: Promise<void> | undefined;
  return {
    name: 'worker',
    engine,
    drainer,
    spill,
    close() {
      closing ??= (async () => {
        await stopStats();
        await drainer.close();
        // Waits for active jobs: their tasks finish or are handed off (spilled) first.
        await Promise.all([intakeWorker.close(), retryWorker.close()]);
        await retries.close();
        await spill.close();
        await records.flush();
        await counters.close();
        engine.close();
        await delivery.close();
        await retryQueue.close().catch(() => {});
        await cache.close();
        intakeConn.disconnect();
        retryConn.disconnect();
      })();
      return closing;
    },
  };
}
