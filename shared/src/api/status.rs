//! Observed state of a MiniCluster, written by the hub controller.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Observed state of a MiniCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MiniClusterStatus {
    /// Current size (the Job's parallelism); read by the scale subresource.
    #[serde(default)]
    pub size: i32,

    /// Largest size the MiniCluster can scale to (its hostlist is declared up to it).
    #[serde(default)]
    pub maximum_size: i32,

    /// Label selector of the broker pods, for the scale subresource and autoscalers.
    #[serde(default)]
    pub selector: String,

    /// Lifecycle phase: Pending, Running, Suspended, Succeeded, Failed or Invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,

    /// Brokers ready / total, as shown by `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brokers: Option<String>,

    /// Broker pods that are ready.
    #[serde(default)]
    pub brokers_ready: i32,

    /// Bursts running / declared, as shown by `kubectl get` (unset without bursts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bursts_running: Option<String>,

    /// Broker pods of a scale-down still terminating: each drains its node in Flux and
    /// waits for the jobs there (`flux.drainTimeoutSeconds`) before it stops.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub brokers_draining: i32,

    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Standard conditions: Ready, Progressing, Degraded, Failed, and BurstsReady for a
    /// MiniCluster with burst clusters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// Where burst brokers reach the lead broker (address and NodePort), once known. Kept
    /// here so a restarted hub hands spokes the same endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lead_broker: Option<LeadBrokerStatus>,

    /// One entry per burst cluster, in spec order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bursts: Vec<BurstStatus>,

    /// The burst hosts every broker of the instance knows, in rank order after the root's:
    /// each burst's name and `maxSize`, fixed when the MiniCluster was first reconciled
    /// (like `maximumSize` for the root).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub burst_layout: Vec<BurstLayout>,
}

impl BurstStatus {
    /// The hosts this burst declares: `maxSize`, or for a status written before bursts
    /// had one, its size (what it declared then).
    pub fn declared_hosts(&self) -> i32 {
        self.max_size.max(self.size)
    }
}

/// One burst's hosts in the instance's rank order: `<name>-0 .. <name>-(maxSize-1)`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BurstLayout {
    /// Burst name (its host prefix).
    pub name: String,
    /// Hosts it declares.
    pub max_size: i32,
}

/// The lead broker's externally reachable endpoint.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeadBrokerStatus {
    /// IP address or DNS name.
    pub address: String,
    /// NodePort of the lead broker Service.
    pub port: i32,
    /// The node whose address this is, when it came from the lead broker's node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// Values of `status.bursts[].path`.
pub mod burst_path {
    /// The brokers connect to the lead broker's NodePort at its external address.
    pub const DIRECT: &str = "Direct";
    /// The brokers connect through their spoke and the hub (`Spoke.Relay`).
    pub const RELAY: &str = "Relay";
}

/// Why a burst takes its path (`status.bursts[].pathReason`).
pub mod burst_path_reason {
    /// Its spec sets `relay`.
    pub const SPEC: &str = "Spec";
    /// Its spoke's owner declared how the spoke's brokers reach the root's nodes.
    pub const SPOKE_DECLARED: &str = "SpokeDeclared";
    /// Its spoke measured it: a TCP connect from its pod to a lead endpoint of this root.
    pub const SPOKE_MEASURED: &str = "SpokeMeasured";
    /// Nothing was declared or measured: it connects directly, and is switched to the
    /// relay if its spoke cannot reach the lead broker before any of its brokers joined.
    pub const NOT_MEASURED: &str = "NotMeasured";
    /// Switched to the relay: its spoke could not reach the lead broker, and none of its
    /// brokers had joined.
    pub const LEAD_UNREACHABLE: &str = "LeadUnreachable";
    /// Its name leaves no room for a relay Service: it connects directly.
    pub const CANNOT_RELAY: &str = "CannotRelay";
}

/// How one burst is doing in its spoke cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BurstStatus {
    /// Burst name (its Job name and host prefix).
    pub name: String,

    /// The spoke (burst cluster) that runs it.
    pub cluster: String,

    /// How its brokers reach the lead broker: `Direct` (the lead's NodePort at its
    /// external address) or `Relay` (through their spoke and the hub).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,

    /// Why it takes that path, one CamelCase word ([`burst_path_reason`]): `Spec` (its
    /// `relay` field), `SpokeDeclared` (its spoke's owner said how its brokers reach the
    /// root), `SpokeMeasured` (its spoke measured it), `NotMeasured` (nothing said: direct
    /// first), `LeadUnreachable` (switched to the relay: its spoke could not reach the lead
    /// broker before any of its brokers joined), `CannotRelay` (its name leaves no room for
    /// a relay Service). `pathMessage` says more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_reason: Option<String>,

    /// What the path was chosen from, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_message: Option<String>,

    /// Pending (waiting for the lead broker's endpoint or for the spoke), Dispatched (sent,
    /// brokers starting), Running, Succeeded, Failed, Refused (the spoke does not run it:
    /// its policy or its checks; `reason` says which), Invalid (the hub does not assign
    /// it), Unreachable (the spoke is not connected), Unknown (the spoke cannot reach its
    /// own cluster's API server) or Deleting.
    pub phase: String,

    /// Why the spoke does not run the burst as sent, one CamelCase word (`NoPolicy`,
    /// `NamespaceNotAllowed`, `TooManyBrokers`, ...); `message` says more. Set with phase
    /// Refused, and with Running or Dispatched when the spoke keeps running brokers its
    /// policy no longer admits as sent (it neither grows nor stops them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,

    /// The most brokers the spoke's policy admits for this burst now, given the other
    /// bursts it runs (the autoscaler grows it no further); unset when the spoke does not
    /// say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_size: Option<i32>,

    /// Brokers the burst runs.
    #[serde(default)]
    pub size: i32,

    /// Hosts the burst declares: the most brokers it can run (its `maxSize`, as fixed
    /// when the MiniCluster was first reconciled).
    #[serde(default)]
    pub max_size: i32,

    /// Brokers the spoke last reported ready.
    #[serde(default)]
    pub brokers_ready: i32,

    /// Brokers of this burst the lead broker sees online, as the hub last read it (unset
    /// until it could): phase Running needs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brokers_joined: Option<i32>,

    /// Brokers leaving (a shrink): they drain their nodes in Flux and wait for the jobs
    /// there (`flux.drainTimeoutSeconds`) before their pods stop.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub brokers_draining: i32,

    /// Version of the spoke's snapshot that last changed this burst (within the hub's
    /// current incarnation).
    #[serde(default)]
    pub assigned_version: i64,

    /// Version the spoke last reported applying for this burst; behind `assignedVersion`
    /// while it catches up.
    #[serde(default)]
    pub acknowledged_version: i64,

    /// When the spoke last reported on this burst (refreshed at least every few minutes
    /// while it reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<Time>,

    /// Why the burst is in this phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// For a burst that names `candidates`: where the hub placed it and why not on the
    /// candidates before (`cluster` is empty while it is placed nowhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<BurstPlacement>,
}

/// Where the hub placed a burst that names candidates.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BurstPlacement {
    /// When the burst was placed on its `cluster`: the hub moves it on when no broker is
    /// ready some time after (`flux-hub run --placement-timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_at: Option<Time>,

    /// The candidates it was not placed on, and why, in order of preference. Those it
    /// left (`Refused`, `NotPlacedInTime`, `WentAway`) are not tried again until it is
    /// scaled to 0.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedCandidate>,

    /// While the burst moves to its `cluster`: the spokes that may still hold its objects.
    /// It is sent to `cluster` only once each of them confirms it gone, so that no two
    /// clusters run brokers of the same ranks; kept here so that a restarted hub or a new
    /// leader waits for them too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_by: Vec<String>,
}

/// A candidate cluster a burst was not placed on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkippedCandidate {
    /// The spoke.
    pub cluster: String,
    /// Why, one CamelCase word: `NotConnected`, `Unsafe`, `NotAdmitted`, `NoRoom`, `RoomUnknown`,
    /// `Refused`, `NotPlacedInTime` or `WentAway`.
    pub reason: String,
    /// Details.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Whether a count is zero (serde: omit it).
fn is_zero(n: &i32) -> bool {
    *n == 0
}
