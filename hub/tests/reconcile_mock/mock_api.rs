//! The harness: an API-server double on kube's mock service that records every request
//! and answers as an API server would, the hub's context and caches fed from what a pass
//! wrote, and the RBAC check of every request made.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use flux_hub::controller::context::{self, Context};
use flux_hub::controller::permissions;
use flux_hub::controller::reconcile;
use flux_hub::controller::watch::broker_pods::{self, BrokerPodsWriter};
use flux_hub::controller::watch::cache::{BrokerPod, Compact};
use flux_hub::controller::watch::partial_decode::{Partial, Selection};
use flux_hub::controller::watch::stores::Stores;
use flux_hub::ops::metrics::Metrics;
use flux_shared::api::MiniCluster;
use http::{Request, Response, StatusCode};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use serde_json::{Value, json};

/// One request the controller made.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) query: String,
    /// The Accept header (a metadata-only read asks for PartialObjectMetadata).
    pub(crate) accept: String,
    pub(crate) body: Value,
}

impl Call {
    pub(crate) fn short(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

pub(crate) type Responder = Arc<dyn Fn(&Call) -> (StatusCode, Value) + Send + Sync>;

/// API-server double: answers with `respond` and records every call.
pub(crate) struct ApiServer {
    pub(crate) calls: Arc<Mutex<Vec<Call>>>,
}

impl ApiServer {
    pub(crate) fn start(respond: Responder) -> (Client, ApiServer) {
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

    pub(crate) fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("calls").clone()
    }
}

/// What an API server answers to a server-side apply: the object, with server fields.
pub(crate) fn echo(call: &Call) -> (StatusCode, Value) {
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
pub(crate) fn writes_object(c: &Call, resource: &str, name: &str) -> bool {
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
pub(crate) fn created_by_post(path: &str) -> Value {
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

pub(crate) fn compacted<K: Compact>(mut object: K) -> K {
    object.compact();
    object
}

/// `json` as the hub's watch of selection `S` caches it: partially decoded, then compacted.
pub(crate) fn watched<K, S>(json: Value) -> K
where
    K: Compact + serde::de::DeserializeOwned,
    S: Selection,
{
    let partial: Partial<K, S> = serde_json::from_value(json).expect("decodes as watched");
    compacted(partial.into_inner())
}

pub(crate) fn ok_responder() -> Responder {
    Arc::new(echo)
}

pub(crate) struct Writers {
    pub(crate) jobs: Writer<Job>,
    pub(crate) secrets: Writer<Secret>,
    pub(crate) config_maps: Writer<ConfigMap>,
    pub(crate) services: Writer<Service>,
    pub(crate) broker_pods: BrokerPodsWriter,
    pub(crate) pods: Writer<Pod>,
}

pub(crate) fn context(client: Client) -> (Arc<Context>, Writers) {
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

pub(crate) const SPEC: &str = r#"
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
pub(crate) fn lead_known(calls: &[Call], writers: &mut Writers) {
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
pub(crate) fn test_tls() -> flux_hub::commands::install::HubTls {
    flux_hub::commands::install::HubTls {
        ca_pem: "CA".into(),
        cert_pem: "CERT".into(),
        key_pem: "KEY".into(),
    }
}

pub(crate) fn minicluster(yaml: &str) -> MiniCluster {
    serde_yaml_ng::from_str(yaml).expect("test MiniCluster")
}

/// Feed what a first reconcile applied into the caches, as the watches would.
pub(crate) fn observe(calls: &[Call], writers: &mut Writers) -> Option<Value> {
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
pub(crate) fn assert_permitted(calls: &[Call]) {
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

pub(crate) async fn run(
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

/// The lead broker's pod as the hub's cache holds it (compacted: a Job's pod).
pub(crate) fn lead_pod() -> Pod {
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

pub(crate) fn writers_service(calls: &[Call]) -> Service {
    let call = calls
        .iter()
        .find(|c| writes_object(c, "services", "flux-sample-lead"))
        .expect("lead service");
    serde_json::from_value(echo(call).1).expect("service")
}

/// Spoke `spoke` reports once to `ctx`'s hub, saying `reach` of how its brokers reach the
/// root (`None`: as a spoke before path choice, nothing): the hub may then choose the path
/// of its bursts whose spec leaves `relay` unset.
pub(crate) fn spoke_reports_reach(
    ctx: &Context,
    spoke: &str,
    reach: Option<flux_shared::federation::proto::RootReach>,
) {
    use flux_hub::federation::served::Served;
    ctx.registry.report(
        spoke,
        flux_shared::federation::proto::ReportRequest {
            hub_epoch: ctx.registry.epoch().to_string(),
            root_reach: reach,
            ..Default::default()
        },
    );
}
