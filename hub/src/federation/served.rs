//! What the federation's gRPC services serve, as a trait: [`super::service`] reads and
//! writes the federation's state only through [`Served`], and the registry
//! ([`super::registry`]) implements it. The service thereby depends on what it serves, not
//! on how the index keeps it, and a test can serve any implementation.

use std::collections::BTreeMap;
use std::sync::Arc;

use flux_shared::federation::BurstKey;
use flux_shared::federation::policy::Announced;
use flux_shared::federation::proto::{
    ListSpokesResponse, MiniClusterSnapshot, ReportRequest, Snapshot,
};
use flux_shared::plan::Endpoint;
use tokio::sync::watch;

/// The state the Spoke and Admin services serve, as the messages they send.
pub trait Served: Send + Sync + 'static {
    /// A spoke opens its Watch stream, announcing its policy's exceptions and its labels
    /// (both checked). Refused until
    /// the state is rebuilt from the API server, and while the spoke already holds a
    /// stream: one name, one stream, so that a second holder of its certificate is
    /// noticed (and counted) rather than served alongside.
    fn subscribe(
        self: Arc<Self>,
        spoke: &str,
        spoke_version: &str,
        announced: Announced,
        labels: BTreeMap<String, String>,
    ) -> Result<Subscription, SubscribeError>;

    /// The spoke's current snapshot: every assignment (ordered by key) and retained key.
    fn snapshot(&self, spoke: &str) -> Snapshot;

    /// The protocol revision `spoke` declared on the Watch it holds.
    fn set_protocol_revision(&self, spoke: &str, revision: u32);

    /// The hub refused `spoke`'s call for what it speaks (`reason`, shown to admins until it
    /// connects); `true` when the reason is new (not the one last recorded), so that an
    /// Event is published once, not on every retry.
    fn refuse(&self, spoke: &str, reason: &str) -> bool;

    /// A spoke's report on its bursts and its cluster; what it measured (for metrics).
    fn report(&self, spoke: &str, report: ReportRequest) -> ReportOutcome;

    /// When the certificate `spoke` connected with expires (Unix seconds), and the key
    /// identifier of the CA that issued it (empty: unknown).
    fn set_certificate(&self, spoke: &str, not_after: i64, issuer: &str);

    /// When the hub's certificate and the first of the CAs it trusts expire (Unix
    /// seconds; 0: unknown).
    fn set_hub_certificates(&self, not_after: i64, ca_not_after: i64);

    /// Changes whenever anything an admin sees changes.
    fn admin_changes(&self) -> watch::Receiver<u64>;

    /// Every MiniCluster (of `namespace`, or all when empty) with its bursts, for admins.
    fn admin_snapshot(&self, namespace: &str) -> MiniClusterSnapshot;

    /// Every known spoke, for an admin that sees the namespaces `sees` admits: each
    /// spoke's count of assignments is of those namespaces only (a namespace-scoped admin
    /// learns nothing of other tenants' bursts).
    fn spokes(&self, sees: &dyn Fn(&str) -> bool) -> ListSpokesResponse;

    /// Where a relayed connection of burst `key` from `spoke` goes, or why it may not.
    fn relay_target(&self, spoke: &str, key: &BurstKey) -> Result<RelayTarget, RelayRefusal>;

    /// Forget spoke `name` (it was uninstalled): refused while it is connected or has
    /// assignments, which would bring it back. `Ok(false)` when it was not known.
    fn forget_spoke(&self, name: &str) -> Result<bool, String>;
}

/// A connected spoke's subscription: newest snapshot version first, then every change
/// (build the snapshot with [`Served::snapshot`]). Dropping `guard` marks the spoke
/// disconnected (when it was its last stream).
pub struct Subscription {
    /// The spoke's snapshot version.
    pub versions: watch::Receiver<u64>,
    /// Keeps the spoke marked connected while alive.
    pub guard: Box<dyn Send + Sync>,
}

/// What a spoke's report completed, timed by this process's clock.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReportOutcome {
    /// It acknowledged versions of its snapshot: how long the oldest of them waited.
    pub applied_after: Option<std::time::Duration>,
    /// The first broker of these bursts is ready: how long after each was dispatched.
    pub first_ready: Vec<std::time::Duration>,
}

/// Why a spoke's Watch is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubscribeError {
    /// The state is not rebuilt from the API server yet (or this replica does not lead).
    NotReady,
    /// The spoke already holds a stream.
    AlreadyConnected,
}

/// Where a burst's relayed connections go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayTarget {
    /// The lead broker inside the root cluster (its Service's cluster address).
    pub lead: Endpoint,
    /// The burst's brokers: with [`flux_shared::federation::RELAY_SLACK`], the most connections it may hold.
    pub brokers: usize,
}

/// Why a relayed connection is refused or ended; its label is the metric's reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RelayRefusal {
    /// The call names no burst, or not one of this spoke's.
    #[error("burst {0:?} is not assigned to this spoke")]
    NotAssigned(String),
    /// The burst's brokers reach their lead directly.
    #[error("burst {0:?} is not relayed: its brokers reach the lead broker directly")]
    NotRelayed(String),
    /// The burst runs no broker.
    #[error("burst {0:?} runs no broker")]
    NoBrokers(String),
    /// The lead broker's Service has no cluster address yet.
    #[error("the lead broker of burst {0:?} has no address yet")]
    NoLead(String),
    /// The burst holds as many connections as it may.
    #[error("burst {key:?} holds {held} relayed connections, the most for its {brokers} brokers")]
    TooMany {
        /// The burst.
        key: String,
        /// Connections it holds.
        held: usize,
        /// Its brokers.
        brokers: usize,
    },
    /// The lead broker did not answer.
    #[error("the lead broker at {0} does not answer: {1}")]
    Unreachable(String, String),
    /// The spoke makes new relayed connections faster than the relay's rates allow.
    #[error(
        "spoke {spoke:?} makes more than {per_second} relayed connections a second; connect again later"
    )]
    CallRate {
        /// The spoke.
        spoke: String,
        /// Its rate.
        per_second: u64,
    },
}

impl RelayRefusal {
    /// The `reason` label of `flux_hub_relay_refused_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            RelayRefusal::NotAssigned(_) => "not_assigned",
            RelayRefusal::NotRelayed(_) => "not_relayed",
            RelayRefusal::NoBrokers(_) => "no_brokers",
            RelayRefusal::NoLead(_) => "no_lead",
            RelayRefusal::TooMany { .. } => "too_many",
            RelayRefusal::Unreachable(..) => "unreachable",
            RelayRefusal::CallRate { .. } => "call_rate",
        }
    }
}
