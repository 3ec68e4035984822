# Shared by the test-bed scripts: pinned versions, where things live, timed steps.
# shellcheck shell=bash
KUBE_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$KUBE_HERE/versions.env"

# Built binaries and image archives, outside the repository, keyed by the Kubernetes version.
KUBE_CACHE="${MOLDAU_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/moldau/kube-$KUBE_VERSION}"
KUBE_BIN="$KUBE_CACHE/bin"
KUBE_IMAGES="$KUBE_CACHE/images"
# Everything a running test bed owns: state, logs, certificates, kubeconfig.
KUBE_RUN="${MOLDAU_KUBE_RUN:-/tmp/moldau-kube}"

# Addresses, all inside the machine: the node is a /32 on lo, pods on a bridge.
NODE_IP=10.250.0.1
POD_CIDR=10.244.0.0/24
POD_GATEWAY=10.244.0.1
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SERVICE_IP=10.96.0.1
DNS_SERVICE_IP=10.96.0.10
BRIDGE=moldau0
APISERVER_PORT=6443

# Podman with its own storage, runc and limits this VM accepts (see docs/kubernetes.md);
# the test bed and the image build (e2e/images/) share it.
podman_() {
  CONTAINERS_CONF="$KUBE_HERE/containers.conf" podman \
    --root "$KUBE_CACHE/podman/root" --runroot "$KUBE_CACHE/podman/run" \
    --runtime runc --cgroup-manager cgroupfs --events-backend file "$@"
}

TIMEFORMAT="%R s wall, %U s user + %S s sys"

say() { echo "${KUBE_SCRIPT:-kube}: $*"; }
die() { echo "${KUBE_SCRIPT:-kube}: $*" >&2; exit 1; }

# step NAME CMD...: run CMD, print how long it took (wall and CPU).
step() {
  local name=$1; shift
  say "$name ..."
  local t
  { t=$( { time "$@" 1>&3 2>&4; } 2>&1 ); } 3>&1 4>&2 || die "$name failed"
  say "$name done: $t"
}

need_root() {
  [ "$(id -u)" = 0 ] || die "needs root (run it with sudo)"
}

# need_bins NAME...: fail with one line naming the first missing cached binary.
need_bins() {
  local b
  for b in "$@"; do
    [ -x "$KUBE_BIN/$b" ] || die "$KUBE_BIN/$b is missing: run 'make kube-deps'"
  done
}
