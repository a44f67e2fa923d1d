//! The e2e harness's library: OCI images built offline from Debian packages, for the
//! real-node tests (`flux-images` builds them; `tests/images.rs` checks them).

pub mod images;
pub mod oci;
