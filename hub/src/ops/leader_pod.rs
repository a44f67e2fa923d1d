//! The leader's pod label: which hub replica spokes reach. The federation Service selects
//! the pod carrying [`LABEL`], and only the leader (the replica elected through the Lease,
//! see [`super::leader`], or the only replica when election is off) sets it on its own
//! pod, once it holds the assignment registry and serves gRPC. A standby never listens on
//! the gRPC port, so without the label half of the spokes' connection attempts would be
//! refused.
//!
//! "Leader" here is the replica holding the Lease, never the lead broker (Flux rank 0).
//!
//! The label is cleared when a replica starts (a container restarted in the same pod
//! after losing leadership must not keep it) and when it stops.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use tracing::{info, warn};

/// Label on the leader's pod (the replica serving the federation gRPC port); the
/// `flux-hub-federation` Service selects it.
pub const LABEL: &str = "flux-framework.org/federation-endpoint";

/// The merge patch that sets (`leading`) or removes the label.
pub fn patch(leading: bool) -> Value {
    let value = if leading { json!("true") } else { Value::Null };
    json!({ "metadata": { "labels": { LABEL: value } } })
}

/// Marks this replica's pod as the leader's (`leading`) or unmarks it, retrying transient
/// API errors for about a minute. A pod that does not exist means the hub runs outside a
/// cluster (`--identity` is not a pod name): nothing to mark, not an error.
pub async fn mark(pods: &Api<Pod>, pod: &str, leading: bool) -> Result<(), kube::Error> {
    let params = PatchParams::default();
    let body = Patch::Merge(patch(leading));
    let attempt = || pods.patch(pod, &params, &body);
    let outcome = attempt
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(500))
                .with_max_delay(Duration::from_secs(15))
                .with_max_times(7)
                .with_jitter(),
        )
        .when(|e| !matches!(e, kube::Error::Api(s) if s.code < 500 && s.code != 429))
        .notify(|error, after| warn!(%error, ?after, pod, "cannot label the hub's pod; retrying"))
        .await;
    match outcome {
        Ok(_) => {
            info!(
                pod,
                serving = leading,
                label = LABEL,
                "federation endpoint label set"
            );
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => {
            warn!(
                pod,
                "no such pod in the hub's namespace: not marking the federation endpoint (running outside the cluster?)"
            );
            Ok(())
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_sets_or_removes_only_the_label() {
        assert_eq!(
            patch(true),
            json!({"metadata": {"labels": {"flux-framework.org/federation-endpoint": "true"}}})
        );
        // null deletes the key in a JSON merge patch (RFC 7386).
        assert_eq!(
            patch(false),
            json!({"metadata": {"labels": {"flux-framework.org/federation-endpoint": null}}})
        );
    }
}
