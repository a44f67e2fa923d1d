//! Placement of a burst that names `candidates`: which spoke runs it, decided by a pure
//! function of what the hub knows of each candidate and of where the burst is now.
//!
//! One nomination at a time: a burst is placed on one spoke, the first in the user's order
//! that is connected, may run it (its announced exceptions, its policy's namespaces and
//! ceilings) and has room for its brokers, as it measured them; when none is known to have
//! room, the first that may run it whose room is not known, else the first that may run it
//! (its pods wait there, which is what a cluster autoscaler grows for). It moves on only
//! while none of its brokers runs, when its spoke refuses it, places no broker in time, or
//! goes away before it received the burst; the spoke it leaves confirms the burst gone
//! before the next one gets it (the caller's gate, kept in status across restarts), so that
//! no two clusters start brokers of the same ranks. A burst whose brokers run stays; scaled
//! to 0, it is placed afresh on its next scale-up, and the candidates it left are tried
//! again.
//!
//! Moving a burst on is decided only on what this hub has heard since it started: a
//! refusal or a late placement from its spoke's own report, a spoke gone from a snapshot
//! this hub built. A restarted hub, which has heard nothing yet, keeps every burst where
//! its status says it is.
//!
//! Size: a little over 600 lines, the inputs and the rules of one decision (first place,
//! move on, a lost cluster) read together; its tests are in `placement/tests.rs`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use flux_shared::api::{PlacementCandidate, SkippedCandidate};
use flux_shared::federation::proto::BurstPhase;
use flux_shared::federation::room::{Room, Shape};

/// Reasons a candidate was skipped (`status.bursts[].placement.skipped[].reason`).
pub mod reason {
    /// Not connected to the hub when the burst was placed.
    pub const NOT_CONNECTED: &str = "NotConnected";
    /// Its announced policy does not let a burst have what this one asks for.
    pub const UNSAFE: &str = "Unsafe";
    /// Its policy does not admit the burst's namespace, or that many brokers.
    pub const NOT_ADMITTED: &str = "NotAdmitted";
    /// Its nodes have no room for the burst's brokers now.
    pub const NO_ROOM: &str = "NoRoom";
    /// It did not say what room its nodes have (it could not measure them, or sends no
    /// room): passed over for a candidate known to have room.
    pub const ROOM_UNKNOWN: &str = "RoomUnknown";
    /// It refused the burst (its policy or its checks).
    pub const REFUSED: &str = "Refused";
    /// No broker of the burst was ready there within the placement timeout.
    pub const NOT_PLACED_IN_TIME: &str = "NotPlacedInTime";
    /// It went away before it received the burst.
    pub const WENT_AWAY: &str = "WentAway";
    /// Its cluster is lost: not connected for the grace, and the lead broker sees none of
    /// the burst's brokers online. The burst is placed again, its brokers running or not.
    pub const LOST: &str = "Lost";

    /// Whether a burst that left a candidate for this reason keeps away from it until it
    /// is scaled to 0 (the other reasons are looked at again at each placement).
    pub fn is_remembered(reason: &str) -> bool {
        matches!(reason, REFUSED | NOT_PLACED_IN_TIME | WENT_AWAY | LOST)
    }
}

/// How long the hub waits before it moves a burst on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// From placement to the first broker ready (default 5 minutes: an image pull and a
    /// cluster autoscaler's new node fit in it).
    pub place: Duration,
    /// A spoke that has not received the burst and is not connected for this long is
    /// left (default 30 s: a restarting spoke is back well within it).
    pub away: Duration,
    /// After the hub starts, a candidate that has not connected yet is waited for this
    /// long before a later one is chosen (its spokes reconnect within it).
    pub settle: Duration,
    /// A candidate that connected this recently and has not reported its room yet is
    /// waited for (a spoke reports its room as it connects, then every 10 s).
    pub first_room: Duration,
    /// A spoke not connected for this long, while the lead broker sees none of a burst's
    /// brokers there online, has lost that burst: it is placed again (default 5 minutes).
    pub lost: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            place: Duration::from_secs(300),
            away: Duration::from_secs(30),
            settle: Duration::from_secs(30),
            first_room: Duration::from_secs(15),
            lost: Duration::from_secs(300),
        }
    }
}

/// A candidate spoke as the hub knows it.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    /// Its name.
    pub name: &'a str,
    /// Whether it holds a Watch stream open.
    pub connected: bool,
    /// Its last room report, when it sent one.
    pub room: Option<&'a Room>,
    /// Connected so recently that its first room report may still come (it sends one as
    /// it connects): waited for, as a candidate not connected yet is after a hub start.
    pub room_pending: bool,
    /// Why its announced exceptions do not let the burst run there.
    pub unsafe_because: Option<String>,
    /// Brokers the MiniCluster's other bursts are assigned there.
    pub others: i32,
}

/// The burst to place.
#[derive(Clone, Debug)]
pub struct Ask<'a> {
    /// Its MiniCluster's namespace.
    pub namespace: &'a str,
    /// Brokers it should run.
    pub size: i32,
    /// What each broker's pod asks of its node.
    pub shape: &'a LazyShape<'a>,
}

/// What each broker's pod asks of its node, worked out (the burst's Job rendered) only
/// when a candidate's room is looked at: a burst that stays where it is never needs it.
pub struct LazyShape<'a> {
    cell: std::cell::OnceCell<Shape>,
    make: Box<dyn Fn() -> Shape + 'a>,
}

impl<'a> LazyShape<'a> {
    /// A shape `make` works out when first asked.
    pub fn new(make: impl Fn() -> Shape + 'a) -> LazyShape<'a> {
        LazyShape {
            cell: std::cell::OnceCell::new(),
            make: Box::new(make),
        }
    }

    /// The shape.
    pub fn get(&self) -> &Shape {
        self.cell.get_or_init(&self.make)
    }
}

impl std::fmt::Debug for LazyShape<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyShape")
            .field("shape", &self.cell.get())
            .finish()
    }
}

/// What the spoke a burst is placed on last reported of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reported {
    /// Its phase.
    pub phase: BurstPhase,
    /// Its Job's parallelism.
    pub size: i32,
    /// Brokers ready.
    pub brokers_ready: i32,
    /// Brokers leaving.
    pub brokers_draining: i32,
    /// Why it does not run it as sent, and more.
    pub reason: String,
    /// Details.
    pub message: String,
}

/// Where a burst is placed now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Current {
    /// The spoke.
    pub spoke: String,
    /// Since when.
    pub since: SystemTime,
    /// Whether the spoke may have received the burst (a snapshot with it was sent to it,
    /// or, after a hub restart, not known: assumed).
    pub delivered: bool,
    /// When this hub first sent it the burst: the placement deadline counts from then
    /// when that is later than `since` (a burst that waited for the spoke it left).
    pub sent_at: Option<SystemTime>,
    /// Its report on the burst, once it sent this hub one for the current assignment:
    /// what a decision to move the burst on is made from (never from its absence).
    pub report: Option<Reported>,
    /// While the spoke is not connected: since when.
    pub away_since: Option<SystemTime>,
    /// Whether the burst was to run no broker as of the last decision (scaled to 0).
    pub was_empty: bool,
    /// What the lead broker sees of the burst's brokers, as this hub last read it: since
    /// when every read saw none of them online, and when it was last read; `None` when the
    /// last read saw one, or this hub has not read it.
    pub lead_sees_none: Option<LeadSeesNone>,
}

/// The lead broker seeing none of a burst's brokers online, as this hub read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeadSeesNone {
    /// Since when every read saw none.
    pub since: SystemTime,
    /// The last read.
    pub read_at: SystemTime,
}

/// How recent the lead's last read must be for a cluster to be lost on it: the hub reads
/// it every 2 s while a spoke is away; an older read may be stale.
const FRESH_READ: Duration = Duration::from_secs(10);

/// The decision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// The spoke that runs the burst; `None` while none may.
    pub spoke: Option<String>,
    /// Since when it is placed there.
    pub since: Option<SystemTime>,
    /// The candidates skipped, in preference order.
    pub skipped: Vec<SkippedCandidate>,
    /// When the decision must be made again although nothing else changes (a deadline).
    pub recheck: Option<Duration>,
    /// The spoke it left because that cluster is lost: the burst goes to its new spoke
    /// without waiting for the lost one to confirm it gone (it cannot); the lost spoke
    /// deletes it when it is back, as it is no longer in its snapshot.
    pub lost_from: Option<String>,
}

/// Where each burst that names candidates was placed, by burst name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placed {
    /// Its placement.
    pub bursts: BTreeMap<String, PlacedBurst>,
    /// When to decide again although nothing else changes.
    pub recheck: Option<Duration>,
}

/// One burst's placement.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlacedBurst {
    /// Since when it is placed on its spoke (`None`: placed nowhere).
    pub since: Option<SystemTime>,
    /// The candidates skipped, and why.
    pub skipped: Vec<SkippedCandidate>,
    /// Spokes that still hold it (it moves once they confirm it gone): its assignment is
    /// not sent to its new spoke before.
    pub held_by: Vec<String>,
}

/// The spokes the candidates of burst `key` name, in preference order, each once: a named
/// one as named, then, for a label candidate, every spoke `matching` gives for its labels
/// (the known spokes with all of them) in an order of their own for each burst
/// ([`rendezvous`]): no spoke comes first by its name.
pub fn expand(
    candidates: &[PlacementCandidate],
    key: &str,
    matching: impl Fn(&BTreeMap<String, String>) -> Vec<String>,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in candidates {
        let names = match c {
            PlacementCandidate::Cluster(name) => vec![name.clone()],
            PlacementCandidate::Labels(labels) => {
                let mut names = matching(labels);
                names.sort_by_cached_key(|name| rendezvous(key, name));
                names
            }
        };
        for name in names {
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// Where spoke `spoke` comes among those a label candidate of burst `key` matches: the
/// SHA-256 of both (highest random weight). Bursts spread over the matching spokes, the
/// same order after a restart, and no name sorts first for every burst.
pub fn rendezvous(key: &str, spoke: &str) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(key.as_bytes());
    ctx.update(b"\0");
    ctx.update(spoke.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// Where `ask` runs, among `candidates` (in preference order), given where it is now
/// (`current`), why candidates were skipped when it was placed (`left`: those it left it
/// keeps away from), and, with `settling`,
/// whether the hub started so recently that a candidate not connected may still come.
pub fn place(
    candidates: &[Candidate<'_>],
    ask: &Ask<'_>,
    current: Option<&Current>,
    left: &[SkippedCandidate],
    now: SystemTime,
    timeouts: Timeouts,
    settling: bool,
) -> Placement {
    // Staying, it keeps the reasons it was placed with; moving, only those it left.
    let said = left;
    let mut left: Vec<SkippedCandidate> = left
        .iter()
        .filter(|s| reason::is_remembered(&s.reason))
        .cloned()
        .collect();
    if let Some(cur) = current {
        let r = cur.report.as_ref();
        let runs = r.is_some_and(|r| {
            r.brokers_ready > 0
                || r.brokers_draining > 0
                || matches!(
                    r.phase,
                    BurstPhase::Running | BurstPhase::Succeeded | BurstPhase::Failed
                )
        });
        let idle = cur.was_empty && !runs;
        if ask.size > 0 {
            match lost(cur, now, timeouts) {
                Ok(Some(recheck)) if runs => return stay(cur, said, Some(recheck)),
                Ok(_) => {}
                Err(gone) => {
                    left.retain(|s| s.cluster != cur.spoke);
                    left.push(gone);
                    let mut placement = choose(candidates, ask, current, left, now, settling);
                    placement.lost_from = Some(cur.spoke.clone());
                    return placement;
                }
            }
        }
        if ask.size == 0 {
            // Scaled to 0: it stays, and may go anywhere on its next scale-up.
            return Placement {
                spoke: Some(cur.spoke.clone()),
                since: Some(cur.since),
                ..Placement::default()
            };
        }
        if idle {
            // Scaled up from 0: placed afresh (where it is, if that is still first), its
            // deadline counted from now.
            return choose(candidates, ask, None, Vec::new(), now, settling);
        } else if runs {
            return stay(cur, said, None);
        } else {
            match failure(cur, now, timeouts) {
                Ok(recheck) => return stay(cur, said, recheck),
                Err(failed) => {
                    left.retain(|s| s.cluster != cur.spoke);
                    left.push(failed);
                }
            }
        }
    }
    choose(candidates, ask, current, left, now, settling)
}

/// Whether the cluster the burst is placed on is lost: its spoke not connected for
/// [`Timeouts::lost`], and the lead broker, read by this hub, seeing none of the burst's
/// brokers online for half as long (and still at a fresh read). Both silences count: a
/// spoke whose brokers lose the lead only after its grace began has them fenced
/// (`flux-spoke run --fence-after-seconds`, below half the grace) before the burst is placed
/// elsewhere; a whole cluster lost is placed again one grace after its spoke went, as long
/// as the lead noticed within half of it. `Ok(Some(wait))`: not yet, look again then.
fn lost(
    cur: &Current,
    now: SystemTime,
    timeouts: Timeouts,
) -> Result<Option<Duration>, SkippedCandidate> {
    let Some(away) = cur.away_since else {
        return Ok(None);
    };
    let left = |since: SystemTime| {
        (since + timeouts.lost)
            .duration_since(now)
            .unwrap_or_default()
    };
    let away_left = left(away);
    let Some(none) = cur.lead_sees_none else {
        // Its brokers still serve the lead, or it was not read: looked at again when the
        // lead's next read changes what it sees (which wakes the decision).
        return Ok(Some(away_left.max(Duration::from_secs(2))));
    };
    let none_left = (none.since + timeouts.lost / 2)
        .duration_since(now)
        .unwrap_or_default();
    let wait = away_left.max(none_left);
    if !wait.is_zero() {
        return Ok(Some(wait));
    }
    if now.duration_since(none.read_at).unwrap_or_default() > FRESH_READ {
        return Ok(Some(Duration::from_secs(2)));
    }
    Err(SkippedCandidate {
        cluster: cur.spoke.clone(),
        reason: reason::LOST.to_string(),
        message: format!(
            "not connected for more than {} s, and the lead broker has seen none of the burst's brokers online for {} s",
            timeouts.lost.as_secs(),
            (timeouts.lost / 2).as_secs()
        ),
    })
}

/// The placement that keeps the burst where it is.
fn stay(cur: &Current, left: &[SkippedCandidate], recheck: Option<Duration>) -> Placement {
    Placement {
        spoke: Some(cur.spoke.clone()),
        since: Some(cur.since),
        skipped: left.to_vec(),
        recheck,
        lost_from: None,
    }
}

/// Why the burst must leave the spoke it is placed on (no broker of it runs there), or
/// when to look again.
fn failure(
    cur: &Current,
    now: SystemTime,
    timeouts: Timeouts,
) -> Result<Option<Duration>, SkippedCandidate> {
    let skip = |reason: &str, message: String| SkippedCandidate {
        cluster: cur.spoke.clone(),
        reason: reason.to_string(),
        message,
    };
    if let Some(r) = cur
        .report
        .as_ref()
        .filter(|r| r.phase == BurstPhase::Refused)
    {
        let why = if r.reason.is_empty() {
            "Refused"
        } else {
            &r.reason
        };
        return Err(skip(reason::REFUSED, format!("{why}: {}", r.message)));
    }
    let elapsed = |since: SystemTime| now.duration_since(since).unwrap_or_default();
    if let Some(away) = cur.away_since.filter(|_| !cur.delivered) {
        let left = timeouts.away.checked_sub(elapsed(away)).unwrap_or_default();
        if left.is_zero() {
            return Err(skip(
                reason::WENT_AWAY,
                format!(
                    "not connected for {} s before it received the burst",
                    timeouts.away.as_secs()
                ),
            ));
        }
        return Ok(Some(left));
    }
    if cur.away_since.is_some() {
        // It may hold the burst's objects: it stays until it says otherwise.
        return Ok(None);
    }
    let Some(r) = cur.report.as_ref() else {
        // Nothing heard of the burst from its spoke since this hub started (a restart, a
        // failover, its spoke reconnecting): never moved on silence. Its report, which
        // wakes the next decision, says whether a broker runs there.
        return Ok(None);
    };
    let from = cur.sent_at.map_or(cur.since, |sent| sent.max(cur.since));
    let left = timeouts
        .place
        .checked_sub(elapsed(from))
        .unwrap_or_default();
    if left.is_zero() {
        return Err(skip(
            reason::NOT_PLACED_IN_TIME,
            format!(
                "no broker ready {} s after it was placed there ({} of {} pods' brokers ready)",
                timeouts.place.as_secs(),
                r.brokers_ready,
                r.size
            ),
        ));
    }
    Ok(Some(left))
}

/// The first candidate that may run the burst and has room, else the first that may run
/// it; every candidate before it skipped, with why.
fn choose(
    candidates: &[Candidate<'_>],
    ask: &Ask<'_>,
    current: Option<&Current>,
    left: Vec<SkippedCandidate>,
    now: SystemTime,
    settling: bool,
) -> Placement {
    let mut skipped: Vec<SkippedCandidate> = Vec::new();
    let mut full: Option<usize> = None;
    let mut unknown: Option<usize> = None;
    for c in candidates {
        if let Some(l) = left.iter().find(|l| l.cluster == c.name) {
            skipped.push(l.clone());
            continue;
        }
        let skip = |reason: &str, message: String| SkippedCandidate {
            cluster: c.name.to_string(),
            reason: reason.to_string(),
            message,
        };
        if !c.connected {
            if settling {
                // The hub just started: its spokes are reconnecting. Wait for this one.
                skipped.push(skip(
                    reason::NOT_CONNECTED,
                    "not connected yet since the hub started; waiting for it".to_string(),
                ));
                return unplaced(skipped, left, Some(Duration::from_secs(5)));
            }
            skipped.push(skip(
                reason::NOT_CONNECTED,
                "not connected to the hub".to_string(),
            ));
            continue;
        }
        if let Some(why) = &c.unsafe_because {
            skipped.push(skip(reason::UNSAFE, why.clone()));
            continue;
        }
        let Some(room) = c.room else {
            if c.room_pending {
                skipped.push(skip(
                    reason::ROOM_UNKNOWN,
                    "it just connected; waiting for its first room report".to_string(),
                ));
                return unplaced(skipped, left, Some(Duration::from_secs(5)));
            }
            skipped.push(skip(
                reason::ROOM_UNKNOWN,
                "it has not said what room its nodes have".to_string(),
            ));
            unknown.get_or_insert(skipped.len() - 1);
            continue;
        };
        {
            let p = &room.policy;
            if !p.admits_namespace(ask.namespace) {
                skipped.push(skip(
                    reason::NOT_ADMITTED,
                    format!("its policy does not admit namespace {}", ask.namespace),
                ));
                continue;
            }
            let admitted = p.admits(c.others, 0);
            if admitted < ask.size {
                skipped.push(skip(
                    reason::NOT_ADMITTED,
                    format!(
                        "its policy admits {admitted} of {} brokers now (maxBrokers {}, {} in use; maxBrokersPerMiniCluster {})",
                        ask.size, p.max_brokers, p.brokers, p.max_brokers_per_minicluster
                    ),
                ));
                continue;
            }
            match room.fits(ask.shape.get()) {
                Some(fits) if fits < i64::from(ask.size) => {
                    skipped.push(skip(
                        reason::NO_ROOM,
                        format!("its nodes have room for {fits} of {} brokers", ask.size),
                    ));
                    full.get_or_insert(skipped.len() - 1);
                    continue;
                }
                Some(_) => {}
                None => {
                    skipped.push(skip(
                        reason::ROOM_UNKNOWN,
                        format!(
                            "it could not measure its nodes' room ({})",
                            room.error.as_deref().unwrap_or("no reason given")
                        ),
                    ));
                    unknown.get_or_insert(skipped.len() - 1);
                    continue;
                }
            }
        }
        return placed(c.name, skipped, current, now);
    }
    // None is known to have room: the first whose room is not known (it may have some),
    // else the first that may run it, where its pods wait for room.
    match unknown.or(full) {
        Some(at) => {
            let name = skipped[at].cluster.clone();
            let mut before: Vec<SkippedCandidate> = skipped[..at].to_vec();
            before.extend(
                skipped[at + 1..]
                    .iter()
                    .filter(|s| reason::is_remembered(&s.reason))
                    .cloned(),
            );
            placed(&name, before, current, now)
        }
        None => unplaced(skipped, left, None),
    }
}

fn placed(
    name: &str,
    skipped: Vec<SkippedCandidate>,
    current: Option<&Current>,
    now: SystemTime,
) -> Placement {
    let since = match current {
        Some(cur) if cur.spoke == name => cur.since,
        _ => now,
    };
    Placement {
        spoke: Some(name.to_string()),
        since: Some(since),
        skipped,
        recheck: None,
        lost_from: None,
    }
}

fn unplaced(
    mut skipped: Vec<SkippedCandidate>,
    left: Vec<SkippedCandidate>,
    recheck: Option<Duration>,
) -> Placement {
    // Left candidates that were not looked at still show.
    for l in left {
        if !skipped.iter().any(|s| s.cluster == l.cluster) {
            skipped.push(l);
        }
    }
    Placement {
        spoke: None,
        since: None,
        skipped,
        recheck,
        lost_from: None,
    }
}

#[cfg(test)]
mod tests;
