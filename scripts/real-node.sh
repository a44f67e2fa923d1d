#!/usr/bin/env bash
# Real nodes for a testbed control plane (../shared/testbed/k8s/start.sh NAME OFFSET 0):
# containerd + kubelet + kube-proxy (iptables: cluster IPs, NodePorts) in a network
# namespace of their own, pods on a CNI bridge under a cgroup of the node's own, cluster
# DNS (dnsmasq, fed from the API's Services and EndpointSlices), images loaded without any
# registry. Several clusters side by side (one OFFSET each) reach each other's nodes, so
# NodePorts carry traffic between clusters. Root only; needs the testbed's `install
# --real-nodes`.
#
#   scripts/real-node.sh up NAME OFFSET INDEX IMAGE.oci.tar...   start node NAME-real-INDEX
#   scripts/real-node.sh down NAME OFFSET INDEX                  stop it (and, for the last
#                                                                node of NAME, the DNS)
#   scripts/real-node.sh lose NAME OFFSET INDEX                  kill every process of the
#                                                                node at once (a crash: its
#                                                                kubelet, containerd, pods);
#                                                                `down` cleans up after
#   scripts/real-node.sh isolate NAME OFFSET INDEX PEER PORT     the node and its pods reach
#                                                                cluster PEER's nodes and pods
#                                                                only on TCP port PORT
#   scripts/real-node.sh unisolate NAME OFFSET INDEX             undo isolate
#
# Addresses: the cluster's bridge rnbrOFFSET on the host is 10.251.OFFSET.1/24 (the API
# server, forwarded from 127.0.0.1, and the DNS server listen there); node INDEX is
# 10.251.OFFSET.(10+INDEX) in netns rnOFFSET-INDEX; its pods 10.(160+INDEX).OFFSET.0/24.
# The testbed's API server listens on 127.0.0.1 only, which a node's own namespace cannot
# reach: a socat forwarder on the bridge address carries it (TLS is end to end, the
# kubeconfig names the certificate's 127.0.0.1).
#
# Environment: REAL_NODE_CONTAINERD_DIR, a directory with another containerd (containerd,
# containerd-shim-runc-v2, ctr: e.g. Debian's containerd 2.1 package unpacked) to run
# instead of the one on PATH; REAL_NODE_FEATURE_GATES, the kubelet's feature gates
# (`Name=true,...`).
set -euo pipefail

testbed=${FLUX_E2E_TESTBED:-$(cd "$(dirname "$0")/../.." && pwd)/shared/testbed}
k8s=/opt/testbed/k8s
state_root=/opt/testbed/real-nodes

usage() { sed -n '2,32p' "$0" >&2; exit 2; }
if [ -n "${REAL_NODE_CONTAINERD_DIR:-}" ]; then
  [ -x "$REAL_NODE_CONTAINERD_DIR/containerd" ] || { echo "real-node: no containerd in $REAL_NODE_CONTAINERD_DIR" >&2; exit 2; }
  PATH=$REAL_NODE_CONTAINERD_DIR:$PATH
fi
[ $# -ge 4 ] || usage
cmd=$1 name=$2 offset=$3 index=$4
shift 4
api_port=$((6443 + offset))
node=$name-real-$index
netns=rn$offset-$index
bridge=rnbr$offset
host_ip=10.251.$offset.1
node_ip=10.251.$offset.$((10 + index))
pod_subnet=10.$((160 + index)).$offset.0/24
state=$state_root/$node
cluster_state=$state_root/$name

stop_pid() { # pidfile
  [ -f "$1" ] || return 0
  local pid; pid=$(cat "$1")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$1"
}

# One SIGKILL for every process of the node, as a crash would: its daemons, containerd's
# shims and every process in the node's cgroups (its pods). Their sockets close with them;
# nothing gets to stop in order, which is what a lost cluster looks like to the hub.
lose() {
  local pids=() file hierarchy
  for file in kube-proxy kubelet containerd; do
    [ -f "$state/$file.pid" ] && pids+=("$(cat "$state/$file.pid")")
  done
  mapfile -t -O "${#pids[@]}" pids < <(pgrep -f "containerd-shim-runc-v2 .*-address $state/containerd.sock" || true)
  for hierarchy in /sys/fs/cgroup/*/; do
    [ -d "$hierarchy$netns" ] || continue
    mapfile -t -O "${#pids[@]}" pids < <(find "$hierarchy$netns" -name tasks -exec cat {} + 2>/dev/null || true)
  done
  [ "${#pids[@]}" -gt 0 ] || return 0
  mapfile -t pids < <(printf '%s\n' "${pids[@]}" | sort -un)
  kill -9 "${pids[@]}" 2>/dev/null || true
}

down() {
  stop_pid "$state/kube-proxy.pid"
  stop_pid "$state/kubelet.pid"
  # Pod sandboxes and containers go with containerd's shims.
  if [ -S "$state/containerd.sock" ]; then
    for id in $(ctr --address "$state/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr --address "$state/containerd.sock" -n k8s.io tasks kill -s KILL "$id" >/dev/null 2>&1 || true
    done
  fi
  stop_pid "$state/containerd.pid"
  pkill -9 -f "containerd-shim-runc-v2 .*-address $state/containerd.sock" 2>/dev/null || true
  # Mounts under the node's state (pod volumes, snapshots) before its folder goes.
  grep " $state/" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  # The node's cgroups, deepest first, once their processes are gone.
  for hierarchy in /sys/fs/cgroup/*/; do
    [ -d "$hierarchy$netns" ] && find "$hierarchy$netns" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  ip netns del "$netns" 2>/dev/null || true
  ip link del "v$netns" 2>/dev/null || true
  # Pod network namespaces (cni-*) left by sandboxes that died with containerd.
  for pod_netns in $(ip netns list | awk '/^cni-/ {print $1}'); do
    [ -z "$(ip netns pids "$pod_netns" 2>/dev/null)" ] && ip netns del "$pod_netns" 2>/dev/null || true
  done
  ip route del "$pod_subnet" 2>/dev/null || true
  flock /run/real-node-hosts.lock sed -i "/ $node # real-node\$/d" /etc/hosts
  rm -rf "$state"
  if ! ls -d "$state_root/$name"-real-* >/dev/null 2>&1; then
    stop_pid "$cluster_state/scheduler.pid"
    stop_pid "$cluster_state/dns-feed.pid"
    stop_pid "$cluster_state/dnsmasq.pid"
    stop_pid "$cluster_state/api-forward.pid"
    ip link del "$bridge" 2>/dev/null || true
    rm -rf "$cluster_state"
  fi
}

up() {
  [ "$(id -u)" = 0 ] || { echo "real-node: needs root" >&2; exit 1; }
  for tool in containerd ctr runc socat dnsmasq ip iptables; do
    command -v "$tool" >/dev/null || { echo "real-node: $tool missing (testbed install --real-nodes)" >&2; exit 1; }
  done
  local kubeconfig=$k8s/kubeconfig-$name
  [ -f "$kubeconfig" ] || { echo "real-node: no cluster $name ($kubeconfig)" >&2; exit 1; }
  down 2>/dev/null || true
  mkdir -p "$state/net.d" "$cluster_state"
  sysctl -qw net.ipv4.ip_forward=1

  # The cluster's bridge, the API server on it, and the DNS server.
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
    ip addr add "$host_ip/24" dev "$bridge"
    ip link set "$bridge" up
  fi
  if [ ! -f "$cluster_state/api-forward.pid" ]; then
    socat "TCP-LISTEN:$api_port,bind=$host_ip,fork,reuseaddr" "TCP:127.0.0.1:$api_port" \
      >"$cluster_state/api-forward.log" 2>&1 &
    echo $! >"$cluster_state/api-forward.pid"
  fi
  # `start.sh NAME OFFSET 0` starts no scheduler (its hollow nodes come with one).
  if [ ! -f "$cluster_state/scheduler.pid" ] && ! pgrep -f "kube-scheduler.*--secure-port=$((24090 + offset))" >/dev/null; then
    "$k8s/bin/kube-scheduler" --kubeconfig "$kubeconfig" --authentication-kubeconfig "$kubeconfig" \
      --authorization-kubeconfig "$kubeconfig" --leader-elect=false \
      --bind-address=127.0.0.1 --secure-port=$((24090 + offset)) >"$cluster_state/scheduler.log" 2>&1 &
    echo $! >"$cluster_state/scheduler.pid"
  fi
  # A kubeconfig for the node: the API server on the bridge, its certificate's 127.0.0.1.
  sed -e "s#server: https://127.0.0.1:$api_port#server: https://$host_ip:$api_port\n    tls-server-name: 127.0.0.1#" \
    "$kubeconfig" >"$cluster_state/node.kubeconfig"
  if [ ! -f "$cluster_state/dnsmasq.pid" ]; then
    : >"$cluster_state/hosts"
    dnsmasq --keep-in-foreground --no-resolv --no-hosts --bind-interfaces \
      --listen-address="$host_ip" --addn-hosts="$cluster_state/hosts" --local=/cluster.local/ \
      --log-facility="$cluster_state/dnsmasq.log" &
    echo $! >"$cluster_state/dnsmasq.pid"
    KUBECONFIG=$kubeconfig "$(dirname "$0")/real-node-dns.sh" "$cluster_state/hosts" "$cluster_state/dnsmasq.pid" \
      >"$cluster_state/dns-feed.log" 2>&1 &
    echo $! >"$cluster_state/dns-feed.pid"
  fi

  # The node's namespace: its address on the bridge, the host as its gateway.
  ip netns add "$netns"
  ip link add "v$netns" type veth peer name eth0 netns "$netns"
  ip link set "v$netns" master "$bridge" up
  ip -n "$netns" addr add "$node_ip/24" dev eth0
  ip -n "$netns" link set eth0 up
  ip -n "$netns" link set lo up
  ip -n "$netns" route add default via "$host_ip"
  ip netns exec "$netns" sysctl -qw net.ipv4.ip_forward=1
  ip route replace "$pod_subnet" via "$node_ip"
  # The API server reaches a kubelet (logs, exec) by the Node's host name first.
  # Nodes of other clusters may come up at the same time: one edit of /etc/hosts at a time.
  # shellcheck disable=SC2016 # $1, $2: the inner shell's arguments
  flock /run/real-node-hosts.lock sh -c 'sed -i "/ $1 # real-node\$/d" /etc/hosts && echo "$2 $1 # real-node" >>/etc/hosts' \
    hosts "$node" "$node_ip"
  echo "nameserver $host_ip" >"$state/resolv.conf"

  cat >"$state/net.d/10-bridge.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "real-node", "plugins": [
 {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
  "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_subnet"}]], "routes": [{"dst": "0.0.0.0/0"}],
           "dataDir": "$state/cni-ipam"}},
 {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
  cat >"$state/containerd.toml" <<EOF
version = 2
root = "$state/containerd-root"
state = "$state/containerd-state"
[grpc]
  address = "$state/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:testbed"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$state/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      BinaryName = "$testbed/k8s/runc-wrapper"
      SystemdCgroup = false
EOF
  # nsenter --net, not `ip netns exec`: that one also remounts /sys, which hides the
  # cgroup mounts kubelet and runc need.
  nsenter --net="/run/netns/$netns" containerd --config "$state/containerd.toml" >"$state/containerd.log" 2>&1 &
  echo $! >"$state/containerd.pid"
  for _ in $(seq 100); do
    ctr --address "$state/containerd.sock" version >/dev/null 2>&1 && break
    sleep 0.1
  done
  for image in "$@"; do
    ctr --address "$state/containerd.sock" -n k8s.io images import --no-unpack "$image" >/dev/null
  done

  cat >"$state/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$state/containerd.sock
address: $node_ip
port: 10250
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
clusterDomain: cluster.local
clusterDNS: ["$host_ip"]
resolvConf: $state/resolv.conf
failSwapOn: false
evictionHard: {memory.available: "100Mi", nodefs.available: "200Mi", imagefs.available: "200Mi"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
enforceNodeAllocatable: []
cgroupRoot: /$netns
podLogsDir: $state/pod-logs
EOF
  local gate
  if [ -n "${REAL_NODE_FEATURE_GATES:-}" ]; then
    echo "featureGates:" >>"$state/kubelet.yaml"
    for gate in ${REAL_NODE_FEATURE_GATES//,/ }; do
      echo "  ${gate%%=*}: ${gate#*=}" >>"$state/kubelet.yaml"
    done
  fi
  # The nodes share the machine's disk with the build: a percentage of a large disk (1 %
  # of 250 GB) is gigabytes a build may use up for a moment, which would evict the test's
  # pods and refuse new ones (DiskPressure). Only a nearly full disk counts.
  # Kubelets sharing the host each keep their pods under a cgroup of their own, and their
  # logs in a folder of their own: under one /kubepods or /var/log/pods each would remove
  # the others' as orphans.
  for hierarchy in /sys/fs/cgroup/*/; do
    mkdir -p "$hierarchy$netns"
    if [ -f "${hierarchy}cpuset.cpus" ]; then
      cat "${hierarchy}cpuset.cpus" >"$hierarchy$netns/cpuset.cpus"
      cat "${hierarchy}cpuset.mems" >"$hierarchy$netns/cpuset.mems"
    fi
  done
  nsenter --net="/run/netns/$netns" "$k8s/bin/kubelet" --config "$state/kubelet.yaml" \
    --kubeconfig "$cluster_state/node.kubeconfig" --hostname-override "$node" --node-ip "$node_ip" \
    --root-dir "$state/kubelet" --cert-dir "$state/pki" \
    --node-labels "testbed/cluster=$name,testbed/real-node=true" >"$state/kubelet.log" 2>&1 &
  echo $! >"$state/kubelet.pid"
  # kube-proxy (iptables): Services' cluster IPs and NodePorts on this node. conntrack
  # limits stay the host's (a network namespace cannot set them); NodePorts on the node's
  # own address.
  cat >"$state/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $cluster_state/node.kubeconfig}
mode: iptables
hostnameOverride: $node
bindAddress: $node_ip
healthzBindAddress: $node_ip:10256
metricsBindAddress: $node_ip:10249
clusterCIDR: 10.160.0.0/11
nodePortAddresses: ["$node_ip/32"]
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  nsenter --net="/run/netns/$netns" "$k8s/bin/kube-proxy" --config "$state/kube-proxy.yaml" \
    >"$state/kube-proxy.log" 2>&1 &
  echo $! >"$state/kube-proxy.pid"
  # The `kubernetes` Service's endpoint is the API server's 127.0.0.1, which no pod can
  # reach: in-cluster clients (the hub, a spoke) are sent to its forwarder on the bridge,
  # ahead of kube-proxy's rules (which it does not reorder once they exist).
  for _ in $(seq 100); do
    ip netns exec "$netns" iptables -t nat -S PREROUTING 2>/dev/null | grep -q KUBE-SERVICES && break
    sleep 0.1
  done
  for chain in PREROUTING OUTPUT; do
    ip netns exec "$netns" iptables -t nat -I "$chain" 1 -d "${SERVICE_IP:-10.96.0.1}/32" -p tcp --dport 443 \
      -j DNAT --to-destination "$host_ip:$api_port"
  done

  for _ in $(seq 120); do
    if KUBECONFIG=$kubeconfig "$k8s/bin/kubectl" get node "$node" \
      -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -q True; then
      echo "real-node: $node Ready at $node_ip (pods $pod_subnet, DNS $host_ip)"
      return 0
    fi
    sleep 0.5
  done
  echo "real-node: $node not Ready after 60 s; last kubelet lines:" >&2
  tail -n 20 "$state/kubelet.log" >&2
  exit 1
}

# A packet filter in the node's namespace (its own connections and its pods', which it
# forwards): to cluster PEER's addresses (nodes 10.251.PEER.0/24, pods 10.16x.PEER.0/24)
# only new TCP connections to PORT, and the answers of connections already open, pass.
isolation=FLUX_E2E_ISOLATE
unisolate() {
  for hook in OUTPUT FORWARD; do
    while ip netns exec "$netns" iptables -w -D "$hook" -j "$isolation" 2>/dev/null; do :; done
  done
  ip netns exec "$netns" iptables -w -F "$isolation" 2>/dev/null || true
  ip netns exec "$netns" iptables -w -X "$isolation" 2>/dev/null || true
}
isolate() { # PEER PORT
  [ $# -eq 2 ] || usage
  local peer=$1 port=$2
  unisolate
  ip netns exec "$netns" iptables -w -N "$isolation"
  ip netns exec "$netns" iptables -w -A "$isolation" -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
  for net in "10.251.$peer.0/24" "10.160.$peer.0/24" "10.161.$peer.0/24" "10.162.$peer.0/24" "10.163.$peer.0/24"; do
    ip netns exec "$netns" iptables -w -A "$isolation" -d "$net" -p tcp --dport "$port" -j RETURN
    ip netns exec "$netns" iptables -w -A "$isolation" -d "$net" -j REJECT
  done
  for hook in OUTPUT FORWARD; do
    ip netns exec "$netns" iptables -w -I "$hook" 1 -j "$isolation"
  done
}

case $cmd in
  up) up "$@" ;;
  down) down ;;
  lose) lose ;;
  isolate) isolate "$@" ;;
  unisolate) unisolate ;;
  *) usage ;;
esac
