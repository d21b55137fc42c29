import { afterEach, describe, expect, it } from 'vitest';
import { makeEndpoint, makeEvent, makeTenant, routerHarness } from '../helpers/router-fixtures.ts';
import { scrape } from '../helpers/router-metrics.ts';
import { waitFor } from '../helpers/wait.ts';

/**
 * GET .../stats numbers mean "now" (spilled = backlog in Kafka, retrying = waiting in retry jobs)
 * and "ever" (delivered/failed survive worker restarts), and the router's Prometheus metrics move
 * with the work.
 */
const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

const setup = (env: Record<string, string> = {}) => routerHarness(cleanup, env);

const submitAll = (s: Awaited<ReturnType<typeof setup>>, tid: string, ids: string[]) =>
  Promise.all(ids.map((id) => s.services.intake.submit(makeEvent(tid, id))));

describe('tenant stats', () => {
  it('spilled and retrying are the current backlog; delivered and failed survive a worker restart', async () => {
    // The first retry is due after 3 s: long enough to observe the tasks waiting in retry jobs.
    const s = await setup({ SPILLWAY_RETRY_SCHEDULE: '3s' });
    const r = await s.receiver();
    let healthy = false;
    const flaky = await s.receiver(() => ({ status: healthy ? 200 : 503 }));
    const paused = await makeTenant(s.store);
    await makeEndpoint(s.store, paused.id, r.url);
    const failing = await makeTenant(s.store);
    await makeEndpoint(s.store, failing.id, flaky.url);
    await s.store.updateTenant(paused.id, (t) => ({ ...t, status: 'paused' }));
    const w1 = await s.worker();

    await submitAll(
      s,
      paused.id,
      Array.from({ length: 40 }, (_, i) => `p${i}`),
    );
    await submitAll(s, failing.id, ['f0', 'f1', 'f2', 'f3', 'f4']);
    await waitFor(
      async () => (await s.services.tenantStats(paused.id)).spilled === 40,
      'paused backlog = 40 spilled',
    );
    await waitFor(
      async () => (await s.services.tenantStats(failing.id)).retrying === 5,
      'five tasks waiting in retry jobs',
    );
    expect(r.requests).toBe(0);

    await s.store.updateTenant(paused.id, (t) => ({ ...t, status: 'active' }));
    healthy = true;
    const p = await waitFor(async () => {
      const st = await s.services.tenantStats(paused.id);
      return st.delivered === 40 && st.spilled === 0 ? st : undefined;
    }, 'backlog drained: spilled back to 0, 40 delivered');
    expect(p).toMatchObject({ retrying: 0, failed: 0 });
    const f = await waitFor(
      async () => {
        const st = await s.services.tenantStats(failing.id);
        return st.delivered === 5 && st.retrying === 0 ? st : undefined;
      },
      'retries delivered: retrying back to 0',
      15_000,
    );
    expect(f!.endpoints[0]).toMatchObject({ delivered: 5 });

    // A restart used to reset the numbers (they were per-worker counters since start).
    await s.stopWorker(w1);
    await s.worker();
    const after = await s.services.tenantStats(paused.id);
    expect(after).toMatchObject({ delivered: 40, spilled: 0, retrying: 0 });
    expect(after.endpoints[0]).toMatchObject({ delivered: 40 });
    expect((await s.services.tenantStats(failing.id)).delivered).toBe(5);
  });

  it('router metrics on the shared registry move by the work done (deltas between two scrapes)', async () => {
    const s = await setup({ SPILLWAY_RETRY_SCHEDULE: '100ms' });
    const ok = await s.receiver();
    const bad = await s.receiver(() => ({ status: 500 }));
    const t = await makeTenant(s.store, { maxInFlight: 1000 });
    await makeEndpoint(s.store, t.id, ok.url);
    const tb = await makeTenant(s.store);
    await makeEndpoint(s.store, tb.id, bad.url);
    // Two workers in one process share the registry: the metrics are created once, not per worker.
    await s.worker();
    await s.worker();
    await s.store.updateTenant(t.id, (x) => ({ ...x, status: 'paused' }));

    const before = await scrape();
    await submitAll(
      s,
      t.id,
      Array.from({ length: 30 }, (_, i) => `m${i}`),
    );
    await s.services.intake.submit(makeEvent(t.id, 'm0'));
    await submitAll(s, tb.id, ['x0', 'x1']);
    await waitFor(async () => (await s.services.tenantStats(t.id)).spilled === 30, 'paused tenant spilled');
    await waitFor(async () => (await s.services.listDlq(tb.id)).length === 2, 'two dead letters');
    await s.store.updateTenant(t.id, (x) => ({ ...x, status: 'active' }));
    await waitFor(() => ok.got.size === 30, 'paused tenant delivered after resume');
    const after = await scrape();
    const d = (name: string, labels?: Record<string, string>) =>
      after.value(name, labels) - before.value(name, labels);

    expect(d('spillway_intake_events_total', { result: 'accepted' })).toBe(32);
    expect(d('spillway_intake_events_total', { result: 'duplicate' })).toBe(1);
    expect(d('spillway_intake_batches_total', { outcome: 'committed' })).toBeGreaterThanOrEqual(1);
    expect(d('spillway_intake_commit_duration_seconds_count')).toBeGreaterThanOrEqual(1);
    expect(d('spillway_spill_produced_total')).toBeGreaterThanOrEqual(30);
    expect(d('spillway_spill_admitted_total')).toBeGreaterThanOrEqual(30);
    // Two attempts each: one retry job per failed attempt window, then the DLQ.
    expect(d('spillway_retry_tasks_scheduled_total')).toBe(2);
    expect(d('spillway_retry_jobs_scheduled_total')).toBeGreaterThanOrEqual(1);
    expect(d('spillway_dlq_writes_total')).toBe(2);
    // Gauges say "now": nothing held once all is done.
    await waitFor(async () => {
      const m = await scrape();
      return (
        m.value('spillway_router_tasks_in_memory') === 0 && m.value('spillway_spill_lookahead_records') === 0
      );
    }, 'no task in memory, no record in a look-ahead');
    expect((await scrape()).value('spillway_router_credits_used', { tenant: t.id })).toBe(0);
  });
});
