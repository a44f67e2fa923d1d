//! Placement by room on real nodes: a burst that names candidate spokes goes to the first
//! that admits it and has room, as each spoke measures it from its real node and its
//! owner's policy; a burst already running stays where it is.
//!
//! Room is made exact with an extended resource: each node advertises `example.com/slot`
//! (its status capacity, as a device vendor would), every broker's pod asks for one, and
//! the scheduler places no pod where none is free. The hub is installed with `flux-hub
//! init` and both burst clusters joined with `flux-hub join --label tier=spot` and a
//! policy that lets bursts ask for slots; then, one MiniCluster at a time (a root broker
//! and a relayed burst of one):
//! 1. the first candidate has no slot: the burst runs in the second, and a job runs on it;
//! 2. the first gets slots: the running burst stays, a new one goes to the first;
//! 3. the first's owner lowers its ceiling (`maxBrokers`): a new burst goes to the second;
//! 4. the first's spoke is stopped: a new burst goes to the second;
//! 5. the second's owner claims `tier=gold` in its spoke's own config: a burst selecting
//!    `tier=gold` is placed nowhere, and a label the root gave (`site=second`) still
//!    selects that spoke;
//! 6. the second's owner has the namespace enforce Pod Security `restricted`: a
//!    MiniCluster whose pods meet it (non-root brokers) bursts there, and a job runs on
//!    both of its brokers.
//!
//! The second spoke runs the last release's controller image (`FLUX_E2E_RELEASED`,
//! `scripts/released.sh`) until step 7, so every burst above is placed by today's hub on
//! a spoke one protocol revision older. An autoscaled MiniCluster (its relayed burst on the
//! second at its floor of one) joins them. Then, with nothing deleted in between (version
//! skew both ways, and upgrades that lose nothing):
//! 7. the second spoke upgraded (`flux-hub join` again with today's image);
//! 8. the hub replaced by the last release's (its own `flux-hub init`, with its image, CRD
//!    and manifests): today's spokes with a hub one revision older, which places a new
//!    MiniCluster with a direct and a relayed burst on the second;
//! 9. the hub upgraded again (today's `flux-hub init`: today's CRD applied over the live
//!    MiniClusters, both replicas replaced) with the federation's CA renewed first
//!    (`flux-hub certs --renew-ca`): the hub presents a certificate of the new CA, and
//!    refuses the old admin certificate;
//! 10. both spokes joined again: each spoke's old certificate is refused by the hub, and
//!     each spoke trusts the new CA alone;
//! 11. the previous CA dropped (`flux-hub certs --drop-previous-ca`, `flux-hub init`): the
//!     old admin and spoke certificates are refused at the chain check.
//!
//! After each of 7 to 11 every Job in the three clusters keeps its uid, no burst moves, the
//! hub's view of each spoke names the revision it speaks, and jobs run across the
//! clusters; the time until a relayed broker is up again, and how many containers
//! restarted, is printed. During each, no burst's status goes backwards (read twice a
//! second: a Running burst is never Pending or Dispatched again, and keeps its cluster and
//! when it was placed). The autoscaled burst keeps its size throughout.
//!
//! `KUBECONFIG` is the root cluster, `SPOKE_KUBECONFIG` and `SPOKE2_KUBECONFIG` the burst
//! clusters (`scripts/e2e.sh` starts them with real nodes and the images loaded). A binary
//! of its own, after the other real-node ones: `flux-hub init` installs a hub that watches
//! every namespace, and the spokes are joined again with this test's certificates.

mod support;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, Result, ensure};
use flux_e2e::images;
use flux_shared::api::MiniCluster;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use support::{
    Probe, SpokeCluster, TestEnv, flux_hub, lead_pod, now_millis, path_str, secs, spokes,
};

/// The extended resource every node advertises and every broker asks one of.
const SLOT: &str = "example.com/slot";
const UP_NODES: &str = "flux resource list -s up -no '{nnodes}'";
const SPOKE_NAMESPACE: &str = "flux-spoke-system";

/// Every node of `client`'s cluster advertises `slots` slots (0: none), once the node's
/// allocatable resources show it.
async fn advertise(env: &TestEnv, client: &kube::Client, slots: i64) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let value = if slots == 0 {
        Value::Null
    } else {
        json!(slots.to_string())
    };
    for node in nodes.list(&ListParams::default()).await?.items {
        let name = node.metadata.name.clone().context("a node name")?;
        nodes
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"capacity": {SLOT: value}}})),
            )
            .await?;
        env.eventually(
            &format!("node {name} to advertise {slots} slots"),
            secs(60),
            async || {
                let node = nodes.get(&name).await?;
                let have = node
                    .status
                    .and_then(|s| s.allocatable)
                    .and_then(|a| a.get(SLOT).map(|q| q.0.clone()));
                Ok(match (have.as_deref(), slots) {
                    (None, 0) => Probe::Done(()),
                    (Some(q), n) if q == n.to_string() => Probe::Done(()),
                    (other, _) => Probe::Waiting(format!("allocatable {SLOT}: {other:?}")),
                })
            },
        )
        .await?;
    }
    Ok(())
}

/// A MiniCluster of one root broker and a relayed burst `<name>-b` of one, placed among
/// `candidates`; every broker asks for one slot.
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
                    {"name": format!("{name}-b"), "size": 1, "relay": true, "candidates": candidates},
                ]},
            },
            "containers": [{
                "image": format!("{}:bookworm", images::APP_IMAGE),
                "resources": {"requests": {SLOT: "1"}, "limits": {SLOT: "1"}},
            }],
        },
    })
}

/// Where MiniCluster `name`'s burst is placed, once it is, and why the candidates before
/// were skipped (`(spoke, reason)`), as its status says.
async fn placed(env: &TestEnv, name: &str) -> Result<(String, Vec<(String, String)>)> {
    env.eventually(&format!("{name}'s burst placed"), secs(120), async || {
        let mc = env.api::<MiniCluster>().get(name).await?;
        let burst = mc.status.unwrap_or_default().bursts.into_iter().next();
        Ok(match burst {
            Some(b) if !b.cluster.is_empty() && b.phase != "Pending" => {
                let skipped = b
                    .placement
                    .unwrap_or_default()
                    .skipped
                    .into_iter()
                    .map(|s| (s.cluster, s.reason))
                    .collect();
                Probe::Done((b.cluster, skipped))
            }
            other => Probe::Waiting(format!("{other:?}")),
        })
    })
    .await
}

/// Both of `name`'s brokers up, and a job on both: the burst's broker runs wherever it was
/// placed.
async fn job_on_both(env: &TestEnv, name: &str) -> Result<()> {
    let lead = lead_pod(env, name).await?;
    support::flux_in(env, &lead, name, UP_NODES, "two brokers up", |o| {
        o.trim() == "2"
    })
    .await?;
    let hosts = support::flux_in(
        env,
        &lead,
        name,
        "flux run -N 2 hostname | sort",
        "a job on both",
        |_| true,
    )
    .await?;
    let hosts: Vec<&str> = hosts.lines().map(str::trim).collect();
    let burst_host = format!("{name}-b-0");
    ensure!(
        hosts == [&format!("{name}-0"), &burst_host],
        "the job ran on the root's broker and the burst's: {hosts:?}"
    );
    Ok(())
}

/// Waits until the hub has room from `spoke` measured after `after` (Unix milliseconds),
/// with no error, and its connection as `connected`.
async fn room_known(
    env: &TestEnv,
    hub: &Path,
    config: &Path,
    spoke: &str,
    after: i64,
) -> Result<()> {
    env.eventually(
        &format!("spoke {spoke}'s room measured"),
        secs(120),
        async || {
            let all = spokes(hub, config).await?;
            let s = all.iter().find(|s| s["name"] == spoke);
            Ok(match s {
                Some(s)
                    if s["connected"] == true
                        && s["roomObservedUnixMillis"]
                            .as_i64()
                            .is_some_and(|t| t > after)
                        && s["roomError"] == "" =>
                {
                    Probe::Done(())
                }
                other => Probe::Waiting(format!("{other:?}")),
            })
        },
    )
    .await
}

#[tokio::test]
#[ignore = "needs three clusters with real nodes: KUBECONFIG, SPOKE_KUBECONFIG, SPOKE2_KUBECONFIG (scripts/e2e.sh on the testbed)"]
async fn a_burst_goes_to_the_candidate_with_room_and_stays_where_it_runs() {
    support::run("real-place", false, async |env: &TestEnv| {
        let first: SpokeCluster = support::spoke_cluster_from("SPOKE_KUBECONFIG", "the first candidate").await;
        let second: SpokeCluster = support::spoke_cluster_from("SPOKE2_KUBECONFIG", "the second candidate").await;
        let hub = tokio::task::spawn_blocking(support::hub_binary).await??;
        let dir: PathBuf = support::log_file(&format!("{}-placement", env.ns))?;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let config = dir.join("flux-hub-config.yaml");
        let image = format!("{}:e2e", images::CONTROLLER_IMAGE);
        let released = std::env::var("FLUX_E2E_RELEASED").context(
            "FLUX_E2E_RELEASED: the last release's version, whose controller image (tag released-VERSION) scripts/e2e.sh builds and loads",
        )?;
        let released_image = format!("{}:released-{released}", images::CONTROLLER_IMAGE);
        let root_kubeconfig = std::env::var("KUBECONFIG").context("KUBECONFIG")?;

        // Slots: 4 on each root node, none in the first burst cluster, 2 in the second.
        advertise(env, &env.client, 4).await?;
        advertise(env, &first.client, 0).await?;
        advertise(env, &second.client, 2).await?;

        // The hub, and both spokes labelled tier=spot, with a policy that lets bursts of
        // this namespace ask for slots.
        let root_ip = Api::<Node>::all(env.client.clone())
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .flat_map(|n| n.status.iter().flat_map(|s| s.addresses.iter().flatten()))
            .find(|a| a.type_ == "InternalIP")
            .map(|a| a.address.clone())
            .context("a root node's InternalIP")?;
        let certs = dir.join("certs");
        flux_hub(&hub, &config, &[
            "init", "--kubeconfig", &root_kubeconfig, "--certs", path_str(&certs)?,
            "--hub-ip", &root_ip, "--image", &image, "--timeout-seconds", "180",
        ])
        .await?;
        let policy = dir.join("policy.yaml");
        let policy_text = |max: i32| {
            format!(
                "namespaces:\n- name: {}\n  podSecurity: baseline\n  allow:\n    resources: {{\"{SLOT}\": \"1\"}}\nmaxBrokers: {max}\n",
                env.ns
            )
        };
        std::fs::write(&policy, policy_text(8))?;
        // The second spoke of the last release: one protocol revision older than the hub.
        for (name, cluster, site, image) in [
            ("burst", &first, "site=first", &image),
            ("burst2", &second, "site=second", &released_image),
        ] {
            flux_hub(&hub, &config, &[
                "join", name, "--kubeconfig", path_str(&cluster.kubeconfig)?, "--image", image,
                "--policy", path_str(&policy)?, "--label", "tier=spot", "--label", site, "--force",
                "--timeout-seconds", "180",
            ])
            .await?;
        }
        let joined = now_millis();
        room_known(env, &hub, &config, "burst", joined).await?;
        room_known(env, &hub, &config, "burst2", joined).await?;
        let revision = flux_shared::federation::protocol::REVISION;
        speaks(env, &hub, &config, &[("burst", json!(revision)), ("burst2", json!(1))]).await?;
        let candidates = json!([{"cluster": "burst"}, {"matchLabels": {"tier": "spot"}}]);

        // 1. No slot in the first: the burst runs in the second, and a job runs on it.
        let started = Instant::now();
        env.apply_minicluster(&minicluster("spill", candidates.clone())).await?;
        let (cluster, skipped) = placed(env, "spill").await?;
        ensure!(cluster == "burst2", "placed where there is room: {cluster}, skipped {skipped:?}");
        ensure!(skipped == [("burst".to_string(), "NoRoom".to_string())], "the first skipped for want of room: {skipped:?}");
        job_on_both(env, "spill").await?;
        eprintln!("{}: the first candidate full, the burst ran in the second ({:?})", env.ns, started.elapsed());
        let events = env.events_about("MiniCluster", "spill").await?;
        ensure!(
            events.iter().any(|e| e.reason.as_deref() == Some("BurstPlaced")),
            "a BurstPlaced Event: {:?}",
            events.iter().map(support::describe_event).collect::<Vec<_>>()
        );

        // 2. The first gets slots: the running burst stays where it runs; a new one goes to
        // the first, now the first with room.
        // A measurement made after the node's allocatable shows the slots (the kubelet
        // copies a patched capacity there at its next status update, seconds later on a
        // real node), with a second for the spoke's node watch.
        advertise(env, &first.client, 2).await?;
        let advertised = now_millis();
        room_known(env, &hub, &config, "burst", advertised + 1_000).await?;
        env.apply_minicluster(&minicluster("prefer", candidates.clone())).await?;
        let (cluster, skipped) = placed(env, "prefer").await?;
        ensure!(cluster == "burst" && skipped.is_empty(), "the first candidate, with room now: {cluster}, {skipped:?}");
        job_on_both(env, "prefer").await?;
        let (cluster, _) = placed(env, "spill").await?;
        ensure!(cluster == "burst2", "the running burst stayed: {cluster}");
        let second_pods: Api<Pod> = Api::namespaced(second.client.clone(), &env.ns);
        let running = second_pods.list(&ListParams::default().labels("job-name=spill-b")).await?.items;
        ensure!(running.len() == 1, "its broker pod still in the second cluster: {}", support::pod_summary(&running));
        eprintln!("{}: with room in the first, a new burst went there and the running one stayed", env.ns);

        // 3. The first's owner lowers its ceiling to the one broker it runs: a new burst
        // goes to the second.
        let lowered = now_millis();
        let policies: Api<ConfigMap> = Api::namespaced(first.client.clone(), SPOKE_NAMESPACE);
        policies
            .patch(
                flux_shared::federation::policy::POLICY_CONFIGMAP,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {flux_shared::federation::policy::POLICY_KEY: policy_text(1)}})),
            )
            .await?;
        room_known(env, &hub, &config, "burst", lowered).await?;
        env.apply_minicluster(&minicluster("ceiling", candidates.clone())).await?;
        let (cluster, skipped) = placed(env, "ceiling").await?;
        ensure!(cluster == "burst2", "the second, below the first's ceiling: {cluster}, {skipped:?}");
        ensure!(skipped == [("burst".to_string(), "NotAdmitted".to_string())], "{skipped:?}");
        job_on_both(env, "ceiling").await?;
        eprintln!("{}: the first's ceiling lowered, a new burst went to the second", env.ns);

        // 4. The first's spoke is stopped: a new burst goes to the second.
        let deployments: Api<Deployment> = Api::namespaced(first.client.clone(), SPOKE_NAMESPACE);
        let scale = |n: i32| Patch::Merge(json!({"spec": {"replicas": n}}));
        deployments.patch("flux-spoke", &PatchParams::default(), &scale(0)).await?;
        env.eventually("the hub to see the first spoke gone", secs(120), async || {
            let all = spokes(&hub, &config).await?;
            Ok(match all.iter().find(|s| s["name"] == "burst") {
                Some(s) if s["connected"] == false => Probe::Done(()),
                other => Probe::Waiting(format!("{other:?}")),
            })
        })
        .await?;
        advertise(env, &second.client, 4).await?;
        let grown = now_millis();
        room_known(env, &hub, &config, "burst2", grown).await?;
        env.apply_minicluster(&minicluster("away", candidates)).await?;
        let (cluster, skipped) = placed(env, "away").await?;
        ensure!(cluster == "burst2", "the second, the first not connected: {cluster}, {skipped:?}");
        ensure!(skipped == [("burst".to_string(), "NotConnected".to_string())], "{skipped:?}");
        job_on_both(env, "away").await?;
        eprintln!("{}: the first spoke stopped, a new burst went to the second", env.ns);
        deployments.patch("flux-spoke", &PatchParams::default(), &scale(1)).await?;

        // 5. The second's owner claims tier=gold in the spoke's own config and restarts it:
        // a burst that selects tier=gold is placed nowhere and says why, the hub reports
        // the label ignored, and a label the root gave still selects that spoke.
        let spoke_configs: Api<ConfigMap> = Api::namespaced(second.client.clone(), SPOKE_NAMESPACE);
        spoke_configs
            .patch("flux-spoke-config", &PatchParams::default(),
                &Patch::Merge(json!({"data": {"labels": "tier=gold,site=second"}})))
            .await?;
        let restarted = now_millis();
        let second_deployments: Api<Deployment> = Api::namespaced(second.client.clone(), SPOKE_NAMESPACE);
        second_deployments
            .patch("flux-spoke", &PatchParams::default(), &Patch::Merge(json!({"spec": {"template": {"metadata": {"annotations": {"e2e/claim": restarted.to_string()}}}}})))
            .await?;
        let ignored = env.eventually("the hub to report the claimed label ignored", secs(180), async || {
            let all = spokes(&hub, &config).await?;
            Ok(match all.iter().find(|s| s["name"] == "burst2") {
                Some(s) if s["connected"] == true && s["ignoredLabels"]["tier"] == "gold" => Probe::Done(s.clone()),
                other => Probe::Waiting(format!("{other:?}")),
            })
        })
        .await?;
        ensure!(
            ignored["labels"] == json!({"site": "second", "tier": "spot"}),
            "the spoke keeps the labels the root gave it: {ignored}"
        );
        env.apply_minicluster(&minicluster("gold", json!([{"matchLabels": {"tier": "gold"}}]))).await?;
        let unplaced = env.eventually("the tier=gold burst said to be placed nowhere", secs(60), async || {
            let mc = env.api::<MiniCluster>().get("gold").await?;
            let burst = mc.status.unwrap_or_default().bursts.into_iter().next();
            Ok(match burst {
                Some(b) if b.cluster.is_empty() && b.placement.is_some() => Probe::Done(b),
                other => Probe::Waiting(format!("{other:?}")),
            })
        })
        .await?;
        let message = unplaced.message.clone().unwrap_or_default();
        ensure!(message.contains("no spoke matches the candidates"), "says why: {message}");
        env.holds_for("the tier=gold burst stays placed nowhere", secs(15), async || {
            let mc = env.api::<MiniCluster>().get("gold").await?;
            let cluster = mc.status.unwrap_or_default().bursts.into_iter().next().map(|b| b.cluster);
            Ok(cluster.filter(|c| !c.is_empty()).map(|c| format!("placed on {c}")))
        })
        .await?;
        let objects = second_pods.list(&ListParams::default().labels("job-name=gold-b")).await?.items;
        ensure!(objects.is_empty(), "no pod of it in the claiming cluster: {}", support::pod_summary(&objects));
        env.apply_minicluster(&minicluster("granted", json!([{"matchLabels": {"site": "second"}}]))).await?;
        let (cluster, _) = placed(env, "granted").await?;
        ensure!(cluster == "burst2", "a label the root gave still selects the spoke: {cluster}");
        eprintln!("{}: a label the burst cluster's owner claimed selects nothing; the root's still does", env.ns);

        // 6. The namespace enforces `restricted` in the second (its owner labels it; the
        // pods already there stay): a burst whose pods meet it is admitted by the spoke
        // and the API server, and its non-root broker joins the instance.
        let strict = json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}});
        Api::<k8s_openapi::api::core::v1::Namespace>::all(second.client.clone())
            .patch(&env.ns, &PatchParams::default(), &Patch::Merge(&strict))
            .await?;
        advertise(env, &second.client, 8).await?;
        let relabelled = now_millis();
        room_known(env, &hub, &config, "burst2", relabelled).await?;
        let mut doc = minicluster("strict", json!([{"matchLabels": {"site": "second"}}]));
        support::restricted(&mut doc);
        env.apply_minicluster(&doc).await?;
        let (cluster, _) = placed(env, "strict").await?;
        ensure!(cluster == "burst2", "placed in the restricted namespace's cluster: {cluster}");
        job_on_both(env, "strict").await?;
        let burst_pods = second_pods.list(&ListParams::default().labels("job-name=strict-b")).await?.items;
        let users: Vec<Option<i64>> = burst_pods
            .iter()
            .map(|p| p.spec.as_ref()?.security_context.as_ref()?.run_as_user)
            .collect();
        ensure!(users == [Some(1000)], "one non-root burst pod: {users:?}");
        eprintln!("{}: a burst of non-root brokers ran in a namespace that enforces restricted", env.ns);

        // An autoscaled MiniCluster runs through what follows too: its burst (relayed, on
        // the second) at its floor of one, which no queue grows.
        advertise(env, &env.client, 8).await?;
        advertise(env, &second.client, 10).await?;
        let mut elastic = minicluster("elastic", json!([{"matchLabels": {"site": "second"}}]));
        support::restricted(&mut elastic);
        elastic["spec"]["flux"]["bursting"]["autoscale"] =
            json!({"scaleUpAfterSeconds": 600, "scaleDownAfterSeconds": 3600, "maxStep": 1});
        elastic["spec"]["flux"]["bursting"]["clusters"][0]["minSize"] = json!(1);
        elastic["spec"]["flux"]["bursting"]["clusters"][0]["maxSize"] = json!(2);
        env.apply_minicluster(&elastic).await?;
        let (cluster, _) = placed(env, "elastic").await?;
        ensure!(cluster == "burst2", "the autoscaled burst on the second: {cluster}");
        job_on_both(env, "elastic").await?;

        let clusters = [&env.client, &first.client, &second.client];
        let upgrade = Upgrade { env, hub: &hub, config: &config, clusters };
        // 7. The second spoke upgraded to today's.
        upgrade.step("the second spoke upgraded", STEADY, async || {
            flux_hub(&hub, &config, &[
                "join", "burst2", "--kubeconfig", path_str(&second.kubeconfig)?, "--image", &image,
                "--policy", path_str(&policy)?, "--label", "tier=spot", "--label", "site=second", "--force",
                "--timeout-seconds", "180",
            ])
            .await?;
            speaks(env, &hub, &config, &[("burst", json!(revision)), ("burst2", json!(revision))]).await
        })
        .await?;

        // 8. The hub of the last release, installed by its own `flux-hub init` (its CRD and
        // manifests over the live MiniClusters): today's spokes one revision newer than
        // it. It places a new MiniCluster with a relayed and a direct burst on the second.
        advertise(env, &env.client, 8).await?;
        let released_hub = std::path::Path::new(&std::env::var("FLUX_E2E_RELEASED_BIN").context(
            "FLUX_E2E_RELEASED_BIN: the folder of the last release's binaries (scripts/released.sh)",
        )?)
        .join("flux-hub");
        // Release 0.1.0's hub shows a running burst Dispatched again until its spoke reports
        // to it (fixed since: the last status stands until then).
        let allowed = &["Running", "Joining", "Unreachable", "Dispatched"];
        upgrade.step("the hub replaced by the last release's", allowed, async || {
            flux_hub(&released_hub, &config, &[
                "init", "--kubeconfig", &root_kubeconfig, "--certs", path_str(&certs)?,
                "--hub-ip", &root_ip, "--image", &released_image, "--timeout-seconds", "180",
            ])
            .await?;
            // A hub of the last release does not show revisions.
            speaks(env, &hub, &config, &[("burst", Value::Null), ("burst2", Value::Null)]).await
        })
        .await?;
        let mut skewed = minicluster("skewed", json!([{"matchLabels": {"site": "second"}}]));
        // The second's namespace enforces `restricted` since step 6.
        support::restricted(&mut skewed);
        skewed["spec"]["flux"]["bursting"]["clusters"]
            .as_array_mut()
            .context("bursts")?
            .push(json!({"name": "skewed-d", "size": 1, "cluster": "burst2"}));
        env.apply_minicluster(&skewed).await?;
        let (cluster, _) = placed(env, "skewed").await?;
        ensure!(cluster == "burst2", "placed by the older hub on the newer spoke: {cluster}");
        job_on(env, "skewed", &["skewed-0", "skewed-b-0", "skewed-d-0"]).await?;
        eprintln!("{}: a hub of release {released} placed a relayed and a direct burst on today's spoke", env.ns);

        // 9. The hub upgraded to today's again by today's `flux-hub init` (its CRD applied
        // over the live MiniClusters), both replicas replaced, and with a certificate of a
        // new CA (`certs --renew-ca` first): both CAs trusted for the spokes now, admin
        // certificates of the new CA only.
        let old = dir.join("old-certs");
        std::fs::create_dir_all(&old)?;
        for file in ["ca.crt", "spoke-burst.crt", "spoke-burst.key", "spoke-burst2.crt", "spoke-burst2.key", "admin-flux-hub-admin.crt", "admin-flux-hub-admin.key"] {
            std::fs::copy(certs.join(file), old.join(file)).with_context(|| format!("keeping the old {file}"))?;
        }
        let renewal = Renewal { env, hub: &hub, config: &config, certs: &certs, old: &old, domain: &root_ip };
        let init = [
            "init", "--kubeconfig", &root_kubeconfig, "--certs", path_str(&certs)?,
            "--hub-ip", &root_ip, "--image", &image, "--timeout-seconds", "180",
        ];
        upgrade.step("the hub upgraded, its certificate renewed", STEADY, async || {
            flux_hub(&hub, &config, &["certs", "--out", path_str(&certs)?, "--renew-ca"]).await?;
            flux_hub(&hub, &config, &init).await?;
            renewal.hub_presents_the_new_ca().await?;
            let refused = renewal.as_old_admin().await.err().map(|e| format!("{e:#}"));
            ensure!(refused.is_some(), "the old admin certificate refused once the hub serves the new CA's");
            speaks(env, &hub, &config, &[("burst", json!(revision)), ("burst2", json!(revision))]).await
        })
        .await?;
        job_on(env, "skewed", &["skewed-0", "skewed-b-0", "skewed-d-0"]).await?;

        // 10. Both spokes joined again, at once: their old certificates are refused, and
        // they trust the new CA alone.
        let rejoin = async |name: &str, cluster: &SpokeCluster, site: &str| -> Result<()> {
            flux_hub(&hub, &config, &[
                "join", name, "--kubeconfig", path_str(&cluster.kubeconfig)?, "--image", &image,
                "--policy", path_str(&policy)?, "--label", "tier=spot", "--label", site,
                "--timeout-seconds", "180",
            ])
            .await?;
            // Refused by its pin: the hub still trusts the previous CA.
            let refused = renewal.as_old_spoke(name).await?;
            eprintln!("{}: spoke {name} joined again; its old certificate refused ({refused})", env.ns);
            renewal.spoke_trusts_the_new_ca_alone(cluster).await
        };
        upgrade.step("the spokes' certificates renewed", STEADY, async || {
            let (a, b) = tokio::join!(rejoin("burst", &first, "site=first"), rejoin("burst2", &second, "site=second"));
            a.and(b)
        })
        .await?;
        job_on(env, "skewed", &["skewed-0", "skewed-b-0", "skewed-d-0"]).await?;

        // 11. The previous CA dropped: the hub refuses every certificate it issued.
        upgrade.step("the previous CA dropped", STEADY, async || {
            flux_hub(&hub, &config, &["certs", "--out", path_str(&certs)?, "--drop-previous-ca"]).await?;
            flux_hub(&hub, &config, &init).await.map(drop)
        })
        .await?;
        job_on(env, "skewed", &["skewed-0", "skewed-b-0", "skewed-d-0"]).await?;
        let refused = renewal.as_old_admin().await.err().map(|e| format!("{e:#}"));
        ensure!(refused.is_some(), "the old admin certificate refused once the previous CA is dropped");
        for name in ["burst", "burst2"] {
            renewal.as_old_spoke(name).await?;
        }
        eprintln!("{}: certificates renewed; the old ones refused: {}", env.ns, refused.unwrap_or_default().lines().last().unwrap_or_default());

        // The autoscaled burst kept its size throughout.
        let elastic = env.api::<MiniCluster>().get("elastic").await?;
        let size = elastic.spec.flux.as_ref().and_then(|f| f.bursting.as_ref()).and_then(|b| b.clusters.first()).map(|c| c.size);
        ensure!(size == Some(Some(1)), "the autoscaled burst still of one: {size:?}");

        for client in clusters {
            advertise(env, client, 0).await?;
        }
        Ok(())
    })
    .await;
}

/// The federation's certificates while they are renewed: the directory, and a copy of the
/// certificates from before.
struct Renewal<'a> {
    env: &'a TestEnv,
    hub: &'a Path,
    config: &'a Path,
    certs: &'a Path,
    old: &'a Path,
    /// The name the hub's certificate carries (its IP).
    domain: &'a str,
}

impl Renewal<'_> {
    /// The hub's URL, from the admin context `flux-hub init` wrote.
    fn hub_url(&self) -> Result<String> {
        let file: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(self.config)?)?;
        file["contexts"][0]["hub"]
            .as_str()
            .map(str::to_string)
            .context("the admin context's hub")
    }

    /// The new CA alone (the last certificate of `ca.crt`).
    fn new_ca(&self) -> Result<String> {
        let trusted = std::fs::read_to_string(self.certs.join("ca.crt"))?;
        flux_shared::federation::pki::certificate_blocks(&trusted)
            .last()
            .map(|b| (*b).to_string())
            .context("no certificate in ca.crt")
    }

    /// `flux-hub status` with the admin certificate from before the renewal.
    async fn as_old_admin(&self) -> Result<String> {
        flux_hub(
            self.hub,
            self.config,
            &[
                "status",
                "--ca",
                path_str(&self.certs.join("ca.crt"))?,
                "--cert",
                path_str(&self.old.join("admin-flux-hub-admin.crt"))?,
                "--key",
                path_str(&self.old.join("admin-flux-hub-admin.key"))?,
            ],
        )
        .await
    }

    /// Once the hub's pods serve the new certificate: a client trusting the new CA alone
    /// lists the spokes.
    async fn hub_presents_the_new_ca(&self) -> Result<()> {
        let new_ca = self.certs.join("new-ca-alone.crt");
        std::fs::write(&new_ca, self.new_ca()?)?;
        self.env
            .eventually(
                "the hub to present a certificate of the new CA",
                secs(120),
                async || {
                    Ok(
                        match flux_hub(
                            self.hub,
                            self.config,
                            &["status", "--ca", path_str(&new_ca)?],
                        )
                        .await
                        {
                            Ok(_) => Probe::Done(()),
                            Err(e) => Probe::Waiting(format!("{e:#}")),
                        },
                    )
                },
            )
            .await
    }

    /// What the hub answers a spoke presenting `name`'s certificate from before the renewal
    /// (it must refuse: the error, as text).
    async fn as_old_spoke(&self, name: &str) -> Result<String> {
        use flux_shared::federation::proto::spoke_client::SpokeClient;
        use flux_shared::federation::tls::{ClientSecurity, TlsPem, TransportSettings};
        let read = |file: &str| std::fs::read_to_string(self.old.join(file));
        let tls = TlsPem::new(
            std::fs::read_to_string(self.certs.join("ca.crt"))?,
            read(&format!("spoke-{name}.crt"))?,
            read(&format!("spoke-{name}.key"))?,
        )?;
        let security = ClientSecurity::Mtls {
            tls,
            domain: self.domain.to_string(),
        };
        let endpoint = TransportSettings::default().endpoint(&self.hub_url()?, &security)?;
        let answer = match endpoint.connect().await {
            Err(e) => {
                return Ok(format!(
                    "connect: {}",
                    flux_shared::federation::diagnostics::error_chain(&e)
                ));
            }
            Ok(channel) => {
                SpokeClient::new(channel)
                    .report(flux_shared::federation::proto::ReportRequest::default())
                    .await
            }
        };
        match answer {
            Ok(_) => anyhow::bail!("the hub accepted spoke {name}'s old certificate"),
            Err(status) => Ok(format!("{:?}: {}", status.code(), status.message())),
        }
    }

    /// The spoke's TLS Secret trusts the new CA alone.
    async fn spoke_trusts_the_new_ca_alone(&self, cluster: &SpokeCluster) -> Result<()> {
        let secret = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
            cluster.client.clone(),
            SPOKE_NAMESPACE,
        )
        .get("flux-spoke-tls")
        .await?;
        let trusted = secret
            .data
            .as_ref()
            .and_then(|d| d.get("ca.crt"))
            .map(|b| String::from_utf8_lossy(&b.0).to_string())
            .context("the spoke's ca.crt")?;
        ensure!(
            flux_shared::federation::pki::certificate_blocks(&trusted) == [self.new_ca()?.as_str()],
            "the spoke trusts the new CA alone: {trusted}"
        );
        let old = std::fs::read_to_string(self.old.join("ca.crt"))?;
        ensure!(
            !trusted.contains(old.trim()),
            "the previous CA is no longer trusted by the spoke"
        );
        Ok(())
    }
}

/// What a running burst's phase may be during an upgrade step.
const STEADY: &[&str] = &["Running", "Joining", "Unreachable"];

/// The MiniClusters whose relayed bursts run through every upgrade step, a job run on all
/// their brokers after each (`elastic` autoscaled).
const RUNNING: &[&str] = &["spill", "strict", "elastic"];

/// A job on every broker of `name` (`hosts`, in rank order), once all are up.
async fn job_on(env: &TestEnv, name: &str, hosts: &[&str]) -> Result<()> {
    let lead = lead_pod(env, name).await?;
    let n = hosts.len();
    support::flux_in(
        env,
        &lead,
        name,
        UP_NODES,
        &format!("{n} brokers up"),
        |o| o.trim() == n.to_string(),
    )
    .await?;
    let ran = support::flux_in(
        env,
        &lead,
        name,
        &format!("flux run -N {n} hostname | sort"),
        "a job on every broker",
        |_| true,
    )
    .await?;
    let mut expected: Vec<&str> = hosts.to_vec();
    expected.sort_unstable();
    let ran: Vec<&str> = ran.lines().map(str::trim).collect();
    ensure!(
        ran == expected,
        "the job ran on every broker of {name}: {ran:?}"
    );
    Ok(())
}

/// Waits until the hub shows each spoke connected and speaking the revision given
/// (`null`: a hub that does not show revisions).
async fn speaks(env: &TestEnv, hub: &Path, config: &Path, want: &[(&str, Value)]) -> Result<()> {
    env.eventually(
        "the spokes connected, speaking their revisions",
        secs(180),
        async || {
            let all = spokes(hub, config).await?;
            let seen: Vec<(String, Value, Value)> = all
                .iter()
                .map(|s| {
                    let revision = s.get("protocolRevision").cloned().unwrap_or(Value::Null);
                    (
                        s["name"].as_str().unwrap_or_default().to_string(),
                        s["connected"].clone(),
                        revision,
                    )
                })
                .collect();
            let ok = want.iter().all(|(name, revision)| {
                seen.iter()
                    .any(|(n, c, r)| n == name && *c == json!(true) && r == revision)
            });
            Ok(if ok {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("{seen:?}"))
            })
        },
    )
    .await
}

/// The bursts' statuses, read twice a second while an upgrade step runs: none goes
/// backwards. A burst keeps its cluster and when it was placed, and one that was Running
/// is only ever Running, Joining (a relayed broker reconnecting) or Unreachable (its spoke
/// restarting), never Pending or Dispatched again, nor anything else (but for the last
/// release's hub, which shows Dispatched until the spoke reports to it).
struct StatusWatch {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<std::collections::BTreeSet<String>>,
}

impl StatusWatch {
    /// Reads `api` until [`StatusWatch::finish`]; a burst that was Running may only be in
    /// one of `allowed` phases meanwhile.
    fn start(api: Api<MiniCluster>, allowed: &'static [&'static str]) -> StatusWatch {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            type Seen = (String, String, Option<String>);
            let mut first: std::collections::BTreeMap<String, Seen> = Default::default();
            let mut backwards = std::collections::BTreeSet::new();
            loop {
                // A failed read is no sample (the API server is not what is under test).
                if let Ok(list) = api.list(&ListParams::default()).await {
                    for mc in list.items {
                        let name = mc.metadata.name.clone().unwrap_or_default();
                        for b in mc.status.unwrap_or_default().bursts {
                            let key = format!("{name}/{}", b.name);
                            let placed_at = b
                                .placement
                                .as_ref()
                                .and_then(|p| p.placed_at.as_ref())
                                .map(|t| t.0.to_string());
                            let now: Seen = (b.phase.clone(), b.cluster.clone(), placed_at);
                            let Some(was) = first.get(&key) else {
                                first.insert(key, now);
                                continue;
                            };
                            let fell = was.0 == "Running" && !allowed.contains(&now.0.as_str());
                            if fell || now.1 != was.1 || now.2 != was.2 {
                                backwards.insert(format!("{key}: {was:?} -> {now:?}"));
                            }
                        }
                    }
                }
                tokio::select! {
                    () = tokio::time::sleep(std::time::Duration::from_millis(500)) => {}
                    _ = stopped.changed() => break,
                }
            }
            backwards
        });
        StatusWatch { stop, task }
    }

    /// Stops reading; fails if any status went backwards during `what`.
    async fn finish(self, what: &str) -> Result<()> {
        let _ = self.stop.send(true);
        let backwards = self.task.await?;
        ensure!(
            backwards.is_empty(),
            "{what}: statuses went backwards: {backwards:?}"
        );
        Ok(())
    }
}

/// The clusters of an upgrade, and what must hold across it.
struct Upgrade<'a> {
    env: &'a TestEnv,
    hub: &'a Path,
    config: &'a Path,
    clusters: [&'a kube::Client; 3],
}

impl Upgrade<'_> {
    /// Every Job of the test's namespace in the three clusters, by cluster and name, with
    /// its uid; and where each MiniCluster's bursts are placed.
    async fn jobs(&self) -> Result<std::collections::BTreeMap<String, String>> {
        let mut all = std::collections::BTreeMap::new();
        for (i, client) in self.clusters.iter().enumerate() {
            let jobs: Api<k8s_openapi::api::batch::v1::Job> =
                Api::namespaced((*client).clone(), &self.env.ns);
            for job in jobs.list(&ListParams::default()).await?.items {
                let name = job.metadata.name.unwrap_or_default();
                all.insert(
                    format!("job {i}/{name}"),
                    job.metadata.uid.unwrap_or_default(),
                );
            }
        }
        for mc in self
            .env
            .api::<MiniCluster>()
            .list(&ListParams::default())
            .await?
            .items
        {
            let name = mc.metadata.name.unwrap_or_default();
            for b in mc.status.unwrap_or_default().bursts {
                all.insert(format!("burst {name}/{}", b.name), b.cluster);
            }
        }
        Ok(all)
    }

    /// Container restarts of every pod of the test's namespace in the three clusters, and
    /// how many pods there are.
    async fn restarts(&self) -> Result<(i32, usize)> {
        let (mut restarts, mut pods) = (0, 0);
        for client in self.clusters {
            let all: Api<Pod> = Api::namespaced(client.clone(), &self.env.ns);
            for pod in all.list(&ListParams::default()).await?.items {
                pods += 1;
                restarts += pod
                    .status
                    .and_then(|s| s.container_statuses)
                    .unwrap_or_default()
                    .iter()
                    .map(|c| c.restart_count)
                    .sum::<i32>();
            }
        }
        Ok((restarts, pods))
    }

    /// One upgrade step: `action`, with no burst's status going backwards meanwhile (only
    /// `allowed` phases for a running burst), then [`Upgrade::nothing_lost`] for the
    /// MiniClusters of [`RUNNING`].
    async fn step(
        &self,
        what: &str,
        allowed: &'static [&'static str],
        action: impl AsyncFnOnce() -> Result<()>,
    ) -> Result<()> {
        let before = self.jobs().await?;
        let (restarted, _) = self.restarts().await?;
        let watch = StatusWatch::start(self.env.api::<MiniCluster>(), allowed);
        action().await?;
        self.nothing_lost(what, &before, restarted).await?;
        watch.finish(what).await
    }

    /// After `what`: every Job has its uid still and every burst its cluster, the hub's
    /// spokes are connected, and each MiniCluster of [`RUNNING`] has every broker up and
    /// runs a job on them (the time until then printed: a relayed broker reconnects
    /// through the new hub or spoke).
    async fn nothing_lost(
        &self,
        what: &str,
        before: &std::collections::BTreeMap<String, String>,
        restarted_before: i32,
    ) -> Result<()> {
        let started = Instant::now();
        // All at once: the time printed is the slowest MiniCluster's.
        futures::future::try_join_all(RUNNING.iter().map(|name| async move {
            let hosts = [format!("{name}-0"), format!("{name}-b-0")];
            job_on(self.env, name, &[&hosts[0], &hosts[1]]).await
        }))
        .await?;
        let up = started.elapsed();
        let after = self.jobs().await?;
        let changed: Vec<String> = before
            .iter()
            .filter(|(k, v)| after.get(*k) != Some(*v))
            .map(|(k, v)| format!("{k}: {v} -> {:?}", after.get(k)))
            .collect();
        ensure!(
            changed.is_empty(),
            "{what}: Jobs re-created or bursts moved: {changed:?}"
        );
        let all = spokes(self.hub, self.config).await?;
        ensure!(
            all.iter().all(|s| s["connected"] == true),
            "{what}: every spoke connected: {all:?}"
        );
        let (restarted, pods) = self.restarts().await?;
        eprintln!(
            "{}: {what}: {} Jobs and bursts as they were; relayed brokers up and a job run in {:.1} s; {} container restarts among {pods} pods",
            self.env.ns,
            before.len(),
            up.as_secs_f64(),
            restarted - restarted_before
        );
        Ok(())
    }
}
