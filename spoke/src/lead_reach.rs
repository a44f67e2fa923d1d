//! Whether each running burst's brokers can reach their lead broker, seen from the spoke's
//! pod (which shares the pod network with them): said in the burst's status (condition
//! [`LEAD_REACHABLE`]) before brokers wait for ever.
//!
//! A burst that connects directly is probed: a TCP connect to the lead endpoint it was
//! given, at once and every [`PROBE_INTERVAL`], each bounded by [`PROBE_TIMEOUT`]. A
//! relayed burst is not probed: its brokers' own connections are the probe, and the
//! hub's answer to each (carried, or refused with why) is recorded
//! ([`LeadReach::record`]).
//!
//! A failure is reported only once every attempt failed for a while
//! ([`AgentConfig::lead_unreachable_after`](crate::AgentConfig::lead_unreachable_after)):
//! a lead that is still starting refuses at first.
//!
//! The probes also measure the spoke itself ([`Measured`], sent as the report's
//! `root_reach`): the latest outcome across them, from which the hub chooses the path of
//! the bursts it places here. It outlives the bursts (the root's network does not change
//! with them); a restart forgets it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flux_shared::federation::proto::{Condition, RootPath};
use flux_shared::federation::{LEAD_REACHABLE, LEAD_UNREACHABLE};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;
use tracing::{info, warn};

use crate::fence::Fencing;

/// How often a direct burst's lead endpoint is probed: a burst that cannot reach it is
/// switched to the relay by the hub, the sooner the better.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(10);

/// How long one probe may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// What was last seen of one burst's path to its lead.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    Reached,
    /// Why not.
    Unreached(String),
}

/// What is known of one burst's path to its lead.
#[derive(Debug, Default)]
struct Entry {
    /// What is reported, and since when (Unix milliseconds).
    shown: Option<(Seen, i64)>,
    /// Since when every attempt failed (`None` after one that worked).
    failing_since: Option<std::time::Instant>,
    /// Whether the burst was relayed when this was seen (`None`: not said).
    relayed: Option<bool>,
}

/// What the spoke last measured of how its pod, which shares the pod network with the
/// brokers, reaches a root's lead broker: the latest outcome across the direct bursts'
/// probes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Measured {
    /// [`RootPath::Direct`] when a probe connected, [`RootPath::Relay`] when a burst's
    /// failure was reported (once it outlasted the grace).
    pub(crate) path: RootPath,
    /// The `host:port` probed.
    pub(crate) target: String,
    /// Why it failed; empty when it connected.
    pub(crate) error: String,
    /// When, Unix milliseconds.
    pub(crate) unix_millis: i64,
}

impl Measured {
    /// Whether `other` says something else (when it was measured does not count).
    fn differs(&self, other: &Measured) -> bool {
        (self.path, &self.target, &self.error) != (other.path, &other.target, &other.error)
    }
}

/// What the probes and relayed connections saw.
#[derive(Debug, Default)]
struct Known {
    bursts: BTreeMap<String, Entry>,
    measured: Option<Measured>,
}

/// The bursts' paths to their leads, as last seen; clones share them.
#[derive(Clone)]
pub(crate) struct LeadReach {
    seen: Arc<Mutex<Known>>,
    /// How long every attempt must fail before it is reported: a lead that is still
    /// starting (its pod not scheduled, its NodePort without an endpoint yet) refuses for a
    /// while, which is no news.
    grace: Duration,
    /// Bumped when what is reported changes (the agent reports then).
    changed: Arc<watch::Sender<u64>>,
}

impl Default for LeadReach {
    fn default() -> Self {
        LeadReach::new(crate::agent_config::AgentConfig::DEFAULT_LEAD_UNREACHABLE_AFTER)
    }
}

impl std::fmt::Debug for LeadReach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeadReach").finish_non_exhaustive()
    }
}

impl LeadReach {
    /// Reports failures only once every attempt failed for `grace`.
    pub(crate) fn new(grace: Duration) -> LeadReach {
        LeadReach {
            seen: Arc::default(),
            grace,
            changed: Arc::new(watch::channel(0).0),
        }
    }

    /// Records what a connection of burst `key` to its lead found (`Err`: why it failed).
    pub(crate) fn record(&self, key: &str, result: Result<(), String>) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if self.update(&mut seen, key, result).is_some() {
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Records what a probe of direct burst `key`'s lead at `target` found, which also
    /// measures the spoke ([`LeadReach::measured`]): it connected, or the burst's failure
    /// is reported now.
    pub(crate) fn record_probe(&self, key: &str, target: &str, result: Result<(), String>) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let shown = self.update(&mut seen, key, result.clone());
        let (path, error) = match (result, &shown) {
            (Ok(()), _) => (RootPath::Direct, String::new()),
            (Err(why), Some(Seen::Unreached(_))) => (RootPath::Relay, why),
            // Still within the grace, or failing as already reported.
            (Err(_), _) => return,
        };
        let now = Measured {
            path,
            target: target.to_string(),
            error,
            unix_millis: now_millis(),
        };
        let news = seen.measured.as_ref().is_none_or(|m| m.differs(&now));
        if news {
            info!(path = ?now.path, target = %now.target, "how this spoke reaches the root's lead broker, as measured, changed");
        }
        seen.measured = Some(now);
        if news || shown.is_some() {
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Records `result` for burst `key` in `seen`; what is reported of it now, when that
    /// changed.
    fn update(&self, seen: &mut Known, key: &str, result: Result<(), String>) -> Option<Seen> {
        let entry = seen.bursts.entry(key.to_string()).or_default();
        let now = match result {
            Ok(()) => {
                entry.failing_since = None;
                Seen::Reached
            }
            Err(why) => {
                let since = *entry
                    .failing_since
                    .get_or_insert_with(std::time::Instant::now);
                if since.elapsed() < self.grace {
                    return None;
                }
                Seen::Unreached(why)
            }
        };
        if entry.shown.as_ref().map(|(s, _)| s) == Some(&now) {
            return None;
        }
        match &now {
            Seen::Reached => info!(burst = %key, "the lead broker answers"),
            Seen::Unreached(why) => {
                warn!(burst = %key, error = %why, "the lead broker does not answer")
            }
        }
        entry.shown = Some((now.clone(), now_millis()));
        Some(now)
    }

    /// Says whether burst `key` is relayed now: what was seen on its other path no longer
    /// says anything of it, and is forgotten.
    pub(crate) fn path(&self, key: &str, relayed: bool) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = seen.bursts.entry(key.to_string()).or_default();
        if entry.relayed.is_some_and(|r| r != relayed) {
            let shown = entry.shown.is_some();
            *entry = Entry::default();
            if shown {
                self.changed.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
        entry.relayed = Some(relayed);
    }

    /// What the spoke last measured, kept after the bursts go.
    pub(crate) fn measured(&self) -> Option<Measured> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .measured
            .clone()
    }

    /// Forgets every burst not in `keep`.
    pub(crate) fn retain(&self, keep: &BTreeSet<String>) {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bursts
            .retain(|k, _| keep.contains(k));
    }

    /// The [`LEAD_REACHABLE`] condition of burst `key`, once something was seen.
    pub(crate) fn condition(&self, key: &str) -> Option<Condition> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let (now, since) = seen.bursts.get(key)?.shown.as_ref()?;
        let (status, reason, message) = match now {
            Seen::Reached => ("True", "Connected", String::new()),
            Seen::Unreached(why) => ("False", LEAD_UNREACHABLE, why.clone()),
        };
        Some(Condition {
            r#type: LEAD_REACHABLE.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message,
            last_transition_unix_millis: *since,
        })
    }

    /// A receiver that changes when something seen does.
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// The probes of the direct bursts that run: one task each, stopped when dropped.
#[derive(Default)]
pub(crate) struct Probes {
    running: BTreeMap<String, (String, AbortOnDropHandle<()>)>,
}

impl std::fmt::Debug for Probes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probes")
            .field("bursts", &self.running.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Probes {
    /// Probes each burst of `targets` (key -> `host:port`), and no other: a burst whose
    /// target changed is probed anew. Each probe is told to `fencing` too.
    pub(crate) fn set(
        &mut self,
        targets: BTreeMap<String, String>,
        reach: &LeadReach,
        fencing: &Fencing,
    ) {
        self.running
            .retain(|key, (target, _)| targets.get(key) == Some(target));
        for (key, target) in targets {
            if self.running.contains_key(&key) {
                continue;
            }
            let task = tokio::spawn(probe(
                key.clone(),
                target.clone(),
                reach.clone(),
                fencing.clone(),
            ));
            self.running
                .insert(key, (target, AbortOnDropHandle::new(task)));
        }
    }
}

/// The `host:port` a TCP connect to `address` and `port` takes (an IPv6 literal in
/// brackets).
pub(crate) fn target(address: &str, port: i32) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// Probes `target` for burst `key` until stopped.
async fn probe(key: String, target: String, reach: LeadReach, fencing: Fencing) {
    let mut every = tokio::time::interval(PROBE_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let result =
            match tokio::time::timeout(PROBE_TIMEOUT, TcpStream::connect(target.as_str())).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("connecting to {target} from the spoke's pod: {e}")),
                Err(_) => Err(format!(
                    "connecting to {target} from the spoke's pod: no answer in {PROBE_TIMEOUT:?}"
                )),
            };
        fencing.probed(&key, result.is_ok(), std::time::Instant::now());
        reach.record_probe(&key, &target, result);
    }
}

/// Now, Unix milliseconds.
fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(reach: &LeadReach) -> Option<String> {
        reach.condition("k").map(|c| c.status)
    }

    #[test]
    fn failures_are_told_once_they_outlast_the_grace_and_a_success_at_once() {
        let reach = LeadReach::new(Duration::from_millis(50));
        reach.record("k", Err("refused".into()));
        assert_eq!(state(&reach), None, "a lead still starting is no news");
        std::thread::sleep(Duration::from_millis(60));
        reach.record("k", Err("refused".into()));
        assert_eq!(state(&reach).as_deref(), Some("False"));
        reach.record("k", Ok(()));
        assert_eq!(state(&reach).as_deref(), Some("True"));
        // After a success the grace starts again.
        reach.record("k", Err("refused".into()));
        assert_eq!(state(&reach).as_deref(), Some("True"));
        reach.retain(&BTreeSet::new());
        assert_eq!(state(&reach), None);
    }

    #[test]
    fn the_spoke_measures_direct_on_a_connect_and_relay_once_a_failure_is_told() {
        let reach = LeadReach::new(Duration::from_millis(50));
        let mut changes = reach.changes();
        let measured = || reach.measured().map(|m| (m.path, m.target, m.error));
        let news = |changes: &mut watch::Receiver<u64>| {
            let news = changes.has_changed().unwrap_or(false);
            changes.borrow_and_update();
            news
        };
        assert_eq!(measured(), None, "nothing measured since the start");
        reach.record_probe("a", "192.0.2.1:30050", Ok(()));
        assert_eq!(
            measured(),
            Some((RootPath::Direct, "192.0.2.1:30050".into(), String::new()))
        );
        assert!(news(&mut changes));
        let first = reach.measured().map(|m| m.unix_millis);
        std::thread::sleep(Duration::from_millis(5));
        reach.record_probe("a", "192.0.2.1:30050", Ok(()));
        assert!(
            !news(&mut changes),
            "connecting again is no news (only its time is newer)"
        );
        assert!(reach.measured().map(|m| m.unix_millis) > first);

        // Another burst's failure counts once it is told, not before.
        reach.record_probe("b", "192.0.2.9:31000", Err("refused".into()));
        assert_eq!(measured().map(|m| m.0), Some(RootPath::Direct));
        assert!(!news(&mut changes));
        std::thread::sleep(Duration::from_millis(60));
        reach.record_probe("b", "192.0.2.9:31000", Err("refused".into()));
        assert_eq!(
            measured(),
            Some((RootPath::Relay, "192.0.2.9:31000".into(), "refused".into()))
        );
        assert!(news(&mut changes));
        reach.record_probe("b", "192.0.2.9:31000", Err("refused".into()));
        assert!(!news(&mut changes), "failing as told already is no news");

        // A relayed burst's connections say nothing of the pod network's reach.
        reach.record("c", Ok(()));
        assert_eq!(measured().map(|m| m.0), Some(RootPath::Relay));

        // The bursts go; the root's network stays as measured.
        reach.retain(&BTreeSet::new());
        assert_eq!(state(&reach), None);
        assert_eq!(measured().map(|m| m.0), Some(RootPath::Relay));
        reach.record_probe("a", "192.0.2.1:30050", Ok(()));
        assert_eq!(measured().map(|m| m.0), Some(RootPath::Direct));
    }

    #[test]
    fn a_burst_whose_path_changed_forgets_what_its_old_path_saw() {
        let reach = LeadReach::new(Duration::ZERO);
        reach.path("k", false);
        reach.record("k", Err("refused".into()));
        assert_eq!(state(&reach).as_deref(), Some("False"));
        reach.path("k", false);
        assert_eq!(state(&reach).as_deref(), Some("False"), "the same path");
        let mut changes = reach.changes();
        changes.borrow_and_update();
        reach.path("k", true);
        assert_eq!(state(&reach), None, "switched to the relay: not known yet");
        assert!(changes.has_changed().unwrap_or(false), "reported again");
        reach.record("k", Ok(()));
        assert_eq!(state(&reach).as_deref(), Some("True"));
    }
}
