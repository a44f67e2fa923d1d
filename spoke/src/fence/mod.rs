//! Self-fencing of direct bursts: the spoke deletes a direct burst's Job itself once it has
//! heard nothing from the hub **and** reached nothing of the burst's lead broker for
//! [`AgentConfig::fence_after`](crate::AgentConfig::fence_after).
//!
//! Why: the hub places a lost cluster's burst again elsewhere, with the same ranks, after
//! its own grace (`flux-hub run --lost-cluster-grace-seconds`). A Flux broker that says
//! hello with a rank that is online replaces the broker holding it, so brokers of the lost
//! cluster that reached the lead again later would push out their successors. A relayed
//! burst cannot (the hub relays only for the spoke it is placed on), and is never fenced.
//!
//! What counts:
//!
//! * heard from the hub: its Watch answered, a snapshot part received, a report accepted
//!   (the agent also reports often enough for a hub that answers never to look silent);
//! * reached the lead: a probe of the burst's lead endpoint connected
//!   ([`crate::lead_reach`]); a burst never reached counts from when its probing began.
//!
//! The decision ([`to_fence`]) is taken again before either time moves forward, so a
//! process that was frozen and resumes fences on the times as they were before the first
//! probe or message after the gap. A fenced burst is not watched again until its Job is
//! created anew, which only a snapshot of the hub does (the agent reconnects after a fence
//! so that it is the first of a new connection). [`Fencing`] keeps the times and what was
//! decided; `carry_out` deletes the Jobs.

mod carry_out;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use flux_shared::federation::proto::Condition;
use tokio::sync::{Notify, watch};

use crate::burst_status::FENCED;
pub(crate) use carry_out::carry_out;
#[cfg(test)]
pub(crate) use carry_out::carry_out_due;

/// The reason of a [`FENCED`] condition that is true: its Job deleted by the spoke.
pub(crate) const HUB_AND_LEAD_UNREACHABLE: &str = "HubAndLeadUnreachable";

/// The reason of a [`FENCED`] condition that is false again: its Job created anew.
pub(crate) const CREATED_ANEW: &str = "CreatedAnew";

/// The bursts to fence at `now`: those whose lead was last reached (`reached`, by key) at
/// least `after` ago, while the hub was last heard (`hub_heard`) at least `after` ago too.
pub(crate) fn to_fence(
    hub_heard: Instant,
    reached: &BTreeMap<String, Instant>,
    now: Instant,
    after: Duration,
) -> BTreeSet<String> {
    if now.saturating_duration_since(hub_heard) < after {
        return BTreeSet::new();
    }
    reached
        .iter()
        .filter(|(_, at)| now.saturating_duration_since(**at) >= after)
        .map(|(key, _)| key.clone())
        .collect()
}

/// When [`to_fence`] next could fence something if nothing is heard or reached meanwhile
/// (`None`: no burst is watched).
pub(crate) fn next_decision(
    hub_heard: Instant,
    reached: &BTreeMap<String, Instant>,
    after: Duration,
) -> Option<Instant> {
    reached
        .values()
        .map(|at| (*at).max(hub_heard) + after)
        .min()
}

/// A direct burst the spoke watches: where its lead is, its Job, and when its lead was
/// last reached (or its probing began).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Lead {
    /// The `host:port` probed.
    pub(crate) target: String,
    /// Namespace and name of its Job.
    pub(crate) job: (String, String),
    reached: Instant,
}

/// A fence decided and not carried out yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Due {
    /// The burst's lead and Job.
    pub(crate) lead: Lead,
    /// How long nothing was heard from the hub, when it was decided.
    pub(crate) hub_silent: Duration,
    /// How long its lead was not reached, when it was decided.
    pub(crate) lead_silent: Duration,
}

impl Due {
    /// Why it was fenced, as the burst's status says.
    fn why(&self, after: Duration) -> String {
        format!(
            "nothing heard from the hub for {} s and its lead broker at {} not reached for {} s (flux-spoke run --fence-after-seconds {})",
            self.hub_silent.as_secs(),
            self.lead.target,
            self.lead_silent.as_secs(),
            after.as_secs()
        )
    }
}

/// A burst fenced: when (Unix milliseconds), why, and when its Job was created anew.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fenced {
    unix_millis: i64,
    why: String,
    created_anew_millis: Option<i64>,
}

#[derive(Debug)]
struct Silences {
    after: Duration,
    hub_heard: Instant,
    leads: BTreeMap<String, Lead>,
    due: BTreeMap<String, Due>,
    fenced: BTreeMap<String, Fenced>,
}

impl Silences {
    /// Moves what is to be fenced at `now` from the watched bursts to the due ones; whether
    /// there was any.
    fn decide(&mut self, now: Instant) -> bool {
        let reached = self
            .leads
            .iter()
            .map(|(key, lead)| (key.clone(), lead.reached))
            .collect();
        let keys = to_fence(self.hub_heard, &reached, now, self.after);
        for key in &keys {
            if let Some(lead) = self.leads.remove(key) {
                let due = Due {
                    hub_silent: now.saturating_duration_since(self.hub_heard),
                    lead_silent: now.saturating_duration_since(lead.reached),
                    lead,
                };
                self.due.insert(key.clone(), due);
            }
        }
        !keys.is_empty()
    }
}

/// What the spoke knows of the hub's and the direct bursts' leads' silences, and the fences
/// decided; clones share it.
#[derive(Clone, Debug)]
pub(crate) struct Fencing {
    silences: Arc<Mutex<Silences>>,
    /// Wakes the task carrying fences out: something was decided, or its next decision
    /// moved.
    wake: Arc<Notify>,
    /// Bumped when a fence is carried out (the agent reconnects then).
    carried: Arc<watch::Sender<u64>>,
}

impl Default for Fencing {
    fn default() -> Self {
        Fencing::new(
            crate::agent_config::AgentConfig::DEFAULT_FENCE_AFTER,
            Instant::now(),
        )
    }
}

impl Fencing {
    /// Fences after `after` of both silences; the hub counts as heard at `now`.
    pub(crate) fn new(after: Duration, now: Instant) -> Fencing {
        Fencing {
            silences: Arc::new(Mutex::new(Silences {
                after,
                hub_heard: now,
                leads: BTreeMap::new(),
                due: BTreeMap::new(),
                fenced: BTreeMap::new(),
            })),
            wake: Arc::new(Notify::new()),
            carried: Arc::new(watch::channel(0).0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Silences> {
        self.silences.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long both silences must last.
    pub(crate) fn after(&self) -> Duration {
        self.lock().after
    }

    /// The hub answered at `now` (decided first on the times before).
    pub(crate) fn heard_hub(&self, now: Instant) {
        let mut s = self.lock();
        let decided = s.decide(now);
        s.hub_heard = s.hub_heard.max(now);
        drop(s);
        // The next decision moved later: no need to wake for that alone.
        if decided {
            self.wake.notify_one();
        }
    }

    /// How long nothing was heard from the hub, at `now`.
    pub(crate) fn hub_silent(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.lock().hub_heard)
    }

    /// A probe of burst `key`'s lead connected (`reached`) or not, at `now` (decided first
    /// on the times before).
    pub(crate) fn probed(&self, key: &str, reached: bool, now: Instant) {
        let mut s = self.lock();
        let decided = s.decide(now);
        if reached && let Some(lead) = s.leads.get_mut(key) {
            lead.reached = lead.reached.max(now);
        }
        drop(s);
        if decided {
            self.wake.notify_one();
        }
    }

    /// The direct bursts that run now (`watched`, by key: lead target and Job) of those the
    /// snapshot lists (`listed`), at `now`: a burst new here counts from now, one no
    /// longer watched is forgotten, and what was fenced or due for bursts no longer listed
    /// too.
    pub(crate) fn watch(
        &self,
        listed: &BTreeSet<String>,
        watched: BTreeMap<String, (String, (String, String))>,
        now: Instant,
    ) {
        let mut s = self.lock();
        s.fenced.retain(|key, _| listed.contains(key));
        s.due.retain(|key, _| listed.contains(key));
        s.leads.retain(|key, _| watched.contains_key(key));
        for (key, (target, job)) in watched {
            // Not watched again before its Job is created anew.
            if s.due.contains_key(&key)
                || s.fenced
                    .get(&key)
                    .is_some_and(|f| f.created_anew_millis.is_none())
            {
                continue;
            }
            match s.leads.get_mut(&key) {
                Some(lead) => {
                    lead.target = target;
                    lead.job = job;
                }
                None => {
                    s.leads.insert(
                        key,
                        Lead {
                            target,
                            job,
                            reached: now,
                        },
                    );
                }
            }
        }
        drop(s);
        self.wake.notify_one();
    }

    /// Decides at `now`; every fence due, not carried out yet.
    pub(crate) fn due(&self, now: Instant) -> Vec<(String, Due)> {
        let mut s = self.lock();
        s.decide(now);
        s.due.iter().map(|(k, d)| (k.clone(), d.clone())).collect()
    }

    /// The bursts watched now.
    #[cfg(test)]
    pub(crate) fn watched(&self) -> Vec<String> {
        self.lock().leads.keys().cloned().collect()
    }

    /// When the next fence could be decided (`None`: no burst is watched).
    pub(crate) fn next_decision(&self) -> Option<Instant> {
        let s = self.lock();
        let reached = s
            .leads
            .iter()
            .map(|(key, lead)| (key.clone(), lead.reached))
            .collect();
        next_decision(s.hub_heard, &reached, s.after)
    }

    /// Waits until something is decided or watched.
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }

    /// The fence of `key` is carried out (its Job deleted, or gone), at `unix_millis`.
    pub(crate) fn carried_out(&self, key: &str, unix_millis: i64) {
        let mut s = self.lock();
        let after = s.after;
        let Some(due) = s.due.remove(key) else {
            return;
        };
        s.fenced.insert(
            key.to_string(),
            Fenced {
                unix_millis,
                why: due.why(after),
                created_anew_millis: None,
            },
        );
        drop(s);
        self.carried.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that changes when a fence is carried out.
    pub(crate) fn carried(&self) -> watch::Receiver<u64> {
        self.carried.subscribe()
    }

    /// The bursts fenced whose Job is not created anew yet: a snapshot that lists them
    /// applies them in full.
    pub(crate) fn awaiting_creation(&self) -> Vec<String> {
        self.lock()
            .fenced
            .iter()
            .filter(|(_, f)| f.created_anew_millis.is_none())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Burst `key`'s objects were written anew at `unix_millis` (no news unless it was
    /// fenced).
    pub(crate) fn created_anew(&self, key: &str, unix_millis: i64) {
        if let Some(f) = self.lock().fenced.get_mut(key) {
            f.created_anew_millis.get_or_insert(unix_millis);
        }
    }

    /// The [`FENCED`] condition of burst `key`, once it was fenced.
    pub(crate) fn condition(&self, key: &str) -> Option<Condition> {
        let s = self.lock();
        let f = s.fenced.get(key)?;
        let (status, reason, message, at) = match f.created_anew_millis {
            None => (
                "True",
                HUB_AND_LEAD_UNREACHABLE,
                format!(
                    "the spoke deleted its Job: {}; its ranks may run in another cluster once the hub's grace is over, and it is created anew if the hub assigns it here again",
                    f.why
                ),
                f.unix_millis,
            ),
            Some(at) => (
                "False",
                CREATED_ANEW,
                format!(
                    "the spoke had deleted its Job ({}) and created it anew when the hub assigned it here again",
                    f.why
                ),
                at,
            ),
        };
        Some(Condition {
            r#type: FENCED.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message,
            last_transition_unix_millis: at,
        })
    }
}

#[cfg(test)]
mod tests;
