import { createHash } from 'node:crypto';
import { createQueue, type DlqEntry, KEYED_JOB_OPTS, sleep } from '@spillway/shared';
import type { Queue } from 'bullmq';
import { withCommands } from '../commands/index.ts';
import { bornAt } from '../config/incarnation.ts';
import { ConfigStore } from '../config/store.ts';
import { HistoryReader } from '../history/reader.ts';
import { historyTopics } from '../history/topics.ts';
import { createIntake } from '../intake/intake.ts';
import { dlqPurgedTotal } from '../metrics.ts';
import { readTenantCounters } from '../records/counters.ts';
import { type DlqItem, pageDlq, readDlq } from '../records/records.ts';
import { type PublishedStats, readWorkerStats } from '../records/stats.ts';
import type { RetryJobData } from '../retry/scheduler.ts';
import type { Runtime } from '../roles/runtime.ts';
import type { WorkerTenantStats } from '../worker/engine.ts';
import type { EndpointStats, EventView, RouterServices, TenantStats } from './services.ts';

/** Replay moves the DLQ in chunks: one retry job per chunk, then the chunk's entries are removed. */
const REPLAY_CHUNK = 200;

const entryOf = (item: DlqItem): DlqEntry => ({
  eventId: item.eventId,
  endpointId: item.endpointId,
  attempts: item.attempts,
  lastError: item.lastError,
  failedAt: item.failedAt,
});

type Breaker = EndpointStats['breaker'];
const BREAKER_RANK: Record<Breaker, number> = { closed: 0, 'half-open': 1, open: 2 };

/** How long GET of an event not (yet) in the event log waits for it before answering 404. */
const EVENT_LOG_WAIT_MS = 1000;

/** The worse of two breaker states: where workers disagree, the worst any of them sees is shown. */
export function worseBreaker(a: Breaker, b: Breaker): Breaker {
  return BREAKER_RANK[b] > BREAKER_RANK[a] ? b : a;
}

/**
 * Adds the live workers' load of one tenant (credits used, queued, in flight) into `into` and
 * returns each worker's own numbers for it (workers that hold nothing of the tenant are left out).
 */
export function addWorkerLoad(
  into: Pick<TenantStats, 'credits' | 'queued' | 'inFlight'>,
  workers: readonly PublishedStats[],
  tenantId: string,
): { workerId: string; t: WorkerTenantStats }[] {
  const out: { workerId: string; t: WorkerTenantStats }[] = [];
  for (const w of workers) {
    const t = w.tenants[tenantId];
    if (!t) continue;
    into.credits.used += t.creditsUsed;
    into.queued += t.queued;
    into.inFlight += t.inFlight;
    out.push({ workerId: w.workerId, t });
  }
  return out;
}

/** The router's services for the admin API and the ingest role (see services.ts). */
export function createRouterServices(rt: Runtime): RouterServices {
  const { keys } = rt;
  const redis = withCommands(rt.redis);
  const intake = createIntake(rt);
  const store = new ConfigStore(rt.redis, keys, rt.secrets);
  const history = new HistoryReader({
    redis: rt.redis,
    keys,
    kafka: rt.kafka,
    topics: historyTopics(rt.config),
    retentionMs: rt.config.recordRetention.ms,
    // History from before a tenant or endpoint was created is an earlier owner's of its id.
    bornAt: async (tenantId, endpointId) => {
      const [tenant, ep] = await Promise.all([
        store.getTenant(tenantId),
        endpointId === undefined ? undefined : store.getEndpoint(tenantId, endpointId),
      ]);
      if (!tenant) return undefined;
      return ep ? Math.max(bornAt(tenant), bornAt(ep)) : bornAt(tenant);
    },
  });
  let retryQueue: Queue | undefined;
  const retries = () => {
    retryQueue ??= createQueue(rt.redis, keys, keys.retryQueue, rt.logger);
    return retryQueue;
  };

  return {
    intake,
    history,

    async getEvent(tenantId: string, eventId: string): Promise<EventView | undefined> {
      // An event is in the log once a worker fanned it out, tens of milliseconds after its 202:
      // a GET right after the 202 waits that long rather than answering 404 (docs/contract-changes.md).
      const until = Date.now() + EVENT_LOG_WAIT_MS;
      for (;;) {
        const ev = await history.eventView(tenantId, eventId);
        if (ev || Date.now() >= until) return ev;
        await sleep(100);
      }
    },

    async listDlq(tenantId, opts = {}): Promise<DlqEntry[]> {
      const items = await readDlq(rt.redis, keys, tenantId, opts);
      return items.map(({ item }) => ({
        eventId: item.eventId,
        endpointId: item.endpointId,
        attempts: item.attempts,
        lastError: item.lastError,
        failedAt: item.failedAt,
      }));
    },

    async pageDlq(tenantId, opts) {
      const [page, total] = await Promise.all([
        pageDlq(rt.redis, keys, tenantId, opts),
        opts.endpointId
          ? readDlq(rt.redis, keys, tenantId, { endpointId: opts.endpointId, limit: 10_000_000 }).then(
              (l) => l.length,
            )
          : rt.redis.llen(keys.dlq(tenantId)),
      ]);
      return {
        data: page.items.map(entryOf),
        ...(page.next !== undefined ? { next: String(page.next) } : {}),
        total,
      };
    },

    /** An operator's explicit discard: counted and logged (invariant 1). */
    async purgeDlq(tenantId, opts = {}): Promise<number> {
      let n = 0;
      if (!opts.endpointId) {
        const res = await rt.redis.multi().llen(keys.dlq(tenantId)).del(keys.dlq(tenantId)).exec();
        n = Number(res?.[0]?.[1] ?? 0);
      } else
        for (;;) {
          const chunk = await readDlq(rt.redis, keys, tenantId, { endpointId: opts.endpointId, limit: 500 });
          if (chunk.length === 0) break;
          n += Number(await redis.dlqRemove(keys.dlq(tenantId), ...chunk.map((c) => c.raw)));
        }
      dlqPurgedTotal.inc(n);
      rt.logger.info({ tenantId, endpointId: opts.endpointId, purged: n }, 'dead letters purged');
      return n;
    },

    /**
     * Each chunk becomes ONE retry job (delay 0, attempt 1 = a fresh schedule) whose id is derived
     * from the chunk's contents, and only after Redis has it are the entries removed. A crash
     * between the two leaves the entries in place; replaying again re-adds the same job id, which
     * BullMQ ignores while that job still exists — so no loss, and no double within the job's retention.
     */
    async replayDlq(tenantId, opts = {}): Promise<number> {
      const total = (
        await readDlq(rt.redis, keys, tenantId, {
          ...(opts.endpointId ? { endpointId: opts.endpointId } : {}),
          limit: 1_000_000,
        })
      ).length;
      let done = 0;
      opts.onProgress?.(0, total);
      while (done < total) {
        const chunk = await readDlq(rt.redis, keys, tenantId, {
          ...(opts.endpointId ? { endpointId: opts.endpointId } : {}),
          limit: REPLAY_CHUNK,
        });
        if (chunk.length === 0) break;
        const data: RetryJobData = { v: 1, tasks: chunk.map(({ item }) => ({ ...item.task, a: 1 })) };
        const jobId = `replay-${createHash('sha1')
          .update(tenantId)
          .update(chunk.map((c) => c.raw).join('\n'))
          .digest('hex')}`;
        await retries().add('replay', data, { ...KEYED_JOB_OPTS, jobId });
        const removed = Number(await redis.dlqRemove(keys.dlq(tenantId), ...chunk.map((c) => c.raw)));
        // The job owns these tasks now (the worker counts them down when it finishes the job).
        await rt.redis.hincrby(keys.tenantCounters(tenantId), 'retrying', removed).catch(() => {});
        done += chunk.length;
        opts.onProgress?.(Math.min(done, total), total);
      }
      return done;
    },

    async tenantStats(tenantId, opts = {}): Promise<TenantStats> {
      const tenant = await store.requireTenant(tenantId);
      const endpoints = await store.listEndpoints(tenantId);
      const [workers, dlq, shared] = await Promise.all([
        readWorkerStats(rt.redis, keys),
        rt.redis.llen(keys.dlq(tenantId)),
        readTenantCounters(rt.redis, keys, tenantId),
      ]);
      const sum: TenantStats = {
        status: tenant.status,
        credits: { used: 0, limit: tenant.limits.maxInFlight },
        queued: 0,
        inFlight: 0,
        // "Now" (backlog in Kafka / waiting in retry jobs) and totals from the shared counters, so
        // they neither reset when a worker restarts nor drop out when one dies.
        spilled: shared.spilled,
        retrying: shared.retrying,
        dlq,
        delivered: shared.delivered,
        failed: shared.failed,
        endpoints: [],
      };
      const eps = new Map<string, EndpointStats>(
        endpoints.map((e) => [
          e.id,
          {
            id: e.id,
            breaker: 'closed',
            delivered: shared.endpoints[e.id]?.delivered ?? 0,
            failed: shared.endpoints[e.id]?.failed ?? 0,
          },
        ]),
      );
      const perWorker: NonNullable<TenantStats['workers']> = [];
      for (const { workerId, t } of addWorkerLoad(sum, workers, tenantId)) {
        const wEps: EndpointStats[] = [];
        for (const [endpointId, n] of Object.entries(t.endpoints)) {
          wEps.push({ id: endpointId, ...n });
          const e = eps.get(endpointId);
          if (e) e.breaker = worseBreaker(e.breaker, n.breaker);
        }
        perWorker.push({
          workerId,
          credits: { used: t.creditsUsed, limit: tenant.limits.maxInFlight },
          queued: t.queued,
          inFlight: t.inFlight,
          spilled: t.spilled,
          retrying: t.retrying,
          delivered: t.delivered,
          failed: t.failed,
          endpoints: wEps,
        });
      }
      sum.endpoints = [...eps.values()];
      if (opts.detail) sum.workers = perWorker;
      return sum;
    },

    async close(): Promise<void> {
      await intake.close();
      await history.close();
      await retryQueue?.close().catch(() => {});
    },
  };
}
