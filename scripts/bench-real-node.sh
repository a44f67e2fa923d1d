#!/usr/bin/env bash
# Benchmark "time to a working Flux instance" on a real node (kubelet + containerd + runc,
# scripts/real-node.sh) of a testbed control plane, in one run, same node, same images:
#
#   floor      a bare Indexed Job (size completions and parallelism) of the same pods a
#              MiniCluster has, minus Flux: an init container of the view image copying the
#              view to an emptyDir, an app-image container copying the software back and
#              sleeping. Time from `kubectl create` to every pod Ready.
#   bare floor a bare Indexed Job of the application image alone (its container sleeps):
#              no view and no copy, the floor of a pod that gets the view without one.
#              Time from `kubectl create` to every pod Ready; measured after each floor
#              run, same size.
#   hub        flux-hub (`flux-hub run` as a host process) and an interactive MiniCluster of
#              that size. Time from `kubectl create` to every broker up, as the lead broker
#              sees it: `flux resource list -s up -no {nnodes}` = size, run in the lead pod.
#   reference  the same with the reference Go flux-operator (../shared/reference-operator),
#              after swapping our CRD for its own; its MiniClusters carry a CURVE
#              certificate (spec.flux.curveCert, made with pyzmq) since its build has no
#              generator.
#   burst      on its own, last: a second cluster bench-real-b (port offset 71, one real
#              node, same images) joins bench-real-a as a user does it, in-cluster from the
#              controller image of --profile (flux-images controller, tag "bench"):
#              `flux-hub init` in bench-real-a, `flux-hub join burst` in bench-real-b. Its
#              floor is the floor's Job of N pods in bench-real-b. Then one interactive
#              MiniCluster of size 2 in bench-real-a with a burst burst-b (cluster burst,
#              size 0, maxSize the largest size); once its 2 brokers are up, per run: the
#              clock starts, `flux-hub burst scale bench-burst/burst burst-b N`, and stops
#              when the lead broker says 2+N brokers up; the burst pods' Ready in
#              bench-real-b is watched too. Between runs it is scaled back to 0 until its
#              pods are gone and the lead says 2 up. Target: brokers up <= floor + 1.5 s.
#              The MiniCluster has a second burst, burst-r, with `relay: true` (its
#              brokers reach the lead through the spoke's connection to the hub), measured
#              the same way right after burst-b in every run. Then, with both bursts at
#              the largest size, per run and path: `flux ping` from the lead to the
#              burst's first rank (500 round trips, p50/p99) and 100 one-task jobs placed
#              on that rank (`flux submit --cc --requires=rank:`, jobs/s), with the CPU
#              time the in-cluster hub spent meanwhile; and the hub's RSS with both
#              bursts at 0 and at the largest size. Targets (relay against direct): p50
#              round trip <= +1 ms, jobs/s >= 0.8x, brokers up <= +0.5 s.
#
#   scripts/bench-real-node.sh [--sizes 2,4,8] [--runs 3] [--profile release|debug]
#                              [--hub-bin PATH] [--timeout 300] [--skip-reference]
#                              [--skip-burst | --only-burst] [--skip-image] [--out DIR]
#                              [--containerd DIR]
#
# --profile: which build of flux-hub is built and run, and whose binaries (flux-hub and
# flux-spoke under target/PROFILE) go into the image; --hub-bin runs that binary instead,
# without building it (the image still takes target/PROFILE). --only-burst runs the burst
# phase alone (no floor, hub or reference phase in bench-real-a); --skip-image does not
# rebuild the image and takes target/images/flux-hub-bench.oci.tar as it is (the burst
# phase needs it). --containerd DIR: the nodes run that containerd (2.1+, e.g.
# scripts/containerd-2.sh) with Kubernetes' ImageVolume gate on in their kubelets and API
# servers, for every kind alike, and flux-hub's MiniClusters set
# `flux.container.imageVolume: true` (this testbed's Kubernetes, a 1.35 pre-release, does
# not say the gate is on: flux-hub would not assume it).
#
# Each kind gets a warm-up of size 2 first (in the raw data, not in the figures); then
# every size --runs times, one at a time, each torn down before the next; every controller
# run comes right after a floor run of the same size (the floor is measured next to each
# controller, so both meet the node in the same state). Probe: one
# `kubectl exec` into the lead pod (once the watch shows its broker container started)
# waits on the lead broker's log for it to run, then runs the flux command as brokers come
# online and prints the host clock when it first reports every broker up (the pod shares
# the host's clock); pods Ready come from a `kubectl get --watch`. In
# the burst phase the probe is already running (one probe answered) when the clock starts.
# Last, the timeline of each controller run from the brokers' logs (scripts/bench_timeline.py:
# view ready, broker container, lead rc1, workers' rc1, all online; pods Ready -> brokers up).
# Also measured: the peak RSS (VmHWM) of the flux-hub process and of the reference manager
# over their runs, and the controller image (`flux-images controller`, tag "bench") layer
# sizes, uncompressed and gzip -6.
#
# Cluster bench-real-a (port offset 70), one real node, and for the burst phase
# bench-real-b (offset 71); each is created fresh and torn down on exit, whatever happens.
# Needs root, the testbed's `install --real-nodes`, the images in target/images
# (flux-images app/view/pause) and .venv with pyzmq (FLUX_BENCH_PYTHON).
# Output: markdown tables on stdout; raw numbers in DIR/runs.jsonl, DIR/results.json;
# controller logs, pod watches and broker logs in DIR/logs. DIR defaults to
# target/bench-real-node. Takes about 12 minutes on 2 cores with the defaults, plus an
# estimated 15 minutes for the burst phase (direct and relayed; 3 minutes with --sizes 2
# --runs 1), after the builds (a release build of flux-hub takes much longer than that on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }

sizes=2,4,8 runs=3 profile=release hub_bin='' timeout_s=300
skip_reference=false skip_image=false skip_burst=false only_burst=false containerd=''
target_dir=${CARGO_TARGET_DIR:-target}
out=$target_dir/bench-real-node
while [ $# -gt 0 ]; do
  case $1 in
    --sizes) sizes=${2:?--sizes needs a value}; shift 2 ;;
    --runs) runs=${2:?--runs needs a value}; shift 2 ;;
    --profile) profile=${2:?--profile needs a value}; shift 2 ;;
    --hub-bin) hub_bin=${2:?--hub-bin needs a value}; shift 2 ;;
    --timeout) timeout_s=${2:?--timeout needs a value}; shift 2 ;;
    --skip-reference) skip_reference=true; shift ;;
    --skip-image) skip_image=true; shift ;;
    --skip-burst) skip_burst=true; shift ;;
    --only-burst) only_burst=true; shift ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    --containerd) containerd=${2:?--containerd needs a value}; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bench-real-node: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
IFS=, read -r -a size_list <<<"$sizes"
# flux-hub's MiniClusters on nodes that mount images as volumes (--containerd).
image_volume=''
if [ -n "$containerd" ]; then
  [ -x "$containerd/containerd" ] || { echo "bench-real-node: no containerd in $containerd" >&2; exit 2; }
  export REAL_NODE_CONTAINERD_DIR=$containerd REAL_NODE_FEATURE_GATES=ImageVolume=true
  image_volume=', imageVolume: true'
fi
for v in "${size_list[@]}" "$runs" "$timeout_s"; do
  [[ $v =~ ^[0-9]+$ ]] && [ "$v" -ge 1 ] || { echo "bench-real-node: not a positive number: $v" >&2; exit 2; }
done
case $profile in release | debug) ;; *) echo "bench-real-node: --profile is release or debug" >&2; exit 2 ;; esac
if [ "$only_burst" = true ]; then
  [ "$skip_burst" = false ] || { echo "bench-real-node: --only-burst and --skip-burst exclude each other" >&2; exit 2; }
  skip_reference=true
fi

testbed=${FLUX_BENCH_TESTBED:-$(cd .. && pwd)/shared/testbed}
reference_dir=${FLUX_BENCH_REFERENCE:-$(cd .. && pwd)/shared/reference-operator}
venv_python=${FLUX_BENCH_PYTHON:-$PWD/.venv/bin/python}
state=/opt/testbed/k8s
kubectl=$state/bin/kubectl
name=bench-real-a offset=70
name_b=bench-real-b offset_b=71
images=$target_dir/images
node_sock_a=/opt/testbed/real-nodes/$name-real-0/containerd.sock
node_sock_b=/opt/testbed/real-nodes/$name_b-real-0/containerd.sock
node_sock=$node_sock_a
hub_archive=$images/flux-hub-bench.oci.tar
hub_image=ghcr.io/flux-framework/flux-hub:bench
app_image=localhost/flux-app-debian:bookworm
view_image=localhost/flux-view-debian:bookworm
crd=miniclusters.flux-framework.org

log() { printf '[bench %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "the testbed needs root"
[ -x "$testbed/k8s/start.sh" ] || die "no testbed at $testbed (set FLUX_BENCH_TESTBED)"
for f in pause-testbed flux-app-bookworm flux-view-bookworm; do
  [ -f "$images/$f.oci.tar" ] || die "no $images/$f.oci.tar (cargo run -p flux-e2e --bin flux-images -- --help)"
done
if [ "$skip_reference" = false ]; then
  [ -f "$reference_dir/manager.xz" ] || die "no reference operator at $reference_dir (or --skip-reference)"
  "$venv_python" -c 'import zmq' 2>/dev/null || die "$venv_python has no pyzmq (set FLUX_BENCH_PYTHON)"
fi
if [ "$skip_burst" = false ] && [ "$skip_image" = true ]; then
  [ -f "$hub_archive" ] || die "no $hub_archive for the burst phase (drop --skip-image, or --skip-burst)"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/bench-real-node.XXXXXX")
controller_pid='' watch_pid='' probe_pid='' cluster_started=false node_started=false
cluster_b_started=false node_b_started=false
: >"$work/controllers.jsonl"

fresh() { # NAME: drop the cluster's state
  "$testbed/k8s/stop.sh" "$1" >/dev/null 2>&1 || true
  rm -rf "$state/data/$1" "$state/data/etcd-$1" "$state/kubeconfig-$1"
  rmdir "$state/run/$1" 2>/dev/null || true
}
use_cluster() { # a|b: where kubectl (KUBECONFIG), measure and teardown (node_sock) act
  if [ "$1" = a ]; then
    export KUBECONFIG=$state/kubeconfig-$name
    node_sock=$node_sock_a
  else
    export KUBECONFIG=$state/kubeconfig-$name_b
    node_sock=$node_sock_b
  fi
}
stop_probe() {
  if [ -n "$probe_pid" ]; then
    kill "$probe_pid" 2>/dev/null || true
    wait "$probe_pid" 2>/dev/null || true
    probe_pid=
  fi
}
stop_watch() {
  if [ -n "$watch_pid" ]; then
    kill "$watch_pid" 2>/dev/null || true
    wait "$watch_pid" 2>/dev/null || true
    watch_pid=
  fi
}
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  stop_watch
  stop_probe
  if [ -n "$controller_pid" ]; then
    kill -9 "$controller_pid" 2>/dev/null || true
    wait "$controller_pid" 2>/dev/null || true
  fi
  if [ "$node_started" = true ]; then
    scripts/real-node.sh down "$name" "$offset" 0 >/dev/null 2>&1 || log "warning: real-node.sh down failed"
  fi
  if [ "$node_b_started" = true ]; then
    scripts/real-node.sh down "$name_b" "$offset_b" 0 >/dev/null 2>&1 || log "warning: real-node.sh down $name_b failed"
  fi
  [ "$cluster_started" = true ] && fresh "$name"
  [ "$cluster_b_started" = true ] && fresh "$name_b"
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now() { echo "$EPOCHREALTIME"; }
minus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
# CPU time (user + system, ms) the running controller process has used so far, or null.
controller_cpu_ms() {
  [ -n "$controller_pid" ] && [ -r "/proc/$controller_pid/stat" ] || { echo null; return; }
  awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%d", ($12 + $13) * 1000 / hz }' \
    "/proc/$controller_pid/stat"
}

# --- builds (before the cluster, so a slow build keeps nothing up)
"$testbed/install" >/dev/null
mkdir -p "$out/logs"
rm -f "$out"/runs.jsonl "$out"/results.json "$out"/logs/*
release_flag=()
[ "$profile" = release ] && release_flag=(--release)
if [ -n "$hub_bin" ]; then
  hub=$hub_bin
  hub_label="$hub_bin (not rebuilt)"
else
  hub_label="$profile build"
  log "building flux-hub and flux-spoke ($profile)"
  cargo build "${release_flag[@]}" -p flux-hub -p flux-spoke
  hub=$target_dir/$profile/flux-hub
fi
[ -x "$hub" ] || die "no flux-hub binary at $hub"
source_rev=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
dirty=$(git status --short -- hub shared Cargo.lock Cargo.toml 2>/dev/null | wc -l)

image_json=null
if [ "$skip_image" = false ]; then
  log "building the controller image ($profile binaries, tag bench)"
  cargo run -q -p flux-e2e --bin flux-images -- controller --out "$images" --profile "$profile" --tag bench >&2
  image_json=$(python3 - "$images/flux-hub-bench.oci.tar" <<'EOF'
import gzip, json, os, sys, tarfile
path = sys.argv[1]
with tarfile.open(path) as t:
    blob = lambda d: t.extractfile("blobs/sha256/" + d.split(":", 1)[1]).read()
    index = json.loads(t.extractfile("index.json").read())
    manifest = json.loads(blob(index["manifests"][0]["digest"]))
    layers = []
    for layer in manifest["layers"]:
        data = blob(layer["digest"])
        gz = layer["mediaType"].endswith("gzip")
        raw = gzip.decompress(data) if gz else data
        packed = len(data) if gz else len(gzip.compress(raw, 6))
        layers.append({"media_type": layer["mediaType"], "uncompressed": len(raw), "gzip": packed})
print(json.dumps({"archive": path, "archive_bytes": os.path.getsize(path), "layers": layers,
                  "uncompressed": sum(l["uncompressed"] for l in layers),
                  "gzip": sum(l["gzip"] for l in layers)}))
EOF
  )
fi
reference=$work/reference-manager
if [ "$skip_reference" = false ]; then
  xz -dc "$reference_dir/manager.xz" >"$reference" && chmod +x "$reference"
fi

# --- manifests
floor_job_head() { # NAME SIZE: what both floors' Jobs share, up to their containers
  cat <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: $1}
spec:
  completionMode: Indexed
  completions: $2
  parallelism: $2
  backoffLimit: 100
  template:
    spec:
      restartPolicy: OnFailure
      automountServiceAccountToken: false
EOF
}
floor_job() { # NAME SIZE
  floor_job_head "$1" "$2"
  cat <<EOF
      initContainers:
      - name: flux-view
        image: $view_image
        imagePullPolicy: IfNotPresent
        command:
        - /bin/bash
        - -c
        - set -e; views=(/opt/views/._view/*/); mkdir -p /mnt/flux/view /mnt/flux/software;
          cp -a "\${views[0]}." /mnt/flux/view/; cp -a /opt/software/. /mnt/flux/software/
        volumeMounts: [{name: flux-view, mountPath: /mnt/flux}]
      containers:
      - name: $1
        image: $app_image
        imagePullPolicy: IfNotPresent
        command: [/bin/bash, -c, 'cp -a /mnt/flux/software/. /opt/software/ && exec sleep infinity']
        volumeMounts:
        - {name: flux-view, mountPath: /mnt/flux}
        - {name: spack-software, mountPath: /opt/software}
      volumes:
      - {name: flux-view, emptyDir: {}}
      - {name: spack-software, emptyDir: {}}
EOF
}
bare_floor_job() { # NAME SIZE
  floor_job_head "$1" "$2"
  cat <<EOF
      containers:
      - name: $1
        image: $app_image
        imagePullPolicy: IfNotPresent
        command: [sleep, infinity]
EOF
}
minicluster() { # NAME SIZE [CURVE_CERT_FILE]
  # The reference operator's (with a certificate) knows no imageVolume.
  local image_volume=$image_volume
  [ -z "${3:-}" ] || image_volume=''
  cat <<EOF
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {name: $1}
spec:
  size: $2
  interactive: true
  flux:
    container: {image: $view_image$image_volume}
EOF
  if [ -n "${3:-}" ]; then
    echo "    curveCert: |"
    sed 's/^/      /' "$3"
  fi
  cat <<EOF
  containers:
  - image: $app_image
    imagePullPolicy: IfNotPresent
EOF
}
curve_cert() { # NAME: a zcert (ZPL) secret certificate, as czmq saves one
  "$venv_python" - "$1" <<'EOF'
import sys, zmq
public, secret = zmq.curve_keypair()
print("#   ZeroMQ CURVE **Secret** Certificate")
print("#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.")
print()
print("metadata")
print('    name = "bench-real-node"')
print(f'    keygen.hostname = "{sys.argv[1]}-0"')
print("curve")
print(f'    public-key = "{public.decode()}"')
print(f'    secret-key = "{secret.decode()}"')
EOF
}

# In the lead pod, once the entrypoint wrote flux-view.sh and the broker made its socket:
# wait for the lead broker to run (every broker of the hostlist online, as broker.quorum is
# all of them for both controllers) on its own log (`flux dmesg --follow`, one process that
# sleeps until the broker logs; `flux uptime` (C) when the log is quiet for 1 s), printing
# each new state (PHASE); then ask how many are up with `flux resource list` (Python, 0.1-0.4
# s of CPU: asked every 100-200 ms while brokers start, as the earlier probes did, it slowed
# both controllers' brokers on 2 cores): at once, then whenever `flux uptime`, asked every
# 200 ms, counts another number of brokers up (size - drained - offline; the lead logs no
# line when a broker joins a running instance) or counts $1 or more while the answer still
# says fewer. Prints the host clock around the first answer whatever it says (FIRST: the
# probe is running) and around the first one that says $1 (UP).
probe_script() { # SIZE
  cat <<EOF
k=0 last='' log_fd='' seen=''
until [ -f /mnt/flux/flux-view.sh ]; do sleep 0.1; done
. /mnt/flux/flux-view.sh && export FLUX_URI="\$fluxsocket"
until [ -S "\${fluxsocket#local://}" ]; do sleep 0.05; done
coproc broker_log { exec flux dmesg --follow 2>/dev/null; }
log_fd=\${broker_log[0]:-}
# Waits up to 1 s for a line of the lead's log holding \$1 then \$2: 0 when one came.
log_says() {
  local line status
  while :; do
    if [ -z "\$log_fd" ]; then sleep 0.1; return 1; fi
    IFS= read -r -t 1 -u "\$log_fd" line; status=\$?
    if [ \$status -gt 128 ]; then return 1; fi
    if [ \$status -ne 0 ]; then log_fd=''; return 1; fi
    case \$line in *"\$1"*"\$2"*) return 0 ;; esac
  done
}
# Brokers up as flux uptime counts them: size - drained - offline (empty: no answer).
uptime_up() {
  local line drained=0 offline=0
  line=\$(flux uptime 2>/dev/null) || return 0
  [[ \$line =~ size\ ([0-9]+) ]] || return 0
  local size=\${BASH_REMATCH[1]}
  if [[ \$line =~ ([0-9]+)\ drained ]]; then drained=\${BASH_REMATCH[1]}; fi
  if [[ \$line =~ ([0-9]+)\ offline ]]; then offline=\${BASH_REMATCH[1]}; fi
  echo \$((size - drained - offline))
}
while :; do
  s=\$(date +%s.%N)
  set -- \$(flux uptime 2>/dev/null) ''
  phase=\$2
  if [ "\$phase" != "\$last" ]; then echo "PHASE \$s \$phase"; last=\$phase; fi
  case \$phase in
    '' | none | join | config-sync | init | quorum) log_says '[0]: ' '->run' || true ;;
    *) break ;;
  esac
done
[ -z "\${broker_log_PID:-}" ] || kill "\$broker_log_PID" 2>/dev/null
while :; do
  s=\$(date +%s.%N)
  got=\$(flux resource list -s up -no '{nnodes}' 2>/dev/null) || got=
  e=\$(date +%s.%N)
  k=\$((k + 1))
  [ \$k = 1 ] && echo "FIRST \$s \$e \$got"
  echo "PROBE \$s \$e \$got"
  if [ "\$got" = $1 ]; then echo "UP \$s \$e \$k"; exit 0; fi
  while :; do
    sleep 0.2
    n=\$(uptime_up)
    if [ -z "\$n" ] || [ "\$n" != "\$seen" ] || [ "\$n" -ge $1 ]; then seen=\$n; break; fi
  done
done
EOF
}

# --- cluster
cluster_ns_ready() { "$kubectl" get serviceaccount default -n "$1" >/dev/null 2>&1; }
create_namespace() {
  "$kubectl" create namespace "$1" >/dev/null
  for _ in $(seq 100); do cluster_ns_ready "$1" && return 0; sleep 0.2; done
  die "namespace $1 has no default service account after 20 s"
}
delete_namespace() {
  "$kubectl" delete namespace "$1" --wait --timeout=180s >/dev/null || die "namespace $1 was not deleted within 180 s"
}
install_crd() { # hub|reference
  log "installing the $1 MiniCluster CRD"
  if [ "$1" = hub ]; then
    "$hub" crd | "$kubectl" apply --server-side --force-conflicts -f - >/dev/null
  else
    "$kubectl" apply --server-side --force-conflicts -f "$reference_dir/miniclusters-crd.yaml" >/dev/null
  fi
  local established=
  for _ in $(seq 120); do
    established=$("$kubectl" get "crd/$crd" \
      -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null) || true
    [ "$established" = True ] && return 0
    sleep 0.5
  done
  die "the CRD did not become Established within 60 s"
}
remove_crd() {
  log "removing the MiniCluster CRD"
  "$kubectl" delete "crd/$crd" --wait --timeout=120s >/dev/null || die "the CRD was not deleted within 120 s"
}

start_controller() { # hub|reference
  log "starting the $1 controller"
  if [ "$1" = hub ]; then
    "$hub" run --metrics-addr "127.0.0.1:$((18400 + offset))" >"$out/logs/hub.log" 2>&1 &
  else
    "$reference" --metrics-bind-address=127.0.0.1:0 --health-probe-bind-address=127.0.0.1:0 \
      --leader-elect=false >"$out/logs/reference.log" 2>&1 &
  fi
  controller_pid=$!
  sleep 1
  kill -0 "$controller_pid" 2>/dev/null || die "the $1 controller exited at once (see $out/logs)"
}
stop_controller() { # KIND: records its peak and last RSS
  local hwm rss
  kill -0 "$controller_pid" 2>/dev/null || die "the $1 controller died during the run (see $out/logs)"
  hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$controller_pid/status")
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$controller_pid/status")
  printf '{"controller":"%s","vmhwm_kib":%s,"vmrss_kib":%s}\n' "$1" "$hwm" "$rss" >>"$work/controllers.jsonl"
  log "$1 controller: peak RSS ${hwm} KiB, last ${rss} KiB"
  kill "$controller_pid" 2>/dev/null || true
  wait "$controller_pid" 2>/dev/null || true
  controller_pid=
}

# Tears down one run's objects: the MiniCluster (or Job), then its pods, force-deleted, then
# SIGKILLs whatever still runs on the node (it runs nothing but this benchmark's pods; the
# kubelet would otherwise give every container its 30 s grace period), so the next run has
# the node to itself.
teardown() { # KIND NS NAME
  local kind=$1 ns=$2 job=$3 left running task
  if [[ $kind != *floor ]]; then
    "$kubectl" -n "$ns" delete minicluster "$job" --wait=false >/dev/null 2>&1 || true
  fi
  "$kubectl" -n "$ns" delete job "$job" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  for _ in $(seq 240); do
    left=$("$kubectl" -n "$ns" delete pods -l "job-name=$job" --grace-period=0 --force \
      --ignore-not-found --wait=false -o name 2>/dev/null | awk '/^pod\// {n++} END {print n + 0}') || left=1
    "$kubectl" -n "$ns" get job "$job" >/dev/null 2>&1 && left=$((left + 1))
    if [[ $kind != *floor ]]; then
      "$kubectl" -n "$ns" get minicluster "$job" >/dev/null 2>&1 && left=$((left + 1))
    fi
    [ "$left" = 0 ] && break
    sleep 0.5
  done
  [ "$left" = 0 ] || die "$job or its pods still exist 120 s after deletion"
  for _ in $(seq 240); do
    running=$(ctr --address "$node_sock" -n k8s.io tasks ls 2>/dev/null | awk '$3 == "RUNNING" {print $1}') || running=
    [ -z "$running" ] && { sleep 1; return 0; }
    for task in $running; do
      ctr --address "$node_sock" -n k8s.io tasks kill -s KILL "$task" >/dev/null 2>&1 || true
    done
    sleep 0.5
  done
  die "the node still runs $running container(s) 120 s after $job was deleted"
}

# The host time at which every pod of the watch file was Ready at once, if they were.
all_ready_at() { # WATCH_FILE SIZE
  awk -v n="$2" '{ state[$2] = $3; c = 0; for (p in state) if (state[p] == "True") c++;
                   if (c >= n) { print $1; exit } }' "$1"
}

measure() { # KIND NS SIZE RUN
  local kind=$1 ns=$2 size=$3 run=$4 job manifest watch t0 t1 deadline ready='' up='' lead probe_out up_end up_start load
  local ready_s=null up_s=null probe_start_s=null probes=null cpu0 cpu_ms=null
  job=${kind/reference/ref}-$size-$run
  manifest=$work/$job.yaml
  case $kind in
    floor | burst-floor) floor_job "$job" "$size" >"$manifest" ;;
    bare-floor) bare_floor_job "$job" "$size" >"$manifest" ;;
    hub) minicluster "$job" "$size" >"$manifest" ;;
    reference) curve_cert "$job" >"$work/$job.cert"; minicluster "$job" "$size" "$work/$job.cert" >"$manifest" ;;
  esac
  watch=$out/logs/watch-$job.log
  # Each line: host clock, pod, Ready, then whether each of its containers started.
  "$kubectl" -n "$ns" get pods -l "job-name=$job" --watch \
    -o jsonpath='{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.status.containerStatuses[*].started}{"\n"}' \
    2>/dev/null > >(while read -r line; do echo "$EPOCHREALTIME $line"; done >"$watch") &
  watch_pid=$!
  sleep 1 # the watch is established
  cpu0=$(controller_cpu_ms)
  t0=$(now)
  deadline=$((${t0%.*} + timeout_s))
  "$kubectl" -n "$ns" create -f "$manifest" >/dev/null
  if [[ $kind == *floor ]]; then
    while [ "${EPOCHREALTIME%.*}" -lt "$deadline" ]; do
      ready=$(all_ready_at "$watch" "$size")
      [ -n "$ready" ] && break
      sleep 0.1
    done
  else
    while [ "${EPOCHREALTIME%.*}" -lt "$deadline" ]; do
      # The lead pod once its broker container started, from the watch: no kubectl run
      # (tens of ms of CPU each) while the pods start, which the floor's runs do not pay.
      lead=$(awk -v p="^$job-0-" '$2 ~ p && $4 == "true" {print $2; exit}' "$watch")
      if [ -n "$lead" ]; then
        probe_out=$(timeout $((deadline - ${EPOCHREALTIME%.*} + 1)) "$kubectl" -n "$ns" exec "$lead" -c "$job" -- \
          bash -c "$(probe_script "$size")" 2>>"$out/logs/exec-$job.log") || probe_out=
        printf '%s\n' "$probe_out" >>"$out/logs/probe-$job.log"
        up=$(printf '%s\n' "$probe_out" | awk '$1 == "UP" {print $3, $2, $4}')
        [ -n "$up" ] && break
      fi
      sleep 0.1
    done
    # The pods were Ready before their brokers answered (or were never, then null).
    ready=$(all_ready_at "$watch" "$size")
  fi
  stop_watch
  # The controller's CPU from the create until every broker was up (floor: none).
  if [[ $kind != *floor ]] && [ "$cpu0" != null ]; then
    cpu_ms=$(($(controller_cpu_ms) - cpu0))
  fi
  [ -n "$ready" ] && ready_s=$(minus "$ready" "$t0")
  if [ -n "$up" ]; then
    read -r up_end up_start probes <<<"$up"
    up_s=$(minus "$up_end" "$t0")
    probe_start_s=$(minus "$up_start" "$t0")
  fi
  load=$(loadavg)
  # The brokers' logs, for a look at where the time went (not timed).
  if [[ $kind != *floor ]]; then
    for lead in $("$kubectl" -n "$ns" get pods -l "job-name=$job" -o name 2>/dev/null); do
      "$kubectl" -n "$ns" logs "$lead" --all-containers --prefix --timestamps >"$out/logs/pod-${lead#pod/}.log" 2>&1 || true
    done
  fi
  t1=$(now)
  teardown "$kind" "$ns" "$job"
  printf '{"kind":"%s","size":%s,"run":%s,"warmup":%s,"t0":%s,"pods_ready_s":%s,"flux_up_s":%s,"probe_start_s":%s,"probes":%s,"controller_cpu_ms":%s,"load":"%s","teardown_s":%s}\n' \
    "$kind" "$size" "$run" "$([ "$run" = 0 ] && echo true || echo false)" "$t0" "$ready_s" "$up_s" \
    "$probe_start_s" "$probes" "$cpu_ms" "$load" "$(minus "$(now)" "$t1")" | tee -a "$out/runs.jsonl" >&2
  if [ "$ready_s" = null ] || { [[ $kind != *floor ]] && [ "$up_s" = null ]; }; then
    log "warning: $job did not get there within $timeout_s s"
  fi
}

run_kind() { # KIND NS
  create_namespace "$2"
  log "$1: warm-up (size 2)"
  measure "$1" "$2" 2 0
  local size run
  for size in "${size_list[@]}"; do
    for run in $(seq "$runs"); do
      log "$1: size $size, run $run/$runs"
      measure "$1" "$2" "$size" "$run"
    done
  done
  delete_namespace "$2"
}

# Each run of a controller right after a floor run of the same size, so that both meet the
# node in the same state (the node slows down as runs accumulate: measured first and alone,
# the floor looked faster than it is). FLOOR_OFFSET numbers the floor runs of the second
# controller after the first's.
run_kind_with_floor() { # KIND NS FLOOR_OFFSET
  create_namespace "$2"
  log "$1: warm-up (size 2)"
  measure "$1" "$2" 2 0
  local size run
  for size in "${size_list[@]}"; do
    for run in $(seq "$runs"); do
      log "$1: size $size, run $run/$runs, after a floor run"
      measure floor bench-floor "$size" $((run + $3))
      measure bare-floor bench-floor "$size" $((run + $3))
      measure "$1" "$2" "$size" "$run"
    done
  done
  delete_namespace "$2"
}

# --- burst phase (bench-real-b; in-cluster hub and spoke)
burst_ns=bench-burst burst_mc=burst burst_name=burst-b relay_name=burst-r
certs=$work/certs
hub_url='' admin=()
kb() { "$kubectl" --kubeconfig "$state/kubeconfig-$name_b" "$@"; }
ka() { "$kubectl" --kubeconfig "$state/kubeconfig-$name" "$@"; }
burst_minicluster() { # MAX_SIZE
  cat <<EOF
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {name: $burst_mc}
spec:
  size: 2
  interactive: true
  flux:
    container: {image: $view_image$image_volume}
    bursting:
      clusters:
      - {name: $burst_name, cluster: burst, size: 0, maxSize: $1}
      - {name: $relay_name, cluster: burst, size: 0, maxSize: $1, relay: true}
  containers:
  - image: $app_image
    imagePullPolicy: IfNotPresent
EOF
}
# The probe for TARGET brokers in the lead pod of the burst MiniCluster, in the background,
# appending to FILE, for at most SECONDS; fails when there is no lead pod yet.
start_probe() { # TARGET FILE SECONDS
  local lead
  lead=$(ka -n "$burst_ns" get pods -l "job-name=$burst_mc,batch.kubernetes.io/job-completion-index=0" \
    -o jsonpath='{.items[0].metadata.name}' 2>/dev/null) || lead=
  [ -n "$lead" ] || return 1
  timeout "$3" "$kubectl" --kubeconfig "$state/kubeconfig-$name" -n "$burst_ns" exec "$lead" -c "$burst_mc" -- \
    bash -c "$(probe_script "$1")" >>"$2" 2>>"$out/logs/exec-burst.log" &
  probe_pid=$!
}
probe_alive() { [ -n "$probe_pid" ] && kill -0 "$probe_pid" 2>/dev/null; }
wait_up() { # TARGET SECONDS WHAT: until the lead broker says TARGET brokers up
  local file=$work/wait-up.out deadline=$((SECONDS + $2))
  : >"$file"
  while [ "$SECONDS" -lt "$deadline" ]; do
    if grep -q '^UP ' "$file"; then stop_probe; return 0; fi
    if ! probe_alive; then
      stop_probe
      start_probe "$1" "$file" $((deadline - SECONDS + 1)) || { sleep 0.5; continue; }
    fi
    sleep 0.2
  done
  stop_probe
  die "$3: the lead broker did not say $1 brokers up within $2 s (see $out/logs)"
}

measure_burst() { # BURST SIZE RUN
  local burst=$1 size=$2 run=$3 target=$((2 + $2)) kind=burst
  [ "$1" = "$relay_name" ] && kind="burst-relay"
  local tag=$kind-$2-$3 watch probe_file t0 t1 deadline up='' ready='' seen='' left=1 load
  local ready_s=null up_s=null probe_start_s=null probes=null cpu0 cpu_ms=null seen_s=null cmd_s down_s pod
  watch=$out/logs/watch-$tag.log
  probe_file=$work/probe-$tag.out
  : >"$probe_file"
  # kubectl itself in the background (not through kb, whose subshell a kill would leave it in).
  "$kubectl" --kubeconfig "$state/kubeconfig-$name_b" -n "$burst_ns" get pods -l "job-name=$burst" --watch \
    -o jsonpath='{.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\n"}' \
    2>/dev/null > >(while read -r line; do echo "$EPOCHREALTIME $line"; done >"$watch") &
  watch_pid=$!
  sleep 1 # the watch is established
  # The probe runs (one answer) before the clock starts: exec's own start is not timed.
  deadline=$((SECONDS + 60))
  until grep -q '^FIRST ' "$probe_file"; do
    probe_alive || { stop_probe; start_probe "$target" "$probe_file" $((timeout_s + 120)) || true; }
    [ "$SECONDS" -lt "$deadline" ] || die "no probe answered in the lead pod of $burst_mc within 60 s"
    sleep 0.1
  done
  t0=$(now)
  "$hub" burst scale "$burst_ns/$burst_mc" "$burst" "$size" "${admin[@]}" >>"$out/logs/burst-scale.log" 2>&1 ||
    die "flux-hub burst scale $burst $size failed (see $out/logs/burst-scale.log)"
  cmd_s=$(minus "$(now)" "$t0")
  deadline=$((${t0%.*} + timeout_s))
  while [ "${EPOCHREALTIME%.*}" -lt "$deadline" ]; do
    up=$(awk '$1 == "UP" {print $3, $2, $4; exit}' "$probe_file")
    [ -n "$up" ] && break
    if ! probe_alive; then
      stop_probe
      start_probe "$target" "$probe_file" $((deadline - ${EPOCHREALTIME%.*} + 1)) || true
    fi
    sleep 0.1
  done
  stop_probe
  # The burst pods' Ready (readiness probe) can come after their brokers joined.
  deadline=$((${EPOCHREALTIME%.*} + 60))
  while [ "${EPOCHREALTIME%.*}" -lt "$deadline" ]; do
    ready=$(all_ready_at "$watch" "$size")
    [ -n "$ready" ] && break
    sleep 0.2
  done
  stop_watch
  seen=$(awk 'NR == 1 {print $1}' "$watch")
  [ -n "$seen" ] && seen_s=$(minus "$seen" "$t0")
  [ -n "$ready" ] && ready_s=$(minus "$ready" "$t0")
  if [ -n "$up" ]; then
    read -r t1 probe_start_s probes <<<"$up"
    up_s=$(minus "$t1" "$t0")
    probe_start_s=$(minus "$probe_start_s" "$t0")
  fi
  load=$(loadavg)
  for pod in $(kb -n "$burst_ns" get pods -l "job-name=$burst" -o name 2>/dev/null); do
    kb -n "$burst_ns" logs "$pod" --all-containers --timestamps >"$out/logs/pod-${pod#pod/}-$tag.log" 2>&1 || true
  done
  # Back to 0: the burst's pods gone (their brokers leave through the preStop hook), the
  # root instance at 2 brokers again.
  t1=$(now)
  "$hub" burst scale "$burst_ns/$burst_mc" "$burst" 0 "${admin[@]}" >>"$out/logs/burst-scale.log" 2>&1 ||
    die "flux-hub burst scale $burst 0 failed (see $out/logs/burst-scale.log)"
  for _ in $(seq 360); do
    left=$(kb -n "$burst_ns" get pods -l "job-name=$burst" -o name 2>/dev/null | wc -l) || left=1
    [ "$left" = 0 ] && break
    sleep 0.5
  done
  [ "$left" = 0 ] || die "$burst still has pods 180 s after it was scaled to 0"
  wait_up 2 120 "$burst scaled to 0"
  down_s=$(minus "$(now)" "$t1")
  printf '{"kind":"%s","size":%s,"run":%s,"warmup":%s,"pods_seen_s":%s,"pods_ready_s":%s,"flux_up_s":%s,"probe_start_s":%s,"probes":%s,"scale_cmd_s":%s,"load":"%s","scale_down_s":%s}\n' \
    "$kind" "$size" "$run" "$([ "$run" = 0 ] && echo true || echo false)" "$seen_s" "$ready_s" "$up_s" \
    "$probe_start_s" "$probes" "$cmd_s" "$load" "$down_s" | tee -a "$out/runs.jsonl" >&2
  if [ "$up_s" = null ] || [ "$ready_s" = null ]; then
    log "warning: $burst at $size did not get there within $timeout_s s"
  fi
}

# The in-cluster hub's processes (flux-hub run, in bench-real-a's pods; host processes to
# the host): "RSS_KIB CPU_TICKS RELAYED_BYTES", summed over its replicas (the bytes from
# each one's /metrics, read inside its network namespace).
hub_stats() {
  local pid rss=0 ticks=0 bytes=0 r t b
  for pid in $(pgrep -x flux-hub); do
    [ "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | awk '{print $2}')" = run ] || continue
    r=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null) || continue
    t=$(awk '{ sub(/^.*\) /, ""); split($0, f, " "); print f[12] + f[13] }' "/proc/$pid/stat" 2>/dev/null) || continue
    b=$(nsenter -t "$pid" -n curl -s --max-time 2 http://127.0.0.1:8080/metrics 2>/dev/null |
      awk '/^flux_hub_relay_bytes_total[{ ]/ {s += $NF} END {printf "%d", s}') || b=0
    rss=$((rss + r)) ticks=$((ticks + t)) bytes=$((bytes + ${b:-0}))
  done
  echo "$rss $ticks $bytes"
}

# In the lead pod: the first rank of burst $1, 500 round trips to it (`flux ping`), and
# 100 one-task jobs placed on it; prints "PATH BURST RANK PINGS P50_MS P99_MS START END".
path_script() { # BURST
  cat <<EOF
. /mnt/flux/flux-view.sh && export FLUX_URI="\$fluxsocket"
rank=\$(flux hostlist --find=$1-0 instance) || { echo "ERR no rank for $1-0"; exit 1; }
times=\$(flux ping -c 500 -i 0.005 "\$rank" | grep -o 'time=[0-9.]*' | cut -d= -f2 | sort -n)
n=\$(printf '%s\n' "\$times" | grep -c .)
[ "\$n" -gt 0 ] || { echo "ERR no ping answered by rank \$rank"; exit 1; }
p50=\$(printf '%s\n' "\$times" | sed -n "\$(( (n + 1) / 2 ))p")
p99=\$(printf '%s\n' "\$times" | sed -n "\$(( (n * 99 + 99) / 100 ))p")
s=\$(date +%s.%N)
flux submit --cc=1-100 --requires=rank:"\$rank" -n1 --quiet --wait true || { echo "ERR jobs failed on rank \$rank"; exit 1; }
e=\$(date +%s.%N)
echo "PATH $1 \$rank \$n \$p50 \$p99 \$s \$e"
EOF
}

# Both bursts at SIZE: per run and path the round trip and jobs/s on the burst's first
# rank, and the hub's CPU meanwhile; the hub's RSS at 0 and at SIZE (then both back to 0).
path_phase() { # SIZE
  local size=$1 lead burst run answer before after bytes_before bytes_after rss0 rss1 kind
  read -r rss0 _ <<<"$(hub_stats)"
  log "paths: both bursts at $size"
  for burst in "$burst_name" "$relay_name"; do
    "$hub" burst scale "$burst_ns/$burst_mc" "$burst" "$size" "${admin[@]}" >>"$out/logs/burst-scale.log" 2>&1 ||
      die "flux-hub burst scale $burst $size failed (see $out/logs/burst-scale.log)"
  done
  wait_up $((2 + 2 * size)) "$timeout_s" "both bursts at $size"
  sleep 5 # past the joins' own traffic
  read -r rss1 _ <<<"$(hub_stats)"
  lead=$(ka -n "$burst_ns" get pods -l "job-name=$burst_mc,batch.kubernetes.io/job-completion-index=0" \
    -o jsonpath='{.items[0].metadata.name}')
  for run in $(seq 0 "$runs"); do
    for burst in "$burst_name" "$relay_name"; do
      kind=direct
      [ "$burst" = "$relay_name" ] && kind=relay
      read -r _ before bytes_before <<<"$(hub_stats)"
      answer=$(timeout 300 "$kubectl" --kubeconfig "$state/kubeconfig-$name" -n "$burst_ns" exec "$lead" -c "$burst_mc" -- \
        bash -c "$(path_script "$burst")" 2>>"$out/logs/exec-paths.log") || true
      read -r _ after bytes_after <<<"$(hub_stats)"
      printf '%s\n' "$answer" | grep -q '^PATH ' || die "paths: $burst: ${answer:-no answer} (see $out/logs/exec-paths.log)"
      printf '%s\n' "$answer" | awk -v kind="$kind" -v run="$run" -v size="$size" -v cpu=$(((after - before) * 10)) \
        -v relayed=$((bytes_after - bytes_before)) \
        '$1 == "PATH" { printf "{\"kind\":\"path-%s\",\"size\":%s,\"run\":%s,\"warmup\":%s,\"rank\":%s,\"pings\":%s,\"rtt_p50_ms\":%s,\"rtt_p99_ms\":%s,\"jobs_per_s\":%.2f,\"hub_cpu_ms\":%s,\"relayed_mib\":%.3f}\n",
           kind, size, run, run == 0 ? "true" : "false", $3, $4, $5, $6, 100 / ($8 - $7), cpu, relayed / 1048576 }' |
        tee -a "$out/runs.jsonl" >&2
    done
  done
  for burst in "$burst_name" "$relay_name"; do
    "$hub" burst scale "$burst_ns/$burst_mc" "$burst" 0 "${admin[@]}" >>"$out/logs/burst-scale.log" 2>&1 ||
      die "flux-hub burst scale $burst 0 failed (see $out/logs/burst-scale.log)"
  done
  wait_up 2 180 "both bursts back at 0"
  printf '{"size":%s,"hub_rss_idle_kib":%s,"hub_rss_loaded_kib":%s,"relayed_connections":%s}\n' \
    "$size" "$rss0" "$rss1" "$size" >"$work/paths.json"
}

burst_phase() {
  local t t_phase root_ip max=2 size run setup_s init_s join_s root_up_s pod
  t_phase=$SECONDS
  log "starting cluster $name_b (offset $offset_b) and its real node"
  fresh "$name_b"
  cluster_b_started=true
  "$testbed/k8s/start.sh" "$name_b" "$offset_b" 0 >"$out/logs/start-b.log" 2>&1 ||
    { tail -n 20 "$out/logs/start-b.log" >&2; die "cluster $name_b did not start"; }
  [ -z "$containerd" ] || scripts/api-feature-gates.sh "$name_b" ImageVolume=true
  node_b_started=true
  scripts/real-node.sh up "$name_b" "$offset_b" 0 "$images/pause-testbed.oci.tar" \
    "$images/flux-app-bookworm.oci.tar" "$images/flux-view-bookworm.oci.tar" "$hub_archive" >&2
  setup_s=$((SECONDS - t_phase))

  # The floor: the floor's Job in the burst cluster, before the spoke runs there (teardown
  # kills every container left on the node).
  use_cluster b
  run_kind burst-floor bench-burst-floor
  use_cluster a

  log "federation: flux-hub init in $name, join burst in $name_b ($hub_image)"
  ctr --address "$node_sock_a" -n k8s.io images import --no-unpack "$hub_archive" >/dev/null
  # init installs its own CRD (the one left by the phases before, flux-hub's or the
  # reference's, goes first; their controllers are stopped).
  ka delete "crd/$crd" --ignore-not-found --wait --timeout=120s >/dev/null || die "the CRD was not deleted within 120 s"
  root_ip=$(ka get nodes -l testbed/real-node=true \
    -o jsonpath='{.items[0].status.addresses[?(@.type=="InternalIP")].address}')
  [ -n "$root_ip" ] || die "$name's real node has no InternalIP"
  t=$(now)
  "$hub" init --kubeconfig "$state/kubeconfig-$name" --certs "$certs" --hub-ip "$root_ip" --image "$hub_image" \
    >"$out/logs/hub-init.log" 2>&1 || { tail -n 20 "$out/logs/hub-init.log" >&2; die "flux-hub init failed"; }
  init_s=$(minus "$(now)" "$t")
  hub_url=$(awk '{ for (i = 1; i < NF; i++) if ($i == "dial") { u = $(i + 1); sub(/;$/, "", u); print u; exit } }' \
    "$out/logs/hub-init.log")
  [ -n "$hub_url" ] || die "flux-hub init printed no endpoint (see $out/logs/hub-init.log)"
  t=$(now)
  # join creates the burst's namespace in the burst cluster (with the spoke's Role in it):
  # baseline, as the burst pods are not hardened.
  printf 'namespaces: [{name: %s, podSecurity: baseline}]\n' "$burst_ns" >"$certs/spoke-policy.yaml"
  "$hub" join burst --kubeconfig "$state/kubeconfig-$name_b" --certs "$certs" --hub "$hub_url" --image "$hub_image" \
    --policy "$certs/spoke-policy.yaml" \
    >"$out/logs/hub-join.log" 2>&1 || { tail -n 20 "$out/logs/hub-join.log" >&2; die "flux-hub join failed"; }
  join_s=$(minus "$(now)" "$t")
  # join's own admin certificate only reads: burst scale needs one that may scale.
  "$hub" certs --out "$certs" --admin bench >/dev/null
  admin=(--hub "$hub_url" --ca "$certs/ca.crt" --cert "$certs/admin-bench.crt" --key "$certs/admin-bench.key")
  log "hub at $hub_url (init ${init_s} s), spoke burst connected (join ${join_s} s)"

  for size in "${size_list[@]}"; do [ "$size" -gt "$max" ] && max=$size; done
  create_namespace "$burst_ns"
  burst_minicluster "$max" >"$work/burst.yaml"
  t=$(now)
  ka -n "$burst_ns" create -f "$work/burst.yaml" >/dev/null
  wait_up 2 "$timeout_s" "MiniCluster $burst_mc"
  root_up_s=$(minus "$(now)" "$t")
  log "$burst_mc: 2 root brokers up after ${root_up_s} s"

  log "burst: warm-up (size 2, direct and relayed)"
  measure_burst "$burst_name" 2 0
  measure_burst "$relay_name" 2 0
  for size in "${size_list[@]}"; do
    for run in $(seq "$runs"); do
      log "burst: size $size, run $run/$runs, direct then relayed"
      measure_burst "$burst_name" "$size" "$run"
      measure_burst "$relay_name" "$size" "$run"
    done
  done
  path_phase "$max"
  # The hub's, the spoke's and the root brokers' logs (not timed).
  for pod in $(ka -n flux-operator-system get pods -o name 2>/dev/null); do
    ka -n flux-operator-system logs "$pod" --timestamps >"$out/logs/hub-${pod#pod/}.log" 2>&1 || true
  done
  for pod in $(kb -n flux-spoke-system get pods -o name 2>/dev/null); do
    kb -n flux-spoke-system logs "$pod" --timestamps >"$out/logs/spoke-${pod#pod/}.log" 2>&1 || true
  done
  for pod in $(ka -n "$burst_ns" get pods -l "job-name=$burst_mc" -o name 2>/dev/null); do
    ka -n "$burst_ns" logs "$pod" -c "$burst_mc" --timestamps >"$out/logs/pod-${pod#pod/}.log" 2>&1 || true
  done
  printf '{"cluster":"%s","setup_s":%s,"image":"%s","archive":"%s","archive_mtime":"%s","hub_url":"%s","init_s":%s,"join_s":%s,"max_size":%s,"root_up_s":%s,"phase_s":%s}\n' \
    "$name_b" "$setup_s" "$hub_image" "$hub_archive" "$(date -u -r "$hub_archive" +%FT%TZ)" "$hub_url" \
    "$init_s" "$join_s" "$max" "$root_up_s" $((SECONDS - t_phase)) >"$work/burst.json"
}

load_before=$(loadavg)
t_start=$SECONDS
log "starting cluster $name (offset $offset) and its real node"
fresh "$name"
cluster_started=true
"$testbed/k8s/start.sh" "$name" "$offset" 0 >"$out/logs/start.log" 2>&1 ||
  { tail -n 20 "$out/logs/start.log" >&2; die "cluster $name did not start"; }
[ -z "$containerd" ] || scripts/api-feature-gates.sh "$name" ImageVolume=true
export KUBECONFIG=$state/kubeconfig-$name
node_started=true
scripts/real-node.sh up "$name" "$offset" 0 "$images/pause-testbed.oci.tar" \
  "$images/flux-app-bookworm.oci.tar" "$images/flux-view-bookworm.oci.tar" >&2
node_ready_s=$((SECONDS - t_start))

if [ "$only_burst" = false ]; then
  create_namespace bench-floor
  log "floor: warm-up (size 2)"
  measure floor bench-floor 2 0
  measure bare-floor bench-floor 2 0
  install_crd hub
  start_controller hub
  run_kind_with_floor hub bench-hub 0
  stop_controller hub
  if [ "$skip_reference" = false ]; then
    remove_crd
    install_crd reference
    start_controller reference
    run_kind_with_floor reference bench-ref "$runs"
    stop_controller reference
  fi
  delete_namespace bench-floor
fi
# Last and on its own: the in-cluster hub watches every namespace.
if [ "$skip_burst" = false ]; then
  burst_phase
fi
load_after=$(loadavg)
total_s=$((SECONDS - t_start))

python3 - "$out" "$work/controllers.jsonl" "$work/burst.json" "$work/paths.json" <<EOF
import json, os, statistics, sys
out, controllers, burst, paths = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
runs = [json.loads(l) for l in open(f"{out}/runs.jsonl")]
ctl = {c["controller"]: c for c in map(json.loads, open(controllers))}
meta = {"date": "$(date -u +%FT%TZ)", "cores": $(nproc), "profile": "$hub_label", "image_profile": "$profile",
        "hub_binary": "$hub", "source": "$source_rev" + (" + $dirty uncommitted file(s) under hub/ shared/ Cargo.*" if $dirty else ""),
        "sizes": [${sizes}], "runs": $runs, "load_before": "$load_before", "load_after": "$load_after",
        "setup_s": $node_ready_s, "total_s": $total_s, "controllers": ctl, "image": json.loads(r'''$image_json'''),
        "burst": json.load(open(burst)) if os.path.exists(burst) else None,
        "paths": json.load(open(paths)) if os.path.exists(paths) else None}
json.dump({"meta": meta, "runs": runs}, open(f"{out}/results.json", "w"), indent=1)

def stat(kind, size, key):
    v = [r[key] for r in runs if r["kind"] == kind and r["size"] == size and not r["warmup"]]
    if not v or any(x is None for x in v):
        return None, f"n/a ({sum(x is None for x in v)}/{len(v)} failed)" if v else "-"
    m = statistics.median(v)
    return m, f"{m:.2f} [{min(v):.2f}-{max(v):.2f}]"
def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else "-"

print(f"({meta['cores']} cores, flux-hub {meta['profile']}, {meta['date']}, load before/after {meta['load_before']} / {meta['load_after']})")
if any(r["kind"] in ("floor", "hub", "reference") for r in runs):
  print()
  print(f"Time to a working Flux instance on one real node, seconds, median [min-max] of {meta['runs']} run(s)")
  print()
  print("| size | floor: Job pods Ready | bare floor (no view): Job pods Ready | flux-hub: pods Ready | flux-hub: brokers up | hub - floor (target <= +1 s) | reference: pods Ready | reference: brokers up | hub / reference (target <= 0.7x) |")
  print("|---|---|---|---|---|---|---|---|---|")
  for size in meta["sizes"]:
    f, fs = stat("floor", size, "pods_ready_s")
    _, bs = stat("bare-floor", size, "pods_ready_s")
    _, hr = stat("hub", size, "pods_ready_s")
    h, hs = stat("hub", size, "flux_up_s")
    _, rr = stat("reference", size, "pods_ready_s")
    r, rs = stat("reference", size, "flux_up_s")
    over = f"{h - f:+.2f} s" if h is not None and f is not None else "-"
    print(f"| {size} | {fs} | {bs} | {hr} | {hs} | {over} | {rr} | {rs} | {ratio(h, r)} |")
b = meta["burst"]
if b:
  print()
  print(f"Burst: time to N burst brokers online in the root instance, seconds after \`flux-hub burst scale\` (floor: after \`kubectl create\`), median [min-max] of {meta['runs']} run(s)")
  print(f"(hub and spoke in-cluster, {b['image']}; init {b['init_s']:.1f} s, join {b['join_s']:.1f} s)")
  print()
  print("| N | floor (bench-real-b): Job pods Ready | burst pods created | burst pods Ready | brokers up in the root | up - floor (target <= +1.5 s) | relayed: brokers up | relayed - direct (target <= +0.5 s) |")
  print("|---|---|---|---|---|---|---|---|")
  for size in meta["sizes"]:
    f, fs = stat("burst-floor", size, "pods_ready_s")
    _, cs = stat("burst", size, "pods_seen_s")
    _, rs = stat("burst", size, "pods_ready_s")
    u, us = stat("burst", size, "flux_up_s")
    d = f"{u - f:+.2f} s" if u is not None and f is not None else "-"
    r, rus = stat("burst-relay", size, "flux_up_s")
    rd = f"{r - u:+.2f} s" if r is not None and u is not None else "-"
    print(f"| {size} | {fs} | {cs} | {rs} | {us} | {d} | {rus} | {rd} |")
p = meta["paths"]
if p:
  size = p["size"]
  print()
  print(f"Relayed against direct, both bursts at {size} brokers: from the lead to the burst's first rank, median [min-max] of {meta['runs']} run(s)")
  print()
  print("| path | round trip p50 (ms) | round trip p99 (ms) | jobs/s on the burst's rank (100 one-task jobs) | hub CPU meanwhile (ms) | relayed meanwhile (MiB) | hub CPU per relayed MiB (ms) |")
  print("|---|---|---|---|---|---|---|")
  for kind in ("direct", "relay"):
    _, p50 = stat(f"path-{kind}", size, "rtt_p50_ms")
    _, p99 = stat(f"path-{kind}", size, "rtt_p99_ms")
    _, jobs = stat(f"path-{kind}", size, "jobs_per_s")
    c, cpu = stat(f"path-{kind}", size, "hub_cpu_ms")
    m, mib = stat(f"path-{kind}", size, "relayed_mib")
    per = f"{c / m:.0f}" if c is not None and m else "-"
    print(f"| {kind} | {p50} | {p99} | {jobs} | {cpu} | {mib} | {per} |")
  d50, _ = stat("path-direct", size, "rtt_p50_ms")
  r50, _ = stat("path-relay", size, "rtt_p50_ms")
  dj, _ = stat("path-direct", size, "jobs_per_s")
  rj, _ = stat("path-relay", size, "jobs_per_s")
  if None not in (d50, r50, dj, rj):
    print()
    print(f"relayed - direct: p50 {r50 - d50:+.3f} ms (target <= +1 ms); jobs/s {rj / dj:.2f}x (target >= 0.8x); "
          f"hub RSS {p['hub_rss_idle_kib'] / 1024:.1f} MiB with both bursts at 0, {p['hub_rss_loaded_kib'] / 1024:.1f} MiB "
          f"with {p['relayed_connections']} relayed connections (RSS moves by pages and arenas: "
          "e2e/benches/relay.rs counts the heap per connection)")
if ctl:
    print()
    print("| controller | peak RSS (VmHWM) | RSS at the end |")
    print("|---|---|---|")
    for k, c in ctl.items():
        print(f"| {k} | {c['vmhwm_kib'] / 1024:.1f} MiB | {c['vmrss_kib'] / 1024:.1f} MiB |")
img = meta["image"]
if img:
    print()
    print(f"controller image {img['archive']} ({meta['image_profile']} binaries): "
          f"{img['uncompressed'] / 2**20:.1f} MiB uncompressed, {img['gzip'] / 2**20:.1f} MiB gzip -6 "
          f"({len(img['layers'])} layers: " + ", ".join(f"{l['uncompressed'] / 2**20:.1f}/{l['gzip'] / 2**20:.1f}" for l in img["layers"]) + " MiB)")
EOF
if [ "$only_burst" = false ]; then
  echo
  python3 scripts/bench_timeline.py "$out"
fi
log "done in ${total_s} s (after the builds; cluster and node up after ${node_ready_s} s)"
