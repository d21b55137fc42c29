/**
 * Peer for the ingest benchmark: the receiver a team writes in an afternoon — node:http, read the
 * body, verify X-Hub-Signature-256 (HMAC-SHA256, constant-time compare), `Queue.add` one BullMQ
 * job per event (jobId = X-GitHub-Delivery, so a redelivery is not queued twice), answer 202 once
 * Redis has it. Forked as its own process; configured by env:
 *   NAIVE_REDIS_URL, NAIVE_PREFIX, NAIVE_QUEUE, NAIVE_SECRET
 * Sends its port over IPC.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { requireEnv } from './naive-env.ts';

const env = (k: string) => requireEnv('naive-ingest', k);
const secret = env('NAIVE_SECRET');
const connection = new Redis(env('NAIVE_REDIS_URL'), { maxRetriesPerRequest: 1 });
const queue = new Queue(env('NAIVE_QUEUE'), { connection, prefix: env('NAIVE_PREFIX') });

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks);
    const want = Buffer.from(`sha256=${createHmac('sha256', secret).update(body).digest('hex')}`);
    const got = Buffer.from(String(req.headers['x-hub-signature-256'] ?? ''));
    if (got.length !== want.length || !timingSafeEqual(got, want)) {
      res.writeHead(401).end();
      return;
    }
    const id = String(req.headers['x-github-delivery'] ?? '');
    queue
      .add(
        'event',
        { id, type: String(req.headers['x-github-event'] ?? ''), body: body.toString('utf8') },
        { jobId: id || undefined },
      )
      .then(
        () => {
          res.writeHead(202, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ id }));
        },
        () => res.writeHead(503).end(),
      );
  });
});
server.keepAliveTimeout = 60_000;
await queue.waitUntilReady();
server.listen(0, '127.0.0.1', () => {
  const a = server.address();
  process.send?.({ port: typeof a === 'object' && a ? a.port : 0 });
});
process.on('disconnect', () => {
  server.close();
  void queue.close().finally(() => process.exit(0));
});
