//! Which watch events start a reconcile. Each reconcile renders the MiniCluster's objects
//! and compares them with the caches; the events that change nothing a reconcile reads
//! (the echo of the hub's own status write, a broker pod's status, the echo of the hub's
//! `job-index` label) are dropped here, before they queue one.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flux_shared::api::MiniCluster;
use flux_shared::render::labels;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::pod_labels::JOB_INDEX;

/// What a reconcile reads of a MiniCluster, besides the status it writes itself: a
/// change of the spec (the generation), deletion, finalizers, labels or annotations
/// (`kubectl annotate` is how people ask for a reconcile).
pub fn minicluster(mc: &MiniCluster) -> Option<u64> {
    let meta = &mc.metadata;
    let mut h = DefaultHasher::new();
    meta.generation.hash(&mut h);
    meta.deletion_timestamp.is_some().hash(&mut h);
    meta.finalizers.hash(&mut h);
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    Some(h.finish())
}

/// The MiniCluster a pod's events concern: the lead broker's (its node is the burst
/// endpoint), the services pod's (the hub's own object) and any broker pod still without
/// its `job-index` label (the reconcile adds it). Other pods change nothing the
/// controller decides.
pub fn pod_owner(pod: &Pod) -> Option<ObjectRef<MiniCluster>> {
    let pod_labels = pod.labels();
    let minicluster = pod_labels.get(labels::MINICLUSTER)?;
    let index = pod_labels.get(labels::COMPLETION_INDEX).map(String::as_str);
    let wanted = matches!(index, None | Some("0")) || !pod_labels.contains_key(JOB_INDEX);
    let namespace = pod.namespace()?;
    wanted.then(|| ObjectRef::new(minicluster).within(&namespace))
}

/// What a reconcile reads of a pod: for broker pods, where it runs and whether it is going;
/// the services pod is compared whole (any change). The `job-index` label is left out, so
/// the echo of the hub's own label patch starts nothing, and so is the status (the Job's
/// status has the counts).
fn pod(pod: &Pod) -> u64 {
    let mut h = DefaultHasher::new();
    let broker = pod.labels().contains_key(labels::COMPLETION_INDEX);
    if broker {
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .hash(&mut h);
        pod.metadata.deletion_timestamp.is_some().hash(&mut h);
    } else {
        pod.metadata.resource_version.hash(&mut h);
    }
    h.finish()
}

/// Drops pod events that repeat what a reconcile already saw of that pod (see [`pod`]).
/// Remembers each pod by UID for [`PodFilter::MEMORY`] after its last event, so
/// deleted pods are forgotten.
#[derive(Debug)]
pub struct PodFilter {
    seen: HashMap<String, (u64, Instant)>,
    pruned: Instant,
}

impl Default for PodFilter {
    fn default() -> Self {
        PodFilter {
            seen: HashMap::new(),
            pruned: Instant::now(),
        }
    }
}

impl PodFilter {
    /// How long a pod is remembered after its last event. A pod quiet for longer passes
    /// once more, which costs one reconcile that finds nothing to do.
    pub const MEMORY: Duration = Duration::from_secs(3600);

    /// Whether `pod`'s event should reach the MiniCluster it concerns.
    pub fn pass(&mut self, pod: &Arc<Pod>) -> bool {
        self.pass_at(pod, Instant::now())
    }

    fn pass_at(&mut self, pod: &Pod, now: Instant) -> bool {
        if now.duration_since(self.pruned) >= Self::MEMORY {
            self.seen
                .retain(|_, (_, last)| now.duration_since(*last) < Self::MEMORY);
            self.pruned = now;
        }
        let Some(uid) = pod.uid() else {
            return true;
        };
        let hash = self::pod(pod);
        match self.seen.insert(uid, (hash, now)) {
            Some((before, last)) => before != hash || now.duration_since(last) >= Self::MEMORY,
            None => true,
        }
    }

    /// How many pods are remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether no pod is remembered.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn pod(labels: &[(&str, &str)]) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some("hpc".into());
        pod.metadata.uid = Some("u-1".into());
        pod.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        pod
    }

    fn mc() -> MiniCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "flux-framework.org/v1alpha2", "kind": "MiniCluster",
            "metadata": {"name": "m", "namespace": "hpc", "generation": 1},
            "spec": {"size": 2, "containers": [{"image": "x"}]},
        }))
        .expect("a MiniCluster")
    }

    #[test]
    fn a_status_write_is_no_trigger_but_spec_deletion_and_annotations_are() {
        let before = mc();
        let mut status_only = before.clone();
        status_only.status = Some(Default::default());
        status_only.metadata.resource_version = Some("9".into());
        assert_eq!(minicluster(&before), minicluster(&status_only));

        let mut resized = before.clone();
        resized.metadata.generation = Some(2);
        let mut deleted = before.clone();
        deleted.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        let mut annotated = before.clone();
        annotated
            .annotations_mut()
            .insert("touch".into(), "1".into());
        let mut released = before.clone();
        released.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
        for changed in [resized, deleted, annotated, released] {
            assert_ne!(minicluster(&before), minicluster(&changed));
        }
    }

    #[test]
    fn lead_services_and_unlabelled_pods_concern_their_minicluster() {
        let owner = Some(ObjectRef::new("m").within("hpc"));
        let lead = pod(&[(labels::MINICLUSTER, "m"), (labels::COMPLETION_INDEX, "0")]);
        assert_eq!(pod_owner(&lead), owner);
        let services = pod(&[(labels::MINICLUSTER, "m")]);
        assert_eq!(pod_owner(&services), owner);
        let new_worker = pod(&[(labels::MINICLUSTER, "m"), (labels::COMPLETION_INDEX, "3")]);
        assert_eq!(
            pod_owner(&new_worker),
            owner,
            "it needs its job-index label"
        );
        let labelled_worker = pod(&[
            (labels::MINICLUSTER, "m"),
            (labels::COMPLETION_INDEX, "3"),
            (JOB_INDEX, "3"),
        ]);
        assert_eq!(pod_owner(&labelled_worker), None);
        assert_eq!(pod_owner(&pod(&[])), None);
    }

    #[test]
    fn pod_events_pass_once_per_change_of_node_or_deletion() {
        let mut filter = PodFilter::default();
        let t0 = Instant::now();
        let mut lead = pod(&[(labels::MINICLUSTER, "m"), (labels::COMPLETION_INDEX, "0")]);
        assert!(filter.pass_at(&lead, t0), "a new pod passes");
        assert!(!filter.pass_at(&lead, t0), "the same pod again does not");

        lead.labels_mut().insert(JOB_INDEX.into(), "0".into());
        lead.status = Some(Default::default());
        assert!(
            !filter.pass_at(&lead, t0),
            "the job-index label's echo and status changes do not"
        );

        lead.spec = Some(PodSpec {
            node_name: Some("node-1".into()),
            ..PodSpec::default()
        });
        assert!(filter.pass_at(&lead, t0), "scheduled to a node passes");
        lead.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert!(filter.pass_at(&lead, t0), "deletion passes");

        let later = t0 + PodFilter::MEMORY;
        assert!(filter.pass_at(&lead, later), "forgotten after MEMORY");
        assert_eq!(filter.len(), 1);

        let mut other = pod(&[(labels::MINICLUSTER, "m"), (labels::COMPLETION_INDEX, "1")]);
        other.metadata.uid = Some("u-2".into());
        assert!(filter.pass_at(&other, later + PodFilter::MEMORY));
        assert_eq!(filter.len(), 1, "the quiet pod was pruned");
    }

    #[test]
    fn the_services_pod_passes_on_every_change() {
        let mut filter = PodFilter::default();
        let t0 = Instant::now();
        let mut services = pod(&[(labels::MINICLUSTER, "m")]);
        services.metadata.resource_version = Some("1".into());
        assert!(filter.pass_at(&services, t0));
        assert!(!filter.pass_at(&services, t0));
        services.metadata.resource_version = Some("2".into());
        assert!(filter.pass_at(&services, t0));
    }
}
