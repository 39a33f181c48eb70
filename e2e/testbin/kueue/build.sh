#!/usr/bin/env bash
# Builds Kueue's manager (sigs.k8s.io/kueue/cmd/kueue at the version pinned in this folder's go.mod,
# as a Go `tool`) and caches it under $CKPT_KUEUE_ROOT/<key>/ (default
# ~/.cache/ckpt-preempt/kueue/<key>, honouring XDG_CACHE_HOME), where <key> hashes go.mod, go.sum
# and RECIPE. Next to the binary: crd/ (Kueue's CRDs, copied from the module's
# config/components/crd/bases), webhook-manifests.yaml (the module's
# config/components/webhook/manifests.yaml, read for the webhook paths and rules) and version.
# Nothing of Kueue's goes into the repository. A warm cache builds nothing. Used by
# e2e/harness/kueue.py (which computes the same key) for e2e/test_kueue_*.py. Prints the binary on
# its last line; `build.sh --find` builds nothing: prints the cached binary, or exits 1.
# Cold: about 4 min on 2 cores once the modules are downloaded (see e2e/README.md for measurements).
set -euo pipefail
export LC_ALL=C
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../cached_go_build.sh"
# Bump when the build recipe (flags, layout) changes, so old caches are not reused.
RECIPE=1
root="${CKPT_KUEUE_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/ckpt-preempt/kueue}"
cached_go_begin kueue "$root" kueue "${1:-}" "$RECIPE" "$here/go.mod" "$here/go.sum"
cd "$here"
version="$(go list -m -f '{{.Version}}' sigs.k8s.io/kueue)"
start=$(date +%s)
echo "kueue: building $version into $bin (cold: about 4 min on 2 cores, then cached)"
go mod download sigs.k8s.io/kueue
mod="$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
# The version variables upstream's Makefile stamps (sigs.k8s.io/kueue@v0.17.0 Makefile, LD_FLAGS),
# so the manager's startup log tells the truth. The build date is fixed so the build is reproducible.
pkg=sigs.k8s.io/kueue/pkg/version
go build -trimpath \
  -ldflags "-s -w -X $pkg.GitVersion=$version -X $pkg.GitCommit=$version -X $pkg.BuildDate=1970-01-01T00:00:00Z" \
  -o "$tmp/kueue" sigs.k8s.io/kueue/cmd/kueue
mkdir -p "$tmp/crd"
cp "$mod"/config/components/crd/bases/*.yaml "$tmp/crd/"
cp "$mod/config/components/webhook/manifests.yaml" "$tmp/webhook-manifests.yaml"
chmod -R u+w "$tmp"
echo "$version" >"$tmp/version"
"$tmp/kueue" --help >/dev/null 2>&1 || { echo "kueue: built binary does not run" >&2; exit 1; }
cached_go_finish kueue "$start"
