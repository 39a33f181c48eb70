# Sourced by the build scripts of single Go binaries that are cached outside the repository
# (e2e/testbin/helm/build.sh, e2e/podresources/build.sh), never committed.
#
#   cached_go_begin NAME ROOT BINARY FIND RECIPE FILE...
#     NAME: what the messages say; ROOT: the cache folder (one sub-folder per key); BINARY: the
#     file name; FIND: the script's first argument (--find: build nothing); RECIPE: bumped when
#     the build recipe changes; FILE...: what the key hashes (go.mod, go.sum, sources).
#     Sets $bin, $cache and $tmp. With --find, or when $bin is already built, prints $bin and
#     exits the script; otherwise checks for Go, makes $tmp (removed on exit unless finished)
#     and exports the build environment. The key is the first 16 hex digits of sha256 over the
#     files' contents followed by "recipe=RECIPE" (tests/hwprobe/podreslib.py computes it too).
#   cached_go_finish NAME START
#     Moves $tmp into place and prints $bin on the last line.

cached_go_begin() {
  local name=$1 root=$2 binary=$3 find=$4 recipe=$5
  shift 5
  local key
  key="$( { cat "$@"; echo "recipe=$recipe"; } | sha256sum | cut -c1-16)"
  cache="$root/$key"
  bin="$cache/$binary"
  if [[ "$find" == --find ]]; then
    [[ -x "$bin" ]] || { echo "$name: not built ($bin): run $0" >&2; exit 1; }
    echo "$bin"
    exit 0
  fi
  if [[ -x "$bin" ]]; then
    echo "$name: cached $bin"
    echo "$bin"
    exit 0
  fi
  command -v go >/dev/null || { echo "$name: go not found: install Go >= 1.26" >&2; exit 1; }
  mkdir -p "$root"
  tmp="$(mktemp -d "$root/.tmp.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
}

cached_go_finish() {
  local name=$1 start=$2
  rm -rf "$cache" && mv "$tmp" "$cache"
  trap - EXIT
  echo "$name: built in $(( $(date +%s) - start ))s: $bin"
  echo "$bin"
}
