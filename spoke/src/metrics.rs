//! Prometheus metrics of the spoke, exposed in the OpenMetrics text format on `/metrics`.
//!
//! | name | type | labels |
//! |------|------|--------|
//! | `flux_spoke_connected` | gauge (0 or 1): a Watch stream to the hub is open | |
//! | `flux_spoke_snapshots_received_total` | counter (heartbeats included) | |
//! | `flux_spoke_snapshot_version` | gauge: version of the last snapshot fully applied | |
//! | `flux_spoke_assignments` | gauge: assignments in the last snapshot | |
//! | `flux_spoke_applies_total` | counter: server-side applies | `kind` |
//! | `flux_spoke_deletes_total` | counter: deleted objects | `kind` |
//! | `flux_spoke_reports_sent_total` | counter: Report calls the hub accepted | |
//! | `flux_spoke_fenced_total` | counter: direct bursts whose Job the spoke deleted itself, the hub and their lead broker unreachable (`crate::fence`) | |
//! | `flux_spoke_errors_total` | counter | `kind` (see [`ErrorKind`]) |
//! | `flux_spoke_certificate_expiry_timestamp_seconds` | gauge: when its client certificate expires (Unix seconds; 0 without one) | |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The `kind` label of `flux_spoke_errors_total`: the step that failed, of the session
/// with the hub (the agent), of applying a snapshot (`crate::apply::ApplyError`) or of a
/// report (`crate::report::ReportError`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Session: could not connect to the hub (TCP or TLS).
    Connect,
    /// Session: the hub refused the certificate (`UNAUTHENTICATED`, `PERMISSION_DENIED`).
    Auth,
    /// Session: the hub is not serving assignments yet (`UNAVAILABLE` on Watch).
    NotReady,
    /// Session: the hub and this spoke speak protocol revisions more than one apart (either
    /// side refused the other).
    Protocol,
    /// Session: the Watch call or stream failed or ended.
    Stream,
    /// Apply, `observe`: reading the spoke's objects, policy, a burst's namespace or the
    /// Jobs failed (nothing applied or deleted).
    Observe,
    /// Apply, `plan`: an assignment was refused (`BURST_PHASE_REFUSED`): it does not
    /// render as the hub's, or the policy does not admit it.
    Plan,
    /// Apply, `namespace`: creating a namespace failed.
    Namespace,
    /// Apply, `names`: a name an assignment needs is taken (refused as `NameTaken`) or
    /// could not be read.
    Names,
    /// Apply, `write`: a server-side apply failed.
    Write,
    /// Apply, `relay`: a relayed burst's listener or Service could not be set up.
    Relay,
    /// Apply, `delete`: a delete failed.
    Delete,
    /// Fence: deleting the Job of a burst to fence failed (retried).
    Fence,
    /// Report, `jobs`: reading the spoke's Jobs failed.
    Jobs,
    /// Report, `report`: a Report call failed.
    Report,
}

impl ErrorKind {
    /// Every kind, in the order of the steps.
    pub const ALL: [ErrorKind; 15] = [
        ErrorKind::Connect,
        ErrorKind::Auth,
        ErrorKind::NotReady,
        ErrorKind::Protocol,
        ErrorKind::Stream,
        ErrorKind::Observe,
        ErrorKind::Plan,
        ErrorKind::Namespace,
        ErrorKind::Names,
        ErrorKind::Write,
        ErrorKind::Relay,
        ErrorKind::Delete,
        ErrorKind::Fence,
        ErrorKind::Jobs,
        ErrorKind::Report,
    ];

    /// The label value: the step's name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Auth => "auth",
            ErrorKind::NotReady => "not_ready",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Stream => "stream",
            ErrorKind::Observe => "observe",
            ErrorKind::Plan => "plan",
            ErrorKind::Namespace => "namespace",
            ErrorKind::Names => "names",
            ErrorKind::Write => "write",
            ErrorKind::Relay => "relay",
            ErrorKind::Delete => "delete",
            ErrorKind::Fence => "fence",
            ErrorKind::Jobs => "jobs",
            ErrorKind::Report => "report",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

/// The spoke's metrics and the registry they are encoded from.
///
/// Every method takes `&self` and the type is `Send + Sync`: share one instance behind an
/// `Arc` between the agent and the HTTP server.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    connected: Gauge,
    snapshots: Counter,
    snapshot_version: Gauge,
    assignments: Gauge,
    certificate_expiry: Gauge,
    applies: Family<KindLabels, Counter>,
    deletes: Family<KindLabels, Counter>,
    reports: Counter,
    fenced: Counter,
    errors: Family<KindLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry with every spoke metric registered, all at zero.
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            connected: Gauge::default(),
            snapshots: Counter::default(),
            snapshot_version: Gauge::default(),
            assignments: Gauge::default(),
            certificate_expiry: Gauge::default(),
            applies: Family::default(),
            deletes: Family::default(),
            reports: Counter::default(),
            fenced: Counter::default(),
            errors: Family::default(),
        };
        let mut registry = Registry::default();
        registry.register(
            "flux_spoke_connected",
            "1 while a Watch stream to the hub is open, else 0",
            m.connected.clone(),
        );
        registry.register(
            "flux_spoke_snapshots_received",
            "Assignment snapshots received from the hub, heartbeats included",
            m.snapshots.clone(),
        );
        registry.register(
            "flux_spoke_snapshot_version",
            "Version of the last snapshot fully applied",
            m.snapshot_version.clone(),
        );
        registry.register(
            "flux_spoke_assignments",
            "Assignments in the last snapshot received",
            m.assignments.clone(),
        );
        registry.register(
            "flux_spoke_applies",
            "Server-side applies, by object kind",
            m.applies.clone(),
        );
        registry.register(
            "flux_spoke_deletes",
            "Objects deleted, by kind",
            m.deletes.clone(),
        );
        registry.register(
            "flux_spoke_reports_sent",
            "Status reports the hub accepted",
            m.reports.clone(),
        );
        registry.register(
            "flux_spoke_fenced",
            "Direct bursts whose Job the spoke deleted itself, the hub and their lead broker unreachable",
            m.fenced.clone(),
        );
        registry.register("flux_spoke_errors", "Errors, by kind", m.errors.clone());
        registry.register(
            "flux_spoke_certificate_expiry_timestamp_seconds",
            "When this spoke's client certificate expires (Unix seconds; 0 without one)",
            m.certificate_expiry.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Records when this spoke's client certificate expires (Unix seconds).
    pub fn set_certificate_expiry(&self, not_after: i64) {
        self.certificate_expiry.set(not_after);
    }

    /// Records whether a Watch stream is open.
    pub fn set_connected(&self, connected: bool) {
        self.connected.set(i64::from(connected));
    }

    /// Records a snapshot received with `assignments` assignments.
    pub fn snapshot_received(&self, assignments: usize) {
        self.snapshots.inc();
        self.assignments
            .set(i64::try_from(assignments).unwrap_or(i64::MAX));
    }

    /// Records that snapshot `version` is fully applied.
    pub fn snapshot_applied(&self, version: u64) {
        self.snapshot_version
            .set(i64::try_from(version).unwrap_or(i64::MAX));
    }

    /// Records a server-side apply of an object of `kind`.
    pub fn applied(&self, kind: &str) {
        self.applies
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Records the deletion of an object of `kind`.
    pub fn deleted(&self, kind: &str) {
        self.deletes
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Records a report the hub accepted.
    pub fn report_sent(&self) {
        self.reports.inc();
    }

    /// Records a burst fenced (its Job deleted by the spoke, or already gone).
    pub fn fenced(&self) {
        self.fenced.inc();
    }

    /// Records an error.
    pub fn error(&self, kind: ErrorKind) {
        self.errors
            .get_or_create(&KindLabels {
                kind: kind.as_str().to_string(),
            })
            .inc();
    }

    /// Every metric in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_encoded_after_use() {
        let m = Metrics::new();
        m.set_connected(true);
        m.snapshot_received(2);
        m.snapshot_applied(9);
        m.applied("Job");
        m.applied("Job");
        m.deleted("ConfigMap");
        m.report_sent();
        m.fenced();
        m.error(ErrorKind::Auth);
        let text = m.encode();
        for line in [
            "flux_spoke_connected 1",
            "flux_spoke_snapshots_received_total 1",
            "flux_spoke_snapshot_version 9",
            "flux_spoke_assignments 2",
            "flux_spoke_applies_total{kind=\"Job\"} 2",
            "flux_spoke_deletes_total{kind=\"ConfigMap\"} 1",
            "flux_spoke_reports_sent_total 1",
            "flux_spoke_fenced_total 1",
            "flux_spoke_errors_total{kind=\"auth\"} 1",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        m.set_connected(false);
        assert!(m.encode().lines().any(|l| l == "flux_spoke_connected 0"));
    }

    #[test]
    fn every_error_kind_has_its_own_label_and_the_docs_list_it() {
        let docs = include_str!("../../docs/operations.md");
        let all = ErrorKind::ALL;
        // Exhaustive: a new kind must be added to `ALL`, and so gets checked.
        for kind in all {
            match kind {
                ErrorKind::Connect
                | ErrorKind::Auth
                | ErrorKind::NotReady
                | ErrorKind::Protocol
                | ErrorKind::Stream
                | ErrorKind::Observe
                | ErrorKind::Plan
                | ErrorKind::Namespace
                | ErrorKind::Names
                | ErrorKind::Write
                | ErrorKind::Relay
                | ErrorKind::Delete
                | ErrorKind::Fence
                | ErrorKind::Jobs
                | ErrorKind::Report => {}
            }
        }
        let labels: std::collections::BTreeSet<&str> = all.iter().map(|k| k.as_str()).collect();
        assert_eq!(labels.len(), all.len(), "two kinds share a label");
        for label in labels {
            assert!(
                docs.contains(&format!("`{label}`")),
                "docs/operations.md lacks {label}"
            );
        }
    }
}
