//! Stage "federate", second step: each placed burst's path to the lead broker
//! ([`crate::federation::path`] decides), from the status the last pass wrote, what its
//! spoke reported to this hub and what the lead broker sees; the plan routed with it.

use std::collections::BTreeMap;

use flux_shared::api::{BurstStatus, MiniCluster, burst_path};
use flux_shared::federation::{BurstKey, LEAD_REACHABLE};
use flux_shared::plan::Plan;

use crate::controller::context::{Context, mc_key};
use crate::federation::path::{self, Ask, Choice, Kept};

/// What was decided of each placed burst's path, by burst name.
pub type Routes = BTreeMap<String, Choice>;

/// `plan` with the path of each placed burst whose spec leaves `relay` unset, and the
/// choice for every placed burst (those whose spec sets it too, for their status).
pub fn route(ctx: &Context, mc: &MiniCluster, plan: Plan) -> (Plan, Routes) {
    let previous: &[BurstStatus] = mc.status.as_ref().map_or(&[], |s| s.bursts.as_slice());
    let key = mc_key(mc);
    let mut routes = Routes::new();
    for burst in &plan.bursts {
        if burst.retired || burst.cluster.is_empty() {
            continue;
        }
        let old = previous.iter().find(|b| b.name == burst.name);
        let burst_key = BurstKey::new(&key.namespace, &key.name, &burst.name);
        let report = ctx.registry.report_of(&burst.cluster, &burst_key);
        let lead_unreachable = report.as_ref().and_then(|r| {
            r.conditions
                .iter()
                .find(|c| c.r#type == LEAD_REACHABLE && c.status == "False")
                .map(|c| c.message.clone())
        });
        let reach = ctx.registry.reach(&burst.cluster);
        let none_joined = ctx
            .lead_views
            .joined(&key, &burst.name)
            .is_some_and(|j| j.online == 0);
        let choice = path::choose(&Ask {
            spoke: &burst.cluster,
            spec: burst.relay_spec,
            can_relay: burst.can_relay(),
            kept: old.and_then(|o| kept(o, &burst.cluster)),
            reach: reach.as_ref(),
            lead_unreachable: lead_unreachable.as_deref(),
            none_joined,
        });
        routes.insert(burst.name.clone(), choice);
    }
    let names: Vec<String> = plan.bursts.iter().map(|b| b.name.clone()).collect();
    let plan = plan.route(|index| match routes.get(&names[index]) {
        Some(Choice::Chosen(p)) => Some(p.relay),
        _ => None,
    });
    (plan, routes)
}

/// The path `old` runs with on `spoke`, when that placement goes on: it ran there with a
/// path (was assigned, with brokers to run). A burst scaled up from 0, or placed afresh,
/// has its path chosen afresh.
fn kept<'a>(old: &'a BurstStatus, spoke: &str) -> Option<Kept<'a>> {
    if old.cluster != spoke || old.size == 0 {
        return None;
    }
    let relay = match old.path.as_deref()? {
        burst_path::RELAY => true,
        burst_path::DIRECT => false,
        _ => return None,
    };
    Some(Kept {
        relay,
        reason: old.path_reason.as_deref(),
        message: old.path_message.as_deref(),
    })
}

/// `plan` with each burst whose spec leaves `relay` unset on the path `mc`'s status says
/// it runs with (after a restart, before any path is chosen again); a burst with no path
/// there keeps none.
pub fn as_in_status(mc: &MiniCluster, plan: Plan) -> Plan {
    let bursts = mc.status.as_ref().map_or(&[][..], |s| s.bursts.as_slice());
    let names: Vec<String> = plan.bursts.iter().map(|b| b.name.clone()).collect();
    plan.route(|index| {
        let old = bursts.iter().find(|b| b.name == names[index])?;
        match old.path.as_deref()? {
            burst_path::RELAY => Some(true),
            burst_path::DIRECT => Some(false),
            _ => None,
        }
    })
}

/// The bursts of `plan` whose path the hub chooses and `mc`'s status names none for: a
/// restarted hub sends nothing for them until a reconcile chooses it.
pub fn unrouted_in_status(mc: &MiniCluster, plan: &Plan) -> Vec<String> {
    let bursts = mc.status.as_ref().map_or(&[][..], |s| s.bursts.as_slice());
    plan.bursts
        .iter()
        .filter(|b| b.path_chosen_by_hub())
        .filter(|b| !bursts.iter().any(|s| s.name == b.name && s.path.is_some()))
        .map(|b| b.name.clone())
        .collect()
}

/// Whether the path of burst `name` is not chosen yet (nothing is sent for it), with why.
pub fn undecided<'a>(routes: &'a Routes, name: &str) -> Option<&'a str> {
    match routes.get(name)? {
        Choice::Undecided(why) => Some(why),
        Choice::Chosen(_) => None,
    }
}
