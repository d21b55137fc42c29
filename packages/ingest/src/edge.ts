/**
 * The kernel edge of ingest: XDP allowlist, drop tracer and SK_REUSEPORT steering, driven through
 * the C loader `bpf/.build/spillway-edge` (child process; Node cannot make bpf() calls). State lives
 * in pinned maps, so every call is a short loader run and nothing here holds kernel objects.
 * Without the privileges (CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON) or the built loader, every call
 * fails soft: it resolves with `{ available: false, reason }` and logs one clear line, once.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadEdgeToolConfig } from '@spillway/shared';
import type { Registry } from 'prom-client';

const here = dirname(fileURLToPath(import.meta.url));
/** The environment this module reads, through the shared config (SPILLWAY_EDGE_LOADER, SPILLWAY_INGEST_PORT). */
const toolConfig = loadEdgeToolConfig();
/** Path of the loader; SPILLWAY_EDGE_LOADER overrides it. */
export const EDGE_LOADER = toolConfig.loader ?? resolve(here, '../../../bpf/.build/spillway-edge');

export type EdgeMode = 'off' | 'monitor' | 'enforce';

/** Where the loader works: its bpffs pin directory and, optionally, a network namespace. */
export interface LoaderScope {
  /** bpffs directory for pins (default /sys/fs/bpf/spillway or SPILLWAY_BPF_PIN_ROOT). */
  pinRoot?: string;
  /**
   * Run the loader inside this named network namespace (`ip netns exec`), for an ingest that
   * listens in one: XDP devices, listeners and the TcpExt counters are per namespace. `ip netns
   * exec` remounts /sys, so pinRoot must then be a bpffs mounted outside /sys.
   */
  netns?: string;
}

export interface EdgeOptions extends LoaderScope {
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
  /**
   * The caller reports unavailability itself (`spillway start`'s one line): no process warning now,
   * nor later from the metrics.
   */
  quiet?: boolean;
}

export type EdgeResult<T> = ({ available: true } & T) | { available: false; reason: string };

export interface EdgeDump {
  pinRoot: string;
  attached: { xdp: string[]; trace: boolean };
  netstat: { ListenOverflows: number; ListenDrops: number; TCPSynRetrans: number; TCPReqQFullDrop: number };
  xdp: null | {
    mode: EdgeMode;
    port: number;
    generation: number;
    allow: number;
    block: number;
    traceSyn: boolean;
    verdicts: Record<string, number>;
  };
  trace: null | {
    port: number;
    dropsByReason: Record<string, number>;
    listenOverflows: { syn: number; ack: number };
    synRetransmits: number;
    synRetryGap: { sumMs: number; count: number; bucketsMs: [number, number][] };
  };
  steer: null | {
    enabled: boolean;
    workers: number;
    busyPct: number;
    stats: Record<string, number>;
    workersDetail: { slot: number; picks: number; queue: number; backlog: number }[];
  };
}

let warned = false;
let denied: string | undefined;
function warnOnce(reason: string, quiet = false): void {
  if (warned) return;
  warned = true;
  if (!quiet) process.emitWarning(`spillway edge disabled: ${reason}`, { code: 'SPW_EDGE_UNAVAILABLE' });
}

function runLoader(
  args: string[],
  scope: LoaderScope,
  timeoutMs = 10_000,
  quiet = false,
): Promise<EdgeResult<{ out: unknown }>> {
  // A process does not gain CAP_BPF later: once refused, stop spawning the loader (each /metrics
  // scrape would otherwise run it again only to be refused).
  if (denied) return Promise.resolve({ available: false, reason: denied });
  if (!existsSync(EDGE_LOADER)) {
    const reason = `loader not built (${EDGE_LOADER}); run bpf/build.sh`;
    warnOnce(reason, quiet);
    return Promise.resolve({ available: false, reason });
  }
  const full = scope.pinRoot ? ['--pin-root', scope.pinRoot, ...args] : args;
  const [cmd, argv] = scope.netns
    ? ['ip', ['netns', 'exec', scope.netns, EDGE_LOADER, ...full]]
    : [EDGE_LOADER, full];
  return new Promise((res) => {
    execFile(cmd, argv, { timeout: timeoutMs, encoding: 'utf8' }, (err, stdout, stderr) => {
      if (err) {
        const code = (err as { code?: number | string }).code;
        const reason = stderr.trim().split('\n').pop() || err.message;
        if (code === 77) {
          denied = reason;
          warnOnce(reason, quiet);
        }
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
export async function edgeStatus(opts: LoaderScope = {}): Promise<EdgeResult<{ status: EdgeDump }>> {
  const r = await runLoader(['dump'], opts);
  return r.available ? { available: true, status: r.out as EdgeDump } : r;
}

/** Loads and attaches XDP (on opts.devices) and the drop tracer; idempotent. */
export async function attachEdge(opts: EdgeOptions = {}): Promise<EdgeResult<{ status: EdgeDump }>> {
  const args = ['attach'];
  for (const d of opts.devices ?? []) args.push('--dev', d);
  args.push('--port', String(opts.port ?? toolConfig.ingestPort));
  if (opts.mode) args.push('--mode', opts.mode);
  if (opts.xdpMode) args.push('--xdp-mode', opts.xdpMode);
  if (opts.trace === false) args.push('--no-trace');
  const r = await runLoader(args, opts, 10_000, opts.quiet === true);
  if (!r.available) return r;
  return edgeStatus(opts);
}

/** Detaches (all devices and the tracer when `devices` is empty); maps and counters stay unless purge. */
export async function detachEdge(
  opts: LoaderScope & { devices?: string[]; purge?: boolean } = {},
): Promise<EdgeResult<{ out: unknown }>> {
  const args = ['detach'];
  for (const d of opts.devices ?? []) args.push('--dev', d);
  if (opts.purge) args.push('--purge');
  return runLoader(args, opts);
}

/** Sets the XDP mode. */
export async function setEdgeMode(
  mode: EdgeMode,
  opts: LoaderScope = {},
): Promise<EdgeResult<{ out: unknown }>> {
  return runLoader(['mode', mode], opts);
}

/**
 * Loads provider ranges (GitHub meta JSON — its `hooks` array —, Stripe `{"WEBHOOKS":[...]}`, or
 * CIDR lines) into the allowlist, optionally a blocklist, swapping the sets atomically.
 */
export async function loadAllowRanges(
  file: string | string[],
  opts: LoaderScope & { blockFiles?: string[] } = {},
): Promise<EdgeResult<{ out: { generation: number; allow: number; block: number } }>> {
  const args = ['ranges'];
  for (const f of Array.isArray(file) ? file : [file]) args.push('--allow', f);
  for (const f of opts.blockFiles ?? []) args.push('--block', f);
  const r = await runLoader(args, opts);
  return r as EdgeResult<{ out: { generation: number; allow: number; block: number } }>;
}

/** One value of a collected metric, in prom-client's shape (`metricName` for _bucket/_sum/_count). */
interface MetricValue {
  value: number;
  labels: Record<string, string | number>;
  metricName?: string;
}

/**
 * A metric whose values are read, not accumulated: each scrape reports the kernel's own cumulative
 * counters from the pinned maps, so a scrape costs one loader run and O(labels + buckets), and the
 * numbers stay what the kernel counted (a `detach --purge` resets them, which Prometheus reads as a
 * counter reset). prom-client's Counter/Histogram can only be incremented/observed, hence this small
 * implementation of the interface Registry uses (name, help, type, aggregator, get, reset).
 */
class KernelMetric {
  readonly name: string;
  readonly help: string;
  readonly type: 'counter' | 'histogram';
  readonly aggregator = 'sum';
  private readonly read: () => Promise<MetricValue[]>;
  constructor(name: string, help: string, type: 'counter' | 'histogram', read: () => Promise<MetricValue[]>) {
    this.name = name;
    this.help = help;
    this.type = type;
    this.read = read;
  }
  async get(): Promise<{
    name: string;
    help: string;
    type: string;
    aggregator: string;
    values: MetricValue[];
  }> {
    return {
      name: this.name,
      help: this.help,
      type: this.type,
      aggregator: this.aggregator,
      values: await this.read(),
    };
  }
  reset(): void {
    // kernel counters are not ours to reset
  }
}

/**
 * Prometheus histogram lines from the kernel's log2-ms SYN-retry-gap buckets. Kernel bucket i holds
 * gaps in [2^(i-1), 2^i) ms (bucket 0: < 1 ms), the last one everything above: so the cumulative
 * bucket `le = 2^i ms` is the sum of kernel buckets 0..i, and +Inf (= _count) is the total. _sum is
 * the kernel's sum of whole milliseconds, in seconds.
 */
export function synRetryGapValues(
  gap: { sumMs: number; bucketsMs: [number, number][] },
  name = 'spillway_kernel_syn_retry_gap_seconds',
): MetricValue[] {
  const out: MetricValue[] = [];
  let cumulative = 0;
  gap.bucketsMs.forEach(([leMs, n], i) => {
    cumulative += n;
    if (i < gap.bucketsMs.length - 1)
      out.push({ metricName: `${name}_bucket`, labels: { le: leMs / 1000 }, value: cumulative });
  });
  out.push({ metricName: `${name}_bucket`, labels: { le: '+Inf' }, value: cumulative });
  out.push({ metricName: `${name}_sum`, labels: {}, value: gap.sumMs / 1000 });
  out.push({ metricName: `${name}_count`, labels: {}, value: cumulative });
  return out;
}

export interface SteeringOptions extends LoaderScope {
  /** The SO_REUSEPORT port the ingest workers listen on. */
  port: number;
  /** Skip a worker whose accept queue holds at least this % of its backlog (default 50). */
  busyPct?: number;
  /** How often queue depths are published, in microseconds (default 1000). */
  intervalUs?: number;
  /** Depths older than this make the program fall back to the kernel hash (default 250 ms). */
  staleMs?: number;
}

export interface SteeringWorker {
  slot: number;
  pid: number;
  fd: number;
}

export interface SteeringHandle {
  /** The daemon's child process (`spillway-edge steer`). */
  child: ChildProcess;
  /** Resolves with the worker slots once the daemon registered at least `minWorkers` listeners. */
  ready(minWorkers: number, timeoutMs?: number): Promise<SteeringWorker[]>;
  /** SIGTERM: the daemon detaches the program from the group (kernel hash again) and exits. */
  stop(): Promise<void>;
}

/**
 * Starts SK_REUSEPORT steering for every listener on `port` (in this network namespace, or
 * opts.netns): the loader's `steer` daemon finds the listeners, attaches the program and publishes
 * their accept-queue depths. Needs root (pidfd_getfd on the workers' sockets). Returns unavailable,
 * like the other calls, when the loader is missing or the edge was refused before.
 */
export function startSteering(opts: SteeringOptions): EdgeResult<{ steering: SteeringHandle }> {
  if (denied) return { available: false, reason: denied };
  if (!existsSync(EDGE_LOADER)) {
    const reason = `loader not built (${EDGE_LOADER}); run bpf/build.sh`;
    warnOnce(reason);
    return { available: false, reason };
  }
  const args = [...(opts.pinRoot ? ['--pin-root', opts.pinRoot] : []), 'steer', '--port', String(opts.port)];
  if (opts.busyPct !== undefined) args.push('--busy-pct', String(opts.busyPct));
  if (opts.intervalUs !== undefined) args.push('--interval-us', String(opts.intervalUs));
  if (opts.staleMs !== undefined) args.push('--stale-ms', String(opts.staleMs));
  const [cmd, argv] = opts.netns
    ? ['ip', ['netns', 'exec', opts.netns, EDGE_LOADER, ...args]]
    : [EDGE_LOADER, args];
  const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  const waiters = new Set<() => void>();
  const wake = () => {
    for (const w of waiters) w();
  };
  child.stdout?.on('data', (d: Buffer) => {
    out += d.toString();
    wake();
  });
  child.stderr?.on('data', (d: Buffer) => {
    err += d.toString();
  });
  const exited = new Promise<void>((res) =>
    child.once('exit', (code) => {
      if (code === 77) {
        denied = err.trim().split('\n').pop() ?? 'not permitted';
        warnOnce(denied);
      }
      res();
      wake();
    }),
  );
  const running = () => child.exitCode === null && child.signalCode === null;
  const ready = (minWorkers: number, timeoutMs = 5_000): Promise<SteeringWorker[]> =>
    new Promise((resolve, reject) => {
      const finish = (f: () => void) => {
        clearTimeout(timer);
        waiters.delete(check);
        f();
      };
      // The daemon prints one line each time its set of listeners changes: the last one counts.
      const check = () => {
        const lines = out.split('\n').filter((l) => l.startsWith('{"steering"'));
        const last = lines.at(-1);
        const workers = last
          ? ((JSON.parse(last) as { steering: { workers?: SteeringWorker[] } }).steering.workers ?? [])
          : [];
        if (workers.length >= minWorkers) finish(() => resolve(workers));
        else if (!running())
          finish(() => reject(new Error(`steering daemon exited: ${err.trim() || child.exitCode}`)));
      };
      const timer = setTimeout(
        () =>
          finish(() =>
            reject(new Error(`steering: ${minWorkers} workers not registered after ${timeoutMs} ms`)),
          ),
        timeoutMs,
      );
      waiters.add(check);
      check();
    });
  const stop = async () => {
    if (running()) child.kill('SIGTERM');
    await exited;
  };
  return { available: true, steering: { child, ready, stop } };
}

/**
 * Registers the kernel edge metrics on `registry` (use `@spillway/shared`'s registry). Values are
 * the kernel's counters read from the pinned maps by one loader run, shared by all of them and
 * reused for `cacheMs` (default 5 s): the loader is a root-capable process, and a scrape — which
 * anyone who reaches /metrics can trigger — must not spawn one each time (issue 15). When the edge
 * is unavailable they have no samples and one warning is logged. `netns`: read the netns counters
 * (TcpExt) of that network namespace, for an ingest running in one.
 */
export function registerKernelDropMetrics(
  registry: Registry,
  opts: LoaderScope & { cacheMs?: number } = {},
): void {
  const cacheMs = opts.cacheMs ?? 5000;
  let pending: Promise<EdgeDump | null> | null = null;
  let cached: { at: number; dump: EdgeDump | null } | undefined;
  // Every metric of one scrape asks at once (Registry.metrics() collects them concurrently): they
  // share one loader run, and scrapes within cacheMs share its reading.
  const read = (): Promise<EdgeDump | null> => {
    if (cached && performance.now() - cached.at < cacheMs) return Promise.resolve(cached.dump);
    pending ??= edgeStatus(opts).then((r) => {
      pending = null;
      const dump = r.available ? r.status : null;
      cached = { at: performance.now(), dump };
      return dump;
    });
    return pending;
  };
  const metrics = [
    new KernelMetric(
      'spillway_kernel_drops_total',
      'Packets to the ingest port dropped by the kernel, by skb drop reason (skb:kfree_skb; TCP_LISTEN_OVERFLOW from the XDP accept-queue check)',
      'counter',
      async () =>
        Object.entries((await read())?.trace?.dropsByReason ?? {}).map(([reason, value]) => ({
          labels: { reason },
          value,
        })),
    ),
    new KernelMetric(
      'spillway_listen_overflows_total',
      'Accept-queue overflows: source=ingest_port (traced on the ingest listener) or netns (kernel TcpExtListenOverflows of the network namespace)',
      'counter',
      async () => {
        const d = await read();
        if (!d) return [];
        const out: MetricValue[] = [{ labels: { source: 'netns' }, value: d.netstat.ListenOverflows }];
        if (d.trace)
          out.unshift({
            labels: { source: 'ingest_port' },
            value: d.trace.listenOverflows.syn + d.trace.listenOverflows.ack,
          });
        return out;
      },
    ),
    new KernelMetric(
      'spillway_edge_xdp_packets_total',
      'Packets seen by the XDP allowlist, by verdict',
      'counter',
      async () =>
        Object.entries((await read())?.xdp?.verdicts ?? {}).map(([verdict, value]) => ({
          labels: { verdict },
          value,
        })),
    ),
    new KernelMetric(
      'spillway_edge_steer_decisions_total',
      'New connections seen by the SK_REUSEPORT steering program, by decision',
      'counter',
      async () =>
        Object.entries((await read())?.steer?.stats ?? {}).map(([decision, value]) => ({
          labels: { decision },
          value,
        })),
    ),
    new KernelMetric(
      'spillway_kernel_syn_retry_gap_seconds',
      "Time from a client's first SYN to each retransmission of it (the wait a refused SYN costs the sender)",
      'histogram',
      async () => {
        const g = (await read())?.trace?.synRetryGap;
        return g ? synRetryGapValues(g) : [];
      },
    ),
  ];
  // Registry types its argument as one of prom-client's classes; it only uses the members above.
  for (const m of metrics) registry.registerMetric(m as unknown as Parameters<Registry['registerMetric']>[0]);
}
