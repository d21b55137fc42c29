import { createHash } from 'node:crypto';
import { createQueue, type DlqEntry, JOB_OPTS } from '@spillway/shared';
import type { Queue } from 'bullmq';
import { withCommands } from '../commands/index.ts';
import { ConfigStore } from '../config/store.ts';
import { createIntake } from '../intake/intake.ts';
import { readTenantCounters } from '../records/counters.ts';
import { readDlq, readEvent } from '../records/records.ts';
import { readWorkerStats } from '../records/stats.ts';
import type { RetryJobData } from '../retry/scheduler.ts';
import type { Runtime } from '../roles/runtime.ts';
import type { EndpointStats, EventView, RouterServices, TenantStats } from './services.ts';

/** Replay moves the DLQ in chunks: one retry job per chunk, then the chunk's entries are removed. */
const REPLAY_CHUNK = 200;

/** The router's services for the admin API and the ingest role (see services.ts). */
export function createRouterServices(rt: Runtime): RouterServices {
  const { keys } = rt;
  const redis = withCommands(rt.redis);
  const intake = createIntake(rt);
  const store = new ConfigStore(rt.redis, keys);
  let retryQueue: Queue | undefined;
  const retries = () => {
    retryQueue ??= createQueue(rt.redis, keys, keys.retryQueue, rt.logger);
    return retryQueue;
  };

  return {
    intake,

    getEvent(tenantId: string, eventId: string): Promise<EventView | undefined> {
      return readEvent(rt.redis, keys, tenantId, eventId);
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
        await retries().add('replay', data, { ...JOB_OPTS, jobId });
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
      const rank = { closed: 0, 'half-open': 1, open: 2 } as const;
      for (const w of workers) {
        const t = w.tenants[tenantId];
        if (!t) continue;
        sum.credits.used += t.creditsUsed;
        sum.queued += t.queued;
        sum.inFlight += t.inFlight;
        const wEps: EndpointStats[] = [];
        for (const [endpointId, n] of Object.entries(t.endpoints)) {
          wEps.push({ id: endpointId, ...n });
          const e = eps.get(endpointId);
          if (!e) continue;
          // The worst state any worker sees is the one to show.
          if (rank[n.breaker] > rank[e.breaker]) e.breaker = n.breaker;
        }
        perWorker.push({
          workerId: w.workerId,
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
      await retryQueue?.close().catch(() => {});
    },
  };
}
