import { createHmac, randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { makeEndpoint, makeEvent, makeTenant, routerHarness } from '../helpers/router-fixtures.ts';
import { scrape } from '../helpers/router-metrics.ts';
import { startRouter } from '../helpers/router-started.ts';
import { sleep, waitFor } from '../helpers/wait.ts';

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c().catch(() => {});
});

interface Notice {
  type: string;
  tenantId: string;
  data: Record<string, unknown>;
  headers: http.IncomingHttpHeaders;
  raw: string;
}

/** The operator's webhook receiver. */
async function operatorHook(): Promise<{ url: string; got: Notice[] }> {
  const got: Notice[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString();
      got.push({ ...(JSON.parse(raw) as Omit<Notice, 'headers' | 'raw'>), headers: req.headers, raw });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanup.push(() => new Promise((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/ops`, got };
}

describe('endpoint health and operator notifications', () => {
  it('an endpoint whose every attempt failed for SPILLWAY_ENDPOINT_DISABLE_AFTER is disabled; the operator gets a signed notice, a log line and a metric; a DLQ over its threshold is notified once', async () => {
    const hook = await operatorHook();
    const secret = `whsec_${randomBytes(24).toString('base64')}`;
    const s = await routerHarness(cleanup, {
      SPILLWAY_RETRY_SCHEDULE: '300ms,300ms,300ms,300ms,300ms',
      SPILLWAY_ENDPOINT_DISABLE_AFTER: '1s',
      SPILLWAY_NOTIFY_URL: hook.url,
      SPILLWAY_NOTIFY_SECRET: secret,
      SPILLWAY_DLQ_ALERT: '3',
    });
    const before = await scrape();
    // 404s: real attempts every time (a 4xx never opens the breaker).
    const r = await s.receiver(() => ({ status: 404 }));
    const healthy = await s.receiver();
    const t = await makeTenant(s.store);
    const bad = await makeEndpoint(s.store, t.id, r.url);
    const good = await makeEndpoint(s.store, t.id, healthy.url);
    await s.worker();
    await s.services.intake.submit(makeEvent(t.id, 'h0'));
    await waitFor(
      async () => (await s.store.getEndpoint(t.id, bad.id))?.status === 'disabled',
      'disabled for failing',
      20_000,
    );
    expect(await s.store.getEndpoint(t.id, bad.id)).toMatchObject({
      status: 'disabled',
      disabledReason: 'failing',
    });
    // The healthy endpoint of the same tenant is untouched.
    expect((await s.store.getEndpoint(t.id, good.id))?.status).toBe('active');
    const notice = await waitFor(() => hook.got.find((n) => n.type === 'endpoint.disabled'), 'the notice');
    expect(notice).toMatchObject({ tenantId: t.id, data: { endpointId: bad.id, reason: 'failing' } });
    expect(typeof notice!.data.failingSince).toBe('string');
    // Signed like a delivery (Standard Webhooks with SPILLWAY_NOTIFY_SECRET).
    const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
    const mac = createHmac('sha256', key)
      .update(`${notice!.headers['webhook-id']}.${notice!.headers['webhook-timestamp']}.${notice!.raw}`)
      .digest('base64');
    expect(notice!.headers['webhook-signature']).toBe(`v1,${mac}`);
    // The hook records the notice when it arrives; the notifier counts it "sent" once it has the
    // hook's answer: wait for that.
    const sent = { kind: 'endpoint.disabled', result: 'sent' };
    const after = await waitFor(async () => {
      const m = await scrape();
      return m.value('spillway_notifications_total', sent) >
        before.value('spillway_notifications_total', sent)
        ? m
        : undefined;
    }, 'the notice counted as sent');
    expect(
      after!.value('spillway_endpoints_disabled_total', { reason: 'failing' }) -
        before.value('spillway_endpoints_disabled_total', { reason: 'failing' }),
    ).toBe(1);
    expect(
      after!.value('spillway_notifications_total', sent) - before.value('spillway_notifications_total', sent),
    ).toBe(1);

    // A DLQ over SPILLWAY_DLQ_ALERT: one notice (per hour), however many more arrive. A target the
    // SSRF guard refuses (127.0.0.9 is outside the allowed 127.0.0.1/32) fails for good at once.
    const t2 = await makeTenant(s.store);
    await makeEndpoint(s.store, t2.id, 'http://127.0.0.9:9/x');
    for (let i = 0; i < 6; i++) await s.services.intake.submit(makeEvent(t2.id, `q${i}`));
    await waitFor(async () => (await s.services.listDlq(t2.id)).length === 6, 'in the DLQ', 20_000);
    await waitFor(() => hook.got.some((n) => n.type === 'dlq.threshold'), 'the DLQ notice');
    await sleep(300); // deliberate: a second one would arrive here
    const dlqNotices = hook.got.filter((n) => n.type === 'dlq.threshold');
    expect(dlqNotices).toHaveLength(1);
    expect(dlqNotices[0]).toMatchObject({ tenantId: t2.id, data: { threshold: 3 } });

    // Resumed: a fresh run of failures starts (the old one does not disable it again at once).
    await s.store.updateEndpoint(t.id, bad.id, (e) => ({ ...e, status: 'active', url: healthy.url }));
    await s.services.intake.submit(makeEvent(t.id, 'h9'));
    await waitFor(
      () => healthy.got.has('h9') && healthy.got.get('h9') === 2,
      'delivered to both after the fix',
    );
    expect((await s.store.getEndpoint(t.id, bad.id))?.status).toBe('active');
    // The failure run is cleared by the history writer's next flush, which can land after the
    // sink has seen the delivery: poll for it (bounded) rather than read it once.
    await waitFor(
      async () => (await s.rt.redis.hget(s.rt.keys.endpointHealth(t.id), bad.id)) === null,
      'the failure run to be cleared by the next history flush',
      10_000,
    );
    expect(await s.rt.redis.hget(s.rt.keys.endpointHealth(t.id), bad.id)).toBeNull();
  });

  it('a 410 disables the endpoint and notifies (reason gone); without SPILLWAY_NOTIFY_URL the notice is a log line and a metric', async () => {
    const s = await routerHarness(cleanup, {});
    const before = await scrape();
    const r = await s.receiver(() => ({ status: 410 }));
    const t = await makeTenant(s.store);
    const ep = await makeEndpoint(s.store, t.id, r.url);
    await s.worker();
    await s.services.intake.submit(makeEvent(t.id, 'g0'));
    await waitFor(
      async () => (await s.store.getEndpoint(t.id, ep.id))?.disabledReason === 'gone',
      'disabled',
    );
    await waitFor(async () => {
      const after = await scrape();
      return (
        after.value('spillway_notifications_total', { kind: 'endpoint.disabled', result: 'logged' }) -
          before.value('spillway_notifications_total', { kind: 'endpoint.disabled', result: 'logged' }) ===
        1
      );
    }, 'logged notice');
  });

  it('a tenant over its daily events quota: 429, and the operator is notified once', async () => {
    const hook = await operatorHook();
    const router = await startRouter('admin', {
      SPILLWAY_TENANT_EVENTS_PER_DAY: '2',
      SPILLWAY_NOTIFY_URL: hook.url,
      SPILLWAY_NOTIFY_SECRET: `whsec_${randomBytes(24).toString('base64')}`,
    });
    cleanup.push(() => router.close());
    const post = (path: string, body: unknown) =>
      fetch(router.base + path, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${router.env.SPILLWAY_ADMIN_TOKEN}`,
          'content-type': 'application/json',
        },
        body: JSON.stringify(body),
      }).then((r) => r.status);
    const tid = `q-${randomBytes(3).toString('hex')}`;
    expect(await post('/v1/tenants', { id: tid })).toBe(201);
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++)
      statuses.push(await post(`/v1/tenants/${tid}/events`, { type: 'a.b', payload: {} }));
    expect(statuses).toEqual([202, 202, 429, 429]);
    const n = await waitFor(
      () => hook.got.find((x) => x.type === 'tenant.quota_exceeded'),
      'the quota notice',
    );
    expect(n).toMatchObject({ tenantId: tid, data: { quota: 2 } });
    await sleep(300); // deliberate: one notice per hour, not one per refusal
    expect(hook.got.filter((x) => x.type === 'tenant.quota_exceeded')).toHaveLength(1);
  });
});
