/**
 * The load generator sends what the benchmark claims: wrk with the generated Lua script POSTs a
 * distinct 1 KiB body with a valid X-Hub-Signature-256 and a distinct X-GitHub-Delivery per request
 * (an ingest that deduplicates on sha256(body) must see every request as new), the counters the
 * script adds (answers that were not 202, requests past the precomputed pool) are right, and the
 * numbers parsed from wrk's output match what the server counted.
 */
import { createHash, createHmac } from 'node:crypto';
import { createServer } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliveryAt, runWrk } from './lib/wrk.ts';

describe('bench harness: wrk POST script', () => {
  const ids: string[] = [];
  const bodies = new Set<string>();
  let badSig = 0;
  let badLen = 0;
  let idNotInBody = 0;
  let port = 0;
  const secret = 'bench-secret';
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      if (body.length !== 1024) badLen++;
      const want = `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
      if (req.headers['x-hub-signature-256'] !== want) badSig++;
      const id = String(req.headers['x-github-delivery']);
      if (!body.includes(`"delivery":"${id}"`)) idNotInBody++;
      ids.push(id);
      bodies.add(createHash('sha256').update(body).digest('hex'));
      // /dup answers like an ingest's duplicate path: 200, not 202.
      res.writeHead(req.url === '/dup' ? 200 : 202);
      res.end();
    });
  });
  beforeAll(async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    port = (server.address() as { port: number }).port;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it('sends a distinct signed 1 KiB body and delivery id per request', async () => {
    ids.length = 0;
    bodies.clear();
    const r = await runWrk({
      url: `http://127.0.0.1:${port}/ingest/gh`,
      headers: { 'content-type': 'application/json', 'x-github-event': 'push' },
      secret,
      count: 200_000,
      runTag: 'ht',
      threads: 2,
      connections: 4,
      durationS: 1,
    });
    expect(ids.length).toBeGreaterThan(100);
    expect(badLen).toBe(0);
    expect(badSig).toBe(0);
    expect(idNotInBody).toBe(0);
    expect(new Set(ids).size).toBe(ids.length);
    expect(bodies.size).toBe(ids.length);
    expect(r.exhausted).toBe(0);
    expect(r.non202).toBe(0);
    // wrk counts completed responses; the server may have seen the few still in flight at the end.
    expect(r.requests).toBeGreaterThan(0);
    expect(ids.length - r.requests).toBeGreaterThanOrEqual(0);
    expect(ids.length - r.requests).toBeLessThanOrEqual(4);
    expect(r.non2xx).toBe(0);
    expect(r.p50Ms).toBeGreaterThan(0);
    expect(r.p99Ms).toBeGreaterThanOrEqual(r.p50Ms);
    // The record for seq n is the body deliveryAt() builds (what the probe and docs describe).
    const seq = Number(ids[0]!.split('-')[1]);
    const d = deliveryAt('ht', seq);
    expect(d.id).toBe(ids[0]);
    expect(bodies.has(createHash('sha256').update(d.body).digest('hex'))).toBe(true);
  });

  it('counts answers that are not 202 and requests past the pool', async () => {
    ids.length = 0;
    bodies.clear();
    const r = await runWrk({
      url: `http://127.0.0.1:${port}/dup`,
      headers: { 'content-type': 'application/json' },
      secret,
      count: 50,
      runTag: 'hx',
      threads: 2,
      connections: 2,
      durationS: 1,
    });
    expect(r.requests).toBeGreaterThan(100);
    expect(r.non2xx).toBe(0);
    expect(r.non202).toBe(r.requests);
    // 2 threads × 25 records: everything past the first 50 requests repeats a body.
    expect(r.exhausted).toBeGreaterThanOrEqual(ids.length - 50 - 2);
    expect(bodies.size).toBe(50);
    expect(badSig).toBe(0);
  });
});
