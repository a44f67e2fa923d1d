//! What this process remembers of each MiniCluster between its reconciles, in one entry per
//! MiniCluster: echoes of its own writes a cache has not shown yet, and what the last pass
//! left. None of it is a decision's only input: a restarted process starts without it and
//! each reconcile still converges; it saves repeated writes and scans. Dropped with
//! [`Memories::forget`] when the MiniCluster is gone.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use flux_shared::federation::McKey;

use crate::controller::watch::verified::Verified;

/// What is remembered of one MiniCluster.
#[derive(Debug, Default)]
pub(in crate::controller) struct Memory {
    /// Consecutive failed reconciles, for capped exponential backoff.
    pub failures: u32,
    /// The CURVE certificate this process generated, until the Secret cache shows it: a
    /// reconcile triggered by the new Job can run before the Secret's watch event arrives,
    /// and must not generate (and force-apply) a second certificate.
    pub generated_cert: Option<String>,
    /// A hash of the status this process last wrote (with the MiniCluster's UID), and when:
    /// a reconcile that runs before the cache shows that write would otherwise write it,
    /// and publish its Events, a second time.
    pub written_status: Option<(u64, Instant)>,
    /// The UID and generation whose orphans were last deleted: only a spec change can make
    /// new ones, so later passes at that generation skip the scan.
    pub pruned: Option<(String, i64)>,
    /// What the last pass left as rendered ([`Verified`]).
    pub verified: Option<Verified>,
}

/// Every MiniCluster's [`Memory`].
#[derive(Debug, Default)]
pub(in crate::controller) struct Memories(Mutex<HashMap<McKey, Memory>>);

impl Memories {
    /// `f` of `key`'s memory, made empty when there is none yet.
    pub fn with<R>(&self, key: &McKey, f: impl FnOnce(&mut Memory) -> R) -> R {
        // Only plain values are changed under the lock: a panic cannot leave one torn.
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f(all.entry(key.clone()).or_default())
    }

    /// `f` of `key`'s memory, if there is one.
    pub fn read<R>(&self, key: &McKey, f: impl FnOnce(&Memory) -> R) -> Option<R> {
        let all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.get(key).map(f)
    }

    /// Drop what is remembered of `key`.
    pub fn forget(&self, key: &McKey) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_is_made_on_first_use_and_dropped_whole() {
        let memories = Memories::default();
        let key = McKey::new("ns", "mc");
        assert_eq!(memories.read(&key, |m| m.failures), None);
        memories.with(&key, |m| {
            m.failures += 1;
            m.pruned = Some(("uid".into(), 3));
        });
        assert_eq!(memories.read(&key, |m| m.failures), Some(1));
        memories.forget(&key);
        assert_eq!(memories.read(&key, |m| m.pruned.clone()), None);
    }
}
