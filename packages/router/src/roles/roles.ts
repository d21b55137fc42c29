import type { FastifyInstance } from 'fastify';
import type { Runtime } from './runtime.ts';

/** A running role: something that can be closed, in reverse start order. */
export interface RoleHandle {
  readonly name: string;
  /** Bound port where the role listens on its own (ingest). */
  readonly port?: number;
  /** `drain`: a handover to a successor (see @spillway/ingest CloseOptions). */
  close(opts?: { drain?: boolean }): Promise<void>;
  /** The role's own listening socket (ingest), handed to a successor on restart. */
  listenFd?(): number | undefined;
  /**
   * SIGUSR2 for a role that hands over on its own terms (the ingest supervisor: each worker in
   * turn) instead of this process handing its sockets to a successor.
   */
  handover?(): Promise<void>;
  /** Lines for the start banner (e.g. whether the kernel edge attached, or why not). */
  readonly notes?: readonly string[];
}

/** What each role starter receives: the shared runtime and the process's HTTP server. */
export interface RoleContext {
  rt: Runtime;
  http: FastifyInstance;
  /** Listening sockets inherited from a predecessor (restart handover): adopt them, do not bind. */
  inherited?: { ingestFd?: number };
  /** The environment `start` was given (the ingest supervisor's workers inherit it). */
  env?: NodeJS.ProcessEnv;
}

export type RoleStarter = (ctx: RoleContext) => Promise<RoleHandle>;
