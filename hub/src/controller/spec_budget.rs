//! How many large specs are reconciled at once. A reconcile holds several transient copies
//! of its MiniCluster's spec (the plan, the rendered ConfigMap with the scripts, the apply's
//! request body), and specs reach etcd's 1.5 MiB object limit: sixteen large tenants
//! reconciled together would lift the hub's memory by well over 100 MiB, and the allocator
//! keeps that peak. Reconciles therefore take a share of a byte budget by the size of their
//! spec; specs under [`SMALL_SPEC`] take none, so ordinary MiniClusters never wait here.

use std::sync::Arc;

use flux_shared::api::MiniClusterSpec;
use tokio::sync::{Semaphore, SemaphorePermit};

/// Specs up to this size (encoded as JSON) are reconciled without a share of the budget.
pub const SMALL_SPEC: usize = 64 << 10;

/// Spec bytes reconciled at once, beyond small specs: five at etcd's object limit.
pub const BUDGET: usize = 8 << 20;

/// The budget, shared by every reconcile of the process.
#[derive(Clone, Debug)]
pub struct SpecBudget {
    units: Arc<Semaphore>,
}

impl Default for SpecBudget {
    fn default() -> Self {
        SpecBudget {
            units: Arc::new(Semaphore::new(BUDGET / SMALL_SPEC)),
        }
    }
}

impl SpecBudget {
    /// Waits until `spec` may be reconciled; the returned share is given back when dropped.
    pub async fn turn(&self, spec: &MiniClusterSpec) -> Option<SemaphorePermit<'_>> {
        let units = units_of(encoded_len(spec));
        if units == 0 {
            return None;
        }
        // A closed semaphore cannot happen (it is never closed): run unbudgeted then.
        self.units.acquire_many(units).await.ok()
    }
}

/// The budget units a spec of `bytes` takes: none when small, at most the whole budget.
fn units_of(bytes: usize) -> u32 {
    if bytes <= SMALL_SPEC {
        return 0;
    }
    let units = bytes.div_ceil(SMALL_SPEC).min(BUDGET / SMALL_SPEC);
    u32::try_from(units).unwrap_or(u32::MAX)
}

/// The length of `spec` as JSON, counted without building the text.
fn encoded_len(spec: &MiniClusterSpec) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serializing a spec into a counter cannot fail; a failure would count what was written.
    let _ = serde_json::to_writer(&mut count, spec);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_specs_take_nothing_and_large_ones_a_share_up_to_the_whole() {
        assert_eq!(units_of(2_000), 0);
        assert_eq!(units_of(SMALL_SPEC), 0);
        assert_eq!(units_of(SMALL_SPEC + 1), 2);
        assert_eq!(units_of(1_400_000), 22);
        assert_eq!(units_of(usize::MAX / 2), (BUDGET / SMALL_SPEC) as u32);
    }

    #[tokio::test]
    async fn large_specs_wait_for_the_budget_and_small_ones_never_do() {
        let budget = SpecBudget::default();
        let script = "x".repeat(BUDGET / 3);
        let large: MiniClusterSpec = serde_json::from_value(serde_json::json!({
            "containers": [{"image": "a", "commands": {"script": script}}],
        }))
        .unwrap();
        let small: MiniClusterSpec =
            serde_json::from_value(serde_json::json!({"containers": [{"image": "a"}]})).unwrap();
        let first = budget.turn(&large).await;
        assert!(first.is_some());
        let second = budget.turn(&large).await;
        assert!(second.is_some(), "two thirds fit");
        let waiting =
            tokio::time::timeout(std::time::Duration::from_millis(50), budget.turn(&large));
        assert!(waiting.await.is_err(), "a third waits");
        assert!(
            budget.turn(&small).await.is_none(),
            "a small spec never waits"
        );
        drop(first);
        assert!(budget.turn(&large).await.is_some());
    }
}
