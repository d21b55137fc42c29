#!/usr/bin/env bash
# Builds the edge benchmark's SYN sender into test/bench/edge/build/ (quick when up to date).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$here/build"
if [ ! -x "$here/build/synflood" ] || [ "$here/synflood.c" -nt "$here/build/synflood" ]; then
  cc -O2 -Wall -Wextra -o "$here/build/synflood.tmp" "$here/synflood.c"
  mv "$here/build/synflood.tmp" "$here/build/synflood"
fi
