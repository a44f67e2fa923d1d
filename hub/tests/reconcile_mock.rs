//! The reconciler against kube's mock service: every request it makes is recorded and
//! answered like an API server would; the tests assert on the exact writes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use flux_hub::controller::context::{self, Context};
use flux_hub::controller::permissions;
use flux_hub::controller::reconcile;
use flux_hub::controller::watch::broker_pods::{self, BrokerPodsWriter};
use flux_hub::controller::watch::cache::{BrokerPod, Compact};
use flux_hub::controller::watch::partial_decode::{Partial, Selection};
use flux_hub::controller::watch::stores::Stores;
use flux_hub::federation::served::Served;
use flux_hub::ops::metrics::Metrics;
use flux_shared::api::MiniCluster;
use flux_shared::federation::McKey;
use http::{Request, Response, StatusCode};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde_json::{Value, json};

/// One request the controller made.
#[derive(Clone, Debug)]
struct Call {
    method: String,
    path: String,
    query: String,
    /// The Accept header (a metadata-only read asks for PartialObjectMetadata).
    accept: String,
    body: Value,
}

impl Call {
    fn short(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

type Responder = Arc<dyn Fn(&Call) -> (StatusCode, Value) + Send + Sync>;

/// API-server double: answers with `respond` and records every call.
struct ApiServer {
    calls: Arc<Mutex<Vec<Call>>>,
}

impl ApiServer {
    fn start(respond: Responder) -> (Client, ApiServer) {
        let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let recorded = calls.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let accept = parts
                    .headers
                    .get(http::header::ACCEPT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                let bytes = body.collect_bytes().await.expect("request body");
                let call = Call {
                    method: parts.method.to_string(),
                    path: parts.uri.path().to_string(),
                    query: parts.uri.query().unwrap_or("").to_string(),
                    accept,
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                };
                let (status, reply) = respond(&call);
                recorded.lock().expect("calls").push(call);
                send.send_response(
                    Response::builder()
                        .status(status)
                        .body(Body::from(serde_json::to_vec(&reply).expect("json")))
                        .expect("response"),
                );
            }
        });
        (Client::new(mock, "default"), ApiServer { calls })
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("calls").clone()
    }
}

/// What an API server answers to a server-side apply: the object, with server fields.
fn echo(call: &Call) -> (StatusCode, Value) {
    if call.method == "DELETE" {
        return (
            StatusCode::OK,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}),
        );
    }
    if call.method == "GET" {
        let collection = ["jobs", "configmaps", "secrets", "services", "pods"]
            .iter()
            .any(|r| call.path.ends_with(&format!("/{r}")));
        if collection {
            // A watch of a blocking object (see `blockers`): an empty listing, then a
            // watch the client cannot read, which it retries after its backoff.
            if call.query.contains("watch=true") {
                return (StatusCode::OK, Value::Null);
            }
            return (
                StatusCode::OK,
                json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                       "metadata": {"resourceVersion": "1"}, "items": []}),
            );
        }
        return (StatusCode::OK, created_by_post(&call.path));
    }
    let mut body = call.body.clone();
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("uid".into(), json!("uid-1"));
        meta.insert("resourceVersion".into(), json!("1"));
    }
    if call.path.ends_with("/status") {
        // A status patch returns the whole MiniCluster.
        let mut mc = serde_json::to_value(minicluster(SPEC)).expect("json");
        mc["status"] = call.body["status"].clone();
        return (StatusCode::OK, mc);
    }
    (StatusCode::OK, body)
}

/// Whether `c` creates (POST) or server-side applies the object `resource`/`name`.
fn writes_object(c: &Call, resource: &str, name: &str) -> bool {
    match c.method.as_str() {
        "POST" => c.path.ends_with(&format!("/{resource}")) && c.body["metadata"]["name"] == name,
        "PATCH" => {
            c.query.contains("fieldManager") && c.path.ends_with(&format!("/{resource}/{name}"))
        }
        _ => false,
    }
}

/// A live object as the hub's POST left it: its fields recorded under an `Update` entry
/// of the hub's field manager.
fn created_by_post(path: &str) -> Value {
    let parts: Vec<&str> = path.rsplit('/').take(2).collect();
    let (name, resource) = (parts[0], parts.get(1).copied().unwrap_or(""));
    let (api_version, kind) = match resource {
        "jobs" => ("batch/v1", "Job"),
        "configmaps" => ("v1", "ConfigMap"),
        "secrets" => ("v1", "Secret"),
        "services" => ("v1", "Service"),
        "pods" => ("v1", "Pod"),
        other => panic!("unexpected GET of {other}"),
    };
    json!({"apiVersion": api_version, "kind": kind,
           "metadata": {"name": name, "namespace": "hpc", "uid": "uid-1", "resourceVersion": "1",
                        "ownerReferences": [{"apiVersion": "flux-framework.org/v1alpha2",
                                             "kind": "MiniCluster", "name": "flux-sample",
                                             "uid": "mc-uid", "controller": true}],
                        "managedFields": [{"manager": "flux-hub", "operation": "Update",
                                           "apiVersion": api_version, "fieldsType": "FieldsV1",
                                           "fieldsV1": {"f:metadata": {"f:labels": {}}}}]}})
}

fn compacted<K: Compact>(mut object: K) -> K {
    object.compact();
    object
}

/// `json` as the hub's watch of selection `S` caches it: partially decoded, then compacted.
fn watched<K, S>(json: Value) -> K
where
    K: Compact + serde::de::DeserializeOwned,
    S: Selection,
{
    let partial: Partial<K, S> = serde_json::from_value(json).expect("decodes as watched");
    compacted(partial.into_inner())
}

fn ok_responder() -> Responder {
    Arc::new(echo)
}

struct Writers {
    jobs: Writer<Job>,
    secrets: Writer<Secret>,
    config_maps: Writer<ConfigMap>,
    services: Writer<Service>,
    broker_pods: BrokerPodsWriter,
    pods: Writer<Pod>,
}

fn context(client: Client) -> (Arc<Context>, Writers) {
    let (jobs, jw) = reflector::store();
    let (secrets, sw) = reflector::store();
    let (config_maps, cw) = reflector::store();
    let (services, vw) = reflector::store();
    let (broker_pods, mut bw) = broker_pods::store();
    let (pods, pw) = reflector::store();
    let stores = Stores {
        jobs,
        secrets,
        config_maps,
        services,
        broker_pods,
        pods,
        echoes: Arc::default(),
    };
    let (mut jw, mut sw, mut cw, mut vw, mut pw) = (jw, sw, cw, vw, pw);
    bw.apply_watcher_event(&watcher::Event::InitDone);
    // The caches have their initial (empty) lists.
    jw.apply_watcher_event(&watcher::Event::InitDone);
    sw.apply_watcher_event(&watcher::Event::InitDone);
    cw.apply_watcher_event(&watcher::Event::InitDone);
    vw.apply_watcher_event(&watcher::Event::InitDone);
    pw.apply_watcher_event(&watcher::Event::InitDone);
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "flux-hub".into(),
            instance: Some("test".into()),
        },
    );
    let mut ctx = Context::new(client, stores, recorder, Arc::new(Metrics::new()));
    ctx.now = || Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).expect("time"));
    (
        Arc::new(ctx),
        Writers {
            jobs: jw,
            secrets: sw,
            config_maps: cw,
            services: vw,
            broker_pods: bw,
            pods: pw,
        },
    )
}

const SPEC: &str = r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {name: flux-sample, namespace: hpc, uid: mc-uid, generation: 1}
spec:
  size: 2
  maxSize: 4
  containers: [{image: "rockylinux:9", command: hostname}]
"#;

/// What the watches show once the API server allocated the lead Service's NodePort
/// (30093) and the lead pod runs on n1, from what a first reconcile applied (`calls`).
fn lead_known(calls: &[Call], writers: &mut Writers) {
    let mut lead: Service = writers_service(calls);
    lead.spec
        .as_mut()
        .expect("spec")
        .ports
        .as_mut()
        .expect("ports")[0]
        .node_port = Some(30093);
    writers
        .services
        .apply_watcher_event(&watcher::Event::Apply(lead));
    writers
        .broker_pods
        .apply_watcher_event(&watcher::Event::Apply(lead_pod()));
}

/// Placeholder TLS material for the installer's objects.
fn test_tls() -> flux_hub::commands::install::HubTls {
    flux_hub::commands::install::HubTls {
        ca_pem: "CA".into(),
        cert_pem: "CERT".into(),
        key_pem: "KEY".into(),
    }
}

fn minicluster(yaml: &str) -> MiniCluster {
    serde_yaml_ng::from_str(yaml).expect("test MiniCluster")
}

/// Feed what a first reconcile applied into the caches, as the watches would.
fn observe(calls: &[Call], writers: &mut Writers) -> Option<Value> {
    let mut status = None;
    // Creates and server-side applies only (not the finalizer or managedFields merge
    // patches, nor Events).
    for call in calls.iter().filter(|c| {
        matches!(c.method.as_str(), "PATCH" | "POST")
            && c.query.contains("fieldManager")
            && !c.path.contains("/events")
    }) {
        let (_, mut obj) = echo(call);
        if call.path.ends_with("/status") {
            status = Some(call.body["status"].clone());
            continue;
        }
        obj["metadata"]["resourceVersion"] = json!("1");
        match obj["kind"].as_str() {
            // What the hub's watch caches keep (cache::Compact), as in `flux-hub run`.
            Some("Job") => writers
                .jobs
                .apply_watcher_event(&watcher::Event::Apply(watched::<Job, Job>(obj))),
            Some("Secret") => writers.secrets.apply_watcher_event(&watcher::Event::Apply(
                serde_json::from_value(obj).expect("secret"),
            )),
            Some("ConfigMap") => writers
                .config_maps
                .apply_watcher_event(&watcher::Event::Apply(watched::<ConfigMap, ConfigMap>(obj))),
            Some("Service") => writers.services.apply_watcher_event(&watcher::Event::Apply(
                serde_json::from_value(obj).expect("svc"),
            )),
            Some("Pod") => writers
                .pods
                .apply_watcher_event(&watcher::Event::Apply(watched::<Pod, Pod>(obj))),
            other => panic!("unexpected kind {other:?}"),
        }
    }
    status
}

/// Map a request to (group, resource, verb) and check the RBAC list allows it.
fn assert_permitted(calls: &[Call]) {
    for c in calls {
        let parts: Vec<&str> = c.path.trim_start_matches('/').split('/').collect();
        let (group, rest) = match parts.first() {
            Some(&"api") => ("", &parts[2..]),
            Some(&"apis") => (parts[1], &parts[3..]),
            _ => panic!("unexpected path {}", c.path),
        };
        let rest = if rest.first() == Some(&"namespaces") && rest.len() > 2 {
            &rest[2..]
        } else {
            rest
        };
        let resource = match rest {
            [r] | [r, _] => (*r).to_string(),
            [r, _, sub] => format!("{r}/{sub}"),
            _ => panic!("unexpected path {}", c.path),
        };
        let verb = match (c.method.as_str(), rest.len()) {
            ("GET", 1) => "list",
            ("GET", _) => "get",
            ("POST", _) => "create",
            ("PATCH", _) => "patch",
            ("PUT", _) => "update",
            ("DELETE", _) => "delete",
            (m, _) => panic!("unexpected method {m}"),
        };
        assert!(
            permissions::allows(group, &resource, verb),
            "{} needs {verb} on {group}/{resource}, missing from REQUIRED",
            c.short()
        );
        if verb == "patch" && c.query.contains("fieldManager") && !c.body.is_array() {
            // Server-side apply may create: it needs create too (a JSON patch, an array,
            // never does).
            assert!(
                permissions::allows(group, &resource, "create") || resource.ends_with("/status"),
                "apply on {resource} needs create"
            );
        }
    }
}

async fn run(
    ctx: &Arc<Context>,
    mc: MiniCluster,
) -> Result<kube::runtime::controller::Action, context::Error> {
    tokio::time::timeout(
        Duration::from_secs(10),
        reconcile::reconcile(Arc::new(mc), ctx.clone()),
    )
    .await
    .expect("reconcile finished")
}

#[tokio::test]
async fn creates_every_object_from_nothing_then_makes_no_writes() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let calls = server.calls();
    let writes: Vec<String> = calls.iter().map(Call::short).collect();
    assert_eq!(
        writes,
        [
            "POST /api/v1/namespaces/hpc/configmaps",
            "POST /api/v1/namespaces/hpc/secrets",
            "POST /api/v1/namespaces/hpc/services",
            "POST /apis/batch/v1/namespaces/hpc/jobs",
            "POST /apis/events.k8s.io/v1/namespaces/hpc/events",
            "PATCH /apis/flux-framework.org/v1alpha2/namespaces/hpc/miniclusters/flux-sample/status",
        ],
        "at most 6 requests per MiniCluster created"
    );
    for c in &calls[..4] {
        assert!(
            c.query.contains("fieldManager=flux-hub"),
            "created under the hub's field manager: {}",
            c.query
        );
    }
    let status_write = &calls[5];
    assert!(
        status_write.query.contains("fieldManager=flux-hub")
            && status_write.query.contains("force=true"),
        "server-side apply: {}",
        status_write.query
    );
    assert_eq!(calls[4].body["reason"], "Created");
    let status = &calls[5].body["status"];
    assert_eq!(status["maximumSize"], 4);
    assert_eq!(status["size"], 2);
    assert_eq!(status["selector"], "flux-framework.org/job=flux-sample");
    assert_eq!(status["phase"], "Pending");
    assert_eq!(status["observedGeneration"], 1);
    assert_permitted(&calls);

    // Second pass with the caches holding what was applied: no writes at all.
    let applied_status = observe(&calls, &mut writers).expect("status");
    let mut again = mc.clone();
    again.status = Some(serde_json::from_value(applied_status).expect("status"));
    let before = server.calls().len();
    run(&ctx, again).await.expect("reconcile");
    let extra: Vec<String> = server.calls()[before..].iter().map(Call::short).collect();
    assert!(
        extra.is_empty(),
        "a no-op reconcile made requests: {extra:?}"
    );
}

/// A pass woken by the Job's status writes only the status; a child edited since the
/// last pass (a new resourceVersion, other data) is put back.
#[tokio::test]
async fn a_status_change_writes_only_the_status_and_an_edited_child_is_put_back() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let first = server.calls();
    let applied_status = observe(&first, &mut writers).expect("status");
    let mut mc = mc;
    mc.status = Some(serde_json::from_value(applied_status).expect("status"));

    let job = first
        .iter()
        .find(|c| writes_object(c, "jobs", "flux-sample"))
        .expect("the Job was created");
    let (_, mut job) = echo(job);
    job["metadata"]["resourceVersion"] = json!("2");
    job["status"] = json!({"active": 2, "ready": 2});
    writers
        .jobs
        .apply_watcher_event(&watcher::Event::Apply(watched::<Job, Job>(job)));
    let before = server.calls().len();
    run(&ctx, mc.clone()).await.expect("reconcile");
    let writes: Vec<String> = server.calls()[before..].iter().map(Call::short).collect();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert!(writes[0].contains("/status"), "{writes:?}");

    let cm = first
        .iter()
        .find(|c| writes_object(c, "configmaps", "flux-sample-flux-config"))
        .expect("the ConfigMap was created");
    let (_, mut cm) = echo(cm);
    cm["metadata"]["resourceVersion"] = json!("3");
    cm["data"]["broker.toml"] = json!("# edited by hand");
    writers
        .config_maps
        .apply_watcher_event(&watcher::Event::Apply(watched::<ConfigMap, ConfigMap>(cm)));
    let before = server.calls().len();
    run(&ctx, mc).await.expect("reconcile");
    let put_back = server.calls()[before..]
        .iter()
        .any(|c| writes_object(c, "configmaps", "flux-sample-flux-config"));
    assert!(
        put_back,
        "the edited ConfigMap was left: {:?}",
        server.calls()[before..]
            .iter()
            .map(Call::short)
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn reuses_the_certificate_it_created() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, _writers) = context(client.clone());
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let first = server.calls();
    let secret_body = first
        .iter()
        .find(|c| writes_object(c, "secrets", "flux-sample-curve"))
        .expect("secret")
        .body
        .clone();
    // A restarted hub: a fresh context, remembering nothing of the first pass, whose
    // caches list what that pass wrote (as a new process's watches would) keeps the Secret.
    let (restarted, mut writers) = context(client);
    observe(&first, &mut writers);
    let mut changed = mc.clone();
    changed.spec.size = 3;
    let before = server.calls().len();
    run(&restarted, changed).await.expect("reconcile");
    let later = &server.calls()[before..];
    assert!(
        later.iter().all(|c| !c.path.contains("/secrets")),
        "the certificate was rewritten: {:?}",
        later.iter().map(Call::short).collect::<Vec<_>>()
    );
    assert!(secret_body["data"]["curve.cert"].is_string());
}

#[tokio::test]
async fn a_reconcile_before_the_secret_reaches_the_cache_keeps_the_same_certificate() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, _writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("reconcile");
    // The Job's watch event triggers a second pass before the Secret's event arrived.
    run(&ctx, mc).await.expect("reconcile");
    let certs: Vec<Value> = server
        .calls()
        .iter()
        .filter(|c| writes_object(c, "secrets", "flux-sample-curve"))
        .map(|c| c.body["data"]["curve.cert"].clone())
        .collect();
    assert_eq!(certs.len(), 2);
    assert_eq!(
        certs[0], certs[1],
        "a second certificate would split the instance"
    );
}

/// The echoes of a new MiniCluster's objects can start a second reconcile before the
/// caches show the first one's writes: the Job's POST then finds it there (409), and
/// neither a second `Created` Event nor the same status is written again.
#[tokio::test]
async fn a_second_pass_before_the_caches_catch_up_repeats_no_event_or_status() {
    let posted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = posted.clone();
    let responder: Responder = Arc::new(move |call: &Call| {
        if call.method == "POST"
            && call.path.ends_with("/jobs")
            && seen.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return (
                StatusCode::CONFLICT,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "jobs.batch \"flux-sample\" already exists", "reason": "AlreadyExists", "code": 409}),
            );
        }
        echo(call)
    });
    let (client, server) = ApiServer::start(responder);
    let (ctx, _writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("first pass");
    let first = server.calls();
    assert_eq!(
        first.iter().filter(|c| c.path.ends_with("/events")).count(),
        1
    );
    assert_eq!(
        first.iter().filter(|c| c.path.ends_with("/status")).count(),
        1
    );

    run(&ctx, mc).await.expect("second pass");
    let second: Vec<String> = server.calls()[first.len()..]
        .iter()
        .map(Call::short)
        .collect();
    assert!(
        second.contains(&"POST /apis/batch/v1/namespaces/hpc/jobs".to_string()),
        "the cache has no Job yet: {second:?}"
    );
    assert!(
        second.contains(&"GET /apis/batch/v1/namespaces/hpc/jobs/flux-sample".to_string()),
        "the existing Job is read to take over its fields: {second:?}"
    );
    assert!(
        !second
            .iter()
            .any(|c| c.ends_with("/events") || c.ends_with("/status")),
        "no second Created Event or status write: {second:?}"
    );
}

#[tokio::test]
async fn scaling_within_the_maximum_patches_only_the_job_and_status() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let status = observe(&server.calls(), &mut writers).expect("status");
    let mut scaled = mc.clone();
    scaled.status = Some(serde_json::from_value(status).expect("status"));
    scaled.spec.size = 3;
    scaled.metadata.generation = Some(2);
    let before = server.calls().len();
    run(&ctx, scaled).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    let writes: Vec<String> = calls.iter().map(Call::short).collect();
    assert!(
        writes.contains(&"PATCH /apis/batch/v1/namespaces/hpc/jobs/flux-sample".to_string()),
        "{writes:?}"
    );
    assert!(
        !writes.iter().any(|w| w.contains("/services/")),
        "the Service does not change: {writes:?}"
    );
    let job = calls
        .iter()
        .find(|c| writes_object(c, "jobs", "flux-sample"))
        .expect("job patch");
    let take_over = calls
        .iter()
        .find(|c| {
            c.method == "PATCH"
                && c.path.ends_with("/jobs/flux-sample")
                && !c.query.contains("fieldManager")
        })
        .expect("the POST's fields taken over before the first apply");
    assert_eq!(
        take_over.body["metadata"]["managedFields"][0]["operation"],
        "Apply"
    );
    assert_eq!(take_over.body["metadata"]["resourceVersion"], "1");
    assert_eq!(job.body["spec"]["parallelism"], 3);
    assert_eq!(job.body["spec"]["completions"], 3);
    let event = calls.iter().find(|c| c.method == "POST").expect("event");
    assert_eq!(event.body["reason"], "Scaled");
    assert_eq!(event.body["note"], "scaled from 2 to 3 brokers");
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status");
    assert_eq!(status.body["status"]["size"], 3);
    assert_eq!(
        status.body["status"]["maximumSize"], 4,
        "the declared hosts do not change"
    );
    assert_permitted(&calls);
}

#[tokio::test]
async fn a_size_above_the_maximum_is_refused_with_a_condition_and_an_event() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let status = observe(&server.calls(), &mut writers).expect("status");
    let mut too_big = mc.clone();
    too_big.status = Some(serde_json::from_value(status).expect("status"));
    too_big.spec.max_size = None;
    too_big.spec.size = 9;
    let before = server.calls().len();
    let action = run(&ctx, too_big.clone())
        .await
        .expect("refusal is not an error");
    assert_eq!(
        action,
        kube::runtime::controller::Action::await_change(),
        "no retry loop"
    );
    let calls = server.calls()[before..].to_vec();
    let writes: Vec<String> = calls.iter().map(Call::short).collect();
    assert_eq!(
        writes,
        [
            "POST /apis/events.k8s.io/v1/namespaces/hpc/events",
            "PATCH /apis/flux-framework.org/v1alpha2/namespaces/hpc/miniclusters/flux-sample/status",
        ]
    );
    assert_eq!(calls[0].body["type"], "Warning");
    assert_eq!(calls[0].body["reason"], "SizeAboveMaximum");
    let degraded = calls[1].body["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Degraded")
        .expect("degraded")
        .clone();
    assert_eq!(degraded["status"], "True");
    assert!(
        degraded["message"]
            .as_str()
            .expect("message")
            .starts_with("spec.size: 9 is above the maximum size 4")
    );

    // Reconciling the same refused spec again writes nothing new.
    too_big.status = Some(serde_json::from_value(calls[1].body["status"].clone()).expect("status"));
    let before = server.calls().len();
    run(&ctx, too_big).await.expect("reconcile");
    assert!(
        server.calls()[before..].is_empty(),
        "repeated refusal must not spam events or writes"
    );
}

#[tokio::test]
async fn an_invalid_spec_gets_a_status_and_an_event_but_no_objects() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, _writers) = context(client);
    let mc = minicluster(&SPEC.replace("maxSize: 4", "maxSize: 4\n  flux: {connectTimeout: soon}"));
    let action = run(&ctx, mc).await.expect("invalid spec is not retried");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    let calls = server.calls();
    assert!(
        calls
            .iter()
            .all(|c| c.path.contains("/events") || c.path.ends_with("/status")),
        "{:?}",
        calls.iter().map(Call::short).collect::<Vec<_>>()
    );
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status");
    assert_eq!(status.body["status"]["phase"], "Invalid");
    let event = calls.iter().find(|c| c.method == "POST").expect("event");
    assert_eq!(event.body["reason"], "InvalidSpec");
    assert!(
        event.body["note"]
            .as_str()
            .expect("note")
            .contains("spec.flux.connectTimeout")
    );
}

/// The Degraded condition of the first status write among `calls`.
fn degraded_in_status_write(calls: &[Call]) -> Value {
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("a status write");
    status.body["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Degraded")
        .expect("Degraded")
        .clone()
}

/// An API server that answers every write of a Job with 409 Conflict.
fn conflict_on_jobs() -> Responder {
    Arc::new(|call: &Call| {
        if call.path.contains("/jobs") && call.method != "GET" {
            (
                StatusCode::CONFLICT,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "conflict", "reason": "Conflict", "code": 409}),
            )
        } else {
            echo(call)
        }
    })
}

#[tokio::test]
async fn api_errors_fail_the_reconcile_and_back_off() {
    let (client, _server) = ApiServer::start(conflict_on_jobs());
    let (ctx, _writers) = context(client);
    let mc = Arc::new(minicluster(SPEC));
    let err = reconcile::reconcile(mc.clone(), ctx.clone())
        .await
        .expect_err("conflict");
    assert_eq!((err.stage(), err.kind()), ("apply", "conflict"));
    assert!(err.to_string().contains("Job hpc/flux-sample"), "{err}");
    let first = reconcile::error_policy(mc.clone(), &err, ctx.clone());
    let second = reconcile::error_policy(mc.clone(), &err, ctx.clone());
    assert_eq!(
        first,
        kube::runtime::controller::Action::requeue(Duration::from_secs(1))
    );
    assert_eq!(
        second,
        kube::runtime::controller::Action::requeue(Duration::from_secs(2))
    );
    let metrics = ctx.metrics.encode();
    assert!(
        metrics.contains("flux_hub_reconcile_errors_total{stage=\"apply\",kind=\"conflict\"} 2"),
        "{metrics}"
    );

    let server_error: Responder = Arc::new(|call: &Call| {
        if call.method == "PATCH" {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "etcd timeout", "reason": "InternalError", "code": 500}),
            )
        } else {
            echo(call)
        }
    });
    let (client, _server) = ApiServer::start(server_error);
    let (ctx, _writers) = context(client);
    let err = reconcile::reconcile(mc, ctx).await.expect_err("500");
    assert_eq!(err.kind(), "server");
}

#[tokio::test]
async fn a_stage_the_api_server_keeps_refusing_shows_in_status_with_its_reason() {
    let forbidden: Responder = Arc::new(|call: &Call| {
        if call.path.contains("/configmaps") && call.method == "POST" {
            (
                StatusCode::FORBIDDEN,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "configmaps is forbidden", "reason": "Forbidden", "code": 403}),
            )
        } else {
            echo(call)
        }
    });
    let (client, server) = ApiServer::start(forbidden);
    let (ctx, _writers) = context(client);
    let mc = Arc::new(minicluster(SPEC));
    let err = reconcile::reconcile(mc, ctx.clone())
        .await
        .expect_err("forbidden");
    assert_eq!(
        (err.stage(), err.kind(), err.reason()),
        ("apply", "api", "ApplyFailed")
    );
    let calls = server.calls();
    let degraded = degraded_in_status_write(&calls);
    assert_eq!(degraded["status"], "True");
    assert_eq!(degraded["reason"], "ApplyFailed");
    assert!(
        degraded["message"]
            .as_str()
            .expect("message")
            .contains("forbidden"),
        "{degraded}"
    );
    let event = calls
        .iter()
        .find(|c| c.path.ends_with("/events"))
        .expect("an Event");
    assert_eq!(event.body["reason"], "ApplyFailed");
}

#[tokio::test]
async fn a_conflict_passes_on_its_own_and_leaves_the_status_alone() {
    let (client, server) = ApiServer::start(conflict_on_jobs());
    let (ctx, _writers) = context(client);
    reconcile::reconcile(Arc::new(minicluster(SPEC)), ctx)
        .await
        .expect_err("conflict");
    assert!(
        !server.calls().iter().any(|c| c.path.ends_with("/status")),
        "a conflict is not shown in status"
    );
}

#[tokio::test]
async fn an_immutable_job_change_is_reported_not_retried() {
    // Only a change can be refused: the Job exists (created by the first pass).
    let responder: Responder = Arc::new(|call: &Call| {
        if call.path.contains("/jobs/") && call.query.contains("fieldManager") {
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "Job.batch \"flux-sample\" is invalid: spec.template: Invalid value: field is immutable", "reason": "Invalid", "code": 422}),
            )
        } else {
            echo(call)
        }
    });
    let (client, server) = ApiServer::start(responder);
    let (ctx, mut writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("created");
    let status = observe(&server.calls(), &mut writers).expect("status");
    let mut changed = mc;
    changed.status = Some(serde_json::from_value(status).expect("status"));
    changed.spec.containers[0].image = "rockylinux:10".into();
    changed.metadata.generation = Some(2);
    let before = server.calls().len();
    run(&ctx, changed).await.expect("reported, not an error");
    let calls = server.calls()[before..].to_vec();
    let event = calls.iter().find(|c| c.method == "POST").expect("event");
    assert_eq!(event.body["reason"], "JobSpecImmutable");
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status");
    assert!(
        status.body["status"]["conditions"]
            .to_string()
            .contains("JobSpecImmutable")
    );
}

#[tokio::test]
async fn finished_jobs_with_cleanup_delete_the_minicluster() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let mc = minicluster(&SPEC.replace("maxSize: 4", "maxSize: 4\n  cleanup: true"));
    run(&ctx, mc.clone()).await.expect("reconcile");
    observe(&server.calls(), &mut writers);
    // The Job completes.
    let mut job: Job = (*writers.jobs.as_reader().state()[0]).clone();
    job.status = Some(
        serde_json::from_value(
            json!({"conditions": [{"type": "Complete", "status": "True"}], "ready": 0}),
        )
        .expect("status"),
    );
    writers
        .jobs
        .apply_watcher_event(&watcher::Event::Apply(job));
    let before = server.calls().len();
    run(&ctx, mc).await.expect("reconcile");
    let writes: Vec<String> = server.calls()[before..].iter().map(Call::short).collect();
    assert!(
        writes.contains(
            &"DELETE /apis/flux-framework.org/v1alpha2/namespaces/hpc/miniclusters/flux-sample"
                .to_string()
        ),
        "{writes:?}"
    );
    assert_permitted(&server.calls());
}

#[tokio::test]
async fn broker_pods_get_their_job_index_label_once() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let status = observe(&server.calls(), &mut writers).expect("status");
    let pod = |name: &str, index: &str, labelled: bool| -> Pod {
        let mut labels = json!({"flux-framework.org/job": "flux-sample", "app.kubernetes.io/managed-by": "flux-hub"});
        if labelled {
            labels["job-index"] = json!(index);
        }
        watched::<Pod, BrokerPod>(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "hpc", "uid": format!("uid-{name}"), "labels": labels,
                         "annotations": {"batch.kubernetes.io/job-completion-index": index},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "flux-sample", "uid": "uid-1"}]},
            "spec": {"containers": [{"name": "flux", "image": "x"}]},
            "status": {"phase": "Pending"},
        }))
    };
    writers
        .broker_pods
        .apply_watcher_event(&watcher::Event::Apply(pod(
            "flux-sample-0-abcde",
            "0",
            false,
        )));
    writers
        .broker_pods
        .apply_watcher_event(&watcher::Event::Apply(pod(
            "flux-sample-1-fghij",
            "1",
            true,
        )));
    let mut steady = mc.clone();
    steady.status = Some(serde_json::from_value(status).expect("status"));
    let before = server.calls().len();
    run(&ctx, steady.clone()).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    let writes: Vec<String> = calls.iter().map(Call::short).collect();
    assert_eq!(
        writes,
        ["PATCH /api/v1/namespaces/hpc/pods/flux-sample-0-abcde"],
        "only the unlabelled pod"
    );
    assert_eq!(calls[0].body["metadata"]["labels"]["job-index"], "0");
    assert_permitted(&calls);

    // Reconciled again before the pod cache shows the label: the patch is not sent twice.
    let before = server.calls().len();
    run(&ctx, steady).await.expect("reconcile");
    let writes: Vec<String> = server.calls()[before..].iter().map(Call::short).collect();
    assert!(writes.is_empty(), "{writes:?}");
}

#[test]
fn objects_carry_owner_references_to_the_minicluster() {
    let mc = minicluster(SPEC);
    let plan = flux_shared::plan::Plan::new(&mc).expect("plan");
    for object in
        flux_shared::render::render(&plan, &flux_shared::plan::Role::Root, "cert").expect("render")
    {
        let value = serde_json::to_value(&object).expect("json");
        let owner = &value["metadata"]["ownerReferences"][0];
        assert_eq!(owner["uid"], "mc-uid", "{}", object.describe());
        assert_eq!(owner["kind"], MiniCluster::kind(&()).as_ref());
    }
}

// ---------------------------------------------------------------------------------------
// Bursting: finalizer, lead broker endpoint, assignments, status.bursts, deletion.
// ---------------------------------------------------------------------------------------

const BURSTING: &str = r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {name: flux-sample, namespace: hpc, uid: mc-uid, generation: 1, resourceVersion: "7"}
spec:
  size: 2
  containers: [{image: "rockylinux:9", command: hostname}]
  flux:
    bursting:
      clusters: [{name: burst-gke, size: 3, cluster: gke}]
"#;

/// Answers like `echo`, plus a Node with addresses for `GET /api/v1/nodes/n1`.
fn with_node(call: &Call) -> (StatusCode, Value) {
    if call.method == "GET" && call.path == "/api/v1/nodes/n1" {
        return (
            StatusCode::OK,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                   "status": {"addresses": [
                       {"type": "InternalIP", "address": "10.0.0.4"},
                       {"type": "ExternalIP", "address": "203.0.113.4"}]}}),
        );
    }
    if call.path.ends_with("/miniclusters/flux-sample") && call.method == "PATCH" {
        let mut mc = serde_json::to_value(minicluster(BURSTING)).expect("json");
        mc["metadata"]["finalizers"] = call.body["metadata"]["finalizers"].clone();
        return (StatusCode::OK, mc);
    }
    echo(call)
}

/// The lead broker's pod as the hub's cache holds it (compacted: a Job's pod).
fn lead_pod() -> Pod {
    watched::<Pod, BrokerPod>(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "flux-sample-0-abcde", "namespace": "hpc", "labels": {
            "flux-framework.org/job": "flux-sample",
            "batch.kubernetes.io/job-completion-index": "0"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "flux-sample", "uid": "uid-1"}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "flux", "image": "x"}]},
        "status": {"phase": "Running"}
    }))
}

#[tokio::test]
async fn a_bursting_minicluster_gets_a_finalizer_and_waits_for_its_lead_endpoint_then_assigns() {
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, mut writers) = context(client);
    let mc = minicluster(BURSTING);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let calls = server.calls();
    let finalizer = calls
        .iter()
        .find(|c| {
            c.path == "/apis/flux-framework.org/v1alpha2/namespaces/hpc/miniclusters/flux-sample"
        })
        .expect("finalizer patch");
    assert_eq!(
        finalizer.body["metadata"]["finalizers"],
        json!(["flux-framework.org/bursts"])
    );
    assert_eq!(
        finalizer.body["metadata"]["resourceVersion"], "7",
        "guarded by resourceVersion"
    );
    assert!(
        calls
            .iter()
            .any(|c| writes_object(c, "services", "flux-sample-lead"))
    );
    assert_permitted(&calls);
    let status = observe(&calls, &mut writers).expect("status");
    assert_eq!(status["bursts"][0]["name"], "burst-gke");
    assert_eq!(status["bursts"][0]["cluster"], "gke");
    assert_eq!(status["bursts"][0]["phase"], "Pending");
    assert_eq!(
        status["bursts"][0]["message"],
        "waiting for the lead broker Service's NodePort"
    );
    assert!(
        ctx.registry
            .spokes(&|_| true)
            .spokes
            .iter()
            .all(|s| s.assignments == 0)
    );

    // The API server allocated the NodePort and the lead pod runs on n1.
    lead_known(&calls, &mut writers);
    let mut next = mc.clone();
    next.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    next.metadata.creation_timestamp = Some(Time("2026-11-01T08:00:00Z".parse().expect("time")));
    next.status = Some(serde_json::from_value(status).expect("status"));
    let before = server.calls().len();
    run(&ctx, next.clone()).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    assert_permitted(&calls);
    assert!(calls.iter().any(|c| c.short() == "GET /api/v1/nodes/n1"));
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status")
        .body["status"]
        .clone();
    assert_eq!(
        status["leadBroker"],
        json!({"address": "203.0.113.4", "port": 30093, "node": "n1"})
    );
    assert_eq!(
        status["bursts"][0]["phase"], "Unreachable",
        "spoke gke never connected"
    );
    let bursts_ready = status["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "BurstsReady")
        .expect("BurstsReady");
    assert_eq!(bursts_ready["reason"], "SpokeUnreachable");
    let spokes = ctx.registry.spokes(&|_| true).spokes;
    assert_eq!((spokes[0].name.as_str(), spokes[0].assignments), ("gke", 1));
    // Admin clients see the MiniCluster's age (flux-hub status AGE).
    let admin = ctx.registry.admin_snapshot("");
    assert_eq!(
        admin.miniclusters[0].created_unix_millis,
        next.metadata
            .creation_timestamp
            .as_ref()
            .expect("creationTimestamp")
            .0
            .as_millisecond()
    );

    // Same state again: the node is not looked up again, nothing is written.
    next.status = Some(serde_json::from_value(status).expect("status"));
    let before = server.calls().len();
    run(&ctx, next).await.expect("reconcile");
    let extra: Vec<String> = server.calls()[before..].iter().map(Call::short).collect();
    assert!(extra.is_empty(), "{extra:?}");
}

fn writers_service(calls: &[Call]) -> Service {
    let call = calls
        .iter()
        .find(|c| writes_object(c, "services", "flux-sample-lead"))
        .expect("lead service");
    serde_json::from_value(echo(call).1).expect("service")
}

fn deleted(seconds_ago: i64) -> MiniCluster {
    deleted_from(BURSTING, seconds_ago)
}

/// MiniCluster `yaml` with the hub's finalizer, deleted `seconds_ago`.
fn deleted_from(yaml: &str, seconds_ago: i64) -> MiniCluster {
    let mut mc = minicluster(yaml);
    mc.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    mc.metadata.deletion_timestamp = Some(Time(
        k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 - seconds_ago).expect("time"),
    ));
    mc
}

#[tokio::test]
async fn deletion_waits_for_the_spoke_then_releases_the_finalizer() {
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, _writers) = context(client);
    ctx.registry.set_primed();
    let _spoke = ctx
        .registry
        .clone()
        .subscribe("gke", "test", Default::default(), Default::default())
        .expect("primed");
    let action = run(&ctx, deleted(10)).await.expect("reconcile");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(290)),
        "waits until the deletion timeout at most"
    );
    let calls = server.calls();
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status");
    assert_eq!(status.body["status"]["bursts"][0]["phase"], "Deleting");
    assert!(
        calls
            .iter()
            .all(|c| !c.body["metadata"]["finalizers"].is_array())
    );

    // The spoke applies the snapshot without the burst and acknowledges it.
    let version = ctx.registry.spokes(&|_| true).spokes[0].current_version;
    ctx.registry.report(
        "gke",
        flux_shared::federation::proto::ReportRequest {
            room: None,
            hub_epoch: ctx.registry.epoch().to_string(),
            applied_version: version,
            statuses: vec![],
            cluster_access: None,
        },
    );
    let before = server.calls().len();
    let action = run(&ctx, deleted(12)).await.expect("reconcile");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    let calls = server.calls()[before..].to_vec();
    assert_permitted(&calls);
    let event = calls.iter().find(|c| c.method == "POST").expect("event");
    assert_eq!(event.body["reason"], "BurstsDeleted");
    let release = calls
        .iter()
        .find(|c| c.path.ends_with("/miniclusters/flux-sample"))
        .expect("finalizer released");
    assert_eq!(release.body["metadata"]["finalizers"], json!([]));
    assert!(ctx.registry.admin_snapshot("").miniclusters.is_empty());
}

#[tokio::test]
async fn a_connected_spoke_that_never_confirms_delays_deletion_only_until_the_timeout() {
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, _writers) = context(client);
    ctx.registry.set_primed();
    let _spoke = ctx
        .registry
        .clone()
        .subscribe("gke", "test", Default::default(), Default::default())
        .expect("primed");
    let action = run(&ctx, deleted(301)).await.expect("reconcile");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    let calls = server.calls();
    let event = calls.iter().find(|c| c.method == "POST").expect("event");
    assert_eq!(event.body["type"], "Warning");
    assert_eq!(event.body["reason"], "SpokeUnreachable");
    assert!(
        event.body["note"]
            .as_str()
            .expect("note")
            .contains("spoke gke did not confirm deleting burst burst-gke"),
        "{}",
        event.body["note"]
    );
    let release = calls
        .iter()
        .find(|c| c.path.ends_with("/miniclusters/flux-sample"))
        .expect("finalizer released");
    assert_eq!(release.body["metadata"]["finalizers"], json!([]));
}

#[tokio::test]
async fn a_spoke_that_is_away_does_not_delay_deletion() {
    // Spoke gke never connected (a typo in `cluster`, or not installed): nothing can be
    // waiting there, and should it come, its first snapshot no longer lists the burst.
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, _writers) = context(client);
    ctx.registry.set_primed();
    let action = run(&ctx, deleted(1)).await.expect("reconcile");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    let calls = server.calls();
    let event = calls.iter().find(|c| c.method == "POST").expect("event");
    assert_eq!(event.body["reason"], "SpokeAway");
    assert_eq!(
        event.body["note"],
        "spoke gke is not connected: it deletes burst burst-gke when it connects again (its snapshot no longer lists it)"
    );
    let release = calls
        .iter()
        .find(|c| c.path.ends_with("/miniclusters/flux-sample"))
        .expect("finalizer released at once, not after the deletion timeout");
    assert_eq!(release.body["metadata"]["finalizers"], json!([]));
}

/// The body of a failed API call.
fn status_error(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": reason})
}

#[tokio::test]
async fn federation_endpoint_label_is_merge_patched_onto_the_hubs_own_pod_with_retries() {
    use flux_hub::ops::leader_pod;
    let attempts = Arc::new(Mutex::new(0u32));
    let seen = attempts.clone();
    let (client, api) = ApiServer::start(Arc::new(move |call: &Call| {
        let mut n = seen.lock().expect("attempts");
        *n += 1;
        if *n == 1 {
            // A transient failure (the API server restarting) is retried.
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                status_error(503, "ServiceUnavailable"),
            );
        }
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "flux-hub-0", "namespace": "flux-operator-system"}});
        pod["metadata"]["labels"] = call.body["metadata"]["labels"].clone();
        (StatusCode::OK, pod)
    }));
    let pods = kube::Api::<Pod>::namespaced(client, "flux-operator-system");
    leader_pod::mark(&pods, "flux-hub-0", true)
        .await
        .expect("marked after one retry");
    let calls = api.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    for call in &calls {
        assert_eq!(
            call.short(),
            "PATCH /api/v1/namespaces/flux-operator-system/pods/flux-hub-0"
        );
        assert_eq!(
            call.body,
            json!({"metadata": {"labels": {leader_pod::LABEL: "true"}}}),
            "only the label changes"
        );
    }
    assert!(
        permissions::allows("", "pods", "patch"),
        "the hub may patch its own pod"
    );
}

#[tokio::test]
async fn federation_endpoint_label_skips_a_missing_pod_and_fails_on_a_refusal() {
    use flux_hub::ops::leader_pod;
    let (client, api) = ApiServer::start(Arc::new(|call: &Call| {
        if call.path.ends_with("/elsewhere") {
            (StatusCode::NOT_FOUND, status_error(404, "NotFound"))
        } else {
            (StatusCode::FORBIDDEN, status_error(403, "Forbidden"))
        }
    }));
    let pods = kube::Api::<Pod>::namespaced(client, "flux-operator-system");
    // Run outside a cluster, the identity names no pod: nothing to label.
    leader_pod::mark(&pods, "elsewhere", false)
        .await
        .expect("a missing pod is not an error");
    // A refusal is not transient: reported at once, not retried.
    let error = leader_pod::mark(&pods, "flux-hub-0", true)
        .await
        .expect_err("forbidden");
    assert!(error.to_string().contains("Forbidden"), "{error}");
    assert_eq!(api.calls().len(), 2, "no retry of a 404 or a 403");
}

#[tokio::test]
async fn objects_a_spec_change_drops_are_deleted_by_uid_and_nothing_else() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let services = "  services: [{name: nginx, image: \"nginx:1.27\", ports: [80]}]\n";
    let with_services = minicluster(&format!("{SPEC}{services}"));
    run(&ctx, with_services.clone()).await.expect("reconcile");
    let status = observe(&server.calls(), &mut writers).expect("status");

    // The plan without `services` drops the services pod and its Service(s).
    let rendered = |mc: &MiniCluster| -> Vec<String> {
        let plan = flux_shared::plan::Plan::new(mc).expect("plan");
        flux_shared::render::render(&plan, &flux_shared::plan::Role::Root, "cert")
            .expect("render")
            .iter()
            .map(|o| o.describe())
            .collect()
    };
    let mut without = minicluster(SPEC);
    without.metadata.generation = Some(2);
    without.status = Some(serde_json::from_value(status).expect("status"));
    let kept = rendered(&without);
    let dropped: Vec<String> = rendered(&with_services)
        .into_iter()
        .filter(|o| !kept.contains(o))
        .collect();
    assert_eq!(dropped, ["Pod/flux-sample-services"]);

    let before = server.calls().len();
    run(&ctx, without.clone()).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    assert_permitted(&calls);
    let deleted: Vec<String> = calls
        .iter()
        .filter(|c| c.method == "DELETE")
        .map(|c| {
            // Only the object the cache saw: a re-created one has another UID.
            assert_eq!(c.body["preconditions"]["uid"], "uid-1", "{}", c.short());
            let mut parts = c.path.rsplit('/');
            let name = parts.next().unwrap_or_default();
            let kind = match parts.next() {
                Some("pods") => "Pod",
                Some("services") => "Service",
                Some("configmaps") => "ConfigMap",
                Some("secrets") => "Secret",
                other => panic!("unexpected DELETE of {other:?}"),
            };
            format!("{kind}/{name}")
        })
        .collect();
    let mut expected = dropped.clone();
    expected.sort();
    let mut got = deleted.clone();
    got.sort();
    assert_eq!(got, expected, "exactly what the plan dropped is deleted");
    let pruned = calls
        .iter()
        .find(|c| c.method == "POST" && c.path.contains("/events") && c.body["reason"] == "Pruned")
        .expect("a Pruned Event");
    for object in &dropped {
        assert!(
            pruned.body["note"]
                .as_str()
                .unwrap_or_default()
                .contains(object.as_str()),
            "{object} missing from {}",
            pruned.body["note"]
        );
    }

    // Orphans come from spec changes: at the same generation the caches are not scanned
    // again, at the next one they are.
    let stray: Service = serde_json::from_value(json!({
        "metadata": {"name": "flux-sample-stray", "namespace": "hpc", "uid": "uid-stray",
            "labels": {"app.kubernetes.io/managed-by": "flux-hub"},
            "ownerReferences": [{"apiVersion": "flux-framework.org/v1alpha2", "kind": "MiniCluster",
                "name": "flux-sample", "uid": "mc-uid", "controller": true}]}
    }))
    .expect("service");
    writers
        .services
        .apply_watcher_event(&watcher::Event::Apply(stray));
    let deletes_after = |before: usize| -> Vec<String> {
        server.calls()[before..]
            .iter()
            .filter(|c| c.method == "DELETE")
            .map(Call::short)
            .collect()
    };
    let before = server.calls().len();
    run(&ctx, without.clone()).await.expect("reconcile");
    let again = deletes_after(before);
    assert!(again.is_empty(), "{again:?}");
    // The watch shows the services pod gone.
    let mut gone = Pod::default();
    gone.metadata.name = Some("flux-sample-services".into());
    gone.metadata.namespace = Some("hpc".into());
    writers
        .pods
        .apply_watcher_event(&watcher::Event::Delete(gone));
    let mut next = without.clone();
    next.metadata.generation = Some(3);
    let before = server.calls().len();
    run(&ctx, next).await.expect("reconcile");
    assert_eq!(
        deletes_after(before),
        ["DELETE /api/v1/namespaces/hpc/services/flux-sample-stray"]
    );
}

#[tokio::test]
async fn nothing_is_pruned_while_the_running_job_cannot_take_the_change() {
    // The Job's pod template is immutable: a 422 leaves the running pods on the old plan,
    // which may still use what the new one dropped.
    let responder: Responder = Arc::new(|call: &Call| {
        if call.method == "PATCH"
            && call.path.contains("/jobs/")
            && call.query.contains("fieldManager")
        {
            return (
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "message": "field is immutable", "reason": "Invalid", "code": 422}),
            );
        }
        echo(call)
    });
    let (client, server) = ApiServer::start(responder);
    let (ctx, mut writers) = context(client);
    let services = "  services: [{name: nginx, image: \"nginx:1.27\", ports: [80]}]\n";
    let with_services = minicluster(&format!("{SPEC}{services}"));
    run(&ctx, with_services).await.expect("reconcile");
    let status = observe(&server.calls(), &mut writers).expect("status");
    // Also a new image: the Job's pod template changes, which the API server refuses.
    let mut without = minicluster(&SPEC.replace("rockylinux:9", "rockylinux:10"));
    without.metadata.generation = Some(2);
    without.status = Some(serde_json::from_value(status).expect("status"));
    let before = server.calls().len();
    run(&ctx, without).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    assert!(
        calls
            .iter()
            .any(|c| c.method == "PATCH" && c.path.contains("/jobs/")),
        "the Job change was tried"
    );
    let deletes: Vec<String> = calls
        .iter()
        .filter(|c| c.method == "DELETE")
        .map(Call::short)
        .collect();
    assert!(deletes.is_empty(), "{deletes:?}");
}

// ---------------------------------------------------------------------------------------
// The autoscaler.

const AUTOSCALED: &str = r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {name: bursty, namespace: hpc, uid: mc-uid, generation: 3, resourceVersion: "5"}
spec:
  size: 2
  containers: [{image: "rockylinux:9"}]
  flux:
    bursting:
      leadAddress: 192.0.2.1
      autoscale: {scaleUpAfterSeconds: 30}
      clusters: [{name: a, size: 0, maxSize: 4}]
status:
  maximumSize: 2
  burstLayout: [{name: a, maxSize: 4}]
"#;

/// The hub's Secret cache holds `bursty-curve` with the certificate text `CERT`.
fn cache_curve_cert(writers: &mut Writers) {
    writers.secrets.apply_watcher_event(&watcher::Event::Apply(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "bursty-curve", "namespace": "hpc",
                         "ownerReferences": [{"apiVersion": "flux-framework.org/v1alpha2",
                                              "kind": "MiniCluster", "name": "bursty",
                                              "uid": "mc-uid", "controller": true}]},
            "data": {"curve.cert": "Q0VSVA=="},
        }))
        .expect("secret"),
    ));
}

/// A queue reporter on 127.0.0.1 that answers `queue` to the token of `cert`, and 401
/// to anything else; the requests' Authorization headers are recorded.
async fn fake_reporter(cert: &str, queue: Value) -> (String, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("addr").to_string();
    let token = flux_hub::autoscale::queue::token(cert);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&request).to_string();
            let auth = text
                .lines()
                .find_map(|l| l.strip_prefix("Authorization: "))
                .unwrap_or_default()
                .to_string();
            recorded.lock().expect("seen").push(auth.clone());
            let (status, body) = if auth == format!("Bearer {token}") {
                ("200 OK", queue.to_string())
            } else {
                (
                    "401 Unauthorized",
                    "{\"error\": \"a bearer token is needed\"}".to_string(),
                )
            };
            let answer = format!(
                "HTTP/1.0 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    (address, seen)
}

/// The API server holding `mc`: GET answers it, a JSON patch is applied to it for real.
fn holding(mc: Value) -> Responder {
    let stored = Arc::new(Mutex::new(mc));
    Arc::new(move |call: &Call| {
        let mut mc = stored.lock().expect("mc");
        match call.method.as_str() {
            "GET" if call.path.ends_with("/miniclusters/bursty") => (StatusCode::OK, mc.clone()),
            "PATCH" if call.path.ends_with("/miniclusters/bursty") => {
                let patch: json_patch::Patch =
                    serde_json::from_value(call.body.clone()).expect("a JSON patch");
                json_patch::patch(&mut mc, &patch).expect("applies");
                (StatusCode::OK, mc.clone())
            }
            _ => echo(call),
        }
    })
}

#[tokio::test]
async fn the_autoscaler_grows_a_burst_for_a_job_that_waits_and_says_why() {
    let mc = minicluster(AUTOSCALED);
    let (client, api) = ApiServer::start(holding(serde_json::to_value(&mc).expect("json")));
    let (ctx, mut writers) = context(client);
    cache_curve_cert(&mut writers);
    // Root bursty-0/1 busy; a job for 4 nodes has waited 100 s: burst a grows by 2.
    let queue = json!({
        "version": 1, "now": 1000.0,
        "hosts": [
            {"host": "bursty-0", "rank": 0, "online": true, "drained": false, "allocated": true},
            {"host": "bursty-1", "rank": 1, "online": true, "drained": false, "allocated": true},
            {"host": "a-0", "rank": 2, "online": false, "drained": false, "allocated": false},
        ],
        "pending": [{"id": 42, "nodes": 4, "submitted": 900.0}],
    });
    let (address, seen) = fake_reporter("CERT", queue).await;
    let mut memory = flux_hub::controller::autoscaler::Tracked::default();
    let reporter = |_: &flux_shared::plan::Plan| address.clone();
    flux_hub::controller::autoscaler::poll(&ctx, &mc, &mut memory, &reporter).await;

    assert_eq!(
        seen.lock().expect("seen").as_slice(),
        [format!(
            "Bearer {}",
            flux_hub::autoscale::queue::token("CERT")
        )],
        "the reporter is read with the token of the instance's CURVE certificate"
    );
    let calls = api.calls();
    assert_permitted(&calls);
    let patch = calls
        .iter()
        .find(|c| c.method == "PATCH")
        .unwrap_or_else(|| panic!("no size patch: {calls:#?}"));
    assert!(
        patch.query.contains("fieldManager=flux-hub-autoscaler"),
        "{}",
        patch.query
    );
    assert_eq!(
        patch.body,
        json!([
            {"op": "replace", "path": "/metadata/resourceVersion", "value": "5"},
            {"op": "add", "path": "/spec/flux/bursting/clusters/0/size", "value": 2},
        ])
    );
    let event = calls
        .iter()
        .find(|c| c.path.contains("/events"))
        .expect("an Event");
    assert_eq!(event.body["reason"], "BurstScaledUp");
    assert_eq!(
        event.body["note"],
        "burst a: size 0 -> 2: job 42 has waited 100s for 4 nodes; the instance has 2"
    );
    let metrics = ctx.metrics.encode();
    assert!(
        metrics.contains("flux_hub_autoscale_decisions_total{outcome=\"grow\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "flux_hub_autoscale_burst_changes_total{direction=\"up\",reason=\"jobs_waiting\"} 1"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_autoscaler_changes_nothing_when_the_reporter_refuses_it() {
    let mc = minicluster(AUTOSCALED);
    let (client, api) = ApiServer::start(holding(serde_json::to_value(&mc).expect("json")));
    let (ctx, mut writers) = context(client);
    cache_curve_cert(&mut writers);
    // A reporter of another instance (another certificate): 401, nothing is decided.
    let (address, _) = fake_reporter("OTHER", json!({})).await;
    let mut memory = flux_hub::controller::autoscaler::Tracked::default();
    let reporter = |_: &flux_shared::plan::Plan| address.clone();
    flux_hub::controller::autoscaler::poll(&ctx, &mc, &mut memory, &reporter).await;
    assert!(
        api.calls().iter().all(|c| c.method == "GET"),
        "{:#?}",
        api.calls()
    );
    assert!(
        ctx.metrics
            .encode()
            .contains("flux_hub_autoscale_decisions_total{outcome=\"unreachable\"} 1")
    );
}

// ---------------------------------------------------------------------------------------
// The installer (`flux-hub init`, `flux-hub join`).

#[tokio::test]
async fn the_installer_applies_the_deploy_manifests_in_order_with_its_field_manager() {
    let (client, api) = ApiServer::start(Arc::new(|call: &Call| {
        if call.method == "GET" {
            return (StatusCode::NOT_FOUND, status_error(404, "NotFound"));
        }
        echo(call)
    }));
    let objects = flux_hub::commands::install::hub_objects(
        Some("registry.example/flux-hub:dev"),
        Some(&test_tls()),
    )
    .expect("objects");
    let applied = flux_hub::commands::install_apply::apply_all(&client, &objects)
        .await
        .expect("applied");
    let order: Vec<&str> = applied.iter().map(|a| a.object.as_str()).collect();
    assert_eq!(
        order,
        [
            "Namespace flux-operator-system",
            "CustomResourceDefinition miniclusters.flux-framework.org",
            "ValidatingAdmissionPolicy flux-hub-minicluster-author",
            "ValidatingAdmissionPolicyBinding flux-hub-minicluster-author",
            "ServiceAccount flux-operator-system/flux-hub",
            "ClusterRole flux-hub",
            "ClusterRoleBinding flux-hub",
            "Role flux-operator-system/flux-hub-leader-election",
            "RoleBinding flux-operator-system/flux-hub-leader-election",
            // Before the pods that mount it.
            "Secret flux-operator-system/flux-hub-tls",
            "Deployment flux-operator-system/flux-hub",
            "PodDisruptionBudget flux-operator-system/flux-hub",
            "Service flux-operator-system/flux-hub-metrics",
            "Service flux-operator-system/flux-hub-federation",
        ]
    );
    let patches: Vec<Call> = api
        .calls()
        .into_iter()
        .filter(|c| c.method == "PATCH")
        .collect();
    assert_eq!(patches.len(), order.len());
    for p in &patches {
        assert!(
            p.query.contains("fieldManager=flux-hub-install") && p.query.contains("force=true"),
            "{} {}",
            p.short(),
            p.query
        );
    }
    assert_eq!(
        patches[0].short(),
        "PATCH /api/v1/namespaces/flux-operator-system"
    );
    let deployment = patches
        .iter()
        .find(|p| p.path.ends_with("/deployments/flux-hub"))
        .expect("deployment");
    assert_eq!(
        deployment.body["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example/flux-hub:dev"
    );
}

#[tokio::test]
async fn a_failed_install_deletes_what_it_created_and_names_the_missing_right() {
    let (client, api) = ApiServer::start(Arc::new(|call: &Call| {
        if call.method == "GET" {
            // The namespace exists already; nothing else does.
            if call.path == "/api/v1/namespaces/flux-operator-system" {
                return (
                    StatusCode::OK,
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flux-operator-system", "resourceVersion": "1"}}),
                );
            }
            return (StatusCode::NOT_FOUND, status_error(404, "NotFound"));
        }
        if call.method == "PATCH" && call.path.ends_with("/clusterroles/flux-hub") {
            return (
                StatusCode::FORBIDDEN,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403, "reason": "Forbidden",
                       "message": "clusterroles.rbac.authorization.k8s.io \"flux-hub\" is forbidden: User \"dev\" cannot patch resource \"clusterroles\""}),
            );
        }
        echo(call)
    }));
    let objects =
        flux_hub::commands::install::hub_objects(None, Some(&test_tls())).expect("objects");
    let error = flux_hub::commands::install_apply::apply_all(&client, &objects)
        .await
        .expect_err("refused");
    let text = format!("{error:#}");
    assert!(
        text.contains("applying ClusterRole flux-hub")
            && text.contains("missing rights")
            && text.contains("cannot patch resource \"clusterroles\""),
        "{text}"
    );
    let deletes: Vec<String> = api
        .calls()
        .iter()
        .filter(|c| c.method == "DELETE")
        .map(Call::short)
        .collect();
    assert_eq!(
        deletes,
        [
            "DELETE /api/v1/namespaces/flux-operator-system/serviceaccounts/flux-hub",
            "DELETE /apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/flux-hub-minicluster-author",
            "DELETE /apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/flux-hub-minicluster-author",
            "DELETE /apis/apiextensions.k8s.io/v1/customresourcedefinitions/miniclusters.flux-framework.org",
        ],
        "what this run created goes again, newest first; the namespace that was there stays"
    );
}

/// An object of someone else with a name the MiniCluster needs, as the API server has it.
fn someone_elses(resource: &str, name: &str, labels: Value) -> Value {
    let (api_version, kind) = match resource {
        "configmaps" => ("v1", "ConfigMap"),
        "secrets" => ("v1", "Secret"),
        "services" => ("v1", "Service"),
        "jobs" => ("batch/v1", "Job"),
        other => panic!("no such test resource {other}"),
    };
    json!({"apiVersion": api_version, "kind": kind,
           "metadata": {"name": name, "namespace": "hpc", "uid": "theirs", "resourceVersion": "77",
                        "labels": labels}})
}

fn already_exists(name: &str) -> (StatusCode, Value) {
    (
        StatusCode::CONFLICT,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": format!("\"{name}\" already exists"), "reason": "AlreadyExists", "code": 409}),
    )
}

/// Someone else's Secret holds the name of the MiniCluster's CURVE Secret and is not
/// labelled as the hub's (so the caches never see it): its POST gets a 409, it is read,
/// and then nothing is written to it, no Job is created, and the MiniCluster is refused
/// with the object named, once; a watch of that one object (by name) is opened so that its
/// change or deletion wakes the MiniCluster.
#[tokio::test]
async fn someone_elses_object_with_a_needed_name_is_never_written_and_refuses_the_minicluster() {
    let responder: Responder = Arc::new(|call: &Call| {
        let secret = "flux-sample-curve";
        if call.method == "POST" && call.path.ends_with("/secrets") {
            return already_exists(secret);
        }
        if call.method == "GET" && call.path.ends_with(&format!("/secrets/{secret}")) {
            return (
                StatusCode::OK,
                someone_elses("secrets", secret, json!({"team": "data"})),
            );
        }
        if call.method == "GET" && call.path.ends_with("/secrets") {
            // The blocker's watch: its listing, then a watch that stays open (empty).
            if call.query.contains("watch=true") {
                return (StatusCode::OK, Value::Null);
            }
            return (
                StatusCode::OK,
                json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                       "metadata": {"resourceVersion": "77"},
                       "items": [someone_elses("secrets", secret, json!({"team": "data"}))]}),
            );
        }
        echo(call)
    });
    let (client, server) = ApiServer::start(responder);
    let (ctx, _writers) = context(client);
    let mc = minicluster(SPEC);
    let action = run(&ctx, mc.clone())
        .await
        .expect("a refusal is not an error");
    assert_eq!(
        action,
        kube::runtime::controller::Action::await_change(),
        "no retry loop"
    );
    let calls = server.calls();
    let secret_name = calls
        .iter()
        .find(|c| c.method == "POST" && c.path.ends_with("/secrets"))
        .and_then(|c| c.body["metadata"]["name"].as_str().map(str::to_string))
        .expect("the Secret was POSTed");
    assert_eq!(
        secret_name, "flux-sample-curve",
        "test names the real Secret"
    );
    let read = calls
        .iter()
        .find(|c| c.method == "GET" && c.path.ends_with("/secrets/flux-sample-curve"))
        .expect("the Secret behind the 409 is read");
    assert!(
        read.accept.contains("PartialObjectMetadata"),
        "only its metadata: someone else's Secret data is never read ({})",
        read.accept
    );
    for c in &calls {
        assert!(
            !(c.method == "PATCH" && c.path.contains("/secrets/")),
            "someone else's Secret was patched: {}",
            c.short()
        );
        assert!(c.method != "DELETE", "nothing is deleted: {}", c.short());
        assert!(
            !c.path.contains("/jobs"),
            "no Job without its configuration: {}",
            c.short()
        );
    }
    let event = calls
        .iter()
        .find(|c| c.path.ends_with("/events"))
        .expect("one Event");
    assert_eq!(event.body["type"], "Warning");
    assert_eq!(event.body["reason"], "NameTaken");
    let note = event.body["note"].as_str().expect("note");
    assert!(
        note.contains("Secret hpc/flux-sample-curve (made by someone else)"),
        "{note}"
    );
    let degraded = degraded_in_status_write(&calls);
    assert_eq!(degraded["status"], "True");
    assert_eq!(degraded["reason"], "NameTaken");
    assert_permitted(&calls);

    // The blocking Secret is watched, by name, metadata only.
    let mut watched = None;
    for _ in 0..100 {
        watched = server
            .calls()
            .into_iter()
            .find(|c| c.method == "GET" && c.path == "/api/v1/namespaces/hpc/secrets");
        if watched.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let watched = watched.expect("a watch of the blocking Secret");
    assert!(
        watched
            .query
            .contains("fieldSelector=metadata.name%3Dflux-sample-curve"),
        "{}",
        watched.query
    );
    assert_eq!(ctx.blockers.len(), 1);

    // Reconciled again with the refusal in its status: no second Event, no status write.
    let mut again = mc.clone();
    let written = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("a status write");
    again.status = Some(serde_json::from_value(written.body["status"].clone()).expect("status"));
    let before = server.calls().len();
    run(&ctx, again).await.expect("refused again");
    let repeated: Vec<String> = server.calls()[before..]
        .iter()
        .filter(|c| c.path.ends_with("/events") || c.path.ends_with("/status"))
        .map(Call::short)
        .collect();
    assert!(repeated.is_empty(), "{repeated:?}");
}

/// An object in the caches (labelled as the hub's by someone) that no MiniCluster
/// controls is found before anything is written: the pass writes no object at all.
#[tokio::test]
async fn a_cached_object_not_controlled_by_the_minicluster_stops_the_pass_before_any_write() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let other_minicluster = json!([{"apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster", "name": "flux-sample", "uid": "an-earlier-uid", "controller": true}]);
    let mut cm = someone_elses(
        "configmaps",
        "flux-sample-flux-config",
        json!({"app.kubernetes.io/managed-by": "flux-hub"}),
    );
    cm["metadata"]["ownerReferences"] = other_minicluster;
    writers
        .config_maps
        .apply_watcher_event(&watcher::Event::Apply(watched::<ConfigMap, ConfigMap>(cm)));
    run(&ctx, minicluster(SPEC)).await.expect("refused");
    let calls = server.calls();
    let writes: Vec<String> = calls
        .iter()
        .filter(|c| !c.path.ends_with("/events") && !c.path.ends_with("/status"))
        .filter(|c| c.method != "GET")
        .map(Call::short)
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
    let event = calls
        .iter()
        .find(|c| c.path.ends_with("/events"))
        .expect("Event");
    assert!(
        event.body["note"]
            .as_str()
            .expect("note")
            .contains("ConfigMap hpc/flux-sample-flux-config (controlled by another MiniCluster hpc/flux-sample (uid an-earlier-uid))"),
        "{}",
        event.body["note"]
    );
}

/// A burst that asks for privileges, host access and credentials in another cluster is
/// never assigned, even once the lead endpoint is known: its status entry says Invalid and
/// why, the BurstsReady condition and one Event name UnsafeBurst.
#[tokio::test]
async fn an_unsafe_burst_is_not_assigned_and_its_status_says_why() {
    let unsafe_spec = BURSTING.replace(
        r#"containers: [{image: "rockylinux:9", command: hostname}]"#,
        r#"containers: [{image: "rockylinux:9", command: hostname, securityContext: {privileged: true}, volumes: {root: {hostPath: /, path: /host}}}]
  pod: {serviceAccountName: flux-spoke, automountServiceAccountToken: true}"#,
    );
    assert_ne!(unsafe_spec, BURSTING);
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, mut writers) = context(client);
    let mc = minicluster(&unsafe_spec);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let calls = server.calls();
    let status = observe(&calls, &mut writers).expect("status");
    let burst = &status["bursts"][0];
    assert_eq!(burst["name"], "burst-gke");
    assert_eq!(burst["phase"], "Invalid");
    let message = burst["message"].as_str().expect("message");
    assert!(message.starts_with("UnsafeBurst: "), "{message}");
    for field in [
        "spec.pod.serviceAccountName",
        "spec.pod.automountServiceAccountToken",
        "spec.containers[0].securityContext.privileged",
        "spec.containers[0].volumes[\"root\"].hostPath",
    ] {
        assert!(message.contains(field), "{field} not in {message}");
    }
    let events: Vec<&Call> = calls
        .iter()
        .filter(|c| c.method == "POST" && c.path.contains("/events"))
        .filter(|c| c.body["reason"] == "UnsafeBurst")
        .collect();
    assert_eq!(events.len(), 1, "one Event");
    assert_eq!(events[0].body["type"], "Warning");

    // The lead endpoint becomes known: still nothing is sent to the spoke.
    lead_known(&calls, &mut writers);
    let mut next = mc;
    next.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    next.status = Some(serde_json::from_value(status).expect("status"));
    let before = server.calls().len();
    run(&ctx, next).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    assert!(
        ctx.registry
            .spokes(&|_| true)
            .spokes
            .iter()
            .all(|s| s.assignments == 0),
        "an unsafe burst must not be assigned"
    );
    assert!(ctx.registry.snapshot("gke").assignments.is_empty());
    assert!(
        !calls
            .iter()
            .any(|c| c.path.contains("/events") && c.body["reason"] == "UnsafeBurst"),
        "no second Event"
    );
    // The lead endpoint is new in the status; the bursts stay refused.
    let status = &calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status")
        .body["status"];
    assert_eq!(status["leadBroker"]["port"], 30093);
    assert_eq!(status["bursts"][0]["phase"], "Invalid");
    let ready = status["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "BurstsReady")
        .expect("BurstsReady");
    assert_eq!(ready["reason"], "UnsafeBurst");
}

/// The same kind of burst, sent to a spoke whose policy lists what it asks for (announced
/// when it connected): assigned once the lead endpoint is known. What the spoke does not
/// list still refuses it, naming the spoke and the field.
#[tokio::test]
async fn a_burst_the_spokes_announced_exceptions_admit_is_assigned() {
    use flux_shared::federation::policy::Announced;
    use flux_shared::federation::proto::NamespaceExceptions;
    let privileged_spec = BURSTING.replace(
        r#"containers: [{image: "rockylinux:9", command: hostname}]"#,
        r#"containers: [{image: "rockylinux:9", command: hostname, securityContext: {privileged: true}, volumes: {data: {hostPath: /data/x, path: /data}}}]
  pod: {serviceAccountName: runner}"#,
    );
    assert_ne!(privileged_spec, BURSTING);
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, mut writers) = context(client);
    ctx.registry.set_primed();
    let announced = |service_accounts: Vec<String>| {
        Announced::from_proto(&[NamespaceExceptions {
            namespace: "hpc".into(),
            privileged: true,
            host_paths: vec!["/data".into()],
            service_accounts,
            ..Default::default()
        }])
        .expect("well formed")
    };
    // Without the service account: refused, naming the spoke and the field left.
    let spoke = ctx
        .registry
        .clone()
        .subscribe("gke", "test", announced(vec![]), Default::default())
        .expect("primed");
    let mc = minicluster(&privileged_spec);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let status = observe(&server.calls(), &mut writers).expect("status");
    let message = status["bursts"][0]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("UnsafeBurst: ")
            && message.contains("spoke gke: spec.pod.serviceAccountName")
            && !message.contains("privileged")
            && !message.contains("hostPath"),
        "{message}"
    );
    drop(spoke);

    // The spoke reconnects listing it too: assigned once the lead endpoint is known.
    let _spoke = ctx
        .registry
        .clone()
        .subscribe(
            "gke",
            "test",
            announced(vec!["runner".into()]),
            Default::default(),
        )
        .expect("primed");
    let calls = server.calls();
    lead_known(&calls, &mut writers);
    let mut next = mc;
    next.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    next.status = Some(serde_json::from_value(status).expect("status"));
    run(&ctx, next).await.expect("reconcile");
    assert_eq!(
        ctx.registry.snapshot("gke").assignments.len(),
        1,
        "assigned to the spoke that lists its exceptions"
    );
}

/// Before the spoke has connected to this hub (after a restart, say), a burst that needs
/// what only its policy could allow is held as it is, not refused: no Event, nothing sent,
/// its spokes keep what they run. What no policy lifts is refused at once.
#[tokio::test]
async fn a_burst_needing_exceptions_waits_for_its_spoke_to_say_them() {
    let privileged_spec = BURSTING.replace(
        r#"containers: [{image: "rockylinux:9", command: hostname}]"#,
        r#"containers: [{image: "rockylinux:9", command: hostname, securityContext: {privileged: true}}]"#,
    );
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, mut writers) = context(client);
    ctx.registry.set_primed();
    run(&ctx, minicluster(&privileged_spec))
        .await
        .expect("reconcile");
    let calls = server.calls();
    let status = observe(&calls, &mut writers).expect("status");
    let burst = &status["bursts"][0];
    assert_eq!(burst["phase"], "Pending", "{burst}");
    let message = burst["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("waiting for the spoke to connect")
            && message.contains("spec.containers[0].securityContext.privileged"),
        "{message}"
    );
    let warnings: Vec<&Value> = calls
        .iter()
        .filter(|c| c.path.contains("/events") && c.body["type"] == "Warning")
        .map(|c| &c.body["reason"])
        .collect();
    assert!(
        warnings.is_empty(),
        "no Warning while it waits: {warnings:?}"
    );
    assert!(ctx.registry.snapshot("gke").assignments.is_empty());

    // A token no policy lifts: refused, whether or not the spoke has spoken.
    let token_spec = BURSTING.replace(
        r#"containers: [{image: "rockylinux:9", command: hostname}]"#,
        r#"containers: [{image: "rockylinux:9", command: hostname, securityContext: {privileged: true}}]
  pod: {automountServiceAccountToken: true}"#,
    );
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, mut writers) = context(client);
    ctx.registry.set_primed();
    run(&ctx, minicluster(&token_spec))
        .await
        .expect("reconcile");
    let status = observe(&server.calls(), &mut writers).expect("status");
    assert_eq!(status["bursts"][0]["phase"], "Invalid");
}

/// The API server's answer to the POST of a ConfigMap over its 1 MiB limit.
fn config_map_too_long(call: &Call) -> Option<(StatusCode, Value)> {
    (call.method == "POST" && call.path.ends_with("/configmaps")).then(|| {
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "message": "ConfigMap \"flux-sample-flux-config\" is invalid: []: Too long: may not be more than 1048576 bytes",
                   "reason": "Invalid", "code": 422}),
        )
    })
}

/// An object of the spec that the API server finds invalid (a ConfigMap over its 1 MiB
/// limit): the MiniCluster is Invalid with the API server's reason, once, no Job is made,
/// and the pass is not retried in a loop.
#[tokio::test]
async fn an_object_the_api_server_refuses_makes_the_minicluster_invalid_without_retries() {
    let responder: Responder = Arc::new(|call: &Call| {
        if let Some(refusal) = config_map_too_long(call) {
            return refusal;
        }
        echo(call)
    });
    let (client, server) = ApiServer::start(responder);
    let (ctx, _writers) = context(client);
    let action = run(&ctx, minicluster(SPEC)).await.expect("not an error");
    assert_eq!(
        action,
        kube::runtime::controller::Action::await_change(),
        "no retry loop"
    );
    let calls = server.calls();
    assert!(
        !calls.iter().any(|c| c.path.contains("/jobs")),
        "no Job without its configuration: {:?}",
        calls.iter().map(Call::short).collect::<Vec<_>>()
    );
    let events: Vec<&Call> = calls
        .iter()
        .filter(|c| c.path.ends_with("/events"))
        .collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].body["reason"], "RejectedByAPIServer");
    let note = events[0].body["note"].as_str().expect("note");
    assert!(
        note.contains("ConfigMap/flux-sample-flux-config") && note.contains("1048576 bytes"),
        "{note}"
    );
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status");
    assert_eq!(status.body["status"]["phase"], "Invalid");
}

/// The job of `writers`' cache, changed by `edit` as another manager's write would.
fn edit_cached_job(writers: &mut Writers, ctx: &Context, edit: impl FnOnce(&mut Job)) {
    let mut job = (*ctx
        .stores
        .jobs
        .get(&reflector::ObjectRef::new("flux-sample").within("hpc"))
        .expect("cached job"))
    .clone();
    edit(&mut job);
    let rv: u64 = job
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or("1")
        .parse()
        .unwrap_or(1);
    job.metadata.resource_version = Some((rv + 1).to_string());
    writers
        .jobs
        .apply_watcher_event(&watcher::Event::Apply(job));
}

/// Kueue's protocol on the root Job (suspended at creation, resumed on admission, suspended
/// again on preemption) is never undone: the hub sends `suspend` in its POST only, its
/// applies neither send nor own it, and it writes it again only when `spec.suspend` changes.
#[tokio::test]
async fn a_suspend_or_resume_of_another_manager_stands_until_spec_suspend_changes() {
    // The POST recorded suspend under the hub's Update entry (as a Kueue webhook's mutation
    // of the hub's POST would be too).
    let respond: Responder = Arc::new(|c: &Call| {
        if c.method == "GET" && c.path.ends_with("/jobs/flux-sample") {
            let mut job = created_by_post(&c.path);
            job["metadata"]["managedFields"][0]["fieldsV1"] = json!({
                "f:metadata": {"f:labels": {}, "f:annotations": {"f:flux-framework.org/suspend": {}}},
                "f:spec": {"f:suspend": {}, "f:parallelism": {}},
            });
            return (StatusCode::OK, job);
        }
        echo(c)
    });
    let (client, server) = ApiServer::start(respond);
    let (ctx, mut writers) = context(client);
    let mut mc = minicluster(SPEC);
    mc.spec.suspend = Some(true);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let calls = server.calls();
    let post = calls
        .iter()
        .find(|c| c.method == "POST" && c.path.ends_with("/jobs"))
        .expect("job created");
    assert_eq!(post.body["spec"]["suspend"], true, "created suspended");
    assert_eq!(
        post.body["metadata"]["annotations"]["flux-framework.org/suspend"],
        "true"
    );
    let status = observe(&calls, &mut writers).expect("status");
    assert_eq!(status["phase"], "Suspended");
    mc.status = Some(serde_json::from_value(status).expect("status"));

    // The queue manager admits the Job (resumes it); the author then scales, which applies
    // the Job: the apply does not carry suspend, and nothing writes it back.
    edit_cached_job(&mut writers, &ctx, |j| {
        j.spec.as_mut().expect("spec").suspend = Some(false);
    });
    let mut scaled = mc.clone();
    scaled.spec.size = 3;
    scaled.metadata.generation = Some(2);
    let before = server.calls().len();
    run(&ctx, scaled.clone()).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    let apply = calls
        .iter()
        .find(|c| writes_object(c, "jobs", "flux-sample"))
        .expect("job applied");
    assert_eq!(apply.body["spec"]["parallelism"], 3);
    assert!(
        apply.body["spec"].get("suspend").is_none()
            && apply.body["metadata"]["annotations"]
                .get("flux-framework.org/suspend")
                .is_none(),
        "the apply owns neither suspend nor its record: {}",
        apply.body
    );
    let take_over = calls
        .iter()
        .find(|c| {
            c.method == "PATCH"
                && c.path.ends_with("/jobs/flux-sample")
                && !c.query.contains("fieldManager")
        })
        .expect("the POST's fields taken over");
    let fields = &take_over.body["metadata"]["managedFields"][0]["fieldsV1"];
    assert_eq!(
        *fields,
        json!({"f:metadata": {"f:labels": {}}, "f:spec": {"f:parallelism": {}}}),
        "suspend is released to whoever writes it next"
    );
    assert!(
        !calls.iter().any(|c| c.query.contains("flux-hub-suspend")),
        "no write of suspend while spec.suspend is unchanged"
    );

    // Preempted: suspended again by the queue manager; still not taken back.
    observe(&calls, &mut writers);
    edit_cached_job(&mut writers, &ctx, |j| {
        j.spec.as_mut().expect("spec").suspend = Some(true);
    });
    let before = server.calls().len();
    run(&ctx, scaled.clone()).await.expect("reconcile");
    assert!(
        !server.calls()[before..]
            .iter()
            .any(|c| c.path.contains("/jobs/")),
        "the Job is left as the queue manager set it"
    );

    // The author resumes it: written once, as a merge patch of its own manager.
    let mut resumed = scaled.clone();
    resumed.spec.suspend = Some(false);
    resumed.metadata.generation = Some(3);
    let before = server.calls().len();
    run(&ctx, resumed).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    let written: Vec<&Call> = calls
        .iter()
        .filter(|c| c.query.contains("fieldManager=flux-hub-suspend"))
        .collect();
    assert_eq!(
        written.len(),
        1,
        "{:?}",
        calls.iter().map(Call::short).collect::<Vec<_>>()
    );
    assert_eq!(
        written[0].body,
        json!({"metadata": {"annotations": {"flux-framework.org/suspend": "false"}},
               "spec": {"suspend": false}})
    );
    assert_permitted(&calls);
}

/// Without `spec.suspend` the hub never sends the root Job's `suspend`.
#[tokio::test]
async fn without_spec_suspend_the_root_job_carries_no_suspend() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, _writers) = context(client);
    run(&ctx, minicluster(SPEC)).await.expect("reconcile");
    let post = server
        .calls()
        .into_iter()
        .find(|c| c.method == "POST" && c.path.ends_with("/jobs"))
        .expect("job created");
    assert!(post.body["spec"].get("suspend").is_none(), "{}", post.body);
}

/// A running burst is never withdrawn for what the hub does not know at the moment: the
/// lead Service gone from the cache (deleted, being re-created) leaves its NodePort
/// unknown, and the burst keeps its assignment (the last known endpoint) rather than
/// being deleted by its spoke.
#[tokio::test]
async fn a_burst_keeps_its_assignment_while_the_lead_endpoint_is_unknown() {
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, mut writers) = context(client);
    let mc = minicluster(BURSTING);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let calls = server.calls();
    let status = observe(&calls, &mut writers).expect("status");
    lead_known(&calls, &mut writers);
    let mut next = mc.clone();
    next.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    next.status = Some(serde_json::from_value(status).expect("status"));
    let before = server.calls().len();
    run(&ctx, next.clone()).await.expect("reconcile");
    let status = server.calls()[before..]
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status")
        .body["status"]
        .clone();
    let assigned = ctx.registry.snapshot("gke");
    assert_eq!(assigned.assignments.len(), 1, "assigned");

    // The lead Service disappears from the cache: its NodePort is not known any more.
    let lead = writers_service(&calls);
    writers
        .services
        .apply_watcher_event(&watcher::Event::Delete(lead));
    next.status = Some(serde_json::from_value(status).expect("status"));
    run(&ctx, next).await.expect("reconcile");
    let snapshot = ctx.registry.snapshot("gke");
    assert_eq!(
        snapshot.assignments, assigned.assignments,
        "the burst keeps its assignment as it was"
    );
    assert!(
        !ctx.registry
            .has_unconfirmed_withdrawals(&McKey::new("hpc", "flux-sample")),
        "nothing is withdrawn"
    );
}

/// After a restart, a MiniCluster whose status does not name its lead broker yet (the hub
/// stopped before it wrote it) has its bursts retained in the spokes' first snapshots.
#[tokio::test]
async fn a_restarted_hub_retains_bursts_it_cannot_assign_yet() {
    let (client, _server) = ApiServer::start(Arc::new(with_node));
    let (ctx, _writers) = context(client);
    flux_hub::controller::federate::rebuild::prime(&ctx, &[minicluster(BURSTING)]);
    let snapshot = ctx.registry.snapshot("gke");
    assert!(snapshot.assignments.is_empty());
    assert_eq!(snapshot.retained_keys, ["hpc/flux-sample/burst-gke"]);
}

/// After a restart, a burst that names candidates stays with the spoke its status placed
/// it on: that spoke's first snapshot keeps it (nothing running is deleted), and no other
/// candidate is sent it.
#[tokio::test]
async fn a_restarted_hub_keeps_a_placed_burst_where_its_status_says_it_runs() {
    let (client, _server) = ApiServer::start(Arc::new(echo));
    let (ctx, _writers) = context(client);
    let mut mc = minicluster(CANDIDATES);
    mc.status = serde_json::from_value(json!({
        "bursts": [{"name": "burst", "cluster": "b", "phase": "Running", "size": 3,
                    "placement": {"skipped": [{"cluster": "a", "reason": "NoRoom"}]}}]
    }))
    .ok();
    flux_hub::controller::federate::rebuild::prime(&ctx, &[mc]);
    let on_b = ctx.registry.snapshot("b");
    let keys: Vec<&String> = on_b
        .retained_keys
        .iter()
        .chain(on_b.assignments.iter().map(|a| &a.key))
        .collect();
    assert_eq!(keys, ["hpc/flux-sample/burst"]);
    let on_a = ctx.registry.snapshot("a");
    assert!(on_a.assignments.is_empty() && on_a.retained_keys.is_empty());
}

/// A deleted MiniCluster whose burst names candidates waits for the spoke its status
/// placed the burst on to confirm it gone, as for a burst with one `cluster`.
#[tokio::test]
async fn a_deleted_minicluster_waits_for_the_spoke_a_candidate_burst_was_placed_on() {
    let (client, server) = ApiServer::start(Arc::new(echo));
    let (ctx, _writers) = context(client);
    ctx.registry.set_primed();
    let _b = ctx
        .registry
        .clone()
        .subscribe("b", "test", Default::default(), Default::default())
        .expect("primed");
    let mut mc = deleted_from(CANDIDATES, 10);
    mc.status = serde_json::from_value(json!({
        "bursts": [{"name": "burst", "cluster": "b", "phase": "Running", "size": 3,
                    "placement": {}}]
    }))
    .ok();
    let action = run(&ctx, mc).await.expect("reconcile");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(290)),
        "waits for spoke b"
    );
    let calls = server.calls();
    assert!(
        calls
            .iter()
            .all(|c| !c.body["metadata"]["finalizers"].is_array()),
        "the finalizer is kept"
    );
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status");
    assert_eq!(status.body["status"]["bursts"][0]["phase"], "Deleting");
    assert_eq!(status.body["status"]["bursts"][0]["cluster"], "b");
}

/// A bursting MiniCluster whose objects the root API server refuses (its ConfigMap over
/// the limit) gets no assignment, though its lead broker's address and port are pinned:
/// its bursts say why, and no spoke holds its spec.
#[tokio::test]
async fn a_minicluster_the_root_refuses_gets_no_assignment() {
    let responder: Responder = Arc::new(|call: &Call| {
        if let Some(refusal) = config_map_too_long(call) {
            return refusal;
        }
        with_node(call)
    });
    let (client, server) = ApiServer::start(responder);
    let (ctx, mut writers) = context(client);
    let mut mc = minicluster(&BURSTING.replace(
        "    bursting:\n",
        "    bursting:\n      leadAddress: 203.0.113.9\n      leadNodePort: 30111\n",
    ));
    mc.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    run(&ctx, mc.clone()).await.expect("not an error");
    // The lead Service as the cache then has it (a NodePort allocated): the lead endpoint
    // is known on the next pass.
    lead_known(&server.calls(), &mut writers);
    let before = server.calls().len();
    run(&ctx, mc).await.expect("not an error");
    let snapshot = ctx.registry.snapshot("gke");
    assert!(
        snapshot.assignments.is_empty(),
        "assigned: {:?}",
        snapshot
            .assignments
            .iter()
            .map(|a| &a.key)
            .collect::<Vec<_>>()
    );
    let status = server.calls()[before..]
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status")
        .body["status"]
        .clone();
    assert_eq!(status["phase"], "Invalid");
    let message = status["bursts"][0]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("RootRefused: "), "{status}");
}

const CANDIDATES: &str = r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {name: flux-sample, namespace: hpc, uid: mc-uid, generation: 1, resourceVersion: "7"}
spec:
  size: 2
  containers: [{image: "rockylinux:9", command: hostname}]
  flux:
    bursting:
      clusters:
        - name: burst
          size: 3
          relay: true
          candidates: [{cluster: a}, {matchLabels: {tier: spot}}]
"#;

/// A report of room `pods` free pod slots, the policy admitting namespace `hpc`.
fn room_report(
    registry: &flux_hub::federation::registry::Registry,
    spoke: &str,
    pods: i64,
    statuses: Vec<flux_shared::federation::proto::AssignmentStatus>,
) {
    use flux_shared::federation::proto;
    let version = registry
        .spokes(&|_| true)
        .spokes
        .iter()
        .find(|s| s.name == spoke)
        .map_or(0, |s| s.current_version);
    registry.report(
        spoke,
        proto::ReportRequest {
            hub_epoch: registry.epoch().to_string(),
            applied_version: version,
            statuses,
            cluster_access: None,
            room: Some(proto::ClusterRoom {
                nodes: vec![proto::NodeRoom {
                    count: 1,
                    free_milli: [("pods".to_string(), pods * 1000)].into(),
                }],
                policy: Some(proto::PolicyRoom {
                    valid: true,
                    namespaces: vec!["hpc".into()],
                    max_brokers: 32,
                    max_brokers_per_minicluster: 32,
                    brokers: 0,
                }),
                ..proto::ClusterRoom::default()
            }),
        },
    );
}

/// The last status the hub wrote, and the Events it posted, since call `from`.
fn written(server: &ApiServer, from: usize) -> (Value, Vec<Value>) {
    let calls = server.calls()[from..].to_vec();
    assert_permitted(&calls);
    let status = calls
        .iter()
        .rev()
        .find(|c| c.path.ends_with("/status"))
        .map(|c| c.body["status"].clone())
        .expect("a status write");
    let events = calls
        .iter()
        .filter(|c| c.path.contains("/events"))
        .map(|c| c.body.clone())
        .collect();
    (status, events)
}

#[tokio::test]
async fn a_burst_with_candidates_goes_where_there_is_room_and_moves_only_once_the_first_lets_go() {
    use flux_shared::federation::proto::{AssignmentStatus, BurstPhase};
    let (client, server) = ApiServer::start(Arc::new(echo));
    let (ctx, _writers) = context(client);
    ctx.registry.set_primed();
    let registry = ctx.registry.clone();
    let _a = registry
        .clone()
        .subscribe("a", "test", Default::default(), Default::default())
        .expect("primed");
    let _b = registry
        .clone()
        .subscribe(
            "b",
            "test",
            Default::default(),
            [("tier".to_string(), "spot".to_string())].into(),
        )
        .expect("primed");
    room_report(&registry, "a", 1, vec![]);
    room_report(&registry, "b", 8, vec![]);

    // a, first, has room for 1 of 3 brokers: the burst goes to b, which matches the labels.
    let mut mc = minicluster(CANDIDATES);
    mc.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let (status, events) = written(&server, 0);
    let burst = &status["bursts"][0];
    assert_eq!(burst["cluster"], "b", "{burst}");
    assert_eq!(
        burst["placement"]["skipped"],
        json!([{"cluster": "a", "reason": "NoRoom",
                "message": "its nodes have room for 1 of 3 brokers"}])
    );
    let placed = events
        .iter()
        .find(|e| e["reason"] == "BurstPlaced")
        .expect("an Event");
    assert_eq!(
        placed["note"],
        "burst burst placed on spoke b (skipped a: NoRoom (its nodes have room for 1 of 3 brokers))"
    );
    assert!(
        !events.iter().any(|e| e["reason"] == "BurstDispatched"),
        "one Event says it was placed and sent: {events:?}"
    );
    let key = "hpc/flux-sample/burst";
    assert_eq!(
        registry.held_elsewhere(key, ""),
        ["b"],
        "assigned to b only"
    );

    // b refuses it before any broker runs: it moves on, to a (no room there either, but
    // it admits it), once b has let go of it.
    room_report(
        &registry,
        "b",
        8,
        vec![AssignmentStatus {
            key: key.into(),
            phase: BurstPhase::Invalid as i32,
            reason: "ImageNotAllowed".into(),
            message: "image rockylinux:9 is not allowed".into(),
            observed_version: 1,
            ..AssignmentStatus::default()
        }],
    );
    mc.status = serde_json::from_value(status).ok();
    let from = server.calls().len();
    run(&ctx, mc.clone()).await.expect("reconcile");
    let (status, events) = written(&server, from);
    let burst = &status["bursts"][0];
    assert_eq!(burst["cluster"], "a", "{burst}");
    assert_eq!(burst["phase"], "Pending");
    assert!(
        burst["message"]
            .as_str()
            .unwrap()
            .starts_with("moving to spoke a: waiting for spoke b"),
        "{burst}"
    );
    assert_eq!(burst["placement"]["skipped"][0]["reason"], "Refused");
    assert!(
        events.iter().any(|e| e["reason"] == "BurstMoved"),
        "{events:?}"
    );
    assert_eq!(
        registry.held_elsewhere(key, "a"),
        ["b"],
        "not sent to a while b may hold it"
    );

    // b applies the snapshot without it: now a gets it.
    room_report(&registry, "b", 8, vec![]);
    mc.status = serde_json::from_value(status).ok();
    let from = server.calls().len();
    run(&ctx, mc).await.expect("reconcile");
    let (status, _) = written(&server, from);
    assert_eq!(status["bursts"][0]["cluster"], "a");
    assert_eq!(registry.held_elsewhere(key, ""), ["a"]);
}

/// The status of a burst of CANDIDATES placed on `cluster` by an earlier hub, in 2026
/// (before this process started, far past the placement timeout), with `held_by`.
fn placed_earlier(
    cluster: &str,
    phase: &str,
    held_by: &[&str],
) -> Option<flux_shared::api::MiniClusterStatus> {
    serde_json::from_value(json!({
        "bursts": [{"name": "burst", "cluster": cluster, "phase": phase, "size": 3,
                    "placement": {"placedAt": "2026-01-01T00:00:00Z", "heldBy": held_by}}]
    }))
    .ok()
}

/// A spoke's report on burst `key` of CANDIDATES: `phase`, `ready` of 3 brokers ready.
fn on_burst(
    key: &str,
    phase: flux_shared::federation::proto::BurstPhase,
    ready: i32,
) -> flux_shared::federation::proto::AssignmentStatus {
    flux_shared::federation::proto::AssignmentStatus {
        key: key.into(),
        phase: phase as i32,
        size: 3,
        brokers_ready: ready,
        observed_version: 1,
        ..Default::default()
    }
}

/// A hub restarted long after a candidate burst was placed: its spokes reconnect and it
/// reconciles before the burst's spoke reports. The burst stays where it runs: no move, no
/// `BurstNotPlaced` or `BurstMoved`, its spoke keeps it, and another candidate with room
/// gets nothing; once its spoke reports it running, still so.
#[tokio::test]
async fn a_restarted_hub_never_moves_a_candidate_burst_before_its_spoke_reports() {
    use flux_shared::federation::proto::BurstPhase;
    let (client, server) = ApiServer::start(Arc::new(echo));
    let (ctx, _writers) = context(client);
    let mut mc = minicluster(CANDIDATES);
    mc.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    mc.status = placed_earlier("b", "Running", &[]);
    flux_hub::controller::federate::rebuild::prime(&ctx, std::slice::from_ref(&mc));
    let registry = ctx.registry.clone();
    let _a = registry
        .clone()
        .subscribe("a", "test", Default::default(), Default::default())
        .expect("primed");
    let _b = registry
        .clone()
        .subscribe(
            "b",
            "test",
            Default::default(),
            [("tier".to_string(), "spot".to_string())].into(),
        )
        .expect("primed");
    // a, first in order, has room; b has said nothing yet.
    room_report(&registry, "a", 8, vec![]);
    let key = "hpc/flux-sample/burst";
    for report in [None, Some(on_burst(key, BurstPhase::Running, 3))] {
        if let Some(report) = report {
            room_report(&registry, "b", 8, vec![report]);
        }
        let from = server.calls().len();
        run(&ctx, mc.clone()).await.expect("reconcile");
        let (status, events) = written(&server, from);
        let burst = &status["bursts"][0];
        assert_eq!(burst["cluster"], "b", "{burst}");
        assert_eq!(burst["placement"]["placedAt"], "2026-01-01T00:00:00Z");
        assert!(
            !events
                .iter()
                .any(|e| e["reason"] == "BurstMoved" || e["reason"] == "BurstNotPlaced"),
            "{events:?}"
        );
        assert_eq!(
            registry.held_elsewhere(key, ""),
            ["b"],
            "assigned to b only"
        );
        assert!(!registry.has_unconfirmed_withdrawals(&McKey::new("hpc", "flux-sample")));
        mc.status = serde_json::from_value(status).ok();
    }
}

/// A hub restarted while a candidate burst was moving (its status names the new spoke and
/// the one it left, which had not confirmed it gone): the new spoke gets nothing until the
/// one it left confirms, as before the restart, and that spoke's first snapshot leaves the
/// burst out.
#[tokio::test]
async fn a_restarted_hub_finishes_a_move_only_once_the_spoke_left_confirms() {
    let (client, server) = ApiServer::start(Arc::new(echo));
    let (ctx, _writers) = context(client);
    let mut mc = minicluster(CANDIDATES);
    mc.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    mc.status = placed_earlier("a", "Pending", &["b"]);
    flux_hub::controller::federate::rebuild::prime(&ctx, std::slice::from_ref(&mc));
    let registry = ctx.registry.clone();
    let key = "hpc/flux-sample/burst";
    let on_b = registry.snapshot("b");
    assert!(
        on_b.assignments.is_empty() && on_b.retained_keys.is_empty(),
        "b's first snapshot leaves the burst out: {on_b:?}"
    );
    assert_eq!(registry.held_elsewhere(key, "a"), ["b"]);
    let _a = registry
        .clone()
        .subscribe("a", "test", Default::default(), Default::default())
        .expect("primed");
    let _b = registry
        .clone()
        .subscribe("b", "test", Default::default(), Default::default())
        .expect("primed");
    room_report(&registry, "a", 8, vec![]);
    let from = server.calls().len();
    run(&ctx, mc.clone()).await.expect("reconcile");
    let (status, events) = written(&server, from);
    let burst = &status["bursts"][0];
    assert_eq!(burst["cluster"], "a", "{burst}");
    assert_eq!(burst["placement"]["heldBy"], json!(["b"]), "{burst}");
    assert!(
        burst["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("moving to spoke a: waiting for spoke b"),
        "{burst}"
    );
    assert!(
        !events.iter().any(|e| e["reason"] == "BurstMoved"),
        "{events:?}"
    );
    assert!(
        registry.snapshot("a").assignments.is_empty(),
        "not sent to a while b may hold it"
    );

    // b applies a snapshot of this hub without it: a gets it, and the status says so.
    room_report(&registry, "b", 8, vec![]);
    mc.status = serde_json::from_value(status).ok();
    let from = server.calls().len();
    run(&ctx, mc).await.expect("reconcile");
    let (status, _) = written(&server, from);
    assert_eq!(status["bursts"][0]["cluster"], "a");
    assert!(
        status["bursts"][0]["placement"]["heldBy"].is_null(),
        "{status}"
    );
    assert_eq!(registry.held_elsewhere(key, ""), ["a"]);
}
