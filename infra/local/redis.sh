#!/usr/bin/env bash
# Spillway's own Redis for local runs and tests: AOF everysec, noeviction.
#   infra/local/redis.sh start|stop|status [port]     (default port 6390)
# The machine's Redis on 6379 keeps nothing on disk; this one does, under $SPILLWAY_STATE_DIR.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
port="${2:-${SPILLWAY_LOCAL_REDIS_PORT:-6390}}"
state="${SPILLWAY_STATE_DIR:-$root/.cache/state}/redis-$port"
cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }

ensure_binary() {
  command -v redis-server >/dev/null 2>&1 && return 0
  echo "redis: installing redis-server from Debian's packages" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >&2
}

start() {
  if cli ping >/dev/null 2>&1; then echo "redis: already running on 127.0.0.1:$port"; return 0; fi
  ensure_binary
  mkdir -p "$state"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --dir "$state" \
    --appendonly yes --appendfsync everysec --maxmemory-policy noeviction \
    --save "" --pidfile "$state/redis.pid" --logfile "$state/redis.log"
  for _ in $(seq 1 50); do cli ping >/dev/null 2>&1 && { echo "redis: ready on 127.0.0.1:$port (AOF everysec)"; return 0; }; sleep 0.1; done
  echo "redis: did not answer on $port; see $state/redis.log" >&2; exit 1
}

stop() {
  if cli ping >/dev/null 2>&1; then cli shutdown nosave >/dev/null 2>&1 || true; echo "redis: stopped ($port)"; else echo "redis: not running ($port)"; fi
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  restart) stop; sleep 0.2; start ;;
  status) cli ping >/dev/null 2>&1 && echo "redis: running ($port)" || { echo "redis: not running ($port)"; exit 1; } ;;
  *) echo "usage: $0 start|stop|restart|status [port]" >&2; exit 2 ;;
esac
