#!/usr/bin/env bash
# Builds the PodResources test server (main.go: the kubelet's v1.PodResourcesLister gRPC service,
# registered through k8s.io/kubelet's generated code, fed from a JSON file) and caches it under
# $CKPT_PODRESOURCES_ROOT/<key>/podresources-server (default
# ~/.cache/ckpt-preempt/podresources/<key>, honouring XDG_CACHE_HOME), where <key> hashes go.mod,
# go.sum, main.go and RECIPE. A warm cache builds nothing. tests/hwprobe/podreslib.py computes
# the same key. Prints the binary on its last line. The binary never goes into the repository.
# `build.sh --find` builds nothing: prints the cached binary, or exits 1 when there is none.
set -euo pipefail
export LC_ALL=C
here="$(cd "$(dirname "$0")" && pwd)"
# Bump when the build recipe (flags, layout) changes, so old caches are not reused.
RECIPE=1
key="$( { cat "$here/go.mod" "$here/go.sum" "$here/main.go"; echo "recipe=$RECIPE"; } \
  | sha256sum | cut -c1-16)"
root="${CKPT_PODRESOURCES_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/ckpt-preempt/podresources}"
cache="$root/$key"
bin="$cache/podresources-server"

if [[ "${1:-}" == --find ]]; then
  [[ -x "$bin" ]] || { echo "podresources: not built ($bin): run $0" >&2; exit 1; }
  echo "$bin"
  exit 0
fi
if [[ -x "$bin" ]]; then
  echo "podresources: cached $bin"
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "podresources: go not found: install Go >= 1.26" >&2; exit 1; }
mkdir -p "$root"
tmp="$(mktemp -d "$root/.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cd "$here"
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
start=$(date +%s)
echo "podresources: building into $bin"
go build -trimpath -ldflags "-w -s" -o "$tmp/podresources-server" .
rm -rf "$cache" && mv "$tmp" "$cache"
trap - EXIT
echo "podresources: built in $(( $(date +%s) - start ))s: $bin"
echo "$bin"
