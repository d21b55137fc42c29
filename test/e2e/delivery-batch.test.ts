import { randomBytes } from 'node:crypto';
import type { Endpoint, TenantLimits } from '@spillway/shared';
import { Webhook } from 'standardwebhooks';
import { afterEach, describe, expect, it } from 'vitest';
import { makeEndpoint, makeEvent, makeTenant, routerHarness } from '../helpers/router-fixtures.ts';
import { sleep, waitFor } from '../helpers/wait.ts';

/**
 * Batched delivery end to end (worker, Redis, Kafka, a real receiver): several events per request
 * as a JSON array signed as one message; a failed batch is retried whole; the DLQ, credits and
 * rates count events; spilled and paused tasks come back batched.
 */
const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

/** The event's delivery record once it says delivered (records are written batched, every 5 ms). */
async function deliveredRecord(
  s: Awaited<ReturnType<typeof routerHarness>>,
  tenantId: string,
  eventId: string,
) {
  return waitFor(async () => {
    const d = (await s.services.getEvent(tenantId, eventId))?.deliveries[0];
    return d?.status === 'delivered' ? d : undefined;
  }, `the record of ${eventId} to say delivered`);
}

interface Batch {
  webhookId: string;
  count: number;
  status: number;
  bytes: number;
  events: { id: string; type: string; timestamp: string; payload: unknown }[];
  at: number;
}

/**
 * A router, a tenant and one batched endpoint whose receiver verifies every request as the docs
 * tell receivers to (the batch is one signed message) and keeps what it got.
 */
async function batchSetup(o: {
  endpoint: Partial<Endpoint>;
  env?: Record<string, string>;
  limits?: Partial<TenantLimits>;
  answer?: (b: Batch, n: number) => number;
}) {
  const s = await routerHarness(cleanup, o.env);
  const t = await makeTenant(s.store, o.limits);
  const secret = `whsec_${randomBytes(24).toString('base64')}`;
  const answer = o.answer ?? (() => 200);
  const batches: Batch[] = [];
  const delivered = new Map<string, number>();
  const r = await s.receiver((req, body) => {
    const h = req.headers as Record<string, string>;
    const events = new Webhook(secret).verify(body, h) as Batch['events'];
    const b: Batch = {
      webhookId: h['webhook-id']!,
      count: Number(h['spillway-batch-count']),
      status: 0,
      bytes: body.length,
      events,
      at: Date.now(),
    };
    b.status = answer(b, batches.length);
    batches.push(b);
    if (b.status === 200) for (const e of events) delivered.set(e.id, (delivered.get(e.id) ?? 0) + 1);
    return { status: b.status };
  });
  const ep = await makeEndpoint(s.store, t.id, r.url, { secret, ...o.endpoint });
  return { s, t, ep, rx: { r, batches, delivered } };
}

describe('batched delivery', () => {
  it('several events per request, as a signed JSON array of id/type/timestamp/payload; every event once', async () => {
    const { s, t, rx } = await batchSetup({
      endpoint: { batch: { maxEvents: 10, maxBytes: 1 << 20, lingerMs: 200 } },
    });
    await s.worker();
    const ids = Array.from({ length: 95 }, (_, i) => `b${i}`);
    await Promise.all(ids.map((id) => s.services.intake.submit(makeEvent(t.id, id))));
    await waitFor(() => rx.delivered.size === 95, 'all 95 events delivered', 30_000);
    expect([...rx.delivered.values()].every((n) => n === 1)).toBe(true);
    for (const b of rx.batches) {
      expect(b.count).toBe(b.events.length);
      expect(b.events.length).toBeLessThanOrEqual(10);
      expect(b.webhookId).toMatch(/^batch_/);
      for (const e of b.events) {
        expect(e).toEqual({
          id: e.id,
          type: 'order.created',
          timestamp: expect.any(String),
          payload: { id: e.id, n: 1 },
        });
        expect(Date.parse(e.timestamp)).toBeGreaterThan(Date.now() - 60_000);
      }
    }
    // Far fewer requests than events: the 95 arrived together, so most batches are full.
    expect(rx.batches.length).toBeLessThanOrEqual(20);
    // Records and stats count events, not requests.
    await waitFor(async () => (await s.services.tenantStats(t.id)).delivered === 95, 'delivered = 95');
    expect(await deliveredRecord(s, t.id, 'b7')).toMatchObject({ attempts: 1 });
  });

  it('a partial batch waits lingerMs, then goes; maxBytes holds every request under it', async () => {
    const { s, t, rx } = await batchSetup({
      endpoint: { batch: { maxEvents: 100, maxBytes: 8192, lingerMs: 400 } },
    });
    await s.worker();
    const sent = Date.now();
    await s.services.intake.submit(makeEvent(t.id, 'alone'));
    await waitFor(() => rx.delivered.has('alone'), 'the lone event');
    expect(rx.batches[0]!.at - sent).toBeGreaterThanOrEqual(350);
    expect(rx.batches[0]!.events).toHaveLength(1);
    // 2 KiB payloads: about three fit in 8 KiB.
    const big = (id: string) => ({
      ...makeEvent(t.id, id),
      body: Buffer.from(JSON.stringify({ id, pad: 'x'.repeat(2000) })),
    });
    await Promise.all(Array.from({ length: 12 }, (_, i) => s.services.intake.submit(big(`big${i}`))));
    await waitFor(() => rx.delivered.size === 13, 'the twelve large ones');
    for (const b of rx.batches.slice(1)) expect(b.bytes).toBeLessThanOrEqual(8192);
    expect(rx.batches.length).toBeGreaterThanOrEqual(1 + 4);
  });

  it('a failed batch is retried whole (same events, same batch id); after the last attempt each event is its own DLQ entry', async () => {
    let failing = 'first' as 'first' | 'always' | 'never';
    const { s, t, rx } = await batchSetup({
      env: { SPILLWAY_RETRY_SCHEDULE: '200ms' },
      endpoint: { batch: { maxEvents: 10, maxBytes: 1 << 20, lingerMs: 300 } },
      answer: (_b, n) => (failing === 'always' || (failing === 'first' && n === 0) ? 503 : 200),
    });
    await s.worker();
    await Promise.all(
      Array.from({ length: 10 }, (_, i) => s.services.intake.submit(makeEvent(t.id, `r${i}`))),
    );
    await waitFor(() => rx.delivered.size === 10, 'the retried batch delivered');
    expect(rx.batches.map((b) => b.status)).toEqual([503, 200]);
    expect(rx.batches[1]!.webhookId).toBe(rx.batches[0]!.webhookId);
    expect(rx.batches[1]!.events.map((e) => e.id)).toEqual(rx.batches[0]!.events.map((e) => e.id));
    expect(await deliveredRecord(s, t.id, 'r3')).toMatchObject({ attempts: 2 });

    failing = 'always';
    await Promise.all(
      Array.from({ length: 6 }, (_, i) => s.services.intake.submit(makeEvent(t.id, `d${i}`))),
    );
    const dlq = (await waitFor(async () => {
      const l = await s.services.listDlq(t.id);
      return l.length === 6 ? l : undefined;
    }, 'six DLQ entries'))!;
    expect(dlq.map((e) => e.eventId).sort()).toEqual(['d0', 'd1', 'd2', 'd3', 'd4', 'd5']);
    expect(dlq.every((e) => e.attempts === 2 && e.lastError === 'http_503')).toBe(true);
    await waitFor(async () => (await s.services.tenantStats(t.id)).failed === 6, 'failed = 6');

    // Replay: back as a batch, delivered once each.
    failing = 'never';
    expect(await s.services.replayDlq(t.id)).toBe(6);
    await waitFor(
      () => ['d0', 'd1', 'd2', 'd3', 'd4', 'd5'].every((id) => rx.delivered.get(id) === 1),
      'replayed',
    );
    expect(rx.batches.at(-1)!.events.length).toBeGreaterThan(1);
  });

  it('rates count events; credits hold per event while batches spill and come back; a paused endpoint’s backlog comes back batched', async () => {
    const { s, t, ep, rx } = await batchSetup({
      limits: { maxInFlight: 12, concurrency: 2 },
      endpoint: {
        batch: { maxEvents: 10, maxBytes: 1 << 20, lingerMs: 50 },
        rate: { perSecond: 40, burst: 10 },
      },
    });
    const w = await s.worker();
    let maxCredits = 0;
    const sampler = setInterval(() => {
      maxCredits = Math.max(maxCredits, w.engine.credits.used(t.id));
    }, 5);
    cleanup.push(async () => clearInterval(sampler));
    const started = Date.now();
    await Promise.all(
      Array.from({ length: 90 }, (_, i) => s.services.intake.submit(makeEvent(t.id, `c${i}`))),
    );
    await waitFor(() => rx.delivered.size === 90, 'all 90 delivered', 30_000);
    const took = Date.now() - started;
    // 90 events at 40/s with a burst of 10 take at least (90 - 10) / 40 = 2 s (one token per event).
    expect(took).toBeGreaterThanOrEqual(1900);
    expect(maxCredits).toBeLessThanOrEqual(12);
    expect(w.spill.sent).toBeGreaterThan(0);
    expect(Math.max(...rx.batches.map((b) => b.events.length))).toBeGreaterThan(1);

    await s.store.updateEndpoint(t.id, ep.id, (e) => ({ ...e, status: 'paused' }));
    await sleep(1200);
    const before = rx.batches.length;
    await Promise.all(
      Array.from({ length: 20 }, (_, i) => s.services.intake.submit(makeEvent(t.id, `p${i}`))),
    );
    await sleep(500); // deliberate: nothing arrives while paused
    expect(rx.batches.length).toBe(before);
    await s.store.updateEndpoint(t.id, ep.id, (e) => ({ ...e, status: 'active' }));
    await waitFor(() => rx.delivered.size === 110, 'the paused backlog delivered', 30_000);
    expect(rx.batches.length - before).toBeLessThan(20);
    expect([...rx.delivered.values()].every((n) => n === 1)).toBe(true);
  });
});
