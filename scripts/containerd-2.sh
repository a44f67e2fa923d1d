#!/usr/bin/env bash
# Debian's containerd 2 (unstable's package, fetched with apt, its signature checked
# against the machine's Debian keyring), unpacked for real nodes that mount images as
# volumes (Kubernetes' ImageVolume needs containerd 2.1+; Debian 12 ships 1.6). Nothing
# is installed: scripts/real-node.sh runs it with REAL_NODE_CONTAINERD_DIR. Prints the
# directory of its binaries. An unpacked containerd 2.1+ already there is kept.
#
#   scripts/containerd-2.sh [DIR]      (default: target/containerd-2)
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${1:-${CARGO_TARGET_DIR:-target}/containerd-2}
case $dir in /*) ;; *) dir=$PWD/$dir ;; esac
bin=$dir/root/usr/bin

supported() { # a containerd binary of 2.1 or later
  local version
  version=$("$1" --version 2>/dev/null | awk '{print $3}') || return 1
  version=${version#v}
  [[ $version =~ ^([0-9]+)\.([0-9]+) ]] || return 1
  ((BASH_REMATCH[1] > 2 || (BASH_REMATCH[1] == 2 && BASH_REMATCH[2] >= 1)))
}

if ! supported "$bin/containerd"; then
  "$(dirname "$0")/debian-package.sh" sid containerd "$dir"
  supported "$bin/containerd" || {
    echo "containerd-2: Debian unstable's containerd is not 2.1 or later here: $("$bin/containerd" --version 2>&1 | head -n 1)" >&2
    exit 1
  }
fi
echo "$bin"
