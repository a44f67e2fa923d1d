//! The MiniCluster API: custom resource types, documented defaults and status.

pub mod defaults;
mod resolve;
mod spec;
mod status;

pub use resolve::ResolvedBurst;
pub use spec::*;
pub use status::{BurstLayout, BurstStatus, LeadBrokerStatus, MiniClusterStatus};
