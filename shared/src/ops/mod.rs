//! Operations plumbing shared by the hub and spoke binaries (cargo feature `ops`):
//! liveness/readiness flags, the `/metrics` + `/healthz` + `/readyz` HTTP server, logging
//! setup, the shutdown signal, reading a relayed connection, the Kubernetes client, and
//! whether the cluster mounts images as volumes.
//!
//! Unlike the rest of this crate, this module does I/O (it needs tokio, axum and
//! tracing-subscriber), which is why it sits behind a feature that only the binaries'
//! crates enable.

#![warn(missing_docs)]

pub mod health;
pub mod image_volume_watch;
pub mod kube_client;
pub mod logging;
pub mod relay_read;
pub mod server;
pub mod shutdown;
pub mod watch_backoff;

pub use health::Health;
pub use image_volume_watch::ImageVolumeWatch;
pub use watch_backoff::WatchBackoff;
