import { createPublicKey, generateKeyPairSync, verify } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { testConfig } from '../../../test/helpers/env.ts';
import {
  batchBody,
  batchId,
  ed25519PublicPem,
  generateEd25519,
  headerRefusal,
  nextRetryDelay,
  parseEd25519PrivateKey,
  retrySchedule,
} from '../src/index.ts';
import { dispatcherFixtures, endpoint, task, tenant } from './helpers.ts';

const config = testConfig({ SPILLWAY_TARGET_ALLOW_CIDRS: '127.0.0.1/32' });
const { dispatcher, receiver: rx } = dispatcherFixtures(config);

/** Verifies every `v1a,` signature of a header with node:crypto against the public key (an independent check). */
function v1aVerifies(publicPem: string, id: string, ts: string, body: Buffer, header: string): boolean[] {
  const key = createPublicKey(publicPem);
  return header
    .split(' ')
    .filter((s) => s.startsWith('v1a,'))
    .map((s) =>
      verify(
        null,
        Buffer.concat([Buffer.from(`${id}.${ts}.`), body]),
        key,
        Buffer.from(s.slice(4), 'base64'),
      ),
    );
}

describe('retry policy', () => {
  it('maxAttempts cuts a schedule short or repeats its last delay', () => {
    const fixed = () => 0.5;
    expect(nextRetryDelay([100, 200], 1, undefined, fixed, 2)).toBe(100);
    expect(nextRetryDelay([100, 200], 2, undefined, fixed, 2)).toBeUndefined();
    expect(nextRetryDelay([100, 200], 4, undefined, fixed, 6)).toBe(200);
    expect(nextRetryDelay([100, 200], 6, undefined, fixed, 6)).toBeUndefined();
    expect(nextRetryDelay([], 1, undefined, fixed, 1)).toBeUndefined();
  });

  it('an endpoint policy overrides the default schedule field by field', () => {
    const def = [5000, 300_000];
    expect(retrySchedule(undefined, def)).toEqual({ scheduleMs: def, maxAttempts: 3 });
    expect(retrySchedule({ permanentStatuses: [400] }, def)).toEqual({ scheduleMs: def, maxAttempts: 3 });
    expect(retrySchedule({ schedule: ['100ms', '2s'] }, def)).toEqual({
      scheduleMs: [100, 2000],
      maxAttempts: 3,
    });
    expect(retrySchedule({ maxAttempts: 10 }, def)).toEqual({ scheduleMs: def, maxAttempts: 10 });
  });

  it('listed statuses are permanent (fail, not retry); others keep retrying', async () => {
    const r = await rx((req, res) => res.writeHead(Number(req.url!.slice(1))).end());
    const d = dispatcher();
    const base = r.url.replace('/hook', '');
    const ep = (status: number) =>
      endpoint('perm', `e${status}`, `${base}/${status}`, { retry: { permanentStatuses: [400, 404, 422] } });
    expect(await d.dispatch(task('perm', 'e422'), tenant('perm'), ep(422))).toMatchObject({
      kind: 'fail',
      status: 422,
      error: 'http_422',
    });
    expect(await d.dispatch(task('perm', 'e404'), tenant('perm'), ep(404))).toMatchObject({ kind: 'fail' });
    expect(await d.dispatch(task('perm', 'e401'), tenant('perm'), ep(401))).toMatchObject({
      kind: 'retry',
      status: 401,
      error: 'http_401',
    });
    // Without a policy a 422 is retried, as before.
    expect(
      await d.dispatch(task('perm', 'x'), tenant('perm'), endpoint('perm', 'x', `${base}/422`)),
    ).toMatchObject({ kind: 'retry', status: 422 });
  });
});

describe('static headers and authentication', () => {
  it('sends the endpoint’s headers and credentials beside the contract headers', async () => {
    const r = await rx();
    const d = dispatcher();
    const basic = endpoint('hd', 'b', r.url, {
      headers: { 'x-tenant': 'acme', 'x-api-version': '2024-01-01' },
      auth: { type: 'basic', username: 'hook', password: 'p@ss:word' },
    });
    const bearer = endpoint('hd', 't', r.url, { auth: { type: 'bearer', token: 'tok_123' } });
    await d.dispatch(task('hd', 'b', { a: 1 }), tenant('hd'), basic);
    await d.dispatch(task('hd', 't', { a: 2 }), tenant('hd'), bearer);
    const [h1, h2] = r.requests.map((q) => q.headers);
    expect(h1!['x-tenant']).toBe('acme');
    expect(h1!['x-api-version']).toBe('2024-01-01');
    expect(h1!.authorization).toBe(`Basic ${Buffer.from('hook:p@ss:word').toString('base64')}`);
    expect(h1!['webhook-id']).toBeDefined();
    expect(h2!.authorization).toBe('Bearer tok_123');
    expect(h2!['x-tenant']).toBeUndefined();
  });

  it('refuses reserved and malformed header names', () => {
    for (const n of [
      'webhook-id',
      'webhook-anything',
      'spillway-event-type',
      'host',
      'content-length',
      'content-type',
      'user-agent',
      'connection',
      'keep-alive',
      'transfer-encoding',
      'te',
      'trailer',
      'upgrade',
      'proxy-authorization',
      'authorization',
      'bad header',
      'x:y',
    ])
      expect(headerRefusal(n, 'v'), n).toBeDefined();
    expect(headerRefusal('x-ok', 'line\r\nx-injected: 1')).toBeDefined();
    expect(headerRefusal('x-ok', 'a value')).toBeUndefined();
  });
});

describe('Ed25519 (v1a)', () => {
  it('generated and imported keys round-trip; the public key is the seed’s', () => {
    const pair = generateEd25519();
    expect(pair.privateKey).toMatch(/^whsk_[A-Za-z0-9+/]{86}==$/);
    expect(pair.publicKey).toMatch(/^whpk_[A-Za-z0-9+/]{43}=$/);
    expect(parseEd25519PrivateKey(pair.privateKey)?.publicKey).toBe(pair.publicKey);
    // The seed alone gives the same pair.
    const seed = Buffer.from(pair.privateKey.slice(5), 'base64').subarray(0, 32);
    expect(parseEd25519PrivateKey(`whsk_${seed.toString('base64')}`)?.publicKey).toBe(pair.publicKey);
    // A public half that is not the seed's is refused.
    const other = generateEd25519();
    const mixed = Buffer.concat([seed, Buffer.from(other.publicKey.slice(5), 'base64')]);
    expect(parseEd25519PrivateKey(`whsk_${mixed.toString('base64')}`)).toBeUndefined();
    expect(parseEd25519PrivateKey('whsec_abc')).toBeUndefined();
    // A key made by node:crypto itself (an independent generator) imports to its own public key.
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    const jwk = privateKey.export({ format: 'jwk' }) as { d: string; x: string };
    const imported = parseEd25519PrivateKey(`whsk_${Buffer.from(jwk.d, 'base64url').toString('base64')}`)!;
    expect(imported.publicKey).toBe(`whpk_${Buffer.from(jwk.x, 'base64url').toString('base64')}`);
    expect(ed25519PublicPem(imported.publicKey)).toBe(publicKey.export({ format: 'pem', type: 'spki' }));
  });

  it('v1 and v1a side by side: node:crypto verifies v1a with the public key, standardwebhooks verifies v1', async () => {
    const r = await rx();
    const d = dispatcher();
    const pair = generateEd25519();
    const both = endpoint('ed', 'both', r.url, { signatures: ['v1', 'v1a'], ed25519: pair });
    const only = endpoint('ed', 'only', r.url, { signatures: ['v1a'], ed25519: pair });
    await d.dispatch(task('ed', 'both', { e: 1 }), tenant('ed'), both);
    await d.dispatch(task('ed', 'only', { e: 2 }), tenant('ed'), only);
    const [a, b] = r.requests;
    const sigA = String(a!.headers['webhook-signature']);
    expect(sigA).toMatch(/^v1,\S+ v1a,\S+$/);
    const pem = ed25519PublicPem(pair.publicKey);
    const id = String(a!.headers['webhook-id']);
    const ts = String(a!.headers['webhook-timestamp']);
    expect(v1aVerifies(pem, id, ts, a!.body, sigA)).toEqual([true]);
    expect(new Webhook(both.secret).verify(a!.body, a!.headers as Record<string, string>)).toEqual({ e: 1 });
    // Another key, another body, another timestamp: no.
    expect(v1aVerifies(ed25519PublicPem(generateEd25519().publicKey), id, ts, a!.body, sigA)).toEqual([
      false,
    ]);
    expect(v1aVerifies(pem, id, ts, Buffer.from('{"e":9}'), sigA)).toEqual([false]);
    expect(v1aVerifies(pem, id, String(Number(ts) + 1), a!.body, sigA)).toEqual([false]);
    const sigB = String(b!.headers['webhook-signature']);
    expect(sigB).toMatch(/^v1a,[A-Za-z0-9+/]{86}==$/);
    expect(
      v1aVerifies(
        pem,
        String(b!.headers['webhook-id']),
        String(b!.headers['webhook-timestamp']),
        b!.body,
        sigB,
      ),
    ).toEqual([true]);
  });
});

describe('batches', () => {
  it('one request, a JSON array of id/type/timestamp/payload, signed as one message with the batch id', async () => {
    const r = await rx();
    const d = dispatcher();
    const ep = endpoint('bt', 'e', r.url, { batch: { maxEvents: 10, maxBytes: 1 << 20, lingerMs: 0 } });
    const tasks = [task('bt', 'e', { n: 1 }), task('bt', 'e', { n: 2 }), task('bt', 'e', { n: 3 })];
    tasks[1]!.event = { ...tasks[1]!.event, type: 'order.paid' };
    const out = await d.dispatchBatch(tasks, tenant('bt'), ep);
    expect(out).toMatchObject({ kind: 'delivered', status: 200 });
    expect(r.requests).toHaveLength(1);
    const q = r.requests[0]!;
    expect(q.headers['spillway-batch-count']).toBe('3');
    expect(q.headers['spillway-event-type']).toBe('spillway.batch');
    const id = batchId(
      'e',
      tasks.map((t) => t.eventId),
    );
    expect(q.headers['webhook-id']).toBe(id);
    const arr = new Webhook(ep.secret).verify(q.body, q.headers as Record<string, string>) as unknown[];
    expect(arr).toEqual(
      tasks.map((t, i) => ({
        id: t.eventId,
        type: t.event.type,
        timestamp: new Date(t.event.receivedAt).toISOString(),
        payload: { n: i + 1 },
      })),
    );
  });

  it('a body that is not JSON travels as base64 with its content type', () => {
    const t = task('bt', 'e');
    t.event = {
      ...t.event,
      contentType: 'application/x-www-form-urlencoded',
      body: Buffer.from('a=1&b=2'),
      sourceId: 's',
    };
    const bad = task('bt', 'e');
    bad.event = { ...bad.event, body: Buffer.from('{not json'), sourceId: 's' };
    const arr = JSON.parse(batchBody([t.event, bad.event]).toString()) as Record<string, string>[];
    expect(arr[0]).toMatchObject({
      contentType: 'application/x-www-form-urlencoded',
      payloadBase64: Buffer.from('a=1&b=2').toString('base64'),
    });
    expect(Buffer.from(arr[1]!.payloadBase64!, 'base64').toString()).toBe('{not json');
  });
});
