//! The spoke's view of its Kubernetes cluster: a small trait ([`Cluster`]) for the few
//! reads and writes the agent makes, so that tests can capture them (`FakeCluster`, in
//! `testing` with the cargo feature of that name), and its real implementation on a
//! `kube::Client` ([`KubeCluster`]).
//!
//! Every object the spoke creates carries `app.kubernetes.io/managed-by: flux-spoke`
//! ([`spoke_selector`](flux_shared::federation::ownership::spoke_selector)), the spoke's name and federation identity, and the assignment key
//! in an annotation: that is all the spoke needs to find what it owns after a restart,
//! with no local state ([`ownership`]). The spoke touches nothing else: it lists only its
//! own objects ([`Cluster::owned`]), creates with a POST so that a name taken by someone
//! else is a refusal and never a takeover ([`Cluster::apply`]), and deletes with the uid it
//! listed as a precondition ([`Cluster::delete`]).
//!
//! The trait and the types it speaks in live here; the implementation on a
//! `kube::Client` is `api_server.rs`.
//!
//! RBAC the real implementation needs: `get`, `create` on namespaces; `get`, `list`,
//! `create`, `patch` (server-side apply), `delete` on configmaps, secrets, services, pods
//! and jobs in every namespace it runs bursts in (`list` on pods also finds a relayed
//! burst's broker pods, [`broker_addresses`]); `watch` on jobs; and, to report its
//! room (`room_watch.rs`), `list` and `watch` on nodes and pods.

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::time::{Duration, SystemTime};

use flux_shared::federation::diagnostics::error_chain;
use flux_shared::federation::ownership::{Ownership, SpokeIdentity, describe_owner, ownership};
use flux_shared::federation::policy::{Level, NamespaceState};
use flux_shared::render::Object;
use futures::Stream;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

mod api_server;
mod broker_pods;
mod job_watch;
mod pod_events;
mod room_watch;

pub use api_server::KubeCluster;
pub use broker_pods::{broker_addresses, from_a_broker};
pub use pod_events::PodEvents;

/// Field manager of the spoke's server-side applies.
pub const FIELD_MANAGER: &str = "flux-spoke";

/// How long [`KubeCluster::jobs`] waits for the Job cache's first listing.
pub const JOB_CACHE_SYNC_TIMEOUT: Duration = Duration::from_secs(30);

use flux_shared::federation::spoke_rbac::REQUIRED;

/// Where the spoke acts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every namespace ([`REQUIRED`] in a ClusterRole): it creates the namespaces it needs.
    Cluster,
    /// Only these namespaces ([`NAMESPACED_REQUIRED`](flux_shared::federation::spoke_rbac::NAMESPACED_REQUIRED) in a Role in each, [`NAMESPACE_READ`](flux_shared::federation::spoke_rbac::NAMESPACE_READ)
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

/// What a cluster's nodes have room for ([`flux_shared::federation::room::measure`]):
/// node groups and the nodes left out, or why it is not known.
pub type NodesRoom = Result<(Vec<flux_shared::federation::proto::NodeRoom>, u32), String>;

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

/// The `endpointslice.kubernetes.io/managed-by` of the EndpointSlices the spoke writes
/// (the EndpointSlice controller leaves them alone: their Services have no selector).
pub const ENDPOINTS_MANAGER: &str = "flux-spoke.flux-framework.org";

/// The EndpointSlice that points relayed burst Service `service` (as it lives: its uid)
/// at the spoke's relay listener `address:port`, owned by the Service and labelled as the
/// Service's and the spoke's.
pub fn relay_endpoint_slice(
    service: &ObjectMeta,
    address: std::net::IpAddr,
    port: u16,
) -> EndpointSlice {
    let name = service.name.clone().unwrap_or_default();
    let mut labels = service.labels.clone().unwrap_or_default();
    labels.insert("kubernetes.io/service-name".into(), name.clone());
    labels.insert(
        "endpointslice.kubernetes.io/managed-by".into(),
        ENDPOINTS_MANAGER.into(),
    );
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: service.namespace.clone(),
            labels: Some(labels),
            annotations: service.annotations.clone(),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name,
                uid: service.uid.clone().unwrap_or_default(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        address_type: if address.is_ipv4() { "IPv4" } else { "IPv6" }.into(),
        endpoints: vec![Endpoint {
            addresses: vec![address.to_string()],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ports: Some(vec![EndpointPort {
            // The relay Service's one port (`flux_shared::render`'s broker port).
            name: Some("flux-broker".into()),
            port: Some(i32::from(port)),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
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

    /// Whether [`Cluster::policy`] says what the policy is: it has been read (or there is
    /// no policy source, so nothing to wait for).
    fn policy_known(&self) -> bool;

    /// Writes `object` (which carries the spoke's claim: labels and assignment annotation)
    /// in its namespace, never onto an object someone else made.
    ///
    /// `owned`: the caller listed the object among its assignment's own
    /// ([`Cluster::owned`]): server-side apply (field manager [`FIELD_MANAGER`], forced).
    /// Otherwise it is created (POST, same field manager); if the name exists, the object
    /// is read and, if it is the spoke's for the same assignment ([`same_owner`](flux_shared::federation::ownership::same_owner): listing
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

    /// Points relayed burst Service `service` (its metadata as rendered, with the spoke's
    /// claim) at this spoke's relay listener `address:port`: an EndpointSlice of the
    /// Service's name, owned by the live Service (it goes when the Service goes). Nothing
    /// is written unless the live Service is the spoke's for the same assignment.
    fn serve_relay(
        &self,
        service: &ObjectMeta,
        address: std::net::IpAddr,
        port: u16,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// The addresses of the pods of the spoke's Job `namespace/job` that may run a broker
    /// ([`broker_addresses`]): a relayed burst's listener accepts connections from these
    /// alone. An error while the Job or its pods cannot be read.
    fn broker_addresses(
        &self,
        namespace: &str,
        job: &str,
    ) -> impl Future<Output = Result<BTreeSet<std::net::IpAddr>, ClusterError>> + Send;

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

    /// Deletes Job `object` with propagation policy `Foreground`, only if its uid is still
    /// [`OwnedObject::uid`]: the Job stays, with a deletionTimestamp, until its pods are
    /// gone, so that a Job created again under its name never runs beside them. A Job
    /// already gone, or replaced by another of the same name, is not an error (and is left
    /// alone).
    fn delete_job_foreground(
        &self,
        object: &OwnedObject,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;

    /// The spoke's Jobs (label [`spoke_selector`](flux_shared::federation::ownership::spoke_selector)), as currently known.
    fn jobs(&self) -> impl Future<Output = Result<Vec<Job>, ClusterError>> + Send;

    /// Yields whenever one of the spoke's Jobs changes (created, status updated, deleted),
    /// the policy changes, or [`Cluster::unreachable`] changes, so that the agent acts and
    /// reports promptly. Changes may
    /// be coalesced. Never ends while the cluster handle lives.
    fn changes(&self) -> impl Stream<Item = ()> + Send + 'static;

    /// While the API server cannot be reached (the Job watch keeps failing): since when,
    /// and the last error. `None` while it answers.
    fn unreachable(&self) -> Option<(SystemTime, String)>;

    /// What the cluster's nodes have room for now (node groups, nodes left out), or why
    /// it is not known ([`flux_shared::federation::room`]).
    fn room(&self) -> NodesRoom;

    /// Whether the cluster mounts images as volumes, as far as known
    /// ([`flux_shared::image_volumes`]): new burst Jobs then mount the view image.
    fn image_volumes(&self) -> bool;

    /// A Warning Event about the spoke itself (`reason`, `note`), on its own Pod where it
    /// knows it; written in the background, never failing the caller.
    fn warn_about_spoke(&self, reason: &'static str, note: String);
}
