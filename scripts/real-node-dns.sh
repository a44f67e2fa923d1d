#!/usr/bin/env bash
# Cluster DNS records for real nodes (scripts/real-node.sh): every second, the Services and
# EndpointSlices of the cluster of $KUBECONFIG as a hosts file for dnsmasq (--addn-hosts),
# which is told to reload it (SIGHUP) when it changed:
#   <clusterIP>  <svc>.<ns>.svc.cluster.local            (Services with a cluster IP)
#   <pod IP>     <svc>.<ns>.svc.cluster.local            (headless Services: every endpoint)
#   <pod IP>     <hostname>.<svc>.<ns>.svc.cluster.local (endpoints with a hostname: Indexed
#                                                         Job pods under their subdomain)
# Endpoints that are not ready are left out, as CoreDNS leaves them out.
#
#   scripts/real-node-dns.sh HOSTS DNSMASQ_PIDFILE
set -euo pipefail
hosts=$1 pidfile=$2
kubectl=${KUBECTL:-/opt/testbed/k8s/bin/kubectl}
previous=""
while true; do
  current=$("$kubectl" get services,endpointslices --all-namespaces -o json 2>/dev/null | python3 -c '
import json, sys
services, slices, lines = {}, [], set()
for o in json.load(sys.stdin)["items"]:
    if o["kind"] == "Service":
        services[(o["metadata"]["namespace"], o["metadata"]["name"])] = o["spec"].get("clusterIP")
    else:
        slices.append(o)
for (ns, name), ip in services.items():
    if ip and ip != "None":
        lines.add(f"{ip} {name}.{ns}.svc.cluster.local")
for s in slices:
    ns = s["metadata"]["namespace"]
    svc = s["metadata"].get("labels", {}).get("kubernetes.io/service-name")
    if not svc or (ns, svc) not in services:
        continue
    headless = services[(ns, svc)] in (None, "None")
    for e in s.get("endpoints") or []:
        # As CoreDNS: only ready endpoints (a Service with publishNotReadyAddresses has
        # every endpoint marked ready by the EndpointSlice controller).
        if (e.get("conditions") or {}).get("ready") is False:
            continue
        host = e.get("hostname")
        for addr in e.get("addresses") or []:
            if host:
                lines.add(f"{addr} {host}.{svc}.{ns}.svc.cluster.local")
            if headless:
                lines.add(f"{addr} {svc}.{ns}.svc.cluster.local")
print("\n".join(sorted(lines)))
') || { sleep 1; continue; }
  if [ "$current" != "$previous" ]; then
    printf '%s\n' "$current" >"$hosts.new" && mv "$hosts.new" "$hosts"
    kill -HUP "$(cat "$pidfile")" 2>/dev/null || true
    previous=$current
  fi
  sleep 1
done
