//! What the spoke knows between snapshots and connections: the state its agent keeps and
//! lends to the applier (which changes it as it applies a snapshot) and the reporter
//! (which reads it). One task owns it, so it needs no locks.

use std::collections::BTreeMap;

use flux_shared::federation::proto::{
    AssignmentStatus, ClusterAccess, ClusterRoom, RootReach, Snapshot,
};

use crate::admit::Memory;
use crate::burst_status::Tracked;
use crate::cluster::{NodesRoom, ObjectRef, Taken};
use crate::fence::Fencing;
use crate::lead_reach::{LeadReach, Probes};
use crate::relay_listeners::Relays;

/// A snapshot the agent fully applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppliedSnapshot {
    /// Its `hub_epoch`.
    pub hub_epoch: String,
    /// Its `version`.
    pub version: u64,
}

/// What a report says, as compared with the last one sent: when the room and the root's
/// reach were measured does not count.
#[derive(Debug, PartialEq)]
pub(crate) struct Sent {
    pub(crate) statuses: Vec<AssignmentStatus>,
    pub(crate) access: Option<ClusterAccess>,
    pub(crate) room: Option<ClusterRoom>,
    pub(crate) root_reach: Option<RootReach>,
}

/// What the agent knows between snapshots (and connections).
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) memory: Memory,
    /// Epoch of the last snapshot processed: the epoch reports are about.
    pub(crate) epoch: String,
    /// Last version of `epoch` fully applied (0: none).
    pub(crate) acked: u64,
    /// Last snapshot fully applied, in any epoch (sent with Watch).
    pub(crate) applied: Option<AppliedSnapshot>,
    /// Epoch and version of the last snapshot processed.
    pub(crate) last: Option<(String, u64)>,
    /// Whether it was fully applied.
    pub(crate) complete: bool,
    /// It, while it is not fully applied (retried).
    pub(crate) pending: Option<Snapshot>,
    /// One entry per assignment of that snapshot, plus the keys it removed.
    pub(crate) tracked: Vec<Tracked>,
    /// What the last report the hub accepted said.
    pub(crate) last_sent: Option<Sent>,
    /// The cluster's nodes' room as last measured, and when.
    pub(crate) room_nodes: Option<(std::time::SystemTime, NodesRoom)>,
    /// The last snapshot processed (re-processed when a blocking object changes).
    pub(crate) current: Option<Snapshot>,
    /// The objects blocking each assignment refused as `NameTaken`, as seen then.
    pub(crate) blockers: BTreeMap<String, Vec<Taken>>,
    /// The policy document the last snapshot was decided with (`None`: no policy); the
    /// snapshot is decided again when it changes.
    pub(crate) policy: Option<Option<String>>,
    /// The relay listeners of the relayed bursts that run.
    pub(crate) relays: Relays,
    /// Whether each running burst's lead broker answers, as last seen.
    pub(crate) lead_reach: LeadReach,
    /// The probes of the direct bursts' lead endpoints.
    pub(crate) probes: Probes,
    /// How long the hub and each direct burst's lead were not heard, and the bursts fenced.
    pub(crate) fencing: Fencing,
    /// By key, the Jobs being deleted because their burst's path to the lead changed (the
    /// Job, with its uid): once one is gone, the snapshot is applied again to create it.
    pub(crate) replacing: BTreeMap<String, (ObjectRef, Option<String>)>,
}
