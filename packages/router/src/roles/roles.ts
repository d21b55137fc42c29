import type { FastifyInstance } from 'fastify';
import type { Runtime } from './runtime.ts';

/** A running role: something that can be closed, in reverse start order. */
export interface RoleHandle {
  readonly name: string;
  /** Bound port where the role listens on its own (ingest). */
  readonly port?: number;
  close(): Promise<void>;
}

/** What each role starter receives: the shared runtime and the process's HTTP server. */
export interface RoleContext {
  rt: Runtime;
  http: FastifyInstance;
}

export type RoleStarter = (ctx: RoleContext) => Promise<RoleHandle>;
