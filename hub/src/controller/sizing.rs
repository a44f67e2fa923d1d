//! Elasticity rules: the hosts a MiniCluster declares are fixed when it is first
//! reconciled (`status.maximumSize`), because running brokers cannot learn new hosts.
//! Scaling moves `spec.size` within that ceiling; anything else is refused.

use flux_shared::api::MiniCluster;

/// Why a change cannot be applied to a running MiniCluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeRefusal {
    /// Condition reason.
    pub reason: &'static str,
    /// What is wrong and what to do.
    pub message: String,
}

/// The MiniCluster to plan: its spec, with `maxSize` pinned to the declared maximum once
/// one is recorded in the status. `Err` when the spec asks for what the running brokers
/// cannot do.
pub fn effective(mc: &MiniCluster) -> Result<MiniCluster, SizeRefusal> {
    let frozen = mc.status.as_ref().map_or(0, |s| s.maximum_size);
    if frozen <= 0 {
        return Ok(mc.clone());
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
    Ok(pinned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flux_shared::api::MiniClusterStatus;

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
            effective(&mc(2, None, 0)).map(|m| m.spec.max_size),
            Ok(None)
        );
    }

    #[test]
    fn scaling_within_the_frozen_maximum_keeps_the_hosts() {
        assert_eq!(
            effective(&mc(3, None, 4)).map(|m| m.spec.max_size),
            Ok(Some(4))
        );
        assert_eq!(
            effective(&mc(1, Some(4), 4)).map(|m| m.spec.max_size),
            Ok(Some(4))
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
