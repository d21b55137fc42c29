import type { BenchResult, BenchSpec } from '../lib/report.ts';

export interface BenchContext {
  quick: boolean;
  /** Rounds of the measured phase for benchmarks whose verdict can flip (see lib/spread.ts). */
  rounds: number;
  log(msg: string): void;
  /** Call before round `i` (1-based): prints the load average and warns when it is high. */
  round(i: number): void;
  /**
   * Another benchmark's result: the one this run measured (`sameRun`), or else the recorded one
   * (results.json), for targets stated against another benchmark's numbers.
   */
  resultOf(name: string): { result: BenchResult; sameRun: boolean } | undefined;
}

export interface Benchmark extends BenchSpec {
  run(ctx: BenchContext): Promise<Omit<BenchResult, 'name' | 'title' | 'quick' | 'startedAt' | 'durationS'>>;
}
