//! The hub's side of the federation, without I/O: the assignment registry spokes and
//! admins are served from, what it serves ([`served::Served`], the gRPC server's only way
//! in), and the pure decisions behind it: where a burst is placed, which path its brokers
//! take to the lead broker and where they reach it, and which sizes an admin's scale may
//! set; also what each lead broker sees of its bursts (`lead_view`). The gRPC server is
//! [`crate::server`]; the reconcile that feeds the registry is [`crate::controller`].

pub mod lead;
pub mod lead_view;
pub mod path;
pub mod placement;
pub mod registry;
pub mod scale;
pub mod served;

pub use registry::{BurstInfo, BurstView, McInfo, Registry};

use flux_shared::federation::assignment::SpokeAssignment;

/// What one reconcile decided for a MiniCluster's bursts: the one thing the registry is
/// told ([`Registry::record`]) and the burst status is built from.
#[derive(Clone, Debug, PartialEq)]
pub enum Disposition {
    /// Send these assignments (none: withdraw every burst that is no longer declared).
    Assign(Vec<SpokeAssignment>),
    /// Nothing can be built now, with why (the lead broker's endpoint is not known): each
    /// burst keeps what it was sent, and its spoke what it runs.
    Wait(String),
    /// Not assigned, with why (unsafe, too large, refused by the root cluster): what
    /// spokes run of an earlier version stays, never half-applied.
    Refuse(String),
    /// Held as they run, with why: a spoke has not said yet whether its policy allows
    /// them (not connected since this hub started).
    Hold(String),
}

impl Disposition {
    /// The same decision without the assignments it sends: what the status shows of it.
    pub fn summary(&self) -> Disposition {
        match self {
            Disposition::Assign(_) => Disposition::Assign(Vec::new()),
            other => other.clone(),
        }
    }

    /// Why nothing new is sent, unless assignments are.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Disposition::Assign(_) => None,
            Disposition::Wait(why) | Disposition::Refuse(why) | Disposition::Hold(why) => Some(why),
        }
    }
}

/// Finalizer on MiniClusters with bursts: removed once every spoke confirmed the burst's
/// objects gone, or the deletion timeout passed.
pub const FINALIZER: &str = "flux-framework.org/bursts";
