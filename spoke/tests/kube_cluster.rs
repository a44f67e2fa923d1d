//! [`KubeCluster`] against a mock API server (kube's `tower_test` pattern): the exact
//! requests it makes (paths, query parameters, bodies) and how it reads the answers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use flux_shared::federation::assignment::realize;
use flux_shared::federation::ownership::SpokeIdentity;
use flux_shared::federation::policy::{Level, NamespaceState};
use flux_spoke::cluster::{Cluster, Kind, KubeCluster, ObjectRef, OwnedObject, Scope};
use flux_spoke::testing::{sample_assignments, sample_identity};
use futures::StreamExt;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{self, SendResponse};

const SELECTOR: &str = "app.kubernetes.io/managed-by=flux-spoke";
const LIMIT: Duration = Duration::from_secs(30);

/// One request the mock API server received.
#[derive(Clone, Debug)]
struct Seen {
    method: Method,
    path: String,
    query: Vec<(String, String)>,
    content_type: Option<String>,
    body: Value,
}

impl Seen {
    fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn decode_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (unescape(k), unescape(v))
        })
        .collect()
}

fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap()
}

fn status(code: u16, reason: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": if code < 300 { "Success" } else { "Failure" },
        "message": format!("canned {reason}"), "reason": reason, "code": code,
    })
}

/// The spoke the tests' cluster is ([`sample_identity`]).
fn me() -> SpokeIdentity {
    sample_identity("gke")
}

/// Metadata of an object in `hpc` labelled managed-by flux-spoke, with the assignment
/// annotation `key` and, when given, spoke and federation labels.
fn meta_item(name: &str, key: Option<&str>, spoke: Option<(&str, &str)>) -> Value {
    meta_in("hpc", name, key, spoke)
}

fn meta_in(namespace: &str, name: &str, key: Option<&str>, spoke: Option<(&str, &str)>) -> Value {
    let mut metadata = json!({
        "name": name,
        "namespace": namespace,
        "uid": format!("uid-{name}"),
        "resourceVersion": "11",
        "labels": {"app.kubernetes.io/managed-by": "flux-spoke"},
    });
    if let Some(key) = key {
        metadata["annotations"] = json!({"flux-framework.org/assignment": key});
    }
    if let Some((spoke, federation)) = spoke {
        metadata["labels"]["flux-framework.org/spoke"] = json!(spoke);
        metadata["labels"]["flux-framework.org/federation"] = json!(federation);
    }
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": metadata})
}

/// Someone else's object: labelled by another manager.
fn foreign_in(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": {
        "name": name, "namespace": namespace, "uid": format!("theirs-{name}"),
        "resourceVersion": "77", "labels": {"app.kubernetes.io/managed-by": "helm"},
    }})
}

/// The object name in an object path (`.../namespaces/<ns>/<plural>/<name>`).
fn object_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or("")
}

/// The namespace and resource of a collection path in namespace `hpc` or `present`
/// (`/api/v1/namespaces/hpc/configmaps`, `/apis/batch/v1/namespaces/present/jobs`).
fn collection_in(path: &str) -> Option<(&str, &str)> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let rest = match parts.first() {
        Some(&"api") => &parts[2..],
        Some(&"apis") => &parts[3..],
        _ => return None,
    };
    match rest {
        ["namespaces", ns @ ("hpc" | "present"), plural] => Some((ns, plural)),
        _ => None,
    }
}

/// Whether `path` is an object path in namespace `namespace`.
fn in_namespace(path: &str, namespace: &str) -> bool {
    let marker = format!("/namespaces/{namespace}/");
    path.contains(&marker)
}

fn job_json(name: &str, ready: i32) -> Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "hpc", "resourceVersion": "3",
                     "labels": {"app.kubernetes.io/managed-by": "flux-spoke"}},
        "spec": {"parallelism": 2, "template": {"spec": {"containers": []}}},
        "status": {"ready": ready},
    })
}

/// Canned answers, by request. `None`: keep the request pending (watches).
fn answer(seen: &Seen) -> Option<(u16, Value)> {
    let path = seen.path.as_str();
    let list_meta = |items: Vec<Value>| {
        Some((
            200,
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                   "metadata": {"resourceVersion": "9"}, "items": items}),
        ))
    };
    match (seen.method.clone(), path) {
        (Method::GET, "/apis/batch/v1/jobs") if seen.param("watch") == Some("true") => None,
        (Method::GET, "/apis/batch/v1/jobs")
            if seen.content_type.is_none() && !is_metadata(seen) =>
        {
            Some((
                200,
                json!({"apiVersion": "batch/v1", "kind": "JobList",
                       "metadata": {"resourceVersion": "5"}, "items": [job_json("x", 2)]}),
            ))
        }
        (Method::GET, "/apis/batch/v1/jobs") => list_meta(vec![
            meta_item("x", Some("hpc/m/x"), Some(("gke", "insecure"))),
            // Another spoke's, and this spoke name's in another federation.
            meta_item("y", Some("hpc/m/y"), Some(("edge", "insecure"))),
            meta_item("z", Some("hpc/m/z"), Some(("gke", "0123abcd"))),
        ]),
        (Method::GET, "/api/v1/configmaps") => list_meta(vec![
            meta_item("x-flux-config", Some("hpc/m/x"), Some(("gke", "insecure"))),
            // Made by an older spoke (no spoke or federation labels): ours.
            meta_item("legacy", Some("hpc/m/old"), None),
            // Labelled but without the assignment annotation: not the spoke's.
            meta_item("stray", None, Some(("gke", "insecure"))),
        ]),
        (Method::GET, "/api/v1/pods" | "/api/v1/services" | "/api/v1/secrets") => list_meta(vec![]),
        // The policy ConfigMap, listed and watched by name in the spoke's namespace.
        (Method::GET, "/api/v1/namespaces/flux-spoke-system/configmaps")
            if seen.param("watch") == Some("true") =>
        {
            None
        }
        (Method::GET, "/api/v1/namespaces/flux-spoke-system/configmaps") => Some((
            200,
            json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "5"},
                   "items": [{"metadata": {"name": "flux-spoke-policy", "namespace": "flux-spoke-system", "resourceVersion": "4"},
                              "data": {"policy.yaml": "namespaces: [{name: hpc}]\n"}}]}),
        )),
        // A spoke with per-namespace RBAC lists and watches in namespaces hpc and present.
        (Method::GET, p) if collection_in(p).is_some() => {
            let (namespace, plural) = collection_in(p).unwrap_or_default();
            if seen.param("watch") == Some("true") {
                return None;
            }
            if plural == "jobs" && !is_metadata(seen) {
                let items: Vec<Value> = (namespace == "hpc")
                    .then(|| job_json("x", 2))
                    .into_iter()
                    .collect();
                return Some((
                    200,
                    json!({"apiVersion": "batch/v1", "kind": "JobList",
                           "metadata": {"resourceVersion": "5"}, "items": items}),
                ));
            }
            let mine = Some(("gke", "insecure"));
            list_meta(match (namespace, plural) {
                ("hpc", "jobs") => vec![meta_in("hpc", "x", Some("hpc/m/x"), mine)],
                ("present", "configmaps") => vec![
                    meta_in("present", "y-flux-config", Some("present/m/y"), mine),
                    meta_in(
                        "present",
                        "theirs",
                        Some("present/m/y"),
                        Some(("edge", "insecure")),
                    ),
                ],
                _ => vec![],
            })
        }
        (Method::GET, "/api/v1/namespaces/hpc") => Some((404, status(404, "NotFound"))),
        (Method::GET, "/api/v1/namespaces/present") => Some((
            200,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "present",
                   "labels": {"pod-security.kubernetes.io/enforce": "baseline"}}}),
        )),
        (Method::GET, "/api/v1/namespaces/racing") => Some((404, status(404, "NotFound"))),
        (Method::POST, "/api/v1/namespaces") => {
            if seen.body["metadata"]["name"] == "racing" {
                Some((409, status(409, "AlreadyExists")))
            } else {
                Some((201, seen.body.clone()))
            }
        }
        // Namespace `taken`: every name holds someone else's object. Namespace `race`:
        // every name holds the spoke's own object (made meanwhile, not yet listed).
        (Method::POST, p) if in_namespace(p, "taken") || in_namespace(p, "race") => {
            Some((409, status(409, "AlreadyExists")))
        }
        (Method::POST, _) => Some((201, seen.body.clone())),
        (Method::GET, p) if in_namespace(p, "taken") => {
            Some((200, foreign_in("taken", object_name(p))))
        }
        (Method::GET, p) if in_namespace(p, "race") => Some((
            200,
            meta_in(
                "race",
                object_name(p),
                Some("race/m/x"),
                Some(("gke", "insecure")),
            ),
        )),
        (Method::GET, p) if in_namespace(p, "posted") => {
            let mut meta = meta_in(
                "posted",
                object_name(p),
                Some("posted/m/x"),
                Some(("gke", "insecure")),
            );
            meta["metadata"]["managedFields"] = json!([{
                "manager": "flux-spoke", "operation": "Update", "apiVersion": "v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:dropped": {}}}}]);
            Some((200, meta))
        }
        (Method::GET, p) if in_namespace(p, "hpc") => Some((404, status(404, "NotFound"))),
        (Method::PATCH, _) => Some((200, seen.body.clone())),
        (Method::DELETE, "/apis/batch/v1/namespaces/hpc/jobs/x") => {
            Some((200, status(200, "Deleted")))
        }
        (Method::DELETE, "/api/v1/namespaces/hpc/configmaps/gone") => {
            Some((404, status(404, "NotFound")))
        }
        (Method::DELETE, "/api/v1/namespaces/hpc/secrets/locked") => {
            Some((403, status(403, "Forbidden")))
        }
        // The uid precondition failed: the name holds another object now.
        (Method::DELETE, "/api/v1/namespaces/hpc/services/replaced") => {
            Some((409, status(409, "Conflict")))
        }
        (method, path) => panic!("unexpected request {method} {path}"),
    }
}

fn is_metadata(seen: &Seen) -> bool {
    // kube asks for metadata-only lists through the Accept header, which the recorder
    // folds into `content_type` for GETs.
    seen.content_type
        .as_deref()
        .is_some_and(|a| a.contains("PartialObjectMetadata"))
}

/// A `KubeCluster` acting in every namespace, over a mock API server that answers with
/// [`answer`] and records every request.
fn setup() -> (KubeCluster, Arc<Mutex<Vec<Seen>>>) {
    setup_in(Scope::Cluster)
}

/// A `KubeCluster` acting in `scope`, over the mock API server of [`setup`].
fn setup_in(scope: Scope) -> (KubeCluster, Arc<Mutex<Vec<Seen>>>) {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        let mut pending: Vec<SendResponse<Response<Body>>> = Vec::new();
        while let Some((request, reply)) = handle.next_request().await {
            let method = request.method().clone();
            let path = request.uri().path().to_string();
            let query = decode_query(request.uri().query().unwrap_or(""));
            let header = if method == Method::GET {
                http::header::ACCEPT
            } else {
                http::header::CONTENT_TYPE
            };
            let content_type = request
                .headers()
                .get(header)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let bytes = request.into_body().collect_bytes().await.unwrap();
            let body = if bytes.is_empty() {
                Value::Null
            } else if let Ok(v) = serde_json::from_slice(&bytes) {
                v
            } else {
                Value::String(String::from_utf8_lossy(&bytes).into_owned())
            };
            let s = Seen {
                method,
                path,
                query,
                content_type: content_type.filter(|c| c != "application/json"),
                body,
            };
            log.lock().unwrap().push(s.clone());
            match answer(&s) {
                None => pending.push(reply),
                Some((code, body)) => reply.send_response(
                    Response::builder()
                        .status(StatusCode::from_u16(code).unwrap())
                        .header("content-type", "application/json")
                        .body(Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap(),
                ),
            }
        }
    });
    let client = kube::Client::new(service, "default");
    (KubeCluster::new(client, scope), seen)
}

/// Every request the cluster made is one `flux_shared::federation::spoke_rbac::REQUIRED` grants.
fn assert_permitted(seen: &Arc<Mutex<Vec<Seen>>>) {
    for s in seen.lock().unwrap().iter() {
        let parts: Vec<&str> = s.path.trim_start_matches('/').split('/').collect();
        let (group, rest) = match parts.first() {
            Some(&"api") => ("", &parts[2..]),
            Some(&"apis") => (parts[1], &parts[3..]),
            _ => panic!("unexpected path {}", s.path),
        };
        let rest = if rest.first() == Some(&"namespaces") && rest.len() > 2 {
            &rest[2..]
        } else {
            rest
        };
        let verb = match (s.method.as_str(), rest.len()) {
            ("GET", 1) if s.param("watch") == Some("true") => "watch",
            ("GET", 1) => "list",
            ("GET", _) => "get",
            ("POST", _) => "create",
            ("PATCH", _) => "patch",
            ("PUT", _) => "update",
            ("DELETE", _) => "delete",
            (m, _) => panic!("unexpected method {m}"),
        };
        assert!(
            flux_spoke::cluster::allows(group, rest[0], verb),
            "{} {} needs {verb} on {group}/{}, missing from REQUIRED",
            s.method,
            s.path,
            rest[0]
        );
        if verb == "patch" {
            assert!(
                flux_spoke::cluster::allows(group, rest[0], "create"),
                "server-side apply on {} may create: it needs create too",
                rest[0]
            );
        }
    }
}

/// Every request but the Job watcher's (its listing and watch of every namespace's Jobs,
/// which run in the background from the start).
fn writes_and_reads(seen: &Arc<Mutex<Vec<Seen>>>) -> Vec<Seen> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|s| {
            !(s.method == Method::GET && s.path == "/apis/batch/v1/jobs" && !is_metadata(s))
        })
        .cloned()
        .collect()
}

fn requests(seen: &Arc<Mutex<Vec<Seen>>>, method: Method) -> Vec<Seen> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|s| s.method == method)
        .cloned()
        .collect()
}

#[tokio::test]
async fn namespaces_are_read_with_their_pod_security_level_and_created_with_the_policys() {
    let (cluster, seen) = setup();
    assert_eq!(
        cluster.namespace("present").await.unwrap(),
        NamespaceState::Exists {
            enforce: Some("baseline".into())
        }
    );
    assert_eq!(
        cluster.namespace("hpc").await.unwrap(),
        NamespaceState::Missing
    );
    assert!(requests(&seen, Method::POST).is_empty());
    cluster
        .ensure_namespace("hpc", Level::Restricted)
        .await
        .unwrap();
    let posts = requests(&seen, Method::POST);
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0].body["metadata"]["name"], "hpc");
    let labels = &posts[0].body["metadata"]["labels"];
    for mode in ["enforce", "warn", "audit"] {
        assert_eq!(
            labels[format!("pod-security.kubernetes.io/{mode}")],
            "restricted",
            "{labels}"
        );
    }
    // Someone else created it meanwhile: left as it is.
    cluster
        .ensure_namespace("racing", Level::Baseline)
        .await
        .unwrap();
    assert_eq!(requests(&seen, Method::POST).len(), 2);
    assert!(
        cluster.policy().is_err(),
        "no policy source: nothing is decided"
    );
    assert_permitted(&seen);
}

#[tokio::test]
async fn the_policy_is_listed_and_watched_by_name_in_the_spokes_namespace_only() {
    let (cluster, seen) = setup();
    let cluster = cluster.with_policy("flux-spoke-system", "flux-spoke-policy");
    let mut changes = Box::pin(cluster.changes());
    let policy = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Ok(p) = cluster.policy() {
                return p;
            }
            changes.next().await;
        }
    })
    .await
    .expect("the policy is read");
    assert_eq!(policy.as_deref(), Some("namespaces: [{name: hpc}]\n"));
    let reads: Vec<Seen> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.path.contains("configmaps"))
        .cloned()
        .collect();
    assert!(reads.len() >= 2, "a list and a watch: {reads:?}");
    for r in &reads {
        assert_eq!(r.method, Method::GET);
        assert_eq!(r.path, "/api/v1/namespaces/flux-spoke-system/configmaps");
        assert_eq!(
            r.param("fieldSelector"),
            Some("metadata.name=flux-spoke-policy")
        );
        let verb = if r.param("watch") == Some("true") {
            "watch"
        } else {
            "list"
        };
        assert!(
            flux_shared::federation::spoke_rbac::POLICY_PERMISSIONS
                .iter()
                .any(|(g, res, verbs)| g.is_empty()
                    && *res == "configmaps"
                    && verbs.contains(&verb)),
            "{verb} on configmaps is in POLICY_PERMISSIONS"
        );
    }
}

fn plural(kind: Kind) -> (&'static str, &'static str) {
    match kind {
        Kind::Job => ("/apis/batch/v1", "jobs"),
        Kind::Pod => ("/api/v1", "pods"),
        Kind::Service => ("/api/v1", "services"),
        Kind::Secret => ("/api/v1", "secrets"),
        Kind::ConfigMap => ("/api/v1", "configmaps"),
    }
}

fn path_of(r: &ObjectRef) -> String {
    let (group, plural) = plural(r.kind);
    format!("{group}/namespaces/{}/{plural}/{}", r.namespace, r.name)
}

#[tokio::test]
async fn the_spokes_own_objects_are_read_then_server_side_applied_with_force() {
    let (cluster, seen) = setup();
    // Listed as ours, and still ours when read right before the write.
    let realized = realize(&sample_assignments("race", "m", &[("x", 2)])[0], &me()).unwrap();
    for o in &realized.objects {
        cluster.apply(o, true).await.unwrap();
    }
    let all = writes_and_reads(&seen);
    for pair in all.chunks(2) {
        let methods: Vec<_> = pair.iter().map(|s| s.method.clone()).collect();
        assert_eq!(methods, [Method::GET, Method::PATCH]);
        assert!(is_metadata(&pair[0]), "a metadata-only read");
        assert_eq!(pair[0].path, pair[1].path);
    }
    let patches = requests(&seen, Method::PATCH);
    assert_eq!(patches.len(), realized.objects.len());
    for (patch, object) in patches.iter().zip(&realized.objects) {
        let r = ObjectRef::of(object);
        let plural = match r.kind {
            Kind::Job => "jobs",
            Kind::Pod => "pods",
            Kind::Service => "services",
            Kind::Secret => "secrets",
            Kind::ConfigMap => "configmaps",
        };
        let group = if r.kind == Kind::Job {
            "/apis/batch/v1"
        } else {
            "/api/v1"
        };
        assert_eq!(
            patch.path,
            format!("{group}/namespaces/race/{plural}/{}", r.name)
        );
        assert_eq!(patch.param("fieldManager"), Some("flux-spoke"));
        assert_eq!(patch.param("force"), Some("true"));
        assert_eq!(
            patch.content_type.as_deref(),
            Some("application/apply-patch+yaml")
        );
        assert_eq!(patch.body["kind"], r.kind.as_str());
        assert_eq!(patch.body["metadata"]["name"], r.name.as_str());
        assert_eq!(
            patch.body["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "flux-spoke"
        );
        assert_eq!(
            patch.body["metadata"]["annotations"]["flux-framework.org/assignment"],
            "race/m/x"
        );
        assert_eq!(
            patch.body["metadata"]["labels"]["flux-framework.org/spoke"],
            "gke"
        );
        assert_eq!(
            patch.body["metadata"]["labels"]["flux-framework.org/federation"],
            "insecure"
        );
    }
    assert_permitted(&seen);
}

/// An object the spoke created with a POST: before its first apply the POST's `Update`
/// entry becomes the spoke's `Apply` entry (guarded by the resourceVersion read), so the
/// apply prunes what the rendering no longer has.
#[tokio::test]
async fn the_fields_a_post_recorded_are_taken_over_before_the_first_apply() {
    let (cluster, seen) = setup();
    let realized = realize(&sample_assignments("posted", "m", &[("x", 2)])[0], &me()).unwrap();
    let object = &realized.objects[0];
    cluster.apply(object, true).await.unwrap();
    let all = writes_and_reads(&seen);
    let methods: Vec<_> = all.iter().map(|s| s.method.clone()).collect();
    assert_eq!(methods, [Method::GET, Method::PATCH, Method::PATCH]);
    let take_over = &all[1];
    assert_eq!(
        take_over.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(take_over.body["metadata"]["resourceVersion"], "11");
    let entries = take_over.body["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["manager"], "flux-spoke");
    assert_eq!(entries[0]["operation"], "Apply");
    assert_eq!(all[2].param("force"), Some("true"));
    assert_permitted(&seen);
}

/// Listed as ours, but replaced by someone else's object since: never written.
#[tokio::test]
async fn an_object_replaced_since_it_was_listed_is_not_written() {
    let (cluster, seen) = setup();
    let realized = realize(&sample_assignments("taken", "m", &[("x", 2)])[0], &me()).unwrap();
    let object = &realized.objects[0];
    let error = cluster.apply(object, true).await.unwrap_err();
    assert!(error.taken.is_some(), "{error:?}");
    let methods: Vec<_> = writes_and_reads(&seen)
        .into_iter()
        .map(|s| s.method)
        .collect();
    assert_eq!(methods, [Method::GET]);
}

#[tokio::test]
async fn new_objects_are_created_with_a_post_never_a_forced_apply() {
    let (cluster, seen) = setup();
    let realized = realize(&sample_assignments("hpc", "m", &[("x", 2)])[0], &me()).unwrap();
    for o in &realized.objects {
        cluster.apply(o, false).await.unwrap();
    }
    let all = writes_and_reads(&seen);
    assert_eq!(all.len(), realized.objects.len(), "one POST each: {all:?}");
    for (post, object) in all.iter().zip(&realized.objects) {
        let r = ObjectRef::of(object);
        let (group, plural) = plural(r.kind);
        assert_eq!(post.method, Method::POST);
        assert_eq!(post.path, format!("{group}/namespaces/hpc/{plural}"));
        assert_eq!(post.param("fieldManager"), Some("flux-spoke"));
        assert_eq!(post.body["metadata"]["name"], r.name.as_str());
        assert_eq!(
            post.body["metadata"]["labels"]["flux-framework.org/spoke"],
            "gke"
        );
    }
    assert_permitted(&seen);
}

/// Someone else's objects hold the names: the POST fails, the object is read, and nothing
/// else is sent; the error names the object and its owner.
#[tokio::test]
async fn a_name_taken_by_someone_else_is_refused_without_writing_to_it() {
    let (cluster, seen) = setup();
    let realized = realize(&sample_assignments("taken", "m", &[("x", 2)])[0], &me()).unwrap();
    for o in &realized.objects {
        let r = ObjectRef::of(o);
        let err = cluster.apply(o, false).await.unwrap_err();
        let taken = err.taken.clone().unwrap_or_else(|| panic!("{err:?}"));
        assert_eq!(taken.object, r);
        assert_eq!(taken.owner, "managed by \"helm\"");
        assert_eq!(
            taken.uid.as_deref(),
            Some(format!("theirs-{}", r.name).as_str())
        );
        assert_eq!(taken.resource_version.as_deref(), Some("77"));
        let text = err.to_string();
        assert!(
            text.contains(&format!("{} taken/{}", r.kind, r.name)) && text.contains("helm"),
            "{text}"
        );
    }
    let all = writes_and_reads(&seen);
    let methods: Vec<_> = all.iter().map(|s| s.method.clone()).collect();
    let expected: Vec<_> = realized
        .objects
        .iter()
        .flat_map(|_| [Method::POST, Method::GET])
        .collect();
    assert_eq!(methods, expected, "{all:?}");
    for (pair, object) in all.chunks(2).zip(&realized.objects) {
        assert_eq!(pair[1].path, path_of(&ObjectRef::of(object)));
        assert!(is_metadata(&pair[1]), "a metadata-only read");
    }
    assert_permitted(&seen);
}

/// The spoke's own object behind a 409 (made meanwhile): applied as its own.
#[tokio::test]
async fn the_spokes_own_object_behind_a_conflict_is_applied() {
    let (cluster, seen) = setup();
    let realized = realize(&sample_assignments("race", "m", &[("x", 2)])[0], &me()).unwrap();
    let object = &realized.objects[0];
    cluster.apply(object, false).await.unwrap();
    let all = writes_and_reads(&seen);
    let methods: Vec<_> = all.iter().map(|s| s.method.clone()).collect();
    assert_eq!(methods, [Method::POST, Method::GET, Method::PATCH]);
    assert_eq!(all[2].path, path_of(&ObjectRef::of(object)));
    assert_eq!(all[2].param("force"), Some("true"));
    assert_permitted(&seen);
}

#[tokio::test]
async fn names_are_inspected_with_metadata_only_reads() {
    let (cluster, seen) = setup();
    let free = ObjectRef {
        kind: Kind::Job,
        namespace: "hpc".into(),
        name: "free".into(),
    };
    assert_eq!(cluster.inspect(&free).await.unwrap(), None);
    let held = ObjectRef {
        kind: Kind::Service,
        namespace: "taken".into(),
        name: "svc".into(),
    };
    let meta = cluster.inspect(&held).await.unwrap().unwrap();
    assert_eq!(meta.uid.as_deref(), Some("theirs-svc"));
    let gets = writes_and_reads(&seen);
    assert_eq!(gets.len(), 2);
    assert_eq!(gets[0].path, "/apis/batch/v1/namespaces/hpc/jobs/free");
    assert!(gets.iter().all(is_metadata));
    assert_permitted(&seen);
}

#[tokio::test]
async fn owned_objects_are_this_spokes_in_every_namespace() {
    let (cluster, seen) = setup();
    let owned = cluster.owned(&me()).await.unwrap();
    let object = |kind, name: &str, key: &str| OwnedObject {
        object: ObjectRef {
            kind,
            namespace: "hpc".into(),
            name: name.into(),
        },
        key: key.into(),
        uid: Some(format!("uid-{name}")),
    };
    let expected = vec![
        object(Kind::Job, "x", "hpc/m/x"),
        object(Kind::ConfigMap, "x-flux-config", "hpc/m/x"),
        object(Kind::ConfigMap, "legacy", "hpc/m/old"),
    ];
    assert_eq!(owned, expected);
    let lists: Vec<Seen> = requests(&seen, Method::GET)
        .into_iter()
        .filter(is_metadata)
        .collect();
    let paths: Vec<&str> = lists.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/apis/batch/v1/jobs",
            "/api/v1/pods",
            "/api/v1/services",
            "/api/v1/secrets",
            "/api/v1/configmaps"
        ]
    );
    for list in &lists {
        assert_eq!(list.param("labelSelector"), Some(SELECTOR), "{list:?}");
    }
    assert_permitted(&seen);
}

#[tokio::test]
async fn jobs_are_deleted_in_the_background_and_missing_objects_are_fine() {
    let (cluster, seen) = setup();
    let owned = |kind, name: &str| OwnedObject {
        object: ObjectRef {
            kind,
            namespace: "hpc".into(),
            name: name.into(),
        },
        key: "hpc/m/x".into(),
        uid: Some(format!("uid-{name}")),
    };
    cluster.delete(&owned(Kind::Job, "x")).await.unwrap();
    cluster
        .delete(&owned(Kind::ConfigMap, "gone"))
        .await
        .unwrap();
    let err = cluster
        .delete(&owned(Kind::Secret, "locked"))
        .await
        .unwrap_err();
    assert_eq!(err.code, Some(403));
    assert!(err.to_string().contains("Secret/hpc/locked"), "{err}");
    // Replaced by another object of the same name since it was listed: left alone.
    cluster
        .delete(&owned(Kind::Service, "replaced"))
        .await
        .unwrap();
    let deletes = requests(&seen, Method::DELETE);
    assert_eq!(deletes[0].body["propagationPolicy"], "Background");
    assert_eq!(deletes.len(), 4);
    for d in &deletes {
        let name = object_name(&d.path);
        assert_eq!(
            d.body["preconditions"]["uid"],
            format!("uid-{name}"),
            "every delete is conditional on the uid listed: {d:?}"
        );
    }
    assert_permitted(&seen);
}

#[tokio::test]
async fn a_job_replaced_for_a_new_path_is_deleted_in_the_foreground_by_its_uid() {
    let (cluster, seen) = setup();
    let job = OwnedObject {
        object: ObjectRef {
            kind: Kind::Job,
            namespace: "hpc".into(),
            name: "x".into(),
        },
        key: "hpc/m/x".into(),
        uid: Some("uid-x".into()),
    };
    cluster.delete_job_foreground(&job).await.unwrap();
    let deletes = requests(&seen, Method::DELETE);
    assert_eq!(deletes.len(), 1);
    assert_eq!(object_name(&deletes[0].path), "x");
    assert_eq!(deletes[0].body["propagationPolicy"], "Foreground");
    assert_eq!(deletes[0].body["preconditions"]["uid"], "uid-x");
    assert_permitted(&seen);
}

#[tokio::test]
async fn jobs_come_from_the_watch_cache_and_changes_wake_the_reporter() {
    let (cluster, seen) = setup();
    let mut changes = cluster.changes();
    let jobs = tokio::time::timeout(LIMIT, cluster.jobs())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].status.as_ref().unwrap().ready, Some(2));
    // The end of the initial listing is a change.
    tokio::time::timeout(LIMIT, changes.next())
        .await
        .unwrap()
        .unwrap();
    let watch_list = requests(&seen, Method::GET)
        .into_iter()
        .find(|s| s.path == "/apis/batch/v1/jobs" && !is_metadata(s))
        .unwrap();
    assert_eq!(watch_list.param("labelSelector"), Some(SELECTOR));
    assert_permitted(&seen);
}

/// Every request of a spoke acting in `granted` only: in those namespaces, what a Role of
/// `NAMESPACED_REQUIRED` grants; on the namespaces themselves, `NAMESPACE_READ` by name.
fn assert_permitted_in(seen: &Arc<Mutex<Vec<Seen>>>, granted: &[&str]) {
    use flux_shared::federation::spoke_rbac::{NAMESPACE_READ, NAMESPACED_REQUIRED};
    for s in seen.lock().unwrap().iter() {
        let parts: Vec<&str> = s.path.trim_start_matches('/').split('/').collect();
        let (group, rest) = match parts.first() {
            Some(&"api") => ("", &parts[2..]),
            Some(&"apis") => (parts[1], &parts[3..]),
            _ => panic!("unexpected path {}", s.path),
        };
        match rest {
            ["namespaces", name] => {
                assert_eq!(s.method, Method::GET, "{s:?}");
                assert!(granted.contains(name), "read of namespace {name}: {s:?}");
                assert_eq!((group, "namespaces"), (NAMESPACE_READ.0, NAMESPACE_READ.1));
            }
            ["namespaces", ns, resource, tail @ ..] => {
                if *ns == "flux-spoke-system" {
                    continue; // the policy, under its own Role
                }
                assert!(granted.contains(ns), "request outside {granted:?}: {s:?}");
                let verb = match (s.method.as_str(), tail.len()) {
                    ("GET", 0) if s.param("watch") == Some("true") => "watch",
                    ("GET", 0) => "list",
                    ("GET", _) => "get",
                    ("POST", _) => "create",
                    ("PATCH", _) => "patch",
                    ("DELETE", _) => "delete",
                    (m, _) => panic!("unexpected method {m}"),
                };
                assert!(
                    NAMESPACED_REQUIRED
                        .iter()
                        .any(|(g, r, verbs)| *g == group && r == resource && verbs.contains(&verb)),
                    "{verb} {group}/{resource} is not in NAMESPACED_REQUIRED: {s:?}"
                );
            }
            _ => panic!("a spoke with per-namespace RBAC made a cluster-wide request: {s:?}"),
        }
    }
}

#[tokio::test]
async fn a_spoke_with_per_namespace_rbac_reads_and_writes_in_its_namespaces_only() {
    let granted = ["hpc", "present"];
    let (cluster, seen) = setup_in(Scope::Namespaces(
        granted.iter().map(|n| n.to_string()).collect(),
    ));
    // One Job watcher per namespace, merged.
    let jobs = tokio::time::timeout(LIMIT, cluster.jobs())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(jobs.len(), 1);
    // What it owns, listed namespace by namespace.
    let owned: Vec<String> = cluster
        .owned(&me())
        .await
        .unwrap()
        .iter()
        .map(|o| o.object.to_string())
        .collect();
    assert_eq!(owned, ["Job/hpc/x", "ConfigMap/present/y-flux-config"]);
    // Namespaces: outside, or missing (it cannot create them), it is not granted, and the
    // one outside is not even read.
    let not_granted = NamespaceState::NotGranted {
        granted: granted.iter().map(|n| n.to_string()).collect(),
    };
    assert_eq!(cluster.namespace("elsewhere").await.unwrap(), not_granted);
    assert_eq!(cluster.namespace("hpc").await.unwrap(), not_granted);
    assert_eq!(
        cluster.namespace("present").await.unwrap(),
        NamespaceState::Exists {
            enforce: Some("baseline".into())
        }
    );
    let err = cluster
        .ensure_namespace("hpc", Level::Restricted)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("creates no namespace"), "{err}");
    // Writes outside its namespaces fail before any request.
    let elsewhere = realize(&sample_assignments("elsewhere", "m", &[("x", 2)])[0], &me()).unwrap();
    let err = cluster
        .apply(&elsewhere.objects[0], false)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("outside the namespaces"), "{err}");
    let stray = OwnedObject {
        object: ObjectRef {
            kind: Kind::Secret,
            namespace: "elsewhere".into(),
            name: "s".into(),
        },
        key: "elsewhere/m/x".into(),
        uid: None,
    };
    assert!(cluster.delete(&stray).await.is_err());
    assert!(requests(&seen, Method::POST).is_empty());
    assert!(requests(&seen, Method::DELETE).is_empty());
    assert!(
        !seen
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.path.contains("elsewhere")),
        "nothing is read outside its namespaces"
    );
    assert_permitted_in(&seen, &granted);
}

/// A relayed burst's Service is read (metadata only) to be sure it is the spoke's for the
/// burst, then pointed at the spoke's listener with an EndpointSlice of its name, applied
/// without force and owned by the Service; someone else's Service gets nothing.
#[tokio::test]
async fn a_relay_service_is_pointed_at_the_spoke_by_an_endpoint_slice_it_owns() {
    let (cluster, seen) = setup();
    let relayed = |ns: &str| {
        let a = flux_spoke::testing::sample_relayed_assignments(ns, "m", &[("x", 2)]).remove(0);
        realize(&a, &me())
            .unwrap()
            .relay()
            .cloned()
            .expect("a relay Service")
    };
    let address = "10.44.0.7".parse().unwrap();
    cluster
        .serve_relay(&relayed("race"), address, 41234)
        .await
        .unwrap();
    let all = writes_and_reads(&seen);
    let methods: Vec<(Method, &str)> = all
        .iter()
        .map(|s| (s.method.clone(), s.path.as_str()))
        .collect();
    assert_eq!(
        methods,
        [
            (Method::GET, "/api/v1/namespaces/race/services/x-relay"),
            (
                Method::PATCH,
                "/apis/discovery.k8s.io/v1/namespaces/race/endpointslices/x-relay"
            ),
        ]
    );
    assert!(is_metadata(&all[0]));
    let patch = &all[1];
    assert_eq!(patch.param("fieldManager"), Some("flux-spoke"));
    assert_eq!(
        patch.param("force"),
        None,
        "another manager's slice is not taken over"
    );
    let body = &patch.body;
    assert_eq!(body["kind"], "EndpointSlice");
    assert_eq!(
        body["metadata"]["labels"]["kubernetes.io/service-name"],
        "x-relay"
    );
    assert_eq!(
        body["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
        "flux-spoke.flux-framework.org"
    );
    assert_eq!(
        body["metadata"]["labels"]["flux-framework.org/spoke"],
        "gke"
    );
    assert_eq!(
        body["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Service", "name": "x-relay", "uid": "uid-x-relay"}])
    );
    assert_eq!(body["addressType"], "IPv4");
    assert_eq!(
        body["endpoints"],
        json!([{"addresses": ["10.44.0.7"], "conditions": {"ready": true}}])
    );
    assert_eq!(
        body["ports"],
        json!([{"name": "flux-broker", "port": 41234, "protocol": "TCP"}])
    );
    assert_permitted(&seen);

    seen.lock().unwrap().clear();
    let err = cluster
        .serve_relay(&relayed("taken"), address, 41234)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not this spoke's"), "{err}");
    assert!(requests(&seen, Method::PATCH).is_empty());
    assert_permitted(&seen);
}
