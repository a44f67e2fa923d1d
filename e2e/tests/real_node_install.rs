//! The install on real nodes: `flux-hub init --image` starts the hub's Deployment from the
//! controller image built offline (`flux-images controller`), in the cluster, as users run
//! it: two replicas, one leader, MiniClusters reconciled by it; the leader's pod evicted
//! (as a node drain does, through the PodDisruptionBudget), the other replica leads and the
//! next MiniCluster runs.
//!
//! A binary of its own: the installed hub watches every namespace, so it runs after
//! `real_node.rs` (whose tests each start a hub of their own), on the same cluster
//! (`KUBECONFIG`, with the application, view and controller images loaded; `scripts/e2e.sh`).

mod support;

use std::time::Instant;

use anyhow::{Context as _, Result, ensure};
use flux_e2e::images;
use flux_shared::api::MiniCluster;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{EvictParams, ListParams};
use serde_json::json;
use support::{Probe, TestEnv, secs, yaml};

const HUB_NAMESPACE: &str = "flux-operator-system";

fn hello(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": name},
        "spec": {
            "size": 2,
            "flux": {"container": {"image": format!("{}:bookworm", images::VIEW_IMAGE)}},
            "containers": [{
                "image": format!("{}:bookworm", images::APP_IMAGE),
                "imagePullPolicy": "IfNotPresent",
                "command": "echo hello world",
            }],
        },
    })
}

async fn succeeded(env: &TestEnv, name: &str) -> Result<()> {
    let mcs = env.api::<MiniCluster>();
    env.eventually(
        &format!("MiniCluster {name} to succeed"),
        secs(180),
        async || {
            let mc = mcs.get(name).await?;
            Ok(match mc.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some("Succeeded") => Probe::Done(()),
                _ => Probe::Waiting(yaml(&mc.status)),
            })
        },
    )
    .await
}

/// The hub pod holding the leader lease.
async fn leader(env: &TestEnv) -> Result<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), HUB_NAMESPACE);
    Ok(leases
        .get_opt("flux-hub")
        .await?
        .and_then(|l| l.spec?.holder_identity))
}

#[tokio::test]
#[ignore = "needs a cluster with real nodes and the controller image: KUBECONFIG (scripts/e2e.sh on the testbed)"]
async fn flux_hub_init_runs_the_hub_image_and_a_second_replica_takes_over() {
    support::run("real-install", false, async |env: &TestEnv| {
        let certs = support::log_file(&format!("{}-certs", env.ns))?;
        let hub = tokio::task::spawn_blocking(support::hub_binary).await??;
        let image = format!("{}:e2e", images::CONTROLLER_IMAGE);
        let started = Instant::now();
        let out = tokio::process::Command::new(&hub)
            .arg("init")
            .arg("--certs")
            .arg(&certs)
            // No load balancer on these nodes: the name on the federation node port.
            .args([
                "--hub-dns",
                "flux-hub.example.org",
                "--endpoint",
                "node-port",
            ])
            .args(["--image", &image])
            .args(["--timeout-seconds", "180"])
            .output()
            .await
            .context("running flux-hub init")?;
        ensure!(
            out.status.success(),
            "flux-hub init --image {image}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), HUB_NAMESPACE);
        env.eventually(
            "both hub replicas ready and one leading",
            secs(120),
            async || {
                let d = deployments.get("flux-hub").await?;
                let ready = d
                    .status
                    .as_ref()
                    .and_then(|s| s.ready_replicas)
                    .unwrap_or(0);
                Ok(match leader(env).await? {
                    Some(l) if ready >= 2 => Probe::Done(l),
                    other => Probe::Waiting(format!("{ready} ready, leader {other:?}")),
                })
            },
        )
        .await?;
        eprintln!(
            "{}: flux-hub init started the hub from {image}, two replicas ready in {:?}",
            env.ns,
            started.elapsed()
        );
        env.apply_minicluster(&hello("before")).await?;
        succeeded(env, "before").await?;

        // The leader goes; the other replica takes the lease and carries on.
        let first = leader(env).await?.context("a leader")?;
        let pods: Api<Pod> = Api::namespaced(env.client.clone(), HUB_NAMESPACE);
        let names: Vec<String> = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=flux-hub"))
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.name)
            .collect();
        ensure!(
            names.contains(&first),
            "the lease names a hub pod: {first} of {names:?}"
        );
        // Evicted, as a node drain does: the PodDisruptionBudget covers both hub pods and
        // lets one go.
        let budgets: Api<PodDisruptionBudget> = Api::namespaced(env.client.clone(), HUB_NAMESPACE);
        env.eventually(
            "the hub's PodDisruptionBudget to allow one disruption",
            secs(60),
            async || {
                let pdb = budgets.get("flux-hub").await?;
                Ok(match pdb.status.as_ref().map(|s| s.disruptions_allowed) {
                    Some(1) => Probe::Done(()),
                    other => Probe::Waiting(format!("disruptionsAllowed {other:?}")),
                })
            },
        )
        .await?;
        pods.evict(&first, &EvictParams::default()).await?;
        let failover = Instant::now();
        // Another replica leads: the standby, or the leader's replacement if it was first.
        let second = env
            .eventually("another replica to lead", secs(120), async || {
                let running: Vec<String> = pods
                    .list(&ListParams::default().labels("app.kubernetes.io/name=flux-hub"))
                    .await?
                    .items
                    .into_iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .filter_map(|p| p.metadata.name)
                    .collect();
                Ok(match leader(env).await? {
                    Some(l) if l != first && running.contains(&l) => Probe::Done(l),
                    other => Probe::Waiting(format!("leader {other:?} of hub pods {running:?}")),
                })
            })
            .await?;
        eprintln!(
            "{}: leader {first} evicted, {second} leads after {:?}",
            env.ns,
            failover.elapsed()
        );
        env.apply_minicluster(&hello("after")).await?;
        succeeded(env, "after").await?;
        let before = env.api::<MiniCluster>().get("before").await?;
        ensure!(
            before.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"),
            "the first MiniCluster is as it was: {}",
            yaml(&before.status)
        );
        Ok(())
    })
    .await;
}
