//! Stage "federate", first step for bursts that name `candidates`: where each runs
//! ([`crate::federation::placement`] decides), read from the registry and the status the
//! last pass wrote, and the plan with each burst's `cluster` set to its spoke.

use std::collections::BTreeMap;
use std::time::SystemTime;

use flux_shared::api::{BurstStatus, MiniCluster};
use flux_shared::federation::proto::BurstPhase;
use flux_shared::federation::room::Shape;
use flux_shared::federation::{BurstKey, McKey};
use flux_shared::plan::{Endpoint, Plan, Role};
use flux_shared::render;
use flux_shared::validate::{Exceptions, describe_violations, unsafe_burst_except};

use crate::controller::context::Context;
use crate::federation::placement::{
    self, Ask, Candidate, Current, LazyShape, Placed, PlacedBurst, Reported,
};
use crate::federation::registry::Registry;

/// Place every burst of `plan` that names candidates: the plan with their `cluster` set
/// (empty while placed nowhere) and what was decided; `None` for a plan without such
/// bursts.
pub fn place(
    ctx: &Context,
    mc: &MiniCluster,
    plan: &Plan,
    now: SystemTime,
) -> Option<(Plan, Placed)> {
    if plan
        .bursts
        .iter()
        .all(|b| b.candidates.is_empty() || b.retired)
    {
        return None;
    }
    let registry = &ctx.registry;
    let previous: &[BurstStatus] = mc.status.as_ref().map_or(&[], |s| s.bursts.as_slice());
    let settling = now
        .duration_since(registry.started())
        .is_ok_and(|up| up < ctx.placement.settle);
    let mut placed = Placed::default();
    let mut chosen: BTreeMap<usize, String> = BTreeMap::new();
    // Every burst's pods are the same (one spec): one shape, worked out only if needed.
    let shape = LazyShape::new(|| {
        let first = plan.bursts.iter().position(|b| !b.retired).unwrap_or(0);
        burst_shape(plan, first)
    });
    for (index, burst) in plan.bursts.iter().enumerate() {
        if burst.candidates.is_empty() || burst.retired {
            continue;
        }
        let key = BurstKey::new(&plan.namespace, &plan.name, &burst.name);
        // The candidates' order is drawn from the wire form, as the autoscaler's is.
        let names = placement::expand(&burst.candidates, &key.to_string(), |l| {
            registry.spokes_matching(l)
        });
        let facts = registry.placement_facts(&names, &plan.namespace);
        let size = effective_size(plan, index);
        let candidates: Vec<Candidate<'_>> = names
            .iter()
            .zip(&facts)
            .map(|(name, f)| Candidate {
                name,
                connected: f.connected,
                room: f.room.as_ref(),
                room_pending: f.room.is_none()
                    && f.connected_since.is_some_and(|since| {
                        now.duration_since(since)
                            .is_ok_and(|up| up < ctx.placement.first_room)
                    }),
                unsafe_because: unsafe_at(plan, f.exceptions.as_ref()),
                others: others_on(plan, index, name, &chosen),
            })
            .collect();
        let old = previous.iter().find(|b| b.name == burst.name);
        let current = old.filter(|o| !o.cluster.is_empty()).map(|o| {
            let since = o
                .placement
                .as_ref()
                .and_then(|p| p.placed_at.as_ref())
                .map_or(now, |t| SystemTime::from(t.0));
            // Usually one of the candidates, whose facts are at hand.
            let away_since = match names.iter().position(|n| *n == o.cluster) {
                Some(i) => facts[i].away_since,
                None => registry
                    .placement_facts(std::slice::from_ref(&o.cluster), &plan.namespace)
                    .pop()
                    .and_then(|f| f.away_since),
            };
            let lead_sees_none = ctx
                .lead_views
                .joined(&McKey::new(&plan.namespace, &plan.name), &burst.name)
                .and_then(|j| {
                    Some(placement::LeadSeesNone {
                        since: j.none_since?,
                        read_at: j.read_at,
                    })
                });
            Current {
                was_empty: o.size == 0,
                lead_sees_none,
                ..current_of(registry, &o.cluster, &key, since, away_since)
            }
        });
        let left = old
            .and_then(|o| o.placement.as_ref())
            .map_or(&[][..], |p| p.skipped.as_slice());
        let decision = placement::place(
            &candidates,
            &Ask {
                namespace: &plan.namespace,
                size,
                shape: &shape,
            },
            current.as_ref(),
            left,
            now,
            ctx.placement,
            settling,
        );
        placed.recheck = match (placed.recheck, decision.recheck) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // A lost cluster cannot confirm the burst gone: the burst does not wait for it,
        // now or in a later pass (the spoke it left for that reason is in `skipped`).
        let lost: Vec<&str> = decision
            .skipped
            .iter()
            .filter(|s| s.reason == placement::reason::LOST)
            .map(|s| s.cluster.as_str())
            .collect();
        let held_by = match &decision.spoke {
            Some(spoke) => {
                let mut held = registry.held_elsewhere(&key, spoke);
                held.retain(|h| !lost.contains(&h.as_str()));
                held
            }
            None => Vec::new(),
        };
        if let Some(spoke) = &decision.spoke {
            chosen.insert(index, spoke.clone());
        }
        placed.bursts.insert(
            burst.name.clone(),
            PlacedBurst {
                since: decision.since,
                skipped: decision.skipped,
                held_by,
            },
        );
    }
    let plan = plan.clone().place(|index| chosen.get(&index).cloned());
    Some((plan, placed))
}

/// Where a burst is placed now, as the registry knows it.
fn current_of(
    registry: &Registry,
    spoke: &str,
    key: &BurstKey,
    since: SystemTime,
    away_since: Option<SystemTime>,
) -> Current {
    let report = registry.report_of(spoke, key).map(|r| Reported {
        phase: BurstPhase::try_from(r.phase).unwrap_or_default(),
        size: r.size,
        brokers_ready: r.brokers_ready,
        brokers_draining: r.brokers_draining,
        reason: r.reason,
        message: r.message,
    });
    Current {
        spoke: spoke.to_string(),
        since,
        // After a restart the hub does not know what reached the spoke: assume it did.
        delivered: registry.delivered(spoke, key) || since < registry.started(),
        sent_at: registry.sent_at(spoke, key),
        report,
        away_since,
        was_empty: false,
        lead_sees_none: None,
    }
}

/// What each broker pod of burst `index` asks of its node.
pub(in crate::controller) fn burst_shape(plan: &Plan, index: usize) -> Shape {
    let role = Role::Burst {
        index,
        lead: Endpoint {
            address: String::new(),
            port: 0,
        },
    };
    render::render_job(plan, &role)
        .and_then(|job| job.spec?.template.spec)
        .map_or_else(Shape::default, |pod| Shape::of_pod(&pod))
}

/// Brokers burst `index` runs now.
fn effective_size(plan: &Plan, index: usize) -> i32 {
    let role = Role::Burst {
        index,
        lead: Endpoint {
            address: String::new(),
            port: 0,
        },
    };
    plan.target(&role)
        .map_or(plan.bursts[index].size, |t| t.size)
}

/// Brokers of the MiniCluster's other bursts on `spoke`: fixed there, or placed there
/// earlier in this pass.
fn others_on(plan: &Plan, index: usize, spoke: &str, chosen: &BTreeMap<usize, String>) -> i32 {
    plan.bursts
        .iter()
        .enumerate()
        .filter(|(i, b)| *i != index && !b.retired)
        .filter(|(i, b)| {
            (b.candidates.is_empty() && b.cluster == spoke)
                || chosen.get(i).is_some_and(|c| c == spoke)
        })
        .map(|(_, b)| b.size)
        .sum()
}

/// Why a spoke whose policy lifts `exceptions` may not run the plan's bursts; `None` when
/// it may, or when it has not said yet (it is then not connected, and skipped for that).
fn unsafe_at(plan: &Plan, exceptions: Option<&Exceptions>) -> Option<String> {
    let violations = unsafe_burst_except(&plan.spec, &plan.namespace, None, exceptions?);
    (!violations.is_empty()).then(|| describe_violations(&violations))
}
