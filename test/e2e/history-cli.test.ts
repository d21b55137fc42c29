import { createHmac, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminCall, adminCli, type StartedRouter, startRouter } from '../helpers/router-started.ts';
import { sleep, waitFor } from '../helpers/wait.ts';

/**
 * Resend, test send and the history commands of the `spillway` CLI (a subprocess) against a real
 * `start('all')` on Redis and Kafka, delivering to a receiver on loopback.
 */
let router: StartedRouter;
let receiver: http.Server;
let base: string;
interface Hit {
  id: string;
  body: string;
  headers: http.IncomingHttpHeaders;
}
const hits: Hit[] = [];
const LONG = `x${'é'.repeat(3000)}`;
let failing = true;

beforeAll(async () => {
  receiver = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.url === '/long') {
        // A long answer whose 1,024th byte falls inside a 2-byte character.
        res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end(LONG);
        return;
      }
      const ok = !failing || req.url === '/always-ok';
      if (ok)
        hits.push({
          id: String(req.headers['webhook-id']),
          body: Buffer.concat(chunks).toString(),
          headers: req.headers,
        });
      res
        .writeHead(ok ? 200 : 500, { 'content-type': 'application/json' })
        .end(ok ? '{"ok":true}' : '{"down":true}');
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
  router = await startRouter('all', {
    SPILLWAY_RETRY_SCHEDULE: '50ms',
    SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.1/32',
  });
}, 90_000);

afterAll(async () => {
  await router?.close();
  await new Promise((r) => receiver?.close(r));
});

const token = () => router.env.SPILLWAY_ADMIN_TOKEN!;

const call = (...a: Parameters<ReturnType<typeof adminCall>>) => adminCall(router)(...a);

const cli = (args: string[]) => adminCli(router, args);

describe('resend, test send and the history CLI', () => {
  it('test send: a signed example event, answered with status, latency and the body excerpt', async () => {
    const tid = `ts-${randomBytes(3).toString('hex')}`;
    await call('POST', '/v1/tenants', { id: tid });
    const ep = (await call('POST', `/v1/tenants/${tid}/endpoints`, { id: 'probe', url: `${base}/always-ok` }))
      .body;
    const r = await call('POST', `/v1/tenants/${tid}/endpoints/probe/test`);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      endpointId: 'probe',
      attempt: 1,
      status: 'delivered',
      httpStatus: 200,
      response: '{"ok":true}',
    });
    expect(r.body.latencyMs).toBeGreaterThanOrEqual(0);
    const hit = hits.find((h) => h.id === r.body.eventId)!;
    expect(JSON.parse(hit.body)).toMatchObject({ type: 'spillway.test', endpointId: 'probe' });
    // Signed like any delivery (Standard Webhooks, the endpoint's secret).
    const key = Buffer.from(String(ep.secret).slice('whsec_'.length), 'base64');
    const signed = `${hit.headers['webhook-id']}.${hit.headers['webhook-timestamp']}.${hit.body}`;
    expect(hit.headers['webhook-signature']).toContain(
      `v1,${createHmac('sha256', key).update(signed).digest('base64')}`,
    );
    // A down endpoint: the attempt says so (not an error of the API).
    await call('POST', `/v1/tenants/${tid}/endpoints`, { id: 'down', url: `${base}/down` });
    const down = await call('POST', `/v1/tenants/${tid}/endpoints/down/test`);
    expect(down.body).toMatchObject({
      status: 'failed',
      httpStatus: 500,
      error: 'http_500',
      response: '{"down":true}',
    });
    expect((await call('POST', `/v1/tenants/${tid}/endpoints/nope/test`)).status).toBe(404);
    // The CLI prints the same attempt.
    const c = await cli(['endpoints', 'test', tid, 'probe']);
    expect(c.code).toBe(0);
    expect(c.out).toMatch(/status\s+delivered/);
  });

  it('an attempt keeps the first 1 KiB of the response body, a character cut at the edge replaced', async () => {
    const tid = `lx-${randomBytes(3).toString('hex')}`;
    await call('POST', '/v1/tenants', { id: tid });
    await call('POST', `/v1/tenants/${tid}/endpoints`, { id: 'long', url: `${base}/long` });
    expect(
      (await call('POST', `/v1/tenants/${tid}/events`, { id: 'l1', type: 't', payload: {} })).status,
    ).toBe(202);
    const kept = `x${'é'.repeat(511)}\ufffd`;
    expect(Buffer.byteLength(LONG)).toBeGreaterThan(6000);
    const a = await waitFor(async () => {
      const r = await call('GET', `/v1/tenants/${tid}/events/l1/attempts`);
      return r.body.data?.[0]?.response ? r.body.data[0] : undefined;
    }, 'attempt recorded');
    expect(a).toMatchObject({ status: 'delivered', httpStatus: 200, response: kept });
    // The endpoint test send keeps the same excerpt.
    expect((await call('POST', `/v1/tenants/${tid}/endpoints/long/test`)).body.response).toBe(kept);
  });

  it('resend one event to all or one endpoint, idempotent per request id; the CLI lists events and attempts and shows progress', async () => {
    failing = false;
    const tid = `rs-${randomBytes(3).toString('hex')}`;
    await call('POST', '/v1/tenants', { id: tid });
    await call('POST', `/v1/tenants/${tid}/endpoints`, { id: 'a', url: `${base}/a` });
    await call('POST', `/v1/tenants/${tid}/endpoints`, { id: 'b', url: `${base}/b` });
    for (let i = 0; i < 3; i++)
      await call('POST', `/v1/tenants/${tid}/events`, {
        id: `r${i}`,
        type: i === 1 ? 'user.created' : 'order.created',
        payload: { i },
      });
    await waitFor(
      () => hits.filter((h) => h.id.startsWith('r') && h.id.length === 2).length >= 6,
      'first deliveries',
    );
    await waitFor(async () => {
      // All three logged (an empty log would pass `every`; the writer flushes in batches).
      const { data } = (await call('GET', `/v1/tenants/${tid}/events`)).body;
      return data.length === 3 && data.every((e: { status: string }) => e.status === 'delivered');
    }, 'the log says delivered');
    const count = (id: string) => hits.filter((h) => h.id === id).length;

    // To every endpoint it went to, with an Idempotency-Key: the same key twice is one resend.
    const k = { 'idempotency-key': `k-${tid}` };
    const a = await call('POST', `/v1/tenants/${tid}/events/r0/resend`, {}, k);
    expect(a.status, JSON.stringify(a.body)).toBe(202);
    expect(a.body).toMatchObject({ kind: 'resend', eventId: 'r0', total: 2, enqueued: 2 });
    const b = await call('POST', `/v1/tenants/${tid}/events/r0/resend`, {}, k);
    expect(b.status).toBe(200);
    expect(b.body.id).toBe(a.body.id);
    await waitFor(
      async () => (await call('GET', `/v1/tenants/${tid}/operations/${a.body.id}`)).body.delivered === 2,
      'resent',
    );
    await sleep(300); // deliberate: a duplicate would arrive here
    expect(count('r0')).toBe(4);
    // To one endpoint, the request id in the body; through the CLI with its progress bar.
    const c = await cli(['events', 'resend', tid, 'r2', '--endpoint', 'b', '--request-id', 'cli-1']);
    expect(c.code).toBe(0);
    expect(c.err).toMatch(/resend \[.*\] 1\/1 delivered 1/);
    expect(count('r2')).toBe(3);
    expect(
      (await cli(['events', 'resend', tid, 'r2', '--endpoint', 'b', '--request-id', 'cli-1'])).code,
    ).toBe(0);
    await sleep(300);
    expect(count('r2')).toBe(3);
    // Unknown event or endpoint: 404, nothing sent.
    expect((await call('POST', `/v1/tenants/${tid}/events/nope/resend`)).status).toBe(404);
    expect((await call('POST', `/v1/tenants/${tid}/events/r0/resend`, { endpointId: 'zz' })).status).toBe(
      404,
    );

    // The event log from the CLI: newest first, filtered by type.
    const list = await cli(['events', 'list', tid, '--type', 'order.created']);
    expect(list.code).toBe(0);
    const rows = list.out.trim().split('\n').slice(1);
    expect(rows.map((l) => l.split(/\s+/)[0])).toEqual(['r2', 'r0']);
    // Attempts of one event: the resend's attempt names its operation.
    const att = await call('GET', `/v1/tenants/${tid}/events/r2/attempts`);
    expect(att.body.data[0]).toMatchObject({
      endpointId: 'b',
      attempt: 1,
      status: 'delivered',
      operation: 'cli-1',
      response: '{"ok":true}',
    });
    expect(att.body.data).toHaveLength(3);
    const ca = await cli(['events', 'attempts', tid, 'r2']);
    expect(ca.code).toBe(0);
    expect(ca.out).toMatch(/b\s+1\s+delivered\s+200/);
    // An endpoint's attempts, and the failed ones only.
    const epAll = await call('GET', `/v1/tenants/${tid}/endpoints/b/attempts`);
    expect(epAll.body.data.map((x: { eventId: string }) => x.eventId)).toEqual([
      'r2',
      'r0',
      'r2',
      'r1',
      'r0',
    ]);
    const cf = await cli(['endpoints', 'attempts', tid, 'b', '--status', 'failed']);
    expect(cf.code).toBe(0);
    expect(cf.out.trim()).toBe('(none)');
    // Paging: one per page, the cursor walks all five.
    const seen: string[] = [];
    let cursor: string | undefined;
    do {
      const p = await call(
        'GET',
        `/v1/tenants/${tid}/endpoints/b/attempts?limit=1${cursor ? `&cursor=${cursor}` : ''}`,
      );
      seen.push(...p.body.data.map((x: { eventId: string }) => x.eventId));
      cursor = p.body.next;
    } while (cursor);
    expect(seen).toEqual(['r2', 'r0', 'r2', 'r1', 'r0']);
    // A tenant key reads its own event log and may resend; not endpoint attempts.
    const key = (await call('POST', `/v1/tenants/${tid}/keys`, {})).body.key as string;
    const asTenant = (path: string, method = 'GET') =>
      fetch(router.base + path, { method, headers: { authorization: `Bearer ${key}` } }).then(
        (r) => r.status,
      );
    expect(await asTenant(`/v1/tenants/${tid}/events`)).toBe(200);
    expect(await asTenant(`/v1/tenants/${tid}/events/r0/attempts`)).toBe(200);
    expect(await asTenant(`/v1/tenants/${tid}/endpoints/b/attempts`)).toBe(403);
    // Bad input: clear errors.
    expect((await call('GET', `/v1/tenants/${tid}/events?since=yesterday`)).body.error.code).toBe(
      'invalid_request',
    );
    expect((await call('GET', `/v1/tenants/${tid}/events?cursor=garbage`)).body.error.code).toBe(
      'invalid_request',
    );
    expect((await call('POST', `/v1/tenants/${tid}/endpoints/b/recover`, {})).body.error.code).toBe(
      'invalid_body',
    );
  });

  it('endpoints recover from the CLI: what failed since T is sent again, with a progress bar; operations get shows it', async () => {
    failing = true;
    const tid = `rc-${randomBytes(3).toString('hex')}`;
    await call('POST', '/v1/tenants', { id: tid });
    await call('POST', `/v1/tenants/${tid}/endpoints`, { id: 'x', url: `${base}/x` });
    // Two events x two attempts stay under the breaker's volume threshold: every attempt is real.
    for (let i = 0; i < 2; i++)
      await call('POST', `/v1/tenants/${tid}/events`, { id: `c${i}`, type: 'a.b', payload: {} });
    await waitFor(async () => (await call('GET', `/v1/tenants/${tid}/dlq`)).body.total === 2, 'both failed');
    failing = false;
    const c = await cli(['endpoints', 'recover', tid, 'x', '--since', '10m', '--request-id', `rc-${tid}`]);
    expect(c.code).toBe(0);
    expect(c.err).toMatch(/recover \[.*\] 2\/2 delivered 2 failed 0/);
    expect(c.out).toMatch(/delivered\s+2/);
    expect(hits.filter((h) => h.id === 'c0' || h.id === 'c1')).toHaveLength(2);
    expect((await call('GET', `/v1/tenants/${tid}/dlq`)).body.total).toBe(0);
    const g = await cli(['--json', 'operations', 'get', tid, `rc-${tid}`]);
    expect(JSON.parse(g.out)).toMatchObject({ kind: 'recover', total: 2, delivered: 2, state: 'enqueued' });
    // A time that is not one: a clear error, nothing sent.
    const bad = await cli(['endpoints', 'recover', tid, 'x', '--since', 'tuesday']);
    expect(bad.code).toBe(1);
    expect(bad.err).toContain('is not a time');
  });

  it('OpenAPI lists every history route', async () => {
    const doc = (await fetch(`${router.base}/openapi.json`).then((r) => r.json())) as {
      paths: Record<string, object>;
    };
    for (const p of [
      '/v1/tenants/{tid}/events',
      '/v1/tenants/{tid}/events/{eid}/attempts',
      '/v1/tenants/{tid}/events/{eid}/resend',
      '/v1/tenants/{tid}/endpoints/{eid}/attempts',
      '/v1/tenants/{tid}/endpoints/{eid}/recover',
      '/v1/tenants/{tid}/endpoints/{eid}/test',
      '/v1/tenants/{tid}/operations/{opid}',
    ])
      expect(Object.keys(doc.paths)).toContain(p);
  });
});
