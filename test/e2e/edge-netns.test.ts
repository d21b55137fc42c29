import { type ChildProcess, execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BPF_DIR, buildBpf, LOADER, ownedId, run, skipBpf, spawnReady } from '../../bpf/test/harness.ts';

// Two network namespaces joined by a veth pair: XDP on the server side in generic mode, the
// allowlist from bpf/test/fixtures/allow.txt (10.200.1.0/24 allowed, 10.200.2.0/24 not).
const id = ownedId(); // carries our pid: a later run sweeps what a killed one left
const S = `spw-s-${id}`;
const C = `spw-c-${id}`;
const vS = `spws${id}`.slice(0, 15);
const vC = `spwc${id}`.slice(0, 15);
// `ip netns exec` remounts /sys, so pins live on a bpffs mounted outside it
const BPFFS = `/run/spw-bpf-${id}`;
const PIN = `${BPFFS}/pins`;
const PORT = 18080;

const sh = (args: string[]) => execFileSync('ip', args, { stdio: 'pipe' });
const inNs = (ns: string, cmd: string[], timeoutMs = 10_000) =>
  run('ip', ['netns', 'exec', ns, ...cmd], { timeoutMs });
const loader = (...args: string[]) => {
  const r = inNs(S, [LOADER, '--pin-root', PIN, ...args]);
  if (r.code !== 0) throw new Error(`loader ${args.join(' ')}: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!);
};
const dump = () => loader('dump');

const SERVER = `
import http.server, socketserver
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get('content-length', 0)); body = self.rfile.read(n)
        self.send_response(200); self.end_headers(); self.wfile.write(b'got ' + body)
    def log_message(self, *a): pass
socketserver.TCPServer.allow_reuse_address = True
s = socketserver.TCPServer(('0.0.0.0', ${PORT}), H); print('ready', flush=True); s.serve_forever()
`;
// POST from a chosen source address; reads to EOF (the response may arrive in one segment or
// several) and prints the status line and body, or the error.
const client = (src: string, timeout: number) => `
import socket, sys
s = socket.socket(); s.bind(('${src}', 0)); s.settimeout(${timeout})
try:
    s.connect(('10.200.1.1', ${PORT}))
    s.sendall(b'POST /ingest/x HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 5\\r\\nConnection: close\\r\\n\\r\\nhello')
    data = b''
    while True:
        chunk = s.recv(4096)
        if not chunk: break
        data += chunk
    head, _, body = data.decode().partition('\\r\\n\\r\\n')
    print(head.split('\\r\\n')[0] + ' | ' + body)
except Exception as e:
    print('ERR ' + type(e).__name__)
`;

describe.skipIf(skipBpf)('edge: XDP allowlist and drop tracer in network namespaces', () => {
  let server: ChildProcess | undefined;

  beforeAll(() => {
    buildBpf();
    execFileSync('mkdir', ['-p', BPFFS]);
    execFileSync('mount', ['-t', 'bpf', 'bpf', BPFFS]);
    sh(['netns', 'add', S]);
    sh(['netns', 'add', C]);
    sh(['link', 'add', vS, 'netns', S, 'type', 'veth', 'peer', 'name', vC, 'netns', C]);
    for (const [ns, dev, a, b] of [
      [S, vS, '10.200.1.1/24', '10.200.2.1/24'],
      [C, vC, '10.200.1.2/24', '10.200.2.2/24'],
    ] as const) {
      sh(['-n', ns, 'addr', 'add', a, 'dev', dev]);
      sh(['-n', ns, 'addr', 'add', b, 'dev', dev]);
      sh(['-n', ns, 'link', 'set', dev, 'up']);
      sh(['-n', ns, 'link', 'set', 'lo', 'up']);
    }
    loader('attach', '--dev', vS, '--port', String(PORT), '--mode', 'enforce', '--xdp-mode', 'skb');
    loader('ranges', '--allow', join(BPF_DIR, 'test/fixtures/allow.txt'));
  });

  afterAll(() => {
    server?.kill('SIGKILL');
    run('ip', ['netns', 'exec', S, LOADER, '--pin-root', PIN, 'detach', '--purge']);
    run('ip', ['netns', 'del', S]);
    run('ip', ['netns', 'del', C]);
    run('umount', [BPFFS]);
    run('rmdir', [BPFFS]);
  });

  it('enforce: the allowed client completes a POST, the refused one gets no SYN-ACK', async () => {
    server = (await spawnReady('ip', ['netns', 'exec', S, 'python3', '-c', SERVER], /ready/)).child;
    const before = dump().xdp.verdicts;
    const ok = inNs(C, ['python3', '-c', client('10.200.1.2', 3)]);
    expect(ok.stdout).toMatch(/^HTTP\/1\.0 200 OK \| got hello/);
    const refused = inNs(C, ['python3', '-c', client('10.200.2.2', 1.5)]);
    expect(refused.stdout.trim()).toBe('ERR TimeoutError');
    const after = dump().xdp.verdicts;
    expect(after.allowed - before.allowed).toBeGreaterThanOrEqual(3); // SYN, ACK, data...
    expect(after.drop_not_allowed - before.drop_not_allowed).toBeGreaterThanOrEqual(1);
  });

  it('monitor: the refused client gets through and is counted', () => {
    loader('mode', 'monitor');
    const before = dump().xdp.verdicts;
    const r = inNs(C, ['python3', '-c', client('10.200.2.2', 3)]);
    expect(r.stdout).toMatch(/^HTTP\/1\.0 200 OK/);
    const after = dump().xdp.verdicts;
    expect(after.monitor_not_allowed - before.monitor_not_allowed).toBeGreaterThanOrEqual(3);
    expect(after.drop_not_allowed).toBe(before.drop_not_allowed);
    loader('mode', 'enforce');
  });

  it('an accept-queue overflow shows up in the drop tracer with its reason and a SYN-retry gap', async () => {
    // The stalled listener takes the same port: wait until the HTTP server is gone.
    if (server && server.exitCode === null && server.signalCode === null) {
      const gone = new Promise((r) => server!.once('exit', r));
      server.kill('SIGKILL');
      await gone;
    }
    const stalled = await spawnReady(
      'ip',
      [
        'netns',
        'exec',
        S,
        'python3',
        '-c',
        `import socket,time\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('0.0.0.0',${PORT}));s.listen(1);print('ready',flush=True);time.sleep(30)`,
      ],
      /ready/,
    );
    try {
      const before = dump();
      // 8 connects from an allowed source against a backlog of 1 that is never accepted; wait past
      // the first SYN retransmission (~1 s)
      inNs(C, [
        'python3',
        '-c',
        `import socket,time\ncs=[]\nfor i in range(8):\n  c=socket.socket();c.bind(('10.200.1.2',0));c.setblocking(False)\n  try: c.connect(('10.200.1.1',${PORT}))\n  except BlockingIOError: pass\n  cs.append(c)\ntime.sleep(1.6)`,
      ]);
      const after = dump();
      const reasons = (d: typeof after) => d.trace.dropsByReason.TCP_LISTEN_OVERFLOW ?? 0;
      const kernel = after.netstat.ListenOverflows - before.netstat.ListenOverflows;
      const traced = reasons(after) - reasons(before);
      const gaps = after.trace.synRetryGap.count - before.trace.synRetryGap.count;
      console.log(
        `overflow: kernel ListenOverflows +${kernel}, traced TCP_LISTEN_OVERFLOW +${traced}, SYN retries +${gaps}`,
      );
      expect(kernel).toBeGreaterThan(0);
      expect(traced).toBeGreaterThan(0);
      expect(after.trace.listenOverflows.syn - before.trace.listenOverflows.syn).toBe(traced);
      expect(gaps).toBeGreaterThan(0);
      // every retransmission is the first one, ~1 s after its SYN (initial SYN RTO = 1 s): it lands
      // in the [512, 1024) or [1024, 2048) ms bucket (timer slack can put it either side of 1024)
      const bucket = (d: typeof after, le: number) =>
        d.trace.synRetryGap.bucketsMs.find(([b]: [number, number]) => b === le)![1];
      const nearOneSecond = (d: typeof after) => bucket(d, 1024) + bucket(d, 2048);
      expect(nearOneSecond(after) - nearOneSecond(before)).toBe(gaps);
      const meanMs = (after.trace.synRetryGap.sumMs - before.trace.synRetryGap.sumMs) / gaps;
      expect(meanMs).toBeGreaterThan(900);
      expect(meanMs).toBeLessThan(2048);
    } finally {
      stalled.child.kill('SIGKILL');
    }
  });
});
