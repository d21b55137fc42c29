/**
 * The kernel edge of ingest: XDP allowlist, drop tracer and SK_REUSEPORT steering, driven through
 * the C loader `bpf/.build/spillway-edge` (child process; Node cannot make bpf() calls). State lives
 * in pinned maps, so every call is a short loader run and nothing here holds kernel objects.
 * Without the privileges (CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON) or the built loader, every call
 * fails soft: it resolves with `{ available: false, reason }` and logs one clear line, once.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Registry } from 'prom-client';
import { Counter, Histogram } from 'prom-client';

const here = dirname(fileURLToPath(import.meta.url));
/** Path of the loader; SPILLWAY_EDGE_LOADER overrides it. */
export const EDGE_LOADER = process.env.SPILLWAY_EDGE_LOADER ?? resolve(here, '../../../bpf/.build/spillway-edge');

export type EdgeMode = 'off' | 'monitor' | 'enforce';

export interface EdgeOptions {
  /** Interfaces to attach the XDP program to (e.g. ['eth0']). None: tracer/config only. */
  devices?: string[];
  /** The ingest port judged by XDP and traced (default: SPILLWAY_INGEST_PORT or 8080). */
  port?: number;
  /** off | monitor (count what would be dropped) | enforce. Default on first attach: monitor. */
  mode?: EdgeMode;
  /** XDP attach mode; auto tries native then generic. */
  xdpMode?: 'auto' | 'skb' | 'native';
  /** Attach the drop tracer (default true). */
  trace?: boolean;
  /** bpffs directory for pins (default /sys/fs/bpf/spillway or SPILLWAY_BPF_PIN_ROOT). */
  pinRoot?: string;
}

export type EdgeResult<T> = ({ available: true } & T) | { available: false; reason: string };

export interface EdgeDump {
  pinRoot: string;
  attached: { xdp: string[]; trace: boolean };
  netstat: { ListenOverflows: number; ListenDrops: number; TCPSynRetrans: number; TCPReqQFullDrop: number };
  xdp: null | { mode: EdgeMode; port: number; generation: number; allow: number; block: number; traceSyn: boolean; verdicts: Record<string, number> };
  trace: null | {
    port: number;
    dropsByReason: Record<string, number>;
    listenOverflows: { syn: number; ack: number };
    synRetransmits: number;
    synRetryGap: { sumMs: number; count: number; bucketsMs: [number, number][] };
  };
  steer: null | { enabled: boolean; workers: number; busyPct: number; stats: Record<string, number>; workersDetail: { slot: number; picks: number; queue: number; backlog: number }[] };
}

let warned = false;
function warnOnce(reason: string): void {
  if (warned) return;
  warned = true;
  process.emitWarning(`spillway edge disabled: ${reason}`, { code: 'SPW_EDGE_UNAVAILABLE' });
}

function runLoader(args: string[], pinRoot?: string, timeoutMs = 10_000): Promise<EdgeResult<{ out: unknown }>> {
  if (!existsSync(EDGE_LOADER)) {
    const reason = `loader not built (${EDGE_LOADER}); run bpf/build.sh`;
    warnOnce(reason);
    return Promise.resolve({ available: false, reason });
  }
  const full = pinRoot ? ['--pin-root', pinRoot, ...args] : args;
  return new Promise((res) => {
    execFile(EDGE_LOADER, full, { timeout: timeoutMs, encoding: 'utf8' }, (err, stdout, stderr) => {
      if (err) {
        const code = (err as { code?: number | string }).code;
        const reason = stderr.trim().split('\n').pop() || err.message;
        if (code === 77) warnOnce(reason);
        res({ available: false, reason });
        return;
      }
      const line = stdout.trim().split('\n').pop() ?? '{}';
      try {
        res({ available: true, out: JSON.parse(line) });
      } catch {
        res({ available: false, reason: `unexpected loader output: ${line.slice(0, 200)}` });
      }
    });
  });
}

/** Everything the pinned maps hold: attachments, mode, counters, drops, steering. */
export async function edgeStatus(opts: { pinRoot?: string } = {}): Promise<EdgeResult<{ status: EdgeDump }>> {
  const r = await runLoader(['dump'], opts.pinRoot);
  return r.available ? { available: true, status: r.out as EdgeDump } : r;
}

/** Loads and attaches XDP (on opts.devices) and the drop tracer; idempotent. */
export async function attachEdge(opts: EdgeOptions = {}): Promise<EdgeResult<{ status: EdgeDump }>> {
  const args = ['attach'];
  for (const d of opts.devices ?? []) args.push('--dev', d);
  args.push('--port', String(opts.port ?? Number(process.env.SPILLWAY_INGEST_PORT ?? 8080)));
  if (opts.mode) args.push('--mode', opts.mode);
  if (opts.xdpMode) args.push('--xdp-mode', opts.xdpMode);
  if (opts.trace === false) args.push('--no-trace');
  const r = await runLoader(args, opts.pinRoot);
  if (!r.available) return r;
  return edgeStatus({ pinRoot: opts.pinRoot });
}

/** Detaches (all devices and the tracer when `devices` is empty); maps and counters stay unless purge. */
export async function detachEdge(opts: { devices?: string[]; purge?: boolean; pinRoot?: string } = {}): Promise<EdgeResult<{ out: unknown }>> {
  const args = ['detach'];
  for (const d of opts.devices ?? []) args.push('--dev', d);
  if (opts.purge) args.push('--purge');
  return runLoader(args, opts.pinRoot);
}

/** Sets the XDP mode. */
export async function setEdgeMode(mode: EdgeMode, opts: { pinRoot?: string } = {}): Promise<EdgeResult<{ out: unknown }>> {
  return runLoader(['mode', mode], opts.pinRoot);
}

/**
 * Loads provider ranges (GitHub meta JSON — its `hooks` array —, Stripe `{"WEBHOOKS":[...]}`, or
 * CIDR lines) into the allowlist, optionally a blocklist, swapping the sets atomically.
 */
export async function loadAllowRanges(file: string | string[], opts: { blockFiles?: string[]; pinRoot?: string } = {}): Promise<EdgeResult<{ out: { generation: number; allow: number; block: number } }>> {
  const args = ['ranges'];
  for (const f of Array.isArray(file) ? file : [file]) args.push('--allow', f);
  for (const f of opts.blockFiles ?? []) args.push('--block', f);
  const r = await runLoader(args, opts.pinRoot);
  return r as EdgeResult<{ out: { generation: number; allow: number; block: number } }>;
}

/**
 * Registers the kernel drop metrics on `registry` (use `@spillway/shared`'s registry). Values are
 * read from the pinned maps at scrape time; when the edge is unavailable the metrics stay at zero
 * and one warning is logged.
 */
export function registerKernelDropMetrics(registry: Registry, opts: { pinRoot?: string } = {}): void {
  let last: EdgeDump | null = null;
  let pending: Promise<void> | null = null;
  const refresh = (): Promise<void> => {
    pending ??= edgeStatus(opts).then((r) => {
      last = r.available ? r.status : null;
      pending = null;
    });
    return pending;
  };
  // Counters mirror monotonic kernel counters: each scrape moves them by the delta since the last.
  const seen = new Map<string, number>();
  const bump = (c: Counter<string>, key: string, labels: Record<string, string>, value: number) => {
    const prev = seen.get(key) ?? 0;
    if (value > prev) c.inc(labels, value - prev);
    seen.set(key, value);
  };
  const drops = new Counter({
    name: 'spillway_kernel_drops_total',
    help: 'Packets to the ingest port dropped by the kernel, by skb drop reason (skb:kfree_skb; TCP_LISTEN_OVERFLOW from the XDP accept-queue check)',
    labelNames: ['reason'],
    registers: [registry],
    async collect() {
      await refresh();
      for (const [reason, v] of Object.entries(last?.trace?.dropsByReason ?? {})) bump(drops, `d:${reason}`, { reason }, v);
    },
  });
  const overflows = new Counter({
    name: 'spillway_listen_overflows_total',
    help: 'Accept-queue overflows: source=ingest_port (traced on the ingest listener) or netns (kernel TcpExt ListenOverflows)',
    labelNames: ['source'],
    registers: [registry],
    async collect() {
      await refresh();
      const t = last?.trace;
      if (t) bump(overflows, 'o:port', { source: 'ingest_port' }, t.listenOverflows.syn + t.listenOverflows.ack);
      if (last) bump(overflows, 'o:netns', { source: 'netns' }, last.netstat.ListenOverflows);
    },
  });
  const verdicts = new Counter({
    name: 'spillway_edge_xdp_packets_total',
    help: 'Packets seen by the XDP allowlist, by verdict',
    labelNames: ['verdict'],
    registers: [registry],
    async collect() {
      await refresh();
      for (const [verdict, v] of Object.entries(last?.xdp?.verdicts ?? {})) bump(verdicts, `v:${verdict}`, { verdict }, v);
    },
  });
  // The histogram is rebuilt from the kernel's log2 buckets at each scrape.
  const bucketsMs = Array.from({ length: 20 }, (_, i) => 2 ** i);
  const gap = new Histogram({
    name: 'spillway_kernel_syn_retry_gap_seconds',
    help: 'Time from a client\'s first SYN to each retransmission of it (the wait a refused SYN costs the sender)',
    buckets: bucketsMs.map((ms) => ms / 1000),
    registers: [registry],
    async collect() {
      await refresh();
      const g = last?.trace?.synRetryGap;
      if (!g) return;
      gap.reset();
      // observe each bucket's count at a value inside it (its upper bound minus a hair)
      for (const [le, n] of g.bucketsMs) for (let i = 0; i < n; i++) gap.observe((le * 0.999) / 1000);
    },
  });
  void drops;
  void overflows;
  void verdicts;
}
