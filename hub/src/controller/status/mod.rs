//! The MiniCluster status, as a pure function of what the controller observed.
//! Written by `write`, with the Events of `events`.

pub mod bursts;
pub(in crate::controller) mod events;
mod instance_ended;
pub(in crate::controller) mod placement;
pub(in crate::controller) mod write;

use flux_shared::api::{MiniCluster, MiniClusterPhase, MiniClusterStatus};
use flux_shared::render::labels;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// An Event to publish: warning?, reason, note.
pub type BurstEvent = (bool, &'static str, String);

/// A problem that stops the controller from applying the spec as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Condition reason (`InvalidSpec`, `SizeAboveMaximum`, `JobSpecImmutable`, ...).
    pub reason: String,
    /// What is wrong and what to do.
    pub message: String,
    /// The spec could not be planned at all (nothing was applied).
    pub invalid: bool,
}

/// The Ready and Progressing reason of a MiniCluster whose workers' instance ended under
/// them (see [`instance_ended`]).
pub const INSTANCE_ENDED: &str = "InstanceEnded";

/// What a suspended MiniCluster's conditions say.
const SUSPENDED: &str = "the Job is suspended: no broker runs until it is resumed (by its queue manager, or spec.suspend: false)";

fn job_condition<'a>(
    job: &'a Job,
    type_: &str,
) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// Condition `type_` as `ok` says, its transition time kept from `previous` while its
/// status does not change.
pub(super) fn condition(
    previous: &MiniClusterStatus,
    generation: Option<i64>,
    now: &Time,
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time: previous
            .conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .map_or_else(|| now.clone(), |c| c.last_transition_time.clone()),
    }
}

/// Whether a Job has finished, and how: `Some(true)` complete, `Some(false)` failed.
pub fn job_finished(job: &Job) -> Option<bool> {
    if job_condition(job, "Complete").is_some() {
        Some(true)
    } else if job_condition(job, "Failed").is_some() {
        Some(false)
    } else {
        None
    }
}

/// Compute the status. `declared_max` is the planned maximum size (`None` when the spec
/// could not be planned); `job` is the root Job as last seen; `previous` supplies the
/// transition times of conditions that did not change.
pub fn compute(
    mc: &MiniCluster,
    declared_max: Option<i32>,
    job: Option<&Job>,
    problem: Option<&Problem>,
    now: &Time,
) -> MiniClusterStatus {
    let previous = mc.status.clone().unwrap_or_default();
    let name = mc.metadata.name.as_deref().unwrap_or("");
    let generation = mc.metadata.generation;
    let size = job
        .and_then(|j| j.spec.as_ref()?.parallelism)
        .unwrap_or(previous.size);
    let ready = job.and_then(|j| j.status.as_ref()?.ready).unwrap_or(0);
    // Pods of a scale-down still terminating: their brokers drain their Flux jobs first.
    let draining = job
        .and_then(|j| j.status.as_ref()?.terminating)
        .unwrap_or(0);
    let leaving = crate::controller::status::bursts::leaving(draining);
    let finished = job.and_then(job_finished);
    let failed = job.and_then(|j| job_condition(j, "Failed"));

    let phase = match (problem, job, finished) {
        (Some(p), _, _) if p.invalid => MiniClusterPhase::Invalid,
        (_, _, Some(true)) => MiniClusterPhase::Succeeded,
        (_, _, Some(false)) => MiniClusterPhase::Failed,
        (_, Some(j), None) if j.spec.as_ref().and_then(|s| s.suspend) == Some(true) => {
            MiniClusterPhase::Suspended
        }
        (_, Some(_), None) if size > 0 && ready >= size => MiniClusterPhase::Running,
        _ => MiniClusterPhase::Pending,
    };

    let cond = |type_: &str, ok: bool, reason: &str, message: String| {
        condition(&previous, generation, now, type_, ok, reason, message)
    };

    // Brokers whose instance ended under them (see `instance_ended`): only while the Job
    // runs, since a finished or suspended Job says more.
    let ended = match phase {
        MiniClusterPhase::Pending | MiniClusterPhase::Running => {
            job.and_then(instance_ended::ended_brokers)
        }
        _ => None,
    }
    .map(|indexes| {
        format!(
            "the brokers of Job indexes {indexes} exited with their Flux instance and are not restarted (their indexes completed), while the lead broker's pod runs: that instance ended when the lead broker's pod went (deleted or evicted), and the lead's new pod leads a new one without them. Delete and re-create the MiniCluster for an instance of every broker"
        )
    });

    let ready_cond = match phase {
        MiniClusterPhase::Running => cond(
            "Ready",
            true,
            "BrokersReady",
            format!("{ready}/{size} brokers ready{leaving}"),
        ),
        MiniClusterPhase::Succeeded => {
            cond("Ready", false, "Completed", "the Job completed".into())
        }
        MiniClusterPhase::Failed => cond("Ready", false, "JobFailed", "the Job failed".into()),
        MiniClusterPhase::Invalid => cond(
            "Ready",
            false,
            "InvalidSpec",
            "the spec cannot be applied".into(),
        ),
        MiniClusterPhase::Suspended => cond("Ready", false, "Suspended", SUSPENDED.into()),
        _ => cond(
            "Ready",
            false,
            "BrokersStarting",
            format!("{ready}/{size} brokers ready"),
        ),
    };
    let progressing = match phase {
        MiniClusterPhase::Pending => cond(
            "Progressing",
            true,
            if job.is_some() {
                "BrokersStarting"
            } else {
                "Creating"
            },
            format!("{ready}/{size} brokers ready"),
        ),
        MiniClusterPhase::Succeeded | MiniClusterPhase::Failed => {
            cond("Progressing", false, "Finished", "the Job finished".into())
        }
        MiniClusterPhase::Suspended => cond("Progressing", false, "Suspended", SUSPENDED.into()),
        _ => cond("Progressing", false, "Stable", "nothing to do".into()),
    };
    let (ready_cond, progressing) = match ended {
        Some(message) => (
            cond("Ready", false, INSTANCE_ENDED, message.clone()),
            cond("Progressing", false, INSTANCE_ENDED, message),
        ),
        None => (ready_cond, progressing),
    };
    let degraded = match problem {
        Some(p) => cond("Degraded", true, &p.reason, p.message.clone()),
        None => cond(
            "Degraded",
            false,
            "AsExpected",
            "the spec is applied".into(),
        ),
    };
    let failed_cond = match failed {
        Some(c) => cond(
            "Failed",
            true,
            c.reason.as_deref().unwrap_or("JobFailed"),
            c.message.clone().unwrap_or_else(|| "the Job failed".into()),
        ),
        None => cond(
            "Failed",
            false,
            "NotFailed",
            "the Job has not failed".into(),
        ),
    };

    MiniClusterStatus {
        size,
        maximum_size: declared_max.unwrap_or(previous.maximum_size),
        selector: format!("{}={name}", labels::JOB),
        phase: Some(phase.to_string()),
        brokers: Some(format!("{ready}/{size}")),
        brokers_ready: ready,
        brokers_draining: draining,
        observed_generation: generation,
        conditions: vec![ready_cond, progressing, degraded, failed_cond]
            .into_iter()
            .chain(
                previous
                    .conditions
                    .iter()
                    .find(|c| c.type_ == BURSTS_READY)
                    .cloned(),
            )
            .collect(),
        // The federation fills these in when it has news (see `with_bursts`).
        lead_broker: previous.lead_broker.clone(),
        bursts_running: previous.bursts_running.clone(),
        bursts: previous.bursts.clone(),
        burst_layout: previous.burst_layout.clone(),
    }
}

/// Condition type summarising the bursts of a MiniCluster with burst clusters.
pub const BURSTS_READY: &str = "BurstsReady";

#[cfg(test)]
mod tests {
    use super::bursts::with_bursts;
    use super::*;
    use flux_shared::api::BurstStatus;
    use k8s_openapi::api::batch::v1::{JobCondition, JobSpec, JobStatus};
    use k8s_openapi::jiff::Timestamp;

    fn mc() -> MiniCluster {
        let mut mc: MiniCluster = serde_yaml_ng::from_str(
            "apiVersion: flux-framework.org/v1alpha2\nkind: MiniCluster\nmetadata: {name: m, generation: 3}\nspec: {size: 2, containers: [{image: a}]}\n",
        )
        .expect("yaml");
        mc.status = None;
        mc
    }

    fn job(parallelism: i32, ready: i32, condition: Option<(&str, &str)>) -> Job {
        Job {
            spec: Some(JobSpec {
                parallelism: Some(parallelism),
                ..Default::default()
            }),
            status: Some(JobStatus {
                ready: Some(ready),
                conditions: condition.map(|(t, reason)| {
                    vec![JobCondition {
                        type_: t.into(),
                        status: "True".into(),
                        reason: Some(reason.into()),
                        message: Some(format!("{reason} happened")),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn now(s: i64) -> Time {
        Time(Timestamp::from_second(s).expect("time"))
    }

    fn condition<'a>(s: &'a MiniClusterStatus, t: &str) -> &'a Condition {
        s.conditions
            .iter()
            .find(|c| c.type_ == t)
            .expect("condition")
    }

    #[test]
    fn workers_completed_under_a_running_lead_say_the_instance_ended() {
        let m = mc();
        let mut ended = job(2, 1, None);
        if let Some(st) = ended.status.as_mut() {
            st.completed_indexes = Some("1".into());
            st.failed = Some(1);
        }
        let s = compute(&m, Some(2), Some(&ended), None, &now(1));
        for t in ["Ready", "Progressing"] {
            let c = condition(&s, t);
            assert_eq!(
                (c.status.as_str(), c.reason.as_str()),
                ("False", INSTANCE_ENDED)
            );
            assert!(c.message.contains("Job indexes 1 exited"), "{}", c.message);
            assert!(
                c.message.contains("re-create the MiniCluster"),
                "{}",
                c.message
            );
        }
        // The lead's index completed as well: the instance finished, as the Job will say.
        if let Some(st) = ended.status.as_mut() {
            st.completed_indexes = Some("0-1".into());
        }
        let s = compute(&m, Some(2), Some(&ended), None, &now(1));
        assert_ne!(condition(&s, "Ready").reason, INSTANCE_ENDED);
        // A finished Job says more than its indexes.
        let mut done = job(2, 0, Some(("Complete", "CompletionsReached")));
        if let Some(st) = done.status.as_mut() {
            st.completed_indexes = Some("1".into());
            st.failed = Some(1);
        }
        let s = compute(&m, Some(2), Some(&done), None, &now(1));
        assert_eq!(condition(&s, "Ready").reason, "Completed");
    }

    #[test]
    fn phases_follow_the_job() {
        let m = mc();
        let s = compute(&m, Some(4), None, None, &now(1));
        assert_eq!(s.phase.as_deref(), Some(MiniClusterPhase::Pending.as_str()));
        assert_eq!(condition(&s, "Progressing").reason, "Creating");
        assert_eq!(s.maximum_size, 4);
        assert_eq!(s.selector, "flux-framework.org/job=m");
        let s = compute(&m, Some(4), Some(&job(2, 1, None)), None, &now(1));
        assert_eq!(
            (s.phase.as_deref(), s.brokers.as_deref(), s.size),
            (Some(MiniClusterPhase::Pending.as_str()), Some("1/2"), 2)
        );
        let s = compute(&m, Some(4), Some(&job(2, 2, None)), None, &now(1));
        assert_eq!(s.phase.as_deref(), Some(MiniClusterPhase::Running.as_str()));
        assert_eq!(condition(&s, "Ready").status, "True");
        // Suspended by a queue manager (or spec.suspend): said as such, not as starting.
        let mut suspended = job(2, 0, None);
        if let Some(spec) = suspended.spec.as_mut() {
            spec.suspend = Some(true);
        }
        let s = compute(&m, Some(4), Some(&suspended), None, &now(1));
        assert_eq!(
            s.phase.as_deref(),
            Some(MiniClusterPhase::Suspended.as_str())
        );
        assert_eq!(
            (
                condition(&s, "Ready").reason.as_str(),
                condition(&s, "Progressing").reason.as_str()
            ),
            ("Suspended", "Suspended")
        );
        // Scaled down from 4 to 2: two pods still terminate, draining their Flux jobs.
        let mut shrinking = job(2, 2, None);
        if let Some(st) = shrinking.status.as_mut() {
            st.terminating = Some(2);
        }
        let s = compute(&m, Some(4), Some(&shrinking), None, &now(1));
        assert_eq!(s.brokers_draining, 2);
        assert_eq!(
            condition(&s, "Ready").message,
            "2/2 brokers ready; 2 brokers leaving, draining their Flux jobs first"
        );
        let s = compute(
            &m,
            Some(4),
            Some(&job(2, 0, Some(("Complete", "CompletionsReached")))),
            None,
            &now(1),
        );
        assert_eq!(
            s.phase.as_deref(),
            Some(MiniClusterPhase::Succeeded.as_str())
        );
        let s = compute(
            &m,
            Some(4),
            Some(&job(2, 0, Some(("Failed", "DeadlineExceeded")))),
            None,
            &now(1),
        );
        assert_eq!(s.phase.as_deref(), Some(MiniClusterPhase::Failed.as_str()));
        assert_eq!(condition(&s, "Failed").reason, "DeadlineExceeded");
        assert!(
            s.conditions
                .iter()
                .all(|c| c.observed_generation == Some(3))
        );
    }

    #[test]
    fn problems_degrade_without_hiding_the_job() {
        let m = mc();
        let refusal = Problem {
            reason: "SizeAboveMaximum".into(),
            message: "spec.size: too big".into(),
            invalid: false,
        };
        let s = compute(&m, Some(2), Some(&job(2, 2, None)), Some(&refusal), &now(1));
        assert_eq!(s.phase.as_deref(), Some(MiniClusterPhase::Running.as_str()));
        assert_eq!(condition(&s, "Degraded").status, "True");
        assert_eq!(condition(&s, "Degraded").message, "spec.size: too big");
        let invalid = Problem {
            reason: "InvalidSpec".into(),
            message: "spec.x: bad".into(),
            invalid: true,
        };
        let s = compute(&m, None, None, Some(&invalid), &now(1));
        assert_eq!(s.phase.as_deref(), Some(MiniClusterPhase::Invalid.as_str()));
    }

    #[test]
    fn unchanged_conditions_keep_their_transition_time_so_the_status_is_stable() {
        let mut m = mc();
        let first = compute(&m, Some(2), Some(&job(2, 2, None)), None, &now(100));
        m.status = Some(first.clone());
        let again = compute(&m, Some(2), Some(&job(2, 2, None)), None, &now(200));
        assert_eq!(first, again, "no change, no status write");
        let changed = compute(&m, Some(2), Some(&job(2, 1, None)), None, &now(300));
        assert_eq!(condition(&changed, "Ready").last_transition_time, now(300));
        assert_eq!(
            condition(&changed, "Degraded").last_transition_time,
            now(100)
        );
    }

    #[test]
    fn bursts_running_counts_the_running_ones_and_is_unset_without_bursts() {
        let burst = |name: &str, phase: &str| BurstStatus {
            name: name.to_string(),
            phase: phase.to_string(),
            ..Default::default()
        };
        let status = |bursts| {
            with_bursts(
                MiniClusterStatus::default(),
                &MiniClusterStatus::default(),
                None,
                bursts,
                None,
                &now(1),
            )
            .bursts_running
        };
        assert_eq!(status(vec![]), None);
        assert_eq!(
            status(vec![burst("a", "Running"), burst("b", "Pending")]).as_deref(),
            Some("1/2")
        );
        assert_eq!(status(vec![burst("a", "Running")]).as_deref(), Some("1/1"));
    }
}
