/** @spillway/ingest — provider webhook ingress: the shared pipeline and its HTTP backends. */
import { errors, type Logger } from '@spillway/shared';
import { createNodeServer, type NodeServerOptions } from './backends/node.ts';
import type { IngestServer, IngestServerOptions } from './server.ts';

export {
  type AllowlistRefresher,
  type AllowlistRefresherOptions,
  createAllowlistRefresher,
  type Generation,
  parseRanges,
  type RefreshResult,
} from './allowlist.ts';
export { createNodeServer, type NodeServerOptions } from './backends/node.ts';
export {
  attachEdge,
  detachEdge,
  EDGE_LOADER,
  type EdgeDump,
  type EdgeMode,
  type EdgeOptions,
  type EdgeResult,
  edgeStatus,
  type LoaderScope,
  loadAllowRanges,
  registerKernelDropMetrics,
  type SteeringHandle,
  type SteeringOptions,
  type SteeringWorker,
  setEdgeMode,
  startSteering,
} from './edge.ts';
export { createPipeline, type IngestPipeline, type PipelineOptions } from './pipeline.ts';
export type { PreAuthRate } from './preauth.ts';
export type {
  BodySink,
  CloseOptions,
  HeadDecision,
  IngestHandler,
  IngestResponse,
  IngestServer,
  IngestServerOptions,
  RequestHead,
  RouteSpec,
  TlsCredentials,
} from './server.ts';
export { TIMESTAMP_TOLERANCE_S } from './verify/index.ts';

export type IngestBackend = 'uring' | 'node' | 'auto';

/** What ./backends/uring.ts exports (typed here: the module loads a native addon that may be absent). */
interface UringModule {
  probeUring(): { ok: boolean; reason?: string } | Promise<{ ok: boolean; reason?: string }>;
  createUringServer(opts: IngestServerOptions): IngestServer;
}

async function loadUring(): Promise<{ mod?: UringModule; reason?: string }> {
  // A variable specifier keeps the addon's loader out of the static graph: the door must load on a
  // machine where the addon was never built.
  const spec = './backends/uring.ts';
  let mod: UringModule;
  try {
    mod = (await import(spec)) as UringModule;
  } catch (err) {
    return { reason: `io_uring backend not available: ${(err as Error).message}` };
  }
  try {
    const probe = await mod.probeUring();
    return probe.ok ? { mod } : { reason: probe.reason ?? 'io_uring probe failed' };
  } catch (err) {
    return { reason: `io_uring probe failed: ${(err as Error).message}` };
  }
}

/**
 * Picks the backend SPILLWAY_INGEST_BACKEND asks for. `auto` uses io_uring when the addon is built
 * and the kernel allows it (not seccomp-blocked, kernel.io_uring_disabled=0), else node:http and
 * logs why; `uring` fails with the probe's reason instead of silently falling back.
 */
export async function createIngestServer(
  backend: IngestBackend,
  opts: NodeServerOptions,
  logger?: Logger,
): Promise<IngestServer> {
  if (backend === 'node') return createNodeServer(opts);
  const { mod, reason } = await loadUring();
  if (mod) return mod.createUringServer(opts);
  if (backend === 'uring') throw errors.config(`SPILLWAY_INGEST_BACKEND=uring: ${reason}; use auto or node`);
  // warn: the operator asked for the faster backend when it can be had, and did not get it.
  logger?.warn({ reason }, 'ingest: io_uring unavailable, using node:http');
  return createNodeServer(opts);
}
