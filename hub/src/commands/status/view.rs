//! The view model of `flux-hub status`: what it shows about the hub, built from the `Admin`
//! service's answers. [`StatusView`] is also the `-o json` document, so its field names and
//! meaning are a stable interface (see the documentation of `commands::status`).

use flux_shared::federation::proto::{self, BurstPhase, ListSpokesResponse, MiniClusterSnapshot};
use serde::Serialize;

/// Version of the [`StatusView`] structure (`schemaVersion`).
pub const SCHEMA_VERSION: u32 = 1;

/// What `flux-hub status -o json` prints: one snapshot of the hub.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Identifies the hub incarnation; changes whenever the hub restarts.
    pub hub_epoch: String,
    /// Version of the MiniCluster snapshot; increases with every change within an epoch.
    pub version: u64,
    /// Every selected MiniCluster, ordered by namespace then name.
    pub mini_clusters: Vec<MiniClusterView>,
    /// Every spoke the hub knows, ordered by name.
    pub spokes: Vec<SpokeView>,
    /// When the hub's own certificate expires, Unix milliseconds; `null` if unknown.
    pub hub_certificate_not_after_unix_millis: Option<i64>,
    /// When the first of the CAs the hub trusts expires, Unix milliseconds; `null` if
    /// unknown.
    pub ca_not_after_unix_millis: Option<i64>,
}

/// One MiniCluster.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MiniClusterView {
    /// Namespace in the hub's cluster.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.generation` the hub last worked from.
    pub generation: i64,
    /// `status.phase` (Pending, Running, Succeeded, Failed, Invalid), or Deleting.
    pub phase: String,
    /// Brokers of the root (local) Job.
    pub size: i32,
    /// Root brokers that are ready.
    pub brokers_ready: i32,
    /// Where burst brokers reach the lead broker; `null` until known (or without bursts).
    pub lead_endpoint: Option<EndpointView>,
    /// `metadata.creationTimestamp`, Unix milliseconds; `null` if unknown.
    pub created_unix_millis: Option<i64>,
    /// One entry per burst, in spec order.
    pub bursts: Vec<BurstRow>,
}

/// A network endpoint.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointView {
    /// IP address or DNS name.
    pub address: String,
    /// TCP port.
    pub port: i32,
}

/// One burst of a MiniCluster, as the hub sees it: a BURST row of the table, an entry of
/// `bursts` in JSON. (Not the hub registry's `federation::registry::BurstView`, which is
/// what the controller writes into the MiniCluster's status.)
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BurstRow {
    /// `<namespace>/<minicluster>/<burst>`.
    pub key: String,
    /// Burst name (Job name and host prefix in the spoke's cluster).
    pub name: String,
    /// The spoke that runs it.
    pub spoke: String,
    /// Whether that spoke holds a Watch stream open.
    pub spoke_connected: bool,
    /// What the spoke last reported: Pending, Running, Succeeded, Failed, Refused,
    /// Deleting, Deleted; `Unreported` before its first report.
    pub phase: String,
    /// Brokers the burst should run.
    pub size: i32,
    /// Hosts the burst declares: the most brokers `size` can grow to.
    pub max_size: i32,
    /// Brokers the spoke last reported ready.
    pub brokers_ready: i32,
    /// Snapshot version in which the hub last changed this assignment.
    pub assigned_version: u64,
    /// Version the spoke last reported applying (behind `assignedVersion` while it
    /// catches up).
    pub observed_version: u64,
    /// When the spoke last reported on it, Unix milliseconds; `null` if never.
    pub last_report_unix_millis: Option<i64>,
    /// The spoke's message (empty when none).
    pub message: String,
    /// Why the spoke does not run it as sent (`NoPolicy`, `TooManyBrokers`, ...); empty
    /// when it does.
    pub reason: String,
    /// The most brokers the spoke's policy admits for it now; `null` when the spoke does
    /// not say.
    pub admitted_size: Option<i32>,
    /// Conditions the spoke reported (the burst Job's and the spoke's own).
    pub conditions: Vec<ConditionView>,
    /// For a burst that names candidates: those it was not placed on, and why.
    pub skipped: Vec<SkippedView>,
    /// Its phase in the MiniCluster's status (Pending, Dispatched, Joining, Running, ...),
    /// where `phase` is the spoke's report; `null` before the hub wrote one.
    pub hub_phase: Option<String>,
    /// The path its brokers take to the lead broker (Direct, Relay); `null` while the hub
    /// has not chosen it.
    pub path: Option<String>,
    /// Why that path (`Spec`, `SpokeDeclared`, `SpokeMeasured`, `LeadUnreachable`, ...).
    pub path_reason: Option<String>,
    /// Its brokers the lead broker sees online; `null` while the hub has not read the
    /// lead's view.
    pub brokers_joined: Option<i32>,
}

/// A candidate spoke a burst was not placed on.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SkippedView {
    /// The spoke.
    pub spoke: String,
    /// Why (`NoRoom`, `NotAdmitted`, `Refused`, ...).
    pub reason: String,
    /// Details.
    pub message: String,
}

/// A Kubernetes-style condition reported by a spoke.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    /// Condition type, e.g. `Complete`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// When it last changed status, Unix milliseconds; `null` if unknown.
    pub last_transition_unix_millis: Option<i64>,
}

/// One spoke.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SpokeView {
    /// Spoke name (from its client certificate).
    pub name: String,
    /// Whether it holds a Watch stream open.
    pub connected: bool,
    /// When the hub last heard from it, Unix milliseconds; `null` if never since the hub
    /// started.
    pub last_seen_unix_millis: Option<i64>,
    /// Version of the latest snapshot the hub sent it.
    pub current_version: u64,
    /// Version it last acknowledged applying (equal to `currentVersion` when up to date).
    pub acknowledged_version: u64,
    /// Number of assignments it has.
    pub assignments: u32,
    /// Its software version (empty if it did not say).
    pub spoke_version: String,
    /// Since when it reports failing to reach its own cluster's API server, Unix
    /// milliseconds; `null` while it reaches it.
    pub cluster_unreachable_since_unix_millis: Option<i64>,
    /// The error it reported with that (empty while it reaches its cluster).
    pub cluster_error: String,
    /// Watch streams refused under its name because it held one already (since the hub
    /// started): more than a few means a second holder of its certificate.
    pub refused_streams: u64,
    /// When the certificate it last connected with expires, Unix milliseconds; `null` if
    /// unknown.
    pub certificate_not_after_unix_millis: Option<i64>,
    /// When it last measured its cluster's room for the hub's placement, Unix
    /// milliseconds; `null` if it has not reported one.
    pub room_observed_unix_millis: Option<i64>,
    /// Why it could not measure its room (empty when it could).
    pub room_error: String,
    /// Its labels, which bursts' candidates select spokes by: those the root's owner
    /// granted it.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Labels it announced that the root did not grant it: ignored.
    pub ignored_labels: std::collections::BTreeMap<String, String>,
    /// The protocol revision it declared when it last connected; `null` if it has not
    /// connected since the hub started.
    pub protocol_revision: Option<u32>,
    /// Why the hub refused it for what it speaks (empty if it did not, or it connected
    /// since).
    pub refusal: String,
    /// When that refusal was last made, Unix milliseconds; `null` without one.
    pub refused_unix_millis: Option<i64>,
    /// The key identifier of the CA that issued the certificate it last connected with
    /// (empty if unknown): while the CA is renewed, which spokes still hold the previous
    /// CA's.
    pub certificate_issuer: String,
}

fn millis(value: i64) -> Option<i64> {
    (value > 0).then_some(value)
}

/// The name shown for a burst phase (`Unreported` for UNSPECIFIED).
pub fn burst_phase_name(phase: i32) -> String {
    match BurstPhase::try_from(phase) {
        Ok(BurstPhase::Unspecified) => "Unreported".into(),
        // Objects applied, brokers starting: shown as Pending, as `flux-hub status` always has.
        Ok(BurstPhase::Applied) => "Pending".into(),
        Ok(BurstPhase::Running) => "Running".into(),
        Ok(BurstPhase::Succeeded) => "Succeeded".into(),
        Ok(BurstPhase::Failed) => "Failed".into(),
        // The spoke refused it (its owner's policy, or its own checks).
        Ok(BurstPhase::Refused) => "Refused".into(),
        Ok(BurstPhase::Deleting) => "Deleting".into(),
        Ok(BurstPhase::Deleted) => "Deleted".into(),
        Err(_) => format!("Unknown({phase})"),
    }
}

/// The JSON structure of one snapshot and spoke list.
pub fn view(snapshot: &MiniClusterSnapshot, spokes: &ListSpokesResponse) -> StatusView {
    StatusView {
        schema_version: SCHEMA_VERSION,
        hub_epoch: snapshot.hub_epoch.clone(),
        version: snapshot.version,
        mini_clusters: snapshot.miniclusters.iter().map(minicluster_view).collect(),
        spokes: spokes
            .spokes
            .iter()
            .map(|s| SpokeView {
                name: s.name.clone(),
                connected: s.connected,
                last_seen_unix_millis: millis(s.last_seen_unix_millis),
                current_version: s.current_version,
                acknowledged_version: s.acknowledged_version,
                assignments: s.assignments,
                spoke_version: s.spoke_version.clone(),
                cluster_unreachable_since_unix_millis: millis(
                    s.cluster_unreachable_since_unix_millis,
                ),
                cluster_error: s.cluster_error.clone(),
                refused_streams: s.refused_streams,
                certificate_not_after_unix_millis: millis(s.certificate_not_after_unix_millis),
                room_observed_unix_millis: millis(s.room_observed_unix_millis),
                room_error: s.room_error.clone(),
                labels: s.labels.clone().into_iter().collect(),
                ignored_labels: s.ignored_labels.clone().into_iter().collect(),
                protocol_revision: (s.protocol_revision > 0).then_some(s.protocol_revision),
                refusal: s.refusal.clone(),
                refused_unix_millis: millis(s.refused_unix_millis),
                certificate_issuer: s.certificate_issuer.clone(),
            })
            .collect(),
        hub_certificate_not_after_unix_millis: millis(spokes.hub_certificate_not_after_unix_millis),
        ca_not_after_unix_millis: millis(spokes.ca_not_after_unix_millis),
    }
}

fn minicluster_view(mc: &proto::MiniClusterStatus) -> MiniClusterView {
    let reference = mc.minicluster.clone().unwrap_or_default();
    MiniClusterView {
        namespace: reference.namespace,
        name: reference.name,
        uid: reference.uid,
        generation: reference.generation,
        phase: mc.phase.clone(),
        size: mc.size,
        brokers_ready: mc.brokers_ready,
        lead_endpoint: mc.lead_endpoint.as_ref().map(|e| EndpointView {
            address: e.address.clone(),
            port: e.port,
        }),
        created_unix_millis: millis(mc.created_unix_millis),
        bursts: mc
            .bursts
            .iter()
            .map(|b| BurstRow {
                skipped: b
                    .skipped
                    .iter()
                    .map(|s| SkippedView {
                        spoke: s.spoke.clone(),
                        reason: s.reason.clone(),
                        message: s.message.clone(),
                    })
                    .collect(),
                hub_phase: non_empty(&b.hub_phase),
                path: non_empty(&b.path),
                path_reason: non_empty(&b.path_reason),
                brokers_joined: b.brokers_joined,
                key: b.key.clone(),
                name: b.burst_name.clone(),
                spoke: b.spoke.clone(),
                spoke_connected: b.spoke_connected,
                phase: burst_phase_name(b.phase),
                size: b.size,
                max_size: b.max_size,
                brokers_ready: b.brokers_ready,
                assigned_version: b.assigned_version,
                observed_version: b.observed_version,
                last_report_unix_millis: millis(b.last_report_unix_millis),
                message: b.message.clone(),
                reason: b.reason.clone(),
                admitted_size: b.admitted_size,
                conditions: b
                    .conditions
                    .iter()
                    .map(|c| ConditionView {
                        type_: c.r#type.clone(),
                        status: c.status.clone(),
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                        last_transition_unix_millis: millis(c.last_transition_unix_millis),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// `None` for the empty string proto3 sends for "unset".
fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_have_names() {
        assert_eq!(burst_phase_name(0), "Unreported");
        assert_eq!(burst_phase_name(BurstPhase::Refused.into()), "Refused");
        assert_eq!(burst_phase_name(BurstPhase::Deleted.into()), "Deleted");
        assert_eq!(burst_phase_name(42), "Unknown(42)");
    }
}
