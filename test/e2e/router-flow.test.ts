import { afterEach, describe, expect, it } from 'vitest';
import { makeEndpoint, makeEvent, makeTenant, routerHarness } from '../helpers/router-fixtures.ts';
import { scrape } from '../helpers/router-metrics.ts';
import { sleep, waitFor } from '../helpers/wait.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

const setup = (env: Record<string, string> = {}, partitions?: number) =>
  routerHarness(cleanup, env, partitions);

describe('router flow', () => {
  it('fans out to subscribed endpoints only, records deliveries, and answers duplicates without re-delivering', async () => {
    const s = await setup();
    const all = await s.receiver();
    const orders = await s.receiver();
    const users = await s.receiver();
    const t = await makeTenant(s.store);
    const epAll = await makeEndpoint(s.store, t.id, all.url);
    const epOrders = await makeEndpoint(s.store, t.id, orders.url, { eventTypes: ['order.*'] });
    await makeEndpoint(s.store, t.id, users.url, { eventTypes: ['user.created'] });
    const disabled = await s.receiver();
    await makeEndpoint(s.store, t.id, disabled.url, { status: 'disabled' });
    await s.worker();
    for (let i = 0; i < 20; i++)
      expect((await s.services.intake.submit(makeEvent(t.id, `e${i}`, 'order.created'))).duplicate).toBe(
        false,
      );
    expect((await s.services.intake.submit(makeEvent(t.id, 'e3', 'order.created'))).duplicate).toBe(true);
    await waitFor(
      () => all.got.size === 20 && orders.got.size === 20,
      'deliveries to both subscribed endpoints',
    );
    expect(users.requests).toBe(0);
    expect(disabled.requests).toBe(0);
    await waitFor(
      async () => (await s.services.getEvent(t.id, 'e7'))?.deliveries.every((d) => d.status === 'delivered'),
      'records say delivered',
    );
    const view = await s.services.getEvent(t.id, 'e7');
    expect(view).toMatchObject({ id: 'e7', type: 'order.created' });
    expect(view!.deliveries.map((d) => d.endpointId).sort()).toEqual([epAll.id, epOrders.id].sort());
    expect(view!.deliveries[0]).toMatchObject({ status: 'delivered', attempts: 1, lastStatus: 200 });
    expect(all.got.get('e3')).toBe(1);
    // Totals come from the shared counters (flushed every 250 ms), credits from the worker's
    // heartbeat (every second): wait for both to show the finished state.
    const stats = await waitFor(async () => {
      const st = await s.services.tenantStats(t.id);
      return st.delivered === 40 && st.credits.used === 0 ? st : undefined;
    }, 'stats summed from the worker');
    expect(stats).toMatchObject({ status: 'active', credits: { used: 0, limit: 100 }, dlq: 0, failed: 0 });
  });

  it('retries on the schedule, dead-letters after the last attempt, and replay delivers with a fresh schedule', async () => {
    const s = await setup({ SPILLWAY_RETRY_SCHEDULE: '100ms,200ms' });
    let healthy = false;
    const r = await s.receiver(() => ({ status: healthy ? 200 : 503 }));
    const t = await makeTenant(s.store);
    const ep = await makeEndpoint(s.store, t.id, r.url);
    await s.worker();
    // 3 events x 3 attempts stays under the endpoint breaker's volume threshold (10), so every
    // attempt is a real request.
    for (let i = 0; i < 3; i++) await s.services.intake.submit(makeEvent(t.id, `f${i}`));
    await waitFor(async () => (await s.services.listDlq(t.id)).length === 3, 'three DLQ entries');
    expect(r.requests).toBe(9); // 3 attempts each = schedule length + 1
    const dlq = await s.services.listDlq(t.id);
    expect(dlq[0]).toMatchObject({ endpointId: ep.id, attempts: 3, lastError: 'http_503' });
    // The history writes its attempts a flush after the DLQ entry (20 ms, then Kafka and the index).
    await waitFor(
      async () => (await s.services.getEvent(t.id, 'f0'))?.deliveries[0]?.status === 'failed',
      'the failed attempt in the history',
    );
    expect(await s.services.getEvent(t.id, 'f0')).toMatchObject({
      deliveries: [{ status: 'failed', attempts: 3, lastStatus: 503 }],
    });
    expect((await s.services.tenantStats(t.id)).dlq).toBe(3);

    healthy = true;
    const progress: number[] = [];
    expect(await s.services.replayDlq(t.id, { onProgress: (d) => progress.push(d) })).toBe(3);
    expect(progress.at(-1)).toBe(3);
    expect(await s.services.listDlq(t.id)).toEqual([]);
    await waitFor(() => r.got.size === 3, 'replayed deliveries');
    await waitFor(
      async () => (await s.services.getEvent(t.id, 'f0'))?.deliveries[0]?.status === 'delivered',
      'record delivered',
    );
    expect((await s.services.getEvent(t.id, 'f0'))!.deliveries[0]!.attempts).toBe(1);
  });

  it('schedule 100ms,200ms,400ms: an always-500 endpoint gets exactly 4 attempts with one webhook-id, then the DLQ; replay delivers once more', async () => {
    const s = await setup({ SPILLWAY_RETRY_SCHEDULE: '100ms,200ms,400ms' });
    let healthy = false;
    const ids: string[] = [];
    const r = await s.receiver((req) => {
      ids.push(String(req.headers['webhook-id']));
      return { status: healthy ? 200 : 500 };
    });
    const t = await makeTenant(s.store);
    const ep = await makeEndpoint(s.store, t.id, r.url);
    await s.worker();
    await s.services.intake.submit(makeEvent(t.id, 'always-500'));
    await waitFor(async () => (await s.services.listDlq(t.id)).length === 1, 'the DLQ entry');
    // Deliberate pause: nothing more arrives after the last attempt.
    await sleep(1000);
    expect(ids).toEqual(['always-500', 'always-500', 'always-500', 'always-500']);
    expect((await s.services.listDlq(t.id))[0]).toMatchObject({
      endpointId: ep.id,
      attempts: 4,
      lastError: 'http_500',
    });

    healthy = true;
    expect(await s.services.replayDlq(t.id)).toBe(1);
    await waitFor(() => r.got.size === 1, 'the replayed delivery');
    await sleep(500); // deliberate: a second replayed delivery would show up here
    expect(ids).toHaveLength(5);
    expect(r.got.get('always-500')).toBe(1);
    expect(await s.services.listDlq(t.id)).toEqual([]);
  });

  it('a 410 Gone is permanent: straight to the DLQ without retries, and the endpoint is disabled', async () => {
    const s = await setup();
    const r = await s.receiver(() => ({ status: 410 }));
    const t = await makeTenant(s.store);
    const ep = await makeEndpoint(s.store, t.id, r.url);
    await s.worker();
    await s.services.intake.submit(makeEvent(t.id, 'g1'));
    await waitFor(async () => (await s.services.listDlq(t.id)).length === 1, 'DLQ entry');
    expect(r.requests).toBe(1);
    expect((await s.services.listDlq(t.id))[0]).toMatchObject({
      endpointId: ep.id,
      attempts: 1,
      lastError: 'gone',
    });
    await waitFor(
      async () => (await s.store.getEndpoint(t.id, ep.id))?.status === 'disabled',
      'endpoint disabled',
    );
    expect((await s.store.getEndpoint(t.id, ep.id))?.disabledReason).toBe('gone');
  });

  it('nothing vanishes when a 410 disables an endpoint: its queued, spilled and retrying tasks go to the DLQ as endpoint_disabled, and replay after resume delivers them', async () => {
    const s = await setup({ SPILLWAY_RETRY_SCHEDULE: '300ms' });
    let gone = true;
    const r = await s.receiver((req) =>
      // The first request answers 410 once; any other while `gone` fails (so it retries).
      gone && req.headers['webhook-id'] === 'd0' ? { status: 410 } : { status: gone ? 500 : 200 },
    );
    // Concurrency 1 and 5 credits: of 30 events, some wait in the lane, the rest spill to Kafka.
    const t = await makeTenant(s.store, { concurrency: 1, maxInFlight: 5 });
    const ep = await makeEndpoint(s.store, t.id, r.url);
    await s.services.intake.submit(makeEvent(t.id, 'd0'));
    for (let i = 1; i < 30; i++) await s.services.intake.submit(makeEvent(t.id, `d${i}`));
    await s.worker();
    const dlq = await waitFor(
      async () => {
        const l = await s.services.listDlq(t.id);
        return l.length === 30 ? l : undefined;
      },
      'every task in the DLQ (none dropped)',
      30_000,
    );
    expect((await s.store.getEndpoint(t.id, ep.id))?.status).toBe('disabled');
    const reasons = dlq!.map((e) => e.lastError);
    expect(reasons.filter((x) => x === 'gone')).toHaveLength(1);
    expect(reasons.filter((x) => x === 'endpoint_disabled').length).toBeGreaterThanOrEqual(25);
    expect(new Set(dlq!.map((e) => e.eventId)).size).toBe(30);

    // Replayed while still disabled: back to the DLQ, not dropped.
    expect(await s.services.replayDlq(t.id)).toBe(30);
    await waitFor(async () => (await s.services.listDlq(t.id)).length === 30, 'back in the DLQ', 20_000);

    // Resumed: replay delivers every one.
    gone = false;
    await s.store.updateEndpoint(t.id, ep.id, (e) => ({ ...e, status: 'active' }));
    expect(await s.services.replayDlq(t.id)).toBe(30);
    await waitFor(() => r.got.size >= 30, 'all 30 delivered after resume', 30_000);
    for (let i = 0; i < 30; i++) expect(r.got.get(`d${i}`)).toBeGreaterThanOrEqual(1);
  });

  it('deleting an endpoint or a tenant is the one explicit discard: its waiting tasks are counted, not delivered', async () => {
    const s = await setup();
    const r = await s.receiver();
    const t = await makeTenant(s.store, { maxInFlight: 10 });
    const t2 = await makeTenant(s.store, { maxInFlight: 10 });
    const ep = await makeEndpoint(s.store, t.id, r.url);
    await makeEndpoint(s.store, t2.id, r.url);
    // Paused: every task spills to Kafka and waits there.
    await s.store.updateTenant(t.id, (x) => ({ ...x, status: 'paused' }));
    await s.store.updateTenant(t2.id, (x) => ({ ...x, status: 'paused' }));
    const before = await scrape();
    const w = await s.worker();
    for (let i = 0; i < 10; i++) await s.services.intake.submit(makeEvent(t.id, `x${i}`));
    for (let i = 0; i < 7; i++) await s.services.intake.submit(makeEvent(t2.id, `y${i}`));
    await waitFor(() => w.spill.sent >= 17, 'all 17 tasks spilled');
    await s.store.deleteEndpoint(t.id, ep.id);
    await s.store.updateTenant(t.id, (x) => ({ ...x, status: 'active' }));
    await s.store.deleteTenant(t2.id);
    const discarded = (x: Awaited<ReturnType<typeof scrape>>, reason: string) =>
      x.value('spillway_tasks_discarded_total', { reason });
    await waitFor(
      async () => {
        const now = await scrape();
        return (
          discarded(now, 'endpoint_deleted') - discarded(before, 'endpoint_deleted') === 10 &&
          discarded(now, 'tenant_deleted') - discarded(before, 'tenant_deleted') === 7
        );
      },
      'the 10 + 7 discards counted',
      30_000,
    );
    expect(r.requests).toBe(0);
  });

  it('an id deleted and created again is a new owner: the old tasks are discarded and counted, its history is not shown', async () => {
    const s = await setup({ SPILLWAY_RETRY_SCHEDULE: '5s' });
    const old = await s.receiver();
    const failing = await s.receiver(() => ({ status: 500 }));
    // A: paused, so its tasks wait in the spill log; then the tenant (and its endpoint) is deleted
    // and created again under the same ids. B: its endpoint answers 500, so its tasks wait in
    // retry jobs; then the endpoint alone is deleted and created again under its id.
    const a = await makeTenant(s.store, { maxInFlight: 10 });
    await makeEndpoint(s.store, a.id, old.url, { id: 'hook' });
    await s.store.updateTenant(a.id, (x) => ({ ...x, status: 'paused' }));
    const b = await makeTenant(s.store, { maxInFlight: 10 });
    await makeEndpoint(s.store, b.id, failing.url, { id: 'hook' });
    const w = await s.worker();
    for (let i = 0; i < 8; i++) await s.services.intake.submit(makeEvent(a.id, `old-a${i}`));
    for (let i = 0; i < 5; i++) await s.services.intake.submit(makeEvent(b.id, `old-b${i}`));
    await waitFor(() => w.spill.sent >= 8 && failing.requests >= 5, "A's tasks spilled, B's retrying");
    await waitFor(
      async () => (await s.services.history.listEvents(a.id, { limit: 100 })).data.length === 8,
      "A's old events in the event log",
    );
    // The worker stops, so nothing is settled while the ids change hands: the new worker finds
    // every old task under a live tenant and endpoint of the same ids.
    await s.stopWorker(w);
    await sleep(1200); // past the clock-skew allowance of an incarnation's start (config/incarnation.ts)
    await s.store.deleteTenant(a.id);
    await makeTenant(s.store, { maxInFlight: 10 }, a.id);
    const fresh = await s.receiver();
    await makeEndpoint(s.store, a.id, fresh.url, { id: 'hook' });
    await s.store.deleteEndpoint(b.id, 'hook');
    await makeEndpoint(s.store, b.id, fresh.url, { id: 'hook' });

    const before = await scrape();
    const discarded = (x: Awaited<ReturnType<typeof scrape>>) =>
      x.value('spillway_tasks_discarded_total', { reason: 'endpoint_deleted' });
    await s.worker();
    for (let i = 0; i < 3; i++) await s.services.intake.submit(makeEvent(a.id, `new-a${i}`));
    for (let i = 0; i < 2; i++) await s.services.intake.submit(makeEvent(b.id, `new-b${i}`));
    await waitFor(
      async () => discarded(await scrape()) - discarded(before) === 13,
      'the 8 spilled and 5 retrying old tasks discarded and counted',
      30_000,
    );
    await waitFor(() => fresh.got.size === 5, 'the new events delivered');
    await sleep(500);
    expect([...fresh.got.keys()].sort()).toEqual(['new-a0', 'new-a1', 'new-a2', 'new-b0', 'new-b1']);
    expect(old.requests).toBe(0);
    // The old owner's history is not the new one's: event log, its events, the endpoint's attempts.
    await waitFor(
      async () => (await s.services.history.listEvents(a.id, { limit: 100 })).data.length === 3,
      "A's new events logged",
    );
    expect((await s.services.history.listEvents(a.id, { limit: 100 })).data.map((e) => e.id).sort()).toEqual([
      'new-a0',
      'new-a1',
      'new-a2',
    ]);
    expect(await s.services.history.findEvent(a.id, 'old-a0')).toBeUndefined();
    const attempts = await s.services.history.endpointAttempts(b.id, 'hook', { limit: 100 });
    expect(attempts.data.every((x) => x.eventId.startsWith('new-'))).toBe(true);
    expect(await s.services.history.failedSince(b.id, 'hook', 0)).toEqual([]);
  });
});
