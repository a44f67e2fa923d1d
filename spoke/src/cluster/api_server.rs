//! [`super::Cluster`] on a real API server ([`KubeCluster`]): the Job and policy watches,
//! reads, POST-only creates and server-side applies, uid-guarded deletes.
//!
//! Size: the one implementation of the trait on a real API server, a few lines of API
//! calls per method; the scope check and the ownership guards every write shares stay
//! beside the writes.

use super::NodesRoom;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::SystemTime;

use flux_shared::federation::diagnostics::error_chain;
use flux_shared::federation::ownership::spoke_selector;
use flux_shared::federation::ownership::{SpokeIdentity, same_owner};
use flux_shared::federation::policy::{Level, NamespaceState, POD_SECURITY_ENFORCE, POLICY_KEY};
use flux_shared::managed_fields::as_applied;
use flux_shared::render::Object;
use futures::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
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

use super::job_watch::{JobWatch, watch_jobs};
use super::room_watch::RoomWatch;
use super::{
    Cluster, ClusterError, FIELD_MANAGER, JOB_CACHE_SYNC_TIMEOUT, Kind, ObjectRef, OwnedObject,
    Scope, Taken, relay_endpoint_slice,
};
use flux_shared::federation::spoke_rbac::namespace_labels;

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
    room: Option<RoomWatch>,
    events: Option<super::PodEvents>,
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
            room: None,
            events: None,
        }
    }

    /// This cluster, measuring its room ([`Cluster::room`]) from its nodes and pods, and
    /// whether it mounts images as volumes ([`Cluster::image_volumes`]) from its nodes'
    /// versions (the same permissions: `list` and `watch` on nodes).
    pub fn with_room(mut self) -> KubeCluster {
        self.room = Some(RoomWatch::start(&self.client));
        self
    }

    /// Events about the spoke on its own Pod `namespace/name`.
    pub fn with_pod_events(mut self, namespace: &str, name: &str) -> KubeCluster {
        self.events = Some(super::PodEvents::of_pod(
            self.client.clone(),
            namespace,
            name,
        ));
        self
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
    /// `namespace` ([`POLICY_PERMISSIONS`](flux_shared::federation::spoke_rbac::POLICY_PERMISSIONS)).
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

    async fn serve_relay(
        &self,
        service: &ObjectMeta,
        address: IpAddr,
        port: u16,
    ) -> Result<(), ClusterError> {
        let namespace = service.namespace.as_deref().unwrap_or_default();
        let name = service.name.as_deref().unwrap_or_default();
        let action = || format!("point the relay Service {namespace}/{name} at {address}:{port}");
        self.check_scope(action, namespace)?;
        let services: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        let live = services
            .get_metadata_opt(name)
            .await
            .map_err(|e| ClusterError::from_kube(action(), &e))?
            .map(|o| o.metadata);
        let Some(live) = live.filter(|live| same_owner(live, service)) else {
            return Err(ClusterError::new(
                action(),
                "the Service is not this spoke's for the burst (gone, or made by someone else)",
            ));
        };
        let slice = relay_endpoint_slice(&live, address, port);
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), namespace);
        // Not forced: an EndpointSlice of this name that another manager writes is not
        // taken over (the apply fails with a conflict instead).
        slices
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Apply(&slice),
            )
            .await
            .map(|_| ())
            .map_err(|e| ClusterError::from_kube(action(), &e))
    }

    async fn broker_addresses(
        &self,
        namespace: &str,
        job: &str,
    ) -> Result<std::collections::BTreeSet<IpAddr>, ClusterError> {
        let action = || format!("list the pods of Job {namespace}/{job}");
        self.check_scope(action, namespace)?;
        // The Job as the spoke's own Job cache holds it (its label is the spoke's).
        let at = reflector::ObjectRef::new(job).within(namespace);
        let uid = self
            .jobs
            .iter()
            .find_map(|w| w.store.get(&at))
            .and_then(|j| j.metadata.uid.clone());
        let Some(uid) = uid else {
            return Err(ClusterError::new(action(), "the Job is not known yet"));
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let selector = format!("{}={job}", flux_shared::render::labels::JOB);
        let list = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| ClusterError::from_kube(action(), &e))?;
        Ok(super::broker_addresses(namespace, &uid, &list.items))
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

    async fn delete_job_foreground(&self, object: &OwnedObject) -> Result<(), ClusterError> {
        let r = &object.object;
        self.check_scope(|| format!("delete {r}"), &r.namespace)?;
        let params = DeleteParams {
            preconditions: object.uid.as_ref().map(|uid| Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::foreground()
        };
        self.delete_typed::<Job>(r, &params).await
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

    fn policy_known(&self) -> bool {
        self.policy
            .as_ref()
            .is_none_or(|p| p.ready.load(Ordering::Acquire))
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

    fn image_volumes(&self) -> bool {
        self.room.as_ref().is_some_and(RoomWatch::image_volumes)
    }

    fn warn_about_spoke(&self, reason: &'static str, note: String) {
        if let Some(events) = &self.events {
            events.warn(reason, note);
        }
    }

    fn room(&self) -> NodesRoom {
        let not_measured = || "the spoke does not measure its cluster's room".to_string();
        self.room
            .as_ref()
            .map_or_else(|| Err(not_measured()), |r| r.measure())
    }
}
