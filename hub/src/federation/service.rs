//! The hub's gRPC services over what they serve ([`Served`](super::served::Served), the
//! registry's): `Spoke` (Watch, Report) for spoke
//! controllers and `Admin` for `flux-hub status`, plus the standard gRPC health service,
//! all on one mTLS listener.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use flux_shared::federation::proto::admin_server::Admin;
use flux_shared::federation::proto::spoke_server::Spoke;
use flux_shared::federation::proto::{
    ForgetSpokeRequest, ForgetSpokeResponse, ListMiniClustersRequest, ListSpokesRequest,
    ListSpokesResponse, MiniClusterSnapshot, PinSpokeRequest, PinSpokeResponse, ReportRequest,
    ReportResponse, ScaleBurstRequest, ScaleBurstResponse, Snapshot, WatchMiniClustersRequest,
    WatchRequest,
};
use flux_shared::federation::scope::{AdminScope, Permission, admin_scope_from_der};
use flux_shared::federation::tls::{ServerSecurity, TransportSettings};
use flux_shared::federation::{Authenticator, parts};
use futures::{Stream, StreamExt};
use tokio_stream::wrappers::WatchStream;
use tonic::{Request, Response, Status};
use tracing::{Instrument as _, info, info_span, warn};

use super::pin_store::PinStore;
use super::report_limits::{self, ReportLimiter};
use super::revocations::Revocations;
use super::scale;
use super::served::{Served, SubscribeError, Subscription};
use crate::ops::metrics::Metrics;

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
    /// Which admin certificates are revoked.
    revocations: Revocations,
    /// Open `WatchMiniClusters` streams per admin: each is a snapshot per change, so an
    /// admin's watches are bounded apart from its connections.
    admin_watches: super::connection_limits::Connections,
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
            revocations: Revocations::off(),
            admin_watches: super::connection_limits::Connections::new(ADMIN_WATCHES_PER_IDENTITY),
        }
    }

    /// Serve each spoke name only to its pinned certificate ([`PinStore`]).
    pub fn with_pins(mut self, pins: PinStore) -> Self {
        self.pins = pins;
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

#[tonic::async_trait]
impl Spoke for Services {
    type WatchStream = BoxStream<Snapshot>;

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let (spoke, leaf) = self.pinned_spoke(&request)?;
        let not_after = leaf
            .as_deref()
            .and_then(flux_shared::federation::pki::not_after_unix);
        let revoked = self.pins.revoked(spoke.clone(), leaf);
        let req = request.into_inner();
        super::report_limits::check_spoke_version(&req.spoke_version)
            .map_err(|e| Status::invalid_argument(format!("spoke {spoke}: {e}")))?;
        let span = info_span!("watch", %spoke, spoke_version = %req.spoke_version);
        // What crosses the trust line is checked before it is kept.
        let exceptions = flux_shared::federation::policy::Announced::from_proto(&req.exceptions)
            .map_err(|e| {
                Status::invalid_argument(format!("spoke {spoke}'s policy exceptions: {e}"))
            })?;
        let subscription = match self.registry.clone().subscribe(
            &spoke,
            &req.spoke_version,
            exceptions,
        ) {
            Ok(s) => s,
            Err(SubscribeError::NotReady) => return Err(not_ready()),
            Err(SubscribeError::AlreadyConnected) => {
                self.metrics.spoke_stream_refused();
                span.in_scope(|| {
                    warn!("refusing a second Watch stream under a connected spoke's name")
                });
                return Err(Status::already_exists(format!(
                    "spoke {spoke} already holds a Watch stream: another process is using its certificate, or its previous connection has not timed out yet (then a retry succeeds)"
                )));
            }
        };
        span.in_scope(|| {
            info!(
                applied_epoch = %req.applied_hub_epoch,
                applied_version = req.applied_version,
                "spoke connected"
            )
        });
        if let Some(not_after) = not_after {
            self.registry.set_certificate_expiry(&spoke, not_after);
            self.metrics
                .set_certificate_expiry(&format!("spoke/{spoke}"), not_after);
        }
        let Subscription { versions, guard } = subscription;
        let (metrics, registry) = (self.metrics.clone(), self.registry.clone());
        let (accepts_parts, accepts_shared) = (req.accepts_parts, req.accepts_shared_specs);
        let stream = WatchStream::new(versions)
            .flat_map(move |_| {
                // The guard lives as long as the stream: dropping the stream (the spoke went
                // away) marks the spoke disconnected.
                let _connected = &guard;
                metrics.snapshot_sent();
                let mut snapshot = registry.snapshot(&spoke);
                if accepts_shared {
                    // Each MiniCluster's spec once per snapshot, not once per burst.
                    parts::send_shared(&mut snapshot);
                }
                // Parts of bounded size for spokes that assemble them: no tenant's size
                // can make a spoke's snapshot unsendable.
                let parts = if accepts_parts {
                    parts::split(snapshot, parts::PART_BUDGET)
                } else {
                    vec![snapshot]
                };
                futures::stream::iter(parts.into_iter().map(Ok))
            })
            .take_until(self.stopped())
            // A certificate unpinned while its stream is open loses the stream; the
            // spoke's next Watch is refused.
            .take_until(revoked);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn report(
        &self,
        request: Request<ReportRequest>,
    ) -> Result<Response<ReportResponse>, Status> {
        let (spoke, _) = self.pinned_spoke(&request)?;
        let req = request.into_inner();
        let _span = info_span!("report", %spoke, applied_version = req.applied_version).entered();
        if !self.reports.allow(&spoke, std::time::Instant::now()) {
            // Not recorded: the spoke keeps it unsent and reports again later (every
            // report carries its whole state, so none is lost for good).
            warn!("spoke reports too often; report refused");
            return Err(Status::resource_exhausted(format!(
                "spoke {spoke} reports more often than {} per second; report again later",
                report_limits::REPORTS_PER_SECOND
            )));
        }
        self.metrics.report_received();
        self.registry.report(&spoke, req);
        Ok(Response::new(ReportResponse {}))
    }
}

#[tonic::async_trait]
impl Admin for Services {
    async fn list_mini_clusters(
        &self,
        request: Request<ListMiniClustersRequest>,
    ) -> Result<Response<MiniClusterSnapshot>, Status> {
        let (admin, scope) = self.admin_scope(&request)?;
        let namespace = request.into_inner().namespace;
        require(&admin, &scope, Permission::Read, non_empty(&namespace))?;
        Ok(Response::new(visible(
            self.registry.admin_snapshot(&namespace),
            &scope,
        )))
    }

    type WatchMiniClustersStream = BoxStream<MiniClusterSnapshot>;

    async fn watch_mini_clusters(
        &self,
        request: Request<WatchMiniClustersRequest>,
    ) -> Result<Response<Self::WatchMiniClustersStream>, Status> {
        let (admin, scope) = self.admin_scope(&request)?;
        let leaf = request
            .peer_certs()
            .and_then(|c| c.first().map(|c| c.as_ref().to_vec()));
        let revoked = self.revocations.revoked(admin.clone(), leaf);
        let namespace = request.into_inner().namespace;
        require(&admin, &scope, Permission::Read, non_empty(&namespace))?;
        let Some(place) = self.admin_watches.admit(&admin) else {
            warn!(%admin, "admin watch refused: too many open");
            return Err(Status::resource_exhausted(format!(
                "admin {admin} holds {ADMIN_WATCHES_PER_IDENTITY} open watches already, the most one admin may; end one (flux-hub status --watch) first"
            )));
        };
        let registry = self.registry.clone();
        let stream = WatchStream::new(self.registry.admin_changes())
            .map(move |_| {
                // The place is given back when the stream ends.
                let _watching = &place;
                Ok(visible(registry.admin_snapshot(&namespace), &scope))
            })
            .take_until(self.stopped())
            .take_until(revoked);
        info!(%admin, "admin watching MiniClusters");
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_spokes(
        &self,
        request: Request<ListSpokesRequest>,
    ) -> Result<Response<ListSpokesResponse>, Status> {
        let (admin, scope) = self.admin_scope(&request)?;
        require(&admin, &scope, Permission::Read, None)?;
        Ok(Response::new(self.registry.spokes(&|ns| scope.sees(ns))))
    }

    async fn forget_spoke(
        &self,
        request: Request<ForgetSpokeRequest>,
    ) -> Result<Response<ForgetSpokeResponse>, Status> {
        let (admin, scope) = self.admin_scope(&request)?;
        require(&admin, &scope, Permission::Spokes, None)?;
        let name = request.into_inner().name;
        let span = info_span!("forget_spoke", %admin, spoke = %name);
        let known = self
            .registry
            .forget_spoke(&name)
            .map_err(Status::failed_precondition)?;
        // Known or not (a hub restart forgets idle spokes), its certificate goes.
        self.pins
            .unpin(&self.client, &name)
            .instrument(span.clone())
            .await
            .or_else(|e| {
                if e.code() == tonic::Code::FailedPrecondition {
                    Ok(()) // nothing pinned in insecure development
                } else {
                    Err(e)
                }
            })?;
        let _span = span.entered();
        if known {
            info!("spoke forgotten and its certificate unpinned");
            Ok(Response::new(ForgetSpokeResponse {}))
        } else {
            Err(Status::not_found(format!(
                "this hub does not know a spoke named {name} (its pin, if any, is removed)"
            )))
        }
    }

    async fn pin_spoke(
        &self,
        request: Request<PinSpokeRequest>,
    ) -> Result<Response<PinSpokeResponse>, Status> {
        let (admin, scope) = self.admin_scope(&request)?;
        require(&admin, &scope, Permission::Spokes, None)?;
        let req = request.into_inner();
        let span = info_span!("pin_spoke", %admin, spoke = %req.name);
        flux_shared::federation::Identity::spoke(&req.name)
            .map_err(|e| Status::invalid_argument(format!("name {:?}: {e}", req.name)))?;
        if !flux_shared::federation::pins::is_fingerprint(&req.certificate_sha256) {
            return Err(Status::invalid_argument(format!(
                "certificate_sha256 {:?}: must be sha256: and 64 lowercase hex digits",
                req.certificate_sha256
            )));
        }
        let previous = self
            .pins
            .pin(&self.client, &req.name, &req.certificate_sha256)
            .instrument(span.clone())
            .await?;
        span.in_scope(|| info!(replaced = previous.is_some(), "spoke certificate pinned"));
        Ok(Response::new(PinSpokeResponse {
            previous_sha256: previous.unwrap_or_default(),
        }))
    }

    async fn scale_burst(
        &self,
        request: Request<ScaleBurstRequest>,
    ) -> Result<Response<ScaleBurstResponse>, Status> {
        let (admin, scope) = self.admin_scope(&request)?;
        let req = request.into_inner();
        require(&admin, &scope, Permission::Scale, Some(&req.namespace))?;
        let span = info_span!(
            "scale_burst",
            %admin,
            namespace = %req.namespace,
            minicluster = %req.name,
            burst = %req.burst,
            size = req.size,
        );
        self.scale(&admin.to_string(), req)
            .instrument(span)
            .await
            .map(Response::new)
    }
}

impl Services {
    /// `ScaleBurst`, for admin `admin` ([`scale::set_size`]).
    async fn scale(
        &self,
        admin: &str,
        req: ScaleBurstRequest,
    ) -> Result<ScaleBurstResponse, Status> {
        if req.namespace.is_empty() || req.name.is_empty() || req.burst.is_empty() {
            return Err(Status::invalid_argument(
                "namespace, name and burst are required",
            ));
        }
        if let Some(only) = self.namespace.as_deref().filter(|ns| *ns != req.namespace) {
            return Err(Status::not_found(format!(
                "MiniCluster {}/{}: this hub manages namespace {only} only",
                req.namespace, req.name
            )));
        }
        // The field manager names the admin, so managedFields shows who scaled.
        let manager = format!("flux-hub-admin:{admin}");
        let target = scale::Target {
            namespace: &req.namespace,
            name: &req.name,
            burst: &req.burst,
        };
        let (change, generation) =
            scale::set_size(&self.client, &self.metrics, &target, req.size, &manager)
                .await
                .map_err(|e| match e {
                    scale::SetSizeError::Refused(r) => Status::new(r.code, r.message),
                    scale::SetSizeError::NotFound(m) => Status::not_found(m),
                    scale::SetSizeError::KeptChanging(m) => Status::aborted(m),
                    scale::SetSizeError::Api { doing, error } => api_status(&doing, error),
                })?;
        Ok(ScaleBurstResponse {
            previous_size: change.previous,
            size: change.size,
            max_size: change.max_size,
            generation,
            spoke: change.spoke,
        })
    }
}

/// A failed API call of `ScaleBurst` as a gRPC status: the API server's refusals keep
/// their meaning (422: the API server's validation, with its message), the rest is
/// `Unavailable` (retry).
fn api_status(doing: &str, e: kube::Error) -> Status {
    match e {
        kube::Error::Api(e) if e.code == 404 => Status::not_found(format!("{doing}: not found")),
        kube::Error::Api(e) if e.code == 422 || e.code == 400 => Status::failed_precondition(
            format!("{doing}: the API server refused it: {}", e.message),
        ),
        kube::Error::Api(e) if e.code == 403 => Status::failed_precondition(format!(
            "{doing}: the hub's service account may not do it: {}",
            e.message
        )),
        e => Status::unavailable(format!("{doing}: {e}")),
    }
}

/// `PERMISSION_DENIED`, naming what the admin's certificate allows, unless `scope` allows
/// `permission` for `namespace`.
fn require(
    admin: &str,
    scope: &AdminScope,
    permission: Permission,
    namespace: Option<&str>,
) -> Result<(), Status> {
    if scope.allows(permission, namespace) {
        return Ok(());
    }
    let what = match namespace {
        Some(ns) => format!("{permission} in namespace {ns}"),
        None if permission == Permission::Spokes => "manage spokes".to_string(),
        None => format!("{permission} in every namespace"),
    };
    Err(Status::permission_denied(format!(
        "admin {admin} may not {what}: its certificate allows {scope} (flux-hub certs --admin NAME --admin-permission ... --admin-namespace ... issues another)"
    )))
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// `snapshot` with only the MiniClusters `scope` sees.
fn visible(mut snapshot: MiniClusterSnapshot, scope: &AdminScope) -> MiniClusterSnapshot {
    snapshot.miniclusters.retain(|m| {
        m.minicluster
            .as_ref()
            .is_some_and(|r| scope.sees(&r.namespace))
    });
    snapshot
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
    tls_files: Option<super::tls_accept::TlsFiles>,
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
                let metrics = services.metrics.clone();
                tokio::spawn(
                    tls.clone()
                        .reload_from(files, TLS_RELOAD_INTERVAL, move |pem| {
                            if let Some(not_after) =
                                flux_shared::federation::pki::not_after_of_pem(pem.cert_pem())
                            {
                                metrics.set_certificate_expiry("hub", not_after);
                            }
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
