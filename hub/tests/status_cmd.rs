//! The admin commands `flux-hub status` and `flux-hub burst scale`, run as the real binary
//! against a fake hub: a tonic `Admin` server on
//! 127.0.0.1 with real mutual TLS (certificates from `flux_shared::federation::pki`), or
//! plaintext for `--insecure`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flux_shared::federation::pki::{Ca, IssuedCert};
use flux_shared::federation::proto::admin_server::Admin;
use flux_shared::federation::proto::{
    BurstPhase, BurstStatus, Endpoint, ForgetSpokeRequest, ForgetSpokeResponse,
    ListMiniClustersRequest, ListSpokesRequest, ListSpokesResponse, MiniClusterRef,
    MiniClusterSnapshot, MiniClusterStatus, PinSpokeRequest, PinSpokeResponse, ScaleBurstRequest,
    ScaleBurstResponse, SpokeInfo, WatchMiniClustersRequest,
};
use flux_shared::federation::tls::{ServerSecurity, TlsPem, TransportSettings};
use flux_shared::federation::{Authenticator, Identity};
use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tonic::{Request, Response, Status};

/// Generous bound on one run of the binary (a debug build on a loaded machine).
const RUN_LIMIT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------
// Certificates on disk
// ---------------------------------------------------------------------------------------

struct Pki {
    ca: Ca,
    hub: IssuedCert,
    dir: PathBuf,
}

impl Pki {
    /// A CA, the hub's certificate (localhost, 127.0.0.1), and in `dir`: `ca.crt`, admin
    /// `ops`, spoke `a`, and an admin `ops` from another CA (`impostor`).
    fn new(test: &str) -> Pki {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("status-{test}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ca = Ca::generate("status test CA").unwrap();
        let hub = ca
            .issue_server(&["localhost".into()], &["127.0.0.1".parse().unwrap()], 1)
            .unwrap();
        std::fs::write(dir.join("ca.crt"), ca.cert_pem()).unwrap();
        let write = |stem: &str, cert: IssuedCert| {
            std::fs::write(dir.join(format!("{stem}.crt")), &cert.cert_pem).unwrap();
            std::fs::write(dir.join(format!("{stem}.key")), &cert.key_pem).unwrap();
        };
        write(
            "admin-ops",
            ca.issue_client(&Identity::admin("ops").unwrap(), 1)
                .unwrap(),
        );
        write(
            "spoke-a",
            ca.issue_client(&Identity::spoke("a").unwrap(), 1).unwrap(),
        );
        let other = Ca::generate("someone else's CA").unwrap();
        write(
            "impostor",
            other
                .issue_client(&Identity::admin("ops").unwrap(), 1)
                .unwrap(),
        );
        Pki { ca, hub, dir }
    }

    fn server(&self) -> ServerSecurity {
        ServerSecurity::Mtls(
            TlsPem::new(
                self.ca.cert_pem().to_string(),
                self.hub.cert_pem.clone(),
                self.hub.key_pem.clone(),
            )
            .unwrap(),
        )
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// `--ca --cert --key` for the certificate `<stem>.crt`.
    fn flags(&self, stem: &str) -> Vec<String> {
        vec![
            "--ca".into(),
            self.path("ca.crt"),
            "--cert".into(),
            self.path(&format!("{stem}.crt")),
            "--key".into(),
            self.path(&format!("{stem}.key")),
        ]
    }
}

// ---------------------------------------------------------------------------------------
// The fake hub
// ---------------------------------------------------------------------------------------

/// Answers ListMiniClusters with its last snapshot, WatchMiniClusters with every snapshot
/// in turn (then keeps the stream open), ListSpokes with fixed spokes; records who called
/// with which namespace.
#[derive(Clone)]
struct FakeHub {
    auth: Authenticator,
    snapshots: Arc<Vec<MiniClusterSnapshot>>,
    spokes: ListSpokesResponse,
    calls: Arc<Mutex<Vec<(String, String)>>>,
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn minicluster(ns: &str, name: &str) -> Option<MiniClusterRef> {
    Some(MiniClusterRef {
        namespace: ns.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        generation: 2,
    })
}

/// Version `version` of the hub's state: bursting `hpc/bursty` (one burst on spoke `gke`
/// that reported 90 minutes ago, one on `kind` never reported) and `default/hello`.
fn snapshot(version: u64) -> MiniClusterSnapshot {
    MiniClusterSnapshot {
        hub_epoch: "epoch-1".into(),
        version,
        miniclusters: vec![
            MiniClusterStatus {
                minicluster: minicluster("default", "hello"),
                phase: "Running".into(),
                size: 4,
                brokers_ready: 4,
                bursts: vec![],
                lead_endpoint: None,
                created_unix_millis: now_millis() - 3 * 86_400_000,
            },
            MiniClusterStatus {
                minicluster: minicluster("hpc", "bursty"),
                phase: "Running".into(),
                size: 2,
                brokers_ready: 1,
                lead_endpoint: Some(Endpoint {
                    address: "192.0.2.7".into(),
                    port: 30093,
                }),
                created_unix_millis: now_millis() - 2 * 3_600_000 - 60_000,
                bursts: vec![
                    BurstStatus {
                        skipped: Vec::new(),
                        key: "hpc/bursty/burst-gke".into(),
                        burst_name: "burst-gke".into(),
                        spoke: "gke".into(),
                        spoke_connected: true,
                        size: 4,
                        max_size: 6,
                        brokers_ready: 3,
                        phase: BurstPhase::Applied.into(),
                        assigned_version: version,
                        observed_version: version - 1,
                        conditions: vec![],
                        message: "3 of 4 brokers ready".into(),
                        last_report_unix_millis: now_millis() - 90 * 60_000,
                        reason: String::new(),
                        admitted_size: Some(6),
                        path: "Relay".into(),
                        path_reason: "SpokeMeasured".into(),
                        brokers_joined: Some(0),
                        hub_phase: "Joining".into(),
                    },
                    BurstStatus {
                        key: "hpc/bursty/burst-kind".into(),
                        burst_name: "burst-kind".into(),
                        spoke: "kind".into(),
                        spoke_connected: false,
                        size: 2,
                        max_size: 2,
                        ..Default::default()
                    },
                ],
            },
        ],
    }
}

fn spokes() -> ListSpokesResponse {
    ListSpokesResponse {
        hub_epoch: "epoch-1".into(),
        hub_version: "0.1.0".into(),
        // As a hub of release 0.1.0 answers: no protocol revision (1).
        hub_protocol_revision: 0,
        hub_certificate_not_after_unix_millis: 0,
        ca_not_after_unix_millis: 0,
        spokes: vec![
            SpokeInfo {
                name: "gke".into(),
                connected: true,
                last_seen_unix_millis: now_millis() - 90 * 60_000,
                current_version: 4,
                acknowledged_version: 3,
                assignments: 1,
                spoke_version: "0.1.0".into(),
                ..Default::default()
            },
            SpokeInfo {
                name: "kind".into(),
                connected: false,
                last_seen_unix_millis: 0,
                current_version: 1,
                acknowledged_version: 0,
                assignments: 1,
                spoke_version: String::new(),
                ..Default::default()
            },
        ],
    }
}

impl FakeHub {
    fn new(auth: Authenticator, snapshots: Vec<MiniClusterSnapshot>) -> FakeHub {
        FakeHub {
            auth,
            snapshots: Arc::new(snapshots),
            spokes: spokes(),
            calls: Arc::default(),
        }
    }

    fn record<T>(&self, request: &Request<T>, namespace: &str) -> Result<(), Status> {
        let admin = self.auth.require_admin(request)?;
        self.calls
            .lock()
            .unwrap()
            .push((admin, namespace.to_string()));
        Ok(())
    }

    fn filtered(snapshot: &MiniClusterSnapshot, namespace: &str) -> MiniClusterSnapshot {
        let mut s = snapshot.clone();
        s.miniclusters.retain(|mc| {
            namespace.is_empty() || mc.minicluster.as_ref().unwrap().namespace == namespace
        });
        s
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl Admin for FakeHub {
    async fn list_mini_clusters(
        &self,
        request: Request<ListMiniClustersRequest>,
    ) -> Result<Response<MiniClusterSnapshot>, Status> {
        let namespace = request.get_ref().namespace.clone();
        self.record(&request, &namespace)?;
        let last = self.snapshots.last().cloned().unwrap_or_default();
        Ok(Response::new(Self::filtered(&last, &namespace)))
    }

    type WatchMiniClustersStream = BoxStream<MiniClusterSnapshot>;

    async fn watch_mini_clusters(
        &self,
        request: Request<WatchMiniClustersRequest>,
    ) -> Result<Response<Self::WatchMiniClustersStream>, Status> {
        let namespace = request.get_ref().namespace.clone();
        self.record(&request, &namespace)?;
        // Each snapshot, then a heartbeat (the same one again), 300 ms apart; then the
        // stream stays open like the real hub's.
        let items: Vec<MiniClusterSnapshot> = self
            .snapshots
            .iter()
            .flat_map(|s| {
                let s = Self::filtered(s, &namespace);
                [s.clone(), s]
            })
            .collect();
        let stream = futures::stream::iter(items)
            .then(|s| async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok(s)
            })
            .chain(futures::stream::pending());
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_spokes(
        &self,
        request: Request<ListSpokesRequest>,
    ) -> Result<Response<ListSpokesResponse>, Status> {
        self.record(&request, "")?;
        Ok(Response::new(self.spokes.clone()))
    }

    async fn forget_spoke(
        &self,
        request: Request<ForgetSpokeRequest>,
    ) -> Result<Response<ForgetSpokeResponse>, Status> {
        let name = request.get_ref().name.clone();
        self.record(&request, &format!("forget {name}"))?;
        Ok(Response::new(ForgetSpokeResponse {}))
    }

    async fn pin_spoke(
        &self,
        request: Request<PinSpokeRequest>,
    ) -> Result<Response<PinSpokeResponse>, Status> {
        let name = request.get_ref().name.clone();
        self.record(&request, &format!("pin {name}"))?;
        Ok(Response::new(PinSpokeResponse::default()))
    }

    async fn scale_burst(
        &self,
        request: Request<ScaleBurstRequest>,
    ) -> Result<Response<ScaleBurstResponse>, Status> {
        let req = request.get_ref().clone();
        self.record(
            &request,
            &format!("{}/{} {}={}", req.namespace, req.name, req.burst, req.size),
        )?;
        if req.size > 4 {
            return Err(Status::failed_precondition(format!(
                "SizeAboveMaximum: spec.flux.bursting.clusters[0].size: {} is above the maximum size 4",
                req.size
            )));
        }
        Ok(Response::new(ScaleBurstResponse {
            previous_size: 1,
            size: req.size,
            max_size: 4,
            generation: 7,
            spoke: "gke".into(),
        }))
    }
}

/// Serves `hub` on 127.0.0.1 with an ephemeral port until the test's runtime ends.
async fn serve(security: &ServerSecurity, hub: FakeHub) -> SocketAddr {
    let settings = TransportSettings::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = settings
        .server(security)
        .unwrap()
        .add_service(settings.admin_service(hub, security.authenticator()));
    tokio::spawn(router.serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)));
    addr
}

// ---------------------------------------------------------------------------------------
// Running the binary
// ---------------------------------------------------------------------------------------

fn command(args: &[String]) -> tokio::process::Command {
    subcommand(&["status"], args)
}

fn subcommand(words: &[&str], args: &[String]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_flux-hub"));
    cmd.args(words)
        .args(args)
        .env_remove("FLUX_HUB")
        .env_remove("FLUX_CA")
        .env_remove("FLUX_CERT")
        .env_remove("FLUX_KEY")
        .env_remove("FLUX_HUB_CONTEXT")
        // No user's admin context leaks in; a test that wants one sets its own.
        .env("FLUX_HUB_CONFIG", "/nonexistent/flux-hub-config.yaml")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

async fn status(args: &[String]) -> Output {
    tokio::time::timeout(RUN_LIMIT, command(args).output())
        .await
        .expect("flux-hub status did not finish")
        .expect("run flux-hub status")
}

async fn burst_scale(args: &[String]) -> Output {
    tokio::time::timeout(RUN_LIMIT, subcommand(&["burst", "scale"], args).output())
        .await
        .expect("flux-hub burst scale did not finish")
        .expect("run flux-hub burst scale")
}

fn args(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "flux-hub status failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        stdout(out),
        stderr(out)
    );
}

/// Exit status 1 and every needle in stderr, nothing on stdout.
fn assert_fails_with(out: &Output, needles: &[&str]) {
    let err = stderr(out);
    eprintln!("flux-hub status said: {err}");
    assert_eq!(out.status.code(), Some(1), "exit status; stderr:\n{err}");
    for needle in needles {
        assert!(err.contains(needle), "{needle:?} not in stderr:\n{err}");
    }
    assert!(out.stdout.is_empty(), "stdout: {}", stdout(out));
}

fn hub_url(addr: SocketAddr) -> String {
    format!("https://{addr}")
}

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

/// With no connection flags, the admin context gives the hub and the certificates: the
/// current one, or the one --hub-context names; without a context the error says how to
/// get one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_context_replaces_the_connection_flags() {
    let pki = Pki::new("context");
    let hub = FakeHub::new(Authenticator::Mtls, vec![snapshot(4)]);
    let addr = serve(&pki.server(), hub.clone()).await;
    let file = pki.dir.join("flux-hub-config.yaml");
    let context = |name: &str, url: &str| {
        format!(
            "  - name: {name}\n    hub: {url}\n    ca: {}\n    cert: {}\n    key: {}\n",
            pki.path("ca.crt"),
            pki.path("admin-ops.crt"),
            pki.path("admin-ops.key")
        )
    };
    std::fs::write(
        &file,
        format!(
            "current: root\ncontexts:\n{}{}",
            context("root", &hub_url(addr)),
            context("gone", "https://127.0.0.1:1")
        ),
    )
    .unwrap();
    let with_context = |extra: &[&str]| {
        let mut cmd = command(&args(extra));
        cmd.env("FLUX_HUB_CONFIG", &file);
        cmd
    };
    let out = with_context(&["-o", "json"]).output().await.unwrap();
    assert_success(&out);
    let v: Value = serde_json::from_str(&stdout(&out)).expect("one JSON document");
    assert_eq!(v["version"], 4);
    let out = with_context(&["--hub-context", "gone"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("https://127.0.0.1:1"),
        "the named context is used: {}",
        stderr(&out)
    );
    let out = status(&args(&[])).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out)
            .contains("no admin context in /nonexistent/flux-hub-config.yaml (flux-hub init"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lists_miniclusters_bursts_and_spokes() {
    let pki = Pki::new("json");
    let hub = FakeHub::new(Authenticator::Mtls, vec![snapshot(4)]);
    let addr = serve(&pki.server(), hub.clone()).await;

    let mut a = args(&["--hub", &hub_url(addr), "-o", "json"]);
    a.extend(pki.flags("admin-ops"));
    let out = status(&a).await;
    assert_success(&out);
    let v: Value = serde_json::from_str(&stdout(&out)).expect("one JSON document");

    assert_eq!(v["schemaVersion"], 1);
    assert_eq!(v["hubEpoch"], "epoch-1");
    assert_eq!(v["version"], 4);
    let mcs = v["miniClusters"].as_array().unwrap();
    assert_eq!(mcs.len(), 2);
    assert_eq!(mcs[0]["namespace"], "default");
    assert_eq!(mcs[0]["name"], "hello");
    assert_eq!(mcs[0]["bursts"], serde_json::json!([]));
    assert_eq!(mcs[0]["leadEndpoint"], Value::Null);
    let bursty = &mcs[1];
    assert_eq!(bursty["name"], "bursty");
    assert_eq!(bursty["phase"], "Running");
    assert_eq!(
        (bursty["brokersReady"].clone(), bursty["size"].clone()),
        (1.into(), 2.into())
    );
    assert_eq!(
        bursty["leadEndpoint"],
        serde_json::json!({"address": "192.0.2.7", "port": 30093})
    );
    let gke = &bursty["bursts"][0];
    assert_eq!(gke["key"], "hpc/bursty/burst-gke");
    assert_eq!(gke["name"], "burst-gke");
    assert_eq!(gke["spoke"], "gke");
    assert_eq!(gke["spokeConnected"], true);
    assert_eq!(gke["phase"], "Pending");
    assert_eq!(gke["brokersReady"], 3);
    assert_eq!(gke["assignedVersion"], 4);
    assert_eq!(gke["observedVersion"], 3);
    assert_eq!(gke["message"], "3 of 4 brokers ready");
    assert!(gke["lastReportUnixMillis"].as_i64().unwrap() > 0);
    let kind = &bursty["bursts"][1];
    assert_eq!(kind["phase"], "Unreported");
    assert_eq!(kind["spokeConnected"], false);
    assert_eq!(kind["lastReportUnixMillis"], Value::Null);

    let spokes = v["spokes"].as_array().unwrap();
    assert_eq!(spokes.len(), 2);
    assert_eq!(spokes[0]["name"], "gke");
    assert_eq!(spokes[0]["connected"], true);
    assert_eq!(spokes[0]["acknowledgedVersion"], 3);
    assert_eq!(spokes[0]["currentVersion"], 4);
    assert_eq!(spokes[0]["spokeVersion"], "0.1.0");
    assert_eq!(spokes[1]["lastSeenUnixMillis"], Value::Null);

    // Both calls were made as admin "ops", for every namespace.
    let calls = hub.calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        [
            ("ops".to_string(), String::new()),
            ("ops".to_string(), String::new())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_output_is_aligned() {
    let pki = Pki::new("table");
    let hub = FakeHub::new(Authenticator::Mtls, vec![snapshot(4)]);
    let addr = serve(&pki.server(), hub).await;

    // The hub's certificate names localhost and 127.0.0.1; --hub-domain picks the name.
    let mut a = args(&["--hub", &hub_url(addr), "--hub-domain", "localhost"]);
    a.extend(pki.flags("admin-ops"));
    let out = status(&a).await;
    assert_success(&out);
    let expected = "\
NAMESPACE  MINICLUSTER  BURST       SPOKE  CONNECTED  PHASE       READY  JOINED  SIZE  MAX  PATH   LEAD             VERSION  LAST SEEN  AGE  MESSAGE
default    hello        -           -      -          Running     4      -       4     -    -      -                -        -          3d
hpc        bursty       -           -      -          Running     1      -       2     -    -      192.0.2.7:30093  -        -          2h
hpc        bursty       burst-gke   gke    yes        Joining     3      0       4     6    Relay  192.0.2.7:30093  3/4      1h         2h   3 of 4 brokers ready
hpc        bursty       burst-kind  kind   no         Unreported  0      -       2     2    -      192.0.2.7:30093  0/0      never      2h

NAME  CONNECTED  LAST SEEN  VERSION  ASSIGNMENTS  SPOKE VERSION  PROTOCOL  CERT EXPIRES  HEALTH
gke   yes        1h         3/4      1            0.1.0          -         -             ok
kind  no         never      0/1      1            -              -         -             -
";
    assert_eq!(stdout(&out), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_selects_miniclusters() {
    let pki = Pki::new("namespace");
    let hub = FakeHub::new(Authenticator::Mtls, vec![snapshot(4)]);
    let addr = serve(&pki.server(), hub.clone()).await;
    let mut a = args(&["--hub", &hub_url(addr), "-n", "hpc", "-o", "json"]);
    a.extend(pki.flags("admin-ops"));
    let out = status(&a).await;
    assert_success(&out);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let names: Vec<&str> = v["miniClusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bursty"]);
    assert_eq!(hub.calls.lock().unwrap()[0].1, "hpc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spoke_certificate_is_refused_with_a_clear_message() {
    let pki = Pki::new("spoke-cert");
    let addr = serve(
        &pki.server(),
        FakeHub::new(Authenticator::Mtls, vec![snapshot(1)]),
    )
    .await;
    let mut a = args(&["--hub", &hub_url(addr)]);
    a.extend(pki.flags("spoke-a"));
    let out = status(&a).await;
    assert_fails_with(
        &out,
        &[
            "refused the certificate",
            "spoke-a.crt",
            "spoke \"a\"",
            "PermissionDenied",
            "admin client certificate",
            "flux-hub certs --out DIR --admin NAME",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_is_refused() {
    let pki = Pki::new("other-ca");
    let addr = serve(
        &pki.server(),
        FakeHub::new(Authenticator::Mtls, vec![snapshot(1)]),
    )
    .await;
    let mut a = args(&["--hub", &hub_url(addr)]);
    a.extend(pki.flags("impostor"));
    let out = status(&a).await;
    assert_fails_with(
        &out,
        &[
            "refused",
            "impostor.crt",
            "flux-hub certs --out DIR --admin NAME",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_hub_fails_quickly_and_clearly() {
    let pki = Pki::new("unreachable");
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("https://127.0.0.1:{port}");
    let mut a = args(&["--hub", &url]);
    a.extend(pki.flags("admin-ops"));
    let started = Instant::now();
    let out = status(&a).await;
    assert_fails_with(&out, &[&format!("cannot reach the hub at {url}: ")]);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_certificate_must_name_the_hub_domain() {
    let pki = Pki::new("hub-domain");
    let addr = serve(
        &pki.server(),
        FakeHub::new(Authenticator::Mtls, vec![snapshot(1)]),
    )
    .await;
    let mut a = args(&["--hub", &hub_url(addr), "--hub-domain", "elsewhere.example"]);
    a.extend(pki.flags("admin-ops"));
    let out = status(&a).await;
    assert_fails_with(
        &out,
        &[
            "cannot reach the hub at",
            "elsewhere.example",
            "--hub-domain",
        ],
    );
}

#[tokio::test]
async fn certificate_files_are_named_when_missing_or_invalid() {
    let pki = Pki::new("files");
    let url = "https://127.0.0.1:1";

    let missing = pki.path("nope.crt");
    let out = status(&args(&[
        "--hub",
        url,
        "--ca",
        &missing,
        "--cert",
        &pki.path("admin-ops.crt"),
        "--key",
        &pki.path("admin-ops.key"),
    ]))
    .await;
    assert_fails_with(&out, &["--ca", &missing]);

    let garbage = pki.dir.join("garbage.key");
    std::fs::write(&garbage, "not a key\n").unwrap();
    let garbage = garbage.display().to_string();
    let out = status(&args(&[
        "--hub",
        url,
        "--ca",
        &pki.path("ca.crt"),
        "--cert",
        &pki.path("admin-ops.crt"),
        "--key",
        &garbage,
    ]))
    .await;
    assert_fails_with(&out, &["--key", &garbage]);

    // No certificate flags at all: what is missing, and how to get an admin certificate.
    let out = status(&args(&["--hub", url])).await;
    assert_fails_with(
        &out,
        &[
            "--ca",
            "--cert",
            "--key",
            "flux-hub certs --out DIR --admin NAME",
            "--insecure",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_mode_names_the_admin_in_a_header() {
    let hub = FakeHub::new(Authenticator::InsecureDevelopment, vec![snapshot(2)]);
    let addr = serve(&ServerSecurity::InsecureDevelopment, hub.clone()).await;
    let out = status(&args(&[
        "--hub",
        &format!("http://{addr}"),
        "--insecure",
        "--admin-name",
        "dev",
        "-o",
        "json",
    ]))
    .await;
    assert_success(&out);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["version"], 2);
    assert!(
        hub.calls
            .lock()
            .unwrap()
            .iter()
            .all(|(admin, _)| admin == "dev")
    );

    // A bare host:port gets http:// in insecure mode; the default admin name is "admin".
    let out = status(&args(&[
        "--hub",
        &addr.to_string(),
        "--insecure",
        "-o",
        "json",
    ]))
    .await;
    assert_success(&out);
    assert!(
        hub.calls
            .lock()
            .unwrap()
            .iter()
            .any(|(admin, _)| admin == "admin")
    );

    // An mTLS client cannot talk to the plaintext hub.
    let pki = Pki::new("insecure");
    let mut a = args(&["--hub", &hub_url(addr)]);
    a.extend(pki.flags("admin-ops"));
    let out = status(&a).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_one_json_document_per_snapshot() {
    let pki = Pki::new("watch");
    let hub = FakeHub::new(Authenticator::Mtls, vec![snapshot(1), snapshot(2)]);
    let addr = serve(&pki.server(), hub).await;
    let mut a = args(&["--hub", &hub_url(addr), "--watch", "-o", "json"]);
    a.extend(pki.flags("admin-ops"));
    let mut child = command(&a)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn flux-hub status --watch");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut versions = Vec::new();
    let read = async {
        while versions.len() < 2 {
            match lines.next_line().await.unwrap() {
                Some(line) => {
                    let v: Value = serde_json::from_str(&line)
                        .unwrap_or_else(|e| panic!("not one JSON document per line ({e}): {line}"));
                    assert_eq!(v["miniClusters"].as_array().unwrap().len(), 2);
                    assert_eq!(v["spokes"].as_array().unwrap().len(), 2);
                    versions.push(v["version"].as_u64().unwrap());
                }
                None => break,
            }
        }
    };
    let finished = tokio::time::timeout(RUN_LIMIT, read).await;
    // Heartbeats (the same version again) print nothing; the command keeps watching.
    let still_running = child.try_wait().unwrap().is_none();
    child.kill().await.unwrap();
    let output = child.wait_with_output().await.unwrap();
    assert!(
        finished.is_ok(),
        "no two snapshots in time; got versions {versions:?}; stderr:\n{}",
        stderr(&output)
    );
    assert_eq!(versions, [1, 2], "stderr:\n{}", stderr(&output));
    assert!(
        still_running,
        "--watch must keep running: {}",
        stderr(&output)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_table_prints_a_separator_per_snapshot() {
    let pki = Pki::new("watch-table");
    let hub = FakeHub::new(Authenticator::Mtls, vec![snapshot(1), snapshot(2)]);
    let addr = serve(&pki.server(), hub).await;
    let mut a = args(&["--hub", &hub_url(addr), "--watch"]);
    a.extend(pki.flags("admin-ops"));
    let mut child = command(&a)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn flux-hub status --watch");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut separators = Vec::new();
    let read = async {
        while separators.len() < 2 {
            let Some(line) = lines.next_line().await.unwrap() else {
                break;
            };
            if line.starts_with("--- ") {
                separators.push(line);
            }
        }
    };
    let finished = tokio::time::timeout(RUN_LIMIT, read).await;
    child.kill().await.unwrap();
    let _ = child.wait().await;
    assert!(finished.is_ok(), "separators: {separators:?}");
    assert!(
        separators[0].ends_with(" hub epoch epoch-1 version 1 ---"),
        "{separators:?}"
    );
    assert!(
        separators[1].ends_with(" hub epoch epoch-1 version 2 ---"),
        "{separators:?}"
    );
    // `--- YYYY-MM-DDTHH:MM:SSZ ...`
    assert_eq!(separators[0].as_bytes()[14], b'T', "{separators:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_scale_asks_the_hub_and_says_what_changed() {
    let pki = Pki::new("scale");
    let hub = FakeHub::new(Authenticator::Mtls, vec![snapshot(1)]);
    let addr = serve(&pki.server(), hub.clone()).await;

    let mut a = args(&["hpc/bursty", "burst-gke", "3", "--hub", &hub_url(addr)]);
    a.extend(pki.flags("admin-ops"));
    let out = burst_scale(&a).await;
    assert_success(&out);
    assert_eq!(
        stdout(&out),
        "hpc/bursty burst burst-gke: size 1 -> 3 (maxSize 4, spoke gke); the spoke resizes its Job once the hub applies generation 7\n"
    );
    assert_eq!(
        hub.calls.lock().unwrap().last().cloned(),
        Some(("ops".to_string(), "hpc/bursty burst-gke=3".to_string())),
        "the request names the MiniCluster, the burst and the size, as admin ops"
    );

    a.extend(args(&["-o", "json"]));
    let out = burst_scale(&a).await;
    assert_success(&out);
    let v: Value = serde_json::from_str(&stdout(&out)).expect("one JSON document");
    assert_eq!(
        v,
        serde_json::json!({"namespace": "hpc", "name": "bursty", "burst": "burst-gke",
            "previousSize": 1, "size": 3, "maxSize": 4, "changed": true, "generation": 7,
            "spoke": "gke"})
    );

    // The hub's refusal, with its reason.
    let mut a = args(&["hpc/bursty", "burst-gke", "5", "--hub", &hub_url(addr)]);
    a.extend(pki.flags("admin-ops"));
    assert_fails_with(
        &burst_scale(&a).await,
        &[
            "the hub declined ScaleBurst",
            "SizeAboveMaximum: spec.flux.bursting.clusters[0].size: 5 is above the maximum size 4",
        ],
    );

    // A spoke's certificate is refused like for status.
    let mut a = args(&["hpc/bursty", "burst-gke", "2", "--hub", &hub_url(addr)]);
    a.extend(pki.flags("spoke-a"));
    assert_fails_with(
        &burst_scale(&a).await,
        &[
            "refused the certificate",
            "PermissionDenied",
            "admin client certificate",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_scale_checks_its_arguments_before_dialing() {
    let pki = Pki::new("scale-args");
    // Nothing listens here: an argument error must come first.
    let hub = "https://127.0.0.1:9";
    let mut a = args(&["a/b/c", "burst-gke", "3", "--hub", hub]);
    a.extend(pki.flags("admin-ops"));
    assert_fails_with(
        &burst_scale(&a).await,
        &["MINICLUSTER: \"a/b/c\" is neither NAME nor NAMESPACE/NAME"],
    );
    let mut a = args(&["hpc/bursty", "burst-gke", "3", "-n", "lab", "--hub", hub]);
    a.extend(pki.flags("admin-ops"));
    assert_fails_with(&burst_scale(&a).await, &["but --namespace says \"lab\""]);
    let mut a = args(&["hpc/bursty", "burst-gke", "--hub", hub]);
    a.extend(pki.flags("admin-ops"));
    a.extend(args(&["--", "-1"]));
    let out = burst_scale(&a).await;
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap's usage error: {}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("invalid value '-1' for '<SIZE>'"),
        "{}",
        stderr(&out)
    );
}

/// `flux-hub version` shows the client alone without a hub (and says how to get one),
/// the hub's and the spokes' versions with the connection flags, in every `-o` format, and
/// fails (after the client's line) when the hub does not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_shows_the_client_and_the_hubs() {
    let run = async |a: &[String]| {
        tokio::time::timeout(RUN_LIMIT, subcommand(&["version"], a).output())
            .await
            .expect("flux-hub version did not finish")
            .expect("run flux-hub version")
    };
    let client = format!(
        "client: flux-hub {}, protocol {}\n",
        env!("CARGO_PKG_VERSION"),
        flux_shared::federation::protocol::REVISION
    );
    let out = run(&[]).await;
    assert_success(&out);
    assert_eq!(stdout(&out), client);
    assert!(
        stderr(&out).contains("no hub configured"),
        "{}",
        stderr(&out)
    );

    let pki = Pki::new("version");
    let hub = FakeHub::new(Authenticator::Mtls, vec![snapshot(4)]);
    let addr = serve(&pki.server(), hub.clone()).await;
    let mut a = args(&["--hub", &hub_url(addr)]);
    a.extend(pki.flags("admin-ops"));
    let out = run(&a).await;
    assert_success(&out);
    assert_eq!(
        stdout(&out),
        format!(
            "{client}hub:    flux-hub 0.1.0, protocol 1\nspoke gke: flux-spoke 0.1.0\nspoke kind: flux-spoke unknown (not connected)\n"
        )
    );
    let mut yaml = a.clone();
    yaml.extend(args(&["-o", "yaml"]));
    let out = run(&yaml).await;
    assert_success(&out);
    let v: Value = serde_yaml_ng::from_str(&stdout(&out)).expect("one YAML document");
    assert_eq!(v["client"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["hub"]["version"], "0.1.0");
    assert_eq!(v["hub"]["spokes"][0]["name"], "gke");

    let mut gone = args(&["--hub", "https://127.0.0.1:1"]);
    gone.extend(pki.flags("admin-ops"));
    let out = run(&gone).await;
    assert!(!out.status.success());
    assert_eq!(stdout(&out), client);
    assert!(stderr(&out).contains("127.0.0.1:1"), "{}", stderr(&out));
}

/// `-o yaml` is the same view as `-o json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_is_the_json_view() {
    let pki = Pki::new("yaml");
    let hub = FakeHub::new(Authenticator::Mtls, vec![snapshot(4)]);
    let addr = serve(&pki.server(), hub.clone()).await;
    let view = async |format: &str| {
        let mut a = args(&["--hub", &hub_url(addr), "-o", format]);
        a.extend(pki.flags("admin-ops"));
        let out = status(&a).await;
        assert_success(&out);
        let v: Value = serde_yaml_ng::from_str(&stdout(&out)).expect("a document");
        v
    };
    let (json, yaml) = (view("json").await, view("yaml").await);
    assert_eq!(yaml["miniClusters"], json["miniClusters"]);
    assert_eq!(yaml["version"], 4);
}
