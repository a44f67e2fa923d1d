//! HTTP server for the kubelet's probes and Prometheus' scrapes, serving the hub's
//! [`Metrics`] with the shared [`flux_shared::ops::server`]:
//!
//! - `GET /metrics`: [`Metrics::encode`], as `application/openmetrics-text`;
//! - `GET /healthz`: 200 `ok` while [`Health::alive`], else 503 `not alive`;
//! - `GET /readyz`: 200 `ok` once [`Health::ready`], else 503 `not ready`;
//! - any other path: 404 `not found` (other methods on the paths above: 405).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use flux_shared::ops::health::Health;
use flux_shared::ops::server as shared;
use tokio::net::TcpListener;

use super::metrics::Metrics;

/// The encoder of `/metrics` for the hub's metrics.
fn encoder(metrics: Arc<Metrics>) -> impl Fn() -> String + Send + Sync + 'static {
    move || metrics.encode()
}

/// The routes of the server, for callers that want to serve them themselves.
pub fn router(metrics: Arc<Metrics>, health: Arc<Health>) -> Router {
    shared::router(encoder(metrics), health)
}

/// Binds `addr` and serves until `shutdown` resolves: see [`serve_listener`].
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    shared::serve(addr, encoder(metrics), health, shutdown).await
}

/// Serves [`router`] on `listener` until `shutdown` resolves. Then it closes the listener
/// and idle connections, and returns once the requests in flight are answered, or after
/// [`shared::SHUTDOWN_GRACE`] at the latest (leaving them to finish in the background).
pub async fn serve_listener(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    shared::serve_listener(listener, encoder(metrics), health, shutdown).await
}
