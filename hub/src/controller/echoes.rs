//! The hub's own writes, until their watch events come back. A create or apply answers
//! with the object as written; a reconcile has already acted on that answer, so the watch
//! event carrying the same resourceVersion (the echo) must not start another reconcile.
//! Any other event of that object does, as before.

use std::collections::HashMap;
use std::sync::Mutex;

/// An object the hub writes: kind, namespace, name.
type Key = (&'static str, String, String);

/// The resourceVersions of the hub's writes whose watch events have not arrived yet.
#[derive(Debug, Default)]
pub struct Echoes {
    pending: Mutex<HashMap<Key, Vec<String>>>,
}

/// At most this many writes of one object are remembered: a reconcile makes one or two
/// (take over the created fields, then apply), and a later event clears them anyway.
const PER_OBJECT: usize = 4;

impl Echoes {
    /// Remember that the hub wrote `kind` `ns`/`name` at `resource_version`.
    pub fn record(&self, kind: &'static str, ns: &str, name: &str, resource_version: Option<&str>) {
        let (Some(rv), Ok(mut pending)) = (resource_version, self.pending.lock()) else {
            return;
        };
        let versions = pending
            .entry((kind, ns.to_string(), name.to_string()))
            .or_default();
        if versions.len() == PER_OBJECT {
            versions.remove(0);
        }
        versions.push(rv.to_string());
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
        let Ok(mut pending) = self.pending.lock() else {
            return false;
        };
        let key = (kind, ns.to_string(), name.to_string());
        let Some(versions) = pending.get_mut(&key) else {
            return false;
        };
        match resource_version.and_then(|rv| versions.iter().position(|v| v == rv)) {
            Some(at) => {
                versions.drain(..=at);
                if versions.is_empty() {
                    pending.remove(&key);
                }
                true
            }
            None => {
                pending.remove(&key);
                false
            }
        }
    }

    /// Forget an object that is gone.
    pub fn forget(&self, kind: &'static str, ns: &str, name: &str) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(&(kind, ns.to_string(), name.to_string()));
        }
    }

    /// How many objects have writes whose echo is still to come.
    pub fn len(&self) -> usize {
        self.pending.lock().map_or(0, |p| p.len())
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
        e.record("Job", "hpc", "a", Some("10"));
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
        e.record("Job", "hpc", "a", Some("10"));
        e.record("Job", "hpc", "a", Some("11"));
        assert!(e.is_echo("Job", "hpc", "a", Some("10")));
        assert!(e.is_echo("Job", "hpc", "a", Some("11")));
        e.record("Job", "hpc", "a", Some("12"));
        assert!(
            !e.is_echo("Job", "hpc", "a", Some("13")),
            "someone else's write"
        );
        assert!(!e.is_echo("Job", "hpc", "a", Some("12")), "cleared by it");
        e.record("Job", "hpc", "a", None);
        assert!(e.is_empty(), "a write without a version is not remembered");
    }

    #[test]
    fn a_lost_echo_is_skipped_and_a_gone_object_forgotten() {
        let e = Echoes::default();
        e.record("Service", "hpc", "a", Some("5"));
        e.record("Service", "hpc", "a", Some("6"));
        // The watch restarted and only the later version arrived.
        assert!(e.is_echo("Service", "hpc", "a", Some("6")));
        assert!(e.is_empty());
        e.record("Service", "hpc", "a", Some("7"));
        e.forget("Service", "hpc", "a");
        assert!(e.is_empty());
        for v in 0..10 {
            e.record("Service", "hpc", "a", Some(&v.to_string()));
        }
        assert!(!e.is_echo("Service", "hpc", "a", Some("0")), "bounded");
        assert!(
            !e.is_echo("Service", "hpc", "a", Some("9")),
            "cleared by the miss"
        );
    }
}
