//! MiniClusters on real nodes: a testbed control plane whose nodes are real kubelets with
//! containerd (`scripts/real-node.sh`), pods in real containers of the images built
//! offline (`flux-images`), cluster DNS from the API. What a user sees: the MiniCluster's
//! phase, its pods on the node, and `kubectl logs`.
//!
//! The cluster is the one named by `KUBECONFIG` and must have real nodes with the
//! application and view images of `flux_e2e::images` loaded: `scripts/e2e.sh` starts
//! one on the testbed.

mod support;

use std::time::Instant;

use anyhow::{Result, ensure};
use flux_e2e::images;
use flux_shared::api::MiniCluster;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams};
use serde_json::json;
use support::{Probe, TestEnv, secs, yaml};

/// A MiniCluster of `size` brokers of the offline images running `command`.
fn minicluster(name: &str, size: i32, command: &str) -> serde_json::Value {
    json!({
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": name},
        "spec": {
            "size": size,
            "flux": {"container": {"image": format!("{}:bookworm", images::VIEW_IMAGE)}},
            "containers": [{
                "image": format!("{}:bookworm", images::APP_IMAGE),
                "imagePullPolicy": "IfNotPresent",
                "command": command,
            }],
        },
    })
}

/// The logs of every broker pod of `job`, by pod name.
async fn broker_logs(env: &TestEnv, job: &str) -> Result<Vec<(String, String)>> {
    let pods = env
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await?;
    let mut out = Vec::new();
    for pod in pods.items {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let params = LogParams {
            container: Some(job.to_string()),
            ..LogParams::default()
        };
        out.push((name.clone(), env.api::<Pod>().logs(&name, &params).await?));
    }
    Ok(out)
}

#[tokio::test]
#[ignore = "needs a cluster with real nodes: KUBECONFIG (scripts/e2e.sh on the testbed)"]
async fn hello_world_runs_on_real_nodes() {
    support::run("real-hello", true, async |env: &TestEnv| {
        const NAME: &str = "hello-world";
        let started = Instant::now();
        env.apply_minicluster(&minicluster(NAME, 4, "echo hello world"))
            .await?;
        let mcs = env.api::<MiniCluster>();
        env.eventually(
            "the MiniCluster to succeed on the real nodes",
            secs(180),
            async || {
                let mc = mcs.get(NAME).await?;
                let phase = mc.status.as_ref().and_then(|s| s.phase.clone());
                Ok(match phase.as_deref() {
                    Some("Succeeded") => Probe::Done(()),
                    Some("Failed") => {
                        anyhow::bail!("the MiniCluster failed: {}", yaml(&mc.status))
                    }
                    _ => Probe::Waiting(yaml(&mc.status)),
                })
            },
        )
        .await?;
        eprintln!(
            "{}: hello-world of 4 brokers Succeeded {:?} after apply",
            env.ns,
            started.elapsed()
        );
        let logs = broker_logs(env, NAME).await?;
        ensure!(
            logs.len() == 4,
            "four broker pods: {:?}",
            logs.iter().map(|l| &l.0).collect::<Vec<_>>()
        );
        let lead = logs
            .iter()
            .find(|(pod, _)| pod.starts_with(&format!("{NAME}-0-")))
            .map(|(_, log)| log.as_str())
            .unwrap_or_default();
        ensure!(
            lead.contains("online: hello-world-[0-3] (ranks 0-3)"),
            "every broker joined the lead broker's instance:\n{lead}"
        );
        ensure!(
            lead.lines().any(|l| l.trim() == "hello world"),
            "the job's output is in the lead broker's log:\n{lead}"
        );
        let pods = env.api::<Pod>().list(&ListParams::default()).await?;
        for pod in &pods.items {
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            ensure!(
                node.contains("-real-"),
                "{} ran on {node}, not a real node",
                pod.metadata.name.clone().unwrap_or_default()
            );
        }
        Ok(())
    })
    .await;
}
