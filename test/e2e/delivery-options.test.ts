import { createPublicKey, verify } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { ed25519PublicPem, generateEd25519 } from '@spillway/delivery';
import { Webhook } from 'standardwebhooks';
import { afterEach, describe, expect, it } from 'vitest';
import { makeEndpoint, makeEvent, makeTenant, routerHarness } from '../helpers/router-fixtures.ts';
import { sleep, waitFor } from '../helpers/wait.ts';

/**
 * Per-endpoint delivery options end to end (worker, Redis, Kafka, a real receiver): the retry
 * policy through the retry jobs, the spill log and DLQ replay; static headers and credentials on
 * every attempt; Ed25519 `v1a` beside HMAC `v1`, verified with node:crypto.
 */
const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

interface Seen {
  id: string;
  headers: IncomingMessage['headers'];
  body: Buffer;
}

describe('per-endpoint retry policy', () => {
  it('listed statuses go to the DLQ on the first answer; others follow the endpoint’s own schedule and maxAttempts; the default is untouched', async () => {
    const s = await routerHarness(cleanup, { SPILLWAY_RETRY_SCHEDULE: '100ms,100ms' });
    const seen = new Map<string, number>();
    const r = await s.receiver((req) => {
      const path = req.url ?? '';
      seen.set(path, (seen.get(path) ?? 0) + 1);
      return { status: path.endsWith('/422') ? 422 : 500 };
    });
    const base = r.url.replace('/hook', '');
    const t = await makeTenant(s.store);
    const perm = await makeEndpoint(s.store, t.id, `${base}/perm/422`, {
      retry: { permanentStatuses: [400, 404, 422] },
    });
    const dflt = await makeEndpoint(s.store, t.id, `${base}/default/422`);
    const long = await makeEndpoint(s.store, t.id, `${base}/long/500`, {
      retry: { schedule: ['50ms'], maxAttempts: 5 },
    });
    await s.worker();
    await s.services.intake.submit(makeEvent(t.id, 'p1'));
    await waitFor(async () => (await s.services.listDlq(t.id)).length === 3, 'three DLQ entries', 30_000);
    await sleep(500); // deliberate: no attempt after the DLQ
    expect(seen.get('/perm/422')).toBe(1);
    expect(seen.get('/default/422')).toBe(3); // SPILLWAY_RETRY_SCHEDULE: 2 delays + 1
    expect(seen.get('/long/500')).toBe(5); // the 50ms delay repeated up to maxAttempts
    const dlq = await s.services.listDlq(t.id);
    const by = (eid: string) => dlq.find((e) => e.endpointId === eid);
    expect(by(perm.id)).toMatchObject({ attempts: 1, lastError: 'http_422' });
    expect(by(dflt.id)).toMatchObject({ attempts: 3, lastError: 'http_422' });
    expect(by(long.id)).toMatchObject({ attempts: 5, lastError: 'http_500' });
    // The endpoint was not disabled (only a 410 does that) and the record says failed after 1.
    expect((await s.store.getEndpoint(t.id, perm.id))?.status).toBe('active');
    expect(
      (await s.services.getEvent(t.id, 'p1'))?.deliveries.find((d) => d.endpointId === perm.id),
    ).toMatchObject({
      status: 'failed',
      attempts: 1,
      lastStatus: 422,
    });

    // Replay starts a fresh schedule of the endpoint's own policy.
    expect(await s.services.replayDlq(t.id, { endpointId: long.id })).toBe(1);
    await waitFor(() => seen.get('/long/500') === 10, 'five more attempts after replay', 20_000);
    await waitFor(
      async () => (await s.services.listDlq(t.id, { endpointId: long.id })).length === 1,
      'back in the DLQ',
    );
  });

  it('holds for tasks that went through the spill log (paused tenant, then resumed)', async () => {
    const s = await routerHarness(cleanup);
    const r = await s.receiver(() => ({ status: 404 }));
    const t = await makeTenant(s.store);
    await makeEndpoint(s.store, t.id, r.url, { retry: { permanentStatuses: [404] } });
    await s.store.updateTenant(t.id, (x) => ({ ...x, status: 'paused' }));
    const w = await s.worker();
    for (let i = 0; i < 5; i++) await s.services.intake.submit(makeEvent(t.id, `sp${i}`));
    await waitFor(() => w.spill.sent >= 5, 'the tasks spilled');
    expect(r.requests).toBe(0);
    await s.store.updateTenant(t.id, (x) => ({ ...x, status: 'active' }));
    await waitFor(
      async () => (await s.services.listDlq(t.id)).length === 5,
      'all five dead-lettered',
      30_000,
    );
    expect(r.requests).toBe(5);
  });
});

describe('static headers and endpoint authentication', () => {
  it('every attempt (first, retried, after a pause) carries the headers and the credentials', async () => {
    const s = await routerHarness(cleanup, { SPILLWAY_RETRY_SCHEDULE: '100ms' });
    const seen: Seen[] = [];
    let failFirst = true;
    const r = await s.receiver((req, body) => {
      seen.push({ id: String(req.headers['webhook-id']), headers: req.headers, body });
      // A receiver that checks the credentials itself: anything else is 401.
      const ok =
        req.headers.authorization === `Basic ${Buffer.from('hooks:s3cr3t').toString('base64')}` ||
        req.headers.authorization === 'Bearer tok_live_1';
      if (!ok) return { status: 401 };
      // The basic-auth endpoint's first attempt of h0 fails (both endpoints race for it otherwise).
      if (failFirst && req.headers['webhook-id'] === 'h0' && req.headers.authorization?.startsWith('Basic')) {
        failFirst = false;
        return { status: 503 };
      }
      return { status: 200 };
    });
    const t = await makeTenant(s.store);
    const basic = await makeEndpoint(s.store, t.id, r.url, {
      headers: { 'x-spillway-customer': 'acme', 'x-api-version': '2' },
      auth: { type: 'basic', username: 'hooks', password: 's3cr3t' },
    });
    await makeEndpoint(s.store, t.id, r.url, { auth: { type: 'bearer', token: 'tok_live_1' } });
    await s.worker();
    for (let i = 0; i < 3; i++) await s.services.intake.submit(makeEvent(t.id, `h${i}`));
    await waitFor(
      () => r.got.size === 3 && [...r.got.values()].every((n) => n === 2),
      'both endpoints got all three',
    );
    const basicSeen = seen.filter((x) => x.headers.authorization?.startsWith('Basic'));
    expect(basicSeen).toHaveLength(4); // h0 twice (503, then 200), h1, h2
    for (const x of basicSeen) {
      expect(x.headers['x-spillway-customer']).toBe('acme');
      expect(x.headers['x-api-version']).toBe('2');
      expect(x.headers['webhook-signature']).toMatch(/^v1,/);
    }
    expect(seen.filter((x) => x.headers.authorization === 'Bearer tok_live_1')).toHaveLength(3);
    expect(seen.every((x) => x.headers.authorization !== undefined)).toBe(true);

    // Paused, then changed while paused: the spilled tasks go out with the new credentials.
    await s.store.updateEndpoint(t.id, basic.id, (e) => ({ ...e, status: 'paused' }));
    await sleep(1200); // pause reaches the worker within 1 s
    for (let i = 3; i < 5; i++) await s.services.intake.submit(makeEvent(t.id, `h${i}`));
    await waitFor(() => r.got.get('h4') === 1, 'the bearer endpoint got the new ones');
    await s.store.updateEndpoint(t.id, basic.id, (e) => ({
      ...e,
      status: 'active',
      auth: { type: 'bearer', token: 'tok_live_1' },
    }));
    await waitFor(() => r.got.get('h3') === 2 && r.got.get('h4') === 2, 'the resumed endpoint got them');
    expect(seen.filter((x) => x.headers.authorization?.startsWith('Basic') && x.id >= 'h3')).toHaveLength(0);
  });
});

describe('Ed25519 signatures (v1a)', () => {
  it('v1 and v1a side by side during a migration, then v1a alone; node:crypto verifies with the public key', async () => {
    const s = await routerHarness(cleanup);
    const seen: Seen[] = [];
    const r = await s.receiver((req, body) => {
      seen.push({ id: String(req.headers['webhook-id']), headers: req.headers, body });
      return { status: 200 };
    });
    const pair = generateEd25519();
    const t = await makeTenant(s.store);
    const ep = await makeEndpoint(s.store, t.id, r.url, { signatures: ['v1', 'v1a'], ed25519: pair });
    await s.worker();
    await s.services.intake.submit(makeEvent(t.id, 'm1'));
    await waitFor(() => r.got.has('m1'), 'm1 delivered');
    await s.store.updateEndpoint(t.id, ep.id, (e) => ({ ...e, signatures: ['v1a'] }));
    await sleep(1200); // the worker's view refreshes within 1 s
    await s.services.intake.submit(makeEvent(t.id, 'm2'));
    await waitFor(() => r.got.has('m2'), 'm2 delivered');

    const key = createPublicKey(ed25519PublicPem(pair.publicKey));
    const v1a = (x: Seen) =>
      String(x.headers['webhook-signature'])
        .split(' ')
        .filter((p) => p.startsWith('v1a,'))
        .map((p) =>
          verify(
            null,
            Buffer.concat([Buffer.from(`${x.id}.${x.headers['webhook-timestamp']}.`), x.body]),
            key,
            Buffer.from(p.slice(4), 'base64'),
          ),
        );
    const m1 = seen.find((x) => x.id === 'm1')!;
    const m2 = seen.find((x) => x.id === 'm2')!;
    expect(v1a(m1)).toEqual([true]);
    expect(new Webhook(ep.secret).verify(m1.body, m1.headers as Record<string, string>)).toMatchObject({
      id: 'm1',
    });
    expect(v1a(m2)).toEqual([true]);
    expect(String(m2.headers['webhook-signature'])).not.toMatch(/(^| )v1,/);
    expect(() => new Webhook(ep.secret).verify(m2.body, m2.headers as Record<string, string>)).toThrow();
    // Another endpoint's key does not verify it.
    const other = createPublicKey(ed25519PublicPem(generateEd25519().publicKey));
    const sig = String(m2.headers['webhook-signature']).slice(4);
    expect(
      verify(
        null,
        Buffer.concat([Buffer.from(`m2.${m2.headers['webhook-timestamp']}.`), m2.body]),
        other,
        Buffer.from(sig, 'base64'),
      ),
    ).toBe(false);
  });
});
