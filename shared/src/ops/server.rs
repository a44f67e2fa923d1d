//! HTTP server for the kubelet's probes and Prometheus' scrapes:
//!
//! - `GET /metrics`: the text of the metrics encoder, as `application/openmetrics-text`;
//! - `GET /healthz`: 200 `ok` while [`Health::alive`], else 503 `not alive`;
//! - `GET /readyz`: 200 `ok` once [`Health::ready`], else 503 `not ready`;
//! - any other path: 404 `not found` (other methods on the paths above: 405).
//!
//! The metrics encoder is any `Fn() -> String` (for example a closure calling
//! `Metrics::encode` on the binary's own metrics), so the server does not depend on which
//! metrics a binary has.

use std::future::{Future, IntoFuture};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use super::health::Health;

/// Content type of `/metrics`.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long [`serve_listener`] waits, once shutdown begins, for requests in flight.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Encodes the process's metrics in the OpenMetrics text format.
pub trait MetricsEncoder: Fn() -> String + Send + Sync + 'static {}

impl<F> MetricsEncoder for F where F: Fn() -> String + Send + Sync + 'static {}

#[derive(Clone)]
struct AppState {
    metrics: Arc<dyn Fn() -> String + Send + Sync>,
    health: Arc<Health>,
}

/// The routes of the server, for callers that want to serve them themselves.
pub fn router(metrics: impl MetricsEncoder, health: Arc<Health>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .with_state(AppState {
            metrics: Arc::new(metrics),
            health,
        })
}

async fn metrics_handler(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
        (state.metrics)(),
    )
}

async fn healthz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.health.alive() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not alive")
    }
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.health.ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

async fn not_found() -> (StatusCode, &'static str) {
    (StatusCode::NOT_FOUND, "not found")
}

/// Binds the server's socket (port 0 picks a free port: see `local_addr`).
pub async fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Binds `addr` and serves until `shutdown` resolves: see [`serve_listener`].
pub async fn serve(
    addr: SocketAddr,
    metrics: impl MetricsEncoder,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let listener = bind(addr).await?;
    serve_listener(listener, metrics, health, shutdown).await
}

/// Serves [`router`] on `listener` until `shutdown` resolves. Then it closes the listener
/// and idle connections, and returns once the requests in flight are answered, or after
/// [`SHUTDOWN_GRACE`] at the latest (leaving them to finish in the background).
pub async fn serve_listener(
    listener: TcpListener,
    metrics: impl MetricsEncoder,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_router(listener, router(metrics, health), shutdown).await
}

/// Serves any `router` on `listener` with the shutdown behaviour of [`serve_listener`].
pub async fn serve_router(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");

    let begun = Arc::new(Notify::new());
    let signal = {
        let begun = Arc::clone(&begun);
        async move {
            shutdown.await;
            tracing::info!(%addr, "HTTP server shutting down");
            // Stores a permit if the grace timer below is not waiting yet.
            begun.notify_one();
        }
    };
    let server = axum::serve(listener, router)
        .with_graceful_shutdown(signal)
        .into_future();
    let grace = async {
        begun.notified().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        result = server => {
            tracing::info!(%addr, "HTTP server stopped");
            result
        }
        () = grace => {
            tracing::warn!(
                %addr,
                grace = ?SHUTDOWN_GRACE,
                "HTTP requests still in flight after the grace period; not waiting for them"
            );
            Ok(())
        }
    }
}
