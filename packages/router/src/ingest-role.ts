import { LeasedLimiter } from '@spillway/delivery';
import { createIngestServer, createPipeline } from '@spillway/ingest';
import { createRedis } from '@spillway/shared';
import { createIntake } from './intake.ts';
import type { RoleContext, RoleHandle } from './roles.ts';
import { ConfigCache, ConfigStore } from './store.ts';

/**
 * Ingest role: the IngestServer from @spillway/ingest (io_uring or node:http per
 * SPILLWAY_INGEST_BACKEND) with the shared pipeline in front of the router's durable intake.
 * Sources come from a ConfigCache subscribed to config changes, so a source created, changed or
 * deleted through any admin takes effect here at once (at worst after the cache TTL).
 */
export async function startIngest({ rt }: RoleContext): Promise<RoleHandle> {
  const logger = rt.logger.child({ pkg: 'ingest' });
  const cache = new ConfigCache(new ConfigStore(rt.redis, rt.keys));
  // Pub/sub needs a connection of its own.
  const sub = createRedis(rt.config.redis);
  sub.on('error', (err: Error) => logger.warn({ err: err.message }, 'config subscription connection error'));
  const intake = createIntake(rt);
  // Fail open to a local bucket while Redis is unreachable: the intake answers 503 itself then, and
  // refusing on the limiter as well would only turn a Redis blip into 429s.
  const limiter = new LeasedLimiter({ redis: rt.redis, logger, failPolicy: 'open' });
  const closeAll = async () => {
    await intake.close().catch(() => {});
    await limiter.close().catch(() => {});
    await cache.close().catch(() => {});
  };
  try {
    await cache.subscribe(sub, rt.keys, logger);
    const pipeline = createPipeline({
      sources: cache,
      intake,
      limiter,
      keys: rt.keys,
      logger,
      bodyBudgetBytes: rt.config.ingestBodyBudget,
    });
    const server = await createIngestServer(
      rt.config.ingestBackend,
      // SO_REUSEPORT: several ingest processes may share the port (the kernel spreads connections).
      { handler: pipeline, port: rt.config.ingestPort, host: rt.config.host, reusePort: true },
      logger,
    );
    const { port } = await server.listen();
    logger.info({ port, backend: server.backend }, 'ingest listening');
    return {
      name: 'ingest',
      port,
      async close() {
        await server.close();
        await closeAll();
      },
    };
  } catch (err) {
    await closeAll();
    throw err;
  }
}
