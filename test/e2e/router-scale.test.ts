import {
  ConfigStore,
  createRouterServices,
  createRuntime,
  createWorker,
  type Runtime,
  type WorkerHandle,
} from '@spillway/router';
import { loadConfig } from '@spillway/shared';
import { afterEach, describe, expect, it } from 'vitest';
import { testEnv } from '../helpers/env.ts';
import {
  createSpillTopic,
  dropSpillTopic,
  makeEndpoint,
  makeEvent,
  makeTenant,
  ROUTER_TEST_ENV,
  startReceiver,
} from '../helpers/router-fixtures.ts';
import { waitFor } from '../helpers/wait.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

describe('several workers', () => {
  it('two workers share intake jobs and spill partitions; a third joins and leaves mid-stream; nothing is lost', {
    timeout: 120_000,
  }, async () => {
    const config = loadConfig(testEnv(ROUTER_TEST_ENV));
    // One runtime per worker: separate connections, worker ids and Kafka group members, as separate processes would have.
    const rts: Runtime[] = [createRuntime(config), createRuntime(config), createRuntime(config)];
    const [rt0, rt1, rt2] = rts as [Runtime, Runtime, Runtime];
    await createSpillTopic(rt0);
    const store = new ConfigStore(rt0.redis, rt0.keys);
    const services = createRouterServices(rt0);
    const r = await startReceiver(() => ({ status: 200, delayMs: 10 }));
    const workers: WorkerHandle[] = [];
    cleanup.push(async () => {
      for (const w of workers) await w.close();
      await services.close();
      await r.close();
      for (const rt of rts) await rt.close();
      await dropSpillTopic(config.kafkaBrokers, config.spillTopic);
    });
    const t = await makeTenant(store, { maxInFlight: 10, concurrency: 10 });
    await makeEndpoint(store, t.id, r.url);
    const w0 = await createWorker(rt0);
    const w1 = await createWorker(rt1);
    workers.push(w0, w1);

    const ids = Array.from({ length: 1500 }, (_, i) => `w${i}`);
    const submit = async (from: number, to: number) => {
      for (let i = from; i < to; i += 100)
        await Promise.all(
          ids.slice(i, Math.min(i + 100, to)).map((id) => services.intake.submit(makeEvent(t.id, id))),
        );
    };
    await submit(0, 500);
    const w2 = await createWorker(rt2);
    workers.push(w2);
    await submit(500, 1000);
    await waitFor(() => r.got.size >= 700, 'progress with three workers', 60_000);
    // The third leaves gracefully mid-stream: its jobs finish or hand their tasks off first.
    await w2.close();
    workers.splice(workers.indexOf(w2), 1);
    await submit(1000, 1500);
    await waitFor(() => ids.every((id) => r.got.has(id)), 'every id delivered', 90_000, 100);

    const delivered = [w0, w1, w2].map((w) => w.engine.snapshot()[t.id]?.delivered ?? 0);
    console.log(
      `delivered per worker: ${delivered.join(', ')}; duplicates ${[...r.got.values()].reduce((n, c) => n + c - 1, 0)}`,
    );
    // Both long-lived workers did part of the work.
    expect(delivered[0]).toBeGreaterThan(0);
    expect(delivered[1]).toBeGreaterThan(0);
    expect(delivered.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(1500);
    const stats = await waitFor(async () => {
      const st = await services.tenantStats(t.id, { detail: true });
      return st.workers?.length === 2 && st.credits.used === 0 ? st : undefined;
    }, 'stats from the two live workers');
    expect(stats!.delivered).toBeGreaterThan(0);
  });
});
