/**
 * Both ingest backends, one set of requests: 10,000 generated deliveries of the four provider kinds
 * (valid, tampered, wrong secret, previous secret inside its overlap, stale timestamp, missing
 * signature, over the source's cap, chunked) are sent to the node:http backend and to the io_uring
 * backend, whose ring thread checks the signatures itself (issue 15). Each request's answer must be
 * the same on both: status, error code, and for 2xx the event id. Signatures come from the
 * providers' own code (@octokit/webhooks-methods, stripe, standardwebhooks).
 */
import { createHmac, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { sign as githubSign } from '@octokit/webhooks-methods';
import { createKeys, createLogger, type Source } from '@spillway/shared';
import { Webhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUringServer, probeUring } from '../../packages/ingest/src/backends/uring.ts';
import { createNodeServer, createPipeline, type IngestServer } from '../../packages/ingest/src/index.ts';
import { randomPrefix } from '../helpers/env.ts';
import { seededRandom } from '../helpers/random.ts';
import { createTestIntake, MemorySources, type TestIntake } from './support.ts';

const REDIS_URL = process.env.SPILLWAY_REDIS_URL ?? 'redis://127.0.0.1:6390';
const N = 10_000;
const CAP = 8 * 1024;
const stripe = new Stripe('sk_test_differential');
const KINDS = ['github', 'stripe', 'shopify', 'standard'] as const;
type Kind = (typeof KINDS)[number];
const VARIANTS = [
  'valid',
  'valid',
  'valid',
  'tampered',
  'wrong_secret',
  'previous_secret',
  'stale',
  'no_signature',
  'oversized',
  'chunked',
  'chunked_tampered',
] as const;

const secretFor = (kind: Kind) =>
  kind === 'standard' || kind === 'stripe'
    ? `whsec_${randomBytes(24).toString('base64')}`
    : `s3cret-${randomBytes(8).toString('hex')}`;

interface Req {
  path: string;
  body: Buffer;
  headers: Record<string, string>;
  chunked: boolean;
}

async function sign(
  kind: Kind,
  secret: string,
  id: string,
  body: Buffer,
  at: Date,
): Promise<Record<string, string>> {
  switch (kind) {
    case 'github':
      return {
        'x-hub-signature-256': await githubSign(secret, body.toString('utf8')),
        'x-github-event': 'push',
        'x-github-delivery': id,
      };
    case 'shopify':
      return {
        'x-shopify-hmac-sha256': createHmac('sha256', secret).update(body).digest('base64'),
        'x-shopify-topic': 'orders/create',
        'x-shopify-webhook-id': id,
      };
    case 'stripe':
      return {
        'stripe-signature': stripe.webhooks.generateTestHeaderString({
          payload: body.toString(),
          secret,
          timestamp: Math.floor(at.getTime() / 1000),
        }),
      };
    case 'standard':
      return {
        'webhook-id': id,
        'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
        'webhook-signature': new Webhook(secret).sign(id, at, body),
      };
  }
}

const SIG_HEADER: Record<Kind, string> = {
  github: 'x-hub-signature-256',
  shopify: 'x-shopify-hmac-sha256',
  stripe: 'stripe-signature',
  standard: 'webhook-signature',
};

async function generate(sources: Record<Kind, Source>, previous: Record<Kind, string>): Promise<Req[]> {
  const rnd = seededRandom(15);
  const out: Req[] = [];
  for (let i = 0; i < N; i++) {
    const kind = KINDS[i % 4]!;
    const variant = VARIANTS[Math.floor(rnd() * VARIANTS.length)]!;
    const src = sources[kind];
    const id = `diff-${i}-${Math.floor(rnd() * 1e9).toString(36)}`;
    const size = variant === 'oversized' ? CAP + 1 + Math.floor(rnd() * 4096) : 16 + Math.floor(rnd() * 3000);
    const pad = 'x'.repeat(Math.max(0, size - 60));
    const body = Buffer.from(JSON.stringify({ id, type: 'thing.happened', pad }));
    const at = variant === 'stale' ? new Date(Date.now() - 400_000) : new Date();
    const secret =
      variant === 'wrong_secret'
        ? secretFor(kind)
        : variant === 'previous_secret'
          ? previous[kind]
          : src.secret;
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      ...(await sign(kind, secret, id, body, at)),
    };
    if (variant === 'no_signature') delete headers[SIG_HEADER[kind]];
    const sent = Buffer.from(body);
    if (variant === 'tampered' || variant === 'chunked_tampered') {
      const at2 = Math.floor(rnd() * sent.length);
      sent.writeUInt8(sent.readUInt8(at2) ^ 0x20, at2);
    }
    out.push({
      path: `/ingest/${src.id}`,
      body: sent,
      headers,
      chunked: variant === 'chunked' || variant === 'chunked_tampered',
    });
  }
  return out;
}

/** One answer as compared: status, error code, event id and duplicate flag. */
async function send(pool: Pool, r: Req): Promise<string> {
  const res = await pool.request({
    path: r.path,
    method: 'POST',
    headers: r.headers,
    // A stream without a length goes out chunked.
    body: r.chunked ? Readable.from([r.body.subarray(0, 7), r.body.subarray(7)]) : r.body,
  });
  const text = await res.body.text();
  let json: { id?: string; duplicate?: boolean; error?: { code?: string } } = {};
  try {
    json = JSON.parse(text);
  } catch {}
  return `${res.statusCode} ${json.error?.code ?? ''} ${json.id ?? ''}${json.duplicate ? ' duplicate' : ''}`;
}

const probe = probeUring();

describe.runIf(probe.ok)('ingest backends answer alike (node:http vs io_uring, ring-thread HMAC)', () => {
  const logger = createLogger('silent');
  const sources = new MemorySources();
  const servers: IngestServer[] = [];
  const intakes: TestIntake[] = [];
  const pools: Pool[] = [];
  let reqs: Req[] = [];
  let bases: { node: Pool; uring: Pool };
  let uringVerified = 0;

  beforeAll(async () => {
    const tenantId = `td-${randomBytes(3).toString('hex')}`;
    const made = {} as Record<Kind, Source>;
    const previous = {} as Record<Kind, string>;
    for (const kind of KINDS) {
      previous[kind] = secretFor(kind);
      made[kind] = sources.add({
        id: `${kind}-${randomBytes(4).toString('hex')}`,
        tenantId,
        kind,
        secret: secretFor(kind),
        maxBodyBytes: CAP,
        previousSecrets: [
          { secret: previous[kind], expiresAt: new Date(Date.now() + 3_600_000).toISOString() },
        ],
      });
    }
    reqs = await generate(made, previous);
    const serve = async (make: typeof createNodeServer) => {
      // Each backend its own intake (its own prefix), so both see every id as new.
      const intake = createTestIntake(REDIS_URL, createKeys(randomPrefix('ingd')));
      await intake.ready;
      intakes.push(intake);
      const pipeline = createPipeline({
        sources,
        intake,
        keys: createKeys(randomPrefix('ingd')),
        logger,
        bodyBudgetBytes: 64 * 1024 * 1024,
        // Refusals are most of the mix: the per-address pre-auth limit would answer them 429 at
        // moments that differ between the two runs.
        preAuthRate: { perSecond: 1e6, burst: 1e6 },
      });
      const srv = make({ handler: pipeline, port: 0, host: '127.0.0.1' });
      servers.push(srv);
      srv.setRoutes?.(pipeline.routeCaps(sources.map.values()));
      const { port } = await srv.listen();
      const pool = new Pool(`http://127.0.0.1:${port}`, { connections: 16 });
      pools.push(pool);
      return pool;
    };
    bases = { node: await serve(createNodeServer), uring: await serve(createUringServer) };
  }, 120_000);

  afterAll(async () => {
    for (const p of pools) await p.close().catch(() => {});
    for (const s of servers) await s.close().catch(() => {});
    for (const i of intakes) i.close();
  });

  it(`${N} generated requests get the same answers from both`, async () => {
    const { registry } = await import('@spillway/shared');
    const ringCount = async () =>
      (await registry.getSingleMetric('spillway_ingest_verified_total')?.get())?.values
        .filter((v) => v.labels.where === 'ring')
        .reduce((a, v) => a + v.value, 0) ?? 0;
    const before = await ringCount();
    const answers: Record<'node' | 'uring', string[]> = { node: [], uring: [] };
    for (const which of ['node', 'uring'] as const) {
      let next = 0;
      await Promise.all(
        Array.from({ length: 16 }, async () => {
          while (next < reqs.length) {
            const i = next++;
            answers[which][i] = await send(bases[which], reqs[i]!);
          }
        }),
      );
    }
    uringVerified = (await ringCount()) - before;
    const diffs: string[] = [];
    for (let i = 0; i < N; i++)
      if (answers.node[i] !== answers.uring[i] && diffs.length < 10)
        diffs.push(`#${i}: node "${answers.node[i]}" vs uring "${answers.uring[i]}"`);
    expect(diffs).toEqual([]);
    // The mix has every answer it was built for.
    const statuses = new Set(answers.node.map((a) => a.split(' ')[0]));
    expect([...statuses].sort()).toEqual(['202', '401', '413']);
    // And the io_uring side really checked signatures on its ring thread, not in JS.
    const verifiedRequests = answers.uring.filter((a) => !a.startsWith('413')).length;
    expect(uringVerified).toBeGreaterThan(verifiedRequests * 0.5);
  }, 300_000);
});
