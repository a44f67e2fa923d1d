//! The federation's security over real gRPC: a tiny test hub (tonic, 127.0.0.1, an
//! ephemeral port) that uses the library's TLS settings and authorization helpers, and
//! clients with various certificates.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flux_shared::federation::auth::{ADMIN_HEADER, IdentityInterceptor, SPOKE_HEADER};
use flux_shared::federation::pki::{Ca, IssuedCert};
use flux_shared::federation::proto::admin_client::AdminClient;
use flux_shared::federation::proto::admin_server::{Admin, AdminServer};
use flux_shared::federation::proto::spoke_client::SpokeClient;
use flux_shared::federation::proto::spoke_server::{Spoke, SpokeServer};
use flux_shared::federation::proto::{
    Assignment, AssignmentStatus, BurstPhase, Endpoint, ForgetSpokeRequest, ForgetSpokeResponse,
    ListMiniClustersRequest, ListSpokesRequest, ListSpokesResponse, MiniClusterRef,
    MiniClusterSnapshot, MiniClusterStatus, PinSpokeRequest, PinSpokeResponse, ReportRequest,
    ReportResponse, ScaleBurstRequest, ScaleBurstResponse, Snapshot, SpokeInfo,
    WatchMiniClustersRequest, WatchRequest,
};
use flux_shared::federation::tls::{ClientSecurity, ServerSecurity, TlsPem, TransportSettings};
use flux_shared::federation::{Authenticator, Identity, assignment_key};
use futures::{Stream, StreamExt};
use prost::Message;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Server};
use tonic::{Code, Request, Response, Status};

const HUB_DNS: &str = "hub.flux.test";
const CALL_LIMIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------
// Certificates
// ---------------------------------------------------------------------------------------

struct Pki {
    ca: Ca,
    hub: IssuedCert,
    spoke_a: IssuedCert,
    spoke_b: IssuedCert,
    admin: IssuedCert,
    /// Another CA, and a certificate from it claiming to be spoke `a`.
    other_ca: Ca,
    impostor_a: IssuedCert,
}

impl Pki {
    fn new() -> Pki {
        let ca = Ca::generate("flux-federation test CA").unwrap();
        let hub = ca
            .issue_server(&[HUB_DNS.to_string()], &["127.0.0.1".parse().unwrap()], 1)
            .unwrap();
        let spoke_a = ca.issue_client(&Identity::spoke("a").unwrap(), 1).unwrap();
        let spoke_b = ca.issue_client(&Identity::spoke("b").unwrap(), 1).unwrap();
        let admin = ca
            .issue_client(&Identity::admin("ops").unwrap(), 1)
            .unwrap();
        let other_ca = Ca::generate("someone else's CA").unwrap();
        let impostor_a = other_ca
            .issue_client(&Identity::spoke("a").unwrap(), 1)
            .unwrap();
        Pki {
            ca,
            hub,
            spoke_a,
            spoke_b,
            admin,
            other_ca,
            impostor_a,
        }
    }

    fn server(&self) -> ServerSecurity {
        ServerSecurity::Mtls(pem(&self.ca, &self.hub))
    }

    fn client(&self, leaf: &IssuedCert) -> ClientSecurity {
        ClientSecurity::Mtls {
            tls: pem(&self.ca, leaf),
            domain: HUB_DNS.to_string(),
        }
    }
}

fn pem(ca: &Ca, leaf: &IssuedCert) -> TlsPem {
    TlsPem::new(
        ca.cert_pem().to_string(),
        leaf.cert_pem.clone(),
        leaf.key_pem.clone(),
    )
    .unwrap()
}

// ---------------------------------------------------------------------------------------
// The test hub
// ---------------------------------------------------------------------------------------

/// Serves fixed assignments: spoke `a` runs burst `a` of MiniClusters `one` and `two`,
/// spoke `b` runs burst `b` of `one`. Each MiniCluster has its own curve certificate.
#[derive(Clone)]
struct TestHub {
    auth: Authenticator,
    by_spoke: Arc<BTreeMap<String, Vec<Assignment>>>,
    /// Resend the snapshot (a heartbeat) after this long, then end the stream.
    heartbeat: Option<Duration>,
    /// How long Report takes.
    report_delay: Duration,
    /// Every report received, with the spoke it was authenticated as.
    reports: Arc<Mutex<Vec<(String, ReportRequest)>>>,
}

fn curve_cert(minicluster: &str) -> String {
    format!(
        "#   ****  Generated test certificate  ****\nmetadata\n    name = \"{minicluster}\"\ncurve\n    public-key = \"PUBLIC-{minicluster}\"\n    secret-key = \"SECRET-{minicluster}\"\n"
    )
}

fn assignment(minicluster: &str, burst: &str, index: u32) -> Assignment {
    Assignment {
        key: assignment_key("default", minicluster, burst),
        minicluster: Some(MiniClusterRef {
            namespace: "default".into(),
            name: minicluster.into(),
            uid: format!("uid-{minicluster}"),
            generation: 1,
        }),
        burst_name: burst.into(),
        burst_size: 2,
        burst_index: index,
        minicluster_spec_json: r#"{"size":2}"#.into(),
        curve_cert: curve_cert(minicluster),
        lead_endpoint: Some(Endpoint {
            address: "192.0.2.1".into(),
            port: 30050,
        }),
        broker_toml: "[bootstrap]\n".into(),
        resource_set: "{}".into(),
        shares_with: String::new(),
    }
}

impl TestHub {
    fn new(auth: Authenticator) -> TestHub {
        let mut by_spoke = BTreeMap::new();
        by_spoke.insert(
            "a".to_string(),
            vec![assignment("one", "a", 0), assignment("two", "a", 0)],
        );
        by_spoke.insert("b".to_string(), vec![assignment("one", "b", 1)]);
        TestHub {
            auth,
            by_spoke: Arc::new(by_spoke),
            heartbeat: None,
            report_delay: Duration::ZERO,
            reports: Arc::default(),
        }
    }

    fn snapshot(&self, spoke: &str) -> Snapshot {
        Snapshot {
            hub_epoch: "test-epoch".into(),
            version: 1,
            assignments: self.by_spoke.get(spoke).cloned().unwrap_or_default(),
            retained_keys: vec![],
            ..Snapshot::default()
        }
    }

    fn miniclusters(&self) -> MiniClusterSnapshot {
        let mut by_name: BTreeMap<String, MiniClusterStatus> = BTreeMap::new();
        for assignments in self.by_spoke.values() {
            for a in assignments {
                let mc = a.minicluster.clone().unwrap_or_default();
                by_name
                    .entry(mc.name.clone())
                    .or_insert_with(|| MiniClusterStatus {
                        minicluster: Some(mc),
                        phase: "Running".into(),
                        size: 2,
                        brokers_ready: 2,
                        bursts: vec![],
                        lead_endpoint: None,
                        created_unix_millis: 0,
                    })
                    .bursts
                    .push(flux_shared::federation::proto::BurstStatus {
                        key: a.key.clone(),
                        burst_name: a.burst_name.clone(),
                        spoke: a.burst_name.clone(),
                        size: a.burst_size,
                        ..Default::default()
                    });
            }
        }
        MiniClusterSnapshot {
            hub_epoch: "test-epoch".into(),
            version: 1,
            miniclusters: by_name.into_values().collect(),
        }
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// `first` now, and again after `heartbeat` if set.
fn snapshots<T: Clone + Send + 'static>(first: T, heartbeat: Option<Duration>) -> BoxStream<T> {
    let again = first.clone();
    let now = futures::stream::once(async move { Ok(first) });
    match heartbeat {
        None => Box::pin(now),
        Some(delay) => Box::pin(now.chain(futures::stream::once(async move {
            tokio::time::sleep(delay).await;
            Ok(again)
        }))),
    }
}

#[tonic::async_trait]
impl Spoke for TestHub {
    type WatchStream = BoxStream<Snapshot>;
    type RelayStream = BoxStream<flux_shared::federation::proto::RelayFrame>;

    async fn relay(
        &self,
        _: Request<tonic::Streaming<flux_shared::federation::proto::RelayFrame>>,
    ) -> Result<Response<Self::RelayStream>, Status> {
        Err(Status::unimplemented("this test hub relays nothing"))
    }

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let spoke = self.auth.require_spoke(&request)?;
        Ok(Response::new(snapshots(
            self.snapshot(&spoke),
            self.heartbeat,
        )))
    }

    async fn report(
        &self,
        request: Request<ReportRequest>,
    ) -> Result<Response<ReportResponse>, Status> {
        let spoke = self.auth.require_spoke(&request)?;
        tokio::time::sleep(self.report_delay).await;
        self.reports
            .lock()
            .unwrap()
            .push((spoke, request.into_inner()));
        Ok(Response::new(ReportResponse {}))
    }
}

#[tonic::async_trait]
impl Admin for TestHub {
    async fn list_mini_clusters(
        &self,
        request: Request<ListMiniClustersRequest>,
    ) -> Result<Response<MiniClusterSnapshot>, Status> {
        self.auth.require_admin(&request)?;
        Ok(Response::new(self.miniclusters()))
    }

    type WatchMiniClustersStream = BoxStream<MiniClusterSnapshot>;

    async fn watch_mini_clusters(
        &self,
        request: Request<WatchMiniClustersRequest>,
    ) -> Result<Response<Self::WatchMiniClustersStream>, Status> {
        self.auth.require_admin(&request)?;
        Ok(Response::new(snapshots(self.miniclusters(), None)))
    }

    async fn list_spokes(
        &self,
        request: Request<ListSpokesRequest>,
    ) -> Result<Response<ListSpokesResponse>, Status> {
        self.auth.require_admin(&request)?;
        Ok(Response::new(ListSpokesResponse {
            hub_epoch: "test-epoch".into(),
            hub_version: String::new(),
            hub_protocol_revision: 0,
            hub_certificate_not_after_unix_millis: 0,
            ca_not_after_unix_millis: 0,
            spokes: self
                .by_spoke
                .iter()
                .map(|(name, assignments)| SpokeInfo {
                    name: name.clone(),
                    connected: false,
                    assignments: assignments.len() as u32,
                    ..Default::default()
                })
                .collect(),
        }))
    }

    async fn forget_spoke(
        &self,
        request: Request<ForgetSpokeRequest>,
    ) -> Result<Response<ForgetSpokeResponse>, Status> {
        self.auth.require_admin(&request)?;
        Ok(Response::new(ForgetSpokeResponse {}))
    }

    async fn pin_spoke(
        &self,
        request: Request<PinSpokeRequest>,
    ) -> Result<Response<PinSpokeResponse>, Status> {
        self.auth.require_admin(&request)?;
        Ok(Response::new(PinSpokeResponse::default()))
    }

    async fn scale_burst(
        &self,
        request: Request<ScaleBurstRequest>,
    ) -> Result<Response<ScaleBurstResponse>, Status> {
        self.auth.require_admin(&request)?;
        let size = request.into_inner().size;
        Ok(Response::new(ScaleBurstResponse {
            previous_size: size,
            size,
            ..Default::default()
        }))
    }
}

/// How the test hub's services are wrapped.
#[derive(Clone, Copy, Debug)]
enum Checks {
    /// The library's `spoke_service` / `admin_service` (interceptor + handler checks).
    Full,
    /// Bare generated servers: only the handlers' `require_*` calls protect them.
    HandlersOnly,
}

/// Starts `hub` on 127.0.0.1 with an ephemeral port; it stops when the test runtime does.
async fn serve(
    settings: &TransportSettings,
    security: &ServerSecurity,
    hub: TestHub,
    checks: Checks,
) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut server: Server = settings.server(security).unwrap();
    let auth = security.authenticator();
    let router = match checks {
        Checks::Full => server
            .add_service(settings.spoke_service(hub.clone(), auth))
            .add_service(settings.admin_service(hub, auth)),
        Checks::HandlersOnly => server
            .add_service(SpokeServer::new(hub.clone()))
            .add_service(AdminServer::new(hub)),
    };
    tokio::spawn(router.serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)));
    addr
}

// ---------------------------------------------------------------------------------------
// Clients
// ---------------------------------------------------------------------------------------

type Spokes = SpokeClient<InterceptedService<Channel, IdentityInterceptor>>;
type Admins = AdminClient<InterceptedService<Channel, IdentityInterceptor>>;

/// Connects; a connection error becomes a string.
async fn channel(
    settings: &TransportSettings,
    addr: SocketAddr,
    security: &ClientSecurity,
) -> Result<Channel, String> {
    let scheme = match security {
        ClientSecurity::Mtls { .. } => "https",
        ClientSecurity::InsecureDevelopment(_) => "http",
    };
    let endpoint = settings
        .endpoint(&format!("{scheme}://{addr}"), security)
        .map_err(|e| e.to_string())?;
    tokio::time::timeout(CALL_LIMIT, endpoint.connect())
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| format!("connect: {e:?}"))
}

async fn spoke_client(
    settings: &TransportSettings,
    addr: SocketAddr,
    security: &ClientSecurity,
) -> Result<Spokes, String> {
    let channel = channel(settings, addr, security).await?;
    Ok(SpokeClient::with_interceptor(
        channel,
        security.interceptor(),
    ))
}

async fn admin_client(
    settings: &TransportSettings,
    addr: SocketAddr,
    security: &ClientSecurity,
) -> Result<Admins, String> {
    let channel = channel(settings, addr, security).await?;
    Ok(AdminClient::with_interceptor(
        channel,
        security.interceptor(),
    ))
}

/// Why a call failed: the status code when the hub answered, or the connection error.
#[derive(Debug)]
#[allow(
    dead_code,
    reason = "the details are read through Debug, in failure messages"
)]
enum Refusal {
    Status(Code, String),
    Connection(String),
}

impl From<Status> for Refusal {
    fn from(s: Status) -> Refusal {
        // Debug includes the source chain (TLS alerts).
        Refusal::Status(s.code(), format!("{s:?}"))
    }
}

/// Opens a Watch and returns its first snapshot.
async fn first_snapshot(
    settings: &TransportSettings,
    addr: SocketAddr,
    security: &ClientSecurity,
    request: Request<WatchRequest>,
) -> Result<Snapshot, Refusal> {
    let mut client = spoke_client(settings, addr, security)
        .await
        .map_err(Refusal::Connection)?;
    let call = async {
        let mut stream = client.watch(request).await?.into_inner();
        stream
            .message()
            .await?
            .ok_or_else(|| Status::internal("stream ended without a snapshot"))
    };
    tokio::time::timeout(CALL_LIMIT, call)
        .await
        .map_err(|_| Refusal::Connection("timed out".into()))?
        .map_err(Refusal::from)
}

async fn watch_as(addr: SocketAddr, security: &ClientSecurity) -> Result<Snapshot, Refusal> {
    first_snapshot(
        &TransportSettings::default(),
        addr,
        security,
        Request::new(WatchRequest::default()),
    )
    .await
}

/// Calls every Admin method (ScaleBurst to size 2); each must give the same result kind.
async fn admin_calls(addr: SocketAddr, security: &ClientSecurity) -> Vec<Result<usize, Refusal>> {
    let settings = TransportSettings::default();
    let mut client = match admin_client(&settings, addr, security).await {
        Ok(c) => c,
        Err(e) => return vec![Err(Refusal::Connection(e))],
    };
    let list = client
        .list_mini_clusters(settings.unary_request(ListMiniClustersRequest::default()))
        .await
        .map(|r| r.into_inner().miniclusters.len())
        .map_err(Refusal::from);
    let watch = async {
        let mut stream = client
            .watch_mini_clusters(WatchMiniClustersRequest::default())
            .await?
            .into_inner();
        Ok::<_, Status>(stream.message().await?.map_or(0, |s| s.miniclusters.len()))
    }
    .await
    .map_err(Refusal::from);
    let spokes = client
        .list_spokes(settings.unary_request(ListSpokesRequest {}))
        .await
        .map(|r| r.into_inner().spokes.len())
        .map_err(Refusal::from);
    let scale = client
        .scale_burst(settings.unary_request(ScaleBurstRequest {
            namespace: "hpc".into(),
            name: "m".into(),
            burst: "b".into(),
            size: 2,
        }))
        .await
        .map(|r| usize::try_from(r.into_inner().size).unwrap_or(0))
        .map_err(Refusal::from);
    vec![list, watch, spokes, scale]
}

fn keys(snapshot: &Snapshot) -> Vec<&str> {
    snapshot
        .assignments
        .iter()
        .map(|a| a.key.as_str())
        .collect()
}

fn contains(snapshot: &Snapshot, needle: &str) -> bool {
    let bytes = snapshot.encode_to_vec();
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The call failed (connection or status) with `needle` somewhere in the error chain.
fn assert_refused<T: std::fmt::Debug>(result: Result<T, Refusal>, needle: &str) {
    let text = format!("{result:?}");
    assert!(
        result.is_err() && text.contains(needle),
        "expected {needle:?}, got {text}"
    );
}

fn assert_code<T: std::fmt::Debug>(result: Result<T, Refusal>, code: Code) {
    match result {
        Err(Refusal::Status(got, _)) if got == code => {}
        other => panic!("expected {code:?}, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn each_spoke_receives_only_its_own_assignments_and_curve_certs() {
    let pki = Pki::new();
    let settings = TransportSettings::default();
    for checks in [Checks::Full, Checks::HandlersOnly] {
        let security = pki.server();
        let addr = serve(
            &settings,
            &security,
            TestHub::new(Authenticator::Mtls),
            checks,
        )
        .await;

        let a = watch_as(addr, &pki.client(&pki.spoke_a)).await.unwrap();
        assert_eq!(a.hub_epoch, "test-epoch");
        assert_eq!(keys(&a), ["default/one/a", "default/two/a"], "{checks:?}");
        assert!(contains(&a, "SECRET-one") && contains(&a, "SECRET-two"));
        assert!(!contains(&a, "default/one/b"));

        let b = watch_as(addr, &pki.client(&pki.spoke_b)).await.unwrap();
        assert_eq!(keys(&b), ["default/one/b"], "{checks:?}");
        assert!(
            !contains(&b, "SECRET-two"),
            "b must not see two's curve cert"
        );
        assert!(!contains(&b, "/a"));

        // Headers cannot override the certificate in mTLS mode.
        let mut spoofed = Request::new(WatchRequest::default());
        spoofed
            .metadata_mut()
            .insert(SPOKE_HEADER, "b".parse().unwrap());
        let still_a = first_snapshot(&settings, addr, &pki.client(&pki.spoke_a), spoofed)
            .await
            .unwrap();
        assert_eq!(keys(&still_a), keys(&a));
    }
}

#[tokio::test]
async fn spokes_can_report() {
    let pki = Pki::new();
    let settings = TransportSettings::default();
    let security = pki.server();
    let hub = TestHub::new(Authenticator::Mtls);
    let addr = serve(&settings, &security, hub.clone(), Checks::Full).await;
    let mut client = spoke_client(&settings, addr, &pki.client(&pki.spoke_a))
        .await
        .unwrap();
    let report = ReportRequest {
        room: None,
        root_reach: None,
        hub_epoch: "test-epoch".into(),
        applied_version: 1,
        statuses: vec![AssignmentStatus {
            key: "default/one/a".into(),
            observed_version: 1,
            phase: BurstPhase::Running.into(),
            brokers_ready: 2,
            size: 2,
            conditions: vec![],
            message: String::new(),
            brokers_draining: 1,
            reason: "TooManyBrokers".into(),
            admitted_size: Some(2),
        }],
        cluster_access: None,
    };
    client
        .report(settings.unary_request(report.clone()))
        .await
        .unwrap();
    // The hub got the report whole, attributed to the spoke its certificate names.
    let received = hub.reports.lock().unwrap().clone();
    assert_eq!(received, [("a".to_string(), report)]);
}

#[tokio::test]
async fn admin_certificates_may_call_admin_and_spoke_certificates_may_not() {
    let pki = Pki::new();
    let settings = TransportSettings::default();
    for checks in [Checks::Full, Checks::HandlersOnly] {
        let security = pki.server();
        let addr = serve(
            &settings,
            &security,
            TestHub::new(Authenticator::Mtls),
            checks,
        )
        .await;

        let results = admin_calls(addr, &pki.client(&pki.admin)).await;
        let counts: Vec<usize> = results.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            counts,
            [2, 2, 2, 2],
            "{checks:?}: 2 MiniClusters, 2 spokes, scaled to 2"
        );

        for result in admin_calls(addr, &pki.client(&pki.spoke_a)).await {
            assert_code(result, Code::PermissionDenied);
        }
        // And an admin certificate cannot watch as a spoke.
        assert_code(
            watch_as(addr, &pki.client(&pki.admin)).await,
            Code::PermissionDenied,
        );
    }
}

#[tokio::test]
async fn clients_without_a_valid_client_certificate_are_refused() {
    let pki = Pki::new();
    let settings = TransportSettings::default();
    let security = pki.server();
    let addr = serve(
        &settings,
        &security,
        TestHub::new(Authenticator::Mtls),
        Checks::Full,
    )
    .await;

    // TLS that trusts the hub but presents no certificate: the handshake fails.
    let endpoint = tonic::transport::Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(pki.ca.cert_pem()))
                .domain_name(HUB_DNS),
        )
        .unwrap();
    let anonymous = async {
        let channel = endpoint.connect().await.map_err(|e| e.to_string())?;
        SpokeClient::new(channel)
            .watch(WatchRequest::default())
            .await
            .map_err(|s| format!("{s:?}"))
    };
    let result = tokio::time::timeout(CALL_LIMIT, anonymous).await.unwrap();
    let err = result.expect_err("a client without a certificate was served");
    assert!(err.contains("CertificateRequired"), "{err}");

    // A certificate for spoke "a" from another CA.
    let impostor = ClientSecurity::Mtls {
        tls: pem(&pki.ca, &pki.impostor_a),
        domain: HUB_DNS.to_string(),
    };
    assert_refused(watch_as(addr, &impostor).await, "alert: UnknownCA");

    // The hub's own certificate (serverAuth only) cannot be used as a client certificate.
    assert_refused(
        watch_as(addr, &pki.client(&pki.hub)).await,
        "alert: UnsupportedCertificate",
    );

    // A plaintext client cannot talk to the TLS hub, headers or not.
    let result = watch_as(
        addr,
        &ClientSecurity::InsecureDevelopment(Identity::spoke("a").unwrap()),
    )
    .await;
    assert!(
        result.is_err(),
        "plaintext reached the mTLS hub: {result:?}"
    );
}

#[tokio::test]
async fn clients_verify_the_hub_certificate() {
    let pki = Pki::new();
    let settings = TransportSettings::default();
    let security = pki.server();
    let addr = serve(
        &settings,
        &security,
        TestHub::new(Authenticator::Mtls),
        Checks::Full,
    )
    .await;

    // Trusting another CA: the hub's certificate does not verify.
    let wrong_ca = ClientSecurity::Mtls {
        tls: TlsPem::new(
            pki.other_ca.cert_pem().to_string(),
            pki.spoke_a.cert_pem.clone(),
            pki.spoke_a.key_pem.clone(),
        )
        .unwrap(),
        domain: HUB_DNS.to_string(),
    };
    assert_refused(watch_as(addr, &wrong_ca).await, "UnknownIssuer");

    // Expecting a name the hub's certificate does not carry.
    let wrong_name = ClientSecurity::Mtls {
        tls: pem(&pki.ca, &pki.spoke_a),
        domain: "other.flux.test".to_string(),
    };
    assert_refused(watch_as(addr, &wrong_name).await, "NotValidForName");

    // The IP SAN works as the name too.
    let by_ip = ClientSecurity::Mtls {
        tls: pem(&pki.ca, &pki.spoke_a),
        domain: "127.0.0.1".to_string(),
    };
    assert_eq!(keys(&watch_as(addr, &by_ip).await.unwrap()).len(), 2);

    // A "hub" presenting a client certificate (clientAuth only) is refused by clients.
    let fake_hub = ServerSecurity::Mtls(pem(&pki.ca, &pki.spoke_b));
    let fake = serve(
        &settings,
        &fake_hub,
        TestHub::new(Authenticator::Mtls),
        Checks::Full,
    )
    .await;
    let spoofing = ClientSecurity::Mtls {
        tls: pem(&pki.ca, &pki.spoke_a),
        domain: "b".to_string(),
    };
    assert_refused(watch_as(fake, &spoofing).await, "InvalidPurpose");
}

#[tokio::test]
async fn insecure_mode_works_only_when_explicitly_enabled() {
    let settings = TransportSettings::default();
    let spoke_a = ClientSecurity::InsecureDevelopment(Identity::spoke("a").unwrap());
    let admin = ClientSecurity::InsecureDevelopment(Identity::admin("ops").unwrap());

    // A plaintext hub that opted in believes the headers.
    let insecure = ServerSecurity::InsecureDevelopment;
    assert_eq!(insecure.authenticator(), Authenticator::InsecureDevelopment);
    let addr = serve(
        &settings,
        &insecure,
        TestHub::new(insecure.authenticator()),
        Checks::Full,
    )
    .await;
    assert_eq!(
        keys(&watch_as(addr, &spoke_a).await.unwrap()),
        ["default/one/a", "default/two/a"]
    );
    for result in admin_calls(addr, &admin).await {
        assert_eq!(result.unwrap(), 2);
    }
    for result in admin_calls(addr, &spoke_a).await {
        assert_code(result, Code::PermissionDenied);
    }
    // No header, or both: unauthenticated.
    let mut anonymous = SpokeClient::new(
        settings
            .endpoint(&format!("http://{addr}"), &spoke_a)
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    assert_eq!(
        anonymous
            .watch(WatchRequest::default())
            .await
            .unwrap_err()
            .code(),
        Code::Unauthenticated
    );
    let mut both = Request::new(WatchRequest::default());
    both.metadata_mut()
        .insert(SPOKE_HEADER, "a".parse().unwrap());
    both.metadata_mut()
        .insert(ADMIN_HEADER, "a".parse().unwrap());
    assert_eq!(
        anonymous.watch(both).await.unwrap_err().code(),
        Code::Unauthenticated
    );

    // A plaintext server whose authenticator was not switched to insecure mode refuses
    // everyone: without a certificate there is no identity.
    for checks in [Checks::Full, Checks::HandlersOnly] {
        let addr = serve(
            &settings,
            &insecure,
            TestHub::new(Authenticator::Mtls),
            checks,
        )
        .await;
        assert_code(watch_as(addr, &spoke_a).await, Code::Unauthenticated);
        for result in admin_calls(addr, &admin).await {
            assert_code(result, Code::Unauthenticated);
        }
    }

    // Security modes and URI schemes must agree: mTLS never silently falls back to
    // plaintext for an http:// URI.
    let pki = Pki::new();
    assert!(
        settings
            .endpoint("http://127.0.0.1:1", &pki.client(&pki.spoke_a))
            .is_err()
    );
    assert!(settings.endpoint("https://127.0.0.1:1", &spoke_a).is_err());
}

#[tokio::test]
async fn unary_calls_have_deadlines_but_watch_streams_outlive_them() {
    let pki = Pki::new();
    let settings = TransportSettings {
        unary_deadline: Duration::from_millis(300),
        ..TransportSettings::RECOMMENDED
    };
    let security = pki.server();
    let mut hub = TestHub::new(Authenticator::Mtls);
    hub.heartbeat = Some(Duration::from_millis(900));
    hub.report_delay = Duration::from_secs(5);
    let addr = serve(&settings, &security, hub, Checks::Full).await;
    let mut client = spoke_client(&settings, addr, &pki.client(&pki.spoke_a))
        .await
        .unwrap();

    // The stream is still delivering after three unary deadlines.
    let mut stream = client
        .watch(WatchRequest::default())
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    let second = tokio::time::timeout(CALL_LIMIT, stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (first.version, second.version),
        (1, 1),
        "a heartbeat resends the snapshot"
    );

    // A slow Report is cut off at the deadline.
    let started = Instant::now();
    let err = client
        .report(settings.unary_request(ReportRequest::default()))
        .await
        .unwrap_err();
    assert!(
        matches!(err.code(), Code::Cancelled | Code::DeadlineExceeded),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn recommended_settings_match_the_design() {
    let s = TransportSettings::default();
    assert_eq!(s.tls_handshake_timeout, Duration::from_secs(5));
    assert_eq!(s.server_keepalive_interval, Duration::from_secs(30));
    assert_eq!(s.server_keepalive_timeout, Duration::from_secs(10));
    assert_eq!(s.client_keepalive_interval, Duration::from_secs(20));
    assert_eq!(s.client_keepalive_timeout, Duration::from_secs(10));
    assert_eq!(s.connect_timeout, Duration::from_secs(5));
    assert_eq!(s.max_decoding_message_size, 4 << 20);
    assert_eq!(s.unary_deadline, Duration::from_secs(10));
    // The client pings more often than the server so NAT idle timeouts never fire first,
    // and neither pings more often than every 5 s (what gRPC servers commonly enforce).
    assert!(s.client_keepalive_interval < s.server_keepalive_interval);
    assert!(s.client_keepalive_interval >= Duration::from_secs(5));
}

#[test]
fn the_descriptor_set_describes_both_services() {
    // The set is binary protobuf; the names in it are plain UTF-8.
    let set = String::from_utf8_lossy(flux_shared::federation::proto::FILE_DESCRIPTOR_SET);
    for needle in [
        "flux.federation.v1",
        "Spoke",
        "Admin",
        "Watch",
        "ListSpokes",
    ] {
        assert!(set.contains(needle), "{needle}");
    }
}
