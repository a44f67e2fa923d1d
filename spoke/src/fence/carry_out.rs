//! The task that carries fences out: each burst [`Fencing`] decides to fence has its Job
//! deleted (foreground propagation, on the uid the spoke's Job cache shows, as the spoke
//! deletes Jobs elsewhere), is logged and counted. It runs beside the agent's connection
//! to the hub, since fences matter most while there is none.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flux_shared::federation::ownership::{SpokeIdentity, is_ours};
use tracing::{error, warn};

use super::{Due, Fencing};
use crate::cluster::{Cluster, ClusterError, Kind, ObjectRef, OwnedObject};
use crate::metrics::{ErrorKind, Metrics};

/// How soon a fence that failed is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// Carries out the fences `fencing` decides, in `cluster`, for the spoke `me`, counted in
/// `metrics`; runs until dropped.
pub(crate) async fn carry_out<C: Cluster>(
    fencing: Fencing,
    cluster: C,
    me: SpokeIdentity,
    metrics: Arc<Metrics>,
) {
    loop {
        let failed = carry_out_due(&fencing, &cluster, &me, &metrics, Instant::now()).await;
        let retry = failed.then(|| Instant::now() + RETRY);
        let wake = [fencing.next_decision(), retry].into_iter().flatten().min();
        tokio::select! {
            () = sleep_until(wake) => {}
            () = fencing.woken() => {}
        }
    }
}

/// Decides at `now` and carries out every fence due; whether one failed (it stays due).
pub(crate) async fn carry_out_due<C: Cluster>(
    fencing: &Fencing,
    cluster: &C,
    me: &SpokeIdentity,
    metrics: &Metrics,
    now: Instant,
) -> bool {
    let mut failed = false;
    for (key, due) in fencing.due(now) {
        match fence(cluster, me, &key, &due).await {
            Ok(deleted) => {
                metrics.fenced();
                if deleted {
                    metrics.deleted(Kind::Job.as_str());
                }
                warn!(
                    burst = %key,
                    job = %format!("{}/{}", due.lead.job.0, due.lead.job.1),
                    lead = %due.lead.target,
                    hub_silent_seconds = due.hub_silent.as_secs(),
                    lead_unreached_seconds = due.lead_silent.as_secs(),
                    fence_after_seconds = fencing.after().as_secs(),
                    job_deleted = deleted,
                    "fenced a direct burst: nothing heard from the hub and its lead broker not reached for too long, so its ranks may be placed elsewhere; its Job is deleted and created anew only if the hub assigns it here again"
                );
                fencing.carried_out(&key, now_millis());
            }
            Err(e) => {
                failed = true;
                metrics.error(ErrorKind::Fence);
                error!(burst = %key, error = %e, retry_in = ?RETRY, "cannot delete the Job of a burst to fence; retrying");
            }
        }
    }
    failed
}

/// Deletes burst `key`'s Job as `due` names it, if it is still this spoke's and not being
/// deleted already; whether it deleted it.
async fn fence<C: Cluster>(
    cluster: &C,
    me: &SpokeIdentity,
    key: &str,
    due: &Due,
) -> Result<bool, ClusterError> {
    let (namespace, name) = &due.lead.job;
    let jobs = cluster.jobs().await?;
    let Some(job) = jobs.iter().find(|j| {
        j.metadata.namespace.as_deref() == Some(namespace.as_str())
            && j.metadata.name.as_deref() == Some(name.as_str())
            && is_ours(&j.metadata, me, key)
    }) else {
        return Ok(false);
    };
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(false);
    }
    let object = OwnedObject {
        object: ObjectRef {
            kind: Kind::Job,
            namespace: namespace.clone(),
            name: name.clone(),
        },
        key: key.to_string(),
        uid: job.metadata.uid.clone(),
    };
    cluster.delete_job_foreground(&object).await?;
    Ok(true)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}

/// Now, Unix milliseconds.
fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
