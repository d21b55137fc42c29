/**
 * Kernel edge: how fast a SYN flood from addresses outside the allowlist is dropped by the XDP
 * allowlist (generic mode) compared with the kernel stack alone (RST from a closed port, listen
 * overflow, SYN cookies), on the same flood, and what CPU each costs. Root only.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildBpf, LOADER, ownedId, run, spawnReady } from '../../../bpf/test/harness.ts';
import { sleep } from '../../helpers/wait.ts';
import type { Goal, Row } from '../lib/report.ts';
import { perRound, roundsCell, spread, worstOf } from '../lib/spread.ts';
import type { Benchmark } from './types.ts';

const EDGE_DIR = fileURLToPath(new URL('../edge/', import.meta.url));
const SYNFLOOD = join(EDGE_DIR, 'build/synflood');
const PORT = 18443;
/** Kernel ticks in /proc/stat are USER_HZ (100/s on Linux): 10 ms each. */
const TICK_NS = 10_000_000;

type Mode = 'xdp' | 'xdp-trace' | 'rst' | 'overflow' | 'cookies';
const MODES: { key: Mode; label: string }[] = [
  { key: 'xdp', label: 'XDP allowlist, generic mode' },
  { key: 'xdp-trace', label: 'XDP allowlist + drop tracer' },
  { key: 'rst', label: 'stack: closed port (RST)' },
  { key: 'overflow', label: 'stack: listener full, syncookies off (drop)' },
  { key: 'cookies', label: 'stack: listener full, syncookies on' },
];

interface FloodOut {
  sent: number;
  seconds: number;
  pps: number;
  user_us: number;
  sys_us: number;
  send_errors: number;
}

interface Sample {
  sent: number;
  /** SYNs the receiving side disposed of: XDP drop verdicts, or TCP segments in for the stack. */
  handled: number;
  pps: number;
  softirqNs: number;
  senderNs: number;
  detail: string;
}

/** One CPU's line of /proc/stat: user nice system idle iowait irq softirq ... in USER_HZ ticks. */
function cpuTicks(cpu: number): { system: number; softirq: number; busy: number } {
  const line = readFileSync('/proc/stat', 'utf8')
    .split('\n')
    .find((l) => l.startsWith(`cpu${cpu} `));
  const v = (line ?? '').trim().split(/\s+/).slice(1).map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0] = v;
  return { system, softirq, busy: user + nice + system + irq + softirq };
}

/** /proc/net/snmp and /proc/net/netstat counters (Ip:, Tcp:, TcpExt:) of a network namespace. */
function netCounters(ns: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const file of ['/proc/net/snmp', '/proc/net/netstat']) {
    const r = run('ip', ['netns', 'exec', ns, 'cat', file]);
    if (r.code !== 0) throw new Error(`read ${file} in ${ns}: ${r.stderr.trim()}`);
    const lines = r.stdout.split('\n');
    for (let i = 0; i + 1 < lines.length; i += 2) {
      const names = lines[i]!.split(/\s+/);
      const vals = lines[i + 1]!.split(/\s+/);
      const group = names[0]!.replace(':', '');
      if (group !== 'Ip' && group !== 'Tcp' && group !== 'TcpExt') continue;
      names.slice(1).forEach((n, j) => {
        out[`${group}.${n}`] = Number(vals[j + 1]);
      });
    }
  }
  return out;
}

/** Why this machine cannot run the benchmark, or undefined when it can. */
function cannotRun(): string | undefined {
  if (process.getuid?.() !== 0)
    return 'needs root (network namespaces, veth, XDP): run `sudo pnpm bench --only edge`.';
  for (const t of ['ip', 'taskset', 'python3', 'cc'])
    if (run('sh', ['-c', `command -v ${t}`]).code !== 0) return `needs ${t} on PATH.`;
  return undefined;
}

export const edge: Benchmark = {
  name: 'edge',
  title: 'Kernel edge: XDP drop rate',
  method: `Root only (skipped with a one-line reason otherwise). Two network namespaces created for the run, joined by a veth pair: the "host" end (10.203.0.1, where XDP and the listener live; a namespace of its own, so nothing in the machine's own network namespace changes) and the flood end (10.203.0.2). This kernel has no pktgen (\`CONFIG_NET_PKTGEN\` is not set), so the flood comes from \`test/bench/edge/synflood.c\` (built by \`test/bench/edge/build.sh\`): prebuilt IPv4 SYN frames, 64 Ki distinct sources in 10.204.0.0/16 (not on the allowlist, which holds only 10.203.0.0/24) to port ${PORT}, sent with sendmmsg on an AF_PACKET socket bound to the flood end only, bounded by count and time (3 000 000 frames or 5 s; \`--quick\` 1 000 000 or 2 s), pinned to the last CPU. The host end routes 10.204.0.0/16 back through the veth, so every SYN-ACK and RST the stack sends is really sent (the flood end discards it, not its address: its Ip InAddrErrors are in the notes). The same flood against five receivers, each round (3; \`--quick\` 2) in this order: the XDP allowlist (\`spillway-edge attach --xdp-mode skb --mode enforce --no-trace\`), the same plus the drop tracer (the default attach), and the stack with no XDP: a closed port (RST per SYN), a listener with backlog 8 that never accepts with \`tcp_syncookies=0\` (listen overflow drops) and with \`tcp_syncookies=1\` (SYN cookies: a SYN-ACK per SYN). "handled" = XDP drop verdicts (\`drop_not_allowed\`), or the namespace's Tcp InSegs for the stack. CPU: the veth hands each frame to the receiving namespace in NET_RX softirq on the sending CPU, so the pinned CPU's softirq ticks in /proc/stat (10 ms each; the CPU's softirq rate in the second before the flood is subtracted) ÷ handled = what one SYN costs the receiver; "sender CPU" is the sender's getrusage (this kernel has no IRQ time accounting, so it includes the softirq work run on its way out of the syscall). Drop capacity per core = 1 s ÷ softirq CPU per SYN: the rate a core given only this work would sustain. The measured pps is bounded by the single sender core (it pays for sending and, inline, for receiving), so the capacity ratio carries the verdict and the measured ratio is printed next to it. Verdicts use the worst round.`,
  targets: [
    'The XDP allowlist drops non-provider SYNs at ≥ 5 × the rate the kernel stack disposes of them (RST or listen overflow), per core, in generic mode (worst round).',
  ],
  async run({ quick, rounds, log, round }) {
    const why = cannotRun();
    if (why) return { status: 'skipped', columns: [], rows: [], goals: [], notes: [`skipped: ${why}`] };
    buildBpf();
    execFileSync('bash', [join(EDGE_DIR, 'build.sh')], { stdio: 'inherit' });
    const check = run(LOADER, ['check']);
    if (check.code !== 0)
      return {
        status: 'skipped',
        columns: [],
        rows: [],
        goals: [],
        notes: [`skipped: spillway-edge check exited ${check.code}: ${check.stderr.trim().split('\n')[0]}`],
      };

    const count = quick ? 1_000_000 : 3_000_000;
    const seconds = quick ? 2 : 5;
    const cpu = cpus().length - 1;
    const id = ownedId(); // carries our pid: bpf/test/harness.ts sweepStale() removes what a killed run left
    const H = `spw-bh-${id}`;
    const G = `spw-bg-${id}`;
    const vH = `spwbh${id}`.slice(0, 15);
    const vG = `spwbg${id}`.slice(0, 15);
    const BPFFS = `/run/spw-bpf-bench-${id}`;
    const PIN = `${BPFFS}/pins`;
    const dir = mkdtempSync(join(tmpdir(), 'spw-edge-'));
    const allow = join(dir, 'allow.txt');
    writeFileSync(allow, '10.203.0.0/24\n');
    const sh = (args: string[]) => {
      const r = run('ip', args);
      if (r.code !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr.trim()}`);
      return r.stdout;
    };
    const inH = (cmd: string[]) => run('ip', ['netns', 'exec', H, ...cmd], { timeoutMs: 20_000 });
    const loader = (...args: string[]) => {
      const r = inH([LOADER, '--pin-root', PIN, ...args]);
      if (r.code !== 0) throw new Error(`spillway-edge ${args[0]}: ${r.stderr.trim()}`);
      return JSON.parse(r.stdout.trim().split('\n').pop()!);
    };
    const sysctl = (kv: string) => {
      const r = inH(['sysctl', '-q', '-w', kv]);
      if (r.code !== 0) throw new Error(`sysctl ${kv}: ${r.stderr.trim()}`);
    };

    const samples: Record<Mode, (Sample | undefined)[]> = {
      xdp: [],
      'xdp-trace': [],
      rst: [],
      overflow: [],
      cookies: [],
    };
    const notes: string[] = [];
    try {
      execFileSync('mkdir', ['-p', BPFFS]);
      execFileSync('mount', ['-t', 'bpf', 'bpf', BPFFS]);
      sh(['netns', 'add', H]);
      sh(['netns', 'add', G]);
      sh(['link', 'add', vH, 'netns', H, 'type', 'veth', 'peer', 'name', vG, 'netns', G]);
      sh(['-n', H, 'addr', 'add', '10.203.0.1/24', 'dev', vH]);
      sh(['-n', G, 'addr', 'add', '10.203.0.2/24', 'dev', vG]);
      for (const [ns, dev] of [
        [H, vH],
        [G, vG],
      ] as const) {
        sh(['-n', ns, 'link', 'set', dev, 'up']);
        sh(['-n', ns, 'link', 'set', 'lo', 'up']);
      }
      sh(['-n', H, 'route', 'add', '10.204.0.0/16', 'via', '10.203.0.2']);
      const mac = (ns: string, dev: string) =>
        (JSON.parse(sh(['-n', ns, '-j', 'link', 'show', dev])) as { address: string }[])[0]!.address;
      const hMac = mac(H, vH);
      const gMac = mac(G, vG);
      // The host end learns the flood end's MAC before the flood, so replies do not wait on ARP.
      run('ip', ['netns', 'exec', H, 'ping', '-c', '1', '-W', '1', '10.203.0.2']);

      const flood = (): FloodOut => {
        const r = run(
          'taskset',
          [
            '-c',
            String(cpu),
            'ip',
            'netns',
            'exec',
            G,
            SYNFLOOD,
            '--dev',
            vG,
            '--src-mac',
            gMac,
            '--dst-mac',
            hMac,
            '--src-net',
            '10.204.0.0',
            '--dst',
            '10.203.0.1',
            '--dport',
            String(PORT),
            '--count',
            String(count),
            '--seconds',
            String(seconds),
          ],
          { timeoutMs: (seconds + 20) * 1000 },
        );
        if (r.code !== 0) throw new Error(`synflood exited ${r.code}: ${r.stderr.trim()}`);
        return JSON.parse(r.stdout.trim().split('\n').pop()!) as FloodOut;
      };

      const measure = async (mode: Mode): Promise<Sample> => {
        let listener: Awaited<ReturnType<typeof spawnReady>>['child'] | undefined;
        try {
          if (mode === 'xdp' || mode === 'xdp-trace') {
            loader(
              'attach',
              '--dev',
              vH,
              '--port',
              String(PORT),
              '--mode',
              'enforce',
              '--xdp-mode',
              'skb',
              ...(mode === 'xdp' ? ['--no-trace'] : []),
            );
            loader('ranges', '--allow', allow);
          }
          if (mode === 'overflow' || mode === 'cookies') {
            sysctl(`net.ipv4.tcp_syncookies=${mode === 'cookies' ? 1 : 0}`);
            listener = (
              await spawnReady(
                'ip',
                [
                  'netns',
                  'exec',
                  H,
                  'python3',
                  '-c',
                  `import socket,time\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('10.203.0.1',${PORT}));s.listen(8);print('ready',flush=True);time.sleep(120)`,
                ],
                /ready/,
              )
            ).child;
          }
          // Other work on this CPU: its softirq rate just before the flood is subtracted.
          const idle0 = cpuTicks(cpu);
          await sleep(1000);
          const idle1 = cpuTicks(cpu);
          const noisePerS = idle1.softirq - idle0.softirq;
          const x0 = mode.startsWith('xdp') ? loader('dump').xdp.verdicts : undefined;
          const n0 = netCounters(H);
          const g0 = netCounters(G);
          const c0 = cpuTicks(cpu);
          const f = flood();
          const c1 = cpuTicks(cpu);
          // Replies queued by the flood's last SYNs finish within a tick or two.
          await sleep(200);
          const n1 = netCounters(H);
          const g1 = netCounters(G);
          const x1 = mode.startsWith('xdp') ? loader('dump').xdp.verdicts : undefined;
          const d = (k: string) => (n1[k] ?? 0) - (n0[k] ?? 0);
          const handled = x0 && x1 ? x1.drop_not_allowed - x0.drop_not_allowed : d('Tcp.InSegs');
          const softTicks = Math.max(0, c1.softirq - c0.softirq - noisePerS * f.seconds);
          const detail = x0
            ? `passed to the stack: ${d('Tcp.InSegs')} segments`
            : `RSTs ${d('Tcp.OutRsts')}, listen overflows ${d('TcpExt.ListenOverflows')}, listen drops ${d('TcpExt.ListenDrops')}, req-queue-full drops ${d('TcpExt.TCPReqQFullDrop')}, cookies sent ${d('TcpExt.SyncookiesSent')}; replies discarded at the flood end (Ip InAddrErrors) ${(g1['Ip.InAddrErrors'] ?? 0) - (g0['Ip.InAddrErrors'] ?? 0)}`;
          return {
            sent: f.sent,
            handled,
            pps: handled / f.seconds,
            softirqNs: handled ? (softTicks * TICK_NS) / handled : Number.NaN,
            senderNs: ((f.user_us + f.sys_us) * 1000) / f.sent,
            detail: `${detail}; sender ${f.pps.toFixed(0)} frames/s, ${f.send_errors} send retries; other softirq on cpu${cpu} before: ${noisePerS} ticks/s`,
          };
        } finally {
          listener?.kill('SIGKILL');
          if (mode.startsWith('xdp')) loader('detach', '--purge');
          if (mode === 'overflow') sysctl('net.ipv4.tcp_syncookies=1');
        }
      };

      for (let r = 1; r <= rounds; r++) {
        round(r);
        for (const m of MODES) {
          try {
            const s = await measure(m.key);
            samples[m.key].push(s);
            log(
              `round ${r} ${m.label}: sent ${s.sent}, handled ${s.handled} (${s.pps.toFixed(0)}/s), softirq ${s.softirqNs.toFixed(0)} ns/SYN, sender ${s.senderNs.toFixed(0)} ns/frame; ${s.detail}`,
            );
          } catch (err) {
            samples[m.key].push(undefined);
            const msg = (err as Error).message.split('\n')[0];
            notes.push(`${m.label}, round ${r}: ${msg}`);
            log(`round ${r} ${m.label}: failed: ${msg}`);
          }
        }
      }
    } finally {
      run('ip', ['netns', 'exec', H, LOADER, '--pin-root', PIN, 'detach', '--purge']);
      run('ip', ['netns', 'del', H]);
      run('ip', ['netns', 'del', G]);
      run('umount', [BPFFS]);
      run('rmdir', [BPFFS]);
      rmSync(dir, { recursive: true, force: true });
    }

    const pps = (m: Mode) => samples[m].map((s) => s?.pps);
    const soft = (m: Mode) => samples[m].map((s) => s?.softirqNs);
    const capacity = (m: Mode) => soft(m).map((ns) => (ns && Number.isFinite(ns) ? 1e9 / ns : undefined));
    const rows: Row[] = MODES.map((m) => {
      const p = spread(pps(m.key), 'higher');
      const s = spread(soft(m.key), 'lower');
      const cap = spread(capacity(m.key), 'higher');
      const snd = spread(
        samples[m.key].map((x) => x?.senderNs),
        'lower',
      );
      const handled = samples[m.key].reduce((a, x) => a + (x?.handled ?? 0), 0);
      const sent = samples[m.key].reduce((a, x) => a + (x?.sent ?? 0), 0);
      return {
        label: m.label,
        values: {
          pps: p?.median,
          ppsWorst: p?.worst,
          soft: s?.median,
          softWorst: s?.worst,
          cap: cap?.median,
          capWorst: cap?.worst,
          sender: snd?.median,
          handled: `${handled.toLocaleString('en-US')}/${sent.toLocaleString('en-US')}`,
          rounds: roundsCell(pps(m.key)),
        },
      };
    });
    for (const m of MODES) {
      const last = samples[m.key].findLast((x) => x !== undefined);
      if (last) notes.push(`${m.label}, last round: ${last.detail}.`);
    }
    const goals: Goal[] = [];
    for (const stack of ['rst', 'overflow', 'cookies'] as const) {
      const label = MODES.find((m) => m.key === stack)!.label;
      const capRatio = spread(perRound(capacity('xdp'), capacity(stack)), 'higher');
      goals.push({
        what: `XDP drop capacity per core ÷ ${label} (softirq CPU per SYN, ${worstOf(capRatio, quick)})`,
        target: '≥ 5.00',
        measured: capRatio?.worst,
        shown: capRatio
          ? `worst ${capRatio.worst.toFixed(2)}, median ${capRatio.median.toFixed(2)}`
          : undefined,
        pass: capRatio === undefined ? undefined : capRatio.worst >= 5,
      });
      const ppsRatio = spread(perRound(pps('xdp'), pps(stack)), 'higher');
      if (ppsRatio)
        notes.push(
          `measured pps, XDP ÷ ${label}: worst ${ppsRatio.worst.toFixed(2)}, median ${ppsRatio.median.toFixed(2)} (one sender core, which also runs the receive softirq inline: this ratio is bounded by the sender's own cost per frame).`,
        );
    }
    return {
      status: MODES.every((m) => samples[m.key].some((x) => x)) ? 'ok' : 'partial',
      columns: [
        { key: 'pps', header: 'handled SYN/s median' },
        { key: 'ppsWorst', header: 'worst' },
        { key: 'soft', header: 'softirq ns/SYN median' },
        { key: 'softWorst', header: 'worst' },
        { key: 'cap', header: 'capacity SYN/s/core median' },
        { key: 'capWorst', header: 'worst' },
        { key: 'sender', header: 'sender CPU ns/frame' },
        { key: 'handled', header: 'handled/sent' },
        { key: 'rounds', header: 'SYN/s per round' },
      ],
      rows,
      goals,
      notes,
      chart: { key: 'cap', unit: 'SYNs disposed of per second per core, median (higher is better)' },
    };
  },
};
