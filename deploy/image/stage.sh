#!/usr/bin/env bash
# Stages what the image's /app holds into DIR/app: the workspace manifests, the sources of the four
# packages, the router's bin, the io_uring and signing addons and the bpf loader (all already built), and the
# production node_modules of @spillway/router and the packages it uses (from the pnpm store; no dev
# dependencies). Used by build.sh (registry-free image) and by the Dockerfile.
#   bash deploy/image/stage.sh DIR
set -euo pipefail
out="${1:?usage: stage.sh DIR}"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
addon=packages/ingest/native/build/Release/spillway_uring.node
sign=packages/delivery/native/build/Release/spillway_sign.node
edge=bpf/.build/spillway-edge
for f in "$addon" "$sign" "$edge"; do
  [ -f "$f" ] || { echo "deploy/image/stage.sh: $f not built" >&2; exit 1; }
done
files=(package.json pnpm-lock.yaml pnpm-workspace.yaml patches test/package.json packages/router/bin "$addon" "$sign" "$edge")
for p in shared ingest delivery router; do files+=("packages/$p/package.json" "packages/$p/src"); done
rm -rf "$out/app"
mkdir -p "$out/app"
tar -cf - "${files[@]}" | tar -xf - -C "$out/app"
# test/package.json only keeps the lockfile's importers complete for --frozen-lockfile.
(cd "$out/app" && pnpm install --prod --frozen-lockfile --prefer-offline --reporter=silent \
  --filter '@spillway/router...' >&2)
rm -rf "$out/app/test"
