//! What every reconcile stage shares: the caches, the client, the echo memories that keep
//! a pass from repeating the previous pass's writes, and the error type.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flux_shared::api::MiniCluster;
use flux_shared::federation::McKey;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::events::Recorder;
use kube::{Client, ResourceExt};

use crate::controller::blockers::Blockers;
use crate::controller::memory::Memories;
use crate::controller::watch::stores::Stores;
use crate::federation::Registry;
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
    /// What this process remembers of each MiniCluster between its reconciles.
    pub(in crate::controller) memory: Memories,
    /// Broker pods this process labelled with their `job-index` recently, by UID: until
    /// the pod cache shows the label, a reconcile must not send the same patch again.
    pub labelled: Mutex<HashMap<String, std::time::Instant>>,
    /// The current time (a parameter so tests are deterministic).
    pub now: fn() -> Time,
    /// Assignments for spokes and what they reported.
    pub registry: Arc<Registry>,
    /// What each bursting MiniCluster's lead broker sees of its bursts (read by the
    /// poller in [`crate::controller::autoscaler`]).
    pub lead_views: Arc<crate::federation::lead_view::LeadViews>,
    /// `--lead-broker-address`: the address burst brokers reach the lead broker at, unless
    /// the spec sets one.
    pub lead_address: Option<String>,
    /// How long a deleted MiniCluster waits for spokes to confirm its bursts are gone.
    pub deletion_timeout: Duration,
    /// Watches of objects of someone else that hold a name a MiniCluster needs.
    pub blockers: Arc<Blockers>,
    /// How many large specs are reconciled at once.
    pub spec_budget: super::spec_budget::SpecBudget,
    /// How long the placement of a burst with candidates waits before it moves it on.
    pub placement: crate::federation::placement::Timeouts,
    /// Whether this cluster mounts images as volumes: new root Jobs then mount the view
    /// image (unless their spec says otherwise). Never started in tests: no image volumes.
    pub image_volumes: flux_shared::ops::ImageVolumeWatch,
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
            memory: Memories::default(),
            labelled: Mutex::new(HashMap::new()),
            now: || Time(k8s_openapi::jiff::Timestamp::now()),
            registry: Registry::new(),
            lead_views: Arc::default(),
            lead_address: None,
            deletion_timeout: DEFAULT_DELETION_TIMEOUT,
            placement: Default::default(),
            image_volumes: Default::default(),
        }
    }

    /// Drop what this process remembers of a MiniCluster that is gone.
    pub fn forget(&self, key: &McKey) {
        self.memory.forget(key);
        self.blockers.clear(key);
        self.registry.forget(key);
        self.lead_views.forget(key);
        self.metrics.fleet.forget_minicluster(&key.to_string());
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

    /// Move a burst that names candidates on when none of its brokers is ready `timeout`
    /// after it was placed (`--placement-timeout-seconds`).
    pub fn with_placement_timeout(mut self, timeout: Duration) -> Self {
        self.placement.place = timeout;
        self
    }

    /// Place a burst again once its cluster has been lost for `grace`
    /// (`--lost-cluster-grace-seconds`).
    pub fn with_lost_cluster_grace(mut self, grace: Duration) -> Self {
        self.placement.lost = grace;
        self
    }

    /// Whether this cluster mounts images as volumes, as `watch` follows it.
    pub fn with_image_volumes(mut self, watch: flux_shared::ops::ImageVolumeWatch) -> Self {
        self.image_volumes = watch;
        self
    }
}

/// Default of `--burst-deletion-timeout-seconds`.
pub const DEFAULT_DELETION_TIMEOUT: Duration = Duration::from_secs(300);

/// A failed API call: what was being done, and the error.
#[derive(Debug, thiserror::Error)]
#[error("{action}: {source}")]
pub struct ApiError {
    /// What was being done.
    pub action: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

impl ApiError {
    /// The API server's answer, when it answered (`None`: it could not be reached).
    pub fn response(&self) -> Option<&kube::core::Status> {
        match &self.source {
            kube::Error::Api(status) => Some(status),
            _ => None,
        }
    }
}

/// Errors that make a reconcile retry later: one variant per stage that can fail
/// ([`crate::controller::reconcile`]'s list), so that the metric and the log say which
/// stage failed ([`Error::stage`]), not only how ([`Error::kind`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The MiniCluster has no namespace (the API server always sets one).
    #[error("MiniCluster {0} has no namespace")]
    NoNamespace(String),
    /// Stage "apply": writing the rendered objects.
    #[error("apply: {0}")]
    Apply(#[source] ApiError),
    /// Stage "pod labels": labelling the broker pods with their index.
    #[error("pod labels: {0}")]
    PodLabels(#[source] ApiError),
    /// Stage "orphans": deleting what the plan no longer has.
    #[error("orphans: {0}")]
    Orphans(#[source] ApiError),
    /// Stage "federate": the finalizer and the lead broker's endpoint.
    #[error("federate: {0}")]
    Federate(#[source] ApiError),
    /// Stage "status write".
    #[error("status write: {0}")]
    StatusWrite(#[source] ApiError),
    /// `spec.cleanup`: deleting the finished MiniCluster.
    #[error("cleanup: {0}")]
    Cleanup(#[source] ApiError),
    /// Stage "finalize" of a deleted MiniCluster.
    #[error("finalize: {0}")]
    Finalize(#[source] ApiError),
}

impl Error {
    /// The stage that failed, the `stage` label of `flux_hub_reconcile_errors_total`.
    pub fn stage(&self) -> &'static str {
        self.parts().0
    }

    /// The Degraded condition's reason while this error repeats: the stage, failed
    /// (`ApplyFailed`, ...).
    pub fn reason(&self) -> &'static str {
        self.parts().1
    }

    /// Stage, reason and failed call of each variant, in one place.
    fn parts(&self) -> (&'static str, &'static str, Option<&ApiError>) {
        match self {
            Error::NoNamespace(_) => ("validate", "NoNamespace", None),
            Error::Apply(e) => ("apply", "ApplyFailed", Some(e)),
            Error::PodLabels(e) => ("pod_labels", "PodLabelsFailed", Some(e)),
            Error::Orphans(e) => ("orphans", "OrphansFailed", Some(e)),
            Error::Federate(e) => ("federate", "FederateFailed", Some(e)),
            Error::StatusWrite(e) => ("status_write", "StatusWriteFailed", Some(e)),
            Error::Cleanup(e) => ("cleanup", "CleanupFailed", Some(e)),
            Error::Finalize(e) => ("finalize", "FinalizeFailed", Some(e)),
        }
    }

    /// Whether the MiniCluster's status should say so: the API server refused a call for a
    /// reason that a retry does not change (a 4xx other than a conflict: forbidden, not
    /// found, ...). Conflicts, server errors and an unreachable API server pass on their
    /// own and show only in the metric and the log; the status write and the finalizer
    /// cannot report on themselves.
    pub fn shows_in_status(&self) -> bool {
        self.kind() == "api" && !matches!(self, Error::StatusWrite(_) | Error::Finalize(_))
    }

    /// The failed API call, if one failed.
    pub fn api(&self) -> Option<&ApiError> {
        self.parts().2
    }

    /// Short category, the `kind` label of `flux_hub_reconcile_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self.api() {
            None => "invalid",
            Some(api) => match api.response() {
                Some(e) if e.code == 409 => "conflict",
                Some(e) if e.code >= 500 => "server",
                Some(_) => "api",
                None => "transport",
            },
        }
    }
}

pub(in crate::controller) fn kube_err(
    action: impl Into<String>,
) -> impl FnOnce(kube::Error) -> ApiError {
    let action = action.into();
    move |source| ApiError { action, source }
}

/// The registry key of `mc`: its namespace and name.
pub(in crate::controller) fn mc_key(mc: &MiniCluster) -> McKey {
    McKey::new(mc.namespace().unwrap_or_default(), mc.name_any())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One error of each variant (the match has no wildcard: a new variant must be added
    /// here, and so gets checked).
    fn one_of_each() -> Vec<Error> {
        let api = || ApiError {
            action: "x".into(),
            source: kube::Error::LinesCodecMaxLineLengthExceeded,
        };
        let all = vec![
            Error::NoNamespace("m".into()),
            Error::Apply(api()),
            Error::PodLabels(api()),
            Error::Orphans(api()),
            Error::Federate(api()),
            Error::StatusWrite(api()),
            Error::Cleanup(api()),
            Error::Finalize(api()),
        ];
        for e in &all {
            match e {
                Error::NoNamespace(_)
                | Error::Apply(_)
                | Error::PodLabels(_)
                | Error::Orphans(_)
                | Error::Federate(_)
                | Error::StatusWrite(_)
                | Error::Cleanup(_)
                | Error::Finalize(_) => {}
            }
        }
        all
    }

    #[test]
    fn every_stage_has_its_own_label_and_the_docs_list_it() {
        let docs = include_str!("../../../docs/operations.md");
        let mut seen = std::collections::BTreeSet::new();
        for e in one_of_each() {
            let stage = e.stage();
            assert!(seen.insert(stage), "{stage} labels two variants");
            assert!(
                seen.insert(e.reason()),
                "{} is the reason of two variants",
                e.reason()
            );
            assert!(
                stage.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{stage}"
            );
            assert!(
                docs.contains(&format!("`{stage}`")),
                "docs/operations.md lacks {stage}"
            );
            assert!(e.to_string().len() > 2, "{e:?} says nothing");
        }
    }

    #[test]
    fn kinds_tell_how_an_api_call_failed() {
        let api = |code| ApiError {
            action: "x".into(),
            source: kube::Error::Api(Box::new(
                kube::core::Status::failure("m", "r").with_code(code),
            )),
        };
        assert_eq!(Error::Apply(api(409)).kind(), "conflict");
        assert_eq!(Error::Apply(api(503)).kind(), "server");
        assert_eq!(Error::Apply(api(403)).kind(), "api");
        assert_eq!(Error::NoNamespace("m".into()).kind(), "invalid");
        let transport = ApiError {
            action: "x".into(),
            source: kube::Error::LinesCodecMaxLineLengthExceeded,
        };
        assert_eq!(Error::Federate(transport).kind(), "transport");
    }
}
