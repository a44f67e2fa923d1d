//! Test support: [`FakeCluster`], an in-memory [`Cluster`] that records what the agent
//! does, lets a test set Job statuses, and can be made to fail; and (`samples`)
//! [`sample_assignments`], valid assignments built the way the hub builds them.
//!
//! ```
//! # use flux_spoke::testing::{FakeCluster, Op};
//! let cluster = FakeCluster::new();
//! assert!(cluster.ops().is_empty());
//! ```

use crate::cluster::NodesRoom;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use flux_shared::federation::ownership::SPOKE_MANAGER;
use flux_shared::federation::ownership::{SpokeIdentity, same_owner};
use flux_shared::federation::policy::{Level, NamespaceState};
use flux_shared::render::{Object, labels};
use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::watch;
use tokio_stream::wrappers::WatchStream;

mod samples;
pub use samples::{
    sample_assignments, sample_assignments_led_by, sample_curve_cert, sample_identity, sample_lead,
    sample_relayed_assignments,
};

use crate::cluster::{
    Cluster, ClusterError, Kind, ObjectRef, OwnedObject, Taken, metadata, metadata_mut,
};

/// One recorded call of the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `ensure_namespace(namespace)`.
    EnsureNamespace(String),
    /// `apply(object)` that succeeded (a create or an update).
    Apply(ObjectRef),
    /// `delete(object)` that succeeded.
    Delete(ObjectRef),
    /// `serve_relay(service, address, port)` that succeeded: `namespace/name`, and where
    /// it points.
    ServeRelay(String, std::net::SocketAddr),
}

/// The operations of [`Cluster`], to select which ones fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeOp {
    /// `ensure_namespace`.
    EnsureNamespace,
    /// `apply`.
    Apply,
    /// `inspect`.
    Inspect,
    /// `owned`.
    Owned,
    /// `delete`.
    Delete,
    /// `jobs`.
    Jobs,
    /// `namespace` (reading one).
    ReadNamespace,
    /// `policy`.
    Policy,
    /// `serve_relay`.
    ServeRelay,
}

/// The policy a [`FakeCluster`] starts with: every namespace (created `privileged`), up to
/// the most brokers a MiniCluster may have. Tests of the policy set their own.
pub const PERMISSIVE_POLICY: &str =
    "namespaces: [{name: '*', podSecurity: privileged}]\nmaxBrokers: 16384\n";

#[derive(Clone, Debug)]
struct Failure {
    op: FakeOp,
    kind: Option<Kind>,
    message: String,
}

#[derive(Debug)]
struct State {
    objects: BTreeMap<ObjectRef, Object>,
    namespaces: BTreeSet<String>,
    /// Pod Security enforce labels of namespaces (those the spoke created, or set).
    levels: BTreeMap<String, String>,
    policy: Option<String>,
    ops: Vec<Op>,
    failures: Vec<Failure>,
    unreachable: Option<(SystemTime, String)>,
    room: NodesRoom,
    /// The addresses of each Job's broker pods (namespace, Job), where a test set them.
    brokers: BTreeMap<(String, String), BTreeSet<std::net::IpAddr>>,
    /// Last uid and resourceVersion handed out.
    serial: u64,
}

impl Default for State {
    fn default() -> State {
        State {
            objects: BTreeMap::new(),
            namespaces: BTreeSet::new(),
            levels: BTreeMap::new(),
            policy: Some(PERMISSIVE_POLICY.to_string()),
            ops: Vec::new(),
            failures: Vec::new(),
            unreachable: None,
            room: Err("not measured".to_string()),
            brokers: BTreeMap::new(),
            serial: 0,
        }
    }
}

impl State {
    /// Stamps `object` as the API server would store it: a new uid when it is created,
    /// the old one when it replaces `old`, and a new resourceVersion either way.
    fn stamp(&mut self, object: &mut Object, old: Option<&Object>) {
        self.serial += 1;
        let meta = metadata_mut(object);
        meta.uid = match old {
            Some(old) => metadata(old).uid.clone(),
            None => meta
                .uid
                .clone()
                .or_else(|| Some(format!("fake-uid-{}", self.serial))),
        };
        meta.resource_version = Some(self.serial.to_string());
    }
}

/// An in-memory cluster.
///
/// Behaves like an API server where it matters to the agent: applying into a namespace
/// that does not exist fails (404), applying a Job keeps its status (server-side apply
/// does not touch it), objects get a uid when created and a new resourceVersion on every
/// write, creating onto a name that holds an object of someone else fails like
/// [`crate::KubeCluster`] does (the error carries [`ClusterError::taken`]), deleting a
/// missing object or one whose uid is not the one listed succeeds without touching
/// anything, `owned` finds objects by the same labels and annotation as the real
/// implementation, and `jobs` only returns Jobs labelled as a spoke's.
#[derive(Clone, Debug)]
pub struct FakeCluster {
    state: Arc<Mutex<State>>,
    changes: Arc<watch::Sender<u64>>,
}

impl Default for FakeCluster {
    fn default() -> FakeCluster {
        FakeCluster::new()
    }
}

impl FakeCluster {
    /// An empty cluster: no namespaces, no objects.
    pub fn new() -> FakeCluster {
        FakeCluster {
            state: Arc::new(Mutex::new(State::default())),
            changes: Arc::new(watch::channel(0).0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock has failed already; keep going.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn notify(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn check(&self, op: FakeOp, kind: Option<Kind>, action: &str) -> Result<(), ClusterError> {
        let state = self.lock();
        let failure = state
            .failures
            .iter()
            .find(|f| f.op == op && (f.kind.is_none() || f.kind == kind));
        match failure {
            Some(f) => Err(ClusterError {
                action: action.to_string(),
                code: Some(500),
                message: f.message.clone(),
                taken: None,
            }),
            None => Ok(()),
        }
    }

    /// The addresses the broker pods of Job `namespace/job` hold from now on (until set,
    /// a Job's pods hold the loopback addresses, where the tests' brokers connect from),
    /// as a change of the Job.
    pub fn set_broker_addresses(
        &self,
        namespace: &str,
        job: &str,
        addresses: impl IntoIterator<Item = std::net::IpAddr>,
    ) {
        self.lock().brokers.insert(
            (namespace.to_string(), job.to_string()),
            addresses.into_iter().collect(),
        );
        self.notify();
    }

    /// Puts `object` in the cluster (creating its namespace; giving it a uid unless it
    /// has one, and a new resourceVersion) without recording an operation: for objects
    /// left over from an earlier run of the spoke, or someone else's.
    pub fn insert(&self, mut object: Object) {
        let r = ObjectRef::of(&object);
        let is_job = r.kind == Kind::Job;
        {
            let mut state = self.lock();
            state.namespaces.insert(r.namespace.clone());
            state.stamp(&mut object, None);
            state.objects.insert(r, object);
        }
        if is_job {
            self.notify();
        }
    }

    /// Removes an object without recording an operation (someone else deleted it).
    pub fn remove(&self, kind: Kind, namespace: &str, name: &str) -> Option<Object> {
        let r = ObjectRef {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        self.lock().objects.remove(&r)
    }

    /// Creates a namespace without recording an operation.
    pub fn insert_namespace(&self, namespace: &str) {
        self.lock().namespaces.insert(namespace.to_string());
    }

    /// Sets the status of Job `namespace/name` and wakes [`Cluster::changes`]. False if
    /// there is no such Job.
    pub fn set_job_status(&self, namespace: &str, name: &str, status: JobStatus) -> bool {
        let r = ObjectRef {
            kind: Kind::Job,
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let found = match self.lock().objects.get_mut(&r) {
            Some(Object::Job(job)) => {
                job.status = Some(status);
                true
            }
            _ => false,
        };
        if found {
            self.notify();
        }
        found
    }

    /// Makes every call of `op` fail with `message` until [`FakeCluster::heal`].
    pub fn fail(&self, op: FakeOp, message: &str) {
        self.fail_kind(op, None, message);
    }

    /// Makes calls of `op` on objects of `kind` (every kind when `None`) fail with
    /// `message` until [`FakeCluster::heal`].
    pub fn fail_kind(&self, op: FakeOp, kind: Option<Kind>, message: &str) {
        self.lock().failures.push(Failure {
            op,
            kind,
            message: message.to_string(),
        });
    }

    /// What [`Cluster::unreachable`] answers from now on (`None`: the API server answers),
    /// waking [`Cluster::changes`].
    pub fn set_unreachable(&self, unreachable: Option<(SystemTime, String)>) {
        self.lock().unreachable = unreachable;
        self.notify();
    }

    /// What [`Cluster::room`] answers from now on.
    pub fn set_room(&self, room: NodesRoom) {
        self.lock().room = room;
    }

    /// Ends every failure set with [`FakeCluster::fail`].
    pub fn heal(&self) {
        self.lock().failures.clear();
    }

    /// Every operation recorded so far, in order.
    pub fn ops(&self) -> Vec<Op> {
        self.lock().ops.clone()
    }

    /// Forgets the recorded operations.
    pub fn clear_ops(&self) {
        self.lock().ops.clear();
    }

    /// The objects applied so far, in order (repeats included).
    pub fn applied(&self) -> Vec<ObjectRef> {
        self.ops()
            .into_iter()
            .filter_map(|op| match op {
                Op::Apply(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    /// The objects deleted so far, in order.
    pub fn deleted(&self) -> Vec<ObjectRef> {
        self.ops()
            .into_iter()
            .filter_map(|op| match op {
                Op::Delete(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    /// Every object in the cluster, ordered by kind, namespace and name.
    pub fn objects(&self) -> Vec<Object> {
        self.lock().objects.values().cloned().collect()
    }

    /// The references of every object in the cluster.
    pub fn refs(&self) -> Vec<ObjectRef> {
        self.lock().objects.keys().cloned().collect()
    }

    /// One object.
    pub fn get(&self, kind: Kind, namespace: &str, name: &str) -> Option<Object> {
        let r = ObjectRef {
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        self.lock().objects.get(&r).cloned()
    }

    /// The existing namespaces.
    pub fn namespaces(&self) -> Vec<String> {
        self.lock().namespaces.iter().cloned().collect()
    }

    /// The Pod Security enforce label of namespace `namespace`, if it has one.
    pub fn namespace_level(&self, namespace: &str) -> Option<String> {
        self.lock().levels.get(namespace).cloned()
    }

    /// Sets the policy document (`None`: no policy ConfigMap), as an edit of the
    /// ConfigMap would, and notifies [`Cluster::changes`].
    pub fn set_policy(&self, policy: Option<&str>) {
        self.lock().policy = policy.map(str::to_string);
        self.notify();
    }
}

impl Cluster for FakeCluster {
    async fn namespace(&self, namespace: &str) -> Result<NamespaceState, ClusterError> {
        self.check(
            FakeOp::ReadNamespace,
            None,
            &format!("get namespace {namespace}"),
        )?;
        let state = self.lock();
        Ok(if state.namespaces.contains(namespace) {
            NamespaceState::Exists {
                enforce: state.levels.get(namespace).cloned(),
            }
        } else {
            NamespaceState::Missing
        })
    }

    async fn ensure_namespace(&self, namespace: &str, level: Level) -> Result<(), ClusterError> {
        self.check(
            FakeOp::EnsureNamespace,
            None,
            &format!("create namespace {namespace}"),
        )?;
        let mut state = self.lock();
        if state.namespaces.insert(namespace.to_string()) {
            state
                .levels
                .insert(namespace.to_string(), level.as_str().to_string());
            state.ops.push(Op::EnsureNamespace(namespace.to_string()));
        }
        Ok(())
    }

    async fn apply(&self, object: &Object, owned: bool) -> Result<(), ClusterError> {
        let r = ObjectRef::of(object);
        let action = format!("apply {r}");
        self.check(FakeOp::Apply, Some(r.kind), &action)?;
        let is_job = r.kind == Kind::Job;
        {
            let mut state = self.lock();
            if !state.namespaces.contains(&r.namespace) {
                return Err(ClusterError {
                    action,
                    code: Some(404),
                    message: format!("namespaces \"{}\" not found", r.namespace),
                    taken: None,
                });
            }
            let old = state.objects.get(&r).cloned();
            if let Some(old) = &old
                && !owned
                && !same_owner(metadata(old), metadata(object))
            {
                return Err(ClusterError::name_taken(
                    format!("create {r}"),
                    Taken::new(&r, metadata(old)),
                ));
            }
            let mut object = object.clone();
            if let (Object::Job(new), Some(Object::Job(old))) = (&mut object, &old) {
                new.status = old.status.clone();
            }
            state.stamp(&mut object, old.as_ref());
            state.objects.insert(r.clone(), object);
            state.ops.push(Op::Apply(r));
        }
        if is_job {
            self.notify();
        }
        Ok(())
    }

    async fn serve_relay(
        &self,
        service: &ObjectMeta,
        address: std::net::IpAddr,
        port: u16,
    ) -> Result<(), ClusterError> {
        let r = ObjectRef {
            kind: Kind::Service,
            namespace: service.namespace.clone().unwrap_or_default(),
            name: service.name.clone().unwrap_or_default(),
        };
        let action = format!("point {r} at {address}:{port}");
        self.check(FakeOp::ServeRelay, Some(Kind::Service), &action)?;
        let mut state = self.lock();
        match state.objects.get(&r) {
            Some(live) if same_owner(metadata(live), service) => {}
            _ => {
                return Err(ClusterError::new(
                    action,
                    "the Service is not this spoke's for the burst",
                ));
            }
        }
        state.ops.push(Op::ServeRelay(
            format!("{}/{}", r.namespace, r.name),
            std::net::SocketAddr::new(address, port),
        ));
        Ok(())
    }

    async fn broker_addresses(
        &self,
        namespace: &str,
        job: &str,
    ) -> Result<BTreeSet<std::net::IpAddr>, ClusterError> {
        let state = self.lock();
        let r = ObjectRef {
            kind: Kind::Job,
            namespace: namespace.to_string(),
            name: job.to_string(),
        };
        if !state.objects.contains_key(&r) {
            return Err(ClusterError::new(
                format!("list the pods of {r}"),
                "the Job is not known yet",
            ));
        }
        Ok(state
            .brokers
            .get(&(r.namespace, r.name))
            .cloned()
            .unwrap_or_else(|| {
                BTreeSet::from([
                    std::net::Ipv4Addr::LOCALHOST.into(),
                    std::net::Ipv6Addr::LOCALHOST.into(),
                ])
            }))
    }

    async fn inspect(&self, r: &ObjectRef) -> Result<Option<ObjectMeta>, ClusterError> {
        self.check(FakeOp::Inspect, Some(r.kind), &format!("get {r}"))?;
        Ok(self.lock().objects.get(r).map(|o| metadata(o).clone()))
    }

    async fn owned(&self, me: &SpokeIdentity) -> Result<Vec<OwnedObject>, ClusterError> {
        self.check(FakeOp::Owned, None, "list owned objects")?;
        Ok(self
            .lock()
            .objects
            .iter()
            .filter_map(|(r, o)| OwnedObject::from_meta(r.kind, metadata(o), me))
            .collect())
    }

    async fn delete(&self, object: &OwnedObject) -> Result<(), ClusterError> {
        let r = &object.object;
        self.check(FakeOp::Delete, Some(r.kind), &format!("delete {r}"))?;
        {
            let mut state = self.lock();
            let replaced = object.uid.is_some()
                && state
                    .objects
                    .get(r)
                    .is_some_and(|o| metadata(o).uid != object.uid);
            if replaced {
                // The uid precondition fails: the object is left alone, like the API
                // server does (409, which the real implementation treats as done).
                return Ok(());
            }
            state.objects.remove(r);
            state.ops.push(Op::Delete(r.clone()));
        }
        if r.kind == Kind::Job {
            self.notify();
        }
        Ok(())
    }

    async fn jobs(&self) -> Result<Vec<Job>, ClusterError> {
        self.check(FakeOp::Jobs, Some(Kind::Job), "watch Jobs")?;
        Ok(self
            .lock()
            .objects
            .values()
            .filter_map(|o| match o {
                Object::Job(job)
                    if job
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(labels::MANAGED_BY))
                        .is_some_and(|m| m == SPOKE_MANAGER) =>
                {
                    Some(job.clone())
                }
                _ => None,
            })
            .collect())
    }

    fn policy(&self) -> Result<Option<String>, ClusterError> {
        self.check(FakeOp::Policy, None, "read the spoke policy")?;
        Ok(self.lock().policy.clone())
    }

    fn changes(&self) -> impl Stream<Item = ()> + Send + 'static {
        WatchStream::from_changes(self.changes.subscribe()).map(|_| ())
    }

    fn unreachable(&self) -> Option<(SystemTime, String)> {
        self.lock().unreachable.clone()
    }

    fn room(&self) -> NodesRoom {
        self.lock().room.clone()
    }
}
