import { timingSafeEqual } from 'node:crypto';
import { registry, withTimeout } from '@spillway/shared';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Runtime } from './runtime.ts';

export interface HttpOptions {
  /** Whether this process's roles use Kafka (worker, all): only then does /readyz ask it. */
  needsKafka: boolean;
}

/**
 * The process's HTTP server on SPILLWAY_ADMIN_PORT. Every role serves /healthz, /readyz and
 * /metrics here (/metrics behind SPILLWAY_METRICS_TOKEN when set); the admin role adds the /v1 API
 * on the same server. /readyz checks only what this process's roles need: an ingest replica never
 * talks to Kafka, so a Kafka outage must not take it out of the load balancer.
 */
export function createHttp(rt: Runtime, opts: HttpOptions = { needsKafka: true }): FastifyInstance {
  const app = Fastify({ logger: false, bodyLimit: 1024 * 1024, return503OnClosing: true });

  app.get('/healthz', async () => ({ status: 'ok' }));

  app.get('/readyz', async (_req, reply) => {
    const [redis, kafka] = await Promise.all([
      pingRedis(rt),
      opts.needsKafka ? pingKafka(rt) : Promise.resolve(undefined),
    ]);
    const ok = redis && kafka !== false;
    return reply
      .code(ok ? 200 : 503)
      .send({ status: ok ? 'ready' : 'not_ready', redis, ...(kafka !== undefined && { kafka }) });
  });

  const metricsAuth = rt.config.metricsToken ? Buffer.from(`Bearer ${rt.config.metricsToken}`) : undefined;
  app.get('/metrics', async (req, reply) => {
    if (metricsAuth) {
      const given = Buffer.from(req.headers.authorization ?? '');
      if (given.length !== metricsAuth.length || !timingSafeEqual(given, metricsAuth)) {
        return reply
          .code(401)
          .header('www-authenticate', 'Bearer')
          .send({ error: { code: 'unauthorized', message: 'missing or bad metrics token' } });
      }
    }
    reply.header('content-type', registry.contentType);
    return registry.metrics();
  });

  return app;
}

async function pingRedis(rt: Runtime): Promise<boolean> {
  try {
    return (await withTimeout(rt.redis.ping(), 1000)) === 'PONG';
  } catch {
    return false;
  }
}

async function pingKafka(rt: Runtime): Promise<boolean> {
  const admin = rt.kafka.admin({ retry: { retries: 0 } });
  try {
    await withTimeout(admin.connect(), 1500);
    await withTimeout(admin.describeCluster(), 1500);
    return true;
  } catch {
    return false;
  } finally {
    admin.disconnect().catch(() => {});
  }
}
