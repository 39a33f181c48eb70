#!/usr/bin/env bash
# Gets the real Prometheus server the health e2e tests and bench/health_refresh.py run against:
# Debian's `prometheus` package, unpacked (dpkg -x) into a cache folder, never installed, so no
# service starts and nothing outside the cache changes. Its dependencies are web-UI JavaScript
# only; the binary links libc alone, and the tests use the HTTP API, not the UI.
# Output: $CKPT_PROMETHEUS_ROOT/<key>/{prometheus,promtool,versions.env}, default
# ~/.cache/ckpt-preempt/prometheus/<key> (honouring XDG_CACHE_HOME), where <key> hashes this
# script; e2e/harness/promstack.py computes the same key. A warm cache downloads nothing. Prints the
# cache folder on its last line.
set -euo pipefail
export LC_ALL=C
here="$(cd "$(dirname "$0")" && pwd)"
# Debian bookworm ships 2.42 (https://packages.debian.org/bookworm/prometheus). The key hashes this
# whole script, so any change to it builds a fresh cache entry.
PACKAGE=prometheus
key="$(sha256sum < "$here/build.sh" | cut -c1-16)"
root="${CKPT_PROMETHEUS_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/ckpt-preempt/prometheus}"
cache="$root/$key"

if [[ -f "$cache/.complete" ]]; then
  echo "prometheus: cached $cache/prometheus"
  echo "$cache"
  exit 0
fi
command -v apt-get >/dev/null && command -v dpkg >/dev/null || {
  echo "prometheus: needs apt-get and dpkg (Debian/Ubuntu); elsewhere set CKPT_PROMETHEUS to a" \
       "prometheus binary" >&2
  exit 1
}
start=$(date +%s)
mkdir -p "$root"
tmp="$(mktemp -d "$root/.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# As root, apt warns that its _apt user cannot reach a private folder and downloads as root.
download() { (cd "$tmp" && apt-get download -q "$PACKAGE" 2>&1) ; }
if ! download; then
  # A clean machine (CI) may have no package lists yet; only root may fetch them.
  [[ $(id -u) == 0 ]] || { echo "prometheus: apt-get download failed (run apt-get update)" >&2
                           exit 1; }
  echo "prometheus: apt-get download failed; running apt-get update"
  apt-get update -q >/dev/null
  download
fi
deb=$(ls "$tmp"/"$PACKAGE"_*.deb)
version=$(dpkg-deb -f "$deb" Version)
dpkg -x "$deb" "$tmp/root"
mv "$tmp/root/usr/bin/prometheus" "$tmp/root/usr/bin/promtool" "$tmp/"
rm -rf "$tmp/root" "$deb"
"$tmp/prometheus" --version >/dev/null  # it runs here, or the cache entry is not written
printf 'PROMETHEUS_PACKAGE=%s\nPROMETHEUS_VERSION=%s\n' "$PACKAGE" "$version" > "$tmp/versions.env"
touch "$tmp/.complete"
rm -rf "$cache" && mv "$tmp" "$cache"
trap - EXIT
echo "prometheus: $PACKAGE $version unpacked in $(( $(date +%s) - start ))s"
echo "$cache"
