//! The hub's side of the federation, without I/O: the assignment registry spokes and
//! admins are served from, what it serves ([`served::Served`], the gRPC server's only way
//! in), and the pure decisions behind it: where a burst is placed, where its brokers reach
//! the lead broker, and which sizes an admin's scale may set. The gRPC server is
//! [`crate::server`]; the reconcile that feeds the registry is [`crate::controller`].

pub mod lead;
pub mod placement;
pub mod registry;
pub mod scale;
pub mod served;

pub use registry::{BurstInfo, BurstView, McInfo, McKey, Registry};

/// Finalizer on MiniClusters with bursts: removed once every spoke confirmed the burst's
/// objects gone, or the deletion timeout passed.
pub const FINALIZER: &str = "flux-framework.org/bursts";
