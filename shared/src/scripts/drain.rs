//! The drain script: a leaving worker drains its node and waits for its jobs; a worker
//! that starts again takes back its own drain. Its shell source is `drain.sh`, beside this
//! file, a plain script shellcheck reads as it is; only its `__NAME__`-style placeholders
//! are filled in here.

use crate::plan::{Plan, Target};

use super::program::qualified_name;
use super::shell::{fill, one_line, word};

/// The drain script's source, with `__NAME__`-style placeholders. Its constants stay in
/// it: the reason a leaving broker's node is drained with (`flux-operator: leaving`; a
/// broker that joins again takes back only a drain with this reason, one an admin set
/// stays) and how long a broker that (re)starts keeps trying to take its drain back
/// (600 s).
const DRAIN_SH: &str = include_str!("drain.sh");

/// The drain script (ConfigMap key [`crate::layout::DRAIN_SCRIPT_KEY`]), `None` when
/// `flux.drainTimeoutSeconds` is 0.
///
/// `flux-drain.sh leave` is the flux-running container's preStop hook: a worker broker
/// that is going away (scale-down, a burst shrinking or removed, an eviction) drains its
/// node in Flux, so no new job lands there, and waits until no job runs on it, at most the
/// drain timeout; past that it says so and exits 1 (the kubelet records a
/// `FailedPreStopHook` Event) and the pod stops anyway. Nothing to do on the lead broker
/// (its instance ends with it) or when the broker is gone.
///
/// `flux-drain.sh rejoin` runs in the background of every worker broker start: Flux keeps
/// a drained node drained, so a broker of that host joining again (the burst or Job grew
/// back) takes back the drain, unless someone else drained it with another reason.
///
/// It reads the instance's environment from `flux-view.sh`, which the entrypoint writes.
pub fn drain_script(plan: &Plan, target: &Target) -> Option<String> {
    let timeout = plan.spec.flux().drain_timeout_seconds();
    if timeout == 0 {
        return None;
    }
    // One pass (`fill`): a value is never searched for placeholders, so a user's name or
    // path holding `__JOB__` stays as it is. Comment text goes through `one_line`, shell
    // words through `word` (bare when plain, else single-quoted).
    Some(fill(
        DRAIN_SH,
        &[
            ("__NAME__", &one_line(&qualified_name(plan))),
            ("__JOB__", &one_line(&target.job)),
            ("__DRAIN_TIMEOUT__", &timeout.to_string()),
            ("__LEAD_HOST__", &word(&target.lead_host)),
            (
                "__VIEW_ENV__",
                &word(&format!("{}/flux-view.sh", plan.layout.mount)),
            ),
        ],
    ))
}
