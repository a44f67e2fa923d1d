//! The spoke agent: dial the hub, consume `Watch` snapshots, make the cluster match each
//! one, and report how every assignment is doing.
//!
//! One task runs everything (snapshots, Job changes, the report timer) so the state needs
//! no locks; the decisions themselves are the pure functions of [`crate::reconcile`].
//!
//! Guarantees:
//!
//! * Deletions happen only while applying a snapshot: a hub outage, a refused connection
//!   or a broken stream never deletes anything.
//! * The first snapshot of every connection is reconciled in full (owned objects listed,
//!   unlisted ones deleted), also after a spoke restart. Within a connection a snapshot
//!   already fully applied (a heartbeat: same `hub_epoch` and `version`) is a no-op, and
//!   an assignment whose content this process already applied is not applied again while
//!   its objects exist.
//! * `Report.applied_version` acknowledges a snapshot only once every assignment in it is
//!   applied or refused and every unlisted object is deleted; a partly applied snapshot is
//!   retried every report interval.
//! * Only this spoke's objects are touched: the owned objects listed (and so every deletion)
//!   are this spoke name's in this federation ([`AgentConfig::identity`]). A name of an
//!   assignment taken by an object the spoke did not make refuses the whole assignment
//!   (reason `NameTaken`) before any of its objects is written; the refusal is remembered
//!   and examined again only when the assignment's content changes or, checked at every
//!   report interval with one read per blocking object, that object changes or goes.
//! * Reconnects forever: exponential backoff with jitter (`backon`), from
//!   [`AgentConfig::min_reconnect_delay`] to [`AgentConfig::max_reconnect_delay`] (jitter
//!   adds up to 100 %), reset after a connection that delivered a snapshot. A refused
//!   certificate is retried at the maximum delay.
//!
//! Size: the single task and its state machine (connect, snapshot, Job changes,
//! reports); its guarantees above are about the whole loop. The decisions are already
//! apart in [`crate::reconcile`]; about 40 lines are tests.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use backon::{BackoffBuilder, ExponentialBuilder};
use flux_shared::federation::assignment::Realized;
use flux_shared::federation::auth::IdentityInterceptor;
use flux_shared::federation::diagnostics::{
    classify_tls_failure, error_chain, is_access_denied, status_text,
};
use flux_shared::federation::ownership::{
    Ownership, SpokeIdentity, SpokeIdentityError, ownership, same_owner,
};
use flux_shared::federation::parts::Assembler;
use flux_shared::federation::policy::PolicyState;
use flux_shared::federation::proto::spoke_client::SpokeClient;
use flux_shared::federation::proto::{
    AssignmentStatus, ClusterAccess, ReportRequest, Snapshot, WatchRequest,
};
use flux_shared::federation::tls::{ClientSecurity, TlsError, TlsPem, TransportSettings};
use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tracing::{Instrument, debug, error, info, info_span, warn};

use crate::cluster::{Cluster, Kind, ObjectRef, Taken, metadata};
use crate::metrics::{ErrorKind, Metrics};
use crate::reconcile::{
    Applied, AssignmentRefusal, Context, Decision, Memory, NAME_TAKEN, Outcome, Tracked, find_job,
    plan_snapshot, status,
};

/// How the agent reaches the hub and how often it reports.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The hub's federation address: `https://host:port` for mTLS, `http://` with
    /// [`ClientSecurity::InsecureDevelopment`].
    pub hub_uri: String,
    /// mTLS material (or the insecure development identity).
    pub security: ClientSecurity,
    /// Who this spoke is (from `security`): stamped on every object it makes, required of
    /// every object it changes or deletes.
    pub identity: SpokeIdentity,
    /// Keepalives, timeouts, message size limits and the unary deadline.
    pub settings: TransportSettings,
    /// Every assignment's status is reported at least this often while connected (and
    /// a partly applied snapshot retried).
    pub report_interval: Duration,
    /// This spoke's software version, sent with every Watch.
    pub spoke_version: String,
    /// First reconnect delay (before jitter).
    pub min_reconnect_delay: Duration,
    /// Largest reconnect delay (before jitter).
    pub max_reconnect_delay: Duration,
    /// After a Job change, how long to wait for more before reporting.
    pub report_debounce: Duration,
    /// Where the mTLS material in `security` was read from: re-read at every connection,
    /// and watched while connected, so that a rotated certificate (a renewed Secret
    /// volume) is used without a restart. `None`: `security` as given, always.
    pub tls_files: Option<TlsFiles>,
    /// How often `tls_files` are checked for a change while connected.
    pub tls_check_interval: Duration,
    /// The namespace the spoke runs in: no burst may be created there
    /// ([`flux_shared::validate::unsafe_burst`]). Default
    /// [`flux_shared::validate::DEFAULT_SPOKE_NAMESPACE`].
    pub namespace: String,
}

impl AgentConfig {
    /// Default [`AgentConfig::report_interval`].
    pub const DEFAULT_REPORT_INTERVAL: Duration = Duration::from_secs(30);
    /// Default [`AgentConfig::min_reconnect_delay`].
    pub const DEFAULT_MIN_RECONNECT_DELAY: Duration = Duration::from_millis(200);
    /// Default [`AgentConfig::max_reconnect_delay`].
    pub const DEFAULT_MAX_RECONNECT_DELAY: Duration = Duration::from_secs(30);
    /// Default [`AgentConfig::report_debounce`].
    pub const DEFAULT_REPORT_DEBOUNCE: Duration = Duration::from_millis(250);

    /// A configuration for `hub_uri` with `security` and every default: recommended
    /// transport settings, reports every 30 s, reconnects after 200 ms up to 30 s, this
    /// crate's version. Fails when `security` does not name a spoke (an admin identity or
    /// certificate) or its CA is unreadable.
    pub fn new(
        hub_uri: impl Into<String>,
        security: ClientSecurity,
    ) -> Result<AgentConfig, SpokeIdentityError> {
        let identity = SpokeIdentity::of_client(&security)?;
        Ok(AgentConfig {
            hub_uri: hub_uri.into(),
            security,
            identity,
            settings: TransportSettings::default(),
            report_interval: Self::DEFAULT_REPORT_INTERVAL,
            spoke_version: env!("CARGO_PKG_VERSION").to_string(),
            min_reconnect_delay: Self::DEFAULT_MIN_RECONNECT_DELAY,
            max_reconnect_delay: Self::DEFAULT_MAX_RECONNECT_DELAY,
            report_debounce: Self::DEFAULT_REPORT_DEBOUNCE,
            namespace: flux_shared::validate::DEFAULT_SPOKE_NAMESPACE.to_string(),
            tls_files: None,
            tls_check_interval: TLS_FILES_CHECK,
        })
    }
}

/// The files a spoke's mutual TLS material is read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The federation CA certificate.
    pub ca: std::path::PathBuf,
    /// This spoke's certificate.
    pub cert: std::path::PathBuf,
    /// Its private key.
    pub key: std::path::PathBuf,
}

/// Default [`AgentConfig::tls_check_interval`].
pub const TLS_FILES_CHECK: Duration = Duration::from_secs(10);

/// A snapshot the agent fully applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedSnapshot {
    /// Its `hub_epoch`.
    pub hub_epoch: String,
    /// Its `version`.
    pub version: u64,
}

type Client = SpokeClient<InterceptedService<Channel, IdentityInterceptor>>;
type Changes = Pin<Box<dyn Stream<Item = ()> + Send>>;

/// The agent. Build it with [`Agent::new`], keep what you need of [`Agent::applied`] and
/// [`Agent::metrics`], then [`Agent::run`] it.
pub struct Agent<C: Cluster> {
    config: AgentConfig,
    cluster: C,
    metrics: Arc<Metrics>,
    applied: watch::Sender<Option<AppliedSnapshot>>,
    /// The TLS material last read successfully from [`AgentConfig::tls_files`], and its
    /// certificate text.
    last_good_tls: std::sync::Mutex<Option<(ClientSecurity, String)>>,
}

impl<C: Cluster> std::fmt::Debug for Agent<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("hub_uri", &self.config.hub_uri)
            .finish_non_exhaustive()
    }
}

/// What the agent knows between snapshots (and connections).
#[derive(Debug, Default)]
struct State {
    memory: Memory,
    /// Epoch of the last snapshot processed: the epoch reports are about.
    epoch: String,
    /// Last version of `epoch` fully applied (0: none).
    acked: u64,
    /// Last snapshot fully applied, in any epoch (sent with Watch).
    applied: Option<AppliedSnapshot>,
    /// Epoch and version of the last snapshot processed.
    last: Option<(String, u64)>,
    /// Whether it was fully applied.
    complete: bool,
    /// It, while it is not fully applied (retried).
    pending: Option<Snapshot>,
    /// One entry per assignment of that snapshot, plus the keys it removed.
    tracked: Vec<Tracked>,
    /// Statuses and cluster access of the last report the hub accepted.
    last_sent: Option<(Vec<AssignmentStatus>, Option<ClusterAccess>)>,
    /// The last snapshot processed (re-processed when a blocking object changes).
    current: Option<Snapshot>,
    /// The objects blocking each assignment refused as `NameTaken`, as seen then.
    blockers: BTreeMap<String, Vec<Taken>>,
    /// The policy document the last snapshot was decided with (`None`: no policy); the
    /// snapshot is decided again when it changes.
    policy: Option<Option<String>>,
}

/// Why an assignment's objects were not all applied.
enum ApplyError {
    /// Names taken by objects the spoke did not make: refuse the assignment.
    Taken(Vec<Taken>),
    /// Anything else: retried.
    Failed(String),
}

/// Why a connection ended.
#[derive(Debug)]
enum SessionError {
    /// The hub URI or TLS settings are unusable.
    Endpoint(TlsError),
    /// TCP or TLS connection failed.
    Connect(tonic::transport::Error),
    /// The Watch call was refused.
    Open(Status),
    /// The Watch call did not answer within the unary deadline.
    OpenTimeout,
    /// The stream failed.
    Stream(Status),
    /// The hub ended the stream.
    Ended,
    /// The certificate files changed: reconnect with them.
    Reload,
    /// The policy's exceptions changed: reconnect to announce them.
    Exceptions,
}

struct SessionEnd {
    got_snapshot: bool,
    error: SessionError,
}

/// How soon to reconnect.
enum Retry {
    /// The next delay of the exponential backoff.
    Backoff,
    /// The maximum delay: retrying sooner will not help.
    Slow,
}

impl<C: Cluster> Agent<C> {
    /// An agent applying snapshots to `cluster`, recording into `metrics`.
    pub fn new(config: AgentConfig, cluster: C, metrics: Arc<Metrics>) -> Agent<C> {
        Agent {
            config,
            cluster,
            metrics,
            applied: watch::channel(None).0,
            last_good_tls: std::sync::Mutex::new(None),
        }
    }

    /// The last snapshot fully applied (`None` until the first one): readiness, and a way
    /// for tests to wait for progress.
    pub fn applied(&self) -> watch::Receiver<Option<AppliedSnapshot>> {
        self.applied.subscribe()
    }

    /// The agent's metrics.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// Runs until `shutdown` resolves (whatever it is doing then is abandoned, which is
    /// safe: the next start reconciles from scratch). Never fails: every error is logged,
    /// counted and retried.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut changes: Changes = Box::pin(self.cluster.changes());
        let mut state = State::default();
        let builder = ExponentialBuilder::default()
            .with_jitter()
            .with_min_delay(self.config.min_reconnect_delay)
            .with_max_delay(self.config.max_reconnect_delay)
            .without_max_times();
        let mut backoff = builder.build();
        if matches!(self.config.security, ClientSecurity::InsecureDevelopment(_)) {
            warn!(hub = %self.config.hub_uri, "INSECURE development mode: plaintext, no certificates");
        }
        loop {
            let end = tokio::select! {
                end = self.session(&mut state, &mut changes) => end,
                () = &mut shutdown => break,
            };
            self.metrics.set_connected(false);
            if end.got_snapshot {
                backoff = builder.build();
            }
            let delay = match self.explain(&end.error) {
                Retry::Backoff => backoff.next().unwrap_or(self.config.max_reconnect_delay),
                Retry::Slow => self
                    .config
                    .max_reconnect_delay
                    .mul_f32(1.0 + rand::random::<f32>()),
            };
            debug!(?delay, "reconnecting after a delay");
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = &mut shutdown => break,
            }
        }
        self.metrics.set_connected(false);
        info!("spoke agent stopped");
    }

    /// Logs a refusal of this spoke's certificate in the hub's handshake (`access_denied`).
    fn revoked(&self, hub: &str, text: &str) {
        error!(%hub, error = %text, "the hub refused this spoke's certificate in the TLS handshake: it is not the one the hub has pinned for this spoke (replaced by flux-hub join --rotate, or the spoke was unjoined); run flux-hub join for this spoke to install and pin a current one; retrying slowly");
    }

    /// Logs and counts why a connection ended, and says how soon to retry.
    fn explain(&self, error: &SessionError) -> Retry {
        let hub = &self.config.hub_uri;
        match error {
            SessionError::Endpoint(e) => {
                error!(%hub, error = %e, "cannot use the hub address");
                self.metrics.error(ErrorKind::Connect);
                Retry::Slow
            }
            SessionError::Connect(e) => {
                let text = error_chain(e);
                self.metrics.error(ErrorKind::Connect);
                if is_access_denied(&text) {
                    self.revoked(hub, &text);
                    Retry::Slow
                } else if looks_like_tls(&text) {
                    error!(%hub, error = %text, "TLS handshake with the hub failed: check --ca (the federation CA), --cert/--key (a spoke certificate from that CA) and --hub-domain (a name in the hub's certificate)");
                    Retry::Slow
                } else {
                    warn!(%hub, error = %text, "cannot reach the hub");
                    Retry::Backoff
                }
            }
            SessionError::Open(status) | SessionError::Stream(status) => {
                let text = status_text(status);
                match status.code() {
                    _ if is_access_denied(&text) => {
                        self.metrics.error(ErrorKind::Auth);
                        self.revoked(hub, &text);
                        Retry::Slow
                    }
                    Code::Unauthenticated | Code::PermissionDenied => {
                        self.metrics.error(ErrorKind::Auth);
                        error!(%hub, code = ?status.code(), error = %text, "the hub refused this spoke's certificate: it must be a spoke certificate (spiffe://flux-framework.org/spoke/<name>) issued by the hub's CA; retrying slowly");
                        Retry::Slow
                    }
                    _ if looks_like_tls(&text) => {
                        self.metrics.error(ErrorKind::Auth);
                        error!(%hub, error = %text, "TLS with the hub failed (certificate refused?): check --ca, --cert/--key and --hub-domain; retrying slowly");
                        Retry::Slow
                    }
                    Code::AlreadyExists if matches!(error, SessionError::Open(_)) => {
                        self.metrics.error(ErrorKind::Stream);
                        warn!(%hub, error = %text, "the hub already serves a stream under this spoke's name: another process may be using this certificate (if this spoke just reconnected, the retry succeeds once the hub sees the old connection end)");
                        Retry::Backoff
                    }
                    Code::Unavailable if matches!(error, SessionError::Open(_)) => {
                        self.metrics.error(ErrorKind::NotReady);
                        info!(%hub, reason = %text, "the hub is not serving assignments yet; retrying");
                        Retry::Backoff
                    }
                    code => {
                        self.metrics.error(ErrorKind::Stream);
                        warn!(%hub, ?code, error = %text, "the Watch stream failed; reconnecting");
                        Retry::Backoff
                    }
                }
            }
            SessionError::OpenTimeout => {
                self.metrics.error(ErrorKind::Stream);
                warn!(%hub, deadline = ?self.config.settings.unary_deadline, "the hub did not answer Watch in time; reconnecting");
                Retry::Backoff
            }
            SessionError::Ended => {
                info!(%hub, "the hub ended the Watch stream; reconnecting");
                Retry::Backoff
            }
            SessionError::Reload => {
                info!(%hub, "the certificate files changed; reconnecting with them");
                Retry::Backoff
            }
            SessionError::Exceptions => {
                info!(%hub, "the policy's exceptions changed; reconnecting to tell the hub");
                Retry::Backoff
            }
        }
    }

    /// The security to connect with now, and the certificate text it holds: re-read from
    /// [`AgentConfig::tls_files`] when set. Files that cannot be read, or that hold another
    /// identity than this spoke's, are not used (the last good material is, with an error
    /// logged).
    fn current_security(&self) -> (ClientSecurity, String) {
        let given = || {
            if let Some(good) = self
                .last_good_tls
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone()
            {
                return good;
            }
            let cert = match &self.config.security {
                ClientSecurity::Mtls { tls, .. } => tls.cert_pem().to_string(),
                ClientSecurity::InsecureDevelopment(_) => String::new(),
            };
            (self.config.security.clone(), cert)
        };
        let (Some(files), ClientSecurity::Mtls { domain, .. }) =
            (&self.config.tls_files, &self.config.security)
        else {
            return given();
        };
        let tls = match TlsPem::from_files(&files.ca, &files.cert, &files.key) {
            Ok(tls) => tls,
            Err(e) => {
                error!(error = %e, "cannot re-read the TLS files; connecting with the certificate read before");
                return given();
            }
        };
        match SpokeIdentity::of_client(&ClientSecurity::Mtls {
            tls: tls.clone(),
            domain: domain.clone(),
        }) {
            Ok(id) if id == self.config.identity => {
                let cert = tls.cert_pem().to_string();
                let good = (
                    ClientSecurity::Mtls {
                        tls,
                        domain: domain.clone(),
                    },
                    cert,
                );
                *self
                    .last_good_tls
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(good.clone());
                good
            }
            Ok(id) => {
                error!(found = %id.name, expected = %self.config.identity.name, "the TLS files now hold another spoke's certificate; not using it");
                given()
            }
            Err(e) => {
                error!(error = %e, "the TLS files no longer hold a spoke certificate; not using it");
                given()
            }
        }
    }

    /// One connection: open Watch, then handle snapshots, Job changes and the report
    /// timer until the stream fails or ends.
    async fn session(&self, state: &mut State, changes: &mut Changes) -> SessionEnd {
        let fail = |error| SessionEnd {
            got_snapshot: false,
            error,
        };
        let settings = &self.config.settings;
        let (security, cert_used) = self.current_security();
        let endpoint = match settings.endpoint(&self.config.hub_uri, &security) {
            Ok(e) => e,
            Err(e) => return fail(SessionError::Endpoint(e)),
        };
        let channel = match endpoint.connect().await {
            Ok(c) => c,
            Err(e) => return fail(SessionError::Connect(e)),
        };
        let mut client = SpokeClient::with_interceptor(channel, security.interceptor())
            .max_decoding_message_size(settings.max_decoding_message_size)
            .max_encoding_message_size(settings.max_decoding_message_size);
        let request = WatchRequest {
            applied_hub_epoch: state
                .applied
                .as_ref()
                .map(|a| a.hub_epoch.clone())
                .unwrap_or_default(),
            applied_version: state.applied.as_ref().map_or(0, |a| a.version),
            spoke_version: self.config.spoke_version.clone(),
            accepts_parts: true,
            exceptions: Vec::new(),
        };
        // The policy text the announcement was made from: it is parsed again only when
        // that text changes, not on every Job change.
        let mut announced_from = self.cluster.policy().ok().flatten();
        let announced = announce_policy(announced_from.as_deref());
        let request = WatchRequest {
            exceptions: announced.clone(),
            ..request
        };
        // No grpc-timeout on a stream (it would end it); bound only the time to open it.
        let mut stream =
            match tokio::time::timeout(settings.unary_deadline, client.watch(request)).await {
                Ok(Ok(response)) => response.into_inner(),
                Ok(Err(status)) => return fail(SessionError::Open(status)),
                Err(_) => return fail(SessionError::OpenTimeout),
            };
        self.metrics.set_connected(true);
        info!(hub = %self.config.hub_uri, "connected to the hub");

        let check = self.config.tls_check_interval;
        let mut tls_checks = tokio::time::interval_at(Instant::now() + check, check);
        tls_checks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let interval = self.config.report_interval;
        let mut ticks = tokio::time::interval_at(Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut report_at: Option<Instant> = None;
        let mut got_snapshot = false;
        let mut changes_open = true;
        // A snapshot may come in parts; nothing is acted on before the last one.
        let mut parts = Assembler::default();
        // Whether the cluster's API server was seen unreachable since the last retry.
        let mut cluster_was_away = self.cluster.unreachable().is_some();
        loop {
            tokio::select! {
                message = stream.message() => match message {
                    Ok(Some(part)) => {
                        let snapshot = match parts.push(part) {
                            Ok(Some(whole)) => whole,
                            Ok(None) => continue,
                            Err(e) => {
                                // The hub sends each snapshot whole and in order: a broken
                                // one is dropped and the stream started again.
                                warn!(error = %e, "a snapshot part out of place; reconnecting");
                                return SessionEnd {
                                    got_snapshot,
                                    error: SessionError::Stream(Status::data_loss(e.to_string())),
                                };
                            }
                        };
                        self.metrics.snapshot_received(snapshot.assignments.len());
                        self.process(state, snapshot, !got_snapshot).await;
                        got_snapshot = true;
                        self.report(&mut client, state, true).await;
                    }
                    Ok(None) => return SessionEnd { got_snapshot, error: SessionError::Ended },
                    Err(status) => return SessionEnd { got_snapshot, error: SessionError::Stream(status) },
                },
                change = changes.next(), if changes_open => match change {
                    Some(()) => {
                        // The cluster's API server is back: what it could not take is
                        // tried again now, not at the next report tick.
                        let reachable = self.cluster.unreachable().is_none();
                        if reachable
                            && std::mem::take(&mut cluster_was_away)
                            && !state.complete
                            && let Some(snapshot) = state.pending.clone()
                        {
                            info!(version = snapshot.version, "the cluster's API server answers again; retrying the snapshot not fully applied");
                            self.process(state, snapshot, true).await;
                        }
                        cluster_was_away |= !reachable;
                        // A policy changed, or read for the first time after a snapshot
                        // that could not be decided without it.
                        if let Ok(policy) = self.cluster.policy()
                            && state.policy.as_ref() != Some(&policy)
                            && let Some(snapshot) = state.current.clone()
                        {
                            info!(version = snapshot.version, "the spoke policy changed; deciding the snapshot again");
                            self.process(state, snapshot, true).await;
                        }
                        let text = self.cluster.policy().ok().flatten();
                        if text != announced_from {
                            if announce_policy(text.as_deref()) != announced {
                                return SessionEnd { got_snapshot, error: SessionError::Exceptions };
                            }
                            announced_from = text;
                        }
                        report_at.get_or_insert_with(|| Instant::now() + self.config.report_debounce);
                    }
                    None => {
                        warn!("the Job change stream ended; reporting on the timer only");
                        changes_open = false;
                    }
                },
                () = sleep_until(report_at), if report_at.is_some() => {
                    report_at = None;
                    self.report(&mut client, state, false).await;
                }
                _ = tls_checks.tick(), if self.config.tls_files.is_some() => {
                    let (_, cert_now) = self.current_security();
                    if cert_now != cert_used {
                        return SessionEnd { got_snapshot, error: SessionError::Reload };
                    }
                }
                _ = ticks.tick() => {
                    if !state.complete && let Some(snapshot) = state.pending.clone() {
                        info!(version = snapshot.version, "retrying the snapshot not fully applied");
                        self.process(state, snapshot, true).await;
                    } else if self.blockers_changed(state).await
                        && let Some(snapshot) = state.current.clone()
                    {
                        info!(version = snapshot.version, "a name an assignment was refused for changed; applying the snapshot again");
                        self.process(state, snapshot, true).await;
                    }
                    self.report(&mut client, state, true).await;
                }
            }
        }
    }

    /// Applies `snapshot` unless it is the one already fully applied (and not `force`).
    async fn process(&self, state: &mut State, snapshot: Snapshot, force: bool) {
        let id = (snapshot.hub_epoch.clone(), snapshot.version);
        if !force && state.complete && state.last.as_ref() == Some(&id) {
            debug!(hub_epoch = %id.0, version = id.1, "snapshot already applied (heartbeat)");
            return;
        }
        let span = info_span!(
            "snapshot",
            hub_epoch = %snapshot.hub_epoch,
            version = snapshot.version,
            assignments = snapshot.assignments.len(),
            retained = snapshot.retained_keys.len(),
        );
        self.apply_snapshot(state, snapshot).instrument(span).await;
    }

    async fn apply_snapshot(&self, state: &mut State, snapshot: Snapshot) {
        let version = snapshot.version;
        if snapshot.hub_epoch != state.epoch {
            if !state.epoch.is_empty() {
                info!(old = %state.epoch, new = %snapshot.hub_epoch, "new hub epoch (the hub restarted)");
            }
            state.epoch = snapshot.hub_epoch.clone();
            state.acked = 0;
            // Versions of another epoch mean nothing in this one.
            for t in &mut state.tracked {
                t.observed_version = 0;
            }
        }
        state.last = Some((snapshot.hub_epoch.clone(), version));
        state.complete = false;
        state.pending = Some(snapshot.clone());
        state.current = Some(snapshot.clone());
        let me = &self.config.identity;

        let owned = match self.cluster.owned(me).await {
            Ok(owned) => owned,
            Err(e) => {
                self.metrics.error(ErrorKind::List);
                error!(error = %e, "cannot list the spoke's objects; nothing applied or deleted, retrying later");
                return;
            }
        };
        let policy_text = match self.cluster.policy() {
            Ok(text) => text,
            Err(e) => {
                self.metrics.error(ErrorKind::Policy);
                error!(error = %e, "cannot read the spoke policy; nothing applied or deleted, retrying later");
                return;
            }
        };
        let policy = PolicyState::of(policy_text.as_deref());
        if let PolicyState::Invalid(e) = &policy {
            warn!(error = %e, "the spoke policy is not valid: no burst is admitted until it is fixed");
        }
        let mut namespaces = BTreeMap::new();
        for a in &snapshot.assignments {
            let Some(ns) = a.minicluster.as_ref().map(|m| m.namespace.as_str()) else {
                continue;
            };
            if namespaces.contains_key(ns) || ns.is_empty() {
                continue;
            }
            match self.cluster.namespace(ns).await {
                Ok(state) => {
                    namespaces.insert(ns.to_string(), state);
                }
                Err(e) => {
                    self.metrics.error(ErrorKind::Namespace);
                    error!(namespace = %ns, error = %e, "cannot read a burst's namespace; nothing applied or deleted, retrying later");
                    return;
                }
            }
        }
        let running = match self.cluster.jobs().await {
            Ok(jobs) => running_sizes(&jobs, me),
            Err(e) => {
                self.metrics.error(ErrorKind::Jobs);
                error!(error = %e, "cannot read the spoke's Jobs; nothing applied or deleted, retrying later");
                return;
            }
        };
        let cx = Context {
            spoke_namespace: &self.config.namespace,
            policy: &policy,
            namespaces: &namespaces,
            running: &running,
        };
        let plan = plan_snapshot(&snapshot, &owned, &state.memory, me, &cx);
        state.policy = Some(policy_text);
        let previous: BTreeMap<String, Tracked> = std::mem::take(&mut state.tracked)
            .into_iter()
            .map(|t| (t.key.clone(), t))
            .collect();
        let mut failed = false;

        // Missing namespaces of admitted assignments first, once each, with the policy's
        // Pod Security level.
        let mut namespaces: BTreeMap<String, Result<(), String>> = BTreeMap::new();
        for (namespace, level) in &plan.create_namespaces {
            let result = match self.cluster.ensure_namespace(namespace, *level).await {
                Ok(()) => Ok(()),
                Err(e) => {
                    self.metrics.error(ErrorKind::Namespace);
                    error!(%namespace, error = %e, "cannot create the namespace");
                    Err(e.to_string())
                }
            };
            namespaces.insert(namespace.clone(), result);
        }

        let mut tracked = Vec::with_capacity(plan.assignments.len() + plan.removed.len());
        // Keys refused now for a taken name: their older objects are kept, like those of
        // any refused assignment.
        let mut refused_now: BTreeSet<String> = BTreeSet::new();
        for p in plan.assignments {
            let key = p.key;
            let admitted_size = p.admitted_size;
            match p.decision {
                Decision::Apply(realized) => {
                    let result = match namespaces.get(&realized.namespace) {
                        Some(Err(e)) => Err(ApplyError::Failed(e.clone())),
                        _ => {
                            let listed: BTreeSet<&ObjectRef> = owned
                                .iter()
                                .filter(|o| o.key == key)
                                .map(|o| &o.object)
                                .collect();
                            self.apply_objects(&realized, &listed).await
                        }
                    };
                    let job = Some((realized.namespace.clone(), realized.job.clone()));
                    let size = realized.size;
                    match result {
                        Ok(()) => {
                            info!(%key, objects = realized.objects.len(), "assignment applied");
                            state.memory.refused.remove(&key);
                            if let Some(assignment) =
                                snapshot.assignments.iter().find(|a| a.key == key)
                            {
                                state.memory.applied.insert(
                                    key.clone(),
                                    Applied {
                                        assignment: assignment.clone(),
                                        realized: *realized,
                                    },
                                );
                            }
                            tracked.push(Tracked {
                                key,
                                observed_version: version,
                                job,
                                size,
                                outcome: Outcome::Applied,
                                admitted_size,
                            });
                        }
                        Err(ApplyError::Taken(taken)) => {
                            self.metrics.error(ErrorKind::Invalid);
                            let message = name_taken_message(&taken);
                            warn!(%key, reason = NAME_TAKEN, blocking = taken.len(), error = %message, "assignment refused: a name it needs is taken");
                            if let Some(assignment) =
                                snapshot.assignments.iter().find(|a| a.key == key)
                            {
                                tracked.push(refused(
                                    &key,
                                    version,
                                    assignment,
                                    NAME_TAKEN,
                                    &message,
                                    admitted_size,
                                ));
                                state.memory.refused.insert(
                                    key.clone(),
                                    AssignmentRefusal {
                                        assignment: assignment.clone(),
                                        reason: NAME_TAKEN,
                                        message,
                                    },
                                );
                            }
                            state.blockers.insert(key.clone(), taken);
                            refused_now.insert(key);
                        }
                        Err(ApplyError::Failed(message)) => {
                            failed = true;
                            state.memory.applied.remove(&key);
                            let observed_version = previous
                                .get(&key)
                                .filter(|t| {
                                    matches!(t.outcome, Outcome::Applied | Outcome::Failed { .. })
                                })
                                .map_or(0, |t| t.observed_version);
                            tracked.push(Tracked {
                                key,
                                observed_version,
                                job,
                                size,
                                outcome: Outcome::Failed { message },
                                admitted_size,
                            });
                        }
                    }
                }
                Decision::Unchanged => {
                    state.memory.refused.remove(&key);
                    if let Some(applied) = state.memory.applied.get(&key) {
                        let r = &applied.realized;
                        tracked.push(Tracked {
                            key,
                            observed_version: version,
                            job: Some((r.namespace.clone(), r.job.clone())),
                            size: r.size,
                            outcome: Outcome::Applied,
                            admitted_size,
                        });
                    }
                }
                Decision::Refuse(refusal) => {
                    self.metrics.error(ErrorKind::Invalid);
                    warn!(%key, reason = refusal.reason, error = %refusal.message, "assignment refused");
                    tracked.push(refused(
                        &key,
                        version,
                        &refusal.assignment,
                        refusal.reason,
                        &refusal.message,
                        admitted_size,
                    ));
                    state.memory.refused.insert(key, *refusal);
                }
                Decision::StillRefused => {
                    if let Some(r) = state.memory.refused.get(&key) {
                        tracked.push(refused(
                            &key,
                            version,
                            &r.assignment,
                            r.reason,
                            &r.message,
                            admitted_size,
                        ));
                    }
                }
                Decision::Hold(refusal) => {
                    warn!(%key, reason = refusal.reason, error = %refusal.message, "assignment not admitted by the policy; its running objects are kept as they are");
                    let a = &refusal.assignment;
                    let job = match state.memory.applied.get(&key) {
                        Some(applied) => (
                            applied.realized.namespace.clone(),
                            applied.realized.job.clone(),
                        ),
                        None => (
                            a.minicluster
                                .as_ref()
                                .map(|m| m.namespace.clone())
                                .unwrap_or_default(),
                            a.burst_name.clone(),
                        ),
                    };
                    tracked.push(Tracked {
                        key,
                        observed_version: version,
                        job: Some(job),
                        size: a.burst_size,
                        outcome: Outcome::Held {
                            reason: refusal.reason.to_string(),
                            message: refusal.message.clone(),
                        },
                        admitted_size,
                    });
                }
            }
        }

        let mut delete_errors: BTreeMap<String, String> = BTreeMap::new();
        for o in &plan.delete {
            if refused_now.contains(&o.key) && !plan.removed.contains(&o.key) {
                continue;
            }
            match self.cluster.delete(o).await {
                Ok(()) => {
                    self.metrics.deleted(o.object.kind.as_str());
                    info!(object = %o.object, key = %o.key, "deleted");
                }
                Err(e) => {
                    failed = true;
                    self.metrics.error(ErrorKind::Delete);
                    error!(object = %o.object, key = %o.key, error = %e, "delete failed");
                    delete_errors
                        .entry(o.key.clone())
                        .or_insert_with(|| e.to_string());
                }
            }
        }
        // Stale objects of an assignment that could not be pruned.
        for t in &mut tracked {
            if let Some(message) = delete_errors.get(&t.key)
                && t.outcome == Outcome::Applied
            {
                t.outcome = Outcome::Failed {
                    message: message.clone(),
                };
            }
        }
        for key in plan.removed {
            let outcome = match delete_errors.get(&key) {
                Some(message) => Outcome::Deleting {
                    message: message.clone(),
                },
                None => Outcome::Deleted,
            };
            state.memory.applied.remove(&key);
            state.memory.refused.remove(&key);
            tracked.push(Tracked {
                key,
                observed_version: version,
                job: None,
                size: 0,
                outcome,
                admitted_size: None,
            });
        }
        for key in plan.forget {
            state.memory.applied.remove(&key);
            state.memory.refused.remove(&key);
        }
        tracked.sort_by(|a, b| a.key.cmp(&b.key));
        state.tracked = tracked;
        // Blockers matter only while their refusal is remembered.
        let refused = &state.memory.refused;
        state
            .blockers
            .retain(|key, _| refused.get(key).is_some_and(|r| r.reason == NAME_TAKEN));

        if failed {
            warn!(retry_in = ?self.config.report_interval, "snapshot partly applied; retrying");
        } else {
            state.complete = true;
            state.pending = None;
            state.acked = version;
            let applied = AppliedSnapshot {
                hub_epoch: snapshot.hub_epoch.clone(),
                version,
            };
            state.applied = Some(applied.clone());
            self.applied.send_replace(Some(applied));
            self.metrics.snapshot_applied(version);
            info!("snapshot applied");
        }
    }

    /// Applies one assignment's objects in order, stopping at the first error. `listed`:
    /// those of its objects the spoke listed as its own. Every other name is read first,
    /// and if any holds an object the spoke did not make for this assignment, nothing is
    /// written (no half-applied burst).
    async fn apply_objects(
        &self,
        realized: &Realized,
        listed: &BTreeSet<&ObjectRef>,
    ) -> Result<(), ApplyError> {
        let mut ours = Vec::with_capacity(realized.objects.len());
        let mut taken = Vec::new();
        for object in &realized.objects {
            let r = ObjectRef::of(object);
            if listed.contains(&r) {
                ours.push(true);
                continue;
            }
            match self.cluster.inspect(&r).await {
                Ok(None) => ours.push(false),
                // Ours, though not listed (made meanwhile): applied as ours.
                Ok(Some(meta)) if same_owner(&meta, metadata(object)) => ours.push(true),
                Ok(Some(meta)) => taken.push(Taken::new(&r, &meta)),
                Err(e) => {
                    self.metrics.error(ErrorKind::Apply);
                    error!(key = %realized.key, object = %r, error = %e, "cannot check whether the name is free");
                    return Err(ApplyError::Failed(e.to_string()));
                }
            }
        }
        if !taken.is_empty() {
            return Err(ApplyError::Taken(taken));
        }
        for (object, owned) in realized.objects.iter().zip(ours) {
            let kind = Kind::of(object);
            match self.cluster.apply(object, owned).await {
                Ok(()) => self.metrics.applied(kind.as_str()),
                // Taken between the check and the create.
                Err(e) if e.taken.is_some() => {
                    return Err(ApplyError::Taken(e.taken.into_iter().map(|t| *t).collect()));
                }
                Err(e) => {
                    self.metrics.error(ErrorKind::Apply);
                    error!(key = %realized.key, object = %object.describe(), error = %e, "apply failed");
                    return Err(ApplyError::Failed(e.to_string()));
                }
            }
        }
        Ok(())
    }

    /// Reads every object blocking a `NameTaken` refusal; forgets the refusals whose
    /// blocking objects changed or went (so that the next processing examines them again),
    /// and says whether there were any. A read that fails changes nothing.
    async fn blockers_changed(&self, state: &mut State) -> bool {
        let mut changed = Vec::new();
        for (key, taken) in &state.blockers {
            for t in taken {
                match self.cluster.inspect(&t.object).await {
                    Ok(now) if t.changed(now.as_ref()) => {
                        info!(%key, object = %t.object, gone = now.is_none(), "an object blocking an assignment changed");
                        changed.push(key.clone());
                        break;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        debug!(%key, object = %t.object, error = %e, "cannot re-read an object blocking an assignment");
                    }
                }
            }
        }
        for key in &changed {
            state.blockers.remove(key);
            state.memory.refused.remove(key);
        }
        !changed.is_empty()
    }

    /// Sends every tracked status with the acknowledgement: always when `force`, else only
    /// when a status changed since the last accepted report.
    async fn report(&self, client: &mut Client, state: &mut State, force: bool) {
        if state.epoch.is_empty() {
            return;
        }
        let jobs = match self.cluster.jobs().await {
            // Another spoke's Job of the same name says nothing about ours.
            Ok(mut jobs) => {
                jobs.retain(|j| {
                    matches!(
                        ownership(&j.metadata, &self.config.identity),
                        Ownership::Ours { .. }
                    )
                });
                Some(jobs)
            }
            Err(e) => {
                self.metrics.error(ErrorKind::Jobs);
                warn!(error = %e, "cannot read the spoke's Jobs; reporting without their status");
                None
            }
        };
        let statuses = statuses(&state.tracked, jobs.as_deref());
        let access = self.cluster.unreachable().map(cluster_access);
        let sending = (statuses, access);
        if !force && state.last_sent.as_ref() == Some(&sending) {
            return;
        }
        let (statuses, access) = sending;
        let request = ReportRequest {
            hub_epoch: state.epoch.clone(),
            applied_version: state.acked,
            statuses: statuses.clone(),
            cluster_access: access.clone(),
        };
        let applied_version = request.applied_version;
        match client
            .report(self.config.settings.unary_request(request))
            .await
        {
            Ok(_) => {
                self.metrics.report_sent();
                debug!(applied_version, statuses = statuses.len(), "reported");
                state.last_sent = Some((statuses, access));
            }
            Err(status) => {
                self.metrics.error(ErrorKind::Report);
                warn!(code = ?status.code(), error = %status_text(&status), "Report failed; retrying later");
                state.last_sent = None;
            }
        }
    }
}

/// `ClusterAccess` of a report while the API server cannot be reached.
fn cluster_access((since, error): (SystemTime, String)) -> ClusterAccess {
    let millis = since
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    ClusterAccess {
        // 0 means reachable: a clock before 1970 still reports unreachable.
        unreachable_since_unix_millis: millis.max(1),
        error,
    }
}

fn refused(
    key: &str,
    version: u64,
    assignment: &flux_shared::federation::proto::Assignment,
    reason: &str,
    message: &str,
    admitted_size: Option<i32>,
) -> Tracked {
    Tracked {
        key: key.to_string(),
        observed_version: version,
        job: None,
        size: assignment.burst_size,
        outcome: Outcome::Refused {
            reason: reason.to_string(),
            message: message.to_string(),
        },
        admitted_size,
    }
}

/// Brokers each of the spoke's own Jobs runs (its parallelism; 0 when suspended: a burst
/// scaled to 0), by assignment key.
fn running_sizes(jobs: &[Job], me: &SpokeIdentity) -> BTreeMap<String, i32> {
    jobs.iter()
        .filter_map(|j| match ownership(&j.metadata, me) {
            Ownership::Ours { key, .. } => {
                let spec = j.spec.as_ref();
                let size = if spec.and_then(|s| s.suspend) == Some(true) {
                    0
                } else {
                    spec.and_then(|s| s.parallelism).unwrap_or(1)
                };
                Some((key.to_string(), size))
            }
            _ => None,
        })
        .collect()
}

/// The message of a `NameTaken` refusal: every blocking object and who seems to own it.
fn name_taken_message(taken: &[Taken]) -> String {
    let objects: Vec<String> = taken.iter().map(Taken::to_string).collect();
    format!(
        "{NAME_TAKEN}: refusing this burst rather than taking over objects it did not make: {}; delete or rename them, or rename the burst",
        objects.join("; ")
    )
}

/// The statuses of `tracked`; those that depend on a Job are left out when `jobs` could
/// not be read.
fn statuses(tracked: &[Tracked], jobs: Option<&[Job]>) -> Vec<AssignmentStatus> {
    tracked
        .iter()
        .filter_map(|t| {
            let needs_job = matches!(
                t.outcome,
                Outcome::Applied | Outcome::Failed { .. } | Outcome::Held { .. }
            );
            let job = match (needs_job, jobs) {
                (false, _) => None,
                (true, None) => return None,
                (true, Some(jobs)) => t
                    .job
                    .as_ref()
                    .and_then(|(namespace, name)| find_job(jobs, namespace, name)),
            };
            Some(status(t, job))
        })
        .collect()
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Whether an error reads like a TLS handshake or certificate problem (a connection
/// failure, so a closed connection does not count).
fn looks_like_tls(text: &str) -> bool {
    classify_tls_failure(text, false).is_some()
}

/// What the hub is told of the exceptions of the policy `text` (none while the policy is
/// not read or not valid: the hub then refuses what the baseline refuses).
fn announce_policy(text: Option<&str>) -> Vec<flux_shared::federation::proto::NamespaceExceptions> {
    flux_shared::federation::policy::announce(&PolicyState::of(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_skip_job_dependent_entries_without_jobs() {
        let t = |key: &str, outcome| Tracked {
            key: key.into(),
            observed_version: 1,
            job: Some(("ns".into(), key.into())),
            size: 1,
            outcome,
            admitted_size: None,
        };
        let tracked = [t("a", Outcome::Applied), t("b", Outcome::Deleted)];
        let keys = |s: Vec<AssignmentStatus>| s.into_iter().map(|s| s.key).collect::<Vec<_>>();
        assert_eq!(keys(statuses(&tracked, None)), ["b"]);
        assert_eq!(keys(statuses(&tracked, Some(&[]))), ["a", "b"]);
    }
}
