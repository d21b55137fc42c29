import type { RedisClient } from '@spillway/shared';
import type { Job } from 'bullmq';
import type { Engine } from './engine.ts';

/**
 * Waits for `before` (if any), then for room for `n` tasks (Engine#room, reserved once it
 * resolves), and returns the job's data. A job that has to wait does not keep its parsed data
 * meanwhile: `job.data` is dropped and read again from the job's hash once there is room.
 *
 * BullMQ fetches a job into every free slot (worker.ts CONCURRENCY), and a fetched job arrives
 * parsed. While a worker has no room (a paused tenant's backlog going to the spill log at 10,000
 * events/s, or a full claim), up to 256 jobs of up to 256 events each sat parsed in memory, only
 * waiting: tens of MiB of the 1 M backlog's peak RSS (docs/benchmarks/profile.md). The job's lock
 * keeps its hash as it was; the read costs one HGET per job that waited.
 */
export async function parkedUntil<T>(
  redis: RedisClient,
  engine: Pick<Engine, 'hasRoom' | 'room' | 'unreserve'>,
  job: Job<T>,
  before: Promise<void> | undefined,
  n: number,
): Promise<T> {
  if (before === undefined && engine.hasRoom(n)) {
    await engine.room(n);
    return job.data;
  }
  job.data = undefined as T;
  await before;
  await engine.room(n);
  try {
    const raw = await redis.hget(`${job.queueQualifiedName}:${job.id}`, 'data');
    if (raw === null) throw new Error(`job ${job.id} of ${job.queueName} has no data`);
    job.data = JSON.parse(raw) as T;
    return job.data;
  } catch (err) {
    engine.unreserve(n);
    throw err;
  }
}
