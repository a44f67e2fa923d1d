//! Generates the gRPC code of `proto/flux/federation/v1/federation.proto` into OUT_DIR
//! (`flux_shared::federation::proto`), plus its encoded file descriptor set for gRPC
//! reflection. `protoc` comes from the `protoc-bin-vendored` crate, so no system protoc
//! is needed.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_root = manifest_dir.join("../proto");
    let proto = proto_root.join("flux/federation/v1/federation.proto");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);

    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // Reference-counted buffers: the bursts of one MiniCluster share its spec and R.
    config.bytes([
        ".flux.federation.v1.Assignment.minicluster_spec_json",
        ".flux.federation.v1.Assignment.resource_set",
    ]);

    println!("cargo:rerun-if-changed={}", proto.display());
    println!("cargo:rerun-if-changed=build.rs");
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("federation_descriptor.bin"))
        .compile_with_config(config, &[proto], &[proto_root])?;
    Ok(())
}
