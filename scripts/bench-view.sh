#!/usr/bin/env bash
# How a pod gets the Flux view, measured on a real node (scripts/real-node.sh: kubelet +
# containerd + runc) of a testbed control plane. Bare Indexed Jobs of SIZE pods, the
# variants one after the other in every run; the clock runs from `kubectl create` until the
# last pod's application container has a working view (`flux --version` run through it),
# read from the runtime's timestamp of the line it then prints:
#
#   copy      the reference operator's pod (flux.container.initContainer): an init
#             container of the view image copies the view and /opt/software into
#             emptyDirs, then the application container copies the software back to
#             /opt/software
#   partial   the same, copying only what a broker runs: the view's bin, lib and libexec
#             (not include or share)
#   alongside flux-hub's pod: no init container (one kubelet pass); the view image's
#             container, first in the pod, copies the view, and /opt/software straight
#             into the application container's /opt/software volume, while the
#             application container starts and waits for it (then it sleeps)
#   sidecar   the same copy in a native sidecar (an init container with `restartPolicy:
#             Always`, Kubernetes 1.29 and later), which the kubelet starts before the
#             application container
#   in-place  no copy at all: the view image's container sleeps beside the application
#             container (shareProcessNamespace), which links /mnt/flux/view and each entry
#             of /opt/software to its files through /proc/PID/root of its process. Enough
#             for `flux --version`, not for a broker: Flux canonicalizes its module paths
#             (realpath), which leaves the other container's root
#   image-volume  no copy and no view container: the view image is an image volume of the
#             pod (Kubernetes' ImageVolume, containerd 2.1+), the application container
#             links /mnt/flux/view and each entry of /opt/software to its files. Only with
#             --containerd DIR (the node runs that containerd, the kubelet and the API server
#             the ImageVolume feature gate)
#   none      the floor without any view: the application container alone, which prints
#             at once
#
#   scripts/bench-view.sh [--sizes 2,4,8] [--runs 3] [--out DIR] [--variants a,b,...]
#                         [--containerd DIR]
#
# Cluster bench-view (port offset 72) with one real node, created fresh and torn down on
# exit. Needs root, the testbed's `install --real-nodes` and the images in target/images
# (flux-images pause/app/view). Output: a markdown table of medians [min-max] on stdout,
# every run in DIR/runs.jsonl (DIR: target/bench-view).
set -euo pipefail
cd "$(dirname "$0")/.."

sizes=2,4,8 runs=3 containerd=
variants=(copy partial alongside sidecar in-place none)
target_dir=${CARGO_TARGET_DIR:-target}
out=$target_dir/bench-view
while [ $# -gt 0 ]; do
  case $1 in
    --sizes) sizes=${2:?--sizes needs a value}; shift 2 ;;
    --runs) runs=${2:?--runs needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    --variants) IFS=, read -r -a variants <<<"${2:?--variants needs a value}"; shift 2 ;;
    --containerd) containerd=${2:?--containerd needs a value}; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-view: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
IFS=, read -r -a size_list <<<"$sizes"
if [ -z "$containerd" ] && [[ " ${variants[*]} " == *" image-volume "* ]]; then
  echo "bench-view: the image-volume variant needs --containerd DIR (containerd 2.1+)" >&2; exit 2
fi
for v in "${size_list[@]}" "$runs"; do
  [[ $v =~ ^[0-9]+$ ]] && [ "$v" -ge 1 ] || { echo "bench-view: not a positive number: $v" >&2; exit 2; }
done

testbed=${FLUX_BENCH_TESTBED:-$(cd .. && pwd)/shared/testbed}
state=/opt/testbed/k8s
kubectl=$state/bin/kubectl
name=bench-view offset=72
images=$target_dir/images
app_image=localhost/flux-app-debian:bookworm
view_image=localhost/flux-view-debian:bookworm

log() { printf '[bench-view %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "the testbed needs root"
[ -x "$testbed/k8s/start.sh" ] || die "no testbed at $testbed (set FLUX_BENCH_TESTBED)"
for f in pause-testbed flux-app-bookworm flux-view-bookworm; do
  [ -f "$images/$f.oci.tar" ] || die "no $images/$f.oci.tar (cargo run -p flux-e2e --bin flux-images -- --help)"
done

fresh() {
  "$testbed/k8s/stop.sh" "$name" >/dev/null 2>&1 || true
  rm -rf "$state/data/$name" "$state/data/etcd-$name" "$state/kubeconfig-$name"
}
cleanup() {
  scripts/real-node.sh down "$name" "$offset" 0 >/dev/null 2>&1 || true
  fresh
}
trap cleanup EXIT

mkdir -p "$out"
: >"$out/runs.jsonl"
fresh
"$testbed/k8s/start.sh" "$name" "$offset" 0 >/dev/null
if [ -n "$containerd" ]; then
  export REAL_NODE_CONTAINERD_DIR=$containerd REAL_NODE_FEATURE_GATES=ImageVolume=true
  scripts/api-feature-gates.sh "$name" ImageVolume=true
fi
scripts/real-node.sh up "$name" "$offset" 0 "$images/pause-testbed.oci.tar" \
  "$images/flux-app-bookworm.oci.tar" "$images/flux-view-bookworm.oci.tar" >/dev/null
export KUBECONFIG=$state/kubeconfig-$name
"$kubectl" create namespace bench >/dev/null
until "$kubectl" -n bench get serviceaccount default >/dev/null 2>&1; do sleep 0.2; done

# The application container's last step in every variant: the view works, then it says so.
ready='LD_LIBRARY_PATH=/mnt/flux/view/lib /mnt/flux/view/bin/flux --version >/dev/null && echo VIEW READY; exec sleep infinity'

job() { # VARIANT NAME SIZE
  local init='' main='' share=false app volume='' mounts=''
  # Texts of commands run in the pod (expanded there, not here).
  # shellcheck disable=SC2016
  local find='views=(/opt/views/._view/*/)'
  case $1 in
    copy | partial)
      # shellcheck disable=SC2016
      local what='cp -a "${views[0]}." /mnt/flux/view/'
      if [ "$1" = partial ]; then
        # shellcheck disable=SC2016
        what='for d in bin lib libexec; do [ ! -e "${views[0]}$d" ] || cp -a "${views[0]}$d" /mnt/flux/view/; done'
      fi
      init="      initContainers:
      - name: view
        image: $view_image
        imagePullPolicy: IfNotPresent
        command: [/bin/bash, -c, 'set -e; $find; mkdir -p /mnt/flux/view /mnt/flux/software; $what; cp -a /opt/software/. /mnt/flux/software/']
        volumeMounts: [{name: flux, mountPath: /mnt/flux}]"
      app="cp -a /mnt/flux/software/. /opt/software/ && $ready"
      ;;
    alongside | sidecar)
      # The copy (the tree's entries straight into the software volume), its marker, then
      # sleep; the application container waits for the marker.
      # shellcheck disable=SC2016
      local copy='set -e; shopt -s nullglob dotglob; '"$find"'; tree=(/opt/software/*); mkdir -p /mnt/flux/view; cp -a "${views[0]}." /mnt/flux/view/; [ ${#tree[@]} -eq 0 ] || cp -a "${tree[@]}" /mnt/flux/software/; touch /mnt/flux/copied; exec sleep infinity'
      local container="      - name: view
        image: $view_image
        imagePullPolicy: IfNotPresent
        command: [/bin/bash, -c, '$copy']
        volumeMounts: [{name: flux, mountPath: /mnt/flux}, {name: software, mountPath: /mnt/flux/software}]"
      if [ "$1" = sidecar ]; then
        init="      initContainers:
$container
        restartPolicy: Always"
      else
        main=$container
      fi
      app="until [ -e /mnt/flux/copied ]; do sleep 0.05; done; $ready"
      ;;
    in-place)
      share=true
      # `$$$$`: Kubernetes reads `$$` in a command as an escaped `$`.
      main="      - name: view
        image: $view_image
        imagePullPolicy: IfNotPresent
        command: [/bin/sh, -c, 'echo \$\$\$\$ >/mnt/flux/view.pid && exec sleep infinity']
        volumeMounts: [{name: flux, mountPath: /mnt/flux}]"
      # The view container's process is found by the PID it wrote; the application
      # container reaches its files through /proc/PID/root (same user, no capabilities
      # beyond its own: what the kernel asks of a reader of another process's root).
      app="for _ in \$(seq 200); do [ -s /mnt/flux/view.pid ] && break; sleep 0.05; done;"
      app+=" root=/proc/\$(cat /mnt/flux/view.pid)/root; views=(\"\$root\"/opt/views/._view/*/);"
      app+=" ln -s \"\${views[0]%/}\" /mnt/flux/view;"
      app+=" for d in \"\$root\"/opt/software/*; do ln -s \"\$d\" /opt/software/; done; $ready"
      ;;
    image-volume)
      volume="      - {name: view-image, image: {reference: \"$view_image\", pullPolicy: IfNotPresent}}"
      mounts=", {name: view-image, mountPath: /mnt/view-image, readOnly: true}"
      app="views=(/mnt/view-image/opt/views/._view/*/); ln -s \"\${views[0]%/}\" /mnt/flux/view;"
      app+=" for d in /mnt/view-image/opt/software/*; do [ ! -e \"\$d\" ] || ln -s \"\$d\" /opt/software/; done; $ready"
      ;;
    none) app="echo VIEW READY; exec sleep infinity" ;;
  esac
  cat <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: $2}
spec:
  completionMode: Indexed
  completions: $3
  parallelism: $3
  template:
    spec:
      restartPolicy: Never
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 1
      shareProcessNamespace: $share
$init
      containers:
EOF
  [ -z "$main" ] || printf '%s\n' "$main"
  cat <<EOF
      - name: app
        image: $app_image
        imagePullPolicy: IfNotPresent
        command:
        - /bin/bash
        - -c
        - |
          $app
        volumeMounts: [{name: flux, mountPath: /mnt/flux}, {name: software, mountPath: /opt/software}$mounts]
      volumes:
      - {name: flux, emptyDir: {}}
      - {name: software, emptyDir: {}}
EOF
  [ -z "$volume" ] || printf '%s\n' "$volume"
}

measure() { # VARIANT SIZE RUN: prints the seconds, or fails
  local variant=$1 size=$2 run=$3 jobname t0 deadline stamps n last
  jobname=$variant-$size-$run
  job "$variant" "$jobname" "$size" >"$out/$jobname.yaml"
  t0=$EPOCHREALTIME
  "$kubectl" -n bench create -f "$out/$jobname.yaml" >/dev/null
  deadline=$((${t0%.*} + 180))
  while :; do
    # Once every application container runs, its log says when it had the view.
    stamps=$("$kubectl" -n bench logs -l "job-name=$jobname" -c app --timestamps --tail=-1 2>/dev/null |
      awk '$2 == "VIEW" {print $1}') || stamps=
    n=$(printf '%s\n' "$stamps" | grep -c . || true)
    [ "$n" -ge "$size" ] && break
    if [ "${EPOCHREALTIME%.*}" -ge "$deadline" ]; then
      "$kubectl" -n bench logs -l "job-name=$jobname" --all-containers --prefix --tail=20 >&2 || true
      die "$jobname: $n of $size pods with the view after 180 s"
    fi
    sleep 1
  done
  last=$(printf '%s\n' "$stamps" | sort | tail -n 1)
  "$kubectl" -n bench delete job "$jobname" --cascade=foreground --wait=true >/dev/null
  awk -v a="$(date -d "$last" +%s.%N)" -v b="$t0" 'BEGIN { printf "%.2f", a - b }'
}

# A warm-up of each variant first (images unpacked, caches warm), not counted.
for variant in "${variants[@]}"; do measure "$variant" 2 0 >/dev/null; done
for size in "${size_list[@]}"; do
  for run in $(seq "$runs"); do
    for variant in "${variants[@]}"; do
      s=$(measure "$variant" "$size" "$run")
      log "$variant size $size run $run: ${s}s"
      printf '{"variant":"%s","size":%s,"run":%s,"seconds":%s}\n' "$variant" "$size" "$run" "$s" >>"$out/runs.jsonl"
    done
  done
done

echo "| size | $(printf '%s | ' "${variants[@]}")"
echo "|---|$(printf -- '---|%.0s' "${variants[@]}")"
for size in "${size_list[@]}"; do
  row="| $size |"
  for variant in "${variants[@]}"; do
    row+=" $(grep "\"variant\":\"$variant\",\"size\":$size," "$out/runs.jsonl" |
      sed 's/.*"seconds":\([0-9.]*\).*/\1/' | sort -n |
      awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
                                printf "%.2f [%.2f-%.2f]", m, v[1], v[NR] }') |"
  done
  echo "$row"
done
