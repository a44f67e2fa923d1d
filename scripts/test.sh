#!/usr/bin/env bash
# Runs every test: installs the independent oracles (python-hostlist, kubernetes-validate,
# pyzmq, shellcheck) into .venv when missing or outdated, and Prometheus's promtool (for
# the alerting rules in deploy/prometheus/: Debian 12's package, unpacked into .venv),
# then the whole cargo test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

req=scripts/oracle-requirements.txt
stamp=.venv/.requirements
if [ ! -x .venv/bin/python ] || ! cmp -s "$req" "$stamp"; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check -r "$req"
  cp "$req" "$stamp"
fi
if [ ! -x .venv/bin/promtool ]; then
  scripts/debian-package.sh bookworm prometheus .venv/prometheus
  ln -sfn ../prometheus/root/usr/bin/promtool .venv/bin/promtool
fi
export ORACLE_PYTHON="$PWD/.venv/bin/python"
export PATH="$PWD/.venv/bin:$PATH"

cargo test --workspace "$@"
