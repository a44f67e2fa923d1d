#!/usr/bin/env bash
# Benchmark: how long a burst's size change takes to reach the spoke's Job, on two real API
# servers of the local testbed (../shared/testbed; no nodes needed).
#
#   scripts/bench-resize.sh [--n 60] [--hostile N] [--hub-bin PATH] [--spoke-bin PATH] [--out DIR]
#
# Starts a root cluster (bench-resize-root, port offset 64) and a burst cluster
# (bench-resize-spoke, offset 65), installs the CRD in the root, builds flux-hub and
# flux-spoke (release) unless given, and runs the driver (e2e/benches/resize.rs): flux-hub
# and flux-spoke as processes (mTLS gRPC on loopback), one MiniCluster with a burst of
# maxSize 8, then --n size changes one at a time, each timed from the spec patch to the
# burst Job's watch event with the new size. About 2 minutes after the builds.
# --hostile N first creates 2N hostile tenants (N at etcd's object limit, N just under the
# ConfigMap limit that the spoke's policy refuses; 64 bursts each) and reports the hub's
# and the spoke's resident memory before, with them, and at the peak.
#
# Output: p50 / p90 / p99 / max on stdout; DIR/results.json (every sample), the
# controllers' logs in DIR. DIR defaults to target/bench-resize. Needs root (the testbed).
# Both clusters are stopped and their state deleted on exit, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

n=60 hostile=0 hub_bin='' spoke_bin=''
target_dir=${CARGO_TARGET_DIR:-target}
out=$target_dir/bench-resize
while [ $# -gt 0 ]; do
  case $1 in
    --n) n=${2:?--n needs a value}; shift 2 ;;
    --hostile) hostile=${2:?--hostile needs a value}; shift 2 ;;
    --hub-bin) hub_bin=${2:?--hub-bin needs a value}; shift 2 ;;
    --spoke-bin) spoke_bin=${2:?--spoke-bin needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench-resize: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ]; then
  echo "bench-resize: --n must be a number >= 1" >&2
  exit 2
fi
if ! [[ $hostile =~ ^[0-9]+$ ]]; then
  echo "bench-resize: --hostile must be a number" >&2
  exit 2
fi

testbed=${FLUX_BENCH_TESTBED:-$(cd .. && pwd)/shared/testbed}
state=/opt/testbed/k8s
kubectl=$state/bin/kubectl
root=bench-resize-root root_offset=64
spoke=bench-resize-spoke spoke_offset=65

log() { printf '[bench-resize %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "the testbed needs root"
[ -x "$testbed/k8s/start.sh" ] || die "no testbed at $testbed (set FLUX_BENCH_TESTBED)"

started=()
fresh() { # drop a cluster's state
  "$testbed/k8s/stop.sh" "$1" >/dev/null 2>&1 || true
  rm -rf "$state/data/$1" "$state/data/etcd-$1" "$state/kubeconfig-$1"
  rmdir "$state/run/$1" 2>/dev/null || true
}
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  for name in "${started[@]}"; do fresh "$name"; done
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- builds first, so a slow build does not keep clusters up
"$testbed/install" >/dev/null
if [ -z "$hub_bin" ] || [ -z "$spoke_bin" ]; then
  log "building flux-hub and flux-spoke (release)"
  cargo build --release -p flux-hub -p flux-spoke
fi
hub_bin=${hub_bin:-$target_dir/release/flux-hub}
spoke_bin=${spoke_bin:-$target_dir/release/flux-spoke}
[ -x "$hub_bin" ] || die "no flux-hub binary at $hub_bin"
[ -x "$spoke_bin" ] || die "no flux-spoke binary at $spoke_bin"
log "building the benchmark driver (e2e/benches/resize.rs)"
driver=$(bench_driver resize)
if [ -z "$driver" ] || [ ! -x "$driver" ]; then die "could not build the benchmark driver"; fi

# --- two clusters without nodes
mkdir -p "$out"
for c in "$root:$root_offset" "$spoke:$spoke_offset"; do
  name=${c%%:*} offset=${c##*:}
  fresh "$name"
  started+=("$name")
  log "starting cluster $name (offset $offset)"
  "$testbed/k8s/start.sh" "$name" "$offset" 0 >"$out/start-$name.log" 2>&1 ||
    { cat "$out/start-$name.log" >&2; die "cluster $name did not start"; }
done
log "installing the MiniCluster CRD in $root"
"$hub_bin" crd | KUBECONFIG=$state/kubeconfig-$root "$kubectl" apply --server-side -f - >/dev/null
# (kubectl wait fails at once while the new CRD has no status yet: poll.)
for i in $(seq 120); do
  established=$(KUBECONFIG=$state/kubeconfig-$root "$kubectl" get crd/miniclusters.flux-framework.org \
    -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null) || true
  [ "$established" = True ] && break
  [ "$i" = 120 ] && die "the CRD did not become Established within 60 s"
  sleep 0.5
done

log "timing $n size changes"
"$driver" --root-kubeconfig "$state/kubeconfig-$root" --spoke-kubeconfig "$state/kubeconfig-$spoke" \
  --hub-bin "$hub_bin" --spoke-bin "$spoke_bin" --n "$n" --hostile "$hostile" --out "$out"
