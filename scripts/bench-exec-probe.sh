#!/usr/bin/env bash
# What an exec probe costs on a real node (scripts/real-node.sh: kubelet, containerd, runc)
# of a testbed control plane: PODS pods that only sleep, first without a probe, then with
# an exec readiness probe every second that never succeeds (as a startup probe does while
# brokers start). The machine's busy CPU (/proc/stat) over SECONDS seconds, ROUNDS times
# each way; the difference divided by the probes run is the CPU of one exec probe
# (kubelet, containerd, its shim and runc together, and the failed probe's Event).
#
#   scripts/bench-exec-probe.sh [--pods 8] [--seconds 40] [--rounds 2]
#
# Root only; needs the testbed's `install --real-nodes` and target/images (scripts/e2e.sh
# or scripts/bench-real-node.sh build them). Run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."

pods=8 seconds=40 rounds=2
while [ $# -gt 0 ]; do
  case "$1" in
    --pods) pods=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "usage: $0 [--pods N] [--seconds S] [--rounds R]" >&2; exit 2 ;;
  esac
done

testbed=${FLUX_BENCH_TESTBED:-$(cd .. && pwd)/shared/testbed}
state=/opt/testbed/k8s name=bench-exec offset=77 images=target/images
app_image=localhost/flux-app-debian:bookworm
[ -x "$testbed/k8s/start.sh" ] || { echo "no testbed at $testbed" >&2; exit 1; }
for f in pause-testbed flux-app-bookworm; do
  [ -f "$images/$f.oci.tar" ] || { echo "no $images/$f.oci.tar" >&2; exit 1; }
done

stop() {
  scripts/real-node.sh down "$name" "$offset" 0 >/dev/null 2>&1 || true
  "$testbed/k8s/stop.sh" "$name" >/dev/null 2>&1 || true
  rm -rf "$state/data/$name" "$state/data/etcd-$name" "$state/kubeconfig-$name"
}
stop
trap stop EXIT
"$testbed/k8s/start.sh" "$name" "$offset" 0 >/dev/null
export KUBECONFIG=$state/kubeconfig-$name
scripts/real-node.sh up "$name" "$offset" 0 "$images/pause-testbed.oci.tar" \
  "$images/flux-app-bookworm.oci.tar" >&2

busy_jiffies() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
hz=$(getconf CLK_TCK)

manifests() { # yes|no: with the probe or not
  local probe='' i
  if [ "$1" = yes ]; then
    probe='"readinessProbe": {"exec": {"command": ["test", "-e", "/tmp/up"]}, "periodSeconds": 1, "failureThreshold": 1},'
  fi
  for ((i = 0; i < pods; i++)); do
    printf '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper-%d", "namespace": "default"}, "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "sleep", "image": "%s", "imagePullPolicy": "Never", %s "command": ["sleep", "infinity"]}]}}\n' \
      "$i" "$app_image" "$probe"
  done
}

declare -A total=([no]=0 [yes]=0)
for ((round = 1; round <= rounds; round++)); do
  for probe in no yes; do
    manifests "$probe" | kubectl apply -f - >/dev/null
    kubectl wait --for=jsonpath='{.status.phase}'=Running pod --all --timeout=120s >/dev/null
    sleep 10
    before=$(busy_jiffies)
    sleep "$seconds"
    used=$(($(busy_jiffies) - before))
    total[$probe]=$((total[$probe] + used))
    echo "round $round, probe $probe: $(awk -v u="$used" -v hz="$hz" -v s="$seconds" 'BEGIN { printf "%.0f", u * 1000 / hz / s }') ms of CPU per second"
    kubectl delete pod --all --grace-period=0 --force >/dev/null 2>&1
    kubectl wait --for=delete pod --all --timeout=60s >/dev/null 2>&1 || true
  done
done
awk -v y="${total[yes]}" -v n="${total[no]}" -v hz="$hz" -v s="$seconds" -v r="$rounds" -v p="$pods" \
  'BEGIN { printf "one exec probe: %.1f ms of CPU (%d pods, a probe a second, %d s x %d rounds)\n", (y - n) * 1000 / hz / (s * r * p), p, s, r }'
