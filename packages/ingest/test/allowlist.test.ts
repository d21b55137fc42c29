/**
 * The allowlist refresher against a real HTTP server on loopback serving ranges that change, a
 * file, and sources' allowCidrs: generations swap whole, a failed fetch keeps the last good copy,
 * nothing is swapped before every list was read once, a failed swap keeps the generation, and the
 * metrics say how many ranges are in force and when they were last current. (The swap into the
 * real XDP maps is test/e2e/edge-allowlist.test.ts, as root.)
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createAllowlistRefresher, parseRanges } from '@spillway/ingest';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/** What the fake provider serves next: a status and a body. */
let served: { status: number; body: string } = { status: 200, body: '' };
let hits = 0;
let server: http.Server;
let base: string;
let dir: string;

beforeAll(async () => {
  server = http.createServer((_req, res) => {
    hits++;
    res.writeHead(served.status, { 'content-type': 'application/json' });
    res.end(served.body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  dir = mkdtempSync(join(tmpdir(), 'spw-allow-'));
});
afterAll(async () => {
  await new Promise((r) => server.close(r));
  rmSync(dir, { recursive: true, force: true });
});

const meta = (hooks: string[]) =>
  JSON.stringify({ verifiable_password_authentication: false, hooks, web: ['1.1.1.1/32'] });

async function gauge(
  reg: Registry,
  name: string,
  labels: Record<string, string> = {},
): Promise<number | undefined> {
  const m = reg.getSingleMetric(name);
  const v = (await m?.get())?.values.find((x) => Object.entries(labels).every(([k, l]) => x.labels[k] === l));
  return v?.value;
}

describe('parseRanges', () => {
  it('reads GitHub meta (hooks only), Stripe, JSON arrays and CIDR lines; refuses the whole document on one bad entry', () => {
    expect(parseRanges(meta(['192.30.252.0/22', '2620:112:3000::/44']))).toEqual([
      '192.30.252.0/22',
      '2620:112:3000::/44',
    ]);
    expect(parseRanges('{"WEBHOOKS":["3.18.12.63","::ffff:10.0.0.1"]}')).toEqual([
      '3.18.12.63/32',
      '10.0.0.1/32',
    ]);
    expect(parseRanges('["198.51.100.0/24"]')).toEqual(['198.51.100.0/24']);
    expect(parseRanges('# provider\n203.0.113.0/24  # east\n\n2001:db8::1\n')).toEqual([
      '203.0.113.0/24',
      '2001:db8::1/128',
    ]);
    expect(() => parseRanges('203.0.113.0/24\nnot-a-cidr\n', 'x.txt')).toThrow(/x\.txt: "not-a-cidr"/);
    expect(() => parseRanges('{"web":["1.1.1.1/32"]}')).toThrow(/hooks/);
  });
});

describe('allowlist refresher', () => {
  it('swaps generations as the served ranges change, keeps the last good set when a fetch fails', async () => {
    const reg = new Registry();
    const file = join(dir, 'stripe.txt');
    writeFileSync(file, '3.18.12.63\n');
    const applied: string[][] = [];
    let sources = ['10.1.0.0/16'];
    const errors: string[] = [];
    const r = createAllowlistRefresher({
      ranges: [`${base}/meta`, file],
      intervalMs: 3_600_000,
      sourceCidrs: async () => sources,
      apply: async (cidrs) => {
        applied.push([...cidrs]);
        return { ok: true };
      },
      onError: (e) => errors.push(e),
      registry: reg,
    });

    served = { status: 200, body: meta(['192.30.252.0/22']) };
    const first = await r.refresh();
    expect(first).toMatchObject({ outcome: 'ok', swapped: true, generation: { number: 1 } });
    expect(applied.at(-1)).toEqual(['10.1.0.0/16', '192.30.252.0/22', '3.18.12.63/32']);
    expect(await gauge(reg, 'spillway_edge_allowlist_ranges', { origin: 'total' })).toBe(3);
    expect(await gauge(reg, 'spillway_edge_allowlist_ranges', { origin: 'provider' })).toBe(2);
    expect(await gauge(reg, 'spillway_edge_allowlist_ranges', { origin: 'sources' })).toBe(1);
    const firstOk = (await gauge(reg, 'spillway_edge_allowlist_last_refresh_timestamp_seconds'))!;
    expect(Math.abs(firstOk - Date.now() / 1000)).toBeLessThan(5);

    // Nothing changed: no new generation.
    expect(await r.refresh()).toMatchObject({ outcome: 'ok', swapped: false, generation: { number: 1 } });
    expect(applied).toHaveLength(1);

    // The provider publishes a new range; a source gets new allowCidrs.
    served = { status: 200, body: meta(['192.30.252.0/22', '185.199.108.0/22']) };
    sources = ['10.1.0.0/16', '10.2.0.0/16'];
    expect(await r.refresh()).toMatchObject({ outcome: 'ok', swapped: true, generation: { number: 2 } });
    expect(applied.at(-1)).toEqual([
      '10.1.0.0/16',
      '10.2.0.0/16',
      '185.199.108.0/22',
      '192.30.252.0/22',
      '3.18.12.63/32',
    ]);
    expect(await gauge(reg, 'spillway_edge_allowlist_generation')).toBe(2);
    const lastOk = (await gauge(reg, 'spillway_edge_allowlist_last_refresh_timestamp_seconds'))!;
    expect(lastOk).toBeGreaterThanOrEqual(firstOk);

    // The provider fails (500), then serves garbage: its last good copy stays in the set.
    await new Promise((res) => setTimeout(res, 1100));
    for (const bad of [
      { status: 500, body: 'oops' },
      { status: 200, body: '{"hooks":["nope"]}' },
    ]) {
      served = bad;
      const res = await r.refresh();
      expect(res.outcome).toBe('stale');
      expect(res.generation?.number).toBe(2);
    }
    expect(applied).toHaveLength(2);
    expect(errors.some((e) => /HTTP 500; keeping its last good copy/.test(e))).toBe(true);
    expect(errors.some((e) => /"nope" is not an IP address/.test(e))).toBe(true);
    // "last refresh" is when every list was last current: not moved by the stale ones.
    expect(await gauge(reg, 'spillway_edge_allowlist_last_refresh_timestamp_seconds')).toBe(lastOk);
    expect(await gauge(reg, 'spillway_edge_allowlist_refreshes_total', { outcome: 'stale' })).toBe(2);

    // A source change while the provider is still down: the stale copy plus the new source set.
    sources = ['10.3.0.0/16'];
    const res = await r.refresh();
    expect(res).toMatchObject({ outcome: 'stale', swapped: true, generation: { number: 3 } });
    expect(applied.at(-1)).toEqual(['10.3.0.0/16', '185.199.108.0/22', '192.30.252.0/22', '3.18.12.63/32']);
  });

  it('swaps nothing until every list has been read once; a failed swap keeps the generation', async () => {
    const reg = new Registry();
    let fail = false;
    const applied: string[][] = [];
    const r = createAllowlistRefresher({
      ranges: [`${base}/meta`],
      intervalMs: 3_600_000,
      sourceCidrs: async () => [],
      apply: async (cidrs) => {
        if (fail) return { ok: false, reason: 'loader refused' };
        applied.push([...cidrs]);
        return { ok: true };
      },
      registry: reg,
    });
    served = { status: 503, body: '' };
    expect(await r.refresh()).toMatchObject({ outcome: 'failed', swapped: false, generation: undefined });
    expect(applied).toHaveLength(0);
    served = { status: 200, body: meta(['192.30.252.0/22']) };
    expect(await r.refresh()).toMatchObject({ outcome: 'ok', generation: { number: 1 } });
    fail = true;
    served = { status: 200, body: meta(['140.82.112.0/20']) };
    const res = await r.refresh();
    expect(res).toMatchObject({ outcome: 'failed', swapped: false, generation: { number: 1 } });
    expect(res.errors.at(-1)).toMatch(/loader refused; generation 1 stays/);
    expect(r.current?.cidrs).toEqual(['192.30.252.0/22']);
    expect(await gauge(reg, 'spillway_edge_allowlist_refreshes_total', { outcome: 'failed' })).toBe(2);
  });

  it('refreshes on its interval', async () => {
    const applied: string[][] = [];
    served = { status: 200, body: meta(['192.30.252.0/22']) };
    const r = createAllowlistRefresher({
      ranges: [`${base}/meta`],
      intervalMs: 100,
      sourceCidrs: async () => [],
      apply: async (cidrs) => {
        applied.push([...cidrs]);
        return { ok: true };
      },
      registry: new Registry(),
    });
    const before = hits;
    r.start();
    try {
      await new Promise((res) => setTimeout(res, 150));
      served = { status: 200, body: meta(['192.30.252.0/22', '143.55.64.0/20']) };
      const deadline = Date.now() + 3000;
      while (applied.length < 2 && Date.now() < deadline) await new Promise((res) => setTimeout(res, 20));
    } finally {
      r.stop();
    }
    expect(hits - before).toBeGreaterThanOrEqual(2);
    expect(applied.at(-1)).toEqual(['143.55.64.0/20', '192.30.252.0/22']);
  });
});
