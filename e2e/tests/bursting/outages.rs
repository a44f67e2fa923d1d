//! Restarts and outages that must never delete or re-create a burst: the spoke restarted
//! and the hub away, the hub killed at any step of its start, the burst cluster's API server
//! down, the hub crashing, its certificate rotated and deletion while the spoke is away.

use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use flux_shared::api::MiniCluster;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support;
use crate::support::{Federation, Probe, TestEnv, secs, yaml};

use super::burst_fixture::*;
use super::burst_steps::*;
use super::spoke_objects::*;

/// Restarting the spoke, stopping the hub, restarting the spoke while the hub is away and
/// bringing the hub back never deletes or re-creates the burst's objects.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn spoke_restart_and_hub_outage_keep_the_burst() {
    support::run_federated("burst-outage", "e2e-spoke", outage).await;
}

/// The hub killed (SIGKILL) at every step of its start-up and first reconciles while a
/// burst runs, once more after its MiniCluster's status lost the lead broker (as if the
/// hub had died before writing it): no object of the burst is ever deleted or re-created.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn a_hub_killed_at_any_step_of_its_start_never_deletes_a_running_burst() {
    support::run_federated("burst-kill", "e2e-spoke", killed_at_start).await;
}

/// The burst cluster's API server goes away while hub and spoke run: within ~40 s the
/// MiniCluster's status says the spoke cannot see its cluster, and since when; once it is
/// back the burst is Running again with the same objects. Needs commands that stop and
/// start the burst cluster's control plane: `FLUX_E2E_BURST_STOP`, `FLUX_E2E_BURST_START`
/// (`scripts/e2e.sh` sets them on the testbed; on kind, e.g. `docker stop` / `docker
/// start` of the burst cluster's control-plane container).
#[tokio::test]
#[ignore = "needs two clusters and FLUX_E2E_BURST_STOP/START (scripts/e2e.sh)"]
async fn burst_cluster_outage_is_reported_and_survived() {
    support::run_federated_alone("burst-apiserver", "e2e-spoke", api_outage).await;
}

/// Faults around the burst's life: the hub killed while the spoke is creating the burst
/// (it converges, nothing duplicated or lost); the spoke's certificate rotated (a new one
/// from the same CA, the spoke restarted with it: same objects, reports again); the
/// MiniCluster deleted while its spoke is down (the hub does not wait for a spoke that is
/// away) and the spoke, back, deletes what its snapshot no longer lists.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn hub_crash_certificate_rotation_and_deletion_while_the_spoke_is_away() {
    support::run_federated("burst-faults", "e2e-spoke", faults).await;
}

async fn outage(env: &TestEnv, fed: &Federation) -> Result<()> {
    let burst = dispatch(env, fed).await?;
    let objects = &burst.objects;

    // A restarted spoke rebuilds its state from the cluster and the hub's snapshot: it
    // adopts the burst's objects, neither deleting nor re-creating them.
    let restarted = now_millis();
    env.restart_spoke().await?;
    spoke_synced(env, fed, &burst.name, restarted).await?;
    env.holds_for(
        "the burst's objects survive a spoke restart (same uids)",
        Duration::from_secs(10),
        async || same_objects(env, objects).await,
    )
    .await?;

    // The hub goes away: the spoke keeps what it runs.
    env.stop_hub();
    eprintln!("outage: hub stopped");
    env.holds_for(
        "the burst's objects stay while the hub is stopped",
        secs(30),
        async || same_objects(env, objects).await,
    )
    .await?;

    // A spoke that starts while the hub is away knows only its cluster: it must not
    // delete anything either.
    env.restart_spoke().await?;
    env.holds_for(
        "the burst's objects stay when the spoke restarts while the hub is stopped",
        secs(15),
        async || same_objects(env, objects).await,
    )
    .await?;

    // The hub comes back (a new epoch, rebuilt from the API server): the spoke reconnects,
    // applies the new snapshot, and still nothing is re-created.
    let back = now_millis();
    env.start_hub().await?;
    eprintln!("outage: hub restarted");
    spoke_synced(env, fed, &burst.name, back).await?;
    env.holds_for(
        "the burst's objects survive the hub's return (same uids)",
        Duration::from_secs(10),
        async || same_objects(env, objects).await,
    )
    .await?;
    burst_status(env, fed, &burst.name).await?;
    Ok(())
}

async fn killed_at_start(env: &TestEnv, fed: &Federation) -> Result<()> {
    let burst = dispatch(env, fed).await?;
    let objects = &burst.objects;
    // Each start is killed after a delay that lands in another step: before the caches
    // sync, while the registry is rebuilt, while the spoke gets its first snapshot, during
    // the first reconciles.
    for (round, millis) in [0u64, 150, 300, 600, 1000, 1500, 2500, 4000]
        .into_iter()
        .enumerate()
    {
        env.stop_hub();
        if round == 4 {
            // What the hub needs to assign is not known when it starts: the status does
            // not name the lead broker (as if the hub had died before writing it) and the
            // lead Service is gone, its re-creation refused by a quota for a while (the
            // NodePort unknown). The hub must keep what runs meanwhile.
            env.api::<MiniCluster>()
                .patch_status(
                    NAME,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"leadBroker": null}})),
                )
                .await
                .context("removing status.leadBroker")?;
            let quota: ResourceQuota = serde_json::from_value(json!({
                "metadata": {"name": "no-node-ports"},
                "spec": {"hard": {"services.nodeports": "0"}},
            }))?;
            let quotas = env.api::<ResourceQuota>();
            quotas.create(&PostParams::default(), &quota).await?;
            env.api::<Service>()
                .delete(&format!("{NAME}-lead"), &DeleteParams::default())
                .await
                .context("deleting the lead Service")?;
            env.start_hub().await?;
            env.holds_for(
                "the burst's objects stay while the restarted hub cannot learn the lead",
                secs(12),
                async || same_objects(env, objects).await,
            )
            .await?;
            quotas
                .delete("no-node-ports", &DeleteParams::default())
                .await?;
            continue;
        }
        env.start_hub().await?;
        tokio::time::sleep(Duration::from_millis(millis)).await;
        if let Some(changed) = same_objects(env, objects).await? {
            bail!("after a hub start killed at {millis} ms: {changed}");
        }
    }
    env.stop_hub();
    env.holds_for(
        "the burst's objects stay while the hub is down",
        secs(5),
        async || same_objects(env, objects).await,
    )
    .await?;
    let back = now_millis();
    env.start_hub().await?;
    spoke_synced(env, fed, &burst.name, back).await?;
    env.holds_for(
        "the burst's objects survive every kill (same uids)",
        secs(10),
        async || same_objects(env, objects).await,
    )
    .await?;
    burst_status(env, fed, &burst.name).await?;
    Ok(())
}

async fn faults(env: &TestEnv, fed: &Federation) -> Result<()> {
    // A short deletion timeout, so that deleting with the spoke away is quick to test.
    env.stop_hub();
    env.set_hub_args({
        let mut args = env.hub_args();
        args.extend(["--burst-deletion-timeout-seconds".into(), "15".into()]);
        args
    });
    env.start_hub().await?;

    // 1. The hub dies while the spoke creates the burst: applied, then the hub is killed
    //    as soon as the burst's namespace appears in the burst cluster.
    let burst_name = burst_name(&env.ns);
    let doc = minicluster(&burst_name, fed.spoke(), lead_address_override().as_deref());
    env.apply_minicluster(&doc).await?;
    let namespaces: Api<Namespace> = Api::all(env.spoke_client());
    env.eventually(
        "the spoke to start creating the burst (its namespace in the burst cluster)",
        objects_deadline(),
        async || {
            Ok(match namespaces.get_opt(&env.ns).await? {
                Some(_) => Probe::Done(()),
                None => Probe::Waiting("no namespace yet".into()),
            })
        },
    )
    .await?;
    env.stop_hub();
    let killed = std::time::Instant::now();
    eprintln!("{}: hub killed while the burst was being created", env.ns);
    env.start_hub().await?;
    let burst = dispatch(env, fed).await?;
    eprintln!(
        "{}: after the hub's crash the burst converged {:?} after the kill",
        env.ns,
        killed.elapsed()
    );
    ensure!(
        spoke_objects_of(env, fed.spoke(), &burst.name).await?.len() == burst.objects.len(),
        "the burst cluster holds other objects of the burst than its four: {:?}",
        spoke_objects_of(env, fed.spoke(), &burst.name).await?
    );

    // 2. A new spoke certificate from the same CA: the spoke restarts with it and carries
    //    on with the same objects.
    let hub = tokio::task::spawn_blocking(support::hub_binary).await??;
    let before = std::fs::read(fed.file(&format!("spoke-{}.crt", fed.spoke())))?;
    let out = tokio::process::Command::new(&hub)
        .arg("certs")
        .arg("--out")
        .arg(&fed.certs)
        .args(["--spoke", fed.spoke(), "--force"])
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "flux-hub certs --force failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = std::fs::read(fed.file(&format!("spoke-{}.crt", fed.spoke())))?;
    ensure!(before != after, "the spoke certificate was not replaced");
    let rotated = now_millis();
    env.restart_spoke().await?;
    spoke_synced(env, fed, &burst.name, rotated).await?;
    env.holds_for(
        "the burst's objects survive the certificate rotation (same uids)",
        Duration::from_secs(5),
        async || same_objects(env, &burst.objects).await,
    )
    .await?;
    eprintln!("{}: spoke reconnected with a rotated certificate", env.ns);

    // 3. The MiniCluster is deleted while its spoke is down: the hub does not wait for a
    //    spoke that is away (a SpokeAway Event says so) and lets the MiniCluster go well
    //    before its deletion timeout; the spoke, back, deletes the burst (its snapshot no
    //    longer lists it).
    env.stop_spoke();
    let deleted = std::time::Instant::now();
    env.api::<MiniCluster>()
        .delete(NAME, &DeleteParams::background())
        .await
        .context("deleting the MiniCluster")?;
    let mcs = env.api::<MiniCluster>();
    env.eventually(
        "the MiniCluster to disappear while its spoke is down (the hub's deletion timeout is 15 s)",
        secs(90),
        async || {
            Ok(match mcs.get_opt(NAME).await? {
                None => Probe::Done(()),
                Some(mc) => Probe::Waiting(yaml(&mc.status)),
            })
        },
    )
    .await?;
    let gone_after = deleted.elapsed();
    eprintln!(
        "{}: MiniCluster gone {gone_after:?} after its deletion, its spoke away",
        env.ns
    );
    ensure!(
        gone_after < secs(15),
        "a spoke that is away must not hold the deletion until the timeout (15 s): {gone_after:?}"
    );
    let events = env
        .api::<k8s_openapi::api::core::v1::Event>()
        .list(&Default::default())
        .await?;
    ensure!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("SpokeAway")),
        "a SpokeAway Event says the burst goes when the spoke returns"
    );
    ensure!(
        !still_there(env, &burst.objects).await?.is_empty(),
        "with its spoke down, nothing can have deleted the burst yet"
    );
    env.start_spoke().await?;
    let back = std::time::Instant::now();
    env.eventually(
        "the spoke, back, to delete the burst of the deleted MiniCluster",
        objects_deadline(),
        async || {
            let left = still_there(env, &burst.objects).await?;
            Ok(if left.is_empty() {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("still there: {}", left.join(", ")))
            })
        },
    )
    .await?;
    eprintln!(
        "{}: the returning spoke deleted the burst {:?} after it started",
        env.ns,
        back.elapsed()
    );
    Ok(())
}

async fn api_outage(env: &TestEnv, fed: &Federation) -> Result<()> {
    let stop = control_command("FLUX_E2E_BURST_STOP")?;
    let start = control_command("FLUX_E2E_BURST_START")?;
    let burst = dispatch(env, fed).await?;
    wait_burst_phase(env, "Running", objects_deadline()).await?;

    run_control(&stop).await?;
    let stopped = std::time::Instant::now();
    eprintln!("{}: burst cluster control plane stopped", env.ns);
    // Phase and condition are read from the same object, before the restart: once the burst
    // cluster is back the spoke reconnects within seconds and both turn healthy again.
    let mcs = env.api::<MiniCluster>();
    let outcome = env
        .eventually(
            &format!("status.bursts[0].phase of {NAME} to be Unknown"),
            secs(90),
            async || {
                let mc = mcs.get(NAME).await?;
                let burst = mc.status.as_ref().and_then(|s| s.bursts.first().cloned());
                let condition = support::mc_conditions(&mc)
                    .iter()
                    .find(|c| c.type_ == "BurstsReady")
                    .cloned();
                Ok(match (burst, condition) {
                    (Some(b), Some(c)) if b.phase == "Unknown" => {
                        Probe::Done((b.message.unwrap_or_default(), c))
                    }
                    _ => Probe::Waiting(yaml(&mc.status)),
                })
            },
        )
        .await;
    let said_after = stopped.elapsed();
    // Whatever happened, bring the burst cluster back before judging.
    run_control(&start).await?;
    let restarted = std::time::Instant::now();
    let (message, condition) = outcome?;
    eprintln!(
        "{}: status said the spoke cannot see its cluster {said_after:?} after the API server stopped: {message}",
        env.ns
    );
    ensure!(
        said_after <= secs(45),
        "the status took {said_after:?} to say the burst cluster is unreachable (expected ~40 s at most)"
    );
    ensure!(
        message.contains("cannot reach its cluster's API server since"),
        "the burst's message must say the spoke cannot reach its cluster, and since when: {message}"
    );
    ensure!(
        condition.status == "False" && condition.reason == "SpokeClusterUnreachable",
        "BurstsReady must be False with reason SpokeClusterUnreachable: {condition:?}"
    );

    // The spoke notices its API server's return within 5 s (its watch retries at most
    // 4 s apart): the burst is Running again at most 5 s after its pods are ready again
    // in the burst cluster (what the pods need is the kubelet's and the Job controller's).
    let jobs = env.spoke_api::<Job>();
    let (mut pods_ready, mut running) = (None, None);
    let deadline = restarted + secs(120);
    while (pods_ready.is_none() || running.is_none()) && std::time::Instant::now() < deadline {
        if pods_ready.is_none()
            && let Ok(Some(job)) = jobs.get_opt(&burst.name).await
        {
            let status = job.status.unwrap_or_default();
            let size = job.spec.and_then(|s| s.parallelism).unwrap_or(0);
            if size > 0 && status.ready.unwrap_or(0) >= size {
                pods_ready = Some(restarted.elapsed());
            }
        }
        if running.is_none() {
            let mc = env.api::<MiniCluster>().get(NAME).await?;
            if mc
                .status
                .as_ref()
                .and_then(|s| s.bursts.first())
                .is_some_and(|b| b.phase == "Running")
            {
                running = Some(restarted.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (Some(pods_ready), Some(running)) = (pods_ready, running) else {
        bail!(
            "within 120 s of the restart: burst pods ready again {pods_ready:?}, burst Running again {running:?}"
        );
    };
    eprintln!(
        "{}: after the control plane restarted, the burst's pods were ready again in {pods_ready:?} and the burst Running in {running:?}",
        env.ns
    );
    ensure!(
        running <= pods_ready + secs(5),
        "the burst was Running again {running:?} after the restart, more than 5 s after its pods were ready ({pods_ready:?})"
    );
    env.holds_for(
        "the burst's objects survive the outage (same uids)",
        Duration::from_secs(5),
        async || same_objects(env, &burst.objects).await,
    )
    .await
}

/// A shell command from the environment variable `var`.
fn control_command(var: &str) -> Result<String> {
    std::env::var(var)
        .ok()
        .filter(|c| !c.trim().is_empty())
        .with_context(|| {
            format!("{var} is not set: this test stops and starts the burst cluster's control plane with it (scripts/e2e.sh sets it on the testbed)")
        })
}

async fn run_control(command: &str) -> Result<()> {
    let out = tokio::time::timeout(
        secs(120),
        tokio::process::Command::new("bash")
            .args(["-c", command])
            .output(),
    )
    .await
    .with_context(|| format!("`{command}` timed out"))??;
    ensure!(
        out.status.success(),
        "`{command}` failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
