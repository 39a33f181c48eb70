#!/usr/bin/env bash
# Builds the project's container image (deploy/Dockerfile) with podman, with no registry: the
# Dockerfile's BASE is a Debian root filesystem made here with mmdebstrap instead of the official
# Python image it pins for real users. The root filesystem is cached under
# $CKPT_IMAGES_ROOT/<key>/base.tar (default ~/.cache/ckpt-preempt/images/<key>, honouring
# XDG_CACHE_HOME), where <key> hashes the suite, the package list and RECIPE; podman's own layer
# cache makes a rebuild of unchanged sources quick. Used by `make image` and e2e/test_images.py.
#
#   build.sh            build (or reuse) the base, then the image; prints the image on its last line
#   build.sh --find     builds nothing: prints the image if podman has it, built from the current
#                       sources, else exits 1
#   build.sh --podman   prints the podman command and the run flags this machine needs, one a line
#
# Installs podman, mmdebstrap, runc and uidmap with apt-get when missing (as root), as .ci/run
# installs everything itself. Measured times: deploy/README.md ("Images").
set -euo pipefail
export LC_ALL=C
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
# Bump when the recipe (mmdebstrap options, build flags) changes, so old caches are not reused.
RECIPE=1
SUITE=bookworm  # Debian 12: Python 3.11, the version the official base in deploy/Dockerfile has
# python3: the interpreter and its standard library; python3-venv: ensurepip, for the build stage.
PACKAGES="python3,python3-venv"
IMAGE="${CKPT_IMAGE:-localhost/ckpt-preempt:dev}"
# The Dockerfile's `build` stage (the dependencies pip installed, 175 MB, and the wheels) under a
# name: its layers are the next build's cache, and untagged it would be left dangling (listed as
# 330 MB) by every build. Earlier builds' images that lost their tag are removed after a build.
BUILD_STAGE_IMAGE="localhost/ckpt-preempt-build-stage:cache"
# crun (podman's default here) refuses cgroup v1 "hybrid" hosts, and a container engine nested in
# a sandbox may not own a systemd: runc and plain cgroupfs work on both. Some sandboxes refuse
# raising rlimits to podman's defaults, so the run flags lower them.
PODMAN=(podman --runtime runc --cgroup-manager=cgroupfs)
RUN_FLAGS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)

# What the image is built from; its hash labels the image, so --find never offers one built
# from other sources (the tests would run old code).
sources() {
  (cd "$repo" && find deploy/Dockerfile .dockerignore pyproject.toml README.md sdk policies \
    controller hwprobe cli examples -type f ! -path '*/__pycache__/*' ! -name '*.pyc' \
    ! -path '*.egg-info/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}

case "${1:-}" in
  --podman) printf '%s\n' "${PODMAN[@]}" "${RUN_FLAGS[@]}"; exit 0 ;;
  --find)
    command -v podman >/dev/null && "${PODMAN[@]}" image exists "$IMAGE" || exit 1
    built="$("${PODMAN[@]}" image inspect --format '{{index .Labels "ckpt-preempt.sources"}}' "$IMAGE")"
    [ "$built" = "$(sources)" ] || { echo "images: $IMAGE is older than the sources" >&2; exit 1; }
    echo "$IMAGE"; exit 0 ;;
  "") ;;
  *) echo "build.sh: unknown argument '$1' (use --find or --podman)" >&2; exit 2 ;;
esac

missing=()
for tool in podman mmdebstrap runc newuidmap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if ((${#missing[@]})); then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "images: missing ${missing[*]}: install podman, mmdebstrap, runc and uidmap" >&2; exit 1
  fi
  echo "images: installing podman mmdebstrap runc uidmap with apt-get"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman mmdebstrap runc uidmap >/dev/null
fi

start=$(date +%s)
key="$(printf 'suite=%s\npackages=%s\nrecipe=%s\n' "$SUITE" "$PACKAGES" "$RECIPE" \
  | sha256sum | cut -c1-16)"
cache="${CKPT_IMAGES_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/ckpt-preempt/images}/$key"
base="localhost/ckpt-preempt-base:$key"
if [ ! -f "$cache/base.tar" ]; then
  echo "images: making the $SUITE base ($PACKAGES) with mmdebstrap into $cache (about 1-2 min)"
  mkdir -p "$cache"
  tmp="$(mktemp "$cache/base.XXXXXX.tar")"
  trap 'rm -f "$tmp"' EXIT
  # essential: Debian's Essential:yes packages plus the list, no apt in the image. The merged-usr
  # hook merges /usr as bookworm does without the usrmerge package (which pulls in perl, 50 MB).
  # Manuals, documentation (copyright files kept) and translations are left out.
  mmdebstrap --quiet --variant=essential --include="$PACKAGES" \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    "$SUITE" "$tmp" >"$cache/mmdebstrap.log" 2>&1 \
    || { tail -20 "$cache/mmdebstrap.log" >&2; exit 1; }
  mv "$tmp" "$cache/base.tar"
  trap - EXIT
fi
if ! "${PODMAN[@]}" image exists "$base"; then
  "${PODMAN[@]}" import --quiet "$cache/base.tar" "$base" >/dev/null
fi

# pip in the build stage reaches the package index; behind a TLS-intercepting proxy it needs this
# machine's CA bundle, mounted for the build only (never in the image).
ca=()
for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do
  if [ -f "$f" ]; then ca=(--volume "$f:/run/build-ca.crt:ro" --build-arg CA_BUNDLE=/run/build-ca.crt); break; fi
done
build=("${PODMAN[@]}" build --quiet --network=host "${RUN_FLAGS[@]}" "${ca[@]}"
  --ignorefile "$repo/.dockerignore" --build-arg BASE="$base" --label "ckpt-preempt.sources=$(sources)"
  -f "$repo/deploy/Dockerfile")
"${build[@]}" --target build -t "$BUILD_STAGE_IMAGE" "$repo" >/dev/null
"${build[@]}" -t "$IMAGE" "$repo" >/dev/null  # its build stage: all from the cache just made
# Dangling images of earlier builds (an image and a build stage that lost their tag to these),
# with their untagged parents: no cache for these sources. Intermediate images the tagged two
# still stand on are not dangling, so the layer cache stays.
"${PODMAN[@]}" image prune --force --filter label=ckpt-preempt.sources >/dev/null
size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE")
echo "images: $IMAGE built in $(( $(date +%s) - start )) s, $((size / 1000000)) MB"
echo "$IMAGE"
