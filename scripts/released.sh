#!/usr/bin/env bash
# Builds flux-hub and flux-spoke of the last release, for the version-skew tests: the
# newest VERSION under proto/released/ (scripts/release.sh keeps its protocol and its
# commit there), built from a git worktree of proto/released/VERSION/commit into
# target/released/VERSION/. Prints VERSION. Kept once built (a stamp names the commit).
#
# It builds with this checkout's target directory, so the dependencies (the same
# Cargo.lock) are not compiled again. The workspace's own crates are built with a profile
# override of their own (codegen-units), which gives their artifacts other names than this
# checkout's: neither build replaces the other's (the released binaries pass through
# target/debug/, which this checkout's next cargo build links again, in well under a
# second).
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
git worktree add --quiet --detach "$tree" "$commit"
# shellcheck disable=SC2064 # $tree is fixed now
trap "git worktree remove --force '$tree' >/dev/null 2>&1 || true" EXIT
# The workspace's packages, each with an override that names its artifacts apart.
overrides=()
for manifest in "$tree"/*/Cargo.toml; do
  package=$(sed -n '/^\[package\]/,/^\[/s/^name = "\(.*\)"/\1/p' "$manifest")
  [ -z "$package" ] || overrides+=(--config "profile.dev.package.\"$package\".codegen-units=255")
done
# The selection scripts/e2e.sh builds with: the same features, so the same dependency builds.
(cd "$tree" && CARGO_TARGET_DIR=$target cargo build -q --locked "${overrides[@]}" --workspace --bin flux-hub --bin flux-spoke --test hub)
mkdir -p "$out"
cp "$target/debug/flux-hub" "$target/debug/flux-spoke" "$out/"
echo "$commit" >"$out/commit"
echo "$version"
