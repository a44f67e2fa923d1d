#!/usr/bin/env bash
# Restarts the API server of a running testbed control plane (../shared/testbed/k8s/start.sh
# NAME ...) with feature gates, the same flags otherwise: the testbed's start.sh has no
# place for them, and a gate such as ImageVolume (off by default in this Kubernetes) must
# be on in the API server as in the kubelet, or the API server drops the field.
#
#   scripts/api-feature-gates.sh NAME Gate=true[,Gate2=false...]
#
# The controller manager is started again after it (one that meets its API server gone
# while it starts exits). The new processes are recorded where start.sh records them, so
# stop.sh stops them.
set -euo pipefail

[ $# -eq 2 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
name=$1 gates=$2
k8s=${TESTBED_K8S:-/opt/testbed/k8s}
pidfile=$k8s/run/$name/kube-apiserver.pid
log=$k8s/logs/$name-kube-apiserver.log
kcm_pidfile=$k8s/run/$name/kube-controller-manager.pid
kcm_log=$k8s/logs/$name-kube-controller-manager.log

stop() { # PIDFILE: the process's command line, NUL-separated, on stdout
  local pid
  read -r pid _ <"$1" || return 1
  cat "/proc/$pid/cmdline" || return 1
  # A test cluster's processes hold no state of their own (etcd does): no graceful drain.
  kill -KILL "$pid"
  while [ -e "/proc/$pid" ]; do sleep 0.1; done
}
start() { # PIDFILE LOG ARGS...
  local pidfile=$1 log=$2 pid
  shift 2
  setsid "$@" >>"$log" 2>&1 </dev/null &
  pid=$!
  echo "$pid $(awk '{print $22}' "/proc/$pid/stat") $1" >"$pidfile"
}

[ -f "$pidfile" ] && [ -f "$kcm_pidfile" ] || { echo "api-feature-gates: no control plane $name under $k8s/run" >&2; exit 1; }
mapfile -d '' kcm < <(stop "$kcm_pidfile")
mapfile -d '' api < <(stop "$pidfile")
[ "${#api[@]}" -gt 0 ] && [ "${#kcm[@]}" -gt 0 ] || { echo "api-feature-gates: $name is not running" >&2; exit 1; }
args=()
for a in "${api[@]}"; do
  [[ $a == --feature-gates=* ]] || args+=("$a")
done
start "$pidfile" "$log" "${args[@]}" "--feature-gates=$gates"
for _ in $(seq 600); do
  if "$k8s/bin/kubectl" --kubeconfig "$k8s/kubeconfig-$name" get --raw /readyz >/dev/null 2>&1; then
    start "$kcm_pidfile" "$kcm_log" "${kcm[@]}"
    exit 0
  fi
  sleep 0.1
done
echo "api-feature-gates: the API server of $name did not come back; see $log" >&2
exit 1
