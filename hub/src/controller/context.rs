//! What every reconcile stage shares: the caches, the client, the echo memories that keep
//! a pass from repeating the previous pass's writes, and the error type.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flux_shared::api::MiniCluster;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::events::Recorder;
use kube::{Client, ResourceExt};

use crate::controller::blockers::Blockers;
use crate::controller::watch::stores::Stores;
use crate::controller::watch::verified::Verified;
use crate::federation::{McKey, Registry};
use crate::ops::metrics::Metrics;

/// Field manager of every write the hub makes.
pub const MANAGER: &str = "flux-hub";

/// Everything a reconcile needs.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Caches of managed objects.
    pub stores: Stores,
    /// Event recorder.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Consecutive failures per MiniCluster, for capped exponential backoff.
    pub failures: Mutex<HashMap<(String, String), u32>>,
    /// Certificates this process generated, until the Secret cache shows them: a
    /// reconcile triggered by the new Job can run before the Secret's watch event arrives,
    /// and must not generate (and force-apply) a second certificate.
    pub generated_certs: Mutex<HashMap<(String, String), String>>,
    /// Broker pods this process labelled with their `job-index` recently, by UID: until
    /// the pod cache shows the label, a reconcile must not send the same patch again.
    pub labelled: Mutex<HashMap<String, std::time::Instant>>,
    /// The status this process last wrote for each MiniCluster (a hash of it and the
    /// MiniCluster's UID) and when: a reconcile that runs before the cache shows that write
    /// would otherwise write it, and publish its Events, a second time.
    pub written_status: Mutex<HashMap<(String, String), (u64, std::time::Instant)>>,
    /// The MiniCluster UID and generation whose orphans were last deleted: only a spec
    /// change can make new ones, so later passes at that generation skip the scan.
    pub pruned: Mutex<HashMap<(String, String), (String, i64)>>,
    /// What the last pass of each MiniCluster left as rendered (see `verified`).
    pub(in crate::controller) verified: Mutex<HashMap<(String, String), Verified>>,
    /// The current time (a parameter so tests are deterministic).
    pub now: fn() -> Time,
    /// Assignments for spokes and what they reported.
    pub registry: Arc<Registry>,
    /// `--lead-broker-address`: the address burst brokers reach the lead broker at, unless
    /// the spec sets one.
    pub lead_address: Option<String>,
    /// How long a deleted MiniCluster waits for spokes to confirm its bursts are gone.
    pub deletion_timeout: Duration,
    /// Watches of objects of someone else that hold a name a MiniCluster needs.
    pub blockers: Arc<Blockers>,
    /// How many large specs are reconciled at once.
    pub spec_budget: super::spec_budget::SpecBudget,
}

impl Context {
    /// A context with the real clock.
    pub fn new(client: Client, stores: Stores, recorder: Recorder, metrics: Arc<Metrics>) -> Self {
        Context {
            spec_budget: Default::default(),
            blockers: Arc::new(Blockers::new(client.clone())),
            client,
            stores,
            recorder,
            metrics,
            failures: Mutex::new(HashMap::new()),
            generated_certs: Mutex::new(HashMap::new()),
            labelled: Mutex::new(HashMap::new()),
            written_status: Mutex::new(HashMap::new()),
            pruned: Mutex::new(HashMap::new()),
            verified: Mutex::new(HashMap::new()),
            now: || Time(k8s_openapi::jiff::Timestamp::now()),
            registry: Registry::new(),
            lead_address: None,
            deletion_timeout: DEFAULT_DELETION_TIMEOUT,
        }
    }

    /// Drop what this process remembers of a MiniCluster that is gone.
    pub fn forget(&self, key: &(String, String)) {
        if let Ok(mut m) = self.failures.lock() {
            m.remove(key);
        }
        if let Ok(mut m) = self.generated_certs.lock() {
            m.remove(key);
        }
        if let Ok(mut m) = self.written_status.lock() {
            m.remove(key);
        }
        if let Ok(mut m) = self.verified.lock() {
            m.remove(key);
        }
        if let Ok(mut m) = self.pruned.lock() {
            m.remove(key);
        }
        self.blockers.clear(key);
        self.registry.forget(key);
    }

    /// Use `registry` for assignments, `lead_address` (`--lead-broker-address`) and
    /// `deletion_timeout` for bursting MiniClusters.
    pub fn with_federation(
        mut self,
        registry: Arc<Registry>,
        lead_address: Option<String>,
        deletion_timeout: Duration,
    ) -> Self {
        self.registry = registry;
        self.lead_address = lead_address;
        self.deletion_timeout = deletion_timeout;
        self
    }
}

/// Default of `--burst-deletion-timeout-seconds`.
pub const DEFAULT_DELETION_TIMEOUT: Duration = Duration::from_secs(300);

/// Errors that make a reconcile retry later.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done.
        action: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The MiniCluster has no namespace (the API server always sets one).
    #[error("MiniCluster {0} has no namespace")]
    NoNamespace(String),
}

impl Error {
    /// Short category for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Kube {
                source: kube::Error::Api(e),
                ..
            } if e.code == 409 => "conflict",
            Error::Kube {
                source: kube::Error::Api(e),
                ..
            } if e.code >= 500 => "server",
            Error::Kube {
                source: kube::Error::Api(_),
                ..
            } => "api",
            Error::Kube { .. } => "transport",
            Error::NoNamespace(_) => "invalid",
        }
    }
}

pub(in crate::controller) fn kube_err(
    action: impl Into<String>,
) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Kube { action, source }
}

/// The registry key of `mc`: its namespace and name.
pub(in crate::controller) fn mc_key(mc: &MiniCluster) -> McKey {
    (mc.namespace().unwrap_or_default(), mc.name_any())
}
