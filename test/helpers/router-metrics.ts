import { registry } from '@spillway/shared';

/**
 * A scrape of the process's Prometheus registry, parsed from the text exposition format (what
 * GET /metrics serves). `value(name, labels)` sums the samples of `name` whose labels include
 * `labels`; tests assert deltas between two scrapes.
 */
export interface Scrape {
  value(name: string, labels?: Record<string, string>): number;
}

export async function scrape(): Promise<Scrape> {
  const text = await registry.metrics();
  const samples: { name: string; labels: Record<string, string>; value: number }[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return {
    value(name, want = {}) {
      let sum = 0;
      for (const s of samples) {
        if (s.name !== name) continue;
        if (Object.entries(want).every(([k, v]) => s.labels[k] === v)) sum += s.value;
      }
      return sum;
    },
  };
}
