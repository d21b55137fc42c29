import { randomBytes } from 'node:crypto';
import SwaggerParser from '@apidevtools/swagger-parser';
import type { createKeys } from '@spillway/shared';
import { Ajv } from 'ajv';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StartedRouter, startRouter } from '../../../test/helpers/router-started.ts';

/** The admin API through real HTTP on a real `start('admin')` against the suite's Redis and Kafka. */
let env: Record<string, string>;
let base: string;
let redis: Redis;
let keys: ReturnType<typeof createKeys>;

let router: StartedRouter | undefined;

beforeAll(async () => {
  router = await startRouter('admin');
  ({ env, base, redis, keys } = router);
}, 30_000);

afterAll(() => router?.close());

interface Res {
  status: number;
  body: any;
  headers: Headers;
}

async function call(
  method: string,
  path: string,
  body?: unknown,
  opts: { token?: string | null; raw?: string; contentType?: string } = {},
): Promise<Res> {
  const headers: Record<string, string> = {};
  const token = opts.token === undefined ? env.SPILLWAY_ADMIN_TOKEN : opts.token;
  if (token !== null) headers.authorization = `Bearer ${token}`;
  let payload: string | undefined;
  if (opts.raw !== undefined) payload = opts.raw;
  else if (body !== undefined) payload = JSON.stringify(body);
  if (payload !== undefined) headers['content-type'] = opts.contentType ?? 'application/json';
  const res = await fetch(base + path, { method, headers, body: payload });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

const tid = () => `t-${randomBytes(4).toString('hex')}`;

function expectError(r: Res, status: number, code: string): void {
  expect(r.status, JSON.stringify(r.body)).toBe(status);
  expect(r.body).toEqual({ error: { code, message: expect.any(String) } });
  expect(r.body.error.message.length).toBeGreaterThan(3);
}

/** Every key this test run's prefix owns: "nothing written" means this does not change. */
async function snapshot(): Promise<string[]> {
  const out: string[] = [];
  let cursor = '0';
  for (let i = 0; i < 1000; i++) {
    const [next, batch] = await redis.scan(cursor, 'MATCH', `${keys.prefix}:*`, 'COUNT', 500);
    out.push(...batch);
    cursor = next;
    if (cursor === '0') break;
  }
  // Keys about to expire on their own (short-lived markers and caches left by earlier tests) would
  // make "nothing written" depend on how long a test takes; what a request writes lives longer.
  const ttls = await Promise.all(out.map((k) => redis.pttl(k)));
  const lasting = out.filter((_, i) => !(ttls[i]! > 0 && ttls[i]! < 60_000));
  const withValues = await Promise.all(
    lasting.sort().map(async (k) => {
      const type = await redis.type(k);
      const v =
        type === 'string'
          ? await redis.get(k)
          : type === 'hash'
            ? JSON.stringify(await redis.hgetall(k))
            : type === 'set'
              ? JSON.stringify((await redis.smembers(k)).sort())
              : type;
      return `${k}=${v}`;
    }),
  );
  return withValues;
}

describe('auth', () => {
  it('401 without a token, with a bad token, and with a non-bearer scheme; health stays open', async () => {
    expectError(await call('GET', '/v1/tenants', undefined, { token: null }), 401, 'unauthorized');
    expectError(
      await call('GET', '/v1/tenants', undefined, { token: 'wrong-token-wrong-token' }),
      401,
      'unauthorized',
    );
    expectError(
      await call('GET', '/v1/tenants', undefined, { token: `${env.SPILLWAY_ADMIN_TOKEN}x` }),
      401,
      'unauthorized',
    );
    const basic = await fetch(`${base}/v1/tenants`, {
      headers: { authorization: `Basic ${env.SPILLWAY_ADMIN_TOKEN}` },
    });
    expect(basic.status).toBe(401);
    const before = await snapshot();
    expectError(await call('POST', '/v1/tenants', { id: tid() }, { token: 'nope' }), 401, 'unauthorized');
    expect(await snapshot()).toEqual(before);
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    expect((await fetch(`${base}/metrics`)).status).toBe(200);
  });
});

describe('tenants', () => {
  it('create with defaults, get, list, patch limits, pause/resume, delete', async () => {
    const id = tid();
    const c = await call('POST', '/v1/tenants', { id });
    expect(c.status).toBe(201);
    expect(c.body).toMatchObject({ id, status: 'active', limits: { maxInFlight: 1000, concurrency: 16 } });
    expect(c.body.limits.rate).toBeUndefined();
    expect(await redis.sismember(keys.tenants, id)).toBe(1);

    expect((await call('GET', `/v1/tenants/${id}`)).body).toEqual(c.body);
    const list = await call('GET', '/v1/tenants');
    expect(list.status).toBe(200);
    expect(list.body.data.map((t: { id: string }) => t.id)).toContain(id);

    const p = await call('PATCH', `/v1/tenants/${id}`, {
      limits: { concurrency: 4, rate: { perSecond: 50, burst: 100 } },
    });
    expect(p.status).toBe(200);
    expect(p.body.limits).toEqual({ maxInFlight: 1000, concurrency: 4, rate: { perSecond: 50, burst: 100 } });
    const cleared = await call('PATCH', `/v1/tenants/${id}`, { limits: { rate: null } });
    expect(cleared.body.limits).toEqual({ maxInFlight: 1000, concurrency: 4 });
    expect(JSON.parse((await redis.get(keys.tenant(id)))!).limits).toEqual({
      maxInFlight: 1000,
      concurrency: 4,
    });

    expect((await call('POST', `/v1/tenants/${id}/pause`)).body).toEqual({ id, status: 'paused' });
    expect(JSON.parse((await redis.get(keys.tenant(id)))!).status).toBe('paused');
    expect((await call('POST', `/v1/tenants/${id}/resume`)).body).toEqual({ id, status: 'active' });
    expect(JSON.parse((await redis.get(keys.tenant(id)))!).status).toBe('active');

    expect((await call('DELETE', `/v1/tenants/${id}`)).status).toBe(204);
    expect(await redis.exists(keys.tenant(id))).toBe(0);
    expectError(await call('GET', `/v1/tenants/${id}`), 404, 'not_found');
  });

  it('generates an id when absent and takes full limits', async () => {
    const c = await call('POST', '/v1/tenants', {
      limits: { maxInFlight: 5, concurrency: 2, rate: { perSecond: 0.5, burst: 1 } },
    });
    expect(c.status).toBe(201);
    expect(c.body.id).toMatch(/^tn_[A-Za-z0-9]+$/);
    expect(c.body.limits).toEqual({ maxInFlight: 5, concurrency: 2, rate: { perSecond: 0.5, burst: 1 } });
  });

  it('409 on an existing id, and the original is untouched', async () => {
    const id = tid();
    await call('POST', '/v1/tenants', { id, limits: { concurrency: 3 } });
    const before = await snapshot();
    expectError(await call('POST', '/v1/tenants', { id, limits: { concurrency: 9 } }), 409, 'conflict');
    expect(await snapshot()).toEqual(before);
    expect((await call('GET', `/v1/tenants/${id}`)).body.limits.concurrency).toBe(3);
  });

  it('404 on every tenant route for an unknown tenant', async () => {
    const id = tid();
    const before = await snapshot();
    for (const [m, p, b] of [
      ['GET', `/v1/tenants/${id}`],
      ['PATCH', `/v1/tenants/${id}`, { limits: { concurrency: 2 } }],
      ['DELETE', `/v1/tenants/${id}`],
      ['POST', `/v1/tenants/${id}/pause`],
      ['POST', `/v1/tenants/${id}/resume`],
      ['GET', `/v1/tenants/${id}/stats`],
      ['GET', `/v1/tenants/${id}/endpoints`],
      ['POST', `/v1/tenants/${id}/endpoints`, { url: 'https://example.com/' }],
      ['GET', `/v1/tenants/${id}/sources`],
      ['POST', `/v1/tenants/${id}/sources`, { kind: 'github', secret: 'x' }],
      ['POST', `/v1/tenants/${id}/keys`, {}],
      ['GET', `/v1/tenants/${id}/keys`],
    ] as const) {
      const r = await call(m, p, b);
      expect(r.status, `${m} ${p}`).toBe(404);
      expect(r.body.error.code).toBe('not_found');
    }
    expect(await snapshot()).toEqual(before);
    expectError(await call('GET', '/v1/nowhere'), 404, 'not_found');
  });
});

describe('bad input: clear 4xx, nothing written', () => {
  const cases: [string, string | object, number, string][] = [
    ['malformed JSON', '{"id": "a",', 400, 'invalid_json'],
    ['empty JSON body', '', 400, 'invalid_json'],
    ['unknown field', { id: 'ok-id', colour: 'red' }, 400, 'invalid_body'],
    ['unknown nested field', { id: 'ok-id', limits: { concurrency: 2, turbo: true } }, 400, 'invalid_body'],
    ['wrong type (string for integer)', { id: 'ok-id', limits: { concurrency: '16' } }, 400, 'invalid_body'],
    ['wrong type (number id)', { id: 42 }, 400, 'invalid_body'],
    ['bad id charset', { id: 'a{b}c' }, 400, 'invalid_body'],
    ['zero concurrency', { id: 'ok-id', limits: { concurrency: 0 } }, 400, 'invalid_body'],
    ['rate without burst', { id: 'ok-id', limits: { rate: { perSecond: 1 } } }, 400, 'invalid_body'],
    ['array body', [{ id: 'ok-id' }], 400, 'invalid_body'],
    ['a 10 MB body', { id: 'ok-id', pad: 'x'.repeat(10 * 1024 * 1024) }, 413, 'payload_too_large'],
  ];
  for (const [name, body, status, code] of cases) {
    it(name, async () => {
      const before = await snapshot();
      const r =
        typeof body === 'string'
          ? await call('POST', '/v1/tenants', undefined, { raw: body })
          : await call('POST', '/v1/tenants', body);
      expectError(r, status, code);
      expect(await snapshot()).toEqual(before);
    });
  }

  it('unknown field names the field', async () => {
    const r = await call('POST', '/v1/tenants', { id: 'ok-id', colour: 'red' });
    expect(r.body.error.message).toContain('colour');
  });

  it('a non-JSON content type is 415', async () => {
    const before = await snapshot();
    const r = await call('POST', '/v1/tenants', undefined, {
      raw: 'id=x',
      contentType: 'application/x-www-form-urlencoded',
    });
    expectError(r, 415, 'unsupported_media_type');
    expect(await snapshot()).toEqual(before);
  });

  it('endpoint, source and PATCH bodies are validated too', async () => {
    const id = tid();
    await call('POST', '/v1/tenants', { id });
    const before = await snapshot();
    const bad: [string, string, object, string?][] = [
      ['POST', `/v1/tenants/${id}/endpoints`, { url: 'ftp://example.com/x' }, 'http'],
      ['POST', `/v1/tenants/${id}/endpoints`, { url: 'not a url at all' }],
      ['POST', `/v1/tenants/${id}/endpoints`, { url: 'https://example.com/', secret: 'whsec_short' }],
      ['POST', `/v1/tenants/${id}/endpoints`, { url: 'https://example.com/', eventTypes: [] }],
      ['POST', `/v1/tenants/${id}/endpoints`, { url: 'https://example.com/', eventTypes: ['order.**'] }],
      ['POST', `/v1/tenants/${id}/endpoints`, { url: 'https://example.com/', timeoutMs: 15.5 }],
      ['POST', `/v1/tenants/${id}/endpoints`, { url: 'https://example.com/', extra: 1 }],
      ['POST', `/v1/tenants/${id}/sources`, { kind: 'gitlab', secret: 'x' }],
      ['POST', `/v1/tenants/${id}/sources`, { kind: 'github' }],
      [
        'POST',
        `/v1/tenants/${id}/sources`,
        { kind: 'github', secret: 'x', allowCidrs: ['10.0.0.0/33'] },
        'allowCidrs',
      ],
      [
        'POST',
        `/v1/tenants/${id}/sources`,
        { kind: 'github', secret: 'x', allowCidrs: ['hello'] },
        'allowCidrs',
      ],
      ['POST', `/v1/tenants/${id}/sources`, { kind: 'standard', secret: 'not-whsec' }, 'whsec_'],
      ['POST', `/v1/tenants/${id}/sources`, { kind: 'github', secret: 'x', maxBodyBytes: -1 }],
      ['PATCH', `/v1/tenants/${id}`, { limits: { concurrency: 2 }, status: 'paused' }],
      ['PATCH', `/v1/tenants/${id}`, {}],
      ['POST', `/v1/tenants/${id}/events`, { type: 'order.created' }],
      ['POST', `/v1/tenants/${id}/events`, { type: 'order created', payload: {} }],
      ['POST', `/v1/tenants/${id}/events`, { type: 'a', payload: {}, extra: true }],
      ['POST', `/v1/tenants/${id}/keys`, { name: 5 }],
      ['POST', `/v1/tenants/${id}/dlq/replay`, { endpointId: 'x', all: true }],
    ];
    for (const [m, p, b, mention] of bad) {
      const r = await call(m, p, b);
      expect(r.status, `${m} ${p} ${JSON.stringify(b)} → ${JSON.stringify(r.body)}`).toBe(400);
      expect(r.body.error.code).toBe('invalid_body');
      if (mention) expect(r.body.error.message).toContain(mention);
    }
    expect(await snapshot()).toEqual(before);
    expectError(await call('GET', `/v1/tenants/${id}/stats?detail=everything`), 400, 'invalid_request');
    expectError(await call('GET', '/v1/tenants/bad%7Bid%7D'), 400, 'invalid_request');
  });
});

describe('endpoints', () => {
  it('create with defaults and a generated secret, get, list, patch, rotate, pause/resume, delete', async () => {
    const id = tid();
    await call('POST', '/v1/tenants', { id });
    const c = await call('POST', `/v1/tenants/${id}/endpoints`, { url: 'https://example.com/hooks' });
    expect(c.status).toBe(201);
    expect(c.body).toMatchObject({
      tenantId: id,
      url: 'https://example.com/hooks',
      eventTypes: ['*'],
      timeoutMs: 15000,
      status: 'active',
    });
    expect(c.body.id).toMatch(/^ep_/);
    expect(c.body.secret).toMatch(/^whsec_[A-Za-z0-9+/]{32,}={0,2}$/);
    expect(Buffer.from(c.body.secret.slice(6), 'base64').length).toBeGreaterThanOrEqual(24);
    const eid = c.body.id as string;
    // Stored sealed (AES-256-GCM under SPILLWAY_SECRET_KEY), everything else as answered.
    const stored = JSON.parse((await redis.hget(keys.endpoints(id), eid))!);
    expect(stored).toEqual({ ...c.body, secret: expect.stringMatching(/^enc:v1:[0-9a-f]{8}:/) });
    expect(JSON.stringify(stored)).not.toContain(c.body.secret.slice(6));

    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    const e2 = await call('POST', `/v1/tenants/${id}/endpoints`, {
      id: 'orders',
      url: 'http://example.org/o',
      eventTypes: ['order.*'],
      secret,
      rate: { perSecond: 10, burst: 20 },
      timeoutMs: 5000,
    });
    expect(e2.status).toBe(201);
    expect(e2.body).toMatchObject({
      id: 'orders',
      secret,
      eventTypes: ['order.*'],
      rate: { perSecond: 10, burst: 20 },
      timeoutMs: 5000,
    });
    expectError(
      await call('POST', `/v1/tenants/${id}/endpoints`, { id: 'orders', url: 'https://x.example/' }),
      409,
      'conflict',
    );

    // GET and list never show the secret; GET .../secret does.
    const { secret: _shown, ...e2View } = e2.body;
    expect((await call('GET', `/v1/tenants/${id}/endpoints/orders`)).body).toEqual(e2View);
    const listed = (await call('GET', `/v1/tenants/${id}/endpoints`)).body.data;
    expect(listed.map((e: { id: string }) => e.id).sort()).toEqual([eid, 'orders'].sort());
    expect(listed.every((e: { secret?: string }) => e.secret === undefined)).toBe(true);
    expect((await call('GET', `/v1/tenants/${id}/endpoints/orders/secret`)).body).toEqual({
      secret,
      previousSecrets: [],
    });
    expectError(await call('GET', `/v1/tenants/${id}/endpoints/nope`), 404, 'not_found');

    const newSecret = `whsec_${randomBytes(24).toString('base64')}`;
    const p = await call('PATCH', `/v1/tenants/${id}/endpoints/orders`, {
      eventTypes: ['order.created', 'invoice.*'],
      secret: newSecret,
      rate: null,
    });
    expect(p.status).toBe(200);
    expect(p.body.eventTypes).toEqual(['order.created', 'invoice.*']);
    expect(p.body.secret).toBeUndefined();
    expect(p.body.previousSecrets).toEqual([{ expiresAt: expect.any(String) }]);
    expect((await call('GET', `/v1/tenants/${id}/endpoints/orders/secret`)).body).toEqual({
      secret: newSecret,
      previousSecrets: [{ secret, expiresAt: p.body.previousSecrets[0].expiresAt }],
    });
    expect(p.body.rate).toBeUndefined();
    expectError(
      await call('PATCH', `/v1/tenants/${id}/endpoints/nope`, { timeoutMs: 1000 }),
      404,
      'not_found',
    );

    expect((await call('POST', `/v1/tenants/${id}/endpoints/orders/pause`)).body).toEqual({
      id: 'orders',
      status: 'paused',
    });
    expect(JSON.parse((await redis.hget(keys.endpoints(id), 'orders'))!).status).toBe('paused');
    expect((await call('POST', `/v1/tenants/${id}/endpoints/orders/resume`)).body).toEqual({
      id: 'orders',
      status: 'active',
    });
    expectError(await call('POST', `/v1/tenants/${id}/endpoints/nope/pause`), 404, 'not_found');

    expect((await call('DELETE', `/v1/tenants/${id}/endpoints/orders`)).status).toBe(204);
    expect(await redis.hexists(keys.endpoints(id), 'orders')).toBe(0);
    expectError(await call('DELETE', `/v1/tenants/${id}/endpoints/orders`), 404, 'not_found');
  });
});

describe('sources', () => {
  it('create (with ingestPath and normalised CIDRs), get, list, 409, delete; another tenant cannot see it', async () => {
    const id = tid();
    const other = tid();
    await call('POST', '/v1/tenants', { id });
    await call('POST', '/v1/tenants', { id: other });
    const c = await call('POST', `/v1/tenants/${id}/sources`, {
      kind: 'github',
      secret: 'gh-secret',
      allowCidrs: ['192.30.252.0/22', '2001:DB8::/32'],
      rate: { perSecond: 100, burst: 200 },
    });
    expect(c.status).toBe(201);
    expect(c.body).toMatchObject({
      tenantId: id,
      kind: 'github',
      maxBodyBytes: 1048576,
      allowCidrs: ['192.30.252.0/22', '2001:db8::/32'],
    });
    expect(c.body.ingestPath).toBe(`/ingest/${c.body.id}`);
    expect(c.body.secret).toBe('gh-secret');
    const stored = JSON.parse((await redis.hget(keys.sources, c.body.id))!);
    expect(stored).toMatchObject({ id: c.body.id, tenantId: id, secret: expect.stringMatching(/^enc:v1:/) });
    expect(stored.ingestPath).toBeUndefined();

    const std = await call('POST', `/v1/tenants/${id}/sources`, {
      id: 'std-1',
      kind: 'standard',
      secret: `whsec_${randomBytes(24).toString('base64')}`,
      maxBodyBytes: 4096,
    });
    expect(std.status).toBe(201);
    expectError(
      await call('POST', `/v1/tenants/${other}/sources`, { id: 'std-1', kind: 'stripe', secret: 'x' }),
      409,
      'conflict',
    );

    expect((await call('GET', `/v1/tenants/${id}/sources/std-1`)).body).toMatchObject({
      id: 'std-1',
      ingestPath: '/ingest/std-1',
      maxBodyBytes: 4096,
    });
    expect((await call('GET', `/v1/tenants/${id}/sources`)).body.data).toHaveLength(2);
    expect((await call('GET', `/v1/tenants/${other}/sources`)).body.data).toHaveLength(0);
    expectError(await call('GET', `/v1/tenants/${other}/sources/std-1`), 404, 'not_found');
    expectError(await call('DELETE', `/v1/tenants/${other}/sources/std-1`), 404, 'not_found');
    expect(await redis.hexists(keys.sources, 'std-1')).toBe(1);

    expect((await call('DELETE', `/v1/tenants/${id}/sources/std-1`)).status).toBe(204);
    expect(await redis.hexists(keys.sources, 'std-1')).toBe(0);
    expectError(await call('GET', `/v1/tenants/${id}/sources/std-1`), 404, 'not_found');
  });
});

describe('tenant API keys', () => {
  it('shown once, stored hashed; reach only their own tenant’s events and stats', async () => {
    const a = tid();
    const b = tid();
    await call('POST', '/v1/tenants', { id: a });
    await call('POST', '/v1/tenants', { id: b });
    await call('POST', `/v1/tenants/${b}/endpoints`, { id: 'b-ep', url: 'https://example.com/b' });
    const k = await call('POST', `/v1/tenants/${a}/keys`, { name: 'ci' });
    expect(k.status).toBe(201);
    expect(k.body).toMatchObject({ tenantId: a, name: 'ci', id: expect.stringMatching(/^key_/) });
    const key = k.body.key as string;
    expect(key).toMatch(/^spk_/);

    // Stored hashed: the raw key appears nowhere in Redis; the listing never shows it again.
    expect((await snapshot()).join('\n')).not.toContain(key);
    const listed = await call('GET', `/v1/tenants/${a}/keys`);
    expect(listed.body.data).toEqual([
      { id: k.body.id, tenantId: a, name: 'ci', createdAt: k.body.createdAt },
    ]);

    const before = await snapshot();
    // Another tenant: forbidden, read or write.
    for (const [m, p, body] of [
      ['GET', `/v1/tenants/${b}/stats`],
      ['POST', `/v1/tenants/${b}/events`, { type: 'x.y', payload: {} }],
      ['GET', `/v1/tenants/${b}/events/whatever`],
      ['POST', `/v1/tenants/${b}/pause`],
      ['DELETE', `/v1/tenants/${b}/endpoints/b-ep`],
      ['GET', `/v1/tenants/${b}`],
    ] as const) {
      const r = await call(m, p, body, { token: key });
      expect(r.status, `${m} ${p}`).toBe(403);
      expect(r.body.error.code).toBe('forbidden');
    }
    // Its own tenant, but admin-only routes: forbidden too.
    for (const [m, p, body] of [
      ['GET', '/v1/tenants'],
      ['POST', '/v1/tenants', { id: tid() }],
      ['GET', `/v1/tenants/${a}`],
      ['POST', `/v1/tenants/${a}/pause`],
      ['POST', `/v1/tenants/${a}/endpoints`, { url: 'https://evil.example/' }],
      ['POST', `/v1/tenants/${a}/keys`, {}],
      ['GET', `/v1/tenants/${a}/dlq`],
      ['POST', `/v1/tenants/${a}/dlq/replay`, {}],
    ] as const) {
      const r = await call(m, p, body, { token: key });
      expect(r.status, `${m} ${p}`).toBe(403);
    }
    expect(await snapshot()).toEqual(before);
    expect((await call('GET', `/v1/tenants/${b}/endpoints/b-ep`)).status).toBe(200);

    // Its own events/stats routes get past auth (the answer depends on the router services).
    const own = await call('GET', `/v1/tenants/${a}/events/nope`, undefined, { token: key });
    expect([404, 503]).toContain(own.status);

    // Revoked: 401 from then on.
    expect((await call('DELETE', `/v1/tenants/${a}/keys/${k.body.id}`)).status).toBe(204);
    expectError(await call('GET', `/v1/tenants/${a}/stats`, undefined, { token: key }), 401, 'unauthorized');
    expectError(await call('DELETE', `/v1/tenants/${a}/keys/${k.body.id}`), 404, 'not_found');
  });

  it('deleting a tenant revokes its keys and drops its DLQ and counters', async () => {
    const a = tid();
    await call('POST', '/v1/tenants', { id: a });
    const k = await call('POST', `/v1/tenants/${a}/keys`);
    expect(k.status).toBe(201);
    expect(await redis.hlen(keys.apiKeys)).toBeGreaterThan(0);
    await redis.rpush(keys.dlq(a), '{}');
    await redis.hset(keys.tenantCounters(a), 'delivered', 3);
    expect((await call('DELETE', `/v1/tenants/${a}`)).status).toBe(204);
    expect(await redis.exists(keys.tenantKeys(a), keys.dlq(a), keys.tenantCounters(a))).toBe(0);
    expectError(
      await call('GET', `/v1/tenants/${a}/stats`, undefined, { token: k.body.key }),
      401,
      'unauthorized',
    );
  });
});

describe('/openapi.json', () => {
  it('validates as OpenAPI 3 and lists every route', async () => {
    const res = await fetch(`${base}/openapi.json`);
    expect(res.status).toBe(200);
    const doc = (await res.json()) as any;
    expect(doc.openapi).toMatch(/^3\./);
    await SwaggerParser.validate(structuredClone(doc));
    const ops = Object.entries(doc.paths as Record<string, Record<string, unknown>>).flatMap(([p, item]) =>
      Object.keys(item).map((m) => `${m.toUpperCase()} ${p}`),
    );
    const expected = [
      'POST /v1/tenants',
      'GET /v1/tenants',
      'GET /v1/tenants/{tid}',
      'PATCH /v1/tenants/{tid}',
      'DELETE /v1/tenants/{tid}',
      'POST /v1/tenants/{tid}/pause',
      'POST /v1/tenants/{tid}/resume',
      'GET /v1/tenants/{tid}/stats',
      'POST /v1/tenants/{tid}/keys',
      'GET /v1/tenants/{tid}/keys',
      'DELETE /v1/tenants/{tid}/keys/{kid}',
      'POST /v1/tenants/{tid}/endpoints',
      'GET /v1/tenants/{tid}/endpoints',
      'GET /v1/tenants/{tid}/endpoints/{eid}',
      'PATCH /v1/tenants/{tid}/endpoints/{eid}',
      'DELETE /v1/tenants/{tid}/endpoints/{eid}',
      'POST /v1/tenants/{tid}/endpoints/{eid}/pause',
      'POST /v1/tenants/{tid}/endpoints/{eid}/resume',
      'GET /v1/tenants/{tid}/endpoints/{eid}/public-key',
      'POST /v1/tenants/{tid}/sources',
      'GET /v1/tenants/{tid}/sources',
      'GET /v1/tenants/{tid}/sources/{sid}',
      'PATCH /v1/tenants/{tid}/sources/{sid}',
      'DELETE /v1/tenants/{tid}/sources/{sid}',
      'GET /v1/tenants/{tid}/endpoints/{eid}/secret',
      'GET /v1/tenants/{tid}/sources/{sid}/secret',
      'POST /v1/secrets/reencrypt',
      'POST /v1/tenants/{tid}/events',
      'GET /v1/tenants/{tid}/events/{eid}',
      'GET /v1/tenants/{tid}/dlq',
      'POST /v1/tenants/{tid}/dlq/replay',
      // The history (docs/operations.md, "History").
      'GET /v1/tenants/{tid}/events',
      'GET /v1/tenants/{tid}/events/{eid}/attempts',
      'POST /v1/tenants/{tid}/events/{eid}/resend',
      'GET /v1/tenants/{tid}/endpoints/{eid}/attempts',
      'POST /v1/tenants/{tid}/endpoints/{eid}/recover',
      'POST /v1/tenants/{tid}/endpoints/{eid}/test',
      'GET /v1/tenants/{tid}/operations/{opid}',
      'DELETE /v1/tenants/{tid}/dlq',
      'GET /healthz',
      'GET /readyz',
      'GET /metrics',
      // The operator console's own routes (docs/console.md).
      'GET /console/api/session',
      'GET /console/api/stream',
      'GET /console/api/tenants/{tid}/stream',
    ];
    expect(ops.sort()).toEqual(expected.sort());
    // The same schema objects validate requests: the document carries additionalProperties: false.
    const createTenant = doc.paths['/v1/tenants'].post.requestBody.content['application/json'].schema;
    expect(createTenant.additionalProperties).toBe(false);
    expect(doc.paths['/v1/tenants/{tid}'].get.responses['404']).toBeDefined();
  });

  it('real responses conform to the documented response schemas', async () => {
    const doc = (await (await fetch(`${base}/openapi.json`)).json()) as any;
    const ajv = new Ajv({ strict: false, validateFormats: false, allErrors: true });
    const check = (path: string, method: string, status: number, body: unknown) => {
      const schema = doc.paths[path][method].responses[String(status)].content['application/json'].schema;
      const ok = ajv.validate(schema, body);
      expect(ok, `${method} ${path} ${status}: ${ajv.errorsText()}`).toBe(true);
    };
    const id = tid();
    const t = await call('POST', '/v1/tenants', { id, limits: { rate: { perSecond: 1, burst: 2 } } });
    check('/v1/tenants', 'post', 201, t.body);
    check('/v1/tenants', 'get', 200, (await call('GET', '/v1/tenants')).body);
    const e = await call('POST', `/v1/tenants/${id}/endpoints`, { url: 'https://example.com/x' });
    check('/v1/tenants/{tid}/endpoints', 'post', 201, e.body);
    const src = await call('POST', `/v1/tenants/${id}/sources`, { kind: 'shopify', secret: 'x' });
    check('/v1/tenants/{tid}/sources', 'post', 201, src.body);
    check('/v1/tenants/{tid}/sources', 'get', 200, (await call('GET', `/v1/tenants/${id}/sources`)).body);
    check('/v1/tenants/{tid}/pause', 'post', 200, (await call('POST', `/v1/tenants/${id}/pause`)).body);
    check(
      '/v1/tenants/{tid}/endpoints/{eid}/pause',
      'post',
      200,
      (await call('POST', `/v1/tenants/${id}/endpoints/${e.body.id}/pause`)).body,
    );
    const stats = await call('GET', `/v1/tenants/${id}/stats?detail=workers`);
    expect(stats.status).toBe(200);
    check('/v1/tenants/{tid}/stats', 'get', 200, stats.body);
    check('/v1/tenants/{tid}/keys', 'post', 201, (await call('POST', `/v1/tenants/${id}/keys`, {})).body);
    check('/v1/tenants/{tid}/dlq', 'get', 200, (await call('GET', `/v1/tenants/${id}/dlq`)).body);
    check('/v1/tenants/{tid}', 'get', 404, (await call('GET', `/v1/tenants/${tid()}`)).body);
    // And a wrong body does not pass: the check itself can fail.
    expect(
      ajv.validate(doc.paths['/v1/tenants'].post.responses['201'].content['application/json'].schema, { id }),
    ).toBe(false);
  });
});
