import { registry, withTimeout } from '@spillway/shared';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Runtime } from './runtime.ts';

/**
 * The process's HTTP server on SPILLWAY_ADMIN_PORT. Every role serves /healthz, /readyz and
 * /metrics here (no token); the admin role adds the /v1 API on the same server.
 */
export function createHttp(rt: Runtime): FastifyInstance {
  const app = Fastify({ logger: false, bodyLimit: 1024 * 1024, return503OnClosing: true });

  app.get('/healthz', async () => ({ status: 'ok' }));

  app.get('/readyz', async (_req, reply) => {
    const [redis, kafka] = await Promise.all([pingRedis(rt), pingKafka(rt)]);
    const ok = redis && kafka;
    return reply.code(ok ? 200 : 503).send({ status: ok ? 'ready' : 'not_ready', redis, kafka });
  });

  app.get('/metrics', async (_req, reply) => {
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
