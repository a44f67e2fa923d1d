//! The hub's own writes, until their watch events come back. A create or apply answers
//! with the object as written; a reconcile has already acted on that answer, so the watch
//! event carrying the same resourceVersion (the echo) must not start another reconcile.
//! Any other event of that object does, as before.
//!
//! The echo can arrive before the answer: the API server sends the watch event and the
//! response at the same moment. So a write is announced before it is sent
//! ([`Echoes::begin`]), and events of an object with a write in flight wait, in order,
//! until the write's answer says which version is the hub's ([`Echoes::settled`]).

use std::collections::HashMap;
use std::sync::Mutex;

/// An object the hub writes: kind, namespace, name.
type Key = (&'static str, String, String);

/// The hub's writes in flight, and the resourceVersions of those answered whose watch
/// events have not arrived yet.
#[derive(Debug)]
pub struct Echoes {
    state: Mutex<State>,
    /// Bumped whenever a write in flight ends.
    settled: tokio::sync::watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    pending: HashMap<Key, Vec<String>>,
    in_flight: HashMap<Key, usize>,
}

impl Default for Echoes {
    fn default() -> Self {
        Echoes {
            state: Mutex::default(),
            settled: tokio::sync::watch::Sender::new(0),
        }
    }
}

/// At most this many writes of one object are remembered: a reconcile makes one or two
/// (take over the created fields, then apply), and a later event clears them anyway.
const PER_OBJECT: usize = 4;

/// A write of one object in flight, from [`Echoes::begin`]. [`Write::done`] with the
/// answer's resourceVersion records its echo; dropped without (the request failed), it
/// only ends.
#[must_use = "a write in flight holds back the events of its object until it ends"]
pub struct Write<'a> {
    echoes: &'a Echoes,
    key: Option<Key>,
}

impl Write<'_> {
    /// The write succeeded and left the object at `resource_version`.
    pub fn done(mut self, resource_version: Option<&str>) {
        if let Some(key) = self.key.take() {
            self.echoes.end(key, resource_version);
        }
    }
}

impl Drop for Write<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.echoes.end(key, None);
        }
    }
}

impl Echoes {
    /// Announce a write of `kind` `ns`/`name` about to be sent.
    pub fn begin(&self, kind: &'static str, ns: &str, name: &str) -> Write<'_> {
        let key = (kind, ns.to_string(), name.to_string());
        if let Ok(mut state) = self.state.lock() {
            *state.in_flight.entry(key.clone()).or_default() += 1;
        }
        Write {
            echoes: self,
            key: Some(key),
        }
    }

    fn end(&self, key: Key, resource_version: Option<&str>) {
        if let Ok(mut state) = self.state.lock() {
            if let Some(rv) = resource_version {
                let versions = state.pending.entry(key.clone()).or_default();
                if versions.len() == PER_OBJECT {
                    versions.remove(0);
                }
                versions.push(rv.to_string());
            }
            if let Some(n) = state.in_flight.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    state.in_flight.remove(&key);
                }
            }
        }
        self.settled.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Whether a write of `kind` `ns`/`name` is in flight: its events must wait.
    pub fn in_flight(&self, kind: &'static str, ns: &str, name: &str) -> bool {
        self.state.lock().is_ok_and(|state| {
            state
                .in_flight
                .contains_key(&(kind, ns.to_string(), name.to_string()))
        })
    }

    /// Changes whenever a write in flight ends.
    pub fn settled(&self) -> tokio::sync::watch::Receiver<u64> {
        self.settled.subscribe()
    }

    /// Whether an event of `kind` `ns`/`name` at `resource_version` is the echo of one
    /// of the hub's writes. Every event settles what was remembered of the object up to
    /// it: an echo forgets its write and the ones before it; another version (a write by
    /// someone else, or a write that changed nothing and so never echoes) forgets all.
    pub fn is_echo(
        &self,
        kind: &'static str,
        ns: &str,
        name: &str,
        resource_version: Option<&str>,
    ) -> bool {
        let Ok(mut state) = self.state.lock() else {
            return false;
        };
        let key = (kind, ns.to_string(), name.to_string());
        let Some(versions) = state.pending.get_mut(&key) else {
            return false;
        };
        match resource_version.and_then(|rv| versions.iter().position(|v| v == rv)) {
            Some(at) => {
                versions.drain(..=at);
                if versions.is_empty() {
                    state.pending.remove(&key);
                }
                true
            }
            None => {
                state.pending.remove(&key);
                false
            }
        }
    }

    /// Forget an object that is gone.
    pub fn forget(&self, kind: &'static str, ns: &str, name: &str) {
        if let Ok(mut state) = self.state.lock() {
            state
                .pending
                .remove(&(kind, ns.to_string(), name.to_string()));
        }
    }

    /// How many objects have writes whose echo is still to come.
    pub fn len(&self) -> usize {
        self.state.lock().map_or(0, |s| s.pending.len())
    }

    /// Whether no echo is awaited.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_echo_of_a_write_is_recognised_once() {
        let e = Echoes::default();
        e.begin("Job", "hpc", "a").done(Some("10"));
        assert!(!e.is_echo("Job", "hpc", "b", Some("10")), "another object");
        assert!(
            !e.is_echo("ConfigMap", "hpc", "a", Some("10")),
            "another kind"
        );
        assert!(e.is_echo("Job", "hpc", "a", Some("10")));
        assert!(!e.is_echo("Job", "hpc", "a", Some("10")), "only once");
        assert!(e.is_empty());
    }

    #[test]
    fn two_writes_echo_in_order_and_a_foreign_version_clears_them() {
        let e = Echoes::default();
        e.begin("Job", "hpc", "a").done(Some("10"));
        e.begin("Job", "hpc", "a").done(Some("11"));
        assert!(e.is_echo("Job", "hpc", "a", Some("10")));
        assert!(e.is_echo("Job", "hpc", "a", Some("11")));
        e.begin("Job", "hpc", "a").done(Some("12"));
        assert!(
            !e.is_echo("Job", "hpc", "a", Some("13")),
            "someone else's write"
        );
        assert!(!e.is_echo("Job", "hpc", "a", Some("12")), "cleared by it");
        e.begin("Job", "hpc", "a").done(None);
        assert!(e.is_empty(), "a write without a version is not remembered");
    }

    #[test]
    fn a_lost_echo_is_skipped_and_a_gone_object_forgotten() {
        let e = Echoes::default();
        e.begin("Service", "hpc", "a").done(Some("5"));
        e.begin("Service", "hpc", "a").done(Some("6"));
        // The watch restarted and only the later version arrived.
        assert!(e.is_echo("Service", "hpc", "a", Some("6")));
        assert!(e.is_empty());
        e.begin("Service", "hpc", "a").done(Some("7"));
        e.forget("Service", "hpc", "a");
        assert!(e.is_empty());
        for v in 0..10 {
            e.begin("Service", "hpc", "a").done(Some(&v.to_string()));
        }
        assert!(!e.is_echo("Service", "hpc", "a", Some("0")), "bounded");
        assert!(
            !e.is_echo("Service", "hpc", "a", Some("9")),
            "cleared by the miss"
        );
    }

    #[test]
    fn a_write_is_in_flight_until_it_ends_and_its_end_is_announced() {
        let e = Echoes::default();
        let mut settled = e.settled();
        let first = e.begin("Job", "hpc", "a");
        let failed = e.begin("Job", "hpc", "a");
        assert!(e.in_flight("Job", "hpc", "a"));
        assert!(!e.in_flight("Job", "hpc", "b"));
        assert!(!settled.has_changed().expect("open"));
        drop(failed);
        assert!(settled.has_changed().expect("open"));
        settled.mark_unchanged();
        assert!(e.in_flight("Job", "hpc", "a"), "one still in flight");
        assert!(e.is_empty(), "a failed write has no echo");
        first.done(Some("7"));
        assert!(settled.has_changed().expect("open"));
        assert!(!e.in_flight("Job", "hpc", "a"));
        assert!(e.is_echo("Job", "hpc", "a", Some("7")));
    }
}
