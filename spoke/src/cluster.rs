//! The spoke's view of its Kubernetes cluster: a small trait ([`Cluster`]) for the few
//! reads and writes the agent makes, so that tests can capture them (`FakeCluster`, in
//! `testing` with the cargo feature of that name), and its real implementation on a
//! `kube::Client` ([`KubeCluster`]).
//!
//! Every object the spoke creates carries `app.kubernetes.io/managed-by: flux-spoke`
//! ([`spoke_selector`]), the spoke's name and federation identity, and the assignment key
//! in an annotation: that is all the spoke needs to find what it owns after a restart,
//! with no local state ([`ownership`]). The spoke touches nothing else: it lists only its
//! own objects ([`Cluster::owned`]), creates with a POST so that a name taken by someone
//! else is a refusal and never a takeover ([`Cluster::apply`]), and deletes with the uid it
//! listed as a precondition ([`Cluster::delete`]).
//!
//! RBAC the real implementation needs: `get`, `create` on namespaces; `get`, `list`,
//! `create`, `patch` (server-side apply), `delete` on configmaps, secrets, services, pods
//! and jobs in every namespace it runs bursts in; `watch` on jobs.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use flux_shared::federation::assignment::spoke_selector;
use flux_shared::federation::diagnostics::error_chain;
use flux_shared::federation::ownership::{
    Ownership, SpokeIdentity, describe_owner, ownership, same_owner,
};
use flux_shared::federation::policy::{Level, NamespaceState, POD_SECURITY_ENFORCE, POLICY_KEY};
use flux_shared::managed_fields::as_applied;
use flux_shared::render::Object;
use futures::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;
use tokio_util::task::AbortOnDropHandle;

/// Field manager of the spoke's server-side applies.
pub const FIELD_MANAGER: &str = "flux-spoke";

/// How long [`KubeCluster::jobs`] waits for the Job cache's first listing.
pub const JOB_CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(30);

pub use flux_shared::federation::spoke_rbac::{
    NAMESPACE_READ, NAMESPACED_REQUIRED, POLICY_PERMISSIONS, Permission, REQUIRED, namespace_labels,
};

/// Where the spoke acts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every namespace ([`REQUIRED`] in a ClusterRole): it creates the namespaces it needs.
    Cluster,
    /// Only these namespaces ([`NAMESPACED_REQUIRED`] in a Role in each, [`NAMESPACE_READ`]
    /// on them): it lists and watches in each, and refuses bursts elsewhere.
    Namespaces(BTreeSet<String>),
}

impl Scope {
    /// The scope of the spoke's `--namespaces` flag: absent, every namespace; otherwise a
    /// comma-separated list of namespace names (empty: none).
    pub fn from_flag(flag: Option<&str>) -> Result<Scope, String> {
        let Some(list) = flag else {
            return Ok(Scope::Cluster);
        };
        let mut names = BTreeSet::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if !flux_shared::validate::is_dns_label(name) {
                return Err(format!(
                    "--namespaces: {name:?} is not a namespace name (lowercase letters, digits and '-', at most 63)"
                ));
            }
            names.insert(name.to_string());
        }
        Ok(Scope::Namespaces(names))
    }

    /// Whether the spoke may act in `namespace`.
    pub fn covers(&self, namespace: &str) -> bool {
        match self {
            Scope::Cluster => true,
            Scope::Namespaces(names) => names.contains(namespace),
        }
    }
}

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

/// The metadata of a rendered object, to change.
pub fn metadata_mut(object: &mut Object) -> &mut ObjectMeta {
    match object {
        Object::ConfigMap(o) => &mut o.metadata,
        Object::Secret(o) => &mut o.metadata,
        Object::Service(o) => &mut o.metadata,
        Object::Job(o) => &mut o.metadata,
        Object::Pod(o) => &mut o.metadata,
    }
}

/// An object the spoke owns in its cluster, and the assignment it belongs to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OwnedObject {
    /// Which object.
    pub object: ObjectRef,
    /// Its assignment key (`<namespace>/<name>/<burst>` in the hub's cluster).
    pub key: String,
    /// Its uid as listed: deleting it is conditional on it, so that an object re-created
    /// under the same name meanwhile (by anyone) is left alone. `None` deletes by name.
    pub uid: Option<String>,
}

impl OwnedObject {
    /// The object described by `meta`, if the spoke `me` made it ([`ownership`]: its
    /// spoke and federation labels, or neither for an object of an older spoke version).
    pub fn from_meta(kind: Kind, meta: &ObjectMeta, me: &SpokeIdentity) -> Option<OwnedObject> {
        let Ownership::Ours { key, .. } = ownership(meta, me) else {
            return None;
        };
        Some(OwnedObject {
            object: ObjectRef {
                kind,
                namespace: meta.namespace.clone().unwrap_or_default(),
                name: meta.name.clone().unwrap_or_default(),
            },
            key: key.to_string(),
            uid: meta.uid.clone(),
        })
    }
}

/// An object holding a name the spoke needs, which the spoke did not make (for this
/// assignment, with this spoke name and federation).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Taken {
    /// The object.
    pub object: ObjectRef,
    /// Who seems to own it ([`describe_owner`]).
    pub owner: String,
    /// Its uid when seen.
    pub uid: Option<String>,
    /// Its resourceVersion when seen: a change of either may free the name.
    pub resource_version: Option<String>,
}

impl Taken {
    /// The object `r`, described by `meta`, holding a name the spoke needs.
    pub fn new(r: &ObjectRef, meta: &ObjectMeta) -> Taken {
        Taken {
            object: r.clone(),
            owner: describe_owner(meta),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
        }
    }

    /// Whether `now` (the object's metadata now, `None` if gone) differs from what was
    /// seen.
    pub fn changed(&self, now: Option<&ObjectMeta>) -> bool {
        now.is_none_or(|m| m.uid != self.uid || m.resource_version != self.resource_version)
    }
}

impl fmt::Display for Taken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}/{} exists and was not made by this spoke for this burst ({})",
            self.object.kind, self.object.namespace, self.object.name, self.owner
        )
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
    /// Set when the write was refused because the name is taken by an object the spoke
    /// did not make: not retried like other errors, but reported as a refusal.
    pub taken: Option<Box<Taken>>,
}

impl ClusterError {
    /// An error of `action` with `message` and no HTTP status.
    pub fn new(action: impl Into<String>, message: impl Into<String>) -> ClusterError {
        ClusterError {
            action: action.into(),
            code: None,
            message: message.into(),
            taken: None,
        }
    }

    /// The refusal to write `action` onto `taken`.
    pub fn name_taken(action: impl Into<String>, taken: Taken) -> ClusterError {
        ClusterError {
            action: action.into(),
            code: Some(409),
            message: taken.to_string(),
            taken: Some(Box::new(taken)),
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
                taken: None,
            },
            other => ClusterError::new(action, error_chain(other)),
        }
    }
}

/// The spoke's reads and writes of its own cluster.
///
/// Implementations are cheap to clone (handles to shared state) and usable from any task.
pub trait Cluster: Clone + Send + Sync + 'static {
    /// Whether namespace `namespace` exists, and its Pod Security enforce label.
    fn namespace(
        &self,
        namespace: &str,
    ) -> impl Future<Output = Result<NamespaceState, ClusterError>> + Send;

    /// Creates namespace `namespace` with Pod Security `level` (enforce, warn and audit
    /// labels) unless it exists (an existing namespace is left as it is).
    fn ensure_namespace(
        &self,
        namespace: &str,
        level: Level,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// The spoke policy's document as the cluster holds it (the ConfigMap
    /// [`flux_shared::federation::policy::POLICY_CONFIGMAP`] in the spoke's namespace):
    /// `None` when there is none, an empty text when the ConfigMap lacks
    /// [`flux_shared::federation::policy::POLICY_KEY`]; an error while it cannot be read.
    fn policy(&self) -> Result<Option<String>, ClusterError>;

    /// Writes `object` (which carries the spoke's claim: labels and assignment annotation)
    /// in its namespace, never onto an object someone else made.
    ///
    /// `owned`: the caller listed the object among its assignment's own
    /// ([`Cluster::owned`]): server-side apply (field manager [`FIELD_MANAGER`], forced).
    /// Otherwise it is created (POST, same field manager); if the name exists, the object
    /// is read and, if it is the spoke's for the same assignment ([`same_owner`]: listing
    /// lag, or made by an older version), applied; if not, nothing is written and the
    /// error carries [`ClusterError::taken`].
    fn apply(
        &self,
        object: &Object,
        owned: bool,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// The metadata of object `r`, `None` if it does not exist.
    fn inspect(
        &self,
        r: &ObjectRef,
    ) -> impl Future<Output = Result<Option<ObjectMeta>, ClusterError>> + Send;

    /// Every object of the kinds in [`Kind::ALL`], in every namespace, that the spoke
    /// `me` made ([`OwnedObject::from_meta`]): another spoke's or another federation's
    /// objects are not listed, so nothing the spoke decides from this list touches them.
    fn owned(
        &self,
        me: &SpokeIdentity,
    ) -> impl Future<Output = Result<Vec<OwnedObject>, ClusterError>> + Send;

    /// Deletes `object` (a Job with propagation policy `Background`, so its pods go too),
    /// only if its uid is still [`OwnedObject::uid`]. An object that is already gone, or
    /// was replaced by another of the same name, is not an error (and is left alone).
    fn delete(&self, object: &OwnedObject)
    -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// The spoke's Jobs (label [`spoke_selector`]), as currently known.
    fn jobs(&self) -> impl Future<Output = Result<Vec<Job>, ClusterError>> + Send;

    /// Yields whenever one of the spoke's Jobs changes (created, status updated, deleted),
    /// the policy changes, or [`Cluster::unreachable`] changes, so that the agent acts and
    /// reports promptly. Changes may
    /// be coalesced. Never ends while the cluster handle lives.
    fn changes(&self) -> impl Stream<Item = ()> + Send + 'static;

    /// While the API server cannot be reached (the Job watch keeps failing): since when,
    /// and the last error. `None` while it answers.
    fn unreachable(&self) -> Option<(SystemTime, String)>;
}

/// [`Cluster`] on a real API server.
///
/// Creating one starts the Job watchers (reflectors over the spoke's Jobs: one over every
/// namespace, or one per namespace of its [`Scope`]) on the current tokio runtime; they
/// stop when the last clone is dropped.
#[derive(Clone)]
pub struct KubeCluster {
    client: Client,
    scope: Scope,
    jobs: Vec<JobWatch>,
    changes: watch::Receiver<u64>,
    policy: Option<PolicyWatch>,
}

/// One Job watcher: its cache and whether its API server answers.
#[derive(Clone)]
struct JobWatch {
    store: Store<Job>,
    unreachable: Arc<Mutex<Option<(SystemTime, String)>>>,
    _task: Arc<AbortOnDropHandle<()>>,
}

/// The watch on the spoke's policy ConfigMap.
#[derive(Clone)]
struct PolicyWatch {
    namespace: String,
    name: String,
    store: Store<ConfigMap>,
    /// Set once the first listing is done.
    ready: Arc<AtomicBool>,
    changes: watch::Receiver<u64>,
    _watcher: Arc<AbortOnDropHandle<()>>,
}

impl fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubeCluster")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// Watches the spoke's Jobs through `api`, waking `tx` on every change (and on the first
/// error of an outage).
fn watch_jobs(api: Api<Job>, tx: Arc<watch::Sender<u64>>) -> JobWatch {
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().labels(&spoke_selector());
    let events = reflector::reflector(writer, watcher(api, config))
        .backoff(flux_shared::ops::WatchBackoff::default());
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
    JobWatch {
        store: reader,
        unreachable,
        _task: Arc::new(AbortOnDropHandle::new(task)),
    }
}

impl KubeCluster {
    /// The cluster `client` talks to, where the spoke acts in `scope`. Must be called
    /// within a tokio runtime (it spawns the Job watchers).
    pub fn new(client: Client, scope: Scope) -> KubeCluster {
        let (tx, rx) = watch::channel(0u64);
        let tx = Arc::new(tx);
        let jobs = match &scope {
            Scope::Cluster => vec![watch_jobs(Api::all(client.clone()), tx)],
            Scope::Namespaces(names) => names
                .iter()
                .map(|ns| watch_jobs(Api::namespaced(client.clone(), ns), tx.clone()))
                .collect(),
        };
        KubeCluster {
            client,
            scope,
            jobs,
            changes: rx,
            policy: None,
        }
    }

    /// Where this spoke acts.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// Refuses to touch `namespace` outside the spoke's scope (the policy decision refuses
    /// such bursts first; this keeps any other path from trying).
    fn check_scope(
        &self,
        action: impl Fn() -> String,
        namespace: &str,
    ) -> Result<(), ClusterError> {
        if self.scope.covers(namespace) {
            Ok(())
        } else {
            Err(ClusterError::new(
                action(),
                format!("namespace {namespace:?} is outside the namespaces this spoke may act in"),
            ))
        }
    }

    /// This cluster, with the spoke's policy read from ConfigMap `namespace/name` (watched:
    /// [`Cluster::changes`] yields when it changes). Without it [`Cluster::policy`] is an
    /// error, and the agent applies nothing. Needs `get`, `list`, `watch` on configmaps in
    /// `namespace` ([`POLICY_PERMISSIONS`]).
    pub fn with_policy(mut self, namespace: &str, name: &str) -> KubeCluster {
        let (reader, writer) = reflector::store();
        let (tx, rx) = watch::channel(0u64);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let events = reflector::reflector(writer, watcher(api, config))
            .backoff(flux_shared::ops::WatchBackoff::default());
        let what = format!("{namespace}/{name}");
        let ready = Arc::new(AtomicBool::new(false));
        let listed = ready.clone();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                    Ok(watcher::Event::InitDone) => {
                        listed.store(true, Ordering::Release);
                        tx.send_modify(|n| *n = n.wrapping_add(1));
                    }
                    Ok(_) => tx.send_modify(|n| *n = n.wrapping_add(1)),
                    Err(error) => {
                        tracing::warn!(policy = %what, error = %error_chain(&error), "watching the spoke policy failed; retrying");
                    }
                }
            }
        });
        self.policy = Some(PolicyWatch {
            namespace: namespace.to_string(),
            name: name.to_string(),
            store: reader,
            ready,
            changes: rx,
            _watcher: Arc::new(AbortOnDropHandle::new(task)),
        });
        self
    }

    async fn apply_typed<K>(
        &self,
        object: &K,
        r: &ObjectRef,
        owned: bool,
    ) -> Result<(), ClusterError>
    where
        K: Resource<Scope = NamespaceResourceScope>
            + Clone
            + fmt::Debug
            + Serialize
            + DeserializeOwned,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), &r.namespace);
        // Applies to `live` (the object's metadata as just read), when it is ours: first
        // the fields a POST recorded become this manager's applied fields, so the apply
        // prunes what it no longer sends (`flux_shared::managed_fields`).
        let api = &api;
        let apply = |live: ObjectMeta| async move {
            if !same_owner(&live, object.meta()) {
                return Err(ClusterError::name_taken(
                    format!("apply {r}"),
                    Taken::new(r, &live),
                ));
            }
            let entries = live.managed_fields.as_deref().unwrap_or_default();
            if let Some(entries) = as_applied(entries, FIELD_MANAGER, &[]) {
                let patch = serde_json::json!({"metadata": {
                    "resourceVersion": live.resource_version,
                    "managedFields": entries,
                }});
                api.patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|e| {
                        ClusterError::from_kube(format!("take over the fields of {r}"), &e)
                    })?;
            }
            let params = PatchParams::apply(FIELD_MANAGER).force();
            api.patch(&r.name, &params, &Patch::Apply(object))
                .await
                .map(|_| ())
                .map_err(|e| ClusterError::from_kube(format!("apply {r}"), &e))
        };
        let read = || async {
            api.get_metadata_opt(&r.name)
                .await
                .map(|o| o.map(|o| o.metadata))
                .map_err(|e| ClusterError::from_kube(format!("get {r}"), &e))
        };
        if owned {
            // Read again right before the write: listed as ours, but it may have been
            // replaced by someone else's since.
            // Gone since it was listed: created below like any new object.
            if let Some(live) = read().await? {
                return apply(live).await;
            }
        }
        // A POST fails on an existing name instead of taking the object over, which a
        // forced apply would do.
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PostParams::default()
        };
        match api.create(&params, object).await {
            Ok(_) => {
                tracing::info!(object = %r, "created");
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 409 => match read().await? {
                Some(live) => apply(live).await,
                // Deleted since: the next attempt creates it.
                None => Err(ClusterError::new(
                    format!("create {r}"),
                    "the name was taken and has just been freed; retrying later",
                )),
            },
            Err(e) => Err(ClusterError::from_kube(format!("create {r}"), &e)),
        }
    }

    async fn inspect_typed<K>(&self, r: &ObjectRef) -> Result<Option<ObjectMeta>, ClusterError>
    where
        K: Resource<Scope = NamespaceResourceScope> + Clone + fmt::Debug + DeserializeOwned,
        K::DynamicType: Default,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), &r.namespace);
        api.get_metadata_opt(&r.name)
            .await
            .map(|o| o.map(|o| o.metadata))
            .map_err(|e| ClusterError::from_kube(format!("get {r}"), &e))
    }

    async fn list_owned<K>(
        &self,
        kind: Kind,
        me: &SpokeIdentity,
    ) -> Result<Vec<OwnedObject>, ClusterError>
    where
        K: Resource<Scope = NamespaceResourceScope> + Clone + fmt::Debug + DeserializeOwned,
        K::DynamicType: Default,
    {
        let apis: Vec<(Api<K>, String)> = match &self.scope {
            Scope::Cluster => vec![(Api::all(self.client.clone()), format!("list {kind}s"))],
            Scope::Namespaces(names) => names
                .iter()
                .map(|ns| {
                    (
                        Api::namespaced(self.client.clone(), ns),
                        format!("list {kind}s in namespace {ns}"),
                    )
                })
                .collect(),
        };
        let params = ListParams::default().labels(&spoke_selector());
        let mut out = Vec::new();
        for (api, action) in apis {
            let list = api
                .list_metadata(&params)
                .await
                .map_err(|e| ClusterError::from_kube(action, &e))?;
            out.extend(
                list.items
                    .iter()
                    .filter_map(|o| OwnedObject::from_meta(kind, &o.metadata, me)),
            );
        }
        Ok(out)
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
            // The uid precondition failed: the name now holds another object, not ours.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::info!(object = %r, reason = %status.message, "not deleted: the name now holds another object");
                Ok(())
            }
            Err(e) => Err(ClusterError::from_kube(format!("delete {r}"), &e)),
        }
    }
}

impl Cluster for KubeCluster {
    async fn namespace(&self, namespace: &str) -> Result<NamespaceState, ClusterError> {
        let not_granted = || match &self.scope {
            Scope::Cluster => NamespaceState::Missing,
            Scope::Namespaces(names) => NamespaceState::NotGranted {
                granted: names.iter().cloned().collect(),
            },
        };
        if !self.scope.covers(namespace) {
            return Ok(not_granted());
        }
        let api: Api<Namespace> = Api::all(self.client.clone());
        match api.get_opt(namespace).await {
            Ok(Some(ns)) => Ok(NamespaceState::Exists {
                enforce: ns
                    .metadata
                    .labels
                    .and_then(|mut l| l.remove(POD_SECURITY_ENFORCE)),
            }),
            // With per-namespace RBAC a missing namespace cannot be created by the spoke
            // (nor hold its Role any more).
            Ok(None) => Ok(not_granted()),
            Err(e) => Err(ClusterError::from_kube(
                format!("get namespace {namespace}"),
                &e,
            )),
        }
    }

    async fn ensure_namespace(&self, namespace: &str, level: Level) -> Result<(), ClusterError> {
        let action = || format!("create namespace {namespace}");
        if let Scope::Namespaces(_) = self.scope {
            return Err(ClusterError::new(
                action(),
                "a spoke with per-namespace RBAC creates no namespace (flux-hub join does)",
            ));
        }
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.to_string()),
                labels: Some(namespace_labels(level)),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {
                tracing::info!(namespace, pod_security = %level, "created namespace");
                Ok(())
            }
            // Created meanwhile by someone else: fine.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(e) => Err(ClusterError::from_kube(action(), &e)),
        }
    }

    async fn apply(&self, object: &Object, owned: bool) -> Result<(), ClusterError> {
        let r = ObjectRef::of(object);
        if r.namespace.is_empty() || r.name.is_empty() {
            return Err(ClusterError::new(
                format!("apply {r}"),
                "the object has no namespace or name",
            ));
        }
        self.check_scope(|| format!("apply {r}"), &r.namespace)?;
        match object {
            Object::ConfigMap(o) => self.apply_typed(o, &r, owned).await,
            Object::Secret(o) => self.apply_typed(o, &r, owned).await,
            Object::Service(o) => self.apply_typed(o, &r, owned).await,
            Object::Job(o) => self.apply_typed(o, &r, owned).await,
            Object::Pod(o) => self.apply_typed(o, &r, owned).await,
        }
    }

    async fn inspect(&self, r: &ObjectRef) -> Result<Option<ObjectMeta>, ClusterError> {
        self.check_scope(|| format!("get {r}"), &r.namespace)?;
        match r.kind {
            Kind::Job => self.inspect_typed::<Job>(r).await,
            Kind::Pod => self.inspect_typed::<Pod>(r).await,
            Kind::Service => self.inspect_typed::<Service>(r).await,
            Kind::Secret => self.inspect_typed::<Secret>(r).await,
            Kind::ConfigMap => self.inspect_typed::<ConfigMap>(r).await,
        }
    }

    async fn owned(&self, me: &SpokeIdentity) -> Result<Vec<OwnedObject>, ClusterError> {
        let mut out = Vec::new();
        out.extend(self.list_owned::<Job>(Kind::Job, me).await?);
        out.extend(self.list_owned::<Pod>(Kind::Pod, me).await?);
        out.extend(self.list_owned::<Service>(Kind::Service, me).await?);
        out.extend(self.list_owned::<Secret>(Kind::Secret, me).await?);
        out.extend(self.list_owned::<ConfigMap>(Kind::ConfigMap, me).await?);
        Ok(out)
    }

    async fn delete(&self, object: &OwnedObject) -> Result<(), ClusterError> {
        let r = &object.object;
        self.check_scope(|| format!("delete {r}"), &r.namespace)?;
        let preconditions = object.uid.as_ref().map(|uid| Preconditions {
            uid: Some(uid.clone()),
            resource_version: None,
        });
        let plain = DeleteParams {
            preconditions: preconditions.clone(),
            ..DeleteParams::default()
        };
        match r.kind {
            Kind::Job => {
                let params = DeleteParams {
                    preconditions,
                    ..DeleteParams::background()
                };
                self.delete_typed::<Job>(r, &params).await
            }
            Kind::Pod => self.delete_typed::<Pod>(r, &plain).await,
            Kind::Service => self.delete_typed::<Service>(r, &plain).await,
            Kind::Secret => self.delete_typed::<Secret>(r, &plain).await,
            Kind::ConfigMap => self.delete_typed::<ConfigMap>(r, &plain).await,
        }
    }

    async fn jobs(&self) -> Result<Vec<Job>, ClusterError> {
        let ready =
            futures::future::try_join_all(self.jobs.iter().map(|w| w.store.wait_until_ready()));
        match tokio::time::timeout(JOB_CACHE_SYNC_TIMEOUT, ready).await {
            Ok(Ok(_)) => Ok(self
                .jobs
                .iter()
                .flat_map(|w| w.store.state())
                .map(|j| Job::clone(&j))
                .collect()),
            Ok(Err(_)) => Err(ClusterError::new("watch Jobs", "the Job watcher stopped")),
            Err(_) => Err(ClusterError::new(
                "watch Jobs",
                format!("the Job cache did not sync within {JOB_CACHE_SYNC_TIMEOUT:?}"),
            )),
        }
    }

    fn policy(&self) -> Result<Option<String>, ClusterError> {
        let Some(p) = &self.policy else {
            return Err(ClusterError::new(
                "read the spoke policy",
                "this spoke was started without a policy source",
            ));
        };
        let what = || {
            format!(
                "read the spoke policy (ConfigMap {}/{})",
                p.namespace, p.name
            )
        };
        if !p.ready.load(Ordering::Acquire) {
            return Err(ClusterError::new(what(), "not listed yet"));
        }
        Ok(p.store
            .state()
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(p.name.as_str()))
            .map(|c| {
                c.data
                    .as_ref()
                    .and_then(|d| d.get(POLICY_KEY))
                    .cloned()
                    .unwrap_or_default()
            }))
    }

    fn changes(&self) -> impl Stream<Item = ()> + Send + 'static {
        let jobs = WatchStream::from_changes(self.changes.clone()).map(|_| ());
        let policy = self
            .policy
            .as_ref()
            .map(|p| WatchStream::from_changes(p.changes.clone()).map(|_| ()));
        futures::stream::select(jobs, futures::stream::iter(policy).flatten())
    }

    fn unreachable(&self) -> Option<(SystemTime, String)> {
        // The longest outage of any watcher (they all talk to the same API server).
        self.jobs
            .iter()
            .filter_map(|w| {
                w.unreachable
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone()
            })
            .min_by_key(|(since, _)| *since)
    }
}
