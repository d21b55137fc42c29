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
  close(): Promise<void>;
}

/** Role starters are loaded lazily so that a worker process never loads the ingest addon. */
const starters: Record<Exclude<Role, 'all'>, () => Promise<RoleStarter>> = {
  admin: async () => (await import('../admin/index.ts')).startAdmin,
  worker: async () => (await import('../worker/worker.ts')).startWorker,
  ingest: async () => (await import('./ingest-role.ts')).startIngest,
};

/**
 * `spillway start`: validates config (throws SPW_ERR_CONFIG naming the variable), checks Redis and
 * Kafka, starts the roles, then serves /healthz, /readyz, /metrics (and /v1 for admin) on the admin
 * port.
 */
export async function start(role: Role, env?: NodeJS.ProcessEnv): Promise<Started> {
  const config = loadConfig(env);
  requireAdminToken(config);
  const rt = createRuntime(config);
  const handles: RoleHandle[] = [];
  const http = createHttp(rt);
  try {
    await checkRedis(rt);
    await ensureSpillTopic(rt);
    const roles: Exclude<Role, 'all'>[] = role === 'all' ? ['admin', 'worker', 'ingest'] : [role];
    for (const r of roles) handles.push(await (await starters[r]())({ rt, http }));
    await http.listen({ port: config.adminPort, host: config.host });
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
  return {
    rt,
    adminPort,
    ingestPort: handles.find((h) => h.name === 'ingest')?.port,
    close() {
      closing ??= (async () => {
        await http.close().catch(() => {});
        for (const h of [...handles].reverse())
          await h.close().catch((err) => rt.logger.error({ err }, `closing ${h.name}`));
        await rt.close();
      })();
      return closing;
    },
  };
}
