//! What can go wrong while a snapshot is applied: one [`ApplyError`] variant per step of
//! [`super`] that can fail, each logged the way its step's failure deserves and counted
//! under the step's name (the `kind` label of `flux_spoke_errors_total`).

use crate::admit::NAME_TAKEN;
use tracing::{error, warn};

use crate::cluster::{ClusterError, ObjectRef, Taken};
use crate::metrics::ErrorKind;

/// A step of applying a snapshot that did not go through. Every variant is a step of
/// [`super`] (its label: [`ApplyError::kind`]); the step that handles it decides what
/// becomes of the snapshot, [`super::Applier`] logs and counts it in one place.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ApplyError {
    /// `observe`: a read of the cluster failed. Nothing is applied or deleted on
    /// incomplete knowledge; the snapshot is retried.
    #[error("cannot read {read}: {source}")]
    Observe {
        read: Read,
        #[source]
        source: ClusterError,
    },
    /// `plan`: the plan refuses an assignment (it does not render as the hub's, or the
    /// policy does not admit it): reported `BURST_PHASE_REFUSED`.
    #[error("assignment {key} refused ({reason}): {message}")]
    Plan {
        key: String,
        reason: &'static str,
        message: String,
    },
    /// `namespace`: creating a namespace an admitted burst lacks failed; the bursts in it
    /// fail and the snapshot is retried.
    #[error("cannot create namespace {namespace}: {source}")]
    Namespace {
        namespace: String,
        #[source]
        source: ClusterError,
    },
    /// `names`: the names an assignment needs: taken by objects the spoke did not make
    /// (the assignment is refused as `NameTaken`), or not readable (retried).
    #[error("assignment {key}: {check}")]
    Names { key: String, check: NameCheck },
    /// `write`: a server-side apply of one of an assignment's objects failed; retried.
    #[error("assignment {key}: cannot write {object}: {source}")]
    Write {
        key: String,
        object: String,
        #[source]
        source: ClusterError,
    },
    /// `relay`: a relayed burst's listener could not be opened, or its Service not
    /// pointed at it; the burst fails and the snapshot is retried.
    #[error("assignment {key}: cannot serve the relayed burst: {message}")]
    Relay { key: String, message: String },
    /// `delete`: deleting an object no assignment renders any more failed; retried.
    #[error("cannot delete {object} of {key}: {source}")]
    Delete {
        key: String,
        object: ObjectRef,
        #[source]
        source: ClusterError,
    },
}

/// Which read of the `observe` step failed.
#[derive(Debug)]
pub(crate) enum Read {
    /// Listing the spoke's own objects.
    Owned,
    /// The spoke policy.
    Policy,
    /// A burst's namespace.
    Namespace(String),
    /// The spoke's Jobs.
    Jobs,
}

impl std::fmt::Display for Read {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Read::Owned => f.write_str("the spoke's objects"),
            Read::Policy => f.write_str("the spoke policy"),
            Read::Namespace(ns) => write!(f, "the burst's namespace {ns}"),
            Read::Jobs => f.write_str("the spoke's Jobs"),
        }
    }
}

/// What the `names` step found.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NameCheck {
    /// Names taken by objects the spoke did not make: the assignment is refused.
    #[error("{}", name_taken_message(.0))]
    Taken(Vec<Taken>),
    /// A name could not be read: retried.
    #[error("cannot check whether {object} is free: {source}")]
    Unreadable {
        object: ObjectRef,
        #[source]
        source: ClusterError,
    },
}

impl ApplyError {
    /// The step that failed: the `kind` label it is counted under.
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            ApplyError::Observe { .. } => ErrorKind::Observe,
            ApplyError::Plan { .. } => ErrorKind::Plan,
            ApplyError::Namespace { .. } => ErrorKind::Namespace,
            ApplyError::Names { .. } => ErrorKind::Names,
            ApplyError::Write { .. } => ErrorKind::Write,
            ApplyError::Relay { .. } => ErrorKind::Relay,
            ApplyError::Delete { .. } => ErrorKind::Delete,
        }
    }

    /// The text the hub is told in the burst's status: the cause alone (the burst is the
    /// status's own).
    pub(super) fn reported(&self) -> String {
        match self {
            ApplyError::Observe { source, .. }
            | ApplyError::Namespace { source, .. }
            | ApplyError::Write { source, .. }
            | ApplyError::Delete { source, .. }
            | ApplyError::Names {
                check: NameCheck::Unreadable { source, .. },
                ..
            } => source.to_string(),
            ApplyError::Names {
                check: NameCheck::Taken(taken),
                ..
            } => name_taken_message(taken),
            ApplyError::Plan { message, .. } | ApplyError::Relay { message, .. } => message.clone(),
        }
    }

    /// Logs the error as its step's failure deserves: a refusal is a warning (the hub is
    /// told; nothing here can fix it), a failure an error (retried).
    pub(super) fn log(&self) {
        match self {
            ApplyError::Observe { read, source } => {
                error!(error = %source, "cannot read {read}; nothing applied or deleted, retrying later");
            }
            ApplyError::Plan {
                key,
                reason,
                message,
            } => warn!(%key, %reason, error = %message, "assignment refused"),
            ApplyError::Namespace { namespace, source } => {
                error!(%namespace, error = %source, "cannot create the namespace");
            }
            ApplyError::Names {
                key,
                check: NameCheck::Taken(taken),
            } => {
                warn!(%key, reason = NAME_TAKEN, blocking = taken.len(), error = %name_taken_message(taken), "assignment refused: a name it needs is taken");
            }
            ApplyError::Names {
                key,
                check: NameCheck::Unreadable { object, source },
            } => {
                error!(%key, %object, error = %source, "cannot check whether the name is free");
            }
            ApplyError::Write {
                key,
                object,
                source,
            } => error!(%key, %object, error = %source, "apply failed"),
            ApplyError::Relay { key, message } => {
                error!(%key, error = %message, "cannot serve the relayed burst");
            }
            ApplyError::Delete {
                key,
                object,
                source,
            } => error!(%object, %key, error = %source, "delete failed"),
        }
    }
}

/// The message of a `NameTaken` refusal: every blocking object and who seems to own it.
pub(super) fn name_taken_message(taken: &[Taken]) -> String {
    let objects: Vec<String> = taken.iter().map(Taken::to_string).collect();
    format!(
        "{NAME_TAKEN}: refusing this burst rather than taking over objects it did not make: {}; delete or rename them, or rename the burst",
        objects.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Kind;

    /// One error of each variant (the match in `kind` has no wildcard: a new variant gets
    /// a label of its own, and is listed here to be checked).
    #[test]
    fn every_step_is_counted_under_its_own_name() {
        let failed = || ClusterError::new("get", "refused");
        let object = ObjectRef {
            kind: Kind::Job,
            namespace: "hpc".into(),
            name: "x".into(),
        };
        let all = [
            ApplyError::Observe {
                read: Read::Jobs,
                source: failed(),
            },
            ApplyError::Plan {
                key: "k".into(),
                reason: "Invalid",
                message: "no".into(),
            },
            ApplyError::Namespace {
                namespace: "hpc".into(),
                source: failed(),
            },
            ApplyError::Names {
                key: "k".into(),
                check: NameCheck::Taken(Vec::new()),
            },
            ApplyError::Write {
                key: "k".into(),
                object: "Job hpc/x".into(),
                source: failed(),
            },
            ApplyError::Relay {
                key: "k".into(),
                message: "no address".into(),
            },
            ApplyError::Delete {
                key: "k".into(),
                object,
                source: failed(),
            },
        ];
        let labels: Vec<&str> = all.iter().map(|e| e.kind().as_str()).collect();
        assert_eq!(
            labels,
            [
                "observe",
                "plan",
                "namespace",
                "names",
                "write",
                "relay",
                "delete"
            ]
        );
    }
}
