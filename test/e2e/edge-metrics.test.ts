import { type ChildProcess, execFileSync } from 'node:child_process';
import { attachEdge, registerKernelDropMetrics } from '@spillway/ingest';
import { registry } from '@spillway/shared';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildBpf, LOADER, ownedId, run, skipBpf, spawnReady, tcpExt } from '../../bpf/test/harness.ts';
import { synRetryGapValues } from '../../packages/ingest/src/edge.ts';

// registerKernelDropMetrics end to end: a real overflow of a never-accepting listener in a network
// namespace (XDP + tracer attached there), then a scrape of the registry. The metrics must show the
// kernel's own numbers: the traced overflows equal TcpExtListenOverflows, the SYN-retry gap
// histogram is a well-formed cumulative histogram around the 1 s initial SYN RTO.
const id = ownedId(); // carries our pid: a later run sweeps what a killed one left
const S = `spw-ms-${id}`;
const C = `spw-mc-${id}`;
const vS = `spwms${id}`.slice(0, 15);
const vC = `spwmc${id}`.slice(0, 15);
const BPFFS = `/run/spw-bpf-m-${id}`;
const PIN = `${BPFFS}/pins`;
const PORT = 18181; // not the netns suite's port: the kfree_skb tracer filters by port only

const ip = (args: string[]) => execFileSync('ip', args, { stdio: 'pipe' });

/** Parses Prometheus text into `name{labels}` → value. */
function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

describe('edge: SYN-retry gap histogram lines', () => {
  it('turns the kernel log2-ms buckets into cumulative seconds buckets with +Inf = _count', () => {
    // kernel buckets: [<1ms]=1, [1,2)=0, [2,4)=2, last (catch-all)=1
    const v = synRetryGapValues(
      {
        sumMs: 1500,
        bucketsMs: [
          [1, 1],
          [2, 0],
          [4, 2],
          [8, 1],
        ],
      },
      'g',
    );
    expect(v).toEqual([
      { metricName: 'g_bucket', labels: { le: 0.001 }, value: 1 },
      { metricName: 'g_bucket', labels: { le: 0.002 }, value: 1 },
      { metricName: 'g_bucket', labels: { le: 0.004 }, value: 3 },
      { metricName: 'g_bucket', labels: { le: '+Inf' }, value: 4 },
      { metricName: 'g_sum', labels: {}, value: 1.5 },
      { metricName: 'g_count', labels: {}, value: 4 },
    ]);
  });
});

describe.skipIf(skipBpf)('edge: kernel drop metrics on a registry after an induced overflow', () => {
  let stalled: ChildProcess | undefined;

  beforeAll(() => {
    buildBpf();
    execFileSync('mkdir', ['-p', BPFFS]);
    execFileSync('mount', ['-t', 'bpf', 'bpf', BPFFS]);
    ip(['netns', 'add', S]);
    ip(['netns', 'add', C]);
    ip(['link', 'add', vS, 'netns', S, 'type', 'veth', 'peer', 'name', vC, 'netns', C]);
    ip(['-n', S, 'addr', 'add', '10.201.1.1/24', 'dev', vS]);
    ip(['-n', C, 'addr', 'add', '10.201.1.2/24', 'dev', vC]);
    for (const [ns, dev] of [
      [S, vS],
      [C, vC],
    ] as const) {
      ip(['-n', ns, 'link', 'set', dev, 'up']);
      ip(['-n', ns, 'link', 'set', 'lo', 'up']);
    }
  });

  afterAll(() => {
    stalled?.kill('SIGKILL');
    run('ip', ['netns', 'exec', S, LOADER, '--pin-root', PIN, 'detach', '--purge']);
    run('ip', ['netns', 'del', S]);
    run('ip', ['netns', 'del', C]);
    run('umount', [BPFFS]);
    run('rmdir', [BPFFS]);
  });

  it('a scrape shows the overflow by reason, equal to TcpExtListenOverflows, and the SYN-retry gap histogram', async () => {
    // the process-wide registry, as the ingest role uses it (each test file runs in its own process)
    // cacheMs 0: this test reads the counters before and after the overflow, seconds apart.
    registerKernelDropMetrics(registry, { pinRoot: PIN, netns: S, cacheMs: 0 });
    // before anything is attached: the loader answers, no edge maps yet, so only the netns counter
    const empty = samples(await registry.metrics());
    expect(empty.get('spillway_listen_overflows_total{source="netns"}')).toBe(0);
    expect([...empty.keys()].filter((k) => k.startsWith('spillway_kernel_drops_total'))).toEqual([]);

    const att = await attachEdge({
      devices: [vS],
      port: PORT,
      mode: 'monitor',
      xdpMode: 'skb',
      pinRoot: PIN,
      netns: S,
    });
    expect(att.available, JSON.stringify(att)).toBe(true);

    stalled = (
      await spawnReady(
        'ip',
        [
          'netns',
          'exec',
          S,
          'python3',
          '-c',
          `import socket,time\ns=socket.socket();s.bind(('0.0.0.0',${PORT}));s.listen(1);print('ready',flush=True);time.sleep(30)`,
        ],
        /ready/,
      )
    ).child;
    // 6 connects 20 ms apart (each handshake completes before the next SYN, so every overflow is a
    // refused SYN) against a backlog of 1 that is never accepted; then wait past the first SYN
    // retransmission (initial RTO 1 s)
    const r = run('ip', [
      'netns',
      'exec',
      C,
      'python3',
      '-c',
      `import socket,time\ncs=[]\nfor i in range(6):\n  c=socket.socket();c.setblocking(False)\n  try: c.connect(('10.201.1.1',${PORT}))\n  except BlockingIOError: pass\n  cs.append(c); time.sleep(0.02)\ntime.sleep(1.5)\nprint('done')`,
    ]);
    expect(r.stdout.trim(), r.stderr).toBe('done');

    const kernel = tcpExt(S).ListenOverflows!;
    const text = await registry.metrics();
    const m = samples(text);
    console.log(
      `metrics: kernel TcpExtListenOverflows ${kernel}\n${text
        .split('\n')
        .filter((l) => /overflow|OVERFLOW|gap_seconds_(count|sum)|le="(1.024|2.048)"/.test(l))
        .join('\n')}`,
    );

    expect(kernel).toBeGreaterThan(0);
    expect(m.get('spillway_kernel_drops_total{reason="TCP_LISTEN_OVERFLOW"}')).toBe(kernel);
    expect(m.get('spillway_listen_overflows_total{source="ingest_port"}')).toBe(kernel);
    expect(m.get('spillway_listen_overflows_total{source="netns"}')).toBe(kernel);
    expect(m.get('spillway_edge_xdp_packets_total{verdict="no_allowlist"}')).toBeGreaterThan(0);

    const g = 'spillway_kernel_syn_retry_gap_seconds';
    const count = m.get(`${g}_count`)!;
    expect(count).toBeGreaterThan(0);
    expect(m.get(`${g}_bucket{le="+Inf"}`)).toBe(count);
    // the first retransmissions, ~1 s after their SYN: nothing below 0.512 s, all by 2.048 s
    expect(m.get(`${g}_bucket{le="0.512"}`)).toBe(0);
    expect(m.get(`${g}_bucket{le="2.048"}`)).toBe(count);
    expect(m.get(`${g}_sum`)! / count).toBeGreaterThan(0.9);
    expect(m.get(`${g}_sum`)! / count).toBeLessThan(2.048);
    // cumulative buckets never decrease
    const les = [...m.entries()].filter(([k]) => k.startsWith(`${g}_bucket`)).map(([, v]) => v);
    expect(les).toEqual([...les].sort((a, b) => a - b));
  });
});
