//! Bursting on real nodes, as a user does it: the quickstart (`examples/quickstart/README.md`)
//! command for command, then a second burst cluster joined and one instance of eight
//! brokers over three clusters, then the hub's leader deleted. Every cluster has real nodes
//! (`scripts/real-node.sh`: kubelet, containerd, kube-proxy); the hub and the spokes run
//! in-cluster from the controller image built offline, burst brokers reach the lead broker
//! through its real NodePort, and the spokes reach the hub through the federation Service's.
//!
//! `KUBECONFIG` is the root cluster, `SPOKE_KUBECONFIG` and `SPOKE2_KUBECONFIG` the burst
//! clusters, each with the application, view and controller images loaded (`scripts/e2e.sh`
//! starts them). A binary of its own: `flux-hub init` installs a hub that watches every
//! namespace, so it runs after the other real-node binaries.
//!
//! Then relayed bursts: the second burst cluster's node cut off from the root but for the
//! hub's federation port; a direct burst there reported unreachable, a relayed one joining
//! and running jobs through a hub failover, a spoke restart and 30 s without the root's
//! API server, and scaled 2 -> 0 -> 2 -> 0; then its lead's pod deleted, which ends the
//! instance, as the status says; then deleted, leaving no relay Service behind.

mod support;

use std::path::Path;
use std::time::Instant;

use anyhow::{Context as _, Result, ensure};
use flux_e2e::images;
use flux_shared::api::MiniCluster;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::{Value, json};
use support::{Isolation, Probe, TestEnv, internal_ip, node_ip, secs};

const README: &str = "examples/quickstart/README.md";
const HUB_NAMESPACE: &str = "flux-operator-system";
/// Where the quickstart keeps what it writes (git-ignored).
const STATE: &str = ".quickstart";

/// The commands of the quickstart's kind section, as a user types them: comments dropped,
/// continued lines joined, and the group of commands under a comment marked `(Docker)` or
/// `(cloud)` left out (the harness does what they do: clusters, kubeconfigs, images).
fn quickstart_commands(readme: &str) -> Result<Vec<String>> {
    let section = readme
        .split("\n## kind")
        .nth(1)
        .context("the quickstart has no '## kind' section")?;
    let block = section
        .split("```sh")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .context("the kind section has no ```sh block")?;
    let mut commands = Vec::new();
    let (mut skipping, mut current) = (false, String::new());
    for line in block.lines() {
        let line = line.trim();
        if line.is_empty() {
            // A blank line ends a group of commands (and its marking).
            skipping = false;
            continue;
        }
        if line.starts_with('#') {
            skipping |= line.contains("(Docker)") || line.contains("(cloud)");
            continue;
        }
        let (text, continued) = match line.strip_suffix('\\') {
            Some(head) => (head.trim_end(), true),
            None => (line, false),
        };
        current.push_str(text);
        current.push(' ');
        if !continued {
            if !skipping {
                commands.push(current.trim().to_string());
            }
            current.clear();
        }
    }
    Ok(commands)
}

/// `text` with `from` replaced by `to`, failing when `from` is not there: the quickstart
/// changed and the harness must follow.
fn substitute(text: &str, from: &str, to: &str) -> Result<String> {
    ensure!(
        text.contains(from),
        "the quickstart no longer has {from:?} (update the harness): {text}"
    );
    Ok(text.replace(from, to))
}

/// `export NAME=VALUE` of a quickstart command, evaluated by bash in `dir` as the shell
/// would: (NAME, value), for the commands after it.
async fn exported(dir: &Path, command: &str) -> Result<Option<(String, String)>> {
    let Some((name, _)) = command
        .strip_prefix("export ")
        .and_then(|rest| rest.split_once('='))
    else {
        return Ok(None);
    };
    let out = tokio::process::Command::new("bash")
        .args([
            "-euo",
            "pipefail",
            "-c",
            &format!("{command}; printf '%s' \"${name}\""),
        ])
        .current_dir(dir)
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(Some((name.to_string(), String::from_utf8(out.stdout)?)))
}

/// Runs one quickstart command with bash in `dir`, `flux-hub` first on the PATH, no
/// KUBECONFIG (every command names its cluster) and what earlier commands exported; its
/// stdout, or an error with both streams.
async fn shell(
    dir: &Path,
    hub: &Path,
    exports: &[(String, String)],
    command: &str,
) -> Result<String> {
    let bin = hub.parent().context("flux-hub has a directory")?;
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = tokio::time::timeout(
        secs(300),
        tokio::process::Command::new("bash")
            .args(["-euo", "pipefail", "-c", command])
            .current_dir(dir)
            .env("PATH", path)
            .envs(exports.iter().map(|(k, v)| (k, v)))
            .env_remove("KUBECONFIG")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .with_context(|| format!("timed out: {command}"))??;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    ensure!(
        out.status.success(),
        "{command}\nfailed ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(stdout)
}

/// The hub pod holding the leader lease.
async fn leader(client: &kube::Client) -> Result<Option<String>> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), HUB_NAMESPACE);
    Ok(leases
        .get_opt("flux-hub")
        .await?
        .and_then(|l| l.spec?.holder_identity))
}

/// `flux-hub status -o json` with the admin certificate `join` issued.
async fn hub_status(dir: &Path, hub: &Path, url: &str) -> Result<Value> {
    let certs = dir.join(STATE).join("certs");
    let out = tokio::process::Command::new(hub)
        .args(["status", "--hub", url, "-o", "json", "--ca"])
        .arg(certs.join("ca.crt"))
        .arg("--cert")
        .arg(certs.join("admin-flux-hub-join.crt"))
        .arg("--key")
        .arg(certs.join("admin-flux-hub-join.key"))
        .current_dir(dir)
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "flux-hub status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The phase and ready brokers of every burst of `ns/name` in a status document.
fn bursts_of(status: &Value, ns: &str, name: &str) -> Vec<(String, String, i64, bool)> {
    status["miniClusters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["namespace"] == ns && m["name"] == name)
        .flat_map(|m| m["bursts"].as_array().cloned().unwrap_or_default())
        .map(|b| {
            (
                b["name"].as_str().unwrap_or_default().to_string(),
                b["phase"].as_str().unwrap_or_default().to_string(),
                b["brokersReady"].as_i64().unwrap_or(0),
                b["spokeConnected"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

/// The lead broker pod of `name` in the test namespace.
async fn lead_pod(env: &TestEnv, name: &str) -> Result<String> {
    env.api::<Pod>()
        .list(&ListParams::default().labels(&format!(
            "job-name={name},batch.kubernetes.io/job-completion-index=0"
        )))
        .await?
        .items
        .into_iter()
        .find_map(|p| p.metadata.name)
        .with_context(|| format!("no lead broker pod of {name}"))
}

const UP_NODES: &str = "flux resource list -s up -no '{nnodes}'";

#[tokio::test]
#[ignore = "needs three clusters with real nodes: KUBECONFIG, SPOKE_KUBECONFIG, SPOKE2_KUBECONFIG (scripts/e2e.sh on the testbed)"]
async fn the_quickstart_then_eight_brokers_over_three_real_clusters_survive_a_hub_failover() {
    support::run("real-burst", false, async |env: &TestEnv| {
        let burst = support::spoke_cluster_from("SPOKE_KUBECONFIG", "the quickstart's burst cluster").await;
        let burst2 = support::spoke_cluster_from("SPOKE2_KUBECONFIG", "a second burst cluster").await;
        let hub = tokio::task::spawn_blocking(support::hub_binary).await??;
        let root = support::workspace_root();

        // What the quickstart's (Docker) lines make: .quickstart/ with the clusters'
        // kubeconfigs, ROOT_IP, the images in the nodes (scripts/e2e.sh loaded them), and
        // the MiniCluster with images that exist offline.
        let dir = support::log_file(&format!("{}-quickstart", env.ns))?;
        let _ = std::fs::remove_dir_all(&dir);
        let state = dir.join(STATE);
        std::fs::create_dir_all(dir.join("examples/quickstart"))?;
        std::fs::create_dir_all(&state)?;
        let kubeconfig = std::env::var("KUBECONFIG").context("KUBECONFIG")?;
        std::fs::copy(&kubeconfig, state.join("root.kubeconfig"))?;
        std::fs::copy(&burst.kubeconfig, state.join("burst.kubeconfig"))?;
        std::fs::copy(&burst2.kubeconfig, state.join("burst2.kubeconfig"))?;
        let manifest = std::fs::read_to_string(root.join("examples/quickstart/bursting-quickstart.yaml"))?;
        let manifest = substitute(
            &manifest,
            "image: ubuntu:noble",
            &format!("image: {}:bookworm", images::APP_IMAGE),
        )?;
        let manifest = substitute(
            &manifest,
            "\n  flux:\n",
            &format!("\n  flux:\n    container: {{image: \"{}:bookworm\"}}\n", images::VIEW_IMAGE),
        )?;
        std::fs::write(dir.join("examples/quickstart/bursting-quickstart.yaml"), manifest)?;
        let root_ip = node_ip(&env.client).await?;
        let image = format!("{}:e2e", images::CONTROLLER_IMAGE);
        let mut exports = vec![("ROOT_IP".to_string(), root_ip.clone())];

        // The quickstart, command for command.
        let commands = quickstart_commands(&std::fs::read_to_string(root.join(README))?)?;
        let started = Instant::now();
        let mut endpoint: Option<String> = None;
        for command in &commands {
            let mut command = command.clone();
            if command.contains("flux-hub:dev") {
                command = substitute(&command, "flux-hub:dev", &image)?;
            }
            eprintln!("{}: $ {command}", env.ns);
            if let Some(export) = exported(&dir, &command).await? {
                exports.push(export);
                continue;
            }
            // The burst's readiness reaches the hub, then the MiniCluster's status, with the
            // spoke's next report: as the quickstart says, a user runs these again.
            let shows_running = |out: &str| {
                if command.starts_with("flux-hub status") {
                    out.lines().any(|l| l.contains("quickstart-burst") && l.contains("Running"))
                } else {
                    out.lines().any(|l| l.starts_with("quickstart ") && l.contains(" 1/1 "))
                }
            };
            let out = if command.starts_with("flux-hub status") || command.contains(" get minicluster ") {
                env.eventually("the burst to show Running", secs(60), async || {
                    let out = shell(&dir, &hub, &exports, &command).await?;
                    Ok(if shows_running(&out) { Probe::Done(out) } else { Probe::Waiting(out) })
                })
                .await?
            } else {
                shell(&dir, &hub, &exports, &command).await?
            };
            eprint!("{out}");
            if command.starts_with("flux-hub init") {
                endpoint = out
                    .split_whitespace()
                    .skip_while(|w| *w != "dial")
                    .nth(1)
                    .map(|u| u.trim_end_matches(';').to_string());
                let url = endpoint.as_deref().context("init printed no endpoint")?;
                ensure!(
                    url.starts_with(&format!("https://{root_ip}:")),
                    "init prints the root node's address and the federation NodePort: {url}"
                );
            }
            if command.contains(" exec ") {
                let mut hosts: Vec<&str> = out.lines().map(str::trim).collect();
                hosts.sort_unstable();
                ensure!(
                    hosts == ["quickstart-0", "quickstart-1", "quickstart-burst-0", "quickstart-burst-1"],
                    "the job ran on all four hosts, two of them the burst's: {out}"
                );
            }
            if command.starts_with("flux-hub burst scale") {
                ensure!(
                    out.contains("size 2 -> 0"),
                    "the admin context may scale: {out}"
                );
            }
        }
        ensure!(
            commands.iter().any(|c| c.contains(" exec ")) && endpoint.is_some(),
            "the quickstart installs the hub and runs a job: {commands:#?}"
        );
        eprintln!(
            "{}: the quickstart ran as written in {:?}; the job ran on the burst's brokers",
            env.ns,
            started.elapsed()
        );
        let url = endpoint.context("endpoint")?;

        // The burst clusters' owners admit this test's namespace too: `burst` joins again
        // with a policy file (only the policy changes), and a second burst cluster joins
        // the default way, `--allow-namespace` (its namespaces, where the relayed bursts
        // run below, are what join makes of that); one instance of eight brokers over the
        // three.
        std::fs::write(
            dir.join("spoke-policy.yaml"),
            format!(
                "namespaces:\n- name: hpc\n- name: {}\n  podSecurity: baseline\nmaxBrokers: 8\n",
                env.ns
            ),
        )?;
        let admit = [
            ("burst", "burst.kubeconfig", "--policy spoke-policy.yaml".to_string()),
            ("burst2", "burst2.kubeconfig", format!("--allow-namespace hpc --allow-namespace {}", env.ns)),
        ];
        for (spoke, kubeconfig, policy) in admit {
            shell(
                &dir,
                &hub,
                &exports,
                &format!(
                    "flux-hub join {spoke} --kubeconfig {STATE}/{kubeconfig} --certs {STATE}/certs --hub {url} --image {image} {policy}"
                ),
            )
            .await?;
        }
        // An admin that may scale (join's own is read-only).
        shell(&dir, &hub, &exports, &format!("flux-hub certs --out {STATE}/certs --admin e2e-ops")).await?;
        const NAME: &str = "eight";
        env.apply_minicluster(&json!({
            "apiVersion": "flux-framework.org/v1alpha2",
            "kind": "MiniCluster",
            "metadata": {"name": NAME},
            "spec": {
                "size": 4,
                "interactive": true,
                "flux": {
                    "container": {"image": format!("{}:bookworm", images::VIEW_IMAGE)},
                    "bursting": {"clusters": [
                        {"name": "eight-b", "cluster": "burst", "size": 2},
                        {"name": "eight-c", "cluster": "burst2", "size": 2},
                    ]},
                },
                "containers": [{"image": format!("{}:bookworm", images::APP_IMAGE)}],
            },
        }))
        .await?;
        let started = Instant::now();
        let lead = env
            .eventually("the lead broker pod", secs(120), async || {
                Ok(match lead_pod(env, NAME).await {
                    Ok(p) => Probe::Done(p),
                    Err(e) => Probe::Waiting(format!("{e:#}")),
                })
            })
            .await?;
        if let Err(e) = support::flux_in(env, &lead, NAME, UP_NODES, "eight brokers up", |o| o.trim() == "8").await {
            // What the bursts were doing, in the error itself: CI shows its first lines.
            let why = bursts_seen(env, NAME, &[("burst", &burst.client), ("burst2", &burst2.client)]).await;
            return Err(e.context(why));
        }
        eprintln!("{}: 8 brokers over three clusters online after {:?}", env.ns, started.elapsed());
        let hosts = support::flux_in(env, &lead, NAME, "flux run -N 8 hostname | sort", "a job on all eight", |_| true).await?;
        let hosts: Vec<&str> = hosts.lines().map(str::trim).collect();
        ensure!(
            hosts == ["eight-0", "eight-1", "eight-2", "eight-3", "eight-b-0", "eight-b-1", "eight-c-0", "eight-c-1"],
            "one job ran on the root's four brokers and both bursts' two: {hosts:?}"
        );
        // The burst brokers dialled the lead broker at the root node's address and the lead
        // Service's NodePort: a real NodePort through kube-proxy.
        let mc = env.api::<MiniCluster>().get(NAME).await?;
        let lead_endpoint = mc.status.as_ref().and_then(|s| s.lead_broker.clone()).context("a lead broker endpoint")?;
        // The root cluster has two nodes: the address is the InternalIP of the one the lead
        // broker's pod runs on.
        let lead_node = lead_endpoint.node.clone().context("the lead broker's node")?;
        let internal = internal_ip(&Api::<Node>::all(env.client.clone()).get(&lead_node).await?);
        ensure!(
            internal.as_deref() == Some(lead_endpoint.address.as_str())
                && (30000..=32767).contains(&lead_endpoint.port),
            "the bursts dial the lead node's NodePort ({lead_node} at {internal:?}): {lead_endpoint:?}"
        );

        // The hub's leader goes: the other replica leads, both spokes come back to it, the
        // instance keeps its eight brokers, and a scale-down sent to the new leader runs.
        let failover = Instant::now();
        let first = fail_over(env, &dir, &hub, &url, NAME, 2).await?;
        eprintln!("{}: hub leader {first} deleted; the spokes are back and the bursts Running after {:?}", env.ns, failover.elapsed());
        let up = support::flux_in(env, &lead, NAME, UP_NODES, "the instance still has eight brokers", |_| true).await?;
        ensure!(up.trim() == "8", "nothing lost in the failover: {up} brokers up");
        shell(
            &dir,
            &hub,
            &exports,
            &format!(
                "flux-hub burst scale {}/{NAME} eight-c 1 --hub {url} --ca {STATE}/certs/ca.crt --cert {STATE}/certs/admin-e2e-ops.crt --key {STATE}/certs/admin-e2e-ops.key",
                env.ns
            ),
        )
        .await?;
        support::flux_in(env, &lead, NAME, UP_NODES, "seven brokers after the burst shrank", |o| o.trim() == "7").await?;
        let burst2_pods: Api<Pod> = Api::namespaced(burst2.client.clone(), &env.ns);
        let left = env
            .eventually("one broker pod left in the second burst", secs(120), async || {
                let live: Vec<String> = burst2_pods
                    .list(&ListParams::default().labels("job-name=eight-c"))
                    .await?
                    .items
                    .into_iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .filter_map(|p| p.metadata.name)
                    .collect();
                Ok(if live.len() == 1 {
                    Probe::Done(live)
                } else {
                    Probe::Waiting(format!("{live:?}"))
                })
            })
            .await?;
        ensure!(
            left.iter().all(|p| p.starts_with("eight-c-0-")),
            "the burst in the second cluster keeps its index 0: {left:?}"
        );

        // Relayed: the second burst cluster's node (and its pods) now reach the root's
        // nodes and pods only on the hub's federation port. A relayed burst there joins
        // an instance through its spoke's connection to the hub alone.
        let federation_port = url
            .trim_end_matches('/')
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .context("the federation port")?;
        let _isolated = Isolation::of(&burst2.client, &env.client, federation_port).await?;
        // A burst there held to the direct path (`relay: false`; left unset, the hub would
        // switch it to the relay, as real_node_recovery.rs tests) cannot dial the lead: its
        // spoke says so.
        const DIRECT: &str = "direct";
        env.apply_minicluster(&json!({
            "apiVersion": "flux-framework.org/v1alpha2",
            "kind": "MiniCluster",
            "metadata": {"name": DIRECT},
            "spec": {
                "size": 1,
                "interactive": true,
                "flux": {
                    "container": {"image": format!("{}:bookworm", images::VIEW_IMAGE)},
                    "bursting": {"clusters": [{"name": "direct-c", "cluster": "burst2", "size": 1, "relay": false}]},
                },
                "containers": [{"image": format!("{}:bookworm", images::APP_IMAGE)}],
            },
        }))
        .await?;
        const RELAYED: &str = "relayed";
        env.apply_minicluster(&json!({
            "apiVersion": "flux-framework.org/v1alpha2",
            "kind": "MiniCluster",
            "metadata": {"name": RELAYED},
            "spec": {
                "size": 2,
                "interactive": true,
                "flux": {
                    "container": {"image": format!("{}:bookworm", images::VIEW_IMAGE)},
                    "bursting": {"clusters": [
                        {"name": "relayed-c", "cluster": "burst2", "size": 2, "relay": true},
                    ]},
                },
                "containers": [{"image": format!("{}:bookworm", images::APP_IMAGE)}],
            },
        }))
        .await?;
        let started = Instant::now();
        let lead = env
            .eventually("the relayed instance's lead broker pod", secs(120), async || {
                Ok(match lead_pod(env, RELAYED).await {
                    Ok(p) => Probe::Done(p),
                    Err(e) => Probe::Waiting(format!("{e:#}")),
                })
            })
            .await?;
        if let Err(e) = support::flux_in(env, &lead, RELAYED, UP_NODES, "four brokers up, two relayed", |o| o.trim() == "4").await {
            let why = bursts_seen(env, RELAYED, &[("burst2", &burst2.client)]).await;
            return Err(e.context(why));
        }
        eprintln!("{}: 4 brokers, 2 of them relayed, online after {:?}", env.ns, started.elapsed());
        let hosts = support::flux_in(env, &lead, RELAYED, "flux run -N 4 hostname | sort", "a job on all four", |_| true).await?;
        let hosts: Vec<&str> = hosts.lines().map(str::trim).collect();
        ensure!(
            hosts == ["relayed-0", "relayed-1", "relayed-c-0", "relayed-c-1"],
            "one job ran on the root's two brokers and the relayed burst's two: {hosts:?}"
        );
        let mc = env.api::<MiniCluster>().get(RELAYED).await?;
        let paths: Vec<Option<String>> = mc.status.iter().flat_map(|s| &s.bursts).map(|b| b.path.clone()).collect();
        ensure!(paths == [Some("Relay".to_string())], "status says the burst is relayed: {paths:?}");
        let lead_service = env.api::<Service>().get(&format!("{RELAYED}-lead")).await?;
        let lead_type = lead_service.spec.and_then(|s| s.type_);
        ensure!(lead_type.as_deref() == Some("ClusterIP"), "no NodePort for relayed bursts alone: {lead_type:?}");
        // From a relayed broker's pod, the lead NodePort of the eight-broker instance (which
        // still has a direct burst) does not answer: only the relay got the brokers in.
        let direct = format!("{}/{}", lead_endpoint.address, lead_endpoint.port);
        let probe = in_burst_pod(
            &burst2,
            &env.ns,
            "relayed-c",
            RELAYED,
            &format!("timeout 5 bash -c 'exec 3<>/dev/tcp/{direct}' 2>/dev/null && echo open || echo closed"),
        )
        .await?;
        ensure!(probe.trim() == "closed", "the burst node reaches the root's NodePort {direct}: {probe}");
        // The direct burst's failure is in its status and an Event, with the address and
        // port tried and what to do.
        let said = env
            .eventually("the direct burst's unreachable lead in its status", secs(120), async || {
                let mc = env.api::<MiniCluster>().get(DIRECT).await?;
                let status = mc.status.unwrap_or_default();
                let lead = status.lead_broker.map(|l| format!("{}:{}", l.address, l.port));
                Ok(match (status.bursts.first(), lead) {
                    (Some(b), Some(lead))
                        if b.reason.as_deref() == Some("LeadUnreachable")
                            && b.message.as_deref().is_some_and(|m| m.contains(&lead) && m.contains("relay: true")) =>
                    {
                        Probe::Done(b.message.clone().unwrap_or_default())
                    }
                    (b, lead) => Probe::Waiting(format!("lead {lead:?}, burst {b:?}")),
                })
            })
            .await?;
        eprintln!("{}: the direct burst says: {said}", env.ns);
        let events = env.events_about("MiniCluster", DIRECT).await?;
        ensure!(
            events.iter().any(|e| e.reason.as_deref() == Some("LeadUnreachable") && e.type_.as_deref() == Some("Warning")),
            "a Warning Event LeadUnreachable: {:?}",
            events.iter().map(support::describe_event).collect::<Vec<_>>()
        );

        // The hub's leader goes, and every relayed connection with it: the brokers
        // reconnect through the new leader.
        let failover = Instant::now();
        let first = fail_over(env, &dir, &hub, &url, RELAYED, 1).await?;
        support::flux_in(env, &lead, RELAYED, "flux run -N 4 hostname | sort", "a job on all four after the failover", |o| o.lines().count() == 4).await?;
        eprintln!("{}: hub leader {first} deleted; the relayed brokers ran a job again after {:?}", env.ns, failover.elapsed());
        // The spoke restarts: a new pod with a new address and listener port, which the
        // relay Service follows; the brokers reconnect through it.
        let spokes: Api<Pod> = Api::namespaced(burst2.client.clone(), "flux-spoke-system");
        let spoke_pods = ListParams::default().labels("app.kubernetes.io/name=flux-spoke");
        let old: Vec<String> = spokes.list(&spoke_pods).await?.items.into_iter().filter_map(|p| p.metadata.name).collect();
        ensure!(!old.is_empty(), "a spoke pod in the second burst cluster");
        for pod in &old {
            spokes.delete(pod, &DeleteParams::default()).await?;
        }
        let restarted = Instant::now();
        env.eventually("the old spoke pod gone and a new one running", secs(120), async || {
            let now = spokes.list(&spoke_pods).await?.items;
            let fresh = now.iter().filter(|p| {
                p.metadata.name.as_ref().is_some_and(|n| !old.contains(n))
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            });
            Ok(if fresh.count() == 1 && now.len() == 1 {
                Probe::Done(())
            } else {
                Probe::Waiting(support::pod_summary(&now))
            })
        })
        .await?;
        support::flux_in(env, &lead, RELAYED, "flux run -N 4 hostname | sort", "a job on all four after the spoke's restart", |o| o.lines().count() == 4).await?;
        eprintln!("{}: the spoke restarted; the relayed brokers ran a job again after {:?}", env.ns, restarted.elapsed());

        // The root's API server stops answering for 30 s (a control plane restart): the
        // hub cannot renew its Lease and exits, and every relayed connection with it. Once
        // the API server is back a hub leads again and the relayed brokers reconnect into
        // the instance they were in: the same four hosts, a job on all of them.
        let hubs: Api<Pod> = Api::namespaced(env.client.clone(), HUB_NAMESPACE);
        let hub_pods = ListParams::default().labels("app.kubernetes.io/name=flux-hub");
        let restarts = async || -> Result<i32> {
            Ok(hubs.list(&hub_pods).await?.items.iter()
                .flat_map(|p| p.status.iter().flat_map(|s| s.container_statuses.iter().flatten()))
                .map(|c| c.restart_count)
                .sum())
        };
        let restarts_before = restarts().await?;
        let outage = Instant::now();
        {
            let _frozen = ApiServerFrozen::of(&env.client).await?;
            tokio::time::sleep(secs(30)).await;
        }
        let thawed = Instant::now();
        let again = support::flux_in(env, &lead, RELAYED, "flux run -N 4 hostname | sort", "a job on all four after the API server's outage", |o| o.lines().count() == 4).await?;
        let again: Vec<&str> = again.lines().map(str::trim).collect();
        ensure!(again == hosts, "the same four hosts after the outage: {again:?}");
        let ran_after = thawed.elapsed();
        // The kubelet reports the restarts it made in the outage once it reaches the API
        // server again.
        env.eventually("the hub's restart in the outage reported", secs(120), async || {
            let now = restarts().await?;
            Ok(if now > restarts_before { Probe::Done(()) } else { Probe::Waiting(format!("restarts {restarts_before} -> {now}")) })
        })
        .await?;
        eprintln!("{}: the root's API server was out for 30 s and the hub stepped down; the relayed brokers ran a job again {ran_after:?} after it was back ({:?} after it went)", env.ns, outage.elapsed());
        // Admins reach the hub again once the new leader has labelled itself the federation
        // endpoint (a restarted replica first says it is not).
        env.eventually("the hub answers an admin again", secs(120), async || {
            Ok(match hub_status(&dir, &hub, &url).await {
                Ok(_) => Probe::Done(()),
                Err(e) => Probe::Waiting(format!("{e:#}")),
            })
        })
        .await?;
        eprintln!("{}: the hub answered an admin {:?} after the API server was back", env.ns, thawed.elapsed());
        // Through the failover, the spoke's restart and the outage, the relayed burst's lead
        // was never reported unreachable: no such Event on its MiniCluster.
        let events = env.events_about("MiniCluster", RELAYED).await?;
        ensure!(
            !events.iter().any(|e| e.reason.as_deref() == Some("LeadUnreachable")),
            "no LeadUnreachable Event for the healthy relayed burst: {:?}",
            events.iter().map(support::describe_event).collect::<Vec<_>>()
        );

        // A stranger: a pod of the second burst cluster's `default` namespace keeps
        // connecting to the relayed burst's relay Service. A burst broker pod is deleted
        // meanwhile: its replacement rejoins, and no connection of the stranger's reaches
        // the hub (the spoke closes them first: the hub refuses none as one too many).
        stranger_is_kept_out(env, &burst2.client, &lead, RELAYED, "relayed-c").await?;

        // The relayed burst goes to 0, back to 2 (new brokers through new relayed
        // connections), and to 0 again.
        for (size, up) in [(0, "2"), (2, "4"), (0, "2")] {
            shell(
                &dir,
                &hub,
                &exports,
                &format!(
                    "flux-hub burst scale {}/{RELAYED} relayed-c {size} --hub {url} --ca {STATE}/certs/ca.crt --cert {STATE}/certs/admin-e2e-ops.crt --key {STATE}/certs/admin-e2e-ops.key",
                    env.ns
                ),
            )
            .await?;
            let what = format!("{up} brokers up with the relayed burst at {size}");
            support::flux_in(env, &lead, RELAYED, UP_NODES, &what, |o| o.trim() == up).await?;
        }

        // The lead broker's pod goes: its broker shuts the instance down, the worker exits
        // and its Job index completes, and the Job starts a new lead that leads a new
        // instance without it. The status and a Warning Event say so, and what to do.
        env.api::<Pod>().delete(&lead, &DeleteParams::default()).await?;
        let said = env
            .eventually("the status says the instance ended", secs(180), async || {
                let mc = env.api::<MiniCluster>().get(RELAYED).await?;
                let ready = mc.status.unwrap_or_default().conditions.into_iter().find(|c| c.type_ == "Ready");
                Ok(match ready {
                    Some(c) if c.reason == "InstanceEnded" => Probe::Done(c.message),
                    other => Probe::Waiting(format!("{other:?}")),
                })
            })
            .await?;
        ensure!(said.contains("Job indexes 1 exited") && said.contains("re-create the MiniCluster"), "{said}");
        let events = env.events_about("MiniCluster", RELAYED).await?;
        ensure!(
            events.iter().any(|e| e.reason.as_deref() == Some("InstanceEnded") && e.type_.as_deref() == Some("Warning")),
            "a Warning Event InstanceEnded: {:?}",
            events.iter().map(support::describe_event).collect::<Vec<_>>()
        );
        eprintln!("{}: the lead's pod deleted; the status says: {said}", env.ns);

        // Deleted: nothing of the relay is left in the burst cluster, neither the burst's
        // relay Service nor its EndpointSlice (which the Service owns).
        env.api::<MiniCluster>().delete(RELAYED, &DeleteParams::default()).await?;
        let services: Api<Service> = Api::namespaced(burst2.client.clone(), &env.ns);
        let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> = Api::namespaced(burst2.client.clone(), &env.ns);
        let relay_service = "relayed-c-relay";
        env.eventually("the relay Service and its EndpointSlice gone", secs(120), async || {
            let service = services.get_opt(relay_service).await?;
            let left: Vec<String> = slices
                .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={relay_service}")))
                .await?
                .items
                .into_iter()
                .filter_map(|s| s.metadata.name)
                .collect();
            Ok(if service.is_none() && left.is_empty() {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("Service {}, EndpointSlices {left:?}", service.is_some()))
            })
        })
        .await?;
        Ok(())
    })
    .await;
}

/// One line per burst of MiniCluster `name` as its status shows it, and per burst pod in
/// each spoke cluster of `spokes` (phase, restarts, the last lines of its log): what a
/// failed wait for burst brokers says.
async fn bursts_seen(env: &TestEnv, name: &str, spokes: &[(&str, &kube::Client)]) -> String {
    let mut out = String::from("what the bursts were doing:");
    match env.api::<MiniCluster>().get(name).await {
        Ok(mc) => {
            let status = mc.status.unwrap_or_default();
            out += &format!("\n  lead endpoint {:?}", status.lead_broker);
            for b in &status.bursts {
                out += &format!(
                    "\n  burst {} in {}: {} {}/{} ready, reason {:?}: {}",
                    b.name,
                    b.cluster,
                    b.phase,
                    b.brokers_ready,
                    b.size,
                    b.reason,
                    b.message.as_deref().unwrap_or_default()
                );
            }
        }
        Err(e) => out += &format!("\n  MiniCluster {name}: {e}"),
    }
    for (spoke, client) in spokes {
        let pods: Api<Pod> = Api::namespaced((*client).clone(), &env.ns);
        let list = match pods.list(&ListParams::default()).await {
            Ok(l) => l.items,
            Err(e) => {
                out += &format!("\n  pods in {spoke}: {e}");
                continue;
            }
        };
        if list.is_empty() {
            out += &format!("\n  no pod in {spoke}");
        }
        for pod in list {
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let status = pod.status.unwrap_or_default();
            let restarts: i32 = status
                .container_statuses
                .iter()
                .flatten()
                .map(|c| c.restart_count)
                .sum();
            let log = pods
                .logs(
                    &pod_name,
                    &kube::api::LogParams {
                        // The broker's: it comes after the view container.
                        container: pod
                            .spec
                            .as_ref()
                            .and_then(|s| s.containers.last())
                            .map(|c| c.name.clone()),
                        tail_lines: Some(4),
                        ..Default::default()
                    },
                )
                .await
                .unwrap_or_else(|e| format!("(no log: {e})"));
            out += &format!(
                "\n  pod {pod_name} in {spoke}: {} on {:?}, {restarts} restarts, log: {}",
                status.phase.unwrap_or_default(),
                pod.spec.and_then(|s| s.node_name),
                log.trim().replace('\n', " | ")
            );
        }
    }
    out
}

/// Deletes the hub pod holding the leader lease, then waits until another replica leads
/// and serves `flux-hub status` with the `bursts` bursts of `name` Running, each with its
/// 2 brokers ready and its spoke connected. Returns the deleted leader.
async fn fail_over(
    env: &TestEnv,
    dir: &Path,
    hub: &Path,
    url: &str,
    name: &str,
    bursts: usize,
) -> Result<String> {
    let first = leader(&env.client).await?.context("a hub leader")?;
    let hub_pods: Api<Pod> = Api::namespaced(env.client.clone(), HUB_NAMESPACE);
    hub_pods.delete(&first, &DeleteParams::default()).await?;
    env.eventually(
        "another hub replica leading, the spokes connected, the bursts Running",
        secs(120),
        async || {
            let now = leader(&env.client).await?;
            let status = match hub_status(dir, hub, url).await {
                Ok(s) => s,
                Err(e) => return Ok(Probe::Waiting(format!("leader {now:?}: {e:#}"))),
            };
            let seen = bursts_of(&status, &env.ns, name);
            let fine = seen.len() == bursts
                && seen.iter().all(|(_, phase, ready, connected)| {
                    phase == "Running" && *ready == 2 && *connected
                });
            Ok(match now {
                Some(l) if l != first && fine => Probe::Done(()),
                other => Probe::Waiting(format!("leader {other:?}, bursts {seen:?}")),
            })
        },
    )
    .await?;
    Ok(first)
}

/// The root cluster's kube-apiserver stopped (SIGSTOP: connections hang, as behind a
/// dead load balancer) while this lives; continued when dropped.
struct ApiServerFrozen {
    pid: String,
}

impl ApiServerFrozen {
    /// Stops the API server of the testbed cluster whose real node the cluster of `client`
    /// has (named NAME-real-INDEX by `real-node.sh`; its PID in the testbed's
    /// run/NAME/kube-apiserver.pid).
    async fn of(client: &kube::Client) -> Result<ApiServerFrozen> {
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default().labels("testbed/real-node=true"))
            .await?;
        let name = nodes
            .items
            .first()
            .and_then(|n| n.metadata.name.clone())
            .context("a real node in the root cluster")?;
        let (cluster, _) = name
            .rsplit_once("-real-")
            .context("a real-node.sh node name")?;
        let file = format!("/opt/testbed/k8s/run/{cluster}/kube-apiserver.pid");
        let pid = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {file}"))?
            .split_whitespace()
            .next()
            .context("a PID")?
            .to_string();
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        ensure!(
            comm.trim() == "kube-apiserver",
            "{file} names {pid}, which is {comm:?}"
        );
        let status = tokio::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .await?;
        ensure!(status.success(), "kill -STOP {pid}: {status}");
        Ok(ApiServerFrozen { pid })
    }
}

impl Drop for ApiServerFrozen {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.pid])
            .status();
    }
}

/// Runs `script` with bash in container `container` of burst `job`'s index-0 pod in the
/// spoke cluster `spoke`, namespace `ns` (kubectl exec).
async fn in_burst_pod(
    spoke: &support::SpokeCluster,
    ns: &str,
    job: &str,
    container: &str,
    script: &str,
) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(spoke.client.clone(), ns);
    let pod = pods
        .list(&ListParams::default().labels(&format!(
            "job-name={job},batch.kubernetes.io/job-completion-index=0"
        )))
        .await?
        .items
        .into_iter()
        .find_map(|p| p.metadata.name)
        .with_context(|| format!("no pod of burst {job}"))?;
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&spoke.kubeconfig)
        .args([
            "-n", ns, "exec", &pod, "-c", container, "--", "bash", "-c", script,
        ])
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "kubectl exec {pod}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).to_string())
}

#[test]
fn the_quickstart_parses_into_the_commands_a_user_types() {
    let readme = std::fs::read_to_string(support::workspace_root().join(README))
        .expect("the quickstart README");
    let commands = quickstart_commands(&readme).expect("the kind section");
    let heads: Vec<&str> = commands
        .iter()
        .map(|c| c.split_whitespace().take(2).collect::<Vec<_>>())
        .map(|w| {
            if w.first() == Some(&"flux-hub") {
                w[1]
            } else {
                w[0]
            }
        })
        .collect();
    assert_eq!(
        heads,
        [
            "export", "init", "join", "kubectl", "kubectl", "kubectl", "kubectl", "status",
            "kubectl", "burst"
        ],
        "{commands:#?}"
    );
    assert!(
        commands
            .iter()
            .all(|c| !c.contains("kind ") && !c.contains("docker ") && !c.starts_with("rm ")),
        "the (Docker) groups (set-up and teardown) are left out: {commands:#?}"
    );
}

/// What the hub pods' `/metrics` say of `flux_hub_relay_refused_total{spoke,reason}`,
/// summed over the spokes and the replicas (read through the API server's pod proxy).
async fn hub_relay_refused(env: &TestEnv, reason: &str) -> Result<u64> {
    let hubs: Api<Pod> = Api::namespaced(env.client.clone(), HUB_NAMESPACE);
    let pods = hubs
        .list(&ListParams::default().labels("app.kubernetes.io/name=flux-hub"))
        .await?;
    let wanted = format!("reason=\"{reason}\"}} ");
    let mut total = 0;
    for pod in pods.items.iter().filter_map(|p| p.metadata.name.as_deref()) {
        let request = http::Request::get(format!(
            "/api/v1/namespaces/{HUB_NAMESPACE}/pods/{pod}:8080/proxy/metrics"
        ))
        .body(Vec::new())?;
        // A replica restarting does not answer: it has refused nothing since.
        let Ok(text) = env.client.request_text(request).await else {
            continue;
        };
        total += text
            .lines()
            .filter(|l| l.starts_with("flux_hub_relay_refused_total{"))
            .filter_map(|l| l.split_once(&wanted).map(|(_, v)| v))
            .filter_map(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
            .sum::<u64>();
    }
    Ok(total)
}

/// A pod of `default` in the burst cluster of `burst` keeps opening connections to burst
/// `burst_name`'s relay Service (16 every half second, each held 20 s, for 90 s: at most
/// 2,880 attempts and about 640 open at once). Meanwhile a broker pod of the burst is
/// deleted: its replacement rejoins (all four brokers up again), the spoke says it refused
/// the stranger, and the hub refused no connection as one too many for the burst.
async fn stranger_is_kept_out(
    env: &TestEnv,
    burst: &kube::Client,
    lead: &str,
    mc: &str,
    burst_name: &str,
) -> Result<()> {
    let relay: Service = Api::namespaced(burst.clone(), &env.ns)
        .get(&format!("{burst_name}-relay"))
        .await
        .context("the relay Service")?;
    let spec = relay.spec.context("the relay Service's spec")?;
    let address = spec.cluster_ip.context("the relay Service's address")?;
    let port = spec
        .ports
        .and_then(|p| p.first().map(|p| p.port))
        .context("the relay Service's port")?;
    let refused_before = hub_relay_refused(env, "too_many").await?;
    let script = format!(
        "end=$((SECONDS+90)); n=0; \
         while [ $SECONDS -lt $end ] && [ $n -lt 2880 ]; do \
           for i in $(seq 16); do (exec 3<>/dev/tcp/{address}/{port} && sleep 20) 2>/dev/null & done; \
           n=$((n+16)); sleep 0.5; \
         done; echo attempted $n; wait"
    );
    let strangers: Api<Pod> = Api::namespaced(burst.clone(), "default");
    let name = format!("stranger-{}", env.ns.rsplit('-').next().unwrap_or("x"));
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "stranger",
                "image": format!("{}:bookworm", images::APP_IMAGE),
                "imagePullPolicy": "IfNotPresent",
                "command": ["bash", "-c", script],
            }],
        },
    }))?;
    strangers.create(&Default::default(), &pod).await?;
    env.eventually("the stranger's pod running", secs(120), async || {
        let p = strangers.get(&name).await?;
        Ok(match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Running") => Probe::Done(()),
            other => Probe::Waiting(format!("{other:?}")),
        })
    })
    .await?;
    tokio::time::sleep(secs(10)).await;
    // A broker of the burst goes; its Job starts a replacement, which must get in.
    let brokers: Api<Pod> = Api::namespaced(burst.clone(), &env.ns);
    let victim = brokers
        .list(&ListParams::default().labels(&format!(
            "job-name={burst_name},batch.kubernetes.io/job-completion-index=1"
        )))
        .await?
        .items
        .into_iter()
        .find_map(|p| p.metadata.name)
        .context("a broker pod of the relayed burst")?;
    brokers.delete(&victim, &DeleteParams::default()).await?;
    let deleted = Instant::now();
    // The lead counts the deleted broker down, then its replacement up.
    support::flux_in(
        env,
        lead,
        mc,
        UP_NODES,
        "the deleted broker counted down",
        |o| o.trim() != "4",
    )
    .await?;
    support::flux_in(
        env,
        lead,
        mc,
        UP_NODES,
        "four brokers up again, the replacement in",
        |o| o.trim() == "4",
    )
    .await?;
    let rejoined = deleted.elapsed();
    let spokes: Api<Pod> = Api::namespaced(burst.clone(), "flux-spoke-system");
    let spoke = spokes
        .list(&ListParams::default().labels("app.kubernetes.io/name=flux-spoke"))
        .await?
        .items
        .into_iter()
        .find_map(|p| p.metadata.name)
        .context("the spoke's pod")?;
    let log = spokes.logs(&spoke, &Default::default()).await?;
    ensure!(
        log.contains("not from one of the burst's broker pods"),
        "the spoke says it refused the stranger's connections"
    );
    let refused_after = hub_relay_refused(env, "too_many").await?;
    ensure!(
        refused_after == refused_before,
        "no stranger's connection reached the hub: it refused {} as one too many",
        refused_after - refused_before
    );
    let _ = strangers.delete(&name, &DeleteParams::default()).await;
    eprintln!(
        "{}: a stranger kept connecting to the relay; a deleted broker's replacement rejoined after {rejoined:?} and the hub saw none of the stranger's connections",
        env.ns
    );
    Ok(())
}
