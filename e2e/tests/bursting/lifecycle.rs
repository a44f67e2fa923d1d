//! A burst's whole life: dispatched to the spoke, configured to join the lead broker, shown
//! in the status and by `flux-hub status`, joined, and deleted with its MiniCluster.

use std::time::Duration;

use anyhow::{Context as _, Result};
use flux_shared::api::MiniCluster;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::{DeleteParams, ListParams};

use crate::support;
use crate::support::{Federation, Probe, TestEnv, secs, yaml};

use super::brokers_joined::*;
use super::burst_fixture::*;
use super::burst_steps::*;
use super::spoke_objects::*;

/// The whole life of a burst: dispatched to the spoke, configured to join the lead broker,
/// shown in the status and by `flux-hub status`, (when pods run) joined, and deleted with
/// its MiniCluster.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn burst_runs_in_the_spoke_cluster_and_goes_with_its_minicluster() {
    support::run_federated("burst-life", "e2e-spoke", burst_lifecycle).await;
}

async fn burst_lifecycle(env: &TestEnv, fed: &Federation) -> Result<()> {
    let burst = dispatch(env, fed).await?;

    // Pod level, only where pods run.
    brokers_join(env, &burst).await?;

    // Deleting the MiniCluster (like `kubectl delete`) deletes the burst in the spoke
    // cluster; the hub's finalizer holds the MiniCluster until the spoke confirms.
    let jobs = env.spoke_api::<Job>();
    let job = jobs.get(&burst.name).await?;
    let selector = job_selector(&job)?;
    env.api::<MiniCluster>()
        .delete(NAME, &DeleteParams::background())
        .await
        .context("deleting the MiniCluster")?;
    let pods = env.spoke_api::<Pod>();
    env.eventually(
        &format!(
            "the spoke to delete the burst's Job, ConfigMap, Secret, Service and pods in namespace {} of the burst cluster",
            env.ns
        ),
        secs(150),
        async || {
            let mut left = still_there(env, &burst.objects).await?;
            let running = pods.list(&ListParams::default().labels(&selector)).await?;
            left.extend(running.items.iter().map(|p| format!("Pod {}", p.name_any())));
            Ok(if left.is_empty() {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("still there: {}", left.join(", ")))
            })
        },
    )
    .await?;
    let mcs = env.api::<MiniCluster>();
    env.eventually(
        "the MiniCluster to disappear (the hub releases its finalizer once the spoke confirmed)",
        objects_deadline(),
        async || {
            Ok(match mcs.get_opt(NAME).await? {
                None => Probe::Done(()),
                Some(mc) => Probe::Waiting(format!(
                    "metadata:\n{}status:\n{}",
                    yaml(&mc.metadata),
                    yaml(&mc.status)
                )),
            })
        },
    )
    .await?;
    // Nothing comes back.
    env.holds_for(
        "no object of the burst re-appears in the burst cluster",
        Duration::from_secs(5),
        async || {
            let again = spoke_objects_of(env, fed.spoke(), &burst.name).await?;
            Ok((!again.is_empty()).then(|| format!("re-created: {}", again.join(", "))))
        },
    )
    .await
}
