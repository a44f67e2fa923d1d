"""Oracle for flux_shared::hostlist, driven by tests/oracle_hostlist.rs.

Usage: hostlist_oracle.py CASES.jsonl

Each input line is a JSON object written by the Rust test:

    {"hostlist": <flux_shared compress(hosts)>, "hosts": [...],
     "expanded": <flux_shared expand(hostlist)>, "collect": true|false}

For every line, LLNL's python-hostlist must read our hostlist back as exactly
`hosts` (expand_hostlist with allow_duplicates=True, sort=False: order and
duplicates kept), and our own expansion must agree.

For lines with "collect": true, python-hostlist's collect_hostlist(hosts) is
written to stdout as one JSON line

    {"line": <input line number>, "collected": <its hostlist>,
     "expanded": <python-hostlist's expansion of it>}

for the Rust test to expand with flux_shared and compare, after checking here
that python-hostlist's expansion is the sorted, de-duplicated set of `hosts`.

Any mismatch is described on stderr and the exit status is 1.
"""

import json
import sys

import hostlist

MAX_REPORTED = 20


def main(path):
    failures = []
    lines = 0
    collected = 0

    def fail(lineno, what, **details):
        failures.append((lineno, what, details))

    with open(path, encoding="utf-8") as cases:
        for lineno, raw in enumerate(cases, start=1):
            if not raw.strip():
                continue
            lines += 1
            case = json.loads(raw)
            ours, hosts = case["hostlist"], case["hosts"]
            if case["expanded"] != hosts:
                fail(lineno, "flux_shared's own expansion differs from hosts",
                     hostlist=ours, hosts=hosts, expanded=case["expanded"])
            try:
                theirs = hostlist.expand_hostlist(
                    ours, allow_duplicates=True, sort=False)
            except hostlist.BadHostlist as e:
                fail(lineno, "python-hostlist rejects our hostlist: %s" % e,
                     hostlist=ours, hosts=hosts)
            else:
                if theirs != hosts:
                    fail(lineno, "python-hostlist expands our hostlist differently",
                         hostlist=ours, hosts=hosts, python_hostlist=theirs)
            if not case.get("collect"):
                continue
            try:
                written = hostlist.collect_hostlist(hosts)
                read_back = hostlist.expand_hostlist(
                    written, allow_duplicates=True, sort=False)
            except hostlist.BadHostlist as e:
                fail(lineno, "python-hostlist cannot collect the hosts: %s" % e,
                     hosts=hosts)
                continue
            if sorted(read_back) != sorted(set(hosts)):
                fail(lineno, "python-hostlist's collect output is not the unique hosts",
                     hosts=hosts, collected=written, python_hostlist=read_back)
                continue
            collected += 1
            print(json.dumps({"line": lineno, "collected": written,
                              "expanded": read_back}))

    for lineno, what, details in failures[:MAX_REPORTED]:
        print("line %d: %s" % (lineno, what), file=sys.stderr)
        for key, value in details.items():
            print("    %s: %s" % (key, json.dumps(value)), file=sys.stderr)
    if len(failures) > MAX_REPORTED:
        print("... and %d more failures" % (len(failures) - MAX_REPORTED),
              file=sys.stderr)
    print("hostlist oracle: %d lines, %d collected, %d failures (python-hostlist %s)"
          % (lines, collected, len(failures), hostlist.__version__),
          file=sys.stderr)
    return 1 if failures or lines == 0 else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
