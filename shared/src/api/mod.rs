//! The MiniCluster API: custom resource types, documented defaults and status.

pub mod defaults;
mod phase;
mod resolve;
mod spec;
mod status;

pub use phase::{BurstStatusPhase, MiniClusterPhase, UnknownPhase};
pub use resolve::{PlacementCandidate, ResolvedBurst, ViewMode};
pub use spec::*;
pub use status::{
    BurstLayout, BurstPlacement, BurstStatus, LeadBrokerStatus, MiniClusterStatus,
    SkippedCandidate, burst_path, burst_path_reason,
};

/// The most brokers (hosts) one MiniCluster may declare in total (root `maxSize` plus
/// every burst's `maxSize`, or a verbatim hostlist's hosts), and so also the most any one
/// Job of it may run. Part of the schema (every size field's maximum); the validator
/// checks the totals (`validate::check_host_count`).
///
/// The largest Flux systems run on about 10^4 nodes, and Kubernetes caps an Indexed Job's
/// parallelism at 100,000; 16,384 leaves room above the former and stays well below the
/// latter, while one plan (host list, broker.toml, R) stays a few MiB.
pub const MAX_BROKERS: i32 = 16_384;
