#!/usr/bin/env bash
# Unpacks one Debian package into DIR without installing it: fetched with apt from
# deb.debian.org's SUITE (its signature checked against the machine's Debian keyring), as
# any user, without touching the machine's apt state. For tools the tests and real nodes
# need in another version than the machine's (containerd 2, promtool).
#
#   scripts/debian-package.sh SUITE PACKAGE DIR      (the files land under DIR/root)
set -euo pipefail

[ $# -eq 3 ] || { sed -n '2,7p' "$0" >&2; exit 2; }
suite=$1 package=$2 dir=$3
case $dir in /*) ;; *) dir=$PWD/$dir ;; esac

rm -rf "$dir"
mkdir -p "$dir/apt/lists/partial" "$dir/apt/cache/archives/partial" "$dir/deb"
echo "deb http://deb.debian.org/debian $suite main" >"$dir/apt/sources.list"
apt_opts=(-q -o "Dir::Etc::SourceList=$dir/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$dir/apt/lists" -o "Dir::Cache=$dir/apt/cache")
[ "$(id -u)" != 0 ] || apt_opts+=(-o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update >"$dir/apt.log" 2>&1 ||
  { echo "debian-package: apt-get update of Debian $suite failed; see $dir/apt.log" >&2; exit 1; }
(cd "$dir/deb" && apt-get "${apt_opts[@]}" download "$package") >>"$dir/apt.log" 2>&1 ||
  { echo "debian-package: apt-get download $package ($suite) failed; see $dir/apt.log" >&2; exit 1; }
dpkg-deb -x "$dir/deb/${package}_"*.deb "$dir/root"
rm -rf "$dir/apt" "$dir/deb"
