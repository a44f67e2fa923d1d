//! What the spoke tells the hub of each burst, pure: an assignment's phase and conditions
//! from how applying it went ([`Outcome`]) and from its Job. The reports' I/O is in
//! `report.rs`.

use flux_shared::federation::proto::{AssignmentStatus, BurstPhase, Condition};
use k8s_openapi::api::batch::v1::Job;

/// Type of the spoke's own condition saying whether it renders exactly the hub's
/// broker.toml and R for an assignment (`True`), renders something else (`False`), or
/// could not tell because the assignment was refused for another reason (`Unknown`).
pub const CONFIG_IDENTICAL: &str = "ConfigIdentical";

/// Type of the spoke's condition on a direct burst whose Job it deleted itself, having
/// heard nothing from the hub and reached nothing of the burst's lead broker for too long
/// (`flux-spoke run --fence-after-seconds`): `True` while its Job is not created anew,
/// `False` once a snapshot of the hub created it again.
pub const FENCED: &str = "Fenced";

/// How an assignment of the current snapshot (or a removed one) ended up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Its objects are applied; the phase comes from its Job.
    Applied,
    /// Not fully applied (it is retried): applying failed, or its Job is being replaced
    /// for a new path to the lead broker; `message` says why. The phase comes from its Job
    /// if an earlier version of it exists.
    Failed {
        /// The error.
        message: String,
    },
    /// The policy does not admit it as sent, and its objects are kept as they run: the
    /// phase comes from its Job, with the reason.
    Held {
        /// Machine-readable reason (one of [`flux_shared::federation::policy::reason`]).
        reason: String,
        /// Why.
        message: String,
    },
    /// Refused: `BURST_PHASE_REFUSED`.
    Refused {
        /// Machine-readable reason (see [`AssignmentRefusal::reason`](crate::admit::AssignmentRefusal::reason)).
        reason: String,
        /// Why.
        message: String,
    },
    /// No longer assigned, and its objects are deleted: `BURST_PHASE_DELETED`.
    Deleted,
    /// No longer assigned, but deleting its objects failed (it is retried):
    /// `BURST_PHASE_DELETING`.
    Deleting {
        /// The error.
        message: String,
    },
}

/// What the agent tracks of one assignment, to report its status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracked {
    /// Assignment key.
    pub key: String,
    /// Snapshot version (of the report's hub_epoch) whose copy of the assignment was last
    /// applied or confirmed; 0 if none.
    pub observed_version: u64,
    /// Namespace and name of its Job, when it has one.
    pub job: Option<(String, String)>,
    /// Brokers it should run (reported while its Job does not exist).
    pub size: i32,
    /// How it ended up.
    pub outcome: Outcome,
    /// The most brokers the policy admits for it now (`None`: not asked).
    pub admitted_size: Option<i32>,
}

/// Phase of a burst from its Job: absent → `APPLIED` (just applied, not seen yet);
/// condition `Complete` true → `SUCCEEDED`; condition `Failed` true → `FAILED`; every
/// broker ready (`status.ready` reaches `spec.parallelism`, at least 1) → `RUNNING`;
/// anything else → `APPLIED`.
pub fn burst_phase(job: Option<&Job>) -> BurstPhase {
    let Some(job) = job else {
        return BurstPhase::Applied;
    };
    if condition_true(job, "Complete") {
        return BurstPhase::Succeeded;
    }
    if condition_true(job, "Failed") {
        return BurstPhase::Failed;
    }
    let parallelism = job.spec.as_ref().and_then(|s| s.parallelism).unwrap_or(1);
    if parallelism > 0 && ready(job) >= parallelism {
        BurstPhase::Running
    } else {
        BurstPhase::Applied
    }
}

fn condition_true(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

fn ready(job: &Job) -> i32 {
    job.status.as_ref().and_then(|s| s.ready).unwrap_or(0)
}

/// A Job's conditions as protocol conditions.
pub fn job_conditions(job: &Job) -> Vec<Condition> {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|cs| {
            cs.iter()
                .map(|c| Condition {
                    r#type: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone().unwrap_or_default(),
                    message: c.message.clone().unwrap_or_default(),
                    last_transition_unix_millis: c
                        .last_transition_time
                        .as_ref()
                        .map_or(0, |t| t.0.as_millisecond()),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn config_identical(status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        r#type: CONFIG_IDENTICAL.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_unix_millis: 0,
    }
}

/// The Job `namespace/name` among `jobs`.
pub fn find_job<'a>(jobs: &'a [Job], namespace: &str, name: &str) -> Option<&'a Job> {
    jobs.iter().find(|j| {
        j.metadata.namespace.as_deref() == Some(namespace)
            && j.metadata.name.as_deref() == Some(name)
    })
}

/// The status to report for `tracked`, whose Job (if it has one and it exists) is `job`.
pub fn status(tracked: &Tracked, job: Option<&Job>) -> AssignmentStatus {
    let mut status = AssignmentStatus {
        key: tracked.key.clone(),
        observed_version: tracked.observed_version,
        phase: BurstPhase::Applied.into(),
        brokers_ready: 0,
        size: tracked.size,
        conditions: Vec::new(),
        message: String::new(),
        brokers_draining: 0,
        reason: String::new(),
        admitted_size: tracked.admitted_size,
    };
    let from_job = |status: &mut AssignmentStatus| {
        status.phase = burst_phase(job).into();
        if let Some(job) = job {
            status.brokers_ready = ready(job);
            status.brokers_draining = job.status.as_ref().and_then(|s| s.terminating).unwrap_or(0);
            if let Some(spec) = job.spec.as_ref() {
                // A burst scaled to 0 is a suspended Job of parallelism 1: it runs nothing.
                status.size = match (spec.suspend, spec.parallelism) {
                    (Some(true), _) => 0,
                    (_, Some(p)) => p,
                    (_, None) => status.size,
                };
            }
            status.conditions = job_conditions(job);
        }
    };
    match &tracked.outcome {
        Outcome::Applied => {
            from_job(&mut status);
            status.conditions.push(config_identical(
                "True",
                "Identical",
                "this spoke renders the hub's broker.toml and R byte for byte",
            ));
        }
        Outcome::Failed { message } => {
            from_job(&mut status);
            status.message = message.clone();
        }
        Outcome::Held { reason, message } => {
            from_job(&mut status);
            status.conditions.push(config_identical(
                "True",
                "Identical",
                "this spoke renders the hub's broker.toml and R byte for byte",
            ));
            status.reason = reason.clone();
            status.message = format!("{message}; its running brokers are kept as they are");
        }
        Outcome::Refused { reason, message } => {
            status.phase = BurstPhase::Refused.into();
            status.reason = reason.clone();
            let identical = if reason == "ConfigMismatch" {
                "False"
            } else {
                "Unknown"
            };
            status
                .conditions
                .push(config_identical(identical, reason, message));
            status.message = message.clone();
        }
        Outcome::Deleted => {
            status.phase = BurstPhase::Deleted.into();
            status.size = 0;
        }
        Outcome::Deleting { message } => {
            status.phase = BurstPhase::Deleting.into();
            status.size = 0;
            status.message = message.clone();
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::batch::v1::{JobCondition, JobSpec, JobStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn job(parallelism: Option<i32>, ready: Option<i32>, conditions: &[(&str, &str)]) -> Job {
        Job {
            spec: Some(JobSpec {
                parallelism,
                ..Default::default()
            }),
            status: Some(JobStatus {
                ready,
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, s)| JobCondition {
                            type_: t.to_string(),
                            status: s.to_string(),
                            reason: Some(format!("{t}Reason")),
                            message: Some(format!("{t} message")),
                            last_transition_time: Some(Time(
                                k8s_openapi::jiff::Timestamp::from_millisecond(1_700_000_000_123)
                                    .unwrap(),
                            )),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn phase_from_the_job() {
        use BurstPhase::*;
        let cases = [
            (None, Applied),
            (Some(job(Some(3), None, &[])), Applied),
            (Some(job(Some(3), Some(2), &[])), Applied),
            (Some(job(Some(3), Some(3), &[])), Running),
            (Some(job(None, Some(1), &[])), Running),
            (Some(job(Some(0), Some(0), &[])), Applied),
            (
                Some(job(Some(3), Some(0), &[("Complete", "True")])),
                Succeeded,
            ),
            (Some(job(Some(3), Some(3), &[("Failed", "True")])), Failed),
            (Some(job(Some(3), Some(3), &[("Failed", "False")])), Running),
            (
                Some(job(Some(3), Some(1), &[("Suspended", "True")])),
                Applied,
            ),
        ];
        for (job, expected) in cases {
            assert_eq!(burst_phase(job.as_ref()), expected, "{job:?}");
        }
    }

    fn tracked(outcome: Outcome) -> Tracked {
        Tracked {
            key: "hpc/m/x".into(),
            observed_version: 7,
            job: Some(("hpc".into(), "x".into())),
            size: 3,
            outcome,
            admitted_size: Some(5),
        }
    }

    #[test]
    fn status_of_an_applied_assignment_comes_from_its_job() {
        let j = job(Some(3), Some(2), &[("Suspended", "False")]);
        let s = status(&tracked(Outcome::Applied), Some(&j));
        assert_eq!(s.key, "hpc/m/x");
        assert_eq!(s.observed_version, 7);
        assert_eq!(s.phase, BurstPhase::Applied as i32);
        assert_eq!((s.brokers_ready, s.size), (2, 3));
        assert_eq!(s.conditions.len(), 2);
        assert_eq!(s.conditions[0].r#type, "Suspended");
        assert_eq!(s.conditions[0].status, "False");
        assert_eq!(s.conditions[0].reason, "SuspendedReason");
        assert_eq!(s.conditions[0].message, "Suspended message");
        assert_eq!(
            s.conditions[0].last_transition_unix_millis,
            1_700_000_000_123
        );
        assert_eq!(s.conditions[1].r#type, CONFIG_IDENTICAL);
        assert_eq!(s.conditions[1].status, "True");
        assert!(s.message.is_empty());

        // A shrink in progress: the pods going are terminating (draining their Flux jobs).
        let mut shrinking = j.clone();
        if let Some(st) = shrinking.status.as_mut() {
            st.terminating = Some(2);
        }
        let s = status(&tracked(Outcome::Applied), Some(&shrinking));
        assert_eq!(s.brokers_draining, 2);

        // Job not there yet: pending, with the size the spoke applied.
        let s = status(&tracked(Outcome::Applied), None);
        assert_eq!(s.phase, BurstPhase::Applied as i32);
        assert_eq!((s.brokers_ready, s.size), (0, 3));
    }

    #[test]
    fn status_of_refused_failed_and_removed_assignments() {
        let s = status(
            &tracked(Outcome::Refused {
                reason: "ConfigMismatch".into(),
                message: "different broker.toml".into(),
            }),
            None,
        );
        assert_eq!(s.phase, BurstPhase::Refused as i32);
        assert_eq!(s.message, "different broker.toml");
        assert_eq!(s.conditions[0].r#type, CONFIG_IDENTICAL);
        assert_eq!(s.conditions[0].status, "False");

        let s = status(
            &tracked(Outcome::Refused {
                reason: "Malformed".into(),
                message: "no lead".into(),
            }),
            None,
        );
        assert_eq!(s.conditions[0].status, "Unknown");

        let running = job(Some(3), Some(3), &[]);
        let s = status(
            &tracked(Outcome::Failed {
                message: "apply Job: immutable".into(),
            }),
            Some(&running),
        );
        assert_eq!(
            s.phase,
            BurstPhase::Running as i32,
            "the old Job still runs"
        );
        assert_eq!(s.message, "apply Job: immutable");

        let s = status(&tracked(Outcome::Deleted), Some(&running));
        assert_eq!(s.phase, BurstPhase::Deleted as i32);
        assert_eq!((s.brokers_ready, s.size), (0, 0));

        let s = status(
            &tracked(Outcome::Deleting {
                message: "forbidden".into(),
            }),
            None,
        );
        assert_eq!(s.phase, BurstPhase::Deleting as i32);
        assert_eq!(s.message, "forbidden");
    }

    #[test]
    fn jobs_are_found_by_namespace_and_name() {
        let mut a = job(Some(1), None, &[]);
        a.metadata.namespace = Some("hpc".into());
        a.metadata.name = Some("x".into());
        let mut b = a.clone();
        b.metadata.namespace = Some("other".into());
        let jobs = [b, a];
        assert_eq!(
            find_job(&jobs, "hpc", "x").and_then(|j| j.metadata.namespace.as_deref()),
            Some("hpc")
        );
        assert!(find_job(&jobs, "hpc", "y").is_none());
    }
}
