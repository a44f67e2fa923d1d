//! Operations plumbing: metrics, health endpoints, leader election, logging.

pub mod health;
pub mod leader;
pub mod logging;
pub mod metrics;
pub mod server;
pub mod shutdown;

pub use health::Health;
pub use leader::{LeaderElection, LeaderError};
pub use metrics::{Metrics, ReconcileTimer};
