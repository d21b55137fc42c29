/**
 * Config tokens (docs/architecture.md, "Fan-out reads the config it was accepted under"): the
 * intake stamps each tenant's config token on the job, and a worker whose view was read under that
 * token fans out on it without reading the tenant's config again. A config write replaces the
 * token, so "create an endpoint, then send" still reaches the new endpoint.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { monitorRedis } from '../helpers/redis-monitor.ts';
import { makeEndpoint, makeEvent, makeTenant, routerHarness } from '../helpers/router-fixtures.ts';
import { waitFor } from '../helpers/wait.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

describe('fan-out on the config token of the job', () => {
  it('reads the config about once for a run of jobs; a write in between makes the next job read it, and the new endpoint gets the event', async () => {
    const s = await routerHarness(cleanup);
    const first = await s.receiver();
    const t = await makeTenant(s.store);
    await makeEndpoint(s.store, t.id, first.url);
    await s.worker();
    // Warm: the worker has read the tenant's config once.
    await s.services.intake.submit(makeEvent(t.id, 'warm'));
    await waitFor(() => first.got.size === 1, 'the warm-up event');

    // Every full read of the tenant's endpoints, as Redis saw them (fan-out reads and cache loads).
    const endpointsKey = `"${s.rt.keys.endpoints(t.id)}"`;
    let reads = 0;
    const monitor = await monitorRedis(s.rt.config.redis.url, (args) => {
      if (args[0] === '"hgetall"' && args[1] === endpointsKey) reads++;
    });
    cleanup.push(async () => monitor.stop());
    // One event per intake job, each delivered before the next is sent.
    for (let i = 0; i < 20; i++) {
      await s.services.intake.submit(makeEvent(t.id, `e${i}`));
      await waitFor(() => first.got.size === i + 2, `event ${i} delivered`);
    }
    // A read per job without the token (20, and the cache's loads: 22 measured); with it, only
    // the views' refresh every 500 ms (a cache load, after which the next job reads once): 1-5
    // measured, depending on how long the 20 jobs took on a busy machine.
    expect(reads).toBeLessThanOrEqual(10);

    // Create an endpoint, then send: the job carries the new token, so the worker reads again.
    const second = await s.receiver();
    await makeEndpoint(s.store, t.id, second.url);
    const before = reads;
    await s.services.intake.submit(makeEvent(t.id, 'after-create'));
    await waitFor(() => first.got.size === 22 && second.got.size === 1, 'the event at both endpoints');
    expect(reads).toBeGreaterThan(before);
  });
});
