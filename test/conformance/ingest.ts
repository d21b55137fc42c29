/**
 * The ingest conformance suite: every behaviour docs/ingest.md and issue 7 ask of an ingest
 * backend, run against any IngestServer implementation with the shared pipeline in front of it.
 *   runIngestConformance('node', (opts) => createNodeServer(opts))
 * Providers sign with their own libraries; Redis is real (a private redis-server for the
 * Redis-restart case); clients are real sockets on loopback.
 */
import { createHmac, randomBytes } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import { sign as githubSign } from '@octokit/webhooks-methods';
import {
  createPipeline,
  type IngestPipeline,
  type IngestServer,
  type IngestServerOptions,
  type PipelineOptions,
} from '@spillway/ingest';
import { createKeys, createLogger, type Keys, registry, type Source } from '@spillway/shared';
import { Webhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { randomPrefix } from '../helpers/env.ts';
import { makeTestCerts, type TestCerts } from '../helpers/tls.ts';
import { type Client, makeClient, type Transport } from './clients.ts';
import {
  createTestIntake,
  createTestRateGate,
  freePort,
  MemorySources,
  OwnRedis,
  type TestIntake,
} from './support.ts';

export type MakeIngestServer = (opts: IngestServerOptions) => IngestServer;

const REDIS_URL = process.env.SPILLWAY_REDIS_URL ?? 'redis://127.0.0.1:6390';
const stripe = new Stripe('sk_test_x');

interface Served {
  base: string;
  port: number;
  pipeline: IngestPipeline;
  server: IngestServer;
}

/** Sends a chunked body (no Content-Length) of `total` bytes in `chunk`-sized writes, honouring backpressure. */
function postChunked(
  port: number,
  path: string,
  total: number,
  chunk = 64 * 1024,
): Promise<{ status: number; body: string }> {
  // A well-formed signature that cannot match: the size cap must answer before verification could.
  const headers = {
    'content-type': 'application/json',
    'x-hub-signature-256': `sha256=${'0'.repeat(64)}`,
    'x-github-event': 'push',
    'x-github-delivery': 'big',
  };
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path, method: 'POST', headers });
    const piece = Buffer.alloc(chunk, 0x61);
    let sent = 0;
    let answered = false;
    req.on('response', (res) => {
      answered = true;
      let body = '';
      res.on('data', (d) => {
        body += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    // A server that answers and closes mid-body may reset the socket under our writes: the answer
    // already received is what counts.
    req.on('error', (err) => {
      if (!answered) reject(err);
    });
    const pump = () => {
      while (!answered && sent < total) {
        const n = Math.min(chunk, total - sent);
        sent += n;
        if (!req.write(n === chunk ? piece : piece.subarray(0, n))) return void req.once('drain', pump);
      }
      if (!answered) req.end();
    };
    pump();
  });
}

async function metricValueAsync(name: string, labels: Record<string, string>): Promise<number> {
  const metric = registry.getSingleMetric(name);
  if (!metric) return 0;
  const { values } = await metric.get();
  let sum = 0;
  for (const v of values) if (Object.entries(labels).every(([k, l]) => v.labels[k] === l)) sum += v.value;
  return sum;
}

export interface ConformanceOptions {
  /**
   * How the suite's client talks to the server. Default `http1` (in the clear): every case. The
   * others (`tls-http1`, `tls-h2`: the server gets a test CA's certificate; `h2c`) run the provider
   * cases — signatures, dedup, replays — through that transport; the cases about HTTP/1.1 framing,
   * sockets and budgets stay on `http1`.
   */
  transport?: Transport;
  /**
   * The backend HMACs bodies itself from its route table (io_uring): the suite then checks the
   * signature was checked there (`spillway_ingest_verified_total{where="ring"}`), not in JS.
   */
  ringVerifies?: boolean;
}

export function runIngestConformance(
  name: string,
  makeServer: MakeIngestServer,
  conf: ConformanceOptions = {},
): void {
  const transport = conf.transport ?? 'http1';
  describe(`ingest conformance: ${name}${transport === 'http1' ? '' : ` over ${transport}`}`, () => {
    const logger = createLogger('silent');
    const certs: TestCerts | undefined = transport.startsWith('tls') ? makeTestCerts() : undefined;
    const client: Client = makeClient(transport, certs?.ca);
    // Every case below posts through the suite's transport.
    const post = client.post.bind(client);
    const tenantId = `tn-${randomBytes(3).toString('hex')}`;
    let keys: Keys;
    let intake: TestIntake;
    const sources = new MemorySources();
    const servers: IngestServer[] = [];
    const closers: (() => Promise<void> | void)[] = [];
    /** Closed after every test of the suite. */
    const closersAll: (() => Promise<void> | void)[] = [];
    let main: Served;

    async function serve(
      pipe: Partial<PipelineOptions> = {},
      server: Partial<IngestServerOptions> = {},
    ): Promise<Served> {
      const pipeline = createPipeline({
        sources,
        intake,
        keys,
        logger,
        bodyBudgetBytes: 64 * 1024 * 1024,
        ...pipe,
      });
      const srv = makeServer({
        handler: pipeline,
        port: 0,
        host: '127.0.0.1',
        ...(certs && { tls: { cert: certs.cert, key: certs.key } }),
        ...server,
      });
      servers.push(srv);
      const { port } = await srv.listen();
      const served = { base: client.base(port), port, pipeline, server: srv };
      routed.push(served);
      syncRoutes();
      return served;
    }
    /**
     * Every served backend's route table follows the sources, as the ingest role keeps it
     * (routeCapsSync): the io_uring backend then enforces caps and verifies signatures on its ring
     * thread; the node backend has no table.
     */
    const routed: Served[] = [];
    function syncRoutes() {
      for (const s of routed) {
        try {
          s.server.setRoutes?.(s.pipeline.routeCaps(sources.map.values()));
        } catch {
          // closed by its test
        }
      }
    }
    sources.onChange = syncRoutes;

    function source(kind: Source['kind'], extra: Partial<Source> = {}): Source {
      const id = `${kind}-${randomBytes(4).toString('hex')}`;
      const secret =
        kind === 'standard' || kind === 'stripe'
          ? `whsec_${randomBytes(24).toString('base64')}`
          : `s3cret-${randomBytes(8).toString('hex')}`;
      return sources.add({ id, tenantId, kind, secret, ...extra });
    }

    const accepted = async (id?: string) =>
      (await intake.accepted(tenantId)).filter((e) => id === undefined || e.id === id);
    /**
     * Bytes a JSON parser would not give back: odd spacing, escapes, non-ASCII, no trailing
     * newline. Each call's body is its own (`nonce`): a GitHub or Shopify event is deduplicated on
     * its body, so two events of a case are two bodies; a case that replays one sends one Buffer.
     */
    const rawBody = (fields: Record<string, string>, nonce = randomBytes(6).toString('hex')) =>
      Buffer.from(
        `{ "id" :"${fields.id ?? ''}",\t"type":"${fields.type ?? ''}", "note": "caf\u00e9 \\u00e9 \u{1f680}" ,"n":1.50, "nonce":"${nonce}" }`,
      );
    /** A body of `bytes` bytes that no other call makes (16 hex characters, then `fill`). */
    const paddedBody = (bytes: number, fill = 0x20) =>
      Buffer.concat([Buffer.from(randomBytes(8).toString('hex')), Buffer.alloc(bytes - 16, fill)]);

    beforeAll(async () => {
      keys = createKeys(randomPrefix('ingc'));
      intake = createTestIntake(REDIS_URL, keys);
      await intake.ready;
      main = await serve();
    });
    afterEach(async () => {
      while (closers.length) await closers.pop()!();
    });
    afterAll(async () => {
      client.close();
      for (const s of servers) await s.close().catch(() => {});
      for (const c of closersAll) await c();
      intake.close();
      certs?.remove();
    });

    describe('github (X-Hub-Signature-256, @octokit/webhooks-methods)', () => {
      it('accepts a signed delivery and hands the raw bytes, id and type to the intake', async () => {
        const src = source('github');
        const delivery = randomBytes(8).toString('hex');
        const body = rawBody({ id: 'x', type: 'y' });
        const before = await metricValueAsync('spillway_ingest_requests_total', {
          kind: 'github',
          outcome: 'accepted',
        });
        const r = await post(`${main.base}/ingest/${src.id}`, body, {
          'x-hub-signature-256': await githubSign(src.secret, body.toString('utf8')),
          'x-github-event': 'push',
          'x-github-delivery': delivery,
          'content-type': 'application/json; charset=utf-8',
        });
        expect(r.status).toBe(202);
        expect(r.json).toEqual({ id: delivery });
        const [ev, ...rest] = await accepted(delivery);
        expect(rest).toHaveLength(0);
        expect(ev!.body.equals(body)).toBe(true);
        expect(ev).toMatchObject({
          tenantId,
          id: delivery,
          type: 'push',
          sourceId: src.id,
          contentType: 'application/json; charset=utf-8',
        });
        expect(
          await metricValueAsync('spillway_ingest_requests_total', { kind: 'github', outcome: 'accepted' }),
        ).toBe(before + 1);
        expect(main.pipeline.inFlightBodyBytes).toBe(0);
      });

      it('refuses a wrong secret, a missing header and a tampered body with 401, enqueuing nothing', async () => {
        const src = source('github');
        const body = rawBody({});
        const good = await githubSign(src.secret, body.toString('utf8'));
        const hdr = (sig?: string, id = randomBytes(6).toString('hex')) => ({
          ...(sig ? { 'x-hub-signature-256': sig } : {}),
          'x-github-event': 'push',
          'x-github-delivery': id,
        });
        const failsBefore = await metricValueAsync('spillway_ingest_verify_failures_total', {
          kind: 'github',
        });
        expect(
          (
            await post(
              `${main.base}/ingest/${src.id}`,
              body,
              hdr(await githubSign('wrong', body.toString('utf8'))),
            )
          ).status,
        ).toBe(401);
        expect((await post(`${main.base}/ingest/${src.id}`, body, hdr(undefined))).status).toBe(401);
        const tampered = Buffer.from(body);
        tampered[tampered.length - 2] = tampered[tampered.length - 2]! ^ 1;
        const r = await post(`${main.base}/ingest/${src.id}`, tampered, hdr(good));
        expect(r.status).toBe(401);
        expect(r.json).toMatchObject({ error: { code: 'unauthorized' } });
        expect(await metricValueAsync('spillway_ingest_verify_failures_total', { kind: 'github' })).toBe(
          failsBefore + 3,
        );
        expect((await accepted()).filter((e) => e.sourceId === src.id)).toHaveLength(0);
      });
    });

    describe('stripe (Stripe-Signature, stripe.webhooks.generateTestHeaderString)', () => {
      const event = () => ({ id: `evt_${randomBytes(8).toString('hex')}`, type: 'invoice.paid' });

      it('accepts a signed event; id and type come from the body', async () => {
        const src = source('stripe');
        const e = event();
        const body = rawBody(e);
        const header = stripe.webhooks.generateTestHeaderString({
          payload: body.toString('utf8'),
          secret: src.secret,
        });
        const r = await post(`${main.base}/ingest/${src.id}`, body, { 'stripe-signature': header });
        expect(r.status).toBe(202);
        expect(r.json).toEqual({ id: e.id });
        const [ev] = await accepted(e.id);
        expect(ev!.body.equals(body)).toBe(true);
        expect(ev!.type).toBe('invoice.paid');
      });

      it('accepts when any of several v1 signatures matches (secret roll)', async () => {
        const src = source('stripe');
        const e = event();
        const body = rawBody(e);
        const t = Math.floor(Date.now() / 1000);
        const good = createHmac('sha256', src.secret).update(`${t}.`).update(body).digest('hex');
        const other = createHmac('sha256', 'whsec_old').update(`${t}.`).update(body).digest('hex');
        const r = await post(`${main.base}/ingest/${src.id}`, body, {
          'stripe-signature': `t=${t},v1=${other},v1=${good},v0=${other}`,
        });
        expect(r.status).toBe(202);
      });

      it('refuses a timestamp 400 s old, a wrong secret, a missing header and a tampered body with 401', async () => {
        const src = source('stripe');
        const e = event();
        const body = rawBody(e);
        const payload = body.toString('utf8');
        const old = stripe.webhooks.generateTestHeaderString({
          payload,
          secret: src.secret,
          timestamp: Math.floor(Date.now() / 1000) - 400,
        });
        expect((await post(`${main.base}/ingest/${src.id}`, body, { 'stripe-signature': old })).status).toBe(
          401,
        );
        const wrong = stripe.webhooks.generateTestHeaderString({ payload, secret: 'whsec_wrong' });
        expect(
          (await post(`${main.base}/ingest/${src.id}`, body, { 'stripe-signature': wrong })).status,
        ).toBe(401);
        expect((await post(`${main.base}/ingest/${src.id}`, body)).status).toBe(401);
        const good = stripe.webhooks.generateTestHeaderString({ payload, secret: src.secret });
        const tampered = Buffer.from(payload.replace('invoice.paid', 'invoice.pai_'));
        expect(
          (await post(`${main.base}/ingest/${src.id}`, tampered, { 'stripe-signature': good })).status,
        ).toBe(401);
        expect(await accepted(e.id)).toHaveLength(0);
      });

      it('answers 400 to a correctly signed body that is not a JSON event', async () => {
        const src = source('stripe');
        const payload = 'not json at all';
        const header = stripe.webhooks.generateTestHeaderString({ payload, secret: src.secret });
        const r = await post(`${main.base}/ingest/${src.id}`, payload, { 'stripe-signature': header });
        expect(r.status).toBe(400);
      });
    });

    describe('shopify (X-Shopify-Hmac-Sha256, base64)', () => {
      const shopifySign = (secret: string, body: Buffer) =>
        createHmac('sha256', secret).update(body).digest('base64');

      it('accepts a signed webhook; topic and webhook id from the headers', async () => {
        const src = source('shopify');
        const body = rawBody({ id: '1', type: 'x' });
        const wid = `b54557e4-${randomBytes(4).toString('hex')}`;
        const r = await post(`${main.base}/ingest/${src.id}`, body, {
          'x-shopify-hmac-sha256': shopifySign(src.secret, body),
          'x-shopify-topic': 'orders/create',
          'x-shopify-webhook-id': wid,
        });
        expect(r.status).toBe(202);
        const [ev] = await accepted(wid);
        expect(ev!.body.equals(body)).toBe(true);
        expect(ev!.type).toBe('orders/create');
      });

      it('refuses a wrong secret, a missing header and a tampered body with 401', async () => {
        const src = source('shopify');
        const body = rawBody({});
        const wid = randomBytes(6).toString('hex');
        const h = (sig?: string) => ({
          ...(sig ? { 'x-shopify-hmac-sha256': sig } : {}),
          'x-shopify-topic': 'orders/create',
          'x-shopify-webhook-id': wid,
        });
        expect(
          (await post(`${main.base}/ingest/${src.id}`, body, h(shopifySign('wrong', body)))).status,
        ).toBe(401);
        expect((await post(`${main.base}/ingest/${src.id}`, body, h())).status).toBe(401);
        expect(
          (
            await post(
              `${main.base}/ingest/${src.id}`,
              Buffer.concat([body, Buffer.from(' ')]),
              h(shopifySign(src.secret, body)),
            )
          ).status,
        ).toBe(401);
        expect(await accepted(wid)).toHaveLength(0);
      });
    });

    describe('standard webhooks (webhook-signature, standardwebhooks)', () => {
      const msgId = () => `msg_${randomBytes(8).toString('hex')}`;

      it('accepts a signed message, also when one of several signatures matches', async () => {
        const src = source('standard');
        for (const several of [false, true]) {
          const id = msgId();
          const body = rawBody({ type: 'user.created' });
          const now = new Date();
          let sig = new Webhook(src.secret).sign(id, now, body);
          if (several)
            sig = `${new Webhook(`whsec_${randomBytes(24).toString('base64')}`).sign(id, now, body)} ${sig}`;
          const r = await post(`${main.base}/ingest/${src.id}`, body, {
            'webhook-id': id,
            'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
            'webhook-signature': sig,
          });
          expect(r.status).toBe(202);
          const [ev] = await accepted(id);
          expect(ev!.body.equals(body)).toBe(true);
          expect(ev!.type).toBe('user.created');
        }
      });

      it('refuses an old timestamp, a wrong secret, missing headers and a tampered body with 401', async () => {
        const src = source('standard');
        const id = msgId();
        const body = rawBody({ type: 'user.created' });
        const h = (secret: string, at: Date, withSig = true) => ({
          'webhook-id': id,
          'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
          ...(withSig ? { 'webhook-signature': new Webhook(secret).sign(id, at, body) } : {}),
        });
        const url = `${main.base}/ingest/${src.id}`;
        expect((await post(url, body, h(src.secret, new Date(Date.now() - 400_000)))).status).toBe(401);
        expect(
          (await post(url, body, h(`whsec_${randomBytes(24).toString('base64')}`, new Date()))).status,
        ).toBe(401);
        expect((await post(url, body, h(src.secret, new Date(), false))).status).toBe(401);
        expect(
          (await post(url, Buffer.from(body.toString().replace('user', 'usex')), h(src.secret, new Date())))
            .status,
        ).toBe(401);
        expect(await accepted(id)).toHaveLength(0);
      });
    });

    describe('secret rotation: the previous secret verifies until its expiresAt, for every kind', () => {
      /** A signed request of `kind` made with `secret` by the provider's own code, and its event id. */
      const signed = async (
        kind: Source['kind'],
        secret: string,
      ): Promise<{ id: string; body: Buffer; headers: Record<string, string> }> => {
        const id = `rot-${randomBytes(6).toString('hex')}`;
        const now = new Date();
        const body =
          kind === 'stripe'
            ? rawBody({ id, type: 'invoice.paid' })
            : rawBody(kind === 'standard' ? { type: 'user.created' } : {});
        const headers: Record<string, string> =
          kind === 'github'
            ? {
                'x-hub-signature-256': await githubSign(secret, body.toString('utf8')),
                'x-github-event': 'push',
                'x-github-delivery': id,
              }
            : kind === 'shopify'
              ? {
                  'x-shopify-hmac-sha256': createHmac('sha256', secret).update(body).digest('base64'),
                  'x-shopify-topic': 'orders/create',
                  'x-shopify-webhook-id': id,
                }
              : kind === 'stripe'
                ? {
                    'stripe-signature': stripe.webhooks.generateTestHeaderString({
                      payload: body.toString(),
                      secret,
                    }),
                  }
                : {
                    'webhook-id': id,
                    'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
                    'webhook-signature': new Webhook(secret).sign(id, now, body),
                  };
        return { id, body, headers };
      };
      const newSecret = (kind: Source['kind']) =>
        kind === 'standard' || kind === 'stripe'
          ? `whsec_${randomBytes(24).toString('base64')}`
          : `s3cret-${randomBytes(8).toString('hex')}`;

      const where = conf.ringVerifies && transport === 'http1' ? 'ring' : 'js';
      for (const kind of ['github', 'stripe', 'shopify', 'standard'] as const) {
        it(`${kind}: the signature is checked in ${where === 'ring' ? 'the ring thread' : 'JS'}, with the same answers`, async () => {
          const src = source(kind, { secret: newSecret(kind) });
          const url = `${main.base}/ingest/${src.id}`;
          const count = () => metricValueAsync('spillway_ingest_verified_total', { kind, where });
          const before = await count();
          const good = await signed(kind, src.secret);
          expect((await post(url, good.body, good.headers)).status).toBe(202);
          const bad = await signed(kind, src.secret);
          const tampered = Buffer.from(bad.body);
          const at = tampered.length - 2;
          tampered.writeUInt8(tampered.readUInt8(at) ^ 1, at);
          expect((await post(url, tampered, bad.headers)).status).toBe(401);
          expect(await accepted(bad.id)).toHaveLength(0);
          expect(await count()).toBe(before + 2);
        });

        it(`${kind}: current and previous secrets verify; an expired previous one and a stranger's do not`, async () => {
          const current = newSecret(kind);
          const previous = newSecret(kind);
          const expired = newSecret(kind);
          const src = source(kind, {
            secret: current,
            previousSecrets: [
              { secret: previous, expiresAt: new Date(Date.now() + 60_000).toISOString() },
              { secret: expired, expiresAt: new Date(Date.now() - 1000).toISOString() },
            ],
          });
          const url = `${main.base}/ingest/${src.id}`;
          for (const [secret, status] of [
            [current, 202],
            [previous, 202],
            [expired, 401],
            [newSecret(kind), 401],
          ] as const) {
            const req = await signed(kind, secret);
            const r = await post(url, req.body, req.headers);
            expect(
              r.status,
              `${kind} signed with the ${secret === current ? 'current' : secret === previous ? 'previous' : 'expired or unknown'} secret`,
            ).toBe(status);
            expect(await accepted(req.id)).toHaveLength(status === 202 ? 1 : 0);
          }
          // Once the overlap has ended (the source as ingest reads it after the change), the old one stops.
          sources.add({
            ...src,
            previousSecrets: [{ secret: previous, expiresAt: new Date(Date.now() - 1).toISOString() }],
          });
          const late = await signed(kind, previous);
          expect((await post(url, late.body, late.headers)).status).toBe(401);
        });
      }
    });

    describe("dedup of a provider's redelivery (its id and its body again)", () => {
      const githubPost = async (src: Source, delivery: string) => {
        const body = rawBody({}, delivery);
        return post(`${main.base}/ingest/${src.id}`, body, {
          'x-hub-signature-256': await githubSign(src.secret, body.toString('utf8')),
          'x-github-event': 'push',
          'x-github-delivery': delivery,
        });
      };

      it('the same id twice: one 202, then 200 duplicate, one event', async () => {
        const src = source('github');
        const id = randomBytes(8).toString('hex');
        const a = await githubPost(src, id);
        const b = await githubPost(src, id);
        expect(a.status).toBe(202);
        expect(b.status).toBe(200);
        expect(b.json).toEqual({ id, duplicate: true });
        expect(await accepted(id)).toHaveLength(1);
      });

      it('the same id concurrently: exactly one 202 and the rest 200 duplicate, one event', async () => {
        const src = source('github');
        const id = randomBytes(8).toString('hex');
        const replies = await Promise.all(Array.from({ length: 8 }, () => githubPost(src, id)));
        expect(replies.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 200, 200, 200, 202]);
        expect(await accepted(id)).toHaveLength(1);
      });
    });

    describe('replays with a fresh id (github, shopify: the id header is outside the HMAC)', () => {
      const shopifySign = (secret: string, body: Buffer) =>
        createHmac('sha256', secret).update(body).digest('base64');

      it('github: one signed body under new ids or a new event header is a duplicate of the first', async () => {
        const src = source('github');
        const body = Buffer.from(`{"action":"opened","n":"${randomBytes(6).toString('hex')}"}`);
        const sig = await githubSign(src.secret, body.toString('utf8'));
        const send = (delivery: string, event = 'pull_request') =>
          post(`${main.base}/ingest/${src.id}`, body, {
            'x-hub-signature-256': sig,
            'x-github-event': event,
            'x-github-delivery': delivery,
          });
        const first = randomBytes(8).toString('hex');
        expect((await send(first)).status).toBe(202);
        // Answered as a duplicate under the id it came with (the body is the dedup key:
        // docs/contract-changes.md).
        const fresh = randomBytes(8).toString('hex');
        const replay = await send(fresh);
        expect(replay.status).toBe(200);
        expect(replay.json).toEqual({ id: fresh, duplicate: true });
        const relabel = randomBytes(8).toString('hex');
        const relabelled = await send(relabel, 'push');
        expect(relabelled.json).toEqual({ id: relabel, duplicate: true });
        // GitHub's own redelivery: same body, same id.
        expect((await send(first)).json).toEqual({ id: first, duplicate: true });
        expect((await accepted()).filter((e) => e.sourceId === src.id)).toHaveLength(1);
        // Another body is another event.
        const other = Buffer.from('{"action":"closed"}');
        const r = await post(`${main.base}/ingest/${src.id}`, other, {
          'x-hub-signature-256': await githubSign(src.secret, other.toString('utf8')),
          'x-github-event': 'pull_request',
          'x-github-delivery': randomBytes(8).toString('hex'),
        });
        expect(r.status).toBe(202);
      });

      it('github: the same body under 8 ids at once: one 202, seven duplicates of it, one event', async () => {
        const src = source('github');
        const body = Buffer.from(`{"action":"synchronize","n":"${randomBytes(6).toString('hex')}"}`);
        const sig = await githubSign(src.secret, body.toString('utf8'));
        const ids = Array.from({ length: 8 }, () => randomBytes(8).toString('hex'));
        const replies = await Promise.all(
          ids.map((id) =>
            post(`${main.base}/ingest/${src.id}`, body, {
              'x-hub-signature-256': sig,
              'x-github-event': 'pull_request',
              'x-github-delivery': id,
            }),
          ),
        );
        expect(replies.filter((r) => r.status === 202)).toHaveLength(1);
        replies.forEach((r, i) => {
          if (r.status !== 202) expect(r.json).toEqual({ id: ids[i], duplicate: true });
        });
        expect((await accepted()).filter((e) => e.sourceId === src.id)).toHaveLength(1);
      });

      it('github: replays and redeliveries spend none of the source rate', async () => {
        const limiter = createTestRateGate(REDIS_URL);
        closers.push(() => limiter.close());
        const s = await serve({ limiter });
        const src = source('github', { rate: { perSecond: 0.01, burst: 2 } });
        const send = async (body: Buffer, delivery: string) =>
          (
            await post(`${s.base}/ingest/${src.id}`, body, {
              'x-hub-signature-256': await githubSign(src.secret, body.toString('utf8')),
              'x-github-event': 'push',
              'x-github-delivery': delivery,
            })
          ).status;
        const body = Buffer.from(`{"n":"${randomBytes(6).toString('hex')}"}`);
        const first = randomBytes(8).toString('hex');
        expect(await send(body, first)).toBe(202); // one of the two tokens
        // Four duplicates: two replays under new ids, two redeliveries under the first id.
        const again: number[] = [];
        for (let i = 0; i < 4; i++)
          again.push(await send(body, i % 2 ? first : randomBytes(8).toString('hex')));
        expect(again).toEqual([200, 200, 200, 200]);
        // The second token is still there for a new event; the one after it is past the rate.
        const fresh = () => Buffer.from(`{"n":"${randomBytes(6).toString('hex')}"}`);
        expect(await send(fresh(), randomBytes(8).toString('hex'))).toBe(202);
        expect(await send(fresh(), randomBytes(8).toString('hex'))).toBe(429);
      });

      it('shopify: a new X-Shopify-Webhook-Id on a seen body is a duplicate; the body is per source', async () => {
        const a = source('shopify');
        const b = source('shopify', { secret: a.secret });
        const body = Buffer.from(`{"id":${Date.now()},"note":"${randomBytes(6).toString('hex')}"}`);
        const send = (src: Source, wid: string) =>
          post(`${main.base}/ingest/${src.id}`, body, {
            'x-shopify-hmac-sha256': shopifySign(src.secret, body),
            'x-shopify-topic': 'orders/create',
            'x-shopify-webhook-id': wid,
          });
        const first = randomBytes(8).toString('hex');
        expect((await send(a, first)).status).toBe(202);
        const fresh = randomBytes(8).toString('hex');
        expect((await send(a, fresh)).json).toEqual({ id: fresh, duplicate: true });
        // The same bytes sent to another source (another shop) are that source's own event.
        expect((await send(b, randomBytes(8).toString('hex'))).status).toBe(202);
      });
    });

    // Everything from here on is about HTTP/1.1 framing, raw sockets and budgets: http1 only.
    if (transport !== 'http1') return;

    describe('cheap checks before the body', () => {
      it('404 for an unknown source and for other paths, 405 with Allow for other methods', async () => {
        const src = source('github');
        expect((await post(`${main.base}/ingest/nope-${randomBytes(3).toString('hex')}`, '{}')).status).toBe(
          404,
        );
        expect((await post(`${main.base}/other/${src.id}`, '{}')).status).toBe(404);
        const r = await post(`${main.base}/ingest/${src.id}`, '', {}, 'GET');
        expect(r.status).toBe(405);
        expect(r.headers.get('allow')).toBe('POST');
      });

      it('other methods: 404 off the ingest routes, 405 with Allow on them (known source or not), whatever the body', async () => {
        const src = source('github');
        const unknown = `/ingest/nope-${randomBytes(3).toString('hex')}`;
        const cases: [method: string, path: string, body: string | undefined, status: number][] = [
          ['GET', '/nope', undefined, 404],
          ['GET', '/', undefined, 404],
          ['DELETE', `/other/${src.id}`, undefined, 404],
          ['PUT', '/nope', '{"a":1}', 404],
          ['GET', `/ingest/${src.id}`, undefined, 405],
          ['GET', unknown, undefined, 405],
          ['PUT', `/ingest/${src.id}`, '{"a":1}', 405],
          ['PATCH', `/ingest/${src.id}/`, '{"a":1}', 405],
          ['OPTIONS', `/ingest/${src.id}`, undefined, 405],
        ];
        const got: [string, string, number, string | null][] = [];
        for (const [method, path, body] of cases) {
          const res = await fetch(`${main.base}${path}`, {
            method,
            ...(body !== undefined && { body, headers: { 'content-type': 'application/json' } }),
          });
          const json = (await res.json()) as { error?: { code?: string } };
          expect(json.error?.code).toBe(res.status === 404 ? 'not_found' : 'method_not_allowed');
          got.push([method, path, res.status, res.headers.get('allow')]);
        }
        expect(got).toEqual(
          cases.map(([method, path, , status]) => [method, path, status, status === 405 ? 'POST' : null]),
        );
        expect((await accepted()).filter((e) => e.sourceId === src.id)).toHaveLength(0);
      });

      it('HEAD gets the status and headers without a body, and the connection carries on', async () => {
        const src = source('github');
        const out = await rawPipeline(
          main.port,
          `HEAD /ingest/${src.id} HTTP/1.1\r\nHost: x\r\n\r\nHEAD /nope HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n`,
          3,
        );
        const answers = out.split(/(?=HTTP\/1\.1 )/);
        expect(answers.map((a) => Number(a.slice(9, 12)))).toEqual([405, 404, 404]);
        // Each HEAD answer ends with its header block: the next status line follows at once.
        expect(answers[0]).toMatch(/\r\n\r\n$/);
        expect(answers[1]).toMatch(/\r\n\r\n$/);
        expect(answers[2]).toMatch(/\r\n\r\n\{"error":\{"code":"not_found"/);
      });

      it('403 for a client outside allowCidrs; the same request from inside is accepted', async () => {
        const body = rawBody({});
        const headers = async (secret: string) => ({
          'x-hub-signature-256': await githubSign(secret, body.toString('utf8')),
          'x-github-event': 'push',
          'x-github-delivery': randomBytes(6).toString('hex'),
        });
        const outside = source('github', { allowCidrs: ['192.30.252.0/22', '2001:db8::/32'] });
        const r = await post(`${main.base}/ingest/${outside.id}`, body, await headers(outside.secret));
        expect(r.status).toBe(403);
        expect((await accepted()).filter((e) => e.sourceId === outside.id)).toHaveLength(0);
        const inside = source('github', { allowCidrs: ['192.30.252.0/22', '127.0.0.0/8'] });
        expect(
          (await post(`${main.base}/ingest/${inside.id}`, body, await headers(inside.secret))).status,
        ).toBe(202);
      });

      it('403 is decided before the body is read', async () => {
        const src = source('github', { allowCidrs: ['192.30.252.0/22'] });
        // Declares a body it never sends: only an answer decided on the headers can come back.
        const status = await rawExchange(
          main.port,
          `POST /ingest/${src.id} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n`,
        );
        expect(status).toBe(403);
      });

      it('429 with Retry-After past the source rate', async () => {
        const limiter = createTestRateGate(REDIS_URL);
        closers.push(() => limiter.close());
        const s = await serve({ limiter });
        const src = source('github', { rate: { perSecond: 0.01, burst: 2 } });
        const statuses: number[] = [];
        let retryAfter: string | null = null;
        for (let i = 0; i < 3; i++) {
          const body = rawBody({});
          const r = await post(`${s.base}/ingest/${src.id}`, body, {
            'x-hub-signature-256': await githubSign(src.secret, body.toString('utf8')),
            'x-github-event': 'push',
            'x-github-delivery': randomBytes(6).toString('hex'),
          });
          statuses.push(r.status);
          if (r.status === 429) retryAfter = r.headers.get('retry-after');
        }
        expect(statuses).toEqual([202, 202, 429]);
        expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
      });

      it('junk does not spend the source rate: only verified requests do', async () => {
        const limiter = createTestRateGate(REDIS_URL);
        closers.push(() => limiter.close());
        const s = await serve({ limiter });
        const src = source('github', { rate: { perSecond: 0.01, burst: 2 } });
        const body = rawBody({});
        const junk: number[] = [];
        for (let i = 0; i < 10; i++)
          junk.push(
            (
              await post(`${s.base}/ingest/${src.id}`, body, {
                'x-hub-signature-256': `sha256=${'0'.repeat(64)}`,
                'x-github-event': 'push',
                'x-github-delivery': randomBytes(6).toString('hex'),
              })
            ).status,
          );
        expect(junk).toEqual(Array(10).fill(401));
        const signedStatuses: number[] = [];
        for (let i = 0; i < 3; i++) {
          // Three events: three bodies (one body again would be a duplicate, which spends no rate).
          const event = rawBody({});
          signedStatuses.push(
            (
              await post(`${s.base}/ingest/${src.id}`, event, {
                'x-hub-signature-256': await githubSign(src.secret, event.toString('utf8')),
                'x-github-event': 'push',
                'x-github-delivery': randomBytes(6).toString('hex'),
              })
            ).status,
          );
        }
        expect(signedStatuses).toEqual([202, 202, 429]);
      });

      it('an address that keeps sending what is refused gets 429 before any lookup; other addresses do not', async () => {
        const s = await serve({ preAuthRate: { perSecond: 0.2, burst: 5 } });
        const src = source('github');
        const body = rawBody({});
        const junk = {
          'x-hub-signature-256': `sha256=${'0'.repeat(64)}`,
          'x-github-event': 'push',
          'x-github-delivery': 'j',
        };
        const fromJunk: number[] = [];
        for (let i = 0; i < 8; i++)
          fromJunk.push((await postFrom(s.port, `/ingest/${src.id}`, body, junk, '127.0.0.3')).status);
        expect(fromJunk).toEqual([401, 401, 401, 401, 401, 429, 429, 429]);
        // Unknown sources and other paths count too (a scan for source ids).
        expect((await postFrom(s.port, '/ingest/nope', body, {}, '127.0.0.3')).status).toBe(429);
        const limited = await postFrom(s.port, `/ingest/${src.id}`, body, junk, '127.0.0.3');
        expect(Number(limited.retryAfter)).toBeGreaterThanOrEqual(1);
        // The provider, from its own address, is not affected.
        const good = await postFrom(
          s.port,
          `/ingest/${src.id}`,
          body,
          await signed2(src, body, randomBytes(6).toString('hex')),
          '127.0.0.1',
        );
        expect(good.status).toBe(202);
      });
    });

    describe('body size cap', () => {
      const signed = async (src: Source, body: Buffer, id: string) => ({
        'x-hub-signature-256': await githubSign(src.secret, body.toString('utf8')),
        'x-github-event': 'push',
        'x-github-delivery': id,
      });

      it('Content-Length one byte over maxBodyBytes → 413 at once and closed; exactly at the cap → 202', async () => {
        const src = source('github', { maxBodyBytes: 4096 });
        const over = Buffer.alloc(4097, 0x61);
        const idOver = randomBytes(6).toString('hex');
        const r = await post(`${main.base}/ingest/${src.id}`, over, await signed(src, over, idOver));
        expect(r.status).toBe(413);
        expect(await accepted(idOver)).toHaveLength(0);
        const at = Buffer.alloc(4096, 0x61);
        const idAt = randomBytes(6).toString('hex');
        expect((await post(`${main.base}/ingest/${src.id}`, at, await signed(src, at, idAt))).status).toBe(
          202,
        );
        expect(await accepted(idAt)).toHaveLength(1);
      });

      it('413 closes the connection: declared too large, and streamed past the cap', async () => {
        const src = source('github', { maxBodyBytes: 4096 });
        const sig = `X-Hub-Signature-256: sha256=${'0'.repeat(64)}\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: c\r\n`;
        const declared = await rawConversation(
          main.port,
          `POST /ingest/${src.id} HTTP/1.1\r\nHost: x\r\n${sig}Content-Length: 4097\r\n\r\n`,
        );
        expect(declared.status).toBe(413);
        expect(declared.closed).toBe(true);
        const chunk = Buffer.alloc(5000, 0x61);
        const streamed = await rawConversation(
          main.port,
          `POST /ingest/${src.id} HTTP/1.1\r\nHost: x\r\n${sig}Transfer-Encoding: chunked\r\n\r\n${chunk.length.toString(16)}\r\n${chunk.toString()}\r\n`,
        );
        expect(streamed.status).toBe(413);
        expect(streamed.closed).toBe(true);
      });

      it('a chunked body one byte over the cap → 413, never truncated and accepted', async () => {
        const src = source('github', { maxBodyBytes: 4096 });
        const r = await postChunked(main.port, `/ingest/${src.id}`, 4097, 1000);
        expect(r.status).toBe(413);
        expect((await accepted()).filter((e) => e.sourceId === src.id)).toHaveLength(0);
        expect(main.pipeline.inFlightBodyBytes).toBe(0);
      });

      it('a 20 MB chunked body against a 1 MB cap raises RSS by no more than a few MB', async () => {
        const src = source('github', { maxBodyBytes: 1024 * 1024 });
        // Warm up the same code paths so one-time allocations do not count against the body.
        await postChunked(main.port, `/ingest/${src.id}`, 2 * 1024 * 1024);
        const base = process.memoryUsage.rss();
        let peak = base;
        const sampler = setInterval(() => {
          peak = Math.max(peak, process.memoryUsage.rss());
        }, 5);
        try {
          const r = await postChunked(main.port, `/ingest/${src.id}`, 20 * 1024 * 1024);
          expect(r.status).toBe(413);
        } finally {
          clearInterval(sampler);
        }
        peak = Math.max(peak, process.memoryUsage.rss());
        if (process.env.SPILLWAY_TEST_VERBOSE)
          console.log(
            `rss growth during a 20 MB body vs 1 MB cap: ${((peak - base) / 1048576).toFixed(2)} MB`,
          );
        // The client writing the 20 MB lives in this process too, and other test files run beside
        // this one: allow 10 MB of noise — a backend that buffered the body would add 20 MB.
        expect(peak - base).toBeLessThan(10 * 1024 * 1024);
        expect(main.pipeline.inFlightBodyBytes).toBe(0);
      });
    });

    it('503 with Retry-After once the in-flight body budget is spent; accepted again when it frees', async () => {
      const s = await serve({
        bodyBudgetBytes: 100_000,
        sourceBudgetBytes: 100_000,
        clientBudgetBytes: 100_000,
        minBodyBytesPerSecond: 0,
      });
      const src = source('github');
      // Three events of 80,000 bytes, each its own body (GitHub events are deduplicated on it).
      const another = () => paddedBody(80_000, 0x62);
      const body = another();
      const id = randomBytes(6).toString('hex');
      const headers = await signed2(src, body, id);
      // Holds 40 000 bytes of budget (bytes are taken as they arrive): headers and half the body.
      const sock = net.connect(s.port, '127.0.0.1');
      closers.push(() => void sock.destroy());
      await new Promise((r) => sock.once('connect', r));
      const head = Object.entries({ ...headers, host: 'x', 'content-length': String(body.length) })
        .map(([k, v]) => `${k}: ${v}\r\n`)
        .join('');
      sock.write(`POST /ingest/${src.id} HTTP/1.1\r\n${head}\r\n`);
      sock.write(body.subarray(0, 40_000));
      const reply = collect(sock);
      await waitUntil(() => s.pipeline.inFlightBodyBytes === 40_000, 'the first request to hold its bytes');
      const secondBody = another();
      const second = await post(
        `${s.base}/ingest/${src.id}`,
        secondBody,
        await signed2(src, secondBody, randomBytes(6).toString('hex')),
      );
      expect(second.status).toBe(503);
      expect(Number(second.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      sock.write(body.subarray(40_000));
      expect(await reply).toMatch(/^HTTP\/1\.1 202 /);
      await waitUntil(() => s.pipeline.inFlightBodyBytes === 0, 'the budget to be released');
      const third = another();
      expect(
        (
          await post(
            `${s.base}/ingest/${src.id}`,
            third,
            await signed2(src, third, randomBytes(6).toString('hex')),
          )
        ).status,
      ).toBe(202);
    });

    /** Opens `n` connections from `localAddress` that send a head declaring `declared` body bytes, then `sent` of them, and stall. */
    async function holders(
      port: number,
      n: number,
      path: (i: number) => string,
      declared: number,
      sent: number,
      localAddress = '127.0.0.1',
    ): Promise<net.Socket[]> {
      const socks: net.Socket[] = [];
      closers.push(() => {
        for (const sock of socks) sock.destroy();
      });
      await Promise.all(
        Array.from({ length: n }, async (_, i) => {
          const sock = net.connect({ port, host: '127.0.0.1', localAddress });
          sock.on('error', () => {});
          sock.on('data', () => {});
          socks.push(sock);
          await new Promise((r) => sock.once('connect', r));
          // A well-formed signature that cannot match: nothing here can be verified before the body.
          sock.write(
            `POST ${path(i)} HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: sha256=${'0'.repeat(64)}\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: h${i}\r\nContent-Length: ${declared}\r\n\r\n`,
          );
          if (sent > 0) sock.write(Buffer.alloc(sent, 0x61));
        }),
      );
      return socks;
    }

    /** `times` signed GitHub events of `bytes` each (each its own body, so none is a duplicate): their statuses. */
    const keepsAccepting = async (base: string, bytes: number, times = 10) => {
      const src = source('github', { maxBodyBytes: 1024 * 1024 });
      const statuses: number[] = [];
      for (let i = 0; i < times; i++) {
        const body = paddedBody(bytes);
        statuses.push(
          (
            await post(
              `${base}/ingest/${src.id}`,
              body,
              await signed2(src, body, randomBytes(6).toString('hex')),
            )
          ).status,
        );
      }
      return statuses;
    };

    it('64 header-only requests declaring 1 MiB each hold no budget: another source keeps getting 202', async () => {
      const victim = source('github', { maxBodyBytes: 1024 * 1024 });
      await holders(main.port, 64, () => `/ingest/${victim.id}`, 1024 * 1024, 0);
      // Give every head time to reach the pipeline (the attack held 64 MiB within milliseconds).
      await new Promise((r) => setTimeout(r, 500));
      expect(main.pipeline.inFlightBodyBytes).toBeLessThan(1024 * 1024);
      const statuses = await keepsAccepting(main.base, 256);
      expect(statuses).toEqual(Array(10).fill(202));
    });

    it('one client address holds at most its share of the budget, across sources', async () => {
      // 4 MiB budget: per source 2 MiB, per client address 512 KiB (the defaults: 1/2 and 1/8).
      const s = await serve({ bodyBudgetBytes: 4 * 1024 * 1024, minBodyBytesPerSecond: 0 });
      const targets = [0, 1, 2, 3].map(() => source('github', { maxBodyBytes: 1024 * 1024 }));
      // 32 bodies of 128 KiB half-sent from 127.0.0.2, spread over 4 sources (1 MiB each, under the
      // source share): 4 MiB, the whole budget, if one address could hold it.
      await holders(s.port, 32, (i) => `/ingest/${targets[i % 4]!.id}`, 1024 * 1024, 128 * 1024, '127.0.0.2');
      await waitUntil(
        () => s.pipeline.inFlightBodyBytes >= 512 * 1024 - 64 * 1024,
        'the holders to take their share',
      );
      await new Promise((r) => setTimeout(r, 300));
      expect(s.pipeline.inFlightBodyBytes).toBeLessThanOrEqual(512 * 1024);
      // A signed sender from 127.0.0.1 with a body the size of the attacker's whole share still fits.
      const statuses = await keepsAccepting(s.base, 256 * 1024, 5);
      expect(statuses).toEqual(Array(5).fill(202));
    });

    it('200 concurrent slow senders (slow headers and slow bodies) are cut off by the timeouts', async () => {
      const s = await serve({}, { headersTimeoutMs: 500, requestTimeoutMs: 1000 });
      const src = source('github');
      const sockets: net.Socket[] = [];
      const closed: Promise<void>[] = [];
      for (let i = 0; i < 200; i++) {
        const sock = net.connect(s.port, '127.0.0.1');
        sock.on('error', () => {});
        sock.on('data', () => {});
        sockets.push(sock);
        closed.push(new Promise<void>((r) => sock.once('close', () => r())));
        sock.once('connect', () => {
          if (i % 2 === 0) sock.write(`POST /ingest/${src.id} HTTP/1.1\r\nHost: x\r\n`);
          else
            sock.write(
              `POST /ingest/${src.id} HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: sha256=${'0'.repeat(64)}\r\nX-GitHub-Event: push\r\nX-GitHub-Delivery: d${i}\r\nContent-Length: 100000\r\n\r\n`,
            );
        });
      }
      // Each keeps trickling a byte: a header line or a body byte, never finishing.
      let ticks = 0;
      const trickle = setInterval(() => {
        ticks++;
        sockets.forEach((sock, i) => {
          if (!sock.destroyed && sock.writable) sock.write(i % 2 === 0 ? `X-Slow-${ticks}: 1\r\n` : 'a');
        });
      }, 100);
      closers.push(() => {
        clearInterval(trickle);
        for (const sock of sockets) sock.destroy();
      });
      const outcome = await Promise.race([
        Promise.all(closed).then(() => 'all closed'),
        new Promise((r) => setTimeout(() => r('still open'), 15_000)),
      ]);
      clearInterval(trickle);
      expect(outcome).toBe('all closed');
      expect(s.pipeline.inFlightBodyBytes).toBe(0);
      // The server is still serving.
      const body = rawBody({});
      expect(
        (
          await post(
            `${s.base}/ingest/${src.id}`,
            body,
            await signed2(src, body, randomBytes(6).toString('hex')),
          )
        ).status,
      ).toBe(202);
    });

    it('Redis stopped → 503 with Retry-After; 202 again once Redis is back, without a restart', async () => {
      const own = new OwnRedis(await freePort());
      closers.push(() => own.destroy());
      await own.start();
      const ownKeys = createKeys(randomPrefix('ingr'));
      const ownIntake = createTestIntake(own.url, ownKeys);
      closers.push(() => ownIntake.close());
      await ownIntake.ready;
      const s = await serve({ intake: ownIntake, keys: ownKeys });
      const src = source('github');
      const send = async () => {
        const body = rawBody({});
        return post(
          `${s.base}/ingest/${src.id}`,
          body,
          await signed2(src, body, randomBytes(6).toString('hex')),
        );
      };
      await waitUntil(async () => (await send()).status === 202, 'a 202 with Redis up');
      await own.stop();
      const down = await send();
      expect(down.status).toBe(503);
      expect(Number(down.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      await own.start();
      await waitUntil(async () => (await send()).status === 202, 'a 202 once Redis is back', 15_000);
      expect((await ownIntake.accepted(tenantId)).length).toBeGreaterThanOrEqual(2);
    });
  });
}

/** POSTs from a chosen loopback address (127.0.0.0/8 is all local): status and Retry-After. */
function postFrom(
  port: number,
  path: string,
  body: Buffer,
  headers: Record<string, string>,
  localAddress: string,
): Promise<{ status: number; retryAfter: string | undefined }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        localAddress,
        agent: false,
        headers: { 'content-type': 'application/json', 'content-length': body.length, ...headers },
      },
      (res) => {
        res.resume();
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            retryAfter: res.headers['retry-after'] as string | undefined,
          }),
        );
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

async function signed2(src: Source, body: Buffer, id: string): Promise<Record<string, string>> {
  return {
    'x-hub-signature-256': await githubSign(src.secret, body.toString('utf8')),
    'x-github-event': 'push',
    'x-github-delivery': id,
  };
}

function collect(sock: net.Socket): Promise<string> {
  return new Promise((resolve) => {
    let out = '';
    sock.on('data', (d) => {
      out += d;
      if (/\r\n\r\n/.test(out)) resolve(out);
    });
    sock.once('close', () => resolve(out));
  });
}

/** Writes raw request bytes and returns the status code of the first answer (or 0 if closed first). */
async function rawExchange(port: number, bytes: string): Promise<number> {
  const sock = net.connect(port, '127.0.0.1');
  sock.on('error', () => {});
  try {
    await new Promise((r) => sock.once('connect', r));
    sock.write(bytes);
    const out = await Promise.race([
      collect(sock),
      new Promise<string>((r) => setTimeout(() => r(''), 5000)),
    ]);
    return Number(/^HTTP\/1\.1 (\d{3})/.exec(out)?.[1] ?? 0);
  } finally {
    sock.destroy();
  }
}

/** Writes raw (pipelined) requests on one connection and returns what came back once `n` status lines and the last answer's body are in. */
async function rawPipeline(port: number, bytes: string, n: number): Promise<string> {
  const sock = net.connect(port, '127.0.0.1');
  sock.on('error', () => {});
  try {
    await new Promise((r) => sock.once('connect', r));
    let out = '';
    const done = new Promise<string>((resolve) => {
      sock.on('data', (d) => {
        out += d.toString('latin1');
        const lines = out.match(/HTTP\/1\.1 \d{3}/g) ?? [];
        const last = out.lastIndexOf('HTTP/1.1 ');
        const end = out.indexOf('\r\n\r\n', last);
        const len = Number(/content-length: (\d+)/i.exec(out.slice(last, end))?.[1] ?? 0);
        if (lines.length >= n && end >= 0 && out.length >= end + 4 + len) resolve(out);
      });
      sock.once('close', () => resolve(out));
    });
    sock.write(bytes);
    return await Promise.race([done, new Promise<string>((r) => setTimeout(() => r(out), 5000))]);
  } finally {
    sock.destroy();
  }
}

/** Sends raw bytes (never finishing the request) and reports the answer and whether the server closed. */
async function rawConversation(port: number, bytes: string): Promise<{ status: number; closed: boolean }> {
  const sock = net.connect(port, '127.0.0.1');
  sock.on('error', () => {});
  try {
    await new Promise((r) => sock.once('connect', r));
    const closed = new Promise<boolean>((r) => sock.once('close', () => r(true)));
    sock.write(bytes);
    const out = await Promise.race([
      collect(sock),
      new Promise<string>((r) => setTimeout(() => r(''), 5000)),
    ]);
    const wasClosed = await Promise.race([
      closed,
      new Promise<boolean>((r) => setTimeout(() => r(false), 5000)),
    ]);
    return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(out)?.[1] ?? 0), closed: wasClosed };
  } finally {
    sock.destroy();
  }
}

async function waitUntil(
  pred: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 5000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await pred()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
