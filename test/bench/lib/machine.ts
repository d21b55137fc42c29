import { readFileSync } from 'node:fs';
import { cpus, freemem, totalmem } from 'node:os';
import { runToEnd } from './procs.ts';

/** What the numbers were measured on: they mean nothing without it. */
export interface Machine {
  cpuModel: string;
  cores: number;
  memTotalMiB: number;
  memFreeMiB: number;
  kernel: string;
  node: string;
  loadAvg1m: number;
  /**
   * What one minor page fault costs here (µs: a fresh 4 KiB page touched, zeroing included; best
   * of 3 over 64 MiB). About 0.1–0.3 on bare metal; 10+ on some VMs, where a process that keeps
   * touching fresh memory pays it per delivery (docs/benchmarks/profile.md).
   */
  pageFaultUs?: number;
  versions: Record<string, string>;
}

/** Times touching every page of fresh 64 MiB buffers: the cost of one minor fault, best of 3. */
export function pageFaultMicros(): number {
  const size = 64 * 2 ** 20;
  let best = Number.POSITIVE_INFINITY;
  for (let r = 0; r < 3; r++) {
    const a = new Uint8Array(size);
    const t0 = performance.now();
    for (let i = 0; i < size; i += 4096) a[i] = 1;
    best = Math.min(best, ((performance.now() - t0) * 1000) / (size / 4096));
  }
  return best;
}

async function firstLine(cmd: string, args: string[], re?: RegExp): Promise<string> {
  try {
    const r = await runToEnd(cmd, args, 10_000);
    const text = `${r.out}\n${r.err}`.trim();
    if (re) return re.exec(text)?.[1] ?? 'unknown';
    return text.split('\n')[0] ?? 'unknown';
  } catch {
    return 'unavailable';
  }
}

function pkgVersion(name: string): string {
  try {
    // test/node_modules holds the suite's own deps (package exports often hide package.json).
    const p = new URL(`../../node_modules/${name}/package.json`, import.meta.url);
    return JSON.parse(readFileSync(p, 'utf8')).version as string;
  } catch {
    return 'unknown';
  }
}

export async function machineInfo(redisUrl?: string): Promise<Machine> {
  const c = cpus();
  const kernel = readFileSync('/proc/sys/kernel/osrelease', 'utf8').trim();
  const versions: Record<string, string> = {
    spillway: JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')).version,
    undici: pkgVersion('undici'),
    ioredis: pkgVersion('ioredis'),
    kafkajs: pkgVersion('kafkajs'),
    bullmq: pkgVersion('bullmq'),
    nginx: await firstLine('nginx', ['-v'], /nginx\/(\S+)/),
    wrk: await firstLine('wrk', ['-v'], /wrk (\S+)/),
    'redis-server': await firstLine('redis-server', ['--version'], /v=(\S+)/),
  };
  if (redisUrl) {
    const u = new URL(redisUrl);
    versions['redis (under test)'] = await firstLine(
      'redis-cli',
      ['-h', u.hostname, '-p', u.port || '6379', 'info', 'server'],
      /redis_version:(\S+)/,
    );
  }
  let load = 0;
  try {
    load = Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
  } catch {}
  return {
    cpuModel: c[0]?.model.trim() ?? 'unknown',
    cores: c.length,
    memTotalMiB: Math.round(totalmem() / 2 ** 20),
    memFreeMiB: Math.round(freemem() / 2 ** 20),
    kernel,
    node: process.versions.node,
    loadAvg1m: load,
    pageFaultUs: pageFaultMicros(),
    versions,
  };
}
