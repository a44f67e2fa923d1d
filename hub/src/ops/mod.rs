//! Operations plumbing of the hub: its metrics, their HTTP server, and leader election.
//! Health flags, logging setup and the shutdown signal are the shared ones
//! ([`flux_shared::ops`]), used from there.

pub mod leader;
pub mod metrics;
pub mod server;
