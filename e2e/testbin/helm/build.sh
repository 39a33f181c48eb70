#!/usr/bin/env bash
# Builds helm (the version pinned in this folder's go.mod, as a Go `tool`) and caches it under
# $CKPT_HELM_ROOT/<key>/helm (default ~/.cache/ckpt-preempt/helm/<key>, honouring XDG_CACHE_HOME),
# where <key> hashes go.mod, go.sum and RECIPE. A warm cache builds nothing. Used by `make chart`
# and the e2e chart tests (e2e/chart.py computes the same key). Prints the binary on its last line.
# `build.sh --find` builds nothing: prints the cached binary, or exits 1 when there is none.
# Cold: about 2 min on 2 cores once the modules are downloaded (measured 123 s), ~5 min with them.
set -euo pipefail
export LC_ALL=C
here="$(cd "$(dirname "$0")" && pwd)"
# Bump when the build recipe (flags, layout) changes, so old caches are not reused.
RECIPE=1
key="$( { cat "$here/go.mod" "$here/go.sum"; echo "recipe=$RECIPE"; } | sha256sum | cut -c1-16)"
root="${CKPT_HELM_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/ckpt-preempt/helm}"
cache="$root/$key"
bin="$cache/helm"

if [[ "${1:-}" == --find ]]; then
  [[ -x "$bin" ]] || { echo "helm: not built ($bin): run e2e/testbin/helm/build.sh" >&2; exit 1; }
  echo "$bin"
  exit 0
fi
if [[ -x "$bin" ]]; then
  echo "helm: cached $bin"
  echo "$bin"
  exit 0
fi
command -v go >/dev/null || { echo "helm: go not found: install Go >= 1.26" >&2; exit 1; }
mkdir -p "$root"
tmp="$(mktemp -d "$root/.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cd "$here"
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
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
rm -rf "$cache" && mv "$tmp" "$cache"
trap - EXIT
echo "helm: built in $(( $(date +%s) - start ))s: $bin"
echo "$bin"
