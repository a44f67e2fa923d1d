//! What each bursting MiniCluster's lead broker sees of its instance: which of each
//! burst's hosts are online, as this hub last read it from the lead's reporter
//! (`flux_shared::scripts::reporter_script`). Only reads made by this process are kept, so a
//! decision taken from a view (a burst Running, a direct burst switched to the relay) rests
//! on what this hub confirmed since it started, never on a view it inherited.
//!
//! Memory: per MiniCluster, one count per burst and the last error: bounded by its bursts,
//! not by its hosts or by how often it is read.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use flux_shared::federation::McKey;
use flux_shared::plan::Plan;

/// How many of a burst's brokers the lead sees online.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Joined {
    /// Its hosts the lead sees online.
    pub online: i32,
    /// When the view was read.
    pub read_at: SystemTime,
    /// Since when every read of this hub saw none of them online (`None` when the last
    /// read saw one).
    pub none_since: Option<SystemTime>,
}

/// One burst in a lead's view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Seen {
    online: i32,
    none_since: Option<SystemTime>,
}

/// The lead's view of one MiniCluster, as last read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct View {
    /// Per burst name, from the last read that worked.
    online: BTreeMap<String, Seen>,
    /// When that read was made.
    read_at: Option<SystemTime>,
    /// Why the last read failed, and when; cleared by one that works.
    error: Option<(SystemTime, String)>,
}

/// The lead views of every bursting MiniCluster; shared by the poller (which records) and
/// the reconcile (which reads).
#[derive(Debug, Default)]
pub struct LeadViews {
    views: Mutex<HashMap<McKey, View>>,
}

/// One host of a reporter's answer: its name and whether its broker is online.
pub type HostOnline<'a> = (&'a str, bool);

impl LeadViews {
    /// Records a read of `key`'s lead made at `at`: `hosts` as the lead listed them. Each
    /// host is counted for the burst of `plan` it belongs to (`<burst>-<index>`, within
    /// the burst's declared hosts); hosts of no burst (the root's) are not kept. Returns
    /// whether a burst's count changed (the reconcile should look again).
    pub fn record<'a>(
        &self,
        key: &McKey,
        plan: &Plan,
        hosts: impl IntoIterator<Item = HostOnline<'a>>,
        at: SystemTime,
    ) -> bool {
        let mut online: BTreeMap<String, i32> = plan
            .bursts
            .iter()
            .filter(|b| !b.retired)
            .map(|b| (b.name.clone(), 0))
            .collect();
        for (host, up) in hosts {
            if !up {
                continue;
            }
            if let Some(burst) = burst_of(plan, host)
                && let Some(n) = online.get_mut(burst)
            {
                *n = n.saturating_add(1);
            }
        }
        let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        let view = views.entry(key.clone()).or_default();
        let changed = view.online.len() != online.len()
            || online
                .iter()
                .any(|(b, n)| view.online.get(b).map(|s| s.online) != Some(*n))
            || view.read_at.is_none()
            || view.error.is_some();
        let online = online
            .into_iter()
            .map(|(burst, n)| {
                let before = view.online.get(&burst).and_then(|s| s.none_since);
                let none_since = (n == 0).then(|| before.unwrap_or(at));
                (
                    burst,
                    Seen {
                        online: n,
                        none_since,
                    },
                )
            })
            .collect();
        view.online = online;
        view.read_at = Some(at);
        view.error = None;
        changed
    }

    /// Records that `key`'s lead could not be read at `at`, and why. Returns whether that
    /// is news (the first failure after a read that worked, or another reason than the
    /// last failure's).
    pub fn failed(&self, key: &McKey, why: String, at: SystemTime) -> bool {
        let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        let view = views.entry(key.clone()).or_default();
        let news = view.error.as_ref().is_none_or(|(_, before)| *before != why);
        view.error = Some((at, why));
        news
    }

    /// How many of burst `burst`'s brokers `key`'s lead saw online at its last read that
    /// worked; `None` before one did.
    pub fn joined(&self, key: &McKey, burst: &str) -> Option<Joined> {
        let views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        let view = views.get(key)?;
        let seen = view.online.get(burst)?;
        Some(Joined {
            online: seen.online,
            read_at: view.read_at?,
            none_since: seen.none_since,
        })
    }

    /// Every burst's online count at `key`'s lead's last read that worked (empty before
    /// one did), and why its last read failed, if it did.
    pub fn seen(&self, key: &McKey) -> (BTreeMap<String, i32>, Option<String>) {
        let views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        views.get(key).map_or_else(Default::default, |v| {
            let online = if v.read_at.is_some() {
                v.online
                    .iter()
                    .map(|(b, s)| (b.clone(), s.online))
                    .collect()
            } else {
                BTreeMap::new()
            };
            (online, v.error.as_ref().map(|(_, why)| why.clone()))
        })
    }

    /// Why `key`'s lead's view could not be read last time; `None` when it could.
    pub fn error(&self, key: &McKey) -> Option<String> {
        let views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        views.get(key)?.error.as_ref().map(|(_, why)| why.clone())
    }

    /// Forgets every MiniCluster but those `keep` says to.
    pub fn retain(&self, keep: impl Fn(&McKey) -> bool) {
        self.views
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|k, _| keep(k));
    }

    /// Forgets `key`.
    pub fn forget(&self, key: &McKey) {
        self.views
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }
}

/// The burst of `plan` that host `host` belongs to: `<burst>-<index>` with the index below
/// its declared hosts.
fn burst_of<'p>(plan: &'p Plan, host: &str) -> Option<&'p str> {
    let (prefix, index) = host.rsplit_once('-')?;
    let index: i32 = index.parse().ok()?;
    plan.bursts
        .iter()
        .find(|b| b.name == prefix && (0..b.max_size).contains(&index))
        .map(|b| b.name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flux_shared::api::MiniCluster;
    use std::time::Duration;

    fn plan() -> Plan {
        let mc: MiniCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "flux-framework.org/v1alpha2",
            "kind": "MiniCluster",
            "metadata": {"name": "root", "namespace": "ns"},
            "spec": {"size": 2, "containers": [{"image": "app"}], "flux": {"bursting": {"clusters": [
                {"name": "gke", "size": 2, "maxSize": 3, "cluster": "a"},
                {"name": "gke-b", "size": 1, "cluster": "b"},
            ]}}},
        }))
        .unwrap();
        Plan::new(&mc).unwrap()
    }

    #[test]
    fn each_host_counts_for_its_own_burst_and_news_is_told_once() {
        let views = LeadViews::default();
        let key = McKey::new("ns", "root");
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        assert_eq!(views.joined(&key, "gke"), None, "nothing read yet");
        let hosts = [
            ("root-0", true),
            ("root-1", true),
            ("gke-0", true),
            ("gke-1", false),
            ("gke-2", true),
            ("gke-b-0", true),
            // Not a declared host of any burst: a stranger's name is not counted.
            ("gke-3", true),
            ("gke-b-x", true),
        ];
        assert!(views.record(&key, &plan(), hosts, at));
        let gke = views.joined(&key, "gke").unwrap();
        assert_eq!((gke.online, gke.read_at), (2, at));
        assert_eq!(views.joined(&key, "gke-b").unwrap().online, 1);
        assert_eq!(views.joined(&key, "root"), None, "the root is no burst");
        assert!(
            !views.record(&key, &plan(), hosts, at + Duration::from_secs(1)),
            "the same counts are no news"
        );
        assert_eq!(
            views.joined(&key, "gke").unwrap().read_at,
            at + Duration::from_secs(1),
            "but the read's time is kept"
        );
        // A failed read keeps the last view and says why, once.
        assert!(views.failed(&key, "refused".into(), at));
        assert!(!views.failed(&key, "refused".into(), at));
        assert!(
            views.failed(&key, "timed out".into(), at),
            "another reason is news"
        );
        assert!(views.failed(&key, "refused".into(), at));
        assert_eq!(views.error(&key).as_deref(), Some("refused"));
        assert_eq!(views.joined(&key, "gke").unwrap().online, 2);
        assert!(
            views.record(&key, &plan(), hosts, at),
            "a read after a failure is news"
        );
        assert_eq!(views.error(&key), None);
        // Since when none of a burst's brokers is seen: the first read that saw none, kept
        // by the reads after it, dropped by one that sees a broker.
        let none = [("gke-0", false)];
        let later = |s: u64| at + Duration::from_secs(s);
        views.record(&key, &plan(), none, later(10));
        views.record(&key, &plan(), none, later(20));
        assert_eq!(
            views.joined(&key, "gke").unwrap().none_since,
            Some(later(10))
        );
        assert_eq!(
            views.joined(&key, "gke-b").unwrap().none_since,
            Some(later(10))
        );
        views.record(&key, &plan(), [("gke-1", true)], later(30));
        assert_eq!(views.joined(&key, "gke").unwrap().none_since, None);
        views.forget(&key);
        assert_eq!(views.joined(&key, "gke"), None);
    }
}
