import { afterEach, describe, expect, it } from 'vitest';
import { makeEndpoint, makeEvent, makeTenant, routerHarness } from '../helpers/router-fixtures.ts';
import { waitFor } from '../helpers/spawn.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

describe('invariant 5: a rate-limited task waits without holding a concurrency slot', () => {
  it("an endpoint's rate limit does not hold back the same tenant's other endpoint", async () => {
    const s = await routerHarness(cleanup);
    const slow = await s.receiver();
    const fast = await s.receiver();
    // Concurrency 2: if waiting for the slow endpoint's tokens held a slot, the first two slow
    // tasks would block every fast one until tokens trickle in (0.5/s).
    const t = await makeTenant(s.store, { concurrency: 2, maxInFlight: 100 });
    const epSlow = await makeEndpoint(s.store, t.id, slow.url, {
      eventTypes: ['slow.*'],
      rate: { perSecond: 0.5, burst: 1 },
    });
    await makeEndpoint(s.store, t.id, fast.url, { eventTypes: ['fast.*'] });
    await s.worker();
    for (let i = 0; i < 6; i++) await s.services.intake.submit(makeEvent(t.id, `s${i}`, 'slow.thing'));
    for (let i = 0; i < 20; i++) await s.services.intake.submit(makeEvent(t.id, `f${i}`, 'fast.thing'));
    await waitFor(() => fast.got.size >= 20, 'all fast deliveries', 15_000);
    // The fast endpoint got everything while the slow one is still held to its rate.
    expect(slow.requests).toBeLessThanOrEqual(3);
    const ev = await s.services.getEvent(t.id, 's5');
    expect(ev?.deliveries.find((d) => d.endpointId === epSlow.id)?.status).toBe('pending');
  });
});

describe('invariant 3: a hanging tenant cannot fill a worker’s job slots', () => {
  it('another tenant’s events are delivered promptly while 300 single-event jobs of a hanging tenant wait', async () => {
    const s = await routerHarness(cleanup);
    const hang = await s.receiver(() => ({ status: 200, delayMs: 12_000 }));
    const ok = await s.receiver();
    const slow = await makeTenant(s.store, { concurrency: 2, maxInFlight: 1000 });
    const calm = await makeTenant(s.store, { concurrency: 4 });
    await makeEndpoint(s.store, slow.id, hang.url, { timeoutMs: 20_000 });
    await makeEndpoint(s.store, calm.id, ok.url);
    await s.worker();
    // One event per job (sequential submits), more jobs than the worker processes at once: if a
    // job stayed active while its task waits for one of the slow tenant's 2 slots, these would
    // hold every job slot and the calm tenant's jobs would wait behind them.
    for (let i = 0; i < 300; i++) await s.services.intake.submit(makeEvent(slow.id, `h${i}`));
    const sentAt = Date.now();
    for (let i = 0; i < 20; i++) await s.services.intake.submit(makeEvent(calm.id, `c${i}`));
    await waitFor(() => ok.got.size >= 20, 'the calm tenant’s 20 deliveries', 20_000);
    // Well before any of the slow tenant's requests could time out or be answered.
    expect(Date.now() - sentAt).toBeLessThan(8_000);
    expect(hang.requests).toBeLessThanOrEqual(2);
  });
});
