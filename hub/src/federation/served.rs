//! What the federation's gRPC services serve, as a trait: [`super::service`] reads and
//! writes the federation's state only through [`Served`], and the registry
//! ([`super::registry`]) implements it. The service thereby depends on what it serves, not
//! on how the index keeps it, and a test can serve any implementation.

use std::collections::BTreeMap;
use std::sync::Arc;

use flux_shared::federation::policy::Announced;
use flux_shared::federation::proto::{
    ListSpokesResponse, MiniClusterSnapshot, ReportRequest, Snapshot,
};
use tokio::sync::watch;

use super::relay::{RelayRefusal, RelayTarget};

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

    /// A spoke's report on its bursts and its cluster.
    fn report(&self, spoke: &str, report: ReportRequest);

    /// When the certificate `spoke` connected with expires (Unix seconds).
    fn set_certificate_expiry(&self, spoke: &str, not_after: i64);

    /// Changes whenever anything an admin sees changes.
    fn admin_changes(&self) -> watch::Receiver<u64>;

    /// Every MiniCluster (of `namespace`, or all when empty) with its bursts, for admins.
    fn admin_snapshot(&self, namespace: &str) -> MiniClusterSnapshot;

    /// Every known spoke, for an admin that sees the namespaces `sees` admits: each
    /// spoke's count of assignments is of those namespaces only (a namespace-scoped admin
    /// learns nothing of other tenants' bursts).
    fn spokes(&self, sees: &dyn Fn(&str) -> bool) -> ListSpokesResponse;

    /// Where a relayed connection of burst `key` from `spoke` goes, or why it may not.
    fn relay_target(&self, spoke: &str, key: &str) -> Result<RelayTarget, RelayRefusal>;

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

/// Why a spoke's Watch is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubscribeError {
    /// The state is not rebuilt from the API server yet (or this replica does not lead).
    NotReady,
    /// The spoke already holds a stream.
    AlreadyConnected,
}
