import { Queue } from 'bullmq';
import type { Keys } from './keys.ts';
import type { Logger } from './logger.ts';
import type { RedisClient } from './redis.ts';

/**
 * Options of every intake and retry job. A processing error (a Redis blip) is retried, because the
 * job is the durable owner of its events or tasks until they are handed on. A finished job is
 * removed at once: what it carried is in the history (docs/storage.md), and a kept intake job holds
 * up to 256 event bodies in Redis (1,000 kept batches of 1 KiB events were ~256 MB).
 */
export const JOB_OPTS = {
  removeOnComplete: true,
  removeOnFail: { count: 5000, age: 7 * 24 * 3600 },
  attempts: 1_000_000,
  backoff: { type: 'fixed', delay: 1000 },
} as const;

/**
 * Options of a job whose id derives from an operator's request (resend, recover, DLQ replay): its
 * finished record is kept an hour (at most 1,000), so the same chunk added again in that time is the
 * same job, not a second delivery.
 */
export const KEYED_JOB_OPTS = {
  ...JOB_OPTS,
  removeOnComplete: { count: 1000, age: 3600 },
} as const;

/**
 * A BullMQ producer on one of Spillway's queues (`keys.intakeQueue`, `keys.retryQueue`), under the
 * hash-tagged prefix so a queue's keys share one Redis Cluster slot. Connection errors are logged,
 * not thrown (ioredis reconnects).
 */
export function createQueue(redis: RedisClient, keys: Keys, name: string, logger?: Logger): Queue {
  const queue = new Queue(name, { connection: redis as never, prefix: keys.bullPrefix });
  if (logger) queue.on('error', (err) => logger.warn({ err, queue: name }, 'queue error'));
  return queue;
}
