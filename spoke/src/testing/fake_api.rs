//! What the in-memory cluster answers to the agent's reads and writes: [`Cluster`] for
//! [`FakeCluster`], behaving like an API server where it matters to the agent (see
//! [`FakeCluster`]).

use std::collections::BTreeSet;
use std::time::SystemTime;

use flux_shared::federation::ownership::{SPOKE_MANAGER, SpokeIdentity, same_owner};
use flux_shared::federation::policy::{Level, NamespaceState};
use flux_shared::render::{Object, labels};
use futures::{Stream, StreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio_stream::wrappers::WatchStream;

use super::{FakeCluster, FakeOp, Op};
use crate::cluster::{
    Cluster, ClusterError, Kind, NodesRoom, ObjectRef, OwnedObject, Taken, metadata, metadata_mut,
};

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
            // A write does not stop a deletion under way.
            if let Some(old) = &old {
                metadata_mut(&mut object).deletion_timestamp =
                    metadata(old).deletion_timestamp.clone();
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

    async fn delete_job_foreground(&self, object: &OwnedObject) -> Result<(), ClusterError> {
        let r = &object.object;
        self.check(FakeOp::Delete, Some(r.kind), &format!("delete {r}"))?;
        {
            let mut state = self.lock();
            let Some(live) = state.objects.get_mut(r) else {
                return Ok(());
            };
            if object.uid.is_some() && metadata(live).uid != object.uid {
                return Ok(());
            }
            metadata_mut(live)
                .deletion_timestamp
                .get_or_insert_with(|| {
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::now(),
                    )
                });
            state.ops.push(Op::DeleteForeground(r.clone()));
        }
        self.notify();
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

    fn image_volumes(&self) -> bool {
        self.lock().image_volumes
    }

    fn policy_known(&self) -> bool {
        self.lock().policy_known
    }

    fn warn_about_spoke(&self, reason: &'static str, note: String) {
        self.lock().ops.push(Op::Warning(reason, note));
    }
}
