//! The spoke's view of its Kubernetes cluster: a small trait ([`Cluster`]) for the few
//! reads and writes the agent makes, so that tests can capture them (`FakeCluster`, in
//! `testing` with the cargo feature of that name), and its real implementation on a
//! `kube::Client` ([`KubeCluster`]).
//!
//! Every object the spoke creates carries `app.kubernetes.io/managed-by: flux-spoke`
//! ([`spoke_selector`]) and the assignment key in an annotation ([`owned_key`]): that is
//! all the spoke needs to find what it owns after a restart, with no local state.
//!
//! RBAC the real implementation needs: `get`, `create` on namespaces; `list`, `patch`
//! (server-side apply), `delete` on configmaps, secrets, services, pods and jobs in every
//! namespace it runs bursts in; `watch` on jobs.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use flux_shared::federation::assignment::{owned_key, spoke_selector};
use flux_shared::render::Object;
use futures::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;

/// Field manager of the spoke's server-side applies.
pub const FIELD_MANAGER: &str = "flux-spoke";

/// How long [`KubeCluster::jobs`] waits for the Job cache's first listing.
pub const JOB_CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// One RBAC rule the spoke needs: API group (`""` for core), resource, verbs.
pub type Permission = (&'static str, &'static str, &'static [&'static str]);

/// Every Kubernetes permission [`KubeCluster`] uses, cluster-wide. Server-side apply of an
/// object that may not exist needs `create` and `patch`; owned objects are found with
/// metadata-only lists; Jobs are also watched (status reports). `deploy/spoke/rbac.yaml`
/// grants exactly this (a test checks), and the mock-API tests check that every request
/// is covered.
pub const REQUIRED: &[Permission] = &[
    ("", "namespaces", &["get", "create"]),
    ("", "configmaps", &["list", "create", "patch", "delete"]),
    ("", "secrets", &["list", "create", "patch", "delete"]),
    ("", "services", &["list", "create", "patch", "delete"]),
    (
        "batch",
        "jobs",
        &["list", "watch", "create", "patch", "delete"],
    ),
    ("", "pods", &["list", "delete"]),
];

/// Whether [`REQUIRED`] grants `verb` on `group`/`resource`.
pub fn allows(group: &str, resource: &str, verb: &str) -> bool {
    REQUIRED
        .iter()
        .any(|(g, r, verbs)| *g == group && *r == resource && verbs.contains(&verb))
}

/// The kinds of object a spoke creates (and so owns and may delete).
///
/// Ordered for deletion: the Job first (so its brokers stop before their configuration
/// goes away), then the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `batch/v1` Job (the burst's Indexed Job of brokers).
    Job,
    /// `v1` Pod.
    Pod,
    /// `v1` Service.
    Service,
    /// `v1` Secret (the curve certificate).
    Secret,
    /// `v1` ConfigMap (broker.toml, R, scripts).
    ConfigMap,
}

impl Kind {
    /// Every kind, in deletion order.
    pub const ALL: [Kind; 5] = [
        Kind::Job,
        Kind::Pod,
        Kind::Service,
        Kind::Secret,
        Kind::ConfigMap,
    ];

    /// The Kubernetes kind name (`Job`, `ConfigMap`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Job => "Job",
            Kind::Pod => "Pod",
            Kind::Service => "Service",
            Kind::Secret => "Secret",
            Kind::ConfigMap => "ConfigMap",
        }
    }

    /// The kind of a rendered object.
    pub fn of(object: &Object) -> Kind {
        match object {
            Object::ConfigMap(_) => Kind::ConfigMap,
            Object::Secret(_) => Kind::Secret,
            Object::Service(_) => Kind::Service,
            Object::Job(_) => Kind::Job,
            Object::Pod(_) => Kind::Pod,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which object: kind, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectRef {
    /// Kind.
    pub kind: Kind,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// The reference of a rendered object (empty strings for a missing namespace or name).
    pub fn of(object: &Object) -> ObjectRef {
        let meta = metadata(object);
        ObjectRef {
            kind: Kind::of(object),
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// The metadata of a rendered object.
pub fn metadata(object: &Object) -> &ObjectMeta {
    match object {
        Object::ConfigMap(o) => &o.metadata,
        Object::Secret(o) => &o.metadata,
        Object::Service(o) => &o.metadata,
        Object::Job(o) => &o.metadata,
        Object::Pod(o) => &o.metadata,
    }
}

/// An object the spoke owns in its cluster, and the assignment it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OwnedObject {
    /// Which object.
    pub object: ObjectRef,
    /// Its assignment key (`<namespace>/<name>/<burst>` in the hub's cluster).
    pub key: String,
}

impl OwnedObject {
    /// The owned object described by `meta`, if the spoke owns it ([`owned_key`]).
    pub fn from_meta(kind: Kind, meta: &ObjectMeta) -> Option<OwnedObject> {
        let key = owned_key(meta)?;
        Some(OwnedObject {
            object: ObjectRef {
                kind,
                namespace: meta.namespace.clone().unwrap_or_default(),
                name: meta.name.clone().unwrap_or_default(),
            },
            key: key.to_string(),
        })
    }
}

/// A failed read or write of the spoke's cluster.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{action}: {message}")]
pub struct ClusterError {
    /// What was attempted, e.g. `apply Job/hpc/gke`.
    pub action: String,
    /// The API server's HTTP status code, when it answered.
    pub code: Option<u16>,
    /// Why it failed.
    pub message: String,
}

impl ClusterError {
    /// An error of `action` with `message` and no HTTP status.
    pub fn new(action: impl Into<String>, message: impl Into<String>) -> ClusterError {
        ClusterError {
            action: action.into(),
            code: None,
            message: message.into(),
        }
    }

    /// An error of `action` from a `kube` error.
    pub fn from_kube(action: impl Into<String>, error: &kube::Error) -> ClusterError {
        match error {
            kube::Error::Api(status) => ClusterError {
                action: action.into(),
                code: Some(status.code),
                message: if status.message.is_empty() {
                    status.reason.clone()
                } else {
                    status.message.clone()
                },
            },
            other => ClusterError::new(action, error_chain(other)),
        }
    }
}

/// `error: source: source...`, for messages.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// The spoke's reads and writes of its own cluster.
///
/// Implementations are cheap to clone (handles to shared state) and usable from any task.
pub trait Cluster: Clone + Send + Sync + 'static {
    /// Creates namespace `namespace` unless it exists.
    fn ensure_namespace(
        &self,
        namespace: &str,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// Server-side applies `object` (field manager [`FIELD_MANAGER`], forced) in its
    /// namespace.
    fn apply(&self, object: &Object) -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// Every object of the kinds in [`Kind::ALL`], in every namespace, that the spoke
    /// owns ([`owned_key`]).
    fn owned(&self) -> impl Future<Output = Result<Vec<OwnedObject>, ClusterError>> + Send;

    /// Deletes `object` (a Job with propagation policy `Background`, so its pods go too).
    /// An object that is already gone is not an error.
    fn delete(&self, object: &OwnedObject)
    -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// The spoke's Jobs (label [`spoke_selector`]), as currently known.
    fn jobs(&self) -> impl Future<Output = Result<Vec<Job>, ClusterError>> + Send;

    /// Yields whenever one of the spoke's Jobs changes (created, status updated, deleted),
    /// or [`Cluster::unreachable`] changes, so that the agent reports promptly. Changes may
    /// be coalesced. Never ends while the cluster handle lives.
    fn changes(&self) -> impl Stream<Item = ()> + Send + 'static;

    /// While the API server cannot be reached (the Job watch keeps failing): since when,
    /// and the last error. `None` while it answers.
    fn unreachable(&self) -> Option<(SystemTime, String)>;
}

/// [`Cluster`] on a real API server.
///
/// Creating one starts a Job watcher (a reflector over the spoke's Jobs in every
/// namespace) on the current tokio runtime; it stops when the last clone is dropped.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    jobs: Store<Job>,
    changes: watch::Receiver<u64>,
    unreachable: Arc<Mutex<Option<(SystemTime, String)>>>,
    _watcher: Arc<AbortOnDrop>,
}

impl fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeCluster").finish_non_exhaustive()
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl KubeCluster {
    /// The cluster `client` talks to. Must be called within a tokio runtime (it spawns
    /// the Job watcher).
    pub fn new(client: Client) -> KubeCluster {
        let (reader, writer) = reflector::store();
        let (tx, rx) = watch::channel(0u64);
        let api: Api<Job> = Api::all(client.clone());
        let config = watcher::Config::default().labels(&spoke_selector());
        let events = reflector::reflector(writer, watcher(api, config)).default_backoff();
        let unreachable = Arc::new(Mutex::new(None::<(SystemTime, String)>));
        let access = unreachable.clone();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                // Every event is an answer of the API server; an error is not (the watcher
                // retries with backoff, so errors keep coming while it is away).
                let first_error = {
                    let mut state = access.lock().unwrap_or_else(PoisonError::into_inner);
                    match &event {
                        Ok(_) => {
                            *state = None;
                            false
                        }
                        Err(error) => {
                            let first = state.is_none();
                            let since = state.as_ref().map_or_else(SystemTime::now, |(t, _)| *t);
                            *state = Some((since, error_chain(error)));
                            first
                        }
                    }
                };
                match event {
                    // Wait for the end of a (re)listing (InitDone) before waking the
                    // reporter; that also reports a regained API server.
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                    Ok(_) => tx.send_modify(|n| *n = n.wrapping_add(1)),
                    Err(error) => {
                        tracing::warn!(error = %error_chain(&error), "watching Jobs failed; retrying");
                        if first_error {
                            tx.send_modify(|n| *n = n.wrapping_add(1));
                        }
                    }
                }
            }
        });
        KubeCluster {
            client,
            jobs: reader,
            changes: rx,
            unreachable,
            _watcher: Arc::new(AbortOnDrop(task)),
        }
    }

    async fn apply_typed<K>(&self, object: &K, r: &ObjectRef) -> Result<(), ClusterError>
    where
        K: Resource<Scope = NamespaceResourceScope>
            + Clone
            + fmt::Debug
            + Serialize
            + DeserializeOwned,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), &r.namespace);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(&r.name, &params, &Patch::Apply(object))
            .await
            .map(|_| ())
            .map_err(|e| ClusterError::from_kube(format!("apply {r}"), &e))
    }

    async fn list_owned<K>(&self, kind: Kind) -> Result<Vec<OwnedObject>, ClusterError>
    where
        K: Resource<Scope = NamespaceResourceScope> + Clone + fmt::Debug + DeserializeOwned,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::all(self.client.clone());
        let params = ListParams::default().labels(&spoke_selector());
        let list = api
            .list_metadata(&params)
            .await
            .map_err(|e| ClusterError::from_kube(format!("list {kind}s"), &e))?;
        Ok(list
            .items
            .iter()
            .filter_map(|o| OwnedObject::from_meta(kind, &o.metadata))
            .collect())
    }

    async fn delete_typed<K>(
        &self,
        r: &ObjectRef,
        params: &DeleteParams,
    ) -> Result<(), ClusterError>
    where
        K: Resource<Scope = NamespaceResourceScope> + Clone + fmt::Debug + DeserializeOwned,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), &r.namespace);
        match api.delete(&r.name, params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(ClusterError::from_kube(format!("delete {r}"), &e)),
        }
    }
}

impl Cluster for KubeCluster {
    async fn ensure_namespace(&self, namespace: &str) -> Result<(), ClusterError> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let action = || format!("create namespace {namespace}");
        match api.get_opt(namespace).await {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => {}
            Err(e) => {
                return Err(ClusterError::from_kube(
                    format!("get namespace {namespace}"),
                    &e,
                ));
            }
        }
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {
                tracing::info!(namespace, "created namespace");
                Ok(())
            }
            // Created meanwhile by someone else: fine.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(e) => Err(ClusterError::from_kube(action(), &e)),
        }
    }

    async fn apply(&self, object: &Object) -> Result<(), ClusterError> {
        let r = ObjectRef::of(object);
        if r.namespace.is_empty() || r.name.is_empty() {
            return Err(ClusterError::new(
                format!("apply {r}"),
                "the object has no namespace or name",
            ));
        }
        match object {
            Object::ConfigMap(o) => self.apply_typed(o, &r).await,
            Object::Secret(o) => self.apply_typed(o, &r).await,
            Object::Service(o) => self.apply_typed(o, &r).await,
            Object::Job(o) => self.apply_typed(o, &r).await,
            Object::Pod(o) => self.apply_typed(o, &r).await,
        }
    }

    async fn owned(&self) -> Result<Vec<OwnedObject>, ClusterError> {
        let mut out = Vec::new();
        out.extend(self.list_owned::<Job>(Kind::Job).await?);
        out.extend(self.list_owned::<Pod>(Kind::Pod).await?);
        out.extend(self.list_owned::<Service>(Kind::Service).await?);
        out.extend(self.list_owned::<Secret>(Kind::Secret).await?);
        out.extend(self.list_owned::<ConfigMap>(Kind::ConfigMap).await?);
        Ok(out)
    }

    async fn delete(&self, object: &OwnedObject) -> Result<(), ClusterError> {
        let r = &object.object;
        let plain = DeleteParams::default();
        match r.kind {
            Kind::Job => {
                self.delete_typed::<Job>(r, &DeleteParams::background())
                    .await
            }
            Kind::Pod => self.delete_typed::<Pod>(r, &plain).await,
            Kind::Service => self.delete_typed::<Service>(r, &plain).await,
            Kind::Secret => self.delete_typed::<Secret>(r, &plain).await,
            Kind::ConfigMap => self.delete_typed::<ConfigMap>(r, &plain).await,
        }
    }

    async fn jobs(&self) -> Result<Vec<Job>, ClusterError> {
        match tokio::time::timeout(JOB_CACHE_SYNC_TIMEOUT, self.jobs.wait_until_ready()).await {
            Ok(Ok(())) => Ok(self.jobs.state().iter().map(|j| Job::clone(j)).collect()),
            Ok(Err(_)) => Err(ClusterError::new("watch Jobs", "the Job watcher stopped")),
            Err(_) => Err(ClusterError::new(
                "watch Jobs",
                format!("the Job cache did not sync within {JOB_CACHE_SYNC_TIMEOUT:?}"),
            )),
        }
    }

    fn changes(&self) -> impl Stream<Item = ()> + Send + 'static {
        WatchStream::from_changes(self.changes.clone()).map(|_| ())
    }

    fn unreachable(&self) -> Option<(SystemTime, String)> {
        self.unreachable
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
