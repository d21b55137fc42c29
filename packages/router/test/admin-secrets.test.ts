import { randomBytes } from 'node:crypto';
import { secretKeyId } from '@spillway/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StartedRouter, startRouter } from '../../../test/helpers/router-started.ts';

/**
 * Secrets through the admin API on a real `start('admin')`: hidden from GET and list, shown by
 * GET .../secret, stored sealed; source PATCH and its secret rotation; SPILLWAY_SECRET_KEY
 * rotation with SPILLWAY_SECRET_KEY_PREVIOUS and `POST /v1/secrets/reencrypt`; bodiless JSON POSTs.
 */
let r: StartedRouter;

beforeAll(async () => {
  r = await startRouter('admin');
}, 30_000);
afterAll(() => r?.close());

interface Res {
  status: number;
  body: any;
  headers: Headers;
}

async function call(
  router: StartedRouter,
  method: string,
  path: string,
  body?: unknown,
  opts: { token?: string; raw?: string } = {},
): Promise<Res> {
  const headers: Record<string, string> = {
    authorization: `Bearer ${opts.token ?? router.env.SPILLWAY_ADMIN_TOKEN}`,
  };
  let payload: string | undefined;
  if (opts.raw !== undefined) payload = opts.raw;
  else if (body !== undefined) payload = JSON.stringify(body);
  if (payload !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(router.base + path, { method, headers, body: payload });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

const api = (method: string, path: string, body?: unknown, opts?: { token?: string; raw?: string }) =>
  call(r, method, path, body, opts);
const tid = () => `t-${randomBytes(4).toString('hex')}`;
const whsec = (n = 24) => `whsec_${randomBytes(n).toString('base64')}`;

/** Every secret field of every endpoint and source this router's prefix stores, as stored. */
async function storedSecrets(router: StartedRouter): Promise<string[]> {
  const out: string[] = [];
  const collect = (raw: string) => {
    const v = JSON.parse(raw) as { secret: string; previousSecrets?: { secret: string }[] };
    out.push(v.secret, ...(v.previousSecrets ?? []).map((p) => p.secret));
  };
  for (const t of await router.redis.smembers(router.keys.tenants))
    for (const raw of Object.values(await router.redis.hgetall(router.keys.endpoints(t)))) collect(raw);
  for (const raw of Object.values(await router.redis.hgetall(router.keys.sources))) collect(raw);
  return out;
}

/** A source as a release before encryption stored it: plaintext secret. */
async function putPlaintextSource(
  router: StartedRouter,
  t: string,
  id: string,
  kind: string,
  secret: string,
) {
  const src = { id, tenantId: t, kind, secret, maxBodyBytes: 1024, createdAt: new Date().toISOString() };
  await router.redis.hset(router.keys.sources, id, JSON.stringify(src));
}

describe('secrets are shown only on create and by GET .../secret', () => {
  it('endpoints and sources: no secret in GET, list or PATCH answers; stored sealed; admin token only', async () => {
    const t = tid();
    await api('POST', '/v1/tenants', { id: t });
    const ep = await api('POST', `/v1/tenants/${t}/endpoints`, { id: 'e1', url: 'https://example.com/h' });
    expect(ep.status).toBe(201);
    expect(ep.body.secret).toMatch(/^whsec_/);
    const src = await api('POST', `/v1/tenants/${t}/sources`, {
      id: `${t}-s`,
      kind: 'github',
      secret: 'gh-1',
    });
    expect(src.status).toBe(201);
    expect(src.body.secret).toBe('gh-1');

    const views = [
      (await api('GET', `/v1/tenants/${t}/endpoints/e1`)).body,
      ...(await api('GET', `/v1/tenants/${t}/endpoints`)).body.data,
      (await api('PATCH', `/v1/tenants/${t}/endpoints/e1`, { timeoutMs: 1000 })).body,
      (await api('GET', `/v1/tenants/${t}/sources/${t}-s`)).body,
      ...(await api('GET', `/v1/tenants/${t}/sources`)).body.data,
      (await api('PATCH', `/v1/tenants/${t}/sources/${t}-s`, { maxBodyBytes: 2048 })).body,
    ];
    for (const v of views) {
      expect(v.id).toBeDefined();
      expect(JSON.stringify(v)).not.toContain('secret":');
    }
    expect((await api('GET', `/v1/tenants/${t}/endpoints/e1/secret`)).body).toEqual({
      secret: ep.body.secret,
      previousSecrets: [],
    });
    expect((await api('GET', `/v1/tenants/${t}/sources/${t}-s/secret`)).body).toEqual({
      secret: 'gh-1',
      previousSecrets: [],
    });
    // In Redis: sealed, no plaintext anywhere.
    const rawEp = (await r.redis.hget(r.keys.endpoints(t), 'e1'))!;
    const rawSrc = (await r.redis.hget(r.keys.sources, `${t}-s`))!;
    const kid = secretKeyId(Buffer.from(r.env.SPILLWAY_SECRET_KEY!, 'base64'));
    expect(JSON.parse(rawEp).secret).toMatch(new RegExp(`^enc:v1:${kid}:`));
    expect(rawEp).not.toContain(ep.body.secret.slice(6, 20));
    expect(JSON.parse(rawSrc).secret).toMatch(new RegExp(`^enc:v1:${kid}:`));
    expect(rawSrc).not.toContain('gh-1');

    // A tenant key cannot read secrets (of its own tenant either), nor re-encrypt.
    const key = (await api('POST', `/v1/tenants/${t}/keys`, {})).body.key as string;
    for (const [m, p] of [
      ['GET', `/v1/tenants/${t}/endpoints/e1/secret`],
      ['GET', `/v1/tenants/${t}/sources/${t}-s/secret`],
      ['PATCH', `/v1/tenants/${t}/sources/${t}-s`],
      ['POST', '/v1/secrets/reencrypt'],
    ] as const) {
      const res = await api(m, p, m === 'PATCH' ? { maxBodyBytes: 1 } : undefined, { token: key });
      expect(res.status, `${m} ${p}`).toBe(403);
      expect(res.body.error.code).toBe('forbidden');
    }
    // Unknown ids, and another tenant's source, are 404.
    const other = tid();
    await api('POST', '/v1/tenants', { id: other });
    expect((await api('GET', `/v1/tenants/${t}/endpoints/nope/secret`)).status).toBe(404);
    expect((await api('GET', `/v1/tenants/${other}/sources/${t}-s/secret`)).status).toBe(404);
    expect((await api('GET', `/v1/tenants/${tid()}/sources/${t}-s/secret`)).status).toBe(404);
  });

  it('a secret stored in plaintext before encryption still reads, and is sealed by the next write', async () => {
    const t = tid();
    await api('POST', '/v1/tenants', { id: t });
    const legacy = whsec();
    await r.redis.hset(
      r.keys.endpoints(t),
      'old',
      JSON.stringify({
        id: 'old',
        tenantId: t,
        url: 'https://example.com/old',
        eventTypes: ['*'],
        secret: legacy,
        timeoutMs: 15000,
        status: 'active',
        createdAt: new Date().toISOString(),
      }),
    );
    await putPlaintextSource(r, t, `${t}-old`, 'shopify', 'plain-shop');
    expect((await api('GET', `/v1/tenants/${t}/endpoints/old/secret`)).body.secret).toBe(legacy);
    expect((await api('GET', `/v1/tenants/${t}/sources/${t}-old/secret`)).body.secret).toBe('plain-shop');
    expect((await api('GET', `/v1/tenants/${t}/endpoints/old`)).body.secret).toBeUndefined();
    await api('POST', `/v1/tenants/${t}/endpoints/old/pause`);
    expect(JSON.parse((await r.redis.hget(r.keys.endpoints(t), 'old'))!).secret).toMatch(/^enc:v1:/);
    expect((await api('GET', `/v1/tenants/${t}/endpoints/old/secret`)).body.secret).toBe(legacy);
  });
});

describe('PATCH /v1/tenants/:tid/sources/:sid', () => {
  it('validates like create: unknown fields, bad CIDRs, a bad secret for the kind: 400, nothing written', async () => {
    const t = tid();
    await api('POST', '/v1/tenants', { id: t });
    await api('POST', `/v1/tenants/${t}/sources`, { id: `${t}-std`, kind: 'standard', secret: whsec() });
    const before = await r.redis.hget(r.keys.sources, `${t}-std`);
    for (const [body, mention] of [
      [{}, ''],
      [{ kind: 'github' }, 'kind'],
      [{ id: 'x' }, 'id'],
      [{ colour: 'red' }, 'colour'],
      [{ allowCidrs: ['10.0.0.0/33'] }, 'allowCidrs'],
      [{ maxBodyBytes: 0 }, ''],
      [{ rate: { perSecond: 1 } }, ''],
      [{ secret: 'not-whsec' }, 'whsec_'],
      [{ secret: '' }, ''],
      [{ secret: 'enc:v1:abcdef01:xyz' }, 'enc:'],
      [{ secretOverlapSeconds: 60 }, 'secret'],
      [{ secret: whsec(), secretOverlapSeconds: -1 }, ''],
      [{ secret: whsec(), secretOverlapSeconds: 31 * 86400 }, ''],
    ] as const) {
      const res = await api('PATCH', `/v1/tenants/${t}/sources/${t}-std`, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.error.code).toBe('invalid_body');
      if (mention) expect(res.body.error.message).toContain(mention);
    }
    expect(await r.redis.hget(r.keys.sources, `${t}-std`)).toBe(before);
    expect((await api('PATCH', `/v1/tenants/${t}/sources/nope`, { maxBodyBytes: 5 })).status).toBe(404);
    expect((await api('PATCH', `/v1/tenants/${tid()}/sources/${t}-std`, { maxBodyBytes: 5 })).status).toBe(
      404,
    );
  });

  it('changes allowCidrs, maxBodyBytes and rate; a new secret keeps the old one verifying for the overlap', async () => {
    const t = tid();
    const sid = `${t}-gh`;
    await api('POST', '/v1/tenants', { id: t });
    await api('POST', `/v1/tenants/${t}/sources`, {
      id: sid,
      kind: 'github',
      secret: 'first',
      allowCidrs: ['192.30.252.0/22'],
      rate: { perSecond: 5, burst: 5 },
    });
    const p1 = await api('PATCH', `/v1/tenants/${t}/sources/${sid}`, {
      allowCidrs: ['2001:DB8::/32'],
      maxBodyBytes: 4096,
      rate: null,
    });
    expect(p1.status).toBe(200);
    expect(p1.body).toMatchObject({ id: sid, allowCidrs: ['2001:db8::/32'], maxBodyBytes: 4096 });
    expect(p1.body.rate).toBeUndefined();
    expect(
      (await api('PATCH', `/v1/tenants/${t}/sources/${sid}`, { allowCidrs: null })).body.allowCidrs,
    ).toBe(undefined);

    const t0 = Date.now();
    const p2 = await api('PATCH', `/v1/tenants/${t}/sources/${sid}`, { secret: 'second' });
    expect(p2.status).toBe(200);
    expect(p2.body.secret).toBeUndefined();
    const expiresAt = Date.parse(p2.body.previousSecrets[0].expiresAt);
    expect(expiresAt - t0).toBeGreaterThanOrEqual(86_400_000 - 5000);
    expect(expiresAt - t0).toBeLessThanOrEqual(86_400_000 + 5000);
    expect((await api('GET', `/v1/tenants/${t}/sources/${sid}/secret`)).body).toEqual({
      secret: 'second',
      previousSecrets: [{ secret: 'first', expiresAt: p2.body.previousSecrets[0].expiresAt }],
    });
    // The same secret again changes nothing; a third one with a short overlap keeps both older ones
    // (each until its own expiry).
    await api('PATCH', `/v1/tenants/${t}/sources/${sid}`, { secret: 'second' });
    const p3 = await api('PATCH', `/v1/tenants/${t}/sources/${sid}`, {
      secret: 'third',
      secretOverlapSeconds: 600,
    });
    expect(p3.body.previousSecrets).toHaveLength(2);
    const s3 = (await api('GET', `/v1/tenants/${t}/sources/${sid}/secret`)).body;
    expect(s3.secret).toBe('third');
    expect(s3.previousSecrets.map((p: { secret: string }) => p.secret)).toEqual(['second', 'first']);
    // Overlap 0 with the current secret ends the overlap now: only that secret verifies.
    const cut = await api('PATCH', `/v1/tenants/${t}/sources/${sid}`, {
      secret: 'third',
      secretOverlapSeconds: 0,
    });
    expect(cut.body.previousSecrets).toBeUndefined();
    expect((await api('GET', `/v1/tenants/${t}/sources/${sid}/secret`)).body).toEqual({
      secret: 'third',
      previousSecrets: [],
    });
  });
});

describe('SPILLWAY_SECRET_KEY rotation', () => {
  it('old data reads under the new key with the old one in _PREVIOUS; reencrypt leaves nothing under the old key', async () => {
    const prefix = `rot-${randomBytes(4).toString('hex')}`;
    const k1 = randomBytes(32).toString('base64');
    const k2 = randomBytes(32).toString('hex');
    const kid1 = secretKeyId(Buffer.from(k1, 'base64'));
    const kid2 = secretKeyId(Buffer.from(k2, 'hex'));
    const routers: StartedRouter[] = [];
    const run = async (env: Record<string, string>) => {
      const router = await startRouter('admin', { SPILLWAY_PREFIX: prefix, ...env });
      routers.push(router);
      return router;
    };
    try {
      // Under k1: an endpoint (rotated once: two secrets), a source, and a legacy plaintext source.
      const a = await run({ SPILLWAY_SECRET_KEY: k1 });
      const t = tid();
      const s1 = whsec();
      const s2 = whsec();
      await call(a, 'POST', '/v1/tenants', { id: t });
      await call(a, 'POST', `/v1/tenants/${t}/endpoints`, {
        id: 'e',
        url: 'https://example.com/',
        secret: s1,
      });
      await call(a, 'PATCH', `/v1/tenants/${t}/endpoints/e`, { secret: s2 });
      await call(a, 'POST', `/v1/tenants/${t}/sources`, {
        id: `${t}-src`,
        kind: 'stripe',
        secret: 'whsec_stripe',
      });
      await putPlaintextSource(a, t, `${t}-legacy`, 'github', 'legacy');
      expect((await storedSecrets(a)).sort()).toEqual(
        [`enc:v1:${kid1}:`, `enc:v1:${kid1}:`, `enc:v1:${kid1}:`, 'legacy'].map((p) =>
          expect.stringMatching(`^${p}`),
        ),
      );

      // The new key current, the old one still accepted: everything reads.
      const b = await run({ SPILLWAY_SECRET_KEY: k2, SPILLWAY_SECRET_KEY_PREVIOUS: k1 });
      const epSecret = (await call(b, 'GET', `/v1/tenants/${t}/endpoints/e/secret`)).body;
      expect(epSecret).toEqual({
        secret: s2,
        previousSecrets: [{ secret: s1, expiresAt: expect.any(String) }],
      });
      expect((await call(b, 'GET', `/v1/tenants/${t}/sources/${t}-src/secret`)).body.secret).toBe(
        'whsec_stripe',
      );

      // Without the old key those secrets do not open: a clear error naming the key id.
      const c = await run({ SPILLWAY_SECRET_KEY: k2 });
      const refused = await call(c, 'GET', `/v1/tenants/${t}/endpoints/e/secret`);
      expect(refused.status).toBe(500);
      expect(refused.body.error.code).toBe('invalid_config');
      expect(refused.body.error.message).toContain(kid1);
      expect(refused.body.error.message).toContain('SPILLWAY_SECRET_KEY_PREVIOUS');
      // ... and reencrypt there reports them as failed, writes nothing for them, exits the command 1.
      const partial = await call(c, 'POST', '/v1/secrets/reencrypt');
      expect(partial.status).toBe(200);
      expect(partial.body.failed.map((f: { id: string }) => f.id).sort()).toEqual(['e', `${t}-src`].sort());
      expect(partial.body.sources.reencrypted).toBe(1); // the plaintext one
      await c.close();
      routers.splice(routers.indexOf(c), 1);

      const done = await call(b, 'POST', '/v1/secrets/reencrypt');
      expect(done.status).toBe(200);
      expect(done.body).toEqual({
        keyId: kid2,
        endpoints: { scanned: 1, reencrypted: 1 },
        sources: { scanned: 2, reencrypted: 1 },
        failed: [],
      });
      const stored = await storedSecrets(b);
      expect(stored).toHaveLength(4);
      for (const v of stored) expect(v).toMatch(new RegExp(`^enc:v1:${kid2}:`));
      // Idempotent.
      expect((await call(b, 'POST', '/v1/secrets/reencrypt')).body).toMatchObject({
        endpoints: { reencrypted: 0 },
        sources: { reencrypted: 0 },
      });

      // The old key can now be dropped: a process with only k2 reads everything.
      const d = await run({ SPILLWAY_SECRET_KEY: k2 });
      expect((await call(d, 'GET', `/v1/tenants/${t}/endpoints/e/secret`)).body).toEqual(epSecret);
      expect((await call(d, 'GET', `/v1/tenants/${t}/sources/${t}-legacy/secret`)).body.secret).toBe(
        'legacy',
      );
      expect((await call(d, 'GET', `/v1/tenants/${t}/sources/${t}-src/secret`)).body.secret).toBe(
        'whsec_stripe',
      );
    } finally {
      for (const router of routers) await router.close();
    }
  }, 60_000);
});

describe('bodiless POST with content-type: application/json', () => {
  it('is accepted by every route whose body is optional or absent, and is invalid_json where a body is needed', async () => {
    const t = tid();
    await api('POST', '/v1/tenants', { id: t });
    await api('POST', `/v1/tenants/${t}/endpoints`, { id: 'e', url: 'https://example.com/' });
    const empty = { raw: '' };
    for (const [path, status] of [
      [`/v1/tenants/${t}/pause`, 200],
      [`/v1/tenants/${t}/resume`, 200],
      [`/v1/tenants/${t}/endpoints/e/pause`, 200],
      [`/v1/tenants/${t}/endpoints/e/resume`, 200],
      [`/v1/tenants/${t}/dlq/replay`, 202],
      [`/v1/tenants/${t}/keys`, 201],
      ['/v1/secrets/reencrypt', 200],
    ] as const) {
      const res = await api('POST', path, undefined, empty);
      expect(res.status, `${path}: ${JSON.stringify(res.body)}`).toBe(status);
    }
    expect((await api('GET', `/v1/tenants/${t}`)).body.status).toBe('active');
    expect((await api('GET', `/v1/tenants/${t}/keys`)).body.data).toHaveLength(1);
    for (const path of ['/v1/tenants', `/v1/tenants/${t}/endpoints`, `/v1/tenants/${t}/events`]) {
      const res = await api('POST', path, undefined, empty);
      expect(res.status, path).toBe(400);
      expect(res.body.error.code).toBe('invalid_json');
    }
    // Whitespace is not empty: it is malformed JSON, as before.
    expect((await api('POST', `/v1/tenants/${t}/pause`, undefined, { raw: ' ' })).body.error.code).toBe(
      'invalid_json',
    );
  });
});

describe('event types with /', () => {
  it('endpoints subscribe to orders/* and orders/create; the events API takes orders/create', async () => {
    const t = tid();
    await api('POST', '/v1/tenants', { id: t });
    const ep = await api('POST', `/v1/tenants/${t}/endpoints`, {
      url: 'https://example.com/',
      eventTypes: ['orders/*', 'orders/create', 'app/uninstalled', 'order.*'],
    });
    expect(ep.status, JSON.stringify(ep.body)).toBe(201);
    for (const bad of [['orders/'], ['/orders'], ['orders//create'], ['orders/**'], ['orders/*/x']]) {
      const res = await api('POST', `/v1/tenants/${t}/endpoints`, {
        url: 'https://example.com/',
        eventTypes: bad,
      });
      expect(res.status, bad[0]).toBe(400);
    }
    const ev = await api('POST', `/v1/tenants/${t}/events`, { type: 'orders/create', payload: {} });
    expect(ev.status).toBe(202);
  });
});
