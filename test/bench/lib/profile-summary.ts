/**
 * Summarises V8 .cpuprofile files into self-time per bucket (a package or a node internal), so a
 * profile reads as a table: `node test/bench/lib/profile-summary.ts <file.cpuprofile> [--top N]`.
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** The bucket a frame's self time is charged to. */
export function bucketOf(fn: string, url: string): string {
  if (fn === '(garbage collector)') return 'GC';
  if (fn === '(idle)') return 'idle';
  if (fn === '(program)') return 'program (native, unattributed)';
  const nm = /node_modules\/(?:\.pnpm\/[^/]+\/node_modules\/)?((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm) return nm[1]!;
  const own = /packages\/([^/]+)\/src\/(.+)$/.exec(url);
  if (own) return `spillway ${own[1]}/${own[2]}`;
  if (url.startsWith('node:')) return url;
  if (!url) return `native: ${fn || '(anonymous)'}`;
  return url;
}

export function summarise(p: Profile): { bucket: string; ms: number; share: number }[] {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  p.samples.forEach((id, i) => {
    self.set(id, (self.get(id) ?? 0) + (p.timeDeltas[i] ?? 0));
  });
  const buckets = new Map<string, number>();
  let total = 0;
  for (const [id, us] of self) {
    const n = byId.get(id)!;
    const b = bucketOf(n.callFrame.functionName, n.callFrame.url);
    buckets.set(b, (buckets.get(b) ?? 0) + us);
    total += us;
  }
  return [...buckets.entries()]
    .map(([bucket, us]) => ({ bucket, ms: us / 1000, share: us / total }))
    .sort((a, b) => b.ms - a.ms);
}

/** The cost rows of docs/benchmarks/profile.md: a bucket from `bucketOf` → one of these. */
export function costOf(bucket: string): string {
  if (bucket === 'idle') return 'idle (waiting on round trips)';
  if (bucket === 'GC') return 'garbage collection';
  if (bucket === 'bullmq') return 'BullMQ (job claim, locks, completion)';
  if (bucket === 'ioredis' || bucket === 'redis-errors' || bucket === 'cluster-key-slot')
    return 'ioredis (Redis round trips)';
  if (bucket === 'kafkajs') return 'kafkajs (spill, drainer)';
  if (bucket === 'undici' || bucket.includes('llhttp') || bucket.startsWith('wasm://'))
    return 'undici (HTTP client)';
  if (bucket === 'opossum') return 'opossum (breakers)';
  if (bucket === 'pino' || bucket.startsWith('pino')) return 'logging';
  if (bucket === 'prom-client') return 'metrics';
  if (bucket.includes('crypto') || bucket === 'native: hmac') return 'signing (HMAC)';
  if (bucket.includes('router/spill')) return 'spill/drain (router code)';
  if (bucket.includes('router/records') || bucket.includes('router/retry'))
    return 'records, counters, retries (router code)';
  if (bucket.startsWith('spillway router')) return 'worker, engine, fan-out (router code)';
  if (bucket.startsWith('spillway delivery')) return 'dispatcher, limiter, pools (delivery code)';
  if (bucket.startsWith('spillway shared')) return 'shared code';
  if (/modules|bootstrap|amaro|esm|cjs/.test(bucket)) return 'start-up (module loading, type stripping)';
  if (bucket.includes('native: writev') || bucket.includes('stream') || bucket.includes('net'))
    return 'sockets and streams';
  if (/abort_controller|event_target|domexception/.test(bucket)) return 'AbortSignal / EventTarget';
  if (/timers/.test(bucket)) return 'timers';
  if (/runMicrotasks|task_queues/.test(bucket)) return 'promises and microtasks';
  if (bucket === 'redis-parser') return 'ioredis (Redis round trips)';
  if (bucket === 'p-limit' || bucket === 'lru-cache') return 'dispatcher, limiter, pools (delivery code)';
  if (bucket === 'native: writeUtf8String' || bucket === 'native: writeBuffer') return 'sockets and streams';
  return 'other (node internals, native)';
}

/** Rows of cost → µs per delivery for each profile (same order as `files`). */
export function costTable(profiles: Profile[], deliveries: number[]): { cost: string; us: number[] }[] {
  const per = profiles.map((p, i) => {
    const m = new Map<string, number>();
    for (const r of summarise(p)) m.set(costOf(r.bucket), (m.get(costOf(r.bucket)) ?? 0) + r.ms);
    return new Map([...m].map(([k, ms]) => [k, (ms * 1000) / deliveries[i]!]));
  });
  const costs = [...new Set(per.flatMap((m) => [...m.keys()]))];
  return costs
    .map((cost) => ({ cost, us: per.map((m) => m.get(cost) ?? 0) }))
    .sort((a, b) => b.us[0]! - a.us[0]!);
}

if (import.meta.url === `file://${process.argv[1]}` && process.argv[2] === '--table') {
  // --table <deliveries> a.cpuprofile [b.cpuprofile ...]: share of busy CPU by cost, one column each.
  const n = Number(process.argv[3]);
  const files = process.argv.slice(4);
  const rows = costTable(
    files.map((f) => JSON.parse(readFileSync(f, 'utf8')) as Profile),
    files.map(() => n),
  );
  // Shares of the non-idle samples: on a loaded machine a profile's time deltas are wall time, so
  // only the split is trusted; multiply by the worker's measured CPU µs/delivery for absolute costs.
  const busy = files.map((_, i) => rows.reduce((a, r) => a + (r.cost.startsWith('idle') ? 0 : r.us[i]!), 0));
  process.stdout.write(
    `| cost | ${files.map((_, i) => `profile ${i + 1}: share of busy CPU`).join(' | ')} |\n`,
  );
  process.stdout.write(`| --- | ${files.map(() => '---:').join(' | ')} |\n`);
  for (const r of rows) {
    if (r.cost.startsWith('idle')) continue;
    const cells = r.us.map((x, i) => `${((100 * x) / busy[i]!).toFixed(1)} %`);
    process.stdout.write(`| ${r.cost} | ${cells.join(' | ')} |\n`);
  }
} else if (import.meta.url === `file://${process.argv[1]}`) {
  const file = process.argv[2];
  const top = Number(process.argv[process.argv.indexOf('--top') + 1]) || 25;
  if (!file) throw new Error('usage: profile-summary.ts <file.cpuprofile> [--top N]');
  const rows = summarise(JSON.parse(readFileSync(file, 'utf8')) as Profile);
  for (const r of rows.slice(0, top))
    process.stdout.write(
      `${(r.share * 100).toFixed(1).padStart(5)} %  ${r.ms.toFixed(0).padStart(7)} ms  ${r.bucket}\n`,
    );
}
