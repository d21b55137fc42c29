import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type { RedisTarget } from './config.ts';

export type RedisClient = Redis | Cluster;

/**
 * Connects to the configured Redis (standalone or cluster). `blocking` connections (BullMQ workers)
 * must not retry commands forever; BullMQ wants `maxRetriesPerRequest: null` on them.
 */
export function createRedis(target: RedisTarget, opts: RedisOptions = {}): RedisClient {
  const base: RedisOptions = { lazyConnect: false, enableAutoPipelining: false, ...opts };
  if (target.kind === 'cluster') return new Cluster(target.nodes, { redisOptions: base });
  return new Redis(target.url, base);
}
