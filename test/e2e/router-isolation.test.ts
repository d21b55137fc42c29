import { ConfigStore, createRouterServices, createWorker, type WorkerHandle } from '@spillway/router';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createSpillTopic,
  dropSpillTopic,
  makeEndpoint,
  makeEvent,
  makeTenant,
  type Receiver,
  routerRuntime,
  startReceiver,
} from '../helpers/router-fixtures.ts';
import { waitFor } from '../helpers/spawn.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

describe('invariant 5: a rate-limited task waits without holding a concurrency slot', () => {
  it("an endpoint's rate limit does not hold back the same tenant's other endpoint", async () => {
    const rt = routerRuntime();
    await createSpillTopic(rt);
    const store = new ConfigStore(rt.redis, rt.keys);
    const services = createRouterServices(rt);
    let worker: WorkerHandle | undefined;
    const receivers: Receiver[] = [];
    cleanup.push(async () => {
      await worker?.close();
      for (const r of receivers) await r.close();
      await services.close();
      await rt.close();
      await dropSpillTopic(rt.config.kafkaBrokers, rt.config.spillTopic);
    });
    const slow = await startReceiver();
    const fast = await startReceiver();
    receivers.push(slow, fast);
    // Concurrency 2: if waiting for the slow endpoint's tokens held a slot, the first two slow
    // tasks would block every fast one until tokens trickle in (0.5/s).
    const t = await makeTenant(store, { concurrency: 2, maxInFlight: 100 });
    const epSlow = await makeEndpoint(store, t.id, slow.url, {
      eventTypes: ['slow.*'],
      rate: { perSecond: 0.5, burst: 1 },
    });
    await makeEndpoint(store, t.id, fast.url, { eventTypes: ['fast.*'] });
    worker = await createWorker(rt);
    for (let i = 0; i < 6; i++) await services.intake.submit(makeEvent(t.id, `s${i}`, 'slow.thing'));
    for (let i = 0; i < 20; i++) await services.intake.submit(makeEvent(t.id, `f${i}`, 'fast.thing'));
    await waitFor(() => fast.got.size >= 20, 'all fast deliveries', 15_000);
    // The fast endpoint got everything while the slow one is still held to its rate.
    expect(slow.requests).toBeLessThanOrEqual(3);
    const ev = await services.getEvent(t.id, 's5');
    expect(ev?.deliveries.find((d) => d.endpointId === epSlow.id)?.status).toBe('pending');
  });
});
