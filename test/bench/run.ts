/**
 * `pnpm bench [--quick] [--only name[,name]]`: runs the benchmarks, prints a table per benchmark
 * with ratios against the peers measured in the same run, and writes docs/benchmarks/results.json,
 * results.svg and README.md (targets next to the last result, with the machine and versions).
 * A `--quick` run is a smoke test, not a result: it writes to a directory under the temp dir and
 * leaves docs/benchmarks alone.
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { machineInfo } from './lib/machine.ts';
import { type BenchResult, printResult, type ResultsFile, readResults, writeAll } from './lib/report.ts';
import { REDIS_URL } from './lib/spillway.ts';
import { LOAD_WARN, loadAvg1m, roundsFor } from './lib/spread.ts';
import { ALL, INTRO, OUT_DIR } from './specs.ts';

const DOCS = fileURLToPath(OUT_DIR);

const loadText = (l: number) =>
  `load average ${l}${l > LOAD_WARN ? ` (WARNING: over ${LOAD_WARN}, other work is running; expect noise)` : ''}`;

function parseArgs(argv: string[]) {
  const quick = argv.includes('--quick');
  const i = argv.indexOf('--only');
  const only = i >= 0 ? (argv[i + 1] ?? '').split(',').filter(Boolean) : [];
  const unknown = only.filter((n) => !ALL.some((b) => b.name === n));
  if (unknown.length) {
    process.stderr.write(
      `bench: unknown benchmark ${unknown.join(', ')}; have ${ALL.map((b) => b.name).join(', ')}\n`,
    );
    process.exit(2);
  }
  return { quick, only };
}

async function main() {
  const { quick, only } = parseArgs(process.argv.slice(2));
  const OUT = quick ? join(tmpdir(), 'spillway-bench-quick') : DOCS;
  const selected = only.length ? ALL.filter((b) => only.includes(b.name)) : ALL;
  const machine = await machineInfo(REDIS_URL);
  const t0 = Date.now();
  process.stdout.write(
    `Spillway benchmarks${quick ? ' (quick)' : ''}: ${selected.map((b) => b.name).join(', ')}\n` +
      `machine: ${machine.cpuModel}, ${machine.cores} cores, Linux ${machine.kernel}, Node ${machine.node}, load ${machine.loadAvg1m}, page fault ${machine.pageFaultUs?.toFixed(2) ?? '?'} µs\n`,
  );
  const prev = readResults(`${OUT}/results.json`);
  const file: ResultsFile = {
    generatedAt: new Date().toISOString(),
    command: `pnpm bench${process.argv.slice(2).length ? ` ${process.argv.slice(2).join(' ')}` : ''}`,
    machine,
    results: { ...(prev?.results ?? {}) },
  };
  let failed = 0;
  const measured = new Set<string>();
  const resultOf = (name: string) => {
    const result = file.results[name];
    return result && result.status !== 'not-run' ? { result, sameRun: measured.has(name) } : undefined;
  };
  for (const b of selected) {
    const started = Date.now();
    // Other work on the machine moves every number: say how busy it was when this one started,
    // and before every round of a repeated phase.
    const load = loadAvg1m();
    const roundLoads: number[] = [];
    const rounds = roundsFor(quick);
    const log = (m: string) =>
      process.stdout.write(`  [${b.name} +${((Date.now() - started) / 1000).toFixed(0)}s] ${m}\n`);
    log(loadText(load));
    const round = (i: number) => {
      const l = loadAvg1m();
      roundLoads.push(l);
      log(`round ${i}/${rounds}: ${loadText(l)}`);
    };
    let result: BenchResult;
    try {
      const r = await b.run({ quick, rounds, log, round, resultOf });
      result = {
        name: b.name,
        title: b.title,
        quick,
        startedAt: new Date(started).toISOString(),
        durationS: (Date.now() - started) / 1000,
        ...r,
      };
    } catch (err) {
      failed++;
      result = {
        name: b.name,
        title: b.title,
        quick,
        status: 'not-run',
        columns: [],
        rows: [],
        goals: [],
        notes: [`failed: ${(err as Error).message.split('\n')[0]}`],
        startedAt: new Date(started).toISOString(),
        durationS: (Date.now() - started) / 1000,
      };
    }
    result.notes.push(
      `1-min load average when it started: ${load}${roundLoads.length ? `; before each round: ${roundLoads.join(', ')}` : ''}.${[load, ...roundLoads].some((l) => l > LOAD_WARN) ? ` Over ${LOAD_WARN}: other work was running, the spread columns show how much it moved the numbers.` : ''}`,
    );
    printResult(result);
    // A machine that cannot run a benchmark (edge without root) keeps the last real result.
    const kept = prev?.results[b.name];
    if (result.status === 'skipped' && kept && kept.status !== 'skipped')
      process.stdout.write(`  (kept the previous ${b.name} result from ${kept.startedAt})\n`);
    else {
      file.results[b.name] = result;
      measured.add(b.name);
    }
    // Written after every benchmark: an interrupted run still leaves what it measured.
    writeAll(OUT, file, ALL, INTRO);
  }
  process.stdout.write(
    `\nwrote ${OUT}/results.json, results.svg, README.md in ${((Date.now() - t0) / 1000).toFixed(0)} s${quick ? ` (quick: ${DOCS} left as it was)` : ''}\n`,
  );
  process.exit(failed ? 1 : 0);
}

await main();
