#!/usr/bin/env bash
# Builds kubectl (this folder's go.mod: k8s.io/kubernetes at the same release as the control
# plane's ../go.mod, as a Go `tool`) and caches it under $CKPT_KUBECTL_ROOT/<key>/kubectl
# (default ~/.cache/ckpt-preempt/kubectl/<key>, honouring XDG_CACHE_HOME), where <key> hashes
# go.mod, go.sum and RECIPE. Its own module and cache, so adding it did not change the control
# plane's key. A warm cache builds nothing. Used by the
# e2e tests that drive `kubectl drain` (e2e/harness/kubectl.py computes the same key). Prints the binary
# on its last line; `build.sh --find` builds nothing: prints the cached binary, or exits 1.
set -euo pipefail
export LC_ALL=C
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../cached_go_build.sh"
# Bump when the build recipe (flags, layout) changes, so old caches are not reused.
RECIPE=1
root="${CKPT_KUBECTL_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/ckpt-preempt/kubectl}"
cached_go_begin kubectl "$root" kubectl "${1:-}" "$RECIPE" "$here/go.mod" "$here/go.sum"
cd "$here"
kube="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
major="${kube#v}"; major="${major%%.*}"
minor="${kube#v*.}"; minor="${minor%%.*}"
start=$(date +%s)
echo "kubectl: building $kube into $bin (cold: several minutes on 2 cores, then cached)"
# The same version stamps as the control plane (../build.sh), so `kubectl version` tells the truth.
vflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  vflags+=" -X $pkg.gitVersion=$kube -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  vflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
go build -trimpath -ldflags "-s -w $vflags" -o "$tmp/kubectl" k8s.io/kubernetes/cmd/kubectl
"$tmp/kubectl" version --client >/dev/null
cached_go_finish kubectl "$start"
