/**
 * The benchmark's peers and spread arithmetic are what the tables claim: the naive ingest receiver
 * verifies the signature and queues one BullMQ job per event before its 202; the naive delivery
 * worker POSTs each job's body with a Standard Webhooks signature that verifies; a round that
 * produced no number counts as the worst.
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { Webhook } from 'standardwebhooks';
import { request } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { makeTestCerts } from '../helpers/tls.ts';
import { waitFor } from '../helpers/wait.ts';
import { startNginx } from './lib/nginx.ts';
import { forkTs } from './lib/procs.ts';
import { deletePrefix, eventBody, REDIS_URL, signGithub } from './lib/spillway.ts';
import { perRound, spread } from './lib/spread.ts';
import { runWrk } from './lib/wrk.ts';

describe('bench spread', () => {
  it('median and worst, with a missing round counted as the worst', () => {
    expect(spread([3, 1, 2], 'higher')).toMatchObject({ median: 2, worst: 1, n: 3, of: 3 });
    expect(spread([3, 1, 2, 10], 'lower')).toMatchObject({ median: 2.5, worst: 10 });
    expect(spread([3, undefined, 2], 'higher')).toMatchObject({ median: 2.5, worst: 0, n: 2, of: 3 });
    expect(spread([3, Number.NaN], 'lower')?.worst).toBe(Number.POSITIVE_INFINITY);
    expect(spread([undefined], 'higher')).toBeUndefined();
    expect(perRound([4, 6, undefined], [2, 3, 1])).toEqual([2, 2, undefined]);
  });
});

describe('bench naive peers', () => {
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  const prefixes: string[] = [];
  afterAll(async () => {
    for (const p of prefixes) await deletePrefix(redis as never, p);
    redis.disconnect();
  });

  it('naive ingest: 401 on a bad signature, 202 only after the job is in Redis', async () => {
    const prefix = `tni-${randomBytes(3).toString('hex')}`;
    prefixes.push(prefix);
    const secret = randomBytes(20).toString('hex');
    const proc = forkTs(new URL('./lib/naive-ingest.ts', import.meta.url), [], {
      ...process.env,
      NAIVE_REDIS_URL: REDIS_URL,
      NAIVE_PREFIX: prefix,
      NAIVE_QUEUE: 'events',
      NAIVE_SECRET: secret,
    });
    const queue = new Queue('events', { connection: redis, prefix });
    try {
      const port = await new Promise<number>((r) =>
        proc.child.once('message', (m: { port: number }) => r(m.port)),
      );
      const body = eventBody(1024, 0);
      const post = async (sig: string, id: string) => {
        const res = await request(`http://127.0.0.1:${port}/ingest/gh`, {
          method: 'POST',
          body,
          headers: { 'x-hub-signature-256': sig, 'x-github-delivery': id, 'x-github-event': 'push' },
        });
        await res.body.dump();
        return res.statusCode;
      };
      expect(await post(signGithub('wrong', body), 'd0')).toBe(401);
      expect(await post(signGithub(secret, body), 'd1')).toBe(202);
      expect(await post(signGithub(secret, body), 'd2')).toBe(202);
      const job = await queue.getJob('d1');
      expect(job?.data.body).toBe(body.toString('utf8'));
      expect(await queue.getJob('d0')).toBeUndefined();
      expect(await queue.getWaitingCount()).toBe(2);
    } finally {
      await queue.close();
      await proc.stop();
    }
  });

  it('naive worker: one POST per job, signed so that standardwebhooks verifies it', async () => {
    const prefix = `tnw-${randomBytes(3).toString('hex')}`;
    prefixes.push(prefix);
    const secret = `whsec_${randomBytes(24).toString('base64')}`;
    const got: { ok: boolean; id: string }[] = [];
    const wh = new Webhook(secret);
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        let ok = true;
        try {
          wh.verify(Buffer.concat(chunks).toString('utf8'), req.headers as Record<string, string>);
        } catch {
          ok = false;
        }
        got.push({ ok, id: String(req.headers['webhook-id']) });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const port = (server.address() as { port: number }).port;
    const queue = new Queue('deliveries', { connection: redis, prefix });
    const body = eventBody(256).toString('utf8');
    await queue.addBulk(
      Array.from({ length: 20 }, () => ({
        name: 'd',
        data: { url: `http://127.0.0.1:${port}/ok/t`, secret, body },
      })),
    );
    const proc = forkTs(new URL('./lib/naive-worker.ts', import.meta.url), [], {
      ...process.env,
      NAIVE_REDIS_URL: REDIS_URL,
      NAIVE_PREFIX: prefix,
      NAIVE_QUEUE: 'deliveries',
      NAIVE_CONCURRENCY: '64',
      NAIVE_CONNECTIONS: '16',
    });
    try {
      await waitFor(() => got.length >= 20, '20 deliveries', 20_000);
      expect(got.every((g) => g.ok)).toBe(true);
      expect(new Set(got.map((g) => g.id)).size).toBe(20);
      await waitFor(
        async () => (await queue.getCompletedCount()) === 0 && (await queue.count()) === 0,
        'queue empty',
        5000,
      );
    } finally {
      await proc.stop();
      await queue.close();
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});

describe('bench TLS peer', () => {
  it('nginx return 202 over TLS answers wrk over https with 202 (the peer of "Spillway ingest over TLS")', async () => {
    const certs = makeTestCerts('bench-peer');
    const nginx = await startNginx(1, { certPath: certs.certPath, keyPath: certs.keyPath, ca: certs.ca });
    try {
      const r = await runWrk({
        url: `https://127.0.0.1:${nginx.port}/ingest/x`,
        headers: { 'content-type': 'application/json' },
        secret: 's',
        count: 20_000,
        runTag: `tls${randomBytes(3).toString('hex')}`,
        threads: 1,
        connections: 4,
        durationS: 1,
      });
      expect(r.requests).toBeGreaterThan(0);
      expect(r.non202).toBe(0);
      expect(r.socketErrors).toBe(0);
    } finally {
      await nginx.close();
      certs.remove();
    }
  });
});
