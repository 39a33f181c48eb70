#!/usr/bin/env bash
# Builds the mock libnvidia-ml.so.1 (this folder's Go module) and caches it, with a copy of the
# profiles, under $CKPT_MOCKNVML_ROOT/<key> (default ~/.cache/ckpt-preempt/mocknvml/<key>, honouring
# XDG_CACHE_HOME), where <key> hashes go.mod, go.sum and the sources. A warm cache builds
# nothing. Prints the cache folder on its last line.
set -euo pipefail
export LC_ALL=C  # glob order feeds the cache key; tests/hwprobe computes the same key
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
key="$(cat "$here/go.mod" "$here/go.sum" "$here"/*.go "$here"/*.h | sha256sum | cut -c1-16)"
root="${CKPT_MOCKNVML_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/ckpt-preempt/mocknvml}"
cache="$root/$key"
lib="$cache/libnvidia-ml.so.1"

if [[ ! -f "$lib" ]]; then
  command -v go >/dev/null || { echo "mocknvml: go not found" >&2; exit 1; }
  mkdir -p "${cache%/*}"
  tmp="$(mktemp -d "${cache%/*}/.tmp.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo "mocknvml: building $lib"
  src="$tmp/src"
  mkdir -p "$src" && cp "$here"/go.mod "$here"/go.sum "$here"/*.go "$here"/*.h "$src/"
  # The soname matters: pynvml dlopens "libnvidia-ml.so.1", and a library already loaded under
  # that soname (ctypes.CDLL of the full path) satisfies it.
  link() {
    (cd "$src" && CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
       go build -trimpath -buildmode=c-shared \
       -ldflags "-s -w -extldflags -Wl,-soname,libnvidia-ml.so.1" \
       -o "$tmp/libnvidia-ml.so.1" .)
  }
  link
  # go-nvml's nvml package (imported for its mock machines) wraps every NVML function of the
  # real library and leaves each one this mock does not define undefined, which ctypes, loading
  # with RTLD_NOW, refuses. Define each as a stub answering NVML_ERROR_FUNCTION_NOT_FOUND (13),
  # as a driver without that function would, and link again.
  nm -D --undefined-only "$tmp/libnvidia-ml.so.1" |
    awk '$2 ~ /^nvml/ { print "int " $2 "(void) { return 13; }" }' > "$src/zz_stubs.c"
  echo "mocknvml: $(wc -l < "$src/zz_stubs.c") NVML functions answer FUNCTION_NOT_FOUND"
  link
  if nm -D --undefined-only "$tmp/libnvidia-ml.so.1" | grep -q ' nvml'; then
    echo "mocknvml: undefined NVML symbols remain" >&2; exit 1
  fi
  rm -rf "$src"
  rm -f "$tmp"/*.h  # cgo writes the export header beside the library
  ln -sf libnvidia-ml.so.1 "$tmp/libnvidia-ml.so"
  mkdir -p "$tmp/profiles"
  cp "$repo"/hwprobe/profiles/*.yaml "$tmp/profiles/"
  rm -rf "$cache" && mv "$tmp" "$cache"
  trap - EXIT
else
  # Profiles are data, not build inputs: refresh the copy without rebuilding.
  mkdir -p "$cache/profiles" && cp "$repo"/hwprobe/profiles/*.yaml "$cache/profiles/"
  echo "mocknvml: cached $lib"
fi
ln -sfn "$key" "${cache%/*}/current"
echo "$cache"
