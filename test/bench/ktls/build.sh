#!/usr/bin/env bash
# Builds tlsd (the kTLS / user-space TLS / plain floor server) into .cache/ktls/. Needs libssl-dev
# (OpenSSL 3) and linux-libc-dev for <linux/tls.h>; both are Debian packages in infra/local/deps.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${KTLS_OUT:-$here/../../../.cache/ktls}"
mkdir -p "$out"
cc -O2 -g -Wall -Wextra -Wno-deprecated-declarations -o "$out/tlsd" "$here/tlsd.c" -lssl -lcrypto
echo "$out/tlsd"
