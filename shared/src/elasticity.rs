//! Elasticity rules: the hosts a MiniCluster declares are fixed when it is first
//! reconciled (`status.maximumSize`, and `status.burstLayout` for its bursts), because
//! running brokers cannot learn new hosts. Scaling moves `spec.size`, and each burst's
//! `size`, within those ceilings; anything else is refused.

use crate::api::{BurstCluster, BurstLayout, Bursting, MiniCluster, MiniClusterSpec};
use crate::plan::Plan;
use crate::validate::ValidationErrors;

/// Why a change cannot be applied to a running MiniCluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeRefusal {
    /// Condition reason.
    pub reason: &'static str,
    /// What is wrong and what to do.
    pub message: String,
}

/// The MiniCluster to plan once its hosts are frozen, and the bursts it keeps only for
/// their ranks.
#[derive(Clone, Debug, PartialEq)]
pub struct Effective {
    /// The MiniCluster with its frozen maximums pinned, and every burst of the frozen
    /// layout in its place (a removed one at size 0).
    pub mc: MiniCluster,
    /// Bursts of the frozen layout that the spec no longer lists.
    pub retired: Vec<String>,
}

impl Effective {
    /// The plan: removed bursts keep their hosts' ranks but run nowhere.
    pub fn plan(&self) -> Result<Plan, ValidationErrors> {
        Plan::new(&self.mc).map(|p| p.retire(&self.retired))
    }
}

/// The MiniCluster to plan: its spec, with `maxSize` pinned to the declared maximum once
/// one is recorded in the status, and its bursts pinned to the frozen layout. `Err` when
/// the spec asks for what the running brokers cannot do.
pub fn effective(mc: &MiniCluster) -> Result<Effective, SizeRefusal> {
    let frozen = mc.status.as_ref().map_or(0, |s| s.maximum_size);
    if frozen <= 0 {
        return Ok(Effective {
            mc: mc.clone(),
            retired: Vec::new(),
        });
    }
    let spec = &mc.spec;
    if let Some(max) = spec.max_size.filter(|m| *m != frozen) {
        return Err(SizeRefusal {
            reason: "MaxSizeImmutable",
            message: format!(
                "spec.maxSize: cannot change from {frozen} to {max} on an existing MiniCluster: its brokers were configured with {frozen} hosts; delete and re-create it to change the maximum"
            ),
        });
    }
    if spec.size > frozen {
        return Err(SizeRefusal {
            reason: "SizeAboveMaximum",
            message: format!(
                "spec.size: {} is above the maximum size {frozen} this MiniCluster was created with (its brokers only know {frozen} hosts); scale within 1..{frozen} or re-create it with a larger maxSize",
                spec.size
            ),
        });
    }
    let mut pinned = mc.clone();
    pinned.spec.max_size = Some(frozen);
    let retired = pin_bursts(&mut pinned.spec, &frozen_bursts(mc))?;
    Ok(Effective {
        mc: pinned,
        retired,
    })
}

/// The burst hosts a status declares: `burstLayout`, or for a status written before it
/// existed, the bursts it lists (each declared its size then).
fn frozen_bursts(mc: &MiniCluster) -> Vec<BurstLayout> {
    let Some(status) = mc.status.as_ref() else {
        return Vec::new();
    };
    if !status.burst_layout.is_empty() {
        return status.burst_layout.clone();
    }
    status
        .bursts
        .iter()
        .map(|b| BurstLayout {
            name: b.name.clone(),
            max_size: b.declared_hosts(),
        })
        .collect()
}

/// Check the spec's bursts against the frozen `layout` and pin each one's `maxSize`:
/// a burst may change its size within its `maxSize` (and its spoke) or go, but not appear,
/// be renamed or declare other hosts. A burst that went stays in the layout at size 0, so
/// no later rank moves; its names are returned. Only a root instance's own bursts are
/// frozen here (a MiniCluster joining a lead broker, or with a verbatim hostlist, names
/// its hosts itself).
fn pin_bursts(
    spec: &mut MiniClusterSpec,
    layout: &[BurstLayout],
) -> Result<Vec<String>, SizeRefusal> {
    if !lays_out_its_bursts(spec) || layout.is_empty() && spec.bursts().is_empty() {
        return Ok(Vec::new());
    }
    let resolved = spec.bursts();
    let clusters = &mut spec
        .flux
        .get_or_insert_default()
        .bursting
        .get_or_insert_with(Bursting::default)
        .clusters;
    for (i, (burst, declared)) in resolved.iter().zip(clusters.iter_mut()).enumerate() {
        let field = format!("spec.flux.bursting.clusters[{i}]");
        let Some(frozen) = layout.iter().find(|l| l.name == burst.name) else {
            let known = if layout.is_empty() {
                "it was created without bursts".to_string()
            } else {
                let names: Vec<&str> = layout.iter().map(|l| l.name.as_str()).collect();
                format!("its bursts are {}", names.join(", "))
            };
            return Err(SizeRefusal {
                reason: "BurstLayoutImmutable",
                message: format!(
                    "{field}.name: burst {:?} was not declared when this MiniCluster was created ({known}), so its running brokers know no hosts for it; bursts cannot be added or renamed: delete and re-create the MiniCluster",
                    burst.name
                ),
            });
        };
        if let Some(max) = declared.max_size.filter(|m| *m != frozen.max_size) {
            return Err(SizeRefusal {
                reason: "MaxSizeImmutable",
                message: format!(
                    "{field}.maxSize: cannot change from {} to {max} on an existing MiniCluster: its brokers were configured with {} hosts for burst {:?}; delete and re-create it to change the maximum",
                    frozen.max_size, frozen.max_size, burst.name
                ),
            });
        }
        if burst.size > frozen.max_size {
            return Err(SizeRefusal {
                reason: "SizeAboveMaximum",
                message: format!(
                    "{field}.size: {} is above the maximum size {} burst {:?} was created with (its brokers only know {} hosts); scale within 0..{} or re-create the MiniCluster with a larger maxSize",
                    burst.size, frozen.max_size, burst.name, frozen.max_size, frozen.max_size
                ),
            });
        }
        declared.name = Some(burst.name.clone());
        declared.size = Some(burst.size);
        declared.max_size = Some(frozen.max_size);
    }
    let retired: Vec<String> = layout
        .iter()
        .filter(|l| !resolved.iter().any(|b| b.name == l.name))
        .map(|l| l.name.clone())
        .collect();
    clusters.extend(
        layout
            .iter()
            .filter(|l| retired.contains(&l.name))
            .map(|l| BurstCluster {
                name: Some(l.name.clone()),
                size: Some(0),
                max_size: Some(l.max_size),
                cluster: None,
                candidates: Vec::new(),
                min_size: None,
                // A retired burst runs nowhere: how it would connect does not matter.
                relay: None,
            }),
    );
    // Ranks follow the frozen order, whatever order the spec lists the bursts in.
    clusters.sort_by_key(|c| layout.iter().position(|l| Some(&l.name) == c.name.as_ref()));
    Ok(retired)
}

/// Whether the instance's burst hosts follow from this spec's bursts (a root instance), not
/// from a lead MiniCluster it joins or a verbatim hostlist.
fn lays_out_its_bursts(spec: &MiniClusterSpec) -> bool {
    spec.lead_broker().is_none() && spec.custom_hostlist().is_none()
}

/// The burst hosts `plan` lays out, for `status.burstLayout` (none for a MiniCluster
/// that joins a lead broker or names its hosts verbatim).
pub fn burst_layout(plan: &Plan) -> Vec<BurstLayout> {
    if !lays_out_its_bursts(&plan.spec) {
        return Vec::new();
    }
    plan.bursts
        .iter()
        .map(|b| BurstLayout {
            name: b.name.clone(),
            max_size: b.max_size,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::MiniClusterStatus;

    fn mc(size: i32, max: Option<i32>, frozen: i32) -> MiniCluster {
        let mut mc: MiniCluster = serde_yaml_ng::from_str(
            "apiVersion: flux-framework.org/v1alpha2\nkind: MiniCluster\nmetadata: {name: m}\nspec: {containers: [{image: a}]}\n",
        )
        .expect("yaml");
        mc.spec.size = size;
        mc.spec.max_size = max;
        mc.status = Some(MiniClusterStatus {
            maximum_size: frozen,
            ..Default::default()
        });
        mc
    }

    #[test]
    fn first_reconcile_takes_the_spec_as_is() {
        assert_eq!(
            effective(&mc(2, None, 0)).map(|e| e.mc.spec.max_size),
            Ok(None)
        );
    }

    #[test]
    fn scaling_within_the_frozen_maximum_keeps_the_hosts() {
        assert_eq!(
            effective(&mc(3, None, 4)).map(|e| e.mc.spec.max_size),
            Ok(Some(4))
        );
        assert_eq!(
            effective(&mc(1, Some(4), 4)).map(|e| e.mc.spec.max_size),
            Ok(Some(4))
        );
    }

    fn with_bursts(bursts: &str, layout: &[(&str, i32)]) -> MiniCluster {
        let mut m = mc(2, None, 2);
        m.spec.flux = Some(
            serde_yaml_ng::from_str(&format!("bursting: {{clusters: {bursts}}}")).expect("yaml"),
        );
        if let Some(status) = m.status.as_mut() {
            status.burst_layout = layout
                .iter()
                .map(|(name, max)| BurstLayout {
                    name: name.to_string(),
                    max_size: *max,
                })
                .collect();
        }
        m
    }

    fn pinned(e: &Effective) -> Vec<(String, i32, i32)> {
        e.mc.spec
            .bursts()
            .into_iter()
            .map(|b| (b.name, b.size, b.max_size))
            .collect()
    }

    #[test]
    fn bursts_scale_within_their_frozen_hosts_in_the_frozen_order() {
        let m = with_bursts(
            "[{name: b, size: 0}, {name: a, size: 3, maxSize: 4}]",
            &[("a", 4), ("b", 2)],
        );
        let e = effective(&m).expect("within maxSize");
        assert_eq!(
            pinned(&e),
            vec![("a".into(), 3, 4), ("b".into(), 0, 2)],
            "maxSize pinned, ranks in the order first declared"
        );
    }

    #[test]
    fn a_removed_burst_keeps_its_ranks_and_runs_nowhere() {
        let m = with_bursts("[{name: c, size: 1}]", &[("a", 2), ("b", 3), ("c", 1)]);
        let e = effective(&m).expect("removing bursts is allowed");
        assert_eq!(
            pinned(&e),
            vec![("a".into(), 0, 2), ("b".into(), 0, 3), ("c".into(), 1, 1)]
        );
        assert_eq!(e.retired, vec!["a".to_string(), "b".to_string()]);
        let plan = e.plan().expect("plans");
        assert_eq!(
            plan.hostlist, "m-[0-1],a-[0-1],b-[0-2],c-0",
            "c keeps rank 7"
        );
        let running: Vec<&str> = plan
            .bursts
            .iter()
            .filter(|b| !b.retired)
            .map(|b| b.name.as_str())
            .collect();
        assert_eq!(running, ["c"]);
        assert_eq!(
            burst_layout(&plan),
            m.status
                .as_ref()
                .map(|s| s.burst_layout.clone())
                .unwrap_or_default(),
            "the layout stays frozen"
        );

        // Bursting removed altogether: every burst retired, every host kept, nothing runs.
        let mut gone = m.clone();
        gone.spec.flux = None;
        let e = effective(&gone).expect("removing bursting is allowed");
        let plan = e.plan().expect("plans");
        assert_eq!(plan.hostlist, "m-[0-1],a-[0-1],b-[0-2],c-0");
        assert!(!plan.has_running_bursts());

        // A removed burst put back runs again, in its place.
        let back = with_bursts(
            "[{name: c, size: 1}, {name: a, size: 2}]",
            &[("a", 2), ("b", 3), ("c", 1)],
        );
        let e = effective(&back).expect("re-adding a declared burst is allowed");
        assert_eq!(e.retired, vec!["b".to_string()]);
        assert_eq!(
            pinned(&e),
            vec![("a".into(), 2, 2), ("b".into(), 0, 3), ("c".into(), 1, 1)]
        );
    }

    #[test]
    fn a_status_from_before_burst_layouts_freezes_the_bursts_it_lists() {
        let mut m = with_bursts("[{name: a, size: 1}]", &[]);
        if let Some(status) = m.status.as_mut() {
            status.bursts = vec![crate::api::BurstStatus {
                name: "a".into(),
                size: 2,
                ..Default::default()
            }];
        }
        assert_eq!(
            effective(&m).map(|e| pinned(&e)),
            Ok(vec![("a".into(), 1, 2)])
        );
    }

    #[test]
    fn burst_layout_changes_are_refused_naming_the_field() {
        let cases = [
            (
                "[{name: a, size: 2}, {name: c, size: 1}]",
                "BurstLayoutImmutable",
                "spec.flux.bursting.clusters[1].name: burst \"c\" was not declared",
            ),
            (
                "[{name: a, size: 2, maxSize: 5}]",
                "MaxSizeImmutable",
                "spec.flux.bursting.clusters[0].maxSize: cannot change from 4 to 5",
            ),
            (
                "[{name: a, size: 5}]",
                "SizeAboveMaximum",
                "spec.flux.bursting.clusters[0].size: 5 is above the maximum size 4",
            ),
        ];
        for (bursts, reason, start) in cases {
            let r = effective(&with_bursts(bursts, &[("a", 4)])).expect_err(bursts);
            assert_eq!(r.reason, reason, "{bursts}");
            assert!(r.message.starts_with(start), "{bursts}: {}", r.message);
        }
        let r = effective(&with_bursts("[{name: a}]", &[])).expect_err("added");
        assert!(
            r.message.contains("it was created without bursts"),
            "{}",
            r.message
        );
    }

    #[test]
    fn refusals_name_the_field_and_the_limit() {
        let r = effective(&mc(5, None, 4)).expect_err("above");
        assert_eq!(r.reason, "SizeAboveMaximum");
        assert!(
            r.message
                .starts_with("spec.size: 5 is above the maximum size 4")
        );
        let r = effective(&mc(2, Some(6), 4)).expect_err("maxSize change");
        assert_eq!(r.reason, "MaxSizeImmutable");
    }
}
