//! The caches of the objects the hub manages, fed by the watches: what a reconcile reads
//! instead of asking the API server.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};

use super::broker_pods::BrokerPods;
use super::echoes::Echoes;

/// Caches of the objects the hub manages, fed by watches.
#[derive(Clone)]
pub struct Stores {
    /// Jobs.
    pub jobs: Store<Job>,
    /// Secrets (CURVE certificates).
    pub secrets: Store<Secret>,
    /// ConfigMaps (scripts and Flux configuration).
    pub config_maps: Store<ConfigMap>,
    /// Services.
    pub services: Store<Service>,
    /// Broker pods (of the hub's Jobs): metadata and node only, indexed by Job.
    pub broker_pods: BrokerPods,
    /// The hub's own services pods.
    pub pods: Store<Pod>,
    /// The hub's writes whose watch events are still to come.
    pub echoes: Arc<Echoes>,
}

impl Stores {
    /// Resolves once every cache holds its initial list.
    pub async fn wait_until_ready(&self) {
        // A dropped writer means the hub is shutting down; nothing to wait for then.
        let _ = futures::join!(
            self.jobs.wait_until_ready(),
            self.secrets.wait_until_ready(),
            self.config_maps.wait_until_ready(),
            self.services.wait_until_ready(),
            self.broker_pods.wait_until_ready(),
            self.pods.wait_until_ready(),
        );
    }
}

/// The cached object `ns/name`.
pub(in crate::controller) fn get<K>(store: &Store<K>, ns: &str, name: &str) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    store.get(&ObjectRef::new(name).within(ns))
}

/// How many objects the caches hold (a gauge).
pub(in crate::controller) fn managed_objects(s: &Stores) -> i64 {
    let n = s.jobs.len()
        + s.secrets.len()
        + s.config_maps.len()
        + s.services.len()
        + s.broker_pods.len()
        + s.pods.len();
    i64::try_from(n).unwrap_or(i64::MAX)
}
