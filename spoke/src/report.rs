//! Reporting: what the spoke tells the hub of every tracked assignment (its status, from
//! the Job where there is one) and of its access to its own API server, with the
//! acknowledgement of the last snapshot fully applied.

use std::time::{SystemTime, UNIX_EPOCH};

use flux_shared::federation::diagnostics::status_text;
use flux_shared::federation::ownership::{Ownership, ownership};
use flux_shared::federation::proto::{AssignmentStatus, ClusterAccess, ReportRequest};
use k8s_openapi::api::batch::v1::Job;
use tracing::{debug, warn};

use crate::agent::{Agent, Client, State};
use crate::burst_status::{Outcome, Tracked, find_job, status};
use crate::cluster::Cluster;
use crate::metrics::ErrorKind;

impl<C: Cluster> Agent<C> {
    /// Sends every tracked status with the acknowledgement: always when `force`, else only
    /// when a status changed since the last accepted report.
    pub(crate) async fn report(&self, client: &mut Client, state: &mut State, force: bool) {
        if state.epoch.is_empty() {
            return;
        }
        let jobs = match self.cluster.jobs().await {
            // Another spoke's Job of the same name says nothing about ours.
            Ok(mut jobs) => {
                jobs.retain(|j| {
                    matches!(
                        ownership(&j.metadata, &self.config.identity),
                        Ownership::Ours { .. }
                    )
                });
                Some(jobs)
            }
            Err(e) => {
                self.metrics.error(ErrorKind::Jobs);
                warn!(error = %e, "cannot read the spoke's Jobs; reporting without their status");
                None
            }
        };
        let mut statuses = statuses(&state.tracked, jobs.as_deref());
        for s in &mut statuses {
            s.conditions.extend(state.lead_reach.condition(&s.key));
        }
        let access = self.cluster.unreachable().map(cluster_access);
        let sending = (statuses, access);
        if !force && state.last_sent.as_ref() == Some(&sending) {
            return;
        }
        let (statuses, access) = sending;
        let request = ReportRequest {
            hub_epoch: state.epoch.clone(),
            applied_version: state.acked,
            statuses: statuses.clone(),
            cluster_access: access.clone(),
        };
        let applied_version = request.applied_version;
        match client
            .report(self.config.settings.unary_request(request))
            .await
        {
            Ok(_) => {
                self.metrics.report_sent();
                debug!(applied_version, statuses = statuses.len(), "reported");
                state.last_sent = Some((statuses, access));
            }
            Err(status) => {
                self.metrics.error(ErrorKind::Report);
                warn!(code = ?status.code(), error = %status_text(&status), "Report failed; retrying later");
                state.last_sent = None;
            }
        }
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
}
