#!/usr/bin/env bash
# Cluster DNS records for real nodes (scripts/real-node.sh): the Services and EndpointSlices
# of the cluster of $KUBECONFIG, watched (`kubectl get --watch`), as a hosts file for
# dnsmasq (--addn-hosts), which is told to reload it (SIGHUP) whenever it changes:
#   <clusterIP>  <svc>.<ns>.svc.cluster.local            (Services with a cluster IP)
#   <pod IP>     <svc>.<ns>.svc.cluster.local            (headless Services: every endpoint)
#   <pod IP>     <hostname>.<svc>.<ns>.svc.cluster.local (endpoints with a hostname: Indexed
#                                                         Job pods under their subdomain)
# Endpoints that are not ready are left out, as CoreDNS leaves them out. A watch that ends
# (the API server restarted, say) is started again after a second.
#
#   scripts/real-node-dns.sh HOSTS DNSMASQ_PIDFILE
set -euo pipefail
[ $# -eq 2 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
export HOSTS=$1 PIDFILE=$2 KUBECTL=${KUBECTL:-/opt/testbed/k8s/bin/kubectl}
exec python3 -u - <<'EOF'
import ctypes, json, os, signal, subprocess, threading, time

hosts, pidfile, kubectl = os.environ["HOSTS"], os.environ["PIDFILE"], os.environ["KUBECTL"]
lock = threading.Lock()
services, slices = {}, {}  # (ns, name) -> cluster IP; (ns, name) -> slice
written = None


def render():
    lines = set()
    for (ns, name), ip in services.items():
        if ip and ip != "None":
            lines.add(f"{ip} {name}.{ns}.svc.cluster.local")
    for (ns, _), s in slices.items():
        svc = (s["metadata"].get("labels") or {}).get("kubernetes.io/service-name")
        if not svc or (ns, svc) not in services:
            continue
        headless = services[(ns, svc)] in (None, "None")
        for e in s.get("endpoints") or []:
            if (e.get("conditions") or {}).get("ready") is False:
                continue
            host = e.get("hostname")
            for addr in e.get("addresses") or []:
                if host:
                    lines.add(f"{addr} {host}.{svc}.{ns}.svc.cluster.local")
                if headless:
                    lines.add(f"{addr} {svc}.{ns}.svc.cluster.local")
    return "\n".join(sorted(lines)) + "\n"


def publish():
    global written
    text = render()
    if text == written:
        return
    with open(hosts + ".new", "w") as f:
        f.write(text)
    os.replace(hosts + ".new", hosts)
    written = text
    try:
        with open(pidfile) as f:
            os.kill(int(f.read().strip()), signal.SIGHUP)
    except (OSError, ValueError):
        pass


def die_with_parent():
    # PR_SET_PDEATHSIG: a watch does not outlive this feeder when it is stopped.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def watch(resource, table, value):
    while True:
        # One JSON document per event; a fresh watch starts with every object (ADDED).
        proc = subprocess.Popen(
            [kubectl, "get", resource, "--all-namespaces", "--watch", "--output-watch-events", "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, preexec_fn=die_with_parent)
        decoder, buf = json.JSONDecoder(), ""
        with lock:
            table.clear()
        for chunk in iter(lambda: proc.stdout.readline(), ""):
            buf += chunk
            while True:
                buf = buf.lstrip()
                try:
                    event, end = decoder.raw_decode(buf)
                except ValueError:
                    break
                buf = buf[end:]
                obj = event.get("object") or {}
                meta = obj.get("metadata") or {}
                key = (meta.get("namespace"), meta.get("name"))
                with lock:
                    if event.get("type") == "DELETED":
                        table.pop(key, None)
                    else:
                        table[key] = value(obj)
                    publish()
        proc.wait()
        time.sleep(1)


threading.Thread(target=watch, args=("services", services, lambda o: (o.get("spec") or {}).get("clusterIP")), daemon=True).start()
watch("endpointslices.discovery.k8s.io", slices, lambda o: o)
EOF
