//! The autoscaler growing a burst for a job that waits, and the job running on it.

use std::time::Duration;

use anyhow::{Result, ensure};
use flux_shared::api::MiniCluster;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt as _;
use serde_json::json;

use crate::support;
use crate::support::dataplane::{self, overlay_full, overlay_wait};
use crate::support::{Federation, Probe, TestEnv, secs};

use super::brokers_joined::*;
use super::burst_fixture::*;
use super::burst_steps::*;
use super::spoke_objects::*;

/// Bursting on demand, end to end with real Flux: an autoscaled MiniCluster whose burst
/// starts at size 0 runs its root instance; a job for four nodes waits; the hub reads the
/// lead broker's queue reporter (through a relay into the emulated pod, as a `kubectl
/// port-forward` would, named by the `flux-framework.org/queue-reporter` annotation),
/// grows the burst to 2 by itself (an Event says why), the spoke resizes its Job, the new
/// brokers join and the job runs on every host. On the testbed only.
#[tokio::test]
#[ignore = "needs two clusters and the testbed: KUBECONFIG, SPOKE_KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn the_autoscaler_grows_a_burst_for_a_waiting_job_and_it_runs() {
    support::run_federated("burst-autoscale", "e2e-spoke", autoscale).await;
}

async fn autoscale(env: &TestEnv, fed: &Federation) -> Result<()> {
    dataplane::testbed()?;
    // The hub runs outside the (emulated) pod network: it reads the reporter through the
    // annotation (federated tests' hubs honour it), pointed at the real lead below; no
    // stand-in meanwhile.
    let burst = burst_name(&env.ns);
    let mut doc = minicluster(&burst, fed.spoke(), lead_address_override().as_deref());
    doc["spec"]["flux"]["bursting"]["clusters"] =
        json!([{"name": burst, "size": 0, "maxSize": 2, "cluster": fed.spoke()}]);
    doc["spec"]["flux"]["bursting"]["autoscale"] = json!({
        "scaleUpAfterSeconds": 2, "scaleDownAfterSeconds": 3600, "intervalSeconds": 1,
    });
    doc["metadata"]["annotations"] = json!({"flux-framework.org/queue-reporter": ""});
    env.apply_minicluster(&doc).await?;
    let mcs = env.api::<MiniCluster>();
    let lead = lead_endpoint(env).await?;
    let job: Job = wait_spoke_object(env, fed.spoke(), &burst).await?;
    let uid = job.uid();

    let root = start_root(env, &lead).await?;
    let lead_pod = format!("{NAME}-0");
    let root_hosts = dataplane::indexed(NAME, ROOT_SIZE);

    // The hub reads the reporter through a relay into the lead pod (it cannot reach the
    // emulated pod network), named by the annotation.
    let relay = root.relay(&lead_pod, NAME, 8051).await?;
    mcs.patch(
        NAME,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(
            json!({"metadata": {"annotations": {"flux-framework.org/queue-reporter": relay}}}),
        ),
    )
    .await?;
    // The burst cluster's owner admits one broker at most: with it the instance could
    // have 3 nodes, too few for the job, so the autoscaler does not grow the burst at all
    // (the ceiling holds), however long the job waits.
    let policy = |extra: &str| {
        format!(
            "namespaces: [{{name: {}, podSecurity: privileged}}]\n{extra}",
            env.ns
        )
    };
    env.set_spoke_policy_of(fed.spoke(), Some(&policy("maxBrokers: 1\n")))
        .await?;
    wait_burst(env, "the spoke to admit one broker", |b| {
        b.admitted_size == Some(1)
    })
    .await?;
    let jobid = root.flux_submit(&lead_pod, NAME, "-N 4 hostname").await?;
    let submitted = std::time::Instant::now();
    let jobs = env.spoke_api::<Job>();
    env.holds_for(
        "the ceiling: no growth past what the spoke admits",
        Duration::from_secs(8),
        async || {
            let size = mcs.get(NAME).await?.spec.bursts()[0].size;
            let suspend = jobs.get(&burst).await?.spec.and_then(|s| s.suspend);
            Ok((size != 0 || suspend != Some(true))
                .then(|| format!("size {size}, Job suspend {suspend:?}")))
        },
    )
    .await?;
    // The owner lifts the ceiling: the burst grows to what the job needs.
    env.set_spoke_policy_of(fed.spoke(), Some(&policy("")))
        .await?;

    env.eventually(
        "the autoscaler to grow the burst to 2 for the waiting job",
        secs(90),
        async || {
            let job = jobs.get(&burst).await?;
            ensure!(job.uid() == uid, "the burst's Job was re-created");
            let spec = job.spec.clone().unwrap_or_default();
            Ok(
                if spec.parallelism == Some(2) && spec.suspend == Some(false) {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!(
                        "{:?} suspend {:?}; hub log tail:\n{}",
                        spec.parallelism,
                        spec.suspend,
                        env.hub_log_tail(15)
                    ))
                },
            )
        },
    )
    .await?;
    eprintln!(
        "{}: burst grown to 2 by the autoscaler {:?} after job {jobid} was submitted (scaleUpAfterSeconds 2)",
        env.ns,
        submitted.elapsed()
    );
    let events = env
        .api::<k8s_openapi::api::core::v1::Event>()
        .list(&Default::default())
        .await?;
    let scaled: Vec<String> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("BurstScaledUp"))
        .filter_map(|e| e.message.clone())
        .collect();
    ensure!(
        scaled
            .iter()
            .any(|m| m.contains(&format!("burst {burst}: size 0 -> 2")) && m.contains("4 nodes")),
        "a BurstScaledUp Event says why: {scaled:?}"
    );

    let burst_run = start_burst(env, &lead).await?;
    let mut hosts = root_hosts.clone();
    hosts.extend(dataplane::indexed(&burst, 2));
    overlay_wait(
        &root,
        &lead_pod,
        NAME,
        &hosts,
        Some(&burst_run),
        overlay_full,
    )
    .await?;
    let out = root
        .flux_exec(&lead_pod, NAME, &format!("flux job attach {jobid}"))
        .await?;
    let missing: Vec<&String> = hosts
        .iter()
        .filter(|h| !out.lines().any(|l| l == h.as_str()))
        .collect();
    ensure!(
        missing.is_empty(),
        "job {jobid} did not run on {missing:?}:\n{out}"
    );
    eprintln!(
        "{}: job {jobid} ran on {} {:?} after it was submitted",
        env.ns,
        hosts.join(", "),
        submitted.elapsed()
    );
    root.flux_exec(&lead_pod, NAME, "flux shutdown --quiet")
        .await?;
    root.finish(secs(120)).await?.all_succeeded(&root_hosts)?;
    burst_run
        .finish(secs(120))
        .await?
        .all_succeeded(&dataplane::indexed(&burst, 2))?;
    Ok(())
}
