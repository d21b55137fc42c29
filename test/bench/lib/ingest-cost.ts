/**
 * What one accepted event costs on the ingest path (docs/benchmarks/ingest-profile.md): the ingest
 * role on one backend, wrk POSTing distinct signed GitHub deliveries as the ingest benchmark does,
 * and around the measured run: Redis `INFO commandstats` (reset before it; Lua inner calls are
 * counted under their own command), Redis's own CPU (`INFO cpu`), the role's CPU (/proc), and
 * optionally (--slowlog) SLOWLOG at threshold 0 for each script's own time.
 *
 *   flock /tmp/spillway-bench.lock node test/bench/lib/ingest-cost.ts [uring|node] [seconds=5] [--slowlog]
 *
 * Uses the project Redis (SPILLWAY_REDIS_URL): run it alone (the lock), since commandstats are
 * the whole server's.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { cpuMicrosOf, parseProcStat } from './procs.ts';
import { commandStats, REDIS_URL, SpillwayCluster } from './spillway.ts';
import { runWrk } from './wrk.ts';

const backend = (process.argv[2] ?? 'uring') as 'uring' | 'node';
const seconds = Number(process.argv[3] ?? 5);
const slowlog = process.argv.includes('--slowlog');

const redisCpu = (info: string) => {
  const u = Number(/used_cpu_user:([\d.]+)/.exec(info)?.[1]);
  const s = Number(/used_cpu_sys:([\d.]+)/.exec(info)?.[1]);
  return (u + s) * 1e6;
};

const c = new SpillwayCluster('ic');
const admin = new Redis(REDIS_URL);
try {
  await c.tenant('acme');
  const src = await c.githubSource('acme', `gh-${backend}`);
  const r = await c.startRole('ingest', { SPILLWAY_INGEST_BACKEND: backend });
  const url = `http://127.0.0.1:${r.ingestPort}/ingest/${src.id}`;
  const tag = `c${Date.now().toString(36).slice(-6)}`;
  const base = {
    url,
    headers: { 'content-type': 'application/json', 'x-github-event': 'push' },
    secret: src.secret,
    threads: 1,
    connections: 64,
  };
  const warm = await runWrk({ ...base, count: 60_000, runTag: `${tag}w`, durationS: 1 });
  const count = Math.ceil(Math.max(20_000, 3 * warm.rps) * seconds);
  const pid = r.proc.child.pid!;
  await admin.config('RESETSTAT');
  const cpu0 = (await cpuMicrosOf(pid))!;
  const threads0 = threadCpu(pid);
  const wrk0 = childrenCpu();
  const rcpu0 = redisCpu(await admin.info('cpu'));
  const mon = slowlog ? await slowlogStart(admin) : undefined;
  const res = await runWrk({ ...base, count, runTag: `${tag}m`, durationS: seconds });
  const cpu1 = (await cpuMicrosOf(pid))!;
  const threads1 = threadCpu(pid);
  const wrk1 = childrenCpu();
  const rcpu1 = redisCpu(await admin.info('cpu'));
  const stats = commandStats(await admin.info('commandstats'));
  const events = res.requests - res.non202;
  console.log(
    `${backend}: ${res.rps.toFixed(0)} req/s, ${events} accepted (non-202 ${res.non202}), p99 ${res.p99Ms} ms`,
  );
  console.log(`ingest process CPU: ${((cpu1 - cpu0) / events).toFixed(1)} µs/event`);
  const byName = new Map<string, number>();
  for (const [tid, t] of threads1) {
    const d = t.us - (threads0.get(tid)?.us ?? 0);
    // Threads the addon starts (the io_uring ring) inherit the main thread's name.
    const name = t.name === 'MainThread' && tid !== String(pid) ? 'MainThread-named (ring)' : t.name;
    byName.set(name, (byName.get(name) ?? 0) + d);
  }
  console.log(
    `  by thread (µs/event): ${[...byName]
      .filter(([, us]) => us > 0)
      .sort((a, b) => b[1] - a[1])
      .map(([n, us]) => `${n} ${(us / events).toFixed(1)}`)
      .join(', ')}`,
  );
  console.log(
    `wrk CPU (this process's waited-for children): ${((wrk1 - wrk0) / events).toFixed(1)} µs/event`,
  );
  console.log(`Redis server CPU (INFO cpu): ${((rcpu1 - rcpu0) / events).toFixed(1)} µs/event`);
  let totalUs = 0;
  const rows = [...stats].sort((a, b) => b[1].usec - a[1].usec);
  console.log('command            calls/event   µs/call   µs/event');
  for (const [cmd, s] of rows) {
    // Inner calls of a script are inside its EVALSHA's usec already; only top-level ones add up.
    if (cmd === 'evalsha' || cmd === 'eval' || !isInner(cmd)) totalUs += s.usec;
    console.log(
      `${cmd.padEnd(18)} ${(s.calls / events).toFixed(3).padStart(11)} ${(s.usec / s.calls).toFixed(2).padStart(9)} ${(s.usec / events).toFixed(2).padStart(10)}`,
    );
  }
  console.log(
    `commandstats µs/event (top-level commands; EVALSHA includes its inner calls): ${(totalUs / events).toFixed(1)}`,
  );
  if (mon) console.log(await mon());
} finally {
  await c.close();
  admin.disconnect();
}

/** CPU (µs) of this process's children that have been waited for (cutime + cstime): wrk's. */
function childrenCpu(): number {
  return parseProcStat(readFileSync('/proc/self/stat', 'utf8')).childrenUs;
}

/** CPU (user + system, µs) of each thread of a process, by tid, with its name (/proc/<pid>/task). */
function threadCpu(pid: number): Map<string, { name: string; us: number }> {
  const out = new Map<string, { name: string; us: number }>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const st = parseProcStat(readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8'));
      out.set(tid, { name: st.name.replace(/\d+$/, '#'), us: st.us });
    } catch {
      // the thread ended
    }
  }
  return out;
}

/** Commands that, in this role, only run inside scripts (their time is inside EVALSHA). */
function isInner(cmd: string): boolean {
  return [
    'get',
    'set',
    'hmget',
    'hget',
    'hset',
    'hincrby',
    'pexpire',
    'del',
    'incr',
    'xadd',
    'zadd',
    'hmset',
    'exists',
    'time',
    'zcard',
    'llen',
    'rpush',
    'lpush',
    'publish',
    'scard',
    'xtrim',
    'zrangebyscore',
    'expire',
    'incrby',
    'hexists',
    'hsetnx',
    'sismember',
    'zscore',
    'lrange',
    'zrange',
  ].includes(cmd);
}

/**
 * Every command of the measured run in Redis's SLOWLOG (threshold 0, set for the run and restored
 * after), grouped by what it is: each script by its keys, the rest by name. Gives each script's
 * own execution time per event, which commandstats lumps together under EVALSHA.
 */
async function slowlogStart(admin: Redis): Promise<() => Promise<string>> {
  const [, was] = (await admin.config('GET', 'slowlog-log-slower-than')) as string[];
  const [, len] = (await admin.config('GET', 'slowlog-max-len')) as string[];
  await admin.config('SET', 'slowlog-max-len', '1000000');
  await admin.config('SET', 'slowlog-log-slower-than', '0');
  await admin.slowlog('RESET');
  return async () => {
    await admin.config('SET', 'slowlog-log-slower-than', was!);
    const entries = (await admin.slowlog('GET', '1000000')) as [number, number, number, string[]][];
    await admin.slowlog('RESET');
    await admin.config('SET', 'slowlog-max-len', len!);
    const by = new Map<string, { calls: number; us: number; argc: number }>();
    for (const [, , us, args] of entries) {
      const cmd = String(args[0]).toLowerCase();
      let name = cmd;
      if (cmd === 'evalsha' || cmd === 'eval') {
        const key = String(args[3] ?? '');
        const first = String(args[4] ?? '');
        if (/:dd$/.test(key)) name = first.startsWith('p:') ? 'dedup-reserve' : 'dedup-promote';
        else if (/:bc$/.test(key))
          name = 'body-claim'; // a tree from before 2026-12-07 (SPILLWAY_BENCH_BIN)
        else if (/:rate:/.test(key)) name = 'rate/limiter';
        else name = `script ${String(args[1]).slice(0, 8)} ${key.replace(/^[^:]*:/, '').slice(0, 30)}`;
      }
      const x = by.get(name) ?? { calls: 0, us: 0, argc: 0 };
      x.calls++;
      x.us += Number(us);
      x.argc += args.length;
      by.set(name, x);
    }
    const lines = ['SLOWLOG (threshold 0) by command/script: calls, µs/call, args/call, total µs'];
    for (const [k, x] of [...by].sort((a, b) => b[1].us - a[1].us))
      lines.push(
        `${k.padEnd(40)} ${String(x.calls).padStart(7)} ${(x.us / x.calls).toFixed(1).padStart(8)} ${(x.argc / x.calls).toFixed(1).padStart(6)} ${String(x.us).padStart(9)}`,
      );
    lines.push(`(${entries.length} entries)`);
    return lines.join('\n');
  };
}
