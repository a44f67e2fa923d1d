#!/usr/bin/env bash
# Builds flux-hub and flux-spoke of the last release, for the version-skew tests: the
# newest VERSION under proto/released/ (scripts/release.sh keeps its protocol and its
# commit there), built from a git worktree of proto/released/VERSION/commit into
# target/released/VERSION/. Prints VERSION. Kept once built (a stamp names the commit).
#
# It builds with this checkout's target directory, so the dependencies (the same
# Cargo.lock) are not compiled again; the workspace's own crates are, and the released
# binaries pass through target/debug/: run it before building this checkout's (as
# scripts/e2e.sh does), not between that build and its use.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(find proto/released -mindepth 2 -maxdepth 2 -name commit -printf '%h\n' |
  xargs -rn1 basename | sort -V | tail -n 1)
[ -n "$version" ] || { echo "released: no proto/released/VERSION/commit" >&2; exit 1; }
commit=$(cat "proto/released/$version/commit")
target=${CARGO_TARGET_DIR:-$PWD/target}
out=$target/released/$version
if [ -x "$out/flux-hub" ] && [ -x "$out/flux-spoke" ] && [ "$(cat "$out/commit" 2>/dev/null)" = "$commit" ]; then
  echo "$version"
  exit 0
fi
git cat-file -e "$commit^{commit}" 2>/dev/null || {
  echo "released: commit $commit of release $version is not in this clone (a shallow or exported checkout?); the version-skew tests need the repository's history" >&2
  exit 1
}
tree=$target/released/src-$version
git worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"
git worktree prune
git worktree add --detach "$tree" "$commit" >/dev/null
# shellcheck disable=SC2064 # $tree is fixed now
trap "git worktree remove --force '$tree' >/dev/null 2>&1 || true" EXIT
# The selection scripts/e2e.sh builds with: the same features, so the same dependency builds.
(cd "$tree" && CARGO_TARGET_DIR=$target cargo build -q --locked --workspace --bin flux-hub --bin flux-spoke --test hub)
mkdir -p "$out"
cp "$target/debug/flux-hub" "$target/debug/flux-spoke" "$out/"
echo "$commit" >"$out/commit"
echo "$version"
