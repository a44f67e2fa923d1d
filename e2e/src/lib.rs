//! The e2e harness's library: OCI images built offline from Debian packages, for the
//! real-node tests (`flux-images` builds them; `tests/images.rs` checks them), and the
//! tests' build of the workspace's binaries.

pub mod cargo_build;
pub mod images;
pub mod oci;
