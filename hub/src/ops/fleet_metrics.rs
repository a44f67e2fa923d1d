//! The hub's metrics of its fleet, what an operator alerts on (`deploy/prometheus/`):
//!
//! | name | type | labels |
//! |------|------|--------|
//! | `flux_hub_spoke_connected` | gauge (0 or 1) | `spoke` |
//! | `flux_hub_spoke_last_report_timestamp_seconds` | gauge (Unix seconds) | `spoke` |
//! | `flux_hub_bursts` | gauge | `spoke` (`status.bursts[].cluster`, empty while placed nowhere), `phase` (`status.bursts[].phase`) |
//! | `flux_hub_bursts_unplaced` | gauge | |
//! | `flux_hub_spoke_refusals_total` | counter | `spoke`, `reason` |
//! | `flux_hub_snapshot_apply_seconds` | histogram (10 ms to 1 h) | `spoke` |
//! | `flux_hub_burst_first_broker_ready_seconds` | histogram (100 ms to 1 h) | |
//!
//! Label values are bounded: spokes are those that called this process with a pinned
//! certificate, phases are the status's few words, reasons the few of
//! [`FleetMetrics::spoke_refused`]. No MiniCluster name is a
//! label: the burst counts are totals, kept per MiniCluster only to subtract what a
//! MiniCluster counted before (one small map each, dropped with it).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets_range};
use prometheus_client::registry::{Registry, Unit};

/// Buckets of `flux_hub_snapshot_apply_seconds`: 10 ms to an hour.
fn apply_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets_range(0.01, 3600.0, 20)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SpokeLabels {
    spoke: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    spoke: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabels {
    spoke: String,
    phase: String,
}

/// What one MiniCluster's bursts count: by spoke and phase, and how many are placed
/// nowhere.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Counted {
    phases: BTreeMap<(String, String), i64>,
    unplaced: i64,
}

/// The fleet's metrics (see the module doc), registered with the hub's others.
#[derive(Debug)]
pub struct FleetMetrics {
    spoke_connected: Family<SpokeLabels, Gauge>,
    spoke_last_report: Family<SpokeLabels, Gauge>,
    spoke_refusals: Family<RefusalLabels, Counter>,
    snapshot_apply: Family<SpokeLabels, Histogram>,
    first_broker_ready: Histogram,
    bursts: Family<PhaseLabels, Gauge>,
    bursts_unplaced: Gauge,
    by_minicluster: Mutex<HashMap<String, Counted>>,
}

impl FleetMetrics {
    /// The fleet's metrics, registered in `registry`.
    pub(super) fn register(registry: &mut Registry) -> FleetMetrics {
        let fleet = FleetMetrics {
            spoke_connected: Family::default(),
            spoke_last_report: Family::default(),
            spoke_refusals: Family::default(),
            snapshot_apply: Family::new_with_constructor(|| Histogram::new(apply_buckets())),
            first_broker_ready: Histogram::new(exponential_buckets_range(0.1, 3600.0, 18)),
            bursts: Family::default(),
            bursts_unplaced: Gauge::default(),
            by_minicluster: Mutex::new(HashMap::new()),
        };
        registry.register(
            "flux_hub_spoke_connected",
            "1 while the spoke holds its Watch stream to this hub, 0 once it has gone",
            fleet.spoke_connected.clone(),
        );
        registry.register(
            "flux_hub_spoke_last_report_timestamp_seconds",
            "When the spoke's last status report reached this hub (Unix seconds)",
            fleet.spoke_last_report.clone(),
        );
        registry.register(
            "flux_hub_spoke_refusals",
            "Calls of a pinned spoke this hub refused, by reason: protocol-too-old, protocol-too-new, protocol-unreadable (its protocol revision), second-stream (it held a Watch already), report-rate (it reported too often)",
            fleet.spoke_refusals.clone(),
        );
        registry.register_with_unit(
            "flux_hub_snapshot_apply",
            "From a change of a spoke's assignments at the hub to the spoke's report that it applied it (including any time the spoke was away)",
            Unit::Seconds,
            fleet.snapshot_apply.clone(),
        );
        registry.register_with_unit(
            "flux_hub_burst_first_broker_ready",
            "From a burst's first snapshot with brokers to its spoke's first report of a ready broker (bursts this process dispatched)",
            Unit::Seconds,
            fleet.first_broker_ready.clone(),
        );
        registry.register(
            "flux_hub_bursts",
            "Bursts of every MiniCluster, by their status phase",
            fleet.bursts.clone(),
        );
        registry.register(
            "flux_hub_bursts_unplaced",
            "Bursts that name candidates and are placed on none of them",
            fleet.bursts_unplaced.clone(),
        );
        fleet
    }

    /// Whether `spoke` holds its Watch stream now.
    pub fn set_spoke_connected(&self, spoke: &str, connected: bool) {
        self.spoke_connected
            .get_or_create(&SpokeLabels {
                spoke: spoke.to_string(),
            })
            .set(i64::from(connected));
    }

    /// The hub refused a call of `spoke` for `reason` (one of the fixed words the metric's
    /// help lists).
    pub fn spoke_refused(&self, spoke: &str, reason: &'static str) {
        self.spoke_refusals
            .get_or_create(&RefusalLabels {
                spoke: spoke.to_string(),
                reason,
            })
            .inc();
    }

    /// `spoke` reported applying a change the hub made `seconds` before.
    pub fn snapshot_applied(&self, spoke: &str, seconds: f64) {
        self.snapshot_apply
            .get_or_create(&SpokeLabels {
                spoke: spoke.to_string(),
            })
            .observe(seconds);
    }

    /// A burst's first broker was reported ready `seconds` after it was dispatched.
    pub fn first_broker_ready(&self, seconds: f64) {
        self.first_broker_ready.observe(seconds);
    }

    /// `spoke`'s report reached the hub at `unix_seconds`.
    pub fn spoke_reported(&self, spoke: &str, unix_seconds: i64) {
        self.spoke_last_report
            .get_or_create(&SpokeLabels {
                spoke: spoke.to_string(),
            })
            .set(unix_seconds);
    }

    /// The bursts of MiniCluster `key` now, each as the spoke it is placed on (empty:
    /// none) and its status phase: what it counted before is replaced.
    pub fn set_bursts<'a>(&self, key: &str, bursts: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let mut now = Counted::default();
        for (spoke, phase) in bursts {
            *now.phases
                .entry((spoke.to_string(), phase.to_string()))
                .or_default() += 1;
            now.unplaced += i64::from(spoke.is_empty());
        }
        let mut by = self
            .by_minicluster
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let before = if now == Counted::default() {
            by.remove(key)
        } else {
            by.insert(key.to_string(), now.clone())
        }
        .unwrap_or_default();
        self.apply(&before, -1);
        self.apply(&now, 1);
    }

    /// MiniCluster `key` is gone: its bursts count no more.
    pub fn forget_minicluster(&self, key: &str) {
        self.set_bursts(key, []);
    }

    /// Adds `counted` (`sign` 1) or takes it away (-1).
    fn apply(&self, counted: &Counted, sign: i64) {
        for ((spoke, phase), n) in &counted.phases {
            self.bursts
                .get_or_create(&PhaseLabels {
                    spoke: spoke.clone(),
                    phase: phase.clone(),
                })
                .inc_by(sign * n);
        }
        self.bursts_unplaced.inc_by(sign * counted.unplaced);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn fleet() -> (Registry, FleetMetrics) {
        let mut registry = Registry::default();
        let fleet = FleetMetrics::register(&mut registry);
        (registry, fleet)
    }

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        encode(&mut out, registry).expect("encode");
        out
    }

    #[test]
    fn burst_counts_are_totals_that_follow_each_minicluster() {
        let (registry, fleet) = fleet();
        fleet.set_bursts("a/x", [("gke", "Running"), ("gke", "Running")]);
        fleet.set_bursts("b/y", [("kind", "Unreachable"), ("", "Pending")]);
        let out = text(&registry);
        assert!(
            out.contains("flux_hub_bursts{spoke=\"gke\",phase=\"Running\"} 2"),
            "{out}"
        );
        assert!(
            out.contains("flux_hub_bursts{spoke=\"kind\",phase=\"Unreachable\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("flux_hub_bursts{spoke=\"\",phase=\"Pending\"} 1"),
            "{out}"
        );
        assert!(out.contains("flux_hub_bursts_unplaced 1"), "{out}");
        // A MiniCluster's bursts change: its old counts go.
        fleet.set_bursts("b/y", [("gke", "Running"), ("gke", "Running")]);
        let out = text(&registry);
        assert!(
            out.contains("flux_hub_bursts{spoke=\"gke\",phase=\"Running\"} 4"),
            "{out}"
        );
        assert!(
            out.contains("flux_hub_bursts{spoke=\"kind\",phase=\"Unreachable\"} 0"),
            "{out}"
        );
        assert!(out.contains("flux_hub_bursts_unplaced 0"), "{out}");
        fleet.forget_minicluster("a/x");
        fleet.forget_minicluster("never/seen");
        let out = text(&registry);
        assert!(
            out.contains("flux_hub_bursts{spoke=\"gke\",phase=\"Running\"} 2"),
            "{out}"
        );
        assert!(
            !out.contains("a/x") && !out.contains("b/y"),
            "no names: {out}"
        );
        assert_eq!(
            fleet.by_minicluster.lock().expect("lock").len(),
            1,
            "a forgotten MiniCluster keeps nothing"
        );
    }

    #[test]
    fn a_spoke_is_connected_then_gone_and_its_last_report_is_kept() {
        let (registry, fleet) = fleet();
        fleet.set_spoke_connected("gke", true);
        fleet.spoke_reported("gke", 1_795_980_000);
        let out = text(&registry);
        assert!(
            out.contains("flux_hub_spoke_connected{spoke=\"gke\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("flux_hub_spoke_last_report_timestamp_seconds{spoke=\"gke\"} 1795980000"),
            "{out}"
        );
        fleet.set_spoke_connected("gke", false);
        assert!(text(&registry).contains("flux_hub_spoke_connected{spoke=\"gke\"} 0"));
    }
}
