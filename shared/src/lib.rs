//! Shared core of the Flux MiniCluster control plane: the MiniCluster API, Flux's
//! formats (hostlists, CURVE certificates, broker.toml, R, entrypoint scripts), the
//! planner and the renderer. Everything here is pure and synchronous, except the federation's
//! TLS/gRPC plumbing and `ops` (cargo feature `ops`: health, logging, shutdown and the
//! `/metrics` server the binaries share).

pub mod api;
pub mod convert;
pub mod crd;
pub mod curve;
pub mod federation;
pub mod flux_config;
pub mod hostlist;
pub mod layout;
pub mod managed_fields;
#[cfg(feature = "ops")]
pub mod ops;
pub mod plan;
pub mod rank_order;
pub mod render;
pub mod scripts;
pub mod validate;
