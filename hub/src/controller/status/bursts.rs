//! `MiniCluster.status.bursts[]`, the `BurstsReady` condition and burst Events, as pure
//! functions of what the registry knows.
//!
//! Size: about 700 of its lines are the tests (each status and Event case, as a pure
//! function's input and output).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use flux_shared::api::{BurstStatus, BurstStatusPhase, LeadBrokerStatus, MiniClusterStatus};
use flux_shared::federation::proto::BurstPhase;
use flux_shared::federation::{LEAD_REACHABLE, LEAD_UNREACHABLE};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::{BURSTS_READY, BurstEvent};
use crate::federation::Disposition;
use crate::federation::placement::Placed;
use crate::federation::registry::{BurstInfo, BurstView};

/// Reason of the Event and of the `BurstsReady` condition when the hub refuses to assign a
/// MiniCluster's bursts because they are unsafe.
pub const UNSAFE_BURST: &str = "UnsafeBurst";

/// Reason when the hub refuses to assign a MiniCluster's bursts because an assignment is
/// too large to send to a spoke.
pub const ASSIGNMENT_TOO_LARGE: &str = "AssignmentTooLarge";

/// Reason when the hub refuses to assign a MiniCluster's bursts because everything it
/// would keep and send for them together is over one MiniCluster's budget.
pub const OVER_BUDGET: &str = "FederationBudgetExceeded";

/// Reason when the hub does not assign a MiniCluster's bursts because the root cluster
/// refuses the spec (its objects are invalid there): an instance whose lead cannot exist
/// gets no burst.
pub const ROOT_REFUSED: &str = "RootRefused";

/// The reason of a refusal message made by the hub (it starts with its reason).
fn refusal_reason(message: Option<&str>) -> &'static str {
    match message {
        Some(m) if m.starts_with(ASSIGNMENT_TOO_LARGE) => ASSIGNMENT_TOO_LARGE,
        Some(m) if m.starts_with(OVER_BUDGET) => OVER_BUDGET,
        Some(m) if m.starts_with(ROOT_REFUSED) => ROOT_REFUSED,
        _ => UNSAFE_BURST,
    }
}

/// The status entries of bursts the hub refuses to assign (`message` says why, starting
/// with [`UNSAFE_BURST`]): phase [`BurstStatusPhase::Invalid`], nothing ready, and whatever
/// `lastSeen` the previous entry had.
pub fn refused(bursts: &[BurstInfo], message: &str, previous: &[BurstStatus]) -> Vec<BurstStatus> {
    bursts
        .iter()
        .map(|b| {
            let old = previous.iter().find(|p| p.name == b.name);
            BurstStatus {
                name: b.name.clone(),
                cluster: b.spoke.clone(),
                path: b.path().map(str::to_string),
                path_reason: b.path_note().0,
                path_message: b.path_note().1,
                phase: BurstStatusPhase::Invalid.to_string(),
                size: b.size,
                max_size: b.max_size,
                last_seen: old.and_then(|o| o.last_seen.clone()),
                message: Some(message.to_string()),
                ..Default::default()
            }
        })
        .collect()
}

/// The status entries of bursts held as they are while their spoke has not said what its
/// policy allows ([`Disposition::Hold`]): an entry the status already
/// has is kept unchanged (a running burst stays Running, no Event); a new one is Pending
/// with `message`.
pub fn held_unknown(
    bursts: &[BurstInfo],
    message: &str,
    previous: &[BurstStatus],
) -> Vec<BurstStatus> {
    bursts
        .iter()
        .map(|b| match previous.iter().find(|p| p.name == b.name) {
            Some(old) => old.clone(),
            None => BurstStatus {
                name: b.name.clone(),
                cluster: b.spoke.clone(),
                path: b.path().map(str::to_string),
                path_reason: b.path_note().0,
                path_message: b.path_note().1,
                phase: BurstStatusPhase::Pending.to_string(),
                size: b.size,
                max_size: b.max_size,
                message: Some(message.to_string()),
                ..Default::default()
            },
        })
        .collect()
}

/// The bursts' part of a MiniCluster's status for one reconcile, built here alone: each
/// declared burst's entry as `disposition` (the decision published, as
/// [`Disposition::summary`] shows it) and the registry after it (`views`) make it, with
/// where placement put it (`placed`); and the Events of what changed since `previous`.
pub fn of_federation(
    disposition: &Disposition,
    bursts: &[BurstInfo],
    views: &[BurstView],
    placed: &Placed,
    seen: &LeadSeen,
    previous: &[BurstStatus],
    now: SystemTime,
) -> (Vec<BurstStatus>, Vec<BurstEvent>) {
    let entries = match disposition {
        // Refused, never half-applied: what spokes already run of an earlier, safe
        // version stays as it is (as for any spec that cannot be applied).
        Disposition::Refuse(why) => refused(bursts, why, previous),
        // Kept as they run (after a hub restart, say) until the spoke says whether its
        // policy allows them; nothing flaps, no Event.
        Disposition::Hold(why) => held_unknown(bursts, why, previous),
        Disposition::Wait(why) => statuses(views, Some(why), seen, previous, now),
        Disposition::Assign(_) => statuses(views, None, seen, previous, now),
    };
    let mut entries = super::placement::with_placement(entries, placed);
    for e in &mut entries {
        let fixed = !placed.bursts.contains_key(&e.name);
        if e.phase == BurstStatusPhase::Unreachable && seen.joined.get(&e.name) == Some(&0) {
            let note = if fixed {
                "; the lead broker sees none of its brokers online, and it names one cluster: it stays there until that cluster is back or it is scaled to 0 (candidates let the hub place it elsewhere)"
            } else {
                "; the lead broker sees none of its brokers online"
            };
            e.message = Some(format!(
                "{}{note}",
                e.message.as_deref().unwrap_or_default()
            ));
        }
    }
    let events = events(previous, &entries);
    (entries, events)
}

/// Fill in the federation's part of a status: the lead broker endpoint, the bursts, and
/// the `BurstsReady` condition (transition time kept while its status does not change;
/// dropped when the MiniCluster has no bursts).
pub fn with_bursts(
    mut status: MiniClusterStatus,
    previous: &MiniClusterStatus,
    lead: Option<LeadBrokerStatus>,
    bursts: Vec<BurstStatus>,
    generation: Option<i64>,
    now: &Time,
) -> MiniClusterStatus {
    status.conditions.retain(|c| c.type_ != BURSTS_READY);
    if let Some((ok, reason, message)) = ready_condition(&bursts) {
        status.conditions.push(super::condition(
            previous,
            generation,
            now,
            BURSTS_READY,
            ok,
            reason,
            message,
        ));
    }
    let running = bursts
        .iter()
        .filter(|b| b.phase == BurstStatusPhase::Running)
        .count();
    status.bursts_running = (!bursts.is_empty()).then(|| format!("{running}/{}", bursts.len()));
    status.lead_broker = lead;
    status.bursts = bursts;
    status
}

/// How long a spoke may fail to reach its own cluster's API server before its bursts show
/// Unknown: a watch that breaks and re-lists at once must not flap the phase.
pub const CLUSTER_GRACE: Duration = Duration::from_secs(10);

/// How long a spoke may be disconnected before its bursts show Unreachable: a hub restart
/// or rollout, or a spoke reconnecting, must not flap every burst's phase (and raise a
/// Warning Event each time).
pub const UNREACHABLE_GRACE: Duration = Duration::from_secs(30);

/// How long a `lastSeen` may lag before it is refreshed (so periodic reports do not cause
/// a status write each).
pub const LAST_SEEN_REFRESH: Duration = Duration::from_secs(300);

fn time(t: SystemTime) -> Option<Time> {
    Timestamp::try_from(t).ok().map(Time)
}

fn to_system(t: &Time) -> SystemTime {
    SystemTime::from(t.0)
}

/// What the lead broker sees of a MiniCluster's bursts, as this hub last read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LeadSeen {
    /// Brokers of each burst (by name) it saw online, at its last read that worked.
    pub joined: BTreeMap<String, i32>,
    /// Why its last read failed.
    pub error: Option<String>,
}

/// One status entry per burst view. `waiting` says why nothing was sent yet (lead
/// endpoint unknown); `seen` is what the lead broker sees of each burst's brokers (a burst
/// is Running once it sees one online); `previous` supplies `lastSeen` values that need no
/// refresh, the entries of bursts whose spoke has been gone less than
/// [`UNREACHABLE_GRACE`], and the joined count of a running burst until this hub first
/// reads the lead (a restart shows no burst going back).
pub fn statuses(
    views: &[BurstView],
    waiting: Option<&str>,
    seen: &LeadSeen,
    previous: &[BurstStatus],
    now: SystemTime,
) -> Vec<BurstStatus> {
    views
        .iter()
        .map(|v| {
            let b = &v.burst;
            let report = v.report.as_ref();
            let reported = report.map(|(r, _)| r);
            let old = previous.iter().find(|p| p.name == b.name);
            // A running burst whose spoke has not reported to this hub yet (it restarted,
            // or was replaced) shows what it last showed, not Dispatched: nothing was sent
            // that it does not run already, as far as anyone knows.
            if let Some(o) = old.filter(|o| {
                reported.is_none()
                    && v.assigned
                    && v.connected
                    && !v.deleting
                    && o.cluster == b.spoke
                    && (o.phase == BurstStatusPhase::Running
                        || o.phase == BurstStatusPhase::Joining)
            }) {
                return BurstStatus {
                    assigned_version: i64::try_from(v.assigned_version).unwrap_or(i64::MAX),
                    ..o.clone()
                };
            }
            let joined = seen.joined.get(&b.name).copied().or_else(|| {
                old.filter(|o| o.cluster == b.spoke && o.phase == BurstStatusPhase::Running)
                    .and_then(|o| o.brokers_joined)
            });
            let (path_reason, path_message) = match b.path_note() {
                (None, None) => old
                    .filter(|o| o.cluster == b.spoke && o.path.as_deref() == b.path())
                    .map_or((None, None), |o| (o.path_reason.clone(), o.path_message.clone())),
                note => note,
            };
            let (phase, message) = if v.deleting {
                (
                    BurstStatusPhase::Deleting,
                    format!("waiting for spoke {} to delete the burst", b.spoke),
                )
            } else if !v.assigned
                && (v.connected || b.path_undecided().is_none() || waiting.is_some())
            {
                // (A burst waiting for the word of a spoke that is not connected says
                // that the spoke is not: a `cluster` typo shows at once.)
                (
                    BurstStatusPhase::Pending,
                    waiting
                        .or(b.path_undecided())
                        .unwrap_or("waiting to be assigned")
                        .to_string(),
                )
            } else if !v.connected {
                let within_grace = v
                    .disconnected_since
                    .and_then(|since| now.duration_since(since).ok())
                    .is_none_or(|gone| gone < UNREACHABLE_GRACE);
                match old {
                    // Briefly gone: keep showing what it last reported.
                    Some(old)
                        if within_grace
                            && old.phase != BurstStatusPhase::Pending
                            && old.phase != BurstStatusPhase::Unreachable =>
                    {
                        return old.clone();
                    }
                    _ => (BurstStatusPhase::Unreachable, not_connected(v)),
                }
            } else if let Some((since, error)) = v
                .cluster_unreachable
                .as_ref()
                .filter(|(since, _)| now.duration_since(*since).unwrap_or_default() >= CLUSTER_GRACE)
            {
                let since = time(*since).map_or_else(|| "?".to_string(), |t| t.0.to_string());
                let last = reported.map_or_else(String::new, |r| {
                    format!(
                        "; last observed {}/{} brokers ready",
                        r.brokers_ready, r.size
                    )
                });
                (
                    BurstStatusPhase::Unknown,
                    format!(
                        "spoke {} cannot reach its cluster's API server since {since}: {error}{last}",
                        b.spoke
                    ),
                )
            } else {
                match reported {
                    Some(r) if r.observed_version >= v.assigned_version => {
                        match BurstPhase::try_from(r.phase).unwrap_or_default() {
                            BurstPhase::Running => match joined {
                                Some(n) if n > 0 => (
                                    BurstStatusPhase::Running,
                                    format!(
                                        "{}/{} brokers ready, {n} joined{}{}",
                                        r.brokers_ready,
                                        r.size,
                                        leaving(r.brokers_draining),
                                        held(r)
                                    ),
                                ),
                                _ => (
                                    BurstStatusPhase::Joining,
                                    format!(
                                        "{}/{} brokers ready; {}{}{}",
                                        r.brokers_ready,
                                        r.size,
                                        not_joined(joined, seen.error.as_deref()),
                                        leaving(r.brokers_draining),
                                        held(r)
                                    ),
                                ),
                            },
                            BurstPhase::Succeeded => {
                                (BurstStatusPhase::Succeeded, "the burst Job completed".to_string())
                            }
                            BurstPhase::Failed => {
                                (BurstStatusPhase::Failed, non_empty(&r.message, "the burst Job failed"))
                            }
                            BurstPhase::Refused => (
                                BurstStatusPhase::Refused,
                                non_empty(&r.message, "the spoke refused the assignment"),
                            ),
                            _ => (
                                BurstStatusPhase::Dispatched,
                                format!(
                                    "brokers starting: {}/{} ready{}{}",
                                    r.brokers_ready,
                                    r.size,
                                    leaving(r.brokers_draining),
                                    held(r)
                                ),
                            ),
                        }
                    }
                    _ => (
                        BurstStatusPhase::Dispatched,
                        format!("sent to spoke {}; waiting for it to apply", b.spoke),
                    ),
                }
            };
            // Brokers that cannot reach their lead wait for ever: said while the burst runs.
            let unreached = matches!(
                phase,
                BurstStatusPhase::Running | BurstStatusPhase::Joining | BurstStatusPhase::Dispatched
            )
                .then(|| reported.and_then(|r| lead_unreached(r, b)))
                .flatten();
            let seen = report.map(|(_, at)| *at).or(v.spoke_last_seen);
            let last_seen = match (seen, old.and_then(|o| o.last_seen.as_ref())) {
                (Some(now), Some(kept))
                    if now.duration_since(to_system(kept)).unwrap_or_default()
                        < LAST_SEEN_REFRESH =>
                {
                    Some(kept.clone())
                }
                (Some(now), _) => time(now),
                (None, kept) => kept.cloned(),
            };
            BurstStatus {
                name: b.name.clone(),
                cluster: b.spoke.clone(),
                path: b.path().map(str::to_string),
                path_reason,
                path_message,
                phase: phase.to_string(),
                size: b.size,
                max_size: b.max_size,
                brokers_ready: if v.deleting {
                    0
                } else {
                    reported.map_or(0, |r| r.brokers_ready)
                },
                brokers_joined: joined,
                brokers_draining: if v.deleting {
                    0
                } else {
                    reported.map_or(0, |r| r.brokers_draining)
                },
                assigned_version: i64::try_from(v.assigned_version).unwrap_or(i64::MAX),
                acknowledged_version: reported
                    .map_or(0, |r| i64::try_from(r.observed_version).unwrap_or(i64::MAX)),
                last_seen,
                message: Some(match &unreached {
                    Some(note) => format!("{message}; {note}"),
                    None => message,
                }),
                reason: (phase == BurstStatusPhase::Refused
                    || matches!(
                        phase,
                        BurstStatusPhase::Running
                            | BurstStatusPhase::Joining
                            | BurstStatusPhase::Dispatched
                    ))
                .then(|| reported.and_then(spoke_reason))
                .flatten()
                .or_else(|| unreached.is_some().then(|| LEAD_UNREACHABLE.to_string())),
                admitted_size: if v.deleting || !v.assigned {
                    None
                } else {
                    reported.and_then(|r| r.admitted_size)
                },
                placement: None,
            }
        })
        .collect()
}

/// Why a burst whose brokers are ready is not Running: the lead broker sees none of them
/// online (`joined` 0), or this hub could not read what it sees.
fn not_joined(joined: Option<i32>, error: Option<&str>) -> String {
    match (joined, error) {
        (Some(_), None) => "the lead broker sees none of them online yet".to_string(),
        (Some(_), Some(e)) => format!(
            "the lead broker saw none of them online when last read, and cannot be read now: {e}"
        ),
        (None, Some(e)) => {
            format!("not known whether they joined: the lead broker's view cannot be read: {e}")
        }
        (None, None) => {
            "not known yet whether they joined: the hub has not read the lead broker's view yet"
                .to_string()
        }
    }
}

/// What a spoke found when its burst's brokers' path to the lead broker failed
/// ([`LEAD_REACHABLE`] false), and what to do about it; `None` while it works or is not
/// known.
fn lead_unreached(
    r: &flux_shared::federation::proto::AssignmentStatus,
    b: &BurstInfo,
) -> Option<String> {
    let c = r
        .conditions
        .iter()
        .find(|c| c.r#type == LEAD_REACHABLE && c.status == "False")?;
    let advice = if b.relayed {
        "the hub relays the burst's connections to the lead broker's Service in this cluster: is the lead broker pod running?"
    } else {
        "open that port on the root cluster's nodes to the burst cluster's pods, or set relay: true on the burst to reach the lead through the spoke's own connection to the hub"
    };
    Some(format!(
        "its brokers cannot reach the lead broker ({LEAD_UNREACHABLE}): {}; {advice}",
        c.message
    ))
}

/// The reason a spoke gives for not running a burst as sent: its `reason`, or, from a
/// spoke that predates the field, the reason of its refusal's `ConfigIdentical` condition.
fn spoke_reason(r: &flux_shared::federation::proto::AssignmentStatus) -> Option<String> {
    if !r.reason.is_empty() {
        return Some(r.reason.clone());
    }
    (BurstPhase::try_from(r.phase) == Ok(BurstPhase::Refused)).then(|| {
        r.conditions
            .iter()
            .find(|c| c.r#type == "ConfigIdentical" && !c.reason.is_empty())
            .map(|c| c.reason.clone())
            .unwrap_or_else(|| "Refused".to_string())
    })
}

/// The status message's note on a burst whose spoke keeps it as it runs because its
/// policy no longer admits it as sent; empty otherwise.
fn held(r: &flux_shared::federation::proto::AssignmentStatus) -> String {
    if r.reason.is_empty() {
        String::new()
    } else {
        format!("; not admitted as sent ({}): {}", r.reason, r.message)
    }
}

fn non_empty(s: &str, default: &str) -> String {
    if s.is_empty() { default } else { s }.to_string()
}

/// The `BurstsReady` condition: `(true, reason, message)` when every burst runs.
pub fn ready_condition(bursts: &[BurstStatus]) -> Option<(bool, &'static str, String)> {
    if bursts.is_empty() {
        return None;
    }
    let running = bursts
        .iter()
        .filter(|b| b.phase == BurstStatusPhase::Running)
        .count();
    if running == bursts.len() {
        return Some((
            true,
            "BurstsRunning",
            format!("{running}/{running} bursts running"),
        ));
    }
    let first = |p: BurstStatusPhase| bursts.iter().find(|b| b.phase == p);
    let (reason, culprit) = if let Some(b) = first(BurstStatusPhase::Invalid) {
        (refusal_reason(b.message.as_deref()), b)
    } else if let Some(b) = first(BurstStatusPhase::Refused) {
        ("BurstRefused", b)
    } else if let Some(b) = first(BurstStatusPhase::Failed) {
        ("BurstFailed", b)
    } else if let Some(b) = first(BurstStatusPhase::Unreachable) {
        ("SpokeUnreachable", b)
    } else if let Some(b) = first(BurstStatusPhase::Unknown) {
        ("SpokeClusterUnreachable", b)
    } else if let Some(b) = first(BurstStatusPhase::Deleting) {
        ("Deleting", b)
    } else if let Some(b) = first(BurstStatusPhase::Pending) {
        ("WaitingForLeadBroker", b)
    } else if let Some(b) = first(BurstStatusPhase::Succeeded) {
        ("BurstFinished", b)
    } else {
        (
            "BurstsStarting",
            bursts
                .iter()
                .find(|b| b.phase != BurstStatusPhase::Running)
                .unwrap_or(&bursts[0]),
        )
    };
    Some((
        false,
        reason,
        format!(
            "{running}/{} bursts running; {} ({}): {}",
            bursts.len(),
            culprit.name,
            culprit.cluster,
            culprit.message.as_deref().unwrap_or(&culprit.phase)
        ),
    ))
}

/// When the status must be computed again although nothing will notify the controller:
/// when the first grace runs out, of a disconnected spoke ([`UNREACHABLE_GRACE`]) or of a
/// spoke that cannot reach its cluster ([`CLUSTER_GRACE`]).
pub fn recheck_after(views: &[BurstView], now: SystemTime) -> Option<Duration> {
    let left = |since: SystemTime, grace: Duration| {
        let gone = now.duration_since(since).unwrap_or_default();
        grace.checked_sub(gone).filter(|left| !left.is_zero())
    };
    views
        .iter()
        .filter(|v| !v.deleting && v.assigned)
        .filter_map(|v| {
            if v.connected {
                let (since, _) = v.cluster_unreachable.as_ref()?;
                left(*since, CLUSTER_GRACE)
            } else {
                left(v.disconnected_since?, UNREACHABLE_GRACE)
            }
        })
        .min()
        .map(|left| left + Duration::from_millis(100))
}

/// Events for bursts whose phase changed. Bursts the hub refuses to assign share one
/// Event (the refusal is the MiniCluster's, not each burst's).
pub fn events(previous: &[BurstStatus], current: &[BurstStatus]) -> Vec<BurstEvent> {
    let placed = super::placement::events(previous, current);
    // A burst placed and sent in the same pass: its BurstPlaced Event says both.
    let placed_names: Vec<String> = placed
        .iter()
        .filter(|(_, (_, reason, _))| *reason == "BurstPlaced")
        .map(|(name, _)| name.clone())
        .collect();
    let just_placed = |name: &str| placed_names.iter().any(|n| n == name);
    let newly_refused: Vec<&BurstStatus> = current
        .iter()
        .filter(|b| {
            b.phase == BurstStatusPhase::Invalid
                && previous
                    .iter()
                    .find(|p| p.name == b.name)
                    .is_none_or(|p| p.phase != BurstStatusPhase::Invalid)
        })
        .collect();
    let refusal = newly_refused.first().map(|first| {
        let names: Vec<&str> = newly_refused.iter().map(|b| b.name.as_str()).collect();
        (
            true,
            refusal_reason(first.message.as_deref()),
            format!(
                "bursts not assigned ({}): {}",
                names.join(", "),
                first.message.as_deref().unwrap_or("")
            ),
        )
    });
    current
        .iter()
        .filter_map(|b| {
            let old = previous.iter().find(|p| p.name == b.name);
            let before = old.map(|p| p.phase.as_str());
            let what = format!("burst {} on spoke {}", b.name, b.cluster);
            let message = b.message.as_deref().unwrap_or("");
            if b.reason.as_deref() == Some(LEAD_UNREACHABLE)
                && old.is_none_or(|o| o.reason.as_deref() != Some(LEAD_UNREACHABLE))
            {
                return Some((true, LEAD_UNREACHABLE, format!("{what}: {message}")));
            }
            if before == Some(b.phase.as_str()) {
                // Same phase, but the spoke now keeps it as it runs, refusing what was sent.
                return match &b.reason {
                    Some(reason) if old.is_some_and(|o| o.reason.as_ref() != Some(reason)) => {
                        Some((
                            true,
                            "BurstRefused",
                            format!("{what}: not admitted as sent ({reason}): {message}"),
                        ))
                    }
                    _ => None,
                };
            }
            let Ok(phase) = b.phase.parse() else {
                return None;
            };
            match phase {
                BurstStatusPhase::Dispatched if just_placed(&b.name) => None,
                BurstStatusPhase::Dispatched
                    if before.is_none_or(|p| p == BurstStatusPhase::Pending) =>
                {
                    Some((
                        false,
                        "BurstDispatched",
                        format!("{what}: sent to the spoke"),
                    ))
                }
                BurstStatusPhase::Running => {
                    Some((false, "BurstRunning", format!("{what}: {message}")))
                }
                BurstStatusPhase::Succeeded => {
                    Some((false, "BurstCompleted", format!("{what}: {message}")))
                }
                BurstStatusPhase::Failed => {
                    Some((true, "BurstFailed", format!("{what}: {message}")))
                }
                BurstStatusPhase::Refused => Some((
                    true,
                    "BurstRefused",
                    format!(
                        "{what}: refused by the spoke ({}): {message}",
                        b.reason.as_deref().unwrap_or("Refused")
                    ),
                )),
                BurstStatusPhase::Unreachable => {
                    Some((true, "SpokeUnreachable", format!("{what}: {message}")))
                }
                BurstStatusPhase::Unknown => Some((
                    true,
                    "SpokeClusterUnreachable",
                    format!("{what}: {message}"),
                )),
                _ => None,
            }
        })
        .chain(refusal)
        .chain(placed.into_iter().map(|(_, event)| event))
        .collect()
}

/// Why a burst's spoke is unreachable: gone since a time, or (never heard of since this
/// hub started) perhaps a `cluster` that names no spoke, with the spokes that are there.
fn not_connected(v: &BurstView) -> String {
    let spoke = &v.burst.spoke;
    match (v.spoke_last_seen, v.disconnected_since.and_then(time)) {
        (Some(_), Some(since)) => {
            format!(
                "spoke {spoke} is not connected to the hub (since {})",
                since.0
            )
        }
        (Some(_), None) => format!("spoke {spoke} is not connected to the hub"),
        (None, _) => {
            let connected = if v.connected_spokes.is_empty() {
                "no spoke is connected".to_string()
            } else {
                format!("connected spokes: {}", v.connected_spokes.join(", "))
            };
            format!(
                "no spoke named {spoke} has connected to this hub ({connected}); check the burst's cluster and that spoke {spoke} runs"
            )
        }
    }
}

/// The status message's note on `n` brokers leaving (they drain their Flux jobs first);
/// empty for none.
pub fn leaving(n: i32) -> String {
    match n {
        0 => String::new(),
        1 => "; 1 broker leaving, draining its Flux jobs first".to_string(),
        n => format!("; {n} brokers leaving, draining their Flux jobs first"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::federation::registry::BurstInfo;
    use flux_shared::federation::proto::AssignmentStatus;

    fn view() -> BurstView {
        BurstView {
            burst: BurstInfo {
                skipped: Vec::new(),
                key: flux_shared::federation::BurstKey::new("ns", "m", "b"),
                name: "b".into(),
                spoke: "gke".into(),
                size: 3,
                max_size: 4,
                relayed: false,
                route: None,
            },
            connected: true,
            assigned: true,
            assigned_version: 4,
            report: None,
            spoke_last_seen: None,
            deleting: false,
            disconnected_since: None,
            cluster_unreachable: None,
            connected_spokes: Vec::new(),
        }
    }

    fn reported(
        phase: BurstPhase,
        observed: u64,
        ready: i32,
        at: SystemTime,
    ) -> Option<(AssignmentStatus, SystemTime)> {
        Some((
            AssignmentStatus {
                key: "ns/m/b".into(),
                observed_version: observed,
                phase: phase as i32,
                brokers_ready: ready,
                size: 3,
                message: "boom".into(),
                ..Default::default()
            },
            at,
        ))
    }

    /// The lead sees burst `b`'s brokers online.
    fn seen() -> LeadSeen {
        LeadSeen {
            joined: [("b".to_string(), 3)].into(),
            error: None,
        }
    }

    fn one(v: BurstView) -> BurstStatus {
        statuses(
            &[v],
            Some("waiting for the lead broker Service's NodePort"),
            &seen(),
            &[],
            SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000),
        )
        .remove(0)
    }

    #[test]
    fn a_burst_is_running_only_once_the_lead_sees_its_brokers() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let ready = BurstView {
            report: reported(BurstPhase::Running, 4, 3, t),
            ..view()
        };
        let with = |joined: Option<i32>, error: Option<&str>, previous: &[BurstStatus]| {
            let seen = LeadSeen {
                joined: joined.map(|n| ("b".to_string(), n)).into_iter().collect(),
                error: error.map(str::to_string),
            };
            statuses(std::slice::from_ref(&ready), None, &seen, previous, t).remove(0)
        };
        let none = with(Some(0), None, &[]);
        assert_eq!(
            (
                none.phase.as_str(),
                none.brokers_joined,
                none.message.as_deref()
            ),
            (
                "Joining",
                Some(0),
                Some("3/3 brokers ready; the lead broker sees none of them online yet")
            )
        );
        let unknown = with(None, Some("connection refused"), &[]);
        assert_eq!(unknown.phase, BurstStatusPhase::Joining);
        assert!(
            unknown
                .message
                .as_deref()
                .is_some_and(|m| m.contains("cannot be read: connection refused")),
            "{unknown:?}"
        );
        let joined = with(Some(2), None, &[]);
        assert_eq!(
            (joined.phase.as_str(), joined.brokers_joined),
            ("Running", Some(2))
        );
        // A restarted hub has not read the lead yet: a burst shown running stays so, with
        // what it last showed joined, rather than going back.
        let restarted = with(None, None, std::slice::from_ref(&joined));
        assert_eq!(
            (restarted.phase.as_str(), restarted.brokers_joined),
            ("Running", Some(2))
        );
        // But a burst that was not running does not become so.
        let restarted = with(None, None, std::slice::from_ref(&none));
        assert_eq!(
            (restarted.phase.as_str(), restarted.brokers_joined),
            ("Joining", None)
        );
        // Before its spoke reports to the restarted hub, a running burst stays as it was
        // shown (not Dispatched again), with the snapshot version it is sent now.
        let unreported = statuses(
            std::slice::from_ref(&view()),
            None,
            &LeadSeen::default(),
            std::slice::from_ref(&joined),
            t,
        )
        .remove(0);
        assert_eq!(
            (
                unreported.phase.as_str(),
                unreported.brokers_ready,
                unreported.brokers_joined,
                unreported.assigned_version
            ),
            ("Running", 3, Some(2), 4)
        );
        // A burst that was only sent is still only sent.
        let sent = one(view());
        let unreported = statuses(
            std::slice::from_ref(&view()),
            None,
            &LeadSeen::default(),
            std::slice::from_ref(&sent),
            t,
        )
        .remove(0);
        assert_eq!(unreported.phase, BurstStatusPhase::Dispatched);
        assert_eq!(ready_condition(&[none]).map(|c| c.0), Some(false));
    }

    #[test]
    fn a_lost_burst_with_one_cluster_says_it_stays() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let gone = BurstView {
            connected: false,
            disconnected_since: Some(t - Duration::from_secs(600)),
            spoke_last_seen: Some(t - Duration::from_secs(600)),
            ..view()
        };
        let none = LeadSeen {
            joined: [("b".to_string(), 0)].into(),
            error: None,
        };
        let (entries, _) = of_federation(
            &Disposition::Assign(Vec::new()),
            &[],
            std::slice::from_ref(&gone),
            &Placed::default(),
            &none,
            &[],
            t,
        );
        let message = entries[0].message.clone().unwrap_or_default();
        assert_eq!(entries[0].phase, BurstStatusPhase::Unreachable);
        assert!(
            message.contains("names one cluster: it stays there"),
            "{message}"
        );
        // Its brokers still serve the lead: nothing more to say.
        let (entries, _) = of_federation(
            &Disposition::Assign(Vec::new()),
            &[],
            &[gone],
            &Placed::default(),
            &seen(),
            &[],
            t,
        );
        let message = entries[0].message.clone().unwrap_or_default();
        assert!(!message.contains("stays there"), "{message}");
    }

    #[test]
    fn the_path_chosen_and_why_are_in_the_status_and_an_undecided_one_waits() {
        use crate::federation::path::{Choice, Path};
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut chosen = view();
        chosen.burst.relayed = true;
        chosen.burst.route = Some(Choice::Chosen(Path {
            relay: true,
            reason: "SpokeDeclared".into(),
            message: "declared".into(),
        }));
        let entry = statuses(&[chosen.clone()], None, &seen(), &[], t).remove(0);
        assert_eq!(
            (
                entry.path.as_deref(),
                entry.path_reason.as_deref(),
                entry.path_message.as_deref()
            ),
            (Some("Relay"), Some("SpokeDeclared"), Some("declared"))
        );
        // A pass that chose nothing (a burst built from a status) keeps what was said.
        let mut kept = chosen;
        kept.burst.route = None;
        let again = statuses(&[kept], None, &seen(), std::slice::from_ref(&entry), t).remove(0);
        assert_eq!(again.path_reason.as_deref(), Some("SpokeDeclared"));
        let mut waiting = view();
        waiting.assigned = false;
        waiting.burst.route = Some(Choice::Undecided("waiting for spoke gke".into()));
        // Its spoke not connected (never, say: a typo in `cluster`): that is what it says.
        let gone = BurstView {
            connected: false,
            ..waiting.clone()
        };
        let entry = statuses(&[gone], None, &seen(), &[], t).remove(0);
        assert_eq!(entry.phase, BurstStatusPhase::Unreachable);
        assert!(
            entry
                .message
                .as_deref()
                .is_some_and(|m| m.contains("no spoke named gke has connected")),
            "{entry:?}"
        );
        let entry = statuses(&[waiting], None, &seen(), &[], t).remove(0);
        assert_eq!(
            (
                entry.phase.as_str(),
                entry.path.as_deref(),
                entry.message.as_deref()
            ),
            ("Pending", None, Some("waiting for spoke gke"))
        );
    }

    #[test]
    fn a_lead_its_brokers_cannot_reach_is_said_with_what_to_do_and_one_event() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let unreached = |relayed: bool, status: &str| {
            let mut v = view();
            v.burst.relayed = relayed;
            v.report = reported(BurstPhase::Running, 4, 3, t);
            if let Some((r, _)) = v.report.as_mut() {
                r.conditions
                    .push(flux_shared::federation::proto::Condition {
                        r#type: LEAD_REACHABLE.into(),
                        status: status.into(),
                        reason: LEAD_UNREACHABLE.into(),
                        message: "connecting to 10.0.0.1:31000 from the spoke's pod: refused"
                            .into(),
                        last_transition_unix_millis: 1,
                    });
            }
            one(v)
        };
        let direct = unreached(false, "False");
        assert_eq!(direct.phase, BurstStatusPhase::Running);
        assert_eq!(direct.reason.as_deref(), Some(LEAD_UNREACHABLE));
        let message = direct.message.clone().unwrap_or_default();
        assert!(message.contains("10.0.0.1:31000"), "{message}");
        assert!(message.contains("set relay: true"), "{message}");
        let relayed = unreached(true, "False").message.unwrap_or_default();
        assert!(
            relayed.contains("is the lead broker pod running"),
            "{relayed}"
        );
        let fine = unreached(false, "True");
        assert_eq!(fine.reason, None);

        // One Warning when it starts, none while it lasts, none for a working one.
        let events_of = |previous: &[BurstStatus], now: &BurstStatus| {
            events(previous, std::slice::from_ref(now))
                .into_iter()
                .filter(|e| e.1 == LEAD_UNREACHABLE)
                .count()
        };
        assert_eq!(events_of(std::slice::from_ref(&fine), &direct), 1);
        assert_eq!(events_of(std::slice::from_ref(&direct), &direct), 0);
        assert_eq!(events_of(std::slice::from_ref(&direct), &fine), 0);
    }

    #[test]
    fn phases() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(
            one(BurstView {
                assigned: false,
                ..view()
            })
            .phase,
            BurstStatusPhase::Pending
        );
        assert_eq!(
            one(BurstView {
                assigned: false,
                ..view()
            })
            .message
            .as_deref(),
            Some("waiting for the lead broker Service's NodePort")
        );
        assert_eq!(
            one(BurstView {
                connected: false,
                ..view()
            })
            .phase,
            BurstStatusPhase::Unreachable
        );
        assert_eq!(one(view()).phase, BurstStatusPhase::Dispatched);
        // A report for an older version does not count yet.
        let old = BurstView {
            report: reported(BurstPhase::Running, 3, 3, t),
            ..view()
        };
        assert_eq!(one(old).phase, BurstStatusPhase::Dispatched);
        let running = one(BurstView {
            report: reported(BurstPhase::Running, 4, 3, t),
            ..view()
        });
        assert_eq!(
            (
                running.phase.as_str(),
                running.brokers_ready,
                running.acknowledged_version
            ),
            (BurstStatusPhase::Running.as_str(), 3, 4)
        );
        assert_eq!(running.last_seen, time(t));
        // A shrink: the leaving brokers drain their Flux jobs first, and the status says so.
        let mut shrinking = reported(BurstPhase::Running, 4, 1, t);
        if let Some((r, _)) = shrinking.as_mut() {
            (r.size, r.brokers_draining) = (1, 2);
        }
        let shrinking = one(BurstView {
            report: shrinking,
            ..view()
        });
        assert_eq!(
            (shrinking.brokers_draining, shrinking.message.as_deref()),
            (
                2,
                Some(
                    "1/1 brokers ready, 3 joined; 2 brokers leaving, draining their Flux jobs first"
                )
            )
        );
        let invalid = one(BurstView {
            report: reported(BurstPhase::Refused, 4, 0, t),
            ..view()
        });
        // Refused by a spoke that predates the reason field: the generic reason.
        assert_eq!(
            (
                invalid.phase.as_str(),
                invalid.message.as_deref(),
                invalid.reason.as_deref()
            ),
            (
                BurstStatusPhase::Refused.as_str(),
                Some("boom"),
                Some("Refused")
            )
        );
        let mut policy = reported(BurstPhase::Refused, 4, 0, t);
        if let Some((r, _)) = policy.as_mut() {
            r.reason = "NoPolicy".into();
            r.admitted_size = Some(0);
        }
        let refused = one(BurstView {
            report: policy,
            ..view()
        });
        assert_eq!(
            (refused.reason.as_deref(), refused.admitted_size),
            (Some("NoPolicy"), Some(0))
        );
        // Held as it runs: Running, with the reason and the spoke's message.
        let mut held = reported(BurstPhase::Running, 4, 2, t);
        if let Some((r, _)) = held.as_mut() {
            r.reason = "TooManyBrokers".into();
            r.message = "3 brokers asked, 2 admitted now".into();
            r.admitted_size = Some(2);
        }
        let held = one(BurstView {
            report: held,
            ..view()
        });
        assert_eq!(held.phase, BurstStatusPhase::Running);
        assert_eq!(held.reason.as_deref(), Some("TooManyBrokers"));
        assert!(
            held.message.as_deref().is_some_and(
                |m| m.contains("not admitted as sent (TooManyBrokers): 3 brokers asked")
            ),
            "{:?}",
            held.message
        );
        assert_eq!(
            one(BurstView {
                deleting: true,
                ..view()
            })
            .phase,
            BurstStatusPhase::Deleting
        );
    }

    #[test]
    fn an_unreachable_spoke_says_whether_it_ever_came() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let never = one(BurstView {
            connected: false,
            disconnected_since: Some(t),
            connected_spokes: vec!["gke-east".into(), "kind".into()],
            ..view()
        });
        assert_eq!(
            (never.phase.as_str(), never.message.as_deref()),
            (
                BurstStatusPhase::Unreachable.as_str(),
                Some(
                    "no spoke named gke has connected to this hub (connected spokes: gke-east, kind); check the burst's cluster and that spoke gke runs"
                )
            )
        );
        let none = one(BurstView {
            connected: false,
            disconnected_since: Some(t),
            ..view()
        });
        assert!(
            none.message
                .as_deref()
                .is_some_and(|m| m.contains("(no spoke is connected)")),
            "{none:?}"
        );
        let gone = one(BurstView {
            connected: false,
            disconnected_since: Some(t),
            spoke_last_seen: Some(t),
            ..view()
        });
        assert_eq!(
            gone.message.as_deref(),
            Some("spoke gke is not connected to the hub (since 1970-01-12T13:46:40Z)")
        );
    }

    #[test]
    fn last_seen_is_refreshed_only_every_few_minutes() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let first = statuses(
            &[BurstView {
                report: reported(BurstPhase::Running, 4, 3, t0),
                ..view()
            }],
            None,
            &seen(),
            &[],
            t0,
        );
        let soon = statuses(
            &[BurstView {
                report: reported(BurstPhase::Running, 4, 3, t0 + Duration::from_secs(60)),
                ..view()
            }],
            None,
            &seen(),
            &first,
            t0,
        );
        assert_eq!(
            soon, first,
            "a periodic report one minute later writes nothing"
        );
        let later = statuses(
            &[BurstView {
                report: reported(BurstPhase::Running, 4, 3, t0 + LAST_SEEN_REFRESH),
                ..view()
            }],
            None,
            &seen(),
            &first,
            t0,
        );
        assert_ne!(later[0].last_seen, first[0].last_seen);
    }

    #[test]
    fn condition_and_events() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let running = statuses(
            &[BurstView {
                report: reported(BurstPhase::Running, 4, 3, t),
                ..view()
            }],
            None,
            &seen(),
            &[],
            t,
        );
        assert!(ready_condition(&running).unwrap().0);
        // Gone for a moment (a hub rollout, a reconnect): the last status stays, and the
        // controller is told when to look again.
        let gone = BurstView {
            connected: false,
            disconnected_since: Some(t),
            ..view()
        };
        let brief = statuses(
            std::slice::from_ref(&gone),
            None,
            &seen(),
            &running,
            t + Duration::from_secs(5),
        );
        assert_eq!(brief, running);
        assert_eq!(
            recheck_after(std::slice::from_ref(&gone), t + Duration::from_secs(5)),
            Some(UNREACHABLE_GRACE - Duration::from_secs(5) + Duration::from_millis(100))
        );
        let unreachable = statuses(
            std::slice::from_ref(&gone),
            None,
            &seen(),
            &running,
            t + UNREACHABLE_GRACE,
        );
        assert_eq!(
            recheck_after(std::slice::from_ref(&gone), t + UNREACHABLE_GRACE),
            None
        );
        let (ok, reason, message) = ready_condition(&unreachable).unwrap();
        assert_eq!((ok, reason), (false, "SpokeUnreachable"));
        assert!(message.contains("b (gke)"), "{message}");
        assert_eq!(events(&running, &unreachable)[0].1, "SpokeUnreachable");
        assert!(events(&running, &running).is_empty());
        let dispatched = statuses(&[view()], None, &seen(), &[], t);
        assert_eq!(events(&[], &dispatched)[0].1, "BurstDispatched");
        assert_eq!(events(&dispatched, &running)[0].1, "BurstRunning");
        assert!(ready_condition(&[]).is_none());
    }

    /// A spoke's refusal is one Warning Event with its reason, and the condition's; a
    /// running burst its spoke no longer admits as sent gets one Event too, once.
    #[test]
    fn spoke_refusals_are_one_event_each_with_the_reason() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let with = |phase: BurstPhase, reason: &str| {
            let mut r = reported(phase, 4, 2, t);
            if let Some((s, _)) = r.as_mut() {
                s.reason = reason.into();
            }
            statuses(
                &[BurstView {
                    report: r,
                    ..view()
                }],
                None,
                &seen(),
                &[],
                t,
            )
        };
        let dispatched = statuses(&[view()], None, &seen(), &[], t);
        let refused = with(BurstPhase::Refused, "NamespaceNotAllowed");
        let e = events(&dispatched, &refused);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].0, "a Warning");
        assert_eq!(e[0].1, "BurstRefused");
        assert!(
            e[0].2
                .contains("refused by the spoke (NamespaceNotAllowed): boom"),
            "{}",
            e[0].2
        );
        assert!(events(&refused, &refused).is_empty(), "said once");
        let (ok, reason, _) = ready_condition(&refused).unwrap();
        assert_eq!((ok, reason), (false, "BurstRefused"));

        let running = with(BurstPhase::Running, "");
        let held = with(BurstPhase::Running, "TooManyBrokers");
        let e = events(&running, &held);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].1, "BurstRefused");
        assert!(
            e[0].2.contains("not admitted as sent (TooManyBrokers)"),
            "{}",
            e[0].2
        );
        assert!(events(&held, &held).is_empty(), "said once");
        assert!(
            events(&held, &running).is_empty(),
            "admitted again: no warning"
        );
    }

    /// A connected spoke that cannot reach its own API server: after CLUSTER_GRACE the
    /// burst is Unknown, saying since when and why, with a Warning Event and a requeue
    /// until then; once the spoke reaches it again the burst runs again.
    #[test]
    fn a_spoke_that_cannot_reach_its_cluster() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let running = statuses(
            &[BurstView {
                report: reported(BurstPhase::Running, 4, 3, t),
                ..view()
            }],
            None,
            &seen(),
            &[],
            t,
        );
        let blind = BurstView {
            report: reported(BurstPhase::Running, 4, 3, t),
            cluster_unreachable: Some((t, "connection refused".into())),
            ..view()
        };
        let early = statuses(
            std::slice::from_ref(&blind),
            None,
            &seen(),
            &running,
            t + Duration::from_secs(3),
        );
        assert_eq!(early[0].phase, BurstStatusPhase::Running);
        assert_eq!(
            recheck_after(std::slice::from_ref(&blind), t + Duration::from_secs(3)),
            Some(CLUSTER_GRACE - Duration::from_secs(3) + Duration::from_millis(100))
        );
        let unknown = statuses(
            std::slice::from_ref(&blind),
            None,
            &seen(),
            &running,
            t + CLUSTER_GRACE,
        );
        assert_eq!(unknown[0].phase, BurstStatusPhase::Unknown);
        assert_eq!(
            unknown[0].message.as_deref(),
            Some(
                "spoke gke cannot reach its cluster's API server since 2023-11-14T22:13:20Z: connection refused; last observed 3/3 brokers ready"
            )
        );
        assert_eq!(
            recheck_after(std::slice::from_ref(&blind), t + CLUSTER_GRACE),
            None
        );
        let (ok, reason, _) = ready_condition(&unknown).unwrap();
        assert_eq!((ok, reason), (false, "SpokeClusterUnreachable"));
        let event = &events(&running, &unknown)[0];
        assert_eq!((event.0, event.1), (true, "SpokeClusterUnreachable"));
        let back = statuses(
            &[BurstView {
                report: reported(BurstPhase::Running, 4, 3, t),
                ..view()
            }],
            None,
            &seen(),
            &unknown,
            t + CLUSTER_GRACE * 2,
        );
        assert_eq!(back[0].phase, BurstStatusPhase::Running);
        assert_eq!(events(&unknown, &back)[0].1, "BurstRunning");
    }

    #[test]
    fn refused_bursts_show_invalid_with_one_event_and_the_condition_says_why() {
        let info = |name: &str| BurstInfo {
            skipped: Vec::new(),
            key: flux_shared::federation::BurstKey::new("ns", "m", name),
            name: name.into(),
            spoke: "gke".into(),
            size: 2,
            max_size: 2,
            relayed: false,
            route: None,
        };
        let message = "UnsafeBurst: the hub does not assign this MiniCluster's bursts: spec.pod.hostPID: must not be true in a burst";
        let t = Time(Timestamp::from_second(1_000_000).unwrap());
        let previous = vec![BurstStatus {
            name: "a".into(),
            cluster: "gke".into(),
            phase: BurstStatusPhase::Running.into(),
            brokers_ready: 2,
            last_seen: Some(t.clone()),
            ..Default::default()
        }];
        let now = refused(&[info("a"), info("b")], message, &previous);
        assert_eq!(now.len(), 2);
        for b in &now {
            assert_eq!(b.phase, BurstStatusPhase::Invalid);
            assert_eq!(b.message.as_deref(), Some(message));
            assert_eq!(b.brokers_ready, 0);
        }
        assert_eq!(now[0].last_seen, Some(t));
        assert_eq!(now[1].last_seen, None);

        let events = events(&previous, &now);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!((events[0].0, events[0].1), (true, UNSAFE_BURST));
        assert!(events[0].2.contains("(a, b)"), "{}", events[0].2);
        assert!(events[0].2.contains("spec.pod.hostPID"), "{}", events[0].2);
        // Still refused: no new Event.
        assert!(super::events(&now, &now).is_empty());

        let (ok, reason, text) = ready_condition(&now).unwrap();
        assert_eq!((ok, reason), (false, UNSAFE_BURST));
        assert!(text.contains("spec.pod.hostPID"), "{text}");
    }

    #[test]
    fn an_assignment_too_large_is_its_own_reason() {
        let info = BurstInfo {
            skipped: Vec::new(),
            key: flux_shared::federation::BurstKey::new("ns", "m", "a"),
            name: "a".into(),
            spoke: "gke".into(),
            size: 2,
            max_size: 2,
            relayed: false,
            route: None,
        };
        let message = "AssignmentTooLarge: not assigned, the assignment of burst a is 3500 KiB";
        let now = refused(&[info], message, &[]);
        let events = events(&[], &now);
        assert_eq!((events[0].0, events[0].1), (true, ASSIGNMENT_TOO_LARGE));
        let (ok, reason, _) = ready_condition(&now).unwrap();
        assert_eq!((ok, reason), (false, ASSIGNMENT_TOO_LARGE));
    }
}
