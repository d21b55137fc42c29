/**
 * The kernel edge as `spillway start` runs it (SPILLWAY_EDGE=on; docs/edge.md, "From spillway
 * start"): attach the XDP allowlist on SPILLWAY_EDGE_DEVICES and the drop tracer for the ingest
 * port, then keep the allowlist current — provider ranges (SPILLWAY_EDGE_RANGES) joined with every
 * source's allowCidrs, swapped in whole on the interval and whenever a source changes. Without the
 * capabilities or the built loader it says why in one line and ingest runs without it.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type AllowlistRefresher,
  attachEdge,
  createAllowlistRefresher,
  loadAllowRanges,
} from '@spillway/ingest';
import type { Config, Logger, Source } from '@spillway/shared';

export interface EdgeHandle {
  /** One line for the start banner: attached where and how, or why not. */
  readonly note: string;
  /** Why the edge is not attached; undefined when it is. */
  readonly reason?: string;
  /** A source changed: refresh the allowlist now (coalesced). */
  sourcesChanged(): void;
  /** Stops the refresher. The XDP program stays attached (pinned): it outlives a restart. */
  stop(): void;
}

export async function startEdge(
  config: Readonly<Config>,
  port: number,
  listSources: () => Promise<Source[]>,
  logger: Logger,
): Promise<EdgeHandle> {
  const edge = config.edge;
  // quiet: the one line saying why not is this role's (the start banner), not a process warning.
  const attached = await attachEdge({
    devices: edge.devices,
    port,
    mode: edge.mode,
    trace: true,
    quiet: true,
  });
  if (!attached.available) {
    return {
      note: `not attached (${attached.reason}); running without it`,
      reason: attached.reason,
      sourcesChanged() {},
      stop() {},
    };
  }
  const where = edge.devices.length
    ? `XDP on ${edge.devices.join(', ')}`
    : 'drop tracer only (no SPILLWAY_EDGE_DEVICES)';
  // The loader takes the set as a file: one private file per swap, gone once it is loaded.
  const dir = mkdtempSync(join(tmpdir(), 'spillway-allow-'));
  chmodSync(dir, 0o700);
  let n = 0;
  const refresher: AllowlistRefresher = createAllowlistRefresher({
    ranges: edge.ranges,
    intervalMs: edge.rangesIntervalMs,
    sourceCidrs: async () => (await listSources()).flatMap((s) => s.allowCidrs ?? []),
    apply: async (cidrs) => {
      const file = join(dir, `allow-${n++}.txt`);
      writeFileSync(file, `${cidrs.join('\n')}\n`, { mode: 0o600 });
      try {
        const r = await loadAllowRanges(file);
        if (!r.available) return { ok: false, reason: r.reason };
        logger.info({ generation: r.out.generation, allow: r.out.allow }, 'edge: allowlist swapped in');
        return { ok: true };
      } finally {
        rmSync(file, { force: true });
      }
    },
    onError: (msg) => logger.warn(`edge: ${msg}`),
  });
  refresher.start();
  const note = `${where}, mode ${edge.mode}; allowlist from ${edge.ranges.length} range list(s) and the sources' allowCidrs, every ${edge.rangesIntervalMs / 1000} s`;
  logger.info(`edge: ${note}`);
  return {
    note,
    sourcesChanged: () => void refresher.refresh(),
    stop() {
      refresher.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
