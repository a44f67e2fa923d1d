//! Steps `names` and `write` of one assignment: every name it needs is free or already its
//! own, then its objects are written in order; a Job made for another path to the lead
//! broker is replaced rather than written, and one being deleted waited for
//! ([`super::lead_path`]).

use std::collections::BTreeSet;

use flux_shared::federation::assignment::Realized;
use flux_shared::federation::ownership::same_owner;
use flux_shared::render::Object;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tracing::{debug, info};

use super::lead_path::{JobStep, job_step, rendered_path};
use super::{Applier, ApplyError, NameCheck};
use crate::cluster::{Cluster, Kind, ObjectRef, OwnedObject, Taken, metadata};
use crate::state::State;

/// How far an assignment's objects were written.
#[derive(Debug)]
pub(super) enum Written {
    /// Every one.
    All,
    /// Every one but its Job: the live one, made for another path, is being deleted
    /// (`job`, with its `uid`); `message` says so in the burst's status.
    JobReplacing {
        job: ObjectRef,
        uid: Option<String>,
        message: String,
    },
}

impl<C: Cluster> Applier<C> {
    /// Steps `names` then `write` of one assignment: applies its objects in order,
    /// stopping at the first error. `listed`: those of its objects the spoke listed as its
    /// own. Every other name is read first, and if any holds an object the spoke did not
    /// make for this assignment, nothing is written (no half-applied burst). Its Job is
    /// read too: one made for another path is deleted once the rest is written, and
    /// created anew by a later pass once it is gone (`had_relay`: the spoke owned the
    /// burst's relay Service before this snapshot, which tells an older spoke's Job's path).
    pub(super) async fn apply_objects(
        &self,
        realized: &Realized,
        listed: &BTreeSet<&ObjectRef>,
        had_relay: bool,
    ) -> Result<Written, ApplyError> {
        let mut ours = Vec::with_capacity(realized.objects.len());
        let mut taken = Vec::new();
        let mut live_job: Option<(ObjectRef, ObjectMeta)> = None;
        for object in &realized.objects {
            let r = ObjectRef::of(object);
            let is_job = r.kind == Kind::Job;
            let is_listed = listed.contains(&r);
            // The Job is read even when listed: which path it was made for.
            if is_listed && !is_job {
                ours.push(true);
                continue;
            }
            match self.cluster.inspect(&r).await {
                Ok(None) => ours.push(false),
                // Ours, listed or made meanwhile: applied as ours.
                Ok(Some(meta)) if is_listed || same_owner(&meta, metadata(object)) => {
                    if is_job {
                        live_job = Some((r, meta));
                    }
                    ours.push(true);
                }
                Ok(Some(meta)) => taken.push(Taken::new(&r, &meta)),
                Err(source) => {
                    return Err(ApplyError::Names {
                        key: realized.key.clone(),
                        check: NameCheck::Unreadable { object: r, source },
                    });
                }
            }
        }
        if !taken.is_empty() {
            return Err(ApplyError::Names {
                key: realized.key.clone(),
                check: NameCheck::Taken(taken),
            });
        }
        let step = realized
            .objects
            .iter()
            .find_map(|o| rendered_path(o))
            .map_or(JobStep::Write, |path| {
                job_step(path, live_job.as_ref().map(|(_, m)| m), had_relay)
            });
        for (object, owned) in realized.objects.iter().zip(ours) {
            if step != JobStep::Write && matches!(object, Object::Job(_)) {
                continue;
            }
            self.write(realized, object, owned).await?;
        }
        let (Some(message), Some((job, live))) = (step.message(), live_job) else {
            return Ok(Written::All);
        };
        if let JobStep::Replace { from, to } = &step {
            let old = OwnedObject {
                object: job.clone(),
                key: realized.key.clone(),
                uid: live.uid.clone(),
            };
            self.cluster
                .delete_job_foreground(&old)
                .await
                .map_err(|source| ApplyError::Delete {
                    key: realized.key.clone(),
                    object: job.clone(),
                    source,
                })?;
            self.metrics.deleted(Kind::Job.as_str());
            info!(key = %realized.key, %job, %from, %to, "the burst's path to the lead broker changed: its Job is deleted, and created anew once its pods are gone");
        } else {
            debug!(key = %realized.key, %job, "waiting for the burst's old Job, being deleted, to go");
        }
        Ok(Written::JobReplacing {
            job,
            uid: live.uid,
            message,
        })
    }

    /// Step `write` of one object (`owned`: listed as the assignment's own).
    async fn write(
        &self,
        realized: &Realized,
        object: &Object,
        owned: bool,
    ) -> Result<(), ApplyError> {
        match self.cluster.apply(object, owned).await {
            Ok(()) => {
                self.metrics.applied(Kind::of(object).as_str());
                Ok(())
            }
            // Taken between the check and the create.
            Err(e) if e.taken.is_some() => Err(ApplyError::Names {
                key: realized.key.clone(),
                check: NameCheck::Taken(e.taken.into_iter().map(|t| *t).collect()),
            }),
            Err(source) => Err(ApplyError::Write {
                key: realized.key.clone(),
                object: object.describe(),
                source,
            }),
        }
    }

    /// Whether a Job replaced for a new path is gone now (the spoke's Jobs as its cache
    /// knows them): the snapshot can then create it anew.
    pub(crate) async fn replaced_gone(&self, state: &State) -> bool {
        if state.replacing.is_empty() {
            return false;
        }
        let Ok(jobs) = self.cluster.jobs().await else {
            return false;
        };
        state.replacing.values().any(|(job, uid)| {
            !jobs.iter().any(|j| {
                j.metadata.namespace.as_deref() == Some(job.namespace.as_str())
                    && j.metadata.name.as_deref() == Some(job.name.as_str())
                    && (uid.is_none() || j.metadata.uid == *uid)
            })
        })
    }
}
