import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { errors, requireAdminToken } from '@spillway/shared';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { KafkaRangeReader } from '../../history/kafka-range.ts';
import { historyTopics } from '../../history/topics.ts';
import type { Runtime } from '../../roles/runtime.ts';
import { bearer, type Principal, tokenChecker } from '../auth.ts';
import type { AdminDeps } from '../routes.ts';
import { SnapshotHub } from './hub.ts';
import { LatencyTracker } from './latency.ts';
import { overviewWithRates, RateTracker, tenantWithRates } from './snapshots.ts';

/**
 * The operator console at /console, on the admin role's existing HTTP server (no new port).
 *
 * - GET /console                         the page (one HTML shell; views are chosen by the URL hash)
 * - GET /console/assets/:name            its script, styles and the vendored uPlot, from this package
 * - GET /console/api/session             who the presented token is (admin, or which tenant's key)
 * - GET /console/api/stream              SSE: every tenant's numbers once a second (admin token)
 * - GET /console/api/tenants/:tid/stream SSE: one tenant's stats + rates once a second (admin, or
 *                                        that tenant's key)
 *
 * Everything else the console does goes to the public /v1 API with the same token, so the console
 * can do exactly what the API lets that token do, and shows the API's own error words.
 * See docs/console.md.
 */
export async function registerConsole(api: FastifyInstance, rt: Runtime, deps: AdminDeps): Promise<void> {
  const isAdmin = tokenChecker(requireAdminToken(rt.config));
  const hub = new SnapshotHub({ periodMs: 1000 });
  const assets = loadAssets();
  // The tenant streams' latency comes from the attempt history (one Kafka client, made when needed).
  let kafka: KafkaRangeReader | undefined;
  const attemptsTopic = historyTopics(rt.config).attempts;
  // An open SSE response would keep server.close() waiting forever: end them first.
  api.addHook('preClose', async () => {
    hub.close();
    await kafka?.close().catch(() => {});
  });

  const principal = async (req: FastifyRequest): Promise<Principal> => {
    const token = bearer(req.headers.authorization);
    if (!token) throw errors.unauthorized('missing Authorization: Bearer <token>');
    if (isAdmin(token)) return { kind: 'admin' };
    const key = await deps.apiKeys.resolve(token);
    if (!key) throw errors.unauthorized('bad token');
    return { kind: 'tenant', tenantId: key.tenantId, keyId: key.id };
  };

  api.get('/console', { schema: { hide: true } }, async (_req, reply) =>
    page(reply).type('text/html; charset=utf-8').send(assets.html),
  );
  api.get('/console/', { schema: { hide: true } }, async (_req, reply) => reply.redirect('/console', 301));

  api.get<{ Params: { name: string }; Querystring: { v?: string } }>(
    '/console/assets/:name',
    { schema: { hide: true } },
    async (req, reply) => {
      const a = assets.files.get(req.params.name);
      if (!a) throw errors.notFound(`no console asset ${req.params.name}`);
      // The shell links every asset as ?v=<content hash>, so a linked version never changes.
      reply.header(
        'cache-control',
        req.query.v === a.hash ? 'public, max-age=31536000, immutable' : 'no-cache',
      );
      reply.header('etag', `"${a.hash}"`);
      reply.header('x-content-type-options', 'nosniff');
      if (req.headers['if-none-match'] === `"${a.hash}"`) return reply.code(304).send();
      return reply.type(a.type).send(a.body);
    },
  );

  const sessionSchema = {
    type: 'object',
    properties: {
      kind: { type: 'string', enum: ['admin', 'tenant'] },
      tenantId: { type: 'string' },
      keyId: { type: 'string' },
      ingestPort: { type: 'integer', description: 'SPILLWAY_INGEST_PORT, to show full ingest URLs' },
    },
  };
  api.get(
    '/console/api/session',
    {
      schema: {
        tags: ['console'],
        summary: 'Who the bearer token is: the admin, or the tenant an API key belongs to',
        response: { 200: sessionSchema },
      },
    },
    async (req) => ({ ...(await principal(req)), ingestPort: rt.config.ingestPort }),
  );

  const sse = {
    200: {
      description: 'text/event-stream: `event: snapshot` once a second; `event: failure` with {status,error}',
      content: { 'text/event-stream': { schema: { type: 'string' } } },
    },
  };
  api.get(
    '/console/api/stream',
    {
      schema: {
        tags: ['console'],
        summary: 'Server-sent events: every tenant (status, credits, queues, DLQ, rates, worst breaker)',
        response: sse,
      },
    },
    async (req, reply) => {
      const p = await principal(req);
      if (p.kind !== 'admin') throw errors.forbidden('a tenant API key cannot call this route');
      stream(reply, req, () => {
        const rates = new RateTracker();
        hub.subscribe('*', reply.raw, () => overviewWithRates(rt.redis, rt.keys, rates));
      });
    },
  );

  api.get<{ Params: { tid: string } }>(
    '/console/api/tenants/:tid/stream',
    {
      schema: {
        tags: ['console'],
        summary: "Server-sent events: one tenant's stats (as GET .../stats) with per-second rates",
        params: {
          type: 'object',
          required: ['tid'],
          properties: { tid: { type: 'string', minLength: 1, maxLength: 64 } },
        },
        response: sse,
      },
    },
    async (req, reply) => {
      const p = await principal(req);
      const { tid } = req.params;
      if (p.kind === 'tenant' && p.tenantId !== tid)
        throw errors.forbidden('a tenant API key can only reach its own tenant');
      // 404 before the stream opens; a tenant deleted later shows as a failure frame.
      await deps.store.requireTenant(tid);
      stream(reply, req, () => {
        const rates = new RateTracker();
        kafka ??= new KafkaRangeReader(rt.kafka);
        const latency = new LatencyTracker({
          redis: rt.redis,
          keys: rt.keys,
          kafka,
          topic: attemptsTopic,
          tenantId: tid,
        });
        hub.subscribe(`t:${tid}`, reply.raw, () => tenantWithRates(deps.services, tid, rates, latency));
      });
    },
  );
}

/** Hands the socket to the hub (fastify no longer answers this request). */
function stream(reply: FastifyReply, req: FastifyRequest, open: () => void): void {
  reply.hijack();
  req.raw.socket.setTimeout(0);
  req.raw.socket.setNoDelay(true);
  open();
}

function page(reply: FastifyReply): FastifyReply {
  return reply.headers({
    'cache-control': 'no-cache',
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
    'x-frame-options': 'DENY',
    // Everything comes from this server; nothing inline, nothing from the network.
    'content-security-policy':
      "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  });
}

interface Asset {
  body: Buffer;
  type: string;
  hash: string;
}

/** Reads the console's files once at start; the shell links each by content hash. */
function loadAssets(): { html: string; files: Map<string, Asset> } {
  const require = createRequire(import.meta.url);
  const here = (f: string) => new URL(`./public/${f}`, import.meta.url);
  const sources: [string, URL | string, string][] = [
    ['app.js', here('app.js'), 'text/javascript; charset=utf-8'],
    ['app.css', here('app.css'), 'text/css; charset=utf-8'],
    ['uplot.js', require.resolve('uplot/dist/uPlot.iife.min.js'), 'text/javascript; charset=utf-8'],
    ['uplot.css', require.resolve('uplot/dist/uPlot.min.css'), 'text/css; charset=utf-8'],
  ];
  const files = new Map<string, Asset>();
  for (const [name, path, type] of sources) {
    const body = readFileSync(path);
    files.set(name, { body, type, hash: createHash('sha256').update(body).digest('hex').slice(0, 16) });
  }
  const html = readFileSync(here('index.html'), 'utf8').replace(
    /\{\{asset:([a-z.]+)\}\}/g,
    (_m, name: string) => `/console/assets/${name}?v=${files.get(name)!.hash}`,
  );
  return { html, files };
}
