import { randomBytes } from 'node:crypto';
import { utcDay } from '@spillway/router/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type StartedRouter, startRouter } from '../../../test/helpers/router-started.ts';

/**
 * The events API's per-tenant quota (events per UTC day) and rate on a real `start('admin')`:
 * 429 + Retry-After past either, duplicates and refused requests spend nothing, the counter key
 * expires, defaults come from SPILLWAY_TENANT_EVENTS_PER_DAY / SPILLWAY_TENANT_EVENT_RATE.
 */
let r: StartedRouter;

beforeAll(async () => {
  // Defaults small enough to reach in a test: 4 events a day, 1000/s.
  r = await startRouter('admin', {
    SPILLWAY_TENANT_EVENTS_PER_DAY: '4',
    SPILLWAY_TENANT_EVENT_RATE: '1000:1000',
  });
}, 30_000);
afterAll(() => r?.close());

async function call(method: string, path: string, body?: unknown, token = r.env.SPILLWAY_ADMIN_TOKEN) {
  const res = await fetch(r.base + path, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

const tid = () => `q-${randomBytes(4).toString('hex')}`;
const post = (t: string, id: string, token?: string) =>
  call('POST', `/v1/tenants/${t}/events`, { id, type: 'order.created', payload: { id } }, token);

async function refusedMetric(reason: string): Promise<number> {
  const text = await (await fetch(`${r.base}/metrics`)).text();
  const m = new RegExp(`^spillway_events_api_refused_total\\{reason="${reason}"\\} (\\d+)`, 'm').exec(text);
  return Number(m?.[1] ?? 0);
}

describe('events API quota per tenant and UTC day', () => {
  it('the tenant limit: 429 + Retry-After until UTC midnight past it; duplicates do not count; tenant keys too', async () => {
    const t = tid();
    await call('POST', '/v1/tenants', { id: t, limits: { eventsPerDay: 3 } });
    const key = (await call('POST', `/v1/tenants/${t}/keys`, {})).body.key as string;
    const before = await refusedMetric('quota');
    expect((await post(t, 'a')).status).toBe(202);
    // A duplicate is answered 200 and gives its quota back.
    expect((await post(t, 'a')).status).toBe(200);
    expect((await post(t, 'b', key)).status).toBe(202);
    expect((await post(t, 'c')).status).toBe(202);
    const refused = await post(t, 'd', key);
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe('rate_limited');
    expect(refused.body.error.message).toContain('quota of 3');
    const now = Date.now();
    const toMidnight = Math.ceil((86_400_000 - (now % 86_400_000)) / 1000);
    const retryAfter = Number(refused.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(toMidnight - 5);
    expect(retryAfter).toBeLessThanOrEqual(toMidnight + 1);
    expect((await post(t, 'e')).status).toBe(429);
    // Nothing was made durable for the refused ones.
    expect((await call('GET', `/v1/tenants/${t}/events/d`)).status).toBe(404);
    expect(await refusedMetric('quota')).toBe(before + 2);

    // The counter expires: at most a day after its day ends.
    const counter = r.keys.eventQuota(t, utcDay(now));
    expect(await r.redis.get(counter)).toBe('3');
    const ttl = await r.redis.pttl(counter);
    expect(ttl).toBeGreaterThan(86_400_000);
    expect(ttl).toBeLessThanOrEqual(2 * 86_400_000);

    // Raising the limit lets events in again, at once.
    await call('PATCH', `/v1/tenants/${t}`, { limits: { eventsPerDay: 4 } });
    expect((await post(t, 'f')).status).toBe(202);
    expect((await post(t, 'g')).status).toBe(429);
  });

  it('without a tenant limit the configured default applies (SPILLWAY_TENANT_EVENTS_PER_DAY); null returns to it', async () => {
    const t = tid();
    await call('POST', '/v1/tenants', { id: t, limits: { eventsPerDay: 1 } });
    expect((await post(t, '1')).status).toBe(202);
    expect((await post(t, '2')).status).toBe(429);
    const p = await call('PATCH', `/v1/tenants/${t}`, { limits: { eventsPerDay: null } });
    expect(p.status).toBe(200);
    expect(p.body.limits.eventsPerDay).toBeUndefined();
    for (const id of ['2', '3', '4']) expect((await post(t, id)).status).toBe(202);
    expect((await post(t, '5')).status).toBe(429);
  });
});

describe('events API rate per tenant', () => {
  it('past the tenant eventRate: 429 + Retry-After, and the refused request spends no quota', async () => {
    const t = tid();
    await call('POST', '/v1/tenants', { id: t, limits: { eventRate: { perSecond: 0.5, burst: 2 } } });
    const before = await refusedMetric('rate');
    expect((await post(t, 'r1')).status).toBe(202);
    expect((await post(t, 'r2')).status).toBe(202);
    const limited = await post(t, 'r3');
    expect(limited.status).toBe(429);
    expect(limited.body.error.message).toContain('events rate');
    const ra = Number(limited.headers.get('retry-after'));
    expect(ra).toBeGreaterThanOrEqual(1);
    expect(ra).toBeLessThanOrEqual(2);
    expect(await refusedMetric('rate')).toBe(before + 1);
    expect(await r.redis.get(r.keys.eventQuota(t, utcDay(Date.now())))).toBe('2');
    // The rate's bucket is an expiring key, like the quota counter.
    expect(await r.redis.pttl(r.keys.rate(t, 'events'))).toBeGreaterThan(0);
    // Another tenant is not affected.
    const other = tid();
    await call('POST', '/v1/tenants', { id: other });
    expect((await post(other, 'x')).status).toBe(202);
  });

  it('concurrent requests: exactly burst of them pass, none is refused while tokens are left', async () => {
    const t = tid();
    await call('POST', '/v1/tenants', {
      id: t,
      limits: { eventRate: { perSecond: 0.01, burst: 10 }, eventsPerDay: 1000 },
    });
    const first = await Promise.all(Array.from({ length: 30 }, (_, i) => post(t, `c${i}`)));
    expect(first.filter((x) => x.status === 202)).toHaveLength(10);
    expect(first.filter((x) => x.status === 429)).toHaveLength(20);
    const roomy = tid();
    await call('POST', '/v1/tenants', { id: roomy, limits: { eventRate: { perSecond: 1000, burst: 100 } } });
    const all = await Promise.all(Array.from({ length: 4 }, (_, i) => post(roomy, `d${i}`)));
    expect(all.map((x) => x.status)).toEqual([202, 202, 202, 202]);
  });

  it('validation: eventsPerDay and eventRate are checked like the other limits', async () => {
    const t = tid();
    for (const limits of [
      { eventsPerDay: 0 },
      { eventsPerDay: 1.5 },
      { eventRate: { perSecond: 1 } },
      { eventRate: 5 },
    ]) {
      const res = await call('POST', '/v1/tenants', { id: t, limits });
      expect(res.status, JSON.stringify(limits)).toBe(400);
      expect(res.body.error.code).toBe('invalid_body');
    }
    expect((await call('GET', `/v1/tenants/${t}`)).status).toBe(404);
  });
});
