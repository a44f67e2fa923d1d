//! The synchronous steps of applying a snapshot, without I/O: [`begin`] and [`settle`]
//! keep what the spoke remembers (`State`) in step with the snapshot, [`probe_leads`] says
//! which lead endpoints to probe, and the helpers say what a refusal or an assignment not
//! fully written is tracked as and how large each running burst is.

use std::collections::{BTreeMap, BTreeSet};

use flux_shared::federation::ownership::{Ownership, SpokeIdentity, ownership};
use flux_shared::federation::proto::{Assignment, Snapshot};
use k8s_openapi::api::batch::v1::Job;
use tracing::info;

use crate::admit::NAME_TAKEN;
use crate::burst_status::{Outcome, Tracked};
use crate::state::State;

/// The keys `snapshot` lists: its assignments and the keys it retains.
pub(super) fn listed(snapshot: &Snapshot) -> BTreeSet<String> {
    snapshot
        .assignments
        .iter()
        .map(|a| a.key.clone())
        .chain(snapshot.retained_keys.iter().cloned())
        .collect()
}

/// Step `relay`, continued: the lead endpoint of every burst that runs here and connects
/// directly is probed ([`crate::lead_reach`]) and watched for fencing ([`crate::fence`]);
/// what is known of bursts the snapshot no longer lists, or of a burst on the path it no
/// longer takes, is forgotten.
pub(super) fn probe_leads(state: &mut State, listed: &BTreeSet<String>) {
    let watched: BTreeMap<String, (String, (String, String))> = state
        .memory
        .applied
        .iter()
        .filter(|(key, a)| listed.contains(*key) && a.realized.relay_service.is_none())
        .filter_map(|(key, a)| {
            let lead = a.assignment.lead_endpoint.as_ref()?;
            let target = crate::lead_reach::target(&lead.address, lead.port);
            let job = (a.realized.namespace.clone(), a.realized.job.clone());
            Some((key.clone(), (target, job)))
        })
        .collect();
    let targets = watched
        .iter()
        .map(|(key, (target, _))| (key.clone(), target.clone()))
        .collect();
    state.lead_reach.retain(listed);
    for (key, a) in &state.memory.applied {
        if listed.contains(key) {
            state
                .lead_reach
                .path(key, a.realized.relay_service.is_some());
        }
    }
    state
        .fencing
        .watch(listed, watched, std::time::Instant::now());
    state.probes.set(targets, &state.lead_reach, &state.fencing);
}

/// Step `begin`: a snapshot of another hub epoch resets what was acknowledged; the snapshot is
/// the one in progress until it is fully applied.
pub(super) fn begin(state: &mut State, snapshot: &Snapshot) {
    if snapshot.hub_epoch != state.epoch {
        if !state.epoch.is_empty() {
            info!(old = %state.epoch, new = %snapshot.hub_epoch, "new hub epoch (the hub restarted)");
        }
        state.epoch = snapshot.hub_epoch.clone();
        state.acked = 0;
        // Versions of another epoch mean nothing in this one.
        for t in &mut state.tracked {
            t.observed_version = 0;
        }
    }
    state.last = Some((snapshot.hub_epoch.clone(), snapshot.version));
    state.complete = false;
    state.pending = Some(snapshot.clone());
    state.current = Some(snapshot.clone());
}

/// Step `settle`: an assignment whose stale objects could not be deleted failed; removed keys
/// are `Deleted` (or still `Deleting`) and forgotten with the keys no longer listed; the
/// blockers of refusals no longer remembered go.
pub(super) fn settle(
    state: &mut State,
    mut tracked: Vec<Tracked>,
    delete_errors: &BTreeMap<String, String>,
    removed: BTreeSet<String>,
    forget: BTreeSet<String>,
    version: u64,
) {
    for t in &mut tracked {
        if let Some(message) = delete_errors.get(&t.key)
            && t.outcome == Outcome::Applied
        {
            t.outcome = Outcome::Failed {
                message: message.clone(),
            };
        }
    }
    for key in removed {
        let outcome = match delete_errors.get(&key) {
            Some(message) => Outcome::Deleting {
                message: message.clone(),
            },
            None => Outcome::Deleted,
        };
        state.memory.applied.remove(&key);
        state.memory.refused.remove(&key);
        tracked.push(Tracked {
            key,
            observed_version: version,
            job: None,
            size: 0,
            outcome,
            admitted_size: None,
        });
    }
    for key in forget {
        state.memory.applied.remove(&key);
        state.memory.refused.remove(&key);
    }
    tracked.sort_by(|a, b| a.key.cmp(&b.key));
    state.tracked = tracked;
    // Blockers matter only while their refusal is remembered.
    let refused = &state.memory.refused;
    state
        .blockers
        .retain(|key, _| refused.get(key).is_some_and(|r| r.reason == NAME_TAKEN));
}

/// How an assignment whose objects were not all written is tracked for the reports:
/// `message` says why, and the version it last applied stays (`previous`: what was tracked
/// before this snapshot), so the hub sees the new one is not applied yet.
pub(super) fn unapplied(
    previous: &BTreeMap<String, Tracked>,
    key: String,
    job: Option<(String, String)>,
    size: i32,
    message: String,
    admitted_size: Option<i32>,
) -> Tracked {
    let observed_version = previous
        .get(&key)
        .filter(|t| matches!(t.outcome, Outcome::Applied | Outcome::Failed { .. }))
        .map_or(0, |t| t.observed_version);
    Tracked {
        key,
        observed_version,
        job,
        size,
        outcome: Outcome::Failed { message },
        admitted_size,
    }
}

/// How a refused assignment is tracked for the reports.
pub(super) fn refused(
    key: &str,
    version: u64,
    assignment: &Assignment,
    reason: &str,
    message: &str,
    admitted_size: Option<i32>,
) -> Tracked {
    Tracked {
        key: key.to_string(),
        observed_version: version,
        job: None,
        size: assignment.burst_size,
        outcome: Outcome::Refused {
            reason: reason.to_string(),
            message: message.to_string(),
        },
        admitted_size,
    }
}

/// How the pods of each of the spoke's own Jobs get the view, as they were made
/// ([`flux_shared::render::live_view_mode`]), by assignment key: they keep their pods.
pub(super) fn live_view_modes(
    jobs: &[Job],
    me: &SpokeIdentity,
) -> BTreeMap<String, flux_shared::api::ViewMode> {
    jobs.iter()
        .filter_map(|j| match ownership(&j.metadata, me) {
            Ownership::Ours { key, .. } => {
                flux_shared::render::live_view_mode(&j.metadata).map(|m| (key.to_string(), m))
            }
            _ => None,
        })
        .collect()
}

/// Brokers each of the spoke's own Jobs runs (its parallelism; 0 when suspended: a burst
/// scaled to 0), by assignment key.
pub(super) fn running_sizes(jobs: &[Job], me: &SpokeIdentity) -> BTreeMap<String, i32> {
    jobs.iter()
        .filter_map(|j| match ownership(&j.metadata, me) {
            Ownership::Ours { key, .. } => {
                let spec = j.spec.as_ref();
                let size = if spec.and_then(|s| s.suspend) == Some(true) {
                    0
                } else {
                    spec.and_then(|s| s.parallelism).unwrap_or(1)
                };
                Some((key.to_string(), size))
            }
            _ => None,
        })
        .collect()
}
