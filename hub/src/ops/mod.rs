//! Operations plumbing of the hub: its metrics, their HTTP server, leader election and the
//! label that points the federation Service at the leader's pod.
//!
//! Health flags, logging setup and the shutdown signal are the shared ones
//! ([`flux_shared::ops`]), used from there.

pub mod fleet_metrics;
pub mod leader;
pub mod leader_pod;
pub mod metrics;
pub mod routes;
