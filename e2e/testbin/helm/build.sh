#!/usr/bin/env bash
# Builds helm (the version pinned in this folder's go.mod, as a Go `tool`) and caches it under
# $CKPT_HELM_ROOT/<key>/helm (default ~/.cache/ckpt-preempt/helm/<key>, honouring XDG_CACHE_HOME),
# where <key> hashes go.mod, go.sum and RECIPE. A warm cache builds nothing. Used by `make chart`
# and the e2e chart tests (e2e/harness/chart.py computes the same key). Prints the binary on its last line.
# `build.sh --find` builds nothing: prints the cached binary, or exits 1 when there is none.
# Cold: about 2 min on 2 cores once the modules are downloaded (measured 123 s), ~5 min with them.
set -euo pipefail
export LC_ALL=C
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../cached_go_build.sh"
# Bump when the build recipe (flags, layout) changes, so old caches are not reused.
RECIPE=1
root="${CKPT_HELM_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/ckpt-preempt/helm}"
cached_go_begin helm "$root" helm "${1:-}" "$RECIPE" "$here/go.mod" "$here/go.sum"
cd "$here"
version="$(go list -m -f '{{.Version}}' helm.sh/helm/v4)"
start=$(date +%s)
echo "helm: building $version into $bin (cold: 2-5 min on 2 cores, then cached)"
# The version variables upstream's Makefile stamps (helm.sh/helm/v4@v4.3.2 Makefile, LDFLAGS), so
# `helm version` tells the truth.
pkg=helm.sh/helm/v4/internal/version
go build -trimpath \
  -ldflags "-w -s -X $pkg.version=$version -X $pkg.metadata= -X $pkg.gitTreeState=clean" \
  -o "$tmp/helm" helm.sh/helm/v4/cmd/helm
"$tmp/helm" version --short >/dev/null
cached_go_finish helm "$start"
