/**
 * `pnpm chaos [--short] [--only kill9,redis,kafka,slowloris] [--seed n] [--repeat n] [--record]`: breaks
 * Spillway on purpose and prints one line of figures per scenario. Exits non-zero on any loss (an
 * event answered 2xx that never reached its endpoint) or any other broken expectation.
 * Long form by default; `--short` is the CI form (≤ 5 min).
 *
 * What is kept in docs/benchmarks (the figures closing notes quote): a long run of every scenario
 * replaces chaos.json; anything else (`--short`, `--only`, `--repeat`) is written under the temp dir
 * unless `--record` says it is the record (a repeated run then replaces chaos-repeat.json), so a
 * quick check never overwrites a record it does not repeat.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { type ChaosFile, readResults, writeReadme } from '../bench/lib/report.ts';
import { ALL, INTRO, OUT_DIR } from '../bench/specs.ts';
import { line, type Outcome } from './lib/outcome.ts';
import { kafka } from './scenarios/kafka.ts';
import { kill9 } from './scenarios/kill9.ts';
import { redis } from './scenarios/redis.ts';
import { slowloris } from './scenarios/slowloris.ts';
import type { ScenarioOptions } from './scenarios/types.ts';

export const SCENARIOS: Record<string, (o: ScenarioOptions) => Promise<Outcome>> = {
  kill9,
  redis,
  kafka,
  slowloris,
};

/** One line over a scenario's repeated runs: how many, how many lost anything, the totals. */
function summary(runs: Outcome[]): string {
  const sum = (f: (o: Outcome) => number) => runs.reduce((a, o) => a + f(o), 0);
  const failed = runs.filter((o) => o.lost > 0 || o.failures.length).length;
  return `chaos repeat ${runs[0]?.scenario ?? '?'}: runs=${runs.length} runs_with_loss=${runs.filter((o) => o.lost > 0).length} failed_runs=${failed} accepted=${sum((o) => o.accepted)} delivered=${sum((o) => o.delivered)} duplicates=${sum((o) => o.duplicates)} lost=${sum((o) => o.lost)}`;
}

export async function runChaos(
  names: string[],
  short: boolean,
  seed: number,
  log = (m: string) => process.stdout.write(`${m}\n`),
) {
  const outcomes: Outcome[] = [];
  for (const name of names) {
    const t0 = Date.now();
    try {
      outcomes.push(
        await SCENARIOS[name]!({
          short,
          seed,
          log: (m) => log(`  [${name} +${((Date.now() - t0) / 1000).toFixed(0)}s] ${m}`),
        }),
      );
    } catch (err) {
      outcomes.push({
        scenario: name,
        sent: 0,
        accepted: 0,
        delivered: 0,
        duplicates: 0,
        lost: 0,
        s503: 0,
        maxRssMiB: 0,
        extra: {},
        failures: [`could not run: ${(err as Error).message.split('\n')[0]}`],
        seconds: (Date.now() - t0) / 1000,
      });
    }
    log(line(outcomes.at(-1)!));
  }
  return outcomes;
}

if (import.meta.main) {
  const argv = process.argv.slice(2);
  const short = argv.includes('--short');
  const oi = argv.indexOf('--only');
  const names = oi >= 0 ? (argv[oi + 1] ?? '').split(',').filter(Boolean) : Object.keys(SCENARIOS);
  const si = argv.indexOf('--seed');
  const seed = si >= 0 ? Number(argv[si + 1]) : Math.floor(Math.random() * 1e9);
  const bad = names.filter((n) => !SCENARIOS[n]);
  if (bad.length) {
    process.stderr.write(
      `chaos: unknown scenario ${bad.join(', ')}; have ${Object.keys(SCENARIOS).join(', ')}\n`,
    );
    process.exit(2);
  }
  process.stdout.write(
    `Spillway chaos (${short ? 'short' : 'long'} form, seed ${seed}): ${names.join(', ')}\n`,
  );
  const ri = argv.indexOf('--repeat');
  const repeat = ri >= 0 ? Number(argv[ri + 1]) : 1;
  if (!Number.isInteger(repeat) || repeat < 1) {
    process.stderr.write(`chaos: --repeat wants a whole number ≥ 1, got ${argv[ri + 1]}\n`);
    process.exit(2);
  }
  const outcomes: Outcome[] = [];
  for (let i = 0; i < repeat; i++) {
    if (repeat > 1) process.stdout.write(`run ${i + 1}/${repeat} (seed ${seed + i})\n`);
    outcomes.push(...(await runChaos(names, short, seed + i)));
  }
  const lines = outcomes.map(line);
  // runChaos returns one outcome per name, in order, so scenario j of run i is outcomes[i·k + j].
  if (repeat > 1)
    lines.push(...names.map((_, j) => summary(outcomes.filter((_, i) => i % names.length === j))));
  process.stdout.write(`\n${lines.join('\n')}\n`);
  // The figures the closing note quotes: docs/benchmarks/chaos.json (a long run of every scenario)
  // or, with --record, chaos-repeat.json; and the README re-rendered. Anything else: the temp dir.
  const record = argv.includes('--record') || (!short && oi < 0 && repeat === 1);
  const dir = record ? fileURLToPath(OUT_DIR) : `${tmpdir()}/spillway-chaos`;
  mkdirSync(dir, { recursive: true });
  const file: ChaosFile = {
    generatedAt: new Date().toISOString(),
    command: `pnpm chaos${argv.length ? ` ${argv.join(' ')}` : ''}`,
    form: short ? 'short' : 'long',
    seed,
    lines,
    ...(repeat > 1 ? { repeat } : {}),
  };
  const out = `${dir}/${repeat > 1 ? 'chaos-repeat' : 'chaos'}.json`;
  writeFileSync(out, `${JSON.stringify(file, null, 2)}\n`);
  if (record) writeReadme(dir, readResults(`${dir}/results.json`), ALL, INTRO);
  else process.stdout.write(`not a record (--short, --only or --repeat without --record): wrote ${out}\n`);
  process.exit(outcomes.some((o) => o.lost > 0 || o.failures.length) ? 1 : 0);
}
