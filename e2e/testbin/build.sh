#!/usr/bin/env bash
# Builds the real control plane the e2e tests run against, from the Go modules pinned in go.mod:
#   etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok (+ kwok's stage YAMLs).
# Output: $CKPT_TESTBIN_ROOT/<key>/ (default ~/.cache/ckpt-preempt/testbin/<key>), where <key> is
# a hash of go.mod, go.sum and RECIPE below, so a warm machine rebuilds nothing. e2e/harness/localcluster.py
# computes the same key to find the binaries. Binaries never go into the repository.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Bump when the build recipe (flags, tags, file layout) changes, so old caches are not reused.
RECIPE=1

log() { printf '[testbin %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

run_mocknvml() {
  # Built by its own script, with its own module and cache; nothing to pass.
  if [[ -x "$here/mocknvml/build.sh" ]]; then
    log "mock NVML: running mocknvml/build.sh"
    "$here/mocknvml/build.sh"
  fi
}

run_prometheus() {
  # The real Prometheus for the health tests: its own script and cache (Debian's package).
  log "prometheus: running prometheus/build.sh"
  "$here/prometheus/build.sh"
}

run_helm() {
  # helm for `make chart` and e2e/test_chart_*.py: its own module and cache, like mocknvml.
  if [[ -x "$here/helm/build.sh" ]]; then
    log "helm: running helm/build.sh"
    "$here/helm/build.sh"
  fi
}

run_kubectl() {
  # kubectl for the drain tests (e2e/test_*drain*): its own module and cache, like helm.
  if [[ -x "$here/kubectl/build.sh" ]]; then
    log "kubectl: running kubectl/build.sh"
    "$here/kubectl/build.sh"
  fi
}

run_kueue() {
  # Kueue's manager, CRDs and webhook manifests for e2e/test_kueue_*.py: its own module and cache,
  # like helm. Its failure fails this script only under CKPT_REQUIRE_TESTBIN=1; otherwise those
  # tests skip, saying how to build it.
  if [[ -x "$here/kueue/build.sh" ]]; then
    log "kueue: running kueue/build.sh"
    "$here/kueue/build.sh" || {
      [[ "${CKPT_REQUIRE_TESTBIN:-}" != 1 ]] || return 1
      log "kueue: build failed: the Kueue e2e tests will be skipped"
    }
  fi
}

command -v go >/dev/null || { echo "go not found: install Go >= 1.26" >&2; exit 1; }
gover=$(go env GOVERSION)
case "$gover" in
  go1.2[6-9]*|go1.[3-9][0-9]*|go[2-9]*) ;;
  *) echo "need Go >= 1.26 (found $gover)" >&2; exit 1 ;;
esac

key=$( { cat "$here/go.mod" "$here/go.sum"; echo "recipe=$RECIPE"; } | sha256sum | cut -c1-16)
root=${CKPT_TESTBIN_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/ckpt-preempt/testbin}
dest="$root/$key"

if [[ -f "$dest/.complete" ]]; then
  log "up to date: $dest"
  run_mocknvml
  run_prometheus
  run_helm
  run_kubectl
  run_kueue
  exit 0
fi

start=$(date +%s)
log "building into $dest (cold: about 11-22 min on 2 cores, then cached)"
cd "$here"
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"

log "downloading modules"
go mod download

modver() { go list -m -f '{{.Version}}' "$1"; }
kube=$(modver k8s.io/kubernetes)          # e.g. v1.37.2
etcd=$(modver go.etcd.io/etcd/server/v3)
kwok=$(modver sigs.k8s.io/kwok)
major=${kube#v}; major=${major%%.*}
minor=${kube#v*.}; minor=${minor%%.*}
log "versions: kubernetes $kube, etcd $etcd, kwok $kwok"

# /version must tell the truth: stamp the same variables upstream's build (hack/lib/version.sh) sets.
vflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  vflags+=" -X $pkg.gitVersion=$kube -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  vflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

tmp="$dest.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"; mkdir -p "$tmp/stages"

build() {  # build NAME PACKAGE [extra go build args...]
  local name=$1 pkg=$2; shift 2
  local t0; t0=$(date +%s)
  log "go build $name ($pkg)"
  go build -trimpath "$@" -o "$tmp/$name" "$pkg"
  log "built $name in $(( $(date +%s) - t0 ))s"
}

# Upstream builds the server binaries with these tags (hack/lib/golang.sh).
ktags=selinux,notest,grpcnotrace
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver -tags "$ktags" -ldflags "-s -w $vflags"
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager \
  -tags "$ktags" -ldflags "-s -w $vflags"
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler -tags "$ktags" -ldflags "-s -w $vflags"
build etcd go.etcd.io/etcd/server/v3 -ldflags "-s -w"
build kwok sigs.k8s.io/kwok/cmd/kwok -ldflags "-s -w $vflags"

# kwok v0.8 ships no built-in stages: take node/pod lifecycles from its module's kustomize files.
kdir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
for f in node/fast/node-initialize node/heartbeat/node-heartbeat \
         node/heartbeat-with-lease/node-heartbeat-with-lease \
         pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
  cp "$kdir/$f.yaml" "$tmp/stages/"
done
chmod -R u+w "$tmp"

cat >"$tmp/versions.env" <<EOF
KUBERNETES_VERSION=$kube
ETCD_VERSION=$etcd
KWOK_VERSION=$kwok
GO_VERSION=$gover
EOF
touch "$tmp/.complete"
rm -rf "$dest"; mv "$tmp" "$dest"
trap - EXIT
log "done in $(( $(date +%s) - start ))s: $dest ($(du -sh "$dest" | cut -f1))"
run_mocknvml
run_prometheus
run_helm
run_kubectl
run_kueue
