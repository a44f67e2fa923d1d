//! Stage "status": the computed status written when it differs from the current one, with
//! Events for new problems, burst changes and outcomes. A status this process wrote a
//! moment ago is not written again while the cache still shows the older one.

use std::time::Duration;

use flux_shared::api::{MiniCluster, MiniClusterPhase, MiniClusterStatus};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};
use tracing::warn;

use crate::controller::context::{ApiError, Context, MANAGER, kube_err, mc_key};
use crate::controller::status::events::publish;
use crate::controller::status::{BurstEvent, INSTANCE_ENDED, Problem};
use crate::controller::watch::partial_decode::Partial;

/// Write `status` (with its Events) unless it is the current one or was just written.
pub(in crate::controller) async fn write_if_changed(
    ctx: &Context,
    mc: &MiniCluster,
    status: MiniClusterStatus,
    problem: Option<&Problem>,
    burst_events: Vec<BurstEvent>,
) -> Result<MiniClusterStatus, ApiError> {
    let previous = mc.status.clone().unwrap_or_default();
    if status == previous || ctx.status_just_written(mc, &status) {
        return Ok(status);
    }
    for (warning, reason, note) in burst_events {
        let type_ = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        publish(ctx, mc, type_, reason, note).await;
    }
    if let Some(p) = problem {
        let already = previous
            .conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.status == "True" && c.message == p.message);
        if !already {
            warn!(reason = %p.reason, message = %p.message, "spec not applied");
            publish(ctx, mc, EventType::Warning, &p.reason, p.message.clone()).await;
        }
    }
    if status.phase != previous.phase {
        match status.phase.as_deref().map(str::parse) {
            Some(Ok(MiniClusterPhase::Failed)) => {
                publish(
                    ctx,
                    mc,
                    EventType::Warning,
                    "JobFailed",
                    "the Job failed".into(),
                )
                .await
            }
            Some(Ok(MiniClusterPhase::Succeeded)) => {
                publish(
                    ctx,
                    mc,
                    EventType::Normal,
                    "Completed",
                    "the Job completed".into(),
                )
                .await
            }
            _ => {}
        }
    }
    // The instance ended under its workers: said once, when the Ready condition turns so.
    let ready = |s: &MiniClusterStatus| s.conditions.iter().find(|c| c.type_ == "Ready").cloned();
    if let Some(now) = ready(&status).filter(|c| c.reason == INSTANCE_ENDED)
        && ready(&previous).is_none_or(|c| c.reason != INSTANCE_ENDED)
    {
        warn!(message = %now.message, "the Flux instance ended under its brokers");
        publish(ctx, mc, EventType::Warning, INSTANCE_ENDED, now.message).await;
    }
    write_status(ctx, mc, &status).await?;
    ctx.status_written(mc, &status);
    Ok(status)
}

/// How long a written status is trusted over the cache's older one: the watch event of a
/// status write arrives within milliseconds; after this a write that did not show is
/// sent again.
const STATUS_ECHO_WAIT: Duration = Duration::from_secs(30);

impl Context {
    fn status_hash(mc: &MiniCluster, status: &MiniClusterStatus) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        mc.metadata.uid.hash(&mut h);
        serde_json::to_vec(status).unwrap_or_default().hash(&mut h);
        h.finish()
    }

    /// Whether this process wrote exactly `status` for `mc` within [`STATUS_ECHO_WAIT`].
    fn status_just_written(&self, mc: &MiniCluster, status: &MiniClusterStatus) -> bool {
        let hash = Self::status_hash(mc, status);
        self.memory
            .read(&mc_key(mc), |m| {
                m.written_status
                    .is_some_and(|(h, at)| h == hash && at.elapsed() < STATUS_ECHO_WAIT)
            })
            .unwrap_or(false)
    }

    fn status_written(&self, mc: &MiniCluster, status: &MiniClusterStatus) {
        let hash = Self::status_hash(mc, status);
        self.memory.with(&mc_key(mc), |m| {
            m.written_status = Some((hash, std::time::Instant::now()));
        });
    }
}

/// Server-side apply `status` as the MiniCluster's status (forced: the hub owns it).
pub(in crate::controller) async fn write_status(
    ctx: &Context,
    mc: &MiniCluster,
    status: &MiniClusterStatus,
) -> Result<(), ApiError> {
    let ns = mc.namespace().unwrap_or_default();
    let name = mc.name_any();
    // The answer is the whole MiniCluster, of which nothing is read.
    let api: Api<Partial<MiniCluster>> = Api::namespaced(ctx.client.clone(), &ns);
    let body = serde_json::json!({
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "status": status,
    });
    api.patch_status(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(kube_err(format!(
        "updating status of MiniCluster {ns}/{name}"
    )))?;
    ctx.metrics.api_write("MiniCluster", "patch-status");
    Ok(())
}
