#!/usr/bin/env python3
"""Where the time to a working Flux instance goes, from what bench-real-node.sh kept.

    scripts/bench_timeline.py DIR        (DIR: bench-real-node.sh's --out)

Reads DIR/runs.jsonl (each run's clock start t0, pods Ready, brokers up), DIR/logs/watch-JOB.log
(each pod as the API server showed it, with the host clock) and DIR/logs/pod-POD.log (every
container's lines with the runtime's timestamps) and prints, per controller and size, the
median over the measured runs (warm-ups left out) of each step's time after `kubectl create`:

    pod seen          the last pod of the Job on the watch
    view              the lead pod's view container's (or copying init container's) first line
    view ready        its last line: serving the view (or the copy done)
    broker container  the lead pod's broker container's first line
    lead broker       the lead broker started (builtins-success)
    lead rc1          the lead's rc1 done (its workers wait in join until then)
    workers rc1       the last worker's rc1 done
    all online        the lead's quorum-full (broker.quorum is every broker)
    brokers up        the probe's answer (bench-real-node.sh)
    pods Ready        the last pod Ready

Standard library only; a step the logs do not show is "-".
"""

import json
import re
import statistics
import sys
from datetime import datetime
from pathlib import Path

# `kubectl logs --prefix --timestamps`: "[pod/NAME/CONTAINER] 2026-11-28T06:50:01.123456789Z text"
LINE = re.compile(r"^\[pod/(?P<pod>[^/\]]+)/(?P<container>[^\]]+)\] (?P<ts>\S+) (?P<text>.*)$")
BROKER = re.compile(r"broker\.info\[(?P<rank>\d+)\]: (?P<event>[a-z0-9-]+):")

STEPS = [
    ("pod seen", "last pod of the Job on the watch"),
    ("view", "lead pod: view or init container's first line"),
    ("view ready", "lead pod: view served, or copied"),
    ("broker container", "lead pod: broker container's first line"),
    ("lead broker", "lead broker started (builtins-success)"),
    ("lead rc1", "lead's rc1 done: workers leave join"),
    ("workers rc1", "last worker's rc1 done"),
    ("all online", "lead: quorum-full"),
    ("brokers up", "the probe's answer"),
    ("pods Ready", "last pod Ready"),
]


def clock(ts):
    """Seconds since the epoch of an RFC 3339 timestamp with up to nanoseconds."""
    ts = ts.rstrip("Z")
    whole, _, frac = ts.partition(".")
    base = datetime.fromisoformat(whole + "+00:00").timestamp()
    return base + (float("0." + frac) if frac else 0.0)


def pod_index(job, pod):
    """The completion index of an Indexed Job's pod JOB-INDEX-XXXXX, or None."""
    m = re.fullmatch(re.escape(job) + r"-(\d+)-[a-z0-9]+", pod)
    return int(m.group(1)) if m else None


def timeline(out, run):
    """The steps of one controller run, in seconds after its t0 (None where not seen)."""
    job = f"{run['kind'].replace('reference', 'ref')}-{run['size']}-{run['run']}"
    t0 = run["t0"]
    steps = dict.fromkeys(name for name, _ in STEPS)
    steps["brokers up"] = run.get("flux_up_s")
    steps["pods Ready"] = run.get("pods_ready_s")
    watch = out / "logs" / f"watch-{job}.log"
    if watch.exists():
        seen = {}
        for line in watch.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 2:
                seen.setdefault(parts[1], float(parts[0]))
        if len(seen) >= run["size"]:
            steps["pod seen"] = max(seen.values()) - t0
    lines = {}  # (index, container) -> [(clock, text)]
    for path in sorted((out / "logs").glob(f"pod-{job}-*.log")):
        for raw in path.read_text(errors="replace").splitlines():
            m = LINE.match(raw)
            if not m:
                continue
            index = pod_index(job, m["pod"])
            if index is not None:
                lines.setdefault((index, m["container"]), []).append((clock(m["ts"]) - t0, m["text"]))
    broker_containers = {k for k, v in lines.items() if any(BROKER.search(t) for _, t in v)}
    events = {}  # (index, event) -> first time
    for key in broker_containers:
        for at, text in lines[key]:
            b = BROKER.search(text)
            if b:
                events.setdefault((key[0], b["event"]), at)
    lead_main = [k for k in broker_containers if k[0] == 0]
    if lead_main:
        steps["broker container"] = lines[lead_main[0]][0][0]
        lead_init = [v for k, v in lines.items() if k[0] == 0 and k not in broker_containers]
        if lead_init:
            steps["view"] = min(v[0][0] for v in lead_init)
            steps["view ready"] = max(v[-1][0] for v in lead_init)
    steps["lead broker"] = events.get((0, "builtins-success"))
    steps["lead rc1"] = events.get((0, "rc1-success"))
    workers = [events.get((i, "rc1-success")) for i in range(1, run["size"])]
    if workers and None not in workers:
        steps["workers rc1"] = max(workers)
    steps["all online"] = events.get((0, "quorum-full"))
    return steps


def main():
    out = Path(sys.argv[1])
    runs = [json.loads(line) for line in (out / "runs.jsonl").open()]
    measured = [r for r in runs if r["kind"] in ("hub", "reference") and not r["warmup"]]
    kinds = [k for k in ("hub", "reference") if any(r["kind"] == k for r in measured)]
    sizes = sorted({r["size"] for r in measured})
    if not kinds:
        return
    cols = [(k, s) for s in sizes for k in kinds]
    table = {}
    for kind, size in cols:
        per_run = [timeline(out, r) for r in measured if r["kind"] == kind and r["size"] == size]
        for name, _ in STEPS:
            values = [t[name] for t in per_run if t[name] is not None]
            table[(kind, size, name)] = statistics.median(values) if values else None
        gaps = [t["brokers up"] - t["pods Ready"] for t in per_run
                if None not in (t["brokers up"], t["pods Ready"])]
        table[(kind, size, "gap")] = statistics.median(gaps) if gaps else None
    def floor_of(kind):
        medians = {}
        for size in sizes:
            v = [r["pods_ready_s"] for r in runs if r["kind"] == kind and r["size"] == size
                 and not r["warmup"] and r["pods_ready_s"] is not None]
            medians[size] = statistics.median(v) if v else None
        return medians
    floor, bare = floor_of("floor"), floor_of("bare-floor")
    print("Timeline, seconds after `kubectl create`, median of the measured runs (scripts/bench_timeline.py)")
    print()
    print("| step | " + " | ".join(f"{k} {s}" for k, s in cols) + " | what |")
    print("|---|" + "---|" * len(cols) + "---|")
    fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for name, what in STEPS:
        print(f"| {name} | " + " | ".join(fmt(table[(k, s, name)]) for k, s in cols) + f" | {what} |")
    print(f"| floor: Job pods Ready | " + " | ".join(fmt(floor[s]) for _, s in cols) + " | a bare Job of the same pods |")
    print(f"| bare floor: Job pods Ready | " + " | ".join(fmt(bare[s]) for _, s in cols) + " | a bare Job of the application image alone (no view) |")
    print()
    print("Medians: pods Ready -> brokers up of each run; brokers up against the floor's pods Ready.")
    print()
    print("| size | " + " | ".join(f"{k}: pods Ready -> brokers up" for k in kinds) + " | "
          + " | ".join(f"{k}: brokers up - floor" for k in kinds) + " |")
    print("|---|" + "---|" * (2 * len(kinds)))
    for size in sizes:
        gap = []
        over = []
        for k in kinds:
            up, g = table[(k, size, "brokers up")], table[(k, size, "gap")]
            gap.append("-" if g is None else f"{g:+.2f}")
            over.append("-" if None in (up, floor[size]) else f"{up - floor[size]:+.2f}")
        print(f"| {size} | " + " | ".join(gap) + " | " + " | ".join(over) + " |")


if __name__ == "__main__":
    main()
