import { spawn } from 'node:child_process';
import {
  attachEdge,
  detachEdge,
  EDGE_LOADER,
  type EdgeMode,
  edgeStatus,
  loadAllowRanges,
  setEdgeMode,
} from '@spillway/ingest';
import { loadConfig } from '@spillway/shared';
import { Argument, type Command, Option } from 'commander';

type Result = { available: boolean; reason?: string };

function finish(r: Result, out: unknown): void {
  if (!r.available) {
    process.stderr.write(`spillway edge: ${r.reason}\n`);
    process.exitCode = 1;
    return;
  }
  process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
}

const collect = (v: string, prev: string[]) => [...prev, v];

interface ScopeOpts {
  pinRoot?: string;
  netns?: string;
}

/** Every edge command can work on another pin directory and inside a named network namespace. */
function scoped(cmd: Command): Command {
  return cmd
    .option('--pin-root <dir>', 'bpffs pin directory (default /sys/fs/bpf/spillway)')
    .option(
      '--netns <name>',
      'run inside this network namespace (ip netns exec); pin root must be outside /sys',
    );
}

const scope = (o: ScopeOpts): ScopeOpts => ({ pinRoot: o.pinRoot, netns: o.netns });

interface AttachOpts {
  dev: string[];
  port?: string;
  mode?: EdgeMode;
  xdpMode: 'auto' | 'skb' | 'native';
  trace: boolean;
}

/**
 * One loader call per command: `run(positionals, options)` and print its `status` or `out` as
 * JSON (or the reason it is unavailable, exit 1). Every command takes --pin-root and --netns.
 */
function edgeCommand<O extends ScopeOpts>(
  cmd: Command,
  run: (args: string[], o: O) => Promise<Result & { status?: unknown; out?: unknown }>,
): void {
  scoped(cmd).action(async (...params: unknown[]) => {
    const args = params.slice(0, -2) as string[];
    const r = await run(args, params.at(-2) as O);
    finish(r, r.available ? (r.status ?? r.out) : null);
  });
}

/** `spillway edge attach|detach|status|mode|allow|steer`: the kernel edge (docs/edge.md). Needs root. */
export function registerEdgeCommands(program: Command): void {
  const edge = program
    .command('edge')
    .description('kernel edge: XDP allowlist, drop tracer, reuseport steering (root)');
  edgeCommand(
    edge
      .command('attach')
      .description('load and attach XDP on the given interfaces, and the drop tracer')
      .option('--dev <iface>', 'interface for XDP (repeatable)', collect, [] as string[])
      .option('--port <n>', 'ingest port (default SPILLWAY_INGEST_PORT or 8080)')
      .addOption(new Option('--mode <mode>', 'verdict mode').choices(['off', 'monitor', 'enforce']))
      .addOption(
        new Option('--xdp-mode <m>', 'XDP attach mode').choices(['auto', 'skb', 'native']).default('auto'),
      )
      .option('--no-trace', 'do not attach the drop tracer'),
    (_args, o: ScopeOpts & AttachOpts) =>
      attachEdge({
        devices: o.dev,
        // Without --port: the ingest port the server is configured with (shared config, validated).
        port: o.port ? Number(o.port) : loadConfig().ingestPort,
        mode: o.mode,
        xdpMode: o.xdpMode,
        trace: o.trace,
        ...scope(o),
      }),
  );
  edgeCommand(
    edge
      .command('detach')
      .description('detach XDP (given interfaces, or everything incl. the tracer)')
      .option('--dev <iface>', 'interface (repeatable)', collect, [] as string[])
      .option('--purge', 'also remove the pinned maps (counters, ranges)'),
    (_args, o: ScopeOpts & { dev: string[]; purge?: boolean }) =>
      detachEdge({ devices: o.dev, purge: o.purge, ...scope(o) }),
  );
  edgeCommand(
    edge.command('status').description('attachments, mode, verdict counters, kernel drops, steering'),
    (_args, o: ScopeOpts) => edgeStatus(scope(o)),
  );
  edgeCommand(
    edge
      .command('mode')
      .description('set the XDP verdict mode')
      .addArgument(new Argument('<mode>', 'verdict mode').choices(['off', 'monitor', 'enforce'])),
    ([mode], o: ScopeOpts) => setEdgeMode(mode as EdgeMode, scope(o)),
  );
  edgeCommand(
    edge
      .command('allow')
      .description('load provider ranges (GitHub meta JSON, Stripe JSON, CIDR lines); atomic swap')
      .requiredOption('--file <path>', 'ranges file (repeatable)', collect, [] as string[])
      .option('--block <path>', 'blocklist file (repeatable)', collect, [] as string[]),
    (_args, o: ScopeOpts & { file: string[]; block: string[] }) =>
      loadAllowRanges(o.file, { blockFiles: o.block, ...scope(o) }),
  );
  scoped(
    edge
      .command('steer')
      .description('foreground: SK_REUSEPORT steering for every listener on --port (Ctrl-C detaches)')
      .requiredOption('--port <n>', 'the SO_REUSEPORT port of the ingest workers')
      .option('--busy-pct <p>', 'skip a worker whose accept queue holds >= p % of its backlog', '50')
      .option('--interval-us <u>', 'queue-depth publishing interval', '1000'),
  ).action(async (o: ScopeOpts & { port: string; busyPct: string; intervalUs: string }) => {
    // The loader is the daemon; this process only forwards signals and its exit code.
    const args = [
      ...(o.pinRoot ? ['--pin-root', o.pinRoot] : []),
      'steer',
      '--port',
      o.port,
      '--busy-pct',
      o.busyPct,
      '--interval-us',
      o.intervalUs,
    ];
    const [cmd, argv] = o.netns
      ? ['ip', ['netns', 'exec', o.netns, EDGE_LOADER, ...args]]
      : [EDGE_LOADER, args];
    const child = spawn(cmd, argv, { stdio: 'inherit' });
    const forward = (sig: NodeJS.Signals) => child.kill(sig);
    process.on('SIGINT', forward);
    process.on('SIGTERM', forward);
    const code = await new Promise<number>((res) => {
      child.once('error', (err) => {
        process.stderr.write(`spillway edge: ${err.message}\n`);
        res(1);
      });
      child.once('exit', (c) => res(c ?? 1));
    });
    process.off('SIGINT', forward);
    process.off('SIGTERM', forward);
    process.exitCode = code;
  });
}
