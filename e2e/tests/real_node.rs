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
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, LogParams};
use serde_json::json;
use support::{Probe, TestEnv, restricted, secs, yaml};

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
        succeeded(env, NAME).await?;
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
        let lead = lead_log(&logs, NAME);
        ensure!(
            lead.contains("online: hello-world-[0-3] (ranks 0-3)"),
            "every broker joined the lead broker's instance:\n{lead}"
        );
        ensure!(
            lead.lines().any(|l| l.trim() == "hello world"),
            "the job's output is in the lead broker's log:\n{lead}"
        );
        let pods = env.api::<Pod>().list(&ListParams::default()).await?;
        let mut used = std::collections::BTreeSet::new();
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
            used.insert(node);
        }
        // With several nodes the brokers find each other across them (pod DNS, routes).
        let nodes = kube::Api::<Node>::all(env.client.clone())
            .list(&ListParams::default().labels("testbed/real-node=true"))
            .await?
            .items
            .len();
        ensure!(
            nodes < 2 || used.len() >= 2,
            "the scheduler spreads a Job's pods: {nodes} real nodes, pods on {used:?}"
        );
        eprintln!("{}: brokers on the nodes {used:?}", env.ns);
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with real nodes: KUBECONFIG (scripts/e2e.sh on the testbed)"]
async fn an_interactive_minicluster_answers_kubectl_exec_and_flux_proxy() {
    support::run("real-interactive", true, async |env: &TestEnv| {
        const NAME: &str = "interactive";
        let lead = interactive(env, NAME, 2, 2).await?;
        // What a user types: kubectl exec into the lead broker, then flux (directly and
        // through flux proxy) against the running instance.
        let answer = support::flux_in(
            env,
            &lead,
            NAME,
            "flux getattr size && flux proxy \"$fluxsocket\" flux resource list -no '{nnodes}'",
            "flux to answer through kubectl exec",
            |_| true,
        )
        .await?;
        let lines: Vec<&str> = answer.lines().map(str::trim).collect();
        ensure!(
            lines == ["2", "2"],
            "instance size 2 and 2 nodes through flux proxy: {answer:?}"
        );
        eprintln!("{}: kubectl exec {lead}: flux says size 2, 2 nodes", env.ns);
        Ok(())
    })
    .await;
}

/// An interactive MiniCluster of `size` brokers (up to `max`), Running; its lead pod.
async fn interactive(env: &TestEnv, name: &str, size: i32, max: i32) -> Result<String> {
    let mut doc = minicluster(name, size, "");
    doc["spec"]["interactive"] = json!(true);
    doc["spec"]["maxSize"] = json!(max);
    if let Some(container) = doc["spec"]["containers"][0].as_object_mut() {
        container.remove("command");
    }
    env.apply_minicluster(&doc).await?;
    let mcs = env.api::<MiniCluster>();
    env.eventually(&format!("{name} Running"), secs(180), async || {
        let mc = mcs.get(name).await?;
        Ok(match mc.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Running") => Probe::Done(()),
            _ => Probe::Waiting(yaml(&mc.status)),
        })
    })
    .await?;
    let pods = env
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await?;
    pods.items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .find(|n| n.starts_with(&format!("{name}-0-")))
        .ok_or_else(|| anyhow::anyhow!("no lead broker pod of {name}"))
}

const UP_NODES: &str = "flux resource list -s up -no '{nnodes}'";

/// Waits until the instance of `name` (its lead broker pod `lead`) has `n` brokers up.
async fn brokers_up(env: &TestEnv, lead: &str, name: &str, n: usize, what: &str) -> Result<()> {
    let want = n.to_string();
    support::flux_in(env, lead, name, UP_NODES, what, |o| o.trim() == want).await?;
    Ok(())
}

/// The names of the broker pods of index `index` of MiniCluster `name`.
async fn pods_of_index(env: &TestEnv, name: &str, index: u32) -> Result<Vec<String>> {
    let prefix = format!("{name}-{index}-");
    Ok(env
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .filter(|n| n.starts_with(&prefix))
        .collect())
}

/// Sets MiniCluster `name`'s size, as `kubectl patch` does.
async fn resize(env: &TestEnv, name: &str, size: i32) -> Result<()> {
    env.api::<MiniCluster>()
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&json!({"spec": {"size": size}})),
        )
        .await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs a cluster with real nodes: KUBECONFIG (scripts/e2e.sh on the testbed)"]
async fn a_deleted_broker_pod_is_replaced_and_its_broker_rejoins() {
    support::run("real-rejoin", true, async |env: &TestEnv| {
        const NAME: &str = "rejoin";
        let lead = interactive(env, NAME, 2, 2).await?;
        brokers_up(env, &lead, NAME, 2, "both brokers up").await?;
        let pods = env.api::<Pod>();
        let worker = pods_of_index(env, NAME, 1)
            .await?
            .pop()
            .ok_or_else(|| anyhow::anyhow!("no worker pod"))?;
        pods.delete(&worker, &kube::api::DeleteParams::default())
            .await?;
        let started = Instant::now();
        // Gone from the API: its broker has stopped, so "2 up" below is the replacement.
        env.eventually(&format!("{worker} gone"), secs(120), async || {
            Ok(match pods.get_opt(&worker).await? {
                None => Probe::Done(()),
                Some(p) => Probe::Waiting(yaml(&p.status)),
            })
        })
        .await?;
        // The Job makes a new pod of index 1; its broker takes rank 1 again.
        brokers_up(
            env,
            &lead,
            NAME,
            2,
            "the replaced broker back in the instance",
        )
        .await?;
        let replaced = pods_of_index(env, NAME, 1)
            .await?
            .iter()
            .any(|n| *n != worker);
        anyhow::ensure!(replaced, "a new pod of index 1 replaced {worker}");
        // The deleted pod's preStop hook drained its node; the replacement's broker takes
        // that drain back once it runs (flux-drain.sh rejoin), so jobs land there again.
        support::flux_in(
            env,
            &lead,
            NAME,
            "flux resource drain -no '{nodelist}|{reason}'",
            "no node left drained",
            |o| o.trim().is_empty(),
        )
        .await?;
        eprintln!(
            "{}: broker pod {worker} deleted; its replacement rejoined after {:?}",
            env.ns,
            started.elapsed()
        );
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with real nodes: KUBECONFIG (scripts/e2e.sh on the testbed)"]
async fn an_elastic_scale_up_adds_brokers_that_join_the_running_instance() {
    support::run("real-grow", true, async |env: &TestEnv| {
        const NAME: &str = "grow";
        let lead = interactive(env, NAME, 2, 4).await?;
        brokers_up(env, &lead, NAME, 2, "two brokers up").await?;
        resize(env, NAME, 4).await?;
        let started = Instant::now();
        brokers_up(env, &lead, NAME, 4, "four brokers up after the scale-up").await?;
        eprintln!(
            "{}: scaled 2 -> 4; the new brokers joined after {:?}",
            env.ns,
            started.elapsed()
        );
        Ok(())
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster with real nodes: KUBECONFIG (scripts/e2e.sh on the testbed)"]
async fn a_shrink_drains_the_leaving_broker_and_its_running_job_completes_first() {
    support::run("real-shrink", true, async |env: &TestEnv| {
        const NAME: &str = "shrink";
        let lead = interactive(env, NAME, 3, 3).await?;
        brokers_up(env, &lead, NAME, 3, "three brokers up").await?;
        // A 20 s job on the broker that leaves when the MiniCluster shrinks to 2 (index 2).
        let job = support::flux_in(
            env,
            &lead,
            NAME,
            "flux submit --requires=host:shrink-2 sleep 20",
            "a job submitted to shrink-2",
            |o| !o.trim().is_empty(),
        )
        .await?;
        let job = job.trim().to_string();
        let state = format!("flux jobs -no '{{state}} {{result}}' {job}");
        support::flux_in(env, &lead, NAME, &state, "the job running", |o| {
            o.trim() == "RUN"
        })
        .await?;
        resize(env, NAME, 2).await?;
        let shrunk = Instant::now();
        // The leaving broker's preStop hook drains its node (no new job lands there) and
        // waits: the node shows as draining while the job runs.
        support::flux_in(
            env,
            &lead,
            NAME,
            "flux resource drain -no '{nodelist} {state}'",
            "shrink-2 draining while its job runs",
            |o| o.contains("shrink-2 draining"),
        )
        .await?;
        let ended = support::flux_in(env, &lead, NAME, &state, "the job to end", |o| {
            o.trim().starts_with("INACTIVE")
        })
        .await?;
        let waited = shrunk.elapsed();
        ensure!(
            ended.trim() == "INACTIVE COMPLETED",
            "the job on the leaving broker completed (not canceled): {ended}"
        );
        // Then the pod goes and the instance has two brokers.
        env.eventually("the broker pod of index 2 gone", secs(60), async || {
            let left = pods_of_index(env, NAME, 2).await?;
            Ok(if left.is_empty() {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("{left:?}"))
            })
        })
        .await?;
        brokers_up(env, &lead, NAME, 2, "two brokers up").await?;
        let failed_hooks: Vec<String> = env
            .api::<Event>()
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("FailedPreStopHook"))
            .map(support::describe_event)
            .collect();
        ensure!(
            failed_hooks.is_empty(),
            "the preStop hook ended well: {failed_hooks:?}"
        );
        eprintln!(
            "{}: shrank 3 -> 2; the leaving broker drained and its job completed {waited:?} later, then its pod went",
            env.ns
        );
        Ok(())
    })
    .await;
}

/// Pod Security `restricted` (docs/bursting-policy.md): an instance whose pods meet it is
/// admitted in a namespace that enforces it, and runs. Its view container copies the view
/// as the brokers' non-root user, straight into the pod's volumes: nothing is copied by
/// root, and no copy lands on a directory that user may not change.
#[tokio::test]
#[ignore = "needs a cluster with real nodes: KUBECONFIG (scripts/e2e.sh on the testbed)"]
async fn non_root_brokers_run_at_restricted() {
    support::run("real-restricted", true, async |env: &TestEnv| {
        const NAME: &str = "restricted";
        // The namespace enforces what a burst namespace at `restricted` enforces.
        let labels = json!({"metadata": {"labels": {
            "pod-security.kubernetes.io/enforce": "restricted",
        }}});
        kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(env.client.clone())
            .patch(
                &env.ns,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&labels),
            )
            .await?;
        let mut doc = minicluster(NAME, 2, "id -u");
        restricted(&mut doc);
        env.apply_minicluster(&doc).await?;
        succeeded(env, NAME).await?;
        let logs = broker_logs(env, NAME).await?;
        let lead = lead_log(&logs, NAME);
        ensure!(
            lead.lines().any(|l| l.trim() == "1000"),
            "the job ran as the non-root user:\n{lead}"
        );
        eprintln!("{}: 2 non-root brokers at restricted ran `id -u`", env.ns);
        Ok(())
    })
    .await;
}

/// A broker of another user than its view container (here root's copy, a uid-1000
/// broker) runs on that copy.
#[tokio::test]
#[ignore = "needs a cluster with real nodes: KUBECONFIG (scripts/e2e.sh on the testbed)"]
async fn a_broker_of_another_user_than_its_view_container_runs() {
    support::run("real-view-user", true, async |env: &TestEnv| {
        const NAME: &str = "other-user";
        let mut doc = minicluster(NAME, 2, "id -u");
        doc["spec"]["containers"][0]["securityContext"] = json!({"runAsUser": 1000});
        doc["spec"]["flux"]["container"]["securityContext"] = json!({"runAsUser": 0});
        env.apply_minicluster(&doc).await?;
        succeeded(env, NAME).await?;
        let logs = broker_logs(env, NAME).await?;
        let lead = lead_log(&logs, NAME);
        ensure!(
            lead.lines().any(|l| l.trim() == "1000"),
            "the job ran as user 1000 on root's copy:\n{lead}"
        );
        eprintln!(
            "{}: a uid-1000 broker beside a root view container ran `id -u`",
            env.ns
        );
        Ok(())
    })
    .await;
}

/// The view image mounted as an image volume (`flux.container.imageVolume: true`) on the
/// root's nodes, which mount images as volumes (containerd 2, the ImageVolume gate on):
/// no view container, no copy; non-root brokers at Pod Security `restricted` run Flux from
/// it. Left unset, the hub gives a new MiniCluster the view container here: this
/// cluster's versions (a Kubernetes 1.35 pre-release, whose gate is off by default) do
/// not say that the gate is on, and the hub does not assume it.
#[tokio::test]
#[ignore = "needs a cluster with real nodes: KUBECONFIG (scripts/e2e.sh on the testbed)"]
async fn restricted_brokers_run_flux_from_the_view_image_mounted_as_a_volume() {
    support::run("real-image-volume", true, async |env: &TestEnv| {
        const NAME: &str = "image-volume";
        let labels = json!({"metadata": {"labels": {
            "pod-security.kubernetes.io/enforce": "restricted",
        }}});
        kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(env.client.clone())
            .patch(
                &env.ns,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&labels),
            )
            .await?;
        let mut doc = minicluster(NAME, 3, "id -u");
        restricted(&mut doc);
        doc["spec"]["flux"]["container"]["imageVolume"] = json!(true);
        let started = Instant::now();
        env.apply_minicluster(&doc).await?;
        succeeded(env, NAME).await?;
        eprintln!(
            "{}: 3 restricted brokers on the view image volume Succeeded {:?} after apply",
            env.ns,
            started.elapsed()
        );
        let job = env
            .api::<k8s_openapi::api::batch::v1::Job>()
            .get(NAME)
            .await?;
        let view = job
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("flux-framework.org/view"))
            .cloned();
        ensure!(
            view.as_deref() == Some("image-volume"),
            "the Job's view: {view:?}"
        );
        let pod = job
            .spec
            .and_then(|s| s.template.spec)
            .ok_or_else(|| anyhow::anyhow!("a Job without a pod template"))?;
        ensure!(
            pod.init_containers.is_none() && pod.containers.len() == 1,
            "one container, the broker's: {:?}",
            pod.containers.iter().map(|c| &c.name).collect::<Vec<_>>()
        );
        ensure!(
            pod.volumes.iter().flatten().any(|v| v
                .image
                .as_ref()
                .and_then(|i| i.reference.as_deref())
                == Some(&format!("{}:bookworm", images::VIEW_IMAGE))),
            "the view image is a volume of the pod"
        );
        let logs = broker_logs(env, NAME).await?;
        let lead = lead_log(&logs, NAME);
        ensure!(
            lead.contains("online: image-volume-[0-2] (ranks 0-2)"),
            "every broker joined the lead broker's instance:\n{lead}"
        );
        ensure!(
            lead.lines().any(|l| l.trim() == "1000"),
            "the job ran as the non-root user:\n{lead}"
        );

        // Unset: what this cluster's versions say.
        const AUTO: &str = "auto-view";
        env.apply_minicluster(&minicluster(AUTO, 1, "true")).await?;
        let jobs = env.api::<k8s_openapi::api::batch::v1::Job>();
        let view = env
            .eventually("the hub to create the Job", secs(30), async || {
                Ok(match jobs.get_opt(AUTO).await? {
                    Some(job) => Probe::Done(
                        job.metadata
                            .annotations
                            .and_then(|mut a| a.remove("flux-framework.org/view")),
                    ),
                    None => Probe::Waiting("no Job yet".to_string()),
                })
            })
            .await?;
        ensure!(
            view.as_deref() == Some("alongside"),
            "a 1.35 pre-release's versions say nothing of the gate: {view:?}"
        );
        Ok(())
    })
    .await;
}

/// Waits (bounded) for MiniCluster `name` to succeed; fails at once when it fails.
async fn succeeded(env: &TestEnv, name: &str) -> Result<()> {
    let mcs = env.api::<MiniCluster>();
    env.eventually(
        "the MiniCluster to succeed on the real nodes",
        secs(180),
        async || {
            let mc = mcs.get(name).await?;
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
    .await
}

/// The lead broker's log among `logs` (pod name, log) of Job `name`.
fn lead_log<'a>(logs: &'a [(String, String)], name: &str) -> &'a str {
    logs.iter()
        .find(|(pod, _)| pod.starts_with(&format!("{name}-0-")))
        .map(|(_, log)| log.as_str())
        .unwrap_or_default()
}
