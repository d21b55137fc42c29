import diagnosticsChannel from 'node:diagnostics_channel';
import net from 'node:net';
import { CHANNELS, registry, VERSION } from '@spillway/shared';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { testConfig } from '../../../test/helpers/env.ts';
import { sleep, waitFor } from '../../../test/helpers/wait.ts';
import { core, dispatcherFixtures, endpoint, percentile, task, tenant } from './helpers.ts';

const config = testConfig({ SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.1/32' });
const { dispatcher, receiver: rx } = dispatcherFixtures(config);

describe('Dispatcher: one attempt', () => {
  it('sends the contract headers, a verifiable signature, and the same webhook-id on every attempt', async () => {
    const r = await rx();
    const d = dispatcher();
    const ep = endpoint('hdr', 'e1', r.url);
    const t1 = task('hdr', 'e1', { n: 1 }, 1, 'evt_same');
    const out = await d.dispatch(t1, tenant('hdr'), ep);
    expect(out).toMatchObject({ kind: 'delivered', status: 200 });
    await d.dispatch({ ...t1, attempt: 2 }, tenant('hdr'), ep);
    expect(r.requests).toHaveLength(2);
    const h = r.requests[0]!.headers;
    expect(h['content-type']).toBe('application/json');
    expect(h['webhook-id']).toBe('evt_same');
    expect(r.requests[1]!.headers['webhook-id']).toBe('evt_same');
    expect(Math.abs(Number(h['webhook-timestamp']) - Date.now() / 1000)).toBeLessThan(5);
    expect(h['spillway-event-type']).toBe('order.created');
    expect(h['user-agent']).toBe(`Spillway/${VERSION}`);
    expect(r.requests[0]!.body.toString()).toBe('{"n":1}');
    expect(new Webhook(ep.secret).verify(r.requests[0]!.body, h as Record<string, string>)).toEqual({ n: 1 });
  });

  it('signs with the previous secret too while its overlap lasts', async () => {
    const r = await rx();
    const d = dispatcher();
    const oldSecret = `whsec_${Buffer.alloc(24, 1).toString('base64')}`;
    const ep = endpoint('rot', 'e1', r.url, {
      previousSecrets: [{ secret: oldSecret, expiresAt: new Date(Date.now() + 60_000).toISOString() }],
    });
    await d.dispatch(task('rot', 'e1', { r: 1 }), tenant('rot'), ep);
    const h = r.requests[0]!.headers as Record<string, string>;
    expect(h['webhook-signature']!.split(' ')).toHaveLength(2);
    expect(new Webhook(oldSecret).verify(r.requests[0]!.body, h)).toEqual({ r: 1 });
    expect(new Webhook(ep.secret).verify(r.requests[0]!.body, h)).toEqual({ r: 1 });
  });

  it('classifies answers and failures', async () => {
    const r = await rx((req, res) => {
      const path = req.url ?? '';
      if (path === '/ok') return res.writeHead(204).end();
      if (path === '/500') return res.writeHead(500).end('boom');
      if (path === '/410') return res.writeHead(410).end();
      if (path === '/429') return res.writeHead(429, { 'retry-after': '2' }).end();
      if (path === '/503') return res.writeHead(503, { 'retry-after': '1' }).end();
      if (path === '/400') return res.writeHead(400).end();
      if (path === '/redirect') return res.writeHead(301, { location: '/ok' }).end();
      if (path === '/big') return res.writeHead(200).end(Buffer.alloc(4 << 20, 120));
      if (path === '/endless') {
        // A 200 whose body does not end (within the test): the read limit ends the attempt.
        res.writeHead(200);
        let n = 0;
        const t = setInterval(() => (++n > 2000 ? res.end() : res.write(Buffer.alloc(16_384, 121))), 5);
        res.on('close', () => clearInterval(t));
        return;
      }
      if (path === '/hang') return; // never answers
      res.writeHead(404).end();
    });
    // A port with nothing listening.
    const closed = await new Promise<number>((resolve) => {
      const s = net.createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as net.AddressInfo).port;
        s.close(() => resolve(p));
      });
    });
    const d = dispatcher();
    const t = tenant('cls');
    const base = r.url.replace('/hook', '');
    const go = (path: string, extra = {}) =>
      d.dispatch(task('cls', path), t, endpoint('cls', path, `${base}${path}`, extra));
    expect(await go('/ok')).toMatchObject({ kind: 'delivered', status: 204 });
    const failed = await go('/500');
    expect(core(failed)).toEqual({ kind: 'retry', status: 500, error: 'http_500' });
    // The attempt history keeps its latency and the first bytes of the endpoint's answer.
    expect(failed).toMatchObject({ durationMs: expect.any(Number) });
    expect(String((failed as { excerpt?: Buffer }).excerpt)).toBe('boom');
    expect(core(await go('/410'))).toEqual({ kind: 'fail', status: 410, error: 'gone' });
    expect(core(await go('/429'))).toEqual({
      kind: 'retry',
      status: 429,
      error: 'http_429',
      retryAfterMs: 2000,
    });
    expect(core(await go('/503'))).toEqual({
      kind: 'retry',
      status: 503,
      error: 'http_503',
      retryAfterMs: 1000,
    });
    expect(core(await go('/400'))).toEqual({ kind: 'retry', status: 400, error: 'http_400' });
    expect(core(await go('/redirect'))).toEqual({ kind: 'retry', status: 301, error: 'http_301' });
    expect(await go('/big')).toMatchObject({ kind: 'delivered', status: 200 });
    // Past the read limit (64 KiB) the answer stands and the socket goes; the excerpt is 1 KiB.
    const endless = await go('/endless', { timeoutMs: 5000 });
    expect(endless).toMatchObject({ kind: 'delivered', status: 200 });
    expect((endless as { excerpt?: Buffer }).excerpt).toHaveLength(1024);
    const hang = await go('/hang', { timeoutMs: 300 });
    expect(core(hang)).toEqual({ kind: 'retry', error: 'timeout' });
    const refused = await d.dispatch(
      task('cls', 'closed'),
      t,
      endpoint('cls', 'closed', `http://127.0.0.1:${closed}/`),
    );
    expect(refused.kind).toBe('retry');
    expect(refused.kind === 'retry' && refused.error).toMatch(/^connect_error: ECONNREFUSED/);
    expect(core(await d.dispatch(task('cls', 'ftp'), t, endpoint('cls', 'ftp', 'ftp://127.0.0.1/')))).toEqual(
      {
        kind: 'fail',
        error: 'invalid_url',
      },
    );
    // Redirects are not followed: /ok got only its own request, not the 301's.
    expect(r.requests).toHaveLength(10);
    expect(r.requests.filter((q) => q.url === '/ok')).toHaveLength(1);
  });
});

describe('Dispatcher: endpoint breaker', () => {
  it('opens after repeated failures, stops traffic, half-opens, and closes on a successful probe', async () => {
    let failing = true;
    const r = await rx((_q, res) => res.writeHead(failing ? 500 : 200).end());
    const d = dispatcher({ breaker: { volumeThreshold: 10, resetTimeoutMs: 400 } });
    const t = tenant('brk');
    const ep = endpoint('brk', 'e1', r.url);
    expect(d.breakerState('brk', 'e1')).toBe('closed');
    for (let i = 0; i < 10; i++) expect((await d.dispatch(task('brk', 'e1'), t, ep)).kind).toBe('retry');
    expect(d.breakerState('brk', 'e1')).toBe('open');
    const seen = r.requests.length;
    expect(seen).toBe(10);
    const deferred = await d.dispatch(task('brk', 'e1'), t, ep);
    expect(deferred.kind).toBe('deferred');
    expect(deferred.kind === 'deferred' && deferred.retryAfterMs).toBeGreaterThan(0);
    expect(deferred.kind === 'deferred' && deferred.retryAfterMs).toBeLessThanOrEqual(400);
    expect(r.requests.length).toBe(seen);
    expect(d.inFlight('brk')).toBe(0);

    await waitFor(() => d.breakerState('brk', 'e1') === 'half-open', 'the breaker to half-open', 5_000, 20);
    // A failing probe re-opens it.
    expect((await d.dispatch(task('brk', 'e1'), t, ep)).kind).toBe('retry');
    expect(d.breakerState('brk', 'e1')).toBe('open');
    await waitFor(
      () => d.breakerState('brk', 'e1') === 'half-open',
      'the breaker to half-open again',
      5_000,
      20,
    );
    failing = false;
    expect((await d.dispatch(task('brk', 'e1'), t, ep)).kind).toBe('delivered');
    expect(d.breakerState('brk', 'e1')).toBe('closed');
    expect((await d.dispatch(task('brk', 'e1'), t, ep)).kind).toBe('delivered');
    expect(r.requests.length).toBe(seen + 3);
  });

  it("does not count the receiver's own 4xx (other than 408/429) against it", async () => {
    const r = await rx((_q, res) => res.writeHead(422).end());
    const d = dispatcher({ breaker: { volumeThreshold: 10, resetTimeoutMs: 400 } });
    const t = tenant('brk4');
    const ep = endpoint('brk4', 'e1', r.url);
    for (let i = 0; i < 15; i++)
      expect(core(await d.dispatch(task('brk4', 'e1'), t, ep))).toEqual({
        kind: 'retry',
        status: 422,
        error: 'http_422',
      });
    expect(d.breakerState('brk4', 'e1')).toBe('closed');
    expect(r.requests).toHaveLength(15);
  });
});

describe('Dispatcher: shutdown', () => {
  it("attempts cut short by the dispatcher's own close do not count against the endpoint's breaker", async () => {
    const hang = await rx(() => {}); // never answers
    const d = dispatcher({ breaker: { volumeThreshold: 10, resetTimeoutMs: 60_000 } });
    const t = tenant('shut', { concurrency: 16 });
    const ep = endpoint('shut', 'e1', hang.url, { timeoutMs: 30_000 });
    const changes: unknown[] = [];
    const onChange = (m: unknown) => changes.push(m);
    diagnosticsChannel.subscribe(CHANNELS.breakerChange, onChange);
    try {
      // Well past the volume threshold, every one open at the receiver when the close comes.
      const open = Array.from({ length: 16 }, () => d.dispatch(task('shut', 'e1'), t, ep));
      await waitFor(() => hang.open() === 16, 'every attempt to reach the receiver', 5_000, 10);
      await d.close();
      const outcomes = await Promise.all(open);
      expect(outcomes.map((o) => core(o))).toEqual(Array(16).fill({ kind: 'retry', error: 'shutdown' }));
      // Counted as failures, 16 of 16 would have opened the breaker (and said so on the channel).
      expect(changes).toEqual([]);
    } finally {
      diagnosticsChannel.unsubscribe(CHANNELS.breakerChange, onChange);
    }
  });
});

describe('Dispatcher: tenant isolation', () => {
  it("a hanging, flooding tenant keeps to its concurrency and does not slow another tenant's deliveries", async () => {
    const hang = await rx(() => {}); // never answers
    const fast = await rx();
    const d = dispatcher();
    const a = tenant('iso-a', { concurrency: 4 });
    const b = tenant('iso-b', { concurrency: 8 });
    const epA = endpoint('iso-a', 'slow', hang.url, { timeoutMs: 10_000 });
    const epB = endpoint('iso-b', 'fast', fast.url);
    const flood = Array.from({ length: 300 }, () => d.dispatch(task('iso-a', 'slow'), a, epA));
    let maxInFlightA = 0;
    const latencies: number[] = [];
    for (let round = 0; round < 25; round++) {
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          const t0 = performance.now();
          const out = await d.dispatch(task('iso-b', 'fast'), b, epB);
          latencies.push(performance.now() - t0);
          expect(out.kind).toBe('delivered');
        }),
      );
      maxInFlightA = Math.max(maxInFlightA, d.inFlight('iso-a'));
    }
    expect(latencies).toHaveLength(200);
    expect(percentile(latencies, 99)).toBeLessThan(500);
    expect(maxInFlightA).toBe(4);
    expect(hang.maxOpen()).toBe(4);
    expect(d.pending('iso-a')).toBe(296);
    // The in-flight gauge reads the same counts when scraped.
    const gauge = await registry.getSingleMetricAsString('spillway_delivery_in_flight');
    expect(gauge).toContain('spillway_delivery_in_flight{tenant="iso-a"} 4');
    await d.close();
    const outcomes = await Promise.all(flood);
    expect(outcomes.every((o) => o.kind === 'retry')).toBe(true);
    expect(hang.maxOpen()).toBe(4);
  });
});

describe('Dispatcher: sockets per origin follow the tenant concurrency', () => {
  it('puts every request its concurrency allows on the wire, up to 64 sockets per origin', async () => {
    // A receiver that holds every request: what it sees open at once is what is on the wire.
    const hold = await rx(() => {});
    const d = dispatcher();
    const mid = tenant('sock-40', { concurrency: 40 });
    const big = tenant('sock-100', { concurrency: 100 });
    const epMid = endpoint('sock-40', 'h', hold.url, { timeoutMs: 10_000 });
    const epBig = endpoint('sock-100', 'h', hold.url, { timeoutMs: 10_000 });
    const midRuns = Array.from({ length: 60 }, () => d.dispatch(task('sock-40', 'h'), mid, epMid));
    // With 16 sockets per origin (the old default) 24 of the 40 allowed requests waited in undici's queue.
    await waitFor(() => hold.maxOpen() >= 40, 'the 40 requests tenant sock-40 may have open', 5000);
    expect(d.inFlight('sock-40')).toBe(40);
    const bigRuns = Array.from({ length: 120 }, () => d.dispatch(task('sock-100', 'h'), big, epBig));
    // sock-100 may have 100 requests open, but at most 64 sockets to one origin.
    await waitFor(() => hold.maxOpen() >= 40 + 64, 'sock-100 at 64 open sockets', 5000);
    await sleep(200);
    expect(hold.maxOpen()).toBe(40 + 64);
    expect(d.inFlight('sock-100')).toBe(100);
    await d.close();
    await Promise.all([...midRuns, ...bigRuns]);
  });
});

describe('Dispatcher: diagnostics channel', () => {
  it('publishes every attempt outcome on spillway:delivery:attempt while subscribed, nothing after', async () => {
    const r = await rx((req, res) => {
      res.statusCode = req.url?.includes('fail') ? 500 : 200;
      res.end();
    });
    const d = dispatcher();
    const tid = `dc-${Date.now()}`;
    const t = tenant(tid);
    const seen: { eventId: string; kind: string }[] = [];
    const onMsg = (m: unknown) => {
      const { eventId, outcome } = m as { eventId: string; outcome: string };
      seen.push({ eventId, kind: outcome });
    };
    diagnosticsChannel.subscribe('spillway:delivery:attempt', onMsg);
    const ok = task(tid, 'e1');
    const bad = task(tid, 'e2');
    await d.dispatch(ok, t, endpoint(tid, 'e1', `${r.url}/ok`));
    await d.dispatch(bad, t, endpoint(tid, 'e2', `${r.url}/fail`));
    diagnosticsChannel.unsubscribe('spillway:delivery:attempt', onMsg);
    await d.dispatch(task(tid, 'e1'), t, endpoint(tid, 'e1', `${r.url}/ok`));
    expect(seen).toEqual([
      { eventId: ok.eventId, kind: 'delivered' },
      { eventId: bad.eventId, kind: 'http_500' },
    ]);
    await d.close();
  });
});
