//! The controllers' Kubernetes client: kube's own stack (base URI, retries of 429, 503 and
//! 504, authentication, extra headers) over a connection that speaks HTTP/2 when the API server offers it (ALPN), as
//! client-go does.
//!
//! Why not `kube::Client::try_default`: its connector enables HTTP/1.1 only, so every request
//! in flight holds a connection of its own. The hub applies a MiniCluster's objects in
//! parallel and reconciles several MiniClusters at once besides its long-lived watches:
//! twenty MiniClusters created together opened tens of connections, each with its own TLS
//! handshake, on both sides. Over HTTP/2 every request and watch of the process shares one
//! connection. HTTP/2 pings take the place of a read timeout (kube sets none): a connection
//! that stops answering is closed, and the watches on it reconnect.

use std::time::Duration;

use hyper_rustls::{FixedServerNameResolver, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use kube::{Client, Config};
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// How often an HTTP/2 connection is pinged, busy or idle.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// How long a ping may go unanswered before its connection is closed.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(15);

/// Why no client could be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No kubeconfig and no in-cluster service account, or one that does not load.
    #[error("no Kubernetes configuration: {0}")]
    Config(#[from] kube::config::InferConfigError),
    /// The configuration loaded but its TLS or authentication settings do not work.
    #[error("the Kubernetes configuration cannot be used: {0}")]
    Client(#[from] kube::Error),
    /// `tls-server-name` is not a DNS name or an IP address.
    #[error("tls-server-name {0:?} is not a DNS name or an IP address")]
    ServerName(String),
}

/// A client for the cluster of the environment (`KUBECONFIG`, `~/.kube/config` or the
/// in-cluster service account), as [`Config::infer`] finds it.
pub async fn infer() -> Result<Client, Error> {
    from_config(Config::infer().await?)
}

/// A client for `config`, over HTTP/2 where the API server negotiates it and HTTP/1.1
/// otherwise. A configuration with a proxy gets kube's own client (which says whether this
/// build can use that proxy).
pub fn from_config(config: Config) -> Result<Client, Error> {
    if config.proxy_url.is_some() {
        return Ok(Client::try_from(config)?);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    http.set_nodelay(true);
    let mut tls = HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name
            .clone()
            .try_into()
            .map_err(|_| Error::ServerName(name.clone()))?;
        tls = tls.with_server_name_resolver(FixedServerNameResolver::new(name));
    }
    let connector = tls.enable_http1().enable_http2().wrap_connector(http);
    let hyper = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .http2_keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        // As kube's own client: 429, 503 and 504 are retried with backoff.
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper);
    Ok(Client::new(service, config.default_namespace))
}
