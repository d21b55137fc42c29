import { loadConfig, requireAdminToken } from '@spillway/shared';
import { createHttp } from './http.ts';
import type { RoleHandle, RoleStarter } from './roles.ts';
import { checkRedis, createRuntime, ensureSpillTopic, type Runtime } from './runtime.ts';

export type Role = 'all' | 'ingest' | 'worker' | 'admin';
export const ROLES: readonly Role[] = ['all', 'ingest', 'worker', 'admin'];

export interface Started {
  readonly rt: Runtime;
  readonly adminPort: number;
  readonly ingestPort: number | undefined;
  /**
   * `drain`: a handover — the ingest port stops accepting, answers what is in flight (durably)
   * with `connection: close` and lets idle keep-alive connections time out instead of cutting them.
   */
  close(opts?: { drain?: boolean }): Promise<void>;
  /** The listening sockets a successor inherits (docs/operations.md, "Restarts"). */
  listenFds(): { ingest?: number; admin?: number };
  /** What the roles want said at start (the start banner prints them). */
  readonly notes: readonly string[];
  /** Set when SIGUSR2 is the ingest supervisor's (each worker hands over in turn; roles/supervisor.ts). */
  readonly handover?: () => Promise<void>;
}

export interface StartOptions {
  /** Listening sockets inherited from the process this one takes over from (fd numbers). */
  listenFds?: { ingest?: number; admin?: number };
}

/** Role starters are loaded lazily so that a worker process never loads the ingest addon. */
const starters: Record<Exclude<Role, 'all'>, () => Promise<RoleStarter>> = {
  admin: async () => (await import('../admin/index.ts')).startAdmin,
  worker: async () => (await import('../worker/worker.ts')).startWorker,
  ingest: async () => (await import('./ingest-role.ts')).startIngest,
};

/** SPILLWAY_INGEST_WORKERS above 1: the ingest role supervises that many ingest processes. */
const supervisor: () => Promise<RoleStarter> = async () => {
  const { superviseIngest } = await import('./supervisor.ts');
  return ({ rt, env }) => superviseIngest({ rt, env: env ?? process.env });
};

/**
 * `spillway start`: validates config (throws SPW_ERR_CONFIG naming the variable), checks Redis and
 * Kafka, starts the roles, then serves /healthz, /readyz, /metrics (and /v1 for admin) on the admin
 * port.
 */
export async function start(role: Role, env?: NodeJS.ProcessEnv, opts: StartOptions = {}): Promise<Started> {
  const config = loadConfig(env);
  requireAdminToken(config);
  const rt = createRuntime(config);
  const handles: RoleHandle[] = [];
  // Only the worker uses Kafka: an ingest or admin process starts, and stays ready, without it.
  const needsKafka = role === 'all' || role === 'worker';
  const http = createHttp(rt, { needsKafka });
  try {
    await checkRedis(rt);
    if (needsKafka) await ensureSpillTopic(rt);
    const roles: Exclude<Role, 'all'>[] = role === 'all' ? ['admin', 'worker', 'ingest'] : [role];
    const inherited = { ingestFd: opts.listenFds?.ingest };
    const starterOf = (r: Exclude<Role, 'all'>) =>
      r === 'ingest' && config.ingestWorkers > 1 ? supervisor() : starters[r]();
    for (const r of roles)
      handles.push(await (await starterOf(r))({ rt, http, inherited, env: env ?? process.env }));
    const adminFd = opts.listenFds?.admin;
    // fastify hands its listen options to node's server.listen, which adopts an inherited `fd`
    // (fastify's types do not list it).
    if (adminFd !== undefined)
      await http.listen({ fd: adminFd, host: config.adminHost } as unknown as { port: number });
    else await http.listen({ port: config.adminPort, host: config.adminHost });
  } catch (err) {
    for (const h of handles.reverse()) await h.close().catch(() => {});
    await http.close().catch(() => {});
    await rt.close();
    throw err;
  }
  const addr = http.server.address();
  const adminPort = typeof addr === 'object' && addr ? addr.port : config.adminPort;
  rt.logger.info({ role, adminPort, workerId: rt.workerId }, 'spillway started');
  let closing: Promise<void> | undefined;
  const handover = handles.find((h) => h.handover)?.handover;
  return {
    ...(handover && { handover }),
    rt,
    adminPort,
    ingestPort: handles.find((h) => h.name === 'ingest')?.port,
    notes: handles.flatMap((h) => h.notes ?? []),
    close(closeOpts?: { drain?: boolean }) {
      closing ??= (async () => {
        await http.close().catch(() => {});
        for (const h of [...handles].reverse())
          await h.close(closeOpts).catch((err) => rt.logger.error({ err }, `closing ${h.name}`));
        await rt.close();
      })();
      return closing;
    },
    listenFds() {
      // node:net keeps a listener's descriptor on its handle; there is no public accessor.
      const adminFd = (http.server as { _handle?: { fd?: number } })._handle?.fd;
      const ingestFd = handles.find((h) => h.name === 'ingest')?.listenFd?.();
      return {
        ...(ingestFd !== undefined && { ingest: ingestFd }),
        ...(typeof adminFd === 'number' && adminFd >= 0 && { admin: adminFd }),
      };
    },
  };
}
