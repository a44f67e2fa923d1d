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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flux_shared::federation::proto::Condition;
use flux_shared::federation::{LEAD_REACHABLE, LEAD_UNREACHABLE};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;
use tracing::{info, warn};

/// How often a direct burst's lead endpoint is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(30);

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
}

/// The bursts' paths to their leads, as last seen; clones share them.
#[derive(Clone)]
pub(crate) struct LeadReach {
    seen: Arc<Mutex<BTreeMap<String, Entry>>>,
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
        let entry = seen.entry(key.to_string()).or_default();
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
                    return;
                }
                Seen::Unreached(why)
            }
        };
        if entry.shown.as_ref().map(|(s, _)| s) != Some(&now) {
            match &now {
                Seen::Reached => info!(burst = %key, "the lead broker answers"),
                Seen::Unreached(why) => {
                    warn!(burst = %key, error = %why, "the lead broker does not answer")
                }
            }
            let since = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            entry.shown = Some((now, since));
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Forgets every burst not in `keep`.
    pub(crate) fn retain(&self, keep: &BTreeSet<String>) {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|k, _| keep.contains(k));
    }

    /// The [`LEAD_REACHABLE`] condition of burst `key`, once something was seen.
    pub(crate) fn condition(&self, key: &str) -> Option<Condition> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let (now, since) = seen.get(key)?.shown.as_ref()?;
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
    /// target changed is probed anew.
    pub(crate) fn set(&mut self, targets: BTreeMap<String, String>, reach: &LeadReach) {
        self.running
            .retain(|key, (target, _)| targets.get(key) == Some(target));
        for (key, target) in targets {
            if self.running.contains_key(&key) {
                continue;
            }
            let task = tokio::spawn(probe(key.clone(), target.clone(), reach.clone()));
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
async fn probe(key: String, target: String, reach: LeadReach) {
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
        reach.record(&key, result);
    }
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
}
