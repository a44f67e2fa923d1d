#!/usr/bin/env bash
# End-to-end tests against real clusters, with real Flux where the testbed is present.
#
#   KUBECONFIG set      the cluster it names (SPOKE_KUBECONFIG: the burst cluster of the
#                       two-cluster tests; the same cluster when unset; SPOKE2_KUBECONFIG: a
#                       second burst cluster, another than SPOKE_KUBECONFIG's, for the test
#                       with bursts in two spoke clusters, skipped when unset). The data-plane
#                       tests (real Flux) also run when the testbed is present and we are root.
#   else, ../shared/testbed present (or FLUX_E2E_TESTBED)
#                       installs it, starts a root and two burst clusters at once (2 hollow
#                       nodes each, node ExternalIPs outside 127/8) and runs the hollow-node
#                       suites there (building the controller image offline and running it
#                       in containerd); then (the hollow-node clusters stopped) three control
#                       planes with real nodes (scripts/real-node.sh: kubelet, containerd,
#                       kube-proxy, the images built offline; two in the root) for the
#                       real-node suites (tests/real_node*.rs), the recovery suite last (its
#                       benchmark); and always stops what it started. The last release's
#                       controller image (scripts/released.sh: its commit's binaries) is
#                       loaded too, for the placement suite's version-skew and upgrade steps.
#   else                says how to run it on kind and exits 0, having run nothing.
#
# Extra arguments go to the test binaries (e.g. a test name filter).
set -euo pipefail
cd "$(dirname "$0")/.."

testbed=${FLUX_E2E_TESTBED:-$(cd .. && pwd)/shared/testbed}
# Cluster names and port offsets of our own, so a developer's clusters and the testbed's
# selftest (offset 90) keep running next to ours.
root_name=flux-e2e-root root_offset=40
burst_name=flux-e2e-burst burst_offset=41
burst2_name=flux-e2e-burst2 burst2_offset=42
# Control planes whose nodes are real (kubelet + containerd + kube-proxy,
# scripts/real-node.sh): the root and two burst clusters of the real-node suites.
real_name=flux-e2e-real real_offset=43
real_b_name=flux-e2e-real-b real_b_offset=44
real_c_name=flux-e2e-real-c real_c_offset=45
# NAME OFFSET NODES: the root has two nodes, so brokers of one MiniCluster meet across nodes.
real_clusters=("$real_name $real_offset 2" "$real_b_name $real_b_offset 1" "$real_c_name $real_c_offset 1")
# The test whose bursts run in two spoke clusters (SPOKE_KUBECONFIG and SPOKE2_KUBECONFIG).
two_spokes_test=two_bursts_in_two_spoke_clusters_and_the_root_form_one_instance_of_eight_brokers
# The test of a hub restarted while a burst moves from one spoke cluster to another.
mid_move_test=a_hub_restarted_mid_move_waits_for_the_spoke_the_burst_leaves

# Every cargo command here selects the whole workspace and a test target, as `cargo test
# --workspace` (scripts/test.sh) does: cargo unifies features over what a command selects, so
# these resolve the same features and reuse that build of every dependency (as does
# tests/support's build of flux-hub and flux-spoke). `cargo test -p flux-e2e`, `cargo run -p
# flux-e2e` and `cargo build -p flux-hub -p flux-spoke` each resolved other features and
# compiled up to 35 third-party crates, and the workspace's own, again.
suite() { # test-binary-args... -- libtest-args...
  # Every test binary runs, whichever fails first.
  cargo test --workspace --no-fail-fast "$@"
}

have_testbed() { [ -x "$testbed/flux/run-rendered.sh" ] && [ "$(id -u)" = 0 ]; }

if [ -n "${KUBECONFIG:-}" ]; then
  export SPOKE_KUBECONFIG=${SPOKE_KUBECONFIG:-$KUBECONFIG}
  echo "e2e: root cluster from KUBECONFIG=$KUBECONFIG, burst cluster from SPOKE_KUBECONFIG=$SPOKE_KUBECONFIG"
  tests=(--test hub --test bursting)
  skip=()
  if [ -z "${FLUX_E2E_BURST_STOP:-}" ] || [ -z "${FLUX_E2E_BURST_START:-}" ]; then
    echo "e2e: FLUX_E2E_BURST_STOP/START unset: burst_cluster_outage_is_reported_and_survived is not run"
    skip=(--skip burst_cluster_outage_is_reported_and_survived)
  fi
  if [ -n "${SPOKE2_KUBECONFIG:-}" ]; then
    echo "e2e: second burst cluster from SPOKE2_KUBECONFIG=$SPOKE2_KUBECONFIG"
  else
    echo "e2e: SPOKE2_KUBECONFIG unset (a second burst cluster): $two_spokes_test and $mid_move_test are not run"
    skip+=(--skip "$two_spokes_test" --skip "$mid_move_test")
  fi
  if have_testbed; then
    "$testbed/install" >/dev/null
    export FLUX_E2E_TESTBED=$testbed
    tests+=(--test flux)
  else
    echo "e2e: no testbed at $testbed (or not root): the data-plane tests (tests/flux.rs, and two of tests/bursting.rs) are not run"
    skip+=(--skip a_wrong_certificate_or_lead_port_keeps_burst_brokers_out
      --skip "$two_spokes_test")
  fi
  suite "${tests[@]}" -- --include-ignored "${skip[@]}" "$@"
  exit
fi

if [ ! -x "$testbed/k8s/start.sh" ]; then
  cat <<EOF
e2e: no cluster (KUBECONFIG is unset) and no testbed at $testbed: nothing run.
To run the suite on kind (a root and two burst clusters):
  for c in flux-root flux-burst flux-burst2; do kind create cluster --name \$c; done
  kind get kubeconfig --name flux-root > /tmp/root.kubeconfig
  kind get kubeconfig --name flux-burst > /tmp/burst.kubeconfig
  kind get kubeconfig --name flux-burst2 > /tmp/burst2.kubeconfig
  KUBECONFIG=/tmp/root.kubeconfig SPOKE_KUBECONFIG=/tmp/burst.kubeconfig \\
    SPOKE2_KUBECONFIG=/tmp/burst2.kubeconfig scripts/e2e.sh
See e2e/README.md.
EOF
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "e2e: the testbed at $testbed needs root (Linux namespaces, mounts); run as root" >&2
  exit 1
fi
# One run at a time on this machine: a second run's clusters have the same names, and the
# first one's cleanup (until this process exits) would delete them.
exec 9>/run/flux-e2e.lock
if ! flock -n 9; then
  echo "e2e: another scripts/e2e.sh is running on this machine (or still cleaning up); wait for it" >&2
  exit 1
fi

state=/opt/testbed/k8s
kubeconfig() { echo "$state/kubeconfig-$1"; }
fresh() { # drop a cluster's state, so every run starts from an empty etcd
  "$testbed/k8s/stop.sh" "$1" >/dev/null 2>&1 || true
  rm -rf "$state/data/$1" "$state/data/etcd-$1" "$(kubeconfig "$1")"
}
starting=()      # pids of start.sh runs still going
clusters_failed= # 1: a cluster did not start (cleanup shows its API server's last lines)
# shellcheck disable=SC2329 # invoked by the trap below
cleanup() {
  status=$?
  # Interrupted while clusters were starting: stop those start.sh runs first, so that
  # stop.sh below sees every process they launched.
  for pid in "${starting[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${starting[@]}"; do wait "$pid" 2>/dev/null || true; done
  # Data-plane runs of a test binary killed half-way.
  if [ -x "$testbed/flux/run-rendered.sh" ]; then
    for run in $("$testbed/flux/run-rendered.sh" --list 2>/dev/null | awk '{print $1}'); do
      case $run in e2e-*) "$testbed/flux/run-rendered.sh" --down "$run" >/dev/null 2>&1 || true ;; esac
    done
  fi
  if [ "$clusters_failed" = 1 ]; then
    for name in "$root_name" "$burst_name" "$burst2_name" "$real_name" "$real_b_name" "$real_c_name"; do
      log=$state/logs/$name-kube-apiserver.log
      if [ -f "$log" ]; then echo "--- last lines of $log"; tail -n 20 "$log"; fi
    done
  fi
  for cluster in "${real_clusters[@]}"; do
    read -r name offset nodes <<<"$cluster"
    for ((node = 0; node < nodes; node++)); do
      "$(dirname "$0")/real-node.sh" down "$name" "$offset" "$node" >/dev/null 2>&1 || true
    done
    fresh "$name"
  done
  fresh "$root_name"
  fresh "$burst_name"
  fresh "$burst2_name"
  # Last, so that the end of the output says what failed and why.
  if [ -s "${FLUX_E2E_FAILURES:-}" ]; then
    echo "e2e: failed tests:"
    cat "$FLUX_E2E_FAILURES"
  fi
  exit "$status"
}
trap cleanup EXIT

# --real-nodes: containerd, runc and mmdebstrap, for the images built offline (tests/images.rs).
"$testbed/install" --real-nodes
if [ "${CI:-}" = true ]; then
  # Tells a broken machine from a broken test.
  "$testbed/selftest"
fi
started_all() { # WHAT: waits for every cluster start in `starting`; exits if one failed
  local failed=0 pid
  for pid in "${starting[@]}"; do wait "$pid" || failed=1; done
  starting=()
  if [ "$failed" != 0 ]; then
    clusters_failed=1
    echo "e2e: $1 did not start" >&2
    exit 1
  fi
}
# The three clusters start at once (own names, ports, node IPs and state: start.sh shares
# nothing between clusters), which takes about as long as one.
started=$SECONDS
for cluster in "$root_name $root_offset" "$burst_name $burst_offset" "$burst2_name $burst2_offset"; do
  read -r name offset <<<"$cluster"
  fresh "$name"
  # `9>&-`: the cluster's daemons must not hold the run's lock (one left by a run killed
  # mid-cleanup would keep every later run out).
  NODE_EXTERNAL_IP_PREFIX=10.250.$offset "$testbed/k8s/start.sh" "$name" "$offset" 2 9>&- &
  starting+=($!)
done
started_all "a testbed cluster"
echo "e2e: clusters $root_name, $burst_name, $burst2_name ready in $((SECONDS - started)) s"

# Every test binary at once (one build, both cores), then the images for the real nodes:
# flux-images, and the binaries the suites run for the controller image (debug: no release
# build here). `--test hub` only makes the build resolve features as suite() does; `cargo
# run` cannot.
all_suites=(--test hub --test bursting --test flux --test images --test real_node
  --test real_node_install --test real_node_bursting --test real_node_placement
  --test real_node_recovery)
built=$SECONDS
# The last release's flux-hub and flux-spoke, first (they pass through target/debug), for
# the version-skew steps of the real-node placement suite.
released=$("$(dirname "$0")/released.sh")
cargo test --workspace --no-run "${all_suites[@]}"
cargo build -q --workspace --bin flux-images --bin flux-hub --bin flux-spoke --test hub
images=target/images
flux_images=${CARGO_TARGET_DIR:-target}/debug/flux-images
for image in pause app view; do
  "$flux_images" "$image" --out "$images" >/dev/null
done
"$flux_images" controller --profile debug --tag e2e --out "$images" >/dev/null
"$flux_images" controller --bin-dir "${CARGO_TARGET_DIR:-target}/released/$released" \
  --tag "released-$released" --out "$images" >/dev/null
export FLUX_E2E_RELEASED=$released
FLUX_E2E_RELEASED_BIN=$(cd "${CARGO_TARGET_DIR:-target}/released/$released" && pwd)
export FLUX_E2E_RELEASED_BIN
echo "e2e: tests and images built in $((SECONDS - built)) s"

export FLUX_E2E_TESTBED=$testbed
# Each test's duration (tests/support/test_env.rs), the slowest listed at the end.
export FLUX_E2E_TIMES=$PWD/target/e2e-times.txt
rm -f "$FLUX_E2E_TIMES"
# Each failed test's reason on one line (tests/support/test_env.rs), printed last.
export FLUX_E2E_FAILURES=$PWD/target/e2e-failures.txt
rm -f "$FLUX_E2E_FAILURES"

# The hollow-node suites: the root and burst clusters started above.
hollow_suites() {
  KUBECONFIG=$(kubeconfig "$root_name")
  SPOKE_KUBECONFIG=$(kubeconfig "$burst_name")
  SPOKE2_KUBECONFIG=$(kubeconfig "$burst2_name")
  export KUBECONFIG SPOKE_KUBECONFIG SPOKE2_KUBECONFIG
  # The admin contexts `flux-hub init` writes go here, not to the user's configuration.
  export FLUX_HUB_CONFIG=$state/e2e-flux-hub-config.yaml
  # The burst cluster's whole control plane (etcd, API server, controllers, hollow nodes)
  # down and up again, keeping its data, for the API-outage test.
  export FLUX_E2E_BURST_STOP="'$testbed/k8s/stop.sh' $burst_name"
  export FLUX_E2E_BURST_START="NODE_EXTERNAL_IP_PREFIX=10.250.$burst_offset '$testbed/k8s/start.sh' $burst_name $burst_offset 2"
  suite --test hub --test bursting --test flux --test images -- --include-ignored "$@"
}

# Real nodes: three control planes of their own, with real nodes (kubelet, containerd,
# kube-proxy), the images built offline loaded into every node. The clusters come up at
# once (real-node.sh shares only /etc/hosts between them, and locks it), a cluster's nodes
# one after the other.
# The root's nodes run containerd 2 (scripts/containerd-2.sh) with Kubernetes' ImageVolume
# gate on in their kubelets and the API server: pods there may mount the view image as a
# volume. The burst clusters' nodes keep Debian's containerd 1.6, which cannot.
real_cluster_up() { # NAME OFFSET NODES
  local name=$1 offset=$2 nodes=$3 node runtime=()
  fresh "$name"
  "$testbed/k8s/start.sh" "$name" "$offset" 0 >/dev/null 9>&-
  if [ "$name" = "$real_name" ]; then
    "$(dirname "$0")/api-feature-gates.sh" "$name" ImageVolume=true 9>&-
    runtime=(REAL_NODE_CONTAINERD_DIR="$containerd_2" REAL_NODE_FEATURE_GATES=ImageVolume=true)
  fi
  for ((node = 0; node < nodes; node++)); do
    env "${runtime[@]}" "$(dirname "$0")/real-node.sh" up "$name" "$offset" "$node" \
      "$images/pause-testbed.oci.tar" "$images/flux-app-bookworm.oci.tar" "$images/flux-view-bookworm.oci.tar" \
      "$images/flux-hub-e2e.oci.tar" "$images/flux-hub-released-$released.oci.tar" 9>&-
  done
}
real_clusters_up() {
  local started=$SECONDS
  containerd_2=$("$(dirname "$0")/containerd-2.sh")
  for cluster in "${real_clusters[@]}"; do
    # shellcheck disable=SC2086 # NAME OFFSET NODES, split on purpose
    real_cluster_up $cluster &
    starting+=($!)
  done
  started_all "a real-node cluster"
  echo "e2e: real-node clusters $real_name, $real_b_name, $real_c_name ready in $((SECONDS - started)) s"
}
real_env() {
  KUBECONFIG=$(kubeconfig "$real_name")
  SPOKE_KUBECONFIG=$(kubeconfig "$real_b_name")
  SPOKE2_KUBECONFIG=$(kubeconfig "$real_c_name")
  export KUBECONFIG SPOKE_KUBECONFIG SPOKE2_KUBECONFIG
  export FLUX_HUB_CONFIG=$state/e2e-real-flux-hub-config.yaml
}

# One family after the other. Side by side (they share no cluster) timing-bound tests
# failed under the load (the drain hook's 12 s timeout seen at 23 s), so the hollow-node
# clusters make way for the real-node ones.
status=0
hollow_suites "$@" || status=$?
fresh "$root_name"
fresh "$burst_name"
fresh "$burst2_name"
real_clusters_up
real_env
suite --test real_node -- --include-ignored "$@" || status=$?
# After real_node.rs, one at a time: `flux-hub init` installs a hub that watches every
# namespace.
suite --test real_node_install -- --include-ignored "$@" || status=$?
suite --test real_node_bursting -- --include-ignored "$@" || status=$?
# After it: its own hub install and both spokes joined again with its certificates.
# --nocapture: the time relayed brokers took to run a job again after each upgrade step.
suite --test real_node_placement -- --include-ignored --nocapture "$@" || status=$?

# Last: it crashes and stops the first real burst cluster (node and control plane) and
# starts it again. --nocapture: its BENCH line (the time from a cluster lost
# to its ranks up elsewhere).
suite --test real_node_recovery -- --include-ignored --nocapture "$@" || status=$?
echo "e2e: the slowest tests (seconds):"
sort -rn "$FLUX_E2E_TIMES" 2>/dev/null | head -n 12 || true
exit "$status"
