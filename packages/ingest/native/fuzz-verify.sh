#!/usr/bin/env bash
# Fuzzes the C verifier (src/core/verify.c) with libFuzzer + ASan/UBSan.
#   native/fuzz-verify.sh            60 seconds
#   native/fuzz-verify.sh 10000000   ten million executions (any argument > 100000 is a run count)
# Crashes land in $FUZZ_OUT/crash-* and the corpus in $FUZZ_OUT/corpus (default
# /tmp/spillway-fuzz-verify).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
arg="${1:-60}"
out="${FUZZ_OUT:-${TMPDIR:-/tmp}/spillway-fuzz-verify}"
mkdir -p "$out/corpus"
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$here/src/core" "$here/test/fuzz_verify.c" "$here/src/core/verify.c" -o "$out/fuzz_verify" -lcrypto -lpthread
if [ "$arg" -gt 100000 ]; then limit=(-runs="$arg"); else limit=(-max_total_time="$arg"); fi
cd "$out"
exec ./fuzz_verify "${limit[@]}" -max_len=1024 -print_final_stats=1 -artifact_prefix="$out/" corpus
