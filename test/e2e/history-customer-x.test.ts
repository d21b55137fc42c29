import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminCall, type StartedRouter, startRouter } from '../helpers/router-started.ts';
import { sleep, waitFor } from '../helpers/wait.ts';

/**
 * "Customer X says they never got order 123": an endpoint is misconfigured for a while (its URL
 * answers 404), every delivery to it fails for good; the operator finds the failures in the event
 * log and the endpoint's failed attempts, fixes the URL, recovers since T, and every event arrives
 * exactly once more. Real `start('all')`, real Redis and Kafka, a real receiver on loopback.
 */
let router: StartedRouter;
let receiver: http.Server;
let base: string;
/** Deliveries that reached the right path, per webhook-id. */
const got = new Map<string, number>();

beforeAll(async () => {
  receiver = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.url === '/hooks/customer-x') {
        const id = String(req.headers['webhook-id']);
        got.set(id, (got.get(id) ?? 0) + 1);
        res.writeHead(200, { 'content-type': 'text/plain' }).end('thanks');
      } else res.writeHead(404, { 'content-type': 'text/plain' }).end(`no hook at ${req.url}`);
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
  router = await startRouter('all', {
    SPILLWAY_RETRY_SCHEDULE: '50ms,100ms',
    SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.1/32',
  });
}, 90_000);

afterAll(async () => {
  await router?.close();
  await new Promise((r) => receiver?.close(r));
});

const call = (...a: Parameters<ReturnType<typeof adminCall>>) => adminCall(router)(...a);

describe('customer X', () => {
  it('finds the failed deliveries, fixes the URL, recovers since T: every event arrives exactly once more', async () => {
    const tid = `shop-${randomBytes(3).toString('hex')}`;
    expect((await call('POST', '/v1/tenants', { id: tid })).status).toBe(201);
    // The wrong URL: the receiver answers 404 (a 4xx never opens the breaker; each attempt is real).
    expect(
      (await call('POST', `/v1/tenants/${tid}/endpoints`, { id: 'cx', url: `${base}/hooks/customer-y` }))
        .status,
    ).toBe(201);
    // An earlier event that failed before T: not part of the recovery.
    expect(
      (await call('POST', `/v1/tenants/${tid}/events`, { id: 'old', type: 'order.created', payload: {} }))
        .status,
    ).toBe(202);
    await waitFor(
      async () => (await call('GET', `/v1/tenants/${tid}/dlq`)).body.data.length === 1,
      'the old failure',
    );
    await sleep(20);
    const T = new Date().toISOString();
    const N = 20;
    for (let i = 0; i < N; i++)
      expect(
        (
          await call('POST', `/v1/tenants/${tid}/events`, {
            id: `order-${i}`,
            type: 'order.created',
            payload: { order: i },
          })
        ).status,
      ).toBe(202);
    await waitFor(
      async () => (await call('GET', `/v1/tenants/${tid}/dlq?limit=1000`)).body.data.length === N + 1,
      'every delivery failed for good (3 attempts each)',
      30_000,
    );

    // The operator finds them: the event log, failed only, newest first, in pages.
    // (The history is written a few milliseconds after each DLQ entry: wait until all are indexed.)
    const listFailed = async () => {
      const ids: string[] = [];
      let cursor: string | undefined;
      do {
        const r = await call(
          'GET',
          `/v1/tenants/${tid}/events?status=failed&since=${encodeURIComponent(T)}&limit=7${cursor ? `&cursor=${cursor}` : ''}`,
        );
        expect(r.status).toBe(200);
        for (const e of r.body.data) {
          expect(e).toMatchObject({ type: 'order.created', status: 'failed', endpoints: ['cx'] });
          ids.push(e.id);
        }
        cursor = r.body.next;
      } while (cursor);
      return ids;
    };
    const failedIds = await waitFor(async () => {
      const ids = await listFailed();
      return ids.length >= N ? ids : undefined;
    }, 'every failure in the event log');
    expect(failedIds!.sort()).toEqual(Array.from({ length: N }, (_, i) => `order-${i}`).sort());

    // The endpoint's failed attempts since T: what it answered, how long it took.
    const attempts = await call(
      'GET',
      `/v1/tenants/${tid}/endpoints/cx/attempts?status=failed&since=${encodeURIComponent(T)}&limit=100`,
    );
    expect(attempts.status).toBe(200);
    expect(attempts.body.data).toHaveLength(N * 3);
    expect(attempts.body.data[0]).toMatchObject({
      endpointId: 'cx',
      status: 'failed',
      httpStatus: 404,
      error: 'http_404',
      response: 'no hook at /hooks/customer-y',
    });
    expect(attempts.body.data.every((a: { latencyMs: number }) => a.latencyMs >= 0)).toBe(true);

    // "Order 123": the event view and its attempt history.
    const ev = await call('GET', `/v1/tenants/${tid}/events/order-7`);
    expect(ev.body).toMatchObject({
      id: 'order-7',
      deliveries: [
        { endpointId: 'cx', status: 'failed', attempts: 3, lastStatus: 404, lastError: 'http_404' },
      ],
    });
    const hist = await call('GET', `/v1/tenants/${tid}/events/order-7/attempts`);
    expect(
      hist.body.data.map(
        (a: { attempt: number; status: string; deadLettered?: boolean; nextAt?: string }) =>
          `${a.attempt}:${a.status}:${a.deadLettered ? 'dlq' : a.nextAt ? 'next' : '-'}`,
      ),
    ).toEqual(['3:failed:dlq', '2:failed:next', '1:failed:next']);

    // The fix, then the recovery (idempotent per request id).
    expect(
      (await call('PATCH', `/v1/tenants/${tid}/endpoints/cx`, { url: `${base}/hooks/customer-x` })).status,
    ).toBe(200);
    const key = { 'idempotency-key': `recover-${tid}` };
    const rec = await call('POST', `/v1/tenants/${tid}/endpoints/cx/recover`, { since: T }, key);
    expect(rec.status).toBe(202);
    expect(rec.body).toMatchObject({ kind: 'recover', endpointId: 'cx', total: N });
    const again = await call('POST', `/v1/tenants/${tid}/endpoints/cx/recover`, { since: T }, key);
    expect(again.status).toBe(200);
    expect(again.body.id).toBe(rec.body.id);

    const done = await waitFor(
      async () => {
        const op = (await call('GET', `/v1/tenants/${tid}/operations/${rec.body.id}`)).body;
        return op.delivered === N ? op : undefined;
      },
      'the recovery delivered everything',
      30_000,
    );
    expect(done).toMatchObject({ state: 'enqueued', total: N, enqueued: N, delivered: N, failed: 0 });
    await sleep(500); // deliberate: a second delivery of any of them would show up here
    expect(got.size).toBe(N);
    for (let i = 0; i < N; i++) expect(got.get(`order-${i}`)).toBe(1);
    expect(got.has('old')).toBe(false);
    // The old failure is still in the DLQ, the recovered ones left it.
    expect(
      (await call('GET', `/v1/tenants/${tid}/dlq`)).body.data.map((e: { eventId: string }) => e.eventId),
    ).toEqual(['old']);
    // The event log's failed list has the old one only now.
    await waitFor(async () => {
      const f = await call('GET', `/v1/tenants/${tid}/events?status=failed`);
      return f.body.data.length === 1 && f.body.data[0].id === 'old';
    }, 'recovered events leave the failed list');
    await waitFor(
      async () =>
        (await call('GET', `/v1/tenants/${tid}/events/order-7`)).body.deliveries[0].status === 'delivered',
      'the event view says delivered',
    );
    const after = await call('GET', `/v1/tenants/${tid}/events/order-7/attempts`);
    expect(after.body.data[0]).toMatchObject({
      attempt: 1,
      status: 'delivered',
      httpStatus: 200,
      response: 'thanks',
      operation: rec.body.id,
    });
  });
});
