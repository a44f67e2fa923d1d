//! Start-up: the federation registry rebuilt from the MiniClusters that exist, before any
//! spoke is let in or any reconcile runs.

use flux_shared::api::MiniCluster;
use flux_shared::elasticity;
use flux_shared::federation::assignment;
use flux_shared::plan::Plan;
use flux_shared::validate::is_dns_label;
use tracing::info;

use crate::controller::context::{Context, mc_key};
use crate::controller::desired::stored_certificate;
use crate::controller::federate::{
    burst_infos, has_finalizer, mc_info, placed_as_in_status, retain_from_status,
};
use crate::federation::McInfo;
use flux_shared::federation::{BurstKey, McKey};

/// Rebuild the registry from the MiniClusters that exist (hub start-up, caches synced),
/// then let spokes in: every spoke's first snapshot lists exactly what it ran before the
/// restart, so nothing running is deleted. Uses the last known lead broker endpoint from
/// each status and the stored certificates; reconciles refine it afterwards.
pub fn prime(ctx: &Context, miniclusters: &[MiniCluster]) {
    for mc in miniclusters {
        let key = mc_key(mc);
        let previous = mc.status.clone().unwrap_or_default();
        if mc.metadata.deletion_timestamp.is_some() {
            if has_finalizer(mc) {
                let bursts = Plan::new(mc)
                    .map(|p| burst_infos(&placed_as_in_status(mc, p)))
                    .unwrap_or_default();
                ctx.registry.withdraw(&key, McInfo::default(), bursts);
            }
            continue;
        }
        let plan = elasticity::effective(mc).ok().and_then(|e| e.plan().ok());
        let Some(plan) = plan else {
            retain_from_status(ctx, mc);
            continue;
        };
        // Bursts that name candidates run where the last pass placed them.
        let plan = placed_as_in_status(mc, plan);
        let lead = previous.lead_broker.clone();
        let cert = stored_certificate(
            ctx,
            &key.namespace,
            &key.name,
            mc.metadata.uid.as_deref().unwrap_or_default(),
        )
        .or_else(|| plan.spec.flux().curve_cert().map(str::to_string));
        let endpoint = lead.as_ref().map(|l| flux_shared::plan::Endpoint {
            address: l.address.clone(),
            port: l.port,
        });
        // A burst that was moving still waits for the spokes it left to confirm it gone.
        let moving = holds_of_moves(mc, &key);
        for (burst_key, spokes) in &moving {
            ctx.registry.hold_for_move(burst_key, spokes);
        }
        // A burst that connects directly needs the lead's endpoint (`build` says so).
        let mut assignments = match cert {
            Some(cert) if plan.has_running_bursts() => {
                assignment::build(&plan, &cert, endpoint.as_ref()).unwrap_or_default()
            }
            _ => Vec::new(),
        };
        // The assignment carries its key in the wire form.
        assignments.retain(|a| {
            !moving
                .iter()
                .any(|(k, _)| a.assignment.key == k.to_string())
        });
        // A burst whose path the hub chooses, with none in the status, was never sent.
        let unrouted = super::path::unrouted_in_status(mc, &plan);
        assignments.retain(|a| !unrouted.contains(&a.assignment.burst_name));
        let info = mc_info(
            mc,
            &previous,
            lead.as_ref(),
            super::relay_to(&ctx.stores, mc),
        );
        if assignments.is_empty() && plan.has_running_bursts() {
            // The lead's endpoint or the certificate is not known yet: what the spokes
            // run is kept until a reconcile knows more, never deleted for want of it.
            ctx.registry.keep(&key, info, burst_infos(&plan));
        } else {
            ctx.registry
                .set(&key, info, burst_infos(&plan), assignments);
        }
    }
    ctx.registry.set_primed();
    info!(
        miniclusters = miniclusters.len(),
        "federation state rebuilt; serving spokes"
    );
}

/// The most spokes `status.bursts[].placement.heldBy` is read with: the hub writes one per
/// spoke a burst left before it was confirmed gone there, a handful at most.
const MAX_HELD_BY: usize = 64;

/// The bursts of `mc` that its status says were moving, by assignment key, with the spokes
/// that may still hold each (its new spoke left out). What the status says is read as
/// spoke names only (DNS labels), each once, at most [`MAX_HELD_BY`].
fn holds_of_moves(mc: &MiniCluster, key: &McKey) -> Vec<(BurstKey, Vec<String>)> {
    let bursts = mc.status.as_ref().map_or(&[][..], |s| s.bursts.as_slice());
    bursts
        .iter()
        .filter_map(|b| {
            let mut held: Vec<String> = Vec::new();
            for spoke in &b.placement.as_ref()?.held_by {
                if held.len() == MAX_HELD_BY {
                    break;
                }
                if *spoke != b.cluster && is_dns_label(spoke) && !held.contains(spoke) {
                    held.push(spoke.clone());
                }
            }
            (!held.is_empty()).then(|| (BurstKey::new(&key.namespace, &key.name, &b.name), held))
        })
        .collect()
}
