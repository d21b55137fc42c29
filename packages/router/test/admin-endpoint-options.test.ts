import { createPublicKey, randomBytes } from 'node:crypto';
import { ConfigStore } from '@spillway/router';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminCall, type StartedRouter, startRouter } from '../../../test/helpers/router-started.ts';

/**
 * The delivery options of an endpoint through the real admin API (docs/delivery.md): what is
 * accepted, what is refused with a 400 naming the field (and nothing written), what is shown
 * (never a password, token or private key), and the published Ed25519 public key.
 */
let router: StartedRouter;
let redis: Redis;

beforeAll(async () => {
  router = await startRouter('admin');
  ({ redis } = router);
  call = adminCall(router);
}, 30_000);

afterAll(() => router?.close());

let call: ReturnType<typeof adminCall>;

async function tenant(): Promise<string> {
  const id = `t-${randomBytes(4).toString('hex')}`;
  expect((await call('POST', '/v1/tenants', { id })).status).toBe(201);
  return id;
}

function expect400(r: { status: number; body: any }, mentions: string): void {
  expect(r.status, JSON.stringify(r.body)).toBe(400);
  expect(r.body.error.code).toBe('invalid_body');
  expect(r.body.error.message).toContain(mentions);
}

describe('endpoint delivery options', () => {
  it('takes every option, shows them without secrets, and PATCH changes or clears them', async () => {
    const t = await tenant();
    const created = await call('POST', `/v1/tenants/${t}/endpoints`, {
      id: 'full',
      url: 'https://example.com/hook',
      retry: { schedule: ['1s', '30s'], maxAttempts: 5, permanentStatuses: [422, 400] },
      headers: { 'X-Tenant': 'acme' },
      auth: { type: 'basic', username: 'hook', password: 'hunter2-secret' },
      signatures: ['v1', 'v1a'],
      batch: { maxEvents: 10 },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    expect(created.body).toMatchObject({
      retry: { schedule: ['1s', '30s'], maxAttempts: 5, permanentStatuses: [400, 422] },
      headers: { 'x-tenant': 'acme' },
      auth: { type: 'basic', username: 'hook' },
      signatures: ['v1', 'v1a'],
      ed25519: { publicKey: expect.stringMatching(/^whpk_/) },
      batch: { maxEvents: 10, maxBytes: 1_048_576, lingerMs: 100 },
    });
    const shown = JSON.stringify([created.body, (await call('GET', `/v1/tenants/${t}/endpoints/full`)).body]);
    expect(shown).not.toContain('hunter2-secret');
    expect(shown).not.toContain('whsk_');
    expect(shown).not.toContain('privateKey');
    // At rest the credentials and the private key are sealed like the signing secret
    // (SPILLWAY_SECRET_KEY, AES-256-GCM); the config store opens them for delivery.
    const raw = JSON.parse((await redis.hget(router.keys.endpoints(t), 'full'))!);
    expect(raw.auth.password).toMatch(/^enc:v1:/);
    expect(raw.ed25519.privateKey).toMatch(/^enc:v1:/);
    expect(raw.ed25519.publicKey).toBe(created.body.ed25519.publicKey);
    const opened = await new ConfigStore(redis as never, router.keys, router.s.rt.secrets).getEndpoint(
      t,
      'full',
    );
    expect(opened?.auth).toEqual({ type: 'basic', username: 'hook', password: 'hunter2-secret' });
    expect(opened?.ed25519?.privateKey).toMatch(/^whsk_/);

    const patched = await call('PATCH', `/v1/tenants/${t}/endpoints/full`, {
      retry: null,
      headers: null,
      auth: { type: 'bearer', token: 'tok_abc' },
      batch: null,
      ordering: 'per-key',
      signatures: ['v1a'],
    });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    expect(patched.body.retry).toBeUndefined();
    expect(patched.body.headers).toBeUndefined();
    expect(patched.body.batch).toBeUndefined();
    expect(patched.body.auth).toEqual({ type: 'bearer' });
    expect(patched.body.ordering).toBe('per-key');
    // The key pair survives a change of schemes.
    expect(patched.body.ed25519.publicKey).toBe(created.body.ed25519.publicKey);
  });

  it('publishes the Ed25519 public key (whpk_ and PEM of the same key); 404 until there is one', async () => {
    const t = await tenant();
    await call('POST', `/v1/tenants/${t}/endpoints`, { id: 'plain', url: 'https://example.com/a' });
    const none = await call('GET', `/v1/tenants/${t}/endpoints/plain/public-key`);
    expect(none.status).toBe(404);
    expect(none.body.error.message).toContain('v1a');
    await call('PATCH', `/v1/tenants/${t}/endpoints/plain`, { signatures: ['v1', 'v1a'] });
    const k = await call('GET', `/v1/tenants/${t}/endpoints/plain/public-key`);
    expect(k.status).toBe(200);
    expect(k.body).toMatchObject({ endpointId: 'plain', algorithm: 'ed25519' });
    const raw = createPublicKey(k.body.publicKeyPem).export({ format: 'der', type: 'spki' }).subarray(-32);
    expect(k.body.publicKey).toBe(`whpk_${raw.toString('base64')}`);
  });

  it('imports a whsk_ key; refuses one that is not a key', async () => {
    const t = await tenant();
    const seed = randomBytes(32);
    const r = await call('POST', `/v1/tenants/${t}/endpoints`, {
      url: 'https://example.com/a',
      signatures: ['v1a'],
      ed25519PrivateKey: `whsk_${seed.toString('base64')}`,
    });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    const bad = Buffer.concat([seed, randomBytes(32)]);
    expect400(
      await call('POST', `/v1/tenants/${t}/endpoints`, {
        url: 'https://example.com/a',
        ed25519PrivateKey: `whsk_${bad.toString('base64')}`,
      }),
      'ed25519PrivateKey',
    );
  });

  it('400 naming the field, and nothing written, for every refused option', async () => {
    const t = await tenant();
    const before = await redis.hgetall(router.keys.endpoints(t));
    const post = (extra: object) =>
      call('POST', `/v1/tenants/${t}/endpoints`, { url: 'https://example.com/h', ...extra });
    const reserved =
      'webhook-id Webhook-Signature host Content-Length connection keep-alive transfer-encoding te trailer upgrade proxy-authorization authorization';
    for (const name of reserved.split(' '))
      expect400(await post({ headers: { [name]: 'x' } }), `body/headers/${name}`);
    expect400(await post({ headers: { 'x-a': 'one', 'X-A': 'two' } }), 'twice');
    expect((await post({ headers: { 'x-a': 'line\nbreak' } })).status).toBe(400);
    expect((await post({ headers: { 'bad name': 'x' } })).status).toBe(400);
    expect400(await post({ retry: { schedule: ['5s', 'soon'] } }), 'retry');
    expect400(await post({ retry: { schedule: ['48h'] } }), 'body/retry/schedule/0');
    expect((await post({ retry: { permanentStatuses: [200] } })).status).toBe(400);
    expect((await post({ retry: { maxAttempts: 0 } })).status).toBe(400);
    expect((await post({ auth: { type: 'basic', username: 'a:b', password: 'x' } })).status).toBe(400);
    expect((await post({ auth: { type: 'bearer' } })).status).toBe(400);
    expect((await post({ signatures: [] })).status).toBe(400);
    expect((await post({ batch: { maxEvents: 0 } })).status).toBe(400);
    expect((await post({ ordering: 'global' })).status).toBe(400);
    expect400(await post({ batch: { maxEvents: 5 }, ordering: 'per-key' }), 'cannot be combined');
    expect400(await post({ url: 'https://user:pass@example.com/h' }), 'credentials');
    expect(await redis.hgetall(router.keys.endpoints(t))).toEqual(before);

    // PATCH is validated against what is stored: turning ordering on for a batched endpoint is refused.
    await post({ id: 'b', batch: { maxEvents: 5 } });
    const stored = await redis.hget(router.keys.endpoints(t), 'b');
    expect400(
      await call('PATCH', `/v1/tenants/${t}/endpoints/b`, { ordering: 'per-key' }),
      'cannot be combined',
    );
    expect400(
      await call('PATCH', `/v1/tenants/${t}/endpoints/b`, { url: 'http://u:p@example.com/' }),
      'credentials',
    );
    expect(await redis.hget(router.keys.endpoints(t), 'b')).toBe(stored);
  });

  it('the events API takes an orderingKey and refuses one that could not be a Redis key part', async () => {
    const t = await tenant();
    const bad = await call('POST', `/v1/tenants/${t}/events`, {
      type: 'a.b',
      payload: {},
      orderingKey: 'has space',
    });
    expect(bad.status).toBe(400);
    const braces = await call('POST', `/v1/tenants/${t}/events`, {
      type: 'a.b',
      payload: {},
      orderingKey: '{x}',
    });
    expect(braces.status).toBe(400);
  });
});
