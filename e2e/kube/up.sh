#!/usr/bin/env bash
# Start a single-node Kubernetes on this machine: etcd, the control plane, containerd, kubelet,
# kube-proxy and CoreDNS, every piece of state under $MOLDAU_KUBE_RUN (default /tmp/moldau-kube).
# The node is a /32 on lo, pods live on a CNI bridge, nothing routes out of the machine.
# Writes $MOLDAU_KUBE_RUN/admin.kubeconfig and waits until the node is Ready and DNS answers.
# A test bed left from an earlier run is taken down first (down.sh).
set -euo pipefail
KUBE_SCRIPT=kube-up
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=pki.sh
. "$KUBE_HERE/pki.sh"

NODE_NAME=moldau-node
KUBE_BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl
  coredns crictl)
ETCD_URL=http://127.0.0.1:23790
CONTAINERD_SOCK="$KUBE_RUN/containerd/containerd.sock"
START_TIMEOUT=${MOLDAU_KUBE_START_TIMEOUT:-180}
# Persistent volumes made ready for claims (static hostPath volumes under the run directory).
PV_COUNT=${MOLDAU_KUBE_PV_COUNT:-12}

# Sysctls the test bed or kubelet changes: saved at up, restored by down.sh.
SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.ipv4.conf.all.route_localnet
  kernel.panic kernel.panic_on_oops vm.overcommit_memory kernel.keys.root_maxkeys
  kernel.keys.root_maxbytes)

check_prerequisites() {
  need_root
  need_bins "${KUBE_BINARIES[@]}" cni/bridge cni/host-local cni/loopback cni/portmap
  local f; for f in pause.tar python.tar; do
    [ -f "$KUBE_IMAGES/$f" ] || die "$KUBE_IMAGES/$f is missing: run 'make kube-deps'"
  done
  for f in containerd runc iptables-save iptables-restore ctr; do
    command -v "$f" >/dev/null || die "$f is not installed: run 'make kube-deps'"
  done
}

save_host_state() {
  mkdir -p "$KUBE_RUN/saved"
  local s; for s in "${SYSCTLS[@]}"; do
    [ -e "/proc/sys/${s//.//}" ] && echo "$s=$(sysctl -n "$s")"
  done > "$KUBE_RUN/saved/sysctl.conf"
  iptables-save > "$KUBE_RUN/saved/iptables.rules"
  ip6tables-save > "$KUBE_RUN/saved/ip6tables.rules"
}

# Pods reach only each other, Services and the node: they get no default route, and the host
# drops anything from the bridge that would be forwarded elsewhere.
setup_network() {
  ip addr add "$NODE_IP/32" dev lo
  sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
  iptables -N MOLDAU-KUBE-ISOLATION
  iptables -A MOLDAU-KUBE-ISOLATION -i "$BRIDGE" ! -o "$BRIDGE" -j DROP
  iptables -I FORWARD 1 -j MOLDAU-KUBE-ISOLATION
  mkdir -p "$KUBE_RUN/cni/net.d" "$KUBE_RUN/cni/ipam"
  cat > "$KUBE_RUN/cni/net.d/10-moldau.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "moldau",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$KUBE_RUN/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$POD_GATEWAY"}]],
        "routes": [{"dst": "$SERVICE_CIDR"}, {"dst": "$NODE_IP/32"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
JSON
}

# start NAME CMD...: run CMD in its own session, output to logs/NAME.log, pid in pids/NAME.
start() {
  local name=$1; shift
  mkdir -p "$KUBE_RUN/logs" "$KUBE_RUN/pids"
  # The daemon keeps none of this script's descriptors (a caller's pipe, the lock).
  setsid "$@" > "$KUBE_RUN/logs/$name.log" 2>&1 < /dev/null 3>&- 4>&- 8>&- &
  echo $! > "$KUBE_RUN/pids/$name"
}

# wait_for WHAT LOG CMD...: poll CMD until it succeeds; fail naming WHAT and its log.
wait_for() {
  local what=$1 log=$2; shift 2
  local deadline=$((SECONDS + START_TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      tail -n 15 "$KUBE_RUN/logs/$log.log" >&2 2>/dev/null || true
      die "$what not ready after $START_TIMEOUT s (log: $KUBE_RUN/logs/$log.log)"
    fi
    sleep 0.5
  done
}

kubectl_() { "$KUBE_BIN/kubectl" --kubeconfig "$KUBE_RUN/admin.kubeconfig" "$@"; }

start_etcd() {
  start etcd "$KUBE_BIN/etcd" --name moldau-kube --data-dir "$KUBE_RUN/etcd" \
    --listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
    --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
    --initial-cluster moldau-kube=http://127.0.0.1:23800 --unsafe-no-fsync --log-level warn
  wait_for etcd etcd curl -fsS "$ETCD_URL/health"
}

start_control_plane() {
  local pki="$KUBE_RUN/pki"
  start kube-apiserver "$KUBE_BIN/kube-apiserver" \
    --advertise-address="$NODE_IP" --bind-address="$NODE_IP" --secure-port="$APISERVER_PORT" \
    --etcd-servers="$ETCD_URL" --service-cluster-ip-range="$SERVICE_CIDR" \
    --client-ca-file="$pki/ca.crt" --tls-cert-file="$pki/apiserver.crt" \
    --tls-private-key-file="$pki/apiserver.key" \
    --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP,Hostname \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --allow-privileged=true
  wait_for kube-apiserver kube-apiserver kubectl_ get --raw /readyz
  start kube-controller-manager "$KUBE_BIN/kube-controller-manager" \
    --kubeconfig="$KUBE_RUN/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$KUBE_RUN/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$KUBE_RUN/controller-manager.kubeconfig" \
    --bind-address="$NODE_IP" --leader-elect=false --use-service-account-credentials=true \
    --controllers='*,-node-ipam-controller' \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key"
  start kube-scheduler "$KUBE_BIN/kube-scheduler" \
    --kubeconfig="$KUBE_RUN/scheduler.kubeconfig" \
    --authentication-kubeconfig="$KUBE_RUN/scheduler.kubeconfig" \
    --authorization-kubeconfig="$KUBE_RUN/scheduler.kubeconfig" \
    --bind-address="$NODE_IP" --leader-elect=false
}

start_containerd() {
  local dir="$KUBE_RUN/containerd"
  mkdir -p "$dir"
  cat > "$dir/config.toml" <<TOML
version = 2
root = "$dir/root"
state = "$dir/state"
# No CAP_SYS_RESOURCE here: leave every OOM score alone.
oom_score = 0
[grpc]
  address = "$CONTAINERD_SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # Hybrid cgroups: the cgroupfs driver, like kubelet.
        SystemdCgroup = false
        Root = "$dir/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$KUBE_BIN/cni"
    conf_dir = "$KUBE_RUN/cni/net.d"
TOML
  start containerd containerd --config "$dir/config.toml"
  wait_for containerd containerd ctr --address "$CONTAINERD_SOCK" version
  local image
  for image in pause python; do
    ctr --address "$CONTAINERD_SOCK" -n k8s.io images import --no-unpack=false \
      "$KUBE_IMAGES/$image.tar" >/dev/null
  done
}

start_kubelet() {
  local dir="$KUBE_RUN/kubelet"
  mkdir -p "$dir/root" "$dir/pod-logs"
  # Pods resolve cluster names only: no host nameserver is passed on.
  : > "$dir/resolv.conf"
  cat > "$dir/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
healthzBindAddress: $NODE_IP
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $KUBE_RUN/pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $KUBE_RUN/pki/kubelet.crt
tlsPrivateKeyFile: $KUBE_RUN/pki/kubelet.key
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
# This VM has hybrid cgroups (v1 controllers): allowed explicitly since 1.35.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
# No CAP_SYS_RESOURCE.
oomScoreAdj: 0
clusterDomain: cluster.local
clusterDNS: [$DNS_SERVICE_IP]
resolvConf: $dir/resolv.conf
podLogsDir: $dir/pod-logs
# Images are imported locally and cannot be pulled back: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# Shared machines may have nearly full disks.
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}
serializeImagePulls: false
YAML
  start kubelet "$KUBE_BIN/kubelet" --config="$dir/config.yaml" \
    --kubeconfig="$KUBE_RUN/kubelet.kubeconfig" --root-dir="$dir/root" \
    --hostname-override="$NODE_NAME" --node-ip="$NODE_IP"
}

start_kube_proxy() {
  cat > "$KUBE_RUN/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $KUBE_RUN/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
bindAddress: $NODE_IP
healthzBindAddress: $NODE_IP:10256
metricsBindAddress: $NODE_IP:10249
nodePortAddresses: [$NODE_IP/32]
oomScoreAdj: 0
# Leave the host's conntrack settings alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
  start kube-proxy "$KUBE_BIN/kube-proxy" --config="$KUBE_RUN/kube-proxy.yaml"
}

# CoreDNS runs on the node's address; the kube-dns Service points at it through an
# EndpointSlice, so pods resolve through the Service IP like on any cluster.
start_coredns() {
  cat > "$KUBE_RUN/Corefile" <<COREFILE
.:53 {
    bind $NODE_IP
    errors
    ready $NODE_IP:8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $KUBE_RUN/coredns.kubeconfig moldau
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    cache 5
}
COREFILE
  kubectl_ apply -f - >/dev/null <<YAML
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "moldau:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "moldau:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "moldau:coredns"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "moldau:coredns"}]
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  clusterIP: $DNS_SERVICE_IP
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-node
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: moldau-kube-up}
addressType: IPv4
endpoints: [{addresses: [$NODE_IP], conditions: {ready: true}}]
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
YAML
  start coredns "$KUBE_BIN/coredns" -conf "$KUBE_RUN/Corefile"
}

# Static hostPath volumes under the run directory, bound on first use by any claim of the
# default storage class.
create_volumes() {
  local i
  {
    cat <<YAML
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
YAML
    for i in $(seq -w 1 "$PV_COUNT"); do
      mkdir -p "$KUBE_RUN/volumes/pv$i"
      cat <<YAML
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: local-pv$i}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: local
  hostPath: {path: $KUBE_RUN/volumes/pv$i, type: Directory}
YAML
    done
  } | kubectl_ apply -f - >/dev/null
}

node_ready() {
  [ "$(kubectl_ get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

dns_answers() {
  python3 "$KUBE_HERE/dns_probe.py" "$NODE_IP" kubernetes.default.svc.cluster.local \
    | grep -qx "$KUBERNETES_SERVICE_IP"
}

main() {
  check_prerequisites
  [ -e "$KUBE_RUN" ] && step "take down the previous test bed" bash "$KUBE_HERE/down.sh"
  mkdir -p "$KUBE_RUN"
  exec 8>"$KUBE_RUN.lock"
  flock -n 8 || die "another test bed is starting or stopping ($KUBE_RUN.lock)"
  local t0=$SECONDS
  save_host_state
  step "network (node $NODE_IP on lo, pods $POD_CIDR on $BRIDGE)" setup_network
  step "certificates and kubeconfigs" make_pki
  cp "$KUBE_RUN/admin.kubeconfig" "$KUBE_RUN/kubeconfig"
  step "etcd $ETCD_VERSION" start_etcd
  step "control plane $KUBE_VERSION" start_control_plane
  step "containerd and images" start_containerd
  step "kubelet" start_kubelet
  step "kube-proxy" start_kube_proxy
  step "CoreDNS $COREDNS_VERSION" start_coredns
  step "persistent volumes ($PV_COUNT)" create_volumes
  step "node Ready" wait_for "node $NODE_NAME" kubelet node_ready
  say "node Ready $((SECONDS - t0)) s after start"
  step "CoreDNS answers" wait_for "CoreDNS" coredns dns_answers
  say "CoreDNS Ready $((SECONDS - t0)) s after start"
  step "default service account" wait_for "service account default" kube-controller-manager \
    kubectl_ -n default get serviceaccount default
  say "up: export KUBECONFIG=$KUBE_RUN/kubeconfig"
}

# Sourcing the script (to try one step) defines the steps without running them.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then main "$@"; fi
