//! Whether the Flux instance of a MiniCluster ended under it: worker indexes of the root
//! Job completed while the lead's index has not.
//!
//! A worker broker exits 0 when its lead shuts the instance down: when the lead's pod is
//! deleted or evicted (its broker shuts down on SIGTERM). Its Job index then completes and
//! Kubernetes does not start it again, while the Job starts a new lead pod that leads a
//! new instance the completed workers never join. The Job itself says nothing is wrong;
//! the status must.
//!
//! An instance that finishes its work ends the same way, workers first, and its lead's
//! index completes a moment later: that must not be reported. What tells them apart is the
//! lead's pod that went: a deleted or evicted pod counts as failed in the Job's status,
//! while a finishing instance fails none. (A Job that had lost a pod earlier and then
//! finishes may still show the condition for that moment.)

use k8s_openapi::api::batch::v1::Job;

/// The Job indexes (as the Job writes them, `1,3-5`) of the brokers whose instance ended
/// while the lead's pod runs on: workers completed, index 0 not, and a pod of the Job
/// failed (the lead's that went). `None` when no worker completed, no pod failed, the
/// lead's index completed too (the instance finished its work), or the field is not in
/// the Job's documented form.
pub(super) fn ended_brokers(job: &Job) -> Option<String> {
    let status = job.status.as_ref()?;
    if status.failed.unwrap_or(0) == 0 {
        return None;
    }
    let completed = status.completed_indexes.as_deref()?.trim();
    if completed.is_empty() || !well_formed(completed) {
        return None;
    }
    // Sorted ascending: index 0, when there, leads the first range.
    let first = completed.split(',').next()?;
    if first == "0" || first.starts_with("0-") {
        return None;
    }
    Some(completed.to_string())
}

/// `completedIndexes` as the Job controller writes it: comma-separated indexes and
/// `a-b` ranges of decimal numbers.
fn well_formed(set: &str) -> bool {
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    set.split(',').all(|part| match part.split_once('-') {
        Some((a, b)) => number(a) && number(b),
        None => number(part),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::JobStatus;

    fn job(completed: Option<&str>) -> Job {
        Job {
            status: Some(JobStatus {
                completed_indexes: completed.map(str::to_string),
                failed: Some(1),
                ..JobStatus::default()
            }),
            ..Job::default()
        }
    }

    #[test]
    fn workers_completed_without_their_lead_mean_the_instance_ended() {
        assert_eq!(ended_brokers(&job(Some("1"))).as_deref(), Some("1"));
        assert_eq!(ended_brokers(&job(Some("1-3,5"))).as_deref(), Some("1-3,5"));
        assert_eq!(ended_brokers(&job(Some("10"))).as_deref(), Some("10"));
    }

    #[test]
    fn nothing_ended_while_no_worker_completed_or_the_lead_completed_too() {
        for quiet in [None, Some(""), Some("0"), Some("0-3"), Some("0,2")] {
            assert_eq!(ended_brokers(&job(quiet)), None, "{quiet:?}");
        }
        assert_eq!(ended_brokers(&Job::default()), None);
    }

    #[test]
    fn workers_finishing_before_their_lead_with_no_pod_lost_are_an_instance_finishing() {
        let mut finishing = job(Some("1-3"));
        if let Some(s) = finishing.status.as_mut() {
            s.failed = None;
        }
        assert_eq!(ended_brokers(&finishing), None);
        if let Some(s) = finishing.status.as_mut() {
            s.failed = Some(0);
        }
        assert_eq!(ended_brokers(&finishing), None);
    }

    #[test]
    fn a_field_in_another_form_claims_nothing() {
        for odd in ["x", "1-", "-2", "1,,2", "1 2", "01x"] {
            assert_eq!(ended_brokers(&job(Some(odd))), None, "{odd:?}");
        }
    }
}
