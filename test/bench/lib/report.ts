/**
 * Results: a table per benchmark on stdout, docs/benchmarks/results.json, an SVG bar chart written
 * by hand (no plotting dependency) and docs/benchmarks/README.md with each target next to its last
 * result. A run of `--only x` merges into the previous results so the other benchmarks keep theirs.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import type { Machine } from './machine.ts';

export interface Column {
  key: string;
  header: string;
  /** Digits after the point (numbers only). */
  digits?: number;
}

export interface Row {
  label: string;
  values: Record<string, number | string | undefined>;
}

export interface Goal {
  /** What is compared, e.g. "Spillway node ÷ nginx req/s". */
  what: string;
  /** The target as written in the issue, e.g. "≥ 0.50". */
  target: string;
  measured?: number;
  /** Measured value as shown (defaults to `measured`). */
  shown?: string;
  pass?: boolean;
}

export interface BenchResult {
  name: string;
  title: string;
  /**
   * ok: everything measured; partial: peers measured, some Spillway piece missing; not-run: it
   * failed; skipped: this machine cannot run it (the one-line reason is the first note).
   */
  status: 'ok' | 'partial' | 'not-run' | 'skipped';
  quick: boolean;
  columns: Column[];
  rows: Row[];
  goals: Goal[];
  notes: string[];
  chart?: { key: string; unit: string };
  startedAt: string;
  durationS: number;
}

export interface BenchSpec {
  name: string;
  title: string;
  /** How it is measured, for the README. */
  method: string;
  targets: string[];
}

export interface ResultsFile {
  generatedAt: string;
  command: string;
  machine: Machine;
  results: Record<string, BenchResult>;
}

const fmt = (v: number | string | undefined, digits = 0): string => {
  if (v === undefined) return '—';
  if (typeof v === 'string') return v;
  if (!Number.isFinite(v)) return '—';
  return v.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
};

export function tableLines(r: BenchResult): string[] {
  if (r.columns.length === 0) return [];
  const headers = ['', ...r.columns.map((c) => c.header)];
  const body = r.rows.map((row) => [
    row.label,
    ...r.columns.map((c) => fmt(row.values[c.key], c.digits ?? 0)),
  ]);
  const widths = headers.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]) =>
    `| ${cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`;
  const sep = `|${widths.map((w, i) => (i === 0 ? `${'-'.repeat(w + 1)}-` : `${'-'.repeat(w + 1)}:`)).join('|')}|`;
  return [line(headers), sep, ...body.map(line)];
}

export function goalLines(r: BenchResult): string[] {
  return r.goals.map((g) => {
    const verdict = g.pass === undefined ? 'not measured' : g.pass ? 'met' : 'MISSED';
    const m = g.shown ?? (g.measured === undefined ? '—' : fmt(g.measured, 2));
    return `- ${g.what}: ${m} (target ${g.target}) — ${verdict}`;
  });
}

export function printResult(r: BenchResult): void {
  const out = [
    '',
    `## ${r.title}  [${r.status}${r.quick ? ', quick' : ''}, ${r.durationS.toFixed(0)} s]`,
    ...tableLines(r),
    ...goalLines(r),
    ...r.notes.map((n) => `  note: ${n}`),
  ];
  process.stdout.write(`${out.join('\n')}\n`);
}

const esc = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** One horizontal bar panel per benchmark that has a chart metric. */
export function svgChart(file: ResultsFile, order: string[]): string {
  const W = 960;
  const labelW = 300;
  const barMax = W - labelW - 150;
  const rowH = 22;
  const parts: string[] = [];
  let y = 56;
  for (const name of order) {
    const r = file.results[name];
    if (!r?.chart) continue;
    const key = r.chart.key;
    const rows = r.rows.filter(
      (row) => typeof row.values[key] === 'number' && Number.isFinite(row.values[key]),
    );
    parts.push(
      `<text x="16" y="${y}" font-size="15" font-weight="bold">${esc(r.title)} — ${esc(r.chart.unit)}${r.status === 'ok' ? '' : ` (${r.status})`}</text>`,
    );
    y += 10;
    if (rows.length === 0) {
      parts.push(`<text x="${labelW}" y="${y + 16}" font-size="12" fill="#888">not measured</text>`);
      y += rowH + 24;
      continue;
    }
    const max = Math.max(...rows.map((row) => row.values[key] as number), 1e-9);
    rows.forEach((row, i) => {
      const v = row.values[key] as number;
      const w = Math.max(1, (v / max) * barMax);
      const spill = /spillway/i.test(row.label);
      const by = y + i * rowH;
      parts.push(
        `<text x="${labelW - 8}" y="${by + 15}" font-size="12" text-anchor="end">${esc(row.label)}</text>`,
        `<rect x="${labelW}" y="${by + 3}" width="${w.toFixed(1)}" height="${rowH - 6}" fill="${spill ? '#1f77b4' : '#9aa5b1'}"/>`,
        `<text x="${(labelW + w + 6).toFixed(1)}" y="${by + 15}" font-size="12">${esc(fmt(v, v < 10 ? 2 : 0))}</text>`,
      );
    });
    y += rows.length * rowH + 30;
  }
  const m = file.machine;
  const head = `Spillway benchmarks — ${m.cpuModel}, ${m.cores} cores, Linux ${m.kernel}, Node ${m.node} — ${file.generatedAt}`;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${y + 10}" viewBox="0 0 ${W} ${y + 10}" font-family="sans-serif">`,
    '<!-- generated by test/bench/run.ts; do not edit -->',
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="16" y="24" font-size="13" fill="#333">${esc(head)}</text>`,
    ...parts,
    '</svg>',
    '',
  ].join('\n');
}

export function readResults(path: string): ResultsFile | undefined {
  if (!existsSync(path)) return undefined;
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as ResultsFile;
  } catch {
    return undefined;
  }
}

/** What `pnpm chaos` leaves in docs/benchmarks/chaos.json for the README. */
export interface ChaosFile {
  generatedAt: string;
  command: string;
  form: 'short' | 'long';
  seed: number;
  lines: string[];
  /** `--repeat n`: each scenario ran n times (seeds seed … seed+n−1); `lines` end with one summary per scenario. */
  repeat?: number;
}

export const CHAOS_TEXT = `\`pnpm chaos\` runs the long form (about 8 min), \`pnpm chaos --short\` the CI form (about 3 min; also \`test/chaos/chaos-short.test.ts\`), \`--only kill9,redis,kafka,slowloris\`, \`--seed n\` to replay the kill order, \`--repeat n\` to run each scenario n times (seeds n, n+1, …). Only a long run of every scenario replaces chaos.json; a \`--short\`, \`--only\` or \`--repeat\` run writes its figures under the temp dir unless \`--record\` is given (a repeated run then replaces chaos-repeat.json), so a quick check never overwrites the record. Each scenario runs real \`spillway start --role …\` processes, a node:http sink on loopback that records every \`webhook-id\`, and a load generator posting GitHub-signed events (no client retries: only 2xx answers count as accepted). A run fails on any loss (accepted but never delivered), on a process that dies or does not recover, and (long form only) on the slow-loris timing/memory expectations.

- **kill9**: two ingest processes sharing one port (SO_REUSEPORT), two workers, one admin; 20 rounds (short: 6) of \`kill -9\` of a random one at a random moment under 200 events/s (short: 100), each restarted as a supervisor would.
- **redis**: a Redis of the run's own (AOF everysec) stopped with SHUTDOWN for 10 s under load, then started on the same AOF: ingest must answer 503 meanwhile, /readyz 200 afterwards, nothing accepted lost, no process restarted.
- **kafka**: a Kafka broker of the run's own (separate state dir and ports) stopped for ≥ 10 s and started while a paused tenant's tasks are spilled and more arrive; then the tenant is resumed and everything must arrive.
- **slowloris**: 500 connections trickling one header line per second plus bursts of 20 declared 8 MiB and 10 chunked 4 MiB bodies (source cap 1 MiB) while 100 events/s of real traffic flow; real traffic's p99 within 2× of its p99 without the attack, ingest RSS within its baseline + body budget (64 MiB) + 64 MiB.`;

export function readmeText(
  file: ResultsFile,
  specs: BenchSpec[],
  intro: string,
  chaos?: ChaosFile,
  repeat?: ChaosFile,
): string {
  const m = file.machine;
  const lines = [
    '# Spillway benchmarks',
    '',
    '<!-- generated by test/bench/run.ts from results.json; edit the specs in test/bench, not this file -->',
    '',
    intro,
    '',
    `Last run: ${file.generatedAt} — \`${file.command}\``,
    '',
    `Machine: ${m.cpuModel}, ${m.cores} cores, ${m.memTotalMiB} MiB RAM, Linux ${m.kernel}, Node ${m.node}, load average ${m.loadAvg1m} at start${m.pageFaultUs === undefined ? '' : `, a minor page fault ≈ ${m.pageFaultUs.toFixed(2)} µs`}.`,
    `Versions: ${Object.entries(m.versions)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}.`,
    '',
    '![results](results.svg)',
    '',
  ];
  for (const s of specs) {
    const r = file.results[s.name];
    lines.push(
      `## ${s.title} (\`--only ${s.name}\`)`,
      '',
      s.method,
      '',
      '**Targets:**',
      ...s.targets.map((t) => `- ${t}`),
      '',
    );
    if (!r) {
      lines.push('**Last result:** not run yet.', '');
      continue;
    }
    lines.push(
      `**Last result** (${r.startedAt}, ${r.status}${r.quick ? ', quick mode' : ''}, ${r.durationS.toFixed(0)} s):`,
      '',
      ...tableLines(r),
      '',
      ...goalLines(r),
      ...(r.notes.length ? ['', ...r.notes.map((n) => `> ${n}`)] : []),
      '',
    );
  }
  lines.push('## Chaos', '', CHAOS_TEXT, '');
  if (chaos)
    lines.push(
      `**Last run** (${chaos.generatedAt}, \`${chaos.command}\`, ${chaos.form} form, seed ${chaos.seed}):`,
      '',
      '```',
      ...chaos.lines,
      '```',
      '',
    );
  else lines.push('**Last run:** not run yet.', '');
  if (repeat)
    lines.push(
      `**Last repeated run** (${repeat.generatedAt}, \`${repeat.command}\`, ${repeat.form} form, ${repeat.repeat} runs per scenario from seed ${repeat.seed}; the summary lines come last):`,
      '',
      '```',
      ...repeat.lines,
      '```',
      '',
    );
  return `${lines.join('\n')}\n`;
}

export function writeAll(dir: string, file: ResultsFile, specs: BenchSpec[], intro: string): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(`${dir}/results.json`, `${JSON.stringify(file, null, 2)}\n`);
  writeFileSync(
    `${dir}/results.svg`,
    svgChart(
      file,
      specs.map((s) => s.name),
    ),
  );
  writeReadme(dir, file, specs, intro);
}

/** Re-renders README.md from results.json and chaos.json (either may be missing). */
export function writeReadme(
  dir: string,
  file: ResultsFile | undefined,
  specs: BenchSpec[],
  intro: string,
): void {
  const chaosFile = (name: string): ChaosFile | undefined => {
    try {
      return JSON.parse(readFileSync(`${dir}/${name}`, 'utf8')) as ChaosFile;
    } catch {
      return undefined;
    }
  };
  const empty: ResultsFile = {
    generatedAt: 'never',
    command: 'pnpm bench',
    machine: {
      cpuModel: '?',
      cores: 0,
      memTotalMiB: 0,
      memFreeMiB: 0,
      kernel: '?',
      node: '?',
      loadAvg1m: 0,
      versions: {},
    },
    results: {},
  };
  writeFileSync(
    `${dir}/README.md`,
    readmeText(file ?? empty, specs, intro, chaosFile('chaos.json'), chaosFile('chaos-repeat.json')),
  );
}
