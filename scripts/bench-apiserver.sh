#!/usr/bin/env bash
# Benchmark flux-hub on a real kube-apiserver, side by side with a bare client (creates the
# four objects a MiniCluster turns into itself) and the reference Go flux-operator, in the
# same run, on the local testbed (../shared/testbed: real kube-apiserver, controller-manager
# and etcd, no nodes).
#
#   scripts/bench-apiserver.sh [--n 40] [--burst 20] [--idle 30] [--scale 1000]
#                              [--concurrency 16] [--skip-reference] [--skip-bare-scale]
#                              [--scale-reference] [--hub-bin PATH] [--out DIR]
#
# One cluster (bench-main, port offset 60), in order, each in its own namespace that is
# deleted before the next: the bare client, flux-hub, then (after swapping our CRD for the
# Go operator's) the Go operator. Each: a warm-up MiniCluster, --n created one at a time,
# --burst at once; the creation window closes once every Pod exists, is labelled and things
# are quiet; then an --idle window. Then, on fresh clusters: a bare client creating the
# objects of --scale MiniClusters (bench-scale-bare, offset 63: the floor), and
# (bench-scale, offset 61) --scale MiniClusters created with no controller running,
# flux-hub started (cold) and, once every Pod is labelled and it is quiet, killed and
# started again with every child present (warm). --scale-reference does the same for the
# Go operator (bench-scale-ref, offset 62). --scale 0 skips the scale runs.
# The driver is the `apiserver` bench target of e2e/ (e2e/benches/apiserver.rs).
# With default settings it takes about 8-10 minutes on 2 cores, after the builds.
#
# Output: a markdown table (figures next to the targets) on stdout; every raw number in
# DIR/{bare,hub,reference,scale-*}.json and DIR/results.json; controller logs in DIR/logs.
# DIR defaults to target/bench-apiserver. Needs root (the testbed). Every cluster it
# started is stopped and its state deleted on exit, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

n=40 burst=20 idle=30 scale=1000 concurrency=16
skip_reference=false skip_bare_scale=false scale_reference=false hub_bin=
target_dir=${CARGO_TARGET_DIR:-target}
out=$target_dir/bench-apiserver
while [ $# -gt 0 ]; do
  case $1 in
    --n) n=${2:?--n needs a value}; shift 2 ;;
    --burst) burst=${2:?--burst needs a value}; shift 2 ;;
    --idle) idle=${2:?--idle needs a value}; shift 2 ;;
    --scale) scale=${2:?--scale needs a value}; shift 2 ;;
    --concurrency) concurrency=${2:?--concurrency needs a value}; shift 2 ;;
    --skip-reference) skip_reference=true; shift ;;
    --skip-bare-scale) skip_bare_scale=true; shift ;;
    --scale-reference) scale_reference=true; shift ;;
    --hub-bin) hub_bin=${2:?--hub-bin needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench-apiserver: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for v in "$n" "$burst" "$idle" "$scale" "$concurrency"; do
  [[ $v =~ ^[0-9]+$ ]] || { echo "bench-apiserver: not a number: $v" >&2; exit 2; }
done
[ "$n" -ge 1 ] || { echo "bench-apiserver: --n must be at least 1" >&2; exit 2; }

testbed=${FLUX_BENCH_TESTBED:-$(cd .. && pwd)/shared/testbed}
reference_dir=${FLUX_BENCH_REFERENCE:-$(cd .. && pwd)/shared/reference-operator}
state=/opt/testbed/k8s
kubectl=$state/bin/kubectl
main_name=bench-main main_offset=60
scale_name=bench-scale scale_offset=61
scale_ref_name=bench-scale-ref scale_ref_offset=62
scale_bare_name=bench-scale-bare scale_bare_offset=63

log() { printf '[bench %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "the testbed needs root"
[ -x "$testbed/k8s/start.sh" ] || die "no testbed at $testbed (set FLUX_BENCH_TESTBED)"
if [ "$skip_reference" = false ] || [ "$scale_reference" = true ]; then
  [ -f "$reference_dir/manager.xz" ] ||
    die "no reference operator at $reference_dir (set FLUX_BENCH_REFERENCE, or --skip-reference)"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/bench-apiserver.XXXXXX")
pid_file=$work/controller.pid
started=()
server_pids=()

fresh() { # drop a cluster's state
  "$testbed/k8s/stop.sh" "$1" >/dev/null 2>&1 || true
  rm -rf "$state/data/$1" "$state/data/etcd-$1" "$state/kubeconfig-$1"
  rmdir "$state/run/$1" 2>/dev/null || true
}
kill_controller() { # a controller the driver started, if the driver could not stop it
  local pid
  pid=$(cat "$pid_file" 2>/dev/null) || return 0
  if [ -n "$pid" ] && [ -d "/proc/$pid" ]; then
    case $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) in
      *flux-hub*run* | *reference-manager*) kill -9 "$pid" 2>/dev/null || true ;;
    esac
  fi
  rm -f "$pid_file"
}
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  kill_controller
  for name in "${started[@]}"; do
    if [ "$status" != 0 ] && [ -f "$state/logs/$name-kube-apiserver.log" ]; then
      echo "--- last lines of $state/logs/$name-kube-apiserver.log" >&2
      tail -n 5 "$state/logs/$name-kube-apiserver.log" >&2
    fi
    fresh "$name"
  done
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start_cluster() { # NAME OFFSET: a fresh cluster with no nodes; exports KUBECONFIG
  fresh "$1"
  started+=("$1")
  log "starting cluster $1 (offset $2)"
  "$testbed/k8s/start.sh" "$1" "$2" 0 >"$work/start-$1.log" 2>&1 ||
    { cat "$work/start-$1.log" >&2; die "cluster $1 did not start"; }
  export KUBECONFIG=$state/kubeconfig-$1
  # Their CPU time is measured too (the pid files hold "PID STARTTIME PATH").
  server_pids=()
  local f pid
  for f in kube-apiserver etcd; do
    pid=$(awk '{print $1; exit}' "$state/run/$1/$f.pid" 2>/dev/null) || true
    if [[ $pid =~ ^[0-9]+$ ]] && [ -d "/proc/$pid" ]; then
      server_pids+=(--server-pid "$pid")
    else
      log "warning: no $f PID for $1: its CPU time is not measured"
    fi
  done
}
stop_cluster() {
  log "stopping cluster $1"
  fresh "$1"
  local kept=() name
  for name in "${started[@]}"; do [ "$name" = "$1" ] || kept+=("$name"); done
  started=("${kept[@]}")
}

crd=miniclusters.flux-framework.org
install_crd() { # hub|reference
  log "installing the $1 MiniCluster CRD"
  if [ "$1" = hub ]; then
    "$hub" crd | "$kubectl" apply --server-side --force-conflicts -f - >/dev/null
  else
    "$kubectl" apply --server-side --force-conflicts -f "$reference_dir/miniclusters-crd.yaml" >/dev/null
  fi
  # (kubectl wait fails at once while the new CRD has no status yet: poll.)
  local i established=
  for i in $(seq 120); do
    established=$("$kubectl" get "crd/$crd" \
      -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null) || true
    [ "$established" = True ] && return 0
    [ "$i" = 120 ] || sleep 0.5
  done
  die "the CRD did not become Established within 60 s"
}
remove_crd() {
  log "removing the MiniCluster CRD"
  "$kubectl" delete "crd/$crd" --wait --timeout=120s >/dev/null ||
    die "the CRD was not deleted within 120 s"
}
delete_namespace() {
  log "deleting namespace $1"
  "$kubectl" delete namespace "$1" --wait --timeout=180s >/dev/null ||
    die "namespace $1 was not deleted within 180 s"
}

# --- builds (before any cluster, so a slow build does not keep clusters up)
"$testbed/install" >/dev/null
mkdir -p "$out/logs"
rm -f "$out"/{bare,hub,reference,scale-bare,scale-hub,scale-reference,results}.json
# What the measured flux-hub is built from (the working tree, shared with other work).
if [ -n "$hub_bin" ]; then
  echo "flux-hub: $hub_bin" >"$out/source.txt"
else
  {
    echo "flux-hub built from $(git rev-parse --short HEAD 2>/dev/null || echo '?') and the working tree:"
    changes=$(git status --short -- hub shared Cargo.lock Cargo.toml 2>/dev/null) || true
    if [ -n "$changes" ]; then
      printf '%s\n' "$changes" | sed 's/^/  uncommitted: /'
    else
      echo "  (no uncommitted changes under hub/, shared/, Cargo.*)"
    fi
  } >"$out/source.txt"
fi
if [ -n "$hub_bin" ]; then
  hub=$hub_bin
else
  log "building flux-hub (release)"
  cargo build --release -p flux-hub
  hub=$target_dir/release/flux-hub
fi
[ -x "$hub" ] || die "no flux-hub binary at $hub"
log "building the benchmark driver (e2e/benches/apiserver.rs)"
driver=$(bench_driver apiserver)
[ -n "$driver" ] && [ -x "$driver" ] || die "cannot find the built driver"
reference=$work/reference-manager
if [ "$skip_reference" = false ] || [ "$scale_reference" = true ]; then
  xz -dc "$reference_dir/manager.xz" >"$reference" && chmod +x "$reference"
fi

common=(--hub-bin "$hub" --reference-bin "$reference" --log-dir "$out/logs" --pid-file "$pid_file")
run_phase() { # KIND NAMESPACE
  log "phase $1 (namespace $2)"
  "$driver" phase --kind "$1" --namespace "$2" --n "$n" --burst "$burst" --idle "$idle" \
    "${common[@]}" "${server_pids[@]}" --out "$out/$1.json"
}
run_scale() { # KIND NAMESPACE
  log "scale $1: $scale MiniClusters (namespace $2)"
  "$driver" scale --kind "$1" --namespace "$2" --count "$scale" --concurrency "$concurrency" \
    "${common[@]}" "${server_pids[@]}" --out "$out/scale-$1.json"
}

t0=$SECONDS
start_cluster "$main_name" "$main_offset"
install_crd hub
run_phase bare bench-bare
delete_namespace bench-bare
run_phase hub bench-hub
if [ "$skip_reference" = false ]; then
  delete_namespace bench-hub
  remove_crd
  install_crd reference
  run_phase reference bench-ref
fi
stop_cluster "$main_name"

if [ "$scale" -gt 0 ]; then
  if [ "$skip_bare_scale" = false ]; then
    start_cluster "$scale_bare_name" "$scale_bare_offset"
    run_scale bare bench-scale
    stop_cluster "$scale_bare_name"
  fi
  start_cluster "$scale_name" "$scale_offset"
  install_crd hub
  run_scale hub bench-scale
  stop_cluster "$scale_name"
  if [ "$scale_reference" = true ]; then
    start_cluster "$scale_ref_name" "$scale_ref_offset"
    install_crd reference
    run_scale reference bench-scale
    stop_cluster "$scale_ref_name"
  fi
fi

"$driver" report --dir "$out"
cat "$out/source.txt"
log "done in $((SECONDS - t0)) s (after the builds)"
