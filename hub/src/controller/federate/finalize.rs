//! Stage "finalize", for a deleted MiniCluster: the garbage collector removes the local
//! children (owner references); bursts in other clusters need their spokes, and the
//! finalizer holds the MiniCluster until the connected ones confirm or the deletion timeout
//! passes (a spoke that is away prunes the burst when it connects again).

use std::time::Duration;

use flux_shared::api::MiniCluster;
use flux_shared::federation::McKey;
use flux_shared::plan::Plan;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use tracing::info;

use crate::controller::context::{Context, Error};
use crate::controller::federate::{
    burst_infos, finalizers_but_ours, has_finalizer, mc_info, placed_as_in_status, set_finalizers,
};
use crate::controller::status::bursts;
use crate::controller::status::events::publish;
use crate::controller::status::write::write_status;

/// A deleted MiniCluster: withdraw its bursts, wait (bounded) for every connected spoke
/// to confirm them gone, then release the finalizer.
pub(in crate::controller) async fn finalize(
    mc: &MiniCluster,
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<Action, Error> {
    if !has_finalizer(mc) {
        return Ok(Action::await_change());
    }
    let key = McKey::new(ns, name);
    // An invalid spec has no bursts the registry could know of; one that names candidates
    // is withdrawn from where its status placed it.
    let bursts = Plan::new(mc)
        .map(|p| burst_infos(&placed_as_in_status(mc, p)))
        .unwrap_or_default();
    let previous = mc.status.clone().unwrap_or_default();
    ctx.registry
        .withdraw(&key, mc_info(mc, &previous, None, None), bursts);
    let progress = ctx.registry.deletion_progress(&key);
    // Only a connected spoke is waited for: one that is away (or never came) deletes the
    // burst when it connects, since its first snapshot no longer lists it.
    let pending: Vec<_> = progress
        .iter()
        .filter(|p| !p.confirmed && p.connected)
        .collect();
    let away: Vec<_> = progress
        .iter()
        .filter(|p| !p.confirmed && !p.connected)
        .collect();
    let now = (ctx.now)();
    let elapsed_ms = mc
        .metadata
        .deletion_timestamp
        .as_ref()
        .map_or(0, |t| now.0.as_millisecond() - t.0.as_millisecond());
    let timeout_ms = i64::try_from(ctx.deletion_timeout.as_millis()).unwrap_or(i64::MAX);
    if pending.is_empty() {
        for p in &away {
            publish(
                ctx,
                mc,
                EventType::Warning,
                "SpokeAway",
                format!(
                    "spoke {} is not connected: it deletes burst {} when it connects again (its snapshot no longer lists it)",
                    p.spoke, p.burst
                ),
            )
            .await;
        }
        if !progress.is_empty() && away.is_empty() {
            publish(
                ctx,
                mc,
                EventType::Normal,
                "BurstsDeleted",
                format!(
                    "every spoke confirmed deleting the bursts ({})",
                    progress
                        .iter()
                        .map(|p| format!("{} on {}", p.burst, p.spoke))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
            .await;
        }
    } else if elapsed_ms >= timeout_ms {
        for p in &pending {
            publish(
                ctx,
                mc,
                EventType::Warning,
                "SpokeUnreachable",
                format!(
                    "spoke {} did not confirm deleting burst {} within {}s; its objects may remain in that cluster",
                    p.spoke,
                    p.burst,
                    ctx.deletion_timeout.as_secs()
                ),
            )
            .await;
        }
    } else {
        let views = ctx.registry.bursts(&key);
        let statuses = bursts::statuses(
            &views,
            None,
            &bursts::LeadSeen::default(),
            &previous.bursts,
            std::time::SystemTime::from(now.0),
        );
        if statuses != previous.bursts {
            let status = bursts::with_bursts(
                previous.clone(),
                &previous,
                previous.lead_broker.clone(),
                statuses,
                mc.metadata.generation,
                &now,
            );
            write_status(ctx, mc, &status)
                .await
                .map_err(Error::Finalize)?;
        }
        let remaining = u64::try_from(timeout_ms - elapsed_ms).unwrap_or(0);
        // Reports wake the reconcile earlier; this is the deadline.
        return Ok(Action::requeue(Duration::from_millis(remaining.max(1))));
    }
    set_finalizers(ctx, mc, finalizers_but_ours(mc))
        .await
        .map_err(Error::Finalize)?;
    ctx.registry.forget(&key);
    info!("bursts withdrawn; finalizer released");
    Ok(Action::await_change())
}
