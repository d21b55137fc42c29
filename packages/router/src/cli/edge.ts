// Not yet re-exported by @spillway/ingest's index.ts (the lead wires that); relative until then.
import {
  attachEdge,
  detachEdge,
  type EdgeMode,
  edgeStatus,
  loadAllowRanges,
  setEdgeMode,
} from '@spillway/ingest';
import type { Command } from 'commander';

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

/** `spillway edge attach|detach|status|mode|allow`: the kernel edge (docs/edge.md). Needs root. */
export function registerEdgeCommands(program: Command): void {
  const edge = program
    .command('edge')
    .description('kernel edge: XDP allowlist, drop tracer, reuseport steering (root)');
  edge
    .command('attach')
    .description('load and attach XDP on the given interfaces, and the drop tracer')
    .option('--dev <iface>', 'interface for XDP (repeatable)', collect, [] as string[])
    .option('--port <n>', 'ingest port (default SPILLWAY_INGEST_PORT or 8080)')
    .option('--mode <mode>', 'off | monitor | enforce')
    .option('--xdp-mode <m>', 'auto | skb | native', 'auto')
    .option('--no-trace', 'do not attach the drop tracer')
    .option('--pin-root <dir>', 'bpffs pin directory')
    .action(
      async (o: {
        dev: string[];
        port?: string;
        mode?: EdgeMode;
        xdpMode: 'auto' | 'skb' | 'native';
        trace: boolean;
        pinRoot?: string;
      }) => {
        const r = await attachEdge({
          devices: o.dev,
          port: o.port ? Number(o.port) : undefined,
          mode: o.mode,
          xdpMode: o.xdpMode,
          trace: o.trace,
          pinRoot: o.pinRoot,
        });
        finish(r, r.available ? r.status : null);
      },
    );
  edge
    .command('detach')
    .description('detach XDP (given interfaces, or everything incl. the tracer)')
    .option('--dev <iface>', 'interface (repeatable)', collect, [] as string[])
    .option('--purge', 'also remove the pinned maps (counters, ranges)')
    .option('--pin-root <dir>', 'bpffs pin directory')
    .action(async (o: { dev: string[]; purge?: boolean; pinRoot?: string }) => {
      const r = await detachEdge({ devices: o.dev, purge: o.purge, pinRoot: o.pinRoot });
      finish(r, r.available ? r.out : null);
    });
  edge
    .command('status')
    .description('attachments, mode, verdict counters, kernel drops, steering')
    .option('--pin-root <dir>', 'bpffs pin directory')
    .action(async (o: { pinRoot?: string }) => {
      const r = await edgeStatus({ pinRoot: o.pinRoot });
      finish(r, r.available ? r.status : null);
    });
  edge
    .command('mode <mode>')
    .description('off | monitor | enforce')
    .option('--pin-root <dir>', 'bpffs pin directory')
    .action(async (mode: EdgeMode, o: { pinRoot?: string }) => {
      const r = await setEdgeMode(mode, { pinRoot: o.pinRoot });
      finish(r, r.available ? r.out : null);
    });
  edge
    .command('allow')
    .description('load provider ranges (GitHub meta JSON, Stripe JSON, CIDR lines); atomic swap')
    .requiredOption('--file <path>', 'ranges file (repeatable)', collect, [] as string[])
    .option('--block <path>', 'blocklist file (repeatable)', collect, [] as string[])
    .option('--pin-root <dir>', 'bpffs pin directory')
    .action(async (o: { file: string[]; block: string[]; pinRoot?: string }) => {
      const r = await loadAllowRanges(o.file, { blockFiles: o.block, pinRoot: o.pinRoot });
      finish(r, r.available ? r.out : null);
    });
}
