import { afterEach, describe, expect, it } from 'vitest';
import { makeEndpoint, makeEvent, makeTenant, routerHarness } from '../helpers/router-fixtures.ts';
import { scrape } from '../helpers/router-metrics.ts';
import { sleep, waitFor } from '../helpers/wait.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

describe('a job stalls while its worker still runs it (docs/architecture.md, ownership)', () => {
  it('the same worker claims it again, joins its first run, and delivers each task once', async () => {
    const s = await routerHarness(cleanup, {
      SPILLWAY_JOB_LOCK: '2s',
      SPILLWAY_JOB_STALLED_INTERVAL: '500ms',
    });
    // Slow answers keep the intake job's tasks in flight, so the job stays active for 4 s.
    const r = await s.receiver(() => ({ status: 200, delayMs: 4000 }));
    const t = await makeTenant(s.store);
    await makeEndpoint(s.store, t.id, r.url);
    await s.worker();
    const before = (await scrape()).value('spillway_job_reruns_joined_total');
    await Promise.all(
      Array.from({ length: 5 }, (_, i) => s.services.intake.submit(makeEvent(t.id, `s${i}`))),
    );
    await waitFor(() => r.requests >= 5, 'all five on the wire');

    // A missed lock renewal, as a worker's event loop late by a lock's length makes it: the lock
    // is gone, so BullMQ's stalled check moves the job back to wait and this worker claims it again.
    const { bullPrefix, intakeQueue } = s.rt.keys;
    const active = await s.rt.redis.lrange(`${bullPrefix}:${intakeQueue}:active`, 0, -1);
    expect(active).toHaveLength(1);
    await s.rt.redis.del(`${bullPrefix}:${intakeQueue}:${active[0]}:lock`);
    await waitFor(
      async () => (await scrape()).value('spillway_job_reruns_joined_total') > before,
      'the job claimed again and joined',
      10_000,
    );

    await waitFor(() => r.got.size === 5, 'all five delivered', 20_000);
    // Long enough for a second run's deliveries (4 s each) and for one more stall round.
    await sleep(6000);
    expect([...r.got.values()]).toEqual([1, 1, 1, 1, 1]);
    expect(r.requests).toBe(5);
    expect(await s.rt.redis.llen(`${bullPrefix}:${intakeQueue}:active`)).toBe(0);
  });
});
