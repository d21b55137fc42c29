import { ConfigStore, createRouterServices } from '@spillway/router';
import { describe, expect, it } from 'vitest';
import {
  createSpillTopic,
  makeEndpoint,
  makeEvent,
  makeTenant,
  startReceiver,
  workerProcessFixture,
} from '../helpers/router-fixtures.ts';
import type { Spawned } from '../helpers/spawn.ts';
import { waitFor } from '../helpers/wait.ts';

/**
 * Invariant 1 and 2 across kill -9: a worker child process is SIGKILLed twice mid-stream — first
 * while intake jobs hold tasks in memory, then while the drainer holds spilled tasks — and
 * restarted; every accepted event id must reach the endpoint (duplicates allowed, counted).
 */
describe('no loss under kill -9 of a worker', () => {
  const { rt, startWorker } = workerProcessFixture();
  const kill9 = async (c: Spawned) => {
    c.child.kill('SIGKILL');
    await c.exited;
  };

  it('2,000 events, two SIGKILLs at different points, every accepted id delivered', {
    timeout: 180_000,
  }, async () => {
    await createSpillTopic(rt);
    const store = new ConfigStore(rt.redis, rt.keys, rt.secrets);
    const services = createRouterServices(rt);
    const r = await startReceiver(() => ({ status: 200, delayMs: 15 }));
    try {
      const t = await makeTenant(store, { maxInFlight: 20, concurrency: 20 });
      await makeEndpoint(store, t.id, r.url);
      let w = await startWorker();

      const accepted: string[] = [];
      const submit = async (from: number, to: number) => {
        for (let i = from; i < to; i += 50) {
          const ids = Array.from({ length: Math.min(50, to - i) }, (_, k) => `k${i + k}`);
          const res = await Promise.allSettled(ids.map((id) => services.intake.submit(makeEvent(t.id, id))));
          res.forEach((x, k) => {
            if (x.status === 'fulfilled') accepted.push(ids[k]!);
          });
        }
      };

      // Point 1: intake jobs are active and their tasks are in the worker's memory.
      await submit(0, 1000);
      await waitFor(() => r.got.size >= 100, 'first deliveries', 30_000);
      await kill9(w);
      const atKill1 = r.got.size;
      w = await startWorker();
      await submit(1000, 2000);

      // Point 2: the backlog is in Kafka and the drainer is bringing it back (tasks spilled, admitted).
      await waitFor(
        async () => {
          const st = await services.tenantStats(t.id, { detail: true });
          return r.got.size > atKill1 + 200 && st.spilled > 0 && st.inFlight > 0;
        },
        'the drainer holding spilled tasks',
        60_000,
      );
      expect(r.got.size).toBeLessThan(accepted.length);
      await kill9(w);
      w = await startWorker();

      await waitFor(() => accepted.every((id) => r.got.has(id)), 'every accepted id delivered', 120_000, 200);
      const duplicates = [...r.got.values()].reduce((n, c) => n + (c - 1), 0);
      console.log(
        `kill -9: accepted ${accepted.length}, delivered ${r.got.size} distinct, ${duplicates} duplicates`,
      );
      expect(accepted.length).toBe(2000);
      expect(r.got.size).toBe(2000);
      w.child.kill('SIGTERM');
      await w.exited;
    } finally {
      await services.close();
      await r.close();
    }
  });
});
