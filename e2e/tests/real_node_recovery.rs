//! Bursts that find their way, on real nodes: the hub chooses each burst's path, and places
//! a burst again, with the same ranks, when its cluster is lost.
//!
//! The hub is installed with `flux-hub init` (its grace for a lost cluster shortened to
//! [`GRACE`] s) and two burst clusters joined: `burst`, whose node reaches the root's nodes,
//! and `burst2`, cut off from the root but for the hub's federation port. MiniClusters of
//! one root broker and a burst of two that leaves `relay` unset, one at a time:
//! 1. placed in `burst`: direct, and a job runs on every host;
//! 2. placed in `burst2`, which is cut off once the burst is placed and before its brokers
//!    start: the spoke cannot reach the lead, the hub switches the burst to the relay, and
//!    a job runs on every host; a later burst there is relayed from the start (measured);
//! 3. a burst running in `burst` when that whole cluster stops (control plane, node and
//!    spoke): after the grace it runs in `burst2` with the same ranks, a job runs on every
//!    host, and the hub restarted then keeps it there; the time from the loss to every rank
//!    up again is printed beside the grace and a bare Job's start in `burst2`;
//! 4. `burst` comes back: its spoke deletes its copy, and none of its brokers rejoins;
//! 5. `burst`'s spoke stopped for longer than the grace while its direct brokers serve the
//!    lead: nothing moves.
//!
//! `KUBECONFIG` is the root cluster, `SPOKE_KUBECONFIG` and `SPOKE2_KUBECONFIG` the burst
//! clusters (`scripts/e2e.sh` starts them with real nodes and the images loaded). A binary of
//! its own, last: it stops and starts the first burst cluster.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use anyhow::{Context as _, Result, ensure};
use flux_e2e::images;
use flux_shared::api::{BurstStatus, MiniCluster};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt as _};
use serde_json::{Value, json};
use support::{
    Isolation, Probe, RealCluster, SpokeCluster, TestEnv, flux_hub, lead_pod, node_ip, path_str,
    secs, spokes,
};

/// The hub's `--lost-cluster-grace-seconds` in this test.
const GRACE: u64 = 60;
/// The spokes' `--fence-after-seconds` here (below half the grace).
const FENCE: u64 = 15;
const HUB_NAMESPACE: &str = "flux-operator-system";
const SPOKE_NAMESPACE: &str = "flux-spoke-system";
const UP_NODES: &str = "flux resource list -s up -no '{nnodes}'";

/// A MiniCluster of one root broker and a burst `<name>-b` of two that leaves `relay`
/// unset, placed among `candidates`.
fn minicluster(name: &str, candidates: Value) -> Value {
    json!({
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": name},
        "spec": {
            "size": 1,
            "interactive": true,
            "flux": {
                "container": {"image": format!("{}:bookworm", images::VIEW_IMAGE)},
                "bursting": {"clusters": [
                    {"name": format!("{name}-b"), "size": 2, "candidates": candidates},
                ]},
            },
            "containers": [{"image": format!("{}:bookworm", images::APP_IMAGE)}],
        },
    })
}

/// MiniCluster `name`'s burst, once `done` accepts its status entry.
async fn burst_when(
    env: &TestEnv,
    name: &str,
    what: &str,
    within: u64,
    done: impl Fn(&BurstStatus) -> bool,
) -> Result<BurstStatus> {
    env.eventually(
        &format!("{name}'s burst {what}"),
        secs(within),
        async || {
            let mc = env.api::<MiniCluster>().get(name).await?;
            let burst = mc.status.unwrap_or_default().bursts.into_iter().next();
            Ok(match burst {
                Some(b) if done(&b) => Probe::Done(b),
                other => Probe::Waiting(format!("{other:?}")),
            })
        },
    )
    .await
}

/// Every host of `name` up, as its lead broker sees it (3: the root's and the burst's
/// two), and a job on every host; the addresses the burst's ranks answer from.
async fn every_host(env: &TestEnv, name: &str) -> Result<Vec<String>> {
    let lead = lead_pod(env, name).await?;
    support::flux_in(env, &lead, name, UP_NODES, "three brokers up", |o| {
        o.trim() == "3"
    })
    .await?;
    // Each rank's hostname and its pod's address: a host name is the same in any cluster.
    let out = support::flux_in(
        env,
        &lead,
        name,
        "flux run -N 3 --label-io sh -c 'echo $(hostname) $(hostname -i)' | sort",
        "a job on every host",
        |o| o.lines().count() == 3,
    )
    .await?;
    let mut burst_addresses = Vec::new();
    for line in out.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let [_, host, address, ..] = words.as_slice()
            && host.starts_with(&format!("{name}-b-"))
        {
            burst_addresses.push(address.to_string());
        }
    }
    burst_addresses.sort();
    ensure!(
        burst_addresses.len() == 2,
        "both burst hosts ran the job: {out}"
    );
    Ok(burst_addresses)
}

/// Seconds from `since` until `name`'s lead broker counts every rank up (3), by the clock
/// of its pod (the machine's: the nodes are real). One `kubectl exec` that waits in the pod:
/// on the overlay (C, no polling) until every broker is connected, then on the ranks up
/// (`UP_NODES`, Python) every 0.2 s while the new ranks run `rc1`; a probe that asked
/// often from the start would slow the brokers it times, which share these 2 cores.
async fn ranks_up_after(env: &TestEnv, lead: &str, name: &str, since: SystemTime) -> Result<f64> {
    let script = support::dataplane::in_flux_env(&format!(
        "case \"$(flux overlay status --summary)\" in *full*) echo 'the overlay is full before the ranks came back'; exit 3;; esac
         flux overlay status --summary --wait=full --timeout=0 >/dev/null
         until [ \"$({UP_NODES})\" = 3 ]; do sleep 0.2; done
         date +%s.%N"
    ));
    let mut cmd = tokio::process::Command::new("kubectl");
    cmd.args([
        "--namespace",
        &env.ns,
        "exec",
        lead,
        "-c",
        name,
        "--",
        "bash",
        "-c",
        &script,
    ]);
    let out = tokio::time::timeout(secs(240), cmd.output())
        .await
        .context("the lead's ranks up within 240 s")??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "waiting in the lead for every rank up ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let at: f64 = stdout
        .trim()
        .parse()
        .with_context(|| format!("the pod's clock: {stdout}"))?;
    let since = since.duration_since(SystemTime::UNIX_EPOCH)?.as_secs_f64();
    Ok(at - since)
}

/// Writes, with the runtime's timestamps, the logs of `name`'s burst pods in `cluster`, of
/// its lead pod, of the spoke there and of the hub, into `dir` (`<name>-*.log`): the
/// timeline behind the benchmark's figures.
async fn save_logs(env: &TestEnv, cluster: &SpokeCluster, dir: &Path, name: &str) -> Result<()> {
    let sets = [
        (
            "burst",
            cluster.client.clone(),
            env.ns.clone(),
            format!("job-name={name}-b"),
        ),
        (
            "lead",
            env.client.clone(),
            env.ns.clone(),
            format!("job-name={name}"),
        ),
        (
            "spoke",
            cluster.client.clone(),
            SPOKE_NAMESPACE.to_string(),
            "app.kubernetes.io/name=flux-spoke".to_string(),
        ),
        (
            "hub",
            env.client.clone(),
            HUB_NAMESPACE.to_string(),
            "app.kubernetes.io/name=flux-hub".to_string(),
        ),
    ];
    for (what, client, ns, selector) in sets {
        let pods: Api<Pod> = Api::namespaced(client, &ns);
        let mut text = String::new();
        for pod in pods.list(&ListParams::default().labels(&selector)).await? {
            let containers = pod.spec.iter().flat_map(|s| {
                s.init_containers
                    .iter()
                    .flatten()
                    .chain(s.containers.iter())
                    .map(|c| c.name.clone())
            });
            for container in containers.collect::<Vec<_>>() {
                let params = LogParams {
                    container: Some(container.clone()),
                    timestamps: true,
                    ..LogParams::default()
                };
                let log = pods
                    .logs(&pod.name_any(), &params)
                    .await
                    .unwrap_or_else(|e| format!("{e}\n"));
                text.push_str(&format!("=== {}/{container}\n{log}", pod.name_any()));
            }
        }
        std::fs::write(dir.join(format!("{name}-{what}.log")), text)?;
    }
    eprintln!(
        "{}: the logs behind the benchmark in {}",
        env.ns,
        dir.display()
    );
    Ok(())
}

/// The addresses of burst `job`'s pods in `cluster`, sorted.
async fn pod_addresses(cluster: &SpokeCluster, ns: &str, job: &str) -> Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns);
    let mut out: Vec<String> = pods
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await?
        .items
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    out.sort();
    Ok(out)
}

/// Adds `arg` to the first container of Deployment `name` in `namespace` and waits until
/// its new pods are available.
async fn with_arg(client: &kube::Client, namespace: &str, name: &str, arg: &str) -> Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    deployments
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(json!([
                {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": arg}
            ]))?),
        )
        .await?;
    rolled_out(client, namespace, name).await
}

/// Waits until Deployment `name` has every replica of its latest template available.
async fn rolled_out(client: &kube::Client, namespace: &str, name: &str) -> Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let started = Instant::now();
    loop {
        let d = deployments.get(name).await?;
        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let s = d.status.clone().unwrap_or_default();
        if s.observed_generation == d.metadata.generation
            && s.updated_replicas.unwrap_or(0) == want
            && s.available_replicas.unwrap_or(0) == want
            && s.replicas.unwrap_or(0) == want
        {
            return Ok(());
        }
        ensure!(
            started.elapsed() < secs(240),
            "Deployment {namespace}/{name} not rolled out: {s:?}"
        );
        tokio::time::sleep(secs(1)).await;
    }
}

/// The seconds until an Indexed Job of two pods of the application image, created now in
/// `cluster`, has both pods Ready: what starting the burst's pods there costs, bare.
async fn bare_start(cluster: &SpokeCluster, ns: &str) -> Result<f64> {
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), ns);
    let job: Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "bare"},
        "spec": {
            "completionMode": "Indexed", "completions": 2, "parallelism": 2,
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": format!("{}:bookworm", images::APP_IMAGE),
                                "command": ["sleep", "3600"]}],
            }},
        },
    }))?;
    let started = Instant::now();
    jobs.create(&PostParams::default(), &job).await?;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns);
    loop {
        let ready = pods
            .list(&ListParams::default().labels("job-name=bare"))
            .await?
            .items
            .iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        if ready == 2 {
            break;
        }
        ensure!(
            started.elapsed() < secs(180),
            "the bare Job's pods not ready"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let took = started.elapsed().as_secs_f64();
    jobs.delete(
        "bare",
        &DeleteParams {
            propagation_policy: Some(kube::api::PropagationPolicy::Background),
            ..DeleteParams::default()
        },
    )
    .await?;
    Ok(took)
}

#[tokio::test]
#[ignore = "needs three clusters with real nodes: KUBECONFIG, SPOKE_KUBECONFIG, SPOKE2_KUBECONFIG (scripts/e2e.sh on the testbed)"]
async fn bursts_take_the_path_that_works_and_outlive_a_lost_cluster() {
    support::run("real-recover", false, async |env: &TestEnv| {
        let first: SpokeCluster = support::spoke_cluster_from("SPOKE_KUBECONFIG", "the cluster that is lost").await;
        let second: SpokeCluster = support::spoke_cluster_from("SPOKE2_KUBECONFIG", "the cut-off cluster").await;
        let hub = tokio::task::spawn_blocking(support::hub_binary).await??;
        let dir: PathBuf = support::log_file(&format!("{}-recovery", env.ns))?;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let config = dir.join("flux-hub-config.yaml");
        let image = format!("{}:e2e", images::CONTROLLER_IMAGE);
        let root_kubeconfig = std::env::var("KUBECONFIG").context("KUBECONFIG")?;
        let root_ip = node_ip(&env.client).await?;
        let certs = dir.join("certs");
        flux_hub(&hub, &config, &[
            "init", "--kubeconfig", &root_kubeconfig, "--certs", path_str(&certs)?,
            "--hub-ip", &root_ip, "--image", &image, "--timeout-seconds", "180",
        ])
        .await?;
        with_arg(&env.client, HUB_NAMESPACE, "flux-hub", &format!("--lost-cluster-grace-seconds={GRACE}")).await?;
        for (name, cluster) in [("burst", &first), ("burst2", &second)] {
            flux_hub(&hub, &config, &[
                "join", name, "--kubeconfig", path_str(&cluster.kubeconfig)?, "--image", &image,
                "--allow-namespace", &env.ns, "--fence-after-seconds", &FENCE.to_string(),
                // The spoke reports a lead it cannot reach after 15 s (60 by default).
                "--lead-unreachable-after-seconds", "15",
                "--force", "--timeout-seconds", "180",
            ])
            .await?;
        }
        let federation_port = Api::<Service>::namespaced(env.client.clone(), HUB_NAMESPACE)
            .get("flux-hub-federation")
            .await?
            .spec
            .and_then(|s| s.ports)
            .and_then(|p| p.first().and_then(|p| p.node_port))
            .context("the federation Service's NodePort")?;
        let connected = |spoke: &'static str| {
            let (hub, config) = (hub.clone(), config.clone());
            async move {
                env.eventually(&format!("spoke {spoke} connected"), secs(240), async || {
                    let all = spokes(&hub, &config).await?;
                    Ok(match all.iter().find(|s| s["name"] == spoke) {
                        Some(s) if s["connected"] == true => Probe::Done(()),
                        other => Probe::Waiting(format!("{other:?}")),
                    })
                })
                .await
            }
        };
        connected("burst").await?;
        connected("burst2").await?;
        let both = json!([{"cluster": "burst"}, {"cluster": "burst2"}]);

        // 1. Placed where the brokers reach the root's nodes: direct, and it runs.
        env.apply_minicluster(&minicluster("reach", both.clone())).await?;
        let b = match burst_when(env, "reach", "running", 240, |b| b.phase == "Running" && b.brokers_joined == Some(2)).await {
            Ok(b) => b,
            // The hub reads the lead's reporter by its cluster DNS name: say what DNS has.
            Err(e) => return Err(e.context(support::dns_records(&env.client, &env.ns).await)),
        };
        ensure!(
            b.cluster == "burst" && b.path.as_deref() == Some("Direct"),
            "the first candidate, direct: {b:?}"
        );
        every_host(env, "reach").await?;
        eprintln!("{}: a burst with no relay field ran direct ({:?})", env.ns, b.path_reason);
        env.api::<MiniCluster>().delete("reach", &DeleteParams::default()).await?;

        // 2. Placed in burst2, which is cut off before its brokers start: switched to the
        // relay, and it runs.
        let started = Instant::now();
        env.apply_minicluster(&minicluster("switch", json!([{"cluster": "burst2"}, {"cluster": "burst"}]))).await?;
        let placed = burst_when(env, "switch", "placed", 120, |b| b.cluster == "burst2").await?;
        let isolated = Isolation::of(&second.client, &env.client, u16::try_from(federation_port)?).await?;
        eprintln!("{}: burst2 cut off {:?} after the apply ({placed:?})", env.ns, started.elapsed());
        let b = burst_when(env, "switch", "relayed and running", 360, |b| {
            b.phase == "Running" && b.path.as_deref() == Some("Relay")
        })
        .await?;
        ensure!(
            b.path_reason.as_deref() == Some("LeadUnreachable"),
            "switched because its spoke could not reach the lead: {b:?}"
        );
        let jobs2: Api<Job> = Api::namespaced(second.client.clone(), &env.ns);
        let job = jobs2.get("switch-b").await?;
        ensure!(
            job.annotations().get("flux-framework.org/lead-path").map(String::as_str) == Some("relay"),
            "the burst's Job was made again for the relay: {:?}",
            job.annotations()
        );
        every_host(env, "switch").await?;
        eprintln!("{}: the cut-off burst switched to the relay and ran, {:?} after the apply", env.ns, started.elapsed());
        save_logs(env, &second, &dir, "switch").await?;
        env.api::<MiniCluster>().delete("switch", &DeleteParams::default()).await?;

        // A later burst there is relayed from the start: its spoke measured the root.
        env.apply_minicluster(&minicluster("measured", json!([{"cluster": "burst2"}]))).await?;
        let b = burst_when(env, "measured", "running", 240, |b| b.phase == "Running").await?;
        ensure!(
            b.path.as_deref() == Some("Relay") && b.path_reason.as_deref() == Some("SpokeMeasured"),
            "relayed from the start, as measured: {b:?}"
        );
        every_host(env, "measured").await?;
        env.api::<MiniCluster>().delete("measured", &DeleteParams::default()).await?;

        // 3. A burst running in burst when that whole cluster stops: after the grace it runs
        // in burst2, same hosts and ranks.
        let bare = bare_start(&second, &env.ns).await?;
        env.apply_minicluster(&minicluster("spot", both.clone())).await?;
        let b = burst_when(env, "spot", "running", 240, |b| b.phase == "Running" && b.brokers_joined == Some(2)).await?;
        ensure!(b.cluster == "burst", "placed in the first: {b:?}");
        every_host(env, "spot").await?;
        let lost = RealCluster::of(&first.client).await?;
        // The clock starts at the crash: every process of the node killed at once (the
        // spoke's connection and the brokers go in that instant); the orderly stop of the
        // rest follows.
        let crash = SystemTime::now();
        let stopped = Instant::now();
        lost.lose().await?;
        let crashed = stopped.elapsed();
        lost.stop().await?;
        eprintln!("{}: cluster {} crashed in {crashed:?}, stopped in {:?}", env.ns, lost.name, stopped.elapsed());
        let b = burst_when(env, "spot", "placed again", GRACE + 120, |b| b.cluster == "burst2").await?;
        let replaced = stopped.elapsed();
        let skipped: Vec<(String, String)> = b
            .placement
            .iter()
            .flat_map(|p| p.skipped.iter().map(|s| (s.cluster.clone(), s.reason.clone())))
            .collect();
        ensure!(
            skipped.contains(&("burst".to_string(), "Lost".to_string())),
            "the lost cluster skipped, said why: {b:?}"
        );
        let lead = lead_pod(env, "spot").await?;
        let up = ranks_up_after(env, &lead, "spot", crash).await?;
        save_logs(env, &second, &dir, "spot").await?;
        let addresses = every_host(env, "spot").await?;
        let in_second = pod_addresses(&second, &env.ns, "spot-b").await?;
        ensure!(addresses == in_second, "the burst's ranks run in burst2: {addresses:?} against {in_second:?}");
        let events = env.events_about("MiniCluster", "spot").await?;
        ensure!(
            events.iter().any(|e| e.reason.as_deref() == Some("BurstMoved")),
            "a BurstMoved Event: {:?}",
            events.iter().map(support::describe_event).collect::<Vec<_>>()
        );
        eprintln!(
            "BENCH lost_cluster grace_s={GRACE} placed_again_s={:.1} ranks_up_s={:.1} bare_start_s={bare:.1} target_s={:.1}",
            replaced.as_secs_f64(),
            up,
            GRACE as f64 + bare + 5.0
        );
        // The hub restarted now: it keeps the burst where its status says, nothing twice.
        let spot_job = jobs2.get("spot-b").await?.uid();
        let hub_pods: Api<Pod> = Api::namespaced(env.client.clone(), HUB_NAMESPACE);
        hub_pods
            .delete_collection(&DeleteParams::default(), &ListParams::default().labels("app.kubernetes.io/name=flux-hub"))
            .await?;
        rolled_out(&env.client, HUB_NAMESPACE, "flux-hub").await?;
        connected("burst2").await?;
        env.holds_for("the burst stays in burst2 after the hub's restart", secs(20), async || {
            let b = burst_when(env, "spot", "known", 30, |_| true).await?;
            let uid = jobs2.get("spot-b").await?.uid();
            Ok((b.cluster != "burst2" || uid != spot_job).then(|| format!("{b:?}, Job uid {uid:?}")))
        })
        .await?;

        // 4. burst comes back: its spoke deletes its copy, and none of its brokers rejoins.
        lost.start().await?;
        connected("burst").await?;
        let jobs1: Api<Job> = Api::namespaced(first.client.clone(), &env.ns);
        env.eventually("the lost cluster's copy deleted", secs(120), async || {
            Ok(match jobs1.get_opt("spot-b").await? {
                None => Probe::Done(()),
                Some(j) => Probe::Waiting(format!("Job spot-b still there: {:?}", j.status)),
            })
        })
        .await?;
        let addresses = every_host(env, "spot").await?;
        ensure!(
            addresses == pod_addresses(&second, &env.ns, "spot-b").await?,
            "the ranks still run in burst2: {addresses:?}"
        );
        ensure!(jobs2.get("spot-b").await?.uid() == spot_job, "burst2's Job untouched");
        eprintln!("{}: the lost cluster came back and deleted its copy; the ranks stayed in burst2", env.ns);
        env.api::<MiniCluster>().delete("spot", &DeleteParams::default()).await?;
        drop(isolated);

        // 5. burst's spoke stopped for longer than the grace while its direct brokers serve
        // the lead: nothing moves.
        env.apply_minicluster(&minicluster("steady", both)).await?;
        let b = burst_when(env, "steady", "running", 240, |b| b.phase == "Running" && b.brokers_joined == Some(2)).await?;
        ensure!(b.cluster == "burst" && b.path.as_deref() == Some("Direct"), "{b:?}");
        let steady_job = jobs1.get("steady-b").await?.uid();
        let spoke_deployments: Api<Deployment> = Api::namespaced(first.client.clone(), SPOKE_NAMESPACE);
        let scale = |n: i32| Patch::Merge(json!({"spec": {"replicas": n}}));
        spoke_deployments.patch("flux-spoke", &PatchParams::default(), &scale(0)).await?;
        env.holds_for("the burst stays while its brokers serve", secs(GRACE + 20), async || {
            let b = burst_when(env, "steady", "known", 30, |_| true).await?;
            Ok((b.cluster != "burst").then(|| format!("{b:?}")))
        })
        .await?;
        let lead = lead_pod(env, "steady").await?;
        support::flux_in(env, &lead, "steady", UP_NODES, "its ranks still up", |o| o.trim() == "3").await?;
        ensure!(jobs1.get("steady-b").await?.uid() == steady_job, "its Job untouched");
        spoke_deployments.patch("flux-spoke", &PatchParams::default(), &scale(1)).await?;
        connected("burst").await?;
        every_host(env, "steady").await?;
        eprintln!("{}: a spoke away past the grace, its brokers serving: nothing moved", env.ns);
        Ok(())
    })
    .await;
}
