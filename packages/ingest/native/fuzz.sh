#!/usr/bin/env bash
# Fuzzes the native core with libFuzzer + ASan/UBSan: the HTTP parser, or the C verifier.
#   native/fuzz.sh                    the parser, 60 seconds
#   native/fuzz.sh 300                the parser, 300 seconds
#   native/fuzz.sh 10000000           the parser, ten million executions (any argument > 100000 is a run count)
#   native/fuzz.sh verify [N]         the verifier (src/core/verify.c), the same way
# Crashes land in $FUZZ_OUT/crash-* and the growing corpus in $FUZZ_OUT/corpus (default
# /tmp/spillway-fuzz-<target>: outside native/build, which every node-gyp rebuild wipes).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
target=parser
if [ "${1:-}" = verify ] || [ "${1:-}" = parser ]; then target="$1"; shift; fi
arg="${1:-60}"
out="${FUZZ_OUT:-${TMPDIR:-/tmp}/spillway-fuzz-$target}"
# Per target: the code under test, extra libraries, the longest input, and the seed/dictionary flags.
case "$target" in
  parser) src=http_parser.c libs=() max_len=4096 seeds=(-dict="$here/test/http.dict") extra=("$here/test/corpus") ;;
  verify) src=verify.c libs=(-lcrypto -lpthread) max_len=1024 seeds=() extra=() ;;
esac
mkdir -p "$out/corpus"
clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$here/src/core" "$here/test/fuzz_$target.c" "$here/src/core/$src" -o "$out/fuzz_$target" "${libs[@]}"
if [ "$arg" -gt 100000 ]; then limit=(-runs="$arg"); else limit=(-max_total_time="$arg"); fi
cd "$out"
exec "./fuzz_$target" "${limit[@]}" -max_len="$max_len" "${seeds[@]}" -print_final_stats=1 \
  -artifact_prefix="$out/" corpus "${extra[@]}"
