import { createHmac, randomBytes } from 'node:crypto';
import { createIngestServer, createPipeline, type HeadDecision, type RequestHead } from '@spillway/ingest';
import {
  createKeys,
  createLogger,
  type Intake,
  isSpillwayError,
  type Source,
  type SpillwayEvent,
} from '@spillway/shared';
import { Webhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { describe, expect, it } from 'vitest';

/**
 * The pipeline's decisions without sockets: begin() on request heads, then the sink. The intake
 * here is a recorder (the Intake interface, not Redis); the conformance suite runs the same
 * pipeline against real Redis and real HTTP.
 */
const logger = createLogger('silent');
const keys = createKeys('unit');

function setup(
  src: Partial<Source> = {},
  opts: {
    budget?: number;
    now?: number;
    intake?: Intake;
    shares?: number;
    clientShare?: number;
    minRate?: { bytesPerSecond: number; graceMs: number };
  } = {},
) {
  const source: Source = {
    id: 'gh1',
    tenantId: 'acme',
    kind: 'github',
    secret: 'shh',
    maxBodyBytes: 1000,
    createdAt: new Date().toISOString(),
    ...src,
  };
  const got: SpillwayEvent[] = [];
  const intake: Intake = opts.intake ?? {
    async submit(e) {
      got.push(e);
      return { id: e.id, duplicate: false };
    },
  };
  const pipeline = createPipeline({
    sources: { get: async (id) => (id === source.id ? source : undefined) },
    intake,
    keys,
    logger,
    bodyBudgetBytes: opts.budget ?? 10_000,
    sourceBudgetBytes: opts.shares ?? opts.budget ?? 10_000,
    clientBudgetBytes: opts.clientShare ?? opts.shares ?? opts.budget ?? 10_000,
    ...(opts.minRate && {
      minBodyBytesPerSecond: opts.minRate.bytesPerSecond,
      minBodyRateGraceMs: opts.minRate.graceMs,
    }),
    ...(opts.now !== undefined ? { clock: () => opts.now! } : {}),
  });
  return { source, pipeline, got };
}

function head(over: Partial<RequestHead> = {}): RequestHead {
  return {
    method: 'POST',
    url: '/ingest/gh1',
    headers: {},
    remoteAddress: '127.0.0.1',
    contentLength: undefined,
    ...over,
  };
}

function githubHeaders(secret: string, body: Buffer, id = 'd1'): Record<string, string> {
  return {
    'x-hub-signature-256': `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`,
    'x-github-event': 'push',
    'x-github-delivery': id,
  };
}

function status(d: HeadDecision): number | 'accept' {
  return 'reject' in d ? d.reject.status : 'accept';
}

async function run(pipeline: ReturnType<typeof setup>['pipeline'], h: RequestHead, body: Buffer, chunk = 7) {
  const d = await pipeline.begin(h);
  if ('reject' in d) return d.reject;
  for (let i = 0; i < body.length; i += chunk) d.accept.write(body.subarray(i, i + chunk));
  return d.accept.end();
}

describe('createPipeline: decisions on the head', () => {
  it('routes: 404 other paths and unknown sources, 405 + Allow for other methods', async () => {
    const { pipeline } = setup();
    expect(status(await pipeline.begin(head({ url: '/other' })))).toBe(404);
    expect(status(await pipeline.begin(head({ url: '/ingest/nope' })))).toBe(404);
    expect(status(await pipeline.begin(head({ url: '/ingest/a/b' })))).toBe(404);
    const d = await pipeline.begin(head({ method: 'PUT' }));
    expect('reject' in d && d.reject).toMatchObject({ status: 405, headers: { allow: 'POST' } });
    expect(
      status(
        await pipeline.begin(
          head({ url: '/ingest/gh1?x=1', headers: githubHeaders('shh', Buffer.from('{}')) }),
        ),
      ),
    ).toBe('accept');
  });

  it('allowCidrs: IPv4-mapped IPv6 clients match IPv4 ranges; IPv6 ranges match IPv6 clients; others get 403', async () => {
    const { pipeline } = setup({ allowCidrs: ['10.1.0.0/16', '2001:db8::/32'] });
    const h = githubHeaders('shh', Buffer.from('{}'));
    const at = async (remoteAddress: string) =>
      status(await pipeline.begin(head({ remoteAddress, headers: h })));
    expect(await at('10.1.2.3')).toBe('accept');
    expect(await at('::ffff:10.1.2.3')).toBe('accept');
    expect(await at('2001:db8::5')).toBe('accept');
    expect(await at('10.2.0.1')).toBe(403);
    expect(await at('::ffff:10.2.0.1')).toBe(403);
    expect(await at('::1')).toBe(403);
    expect(await at('')).toBe(403);
  });

  it('413 on Content-Length over the cap, before the signature is even looked at', async () => {
    const { pipeline } = setup();
    const d = await pipeline.begin(head({ contentLength: 1001 }));
    expect('reject' in d && d.reject).toMatchObject({ status: 413, close: true });
  });

  it('401 on a missing or malformed signature header before the body', async () => {
    const { pipeline } = setup();
    expect(status(await pipeline.begin(head()))).toBe(401);
    expect(status(await pipeline.begin(head({ headers: { 'x-hub-signature-256': 'sha1=abc' } })))).toBe(401);
  });

  it('a declared length costs nothing until its bytes arrive; 503 + Retry-After once they do not fit', async () => {
    const { pipeline } = setup({ maxBodyBytes: 5000 }, { budget: 6000, shares: 6000 });
    const body = Buffer.alloc(4000, 0x20);
    const first = await pipeline.begin(
      head({ contentLength: 4000, headers: githubHeaders('shh', body, 'a') }),
    );
    const second = await pipeline.begin(
      head({ contentLength: 4000, headers: githubHeaders('shh', body, 'b') }),
    );
    expect(pipeline.inFlightBodyBytes).toBe(0);
    if (!('accept' in first) || !('accept' in second)) throw new Error('both should be accepted');
    first.accept.write(body);
    expect(pipeline.inFlightBodyBytes).toBe(4000);
    second.accept.write(body);
    // The second did not fit: it holds nothing and is answered 503.
    expect(pipeline.inFlightBodyBytes).toBe(4000);
    expect(await second.accept.end()).toMatchObject({ status: 503, headers: { 'retry-after': '1' } });
    // A body of spaces is not what GitHub sends, but verification only needs the HMAC: accepted.
    expect((await first.accept.end()).status).toBe(202);
    expect(pipeline.inFlightBodyBytes).toBe(0);
  });

  it('one client address holds at most its share; another address still fits', async () => {
    const { pipeline } = setup({ maxBodyBytes: 5000 }, { budget: 8000, clientShare: 3000 });
    const body = Buffer.alloc(2000, 0x20);
    const from = async (remoteAddress: string, id: string) => {
      const d = await pipeline.begin(head({ remoteAddress, headers: githubHeaders('shh', body, id) }));
      if (!('accept' in d)) throw new Error('expected accept');
      d.accept.write(body);
      return d.accept;
    };
    const a1 = await from('10.0.0.1', 'a1');
    const a2 = await from('::ffff:10.0.0.1', 'a2');
    const b1 = await from('10.0.0.2', 'b1');
    expect((await a2.end()).status).toBe(503);
    expect((await a1.end()).status).toBe(202);
    expect((await b1.end()).status).toBe(202);
    // IPv6 clients are counted by their /64.
    const c1 = await from('2001:db8:1:2::1', 'c1');
    const c2 = await from('2001:db8:1:2::ffff', 'c2');
    expect((await c2.end()).status).toBe(503);
    expect((await c1.end()).status).toBe(202);
    expect(pipeline.inFlightBodyBytes).toBe(0);
  });

  it('a body slower than the minimum rate loses its budget and is answered 408', async () => {
    const { pipeline } = setup({ maxBodyBytes: 5000 }, { minRate: { bytesPerSecond: 10_000, graceMs: 100 } });
    const body = Buffer.alloc(2000, 0x20);
    const d = await pipeline.begin(head({ contentLength: 2000, headers: githubHeaders('shh', body) }));
    if (!('accept' in d)) throw new Error('expected accept');
    d.accept.write(body.subarray(0, 100));
    expect(pipeline.inFlightBodyBytes).toBe(100);
    await new Promise((r) => setTimeout(r, 400));
    expect(pipeline.inFlightBodyBytes).toBe(0);
    d.accept.write(body.subarray(100));
    expect(pipeline.inFlightBodyBytes).toBe(0);
    expect(await d.accept.end()).toMatchObject({ status: 408, close: true });
  });

  it('a chunked body that outgrows the budget mid-stream gets 503, holds nothing, and releases', async () => {
    const { pipeline } = setup({ maxBodyBytes: 5000 }, { budget: 3000 });
    const body = Buffer.alloc(4000, 0x20);
    const d = await pipeline.begin(head({ headers: githubHeaders('shh', body) }));
    if (!('accept' in d)) throw new Error('expected accept');
    d.accept.write(body.subarray(0, 2000));
    expect(pipeline.inFlightBodyBytes).toBe(2000);
    d.accept.write(body.subarray(2000));
    expect(pipeline.inFlightBodyBytes).toBe(0);
    expect(await d.accept.end()).toMatchObject({ status: 503, headers: { 'retry-after': '1' } });
  });

  it('abort releases the reserved bytes', async () => {
    const { pipeline } = setup();
    const d = await pipeline.begin(
      head({ contentLength: 900, headers: githubHeaders('shh', Buffer.alloc(900)) }),
    );
    if (!('accept' in d)) throw new Error('expected accept');
    d.accept.write(Buffer.alloc(900));
    expect(pipeline.inFlightBodyBytes).toBe(900);
    d.accept.abort('client_gone');
    expect(pipeline.inFlightBodyBytes).toBe(0);
  });
});

describe('createPipeline: the body', () => {
  it('keeps the chunk a backend hands it as it is (no copy of its own)', async () => {
    // Copying every chunk again doubled the external memory of every body, junk included; the
    // backends hand over bytes they never touch again (BodySink.write; node:http's are copied in
    // backends/exchange.ts, tested in exchange.test.ts).
    const { pipeline, got } = setup();
    const body = Buffer.from(JSON.stringify({ kept: true }));
    const d = await pipeline.begin(head({ headers: githubHeaders('shh', body, 'kept-1') }));
    if ('reject' in d) throw new Error(`rejected ${d.reject.status}`);
    const chunk = Buffer.from(body);
    d.accept.write(chunk);
    expect((await d.accept.end()).status).toBe(202);
    expect(got).toHaveLength(1);
    expect(got[0]!.body).toBe(chunk);
  });

  it('verifies a body written in chunks and hands the exact bytes, id, type and content type to the intake', async () => {
    const { pipeline, got } = setup();
    const body = Buffer.from('{"a": "\u00e9",  "b":[1,2 ,3]}');
    const r = await run(
      pipeline,
      head({
        headers: {
          ...githubHeaders('shh', body, 'del-1'),
          'content-type': 'application/x-www-form-urlencoded',
        },
      }),
      body,
    );
    expect(r).toEqual({ status: 202, body: { id: 'del-1' } });
    expect(got).toHaveLength(1);
    expect(got[0]!.body.equals(body)).toBe(true);
    expect(got[0]).toMatchObject({
      tenantId: 'acme',
      id: 'del-1',
      type: 'push',
      sourceId: 'gh1',
      contentType: 'application/x-www-form-urlencoded',
    });
  });

  it('a duplicate from the intake answers 200 {id, duplicate:true}; SPW_ERR_UNAVAILABLE answers 503 + Retry-After', async () => {
    const body = Buffer.from('{}');
    const dup = setup({}, { intake: { submit: async (e) => ({ id: e.id, duplicate: true }) } });
    expect(await run(dup.pipeline, head({ headers: githubHeaders('shh', body) }), body)).toEqual({
      status: 200,
      body: { id: 'd1', duplicate: true },
    });
    const { errors } = await import('@spillway/shared');
    const down = setup(
      {},
      { intake: { submit: async () => Promise.reject(errors.unavailable('redis down', { retryAfter: 3 })) } },
    );
    const r = await run(down.pipeline, head({ headers: githubHeaders('shh', body) }), body);
    expect(r).toMatchObject({ status: 503, headers: { 'retry-after': '3' } });
    expect(down.pipeline.inFlightBodyBytes).toBe(0);
  });

  it('stripe: ±300 s on the timestamp, several v1, id and type from the body, non-JSON → 400', async () => {
    const now = 1_800_000_000_000;
    const { pipeline, got } = setup({ kind: 'stripe', secret: 'whsec_abc' }, { now });
    const stripe = new Stripe('sk_test_x');
    const body = Buffer.from('{"id":"evt_1","type":"charge.succeeded"}');
    const sig = (t: number) =>
      stripe.webhooks.generateTestHeaderString({
        payload: body.toString(),
        secret: 'whsec_abc',
        timestamp: t,
      });
    const t = now / 1000;
    expect((await run(pipeline, head({ headers: { 'stripe-signature': sig(t - 300) } }), body)).status).toBe(
      202,
    );
    expect((await run(pipeline, head({ headers: { 'stripe-signature': sig(t + 300) } }), body)).status).toBe(
      202,
    );
    expect((await run(pipeline, head({ headers: { 'stripe-signature': sig(t - 301) } }), body)).status).toBe(
      401,
    );
    expect((await run(pipeline, head({ headers: { 'stripe-signature': sig(t + 301) } }), body)).status).toBe(
      401,
    );
    expect(got.map((e) => [e.id, e.type])).toEqual([
      ['evt_1', 'charge.succeeded'],
      ['evt_1', 'charge.succeeded'],
    ]);
    const arr = Buffer.from('[1,2]');
    const arrSig = stripe.webhooks.generateTestHeaderString({
      payload: arr.toString(),
      secret: 'whsec_abc',
      timestamp: t,
    });
    expect((await run(pipeline, head({ headers: { 'stripe-signature': arrSig } }), arr)).status).toBe(400);
  });

  it('standard: key is the base64 part of whsec_, signed id.timestamp.body, tolerance both ways', async () => {
    const secret = `whsec_${randomBytes(24).toString('base64')}`;
    const now = 1_800_000_000_000;
    const { pipeline, got } = setup({ kind: 'standard', secret }, { now });
    const body = Buffer.from('{"type":"a.b"}');
    const h = (at: number) => ({
      'webhook-id': 'msg_1',
      'webhook-timestamp': String(Math.floor(at / 1000)),
      'webhook-signature': new Webhook(secret).sign('msg_1', new Date(at), body),
    });
    expect((await run(pipeline, head({ headers: h(now + 300_000) }), body)).status).toBe(202);
    expect((await run(pipeline, head({ headers: h(now - 301_000) }), body)).status).toBe(401);
    expect((await run(pipeline, head({ headers: h(now + 301_000) }), body)).status).toBe(401);
    expect(got[0]).toMatchObject({ id: 'msg_1', type: 'a.b' });
    const noType = Buffer.from('{"data":1}');
    const h2 = {
      'webhook-id': 'msg_2',
      'webhook-timestamp': String(now / 1000),
      'webhook-signature': new Webhook(secret).sign('msg_2', new Date(now), noType),
    };
    expect((await run(pipeline, head({ headers: h2 }), noType)).status).toBe(400);
  });

  it('shopify: base64 signature; a hex one or a missing topic is refused', async () => {
    const { pipeline } = setup({ kind: 'shopify' });
    const body = Buffer.from('{"id":1}');
    const b64 = createHmac('sha256', 'shh').update(body).digest('base64');
    const hex = createHmac('sha256', 'shh').update(body).digest('hex');
    const base = { 'x-shopify-topic': 'orders/create', 'x-shopify-webhook-id': 'w1' };
    expect(
      (await run(pipeline, head({ headers: { ...base, 'x-shopify-hmac-sha256': b64 } }), body)).status,
    ).toBe(202);
    expect(
      (await run(pipeline, head({ headers: { ...base, 'x-shopify-hmac-sha256': hex } }), body)).status,
    ).toBe(401);
    expect(
      (
        await run(
          pipeline,
          head({ headers: { 'x-shopify-webhook-id': 'w1', 'x-shopify-hmac-sha256': b64 } }),
          body,
        )
      ).status,
    ).toBe(400);
  });
});

describe('createIngestServer', () => {
  const opts = () => ({
    handler: setup().pipeline,
    port: 0,
    host: '127.0.0.1',
  });

  it('node is node; auto picks a backend that listens', async () => {
    const node = await createIngestServer('node', opts());
    expect(node.backend).toBe('node');
    const auto = await createIngestServer('auto', opts(), logger);
    const { port } = await auto.listen();
    expect(port).toBeGreaterThan(0);
    const r = await fetch(`http://127.0.0.1:${port}/ingest/nope`, { method: 'POST', body: '{}' });
    expect(r.status).toBe(404);
    await auto.close();
  });

  it('uring explicitly either starts the io_uring backend or fails naming SPILLWAY_INGEST_BACKEND', async () => {
    try {
      const s = await createIngestServer('uring', opts());
      expect(s.backend).toBe('uring');
      await s.close();
    } catch (err) {
      expect(isSpillwayError(err, 'SPW_ERR_CONFIG')).toBe(true);
      expect((err as Error).message).toContain('SPILLWAY_INGEST_BACKEND=uring');
    }
  });
});
