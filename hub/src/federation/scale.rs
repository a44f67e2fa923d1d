//! The Admin API's `ScaleBurst`, as a pure decision: which patch sets one burst's size in a
//! MiniCluster's spec, or why the hub refuses it (what reads and patches:
//! [`crate::resize`]). The rules are the controller's own: the
//! changed MiniCluster must pass [`elasticity::effective`](flux_shared::elasticity::effective) and the planner, so a size the
//! reconcile would refuse is refused here, before anything is written.

use flux_shared::api::MiniCluster;
use flux_shared::elasticity;
use kube::ResourceExt;
use serde_json::Value;
use tonic::Code;

/// Why a scale request is refused, with the gRPC code it is answered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleRefusal {
    /// `NotFound`, `InvalidArgument` or `FailedPrecondition`.
    pub code: Code,
    /// What is wrong and what to do, naming the field.
    pub message: String,
}

impl ScaleRefusal {
    fn new(code: Code, message: String) -> ScaleRefusal {
        ScaleRefusal { code, message }
    }
}

/// A scale request the hub accepts.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleChange {
    /// Position of the burst in `spec.flux.bursting.clusters`.
    pub index: usize,
    /// The burst's size before.
    pub previous: i32,
    /// Its size after.
    pub size: i32,
    /// Its `maxSize` (the frozen one once the MiniCluster was reconciled).
    pub max_size: i32,
    /// The spoke that runs it.
    pub spoke: String,
}

impl ScaleChange {
    /// Whether the spec already has this size (nothing to write).
    pub fn is_noop(&self) -> bool {
        self.previous == self.size
    }

    /// The JSON patch that sets the size, guarded by `resource_version`: the API server
    /// answers 409 when the MiniCluster changed since it was read, and the caller reads it
    /// again and decides anew.
    pub fn patch(&self, resource_version: &str) -> json_patch::Patch {
        use json_patch::jsonptr::PointerBuf;
        use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
        let index = self.index.to_string();
        json_patch::Patch(vec![
            PatchOperation::Replace(ReplaceOperation {
                path: PointerBuf::from_tokens(["metadata", "resourceVersion"]),
                value: Value::from(resource_version),
            }),
            PatchOperation::Add(AddOperation {
                path: PointerBuf::from_tokens([
                    "spec",
                    "flux",
                    "bursting",
                    "clusters",
                    index.as_str(),
                    "size",
                ]),
                value: Value::from(self.size),
            }),
        ])
    }
}

/// Whether `size` may be set on burst `burst` of `mc`, and the change if so.
pub fn decide(mc: &MiniCluster, burst: &str, size: i32) -> Result<ScaleChange, ScaleRefusal> {
    let key = format!("{}/{}", mc.namespace().unwrap_or_default(), mc.name_any());
    if size < 0 {
        return Err(ScaleRefusal::new(
            Code::InvalidArgument,
            format!("size: {size} is not a burst size; it must be at least 0"),
        ));
    }
    if mc.metadata.deletion_timestamp.is_some() {
        return Err(ScaleRefusal::new(
            Code::FailedPrecondition,
            format!("MiniCluster {key} is being deleted"),
        ));
    }
    if mc.spec.lead_broker().is_some() || mc.spec.custom_hostlist().is_some() {
        return Err(ScaleRefusal::new(
            Code::FailedPrecondition,
            format!(
                "MiniCluster {key} does not lay out its own bursts (it joins a lead broker or names its hosts in a hostlist); scale it with spec.size"
            ),
        ));
    }
    let bursts = mc.spec.bursts();
    let Some(index) = bursts.iter().position(|b| b.name == burst) else {
        let layout = mc.status.as_ref().map(|s| s.burst_layout.as_slice());
        if layout.is_some_and(|l| l.iter().any(|b| b.name == burst)) {
            return Err(ScaleRefusal::new(
                Code::FailedPrecondition,
                format!(
                    "burst {burst:?} was removed from MiniCluster {key}; add it back to spec.flux.bursting.clusters to run it again"
                ),
            ));
        }
        let names: Vec<&str> = bursts.iter().map(|b| b.name.as_str()).collect();
        let known = if names.is_empty() {
            "it has no bursts".to_string()
        } else {
            format!("its bursts are {}", names.join(", "))
        };
        return Err(ScaleRefusal::new(
            Code::NotFound,
            format!("MiniCluster {key} has no burst {burst:?} ({known})"),
        ));
    };
    let mut changed = mc.clone();
    if let Some(cluster) = changed
        .spec
        .flux
        .as_mut()
        .and_then(|f| f.bursting.as_mut())
        .and_then(|b| b.clusters.get_mut(index))
    {
        cluster.size = Some(size);
    }
    let effective = elasticity::effective(&changed).map_err(|refusal| {
        ScaleRefusal::new(
            Code::FailedPrecondition,
            format!("{}: {}", refusal.reason, refusal.message),
        )
    })?;
    let plan = effective.plan().map_err(|errors| {
        ScaleRefusal::new(
            Code::FailedPrecondition,
            format!("the MiniCluster's spec would not be valid: {errors}"),
        )
    })?;
    let Some(resolved) = plan.bursts.iter().find(|b| b.name == burst) else {
        return Err(ScaleRefusal::new(
            Code::Internal,
            format!("burst {burst:?} is missing from the plan of MiniCluster {key}"),
        ));
    };
    Ok(ScaleChange {
        index,
        previous: bursts[index].size,
        size,
        max_size: resolved.max_size,
        // A burst that names candidates runs where the hub placed it (none yet: empty).
        spoke: if resolved.candidates.is_empty() {
            resolved.cluster.clone()
        } else {
            mc.status
                .iter()
                .flat_map(|s| &s.bursts)
                .find(|b| b.name == burst)
                .map(|b| b.cluster.clone())
                .unwrap_or_default()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flux_shared::api::{BurstLayout, MiniClusterStatus};

    /// `hpc/bursty` with bursts `a` (size 1, maxSize 4) and `b` (no name: `burst-1`, size
    /// 2), reconciled once (the layout frozen).
    fn mc() -> MiniCluster {
        let mut mc: MiniCluster = serde_yaml_ng::from_str(
            "metadata: {name: bursty, namespace: hpc}
spec:
  size: 2
  containers: [{image: a}]
  flux:
    bursting:
      clusters: [{name: a, size: 1, maxSize: 4, cluster: gke}, {size: 2}]",
        )
        .expect("yaml");
        mc.status = Some(MiniClusterStatus {
            maximum_size: 2,
            burst_layout: vec![
                BurstLayout {
                    name: "a".into(),
                    max_size: 4,
                },
                BurstLayout {
                    name: "burst-1".into(),
                    max_size: 2,
                },
            ],
            ..Default::default()
        });
        mc
    }

    #[test]
    fn a_size_within_max_size_is_one_guarded_patch() {
        let change = decide(&mc(), "a", 4).expect("within maxSize");
        assert_eq!(
            change,
            ScaleChange {
                index: 0,
                previous: 1,
                size: 4,
                max_size: 4,
                spoke: "gke".into(),
            }
        );
        assert_eq!(
            serde_json::to_value(change.patch("17")).expect("serialises"),
            serde_json::json!([
                {"op": "replace", "path": "/metadata/resourceVersion", "value": "17"},
                {"op": "add", "path": "/spec/flux/bursting/clusters/0/size", "value": 4},
            ])
        );
        let zero = decide(&mc(), "burst-1", 0).expect("a default-named burst, to zero");
        assert_eq!((zero.index, zero.previous, zero.max_size), (1, 2, 2));
        assert_eq!(zero.spoke, "burst-1");
        assert!(decide(&mc(), "a", 1).expect("same").is_noop());
    }

    #[test]
    fn a_burst_that_names_candidates_runs_where_its_status_placed_it() {
        let mut placed = mc();
        if let Some(c) = placed
            .spec
            .flux
            .as_mut()
            .and_then(|f| f.bursting.as_mut())
            .and_then(|b| b.clusters.get_mut(1))
        {
            c.candidates = vec![flux_shared::api::BurstCandidate {
                cluster: Some("kind".into()),
                match_labels: None,
            }];
        }
        assert_eq!(
            decide(&placed, "burst-1", 1).expect("ok").spoke,
            "",
            "not placed yet"
        );
        if let Some(s) = placed.status.as_mut() {
            s.bursts = vec![flux_shared::api::BurstStatus {
                name: "burst-1".into(),
                cluster: "kind".into(),
                ..Default::default()
            }];
        }
        assert_eq!(decide(&placed, "burst-1", 1).expect("ok").spoke, "kind");
    }

    #[test]
    fn the_frozen_max_size_bounds_a_burst_without_one_in_its_spec() {
        // burst-1 has no maxSize: its spec alone would allow any size, the frozen layout 2.
        let r = decide(&mc(), "burst-1", 3).expect_err("above the frozen hosts");
        assert_eq!(r.code, Code::FailedPrecondition);
        assert!(
            r.message.starts_with(
                "SizeAboveMaximum: spec.flux.bursting.clusters[1].size: 3 is above the maximum size 2"
            ),
            "{}",
            r.message
        );
        let r = decide(&mc(), "a", 5).expect_err("above maxSize");
        assert_eq!(r.code, Code::FailedPrecondition);
    }

    #[test]
    fn refusals_say_what_is_wrong() {
        let cases: Vec<(MiniCluster, &str, i32, Code, &str)> = vec![
            (
                mc(),
                "a",
                -1,
                Code::InvalidArgument,
                "size: -1 is not a burst size",
            ),
            (
                mc(),
                "c",
                1,
                Code::NotFound,
                "MiniCluster hpc/bursty has no burst \"c\" (its bursts are a, burst-1)",
            ),
            (
                {
                    let mut m = mc();
                    if let Some(b) = m.spec.flux.as_mut().and_then(|f| f.bursting.as_mut()) {
                        b.clusters.truncate(1);
                    }
                    m
                },
                "burst-1",
                1,
                Code::FailedPrecondition,
                "burst \"burst-1\" was removed from MiniCluster hpc/bursty",
            ),
            (
                {
                    let mut m = mc();
                    m.metadata.deletion_timestamp =
                        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                        ));
                    m
                },
                "a",
                2,
                Code::FailedPrecondition,
                "MiniCluster hpc/bursty is being deleted",
            ),
            (
                {
                    // A change the controller refuses is pending: scaling cannot apply either.
                    let mut m = mc();
                    m.spec.size = 3;
                    m
                },
                "a",
                2,
                Code::FailedPrecondition,
                "SizeAboveMaximum: spec.size: 3 is above the maximum size 2",
            ),
        ];
        for (m, burst, size, code, start) in cases {
            let r = decide(&m, burst, size).expect_err(start);
            assert_eq!(r.code, code, "{start}");
            assert!(r.message.starts_with(start), "{}", r.message);
        }
    }
}
