/**
 * Shared plumbing for the test/e2e/edge-*.test.ts suites: builds bpf/ once, runs the C runners and
 * the loader, manages network namespaces. Lives under bpf/ because it is bpf/'s test harness.
 * These suites need root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN); they are skipped only when
 * SPILLWAY_SKIP_BPF=1 is set explicitly, never silently.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const BPF_DIR = join(dirname(fileURLToPath(import.meta.url)), '..');
export const BUILD = join(BPF_DIR, '.build');
export const LOADER = join(BUILD, 'spillway-edge');
export const skipBpf = process.env.SPILLWAY_SKIP_BPF === '1';

/**
 * An id for the kernel objects a suite creates (network namespaces `spw-<kind>-<id>`, bpffs mounts
 * `/run/spw-bpf-[<kind>-]<id>`): it carries this process's pid, so that a later run can tell what a
 * killed run left behind from what a running one still uses. 10 characters at most (veth names).
 */
export function ownedId(): string {
  return `${process.pid.toString(36)}x${randomBytes(2).toString('hex')}`;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Removes what edge suites of dead processes left (a killed test run never reaches afterAll): their
 * network namespaces with every process still in them, and their bpffs mounts — unmounting drops
 * the pins, and with them the XDP/tracer links and maps.
 */
export function sweepStale(): void {
  const owner = (name: string, re: RegExp) => {
    const m = re.exec(name);
    return m ? Number.parseInt(m[1]!, 36) : undefined;
  };
  const list = run('ip', ['netns', 'list']);
  for (const line of list.stdout.split('\n')) {
    const name = line.split(' ')[0] ?? '';
    const pid = owner(name, /^spw-[a-z]+-([0-9a-z]+)x[0-9a-f]{4}$/);
    if (pid === undefined || alive(pid)) continue;
    for (const p of run('ip', ['netns', 'pids', name]).stdout.split('\n').filter(Boolean)) run('kill', ['-9', p]);
    run('ip', ['netns', 'del', name]);
  }
  for (const name of readdirSync('/run')) {
    const pid = owner(name, /^spw-bpf-(?:[a-z]+-)?([0-9a-z]+)x[0-9a-f]{4}$/);
    if (pid === undefined || alive(pid)) continue;
    run('umount', [`/run/${name}`]);
    run('rmdir', [`/run/${name}`]);
  }
}

let built = false;
/**
 * Runs bpf/build.sh (quick when up to date), makes sure bpffs and tracefs are mounted, and sweeps
 * what killed runs left behind.
 */
export function buildBpf(): void {
  if (built) return;
  sweepStale();
  execFileSync(join(BPF_DIR, 'build.sh'), { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, SPILLWAY_BPF_REQUIRED: '1' } });
  ensureMounts();
  built = true;
}

export function ensureMounts(): void {
  const mounts = execFileSync('cat', ['/proc/mounts'], { encoding: 'utf8' });
  if (!/ \/sys\/fs\/bpf bpf /.test(mounts)) execFileSync('mount', ['-t', 'bpf', 'bpf', '/sys/fs/bpf']);
  if (!/ \/sys\/kernel\/tracing tracefs /.test(mounts)) {
    if (!existsSync('/sys/kernel/tracing')) mkdirSync('/sys/kernel/tracing', { recursive: true });
    execFileSync('mount', ['-t', 'tracefs', 'tracefs', '/sys/kernel/tracing']);
  }
}

/** Parses the JSON-lines output of a runner. */
export function jsonLines(out: string): Record<string, unknown>[] {
  return out
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** Runs a command, returning stdout and the exit status without throwing. */
export function run(cmd: string, args: string[], opts: { timeoutMs?: number; input?: string } = {}): { code: number; stdout: string; stderr: string } {
  try {
    const stdout = execFileSync(cmd, args, { encoding: 'utf8', timeout: opts.timeoutMs ?? 20_000, input: opts.input, stdio: ['pipe', 'pipe', 'pipe'] });
    return { code: 0, stdout, stderr: '' };
  } catch (e) {
    const err = e as { status?: number; stdout?: string; stderr?: string };
    return { code: err.status ?? -1, stdout: err.stdout ?? '', stderr: err.stderr ?? String(e) };
  }
}

/** Spawns a long-running helper and resolves once it prints a line matching `ready`. */
export function spawnReady(cmd: string, args: string[], ready: RegExp, timeoutMs = 5_000): Promise<{ child: ChildProcess; line: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let buf = '';
    let errBuf = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${cmd} ${args.join(' ')}: not ready after ${timeoutMs} ms; stderr: ${errBuf}`));
    }, timeoutMs);
    child.stderr!.on('data', (d: Buffer) => (errBuf += d.toString()));
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      const line = buf.split('\n').find((l) => ready.test(l));
      if (line) {
        clearTimeout(timer);
        resolve({ child, line });
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${cmd} exited ${code} before ready; stderr: ${errBuf}`));
    });
  });
}

/** The kernel's TcpExt counters (what `nstat` shows) of network namespace `ns`. */
export function tcpExt(ns: string): Record<string, number> {
  const r = run('ip', ['netns', 'exec', ns, 'cat', '/proc/net/netstat']);
  if (r.code !== 0) throw new Error(`read /proc/net/netstat in ${ns}: ${r.stderr}`);
  const lines = r.stdout.split('\n').filter((l) => l.startsWith('TcpExt:'));
  const names = lines[0]!.split(/\s+/).slice(1);
  const vals = lines[1]!.split(/\s+/).slice(1);
  return Object.fromEntries(names.map((n, i) => [n, Number(vals[i])]));
}

/** Waits for a child to exit (resolves at once when it already has). */
export function exited(child: ChildProcess, timeoutMs = 5_000): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`pid ${child.pid} still running after ${timeoutMs} ms`)), timeoutMs);
    child.once('exit', (code) => {
      clearTimeout(t);
      resolve(code);
    });
  });
}
