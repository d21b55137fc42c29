import { readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import { LeasedLimiter } from '@spillway/delivery';
import {
  createIngestServer,
  createPipeline,
  type IngestPipeline,
  type IngestServer,
  registerKernelDropMetrics,
} from '@spillway/ingest';
import { type Config, createRedis, errors, type Logger, registry, type Source } from '@spillway/shared';
import { ConfigCache, ConfigStore } from '../config/store.ts';
import { createIntake } from '../intake/intake.ts';
import { type EdgeHandle, startEdge } from './edge.ts';
import type { RoleContext, RoleHandle } from './roles.ts';

/**
 * Ingest role: the IngestServer from @spillway/ingest (io_uring or node:http per
 * SPILLWAY_INGEST_BACKEND) with the shared pipeline in front of the router's durable intake.
 * Sources are read through ingest's bounded source cache (ids on the ingest port come from
 * strangers, so its misses must not grow memory), dropped on every change the ConfigCache's
 * subscription hears: a source created, changed or deleted through any admin takes effect here at
 * once (at worst after the 500 ms TTL if the message was missed).
 */
/** How often the per-source body caps are reloaded even without a change message (a missed one). */
const ROUTE_CAPS_REFRESH_MS = 30_000;

/**
 * Keeps a backend's per-path body caps (`IngestServer.setRoutes`, the io_uring addon's native 413)
 * in step with the sources: `refresh()` reloads every source (one HGETALL) and replaces the table.
 * Reloads are coalesced — one in flight, at most one queued behind it — so a burst of source changes
 * costs two reads, not one per change. A failed reload keeps the previous table: a cap that is
 * missing or stale only moves the 413 from the addon to the pipeline, which checks the source's
 * cap on every request anyway.
 */
function routeCapsSync(
  server: IngestServer,
  pipeline: IngestPipeline,
  list: () => Promise<Source[]>,
  logger: Logger,
) {
  const setRoutes = server.setRoutes?.bind(server);
  let running: Promise<void> | undefined;
  let again = false;
  let stopped = false;
  const load = async () => {
    try {
      const all = await list();
      if (!stopped) setRoutes?.(pipeline.routeCaps(all));
    } catch (err) {
      logger.warn({ err }, 'ingest: could not reload per-source body caps; keeping the previous table');
    }
  };
  const refresh = (): Promise<void> => {
    if (!setRoutes || stopped) return Promise.resolve();
    if (running) {
      again = true;
      return running;
    }
    running = (async () => {
      try {
        do {
          again = false;
          await load();
        } while (again && !stopped);
      } finally {
        running = undefined;
      }
    })();
    return running;
  };
  const timer = setRoutes ? setInterval(() => void refresh(), ROUTE_CAPS_REFRESH_MS) : undefined;
  timer?.unref();
  return {
    refresh,
    stop() {
      stopped = true;
      clearInterval(timer);
    },
  };
}

/**
 * The certificate and key SPILLWAY_TLS_CERT/SPILLWAY_TLS_KEY name, read and checked to load
 * together; a problem is one line naming the variable.
 */
export function readTlsFiles(paths: NonNullable<Config['tls']>): { cert: Buffer; key: Buffer } {
  const read = (path: string, name: string) => {
    try {
      return readFileSync(path);
    } catch (err) {
      throw errors.config(`${name}: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? err})`);
    }
  };
  const creds = {
    cert: read(paths.certPath, 'SPILLWAY_TLS_CERT'),
    key: read(paths.keyPath, 'SPILLWAY_TLS_KEY'),
  };
  try {
    createSecureContext(creds);
  } catch (err) {
    throw errors.config(
      `SPILLWAY_TLS_CERT/SPILLWAY_TLS_KEY: ${paths.certPath} and ${paths.keyPath} do not load as a PEM certificate and its key (${(err as Error).message})`,
    );
  }
  return creds;
}

export async function startIngest({ rt, inherited }: RoleContext): Promise<RoleHandle> {
  const logger = rt.logger.child({ pkg: 'ingest' });
  const store = new ConfigStore(rt.redis, rt.keys, rt.secrets);
  // The pipeline looks sources up through the one config cache (bounded: the ids come from strangers).
  const cache = new ConfigCache(store);
  let routeCaps: ReturnType<typeof routeCapsSync> | undefined;
  let edge: EdgeHandle | undefined;
  cache.onChange((c) => {
    // A tenant deletion removes its sources without a message per source.
    if (c.kind !== 'endpoint') {
      void routeCaps?.refresh();
      // Sources' allowCidrs are part of the XDP allowlist.
      edge?.sourcesChanged();
    }
  });
  // Pub/sub needs a connection of its own.
  const sub = createRedis(rt.config.redis);
  sub.on('error', (err: Error) => logger.warn({ err }, 'config subscription connection error'));
  const intake = createIntake(rt);
  // Fail open to a local bucket while Redis is unreachable: the intake answers 503 itself then, and
  // refusing on the limiter as well would only turn a Redis blip into 429s.
  const limiter = new LeasedLimiter({ redis: rt.redis, logger, failPolicy: 'open' });
  let onHup: (() => void) | undefined;
  const closeAll = async () => {
    if (onHup) process.off('SIGHUP', onHup);
    edge?.stop();
    routeCaps?.stop();
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
    const tlsPaths = rt.config.tls;
    const server = await createIngestServer(
      rt.config.ingestBackend,
      {
        handler: pipeline,
        port: rt.config.ingestPort,
        host: rt.config.host,
        // SO_REUSEPORT: several ingest processes may share the port (the kernel spreads connections).
        reusePort: true,
        ...(tlsPaths && { tls: readTlsFiles(tlsPaths) }),
        // A restart's successor serves the socket its predecessor listened on.
        ...(inherited?.ingestFd !== undefined && { listenFd: inherited.ingestFd }),
      },
      logger,
    );
    if (tlsPaths) {
      // SIGHUP: re-read the certificate and key; new handshakes use them, connections up keep theirs.
      // A pair that does not load is logged (and counted by the server) and the previous one stays.
      onHup = () => {
        try {
          server.setTlsCredentials?.(() => readTlsFiles(tlsPaths));
          logger.info({ cert: tlsPaths.certPath }, 'ingest: TLS certificate reloaded');
        } catch (err) {
          logger.error({ err }, 'ingest: TLS certificate reload failed; keeping the previous one');
        }
      };
      process.on('SIGHUP', onHup);
    }
    // Before listen, so the first request already meets its source's cap in the backend.
    routeCaps = routeCapsSync(server, pipeline, () => store.listAllSources(), logger);
    await routeCaps.refresh();
    const { port } = await server.listen();
    logger.info({ port, backend: server.backend }, 'ingest listening');
    // Kernel drops on the ingest port (bpf/ drop tracer) on this process's /metrics; without the
    // edge attached (or without root) they stay at zero and the edge says why once. Once per
    // process: tests run several roles in one process against one registry.
    if (!registry.getSingleMetric('spillway_kernel_drops_total')) registerKernelDropMetrics(registry);
    // SPILLWAY_EDGE=on: XDP allowlist + drop tracer, and the allowlist refresher; fails soft.
    if (rt.config.edge.enabled) edge = await startEdge(rt.config, port, () => store.listAllSources(), logger);
    return {
      name: 'ingest',
      port,
      // The backend that took the port (SPILLWAY_INGEST_BACKEND's `auto` falls back to node with
      // a warning): what a new user, and the ingest benchmark, read to know which one ran.
      notes: [`ingest backend: ${server.backend}`, ...(edge ? [`edge: ${edge.note}`] : [])],
      async close(closeOpts) {
        // In-flight requests are answered (each one durable first) before the intake closes.
        await server.close(closeOpts);
        await closeAll();
      },
      listenFd: () => server.listenFd?.(),
    };
  } catch (err) {
    await closeAll();
    throw err;
  }
}
