import { parkedUntil } from '@spillway/router/testing';
import { createQueue, createRedis } from '@spillway/shared';
import { type Job, Worker } from 'bullmq';
import { afterEach, describe, expect, it } from 'vitest';
import { routerRuntime } from '../../../test/helpers/router-fixtures.ts';
import { waitFor } from '../../../test/helpers/wait.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

/** An engine's room as the worker sees it: closed until `open()`, then `n` at a time. */
function gate() {
  let open = false;
  let reserved = 0;
  const waiters: (() => void)[] = [];
  return {
    hasRoom: () => open,
    room: (n: number) => {
      if (open) {
        reserved += n;
        return Promise.resolve();
      }
      return new Promise<void>((r) =>
        waiters.push(() => {
          reserved += n;
          r();
        }),
      );
    },
    unreserve: (n: number) => {
      reserved -= n;
    },
    open: () => {
      open = true;
      for (const w of waiters.splice(0)) w();
    },
    get reserved() {
      return reserved;
    },
  };
}

describe('parkedUntil (a fetched job waiting for room)', () => {
  it('drops the parsed data while the job waits and reads the same data back from its hash once there is room; a job with room keeps its data untouched', async () => {
    const rt = routerRuntime();
    const queue = createQueue(rt.redis, rt.keys, rt.keys.intakeQueue, rt.logger);
    const engine = gate();
    const seen = new Map<string, Job>();
    const got = new Map<string, unknown>();
    const conn = createRedis(rt.config.redis, { maxRetriesPerRequest: null });
    const worker = new Worker(
      rt.keys.intakeQueue,
      async (job: Job<{ events: { i: string; b: string }[] }>) => {
        seen.set(job.id!, job);
        const data = await parkedUntil(rt.redis, engine, job, undefined, job.data.events.length);
        got.set(job.id!, data);
      },
      { connection: conn as never, prefix: rt.keys.bullPrefix, concurrency: 8 },
    );
    cleanup.push(async () => {
      await worker.close();
      conn.disconnect();
      await queue.close();
      await rt.close();
    });
    const data = (k: number) => ({
      v: 1,
      events: Array.from({ length: 50 }, (_, i) => ({ i: `evt_${k}_${i}`, b: 'x'.repeat(300) })),
    });
    for (let k = 0; k < 4; k++) await queue.add('batch', data(k), { jobId: `j${k}` });
    // No room: every fetched job waits, and none of them holds its events meanwhile.
    await waitFor(async () => seen.size === 4, 'the jobs to be fetched', 10_000);
    for (const job of seen.values()) expect(job.data).toBeUndefined();
    expect(got.size).toBe(0);
    // Room: each reads its data back, byte for byte, and reserves its room.
    engine.open();
    await waitFor(async () => got.size === 4, 'the jobs to run', 10_000);
    for (let k = 0; k < 4; k++) {
      expect(got.get(`j${k}`)).toEqual(data(k));
      expect(seen.get(`j${k}`)!.data).toEqual(data(k));
    }
    expect(engine.reserved).toBe(200);
    // With room at once the job is not parked: the object BullMQ parsed is the one returned.
    seen.clear();
    await queue.add('batch', data(9), { jobId: 'j9' });
    await waitFor(async () => got.has('j9'), 'the job to run', 10_000);
    expect(got.get('j9')).toBe(seen.get('j9')!.data);
  });
});
