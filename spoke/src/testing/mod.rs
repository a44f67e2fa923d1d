//! Test support: [`FakeCluster`], an in-memory [`Cluster`](crate::cluster::Cluster) that records what the agent
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

use flux_shared::render::Object;
use k8s_openapi::api::batch::v1::JobStatus;
use tokio::sync::watch;

mod fake_api;
mod samples;
pub use samples::{
    sample_assignments, sample_assignments_led_by, sample_curve_cert, sample_identity, sample_lead,
    sample_relayed_assignments, sample_routed_assignments,
};

use crate::cluster::{ClusterError, Kind, ObjectRef, metadata, metadata_mut};

/// One recorded call of the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `ensure_namespace(namespace)`.
    EnsureNamespace(String),
    /// `apply(object)` that succeeded (a create or an update).
    Apply(ObjectRef),
    /// `delete(object)` that succeeded.
    Delete(ObjectRef),
    /// `delete_job_foreground(object)` that succeeded: the Job stays, being deleted, until
    /// [`FakeCluster::finish_deletion`].
    DeleteForeground(ObjectRef),
    /// `serve_relay(service, address, port)` that succeeded: `namespace/name`, and where
    /// it points.
    ServeRelay(String, std::net::SocketAddr),
    /// `warn_about_spoke(reason, note)`.
    Warning(&'static str, String),
}

/// The operations of [`Cluster`](crate::cluster::Cluster), to select which ones fail.
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
    image_volumes: bool,
    /// Whether the policy has been read ([`FakeCluster::set_policy_known`]).
    policy_known: bool,
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
            image_volumes: false,
            policy_known: true,
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

    /// Sets the status of Job `namespace/name` and wakes [`Cluster::changes`](crate::cluster::Cluster::changes). False if
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

    /// Ends the deletion of Job `namespace/name` begun with
    /// [`Cluster::delete_job_foreground`](crate::cluster::Cluster::delete_job_foreground) (its pods are gone): it goes, as a change of the
    /// Job. False if there is no such Job being deleted.
    pub fn finish_deletion(&self, namespace: &str, name: &str) -> bool {
        let r = ObjectRef {
            kind: Kind::Job,
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        let gone = {
            let mut state = self.lock();
            let deleting = state
                .objects
                .get(&r)
                .is_some_and(|o| metadata(o).deletion_timestamp.is_some());
            deleting && state.objects.remove(&r).is_some()
        };
        if gone {
            self.notify();
        }
        gone
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

    /// What [`Cluster::unreachable`](crate::cluster::Cluster::unreachable) answers from now on (`None`: the API server answers),
    /// waking [`Cluster::changes`](crate::cluster::Cluster::changes).
    pub fn set_unreachable(&self, unreachable: Option<(SystemTime, String)>) {
        self.lock().unreachable = unreachable;
        self.notify();
    }

    /// What [`Cluster::room`](crate::cluster::Cluster::room) answers from now on.
    pub fn set_room(&self, room: NodesRoom) {
        self.lock().room = room;
    }

    /// What [`Cluster::image_volumes`](crate::cluster::Cluster::image_volumes) answers from
    /// now on.
    pub fn set_image_volumes(&self, available: bool) {
        self.lock().image_volumes = available;
    }

    /// Whether the policy has been read yet (it has, by default); notifies
    /// [`Cluster::changes`](crate::cluster::Cluster::changes), as a first listing would.
    pub fn set_policy_known(&self, known: bool) {
        self.lock().policy_known = known;
        self.notify();
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
    /// ConfigMap would, and notifies [`Cluster::changes`](crate::cluster::Cluster::changes).
    pub fn set_policy(&self, policy: Option<&str>) {
        self.lock().policy = policy.map(str::to_string);
        self.notify();
    }
}
