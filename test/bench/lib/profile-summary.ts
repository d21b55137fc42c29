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

if (import.meta.url === `file://${process.argv[1]}`) {
  const file = process.argv[2];
  const top = Number(process.argv[process.argv.indexOf('--top') + 1]) || 25;
  if (!file) throw new Error('usage: profile-summary.ts <file.cpuprofile> [--top N]');
  const rows = summarise(JSON.parse(readFileSync(file, 'utf8')) as Profile);
  for (const r of rows.slice(0, top))
    process.stdout.write(
      `${(r.share * 100).toFixed(1).padStart(5)} %  ${r.ms.toFixed(0).padStart(7)} ms  ${r.bucket}\n`,
    );
}
