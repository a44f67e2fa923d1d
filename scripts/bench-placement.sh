#!/usr/bin/env bash
# Benchmark the hub's placement of bursts that name candidates against today's fixed
# placement, in the same run, on a real kube-apiserver of the local testbed
# (../shared/testbed: kube-apiserver, controller-manager and etcd, no nodes).
#
#   scripts/bench-placement.sh [--spokes 100] [--miniclusters 1000] [--rounds 2]
#                              [--concurrency 20] [--hub-bin PATH] [--out DIR]
#
# One cluster (bench-place, port offset 64). Each round: fixed placement and candidates
# (each first every other round), each with a fresh flux-hub process watching a namespace
# of its own and --spokes light spokes connected over mutual TLS (half of them report no
# room), then --miniclusters
# MiniClusters created, each with one relayed burst. Measured: create -> the burst's
# assignment in a spoke's snapshot, the hub's CPU time and memory. The driver is the
# `placement` bench target of e2e/ (e2e/benches/placement.rs).
# With default settings it takes about 6 minutes on 2 cores, after the builds.
#
# Output: a markdown table (medians, ratio candidates / fixed) on stdout; every run in
# DIR/placement.json, the hubs' logs in DIR/logs. DIR defaults to target/bench-placement.
# Needs root (the testbed). The cluster is stopped and its state deleted on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

spokes=100 miniclusters=1000 rounds=2 concurrency=20 hub_bin=
target_dir=${CARGO_TARGET_DIR:-target}
out=$target_dir/bench-placement
while [ $# -gt 0 ]; do
  case $1 in
    --spokes) spokes=${2:?--spokes needs a value}; shift 2 ;;
    --miniclusters) miniclusters=${2:?--miniclusters needs a value}; shift 2 ;;
    --rounds) rounds=${2:?--rounds needs a value}; shift 2 ;;
    --concurrency) concurrency=${2:?--concurrency needs a value}; shift 2 ;;
    --hub-bin) hub_bin=${2:?--hub-bin needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench-placement: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for v in "$spokes" "$miniclusters" "$rounds" "$concurrency"; do
  [[ $v =~ ^[0-9]+$ ]] && [ "$v" -ge 1 ] || { echo "bench-placement: not a positive number: $v" >&2; exit 2; }
done

testbed=${FLUX_BENCH_TESTBED:-$(cd .. && pwd)/shared/testbed}
state=/opt/testbed/k8s
kubectl=$state/bin/kubectl
name=bench-place offset=64

log() { printf '[bench %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "the testbed needs root"
[ -x "$testbed/k8s/start.sh" ] || die "no testbed at $testbed (set FLUX_BENCH_TESTBED)"

fresh() {
  "$testbed/k8s/stop.sh" "$name" >/dev/null 2>&1 || true
  rm -rf "$state/data/$name" "$state/data/etcd-$name" "$state/kubeconfig-$name"
  rmdir "$state/run/$name" 2>/dev/null || true
}
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  # A hub the driver started and could not stop.
  pkill -f "flux-hub run --namespace place-" 2>/dev/null || true
  fresh
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$testbed/install" >/dev/null
mkdir -p "$out/logs"
if [ -n "$hub_bin" ]; then
  hub=$hub_bin
else
  log "building flux-hub (release)"
  cargo build --release -p flux-hub
  hub=$target_dir/release/flux-hub
fi
[ -x "$hub" ] || die "no flux-hub binary at $hub"
log "building the benchmark driver (e2e/benches/placement.rs)"
driver=$(bench_driver placement)
[ -x "$driver" ] || die "the benchmark driver did not build"

fresh
log "starting cluster $name (offset $offset)"
"$testbed/k8s/start.sh" "$name" "$offset" 0 >"$out/logs/start.log" 2>&1 ||
  { cat "$out/logs/start.log" >&2; die "cluster $name did not start"; }
export KUBECONFIG=$state/kubeconfig-$name
"$hub" crd | "$kubectl" apply --server-side -f - >/dev/null
# (kubectl wait fails at once while the new CRD has no status yet: poll.)
for i in $(seq 120); do
  established=$("$kubectl" get crd/miniclusters.flux-framework.org \
    -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null) || true
  [ "$established" = True ] && break
  [ "$i" = 120 ] && die "the CRD did not become Established within 60 s"
  sleep 0.5
done
log "running: $spokes spokes, $miniclusters MiniClusters, $rounds rounds"
"$driver" run --hub-bin "$hub" --spokes "$spokes" --miniclusters "$miniclusters" \
  --rounds "$rounds" --concurrency "$concurrency" --out "$out"
