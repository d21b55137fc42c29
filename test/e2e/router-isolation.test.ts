import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { type BreakerChangeMessage, CHANNELS, type DeliveryAttemptMessage } from '@spillway/shared';
import { afterEach, describe, expect, it } from 'vitest';
import { makeEndpoint, makeEvent, makeTenant, routerHarness } from '../helpers/router-fixtures.ts';
import { sleep, waitFor } from '../helpers/wait.ts';

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
    let open = 0;
    let maxOpen = 0;
    const hang = await s.receiver(() => {
      maxOpen = Math.max(maxOpen, ++open);
      setTimeout(() => open--, 12_000);
      return { status: 200, delayMs: 12_000 };
    });
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
    // The slow tenant never had more than its concurrency on the wire (how many rounds of 12 s
    // fit in the test depends on the machine's speed; the bound does not).
    expect(maxOpen).toBeLessThanOrEqual(2);
  });
});

describe('isolation by structure: 50 tenants, one hanging, one flooding, 48 calm', () => {
  it("the calm tenants' deliveries stay prompt (p99 well under the hanging endpoint's timeout) and nothing is lost", async () => {
    const s = await routerHarness(cleanup);
    const arrived = new Map<string, number>();
    const calmRx = await s.receiver((req) => {
      const id = String(req.headers['webhook-id']);
      if (!arrived.has(id)) arrived.set(id, Date.now());
      return { status: 200 };
    });
    const hangRx = await s.receiver(() => ({ status: 200, delayMs: 20_000 }));
    const floodRx = await s.receiver(() => ({ status: 200, delayMs: 2 }));
    const hang = await makeTenant(s.store, { concurrency: 8, maxInFlight: 1000 });
    await makeEndpoint(s.store, hang.id, hangRx.url, { timeoutMs: 8000 });
    const flood = await makeTenant(s.store, { concurrency: 8, maxInFlight: 1000 });
    await makeEndpoint(s.store, flood.id, floodRx.url);
    const calm = [];
    for (let i = 0; i < 48; i++) {
      const t = await makeTenant(s.store, { concurrency: 4, maxInFlight: 100 });
      await makeEndpoint(s.store, t.id, calmRx.url);
      calm.push(t);
    }
    await s.worker();
    // The noise: 500 events for the hanging tenant and 1,000 for the flooding one, submitted
    // in the same group commits as the calm tenants' events (jobs mix tenants).
    const noise = (async () => {
      for (let i = 0; i < 500; i += 25) {
        const batch: Promise<unknown>[] = [];
        for (let j = i; j < i + 25; j++) {
          batch.push(s.services.intake.submit(makeEvent(hang.id, `h${j}`)));
          batch.push(s.services.intake.submit(makeEvent(flood.id, `f${2 * j}`)));
          batch.push(s.services.intake.submit(makeEvent(flood.id, `f${2 * j + 1}`)));
        }
        await Promise.all(batch);
      }
    })();
    // Calm: 48 tenants × 10 events, spread over ~2 s while the noise goes in.
    const sentAt = new Map<string, number>();
    for (let round = 0; round < 10; round++) {
      await Promise.all(
        calm.map(async (t) => {
          const id = `${t.id}-c${round}`;
          sentAt.set(id, Date.now());
          await s.services.intake.submit(makeEvent(t.id, id));
        }),
      );
      await sleep(200); // pacing: calm traffic spread over ~2 s
    }
    await noise;
    await waitFor(() => [...sentAt.keys()].every((id) => arrived.has(id)), 'every calm event', 30_000).catch(
      (err) => {
        throw new Error(
          `${(err as Error).message}: ${arrived.size}/${sentAt.size} calm, flood ${floodRx.got.size}`,
        );
      },
    );
    const lat = [...sentAt].map(([id, t0]) => arrived.get(id)! - t0).sort((a, b) => a - b);
    const p99 = lat[Math.ceil(lat.length * 0.99) - 1]!;
    console.log(
      `50 tenants: calm p50 ${lat[Math.floor(lat.length / 2)]} ms, p99 ${p99} ms, max ${lat.at(-1)} ms`,
    );
    // Without isolation the calm events wait behind the hanging tenant's 8 s timeouts (or behind
    // the flood's backlog); with it they are delivered within a few event-loop turns — the bound
    // is half the timeout so that a busy CI machine does not decide the verdict.
    expect(p99).toBeLessThan(4000);
    // The flood is delivered in full; the hanging tenant's tasks are all still owned (none lost):
    // on the wire, spilled, or waiting for a retry.
    await waitFor(() => floodRx.got.size >= 1000, 'the whole flood', 60_000);
    expect(hangRx.requests).toBeGreaterThan(0);
  }, 120_000);
});

describe("isolation by structure: a rate-limited tenant keeps its rate while another tenant's backlog drains", () => {
  it('an endpoint limited to 20/s delivers 100 events at about its rate, not starved by a slow backlog of 4,000', async () => {
    const s = await routerHarness(cleanup);
    // A seen case: alone it delivered 100 in ~5 s; beside a draining backlog to a slow endpoint it
    // once delivered 16 of 100 in 20 s (its tasks waited behind the backlog for the worker's room).
    const slowRx = await s.receiver(() => ({ status: 200, delayMs: 100 }));
    const ratedRx = await s.receiver();
    // Its credits (5,000) let it keep its whole backlog in memory, beyond the worker's claim (at
    // least 2,048 tasks): the claim must not count what a slow lane keeps beyond its lookahead, or
    // the rated tenant's jobs wait behind the backlog's (30 s for its 100 events before the fix).
    const busy = await makeTenant(s.store, { concurrency: 8, maxInFlight: 5000 });
    await makeEndpoint(s.store, busy.id, slowRx.url);
    const rated = await makeTenant(s.store, { concurrency: 4, maxInFlight: 100 });
    await makeEndpoint(s.store, rated.id, ratedRx.url, { rate: { perSecond: 20, burst: 5 } });
    // The backlog first, so it holds the worker when the rated tenant's events arrive.
    for (let i = 0; i < 4000; i += 100)
      await Promise.all(
        Array.from({ length: 100 }, (_, j) => s.services.intake.submit(makeEvent(busy.id, `b${i + j}`))),
      );
    await s.worker();
    await waitFor(() => slowRx.got.size > 0, 'the backlog draining');
    const started = Date.now();
    for (let i = 0; i < 100; i++) await s.services.intake.submit(makeEvent(rated.id, `r${i}`));
    await waitFor(() => ratedRx.got.size >= 100, 'the rated tenant delivered in full', 30_000).catch(
      (err) => {
        throw new Error(`${(err as Error).message}: ${ratedRx.got.size}/100 in 30 s`);
      },
    );
    const tookS = (Date.now() - started) / 1000;
    console.log(
      `rated tenant: 100 at 20/s in ${tookS.toFixed(1)} s; backlog delivered meanwhile ${slowRx.got.size}/4000`,
    );
    // 100 at 20/s (burst 5) is ~4.8 s alone; 3× that leaves room for a loaded CI machine and still
    // fails the starvation seen (16 of 100 in 20 s).
    expect(tookS).toBeLessThan(15);
    // The backlog was still draining meanwhile (so the two really overlapped).
    expect(slowRx.got.size).toBeLessThan(4000);
  }, 90_000);
});

describe('isolation by structure: a half-open breaker takes one probe, not the lane', () => {
  it("while a hanging endpoint's breaker is half-open the lane admits one task for it; the rest wait in place and all arrive once it answers", async () => {
    const s = await routerHarness(cleanup, {
      SPILLWAY_BREAKER_RESET: '1s',
      SPILLWAY_RETRY_SCHEDULE: '1s,1s,1s,1s,1s,1s,1s,1s',
    });
    let hanging = true;
    const rx = await s.receiver(() => (hanging ? { status: 200, delayMs: 30_000 } : { status: 200 }));
    const t = await makeTenant(s.store, { concurrency: 4, maxInFlight: 1000 });
    const ep = await makeEndpoint(s.store, t.id, rx.url, { timeoutMs: 400 });
    // Every attempt's end and every breaker transition of this endpoint, as the worker publishes them.
    const deferredAt: number[] = [];
    const states: { state: string; at: number }[] = [];
    const onAttempt = (m: unknown) => {
      const a = m as DeliveryAttemptMessage;
      if (a.tenantId === t.id && a.outcome === 'deferred') deferredAt.push(Date.now());
    };
    const onBreaker = (m: unknown) => {
      const b = m as BreakerChangeMessage;
      if (b.tenantId === t.id && b.endpointId === ep.id) states.push({ state: b.state, at: Date.now() });
    };
    subscribe(CHANNELS.deliveryAttempt, onAttempt);
    subscribe(CHANNELS.breakerChange, onBreaker);
    cleanup.push(async () => {
      unsubscribe(CHANNELS.deliveryAttempt, onAttempt);
      unsubscribe(CHANNELS.breakerChange, onBreaker);
    });
    await s.worker();
    const ids: string[] = [];
    for (let i = 0; i < 600; i += 50) {
      const batch: Promise<unknown>[] = [];
      for (let j = i; j < i + 50; j++) {
        ids.push(`p${j}`);
        batch.push(s.services.intake.submit(makeEvent(t.id, `p${j}`)));
      }
      await Promise.all(batch);
    }
    // The breaker opens on the timeouts, half-opens 1 s later, its probe times out, it opens
    // again: several half-open periods, each while about 600 tasks wait (in the spill log, in
    // retry jobs and in new jobs).
    await waitFor(
      () => states.filter((x) => x.state === 'half-open').length >= 3,
      'three half-open periods',
      30_000,
    );
    const firstHalfOpen = states.find((x) => x.state === 'half-open')!.at;
    const deferredSince = deferredAt.filter((at) => at >= firstHalfOpen).length;
    // Each half-open period is one probe; admitting more only has the dispatcher refuse them and
    // put them back on the retry schedule (what it did: hundreds per period).
    expect(deferredSince).toBeLessThanOrEqual(5);
    // The endpoint answers again: the next probe closes the breaker and every event arrives once.
    hanging = false;
    await waitFor(
      () => ids.every((id) => rx.got.has(id)),
      'every event after the endpoint recovered',
      60_000,
    ).catch((err) => {
      throw new Error(`${(err as Error).message}: ${rx.got.size}/${ids.length}`);
    });
  }, 120_000);
});
