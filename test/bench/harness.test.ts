/**
 * The load generator sends what the benchmark claims: wrk with the generated Lua script POSTs the
 * exact 1 KiB body, a valid X-Hub-Signature-256 for it and a distinct X-GitHub-Delivery per request,
 * and the numbers parsed from wrk's output match what the server counted.
 */
import { createHmac } from 'node:crypto';
import { createServer } from 'node:http';
import { afterAll, describe, expect, it } from 'vitest';
import { eventBody, signGithub } from './lib/spillway.ts';
import { runWrk } from './lib/wrk.ts';

describe('bench harness: wrk POST script', () => {
  const ids: string[] = [];
  let badSig = 0;
  let badLen = 0;
  const secret = 'bench-secret';
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      if (body.length !== 1024) badLen++;
      const want = `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
      if (req.headers['x-hub-signature-256'] !== want) badSig++;
      ids.push(String(req.headers['x-github-delivery']));
      res.writeHead(202);
      res.end();
    });
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it('sends the signed 1 KiB body with a unique delivery id per request', async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const port = (server.address() as { port: number }).port;
    const body = eventBody(1024, 0);
    expect(body.length).toBe(1024);
    const r = await runWrk({
      url: `http://127.0.0.1:${port}/ingest/gh`,
      body,
      headers: { 'content-type': 'application/json', 'x-hub-signature-256': signGithub(secret, body) },
      uniqueHeader: 'x-github-delivery',
      runTag: 'ht',
      threads: 2,
      connections: 4,
      durationS: 1,
    });
    expect(ids.length).toBeGreaterThan(100);
    expect(badLen).toBe(0);
    expect(badSig).toBe(0);
    expect(new Set(ids).size).toBe(ids.length);
    // wrk counts completed responses; the server may have seen the few still in flight at the end.
    expect(r.requests).toBeGreaterThan(0);
    expect(ids.length - r.requests).toBeGreaterThanOrEqual(0);
    expect(ids.length - r.requests).toBeLessThanOrEqual(4);
    expect(r.non2xx).toBe(0);
    expect(r.p50Ms).toBeGreaterThan(0);
    expect(r.p99Ms).toBeGreaterThanOrEqual(r.p50Ms);
  });
});
