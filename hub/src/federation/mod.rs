//! The hub's side of the federation: the assignment registry, the gRPC services spokes
//! and admins call, and the pure decisions behind `status.bursts[]` and the lead broker
//! endpoint.

pub mod bursts;
pub mod connection_limits;
pub mod label_grants;
pub mod lead;
pub mod pin_store;
pub mod placement;
pub mod registry;
pub mod relay;
pub mod report_limits;
pub mod revocations;
pub mod scale;
pub mod served;
pub mod service;
pub mod tls_accept;
pub mod watched_data;

pub use registry::{BurstInfo, BurstView, McInfo, McKey, Registry};

/// Finalizer on MiniClusters with bursts: removed once every spoke confirmed the burst's
/// objects gone, or the deletion timeout passed.
pub const FINALIZER: &str = "flux-framework.org/bursts";
