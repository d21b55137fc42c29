import type { ConfigStore, createRouterServices, Runtime } from '@spillway/router';
import type { Tenant } from '@spillway/shared';
import { Cluster } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PrivateRedisCluster } from '../helpers/redis-server.ts';
import {
  makeEndpoint,
  makeEvent,
  makeTenant,
  type RouterHarness,
  routerHarness,
} from '../helpers/router-fixtures.ts';
import { waitFor } from '../helpers/wait.ts';

/**
 * Spillway against a real 3-master Redis Cluster (`redis+cluster://`): one group commit mixes
 * tenants whose keys live in different slots (the intake splits its pipelines per tenant), BullMQ
 * intake and retry queues run under the hash-tagged prefix, pause/spill/drain and stats work.
 */
let cluster: PrivateRedisCluster;
let h: RouterHarness;
let rt: Runtime;
let services: ReturnType<typeof createRouterServices>;
let store: ConfigStore;
const cleanup: (() => Promise<void>)[] = [];

beforeAll(async () => {
  cluster = new PrivateRedisCluster();
  await cluster.start();
  h = await routerHarness(cleanup, {
    SPILLWAY_REDIS_URL: cluster.url,
    SPILLWAY_RETRY_SCHEDULE: '100ms',
    // This cluster has masters only: no replica could confirm a commit (the lab's cluster has them).
    SPILLWAY_REDIS_WAIT_REPLICAS: '0',
  });
  ({ rt, services, store } = h);
  await h.worker();
}, 90_000);

afterAll(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
  await cluster?.stop();
});

describe('Redis Cluster', () => {
  it('intake, fan-out, retries, pause/spill/resume, dedup and stats work across slots', async () => {
    expect(rt.redis).toBeInstanceOf(Cluster);
    let failOnce = true;
    const r = await h.receiver();
    const flaky = await h.receiver(() => {
      if (failOnce) {
        failOnce = false;
        return { status: 503 };
      }
      return { status: 200 };
    });
    // Tenant ids chosen so their hash tags land on different cluster nodes.
    const tenants: Tenant[] = [];
    for (const id of ['acme', 'globex', 'initech', 'umbrella']) {
      const t = await makeTenant(store, {}, `${id}-${Date.now()}`);
      await makeEndpoint(store, t.id, r.url);
      tenants.push(t);
    }
    const slots = new Set(
      await Promise.all(tenants.map((t) => (rt.redis as Cluster).cluster('KEYSLOT', rt.keys.tenant(t.id)))),
    );
    expect(slots.size).toBe(tenants.length);
    const retrying = await makeTenant(store, {}, `flaky-${Date.now()}`);
    await makeEndpoint(store, retrying.id, flaky.url);
    const paused = await makeTenant(store, {}, `paused-${Date.now()}`);
    await makeEndpoint(store, paused.id, r.url);
    await store.updateTenant(paused.id, (t) => ({ ...t, status: 'paused' }));

    // One group commit carrying every tenant (different slots).
    const submits = [];
    for (const t of tenants)
      for (let i = 0; i < 5; i++) submits.push(services.intake.submit(makeEvent(t.id, `${t.id}-e${i}`)));
    submits.push(services.intake.submit(makeEvent(retrying.id, 'r0')));
    for (let i = 0; i < 5; i++) submits.push(services.intake.submit(makeEvent(paused.id, `p${i}`)));
    const answers = await Promise.all(submits);
    expect(answers.every((a) => !a.duplicate)).toBe(true);
    expect((await services.intake.submit(makeEvent(tenants[0]!.id, `${tenants[0]!.id}-e0`))).duplicate).toBe(
      true,
    );

    await waitFor(
      () => tenants.every((t) => [0, 1, 2, 3, 4].every((i) => r.got.has(`${t.id}-e${i}`))),
      'every active tenant delivered',
      20_000,
    );
    await waitFor(() => flaky.got.has('r0'), 'retried delivery (BullMQ retry job on the cluster)', 20_000);
    expect(flaky.requests).toBe(2);
    expect([0, 1, 2, 3, 4].some((i) => r.got.has(`p${i}`))).toBe(false);
    await waitFor(
      async () => (await services.tenantStats(paused.id)).spilled === 5,
      'paused backlog counted',
      10_000,
    );

    await store.updateTenant(paused.id, (t) => ({ ...t, status: 'active' }));
    await waitFor(
      () => [0, 1, 2, 3, 4].every((i) => r.got.has(`p${i}`)),
      'paused tenant delivered after resume',
      20_000,
    );
    const st = await waitFor(async () => {
      const s = await services.tenantStats(tenants[1]!.id);
      return s.delivered === 5 ? s : undefined;
    }, 'stats from the shared counters');
    expect(st).toMatchObject({ spilled: 0, retrying: 0, failed: 0 });
    expect((await services.getEvent(tenants[2]!.id, `${tenants[2]!.id}-e3`))?.deliveries[0]?.status).toBe(
      'delivered',
    );
    for (const [id, n] of r.got) expect(n, id).toBe(1);
  });
});
