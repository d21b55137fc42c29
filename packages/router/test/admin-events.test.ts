import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { type Started, start } from '@spillway/router/testing';
import type { createKeys } from '@spillway/shared';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEnv } from '../../../test/helpers/env.ts';
import { type PrivateRedis, startPrivateRedis } from '../../../test/helpers/redis-server.ts';
import { type StartedRouter, startRouter } from '../../../test/helpers/router-started.ts';
import { waitFor } from '../../../test/helpers/wait.ts';

/**
 * Events, DLQ and stats routes against a real `start('all')` (admin + worker + ingest in one
 * process) delivering to a real HTTP receiver on loopback.
 */
interface Hit {
  path: string;
  body: string;
  headers: http.IncomingHttpHeaders;
}

let s: Started;
let env: Record<string, string>;
let base: string;
let redis: Redis;
let keys: ReturnType<typeof createKeys>;
let router: StartedRouter | undefined;
let receiver: http.Server;
let receiverUrl: string;
const hits: Hit[] = [];
/** Paths the receiver fails with 500 (others get 200). */
const failing = new Set<string>();

beforeAll(async () => {
  receiver = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      hits.push({ path: req.url ?? '', body: Buffer.concat(chunks).toString(), headers: req.headers });
      res.statusCode = failing.has(req.url ?? '') ? 500 : 200;
      res.end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
  router = await startRouter('all', {
    SPILLWAY_RETRY_SCHEDULE: '50ms',
    SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.1/32',
  });
  ({ s, env, base, redis, keys } = router);
}, 60_000);

afterAll(async () => {
  await router?.close();
  await new Promise((r) => receiver?.close(r));
});

async function call(method: string, path: string, body?: unknown, token = env.SPILLWAY_ADMIN_TOKEN) {
  const headers: Record<string, string> = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(base + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

async function tenantWithEndpoint(path: string) {
  const tid = `t-${randomBytes(4).toString('hex')}`;
  expect((await call('POST', '/v1/tenants', { id: tid })).status).toBe(201);
  expect(
    (await call('POST', `/v1/tenants/${tid}/endpoints`, { id: 'ep1', url: `${receiverUrl}${path}` })).status,
  ).toBe(201);
  return tid;
}

describe('events', () => {
  it('202 then 200 duplicate; the payload is delivered once as its JSON bytes; GET shows the delivery', async () => {
    const path = `/ok-${randomBytes(3).toString('hex')}`;
    const tid = await tenantWithEndpoint(path);
    const payload = { order: 42, items: ['a', 'b'], nested: { ok: true } };
    const a = await call('POST', `/v1/tenants/${tid}/events`, {
      id: 'evt-1',
      type: 'order.created',
      payload,
    });
    expect(a.status).toBe(202);
    expect(a.body).toEqual({ id: 'evt-1' });
    const dup = await call('POST', `/v1/tenants/${tid}/events`, {
      id: 'evt-1',
      type: 'order.created',
      payload,
    });
    expect(dup.status).toBe(200);
    expect(dup.body).toEqual({ id: 'evt-1', duplicate: true });

    const ev = await waitFor(async () => {
      const r = await call('GET', `/v1/tenants/${tid}/events/evt-1`);
      return r.status === 200 && r.body.deliveries[0]?.status === 'delivered' ? r.body : undefined;
    }, 'delivery of evt-1');
    expect(ev).toMatchObject({
      id: 'evt-1',
      type: 'order.created',
      deliveries: [{ endpointId: 'ep1', status: 'delivered', attempts: 1, lastStatus: 200 }],
    });
    expect(Number.isNaN(Date.parse(ev.receivedAt))).toBe(false);
    const got = hits.filter((h) => h.path === path);
    expect(got).toHaveLength(1);
    expect(got[0]!.body).toBe(JSON.stringify(payload));
    expect(got[0]!.headers['content-type']).toBe('application/json');
    expect(got[0]!.headers['webhook-id']).toBe('evt-1');
    expect(got[0]!.headers['spillway-event-type']).toBe('order.created');

    // A generated id comes back and is usable.
    const gen = await call('POST', `/v1/tenants/${tid}/events`, { type: 'order.updated', payload: null });
    expect(gen.status).toBe(202);
    expect(gen.body.id).toMatch(/^evt_/);
    // The event record is written when a worker fans the event out, a moment after the 202.
    await waitFor(
      async () => (await call('GET', `/v1/tenants/${tid}/events/${gen.body.id}`)).status === 200,
      'generated event visible',
    );
  });

  it('404 for an unknown event or tenant, and nothing is written for an unknown tenant', async () => {
    const tid = await tenantWithEndpoint('/unused');
    expect((await call('GET', `/v1/tenants/${tid}/events/never`)).body.error.code).toBe('not_found');
    const ghost = `t-${randomBytes(4).toString('hex')}`;
    const r = await call('POST', `/v1/tenants/${ghost}/events`, { id: 'e1', type: 'x.y', payload: {} });
    expect(r.status).toBe(404);
    expect(await redis.keys(`${keys.prefix}:{t:${ghost}}*`)).toEqual([]);
  });
});

describe('dead letters and stats', () => {
  it('failed deliveries land in the DLQ; list, filter, replay (fresh schedule) and they are delivered', async () => {
    const path = `/flaky-${randomBytes(3).toString('hex')}`;
    failing.add(path);
    const tid = await tenantWithEndpoint(path);
    for (const id of ['d1', 'd2', 'd3'])
      expect(
        (await call('POST', `/v1/tenants/${tid}/events`, { id, type: 'invoice.paid', payload: { id } }))
          .status,
      ).toBe(202);
    const dlq = await waitFor(async () => {
      const r = await call('GET', `/v1/tenants/${tid}/dlq`);
      return r.body.data.length === 3 ? r.body.data : undefined;
    }, 'three dead letters');
    expect(dlq.map((d: { eventId: string }) => d.eventId).sort()).toEqual(['d1', 'd2', 'd3']);
    expect(dlq[0]).toMatchObject({
      endpointId: 'ep1',
      attempts: 2,
      lastError: expect.any(String),
      failedAt: expect.any(String),
    });
    expect((await call('GET', `/v1/tenants/${tid}/dlq?endpointId=other`)).body.data).toEqual([]);
    expect((await call('GET', `/v1/tenants/${tid}/dlq?limit=2`)).body.data).toHaveLength(2);
    expect((await call('GET', `/v1/tenants/${tid}/dlq?limit=0`)).status).toBe(400);

    const stats = await call('GET', `/v1/tenants/${tid}/stats`);
    expect(stats.status).toBe(200);
    expect(stats.body).toMatchObject({
      status: 'active',
      dlq: 3,
      credits: { limit: 1000 },
      endpoints: [{ id: 'ep1', breaker: expect.any(String) }],
    });
    for (const k of ['queued', 'inFlight', 'spilled', 'retrying', 'delivered', 'failed'])
      expect(typeof stats.body[k]).toBe('number');
    expect(stats.body.workers).toBeUndefined();

    expect((await call('POST', `/v1/tenants/${tid}/dlq/replay`, { endpointId: 'nope' })).status).toBe(404);
    failing.delete(path);
    const before = hits.filter((h) => h.path === path).length;
    const rep = await call('POST', `/v1/tenants/${tid}/dlq/replay`);
    expect(rep.status).toBe(202);
    expect(rep.body).toEqual({ replayed: 3 });
    await waitFor(async () => {
      const all = await Promise.all(
        ['d1', 'd2', 'd3'].map((id) => call('GET', `/v1/tenants/${tid}/events/${id}`)),
      );
      return all.every((r) => r.body.deliveries[0].status === 'delivered');
    }, 'replayed events delivered');
    expect(hits.filter((h) => h.path === path).length - before).toBe(3);
    expect((await call('GET', `/v1/tenants/${tid}/dlq`)).body.data).toEqual([]);
    expect((await call('POST', `/v1/tenants/${tid}/dlq/replay`, {})).body).toEqual({ replayed: 0 });

    // Totals from the shared counters, and with ?detail=workers the one live worker's own
    // hand-offs since it started (published every second, so wait for both).
    const detail = await waitFor(
      async () => {
        const r = await call('GET', `/v1/tenants/${tid}/stats?detail=workers`);
        return r.body.delivered >= 3 && r.body.workers?.length === 1 && r.body.workers[0].delivered >= 3
          ? r.body
          : undefined;
      },
      'published worker counters',
      10_000,
      200,
    );
    expect(detail.workers[0]).toMatchObject({ workerId: s.rt.workerId, delivered: detail.delivered });
    expect(detail).toMatchObject({ delivered: 3, failed: 3, retrying: 0, spilled: 0 });
    expect(detail.endpoints[0]).toMatchObject({ id: 'ep1', delivered: 3, failed: 3 });
  });

  it('a tenant key posts and reads its own events and stats', async () => {
    const tid = await tenantWithEndpoint(`/key-${randomBytes(3).toString('hex')}`);
    const key = (await call('POST', `/v1/tenants/${tid}/keys`, {})).body.key as string;
    const r = await call('POST', `/v1/tenants/${tid}/events`, { id: 'k1', type: 'a.b', payload: 1 }, key);
    expect(r.status).toBe(202);
    await waitFor(
      async () => (await call('GET', `/v1/tenants/${tid}/events/k1`, undefined, key)).status === 200,
      'k1 readable with the key',
    );
    expect((await call('GET', `/v1/tenants/${tid}/stats`, undefined, key)).status).toBe(200);
    expect((await call('GET', `/v1/tenants/${tid}/dlq`, undefined, key)).status).toBe(403);
  });
});

describe('storage down', () => {
  let ownRedis: PrivateRedis | undefined;
  let own: Started | undefined;
  afterAll(async () => {
    await own?.close();
    await ownRedis?.destroy();
  });

  it('events POST answers 503 with Retry-After (never 2xx) when Redis is gone', async () => {
    ownRedis = await startPrivateRedis();
    const e = testEnv({ SPILLWAY_REDIS_URL: ownRedis.url });
    own = await start('admin', e);
    const url = `http://127.0.0.1:${own.adminPort}`;
    const h = { authorization: `Bearer ${e.SPILLWAY_ADMIN_TOKEN}`, 'content-type': 'application/json' };
    expect(
      (await fetch(`${url}/v1/tenants`, { method: 'POST', headers: h, body: JSON.stringify({ id: 'acme' }) }))
        .status,
    ).toBe(201);

    await ownRedis.kill();
    const res = await fetch(`${url}/v1/tenants/acme/events`, {
      method: 'POST',
      headers: h,
      body: JSON.stringify({ id: 'x', type: 'a.b', payload: {} }),
    });
    expect(res.status).toBe(503);
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unavailable');
  }, 30_000);
});
