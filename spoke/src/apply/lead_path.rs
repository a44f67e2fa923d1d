//! Whether a burst's Job must be replaced because its path to the lead broker changed,
//! pure. A new path changes the burst's ConfigMap (broker.toml, entrypoint) and relay
//! Service, never its pod template, so pods running would keep dialling the old path: a
//! Job made for another path (its [`LEAD_PATH`] annotation) is deleted, with foreground
//! propagation, and created anew once it is gone, so that no two pods of one rank run at
//! once.
//!
//! A Job being deleted for any other reason (the spoke fenced the burst, or someone deleted
//! it) is waited for the same way: written onto, it would still go.
//!
//! A Job without the annotation was made by an older spoke, when a burst was relayed only
//! with `relay: true`, which also made its `<burst>-relay` Service: such a Job was made
//! for the relay when the spoke owned that Service for the burst before this snapshot, and
//! to connect directly otherwise.

use flux_shared::render::Object;
use flux_shared::render::labels::{LEAD_PATH, LEAD_PATH_DIRECT, LEAD_PATH_RELAY};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// What to do with a burst's Job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum JobStep {
    /// Write it: there is none, or the live one is for the same path.
    Write,
    /// The live Job was made for path `from`, not `to`: delete it and create the new one
    /// once it is gone.
    Replace { from: String, to: String },
    /// The live Job, made for path `from`, not `to`, is being deleted: create the new one
    /// once it is gone.
    Wait { from: String, to: String },
    /// The live Job, made for the same path, is being deleted (the spoke fenced the burst,
    /// or someone deleted it): writing onto it would not keep it, so the new one is
    /// created once it is gone.
    Deleting,
}

impl JobStep {
    /// What the burst's status says while its Job is replaced.
    pub(super) fn message(&self) -> Option<String> {
        match self {
            JobStep::Write => None,
            JobStep::Replace { from, to } | JobStep::Wait { from, to } => Some(format!(
                "its path to the lead broker changed from {from} to {to}: its Job is replaced, \
                 and created anew once the old one's pods are gone"
            )),
            JobStep::Deleting => Some(
                "its Job is being deleted: it is created anew once the old one's pods are gone"
                    .to_string(),
            ),
        }
    }
}

/// The path `job` (a rendered Job) is for; `None` for another object, or a Job without
/// the annotation.
pub(super) fn rendered_path(job: &Object) -> Option<&str> {
    match job {
        Object::Job(j) => annotation(&j.metadata),
        _ => None,
    }
}

fn annotation(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()?
        .get(LEAD_PATH)
        .map(String::as_str)
}

/// What to do with a burst's Job rendered for path `rendered`, given the live one's
/// metadata (`None`: there is none) and whether the spoke owned the burst's relay Service
/// before this snapshot (what tells an older spoke's Job's path).
pub(super) fn job_step(rendered: &str, live: Option<&ObjectMeta>, had_relay: bool) -> JobStep {
    let Some(live) = live else {
        return JobStep::Write;
    };
    let from = match annotation(live) {
        Some(path) => path,
        None if had_relay => LEAD_PATH_RELAY,
        None => LEAD_PATH_DIRECT,
    };
    let deleting = live.deletion_timestamp.is_some();
    if from == rendered {
        return if deleting {
            JobStep::Deleting
        } else {
            JobStep::Write
        };
    }
    let (from, to) = (from.to_string(), rendered.to_string());
    if deleting {
        JobStep::Wait { from, to }
    } else {
        JobStep::Replace { from, to }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn live(path: Option<&str>, deleting: bool) -> ObjectMeta {
        ObjectMeta {
            annotations: path.map(|p| [(LEAD_PATH.to_string(), p.to_string())].into()),
            deletion_timestamp: deleting.then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_job_is_replaced_only_when_it_was_made_for_another_path() {
        let (relay, direct) = (LEAD_PATH_RELAY, LEAD_PATH_DIRECT);
        let replace = |from: &str, to: &str| JobStep::Replace {
            from: from.into(),
            to: to.into(),
        };
        // None yet, or the same path: written as usual.
        assert_eq!(job_step(relay, None, true), JobStep::Write);
        assert_eq!(
            job_step(relay, Some(&live(Some(relay), false)), false),
            JobStep::Write
        );
        // The same path, being deleted: waited for, then created anew.
        assert_eq!(
            job_step(direct, Some(&live(Some(direct), true)), true),
            JobStep::Deleting
        );
        assert_eq!(
            job_step(direct, Some(&live(None, true)), false),
            JobStep::Deleting
        );
        // Another path: replaced, then waited for while it goes.
        assert_eq!(
            job_step(relay, Some(&live(Some(direct), false)), false),
            replace(direct, relay)
        );
        assert_eq!(
            job_step(direct, Some(&live(Some(relay), false)), true),
            replace(relay, direct)
        );
        assert_eq!(
            job_step(direct, Some(&live(Some(relay), true)), false),
            JobStep::Wait {
                from: relay.into(),
                to: direct.into()
            }
        );
        // An older spoke's Job: relayed if it had its relay Service, else direct.
        assert_eq!(
            job_step(direct, Some(&live(None, false)), false),
            JobStep::Write
        );
        assert_eq!(
            job_step(relay, Some(&live(None, false)), true),
            JobStep::Write
        );
        assert_eq!(
            job_step(relay, Some(&live(None, false)), false),
            replace(direct, relay)
        );
        assert_eq!(
            job_step(direct, Some(&live(None, false)), true),
            replace(relay, direct)
        );
        let message = replace(direct, relay).message().unwrap_or_default();
        assert!(message.contains("from direct to relay"), "{message}");
        assert_eq!(JobStep::Write.message(), None);
    }
}
