/**
 * Peer for the fan-out benchmark: what a team writes in an afternoon instead of Spillway — one
 * BullMQ job per delivery, a Worker with concurrency 64 that signs each body Standard Webhooks style
 * (the `standardwebhooks` package: webhook-id, webhook-timestamp, webhook-signature) and POSTs it
 * with an undici Pool per origin (NAIVE_CONNECTIONS connections). Forked as its own process like the Spillway
 * worker; configured by env:
 *   NAIVE_REDIS_URL, NAIVE_PREFIX, NAIVE_QUEUE, NAIVE_CONCURRENCY, NAIVE_CONNECTIONS
 * Each job's data is { url, secret, body } (body as a string, as JSON job data carries it).
 */
import { Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { Webhook } from 'standardwebhooks';
import { Pool } from 'undici';
import { requireEnv } from './naive-env.ts';

interface DeliveryJob {
  url: string;
  secret: string;
  body: string;
}

const env = (k: string) => requireEnv('naive-worker', k);
const concurrency = Number(env('NAIVE_CONCURRENCY'));
const connections = Number(env('NAIVE_CONNECTIONS'));
const pools = new Map<string, Pool>();
const signers = new Map<string, Webhook>();

const connection = new Redis(env('NAIVE_REDIS_URL'), { maxRetriesPerRequest: null });
const worker = new Worker<DeliveryJob>(
  env('NAIVE_QUEUE'),
  async (job) => {
    const u = new URL(job.data.url);
    let pool = pools.get(u.origin);
    if (!pool) {
      pool = new Pool(u.origin, { connections });
      pools.set(u.origin, pool);
    }
    let wh = signers.get(job.data.secret);
    if (!wh) {
      wh = new Webhook(job.data.secret);
      signers.set(job.data.secret, wh);
    }
    const id = `msg_${job.id}`;
    const now = new Date();
    const res = await pool.request({
      path: u.pathname,
      method: 'POST',
      body: job.data.body,
      headers: {
        'content-type': 'application/json',
        'webhook-id': id,
        'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
        'webhook-signature': wh.sign(id, now, job.data.body),
      },
      headersTimeout: 5000,
      bodyTimeout: 5000,
    });
    await res.body.dump();
    if (res.statusCode >= 300) throw new Error(`endpoint answered ${res.statusCode}`);
  },
  {
    connection,
    prefix: env('NAIVE_PREFIX'),
    concurrency,
    removeOnComplete: { count: 0 },
    removeOnFail: { count: 1000 },
  },
);
worker.on('error', (e) => process.stderr.write(`naive-worker: ${e.message}\n`));
await worker.waitUntilReady();
process.send?.({ ready: true });
process.on('disconnect', () => {
  void worker
    .close()
    .then(() => Promise.all([...pools.values()].map((p) => p.close())))
    .finally(() => process.exit(0));
});
