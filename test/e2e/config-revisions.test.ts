/**
 * Config revisions (docs/architecture.md, "Config revisions"): every write of a tenant or its
 * endpoints gives the tenant a new revision, the intake stamps each job with the revision it read at
 * acceptance, and a worker fans out on its own view only when that view was read at the same
 * revision. So an endpoint created just before an event always gets it, and a tenant whose config
 * did not change is not read again for every job.
 */
import { ConfigStore } from '@spillway/router';
import { afterEach, describe, expect, it } from 'vitest';
import { testEnv } from '../helpers/env.ts';
import { monitorRedis } from '../helpers/redis-monitor.ts';
import { makeEndpoint, makeEvent, makeTenant, routerHarness } from '../helpers/router-fixtures.ts';
import { waitFor } from '../helpers/wait.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

describe('config revisions', () => {
  it('an endpoint created just before an event gets it, though no change message reached the worker', async () => {
    const s = await routerHarness(cleanup);
    /** `<endpoint>|<event id>` per delivery. */
    const got: string[] = [];
    const r = await s.receiver((req, body) => {
      const ep = new URL(req.url ?? '/', 'http://x').searchParams.get('ep');
      got.push(`${ep}|${(JSON.parse(body.toString()) as { id: string }).id}`);
      return { status: 200 };
    });
    const t = await makeTenant(s.store);
    await makeEndpoint(s.store, t.id, `${r.url}?ep=e0`, { id: 'e0' });
    await s.worker();
    await s.services.intake.submit(makeEvent(t.id, 'warm'));
    await waitFor(() => got.length === 1, 'the first delivery (the worker now holds a view of the tenant)');

    // Endpoints created through a store whose change messages go where no cache listens: the
    // worker's view is never invalidated, only the revision says it is old.
    const quiet = new ConfigStore(
      s.rt.redis,
      { ...s.rt.keys, changes: `${s.rt.keys.changes}:unheard` },
      s.rt.secrets,
    );
    const N = 8;
    for (let i = 1; i <= N; i++) {
      await makeEndpoint(quiet, t.id, `${r.url}?ep=e${i}`, { id: `e${i}` });
      await s.services.intake.submit(makeEvent(t.id, `after-e${i}`));
    }
    const want: string[] = [];
    for (let i = 1; i <= N; i++) for (let j = 0; j <= i; j++) want.push(`e${j}|after-e${i}`);
    // (An endpoint created after an event was accepted may get it too: fan-out reads the config as
    // of then or newer.)
    await waitFor(
      () => want.every((w) => got.includes(w)),
      'every event at every endpoint created before it',
      20_000,
    );
  });

  it("a job of a tenant whose config did not change is fanned out on the worker's view, without reading the config", async () => {
    const s = await routerHarness(cleanup);
    const r = await s.receiver();
    const t = await makeTenant(s.store);
    await makeEndpoint(s.store, t.id, r.url);
    await s.worker();
    await s.services.intake.submit(makeEvent(t.id, 'warm'));
    await waitFor(() => r.got.size === 1, 'the first delivery');

    // Every read of the tenant's revision: the intake's, one per commit, a worker's fan-out read,
    // which starts with it, and the worker's periodic check.
    const revKey = `"${s.rt.keys.configRev(t.id)}"`;
    let reads = 0;
    const monitor = await monitorRedis(testEnv().SPILLWAY_REDIS_URL!, (a) => {
      if (a[0] === '"get"' && a[1] === revKey) reads++;
    });
    try {
      // Each event its own commit, so its own job: N fan-outs.
      const N = 10;
      for (let i = 1; i <= N; i++) await s.services.intake.submit(makeEvent(t.id, `e${i}`));
      await waitFor(() => r.got.size === 1 + N, 'all delivered');
      await waitFor(() => reads >= N, 'the monitor to see the commits');
      // One read per commit by the intake. A worker that read the config for every job would add N
      // more; this one reads only the revision, in its half-second check of the tenants it holds
      // (at most a few times in this test).
      expect(reads).toBeLessThanOrEqual(N + 3);
    } finally {
      monitor.stop();
    }
  });
});
