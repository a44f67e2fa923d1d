#!/usr/bin/env bash
# Builds a release into dist/ (or --out DIR), from a clean checkout, without Docker or a
# registry:
#
#   flux-hub-VERSION-x86_64-linux-gnu.tar.gz   flux-hub and flux-spoke (release build,
#                                              --locked, debug info stripped), README.md,
#                                              shell completions
#   flux-hub-VERSION.oci.tar                   the controller image, built offline by the
#                                              recipe the real-node tests run (flux-images:
#                                              Debian packages by mmdebstrap + both
#                                              binaries, laid out as the Dockerfile does)
#   install.yaml                               `flux-hub install --print` (names the image)
#   SHA256SUMS
#   proto/released/VERSION/                    the protocol as released and the commit it
#                                              was released from, in the repository (kept
#                                              once; a later version must stay compatible
#                                              with it, and is tested against its binaries)
#
# The binaries link the C library dynamically (glibc of the build machine or newer): TLS
# is rustls, so nothing else. The image is named ghcr.io/flux-framework/flux-hub:VERSION
# (flux_shared::IMAGE); load it with `docker load -i`, `kind load image-archive`,
# `ctr -n k8s.io images import`, or push it with `skopeo copy oci-archive:FILE
# docker://REGISTRY/NAME:VERSION`. Without mmdebstrap the image is skipped, saying so; the
# Dockerfile builds the same image with Docker.
set -euo pipefail

cd "$(dirname "$0")/.."
out=dist
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "release: unknown argument $1 (--out DIR)" >&2; exit 2 ;;
  esac
done

# The workspace's version: the binaries' and the image's (flux_shared::IMAGE).
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || { echo "release: no [workspace.package] version in Cargo.toml" >&2; exit 1; }
arch=$(uname -m)
name=flux-hub-$version-$arch-linux-gnu
mkdir -p "$out"
out=$(cd "$out" && pwd)

cargo build --release --locked -p flux-hub -p flux-spoke
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name/completions"
cp target/release/flux-hub target/release/flux-spoke README.md "$stage/$name/"
# The release profile keeps line tables for profiling; the archive's binaries do without.
strip --strip-debug "$stage/$name/flux-hub" "$stage/$name/flux-spoke"
for shell in bash zsh fish; do
  target/release/flux-hub completion "$shell" >"$stage/$name/completions/flux-hub.$shell"
done
tar -C "$stage" --owner=0 --group=0 --sort=name -czf "$out/$name.tar.gz" "$name"
echo "release: $out/$name.tar.gz"

target/release/flux-hub install --print >"$out/install.yaml"
echo "release: $out/install.yaml"

if command -v mmdebstrap >/dev/null; then
  # target/images caches the Debian base layer between runs.
  cargo run -q --release --locked -p flux-e2e --bin flux-images -- controller \
    --profile release --tag "$version" --out target/images >/dev/null
  cp "target/images/flux-hub-$version.oci.tar" "$out/"
  echo "release: $out/flux-hub-$version.oci.tar"
else
  echo "release: no mmdebstrap (apt-get install mmdebstrap): the image is not built; docker build -t ghcr.io/flux-framework/flux-hub:$version . builds it with Docker" >&2
fi

files=("$name.tar.gz" install.yaml)
if [ -f "$out/flux-hub-$version.oci.tar" ]; then files+=("flux-hub-$version.oci.tar"); fi
(cd "$out" && sha256sum -- "${files[@]}" >SHA256SUMS)
echo "release: $out/SHA256SUMS"

# The protocol as released: later versions must stay compatible with it
# (shared/tests/proto_released.rs). A release that is already kept must not have changed.
released=proto/released/$version/flux/federation/v1/federation.proto
if [ -f "$released" ]; then
  cmp -s proto/flux/federation/v1/federation.proto "$released" ||
    { echo "release: proto/ differs from $released, the protocol $version was released with" >&2; exit 1; }
else
  mkdir -p "$(dirname "$released")"
  cp proto/flux/federation/v1/federation.proto "$released"
  # The commit released: scripts/released.sh builds its binaries for the version-skew tests.
  git rev-parse HEAD >"proto/released/$version/commit"
  echo "release: kept the protocol as $released, and its commit (commit both)"
fi
