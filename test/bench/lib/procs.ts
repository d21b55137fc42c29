/**
 * Every process the benchmarks and chaos runs start goes through here, so that all of them are
 * killed at the end — also when the run throws or is interrupted. Nothing is killed by name.
 */
import { type ChildProcess, fork, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const live = new Set<ChildProcess>();

function killAll(): void {
  for (const c of live) {
    if (c.exitCode === null && c.signalCode === null && c.pid) {
      try {
        process.kill(c.pid, 'SIGKILL');
      } catch {}
    }
  }
  live.clear();
}
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    killAll();
    process.exit(130);
  });
}

export interface Proc {
  child: ChildProcess;
  readonly pid: number;
  out(): string;
  err(): string;
  exited: Promise<number | null>;
  /** SIGTERM, then SIGKILL after `graceMs`. */
  stop(graceMs?: number): Promise<void>;
  kill9(): Promise<void>;
}

function track(child: ChildProcess): Proc {
  live.add(child);
  let out = '';
  let err = '';
  // Keep only the tail: long runs must not grow the harness's own memory.
  child.stdout?.on('data', (d) => {
    out = (out + d).slice(-64_000);
  });
  child.stderr?.on('data', (d) => {
    err = (err + d).slice(-64_000);
  });
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      live.delete(child);
      resolve(code);
    }),
  );
  const dead = () => child.exitCode !== null || child.signalCode !== null;
  return {
    child,
    pid: child.pid ?? -1,
    out: () => out,
    err: () => err,
    exited,
    async stop(graceMs = 5000) {
      if (dead()) return;
      child.kill('SIGTERM');
      const t = setTimeout(() => !dead() && child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(t);
    },
    async kill9() {
      if (dead()) return;
      child.kill('SIGKILL');
      await exited;
    },
  };
}

export function run(cmd: string, args: string[], env: NodeJS.ProcessEnv = process.env): Proc {
  return track(spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] }));
}

/** Forks a TypeScript module of ours (Node strips the types) with an IPC channel. */
export function forkTs(modUrl: URL, args: string[] = [], env: NodeJS.ProcessEnv = process.env): Proc {
  return track(
    fork(fileURLToPath(modUrl), args, { env, stdio: ['ignore', 'pipe', 'pipe', 'ipc'], execArgv: [] }),
  );
}

/** Runs a command to completion; resolves with its output (rejects past `timeoutMs`). */
export async function runToEnd(
  cmd: string,
  args: string[],
  timeoutMs: number,
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ code: number | null; out: string; err: string }> {
  const p = run(cmd, args, env);
  const t = setTimeout(() => p.kill9(), timeoutMs);
  const code = await p.exited;
  clearTimeout(t);
  return { code, out: p.out(), err: p.err() };
}

/** The CPU fields of a /proc `stat` line, in µs, and the thread or process name. */
export interface ProcStat {
  name: string;
  us: number;
  childrenUs: number;
  minorFaults: number;
}

export function parseProcStat(stat: string): ProcStat {
  // Fields after the command name (which may contain spaces) start at ") ".
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const us = (i: number, j: number) => ((Number(f[i]) + Number(f[j])) * 1e6) / 100; // USER_HZ 100
  return {
    name: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')),
    us: us(11, 12), // utime, stime (fields 14 and 15)
    childrenUs: us(13, 14), // cutime, cstime: children waited for
    minorFaults: Number(f[7]), // minflt (field 10)
  };
}

/**
 * A process's /proc/<pid>/stat, parsed (CPU time and minor page faults from one read); undefined
 * once it is gone. On some VMs a fault costs 10+ µs (docs/benchmarks/profile.md), so faults per
 * delivery are CPU the profiles do not show.
 */
export async function procStatOf(pid: number): Promise<ProcStat | undefined> {
  const { readFile } = await import('node:fs/promises');
  try {
    return parseProcStat(await readFile(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}

/** CPU time (user + system) a process has used so far, in µs, from /proc/<pid>/stat. */
export async function cpuMicrosOf(pid: number): Promise<number | undefined> {
  return (await procStatOf(pid))?.us;
}

/** Resident set size of a process in bytes (Linux /proc), undefined once it is gone. */
export async function rssOf(pid: number): Promise<number | undefined> {
  const { readFile } = await import('node:fs/promises');
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    const kb = /VmRSS:\s+(\d+)\s+kB/.exec(status)?.[1];
    return kb ? Number(kb) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Samples RSS of the given pids every `everyMs`; `stop()` returns the max seen per pid. */
export function rssSampler(pids: () => number[], everyMs = 250) {
  const max = new Map<number, number>();
  let last = new Map<number, number>();
  const t = setInterval(async () => {
    const now = new Map<number, number>();
    for (const pid of pids()) {
      const r = await rssOf(pid);
      if (r === undefined) continue;
      now.set(pid, r);
      max.set(pid, Math.max(max.get(pid) ?? 0, r));
    }
    last = now;
  }, everyMs);
  t.unref();
  return {
    max: () => Math.max(0, ...max.values()),
    maxOf: (pid: number) => max.get(pid) ?? 0,
    last: () => last,
    stop() {
      clearInterval(t);
      return max;
    },
  };
}
