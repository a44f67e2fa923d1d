//! Prometheus metrics of the hub, exposed in the OpenMetrics text format on `/metrics`.
//!
//! | name | type | labels |
//! |------|------|--------|
//! | `flux_hub_reconciles_total` | counter | |
//! | `flux_hub_reconcile_errors_total` | counter | `stage`, `kind` |
//! | `flux_hub_reconcile_duration_seconds` | histogram (1 ms to 60 s) | |
//! | `flux_hub_objects_managed` | gauge | |
//! | `flux_hub_api_writes_total` | counter | `kind`, `verb` |
//! | `flux_hub_leader` | gauge (0 or 1) | |
//! | `flux_hub_snapshots_sent_total` | counter | |
//! | `flux_hub_reports_received_total` | counter | |
//! | `flux_hub_spoke_streams_refused_total` | counter | |
//! | `flux_hub_spoke_certificates_refused_total` | counter | |
//! | `flux_hub_admin_certificates_refused_total` | counter | |
//! | `flux_hub_federation_connections_refused_total` | counter | `reason` |
//! | `flux_hub_relay_connections` | gauge | `spoke`, `minicluster` (empty unless asked for) |
//! | `flux_hub_relay_bytes_total` | counter | `spoke`, `minicluster` (empty unless asked for), `direction` (`to_lead`, `from_lead`) |
//! | `flux_hub_relay_refused_total` | counter | `spoke`, `reason` |
//! | `flux_hub_spokes_connected` | gauge | |
//! | `flux_hub_certificate_expiry_timestamp_seconds` | gauge (Unix seconds) | `certificate` (`hub`, `ca`: the first CA it trusts to expire, `spoke/<name>`) |
//! | `flux_hub_assignments` | gauge | |
//!
//! And the fleet's, per spoke and per burst phase ([`FleetMetrics`]).
//!
//! No MiniCluster name is a label value unless the operator asks for it (`flux-hub run
//! --metrics-minicluster-labels`, [`Metrics::with_minicluster_labels`]): the series stay
//! as many as the spokes, not as the tenants' MiniClusters.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets_range};
use prometheus_client::registry::{Registry, Unit};

use super::fleet_metrics::FleetMetrics;

/// Smallest bucket of the reconcile duration histogram, in seconds.
const DURATION_MIN_SECONDS: f64 = 0.001;
/// Largest bucket of the reconcile duration histogram, in seconds.
const DURATION_MAX_SECONDS: f64 = 60.0;
/// Number of buckets between them (each about twice the previous one).
const DURATION_BUCKETS: u16 = 17;

/// Labels of `flux_hub_certificate_expiry_timestamp_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertificateLabels {
    certificate: String,
}

/// Labels of `flux_hub_reconcile_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    stage: String,
    kind: String,
}

/// Labels of `flux_hub_api_writes_total`.
/// Labels of `flux_hub_relay_connections`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RelayLabels {
    spoke: String,
    minicluster: String,
}

/// Labels of `flux_hub_relay_bytes_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RelayBytesLabels {
    spoke: String,
    minicluster: String,
    direction: String,
}

/// Labels of `flux_hub_relay_refused_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RelayRefusedLabels {
    spoke: String,
    reason: String,
}

/// Labels of `flux_hub_federation_connections_refused_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChangeLabels {
    direction: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    kind: String,
    verb: String,
}

/// The hub's metrics and the registry they are encoded from.
///
/// Every method takes `&self` and the type is `Send + Sync`: share one instance behind an
/// `Arc` between the controller, the leader election and the HTTP server.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Counter,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: Histogram,
    objects_managed: Gauge,
    api_writes: Family<WriteLabels, Counter>,
    leader: Gauge,
    snapshots_sent: Counter,
    reports_received: Counter,
    spoke_streams_refused: Counter,
    spoke_certificates_refused: Counter,
    admin_certificates_refused: Counter,
    connections_refused: Family<ReasonLabels, Counter>,
    relay_connections: Family<RelayLabels, Gauge>,
    relay_bytes: Family<RelayBytesLabels, Counter>,
    relay_refused: Family<RelayRefusedLabels, Counter>,
    /// Whether the relay's series name their MiniCluster.
    minicluster_labels: bool,
    spokes_connected: Gauge,
    certificate_expiry: Family<CertificateLabels, Gauge>,
    assignments: Gauge,
    autoscale_decisions: Family<OutcomeLabels, Counter>,
    autoscale_changes: Family<ChangeLabels, Counter>,
    autoscale_pending_to_online: Histogram,
    /// The fleet's: per spoke, and bursts by phase.
    pub fleet: FleetMetrics,
}

impl Metrics {
    /// A registry with every hub metric registered, all at zero.
    pub fn new() -> Metrics {
        let reconciles = Counter::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_duration = Histogram::new(duration_buckets());
        let objects_managed = Gauge::default();
        let api_writes = Family::<WriteLabels, Counter>::default();
        let leader = Gauge::default();
        let snapshots_sent = Counter::default();
        let reports_received = Counter::default();
        let spoke_streams_refused = Counter::default();
        let spoke_certificates_refused = Counter::default();
        let admin_certificates_refused = Counter::default();
        let connections_refused = Family::<ReasonLabels, Counter>::default();
        let relay_connections = Family::<RelayLabels, Gauge>::default();
        let relay_bytes = Family::<RelayBytesLabels, Counter>::default();
        let relay_refused = Family::<RelayRefusedLabels, Counter>::default();
        let spokes_connected = Gauge::default();
        let certificate_expiry = Family::<CertificateLabels, Gauge>::default();
        let assignments = Gauge::default();
        let autoscale_decisions = Family::<OutcomeLabels, Counter>::default();
        let autoscale_changes = Family::<ChangeLabels, Counter>::default();
        let autoscale_pending_to_online =
            Histogram::new(exponential_buckets_range(1.0, 3600.0, 16));

        let mut registry = Registry::default();
        // Counters get their `_total` suffix, and metrics with a unit their `_seconds`
        // suffix, from the registry.
        registry.register(
            "flux_hub_reconciles",
            "MiniCluster reconciliations started",
            reconciles.clone(),
        );
        registry.register(
            "flux_hub_reconcile_errors",
            "MiniCluster reconciliations that failed, by error kind",
            reconcile_errors.clone(),
        );
        registry.register_with_unit(
            "flux_hub_reconcile_duration",
            "Duration of MiniCluster reconciliations",
            Unit::Seconds,
            reconcile_duration.clone(),
        );
        registry.register(
            "flux_hub_objects_managed",
            "Kubernetes objects the hub manages",
            objects_managed.clone(),
        );
        registry.register(
            "flux_hub_api_writes",
            "Writes to the Kubernetes API, by object kind and verb",
            api_writes.clone(),
        );
        registry.register(
            "flux_hub_leader",
            "1 while this replica holds the leader election Lease, else 0",
            leader.clone(),
        );
        registry.register(
            "flux_hub_snapshots_sent",
            "Assignment snapshots sent to spokes",
            snapshots_sent.clone(),
        );
        registry.register(
            "flux_hub_reports_received",
            "Status reports received from spokes",
            reports_received.clone(),
        );
        registry.register(
            "flux_hub_spoke_streams_refused",
            "Spoke Watch streams refused because their spoke held one already (a second holder of its certificate)",
            spoke_streams_refused.clone(),
        );
        registry.register(
            "flux_hub_spoke_certificates_refused",
            "Spoke calls refused because the certificate is not the one pinned for the spoke (rotated out, unjoined, or issued elsewhere)",
            spoke_certificates_refused.clone(),
        );
        registry.register(
            "flux_hub_admin_certificates_refused",
            "Admin calls and connections refused because the certificate is revoked (flux-hub revoke-admin)",
            admin_certificates_refused.clone(),
        );
        registry.register(
            "flux_hub_federation_connections_refused",
            "Federation connections closed before their first call, by reason (hello_timeout, handshake_timeout, handshake_failed, displaced_by_source, displaced_by_total, identity_connections)",
            connections_refused.clone(),
        );
        registry.register(
            "flux_hub_relay_connections",
            "Burst broker connections relayed to their lead broker, open now, by spoke and MiniCluster",
            relay_connections.clone(),
        );
        registry.register(
            "flux_hub_relay_bytes",
            "Bytes relayed between burst brokers and their lead broker, by spoke, MiniCluster and direction",
            relay_bytes.clone(),
        );
        registry.register(
            "flux_hub_relay_refused",
            "Relayed connections refused, by reason (not_assigned, not_relayed, no_brokers, no_lead, too_many, unreachable)",
            relay_refused.clone(),
        );
        registry.register(
            "flux_hub_spokes_connected",
            "Spokes holding a Watch stream open",
            spokes_connected.clone(),
        );
        registry.register(
            "flux_hub_certificate_expiry_timestamp_seconds",
            "When a federation certificate expires (Unix seconds): the hub's own, and each spoke's as it last connected",
            certificate_expiry.clone(),
        );
        registry.register(
            "flux_hub_assignments",
            "Burst assignments over all spokes",
            assignments.clone(),
        );
        registry.register(
            "flux_hub_autoscale_decisions",
            "Autoscaling polls of a lead broker's queue, by outcome (grow, shrink, none, unsatisfiable, refused, unreachable, error)",
            autoscale_decisions.clone(),
        );
        registry.register(
            "flux_hub_autoscale_burst_changes",
            "Burst size changes made by the autoscaler, by direction and reason",
            autoscale_changes.clone(),
        );
        registry.register_with_unit(
            "flux_hub_autoscale_pending_to_online",
            "From the submission of a job that made bursts grow to every new burst broker online",
            Unit::Seconds,
            autoscale_pending_to_online.clone(),
        );
        let fleet = FleetMetrics::register(&mut registry);

        Metrics {
            fleet,
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            objects_managed,
            api_writes,
            leader,
            snapshots_sent,
            reports_received,
            spoke_streams_refused,
            spoke_certificates_refused,
            admin_certificates_refused,
            connections_refused,
            relay_connections,
            relay_bytes,
            relay_refused,
            minicluster_labels: false,
            spokes_connected,
            certificate_expiry,
            assignments,
            autoscale_decisions,
            autoscale_changes,
            autoscale_pending_to_online,
        }
    }

    /// Counts an autoscaling poll by its outcome (a short fixed word).
    pub fn autoscale_decision(&self, outcome: &str) {
        self.autoscale_decisions
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    /// Counts a burst size change made by the autoscaler: `direction` `up` or `down`,
    /// `reason` `jobs_waiting` or `idle`.
    pub fn autoscale_change(&self, direction: &str, reason: &str) {
        self.autoscale_changes
            .get_or_create(&ChangeLabels {
                direction: direction.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Observes how long a job that made bursts grow waited for the new brokers.
    pub fn autoscale_pending_to_online(&self, seconds: f64) {
        self.autoscale_pending_to_online.observe(seconds);
    }

    /// Counts a snapshot sent to a spoke.
    pub fn snapshot_sent(&self) {
        self.snapshots_sent.inc();
    }

    /// Sets when `certificate` (`hub`, `spoke/<name>`) expires, Unix seconds.
    pub fn set_certificate_expiry(&self, certificate: &str, not_after: i64) {
        self.certificate_expiry
            .get_or_create(&CertificateLabels {
                certificate: certificate.to_string(),
            })
            .set(not_after);
    }

    /// Counts a Watch refused because its spoke held a stream already.
    pub fn spoke_stream_refused(&self) {
        self.spoke_streams_refused.inc();
    }

    /// Counts a spoke call refused for a certificate that is not the pinned one.
    pub fn spoke_certificate_refused(&self) {
        self.spoke_certificates_refused.inc();
    }

    /// Counts an admin call or connection refused for a revoked certificate.
    pub fn admin_certificate_refused(&self) {
        self.admin_certificates_refused.inc();
    }

    /// A relayed connection of `spoke` to the lead of `minicluster` opens: counted, and its
    /// byte counters (to the lead, from the lead) returned once, so that the bytes are
    /// counted as they move (a connection may last the instance's lifetime) at the cost of
    /// an atomic add per frame.
    pub fn relay_opened(&self, spoke: &str, minicluster: &str) -> (Counter, Counter) {
        self.relay_connections
            .get_or_create(&RelayLabels {
                spoke: spoke.to_owned(),
                minicluster: self.minicluster_label(minicluster),
            })
            .inc();
        let bytes = |direction: &str| {
            self.relay_bytes
                .get_or_create(&RelayBytesLabels {
                    spoke: spoke.to_owned(),
                    minicluster: self.minicluster_label(minicluster),
                    direction: direction.to_owned(),
                })
                .clone()
        };
        (bytes("to_lead"), bytes("from_lead"))
    }

    /// That connection closes.
    pub fn relay_closed(&self, spoke: &str, minicluster: &str) {
        self.relay_connections
            .get_or_create(&RelayLabels {
                spoke: spoke.to_owned(),
                minicluster: self.minicluster_label(minicluster),
            })
            .dec();
    }

    /// Counts a relayed connection of `spoke` refused, and why.
    pub fn relay_refused(&self, spoke: &str, reason: &str) {
        self.relay_refused
            .get_or_create(&RelayRefusedLabels {
                spoke: spoke.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Name each MiniCluster in the relay's series (`--metrics-minicluster-labels`): one
    /// series per MiniCluster that relays, rather than per spoke.
    pub fn with_minicluster_labels(mut self, on: bool) -> Self {
        self.minicluster_labels = on;
        self
    }

    /// The `minicluster` label's value: the name when asked for, else empty.
    fn minicluster_label(&self, minicluster: &str) -> String {
        if self.minicluster_labels {
            minicluster.to_owned()
        } else {
            String::new()
        }
    }

    /// Counts a federation connection closed before its first call, and why.
    pub fn connection_refused(&self, reason: &str) {
        self.connections_refused
            .get_or_create(&ReasonLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts a report received from a spoke.
    pub fn report_received(&self) {
        self.reports_received.inc();
    }

    /// Sets the number of connected spokes and of assignments.
    pub fn set_federation(&self, spokes_connected: usize, assignments: usize) {
        self.spokes_connected
            .set(i64::try_from(spokes_connected).unwrap_or(i64::MAX));
        self.assignments
            .set(i64::try_from(assignments).unwrap_or(i64::MAX));
    }

    /// Counts a reconciliation and times it: the duration is observed when the returned
    /// guard is dropped. The guard owns what it needs, so it can move into a task.
    pub fn reconcile_timer(&self) -> ReconcileTimer {
        self.reconciles.inc();
        ReconcileTimer {
            histogram: self.reconcile_duration.clone(),
            start: Instant::now(),
        }
    }

    /// Counts a failed reconciliation: the `stage` that failed and a short error `kind`
    /// (such as `conflict` or `transport`), never a message, to keep the labels'
    /// cardinality low.
    pub fn reconcile_failed(&self, stage: &str, kind: &str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                stage: stage.to_owned(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Sets the number of Kubernetes objects the hub manages.
    pub fn set_objects_managed(&self, n: i64) {
        self.objects_managed.set(n);
    }

    /// Counts a write to the Kubernetes API: `kind` is the object kind (`Job`, `Service`,
    /// ...), `verb` the RBAC verb (`create`, `patch`, `update`, `delete`).
    pub fn api_write(&self, kind: &str, verb: &str) {
        self.api_writes
            .get_or_create(&WriteLabels {
                kind: kind.to_owned(),
                verb: verb.to_owned(),
            })
            .inc();
    }

    /// Records whether this replica is the leader.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Every metric in the OpenMetrics text format, ending with `# EOF`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a `String` cannot fail, and the registry holds only metrics that
        // encode; keep whatever was written should that ever change.
        if let Err(error) = encode(&mut out, &self.registry) {
            tracing::error!(%error, "encoding metrics failed");
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

/// Exponential buckets from 1 ms to 60 s, rounded to the microsecond so that the `le`
/// labels stay readable.
fn duration_buckets() -> Vec<f64> {
    exponential_buckets_range(DURATION_MIN_SECONDS, DURATION_MAX_SECONDS, DURATION_BUCKETS)
        .map(|b| (b * 1e6).round() / 1e6)
        .collect()
}

/// Times one reconciliation (see [`Metrics::reconcile_timer`]): observes the elapsed
/// time in `flux_hub_reconcile_duration_seconds` when dropped.
#[derive(Debug)]
#[must_use = "the duration is observed when the timer is dropped"]
pub struct ReconcileTimer {
    histogram: Histogram,
    start: Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.histogram.observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_span_one_millisecond_to_a_minute() {
        let b = duration_buckets();
        assert_eq!(b.len(), usize::from(DURATION_BUCKETS));
        assert_eq!(b.first().copied(), Some(0.001));
        assert_eq!(b.last().copied(), Some(60.0));
        assert!(b.windows(2).all(|w| w[1] > w[0] * 1.9 && w[1] < w[0] * 2.1));
    }

    #[test]
    fn metrics_are_send_and_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<Metrics>();
        check::<ReconcileTimer>();
    }
}
