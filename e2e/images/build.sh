#!/usr/bin/env bash
# Build Moldau's images into the test bed's podman storage, offline: the wheels of Moldau and
# of its dependencies are made on this machine, the build itself runs with --network=none on
# the cached Debian base image (make kube-deps).
#
#   build.sh [TARGET...]   targets of the Dockerfile: broker (the default), operator; tags
#                          localhost/moldau-<target>:<version> and prints each tag, in order
set -euo pipefail
KUBE_SCRIPT=images
# shellcheck source=../kube/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../kube/lib.sh"

REPO="$(cd "$KUBE_HERE/../.." && pwd)"
UV=("$REPO/.venv/bin/uv")
PIP=("$REPO/.venv/bin/python" -m pip)
CONTEXT="$KUBE_CACHE/src/moldau-image"
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/broker/pyproject.toml")
TARGETS=("${@:-broker}")
for target in "${TARGETS[@]}"; do
  case "$target" in
    broker|operator) ;;
    *) die "unknown image target '$target': broker or operator" ;;
  esac
done
# The base image's Python and machine (Debian 12: glibc 2.36): wheels that fit them.
TARGET=(--python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none
        --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --only-binary=:all:)

command -v podman >/dev/null || die "podman is not installed: run 'make kube-deps'"
[ -x "${UV[0]}" ] || die "$REPO/.venv is missing: run 'make install'"

load_base() {
  if podman_ image exists "$PYTHON_IMAGE"; then return; fi
  [ -f "$KUBE_IMAGES/python.tar" ] \
    || die "base image archive $KUBE_IMAGES/python.tar is missing: run 'make kube-deps'"
  podman_ load --quiet -i "$KUBE_IMAGES/python.tar" >/dev/null
}

wheels() {
  rm -rf "$CONTEXT"; mkdir -p "$CONTEXT/wheels/pip"
  local component
  for component in client broker operator; do
    UV_SYSTEM_CERTS=1 "${UV[@]}" build --quiet --wheel --out-dir "$CONTEXT/wheels" \
      "$REPO/$component" || return 1
  done
  # The dependency versions the workspace is locked to, for each image's distribution.
  local target
  : > "$CONTEXT/requirements.txt"
  for target in "${TARGETS[@]}"; do
    (cd "$REPO" && UV_SYSTEM_CERTS=1 "${UV[@]}" export --quiet --package "moldau-$target" \
      --no-dev --no-emit-workspace --no-hashes --format requirements-txt) \
      >> "$CONTEXT/requirements.txt" || return 1
  done
  "${PIP[@]}" download --quiet --disable-pip-version-check "${TARGET[@]}" \
    --dest "$CONTEXT/wheels" -r "$CONTEXT/requirements.txt" || return 1
  # pip runs from its wheel inside the build and stays out of the image.
  "${PIP[@]}" download --quiet --disable-pip-version-check --only-binary=:all: --no-deps \
    --dest "$CONTEXT/wheels/pip" pip || return 1
  mv "$CONTEXT"/wheels/pip/pip-*.whl "$CONTEXT/wheels/pip/pip.whl"
}

build() {
  podman_ build --quiet --format docker --network=none --target "$1" \
    --build-arg "BASE_IMAGE=$PYTHON_IMAGE" --build-arg "VERSION=$VERSION" \
    --build-arg "MOLDAU_WHEELS=$(cat "$CONTEXT"/wheels/moldau_*.whl | sha256sum | cut -c1-16)" \
    -f "$REPO/Dockerfile" -t "localhost/moldau-$1:$VERSION" "$CONTEXT" >/dev/null
}

mkdir -p "$KUBE_CACHE/src"
# Two builds at once would share the context folder: one waits.
exec 9>"$KUBE_CACHE/.lock-moldau-image"; flock 9
step "base image $PYTHON_IMAGE" load_base
step "wheels" wheels
for target in "${TARGETS[@]}"; do
  image="localhost/moldau-$target:$VERSION"
  step "image $image" build "$target"
  say "$image: $(podman_ image inspect --format '{{.Size}}' "$image" | numfmt --to=si)B"
done
for target in "${TARGETS[@]}"; do echo "localhost/moldau-$target:$VERSION"; done
