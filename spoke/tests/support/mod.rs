//! What the agent tests share: a small in-process hub (tonic over loopback mutual TLS,
//! the library's transport settings and authorization) that serves snapshots and records
//! what it heard, certificates for it and the spoke, the real [`Agent`] running against a
//! [`FakeCluster`], and helpers to wait and to build snapshots.

// Each test crate uses some of these.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flux_shared::federation::assignment::realize;
use flux_shared::federation::ownership::{SpokeIdentity, federation_id};
use flux_shared::federation::pki::{Ca, IssuedCert};
use flux_shared::federation::proto::spoke_server::Spoke;
use flux_shared::federation::proto::{
    Assignment, AssignmentStatus, BurstPhase, ReportRequest, ReportResponse, Snapshot, WatchRequest,
};
use flux_shared::federation::tls::{ClientSecurity, ServerSecurity, TlsPem, TransportSettings};
use flux_shared::federation::{Authenticator, Identity};
use flux_spoke::cluster::ObjectRef;
use flux_spoke::testing::{FakeCluster, sample_assignments, sample_identity};
use flux_spoke::{Agent, AgentConfig, AppliedSnapshot, Metrics};
use futures::{Stream, StreamExt};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_stream::wrappers::WatchStream;
use tonic::{Request, Response, Status};

pub const HUB_DNS: &str = "hub.flux.test";
pub const SPOKE: &str = "gke";
/// How long any expected progress may take before a test fails.
pub const PATIENCE: Duration = Duration::from_secs(30);
// ---------------------------------------------------------------------------------------
// Certificates
// ---------------------------------------------------------------------------------------

pub struct Pki {
    pub ca: Ca,
    pub hub: IssuedCert,
    pub spoke: IssuedCert,
    pub admin: IssuedCert,
}

impl Pki {
    pub fn new() -> Pki {
        let ca = Ca::generate("flux-spoke test CA").unwrap();
        let hub = ca
            .issue_server(&[HUB_DNS.to_string()], &["127.0.0.1".parse().unwrap()], 1)
            .unwrap();
        let spoke = ca
            .issue_client(&Identity::spoke(SPOKE).unwrap(), 1)
            .unwrap();
        let admin = ca
            .issue_client(&Identity::admin("ops").unwrap(), 1)
            .unwrap();
        Pki {
            ca,
            hub,
            spoke,
            admin,
        }
    }

    /// Who the agent running with the spoke certificate is.
    pub fn me(&self) -> SpokeIdentity {
        SpokeIdentity {
            name: SPOKE.into(),
            federation: federation_id(self.ca.cert_pem()).unwrap(),
        }
    }

    pub fn pem(&self, leaf: &IssuedCert) -> TlsPem {
        TlsPem::new(
            self.ca.cert_pem().to_string(),
            leaf.cert_pem.clone(),
            leaf.key_pem.clone(),
        )
        .unwrap()
    }
}

// ---------------------------------------------------------------------------------------
// The fake hub
// ---------------------------------------------------------------------------------------

/// What the hub serves and what it heard. A test that restarts the hub gives the new
/// server a new state, as a real restarted hub starts with nothing of the old one's.
#[derive(Clone)]
pub struct HubState {
    pub snapshots: Arc<watch::Sender<Snapshot>>,
    /// Bumping it makes every open Watch stream fail with an error status.
    pub breaks: Arc<watch::Sender<u64>>,
    pub watches: Arc<Mutex<Vec<(String, WatchRequest)>>>,
    /// The certificate (PEM of its DER, as a fingerprint) each Watch was made with.
    pub watch_certs: Arc<Mutex<Vec<Vec<u8>>>>,
    pub reports: Arc<Mutex<Vec<(String, ReportRequest)>>>,
    /// The relayed connections: calling spoke, burst named.
    pub relays: Arc<Mutex<Vec<(String, String)>>>,
    /// While true, a Watch stream opens but sends no snapshot before it is false again.
    pub held: Arc<watch::Sender<bool>>,
    /// The protocol revision each Watch declared (`None`: no header).
    pub watch_revisions: Arc<Mutex<Vec<Option<String>>>>,
    /// The revision this hub answers with (`None`: no header, as release 0.1.0).
    pub revision: Arc<Mutex<Option<String>>>,
}

impl HubState {
    pub fn new(first: Snapshot) -> HubState {
        HubState {
            snapshots: Arc::new(watch::channel(first).0),
            breaks: Arc::new(watch::channel(0).0),
            watches: Arc::default(),
            watch_certs: Arc::default(),
            reports: Arc::default(),
            relays: Arc::default(),
            held: Arc::new(watch::channel(false).0),
            watch_revisions: Arc::default(),
            revision: Arc::new(Mutex::new(Some(
                flux_shared::federation::protocol::REVISION.to_string(),
            ))),
        }
    }

    /// The revision the hub answers Watch with from now on (`None`: no header).
    pub fn answer_revision(&self, revision: Option<&str>) {
        *self.revision.lock().unwrap() = revision.map(str::to_string);
    }

    /// Whether Watch streams opened from now on wait before their first snapshot.
    pub fn hold(&self, held: bool) {
        self.held.send_replace(held);
    }

    /// Sends `snapshot` on every open stream (and to every later one).
    pub fn publish(&self, snapshot: Snapshot) {
        self.snapshots.send_replace(snapshot);
    }

    pub fn break_streams(&self) {
        self.breaks.send_modify(|n| *n += 1);
    }

    pub fn reports(&self) -> Vec<ReportRequest> {
        self.reports
            .lock()
            .unwrap()
            .iter()
            .map(|(_, r)| r.clone())
            .collect()
    }

    pub fn watches(&self) -> Vec<WatchRequest> {
        self.watches
            .lock()
            .unwrap()
            .iter()
            .map(|(_, w)| w.clone())
            .collect()
    }

    /// How many reports the hub has received so far.
    pub fn report_count(&self) -> usize {
        self.reports.lock().unwrap().len()
    }

    /// The first report after the first `seen` ones that satisfies `check`.
    pub async fn report_where(
        &self,
        seen: usize,
        what: &str,
        check: impl Fn(&ReportRequest) -> bool,
    ) -> ReportRequest {
        eventually(what, || {
            self.reports().into_iter().skip(seen).find(|r| check(r))
        })
        .await
    }

    /// The first report ever received that acknowledges `epoch`/`version`.
    pub async fn ack(&self, epoch: &str, version: u64) -> ReportRequest {
        eventually(&format!("an acknowledgement of {epoch}/{version}"), || {
            self.reports()
                .into_iter()
                .find(|r| r.hub_epoch == epoch && r.applied_version == version)
        })
        .await
    }
}

pub type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[derive(Clone)]
pub struct HubService {
    pub state: HubState,
    pub auth: Authenticator,
    pub stop: watch::Receiver<bool>,
}

#[tonic::async_trait]
impl Spoke for HubService {
    type WatchStream = BoxStream<Snapshot>;
    type RelayStream = BoxStream<flux_shared::federation::proto::RelayFrame>;

    /// An echoing lead broker: every frame comes back as it went; the burst the call
    /// names is recorded.
    async fn relay(
        &self,
        request: Request<tonic::Streaming<flux_shared::federation::proto::RelayFrame>>,
    ) -> Result<Response<Self::RelayStream>, Status> {
        let spoke = self.auth.require_spoke(&request)?;
        let key = request
            .metadata()
            .get(flux_shared::federation::RELAY_KEY)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        self.state.relays.lock().unwrap().push((spoke, key));
        Ok(Response::new(Box::pin(request.into_inner())))
    }

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let spoke = self.auth.require_spoke(&request)?;
        self.state.watch_revisions.lock().unwrap().push(
            request
                .metadata()
                .get(flux_shared::federation::protocol::REVISION_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        );
        if let Some(leaf) = request.peer_certs().and_then(|c| c.first().cloned()) {
            self.state
                .watch_certs
                .lock()
                .unwrap()
                .push(leaf.as_ref().to_vec());
        }
        self.state
            .watches
            .lock()
            .unwrap()
            .push((spoke, request.into_inner()));
        let mut held = self.state.held.subscribe();
        let latest = self.state.snapshots.subscribe();
        let snapshots = futures::stream::once(async move {
            let _ = held.wait_for(|h| !*h).await;
        })
        .flat_map(move |()| WatchStream::new(latest.clone()))
        .map(Ok);
        let breaks = WatchStream::from_changes(self.state.breaks.subscribe())
            .map(|_| Err(Status::internal("stream broken by the test")));
        let mut stop = self.stop.clone();
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        let mut response = Response::new(Box::pin(
            futures::stream::select(snapshots, breaks).take_until(stopped),
        ) as Self::WatchStream);
        if let Some(r) = self.state.revision.lock().unwrap().as_deref() {
            response.metadata_mut().insert(
                flux_shared::federation::protocol::REVISION_HEADER,
                r.parse().unwrap(),
            );
        }
        Ok(response)
    }

    async fn report(
        &self,
        request: Request<ReportRequest>,
    ) -> Result<Response<ReportResponse>, Status> {
        let spoke = self.auth.require_spoke(&request)?;
        self.state
            .reports
            .lock()
            .unwrap()
            .push((spoke, request.into_inner()));
        Ok(Response::new(ReportResponse {}))
    }
}

/// A hub serving `state` on `addr` (port 0: any free port) until stopped.
pub struct RunningHub {
    pub addr: SocketAddr,
    pub stop: watch::Sender<bool>,
    pub task: JoinHandle<()>,
}

impl RunningHub {
    pub async fn start(pki: &Pki, state: &HubState, addr: SocketAddr) -> RunningHub {
        let settings = TransportSettings::default();
        let security = ServerSecurity::Mtls(pki.pem(&pki.hub));
        let listener = bind_eventually(addr).await;
        let addr = listener.local_addr().unwrap();
        let (stop, stop_rx) = watch::channel(false);
        let service = HubService {
            state: state.clone(),
            auth: security.authenticator(),
            stop: stop_rx.clone(),
        };
        let router = settings
            .server(&security)
            .unwrap()
            .add_service(settings.spoke_service(service, security.authenticator()));
        let mut shutdown = stop_rx;
        let task = tokio::spawn(async move {
            router
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    async move {
                        let _ = shutdown.wait_for(|s| *s).await;
                    },
                )
                .await
                .unwrap();
        });
        RunningHub { addr, stop, task }
    }

    /// Ends every stream, stops serving and waits until the port is closed.
    pub async fn stop(self) {
        self.stop.send_replace(true);
        tokio::time::timeout(PATIENCE, self.task)
            .await
            .expect("the hub stops")
            .unwrap();
    }
}

/// Binds `addr`, retrying for a while (a just-closed port can be briefly unavailable).
pub async fn bind_eventually(addr: SocketAddr) -> tokio::net::TcpListener {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) if Instant::now() < deadline => {
                eprintln!("binding {addr}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("binding {addr}: {e}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The agent under test
// ---------------------------------------------------------------------------------------

pub struct RunningAgent {
    pub applied: watch::Receiver<Option<AppliedSnapshot>>,
    pub metrics: Arc<Metrics>,
    pub stop: oneshot::Sender<()>,
    pub task: JoinHandle<()>,
}

impl RunningAgent {
    pub fn start(
        pki: &Pki,
        leaf: &IssuedCert,
        addr: SocketAddr,
        cluster: &FakeCluster,
        report_interval: Duration,
    ) -> RunningAgent {
        Self::start_with(pki, leaf, addr, cluster, report_interval, None)
    }

    /// [`RunningAgent::start`] with pods reaching the spoke at `relay_address`.
    pub fn start_with(
        pki: &Pki,
        leaf: &IssuedCert,
        addr: SocketAddr,
        cluster: &FakeCluster,
        report_interval: Duration,
        relay_address: Option<std::net::IpAddr>,
    ) -> RunningAgent {
        Self::start_configured(pki, leaf, addr, cluster, |config| {
            config.report_interval = report_interval;
            config.relay_address = relay_address;
        })
    }

    /// An agent with the spoke certificate, dialling with `leaf`, reporting every hour,
    /// its configuration then changed by `configure`.
    pub fn start_configured(
        pki: &Pki,
        leaf: &IssuedCert,
        addr: SocketAddr,
        cluster: &FakeCluster,
        configure: impl FnOnce(&mut AgentConfig),
    ) -> RunningAgent {
        let security = |leaf| ClientSecurity::Mtls {
            tls: pki.pem(leaf),
            domain: HUB_DNS.to_string(),
        };
        // The spoke's identity (on its objects) is the spoke certificate's; it dials with
        // `leaf`, which may be a certificate the hub refuses.
        let mut config = AgentConfig {
            report_interval: LONG,
            spoke_version: "test-version".into(),
            security: security(leaf),
            // Failures are reported at once (a real spoke waits out a starting lead).
            lead_unreachable_after: Duration::ZERO,
            ..AgentConfig::new(format!("https://{addr}"), security(&pki.spoke)).unwrap()
        };
        configure(&mut config);
        let agent = Agent::new(config, cluster.clone(), Arc::new(Metrics::new()));
        let applied = agent.applied();
        let metrics = agent.metrics();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(agent.run(async move {
            let _ = stopped.await;
        }));
        RunningAgent {
            applied,
            metrics,
            stop,
            task,
        }
    }

    /// Asks the agent to stop and waits until it has.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(PATIENCE, self.task)
            .await
            .expect("the agent stops on shutdown")
            .unwrap();
    }

    /// The value of one metric line (`name{labels}`), 0 when absent.
    pub fn metric(&self, series: &str) -> f64 {
        self.metrics
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    }
}

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// Polls `check` until it yields a value, failing the test after [`PATIENCE`].
pub async fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn snapshot(epoch: &str, version: u64, assignments: Vec<Assignment>) -> Snapshot {
    Snapshot {
        hub_epoch: epoch.into(),
        version,
        assignments,
        retained_keys: vec![],
        ..Snapshot::default()
    }
}

/// The one assignment of burst `burst` (size `size`) of MiniCluster `hpc/<mc>`.
pub fn assignment(mc: &str, burst: &str, size: i32) -> Assignment {
    sample_assignments("hpc", mc, &[(burst, size)]).remove(0)
}

/// The objects an assignment becomes (their names do not depend on the spoke).
pub fn refs_of(a: &Assignment) -> BTreeSet<ObjectRef> {
    realize(a, &sample_identity(SPOKE))
        .unwrap()
        .objects
        .iter()
        .map(ObjectRef::of)
        .collect()
}

pub fn status<'a>(report: &'a ReportRequest, key: &str) -> Option<&'a AssignmentStatus> {
    report.statuses.iter().find(|s| s.key == key)
}

pub fn phase_of(report: &ReportRequest, key: &str) -> Option<BurstPhase> {
    status(report, key).and_then(|s| BurstPhase::try_from(s.phase).ok())
}

pub fn any_port() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

pub const LONG: Duration = Duration::from_secs(3600);
