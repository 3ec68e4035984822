#!/usr/bin/env bash
# Install and build everything the Kubernetes test bed runs: Debian packages, then Kubernetes,
# etcd, CNI plugins, crictl, CoreDNS and helm built from source with Go, and three local images
# (pause; Debian + python3; Debian + python3 + Java 17 for the Spark jobs). Binaries and image
# archives go to a cache outside the repository keyed by version (MOLDAU_KUBE_CACHE overrides
# where); a part already in the cache is skipped.
#
#   deps.sh [PART...]   PART: apt kubernetes etcd cni crictl coredns helm images (default: all)
set -euo pipefail
KUBE_SCRIPT=kube-deps
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ALL_PARTS=(apt kubernetes etcd cni crictl coredns helm images)
KUBE_COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
CNI_MODULE=github.com/containernetworking/plugins
CNI_PLUGINS=(main/bridge ipam/host-local main/loopback meta/portmap)
APT_PACKAGES=(containerd runc iptables nftables conntrack podman debootstrap)

# The heavy builds yield to everyone else on the machine.
GO_BUILD=(nice -n 19 env "GOFLAGS=-buildvcs=false -p=2" CGO_ENABLED=0 go)
LDFLAGS_STRIP="-s -w"

# A part is done when its stamp names the versions it was built from.
stamp_of() { echo "$KUBE_VERSION $ETCD_VERSION $CNI_PLUGINS_VERSION $CRICTL_VERSION $COREDNS_VERSION $HELM_VERSION $1"; }
is_done() { [ "$(cat "$KUBE_CACHE/stamps/$1" 2>/dev/null)" = "$(stamp_of "$2")" ]; }
mark_done() { mkdir -p "$KUBE_CACHE/stamps"; stamp_of "$2" > "$KUBE_CACHE/stamps/$1"; }

need_go() {
  command -v go >/dev/null || die "go is not installed (Go >= 1.26 builds Kubernetes $KUBE_VERSION)"
  local v; v=$(go env GOVERSION); v=${v#go}
  [ "$(printf '%s\n' 1.26 "$v" | sort -V | head -1)" = 1.26 ] \
    || die "go $v is too old: Kubernetes $KUBE_VERSION needs Go >= 1.26"
}

install_apt() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && { say "Debian packages present"; return; }
  need_root
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The test bed runs its own containerd; the packaged service stays off.
  if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    systemctl disable --now containerd >/dev/null 2>&1 || true
  fi
}

# A module generated in the cache to build commands of modules that cannot be `go install`ed.
wrapper_dir() { echo "$KUBE_CACHE/src/$1"; }

# Kubernetes replaces its staging modules with local paths: the wrapper requires the same
# versions from the module proxy instead, and lists the six commands as tools so that
# `go mod tidy` resolves everything they import.
build_kubernetes() {
  local dir minor staging gomod
  dir=$(wrapper_dir kubernetes); rm -rf "$dir"; mkdir -p "$dir"
  minor=${KUBE_VERSION#v1.}
  gomod=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" \
    | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')
  [ -f "$gomod" ] || die "cannot read the go.mod of k8s.io/kubernetes@$KUBE_VERSION"
  staging=$(sed -n 's:^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*:\1:p' "$gomod")
  {
    echo "module moldau.local/kube-build"
    echo
    echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    echo "replace ("
    for m in $staging; do echo "	$m => $m v0.$minor"; done
    echo ")"
    echo
    echo "tool ("
    for c in "${KUBE_COMMANDS[@]}"; do echo "	k8s.io/kubernetes/cmd/$c"; done
    echo ")"
  } > "$dir/go.mod"
  (cd "$dir" && go mod tidy)
  local major=${KUBE_VERSION#v}; major=${major%%.*}
  local ldflags="$LDFLAGS_STRIP"
  ldflags+=" -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=$major"
  ldflags+=" -X k8s.io/component-base/version.gitMinor=${minor%%.*}"
  ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
  ldflags+=" -X k8s.io/component-base/version.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  mkdir -p "$KUBE_BIN"
  (cd "$dir" && "${GO_BUILD[@]}" build -trimpath -ldflags "$ldflags" -o "$KUBE_BIN/" \
    "${KUBE_COMMANDS[@]/#/k8s.io/kubernetes/cmd/}")
}

# etcd's server module also replaces its siblings with local paths: a five-line main around
# etcdmain in a wrapper module.
build_etcd() {
  local dir; dir=$(wrapper_dir etcd); rm -rf "$dir"; mkdir -p "$dir"
  cat > "$dir/main.go" <<'GO'
// Package main is etcd's own command, built from its server module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (cd "$dir" && go mod init moldau.local/etcd-build >/dev/null 2>&1 \
    && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" && go mod tidy)
  (cd "$dir" && "${GO_BUILD[@]}" build -trimpath -ldflags "$LDFLAGS_STRIP" -o "$KUBE_BIN/etcd" .)
}

# go_install PACKAGE@VERSION [LDFLAGS]: into the cache's bin/.
go_install() {
  GOBIN="$KUBE_BIN" "${GO_BUILD[@]}" install -trimpath -ldflags "$LDFLAGS_STRIP ${2:-}" "$1"
}

build_cni() {
  local packages=() p
  for p in "${CNI_PLUGINS[@]}"; do packages+=("$CNI_MODULE/plugins/$p@$CNI_PLUGINS_VERSION"); done
  mkdir -p "$KUBE_BIN/cni"
  # All from one module, so one `go install` at one version.
  GOBIN="$KUBE_BIN/cni" "${GO_BUILD[@]}" install -trimpath -ldflags "$LDFLAGS_STRIP" "${packages[@]}"
}

# Version stamps as the projects' own Makefiles set them (else `crictl --version` says unknown).
build_crictl() {
  go_install "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" \
    "-X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION#v}"
}
build_coredns() { go_install "github.com/coredns/coredns@$COREDNS_VERSION"; }
build_helm() {
  go_install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
    "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
}

build_pause_image() {
  local ctx="$KUBE_CACHE/src/pause"
  rm -rf "$ctx"; mkdir -p "$ctx"
  (cd "$KUBE_HERE/pause" && "${GO_BUILD[@]}" build -trimpath -ldflags "$LDFLAGS_STRIP" -o "$ctx/pause" .)
  cp "$KUBE_HERE/pause/Containerfile" "$ctx/"
  podman_ build --quiet --network=none -t "$PAUSE_IMAGE" "$ctx" >/dev/null
  mkdir -p "$KUBE_IMAGES"
  rm -f "$KUBE_IMAGES/pause.tar"
  podman_ save --quiet --format docker-archive -o "$KUBE_IMAGES/pause.tar" "$PAUSE_IMAGE"
}

# The first Debian source apt uses here, so debootstrap needs no mirror of its own.
apt_mirror() {
  grep -hsE '^\s*(deb|URIs:)' /etc/apt/sources.list /etc/apt/sources.list.d/* \
    | grep -v security | sed -nE 's/^\s*deb\s+(\[[^]]*\]\s+)?(\S+).*/\2/p; s/^\s*URIs:\s*(\S+).*/\1/p' \
    | head -1
}

# debootstrap_image IMAGE ARCHIVE PACKAGES: a minimal Debian with PACKAGES (comma-separated),
# imported as IMAGE and saved to the cache as ARCHIVE.
debootstrap_image() {
  local image=$1 archive=$2 packages=$3 rootfs="$KUBE_CACHE/src/rootfs-${2%.tar}" mirror
  mirror=$(apt_mirror)
  [ -n "$mirror" ] || die "no Debian mirror in /etc/apt/sources.list*: debootstrap needs one"
  rm -rf "$rootfs"
  debootstrap --variant=minbase --include="$packages" "$DEBIAN_SUITE" "$rootfs" "$mirror" \
    > "$KUBE_CACHE/debootstrap.log" 2>&1 || { tail -20 "$KUBE_CACHE/debootstrap.log" >&2; return 1; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | podman_ import --quiet --change 'CMD ["python3"]' - "$image" >/dev/null
  rm -rf "$rootfs"
  mkdir -p "$KUBE_IMAGES"
  rm -f "$KUBE_IMAGES/$archive"
  podman_ save --quiet --format docker-archive -o "$KUBE_IMAGES/$archive" "$image"
}

build_python_image() { debootstrap_image "$PYTHON_IMAGE" python.tar python3,ca-certificates; }

# The Spark jobs' base: Java 17 (Spark 4.2's minimum), python3 for PySpark, and tini as PID 1
# as in Spark's own images.
build_jre_image() {
  debootstrap_image "$JRE_IMAGE" jre.tar python3,ca-certificates,openjdk-17-jre-headless,tini
}

# base_image NAME IMAGE: build_NAME_image unless NAME.tar of IMAGE is in the cache.
base_image() {
  if is_done "$1" "$2" && [ -f "$KUBE_IMAGES/$1.tar" ]; then
    say "image $2 is in the cache"
  else
    step "base image $2 (debootstrap)" "build_$1_image"; mark_done "$1" "$2"
  fi
}

build_images() {
  command -v podman >/dev/null || die "podman is not installed: run 'make kube-deps' (part apt)"
  need_root
  if is_done pause "$PAUSE_IMAGE" && [ -f "$KUBE_IMAGES/pause.tar" ]; then
    say "image $PAUSE_IMAGE is in the cache"
  else
    step "pause image $PAUSE_IMAGE" build_pause_image; mark_done pause "$PAUSE_IMAGE"
  fi
  base_image python "$PYTHON_IMAGE"
  base_image jre "$JRE_IMAGE"
}

# build PART VERSION BINARY... : build unless the stamp and binaries say it is there.
build() {
  local part=$1 version=$2; shift 2
  local b missing=0
  for b in "$@"; do [ -x "$KUBE_BIN/$b" ] || missing=1; done
  if [ $missing = 0 ] && is_done "$part" "$version"; then
    say "$part $version is in the cache"; return
  fi
  need_go
  mkdir -p "$KUBE_BIN"
  step "build $part $version" "build_$part"
  mark_done "$part" "$version"
}

main() {
  local parts=("$@"); [ ${#parts[@]} -gt 0 ] || parts=("${ALL_PARTS[@]}")
  mkdir -p "$KUBE_CACHE"
  local p
  for p in "${parts[@]}"; do
    # Two runs may ask for the same part at once: one builds, the other waits.
    exec 9>"$KUBE_CACHE/.lock-$p"; flock 9
    case $p in
      apt) step "Debian packages" install_apt ;;
      kubernetes) build kubernetes "$KUBE_VERSION" "${KUBE_COMMANDS[@]}" ;;
      etcd) build etcd "$ETCD_VERSION" etcd ;;
      cni) build cni "$CNI_PLUGINS_VERSION" cni/bridge cni/host-local cni/loopback cni/portmap ;;
      crictl) build crictl "$CRICTL_VERSION" crictl ;;
      coredns) build coredns "$COREDNS_VERSION" coredns ;;
      helm) build helm "$HELM_VERSION" helm ;;
      images) build_images ;;
      *) die "unknown part '$p' (parts: ${ALL_PARTS[*]})" ;;
    esac
    exec 9>&-
  done
  say "ready: $KUBE_CACHE ($(du -sh "$KUBE_CACHE" | cut -f1))"
}

main "$@"
