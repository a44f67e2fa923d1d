//! What the watch caches keep of each object: only what a reconcile reads. In
//! k8s-openapi types a pod spec is large (every optional field of every container and
//! volume), so with 1,000 MiniClusters the Jobs' pod templates and the broker pods would
//! dominate the hub's memory. Both are dropped from the cache:
//!
//! * A Job's pod template is immutable once the Job exists. The hub stamps every Job it
//!   applies with [`TEMPLATE_HASH`], a digest of the template it rendered, so "is the
//!   live Job what we want" compares the annotation instead of the template.
//! * A broker pod (owned by a Job) is read for its labels, annotations and node only;
//!   of its metadata, the Job controller's owner reference, finalizer and identity
//!   labels (a Job's UID and name, twice each) are never read and are dropped too.
//! * A ConfigMap is only compared with the one the hub renders: each long value (the
//!   Flux configuration, scripts) is kept as its digest, and [`Compact::comparable`]
//!   digests the rendered values alike, so equal values still compare equal.
//!
//! `managedFields` are dropped everywhere: never read, and most of a small object's size.

use flux_shared::api::MiniCluster;
use k8s_openapi::api::batch::v1::{Job, JobStatus};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodSpec, PodTemplateSpec, Secret, Service};
use kube::ResourceExt;
use serde_json::Value;

use crate::controller::watch::partial_decode::{Fields, Selection};

/// Annotation on every Job the hub applies: SHA-256 (hex, first 128 bits) of the pod
/// template's JSON as rendered.
pub const TEMPLATE_HASH: &str = "flux-framework.org/pod-template-hash";

/// Label the Job controller puts on every pod of a Job (Kubernetes 1.27 and later): the
/// hub tells broker pods from its own services pods by it.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

/// Labels the Job controller puts on every pod of a Job, which no reconcile reads.
pub const UNREAD_JOB_POD_LABELS: [&str; 4] = [
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
];

/// Reduces a watched object to what the controller reads, before it enters the cache.
pub trait Compact {
    /// Drop what no reconcile reads.
    fn compact(&mut self);

    /// Drop from a desired object, as JSON, the fields its cached form does not keep, so
    /// that it can be compared with the cache.
    fn comparable(_desired: &mut Value) {}
}

/// What the watches decode of each kind: what [`Compact::compact`] would keep, give or
/// take what it needs to decide (a pod's owner references), so that the rest is never
/// built at all.
macro_rules! all_but_managed_fields {
    ($($kind:ty),*) => {$(
        impl Selection for $kind {
            const FIELDS: Fields = Fields::BUT_MANAGED_FIELDS;
        }
    )*};
}

all_but_managed_fields!(MiniCluster, Secret, Service, ConfigMap, Pod);

impl Selection for Job {
    const FIELDS: Fields = Fields::Except(&[
        (
            "metadata",
            Fields::Except(&[("managedFields", Fields::Skip)]),
        ),
        ("spec", Fields::Except(&[("template", Fields::Skip)])),
        (
            "status",
            Fields::Only(&[
                ("ready", Fields::All),
                ("terminating", Fields::All),
                ("conditions", Fields::All),
                ("completedIndexes", Fields::All),
                ("failed", Fields::All),
            ]),
        ),
    ]);
}

/// The selection of broker pods (those of a Job): their metadata and node.
#[derive(Debug)]
pub struct BrokerPod;

impl Selection for BrokerPod {
    const FIELDS: Fields = Fields::Only(&[
        ("apiVersion", Fields::All),
        ("kind", Fields::All),
        (
            "metadata",
            Fields::Except(&[
                ("managedFields", Fields::Skip),
                ("finalizers", Fields::Skip),
                ("generateName", Fields::Skip),
            ]),
        ),
        ("spec", Fields::Only(&[("nodeName", Fields::All)])),
        // The lead's address: the hub reads its reporter there (no cluster DNS needed).
        ("status", Fields::Only(&[("podIP", Fields::All)])),
    ]);
}

/// Kinds cached whole but for `managedFields`: the hub compares them whole.
macro_rules! compact_managed_fields_only {
    ($($kind:ty),*) => {$(
        impl Compact for $kind {
            fn compact(&mut self) {
                self.managed_fields_mut().clear();
            }
        }
    )*};
}

compact_managed_fields_only!(Secret, Service);

/// ConfigMap values longer than this are cached as their [`value_digest`].
pub const DIGEST_ABOVE: usize = 64;

/// What the cache keeps of a ConfigMap value: the value itself when short, else
/// `sha256:` and the first 128 bits of its SHA-256 in hex.
pub fn value_digest(value: &str) -> Option<String> {
    (value.len() > DIGEST_ABOVE).then(|| {
        let digest = ring::digest::digest(&ring::digest::SHA256, value.as_bytes());
        let hex: String = digest.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("sha256:{hex}")
    })
}

impl Compact for ConfigMap {
    fn compact(&mut self) {
        self.managed_fields_mut().clear();
        for value in self.data.iter_mut().flat_map(|data| data.values_mut()) {
            if let Some(digest) = value_digest(value) {
                *value = digest;
            }
        }
    }

    fn comparable(desired: &mut Value) {
        let values = desired
            .get_mut("data")
            .and_then(Value::as_object_mut)
            .into_iter()
            .flat_map(|data| data.values_mut());
        for value in values {
            if let Some(digest) = value.as_str().and_then(value_digest) {
                *value = Value::String(digest);
            }
        }
    }
}

impl Compact for Job {
    fn compact(&mut self) {
        self.managed_fields_mut().clear();
        if let Some(spec) = self.spec.as_mut() {
            spec.template = PodTemplateSpec::default();
        }
        // Of the status, the counts of ready and terminating pods, the conditions, and the
        // completed indexes and failed pods (an instance that ended under its workers) are
        // read; zero is kept as absent, so the Job controller's first status write (start
        // time, `active`, zero counts) leaves the cached Job as it was and wakes nothing.
        if let Some(status) = self.status.take() {
            let kept = JobStatus {
                ready: status.ready.filter(|n| *n != 0),
                terminating: status.terminating.filter(|n| *n != 0),
                conditions: status.conditions.filter(|c| !c.is_empty()),
                completed_indexes: status.completed_indexes.filter(|s| !s.is_empty()),
                failed: status.failed.filter(|n| *n != 0),
                ..JobStatus::default()
            };
            self.status = (kept != JobStatus::default()).then_some(kept);
        }
    }

    fn comparable(desired: &mut Value) {
        if let Some(spec) = desired.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("template");
        }
    }
}

impl Compact for Pod {
    fn compact(&mut self) {
        self.managed_fields_mut().clear();
        let broker = self
            .owner_references()
            .iter()
            .any(|o| o.kind == "Job" && o.api_version == "batch/v1");
        // The services pod is the hub's own object and is compared whole; broker pods
        // belong to their Job and only their labels, annotations, node and address are
        // read (the address: where the lead's reporter is read).
        if broker {
            let node_name = self.spec.as_ref().and_then(|s| s.node_name.clone());
            self.spec = Some(PodSpec {
                node_name,
                ..PodSpec::default()
            });
            let pod_ip = self.status.take().and_then(|s| s.pod_ip);
            self.status = pod_ip.map(|ip| k8s_openapi::api::core::v1::PodStatus {
                pod_ip: Some(ip),
                ..Default::default()
            });
            let meta = &mut self.metadata;
            meta.owner_references = None;
            meta.finalizers = None;
            meta.generate_name = None;
            if let Some(labels) = meta.labels.as_mut() {
                labels.retain(|key, _| !UNREAD_JOB_POD_LABELS.contains(&key.as_str()));
            }
        }
    }
}

/// `job` with [`TEMPLATE_HASH`] set to the digest of its pod template.
pub fn stamp(job: &Job) -> Job {
    let mut stamped = job.clone();
    let hash = job
        .spec
        .as_ref()
        .map(|s| template_hash(&s.template))
        .unwrap_or_default();
    stamped
        .annotations_mut()
        .insert(TEMPLATE_HASH.to_string(), hash);
    stamped
}

/// SHA-256 of the template's JSON (k8s-openapi serializes fields in a fixed order and
/// maps sorted, so equal templates give equal bytes), first 128 bits in hex.
pub fn template_hash(template: &PodTemplateSpec) -> String {
    let json = serde_json::to_vec(template).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &json);
    digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, OwnerReference};
    use serde_json::json;

    fn job(image: &str) -> Job {
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "mc", "namespace": "ns"},
            "spec": {"parallelism": 4, "completions": 4, "completionMode": "Indexed",
                     "template": {"spec": {"containers": [{"name": "c", "image": image}]}}},
            "status": {"ready": 4}
        }))
        .expect("job")
    }

    fn config_map(data: &[(&str, &str)]) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("mc-flux-config".into());
        cm.metadata.namespace = Some("ns".into());
        cm.data = Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        cm
    }

    /// Whether the rendered ConfigMap `desired` matches the cached form of `live`.
    fn matches(desired: &ConfigMap, live: &ConfigMap) -> bool {
        let mut cached = live.clone();
        cached.compact();
        let mut want = serde_json::to_value(desired).expect("json");
        ConfigMap::comparable(&mut want);
        let have = serde_json::to_value(&cached).expect("json");
        crate::controller::apply::diff::is_subset(&want, &have)
    }

    #[test]
    fn a_cached_config_map_keeps_digests_of_long_values_and_still_compares() {
        let config = "[bootstrap]\ncurve_cert = \"/mnt/curve/curve.cert\"\n".repeat(40);
        let other = config.replace("curve.cert", "other.cert");
        let want = config_map(&[("broker.toml", &config), ("size", "4")]);

        let mut cached = want.clone();
        cached.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        cached.compact();
        assert!(cached.managed_fields().is_empty());
        let data = cached.data.as_ref().expect("data");
        assert!(data["broker.toml"].starts_with("sha256:"));
        assert_eq!(data["broker.toml"].len(), "sha256:".len() + 32);
        assert_eq!(data["size"], "4", "short values are kept as they are");

        assert!(matches(&want, &want), "unchanged");
        let mut extra = want.clone();
        extra
            .data
            .as_mut()
            .expect("data")
            .insert("theirs".into(), other.clone());
        assert!(
            matches(&want, &extra),
            "keys of other managers are tolerated"
        );
        assert!(!matches(
            &want,
            &config_map(&[("broker.toml", &other), ("size", "4")])
        ));
        assert!(!matches(
            &want,
            &config_map(&[("broker.toml", &config), ("size", "5")])
        ));
        assert!(
            !matches(&want, &config_map(&[("size", "4")])),
            "a missing key"
        );
        assert!(
            !matches(
                &want,
                &config_map(&[("broker.toml", "short"), ("size", "4")])
            ),
            "a short live value never equals a long desired one"
        );
    }

    #[test]
    fn the_template_hash_follows_the_template_only() {
        let a = stamp(&job("a:1"));
        let again = stamp(&job("a:1"));
        let b = stamp(&job("b:1"));
        let hash = |j: &Job| j.annotations()[TEMPLATE_HASH].clone();
        assert_eq!(hash(&a), hash(&again), "deterministic");
        assert_ne!(hash(&a), hash(&b), "a changed template changes the hash");
        assert_eq!(hash(&a).len(), 32);
        let mut scaled = job("a:1");
        scaled.spec.as_mut().expect("spec").parallelism = Some(8);
        assert_eq!(
            hash(&stamp(&scaled)),
            hash(&a),
            "scaling is not a template change"
        );
    }

    #[test]
    fn a_cached_job_keeps_spec_status_and_the_hash_but_not_the_template() {
        let mut cached = stamp(&job("a:1"));
        cached.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        cached.compact();
        assert!(cached.managed_fields().is_empty());
        let spec = cached.spec.as_ref().expect("spec");
        assert_eq!(spec.parallelism, Some(4));
        assert_eq!(spec.template, PodTemplateSpec::default());
        assert_eq!(cached.status.as_ref().and_then(|s| s.ready), Some(4));
        assert!(cached.annotations().contains_key(TEMPLATE_HASH));

        let mut want = serde_json::to_value(stamp(&job("a:1"))).expect("json");
        Job::comparable(&mut want);
        let have = serde_json::to_value(&cached).expect("json");
        assert!(crate::controller::apply::diff::is_subset(&want, &have));
        let mut changed = serde_json::to_value(stamp(&job("b:1"))).expect("json");
        Job::comparable(&mut changed);
        assert!(
            !crate::controller::apply::diff::is_subset(&changed, &have),
            "a template change still shows, through the hash"
        );
    }

    #[test]
    fn a_cached_job_status_keeps_what_the_status_reads_only() {
        let status = |json: Value| -> Option<JobStatus> {
            let mut j = job("a:1");
            j.status = serde_json::from_value(json).expect("status");
            j.compact();
            j.status
        };
        let first = status(
            json!({"startTime": "2026-11-24T12:00:00Z", "active": 2, "ready": 0,
                                  "terminating": 0, "uncountedTerminatedPods": {}}),
        );
        assert_eq!(
            first, None,
            "the Job controller's first write changes nothing read"
        );
        let running = status(
            json!({"startTime": "2026-11-24T12:00:00Z", "active": 2, "ready": 2,
                                    "terminating": 1, "conditions": [{"type": "Complete", "status": "True"}],
                                    "completedIndexes": "1", "succeeded": 1, "failed": 1}),
        );
        let running = running.expect("kept");
        assert_eq!((running.ready, running.terminating), (Some(2), Some(1)));
        assert_eq!(running.completed_indexes.as_deref(), Some("1"));
        assert_eq!(running.failed, Some(1));
        assert_eq!(running.succeeded, None);
        assert_eq!(running.conditions.map(|c| c.len()), Some(1));
        assert_eq!((running.active, running.start_time), (None, None));
    }

    #[test]
    fn broker_pods_keep_labels_annotations_node_and_address_only() {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "mc-0-x", "namespace": "ns", "generateName": "mc-0-",
                         "finalizers": ["batch.kubernetes.io/job-tracking"],
                         "labels": {"flux-framework.org/job": "mc", "job-name": "mc",
                                    "batch.kubernetes.io/job-completion-index": "0",
                                    "controller-uid": "u"},
                         "annotations": {"batch.kubernetes.io/job-completion-index": "0"}},
            "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "a:1"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.7", "hostIP": "192.0.2.1"}
        }))
        .expect("pod");
        pod.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        let mut services = pod.clone();
        pod.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: "mc".into(),
            uid: "u".into(),
            ..OwnerReference::default()
        }]);
        pod.compact();
        assert_eq!(
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("node-a")
        );
        assert!(pod.spec.as_ref().expect("spec").containers.is_empty());
        assert_eq!(
            pod.status,
            Some(k8s_openapi::api::core::v1::PodStatus {
                pod_ip: Some("10.0.0.7".into()),
                ..Default::default()
            }),
            "of the status, the address only"
        );
        assert_eq!(pod.labels()["flux-framework.org/job"], "mc");
        assert_eq!(
            pod.labels()["batch.kubernetes.io/job-completion-index"],
            "0"
        );
        assert!(!pod.labels().contains_key("job-name"));
        assert!(!pod.labels().contains_key("controller-uid"));
        assert!(pod.owner_references().is_empty());
        assert!(pod.finalizers().is_empty());
        assert!(pod.metadata.generate_name.is_none());
        assert_eq!(pod.name_any(), "mc-0-x");
        assert_eq!(
            pod.annotations()["batch.kubernetes.io/job-completion-index"],
            "0"
        );
        assert!(pod.managed_fields().is_empty());

        // Not owned by a Job (the services pod): compared whole, so kept whole.
        services.compact();
        assert_eq!(services.spec.as_ref().expect("spec").containers.len(), 1);
        assert_eq!(services.labels().len(), 4);
        assert_eq!(services.finalizers().len(), 1);
        assert!(services.status.is_some());
        assert!(services.managed_fields().is_empty());
    }
}
