//! Stage "validate": the spec planned (at its effective size), or why it is not applied.

use flux_shared::api::MiniCluster;
use flux_shared::plan::Plan;

use crate::controller::plan::sizing;
use crate::controller::status::Problem;

/// Why a MiniCluster's spec is not applied, and the host count its status then declares.
pub(in crate::controller) struct NotApplied {
    /// The problem, for the Degraded condition and its Event.
    pub problem: Problem,
    /// The `maximumSize` to keep showing (the frozen one, for a refused resize).
    pub declared_max: Option<i32>,
}

/// The plan of `mc`, or why it is not applied: a change the running brokers cannot
/// follow is refused (never half-applied); a spec that does not plan is invalid.
pub(in crate::controller) fn validate(mc: &MiniCluster) -> Result<Plan, NotApplied> {
    let effective = sizing::effective(mc).map_err(|refusal| NotApplied {
        problem: Problem {
            reason: refusal.reason.to_string(),
            message: refusal.message,
            invalid: false,
        },
        declared_max: mc.status.as_ref().map(|s| s.maximum_size),
    })?;
    effective.plan().map_err(|errors| NotApplied {
        problem: Problem {
            reason: "InvalidSpec".into(),
            message: errors.to_string(),
            invalid: true,
        },
        declared_max: None,
    })
}
