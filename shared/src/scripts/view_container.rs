//! The view container's script: the Flux view copied into the pod while the brokers'
//! containers start. Its shell source is `view_container.sh`, beside this file, a plain
//! script shellcheck reads as it is; only its `__NAME__`-style placeholders are filled in
//! here.

use crate::plan::{Plan, Target};

use super::VIEW_SOURCE;
use super::program::qualified_name;
use super::shell::{fill, one_line, word};

const VIEW_CONTAINER_SH: &str = include_str!("view_container.sh");

/// The script of the view container (ConfigMap key [`crate::layout::VIEW_SCRIPT_KEY`],
/// run with `/bin/bash` in the view image) of a pod whose view container runs beside the
/// brokers ([`crate::api::ViewMode::Alongside`]).
///
/// It copies the view (exactly one directory under the image's view root) into the
/// pod's mount, and the image's software tree straight into the pod's software volume
/// (mounted here at the layout's software path, in the other containers at
/// `/opt/software`), then writes the outcome to `<exchange>/copied` (`ok`, or `error`
/// and why), which the brokers wait for. A view container started again copies only
/// when no copy succeeded before.
///
/// It stays until the broker has ended for good, so that the pod stays Ready while the
/// broker runs and completes with it: the broker's exit status 0 in `<exchange>/exit`
/// (any status when the kubelet does not restart a failed container), which it reads
/// when the broker wakes it on the FIFO `<exchange>/requests` and every second; or, with
/// restartPolicy `Never`, the broker's process gone (its PID in `<exchange>/broker`, in
/// the pod's process namespace). On SIGTERM it goes at once.
pub fn view_container_script(plan: &Plan, target: &Target) -> String {
    let l = &plan.layout;
    let restarted = plan.spec.restarts_containers();
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
