#!/usr/bin/env bash
# Stop the test bed started by up.sh and put the machine back as up.sh found it: processes,
# containers, mounts, cgroups, the bridge, the node address on lo, iptables rules and sysctls,
# then the run directory. Safe to run again, and after a crashed or half-finished up.sh.
set -uo pipefail
KUBE_SCRIPT=kube-down
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STOP_TIMEOUT=15

need_root
[ -d "$KUBE_RUN" ] || { say "nothing to take down ($KUBE_RUN does not exist)"; exit 0; }
exec 8>"$KUBE_RUN.lock"
flock -w 120 8 || die "another test bed is starting or stopping ($KUBE_RUN.lock)"

# A process that exited stays a zombie until init reaps it, which takes seconds here.
alive() {
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) && [ -n "$state" ] && [ "$state" != Z ]
}

# stop NAME: TERM the process up.sh started as NAME, KILL it if it lingers.
stop() {
  local file="$KUBE_RUN/pids/$1" pid i
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  if kill -TERM "$pid" 2>/dev/null; then
    for ((i = 0; i < STOP_TIMEOUT * 5; i++)); do
      alive "$pid" || break
      sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$file"
}

# Containers first, while containerd still runs; runc's own state catches what it missed.
remove_containers() {
  local sock="$KUBE_RUN/containerd/containerd.sock" root id
  if [ -S "$sock" ] && [ -x "$KUBE_BIN/crictl" ]; then
    timeout 60 "$KUBE_BIN/crictl" --runtime-endpoint "unix://$sock" --timeout 20s rmp -fa >/dev/null 2>&1
  fi
  for root in "$KUBE_RUN"/containerd/runc/*/; do
    [ -d "$root" ] || continue
    for id in $(runc --root "$root" list -q 2>/dev/null); do
      runc --root "$root" kill -a "$id" KILL 2>/dev/null
      runc --root "$root" delete -f "$id" 2>/dev/null
    done
  done
}

# containerd's shims belong to this test bed when they name its socket.
stop_shims() {
  local dir command
  for dir in /proc/[0-9]*; do
    # Not `tr | grep -q`: with pipefail, grep's early exit fails the pipe and the kill is skipped.
    command=$(tr '\0' ' ' 2>/dev/null < "$dir/cmdline")
    [[ $command == *"-address $KUBE_RUN/containerd/"* ]] && kill -KILL "${dir#/proc/}" 2>/dev/null
  done
  return 0
}

unmount_all() {
  local m
  # Deepest first; lazily if something still holds one.
  for m in $(awk -v run="$KUBE_RUN" 'index($5, run "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
}

# kubelet (cgroupfs driver) makes kubepods under every cgroup hierarchy. A cgroup whose last
# process just died can stay busy until the process is reaped (seconds, here): retry.
remove_cgroups() {
  local top i
  for ((i = 0; i < 20; i++)); do
    local left=0
    for top in /sys/fs/cgroup/*/kubepods; do
      [ -d "$top" ] || continue
      find "$top" -depth -type d -exec rmdir {} + 2>/dev/null
      [ -d "$top" ] && left=1
    done
    [ $left = 0 ] && return 0
    sleep 0.5
  done
  say "could not remove $(echo /sys/fs/cgroup/*/kubepods)"
}

# restore_iptables CMD FAMILY SAVED: put back the tables saved at up; a table that did not
# exist then is removed (nft backend) or emptied (legacy), with every chain kube-proxy, CNI
# or up.sh made in it.
restore_iptables() {
  local cmd=$1 family=$2 saved=$3 table
  [ -f "$saved" ] || return 0
  for table in filter nat mangle raw security; do
    grep -qx "\*$table" "$saved" && continue
    "$cmd-save" -t "$table" 2>/dev/null | grep -q '^:' || continue
    if "$cmd" -V | grep -q nf_tables; then
      nft delete table "$family" "$table" 2>/dev/null
    else
      "$cmd" -t "$table" -F && "$cmd" -t "$table" -X
    fi
  done
  "$cmd-restore" < "$saved"
}

restore_network() {
  ip link del "$BRIDGE" 2>/dev/null
  ip addr del "$NODE_IP/32" dev lo 2>/dev/null
  local saved="$KUBE_RUN/saved"
  restore_iptables iptables ip "$saved/iptables.rules"
  restore_iptables ip6tables ip6 "$saved/ip6tables.rules"
  if [ -f "$saved/sysctl.conf" ]; then
    sysctl -q -p "$saved/sysctl.conf" >/dev/null
  fi
  return 0
}

t0=$SECONDS
stop kubelet
remove_containers
for name in coredns kube-proxy kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do
  stop "$name"
done
stop_shims
unmount_all
remove_cgroups
restore_network
rm -rf "$KUBE_RUN"
rm -f "$KUBE_RUN.lock"
say "down in $((SECONDS - t0)) s"
