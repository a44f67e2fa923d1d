//! What a MiniCluster's status and Events say of the placement of its bursts that name
//! candidates, as pure functions of the decisions ([`Placed`]).

use std::time::SystemTime;

use flux_shared::api::{BurstPlacement, BurstStatus, BurstStatusPhase, SkippedCandidate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::BurstEvent;
use crate::federation::placement::Placed;

fn time(t: SystemTime) -> Option<Time> {
    Timestamp::try_from(t).ok().map(Time)
}

/// The status entries of bursts that name candidates, with where they were placed
/// (`placed`): one placed nowhere is Pending with why each candidate was skipped, one
/// moving is Pending until the spoke it leaves confirms it gone.
pub fn with_placement(mut statuses: Vec<BurstStatus>, placed: &Placed) -> Vec<BurstStatus> {
    for s in &mut statuses {
        let Some(p) = placed.bursts.get(&s.name) else {
            continue;
        };
        s.placement = Some(BurstPlacement {
            placed_at: p.since.and_then(time),
            skipped: p.skipped.clone(),
            held_by: p.held_by.clone(),
        });
        if s.phase == BurstStatusPhase::Invalid || s.phase == BurstStatusPhase::Deleting {
            continue;
        }
        let pending = if s.cluster.is_empty() {
            Some(format!(
                "placed on no candidate yet: {}",
                describe_skipped(&p.skipped)
            ))
        } else if !p.held_by.is_empty() {
            Some(format!(
                "moving to spoke {}: waiting for spoke {} to delete the burst's objects (none of its brokers runs)",
                s.cluster,
                p.held_by.join(", ")
            ))
        } else {
            None
        };
        if let Some(message) = pending {
            s.phase = BurstStatusPhase::Pending.to_string();
            s.message = Some(message);
            s.reason = None;
            s.brokers_ready = 0;
            s.brokers_draining = 0;
            s.admitted_size = None;
        }
    }
    statuses
}

/// `spoke: Reason (message); ...`, or that there is no candidate.
fn describe_skipped(skipped: &[SkippedCandidate]) -> String {
    if skipped.is_empty() {
        return "no spoke matches the candidates".to_string();
    }
    let parts: Vec<String> = skipped
        .iter()
        .map(|s| match s.message.as_str() {
            "" => format!("{}: {}", s.cluster, s.reason),
            m => format!("{}: {} ({m})", s.cluster, s.reason),
        })
        .collect();
    parts.join("; ")
}

/// Events of bursts that name candidates when their placement changed, by burst name:
/// placed (Normal), moved to another spoke or placed nowhere (Warning).
pub fn events(previous: &[BurstStatus], current: &[BurstStatus]) -> Vec<(String, BurstEvent)> {
    current
        .iter()
        .filter_map(|b| {
            let p = b.placement.as_ref()?;
            let old = previous.iter().find(|o| o.name == b.name);
            let before = old.map_or("", |o| o.cluster.as_str());
            if before == b.cluster && old.is_some_and(|o| o.placement.is_some()) {
                return None;
            }
            let why = if p.skipped.is_empty() {
                String::new()
            } else {
                format!(" (skipped {})", describe_skipped(&p.skipped))
            };
            Some((
                b.name.clone(),
                match (before, b.cluster.as_str()) {
                    (_, "") => (
                        true,
                        "BurstNotPlaced",
                        format!(
                            "burst {}: placed on no candidate yet: {}",
                            b.name,
                            describe_skipped(&p.skipped)
                        ),
                    ),
                    ("", to) => (
                        false,
                        "BurstPlaced",
                        format!("burst {} placed on spoke {to}{why}", b.name),
                    ),
                    (from, to) => (
                        true,
                        "BurstMoved",
                        format!(
                            "burst {} moved from spoke {from} to spoke {to}{why}",
                            b.name
                        ),
                    ),
                },
            ))
        })
        .collect()
}
