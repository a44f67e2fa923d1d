//! One reconcile of one MiniCluster, as named stages, each in its own module:
//!
//! 1. [`validate`](crate::controller::desired::validate): plan the spec, or say why it is not applied;
//! 2. [`desired`](crate::controller::desired::desired): the CURVE certificate and the rendered objects;
//! 3. [`apply`](crate::controller::apply): write what differs from the caches;
//! 4. [`pod_labels`](crate::controller::apply::pod_labels): `job-index` on every broker pod;
//! 5. [`orphans`](crate::controller::apply::orphans): delete what the plan no longer has;
//! 6. [`federate`](crate::controller::federate): finalizer, lead broker endpoint and what to
//!    do with the bursts, one [`Disposition`] (assign, wait, refuse, hold);
//! 7. [`status`](crate::controller::status): the status with the bursts' part (built in
//!    [`bursts`](crate::controller::status::bursts) from the decision, once
//!    [`publish`](crate::controller::federate::publish)ed to the registry), written once,
//!    with its Events, when it changed (or, when a stage before failed, which one): the
//!    pass's one status write;
//!
//! then what this pass verified is remembered, `spec.cleanup`, and the next look. A
//! deleted MiniCluster goes to [`finalize`](crate::controller::federate::finalize) instead. Decisions live in pure functions (`elasticity`, `status`, `diff`, `orphans`,
//! `federation::lead`, the shared planner and renderer); the stages read caches and talk
//! to the API server.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use flux_shared::api::{MiniCluster, MiniClusterPhase, MiniClusterStatus};
use flux_shared::elasticity;
use flux_shared::render;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DeleteParams;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

use crate::controller::apply::{self, orphans, ownership, pod_labels};
use crate::controller::context::{Context, Error, kube_err, mc_key};
use crate::controller::desired::{certificate, desired, validate};
use crate::controller::federate::finalize::finalize;
use crate::controller::federate::{Federated, federate, publish, retain_from_status};
use crate::controller::status::write as status_write;
use crate::controller::status::{self, BurstEvent, bursts};
use crate::controller::watch::stores::{get, managed_objects};
use crate::controller::watch::verified::{self, Verified};
use crate::federation::Disposition;

/// Reconcile one MiniCluster.
#[tracing::instrument(skip_all, fields(namespace = mc.namespace().unwrap_or_default(), name = mc.name_any(), generation = mc.metadata.generation))]
pub async fn reconcile(mc: Arc<MiniCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile_timer();
    tracing::debug!("reconcile starts");
    let ns = mc
        .namespace()
        .ok_or_else(|| Error::NoNamespace(mc.name_any()))?;
    let name = mc.name_any();
    if mc.metadata.deletion_timestamp.is_some() {
        // Owner references let the garbage collector remove the local children; bursts
        // in other clusters need their spokes (and the finalizer holds until they answer).
        return finalize(&mc, &ctx, &ns, &name).await;
    }
    // Only with complete caches: an absent Secret must mean "never created", or a
    // restarted hub would generate a new CURVE certificate.
    ctx.stores.wait_until_ready().await;
    let _turn = ctx.spec_budget.turn(&mc.spec).await;
    let result = reconcile_inner(&mc, &ctx, &ns, &name).await;
    if result.is_ok() {
        ctx.memory.with(&mc_key(&mc), |m| m.failures = 0);
    }
    result
}

/// The status of a pass whose stage `error` failed before the status: a stage the API
/// server keeps refusing shows on the MiniCluster (Degraded, with the stage's reason, and
/// one Event) until a pass succeeds and the status is computed afresh.
fn failure_status(
    mc: &MiniCluster,
    ctx: &Context,
    error: &Error,
) -> (MiniClusterStatus, status::Problem) {
    let problem = status::Problem {
        reason: error.reason().to_string(),
        message: error.to_string(),
        invalid: false,
    };
    let live_job = mc
        .namespace()
        .and_then(|ns| get(&ctx.stores.jobs, &ns, &mc.name_any()));
    let uid = mc.metadata.uid.as_deref().unwrap_or_default();
    let job = live_job.filter(|j| ownership::holder(j.meta(), uid) == ownership::Holder::Ours);
    let status = status::compute(mc, None, job.as_deref(), Some(&problem), &(ctx.now)());
    (status, problem)
}

/// What the stages before "status" leave for it: the status as the root Job and the
/// problem make it, and, when the plan was applied, what the federation decided.
struct Pass {
    /// The status without the bursts' part.
    status: MiniClusterStatus,
    /// Why the spec is not applied as written, if it is not.
    problem: Option<status::Problem>,
    /// The bursts' decision, when the plan was applied (`None`: the bursts keep running
    /// as the status says, and nothing wakes this MiniCluster but a change).
    federated: Option<Federated>,
    /// Recorded once the status is written: the objects this pass applied in full.
    verified: Option<Verified>,
    /// `spec.cleanup`: delete the MiniCluster once its Job finished.
    cleanup: bool,
}

/// The stages in order: validate → desired → apply → federate (decisions, no status
/// write), then status (computed and written once), then what follows the write.
async fn reconcile_inner(
    mc: &MiniCluster,
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<Action, Error> {
    let now = (ctx.now)();
    // The pass's status: its stages' with the bursts' part, or which stage failed.
    let (pass, status, problem, events) = match stages(mc, ctx, ns, name, &now).await {
        Ok(mut pass) => {
            let (status, events) = status_of(ctx, mc, &mut pass, &now);
            let problem = pass.problem.clone();
            (Ok(pass), status, problem, events)
        }
        Err(error) if error.shows_in_status() => {
            let (status, problem) = failure_status(mc, ctx, &error);
            (Err(error), status, Some(problem), Vec::new())
        }
        Err(error) => return Err(error),
    };
    // The one status write of the pass.
    let written = status_write::write_if_changed(ctx, mc, status, problem.as_ref(), events).await;
    match pass {
        Ok(pass) => {
            let status = written.map_err(Error::StatusWrite)?;
            after_write(ctx, mc, ns, name, pass, &status, &now).await
        }
        Err(error) => {
            // Best effort: the stage's error is retried and counted either way.
            if let Err(e) = written {
                tracing::debug!(error = %e, "could not show the failure in status");
            }
            Err(error)
        }
    }
}

/// Stages validate, desired, apply (with pod labels and orphans) and federate.
async fn stages(
    mc: &MiniCluster,
    ctx: &Context,
    ns: &str,
    name: &str,
    now: &Time,
) -> Result<Pass, Error> {
    let uid = mc.metadata.uid.as_deref().unwrap_or_default();
    // Someone else's Job of this name says nothing about this MiniCluster.
    let live_job = get(&ctx.stores.jobs, ns, name)
        .filter(|j| ownership::holder(j.meta(), uid) == ownership::Holder::Ours);
    let not_applied = |declared_max: Option<i32>, problem: status::Problem| {
        // The bursts keep running as they are.
        retain_from_status(ctx, mc);
        Pass {
            status: status::compute(mc, declared_max, live_job.as_deref(), Some(&problem), now),
            problem: Some(problem),
            federated: None,
            verified: None,
            cleanup: false,
        }
    };

    let mut plan = match validate(mc) {
        Ok(plan) => plan,
        Err(refused) => return Ok(not_applied(refused.declared_max, refused.problem)),
    };
    // A running Job's pods get the view as they were made to (its template cannot change);
    // a new one's, as this cluster allows.
    match live_job.as_ref() {
        Some(job) => {
            if let Some(mode) = render::live_view_mode(&job.metadata) {
                plan.view_mode = mode;
            }
        }
        None => plan.view_mode = plan.spec.view_mode_on(ctx.image_volumes.available()),
    }
    let cert = certificate(ctx, ns, name, uid);
    let key = mc_key(mc);
    let inputs = verified::inputs(&plan, &cert);
    let holds = ctx
        .memory
        .read(&key, |m| {
            m.verified
                .as_ref()
                .is_some_and(|v| v.still_holds(inputs, &ctx.stores, ns))
        })
        .unwrap_or(false);
    // As the last pass left them: that pass rendered, applied and pruned this same plan.
    let (applied, objects) = if holds {
        (apply::Outcome::unchanged(), None)
    } else {
        let objects = desired(&plan, &cert);
        (
            apply::apply_all(ctx, ns, uid, &objects)
                .await
                .map_err(Error::Apply)?,
            Some(objects),
        )
    };
    if !applied.taken.is_empty() {
        // Refused, not retried: the blockers' watches wake this MiniCluster when one of
        // those objects changes or goes, and a spec change wakes it anyway.
        ctx.blockers.watch(&mc_key(mc), &applied.taken, ns);
        let problem = apply::name_taken(ns, &applied.taken);
        return Ok(not_applied(Some(plan.spec.max_size()), problem));
    }
    ctx.blockers.clear(&mc_key(mc));
    pod_labels::label_pods_with_their_index(ctx, ns, name)
        .await
        .map_err(Error::PodLabels)?;
    apply::announce(ctx, mc, &plan, live_job.as_deref(), &applied).await;
    if let Some(objects) = &objects
        && applied.problem.is_none()
    {
        orphans::delete_orphans(ctx, mc, ns, objects)
            .await
            .map_err(Error::Orphans)?;
    }
    ctx.metrics
        .set_objects_managed(managed_objects(&ctx.stores));

    let mut fed = federate(ctx, mc, &plan, &cert, ns, name)
        .await
        .map_err(Error::Federate)?;
    if let Some(p) = applied.problem.as_ref().filter(|p| p.invalid)
        && !fed.bursts.is_empty()
        && !matches!(fed.disposition, Disposition::Refuse(_))
    {
        // The root cluster refuses the spec: no burst of an instance whose lead cannot run
        // (what spokes run of an earlier version stays).
        fed.disposition = Disposition::Refuse(format!(
            "{}: not assigned, the root cluster refuses this spec ({})",
            bursts::ROOT_REFUSED,
            p.reason
        ));
    }
    let job = applied.job.as_ref().or(live_job.as_deref());
    let mut status = status::compute(
        mc,
        Some(plan.spec.max_size()),
        job,
        applied.problem.as_ref(),
        now,
    );
    status.burst_layout = elasticity::burst_layout(&plan);
    let verified = objects
        .filter(|objects| applied.problem.is_none() && applied.versions.len() == objects.len())
        .map(|_| Verified::new(inputs, applied.versions));
    Ok(Pass {
        status,
        problem: applied.problem,
        federated: Some(fed),
        verified,
        cleanup: plan.spec.cleanup.unwrap_or(false),
    })
}

/// Stage "status": the pass's status with the bursts' part, after their decision was
/// published to the registry (whose view the bursts' entries are built from).
fn status_of(
    ctx: &Context,
    mc: &MiniCluster,
    pass: &mut Pass,
    now: &Time,
) -> (MiniClusterStatus, Vec<BurstEvent>) {
    let Some(fed) = pass.federated.as_mut() else {
        return (pass.status.clone(), Vec::new());
    };
    let previous = mc.status.clone().unwrap_or_default();
    // The assignments go to the registry, not copied: what stays is the decision as the
    // status shows it.
    let disposition = std::mem::replace(&mut fed.disposition, Disposition::Assign(Vec::new()));
    let shown = publish(
        ctx,
        mc,
        &pass.status,
        fed.lead.as_ref(),
        fed.bursts.clone(),
        disposition,
    );
    let views = ctx.registry.bursts(&mc_key(mc));
    let (joined, error) = ctx.lead_views.seen(&mc_key(mc));
    let (entries, events) = bursts::of_federation(
        &shown,
        &fed.bursts,
        &views,
        &fed.placed,
        &bursts::LeadSeen { joined, error },
        &previous.bursts,
        SystemTime::from(now.0),
    );
    let status = bursts::with_bursts(
        pass.status.clone(),
        &previous,
        fed.lead.clone(),
        entries,
        mc.metadata.generation,
        now,
    );
    // Admin clients see each burst as this status shows it (Joining, the path, joined).
    ctx.registry
        .show(&mc_key(mc), crate::controller::federate::shown(&status));
    (status, events)
}

/// After the status is written: what this pass verified is remembered, `spec.cleanup`
/// deletes a finished MiniCluster, and the next look is scheduled.
async fn after_write(
    ctx: &Context,
    mc: &MiniCluster,
    ns: &str,
    name: &str,
    pass: Pass,
    status: &MiniClusterStatus,
    now: &Time,
) -> Result<Action, Error> {
    let Some(fed) = pass.federated else {
        return Ok(Action::await_change());
    };
    if let Some(verified) = pass.verified {
        ctx.memory
            .with(&mc_key(mc), |m| m.verified = Some(verified));
    }
    if pass.cleanup
        && matches!(
            status.phase.as_deref().map(str::parse),
            Some(Ok(MiniClusterPhase::Succeeded | MiniClusterPhase::Failed))
        )
    {
        info!("cleanup: the Job finished; deleting the MiniCluster");
        let api: Api<MiniCluster> = Api::namespaced(ctx.client.clone(), ns);
        api.delete(name, &DeleteParams::background())
            .await
            .map_err(kube_err(format!("deleting MiniCluster {ns}/{name}")))
            .map_err(Error::Cleanup)?;
        ctx.metrics.api_write("MiniCluster", "delete");
    }
    // A spoke that just went away shows Unreachable only after a grace period, and a
    // burst's placement has a deadline: nothing else would wake this MiniCluster then.
    let views = ctx.registry.bursts(&mc_key(mc));
    let recheck = bursts::recheck_after(&views, SystemTime::from(now.0));
    Ok(
        match [recheck, fed.placed.recheck].into_iter().flatten().min() {
            Some(after) => Action::requeue(after),
            None => Action::await_change(),
        },
    )
}

/// Retry with capped exponential backoff per MiniCluster: 1 s, 2 s, 4 s ... 5 min.
///
/// A counter per MiniCluster and a pure delay function rather than `backon` (used for the
/// retry loops elsewhere): two schedules share one count, and an unreachable API server
/// must be tried again within 5 s, which backon's per-iterator multiplicative jitter
/// does not express.
pub fn error_policy(mc: Arc<MiniCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed(error.stage(), error.kind());
    let attempt = ctx.memory.with(&mc_key(&mc), |m| {
        m.failures = m.failures.saturating_add(1);
        m.failures
    });
    let delay = if error.kind() == "transport" {
        // The API server did not answer at all: retrying costs it nothing, and a pass
        // must follow within 5 s of its return (spread so that not every MiniCluster comes
        // back in the same instant).
        unreachable_backoff(attempt) + Duration::from_millis(rand::random_range(0..1000))
    } else {
        backoff(attempt)
    };
    warn!(%error, attempt, delay_ms = delay.as_millis() as u64, "reconcile failed; retrying");
    Action::requeue(delay)
}

/// Delay before retry `attempt` (1-based) while the API server cannot be reached: 1 s,
/// 2 s, then 4 s (plus up to 1 s of jitter in [`error_policy`]).
pub fn unreachable_backoff(attempt: u32) -> Duration {
    backoff(attempt).min(Duration::from_secs(4))
}

/// Delay before retry `attempt` (1-based).
pub fn backoff(attempt: u32) -> Duration {
    let exp = attempt.saturating_sub(1).min(16);
    Duration::from_secs(1u64 << exp).min(Duration::from_secs(300))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_exponential_and_capped() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(9), Duration::from_secs(256));
        assert_eq!(backoff(10), Duration::from_secs(300));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn an_unreachable_api_server_is_tried_again_within_5_s() {
        assert_eq!(unreachable_backoff(1), Duration::from_secs(1));
        assert_eq!(unreachable_backoff(2), Duration::from_secs(2));
        assert_eq!(unreachable_backoff(3), Duration::from_secs(4));
        assert_eq!(unreachable_backoff(u32::MAX), Duration::from_secs(4));
    }
}
