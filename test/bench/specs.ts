/** Every benchmark, in report order, and the README's introduction. */
import { backlog } from './benchmarks/backlog.ts';
import { edge } from './benchmarks/edge.ts';
import { fanout } from './benchmarks/fanout.ts';
import { ingest } from './benchmarks/ingest.ts';
import { limiter } from './benchmarks/limiter.ts';
import { noisy } from './benchmarks/noisy.ts';
import { storage } from './benchmarks/storage.ts';
import type { Benchmark } from './benchmarks/types.ts';

export const ALL: Benchmark[] = [ingest, fanout, noisy, backlog, limiter, edge, storage];

export const INTRO = `Run all of them with \`pnpm bench\` (on this 2-core machine about 35 min for ingest, fan-out, noisy, backlog, limiter and edge, plus 45–50 min for the storage benchmark's 1 M events × 10 endpoints (about 4,000 deliveries/s with history on); \`SPILLWAY_BENCH_STORAGE_EVENTS\` makes that smaller, and its row then says how many), \`--only ingest,limiter\` for some; \`pnpm bench --quick\` (about 8 min) is a smoke test that writes its results under the temp dir and leaves this directory alone. Every number comes from one run on one machine, with the peers measured in that same run; ratios are what carry over to other machines. The peers include what a team would write instead of Spillway ("naive": one BullMQ job per event or delivery), not only the machine's limits (nginx, raw undici). The machine is shared (2 cores, other builds and tests were running during development), so absolute numbers are noisy: every benchmark whose verdict can flip (ingest and fan-out ratios, noisy neighbour, backlog RSS, XDP drop rate) runs its measured phase in rounds (3; \`--quick\` 2) and shows the median and the worst round, and its verdict uses the worst. The 1-min load average is printed before every benchmark and round, with a warning above 0.5. Knobs: \`SPILLWAY_BENCH_BACKLOG=<n>\` sets the backlog size, \`SPILLWAY_BENCH_LOG_LEVEL\` the Spillway processes' log level (default warn), \`SPILLWAY_BENCH_BIN=<checkout>/packages/router/bin/spillway.mjs\` runs another built checkout's roles under this harness, and \`SPILLWAY_BENCH_COMPARE_BIN=<same>\` adds that checkout's worker to every fan-out round beside this tree's (two trees compared within one run), \`SPILLWAY_BENCH_CASES=raw,spw1,…\` runs only those fan-out cases, \`SPILLWAY_BENCH_PROFILE=<dir>\` has every Spillway process write a V8 CPU profile there, \`SPILLWAY_BENCH_METRICS=<dir>\` its /metrics at the end, and \`SPILLWAY_BENCH_NODE_OPTIONS\` adds Node options to them (an \`--import\` preload, say). Needs wrk and nginx (Debian \`wrk\`, \`nginx-light\`), the project Redis (AOF everysec, \`infra/local/redis.sh\`) and Kafka (\`infra/local/kafka.sh\`), the io_uring addon built (\`node packages/ingest/native/build.mjs\`); the edge benchmark needs root and bpf/ built (\`bash bpf/build.sh\`).`;

export const OUT_DIR = new URL('../../docs/benchmarks', import.meta.url);
