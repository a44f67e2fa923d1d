//! The view container's script: the Flux view served in place to the pod's other
//! containers. Its shell source is `view_container.sh`, beside this file, a plain script
//! shellcheck reads as it is; only its `__NAME__`-style placeholders are filled in here.

use crate::api::defaults;
use crate::plan::{Plan, Target};

use super::VIEW_SOURCE;
use super::program::qualified_name;
use super::shell::{fill, one_line, word};

const VIEW_CONTAINER_SH: &str = include_str!("view_container.sh");

/// The script of the view container (ConfigMap key [`crate::layout::VIEW_SCRIPT_KEY`],
/// run with `/bin/bash` in the view image) of a pod whose view is read in place
/// ([`crate::api::ViewMode::InPlace`]).
///
/// Once it found the view (exactly one directory under the image's view root), it writes
/// its PID and the view's path to `<exchange>/view`: the brokers link the view and
/// `/opt/software` to the files under `/proc/PID/root`. A container the kernel refuses
/// that (another user, or fewer capabilities) writes `copy` to the FIFO
/// `<exchange>/requests`, and this container copies the view into the pod's mount and the
/// software tree into the pod's software volume (mounted here at the layout's software
/// path, in the other containers at `/opt/software`), then writes the outcome to
/// `<exchange>/copied`.
///
/// It stays until the broker has ended for good: the broker's `exit 0` (or any exit when
/// the kubelet does not restart a failed container), or the broker's process gone (its
/// PID in `<exchange>/broker`) after a SIGTERM, so a broker that stops still has its view,
/// and a pod whose brokers complete completes.
pub fn view_container_script(plan: &Plan, target: &Target) -> String {
    let l = &plan.layout;
    let policy = plan.spec.pod().restart_policy.as_deref();
    let restarted = policy.unwrap_or(defaults::RESTART_POLICY) != "Never";
    fill(
        VIEW_CONTAINER_SH,
        &[
            ("__NAME__", &one_line(&qualified_name(plan))),
            ("__JOB__", &one_line(&target.job)),
            ("__EXCHANGE__", &word(l.view_exchange())),
            ("__VIEW_SOURCE__", VIEW_SOURCE),
            ("__VIEW__", &word(l.view())),
            ("__SOFTWARE__", &word(l.software())),
            ("__QUIET__", &plan.spec.logging().quiet().to_string()),
            ("__RESTARTED__", &restarted.to_string()),
        ],
    )
}
