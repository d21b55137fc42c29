import type { BenchResult, BenchSpec } from '../lib/report.ts';

export interface BenchContext {
  quick: boolean;
  log(msg: string): void;
}

export interface Benchmark extends BenchSpec {
  run(ctx: BenchContext): Promise<Omit<BenchResult, 'name' | 'title' | 'quick' | 'startedAt' | 'durationS'>>;
}
