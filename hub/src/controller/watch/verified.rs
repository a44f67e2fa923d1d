//! What the last pass of a MiniCluster left as rendered, so that the next pass with the
//! same plan and certificate, finding every object as it was left, skips rendering and
//! comparing them: most passes are woken by a Job's status (ready brokers) or a new broker
//! pod, and rendering the scripts and digesting them again cost most of such a pass.
//!
//! An object is "as it was left" when its version is unchanged: for a Job its UID,
//! generation (bumped by every spec change), labels, annotations (the pod template's
//! digest) and owner references, since its status changes often and is not rendered; for
//! the other kinds its UID and resourceVersion.

use std::fmt::Write as _;
use std::hash::{DefaultHasher, Hash, Hasher};

use flux_shared::plan::Plan;
use kube::Resource;

use crate::controller::watch::stores::{Stores, get};

/// The kinds of rendered objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::controller) enum Kind {
    ConfigMap,
    Secret,
    Service,
    Pod,
    Job,
}

/// One object as a pass left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::controller) struct Version {
    kind: Kind,
    name: String,
    version: u64,
}

/// Every rendered object as a pass left it, and what it was rendered from.
#[derive(Clone, Debug)]
pub(in crate::controller) struct Verified {
    inputs: u64,
    objects: Vec<Version>,
}

impl Verified {
    /// `objects` rendered from `inputs` (see [`inputs`]).
    pub fn new(inputs: u64, objects: Vec<Version>) -> Self {
        Verified { inputs, objects }
    }

    /// Whether a pass with `inputs` would render the same objects and finds each of them
    /// in `stores` as this pass left it.
    pub fn still_holds(&self, inputs: u64, stores: &Stores, ns: &str) -> bool {
        self.inputs == inputs
            && self
                .objects
                .iter()
                .all(|o| live(stores, ns, o.kind, &o.name) == Some(o.version))
    }
}

/// A digest of what the root objects are rendered from: the plan (every field) and the
/// CURVE certificate. Equal digests mean equal renders; a digest that differs for an equal
/// plan (a map printed in another order) only costs a render.
pub(in crate::controller) fn inputs(plan: &Plan, cert: &str) -> u64 {
    struct Hashing(DefaultHasher);
    impl std::fmt::Write for Hashing {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.write(s.as_bytes());
            Ok(())
        }
    }
    let mut h = Hashing(DefaultHasher::new());
    // Writing into a hasher cannot fail.
    let _ = write!(h, "{plan:?}");
    cert.hash(&mut h.0);
    h.0.finish()
}

/// The version of `obj`, a `kind` object.
pub(in crate::controller) fn of<K: Resource>(kind: Kind, obj: &K) -> Version {
    Version {
        kind,
        name: obj.meta().name.clone().unwrap_or_default(),
        version: version(kind, obj),
    }
}

fn version<K: Resource>(kind: Kind, obj: &K) -> u64 {
    let meta = obj.meta();
    let mut h = DefaultHasher::new();
    meta.uid.hash(&mut h);
    if kind == Kind::Job {
        meta.generation.hash(&mut h);
        meta.labels.hash(&mut h);
        meta.annotations.hash(&mut h);
        for o in meta.owner_references.iter().flatten() {
            (&o.api_version, &o.kind, &o.name, &o.uid, o.controller).hash(&mut h);
        }
    } else {
        meta.resource_version.hash(&mut h);
    }
    h.finish()
}

/// The version of the cached `kind` object `ns`/`name`, if it is cached.
fn live(stores: &Stores, ns: &str, kind: Kind, name: &str) -> Option<u64> {
    Some(match kind {
        Kind::ConfigMap => version(kind, &*get(&stores.config_maps, ns, name)?),
        Kind::Secret => version(kind, &*get(&stores.secrets, ns, name)?),
        Kind::Service => version(kind, &*get(&stores.services, ns, name)?),
        Kind::Pod => version(kind, &*get(&stores.pods, ns, name)?),
        Kind::Job => version(kind, &*get(&stores.jobs, ns, name)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{Job, JobStatus};
    use k8s_openapi::api::core::v1::ConfigMap;

    fn job() -> Job {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "mc", "namespace": "hpc", "uid": "u1", "generation": 1,
                         "resourceVersion": "10", "annotations": {"t": "a"}},
        }))
        .expect("a Job")
    }

    #[test]
    fn a_job_keeps_its_version_through_status_changes_but_not_spec_or_metadata_changes() {
        let before = of(Kind::Job, &job());
        let mut status = job();
        status.metadata.resource_version = Some("11".into());
        status.status = Some(JobStatus {
            ready: Some(2),
            ..JobStatus::default()
        });
        assert_eq!(of(Kind::Job, &status), before);
        let mut resized = job();
        resized.metadata.generation = Some(2);
        let mut retemplated = job();
        retemplated
            .metadata
            .annotations
            .as_mut()
            .expect("annotations")
            .insert("t".into(), "b".into());
        let mut recreated = job();
        recreated.metadata.uid = Some("u2".into());
        for changed in [resized, retemplated, recreated] {
            assert_ne!(of(Kind::Job, &changed), before);
        }
    }

    #[test]
    fn other_kinds_change_version_with_every_write() {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("c".into());
        cm.metadata.resource_version = Some("1".into());
        let before = of(Kind::ConfigMap, &cm);
        cm.metadata.resource_version = Some("2".into());
        assert_ne!(of(Kind::ConfigMap, &cm), before);
    }

    #[test]
    fn inputs_follow_the_plan_and_the_certificate() {
        let mc: flux_shared::api::MiniCluster = serde_yaml_ng::from_str(
            "apiVersion: flux-framework.org/v1alpha2\nkind: MiniCluster\nmetadata: {name: m, namespace: hpc}\nspec: {size: 2, containers: [{image: x}]}\n",
        )
        .expect("a MiniCluster");
        let plan = Plan::new(&mc).expect("a plan");
        let again = Plan::new(&mc).expect("a plan");
        assert_eq!(inputs(&plan, "c"), inputs(&again, "c"));
        assert_ne!(inputs(&plan, "c"), inputs(&plan, "d"));
        let mut bigger = mc.clone();
        bigger.spec.size = 3;
        let bigger = Plan::new(&bigger).expect("a plan");
        assert_ne!(inputs(&plan, "c"), inputs(&bigger, "c"));
    }
}
