//! `flux_hub::ops::leader` against a mock API server (kube's `tower_test` pattern): each
//! test serves canned Lease responses from a task and checks the requests made, their
//! bodies, and that their verbs are in the hub's RBAC.

use std::time::Duration;

use flux_hub::controller::permissions;
use flux_hub::ops::leader::{LeaderElection, LeaderError};
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::client::Body;
use serde_json::{Value, json};
use tokio::time::Instant;
use tower_test::mock::{self, Handle, SendResponse};

const NS: &str = "flux-operator-system";
const NAME: &str = "flux-hub";
const ME: &str = "hub-a";
const OTHER: &str = "hub-b";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/flux-operator-system/leases";

fn lease_path() -> String {
    format!("{LEASES}/{NAME}")
}

/// An election of `ME` (lease 15 s, renewed every 5 s) and the mock API server.
fn setup() -> (LeaderElection, ApiServer) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, NS);
    let election = LeaderElection::new(Api::namespaced(client, NS), NAME, ME)
        .with_lease_duration(Duration::from_secs(15))
        .with_renew_every(Duration::from_secs(5));
    (election, ApiServer { handle })
}

/// One request received by the mock API server.
struct Call {
    method: Method,
    path: String,
    body: Value,
    reply: SendResponse<Response<Body>>,
}

impl Call {
    fn respond(self, status: StatusCode, body: Value) {
        let bytes = serde_json::to_vec(&body).expect("json");
        self.reply.send_response(
            Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Body::from(bytes))
                .expect("response"),
        );
    }

    fn ok(self, lease: Value) {
        self.respond(StatusCode::OK, lease);
    }

    fn fail(self, code: u16, reason: &str) {
        self.respond(
            StatusCode::from_u16(code).expect("status"),
            json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": format!("canned {reason}"),
                "reason": reason,
                "code": code,
            }),
        );
    }
}

struct ApiServer {
    handle: Handle<Request<Body>, Response<Body>>,
}

impl ApiServer {
    /// The next request, checked to be on leases with a verb the hub's RBAC grants.
    async fn next(&mut self) -> Call {
        let (request, reply) = self
            .handle
            .next_request()
            .await
            .expect("the election made no further request");
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let verb = match method {
            Method::GET => "get",
            Method::POST => "create",
            Method::PUT => "update",
            ref other => panic!("unexpected method {other} {path}"),
        };
        assert!(
            permissions::allows("coordination.k8s.io", "leases", verb),
            "{verb} on leases is not in the hub's RBAC"
        );
        let bytes = request
            .into_body()
            .collect_bytes()
            .await
            .expect("request body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("json body")
        };
        Call {
            method,
            path,
            body,
            reply,
        }
    }

    async fn expect_get(&mut self) -> Call {
        let call = self.next().await;
        assert_eq!(
            (&call.method, call.path.as_str()),
            (&Method::GET, lease_path().as_str())
        );
        call
    }

    async fn expect_put(&mut self) -> Call {
        let call = self.next().await;
        assert_eq!(
            (&call.method, call.path.as_str()),
            (&Method::PUT, lease_path().as_str())
        );
        call
    }

    /// Whether the election makes no request for a (virtual) minute.
    async fn stays_quiet(&mut self) -> bool {
        match tokio::time::timeout(Duration::from_secs(60), self.handle.next_request()).await {
            // No request in time, or the client is gone.
            Err(_) | Ok(None) => true,
            Ok(Some((request, _))) => {
                eprintln!("unexpected {} {}", request.method(), request.uri());
                false
            }
        }
    }
}

/// Awaits `f` for at most ten (virtual) minutes. When an assertion fails in the mock API
/// server, its task ends and the election keeps retrying the dead connection: this turns
/// that into a test failure instead of a hang.
async fn bounded<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(600), f)
        .await
        .expect("the election did not finish: see the mock API server's panic above")
}

fn micro(t: Timestamp) -> Value {
    serde_json::to_value(MicroTime(t)).expect("micro time")
}

fn parse_micro(v: &Value) -> Timestamp {
    serde_json::from_value::<MicroTime>(v.clone())
        .expect("micro time")
        .0
}

fn ago(seconds: i64) -> Timestamp {
    Timestamp::now()
        .checked_sub(SignedDuration::from_secs(seconds))
        .expect("time")
}

/// A stored Lease as the API server returns it.
fn lease(
    holder: Option<&str>,
    renewed: Timestamp,
    resource_version: &str,
    transitions: i32,
) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": NAME,
            "namespace": NS,
            "resourceVersion": resource_version,
            "uid": "6b2f9a3e-0000-4000-8000-000000000001",
        },
        "spec": {
            "holderIdentity": holder,
            "acquireTime": micro(ago(3600)),
            "renewTime": micro(renewed),
            "leaseDurationSeconds": 15,
            "leaseTransitions": transitions,
        },
    })
}

/// `body` as stored under a new resourceVersion.
fn stored(mut body: Value, resource_version: &str) -> Value {
    body["metadata"]["resourceVersion"] = json!(resource_version);
    body
}

/// Asserts `t` is within a few seconds of the wall clock.
fn assert_recent(t: Timestamp) {
    let now = Timestamp::now();
    let lag = now.duration_since(t).abs();
    assert!(lag < SignedDuration::from_secs(5), "{t} is not now ({now})");
}

#[tokio::test(start_paused = true)]
async fn creates_the_lease_when_absent() {
    let (election, mut api) = setup();
    let server = tokio::spawn(async move {
        api.expect_get().await.fail(404, "NotFound");
        let call = api.next().await;
        assert_eq!((&call.method, call.path.as_str()), (&Method::POST, LEASES));
        let body = call.body.clone();
        assert_eq!(body["apiVersion"], "coordination.k8s.io/v1");
        assert_eq!(body["kind"], "Lease");
        assert_eq!(body["metadata"]["name"], NAME);
        let spec = &body["spec"];
        assert_eq!(spec["holderIdentity"], ME);
        assert_eq!(spec["leaseDurationSeconds"], 15);
        assert_eq!(spec["leaseTransitions"], 0);
        assert_eq!(spec["acquireTime"], spec["renewTime"]);
        assert_recent(parse_micro(&spec["renewTime"]));
        call.respond(StatusCode::CREATED, stored(body, "1"));
    });
    bounded(election.acquire()).await.expect("acquired");
    server.await.expect("mock API server");
}

#[tokio::test(start_paused = true)]
async fn waits_while_the_lease_is_fresh_and_takes_over_once_expired() {
    let (election, mut api) = setup();
    let start = Instant::now();
    let server = tokio::spawn(async move {
        api.expect_get()
            .await
            .ok(lease(Some(OTHER), ago(1), "10", 3));
        // Still renewed by the other replica.
        let call = api.expect_get().await;
        assert!(
            start.elapsed() >= Duration::from_secs(5),
            "retries every renew_every"
        );
        call.ok(lease(Some(OTHER), ago(2), "11", 3));
        // The other replica stopped renewing 20 s ago: more than its 15 s lease.
        let call = api.expect_get().await;
        assert!(start.elapsed() >= Duration::from_secs(10));
        call.ok(lease(Some(OTHER), ago(20), "12", 3));

        let call = api.expect_put().await;
        let body = call.body.clone();
        assert_eq!(
            body["metadata"]["resourceVersion"], "12",
            "the takeover is conditional on the version read"
        );
        let spec = &body["spec"];
        assert_eq!(spec["holderIdentity"], ME);
        assert_eq!(
            spec["leaseTransitions"], 4,
            "a new holder bumps leaseTransitions"
        );
        assert_eq!(spec["leaseDurationSeconds"], 15);
        assert_eq!(spec["acquireTime"], spec["renewTime"]);
        assert_recent(parse_micro(&spec["acquireTime"]));
        call.ok(stored(body, "13"));
    });
    bounded(election.acquire()).await.expect("acquired");
    assert!(start.elapsed() >= Duration::from_secs(10));
    server.await.expect("mock API server");
}

#[tokio::test(start_paused = true)]
async fn takes_a_released_lease_at_once() {
    let (election, mut api) = setup();
    let server = tokio::spawn(async move {
        api.expect_get().await.ok(lease(None, ago(1), "5", 2));
        let call = api.expect_put().await;
        assert_eq!(call.body["metadata"]["resourceVersion"], "5");
        assert_eq!(call.body["spec"]["holderIdentity"], ME);
        assert_eq!(call.body["spec"]["leaseTransitions"], 3);
        let body = call.body.clone();
        call.ok(stored(body, "6"));
    });
    let start = Instant::now();
    bounded(election.acquire()).await.expect("acquired");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "no wait for a free Lease"
    );
    server.await.expect("mock API server");
}

#[tokio::test(start_paused = true)]
async fn a_lease_we_already_hold_is_renewed_without_a_transition() {
    let (election, mut api) = setup();
    let server = tokio::spawn(async move {
        let held = lease(Some(ME), ago(3), "40", 7);
        let acquired = held["spec"]["acquireTime"].clone();
        api.expect_get().await.ok(held);
        let call = api.expect_put().await;
        let spec = &call.body["spec"];
        assert_eq!(spec["holderIdentity"], ME);
        assert_eq!(spec["leaseTransitions"], 7);
        assert_eq!(spec["acquireTime"], acquired);
        assert_recent(parse_micro(&spec["renewTime"]));
        let body = call.body.clone();
        call.ok(stored(body, "41"));
    });
    bounded(election.acquire()).await.expect("acquired");
    server.await.expect("mock API server");
}

#[tokio::test(start_paused = true)]
async fn conflict_on_takeover_means_not_leader() {
    let (election, mut api) = setup();
    let server = tokio::spawn(async move {
        api.expect_get()
            .await
            .ok(lease(Some(OTHER), ago(30), "20", 1));
        // A third replica wrote the Lease between our GET and PUT.
        let call = api.expect_put().await;
        assert_eq!(call.body["metadata"]["resourceVersion"], "20");
        call.fail(409, "Conflict");
        // From then on the winner keeps renewing: we only ever read.
        loop {
            let call = api.next().await;
            assert_eq!(
                call.method,
                Method::GET,
                "no write while another holds the Lease"
            );
            call.ok(lease(Some("hub-c"), ago(1), "21", 2));
        }
    });
    let outcome = tokio::time::timeout(Duration::from_secs(120), election.acquire()).await;
    assert!(
        outcome.is_err(),
        "acquire must keep waiting, got {outcome:?}"
    );
    assert!(!server.is_finished(), "mock API server failed");
    server.abort();
}

#[tokio::test(start_paused = true)]
async fn losing_the_create_race_retries() {
    let (election, mut api) = setup();
    let server = tokio::spawn(async move {
        api.expect_get().await.fail(404, "NotFound");
        let call = api.next().await;
        assert_eq!(call.method, Method::POST);
        call.fail(409, "AlreadyExists");
        api.expect_get()
            .await
            .ok(lease(Some(OTHER), ago(0), "2", 0));
        api.expect_get()
            .await
            .ok(lease(Some(OTHER), ago(40), "9", 0));
        let call = api.expect_put().await;
        assert_eq!(call.body["metadata"]["resourceVersion"], "9");
        assert_eq!(call.body["spec"]["leaseTransitions"], 1);
        let body = call.body.clone();
        call.ok(stored(body, "10"));
    });
    bounded(election.acquire()).await.expect("acquired");
    server.await.expect("mock API server");
}

#[tokio::test(start_paused = true)]
async fn acquire_returns_permanent_errors() {
    let (election, mut api) = setup();
    let server = tokio::spawn(async move {
        api.expect_get().await.fail(403, "Forbidden");
    });
    let error = bounded(election.acquire()).await.expect_err("forbidden");
    assert!(
        matches!(&error, kube::Error::Api(status) if status.code == 403),
        "{error:?}"
    );
    server.await.expect("mock API server");
}

#[tokio::test(start_paused = true)]
async fn acquire_retries_server_errors() {
    let (election, mut api) = setup();
    let server = tokio::spawn(async move {
        api.expect_get().await.fail(503, "ServiceUnavailable");
        api.expect_get().await.fail(429, "TooManyRequests");
        api.expect_get().await.fail(404, "NotFound");
        let call = api.next().await;
        assert_eq!(call.method, Method::POST);
        let body = call.body.clone();
        call.respond(StatusCode::CREATED, stored(body, "1"));
    });
    bounded(election.acquire()).await.expect("acquired");
    server.await.expect("mock API server");
}

/// Serves a successful creation, so that the election holds the Lease at version "1".
async fn serve_creation(api: &mut ApiServer) -> Value {
    api.expect_get().await.fail(404, "NotFound");
    let call = api.next().await;
    assert_eq!(call.method, Method::POST);
    let created = stored(call.body.clone(), "1");
    call.respond(StatusCode::CREATED, created.clone());
    created
}

#[tokio::test(start_paused = true)]
async fn hold_renews_then_loses_leadership_to_another_holder() {
    let (election, mut api) = setup();
    let server = tokio::spawn(async move {
        let start = Instant::now();
        let mut current = serve_creation(&mut api).await;
        // Renewal: read, then a conditional PUT with a new renewTime.
        let call = api.expect_get().await;
        assert!(start.elapsed() >= Duration::from_secs(5));
        call.ok(current.clone());
        let call = api.expect_put().await;
        let body = call.body.clone();
        assert_eq!(body["metadata"]["resourceVersion"], "1");
        assert_eq!(body["spec"]["holderIdentity"], ME);
        assert_eq!(body["spec"]["leaseTransitions"], 0);
        assert_eq!(body["spec"]["acquireTime"], current["spec"]["acquireTime"]);
        assert!(
            parse_micro(&body["spec"]["renewTime"]) >= parse_micro(&current["spec"]["renewTime"])
        );
        current = stored(body, "2");
        call.ok(current.clone());
        // Meanwhile another replica took the Lease over.
        let call = api.expect_get().await;
        assert!(start.elapsed() >= Duration::from_secs(10));
        call.ok(lease(Some(OTHER), ago(0), "3", 1));
        assert!(api.stays_quiet().await);
    });
    bounded(election.acquire()).await.expect("acquired");
    let error = bounded(election.hold())
        .await
        .expect_err("hold only returns on loss");
    assert!(
        matches!(&error, LeaderError::Lost { holder: Some(h) } if h == OTHER),
        "{error:?}"
    );
    server.await.expect("mock API server");
}

#[tokio::test(start_paused = true)]
async fn hold_returns_on_conflict() {
    let (election, mut api) = setup();
    let server = tokio::spawn(async move {
        let current = serve_creation(&mut api).await;
        api.expect_get().await.ok(current);
        api.expect_put().await.fail(409, "Conflict");
    });
    bounded(election.acquire()).await.expect("acquired");
    let error = bounded(election.hold()).await.expect_err("conflict");
    assert!(matches!(error, LeaderError::Conflict), "{error:?}");
    server.await.expect("mock API server");
}

#[tokio::test(start_paused = true)]
async fn hold_returns_when_the_lease_is_cleared_or_deleted() {
    for gone in ["cleared", "deleted"] {
        let (election, mut api) = setup();
        let server = tokio::spawn(async move {
            serve_creation(&mut api).await;
            let call = api.expect_get().await;
            if gone == "cleared" {
                call.ok(lease(None, ago(0), "5", 0));
            } else {
                call.fail(404, "NotFound");
            }
        });
        bounded(election.acquire()).await.expect("acquired");
        let error = bounded(election.hold()).await.expect_err("lost");
        assert!(
            matches!(error, LeaderError::Lost { holder: None }),
            "{gone}: {error:?}"
        );
        server.await.expect("mock API server");
    }
}

#[tokio::test(start_paused = true)]
async fn hold_gives_up_two_thirds_into_the_lease_without_renewal() {
    let (election, mut api) = setup();
    let start = Instant::now();
    let server = tokio::spawn(async move {
        serve_creation(&mut api).await;
        // The renewal at 5 s fails; a transient error does not lose leadership...
        api.expect_get().await.fail(503, "ServiceUnavailable");
        // ...but at 10 s (two thirds of the 15 s lease) it stops leading, leaving a
        // margin before the Lease may expire for the others: no further attempt.
        assert!(api.stays_quiet().await);
    });
    bounded(election.acquire()).await.expect("acquired");
    let error = bounded(election.hold()).await.expect_err("renewal timeout");
    let elapsed = start.elapsed();
    assert!(
        (Duration::from_secs(10)..Duration::from_secs(11)).contains(&elapsed),
        "{elapsed:?}"
    );
    match error {
        LeaderError::RenewTimeout {
            elapsed,
            last_error: Some(kube::Error::Api(status)),
        } => {
            assert!(elapsed >= Duration::from_secs(10));
            assert_eq!(status.code, 503);
        }
        other => panic!("{other:?}"),
    }
    server.await.expect("mock API server");
}

#[tokio::test(start_paused = true)]
async fn hold_gives_up_when_a_renewal_hangs() {
    let (election, mut api) = setup();
    let start = Instant::now();
    let server = tokio::spawn(async move {
        serve_creation(&mut api).await;
        let call = api.expect_get().await;
        // Never answered: the API server hangs.
        std::future::pending::<()>().await;
        drop(call);
    });
    bounded(election.acquire()).await.expect("acquired");
    let error = bounded(election.hold()).await.expect_err("renewal timeout");
    assert!(
        matches!(
            error,
            LeaderError::RenewTimeout {
                last_error: None,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(11),
        "{:?}",
        start.elapsed()
    );
    server.abort();
}

#[tokio::test(start_paused = true)]
async fn release_clears_the_holder() {
    let (election, mut api) = setup();
    let server = tokio::spawn(async move {
        api.expect_get().await.ok(lease(Some(ME), ago(2), "7", 4));
        let call = api.expect_put().await;
        let body = call.body.clone();
        assert_eq!(body["metadata"]["resourceVersion"], "7");
        assert!(
            body["spec"]["holderIdentity"].is_null(),
            "holder cleared: {body}"
        );
        assert_eq!(body["spec"]["leaseTransitions"], 4);
        assert_eq!(body["spec"]["leaseDurationSeconds"], 1);
        call.ok(stored(body, "8"));
    });
    bounded(election.release()).await;
    server.await.expect("mock API server");
}

#[tokio::test(start_paused = true)]
async fn release_leaves_another_holders_lease_alone() {
    let (election, mut api) = setup();
    let server = tokio::spawn(async move {
        api.expect_get()
            .await
            .ok(lease(Some(OTHER), ago(2), "7", 4));
        assert!(api.stays_quiet().await, "no write");
    });
    bounded(election.release()).await;
    drop(election);
    server.await.expect("mock API server");
}
