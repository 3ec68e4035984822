#!/usr/bin/env bash
# Build Moldau's images into the test bed's podman storage, offline: the wheels of Moldau and
# of its dependencies are made on this machine, the build itself runs with --network=none on
# the cached Debian base image (make kube-deps).
#
#   build.sh [TARGET...]   targets of the Dockerfile: broker (the default), operator, spark;
#                          tags localhost/moldau-<target>:<version> and prints each tag, in order
#
# The spark target also needs Spark's Kafka connector in its Ivy cache (make spark-deps) and
# builds PySpark's wheel from its source release once, into the cache (PyPI has no wheel).
set -euo pipefail
KUBE_SCRIPT=images
# shellcheck source=../kube/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../kube/lib.sh"

REPO="$(cd "$KUBE_HERE/../.." && pwd)"
UV=("$REPO/.venv/bin/uv")
PIP=("$REPO/.venv/bin/python" -m pip)
CONTEXT="$KUBE_CACHE/src/moldau-image"
# Wheels built here that no index serves (PySpark's), kept between builds.
WHEELHOUSE="$KUBE_CACHE/wheels"
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/broker/pyproject.toml")
TARGETS=("${@:-broker}")
for target in "${TARGETS[@]}"; do
  case "$target" in
    broker|operator|spark) ;;
    *) die "unknown image target '$target': broker, operator or spark" ;;
  esac
done
# The base image's Python and machine (Debian 12: glibc 2.36): wheels that fit them.
TARGET=(--python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none
        --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --only-binary=:all:)

command -v podman >/dev/null || die "podman is not installed: run 'make kube-deps'"
[ -x "${UV[0]}" ] || die "$REPO/.venv is missing: run 'make install'"

# load_base IMAGE ARCHIVE: the cached Debian base image, loaded from its archive when missing.
load_base() {
  if podman_ image exists "$1"; then return; fi
  [ -f "$KUBE_IMAGES/$2" ] \
    || die "base image archive $KUBE_IMAGES/$2 is missing: run 'make kube-deps'"
  podman_ load --quiet -i "$KUBE_IMAGES/$2" >/dev/null
}

wants() { [[ " ${TARGETS[*]} " == *" $1 "* ]]; }

# PySpark is published as a source release only: its wheel is built once and kept in the cache.
pyspark_wheel() {
  local version
  version=$(sed -n 's/^pyspark==\([^ ;]*\).*/\1/p' "$CONTEXT/requirements-spark.txt")
  [ -n "$version" ] || { echo "no pyspark pin in the spark image's requirements" >&2; return 1; }
  [ -f "$WHEELHOUSE/pyspark-$version-py2.py3-none-any.whl" ] && return
  "${PIP[@]}" wheel --quiet --disable-pip-version-check --no-deps --no-binary pyspark \
    --wheel-dir "$WHEELHOUSE" "pyspark==$version"
}

# Spark's Kafka connector as `make spark-deps` resolved it, less the jars PySpark ships itself.
connector_jars() {
  local ivy jars name
  ivy=$(cd "$REPO" && .venv/bin/python -c 'from e2e.spark.session import ivy_cache; print(ivy_cache())')
  jars=$(cd "$REPO" && .venv/bin/python -c 'import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent / "jars")')
  [ -f "$ivy/.moldau-complete" ] || die "Spark's Kafka connector is not in $ivy: run 'make spark-deps'"
  mkdir -p "$CONTEXT/spark/jars"
  while read -r name; do
    # Ivy names a jar <organisation>_<artifact>-<version>.jar, Spark's jars/ <artifact>-<version>.jar.
    [ -f "$jars/${name#*_}" ] || cp "$ivy/jars/$name" "$CONTEXT/spark/jars/${name#*_}"
  done < "$ivy/.moldau-complete"
}

# The Spark image's files from the repository: the jobs and the entrypoint.
spark_files() {
  connector_jars
  cp -r "$REPO/spark/jobs" "$CONTEXT/spark/jobs"
  find "$CONTEXT/spark/jobs" -name __pycache__ -prune -exec rm -rf {} +
  cp "$REPO/spark/container/entrypoint.sh" "$CONTEXT/spark/entrypoint.sh"
}

wheels() {
  rm -rf "$CONTEXT"; mkdir -p "$CONTEXT/wheels/pip" "$WHEELHOUSE"
  local component
  for component in client broker operator spark; do
    UV_SYSTEM_CERTS=1 "${UV[@]}" build --quiet --wheel --out-dir "$CONTEXT/wheels" \
      "$REPO/$component" || return 1
  done
  # The dependency versions the workspace is locked to, for each image's distribution.
  local target
  : > "$CONTEXT/requirements.txt"
  for target in "${TARGETS[@]}"; do
    (cd "$REPO" && UV_SYSTEM_CERTS=1 "${UV[@]}" export --quiet --package "moldau-$target" \
      --no-dev --no-emit-workspace --no-hashes --format requirements-txt) \
      > "$CONTEXT/requirements-$target.txt" || return 1
    cat "$CONTEXT/requirements-$target.txt" >> "$CONTEXT/requirements.txt"
  done
  if wants spark; then pyspark_wheel || return 1; fi
  # --find-links: PySpark's wheel from the cache (it has no binary release to download).
  "${PIP[@]}" download --quiet --disable-pip-version-check "${TARGET[@]}" \
    --find-links "$WHEELHOUSE" --dest "$CONTEXT/wheels" -r "$CONTEXT/requirements.txt" || return 1
  if wants spark; then spark_files || return 1; fi
  # pip runs from its wheel inside the build and stays out of the image.
  "${PIP[@]}" download --quiet --disable-pip-version-check --only-binary=:all: --no-deps \
    --dest "$CONTEXT/wheels/pip" pip || return 1
  mv "$CONTEXT"/wheels/pip/pip-*.whl "$CONTEXT/wheels/pip/pip.whl"
}

build() {
  local deps=none
  [ "$1" != spark ] || deps=$(grep -v '^ *#' "$CONTEXT/requirements-spark.txt" | sha256sum | cut -c1-16)
  podman_ build --quiet --format docker --network=none --target "$1" \
    --build-arg "BASE_IMAGE=$PYTHON_IMAGE" --build-arg "SPARK_BASE_IMAGE=$JRE_IMAGE" \
    --build-arg "VERSION=$VERSION" --build-arg "SPARK_DEPS=$deps" \
    --build-arg "MOLDAU_WHEELS=$(cat "$CONTEXT"/wheels/moldau_*.whl | sha256sum | cut -c1-16)" \
    -f "$REPO/Dockerfile" -t "localhost/moldau-$1:$VERSION" "$CONTEXT" >/dev/null
}

mkdir -p "$KUBE_CACHE/src"
# Two builds at once would share the context folder: one waits.
exec 9>"$KUBE_CACHE/.lock-moldau-image"; flock 9
if wants broker || wants operator; then step "base image $PYTHON_IMAGE" load_base "$PYTHON_IMAGE" python.tar; fi
if wants spark; then step "base image $JRE_IMAGE" load_base "$JRE_IMAGE" jre.tar; fi
step "wheels" wheels
for target in "${TARGETS[@]}"; do
  image="localhost/moldau-$target:$VERSION"
  step "image $image" build "$target"
  say "$image: $(podman_ image inspect --format '{{.Size}}' "$image" | numfmt --to=si)B"
done
for target in "${TARGETS[@]}"; do echo "localhost/moldau-$target:$VERSION"; done
