#!/usr/bin/env bash
# Fuzzes the HTTP parser with libFuzzer + ASan/UBSan.
#   native/fuzz.sh            60 seconds
#   native/fuzz.sh 300        300 seconds
#   native/fuzz.sh 10000000   ten million executions (any argument > 100000 is a run count)
# Crashes land in $FUZZ_OUT/crash-* and the growing corpus in $FUZZ_OUT/corpus (default
# /tmp/spillway-fuzz-parser: outside native/build, which every node-gyp rebuild wipes).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
arg="${1:-60}"
out="${FUZZ_OUT:-${TMPDIR:-/tmp}/spillway-fuzz-parser}"
mkdir -p "$out/corpus"
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$here/src/core" "$here/test/fuzz_parser.c" "$here/src/core/http_parser.c" -o "$out/fuzz_parser"
if [ "$arg" -gt 100000 ]; then limit=(-runs="$arg"); else limit=(-max_total_time="$arg"); fi
cd "$out"
exec ./fuzz_parser "${limit[@]}" -max_len=4096 -dict="$here/test/http.dict" -print_final_stats=1 \
  -artifact_prefix="$out/" corpus "$here/test/corpus"
