#!/usr/bin/env bash
# Installs the Debian packages Spillway builds and tests with, when any is missing:
# redis-server, Java 17 + Maven (Kafka), liburing (ingest addon), clang/llvm/libbpf/bpftool (bpf/),
# wrk + nginx-light (benchmarks), iproute2 (network namespaces), podman + runc + mmdebstrap (the
# container image, deploy/image/build.sh), prometheus (promtool, for deploy/prometheus rule tests),
# chromium (console browser tests, driven by playwright-core: the browsers Playwright downloads
# itself cannot be fetched here), libssl-dev + curl (test/bench/ktls: the C TLS floor server and its
# selftest). Idempotent; needs root.
set -euo pipefail
pkgs=(redis-server openjdk-17-jre-headless maven liburing-dev clang llvm libbpf-dev bpftool build-essential python3 wrk nginx-light iproute2 libclang-rt-14-dev
  podman runc mmdebstrap prometheus chromium libssl-dev curl)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
