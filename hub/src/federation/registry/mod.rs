//! The hub's in-memory index of who runs what: every spoke's assignments and snapshot
//! version, what each spoke last reported, and which bursts are waiting for a spoke to
//! confirm their deletion.
//!
//! Nothing here is durable on purpose: the controller rebuilds the index from MiniCluster
//! objects and their Secrets after a restart ([`Registry::set_primed`] opens the gRPC
//! service only then), and a new random epoch tells spokes that versions restarted.
//!
//! Every method takes one short lock and never awaits while holding it. Each spoke has a
//! `tokio::sync::watch` channel of its snapshot version: a stream wakes on a new version
//! and builds the snapshot message from the registry only then, so a slow spoke cannot
//! stall the controller, only ever sees the newest snapshot, and the registry holds each
//! assignment once (as the message the spoke receives: built once, sent many times).
//!
//! Size: one lock-protected structure and the methods the controller calls; splitting it
//! would put the invariants every method keeps (above) away from the code keeping them.
//! This file is the index and what the controller asks of it; what the gRPC services
//! serve from it, built as wire messages, is in [`wire`] (the [`Served`] trait).
//!
//! [`Served`]: crate::federation::served::Served

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use flux_shared::api::SkippedCandidate;
use flux_shared::federation::assignment::SpokeAssignment;
use flux_shared::federation::policy::Announced;
use flux_shared::federation::proto::{self, AssignmentStatus, BurstPhase};
use flux_shared::federation::room::Room;
use flux_shared::federation::{BurstKey, McKey};
use flux_shared::plan::Endpoint;
use flux_shared::validate::Exceptions;
use tokio::sync::{mpsc, watch};
use tracing::warn;

use super::Disposition;

pub mod report_bounds;
mod wire;

/// Whose word a spoke's labels are, which bursts' `candidates` select spokes by.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum LabelGrants {
    /// The labels each spoke announces (a hub without certificates, where any caller may
    /// name itself any spoke anyway; tests).
    #[default]
    Announced,
    /// The root owner's grants are not read yet: no spoke is let in before they are.
    NotYet,
    /// The labels the root's owner granted, by spoke name (a spoke not listed has none).
    Granted(BTreeMap<String, BTreeMap<String, String>>),
}

/// What the registry knows of a MiniCluster besides its assignments (for admin clients).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct McInfo {
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// `status.phase` of the root Job.
    pub phase: String,
    /// Root brokers.
    pub size: i32,
    /// Root brokers ready.
    pub brokers_ready: i32,
    /// The lead broker's external endpoint, once known.
    pub lead: Option<Endpoint>,
    /// `metadata.creationTimestamp`, Unix milliseconds (0 if unknown).
    pub created_unix_millis: i64,
    /// Where relayed burst connections reach the lead broker inside the root cluster (its
    /// Service's cluster address), once known.
    pub relay_to: Option<Endpoint>,
}

/// What the hub wrote of one burst in its MiniCluster's status (for admin clients).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BurstShown {
    /// `status.bursts[].phase`.
    pub phase: String,
    /// `status.bursts[].path`.
    pub path: Option<String>,
    /// `status.bursts[].pathReason`.
    pub path_reason: Option<String>,
    /// `status.bursts[].brokersJoined`.
    pub brokers_joined: Option<i32>,
}

/// One burst of a MiniCluster as declared in its spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BurstInfo {
    /// Assignment key (its wire form is `Assignment.key`).
    pub key: BurstKey,
    /// Burst name.
    pub name: String,
    /// Spoke that runs it.
    pub spoke: String,
    /// Brokers.
    pub size: i32,
    /// Hosts declared (the most brokers it can run).
    pub max_size: i32,
    /// Whether its brokers reach their lead through its spoke (`Spoke.Relay`).
    pub relayed: bool,
    /// For a burst that names candidates: those it was not placed on, and why (`spoke` is
    /// empty while it is placed nowhere).
    pub skipped: Vec<SkippedCandidate>,
    /// Its path as this pass chose it, and why (`None` where no path was chosen: placed
    /// nowhere, or built from a status).
    pub route: Option<crate::federation::path::Choice>,
}

impl BurstInfo {
    /// Its `status.bursts[].path`; `None` while its path is not chosen.
    pub fn path(&self) -> Option<&'static str> {
        if matches!(
            self.route,
            Some(crate::federation::path::Choice::Undecided(_))
        ) {
            return None;
        }
        Some(if self.relayed {
            flux_shared::api::burst_path::RELAY
        } else {
            flux_shared::api::burst_path::DIRECT
        })
    }

    /// Its `status.bursts[].pathReason` and `pathMessage`, when this pass chose its path.
    pub fn path_note(&self) -> (Option<String>, Option<String>) {
        match &self.route {
            Some(crate::federation::path::Choice::Chosen(p)) => {
                (Some(p.reason.clone()), Some(p.message.clone()))
            }
            _ => (None, None),
        }
    }

    /// Why nothing is sent for it yet because its path is not chosen.
    pub fn path_undecided(&self) -> Option<&str> {
        match &self.route {
            Some(crate::federation::path::Choice::Undecided(why)) => Some(why),
            _ => None,
        }
    }
}

/// What the registry knows about one burst, for the MiniCluster's status.
#[derive(Clone, Debug, PartialEq)]
pub struct BurstView {
    /// The declared burst.
    pub burst: BurstInfo,
    /// Whether its spoke holds a Watch stream open.
    pub connected: bool,
    /// Whether the assignment is currently listed in the spoke's snapshot.
    pub assigned: bool,
    /// Snapshot version in which the assignment last changed (0 if not assigned).
    pub assigned_version: u64,
    /// The spoke's last report on this burst in this hub epoch, and when it came.
    pub report: Option<(AssignmentStatus, SystemTime)>,
    /// When the hub last heard from the spoke at all.
    pub spoke_last_seen: Option<SystemTime>,
    /// The MiniCluster is being deleted and the spoke has not confirmed the burst gone.
    pub deleting: bool,
    /// While the spoke is not connected: since when (its last stream ended, or this hub
    /// started if it has not connected since).
    pub disconnected_since: Option<SystemTime>,
    /// While the spoke reports that it cannot reach its own cluster's API server: since
    /// when, and the error it gave.
    pub cluster_unreachable: Option<(SystemTime, String)>,
    /// While the spoke is not connected: the spokes that are (to tell a typo in
    /// `cluster`, or a spoke never installed, from one that went away).
    pub connected_spokes: Vec<String>,
}

/// Whether each burst of a deleted MiniCluster is confirmed gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeletionProgress {
    /// Burst name.
    pub burst: String,
    /// Spoke.
    pub spoke: String,
    /// The spoke has applied a snapshot without the burst (or reported it deleted).
    pub confirmed: bool,
    /// The spoke holds a Watch stream open (one that is away prunes the burst when it
    /// connects again: its first snapshot no longer lists it).
    pub connected: bool,
}

#[derive(Debug)]
struct Slot {
    assignment: proto::Assignment,
    version: u64,
    /// When a snapshot with this burst was first built for the spoke's stream (kept when
    /// the assignment changes): the placement deadline counts from then.
    sent_at: Option<SystemTime>,
    /// When a snapshot first carried it with brokers (kept when the assignment changes),
    /// until its first broker is reported ready (`flux_hub_burst_first_broker_ready`).
    dispatched: Dispatched,
}

/// Where a burst is on its way to its first ready broker, as this process saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Dispatched {
    /// Not yet sent with brokers.
    #[default]
    NotYet,
    /// Sent with brokers at this instant; none reported ready since.
    At(Instant),
    /// A broker was reported ready (or the burst was running before this process knew
    /// it): nothing more to measure.
    Done,
}

/// The most snapshot versions of one spoke whose apply time is kept while it has not
/// acknowledged them: beyond, the newest entry stands for the versions after it (its time
/// is theirs, a little early), so a spoke away for long costs a fixed amount.
const PENDING_VERSIONS: usize = 32;

#[derive(Debug)]
struct SpokeState {
    version: u64,
    assignments: BTreeMap<BurstKey, Slot>,
    /// Keys removed from the snapshot, with the version that removed them.
    withdrawn: BTreeMap<BurstKey, u64>,
    /// Keys the spoke must leave alone (see `Snapshot.retained_keys`).
    retained: BTreeSet<BurstKey>,
    tx: watch::Sender<u64>,
    connections: usize,
    /// Watch streams refused because it held one already.
    refused_streams: u64,
    /// When the certificate it last connected with expires, Unix seconds.
    certificate_not_after: Option<i64>,
    /// The key identifier of the CA that issued that certificate (empty: unknown).
    certificate_issuer: String,
    last_seen: Option<SystemTime>,
    /// When its last stream ended (`None` while connected or never connected).
    disconnected_at: Option<SystemTime>,
    /// When its current stream began (`None` while not connected).
    connected_at: Option<SystemTime>,
    acknowledged: u64,
    spoke_version: String,
    /// The protocol revision it declared when it last connected (0: not since the start).
    protocol_revision: u32,
    /// Why its calls were last refused for what it speaks, and when; cleared when it
    /// connects.
    refusal: Option<(SystemTime, String)>,
    reports: HashMap<BurstKey, (AssignmentStatus, SystemTime)>,
    /// Its last report's `cluster_access`, while it says it cannot reach its cluster.
    cluster_unreachable: Option<(SystemTime, String)>,
    /// What its policy lets bursts have beyond the baseline, as it last announced; `None`
    /// until it connects to this hub.
    exceptions: Option<Announced>,
    /// Its labels, as it last announced.
    labels: BTreeMap<String, String>,
    /// Its last room report (checked).
    room: Option<Room>,
    /// How its brokers reach the root's nodes, as its last report said; `None` before its
    /// first report to this hub.
    reach: Option<crate::federation::path::Reach>,
    /// The newest snapshot version built for its stream: assignments of this version or
    /// older may have reached it.
    sent: u64,
    /// Versions it has not acknowledged yet, oldest first, with when each was made (at
    /// most [`PENDING_VERSIONS`]).
    pending: VecDeque<(u64, Instant)>,
}

impl SpokeState {
    fn new(epoch: &str) -> SpokeState {
        let _ = epoch;
        let (tx, _) = watch::channel(1);
        SpokeState {
            version: 1,
            assignments: BTreeMap::new(),
            withdrawn: BTreeMap::new(),
            retained: BTreeSet::new(),
            tx,
            connections: 0,
            refused_streams: 0,
            certificate_not_after: None,
            certificate_issuer: String::new(),
            last_seen: None,
            disconnected_at: None,
            connected_at: None,
            acknowledged: 0,
            spoke_version: String::new(),
            protocol_revision: 0,
            refusal: None,
            reports: HashMap::new(),
            cluster_unreachable: None,
            exceptions: None,
            labels: BTreeMap::new(),
            room: None,
            reach: None,
            sent: 0,
            pending: VecDeque::new(),
        }
    }

    /// Version `version` was made now: kept until acknowledged.
    fn made(&mut self, version: u64) {
        if self.pending.len() < PENDING_VERSIONS {
            self.pending.push_back((version, Instant::now()));
        } else if let Some(newest) = self.pending.back_mut() {
            newest.0 = version;
        }
    }

    /// The spoke acknowledged every version up to `version`: how long the oldest of them
    /// waited, if any did.
    fn acknowledged_up_to(&mut self, version: u64) -> Option<std::time::Duration> {
        let oldest = self.pending.front().filter(|(v, _)| *v <= version)?.1;
        while self.pending.front().is_some_and(|(v, _)| *v <= version) {
            self.pending.pop_front();
        }
        Some(oldest.elapsed())
    }

    fn confirmed_gone(&self, key: &BurstKey) -> bool {
        match self.withdrawn.get(key) {
            None => !self.assignments.contains_key(key),
            Some(version) => {
                self.acknowledged >= *version
                    || self
                        .reports
                        .get(key)
                        .is_some_and(|(s, _)| s.phase == BurstPhase::Deleted as i32)
            }
        }
    }
}

#[derive(Debug)]
struct McEntry {
    info: McInfo,
    bursts: Vec<BurstInfo>,
    deleting: bool,
    /// Each burst as the status the hub last wrote shows it, by burst name
    /// ([`Registry::show`]).
    shown: BTreeMap<String, BurstShown>,
}

#[derive(Debug, Default)]
struct Inner {
    spokes: BTreeMap<String, SpokeState>,
    miniclusters: BTreeMap<McKey, McEntry>,
    admin_version: u64,
    /// MiniClusters with a burst placed nowhere: woken when a spoke connects or its room
    /// changes.
    waiting: BTreeSet<McKey>,
    /// Whose word the spokes' labels are.
    grants: LabelGrants,
    /// When the hub's certificate and the first of the CAs it trusts expire, Unix
    /// milliseconds (0: unknown).
    hub_certificates: (i64, i64),
}

impl Inner {
    /// The labels spoke `name` is selected by: those granted it, or, with
    /// [`LabelGrants::Announced`], those it announced.
    fn labels_of<'a>(
        &'a self,
        name: &str,
        state: &'a SpokeState,
    ) -> Option<&'a BTreeMap<String, String>> {
        match &self.grants {
            LabelGrants::Announced => Some(&state.labels),
            LabelGrants::NotYet => None,
            LabelGrants::Granted(granted) => granted.get(name),
        }
    }

    /// The labels spoke `name` announced that are not granted it (ignored).
    fn ignored_labels(&self, name: &str, state: &SpokeState) -> BTreeMap<String, String> {
        match &self.grants {
            LabelGrants::Announced => BTreeMap::new(),
            LabelGrants::NotYet => state.labels.clone(),
            LabelGrants::Granted(granted) => flux_shared::federation::spoke_labels::ungranted(
                &state.labels,
                granted.get(name).unwrap_or(&BTreeMap::new()),
            ),
        }
    }
}

/// What the placement of a burst needs to know of one candidate spoke.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpokeFacts {
    /// Whether it holds a Watch stream open.
    pub connected: bool,
    /// While it is not connected: since when (its last stream ended, or this hub started).
    pub away_since: Option<SystemTime>,
    /// While it is connected: since when.
    pub connected_since: Option<SystemTime>,
    /// What bursts of the namespace asked for may have beyond the baseline there; `None`
    /// until it connects to this hub.
    pub exceptions: Option<Exceptions>,
    /// Its last room report.
    pub room: Option<Room>,
}

/// The index. Share it as `Arc<Registry>` between the controller and the gRPC services.
#[derive(Debug)]
pub struct Registry {
    epoch: String,
    started: SystemTime,
    inner: Mutex<Inner>,
    admin: watch::Sender<u64>,
    primed: watch::Sender<bool>,
    changes: mpsc::UnboundedSender<McKey>,
    changes_rx: Mutex<Option<mpsc::UnboundedReceiver<McKey>>>,
}

/// Keeps a spoke marked connected while alive.
#[derive(Debug)]
pub struct ConnectionGuard {
    registry: Arc<Registry>,
    spoke: String,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        let registry = self.registry.clone();
        let mut inner = registry.lock();
        if let Some(state) = inner.spokes.get_mut(&self.spoke) {
            state.connections = state.connections.saturating_sub(1);
            if state.connections == 0 {
                state.disconnected_at = Some(SystemTime::now());
                state.connected_at = None;
                let affected = affected_by_spoke(&inner, &self.spoke);
                registry.bump_admin(&mut inner);
                drop(inner);
                for mc in affected {
                    let _ = registry.changes.send(mc);
                }
            }
        }
    }
}

fn affected_by_spoke(inner: &Inner, spoke: &str) -> Vec<McKey> {
    inner
        .miniclusters
        .iter()
        .filter(|(k, e)| e.bursts.iter().any(|b| b.spoke == spoke) || inner.waiting.contains(*k))
        .map(|(k, _)| k.clone())
        .collect()
}

/// Milliseconds since the Unix epoch (0 for `None`).
pub fn unix_millis(t: Option<SystemTime>) -> i64 {
    t.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Registry {
    /// An empty, unprimed registry with a random epoch.
    pub fn new() -> Arc<Registry> {
        Registry::with_epoch(format!("{:016x}", rand::random::<u64>()))
    }

    /// An empty, unprimed registry with the given epoch (tests).
    pub fn with_epoch(epoch: String) -> Arc<Registry> {
        let (changes, rx) = mpsc::unbounded_channel();
        Arc::new(Registry {
            epoch,
            started: SystemTime::now(),
            inner: Mutex::new(Inner::default()),
            admin: watch::channel(0).0,
            primed: watch::channel(false).0,
            changes,
            changes_rx: Mutex::new(Some(rx)),
        })
    }

    /// This hub incarnation's epoch.
    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The state stays consistent across a panicking holder: every method completes
        // its updates before anything that could panic.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The MiniClusters whose burst status changed (reports, spokes connecting or going
    /// away): the controller reconciles them. Can be taken once.
    pub fn take_changes(&self) -> Option<mpsc::UnboundedReceiver<McKey>> {
        self.changes_rx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Mark the index as rebuilt from the API server: spokes may now receive snapshots.
    pub fn set_primed(&self) {
        self.primed.send_replace(true);
    }

    /// Whether [`Registry::set_primed`] was called.
    pub fn is_primed(&self) -> bool {
        *self.primed.borrow()
    }

    fn bump_admin(&self, inner: &mut Inner) {
        inner.admin_version += 1;
        self.admin.send_replace(inner.admin_version);
    }

    /// Take one reconcile's decision for MiniCluster `mc`: its declared `bursts`, and
    /// what to do with them ([`Disposition`]): sent ([`Registry::set`]), kept as sent
    /// ([`Registry::keep`]) or retained as they run ([`Registry::retain`]).
    pub fn record(
        &self,
        mc: &McKey,
        info: McInfo,
        bursts: Vec<BurstInfo>,
        disposition: Disposition,
    ) {
        match disposition {
            Disposition::Assign(assignments) => self.set(mc, info, bursts, assignments),
            Disposition::Wait(_) => self.keep(mc, info, bursts),
            Disposition::Refuse(_) | Disposition::Hold(_) => self.retain(mc, &bursts),
        }
    }

    /// Record a MiniCluster's declared bursts and the assignments to send (empty while
    /// the lead endpoint is unknown). Spokes whose set changes get a new snapshot;
    /// assignments of this MiniCluster that are no longer listed are withdrawn.
    pub fn set(
        &self,
        mc: &McKey,
        info: McInfo,
        bursts: Vec<BurstInfo>,
        assignments: Vec<SpokeAssignment>,
    ) {
        let mut inner = self.lock();
        let mut admin_changed = match inner.miniclusters.get(mc) {
            Some(e) => e.info != info || e.bursts != bursts || e.deleting,
            None => true,
        };
        let previous_keys = self.keys_of(&inner, mc);
        let mut wanted: BTreeMap<String, BTreeMap<BurstKey, proto::Assignment>> = BTreeMap::new();
        for sa in assignments {
            // Keyed as the spoke will name it in its reports: by the wire key it is sent
            // with. The hub builds it from names Kubernetes checked, so it always parses.
            let key = match sa.assignment.key.parse::<BurstKey>() {
                Ok(key) => key,
                Err(e) => {
                    warn!(minicluster = %mc, error = %e, "not assigning a burst whose key is no burst key");
                    continue;
                }
            };
            wanted
                .entry(sa.spoke)
                .or_default()
                .insert(key, sa.assignment);
        }
        let spokes: BTreeSet<String> = previous_keys
            .iter()
            .map(|(spoke, _)| spoke.clone())
            .chain(wanted.keys().cloned())
            .chain(
                inner
                    .spokes
                    .iter()
                    .filter(|(_, s)| s.retained.iter().any(|k| k.is_of(mc)))
                    .map(|(name, _)| name.clone()),
            )
            .collect();
        for spoke in spokes {
            let mut want = wanted.remove(&spoke).unwrap_or_default();
            let state = inner
                .spokes
                .entry(spoke.clone())
                .or_insert_with(|| SpokeState::new(&self.epoch));
            let next = state.version + 1;
            let before = state.retained.len();
            state.retained.retain(|k| !k.is_of(mc));
            let mut changed = before != state.retained.len();
            let stale: Vec<BurstKey> = previous_keys
                .iter()
                .filter(|(s, k)| *s == spoke && !want.contains_key(k))
                .map(|(_, k)| k.clone())
                .collect();
            for key in stale {
                if state.assignments.remove(&key).is_some() {
                    state.withdrawn.insert(key, next);
                    changed = true;
                }
            }
            for (key, assignment) in std::mem::take(&mut want) {
                state.withdrawn.remove(&key);
                let same = state
                    .assignments
                    .get(&key)
                    .is_some_and(|slot| slot.assignment == assignment);
                if !same {
                    let (sent_at, dispatched) = state
                        .assignments
                        .get(&key)
                        .map_or((None, Dispatched::NotYet), |slot| {
                            (slot.sent_at, slot.dispatched)
                        });
                    state.assignments.insert(
                        key,
                        Slot {
                            assignment,
                            version: next,
                            sent_at,
                            dispatched,
                        },
                    );
                    changed = true;
                }
            }
            if changed {
                self.publish(state, next);
                admin_changed = true;
            }
        }
        let entry = inner.miniclusters.entry(mc.clone()).or_insert(McEntry {
            info: McInfo::default(),
            bursts: Vec::new(),
            deleting: false,
            shown: BTreeMap::new(),
        });
        entry.info = info;
        entry.bursts = bursts;
        entry.deleting = false;
        if admin_changed {
            self.bump_admin(&mut inner);
        }
    }

    /// Each burst of MiniCluster `mc` as the status just computed shows it (for admin
    /// clients): called once the status is, which comes after the pass's decision was
    /// recorded. Ignored for a MiniCluster the registry does not hold.
    pub fn show(&self, mc: &McKey, shown: BTreeMap<String, BurstShown>) {
        let mut inner = self.lock();
        let Some(entry) = inner.miniclusters.get_mut(mc) else {
            return;
        };
        if entry.shown != shown {
            entry.shown = shown;
            self.bump_admin(&mut inner);
        }
    }

    /// The MiniCluster exists but its assignments cannot be computed now (its spec is
    /// refused or invalid). Bursts it has no assignment for are retained: their spokes
    /// keep whatever they run. Bursts already assigned keep their assignment.
    pub fn retain(&self, mc: &McKey, bursts: &[BurstInfo]) {
        let mut inner = self.lock();
        let mut changed = false;
        for b in bursts.iter().filter(|b| !b.spoke.is_empty()) {
            let state = inner
                .spokes
                .entry(b.spoke.clone())
                .or_insert_with(|| SpokeState::new(&self.epoch));
            if !state.assignments.contains_key(&b.key) && state.retained.insert(b.key.clone()) {
                let next = state.version + 1;
                self.publish(state, next);
                changed = true;
            }
        }
        if !inner.miniclusters.contains_key(mc) {
            inner.miniclusters.insert(
                mc.clone(),
                McEntry {
                    info: McInfo::default(),
                    bursts: bursts.to_vec(),
                    deleting: false,
                    shown: BTreeMap::new(),
                },
            );
            changed = true;
        }
        if changed {
            self.bump_admin(&mut inner);
        }
    }

    /// The MiniCluster's assignments cannot be built now (its lead broker's endpoint or
    /// its certificate is not known, as after a restart or while the lead Service is
    /// re-created), though nothing says its bursts should stop: each burst of `bursts`
    /// keeps the assignment it has (its last known endpoint and certificate), and one
    /// without is retained, so that its spoke keeps what it runs. Only bursts that are no
    /// longer in `bursts` (removed from the spec) are withdrawn.
    pub fn keep(&self, mc: &McKey, info: McInfo, bursts: Vec<BurstInfo>) {
        let kept: Vec<SpokeAssignment> = {
            let inner = self.lock();
            self.keys_of(&inner, mc)
                .into_iter()
                .filter(|(spoke, key)| bursts.iter().any(|b| &b.key == key && &b.spoke == spoke))
                .filter_map(|(spoke, key)| {
                    let slot = inner.spokes.get(&spoke)?.assignments.get(&key)?;
                    Some(SpokeAssignment {
                        spoke,
                        assignment: slot.assignment.clone(),
                    })
                })
                .collect()
        };
        let listed = bursts.clone();
        self.set(mc, info, bursts, kept);
        self.retain(mc, &listed);
    }

    /// Every (spoke, key) currently assigned for `mc`.
    fn keys_of(&self, inner: &Inner, mc: &McKey) -> Vec<(String, BurstKey)> {
        inner
            .spokes
            .iter()
            .flat_map(|(spoke, state)| {
                state
                    .assignments
                    .keys()
                    .filter(|k| k.is_of(mc))
                    .map(move |k| (spoke.clone(), k.clone()))
            })
            .collect()
    }

    fn publish(&self, state: &mut SpokeState, version: u64) {
        state.version = version;
        state.made(version);
        state.tx.send_replace(version);
    }

    /// The MiniCluster is being deleted: withdraw every burst (also bursts the registry
    /// never assigned, e.g. after a hub restart, so each spoke gets a newer snapshot to
    /// acknowledge), and remember that their deletion must be confirmed.
    pub fn withdraw(&self, mc: &McKey, info: McInfo, bursts: Vec<BurstInfo>) {
        let mut inner = self.lock();
        if inner.miniclusters.get(mc).is_some_and(|e| e.deleting) {
            return;
        }
        let mut by_spoke: BTreeMap<String, Vec<BurstKey>> = BTreeMap::new();
        for b in bursts.iter().filter(|b| !b.spoke.is_empty()) {
            by_spoke
                .entry(b.spoke.clone())
                .or_default()
                .push(b.key.clone());
        }
        for (spoke, key) in self.keys_of(&inner, mc) {
            by_spoke.entry(spoke).or_default().push(key);
        }
        for (spoke, keys) in by_spoke {
            let state = inner
                .spokes
                .entry(spoke)
                .or_insert_with(|| SpokeState::new(&self.epoch));
            let next = state.version + 1;
            for key in keys {
                state.assignments.remove(&key);
                state.retained.remove(&key);
                state.withdrawn.entry(key).or_insert(next);
            }
            self.publish(state, next);
        }
        inner.miniclusters.insert(
            mc.clone(),
            McEntry {
                info,
                bursts,
                deleting: true,
                shown: BTreeMap::new(),
            },
        );
        self.bump_admin(&mut inner);
    }

    /// After a restart, burst `key` was moving when the last pass wrote its status: each
    /// spoke of `spokes` (those its status says may still hold it) is withdrawn from, so
    /// that its next snapshot leaves the burst out and the burst reaches its new spoke only
    /// once they confirm it gone ([`Registry::held_elsewhere`]), as before the restart.
    pub fn hold_for_move(&self, key: &BurstKey, spokes: &[String]) {
        if spokes.is_empty() {
            return;
        }
        let mut inner = self.lock();
        for spoke in spokes {
            let state = inner
                .spokes
                .entry(spoke.clone())
                .or_insert_with(|| SpokeState::new(&self.epoch));
            if state.assignments.contains_key(key) || state.withdrawn.contains_key(key) {
                continue;
            }
            state.retained.remove(key);
            let next = state.version + 1;
            state.withdrawn.insert(key.clone(), next);
            self.publish(state, next);
        }
        self.bump_admin(&mut inner);
    }

    /// Whether each burst of a withdrawn MiniCluster is confirmed gone.
    pub fn deletion_progress(&self, mc: &McKey) -> Vec<DeletionProgress> {
        let inner = self.lock();
        let Some(entry) = inner.miniclusters.get(mc) else {
            return Vec::new();
        };
        entry
            .bursts
            .iter()
            .map(|b| DeletionProgress {
                burst: b.name.clone(),
                spoke: b.spoke.clone(),
                confirmed: inner
                    .spokes
                    .get(&b.spoke)
                    .is_none_or(|s| s.confirmed_gone(&b.key)),
                connected: inner
                    .spokes
                    .get(&b.spoke)
                    .is_some_and(|s| s.connections > 0),
            })
            .collect()
    }

    /// Whether any burst withdrawn from `mc` (deleted from its spec, or the MiniCluster
    /// deleted) still waits for its spoke's confirmation.
    pub fn has_unconfirmed_withdrawals(&self, mc: &McKey) -> bool {
        let inner = self.lock();
        inner.spokes.values().any(|s| {
            s.withdrawn
                .keys()
                .any(|k| k.is_of(mc) && !s.confirmed_gone(k))
        })
    }

    /// Drop everything about a MiniCluster whose deletion is complete (finalizer
    /// released): it disappears from admin listings.
    pub fn forget(&self, mc: &McKey) {
        let mut inner = self.lock();
        let mut changed = inner.miniclusters.remove(mc).is_some();
        inner.waiting.remove(mc);
        for state in inner.spokes.values_mut() {
            let before = state.withdrawn.len() + state.reports.len();
            state.withdrawn.retain(|k, _| !k.is_of(mc));
            state.reports.retain(|k, _| !k.is_of(mc));
            changed |= before != state.withdrawn.len() + state.reports.len();
        }
        if changed {
            self.bump_admin(&mut inner);
        }
    }

    /// The bursts of a MiniCluster as the registry sees them, in spec order.
    pub fn bursts(&self, mc: &McKey) -> Vec<BurstView> {
        let inner = self.lock();
        let Some(entry) = inner.miniclusters.get(mc) else {
            return Vec::new();
        };
        // Listed only for a burst whose spoke is away, which is rare: built on demand.
        let connected_spokes = std::cell::OnceCell::new();
        let list_connected = || -> Vec<String> {
            connected_spokes
                .get_or_init(|| {
                    inner
                        .spokes
                        .iter()
                        .filter(|(_, s)| s.connections > 0)
                        .map(|(name, _)| name.clone())
                        .collect::<Vec<String>>()
                })
                .clone()
        };
        entry
            .bursts
            .iter()
            .map(|b| {
                let state = inner.spokes.get(&b.spoke);
                let slot = state.and_then(|s| s.assignments.get(&b.key));
                let connected = state.is_some_and(|s| s.connections > 0);
                BurstView {
                    connected_spokes: if connected {
                        Vec::new()
                    } else {
                        list_connected()
                    },
                    burst: b.clone(),
                    connected,
                    disconnected_since: match state {
                        Some(s) if s.connections > 0 => None,
                        Some(s) => Some(s.disconnected_at.unwrap_or(self.started)),
                        None => Some(self.started),
                    },
                    assigned: slot.is_some(),
                    assigned_version: slot.map_or(0, |s| s.version),
                    report: state.and_then(|s| s.reports.get(&b.key).cloned()),
                    spoke_last_seen: state.and_then(|s| s.last_seen),
                    deleting: entry.deleting && state.is_some_and(|s| !s.confirmed_gone(&b.key)),
                    cluster_unreachable: state.and_then(|s| s.cluster_unreachable.clone()),
                }
            })
            .collect()
    }

    /// What bursts in `namespace` may have beyond the baseline at spoke `spoke`, as it last
    /// announced; `None` while it has not connected to this hub (not known yet).
    pub fn exceptions(&self, spoke: &str, namespace: &str) -> Option<Exceptions> {
        self.lock()
            .spokes
            .get(spoke)?
            .exceptions
            .as_ref()
            .map(|a| a.for_namespace(namespace))
    }

    /// When this registry (this hub incarnation) started.
    pub fn started(&self) -> SystemTime {
        self.started
    }

    /// What the placement needs to know of each spoke of `names` for a burst of
    /// `namespace`, in the same order.
    pub fn placement_facts(&self, names: &[String], namespace: &str) -> Vec<SpokeFacts> {
        let inner = self.lock();
        names
            .iter()
            .map(|name| match inner.spokes.get(name) {
                None => SpokeFacts {
                    away_since: Some(self.started),
                    ..SpokeFacts::default()
                },
                Some(s) => SpokeFacts {
                    connected: s.connections > 0,
                    away_since: (s.connections == 0)
                        .then(|| s.disconnected_at.unwrap_or(self.started)),
                    connected_since: s.connected_at.filter(|_| s.connections > 0),
                    exceptions: s.exceptions.as_ref().map(|a| a.for_namespace(namespace)),
                    room: s.room.clone(),
                },
            })
            .collect()
    }

    /// How spoke `name`'s brokers reach the root's nodes, as its last report to this hub
    /// said; `None` before its first.
    pub fn reach(&self, name: &str) -> Option<crate::federation::path::Reach> {
        self.lock().spokes.get(name)?.reach.clone()
    }

    /// Wakes the reconcile of `mc` (something it reads outside the registry changed).
    pub fn wake(&self, mc: McKey) {
        let _ = self.changes.send(mc);
    }

    /// The spokes that connected to this hub and have all of `labels` (as granted by the
    /// root's owner, [`LabelGrants`]), in name order.
    pub fn spokes_matching(&self, labels: &BTreeMap<String, String>) -> Vec<String> {
        let inner = self.lock();
        inner
            .spokes
            .iter()
            .filter(|(_, s)| s.exceptions.is_some())
            .filter(|(name, s)| {
                inner
                    .labels_of(name, s)
                    .is_some_and(|have| labels.iter().all(|(k, v)| have.get(k) == Some(v)))
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Whose word the spokes' labels are from now on. Bursts placed nowhere are looked at
    /// again when it changes.
    pub fn set_label_grants(&self, grants: LabelGrants) {
        let mut inner = self.lock();
        if inner.grants == grants {
            return;
        }
        inner.grants = grants;
        let waiting: Vec<McKey> = inner.waiting.iter().cloned().collect();
        self.bump_admin(&mut inner);
        drop(inner);
        for mc in waiting {
            let _ = self.changes.send(mc);
        }
    }

    /// The spokes other than `except` that hold burst `key`: it is assigned to them, or
    /// withdrawn and not confirmed gone. A burst moves to another spoke only once none
    /// does, so that no two clusters run brokers of the same ranks.
    pub fn held_elsewhere(&self, key: &BurstKey, except: &str) -> Vec<String> {
        self.lock()
            .spokes
            .iter()
            .filter(|(name, s)| {
                name.as_str() != except
                    && (s.assignments.contains_key(key)
                        || (s.withdrawn.contains_key(key) && !s.confirmed_gone(key)))
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Whether a snapshot with burst `key` was built for `spoke`'s stream (it may have
    /// received it).
    pub fn delivered(&self, spoke: &str, key: &BurstKey) -> bool {
        self.lock().spokes.get(spoke).is_some_and(|s| {
            s.assignments
                .get(key)
                .is_some_and(|slot| s.sent >= slot.version)
        })
    }

    /// When a snapshot with burst `key` was first built for `spoke`'s stream, while it is
    /// assigned there.
    pub fn sent_at(&self, spoke: &str, key: &BurstKey) -> Option<SystemTime> {
        self.lock().spokes.get(spoke)?.assignments.get(key)?.sent_at
    }

    /// What `spoke` last reported of burst `key`, while it is assigned there.
    pub fn report_of(&self, spoke: &str, key: &BurstKey) -> Option<AssignmentStatus> {
        let inner = self.lock();
        let s = inner.spokes.get(spoke)?;
        s.assignments.get(key)?;
        s.reports.get(key).map(|(r, _)| r.clone())
    }

    /// Mark `mc` as having a burst placed nowhere (woken when a spoke connects or reports
    /// its room), or not.
    pub fn set_waiting(&self, mc: &McKey, waiting: bool) {
        let mut inner = self.lock();
        if waiting {
            inner.waiting.insert(mc.clone());
        } else {
            inner.waiting.remove(mc);
        }
    }

    /// Number of connected spokes, and of assignments over all spokes (metrics).
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.lock();
        (
            inner.spokes.values().filter(|s| s.connections > 0).count(),
            inner.spokes.values().map(|s| s.assignments.len()).sum(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::federation::served::{Served, SubscribeError, Subscription};

    /// A spoke's Watch that announces nothing.
    fn subscribe(
        r: &Arc<Registry>,
        spoke: &str,
        version: &str,
    ) -> Result<Subscription, SubscribeError> {
        r.clone()
            .subscribe(spoke, version, Announced::default(), BTreeMap::new())
    }

    /// Labels from `pairs`.
    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_the_labels_the_root_granted_select_a_spoke() {
        let r = Registry::new();
        r.set_primed();
        r.set_label_grants(LabelGrants::NotYet);
        assert!(
            matches!(
                subscribe(&r, "claims", "0.1.0"),
                Err(SubscribeError::NotReady)
            ),
            "no spoke is let in before the grants are read"
        );
        r.set_label_grants(LabelGrants::Granted(BTreeMap::from([
            ("claims".to_string(), labels(&[("tier", "spot")])),
            ("granted".to_string(), labels(&[("tier", "gold")])),
        ])));
        let _claims = r
            .clone()
            .subscribe(
                "claims",
                "0.1.0",
                Announced::default(),
                labels(&[("tier", "gold"), ("gpu", "a100")]),
            )
            .expect("let in");
        let _granted = r
            .clone()
            .subscribe("granted", "0.1.0", Announced::default(), BTreeMap::new())
            .expect("let in");
        assert_eq!(r.spokes_matching(&labels(&[("tier", "gold")])), ["granted"]);
        assert_eq!(r.spokes_matching(&labels(&[("tier", "spot")])), ["claims"]);
        assert!(r.spokes_matching(&labels(&[("gpu", "a100")])).is_empty());
        let listed = r.spokes(&|_| true);
        let claims = listed
            .spokes
            .iter()
            .find(|s| s.name == "claims")
            .expect("listed");
        assert_eq!(
            claims.labels,
            [("tier".to_string(), "spot".to_string())]
                .into_iter()
                .collect()
        );
        assert_eq!(
            claims.ignored_labels,
            [("gpu", "a100"), ("tier", "gold")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        );
        // A hub without certificates takes what spokes announce.
        r.set_label_grants(LabelGrants::Announced);
        assert_eq!(r.spokes_matching(&labels(&[("tier", "gold")])), ["claims"]);
    }

    fn assignment(key: &str, spec: &str) -> proto::Assignment {
        proto::Assignment {
            key: key.into(),
            minicluster_spec_json: spec.to_string().into(),
            ..Default::default()
        }
    }

    fn burst(key: &str, spoke: &str) -> BurstInfo {
        BurstInfo {
            skipped: Vec::new(),
            key: key.parse().unwrap(),
            name: key.parse::<BurstKey>().unwrap().burst,
            spoke: spoke.into(),
            size: 2,
            max_size: 2,
            relayed: false,
            route: None,
        }
    }

    fn sa(spoke: &str, key: &str, spec: &str) -> SpokeAssignment {
        SpokeAssignment {
            spoke: spoke.into(),
            assignment: assignment(key, spec),
        }
    }

    fn mc() -> McKey {
        McKey::new("ns", "m")
    }

    fn primed() -> Arc<Registry> {
        let r = Registry::with_epoch("e1".into());
        r.set_primed();
        r
    }

    #[test]
    fn spokes_get_only_their_assignments_and_versions_only_move_on_change() {
        let r = primed();
        let a = subscribe(&r, "a", "v").unwrap();
        let b = subscribe(&r, "b", "v").unwrap();
        r.set(
            &mc(),
            McInfo::default(),
            vec![burst("ns/m/x", "a"), burst("ns/m/y", "b")],
            vec![sa("a", "ns/m/x", "1"), sa("b", "ns/m/y", "1")],
        );
        let snap_a = r.snapshot("a");
        assert_eq!(*a.versions.borrow(), 2);
        assert_eq!(snap_a.hub_epoch, "e1");
        assert_eq!(snap_a.version, 2);
        let keys: Vec<_> = snap_a.assignments.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(keys, ["ns/m/x"]);
        let keys: Vec<_> = r
            .snapshot("b")
            .assignments
            .iter()
            .map(|a| a.key.clone())
            .collect();
        assert_eq!(keys, ["ns/m/y"]);
        // Same content: no new snapshot.
        r.set(
            &mc(),
            McInfo::default(),
            vec![burst("ns/m/x", "a"), burst("ns/m/y", "b")],
            vec![sa("a", "ns/m/x", "1"), sa("b", "ns/m/y", "1")],
        );
        assert_eq!(*a.versions.borrow(), 2);
        // Changed for a only.
        r.set(
            &mc(),
            McInfo::default(),
            vec![burst("ns/m/x", "a"), burst("ns/m/y", "b")],
            vec![sa("a", "ns/m/x", "2"), sa("b", "ns/m/y", "1")],
        );
        assert_eq!(*a.versions.borrow(), 3);
        assert_eq!(*b.versions.borrow(), 2);
    }

    /// A report of `version` applied, with `ready` brokers of burst ns/m/x.
    fn applied(version: u64, ready: i32) -> proto::ReportRequest {
        proto::ReportRequest {
            hub_epoch: "e1".into(),
            applied_version: version,
            statuses: vec![AssignmentStatus {
                key: "ns/m/x".into(),
                brokers_ready: ready,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn reports_say_how_long_a_change_took_to_apply_and_a_burst_to_get_a_broker() {
        let wait = std::time::Duration::from_millis(20);
        let r = primed();
        let _a = subscribe(&r, "a", "v").unwrap();
        let mut x = sa("a", "ns/m/x", "1");
        x.assignment.burst_size = 2;
        r.set(
            &mc(),
            McInfo::default(),
            vec![burst("ns/m/x", "a")],
            vec![x.clone()],
        );
        let version = r.snapshot("a").version;
        std::thread::sleep(wait);
        let first = r.report("a", applied(version, 0));
        assert!(first.applied_after.is_some_and(|d| d >= wait), "{first:?}");
        assert!(first.first_ready.is_empty(), "no broker ready yet");
        let ready = r.report("a", applied(version, 1));
        assert_eq!(ready.applied_after, None, "nothing new acknowledged");
        assert!(
            matches!(ready.first_ready.as_slice(), [d] if *d >= wait),
            "{ready:?}"
        );
        // Down to none and up again (a restart, a scale from 0): measured once only.
        r.report("a", applied(version, 0));
        assert!(r.report("a", applied(version, 2)).first_ready.is_empty());

        // Many changes while the spoke is away: a bounded record, the oldest time kept.
        for spec in 2..50 {
            let mut x = sa("a", "ns/m/x", &spec.to_string());
            x.assignment.burst_size = 2;
            r.set(
                &mc(),
                McInfo::default(),
                vec![burst("ns/m/x", "a")],
                vec![x],
            );
        }
        let kept = r.lock().spokes["a"].pending.len();
        assert_eq!(kept, PENDING_VERSIONS);
        std::thread::sleep(wait);
        let latest = r.snapshot("a").version;
        let caught_up = r.report("a", applied(latest, 2));
        assert!(caught_up.applied_after.is_some_and(|d| d >= wait));
        assert!(r.lock().spokes["a"].pending.is_empty());
    }

    #[test]
    fn a_burst_running_when_this_process_learnt_of_it_was_not_dispatched_by_it() {
        let r = primed();
        let _a = subscribe(&r, "a", "v").unwrap();
        let mut x = sa("a", "ns/m/x", "1");
        x.assignment.burst_size = 2;
        r.set(
            &mc(),
            McInfo::default(),
            vec![burst("ns/m/x", "a")],
            vec![x],
        );
        let version = r.snapshot("a").version;
        // Its first report already has brokers ready (a hub restarted under it).
        assert!(r.report("a", applied(version, 2)).first_ready.is_empty());
        r.report("a", applied(version, 0));
        assert!(r.report("a", applied(version, 2)).first_ready.is_empty());
    }

    #[test]
    fn unprimed_registries_refuse_watches() {
        let r = Registry::with_epoch("e".into());
        assert_eq!(
            subscribe(&r, "a", "v").err(),
            Some(SubscribeError::NotReady)
        );
        r.set_primed();
        assert!(subscribe(&r, "a", "v").is_ok());
    }

    #[test]
    fn deletion_is_confirmed_by_an_acknowledged_snapshot_or_a_deleted_report() {
        let r = primed();
        let bursts = vec![burst("ns/m/x", "a"), burst("ns/m/y", "b")];
        r.set(
            &mc(),
            McInfo::default(),
            bursts.clone(),
            vec![sa("a", "ns/m/x", "1"), sa("b", "ns/m/y", "1")],
        );
        r.withdraw(&mc(), McInfo::default(), bursts);
        let progress = r.deletion_progress(&mc());
        assert!(progress.iter().all(|p| !p.confirmed));
        // a acknowledges the snapshot without x.
        let version = r.spokes(&|_| true).spokes[0].current_version;
        r.report(
            "a",
            proto::ReportRequest {
                root_reach: None,
                room: None,
                hub_epoch: "e1".into(),
                applied_version: version,
                statuses: vec![],
                cluster_access: None,
            },
        );
        // b acknowledges an old epoch's version: ignored; then reports DELETED.
        r.report(
            "b",
            proto::ReportRequest {
                root_reach: None,
                room: None,
                hub_epoch: "old".into(),
                applied_version: 99,
                statuses: vec![],
                cluster_access: None,
            },
        );
        let progress = r.deletion_progress(&mc());
        assert_eq!(
            progress.iter().map(|p| p.confirmed).collect::<Vec<_>>(),
            [true, false]
        );
        r.report(
            "b",
            proto::ReportRequest {
                root_reach: None,
                room: None,
                hub_epoch: "e1".into(),
                applied_version: 0,
                statuses: vec![AssignmentStatus {
                    key: "ns/m/y".into(),
                    phase: BurstPhase::Deleted as i32,
                    ..Default::default()
                }],
                cluster_access: None,
            },
        );
        assert!(r.deletion_progress(&mc()).iter().all(|p| p.confirmed));
        assert!(!r.has_unconfirmed_withdrawals(&mc()));
        r.forget(&mc());
        assert!(r.admin_snapshot("").miniclusters.is_empty());
    }

    #[test]
    fn admin_clients_see_each_burst_as_the_status_shows_it() {
        let r = Registry::new();
        let shown = BurstShown {
            phase: "Joining".into(),
            path: Some("Relay".into()),
            path_reason: Some("LeadUnreachable".into()),
            brokers_joined: Some(0),
        };
        r.set(
            &mc(),
            McInfo::default(),
            vec![burst("ns/m/x", "a"), burst("ns/m/y", "b")],
            vec![sa("a", "ns/m/x", "{}"), sa("b", "ns/m/y", "{}")],
        );
        let before = r.admin_changes().borrow().to_owned();
        r.show(&mc(), BTreeMap::from([("x".to_string(), shown.clone())]));
        assert!(*r.admin_changes().borrow() > before, "admin watchers told");
        // The next pass's decision keeps what the status showed.
        r.set(
            &mc(),
            McInfo::default(),
            vec![burst("ns/m/x", "a"), burst("ns/m/y", "b")],
            vec![sa("a", "ns/m/x", "{}"), sa("b", "ns/m/y", "{}")],
        );
        let snapshot = r.admin_snapshot("");
        let bursts = &snapshot.miniclusters[0].bursts;
        let x = bursts.iter().find(|b| b.burst_name == "x").expect("x");
        assert_eq!(
            (
                x.hub_phase.as_str(),
                x.path.as_str(),
                x.path_reason.as_str()
            ),
            ("Joining", "Relay", "LeadUnreachable")
        );
        assert_eq!(x.brokers_joined, Some(0));
        // Not in the status yet: nothing made up.
        let y = bursts.iter().find(|b| b.burst_name == "y").expect("y");
        assert_eq!((y.hub_phase.as_str(), y.path.as_str()), ("", ""));
        assert_eq!(y.brokers_joined, None);
    }

    #[test]
    fn a_restarted_hub_still_asks_spokes_to_confirm() {
        // Nothing was ever assigned in this epoch; withdrawing still bumps the spoke's
        // version so that only a newer acknowledgement confirms.
        let r = primed();
        let sub = subscribe(&r, "a", "v").unwrap();
        r.withdraw(&mc(), McInfo::default(), vec![burst("ns/m/x", "a")]);
        assert_eq!(*sub.versions.borrow(), 2);
        assert!(r.has_unconfirmed_withdrawals(&mc()));
        r.report(
            "a",
            proto::ReportRequest {
                root_reach: None,
                room: None,
                hub_epoch: "e1".into(),
                applied_version: 1,
                statuses: vec![],
                cluster_access: None,
            },
        );
        assert!(r.has_unconfirmed_withdrawals(&mc()));
        r.report(
            "a",
            proto::ReportRequest {
                root_reach: None,
                room: None,
                hub_epoch: "e1".into(),
                applied_version: 2,
                statuses: vec![],
                cluster_access: None,
            },
        );
        assert!(!r.has_unconfirmed_withdrawals(&mc()));
    }

    #[test]
    fn kept_bursts_stay_assigned_or_retained_and_only_removed_ones_are_withdrawn() {
        let r = primed();
        let _a = subscribe(&r, "a", "v").unwrap();
        // After a restart nothing is assigned yet: retained.
        r.keep(&mc(), McInfo::default(), vec![burst("ns/m/x", "a")]);
        let snap = r.snapshot("a");
        assert!(snap.assignments.is_empty());
        assert_eq!(snap.retained_keys, ["ns/m/x"]);
        // Assigned, then the lead's endpoint is lost: the assignment stays as it was.
        r.set(
            &mc(),
            McInfo::default(),
            vec![burst("ns/m/x", "a"), burst("ns/m/y", "a")],
            vec![sa("a", "ns/m/x", "{}"), sa("a", "ns/m/y", "{}")],
        );
        r.keep(&mc(), McInfo::default(), vec![burst("ns/m/x", "a")]);
        let snap = r.snapshot("a");
        let keys: Vec<&str> = snap.assignments.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(keys, ["ns/m/x"], "y was removed from the spec");
        assert!(snap.retained_keys.is_empty());
        assert!(r.has_unconfirmed_withdrawals(&mc()), "y is withdrawn");
    }

    #[test]
    fn confirmed_withdrawals_of_renamed_bursts_are_forgotten() {
        let r = primed();
        let _sub = subscribe(&r, "a", "v").unwrap();
        for i in 0..100 {
            r.set(
                &mc(),
                McInfo::default(),
                vec![burst(&format!("ns/m/b{i}"), "a")],
                vec![sa("a", &format!("ns/m/b{i}"), "{}")],
            );
            let version = r.spokes(&|_| true).spokes[0].current_version;
            r.report(
                "a",
                proto::ReportRequest {
                    root_reach: None,
                    room: None,
                    hub_epoch: "e1".into(),
                    applied_version: version,
                    statuses: vec![AssignmentStatus {
                        key: format!("ns/m/b{i}"),
                        phase: BurstPhase::Running as i32,
                        ..Default::default()
                    }],
                    cluster_access: None,
                },
            );
        }
        let inner = r.lock();
        let a = &inner.spokes["a"];
        assert_eq!(
            (a.assignments.len(), a.withdrawn.len(), a.reports.len()),
            (1, 0, 1),
            "only the current burst is kept"
        );
        drop(inner);
        assert!(!r.has_unconfirmed_withdrawals(&mc()));
        assert_eq!(r.spokes(&|_| true).spokes[0].assignments, 1);
        assert_eq!(
            r.spokes(&|ns| ns == "team-b").spokes[0].assignments,
            0,
            "an admin of another namespace does not count ns's bursts"
        );
    }

    #[test]
    fn a_reports_text_is_stored_bounded() {
        use super::report_bounds::{MAX_CONDITIONS, MAX_MESSAGE};
        let r = primed();
        r.set(
            &mc(),
            McInfo::default(),
            vec![burst("ns/m/x", "a")],
            vec![sa("a", "ns/m/x", "1")],
        );
        let huge = "é".repeat(1 << 20);
        r.report(
            "a",
            proto::ReportRequest {
                root_reach: None,
                room: None,
                hub_epoch: "e1".into(),
                applied_version: 2,
                statuses: vec![AssignmentStatus {
                    key: "ns/m/x".into(),
                    phase: BurstPhase::Failed as i32,
                    message: huge.clone(),
                    conditions: vec![
                        proto::Condition {
                            r#type: "Failed".into(),
                            reason: huge.clone(),
                            ..Default::default()
                        };
                        100
                    ],
                    ..Default::default()
                }],
                cluster_access: Some(proto::ClusterAccess {
                    unreachable_since_unix_millis: 1,
                    error: huge,
                }),
            },
        );
        let view = &r.bursts(&mc())[0];
        let (stored, _) = view.report.as_ref().expect("stored");
        assert!(stored.message.len() <= MAX_MESSAGE);
        assert!(stored.message.ends_with('…'));
        assert_eq!(stored.conditions.len(), MAX_CONDITIONS);
        assert!(stored.conditions[0].reason.len() <= 64);
        let (_, error) = view.cluster_unreachable.as_ref().expect("unreachable");
        assert!(error.len() <= MAX_MESSAGE);
    }

    #[test]
    fn reports_for_foreign_keys_are_ignored_and_changes_notify_the_controller() {
        let r = primed();
        let mut changes = r.take_changes().unwrap();
        r.set(
            &mc(),
            McInfo::default(),
            vec![burst("ns/m/x", "a")],
            vec![sa("a", "ns/m/x", "1")],
        );
        let status = |key: &str, ready| AssignmentStatus {
            key: key.into(),
            phase: BurstPhase::Applied as i32,
            brokers_ready: ready,
            size: 2,
            ..Default::default()
        };
        r.report(
            "b",
            proto::ReportRequest {
                root_reach: None,
                room: None,
                hub_epoch: "e1".into(),
                applied_version: 1,
                statuses: vec![status("ns/m/x", 2)],
                cluster_access: None,
            },
        );
        assert!(r.bursts(&mc())[0].report.is_none(), "b does not run x");
        assert!(changes.try_recv().is_err());
        r.report(
            "a",
            proto::ReportRequest {
                root_reach: None,
                room: None,
                hub_epoch: "e1".into(),
                applied_version: 2,
                statuses: vec![status("ns/m/x", 1)],
                cluster_access: None,
            },
        );
        assert_eq!(changes.try_recv().unwrap(), mc());
        // The same report again (periodic): no reconcile.
        r.report(
            "a",
            proto::ReportRequest {
                root_reach: None,
                room: None,
                hub_epoch: "e1".into(),
                applied_version: 2,
                statuses: vec![status("ns/m/x", 1)],
                cluster_access: None,
            },
        );
        assert!(changes.try_recv().is_err());
        // Only the admitted size changes (the spoke's policy was edited): reconciled, so
        // that the status and the autoscaler see it.
        r.report(
            "a",
            proto::ReportRequest {
                root_reach: None,
                room: None,
                hub_epoch: "e1".into(),
                applied_version: 2,
                statuses: vec![AssignmentStatus {
                    admitted_size: Some(1),
                    ..status("ns/m/x", 1)
                }],
                cluster_access: None,
            },
        );
        assert_eq!(changes.try_recv().unwrap(), mc());
        let view = &r.bursts(&mc())[0];
        assert_eq!(view.report.as_ref().unwrap().0.brokers_ready, 1);
        assert_eq!(view.assigned_version, 2);
        assert_eq!(view.cluster_unreachable, None);

        // The spoke loses its API server: every MiniCluster with a burst there is
        // reconciled, its bursts carry since when and why, admins see it on the spoke.
        let access = |millis, error: &str| proto::ReportRequest {
            root_reach: None,
            room: None,
            hub_epoch: "e1".into(),
            applied_version: 2,
            statuses: vec![status("ns/m/x", 1)],
            cluster_access: Some(proto::ClusterAccess {
                unreachable_since_unix_millis: millis,
                error: error.into(),
            }),
        };
        r.report("a", access(1_700_000_000_000, "connection refused"));
        assert_eq!(changes.try_recv().unwrap(), mc());
        let since = UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        assert_eq!(
            r.bursts(&mc())[0].cluster_unreachable,
            Some((since, "connection refused".to_string()))
        );
        let spoke = &r.spokes(&|_| true).spokes[0];
        assert_eq!(
            (
                spoke.cluster_unreachable_since_unix_millis,
                spoke.cluster_error.as_str()
            ),
            (1_700_000_000_000, "connection refused")
        );
        r.report("a", access(1_700_000_000_000, "connection refused"));
        assert!(changes.try_recv().is_err(), "nothing new");
        // Back: 0 means reachable.
        r.report("a", access(0, ""));
        assert_eq!(changes.try_recv().unwrap(), mc());
        assert_eq!(r.bursts(&mc())[0].cluster_unreachable, None);
        assert_eq!(
            r.spokes(&|_| true).spokes[0].cluster_unreachable_since_unix_millis,
            0
        );
    }

    #[test]
    fn a_spoke_is_forgotten_only_when_away_and_without_assignments() {
        let r = primed();
        assert_eq!(r.forget_spoke("nobody"), Ok(false));
        let connected = subscribe(&r, "a", "v").unwrap();
        assert!(
            r.forget_spoke("a")
                .is_err_and(|e| e.contains("still connected"))
        );
        drop(connected);
        assert_eq!(r.forget_spoke("a"), Ok(true));
        assert!(
            r.spokes(&|_| true).spokes.is_empty(),
            "gone from the listing"
        );
        r.set(
            &mc(),
            McInfo::default(),
            vec![burst("ns/m/x", "b")],
            vec![sa("b", "ns/m/x", "{}")],
        );
        assert!(
            r.forget_spoke("b")
                .is_err_and(|e| e.contains("still has bursts assigned: ns/m/x"))
        );
    }

    #[test]
    fn a_spokes_certificate_expiry_shows_in_the_listing() {
        let r = primed();
        let sub = subscribe(&r, "a", "v").unwrap();
        assert_eq!(
            r.spokes(&|_| true).spokes[0].certificate_not_after_unix_millis,
            0
        );
        r.set_certificate("a", 1_800_000_000, "ab12");
        assert_eq!(
            r.spokes(&|_| true).spokes[0].certificate_not_after_unix_millis,
            1_800_000_000_000
        );
        assert_eq!(r.spokes(&|_| true).spokes[0].certificate_issuer, "ab12");
        r.set_hub_certificates(1_900_000_000, 2_000_000_000);
        let listing = r.spokes(&|_| true);
        assert_eq!(
            (
                listing.hub_certificate_not_after_unix_millis,
                listing.ca_not_after_unix_millis
            ),
            (1_900_000_000_000, 2_000_000_000_000)
        );
        r.set_certificate("nobody", 1, "");
        assert_eq!(
            r.spokes(&|_| true).spokes.len(),
            1,
            "unknown spokes are not added"
        );
        drop(sub);
    }

    #[test]
    fn one_stream_per_spoke_a_second_is_refused_and_counted() {
        let r = primed();
        let first = subscribe(&r, "a", "v").unwrap();
        assert_eq!(
            subscribe(&r, "a", "v").err(),
            Some(SubscribeError::AlreadyConnected)
        );
        assert_eq!(
            subscribe(&r, "a", "v").err(),
            Some(SubscribeError::AlreadyConnected)
        );
        let other = subscribe(&r, "b", "v").unwrap();
        let refused = |name: &str| {
            r.spokes(&|_| true)
                .spokes
                .iter()
                .find(|s| s.name == name)
                .map(|s| (s.connected, s.refused_streams))
        };
        assert_eq!(refused("a"), Some((true, 2)));
        assert_eq!(refused("b"), Some((true, 0)));
        drop(first);
        let again = subscribe(&r, "a", "v").unwrap();
        assert_eq!(refused("a"), Some((true, 2)));
        drop((again, other));
    }

    #[test]
    fn connecting_and_disconnecting_notify_and_show_in_listings() {
        let r = primed();
        let mut changes = r.take_changes().unwrap();
        r.set(&mc(), McInfo::default(), vec![burst("ns/m/x", "a")], vec![]);
        let sub = subscribe(&r, "a", "0.1.0").unwrap();
        assert_eq!(changes.try_recv().unwrap(), mc());
        assert!(r.bursts(&mc())[0].connected);
        let spokes = r.spokes(&|_| true);
        assert_eq!(spokes.spokes[0].name, "a");
        assert!(spokes.spokes[0].connected);
        assert_eq!(spokes.spokes[0].spoke_version, "0.1.0");
        drop(sub);
        assert_eq!(changes.try_recv().unwrap(), mc());
        assert!(!r.bursts(&mc())[0].connected);
        assert!(!r.spokes(&|_| true).spokes[0].connected);
    }

    #[test]
    fn retained_bursts_stay_listed_until_assigned_or_withdrawn() {
        let r = primed();
        let _connected = subscribe(&r, "a", "v").unwrap();
        r.retain(&mc(), &[burst("ns/m/x", "a")]);
        let snap = r.snapshot("a");
        assert_eq!(snap.retained_keys, ["ns/m/x"]);
        assert!(snap.assignments.is_empty());
        r.set(
            &mc(),
            McInfo::default(),
            vec![burst("ns/m/x", "a")],
            vec![sa("a", "ns/m/x", "1")],
        );
        let snap = r.snapshot("a");
        assert!(snap.retained_keys.is_empty());
        assert_eq!(snap.assignments.len(), 1);
        // Assigned bursts are not demoted to retained.
        r.retain(&mc(), &[burst("ns/m/x", "a")]);
        assert_eq!(r.snapshot("a").assignments.len(), 1);
        assert!(r.snapshot("a").retained_keys.is_empty());
        r.withdraw(&mc(), McInfo::default(), vec![burst("ns/m/x", "a")]);
        let snap = r.snapshot("a");
        assert!(snap.assignments.is_empty() && snap.retained_keys.is_empty());
    }

    #[test]
    fn removing_a_burst_from_the_spec_withdraws_only_it() {
        let r = primed();
        let _connected = subscribe(&r, "a", "v").unwrap();
        r.set(
            &mc(),
            McInfo::default(),
            vec![burst("ns/m/x", "a"), burst("ns/m/z", "a")],
            vec![sa("a", "ns/m/x", "1"), sa("a", "ns/m/z", "1")],
        );
        r.set(
            &mc(),
            McInfo::default(),
            vec![burst("ns/m/x", "a")],
            vec![sa("a", "ns/m/x", "1")],
        );
        let keys: Vec<_> = r
            .snapshot("a")
            .assignments
            .iter()
            .map(|a| a.key.clone())
            .collect();
        assert_eq!(keys, ["ns/m/x"]);
        assert!(r.has_unconfirmed_withdrawals(&mc()));
    }
}
