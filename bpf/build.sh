#!/usr/bin/env bash
# Builds bpf/ (programs, skeletons, loader, test runners) into bpf/.build. Idempotent and quick when
# up to date (make decides). Exits 0 with a warning when the toolchain is missing, so callers that
# only want "build if possible" can ignore it; SPILLWAY_BPF_REQUIRED=1 makes a missing tool fatal.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
missing=()
for t in clang bpftool make cc flock; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
[ -f /usr/include/bpf/libbpf.h ] || missing+=("libbpf-dev")
if [ ${#missing[@]} -gt 0 ]; then
  echo "bpf/build.sh: missing ${missing[*]} (infra/local/deps.sh installs them); bpf/ not built" >&2
  [ "${SPILLWAY_BPF_REQUIRED:-0}" = 1 ] && exit 1
  exit 0
fi
# Test files run in parallel and each builds first: one make at a time, the others wait and then
# find everything up to date.
mkdir -p "$here/.build"
exec flock "$here/.build/.lock" make -C "$here" -s -j"$(nproc)" all
