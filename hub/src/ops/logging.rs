//! Logging: `tracing` events to standard error, filtered like `RUST_LOG` (the shared
//! [`flux_shared::ops::logging`] setup).

pub use flux_shared::ops::logging::{DEFAULT_FILTER, init};
