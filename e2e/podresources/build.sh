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
source "$here/../testbin/cached_go_build.sh"
# Bump when the build recipe (flags, layout) changes, so old caches are not reused.
RECIPE=1
root="${CKPT_PODRESOURCES_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/ckpt-preempt/podresources}"
cached_go_begin podresources "$root" podresources-server "${1:-}" "$RECIPE" \
  "$here/go.mod" "$here/go.sum" "$here/main.go"
cd "$here"
start=$(date +%s)
echo "podresources: building into $bin"
go build -trimpath -ldflags "-w -s" -o "$tmp/podresources-server" .
cached_go_finish podresources "$start"
