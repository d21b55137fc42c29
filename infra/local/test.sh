#!/usr/bin/env bash
# The README's second command: everything the test suite needs, then the suite.
#   bash infra/local/test.sh [vitest args...]
# Installs Debian deps when missing, bootstraps Node 24 + pnpm, installs packages, builds the
# native parts and bpf/, typechecks and lints, starts the project's Redis (6390, AOF) and Kafka
# (9092), runs vitest.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash infra/local/deps.sh
source infra/local/env.sh
pnpm install --frozen-lockfile --reporter=silent
pnpm run -s build
SPILLWAY_BPF_REQUIRED=1 bash bpf/build.sh
pnpm exec tsc -p tsconfig.json --noEmit
pnpm exec biome check --diagnostic-level=error .
bash infra/local/redis.sh start
bash infra/local/kafka.sh start
export SPILLWAY_REDIS_URL="${SPILLWAY_REDIS_URL:-redis://127.0.0.1:6390}"
export SPILLWAY_KAFKA_BROKERS="${SPILLWAY_KAFKA_BROKERS:-127.0.0.1:9092}"
exec pnpm exec vitest run "$@"
