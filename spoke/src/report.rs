//! The reporter: what the spoke tells the hub of every tracked assignment (its status,
//! from the Job where there is one), of its access to its own API server, its room and how
//! its brokers reach the root's nodes (declared and measured), with the acknowledgement of
//! the last snapshot fully applied.
//!
//! [`Reporter::report`] runs two steps that can fail, each a [`ReportError`] variant of its
//! name, logged and counted in one place ([`Reporter::record`]):
//!
//! 1. `jobs`: read the spoke's Jobs (when it fails, the statuses that depend on a Job are
//!    left out of this report rather than guessed);
//! 2. `report`: the `Spoke.Report` call (when it fails, the next report is sent even if
//!    nothing changed).
//!
//! What is reported is decided by the pure functions below.

use crate::cluster::NodesRoom;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use flux_shared::federation::diagnostics::status_text;
use flux_shared::federation::ownership::{Ownership, SpokeIdentity, ownership};
use flux_shared::federation::policy::PolicyState;
use flux_shared::federation::proto::{
    AssignmentStatus, BurstPhase, ClusterAccess, ClusterRoom, PolicyRoom, ReportRequest, RootPath,
    RootReach,
};
use flux_shared::federation::room::MAX_NAMESPACES;
use flux_shared::federation::tls::TransportSettings;
use k8s_openapi::api::batch::v1::Job;
use tracing::{debug, warn};

use crate::agent_config::AgentConfig;
use crate::burst_status::{Outcome, Tracked, find_job, status};
use crate::cluster::{Cluster, ClusterError};
use crate::lead_reach::Measured;
use crate::metrics::{ErrorKind, Metrics};
use crate::relay_listeners::HubClient;
use crate::state::{Sent, State};

/// A step of a report that did not go through; its name is the `kind` label it is
/// counted under ([`ReportError::kind`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReportError {
    /// `jobs`: the spoke's Jobs could not be read; reported without their statuses.
    #[error("cannot read the spoke's Jobs: {0}")]
    Jobs(#[source] ClusterError),
    /// `report`: the hub did not take the report; sent again at the next chance.
    #[error("the Report call failed: {}", status_text(.0))]
    Report(#[source] tonic::Status),
}

impl ReportError {
    /// The step that failed: the `kind` label it is counted under.
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            ReportError::Jobs(_) => ErrorKind::Jobs,
            ReportError::Report(_) => ErrorKind::Report,
        }
    }
}

/// Sends the spoke's reports to the hub (the steps at the top of this file).
pub(crate) struct Reporter<C: Cluster> {
    cluster: C,
    /// Whose Jobs are reported (another spoke's Job of the same name says nothing about
    /// ours).
    identity: SpokeIdentity,
    /// The deadline of the Report call.
    settings: TransportSettings,
    /// How the spoke's brokers reach the root's nodes, as its owner declared it.
    declared: RootPath,
    metrics: Arc<Metrics>,
}

impl<C: Cluster> Reporter<C> {
    /// A reporter of `cluster`'s bursts as `config` says, counting into `metrics`.
    pub(crate) fn new(config: &AgentConfig, cluster: C, metrics: Arc<Metrics>) -> Reporter<C> {
        Reporter {
            cluster,
            identity: config.identity.clone(),
            settings: config.settings.clone(),
            declared: config.root_reach,
            metrics,
        }
    }

    /// Logs and counts the error of a step, under the step's name: the one place the
    /// reporter's errors are counted.
    fn record(&self, error: &ReportError) {
        match error {
            ReportError::Jobs(e) => {
                warn!(error = %e, "cannot read the spoke's Jobs; reporting without their status");
            }
            ReportError::Report(status) => {
                warn!(code = ?status.code(), error = %status_text(status), "Report failed; retrying later");
            }
        }
        self.metrics.error(error.kind());
    }

    /// Step `jobs`: the spoke's own Jobs.
    async fn jobs(&self) -> Result<Vec<Job>, ReportError> {
        let mut jobs = self.cluster.jobs().await.map_err(ReportError::Jobs)?;
        // Another spoke's Job of the same name says nothing about ours.
        jobs.retain(|j| {
            matches!(
                ownership(&j.metadata, &self.identity),
                Ownership::Ours { .. }
            )
        });
        Ok(jobs)
    }

    /// Sends every tracked status with the acknowledgement: always when `force`, else only
    /// when what it says changed since the last accepted report.
    pub(crate) async fn report(&self, client: &mut HubClient, state: &mut State, force: bool) {
        if state.epoch.is_empty() {
            return;
        }
        let jobs = match self.jobs().await {
            Ok(jobs) => Some(jobs),
            Err(e) => {
                self.record(&e);
                None
            }
        };
        let mut statuses = statuses(&state.tracked, jobs.as_deref());
        for s in &mut statuses {
            s.conditions.extend(state.lead_reach.condition(&s.key));
            s.conditions.extend(state.fencing.condition(&s.key));
        }
        let access = self.cluster.unreachable().map(cluster_access);
        if state.room_nodes.is_none() {
            state.room_nodes = Some((SystemTime::now(), self.cluster.room()));
        }
        let policy = self.cluster.policy().ok().flatten();
        let room = state
            .room_nodes
            .as_ref()
            .map(|(at, nodes)| cluster_room(*at, nodes, policy.as_deref(), &statuses));
        let reach = root_reach(self.declared, state.lead_reach.measured().as_ref());
        let sending = Sent {
            statuses,
            access,
            room: room.clone().map(without_time),
            root_reach: Some(reach_without_time(reach.clone())),
        };
        if !force && state.last_sent.as_ref() == Some(&sending) {
            return;
        }
        let request = ReportRequest {
            root_reach: Some(reach),
            hub_epoch: state.epoch.clone(),
            applied_version: state.acked,
            statuses: sending.statuses.clone(),
            cluster_access: sending.access.clone(),
            room,
        };
        let applied_version = request.applied_version;
        // Step `report`.
        match client.report(self.settings.unary_request(request)).await {
            Ok(_) => {
                // The hub answered: it is not silent (what fencing counts).
                state.fencing.heard_hub(std::time::Instant::now());
                self.metrics.report_sent();
                debug!(
                    applied_version,
                    statuses = sending.statuses.len(),
                    "reported"
                );
                state.last_sent = Some(sending);
            }
            Err(status) => {
                self.record(&ReportError::Report(status));
                state.last_sent = None;
            }
        }
    }
}

/// How the spoke's brokers reach the root's nodes: what its owner `declared` and what it
/// last `measured` (nothing since it started: unspecified).
fn root_reach(declared: RootPath, measured: Option<&Measured>) -> RootReach {
    let mut reach = RootReach {
        declared: declared.into(),
        ..RootReach::default()
    };
    if let Some(m) = measured {
        reach.measured = m.path.into();
        reach.measured_target = m.target.clone();
        reach.measured_error = m.error.clone();
        reach.measured_unix_millis = m.unix_millis;
    }
    reach
}

/// A reach as compared with the last one sent: when it was measured does not count.
fn reach_without_time(reach: RootReach) -> RootReach {
    RootReach {
        measured_unix_millis: 0,
        ..reach
    }
}

/// The room of the cluster for the hub's placement: its nodes as measured at `at`, and
/// what its policy (`policy`, its text) still admits given the bursts of `statuses`.
fn cluster_room(
    at: SystemTime,
    nodes: &NodesRoom,
    policy: Option<&str>,
    statuses: &[AssignmentStatus],
) -> ClusterRoom {
    let (nodes, nodes_left_out, error) = match nodes {
        Ok((nodes, left_out)) => (nodes.clone(), *left_out, String::new()),
        Err(e) => (Vec::new(), 0, e.clone()),
    };
    let brokers = statuses
        .iter()
        .filter(|s| {
            !matches!(
                BurstPhase::try_from(s.phase).unwrap_or_default(),
                BurstPhase::Refused | BurstPhase::Deleting | BurstPhase::Deleted
            )
        })
        .map(|s| s.size.max(0))
        .fold(0i32, i32::saturating_add);
    let policy = match PolicyState::of(policy) {
        PolicyState::Valid(p) => PolicyRoom {
            valid: true,
            namespaces: p
                .namespaces
                .iter()
                .take(MAX_NAMESPACES)
                .map(|r| r.name.clone())
                .collect(),
            max_brokers: p.max_brokers(),
            max_brokers_per_minicluster: p.max_brokers_per_minicluster(),
            brokers,
        },
        PolicyState::Missing | PolicyState::Invalid(_) => PolicyRoom {
            brokers,
            ..PolicyRoom::default()
        },
    };
    ClusterRoom {
        nodes,
        nodes_left_out,
        observed_unix_millis: at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        error,
        policy: Some(policy),
    }
}

/// A room as compared with the last one sent: when it was measured does not count.
fn without_time(room: ClusterRoom) -> ClusterRoom {
    ClusterRoom {
        observed_unix_millis: 0,
        ..room
    }
}

/// `ClusterAccess` of a report while the API server cannot be reached.
fn cluster_access((since, error): (SystemTime, String)) -> ClusterAccess {
    let millis = since
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    ClusterAccess {
        // 0 means reachable: a clock before 1970 still reports unreachable.
        unreachable_since_unix_millis: millis.max(1),
        error,
    }
}

/// The statuses of `tracked`; those that depend on a Job are left out when `jobs` could
/// not be read.
fn statuses(tracked: &[Tracked], jobs: Option<&[Job]>) -> Vec<AssignmentStatus> {
    tracked
        .iter()
        .filter_map(|t| {
            let needs_job = matches!(
                t.outcome,
                Outcome::Applied | Outcome::Failed { .. } | Outcome::Held { .. }
            );
            let job = match (needs_job, jobs) {
                (false, _) => None,
                (true, None) => return None,
                (true, Some(jobs)) => t
                    .job
                    .as_ref()
                    .and_then(|(namespace, name)| find_job(jobs, namespace, name)),
            };
            Some(status(t, job))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flux_shared::federation::proto::NodeRoom;

    #[test]
    fn statuses_skip_job_dependent_entries_without_jobs() {
        let t = |key: &str, outcome| Tracked {
            key: key.into(),
            observed_version: 1,
            job: Some(("ns".into(), key.into())),
            size: 1,
            outcome,
            admitted_size: None,
        };
        let tracked = [t("a", Outcome::Applied), t("b", Outcome::Deleted)];
        let keys = |s: Vec<AssignmentStatus>| s.into_iter().map(|s| s.key).collect::<Vec<_>>();
        assert_eq!(keys(statuses(&tracked, None)), ["b"]);
        assert_eq!(keys(statuses(&tracked, Some(&[]))), ["a", "b"]);
    }

    #[test]
    fn the_room_says_what_the_nodes_have_and_what_the_policy_still_admits() {
        let status = |key: &str, phase: BurstPhase, size| AssignmentStatus {
            key: key.into(),
            phase: phase as i32,
            size,
            ..AssignmentStatus::default()
        };
        let statuses = [
            status("a", BurstPhase::Running, 4),
            status("b", BurstPhase::Applied, 2),
            // Refused or leaving: holds nothing of the ceiling.
            status("c", BurstPhase::Refused, 8),
            status("d", BurstPhase::Deleting, 8),
        ];
        let nodes = Ok((
            vec![NodeRoom {
                count: 2,
                free_milli: [("cpu".to_string(), 1500)].into(),
            }],
            3,
        ));
        let policy = "version: 1\nnamespaces: [{name: hpc-*}, {name: default}]\nmaxBrokers: 10\nmaxBrokersPerMiniCluster: 6\n";
        let at = UNIX_EPOCH + std::time::Duration::from_millis(1234);
        let room = cluster_room(at, &nodes, Some(policy), &statuses);
        assert_eq!((room.nodes.len(), room.nodes_left_out), (1, 3));
        assert_eq!(room.observed_unix_millis, 1234);
        assert_eq!(room.error, "");
        assert_eq!(
            room.policy,
            Some(PolicyRoom {
                valid: true,
                namespaces: vec!["hpc-*".into(), "default".into()],
                max_brokers: 10,
                max_brokers_per_minicluster: 6,
                brokers: 6,
            })
        );
        // No policy: nothing admitted; nodes not readable: said, not guessed.
        let blind = cluster_room(at, &Err("cannot list nodes: forbidden".into()), None, &[]);
        assert!(blind.nodes.is_empty());
        assert_eq!(blind.error, "cannot list nodes: forbidden");
        assert!(!blind.policy.unwrap().valid);
        // Only what changed is sent again: the time it was measured does not count.
        let later = cluster_room(
            at + std::time::Duration::from_secs(10),
            &nodes,
            Some(policy),
            &statuses,
        );
        assert_ne!(later, room);
        assert_eq!(without_time(later), without_time(room));
    }

    #[test]
    fn the_root_reach_says_what_was_declared_and_measured_and_its_time_is_no_news() {
        assert_eq!(
            root_reach(RootPath::Unspecified, None),
            RootReach::default(),
            "nothing declared, nothing measured"
        );
        let declared = root_reach(RootPath::Relay, None);
        assert_eq!(
            (declared.declared(), declared.measured()),
            (RootPath::Relay, RootPath::Unspecified)
        );
        let measured = Measured {
            path: RootPath::Direct,
            target: "192.0.2.1:30050".into(),
            error: String::new(),
            unix_millis: 1234,
        };
        let reach = root_reach(RootPath::Relay, Some(&measured));
        assert_eq!(
            reach,
            RootReach {
                declared: RootPath::Relay.into(),
                measured: RootPath::Direct.into(),
                measured_target: "192.0.2.1:30050".into(),
                measured_error: String::new(),
                measured_unix_millis: 1234,
            }
        );
        let later = root_reach(
            RootPath::Relay,
            Some(&Measured {
                unix_millis: 5678,
                ..measured.clone()
            }),
        );
        assert_ne!(later, reach);
        assert_eq!(reach_without_time(later), reach_without_time(reach.clone()));
        let failed = root_reach(
            RootPath::Relay,
            Some(&Measured {
                path: RootPath::Relay,
                error: "refused".into(),
                ..measured
            }),
        );
        assert_ne!(reach_without_time(failed), reach_without_time(reach));
    }
}
