//! The spoke agent: dial the hub, consume `Watch` snapshots, make the cluster match each
//! one, and report how every assignment is doing.
//!
//! One task runs everything (snapshots, Job changes, the report timer) so the state needs
//! no locks; the decisions themselves are the pure functions of [`crate::admit`].
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
//! * Nothing is reported, and no snapshot applied again, in a connection before its first
//!   snapshot is applied: the hub may have placed bursts elsewhere meanwhile, and that
//!   snapshot deletes them before the hub hears anything of them.
//! * A direct burst is fenced (its Job deleted, module `fence`) once neither the hub nor
//!   its lead broker was heard for [`AgentConfig::fence_after`], connected or not; the
//!   agent then reconnects, and only a snapshot that still lists the burst creates it anew.
//! * Reconnects forever: exponential backoff with jitter (`backon`), from
//!   [`AgentConfig::min_reconnect_delay`] to [`AgentConfig::max_reconnect_delay`] (jitter
//!   adds up to 100 %), reset after a connection that delivered a snapshot. A refusal (a
//!   certificate, a protocol revision) is retried after
//!   [`AgentConfig::refused_retry_delay`].
//!
//! The agent keeps the connection and hands each snapshot to its
//! [`Applier`](crate::apply::Applier) (named steps around the decisions) and each report
//! to its [`Reporter`](crate::report::Reporter); this file holds the single task and its
//! state machine (connect, snapshot, Job changes, reports), which the guarantees above are
//! about, and the state it lends them.
//!
//! Size: a little over 600 lines: the one task's state machine reads best whole.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use flux_shared::federation::diagnostics::{
    classify_tls_failure, error_chain, is_access_denied, status_text,
};
use flux_shared::federation::ownership::SpokeIdentity;
use flux_shared::federation::parts::Assembler;
use flux_shared::federation::policy::PolicyState;
use flux_shared::federation::proto::spoke_client::SpokeClient;
use flux_shared::federation::proto::{Snapshot, WatchRequest};
use flux_shared::federation::tls::{ClientSecurity, TlsError, TlsPem};
use futures::{Stream, StreamExt};
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::task::AbortOnDropHandle;
use tonic::{Code, Status};
use tracing::{Instrument, debug, error, info, info_span, warn};

use crate::agent_config::AgentConfig;
use crate::apply::Applier;
use crate::cluster::Cluster;
use crate::fence::Fencing;
use crate::metrics::{ErrorKind, Metrics};
use crate::relay_listeners::HubConnections;
use crate::report::Reporter;
use crate::state::{AppliedSnapshot, State};

type Changes = Pin<Box<dyn Stream<Item = ()> + Send>>;

/// The agent. Build it with [`Agent::new`], keep what you need of [`Agent::applied`] and
/// [`Agent::metrics`], then [`Agent::run`] it.
pub struct Agent<C: Cluster> {
    config: AgentConfig,
    cluster: C,
    metrics: Arc<Metrics>,
    /// Makes the cluster match each snapshot.
    applier: Applier<C>,
    /// Tells the hub how the assignments are doing.
    reporter: Reporter<C>,
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

/// Why a connection ended.
#[derive(Debug)]
enum SessionError {
    /// The hub URI or TLS settings are unusable.
    Endpoint(TlsError),
    /// TCP or TLS connection failed.
    Connect(tonic::transport::Error),
    /// The Watch call was refused.
    Open(Status),
    /// The hub speaks a protocol revision this spoke does not serve: nothing it sends is
    /// read.
    HubRevision(String),
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
    /// A burst was fenced: reconnect, so that only the first snapshot of a new connection
    /// creates it anew.
    Fenced,
}

/// How long a spoke waits for its policy's first read before it announces what it knows.
const POLICY_READ_WAIT: Duration = Duration::from_secs(30);

impl<C: Cluster> Agent<C> {
    /// Waits until the policy has been read (its watch's first listing), at most
    /// [`POLICY_READ_WAIT`].
    async fn policy_read(&self, changes: &mut Changes) {
        if self.cluster.policy_known() {
            return;
        }
        let deadline = Instant::now() + POLICY_READ_WAIT;
        while !self.cluster.policy_known() {
            tokio::select! {
                // An ended stream disables this branch; the timer still polls.
                Some(()) = changes.next() => {}
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
                () = tokio::time::sleep_until(deadline) => {
                    warn!(waited = ?POLICY_READ_WAIT, "the spoke policy is not read yet; announcing none");
                    return;
                }
            }
        }
    }
}

/// Why the hub and this spoke do not speak to each other, when that is what ended a
/// session: this spoke refused the hub's revision, or the hub refused this spoke's.
fn protocol_refusal(error: &SessionError) -> Option<String> {
    match error {
        SessionError::HubRevision(text) => Some(text.clone()),
        SessionError::Open(status)
            if status.code() == Code::FailedPrecondition
                && status.message().contains("protocol revision") =>
        {
            Some(format!("the hub refused this spoke: {}", status.message()))
        }
        _ => None,
    }
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
            applier: Applier::new(&config, cluster.clone(), Arc::clone(&metrics)),
            reporter: Reporter::new(&config, cluster.clone(), Arc::clone(&metrics)),
            config,
            cluster,
            metrics,
            last_good_tls: std::sync::Mutex::new(None),
        }
    }

    /// The last snapshot fully applied (`None` until the first one): readiness, and a way
    /// for tests to wait for progress.
    pub fn applied(&self) -> watch::Receiver<Option<AppliedSnapshot>> {
        self.applier.applied()
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
        let mut state = State {
            lead_reach: crate::lead_reach::LeadReach::new(self.config.lead_unreachable_after),
            fencing: Fencing::new(self.config.fence_after, std::time::Instant::now()),
            ..State::default()
        };
        // Fences are carried out beside the connection: they matter most without one.
        let _fences = AbortOnDropHandle::new(tokio::spawn(crate::fence::carry_out(
            state.fencing.clone(),
            self.cluster.clone(),
            self.config.identity.clone(),
            Arc::clone(&self.metrics),
        )));
        let builder = ExponentialBuilder::default()
            .with_jitter()
            .with_min_delay(self.config.min_reconnect_delay)
            .with_max_delay(self.config.max_reconnect_delay)
            .without_max_times();
        let mut backoff = builder.build();
        if matches!(self.config.security, ClientSecurity::InsecureDevelopment(_)) {
            warn!(hub = %self.config.hub_uri, "INSECURE development mode: plaintext, no certificates");
        }
        // The last protocol refusal put in an Event: one per new reason, not one per retry.
        let mut skew_said: Option<String> = None;
        loop {
            let end = tokio::select! {
                end = self.session(&mut state, &mut changes) => end,
                () = &mut shutdown => break,
            };
            match protocol_refusal(&end.error) {
                Some(text) if skew_said.as_deref() != Some(text.as_str()) => {
                    self.cluster.warn_about_spoke("ProtocolSkew", text.clone());
                    skew_said = Some(text);
                }
                Some(_) => {}
                None if end.got_snapshot => skew_said = None,
                None => {}
            }
            // Relayed connections need the hub: new ones are closed until it is back.
            state.relays.use_client(None);
            self.metrics.set_connected(false);
            if end.got_snapshot {
                backoff = builder.build();
            }
            let (kind, retry) = self.explain(&end.error);
            // The one place a session's errors are counted, under the step that failed.
            if let Some(kind) = kind {
                self.metrics.error(kind);
            }
            let delay = match retry {
                Retry::Backoff => backoff.next().unwrap_or(self.config.max_reconnect_delay),
                Retry::Slow => self
                    .config
                    .refused_retry_delay
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

    /// Logs why a connection ended; says what to count it as (`None`: not an error) and
    /// how soon to retry.
    fn explain(&self, error: &SessionError) -> (Option<ErrorKind>, Retry) {
        let hub = &self.config.hub_uri;
        match error {
            SessionError::Endpoint(e) => {
                error!(%hub, error = %e, "cannot use the hub address");
                (Some(ErrorKind::Connect), Retry::Slow)
            }
            SessionError::Connect(e) => {
                let text = error_chain(e);
                let retry = if is_access_denied(&text) {
                    self.revoked(hub, &text);
                    Retry::Slow
                } else if looks_like_tls(&text) {
                    error!(%hub, error = %text, "TLS handshake with the hub failed: check --ca (the federation CA), --cert/--key (a spoke certificate from that CA) and --hub-domain (a name in the hub's certificate)");
                    Retry::Slow
                } else {
                    warn!(%hub, error = %text, "cannot reach the hub");
                    Retry::Backoff
                };
                (Some(ErrorKind::Connect), retry)
            }
            SessionError::Open(status) | SessionError::Stream(status) => {
                let text = status_text(status);
                match status.code() {
                    _ if is_access_denied(&text) => {
                        self.revoked(hub, &text);
                        (Some(ErrorKind::Auth), Retry::Slow)
                    }
                    Code::Unauthenticated | Code::PermissionDenied => {
                        error!(%hub, code = ?status.code(), error = %text, "the hub refused this spoke's certificate: it must be a spoke certificate (spiffe://flux-framework.org/spoke/<name>) issued by the hub's CA; retrying slowly");
                        (Some(ErrorKind::Auth), Retry::Slow)
                    }
                    _ if looks_like_tls(&text) => {
                        error!(%hub, error = %text, "TLS with the hub failed (certificate refused?): check --ca, --cert/--key and --hub-domain; retrying slowly");
                        (Some(ErrorKind::Auth), Retry::Slow)
                    }
                    Code::FailedPrecondition if protocol_refusal(error).is_some() => {
                        error!(%hub, error = %text, "the hub refuses this spoke's protocol revision; retrying slowly (docs/operations.md, Upgrading)");
                        (Some(ErrorKind::Protocol), Retry::Slow)
                    }
                    Code::AlreadyExists if matches!(error, SessionError::Open(_)) => {
                        warn!(%hub, error = %text, "the hub already serves a stream under this spoke's name: another process may be using this certificate (if this spoke just reconnected, the retry succeeds once the hub sees the old connection end)");
                        (Some(ErrorKind::Stream), Retry::Backoff)
                    }
                    Code::Unavailable if matches!(error, SessionError::Open(_)) => {
                        info!(%hub, reason = %text, "the hub is not serving assignments yet; retrying");
                        (Some(ErrorKind::NotReady), Retry::Backoff)
                    }
                    code => {
                        warn!(%hub, ?code, error = %text, "the Watch stream failed; reconnecting");
                        (Some(ErrorKind::Stream), Retry::Backoff)
                    }
                }
            }
            SessionError::HubRevision(text) => {
                error!(%hub, error = %text, "not reading the hub's snapshots: its protocol revision is outside this spoke's window; retrying slowly (docs/operations.md, Upgrading)");
                (Some(ErrorKind::Protocol), Retry::Slow)
            }
            SessionError::OpenTimeout => {
                warn!(%hub, deadline = ?self.config.settings.unary_deadline, "the hub did not answer Watch in time; reconnecting");
                (Some(ErrorKind::Stream), Retry::Backoff)
            }
            SessionError::Ended => {
                info!(%hub, "the hub ended the Watch stream; reconnecting");
                (None, Retry::Backoff)
            }
            SessionError::Reload => {
                info!(%hub, "the certificate files changed; reconnecting with them");
                (None, Retry::Backoff)
            }
            SessionError::Exceptions => {
                info!(%hub, "the policy's exceptions changed; reconnecting to tell the hub");
                (None, Retry::Backoff)
            }
            SessionError::Fenced => {
                info!(%hub, "a burst was fenced while the hub was silent; reconnecting");
                (None, Retry::Backoff)
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
        // The policy's exceptions are announced with the Watch: not before the policy is
        // read, or the hub would take them for none and refuse the running bursts that
        // need them (seen as Running bursts turned Invalid while a spoke restarted).
        self.policy_read(changes).await;
        // The policy text the announcement was made from: it is parsed again only when
        // that text changes, not on every Job change.
        let mut announced_from = self.cluster.policy().ok().flatten();
        let announced = announce_policy(announced_from.as_deref());
        let request = WatchRequest {
            applied_hub_epoch: state
                .applied
                .as_ref()
                .map(|a| a.hub_epoch.clone())
                .unwrap_or_default(),
            applied_version: state.applied.as_ref().map_or(0, |a| a.version),
            spoke_version: self.config.spoke_version.clone(),
            accepts_parts: true,
            accepts_shared_specs: true,
            exceptions: announced.clone(),
            labels: self.config.labels.clone().into_iter().collect(),
        };
        // No grpc-timeout on a stream (it would end it); bound only the time to open it.
        let mut stream =
            match tokio::time::timeout(settings.unary_deadline, client.watch(request)).await {
                Ok(Ok(response)) => {
                    // Before any snapshot is read: a hub outside this spoke's window is
                    // not misread.
                    let hub = flux_shared::federation::protocol::check_peer(response.metadata());
                    if let Err(e) = hub {
                        return fail(SessionError::HubRevision(e.explain("the hub", "spoke")));
                    }
                    state.fencing.heard_hub(std::time::Instant::now());
                    response.into_inner()
                }
                Ok(Err(status)) => return fail(SessionError::Open(status)),
                Err(_) => return fail(SessionError::OpenTimeout),
            };
        self.metrics.set_connected(true);
        let relay_client = {
            let interceptor = security.interceptor();
            let most = settings.max_decoding_message_size;
            move || {
                SpokeClient::with_interceptor(endpoint.connect_lazy(), interceptor.clone())
                    .max_decoding_message_size(most)
                    .max_encoding_message_size(most)
            }
        };
        state.relays.use_client(Some(Arc::new(HubConnections::new(
            client.clone(),
            relay_client,
        ))));
        info!(hub = %self.config.hub_uri, "connected to the hub");

        let check = self.config.tls_check_interval;
        let mut tls_checks = tokio::time::interval_at(Instant::now() + check, check);
        tls_checks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let interval = self.config.report_interval;
        let mut ticks = tokio::time::interval_at(Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let room_every = self.config.room_interval;
        let mut room_ticks = tokio::time::interval_at(Instant::now() + room_every, room_every);
        room_ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // While connected the hub is heard at least this often (its answers to reports),
        // so that a hub that answers never looks silent to fencing.
        let contact_every = (self.config.fence_after / 3).max(Duration::from_millis(10));
        let mut contact = tokio::time::interval_at(Instant::now() + contact_every, contact_every);
        contact.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut report_at: Option<Instant> = None;
        let mut lead_changes = state.lead_reach.changes();
        let mut fences = state.fencing.carried();
        // Nothing is reported or applied again before the first snapshot of this
        // connection is applied: it may delete bursts placed elsewhere meanwhile.
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
                        state.fencing.heard_hub(std::time::Instant::now());
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
                        self.reporter.report(&mut client, state, true).await;
                    }
                    Ok(None) => return SessionEnd { got_snapshot, error: SessionError::Ended },
                    Err(status) => return SessionEnd { got_snapshot, error: SessionError::Stream(status) },
                },
                change = changes.next(), if changes_open => match change {
                    Some(()) => {
                        // The cluster's API server is back: what it could not take is
                        // tried again now, not at the next report tick.
                        let reachable = self.cluster.unreachable().is_none();
                        if got_snapshot
                            && reachable
                            && std::mem::take(&mut cluster_was_away)
                            && !state.complete
                            && let Some(snapshot) = state.pending.clone()
                        {
                            info!(version = snapshot.version, "the cluster's API server answers again; retrying the snapshot not fully applied");
                            self.process(state, snapshot, true).await;
                        }
                        cluster_was_away |= !reachable;
                        // A Job replaced for a new path is gone: created anew now, not at
                        // the next report tick.
                        if got_snapshot
                            && !state.complete
                            && self.applier.replaced_gone(state).await
                            && let Some(snapshot) = state.pending.clone()
                        {
                            info!(version = snapshot.version, "a Job replaced for a new path to the lead broker is gone; creating it anew");
                            self.process(state, snapshot, true).await;
                        }
                        // A policy changed, or read for the first time after a snapshot
                        // that could not be decided without it.
                        if got_snapshot
                            && let Ok(policy) = self.cluster.policy()
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
                // A burst's lead broker answers, or stopped answering: said soon.
                Ok(()) = lead_changes.changed() => {
                    report_at.get_or_insert_with(|| Instant::now() + self.config.report_debounce);
                }
                () = sleep_until(report_at), if report_at.is_some() => {
                    report_at = None;
                    // Before the first snapshot: its own report follows it.
                    if got_snapshot {
                        self.reporter.report(&mut client, state, false).await;
                    }
                }
                Ok(()) = fences.changed() => {
                    return SessionEnd { got_snapshot, error: SessionError::Fenced };
                }
                _ = contact.tick() => {
                    let now = std::time::Instant::now();
                    if got_snapshot && state.fencing.hub_silent(now) >= contact_every {
                        self.reporter.report(&mut client, state, true).await;
                    }
                }
                // The room is measured this often and reported when it changed.
                _ = room_ticks.tick() => {
                    state.room_nodes = Some((std::time::SystemTime::now(), self.cluster.room()));
                    report_at.get_or_insert_with(|| Instant::now() + self.config.report_debounce);
                }
                _ = tls_checks.tick(), if self.config.tls_files.is_some() => {
                    let (_, cert_now) = self.current_security();
                    if cert_now != cert_used {
                        return SessionEnd { got_snapshot, error: SessionError::Reload };
                    }
                }
                _ = ticks.tick(), if got_snapshot => {
                    if !state.complete && let Some(snapshot) = state.pending.clone() {
                        info!(version = snapshot.version, "retrying the snapshot not fully applied");
                        self.process(state, snapshot, true).await;
                    } else if self.applier.blockers_changed(state).await
                        && let Some(snapshot) = state.current.clone()
                    {
                        info!(version = snapshot.version, "a name an assignment was refused for changed; applying the snapshot again");
                        self.process(state, snapshot, true).await;
                    }
                    self.reporter.report(&mut client, state, true).await;
                }
            }
        }
    }

    /// Hands `snapshot` to the applier unless it is the one already fully applied (and
    /// not `force`): a heartbeat changes nothing.
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
        self.applier.apply(state, snapshot).instrument(span).await;
    }
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
