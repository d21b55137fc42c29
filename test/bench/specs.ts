/** Every benchmark, in report order, and the README's introduction. */
import { backlog } from './benchmarks/backlog.ts';
import { edge } from './benchmarks/edge.ts';
import { fanout } from './benchmarks/fanout.ts';
import { ingest } from './benchmarks/ingest.ts';
import { limiter } from './benchmarks/limiter.ts';
import { noisy } from './benchmarks/noisy.ts';
import type { Benchmark } from './benchmarks/types.ts';

export const ALL: Benchmark[] = [ingest, fanout, noisy, backlog, limiter, edge];

export const INTRO = `Run all of them with \`pnpm bench\` (about 10–14 min; \`pnpm bench --quick\` in about 3 min, \`--only ingest,limiter\` for some). Every number comes from one run on one machine, with the peers measured in that same run; ratios are what carry over to other machines. The machine is shared (2 cores, other builds and tests were running during development), so absolute numbers are noisy. Knobs: \`SPILLWAY_BENCH_BACKLOG=<n>\` sets the backlog size, \`SPILLWAY_BENCH_LOG_LEVEL\` the Spillway processes' log level (default warn). Needs wrk and nginx (Debian \`wrk\`, \`nginx-light\`), the project Redis (AOF everysec, \`infra/local/redis.sh\`) and Kafka (\`infra/local/kafka.sh\`).`;

export const OUT_DIR = new URL('../../docs/benchmarks', import.meta.url);
