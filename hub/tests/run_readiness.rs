//! `/readyz` of `flux-hub run` (the binary) against a fake API server: a replica that
//! reconciles is ready only once its caches are synced and the federation state is
//! rebuilt; a standby replica (`--leader-elect`, the Lease held by another) is ready.
//!
//! The fake answers every LIST with an empty list and every WATCH with a stream that
//! never sends an event, except that it holds the Job LIST unanswered until the test
//! releases it: until then the Job cache cannot sync. The MiniCluster CRD it serves is
//! flux-hub's, or the reference operator's for the test of `run`'s refusal.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use axum::response::Response;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

const LEASE_NS: &str = "flux-operator-system";
/// How long the fake takes to answer a pod PATCH.
const POD_PATCH_DELAY: Duration = Duration::from_millis(1500);
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/flux-operator-system/leases";

/// What the fake API server knows and has seen.
struct Fake {
    /// Job LISTs received.
    job_lists: AtomicUsize,
    /// Set once the Job LIST may be answered.
    release_jobs: tokio::sync::watch::Sender<bool>,
    /// The `flux-hub` Lease, if any.
    lease: Mutex<Option<Value>>,
    /// Whether the MiniCluster CRD is another controller's (the reference operator's).
    foreign_crd: AtomicBool,
}

impl Fake {
    fn new(lease: Option<Value>) -> Arc<Fake> {
        Arc::new(Fake {
            job_lists: AtomicUsize::new(0),
            release_jobs: tokio::sync::watch::channel(false).0,
            lease: Mutex::new(lease),
            foreign_crd: AtomicBool::new(false),
        })
    }

    fn job_lists(&self) -> usize {
        self.job_lists.load(Ordering::SeqCst)
    }

    fn release_jobs(&self) {
        self.release_jobs.send_replace(true);
    }
}

fn json_reply(status: StatusCode, body: &Value) -> Response {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).expect("json")))
        .expect("response")
}

fn not_found() -> Response {
    json_reply(
        StatusCode::NOT_FOUND,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "reason": "NotFound", "message": "not found", "code": 404}),
    )
}

/// Stores a written Lease with the next resourceVersion and echoes it.
fn store_lease(fake: &Fake, body: &[u8], status: StatusCode) -> Response {
    let mut lease: Value = serde_json::from_slice(body).expect("a Lease body");
    let mut stored = fake.lease.lock().expect("lease");
    let version = stored
        .as_ref()
        .and_then(|l| l["metadata"]["resourceVersion"].as_str())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        + 1;
    lease["metadata"]["resourceVersion"] = json!(version.to_string());
    lease["metadata"]["namespace"] = json!(LEASE_NS);
    *stored = Some(lease.clone());
    json_reply(status, &lease)
}

async fn serve_request(
    State(fake): State<Arc<Fake>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let path = uri.path();
    let query = uri.query().unwrap_or("");
    if path.starts_with(LEASES) {
        return match method {
            Method::GET => match fake.lease.lock().expect("lease").clone() {
                Some(lease) => json_reply(StatusCode::OK, &lease),
                None => not_found(),
            },
            Method::POST => store_lease(&fake, &body, StatusCode::CREATED),
            Method::PUT => store_lease(&fake, &body, StatusCode::OK),
            _ => not_found(),
        };
    }
    if method == Method::PATCH && path.contains("/pods/") {
        // The federation endpoint label on the hub's own pod, set once it is ready: slow,
        // as on a busy API server, and absent (the hub runs outside a cluster).
        tokio::time::sleep(POD_PATCH_DELAY).await;
        return not_found();
    }
    if method != Method::GET {
        return not_found();
    }
    if path
        == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/miniclusters.flux-framework.org"
    {
        let metadata = if fake.foreign_crd.load(Ordering::SeqCst) {
            json!({"name": "miniclusters.flux-framework.org",
                   "annotations": {"controller-gen.kubebuilder.io/version": "v0.19.0"}})
        } else {
            json!({"name": "miniclusters.flux-framework.org",
                   "labels": {"app.kubernetes.io/managed-by": "flux-hub"}})
        };
        return json_reply(
            StatusCode::OK,
            &json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                    "metadata": metadata}),
        );
    }
    if query
        .split('&')
        .any(|p| p == "watch=true" || p == "watch=1")
    {
        // A watch that stays open and quiet.
        return Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(Body::from_stream(futures::stream::pending::<
                Result<Bytes, std::io::Error>,
            >()))
            .expect("response");
    }
    if path.ends_with("/jobs") {
        fake.job_lists.fetch_add(1, Ordering::SeqCst);
        let mut released = fake.release_jobs.subscribe();
        let _ = released.wait_for(|r| *r).await;
    }
    json_reply(
        StatusCode::OK,
        &json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"},
                "items": []}),
    )
}

/// Serves `fake` over plain HTTP on a thread of its own; returns its address.
fn start(fake: Arc<Fake>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let app = axum::Router::new().fallback(serve_request).with_state(fake);
            axum::serve(listener, app).await.expect("serve");
        });
    });
    addr
}

/// A running `flux-hub run`, killed on drop.
struct Hub {
    child: Child,
    metrics: SocketAddr,
    dir: PathBuf,
}

impl Hub {
    fn start(name: &str, api: SocketAddr, extra: &[&str]) -> Hub {
        let dir =
            std::env::temp_dir().join(format!("flux-hub-readiness-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
                 clusters: [{{name: fake, cluster: {{server: \"http://{api}\"}}}}]\n\
                 users: [{{name: fake, user: {{}}}}]\n\
                 contexts: [{{name: fake, context: {{cluster: fake, user: fake}}}}]\n"
            ),
        )
        .expect("kubeconfig");
        let metrics = {
            let probe = TcpListener::bind("127.0.0.1:0").expect("bind");
            probe.local_addr().expect("addr")
        };
        let stderr = std::fs::File::create(dir.join("stderr")).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_flux-hub"))
            .args(["run", "--metrics-addr", &metrics.to_string()])
            .args(extra)
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start flux-hub run");
        Hub {
            child,
            metrics,
            dir,
        }
    }

    /// The status of `GET /readyz`, or `None` while nothing answers.
    fn readyz(&mut self) -> Option<u16> {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("flux-hub run exited ({status}):\n{}", self.log());
        }
        let mut stream = TcpStream::connect_timeout(&self.metrics, Duration::from_secs(1)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        stream
            .write_all(b"GET /readyz HTTP/1.1\r\nHost: hub\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).ok()?;
        reply.split(' ').nth(1)?.parse().ok()
    }

    /// Polls `/readyz` until it answers `status`; panics after `within`.
    fn wait_for(&mut self, status: u16, within: Duration) {
        let deadline = Instant::now() + within;
        let mut last = None;
        while Instant::now() < deadline {
            last = self.readyz();
            if last == Some(status) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "/readyz answered {last:?}, not {status}, within {within:?}:\n{}",
            self.log()
        );
    }

    /// Asserts that `/readyz` answers `status` at every poll for `during`.
    fn stays(&mut self, status: u16, during: Duration) {
        let deadline = Instant::now() + during;
        while Instant::now() < deadline {
            let now = self.readyz();
            assert_eq!(now, Some(status), "/readyz:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits until the hub has asked for the Job LIST (its caches are syncing).
fn wait_for_job_list(fake: &Fake, hub: &Hub) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while fake.job_lists() == 0 {
        assert!(
            Instant::now() < deadline,
            "no Job LIST within 5 s:\n{}",
            hub.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A replica that reconciles is not ready while the Job LIST is unanswered, and becomes
/// ready once it is.
fn ready_only_once_synced(name: &str, extra: &[&str]) {
    let fake = Fake::new(None);
    let api = start(fake.clone());
    let mut hub = Hub::start(name, api, extra);
    wait_for_job_list(&fake, &hub);
    hub.wait_for(503, Duration::from_secs(5));
    hub.stays(503, Duration::from_secs(2));
    fake.release_jobs();
    hub.wait_for(200, Duration::from_secs(5));
}

/// Beside another controller's MiniCluster CRD, `run` refuses to start, saying what it
/// found; `--take-over` runs anyway.
#[test]
fn run_refuses_beside_another_controllers_crd_unless_told_to_take_over() {
    let fake = Fake::new(None);
    fake.foreign_crd.store(true, Ordering::SeqCst);
    let api = start(fake.clone());
    let mut hub = Hub::start("foreign-crd", api, &[]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = hub.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "flux-hub run did not exit:\n{}",
            hub.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = hub.log();
    assert!(
        !status.success()
            && log
                .contains("refusing to run: CRD miniclusters.flux-framework.org is not flux-hub's")
            && log.contains("--take-over"),
        "{status}:\n{log}"
    );
    assert_eq!(fake.job_lists(), 0, "nothing is watched before the check");
    drop(hub);

    let mut hub = Hub::start("take-over", api, &["--take-over"]);
    wait_for_job_list(&fake, &hub);
    fake.release_jobs();
    hub.wait_for(200, Duration::from_secs(5));
    assert!(hub.log().contains("(--take-over)"), "{}", hub.log());
}

#[test]
fn without_leader_election_readyz_waits_for_the_caches() {
    ready_only_once_synced("single", &[]);
}

#[test]
fn a_new_leader_is_ready_once_its_caches_are_synced() {
    // No Lease yet: this replica creates it and leads at once.
    ready_only_once_synced(
        "leader",
        &[
            "--leader-elect",
            "--lease-namespace",
            LEASE_NS,
            "--identity",
            "hub-a",
        ],
    );
}

#[test]
fn a_standby_replica_is_ready() {
    let held = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "flux-hub", "namespace": LEASE_NS, "resourceVersion": "7"},
        "spec": {"holderIdentity": "hub-b", "leaseDurationSeconds": 3600,
                 "acquireTime": MicroTime(Timestamp::now()),
                 "renewTime": MicroTime(Timestamp::now()), "leaseTransitions": 0},
    });
    let fake = Fake::new(Some(held));
    let api = start(fake.clone());
    let mut hub = Hub::start(
        "standby",
        api,
        &[
            "--leader-elect",
            "--lease-namespace",
            LEASE_NS,
            "--identity",
            "hub-a",
        ],
    );
    hub.wait_for(200, Duration::from_secs(5));
    hub.stays(200, Duration::from_secs(1));
    assert_eq!(fake.job_lists(), 0, "a standby starts no watch");
}

impl Hub {
    /// Sends SIGTERM and returns how long the process took to exit; panics after `within`.
    fn terminate(&mut self, within: Duration) -> Duration {
        let sent = Instant::now();
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -TERM failed");
        while sent.elapsed() < within {
            if let Ok(Some(exit)) = self.child.try_wait() {
                assert!(
                    exit.success(),
                    "flux-hub run exited with {exit}:\n{}",
                    self.log()
                );
                return sent.elapsed();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "flux-hub run did not stop within {within:?} of SIGTERM:\n{}",
            self.log()
        );
    }
}

/// SIGTERM stops the hub at every stage of its start: while the caches sync, the moment it
/// turns ready (while it labels its own pod as the federation endpoint, before the
/// controller runs: a SIGTERM there was once swallowed and the process never stopped) and
/// once it runs.
#[test]
fn sigterm_stops_the_hub_at_every_stage() {
    let fake = Fake::new(None);
    let api = start(fake.clone());

    let mut syncing = Hub::start("term-syncing", api, &[]);
    wait_for_job_list(&fake, &syncing);
    syncing.terminate(Duration::from_secs(10));

    fake.release_jobs();
    for (name, after_ready) in [
        ("term-ready", Duration::ZERO),
        ("term-running", Duration::from_secs(1)),
    ] {
        let mut hub = Hub::start(name, api, &["--grpc-addr", "127.0.0.1:0", "--insecure"]);
        hub.wait_for(200, Duration::from_secs(10));
        std::thread::sleep(after_ready);
        hub.terminate(Duration::from_secs(10));
    }
}
