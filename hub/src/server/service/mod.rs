//! The hub's gRPC services over what they serve ([`Served`](super::served::Served), the
//! registry's), all on one mTLS listener: `Spoke` (Watch, Report) for spoke controllers
//! ([`spoke`]), `Admin` for `flux-hub status` and the other admin commands ([`admin`]),
//! and the standard gRPC health service. This file holds what both share (who the caller
//! is, the limits) and the server.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use flux_shared::federation::Authenticator;
use flux_shared::federation::scope::{AdminScope, admin_scope_from_der};
use flux_shared::federation::tls::{ServerSecurity, TransportSettings};
use futures::Stream;
use tonic::{Request, Status};
use tracing::warn;

use super::label_grants::GrantStore;
use super::pin_store::PinStore;
use super::report_limits::{self, ReportLimiter};
use super::revocations::Revocations;
use crate::federation::served::Served;
use crate::ops::metrics::Metrics;

mod admin;
mod spoke;

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Status of a Watch refused because the registry is not rebuilt yet (or this replica is
/// not the leader): spokes retry with backoff.
fn not_ready() -> Status {
    Status::unavailable(
        "the hub is not serving assignments yet (rebuilding its state from the API server, or not the leader); retry",
    )
}

/// Both services, sharing what they serve ([`Served`]: the hub's registry); `Admin.ScaleBurst` writes MiniClusters with
/// `client`.
#[derive(Clone)]
pub struct Services {
    registry: Arc<dyn Served>,
    auth: Authenticator,
    metrics: Arc<Metrics>,
    client: kube::Client,
    /// The one namespace the hub manages (`--namespace`), if so.
    namespace: Option<String>,
    stop: tokio::sync::watch::Receiver<bool>,
    /// Reports per spoke are rate-limited: a flapping spoke cannot storm the hub.
    reports: Arc<ReportLimiter>,
    /// Which certificate may speak for each spoke.
    pins: PinStore,
    /// The labels the root's owner granted each spoke (written by `PinSpoke`).
    grants: GrantStore,
    /// Which admin certificates are revoked.
    revocations: Revocations,
    /// Open `WatchMiniClusters` streams per admin: each is a snapshot per change, so an
    /// admin's watches are bounded apart from its connections.
    admin_watches: super::connection_limits::Connections,
    /// Relayed broker connections held per burst.
    relays: Arc<super::relay::OpenRelays>,
    /// How long relayed connections last idle, and while their burst leaves.
    relay_timeouts: super::relay::Timeouts,
    /// Where Events about refused spokes go (none in insecure development).
    spoke_events: Option<super::spoke_events::SpokeEvents>,
}

/// The most `WatchMiniClusters` streams one admin identity may hold open at once.
pub const ADMIN_WATCHES_PER_IDENTITY: usize = 4;

impl Services {
    /// Services over `registry`, authorizing callers with `auth`, changing MiniClusters in
    /// the cluster of `client`.
    pub fn new(
        registry: Arc<dyn Served>,
        auth: Authenticator,
        metrics: Arc<Metrics>,
        client: kube::Client,
    ) -> Self {
        Services {
            registry,
            auth,
            metrics,
            client,
            namespace: None,
            stop: tokio::sync::watch::channel(false).1,
            reports: Arc::default(),
            pins: PinStore::off(),
            grants: GrantStore::off(),
            revocations: Revocations::off(),
            admin_watches: super::connection_limits::Connections::new(ADMIN_WATCHES_PER_IDENTITY),
            relays: Arc::default(),
            relay_timeouts: super::relay::Timeouts::default(),
            spoke_events: None,
        }
    }

    /// Publish Events about refused spokes with `events`.
    pub fn with_spoke_events(mut self, events: super::spoke_events::SpokeEvents) -> Self {
        self.spoke_events = Some(events);
        self
    }

    /// The calling spoke's protocol revision, if this hub serves it (one either way of its
    /// own). A refusal is counted, shown to admins and, the first time for its reason, put
    /// in an Event; the spoke is told which side to upgrade.
    fn spoke_revision<T>(&self, spoke: &str, request: &Request<T>) -> Result<u32, Status> {
        use flux_shared::federation::protocol;
        protocol::check_peer(request.metadata()).map_err(|e| {
            let reason = e.explain(&format!("spoke {spoke}"), "hub");
            self.metrics.fleet.spoke_refused(spoke, e.reason());
            if self.registry.refuse(spoke, &reason) {
                warn!(%spoke, refusal = e.reason(), "{reason}");
                if let Some(events) = &self.spoke_events {
                    events.refused(reason.clone());
                }
            }
            Status::failed_precondition(reason)
        })
    }

    /// Relayed connections idle and leaving for these times (tests shorten them).
    pub fn with_relay_timeouts(mut self, timeouts: super::relay::Timeouts) -> Self {
        self.relay_timeouts = timeouts;
        self
    }

    /// Serve each spoke name only to its pinned certificate ([`PinStore`]).
    pub fn with_pins(mut self, pins: PinStore) -> Self {
        self.pins = pins;
        self
    }

    /// Keep the spokes' labels granted by `PinSpoke` in `grants` ([`GrantStore`]).
    pub fn with_label_grants(mut self, grants: GrantStore) -> Self {
        self.grants = grants;
        self
    }

    /// Refuse admin certificates that are revoked ([`Revocations`]).
    pub fn with_revocations(mut self, revocations: Revocations) -> Self {
        self.revocations = revocations;
        self
    }

    /// The TLS handshake's admission of a client certificate: a spoke certificate must be
    /// the one pinned for its name, an admin certificate must not be revoked (once the pins
    /// and revocations are known; until then the gRPC layer answers `UNAVAILABLE`). Counted
    /// and logged like the gRPC layer's refusals.
    pub fn admit(&self) -> super::tls_accept::Admit {
        let (pins, revocations) = (self.pins.clone(), self.revocations.clone());
        let metrics = self.metrics.clone();
        Arc::new(move |leaf: &[u8]| {
            use flux_shared::federation::Identity;
            match flux_shared::federation::pki::identity_from_der(leaf) {
                Ok(Identity::Spoke(spoke)) => match pins.check(&spoke, Some(leaf)) {
                    Err(status) if status.code() == tonic::Code::PermissionDenied => {
                        metrics.spoke_certificate_refused();
                        Err(format!("spoke {spoke}: {}", status.message()))
                    }
                    _ => Ok(()),
                },
                Ok(Identity::Admin(admin)) => match revocations.check(&admin, Some(leaf)) {
                    Err(status) if status.code() == tonic::Code::PermissionDenied => {
                        metrics.admin_certificate_refused();
                        Err(status.message().to_string())
                    }
                    _ => Ok(()),
                },
                Err(_) => Ok(()),
            }
        })
    }

    /// The calling admin and its certificate's scope ([`AdminScope`]; everything in
    /// insecure development, where callers name themselves anyway).
    /// A revoked certificate is refused here too: its connection may predate the revocation.
    fn admin_scope<T>(&self, request: &Request<T>) -> Result<(String, AdminScope), Status> {
        let admin = self.auth.require_admin(request)?;
        let certs = request.peer_certs();
        let leaf = certs.as_deref().and_then(|c| c.first());
        if let Err(status) = self.revocations.check(&admin, leaf.map(|l| l.as_ref())) {
            if status.code() == tonic::Code::PermissionDenied {
                self.metrics.admin_certificate_refused();
                warn!(%admin, reason = %status.message(), "admin certificate refused");
            }
            return Err(status);
        }
        let scope = match leaf {
            Some(leaf) => admin_scope_from_der(leaf.as_ref()).map_err(|e| {
                Status::permission_denied(format!("admin {admin}'s certificate: {e}"))
            })?,
            None => AdminScope::everything(),
        };
        Ok((admin, scope))
    }

    /// The calling spoke's name and its certificate (DER; `None` in insecure development),
    /// which must be the one pinned for it.
    fn pinned_spoke<T>(&self, request: &Request<T>) -> Result<(String, Option<Vec<u8>>), Status> {
        let spoke = self.auth.require_spoke(request)?;
        let leaf = request
            .peer_certs()
            .and_then(|c| c.first().map(|c| c.as_ref().to_vec()));
        if let Err(status) = self.pins.check(&spoke, leaf.as_deref()) {
            if status.code() == tonic::Code::PermissionDenied {
                self.metrics.spoke_certificate_refused();
                warn!(%spoke, reason = %status.message(), "spoke certificate refused");
            }
            return Err(status);
        }
        Ok((spoke, leaf))
    }

    /// Change MiniClusters of `namespace` only (the hub's `--namespace`); `None`: any.
    pub fn in_namespace(mut self, namespace: Option<String>) -> Self {
        self.namespace = namespace;
        self
    }

    /// End every open stream once `stop` turns true, so that a graceful server shutdown
    /// does not wait forever for spokes' and admins' watches.
    pub fn with_stop(mut self, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        self.stop = stop;
        self
    }

    fn stopped(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut stop = self.stop.clone();
        async move {
            // A dropped sender means nobody can stop us: run until the client goes away.
            if stop.wait_for(|s| *s).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Errors starting the gRPC server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// TLS configuration.
    #[error(transparent)]
    Tls(#[from] flux_shared::federation::tls::TlsError),
    /// Binding or serving.
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// Binding the listener.
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// The hub's own TLS termination.
    #[error(transparent)]
    TlsAccept(#[from] super::tls_accept::TlsAcceptError),
}

/// How often the hub's certificate files are checked for a renewal.
pub const TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// Serve `Spoke`, `Admin` and `grpc.health.v1.Health` on `listener` until `shutdown`.
///
/// With mTLS the hub terminates TLS itself ([`super::tls_accept`]): a spoke certificate
/// that is not the one pinned for its name is refused in the handshake, and with
/// `tls_files` the certificate is reloaded when those files change.
pub async fn serve(
    listener: tokio::net::TcpListener,
    security: ServerSecurity,
    tls_files: Option<flux_shared::federation::tls::TlsFiles>,
    settings: TransportSettings,
    services: Services,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let auth = security.authenticator();
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<flux_shared::federation::proto::spoke_server::SpokeServer<Services>>()
        .await;
    health_reporter
        .set_serving::<flux_shared::federation::proto::admin_server::AdminServer<Services>>()
        .await;
    let router = settings
        .plain_server()
        .add_service(health)
        .add_service(settings.spoke_service(services.clone(), auth))
        .add_service(settings.admin_service(services.clone(), auth));
    match security {
        ServerSecurity::InsecureDevelopment => {
            warn!(
                "federation gRPC server in INSECURE development mode: no TLS, callers name themselves"
            );
            // Small messages (reports, snapshot updates) must not wait for delayed ACKs.
            let incoming = tonic::transport::server::TcpIncoming::from(listener)
                .with_nodelay(Some(true))
                .with_keepalive(Some(settings.tcp_keepalive));
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await?;
        }
        ServerSecurity::Mtls(pem) => {
            let tls = super::tls_accept::HubTls::new(&pem, services.admit())?;
            if let Some(files) = tls_files {
                let (metrics, registry) = (services.metrics.clone(), services.registry.clone());
                tokio::spawn(
                    tls.clone()
                        .reload_from(files, TLS_RELOAD_INTERVAL, move |pem| {
                            serving_certificates(pem, &metrics, registry.as_ref());
                        }),
                );
            }
            let metrics = services.metrics.clone();
            let accepting = super::tls_accept::Accepting {
                refused: Arc::new(move |reason| metrics.connection_refused(reason)),
                ..super::tls_accept::Accepting::new(
                    settings.tls_handshake_timeout,
                    settings.tcp_keepalive,
                )
            };
            let incoming = super::tls_accept::incoming(listener, tls, accepting);
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await?;
        }
    }
    Ok(())
}

/// Bind the gRPC listener (port 0 picks a free port).
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, ServeError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| ServeError::Bind(addr, e))
}

/// Publishes when the certificate the hub serves with and the first of the CAs it trusts
/// expire (metrics `certificate="hub"` and `certificate="ca"`, and `flux-hub status`), and
/// warns in the log from 30 days before. Returns the two, Unix seconds.
pub fn serving_certificates(
    pem: &flux_shared::federation::tls::TlsPem,
    metrics: &Metrics,
    registry: &dyn Served,
) -> (Option<i64>, Option<i64>) {
    use flux_shared::federation::pki;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let hub = pki::not_after_of_pem(pem.cert_pem());
    let ca = pki::earliest_not_after_of_pem(pem.ca_pem());
    for (what, not_after, renew) in [
        (
            "hub",
            hub,
            "flux-hub certs --force --hub-dns/--hub-ip ..., then flux-hub init",
        ),
        (
            "ca",
            ca,
            "flux-hub certs --renew-ca (docs/operations.md, Certificates)",
        ),
    ] {
        let Some(not_after) = not_after else {
            continue;
        };
        metrics.set_certificate_expiry(what, not_after);
        let left = not_after - now;
        if left < 30 * 86_400 {
            warn!(
                certificate = what,
                days_left = left / 86_400,
                renew,
                "a federation certificate of the hub expires soon"
            );
        }
    }
    registry.set_hub_certificates(hub.unwrap_or(0), ca.unwrap_or(0));
    (hub, ca)
}
