//! Liveness and readiness of the hub, answered on `/healthz` and `/readyz`: the shared
//! [`flux_shared::ops::health`] flags.

pub use flux_shared::ops::health::Health;
