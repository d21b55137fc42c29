import { type ChildProcess, execFileSync } from 'node:child_process';
// not (yet) re-exported by @spillway/ingest's door
import { startSteering } from '@spillway/ingest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildBpf, LOADER, ownedId, run, skipBpf, spawnReady, tcpExt } from '../../bpf/test/harness.ts';

// SK_REUSEPORT steering, measured by the kernel's own counter. In a network namespace of its own
// (so TcpExtListenOverflows counts only this test), two node:http workers listen on one port with
// reusePort; one is stopped (SIGSTOP: it never accepts, like a worker stuck in a long synchronous
// task) with a small backlog. The same paced burst of connections runs twice in the same run:
// with `spillway-edge steer` attached (the stalled worker's queue depth makes the program skip it)
// and after the daemon detached it (the kernel hash sends about half the burst to the stalled
// worker, whose queue overflows).
const id = ownedId(); // carries our pid: a later run sweeps what a killed one left
const NS = `spw-st-${id}`;
const BPFFS = `/run/spw-bpf-st-${id}`; // `ip netns exec` remounts /sys: pins live outside it
const PIN = `${BPFFS}/pins`;
const PORT = 19090;
const STALLED_BACKLOG = 32;
const BUSY_PCT = 25; // skip a worker whose accept queue holds >= 8 of its 32
const BURST = 300;

const inNs = (cmd: string[], timeoutMs = 15_000) => run('ip', ['netns', 'exec', NS, ...cmd], { timeoutMs });
const loader = (...args: string[]) => {
  const r = inNs([LOADER, '--pin-root', PIN, ...args]);
  if (r.code !== 0) throw new Error(`loader ${args.join(' ')}: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!);
};

const worker = (backlog: number) => `
const http = require('node:http');
const s = http.createServer((req, res) => res.end('ok'));
s.listen({ port: ${PORT}, host: '127.0.0.1', reusePort: true, backlog: ${backlog} }, () => console.log('ready ' + process.pid));
`;
// Opens BURST connections ~3 ms apart without waiting for the handshakes (a refused SYN would block
// a blocking connect for a second), holds them briefly, closes them. The pace leaves the steering
// daemon (which samples queue depths) room to fall ~70 ms behind on a loaded CI machine before the
// stalled worker's 24 free slots above the threshold fill; the hashed run overflows at any pace,
// since about half of the burst goes to a worker that never accepts.
const BURST_PY = `
import socket, time
cs = []
for i in range(${BURST}):
    c = socket.socket(); c.setblocking(False)
    try: c.connect(('127.0.0.1', ${PORT}))
    except BlockingIOError: pass
    cs.append(c)
    time.sleep(0.003)
time.sleep(0.2)
for c in cs: c.close()
print('done', flush=True)
`;

function burst(): number {
  const before = tcpExt(NS).ListenOverflows!;
  const r = inNs(['python3', '-c', BURST_PY]);
  if (r.stdout.trim() !== 'done') throw new Error(`burst failed: ${r.stderr}`);
  return tcpExt(NS).ListenOverflows! - before;
}

describe.skipIf(skipBpf)('edge: SK_REUSEPORT steering around a stalled ingest worker', () => {
  const children: ChildProcess[] = [];
  let stalled: ChildProcess;
  let workerPids: number[] = [];

  beforeAll(async () => {
    buildBpf();
    execFileSync('mkdir', ['-p', BPFFS]);
    execFileSync('mount', ['-t', 'bpf', 'bpf', BPFFS]);
    execFileSync('ip', ['netns', 'add', NS]);
    execFileSync('ip', ['-n', NS, 'link', 'set', 'lo', 'up']);
    const healthy = await spawnReady(
      'ip',
      ['netns', 'exec', NS, process.execPath, '-e', worker(511)],
      /^ready/,
    );
    children.push(healthy.child);
    const s = await spawnReady(
      'ip',
      ['netns', 'exec', NS, process.execPath, '-e', worker(STALLED_BACKLOG)],
      /^ready/,
    );
    children.push(s.child);
    stalled = s.child;
    workerPids = [healthy.child.pid!, s.child.pid!];
  });

  afterAll(() => {
    for (const c of children) c.kill('SIGKILL'); // also ends a stopped process
    run('ip', ['netns', 'exec', NS, LOADER, '--pin-root', PIN, 'detach', '--purge']);
    run('ip', ['netns', 'del', NS]);
    run('umount', [BPFFS]);
    run('rmdir', [BPFFS]);
  });

  it('keeps TcpExtListenOverflows flat with steering; default hashing (same run, detached) makes it rise', async () => {
    process.kill(stalled.pid!, 'SIGSTOP');
    const st0 = startSteering({ port: PORT, busyPct: BUSY_PCT, intervalUs: 200, pinRoot: PIN, netns: NS });
    if (!st0.available) throw new Error(st0.reason);
    const steering = st0.steering;
    children.push(steering.child);
    const slots = await steering.ready(2);
    expect(slots.map((w) => w.pid).sort()).toEqual(workerPids.sort());

    const steered = burst();
    const st = loader('dump').steer;

    await steering.stop(); // the daemon detaches the program from the group on its way out
    expect(steering.child.exitCode).toBe(0);
    expect(loader('dump').steer.enabled).toBe(false);

    const hashed = burst();
    console.log(
      `steering: TcpExtListenOverflows +${steered} over ${BURST} connections with steering, +${hashed} with default hashing (program detached); steered picks ${JSON.stringify(st.workersDetail)}, stats ${JSON.stringify(st.stats)}`,
    );

    expect(steered).toBe(0);
    expect(hashed).toBeGreaterThan(0);
    // the program did the work: it skipped the stalled worker once its queue was at the threshold,
    // and that queue never came near its backlog
    expect(st.stats.selected_skipped_busy).toBeGreaterThan(0);
    // every SYN of the burst got a socket from the program (a retransmitted SYN asks again)
    expect(st.stats.selected_hashed + st.stats.selected_skipped_busy).toBeGreaterThanOrEqual(BURST);
    expect(st.stats.fallback_all_busy + st.stats.select_error).toBe(0);
    const stalledSlot = st.workersDetail.find((w: { backlog: number }) => w.backlog === STALLED_BACKLOG);
    expect(stalledSlot.queue).toBeLessThan(STALLED_BACKLOG);
    expect(stalledSlot.picks).toBeGreaterThan(0);
  });
});
