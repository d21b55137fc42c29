import type { Keys, Logger, RedisClient } from '@spillway/shared';
import type { Engine, WorkerTenantStats } from '../worker/engine.ts';

/** How long a worker's published numbers live without a refresh: a dead worker drops out of the sums. */
export const STATS_TTL_MS = 5000;
const PUBLISH_MS = 1000;

export interface PublishedStats {
  workerId: string;
  at: number;
  tenants: Record<string, WorkerTenantStats>;
}

/** Publishes the engine's per-tenant counters under keys.workerStats(id) every second, with a TTL. */
export function startStatsPublisher(
  redis: RedisClient,
  keys: Keys,
  workerId: string,
  engine: Engine,
  logger: Logger,
): () => Promise<void> {
  const publish = async () => {
    const now = Date.now();
    const body: PublishedStats = { workerId, at: now, tenants: engine.snapshot() };
    // Separate commands, not MULTI: the two keys live in different Redis Cluster slots.
    await Promise.all([
      redis.set(keys.workerStats(workerId), JSON.stringify(body), 'PX', STATS_TTL_MS),
      redis.zadd(keys.workers, now, workerId),
      redis.zremrangebyscore(keys.workers, '-inf', now - STATS_TTL_MS * 2),
    ]);
  };
  const timer = setInterval(() => {
    publish().catch((err: unknown) => logger.debug({ err }, 'stats publish failed'));
  }, PUBLISH_MS);
  timer.unref();
  void publish().catch(() => {});
  return async () => {
    clearInterval(timer);
    await Promise.all([redis.del(keys.workerStats(workerId)), redis.zrem(keys.workers, workerId)]).catch(
      () => {},
    );
  };
}

/** Reads every live worker's published numbers. */
export async function readWorkerStats(redis: RedisClient, keys: Keys): Promise<PublishedStats[]> {
  const ids = await redis.zrangebyscore(keys.workers, Date.now() - STATS_TTL_MS, '+inf');
  if (ids.length === 0) return [];
  const out: PublishedStats[] = [];
  for (const id of ids) {
    const raw = await redis.get(keys.workerStats(id));
    if (raw) out.push(JSON.parse(raw) as PublishedStats);
  }
  return out;
}
