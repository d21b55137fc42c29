#!/usr/bin/env bash
# The README's first command: deps, build, a local Redis and Kafka when none is configured, then
# `spillway start` (all roles). Prints the URLs. Ctrl-C stops Spillway (Redis/Kafka stay up; stop
# them with infra/local/redis.sh stop and infra/local/kafka.sh stop).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash infra/local/deps.sh
source infra/local/env.sh
pnpm install --frozen-lockfile --reporter=silent
pnpm run -s build
bash bpf/build.sh
if [ -z "${SPILLWAY_REDIS_URL:-}" ]; then bash infra/local/redis.sh start; export SPILLWAY_REDIS_URL=redis://127.0.0.1:6390; fi
if [ -z "${SPILLWAY_KAFKA_BROKERS:-}" ]; then bash infra/local/kafka.sh start; export SPILLWAY_KAFKA_BROKERS=127.0.0.1:9092; fi
if [ -z "${SPILLWAY_ADMIN_TOKEN:-}" ]; then
  tokfile=.cache/admin-token
  [ -f "$tokfile" ] || (umask 077; head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$tokfile")
  export SPILLWAY_ADMIN_TOKEN="$(cat "$tokfile")"
  echo "admin token (SPILLWAY_ADMIN_TOKEN): $SPILLWAY_ADMIN_TOKEN  (kept in $tokfile)"
fi
if [ -z "${SPILLWAY_SECRET_KEY:-}" ]; then
  # The key stored endpoint and source secrets are encrypted under: keep it, or they cannot be read.
  keyfile=.cache/secret-key
  [ -f "$keyfile" ] || (umask 077; head -c 32 /dev/urandom | base64 > "$keyfile")
  export SPILLWAY_SECRET_KEY="$(cat "$keyfile")"
  echo "secret key (SPILLWAY_SECRET_KEY): kept in $keyfile"
fi
exec node packages/router/bin/spillway.mjs start "$@"
