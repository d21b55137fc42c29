#!/usr/bin/env bash
# Builds and runs the C unit tests of the native core under ASan + UBSan.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${TMPDIR:-/tmp}/spillway-native-tests"
mkdir -p "$out"
cc="${CC:-cc}"
"$cc" -std=gnu11 -g -O1 -Wall -Wextra -Werror -fsanitize=address,undefined -fno-sanitize-recover=all \
  -I"$here/src/core" "$here/test/test_parser.c" "$here/src/core/http_parser.c" -o "$out/test_parser"
"$out/test_parser"
# The ring itself (liburing, a real loopback socket): the bound on unsent output (issue 15).
"$cc" -std=gnu11 -g -O1 -Wall -Wextra -Werror -Wno-unused-parameter -fsanitize=address,undefined -fno-sanitize-recover=all \
  -D_GNU_SOURCE -I"$here/src/core" "$here/test/test_ring.c" "$here/src/core/ring.c" "$here/src/core/conn.c" \
  "$here/src/core/http_parser.c" "$here/src/core/verify.c" -o "$out/test_ring" -luring -lcrypto -lpthread
"$out/test_ring"
