import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { sign as githubSign } from '@octokit/webhooks-methods';
import { type Started, start } from '@spillway/router';
import { Webhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testEnv } from '../helpers/env.ts';
import { sleep, waitFor } from '../helpers/wait.ts';
import { expectSignedWith } from '../helpers/webhooks.ts';

/**
 * Provider webhooks through the whole router: `start('all')`, config through the admin API, a
 * signed provider request on the ingest port, and what reaches the tenant's endpoint: the raw bytes
 * unchanged, signed per Standard Webhooks with the endpoint's secret.
 */
interface Got {
  body: Buffer;
  headers: Record<string, string | string[] | undefined>;
}

describe('ingest → delivery (all roles in one process)', () => {
  let sp: Started;
  let admin: string;
  let token: string;
  let receiver: Server;
  let target: string;
  const got: Got[] = [];
  const tenant = `acme-${randomBytes(3).toString('hex')}`;
  let endpointSecret: string;

  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${admin}/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    return { status: res.status, json: text ? (JSON.parse(text) as Record<string, unknown>) : undefined };
  };

  beforeAll(async () => {
    receiver = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        got.push({ body: Buffer.concat(chunks), headers: req.headers });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    target = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    const env = testEnv({
      SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.1/32',
      SPILLWAY_INGEST_BACKEND: 'node',
      SPILLWAY_RETRY_SCHEDULE: '100ms,200ms',
    });
    token = env.SPILLWAY_ADMIN_TOKEN!;
    sp = await start('all', env);
    admin = `http://127.0.0.1:${sp.adminPort}`;
    expect((await api('POST', '/tenants', { id: tenant })).status).toBe(201);
    const ep = await api('POST', `/tenants/${tenant}/endpoints`, { url: target });
    expect(ep.status).toBe(201);
    endpointSecret = String(ep.json!.secret);
  });

  afterAll(async () => {
    await sp?.close();
    receiver?.closeAllConnections();
    await new Promise((r) => receiver?.close(r));
  });

  const ingest = (sourceId: string, body: Buffer, headers: Record<string, string>) =>
    fetch(`http://127.0.0.1:${sp.ingestPort}/ingest/${sourceId}`, {
      method: 'POST',
      body,
      headers: { 'content-type': 'application/json', ...headers },
    });

  it('a GitHub delivery arrives at the endpoint with the raw bytes unchanged; a retry of it is a duplicate', async () => {
    const src = await api('POST', `/tenants/${tenant}/sources`, { kind: 'github', secret: 'gh-secret' });
    expect(src.status).toBe(201);
    expect(src.json!.ingestPath).toBe(`/ingest/${src.json!.id}`);
    const body = Buffer.from(`{ "action" : "opened",\n  "x": "caf\u00e9 \u{1f680}", "n": 1.50 }`);
    const delivery = randomBytes(8).toString('hex');
    const headers = {
      'x-hub-signature-256': await githubSign('gh-secret', body.toString('utf8')),
      'x-github-event': 'pull_request',
      'x-github-delivery': delivery,
    };
    const first = await ingest(String(src.json!.id), body, headers);
    expect(first.status).toBe(202);
    expect(await first.json()).toEqual({ id: delivery });
    const again = await ingest(String(src.json!.id), body, headers);
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual({ id: delivery, duplicate: true });

    const hit = (await waitFor(
      () => got.find((g) => g.headers['webhook-id'] === delivery),
      'the delivery at the endpoint',
      30_000,
    ))!;
    expect(hit.body.equals(body)).toBe(true);
    expect(hit.headers['spillway-event-type']).toBe('pull_request');
    // The endpoint can verify it with its own secret over the exact bytes.
    expectSignedWith(endpointSecret, hit);
    // Only one delivery for the deduplicated pair (deliberate pause: a second one would show up).
    await sleep(500);
    expect(got.filter((g) => g.headers['webhook-id'] === delivery)).toHaveLength(1);

    // Deleting the source through the admin API reaches the ingest role's cache: 404 from then on.
    expect((await api('DELETE', `/tenants/${tenant}/sources/${src.json!.id}`)).status).toBe(204);
    const fresh = { ...headers, 'x-github-delivery': randomBytes(8).toString('hex') };
    await waitFor(
      async () => (await ingest(String(src.json!.id), body, fresh)).status === 404,
      'the deleted source to be refused',
      5000,
    );
  });

  it('Stripe, Shopify and Standard Webhooks events are delivered byte for byte; a bad signature is not', async () => {
    const stripe = new Stripe('sk_test_x');
    const stripeSecret = `whsec_${randomBytes(24).toString('base64')}`;
    const stdSecret = `whsec_${randomBytes(24).toString('base64')}`;
    const st = await api('POST', `/tenants/${tenant}/sources`, { kind: 'stripe', secret: stripeSecret });
    const sh = await api('POST', `/tenants/${tenant}/sources`, { kind: 'shopify', secret: 'shop-secret' });
    const sw = await api('POST', `/tenants/${tenant}/sources`, { kind: 'standard', secret: stdSecret });
    expect([st.status, sh.status, sw.status]).toEqual([201, 201, 201]);

    const evt = `evt_${randomBytes(6).toString('hex')}`;
    const stripeBody = Buffer.from(`{"id":"${evt}", "object":"event", "type":"invoice.paid"}`);
    const r1 = await ingest(String(st.json!.id), stripeBody, {
      'stripe-signature': stripe.webhooks.generateTestHeaderString({
        payload: stripeBody.toString(),
        secret: stripeSecret,
      }),
    });
    expect(r1.status).toBe(202);

    const { createHmac } = await import('node:crypto');
    const wid = randomBytes(6).toString('hex');
    const shopBody = Buffer.from('{"id": 820982911946154500, "email":"jon@example.com"}');
    const r2 = await ingest(String(sh.json!.id), shopBody, {
      'x-shopify-hmac-sha256': createHmac('sha256', 'shop-secret').update(shopBody).digest('base64'),
      'x-shopify-topic': 'orders/create',
      'x-shopify-webhook-id': wid,
    });
    expect(r2.status).toBe(202);

    const msg = `msg_${randomBytes(6).toString('hex')}`;
    const stdBody = Buffer.from('{"type":"user.created","data":{"id":1}}');
    const now = new Date();
    const r3 = await ingest(String(sw.json!.id), stdBody, {
      'webhook-id': msg,
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': new Webhook(stdSecret).sign(msg, now, stdBody),
    });
    expect(r3.status).toBe(202);

    const bad = await ingest(String(sh.json!.id), shopBody, {
      'x-shopify-hmac-sha256': createHmac('sha256', 'wrong').update(shopBody).digest('base64'),
      'x-shopify-topic': 'orders/create',
      'x-shopify-webhook-id': 'never',
    });
    expect(bad.status).toBe(401);

    for (const [id, body, type] of [
      [evt, stripeBody, 'invoice.paid'],
      [wid, shopBody, 'orders/create'],
      [msg, stdBody, 'user.created'],
    ] as const) {
      const hit = (await waitFor(
        () => got.find((g) => g.headers['webhook-id'] === id),
        `delivery of ${id}`,
        30_000,
      ))!;
      expect(hit.body.equals(body)).toBe(true);
      expect(hit.headers['spillway-event-type']).toBe(type);
    }
    expect(got.find((g) => g.headers['webhook-id'] === 'never')).toBeUndefined();
    // Every role serves /metrics on the admin port: the ingest counters are there, by source kind,
    // and never by source id (the only secret in an ingest URL).
    const metrics = await (await fetch(`${admin}/metrics`)).text();
    expect(metrics).toMatch(/spillway_ingest_requests_total\{kind="shopify",outcome="unauthorized"\} 1/);
    expect(metrics).toMatch(
      /spillway_ingest_verify_failures_total\{kind="shopify",reason="bad_signature"\} 1/,
    );
    expect(metrics).not.toContain(sh.json!.id);
    expect(metrics).toContain('spillway_ingest_enqueue_seconds_bucket');
  });
});
