//! Resizing a burst: an elastic burst resized in place within its `maxSize`, and one grown
//! by `flux-hub burst scale` joining the running instance.

use anyhow::{Result, ensure};
use flux_shared::api::MiniCluster;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::ResourceExt as _;
use serde_json::json;

use crate::support;
use crate::support::dataplane::{self, overlay_full, overlay_wait};
use crate::support::{Federation, Probe, TestEnv, secs, yaml};

use super::brokers_joined::*;
use super::burst_fixture::*;
use super::spoke_objects::*;

/// An elastic burst (`maxSize` 3) resized in place: its Job in the burst cluster keeps its
/// uid while the size goes 1 → 3 → 0 (suspended, ConfigMap/Secret/Service kept); a size
/// above `maxSize` (by the API server, or by the hub against the frozen layout) and a
/// renamed burst are refused and change nothing there.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn an_elastic_burst_is_resized_in_place_within_its_max_size() {
    support::run_federated("burst-elastic", "e2e-spoke", elastic).await;
}

/// Bursting on demand, by hand, with real Flux: a MiniCluster whose burst starts at size 0
/// (`maxSize` 2) runs its root instance; a job for all four hosts waits; `flux-hub burst
/// scale` grows the burst to 2, the spoke resizes the suspended Job, its brokers (run from
/// what the spoke wrote) join the running instance, and the waiting job runs on every root
/// and burst host. On the testbed only (`FLUX_E2E_TESTBED`).
#[tokio::test]
#[ignore = "needs two clusters and the testbed: KUBECONFIG, SPOKE_KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn a_burst_grown_by_flux_hub_burst_scale_joins_the_running_instance() {
    support::run_federated("burst-grow", "e2e-spoke", grow).await;
}

async fn elastic(env: &TestEnv, fed: &Federation) -> Result<()> {
    let burst = burst_name(&env.ns);
    let doc = |name: &str, size: i32| {
        let mut doc = minicluster(&burst, fed.spoke(), lead_address_override().as_deref());
        doc["spec"]["flux"]["bursting"]["clusters"] =
            json!([{"name": name, "size": size, "maxSize": 3, "cluster": fed.spoke()}]);
        doc
    };
    env.apply_minicluster(&doc(&burst, 1)).await?;
    let job: Job = wait_spoke_object(env, fed.spoke(), &burst).await?;
    let uid = job.uid();
    let jobs = env.spoke_api::<Job>();
    let shape = |job: &Job| {
        let spec = job.spec.clone().unwrap_or_default();
        (spec.parallelism, spec.completions, spec.suspend)
    };
    eprintln!("{}: burst {burst} Job {:?}", env.ns, shape(&job));
    ensure!(
        shape(&job) == (Some(1), Some(1), Some(false)),
        "a burst of size 1: {:?}",
        shape(&job)
    );
    let mcs = env.api::<MiniCluster>();
    let layout = mcs
        .get(NAME)
        .await?
        .status
        .map(|s| s.burst_layout)
        .unwrap_or_default();
    ensure!(
        layout.len() == 1 && layout[0].name == burst && layout[0].max_size == 3,
        "status.burstLayout: {layout:?}"
    );
    // Size 3 through the hub's Admin API (`flux-hub burst scale`), 0 by applying the spec.
    for (size, want, admin) in [
        (3, (Some(3), Some(3), Some(false)), true),
        (0, (Some(1), Some(1), Some(true)), false),
    ] {
        let started = std::time::Instant::now();
        if admin {
            let answer = fed
                .burst_scale(&env.ns, NAME, &burst, size)
                .await?
                .map_err(|e| anyhow::anyhow!("flux-hub burst scale failed: {e}"))?;
            ensure!(
                answer["previousSize"] == 1 && answer["size"] == size && answer["maxSize"] == 3,
                "flux-hub burst scale answered {answer}"
            );
            let spec_size = mcs.get(NAME).await?.spec.bursts()[0].size;
            ensure!(
                spec_size == size,
                "the hub patched size {spec_size} into the spec"
            );
        } else {
            env.apply_minicluster(&doc(&burst, size)).await?;
        }
        env.eventually(
            &format!("the burst's Job resized to {size} in place"),
            objects_deadline(),
            async || {
                let job = jobs.get(&burst).await?;
                ensure!(
                    job.uid() == uid,
                    "the Job was re-created: {:?} → {:?}",
                    uid,
                    job.uid()
                );
                Ok(if shape(&job) == want {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!("{:?}", shape(&job)))
                })
            },
        )
        .await?;
        eprintln!(
            "{}: size {size} ({}) reached the spoke's Job in {} ms (same uid)",
            env.ns,
            if admin {
                "flux-hub burst scale"
            } else {
                "applied"
            },
            started.elapsed().as_millis()
        );
    }
    // The admin call refuses what the controller would, with its reason, changing nothing.
    let declined = fed.burst_scale(&env.ns, NAME, &burst, 4).await?;
    ensure!(
        matches!(&declined, Err(e) if e.contains("SizeAboveMaximum") && e.contains("size: 4 is above the maximum size 3")),
        "flux-hub burst scale to 4 (maxSize 3) must be declined: {declined:?}"
    );
    let declined = fed.burst_scale(&env.ns, NAME, "nope", 1).await?;
    ensure!(
        matches!(&declined, Err(e) if e.contains("has no burst \"nope\"")),
        "an unknown burst must be declined: {declined:?}"
    );
    for kind in ["ConfigMap", "Secret", "Service"] {
        let name = match kind {
            "ConfigMap" => format!("{burst}-flux-config"),
            "Secret" => format!("{burst}-curve"),
            _ => burst.clone(),
        };
        ensure!(
            spoke_uid(env, kind, &name).await?.is_some(),
            "a burst scaled to 0 keeps its {kind} {name}"
        );
    }
    // Above maxSize in the same entry: the API server's CEL rule refuses it.
    let refused = env.apply_minicluster(&doc(&burst, 4)).await;
    ensure!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.code == 422 && e.message.contains("maxSize")),
        "size 4 with maxSize 3 must be refused by the API server: {refused:?}"
    );
    let mut above_frozen = doc(&burst, 4);
    above_frozen["spec"]["flux"]["bursting"]["clusters"][0]
        .as_object_mut()
        .map(|b| b.remove("maxSize"));
    for (changed, reason) in [
        (above_frozen, "SizeAboveMaximum"),
        (doc("renamed", 1), "BurstLayoutImmutable"),
    ] {
        env.apply_minicluster(&changed).await?;
        env.eventually(
            &format!("the change to be refused ({reason})"),
            objects_deadline(),
            async || {
                let mc = mcs.get(NAME).await?;
                let degraded = mc
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter())
                    .find(|c| c.type_ == "Degraded" && c.status == "True")
                    .map(|c| c.reason.clone());
                Ok(if degraded.as_deref() == Some(reason) {
                    Probe::Done(())
                } else {
                    Probe::Waiting(yaml(&mc.status))
                })
            },
        )
        .await?;
        let job = jobs.get(&burst).await?;
        ensure!(
            job.uid() == uid && shape(&job) == (Some(1), Some(1), Some(true)),
            "a refused change left the burst's Job alone: {:?}",
            shape(&job)
        );
        ensure!(
            jobs.get_opt("renamed").await?.is_none(),
            "no Job for a refused burst"
        );
    }

    // The burst removed: everything of it goes from the spoke's cluster, and so does the
    // lead broker's NodePort, but the root's brokers keep the burst's hosts (its
    // ConfigMap is not touched) and the frozen layout keeps its ranks.
    let config_maps = env.api::<ConfigMap>();
    let root_config = format!("{NAME}-flux-config");
    let before = config_maps.get(&root_config).await?;
    let mut removed = doc(&burst, 0);
    removed["spec"]["flux"]["bursting"]["clusters"] = json!([]);
    let started = std::time::Instant::now();
    env.apply_minicluster(&removed).await?;
    env.eventually(
        "the removed burst's objects deleted in the burst cluster",
        objects_deadline(),
        async || {
            let mut left = Vec::new();
            for (kind, name) in [
                ("Job", burst.clone()),
                ("ConfigMap", format!("{burst}-flux-config")),
                ("Secret", format!("{burst}-curve")),
                ("Service", burst.clone()),
            ] {
                if spoke_uid(env, kind, &name).await?.is_some() {
                    left.push(format!("{kind} {name}"));
                }
            }
            Ok(if left.is_empty() {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("still there: {}", left.join(", ")))
            })
        },
    )
    .await?;
    eprintln!(
        "{}: removed burst deleted in the spoke's cluster in {} ms",
        env.ns,
        started.elapsed().as_millis()
    );
    let services = env.api::<Service>();
    env.eventually(
        "the lead broker's NodePort Service deleted once no burst runs",
        objects_deadline(),
        async || {
            Ok(match services.get_opt(&format!("{NAME}-lead")).await? {
                None => Probe::Done(()),
                Some(_) => Probe::Waiting("it still exists".into()),
            })
        },
    )
    .await?;
    let after = config_maps.get(&root_config).await?;
    ensure!(
        after.data == before.data
            && after.metadata.resource_version == before.metadata.resource_version,
        "the root's broker.toml and R changed when the burst was removed"
    );
    let status = mcs.get(NAME).await?.status.unwrap_or_default();
    ensure!(
        status.bursts.is_empty() && status.burst_layout == layout,
        "a removed burst leaves status.bursts but keeps its place in status.burstLayout: {}",
        yaml(&status)
    );

    // Put back (the same name and hosts): it runs again, in a new Job.
    env.apply_minicluster(&doc(&burst, 1)).await?;
    let job: Job = wait_spoke_object(env, fed.spoke(), &burst).await?;
    ensure!(
        job.uid() != uid && shape(&job) == (Some(1), Some(1), Some(false)),
        "a burst put back runs in a new Job of its size: {:?}",
        shape(&job)
    );
    Ok(())
}

async fn grow(env: &TestEnv, fed: &Federation) -> Result<()> {
    dataplane::testbed()?;
    let burst = burst_name(&env.ns);
    let mut doc = minicluster(&burst, fed.spoke(), lead_address_override().as_deref());
    doc["spec"]["flux"]["bursting"]["clusters"] =
        json!([{"name": burst, "size": 0, "maxSize": 2, "cluster": fed.spoke()}]);
    env.apply_minicluster(&doc).await?;
    let lead = lead_endpoint(env).await?;
    let job: Job = wait_spoke_object(env, fed.spoke(), &burst).await?;
    ensure!(
        job.spec.as_ref().and_then(|s| s.suspend) == Some(true),
        "a burst of size 0 is a suspended Job"
    );

    // The root instance runs alone; a job for every host waits for the burst.
    let root = start_root(env, &lead).await?;
    let lead_pod = format!("{NAME}-0");
    let root_hosts = dataplane::indexed(NAME, ROOT_SIZE);
    let jobid = root.flux_submit(&lead_pod, NAME, "-N 4 hostname").await?;
    let state = root
        .flux_exec(
            &lead_pod,
            NAME,
            &format!("flux jobs -no '{{state}}' {jobid}"),
        )
        .await?;
    ensure!(
        state.trim() == "SCHED",
        "job {jobid} needs the burst's hosts, so it must wait (SCHED); it is {state:?}"
    );

    // Grow the burst through the hub's Admin API; the spoke resizes its Job in place.
    let answer = fed
        .burst_scale(&env.ns, NAME, &burst, 2)
        .await?
        .map_err(|e| anyhow::anyhow!("flux-hub burst scale failed: {e}"))?;
    eprintln!("{}: flux-hub burst scale answered {answer}", env.ns);
    let jobs = env.spoke_api::<Job>();
    let uid = job.uid();
    env.eventually(
        "the burst's Job resized to 2 and resumed",
        objects_deadline(),
        async || {
            let job = jobs.get(&burst).await?;
            ensure!(job.uid() == uid, "the burst's Job was re-created");
            let spec = job.spec.clone().unwrap_or_default();
            Ok(
                if spec.parallelism == Some(2) && spec.suspend == Some(false) {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!("{:?} suspend {:?}", spec.parallelism, spec.suspend))
                },
            )
        },
    )
    .await?;

    // Its brokers, run from what the spoke wrote, join the running instance: the job runs.
    let burst_run = start_burst(env, &lead).await?;
    let mut hosts = root_hosts.clone();
    hosts.extend(dataplane::indexed(&burst, 2));
    let joined = overlay_wait(
        &root,
        &lead_pod,
        NAME,
        &hosts,
        Some(&burst_run),
        overlay_full,
    )
    .await?;
    eprintln!(
        "{}: the grown burst joined {joined:?} after it started",
        env.ns
    );
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
    root.flux_exec(&lead_pod, NAME, "flux shutdown --quiet")
        .await?;
    root.finish(secs(120)).await?.all_succeeded(&root_hosts)?;
    burst_run
        .finish(secs(120))
        .await?
        .all_succeeded(&dataplane::indexed(&burst, 2))?;
    Ok(())
}
