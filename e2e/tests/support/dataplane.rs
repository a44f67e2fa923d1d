//! The data plane with real Flux: what the controllers wrote into an API server, read back
//! and run by the testbed's `flux/run-rendered.sh` (it plays kubelet, Job controller, DNS
//! and kube-proxy for one Indexed Job and its Services, ConfigMaps, Secrets and Pods, with
//! a real flux-core in Linux-namespace pods).
//!
//! Hollow nodes (label `testbed/hollow-node=true`) report pods Running and Ready but run no
//! process, so on them this is where pod-level evidence comes from. `FLUX_E2E_TESTBED`
//! names the testbed folder (`scripts/e2e.sh` sets it); `run-rendered.sh` needs root.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, Service};
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt as _};
use serde::Serialize;
use serde_json::Value;
use tokio::process::{Child, Command};

use super::{Probe, TestEnv, log_dir, secs};

/// The node label of the testbed's hollow nodes.
pub const HOLLOW_NODE_LABEL: &str = "testbed/hollow-node";

/// Whether any node of the cluster is a hollow node (its pods never run a process).
pub async fn hollow_nodes(client: &Client) -> Result<bool> {
    let nodes: Api<Node> = Api::all(client.clone());
    let hollow = nodes
        .list(&ListParams::default().labels(&format!("{HOLLOW_NODE_LABEL}=true")))
        .await
        .context("listing hollow nodes")?;
    Ok(!hollow.items.is_empty())
}

/// The testbed folder, from `FLUX_E2E_TESTBED`. Data-plane tests fail without it: they are
/// ignored unless asked for, and `scripts/e2e.sh` sets it.
pub fn testbed() -> Result<PathBuf> {
    let dir = std::env::var_os("FLUX_E2E_TESTBED")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .context(
            "FLUX_E2E_TESTBED is not set: data-plane checks run real Flux with the testbed's flux/run-rendered.sh (scripts/e2e.sh sets it)",
        )?;
    let script = dir.join("flux/run-rendered.sh");
    ensure!(
        script.is_file(),
        "FLUX_E2E_TESTBED={} has no flux/run-rendered.sh",
        dir.display()
    );
    Ok(dir)
}

fn run_rendered() -> Result<PathBuf> {
    Ok(testbed()?.join("flux/run-rendered.sh"))
}

/// Where `run-rendered.sh` keeps each run's state and logs.
fn state_dir() -> PathBuf {
    std::env::var_os("RUN_RENDERED_STATE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/testbed/flux/run"))
}

/// The objects of namespace `ns` that `run-rendered.sh` runs, as the API server has them:
/// Jobs, Services, ConfigMaps, Secrets and standalone Pods (not the Job's own pods),
/// without `status` and `managedFields`, as one multi-document YAML file at `path`.
pub async fn export(client: &Client, ns: &str, path: &Path) -> Result<usize> {
    export_edited(client, ns, path, |_| Ok(())).await
}

/// [`export`], with `edit` applied to every object first (to break something on purpose).
pub async fn export_edited(
    client: &Client,
    ns: &str,
    path: &Path,
    edit: impl Fn(&mut Value) -> Result<()>,
) -> Result<usize> {
    let mut docs = Vec::new();
    docs.extend(listed::<Job>(client, ns).await?);
    docs.extend(listed::<Service>(client, ns).await?);
    docs.extend(listed::<ConfigMap>(client, ns).await?);
    docs.extend(listed::<Secret>(client, ns).await?);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for pod in pods.list(&ListParams::default()).await?.items {
        let owned_by_job = pod.owner_references().iter().any(|o| o.kind == "Job");
        if !owned_by_job {
            docs.push(cleaned(&pod)?);
        }
    }
    let mut text = String::new();
    for doc in &mut docs {
        edit(doc)?;
        text.push_str("---\n");
        text.push_str(&serde_yaml_ng::to_string(doc)?);
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(docs.len())
}

async fn listed<K>(client: &Client, ns: &str) -> Result<Vec<Value>>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Serialize,
    <K as Resource>::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    api.list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(cleaned)
        .collect()
}

/// An object as `kubectl get -o yaml` would show it, minus what only the API server reads.
fn cleaned<K: Serialize>(obj: &K) -> Result<Value> {
    let mut v = serde_json::to_value(obj)?;
    if let Some(map) = v.as_object_mut() {
        map.remove("status");
    }
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    Ok(v)
}

/// Subnets `10.ID.0.0/16` of the runs of one test binary: given explicitly, so runs that
/// start at the same moment never pick the same one (binaries run one after another).
fn next_subnet() -> u8 {
    static NEXT: AtomicU8 = AtomicU8::new(0);
    110 + NEXT.fetch_add(1, Ordering::Relaxed) % 80
}

/// One `run-rendered.sh` run: a child process, its output in a log file. Dropping it stops
/// the run and tears its pods down (logs stay).
pub struct FluxRun {
    /// The run's name (`--cluster`): state and logs under the testbed's run folder.
    pub name: String,
    child: Option<Child>,
    output: PathBuf,
    /// The address this run serves NodePorts on (`--nodeport-ip`), held while it runs.
    _address: Option<tokio::sync::OwnedMutexGuard<()>>,
}

/// Waits until no other run of this test binary serves NodePorts on `address` (a root
/// node's address, which the tests running at once share), and holds it.
async fn own_address(address: &str) -> tokio::sync::OwnedMutexGuard<()> {
    static OWNED: std::sync::Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<()>>>> =
        std::sync::Mutex::new(BTreeMap::new());
    let lock = OWNED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry(address.to_string())
        .or_default()
        .clone();
    lock.lock_owned().await
}

/// How a [`FluxRun`] ended.
#[derive(Debug)]
pub struct Outcome {
    /// The run's name.
    pub run: String,
    /// Exit status 0: every Job pod succeeded.
    pub success: bool,
    /// Everything `run-rendered.sh` printed.
    pub output: String,
    /// Pod phases from its summary (`pod NAME: PHASE`).
    pub pods: BTreeMap<String, String>,
}

impl FluxRun {
    /// Starts `run-rendered.sh --cluster NAME --subnet-id ... ARGS FILES`. With
    /// `--nodeport-ip ADDRESS` it first waits for that address to be free (another test's
    /// run may serve it).
    pub async fn start(name: &str, files: &[&Path], args: &[String]) -> Result<FluxRun> {
        let address = match args.iter().position(|a| a == "--nodeport-ip") {
            Some(i) => Some(
                own_address(
                    args.get(i + 1)
                        .context("--nodeport-ip without an address")?,
                )
                .await,
            ),
            None => None,
        };
        let script = run_rendered()?;
        // A run of the same name left by a killed test run would refuse to start.
        down(&script, name);
        let output = log_dir()?.join(format!("{name}-run-rendered.log"));
        let log = std::fs::File::create(&output)
            .with_context(|| format!("creating {}", output.display()))?;
        let mut cmd = Command::new(&script);
        cmd.arg("--cluster")
            .arg(name)
            .arg("--subnet-id")
            .arg(next_subnet().to_string())
            .args(args)
            .args(files)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", script.display()))?;
        eprintln!(
            "data plane: run-rendered.sh {name} started (output {})",
            output.display()
        );
        Ok(FluxRun {
            name: name.to_string(),
            child: Some(child),
            output,
            _address: address,
        })
    }

    /// What the run printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_default()
    }

    /// Waits until the run's output has a line containing `needle`; fails if the run ends
    /// first or `timeout` passes.
    pub async fn wait_for_output(&mut self, needle: &str, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if self.output().contains(needle) {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!(
                    "run-rendered.sh {} ended ({status}) before printing {needle:?}:\n{}",
                    self.name,
                    self.output()
                );
            }
            if start.elapsed() > timeout {
                bail!(
                    "run-rendered.sh {} did not print {needle:?} within {timeout:?}:\n{}",
                    self.name,
                    self.output()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits for the run to end (its own `--timeout` bounds it; `timeout` is a backstop).
    pub async fn finish(mut self, timeout: Duration) -> Result<Outcome> {
        let child = self
            .child
            .as_mut()
            .context("the run was already finished")?;
        let status = match tokio::time::timeout(timeout, child.wait()).await {
            Ok(status) => status?,
            Err(_) => bail!(
                "run-rendered.sh {} still runs after {timeout:?}:\n{}",
                self.name,
                self.output()
            ),
        };
        self.child = None;
        let output = self.output();
        Ok(Outcome {
            run: self.name.clone(),
            success: status.success(),
            pods: pod_phases(&output),
            output,
        })
    }

    /// Submits `flux submit ARGS` on the broker of `pod`: the job id. An instance whose
    /// overlay is up may still be loading its modules (`No service matching
    /// job-ingest.submit`), so a failed submission is retried for a while.
    pub async fn flux_submit(&self, pod: &str, container: &str, args: &str) -> Result<String> {
        let start = std::time::Instant::now();
        loop {
            match self
                .flux_exec(pod, container, &format!("flux submit {args}"))
                .await
            {
                Ok(out) => {
                    let id = out.trim().to_string();
                    ensure!(
                        !id.is_empty() && !id.contains(char::is_whitespace),
                        "`flux submit {args}` did not print a job id: {out:?}"
                    );
                    return Ok(id);
                }
                Err(e) if start.elapsed() < secs(30) => {
                    eprintln!("data plane: `flux submit {args}` on {pod}: {e:#}; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Runs `script` with bash in a running container of `pod` (like `kubectl exec`),
    /// with the Flux view's environment and `FLUX_URI` of the local broker.
    pub async fn flux_exec(&self, pod: &str, container: &str, script: &str) -> Result<String> {
        let mut cmd = Command::new(run_rendered()?);
        cmd.args(["--exec", &self.name, pod, "-c", container, "--"])
            .args(["bash", "-c", &in_flux_env(script)])
            .stdin(Stdio::null());
        output_of(cmd, &format!("run-rendered.sh --exec {} {pod}", self.name)).await
    }

    /// Runs `argv` as it is in a running container of `pod` (like the kubelet runs an exec
    /// hook): its exit code (`None` when killed) and its output, whatever the exit code.
    pub async fn exec_argv(
        &self,
        pod: &str,
        container: &str,
        argv: &[String],
        limit: Duration,
    ) -> Result<(Option<i32>, String)> {
        let mut cmd = Command::new(run_rendered()?);
        cmd.args(["--exec", &self.name, pod, "-c", container, "--"])
            .args(argv)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(limit, cmd.output())
            .await
            .with_context(|| format!("{argv:?} in {pod} still runs after {limit:?}"))?
            .with_context(|| format!("starting run-rendered.sh --exec {} {pod}", self.name))?;
        Ok((
            out.status.code(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ))
    }

    /// A TCP relay on 127.0.0.1 to `port` inside `pod` (its own loopback): each
    /// connection is piped through `run-rendered.sh --exec ... socat` into the pod, as
    /// `kubectl port-forward` would. Its address; it serves until the test ends.
    pub async fn relay(&self, pod: &str, container: &str, port: u16) -> Result<String> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?.to_string();
        let (script, run, pod, container) = (
            run_rendered()?,
            self.name.clone(),
            pod.to_string(),
            container.to_string(),
        );
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let mut cmd = Command::new(&script);
                cmd.args(["--exec", &run, &pod, "-c", &container, "--"])
                    .args(["socat", "-", &format!("TCP:127.0.0.1:{port}")])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .kill_on_drop(true);
                let Ok(mut child) = cmd.spawn() else { continue };
                tokio::spawn(async move {
                    use tokio::io::AsyncWriteExt as _;
                    let (Some(mut stdin), Some(mut stdout)) =
                        (child.stdin.take(), child.stdout.take())
                    else {
                        return;
                    };
                    let (mut read, mut write) = socket.into_split();
                    // The request goes in; the answer comes back until the pod side closes,
                    // then the caller sees the end of it.
                    let up = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut read, &mut stdin).await;
                    });
                    let _ = tokio::io::copy(&mut stdout, &mut write).await;
                    let _ = write.shutdown().await;
                    up.abort();
                    let _ = child.wait().await;
                });
            }
        });
        Ok(address)
    }

    /// The log of one container (`<pod hostname>-<container>.log`).
    pub fn log(&self, pod: &str, container: &str) -> Result<String> {
        log_of(&self.name, pod, container)
    }
}

impl Drop for FluxRun {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
        }
        if let Ok(script) = run_rendered() {
            down(&script, &self.name);
        }
    }
}

/// `script` prefixed with what puts it in a broker container's Flux environment: the
/// view's PATH and `FLUX_URI` of the local broker.
pub fn in_flux_env(script: &str) -> String {
    format!(". /mnt/flux/flux-view.sh && export FLUX_URI=\"$fluxsocket\" && {script}")
}

/// Runs `cmd` (at most 30 s): its stdout and stderr, or an error naming `what` with them
/// when it fails.
pub async fn output_of(mut cmd: Command, what: &str) -> Result<String> {
    let out = tokio::time::timeout(secs(30), cmd.output())
        .await
        .with_context(|| format!("{what} timed out"))?
        .with_context(|| format!("starting {what}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        out.status.success(),
        "{what} failed ({}): {text}",
        out.status
    );
    Ok(text)
}

/// An [`export_edited`] edit: the Job's pods whose completion index makes `skip` (a shell
/// test on `$JOB_COMPLETION_INDEX`) false start `seconds` late, held back by an init
/// container `name` put first (as when a Job controller creates those pods later).
pub fn start_late(o: &mut Value, name: &str, skip: &str, seconds: u32) -> Result<()> {
    if o["kind"] == "Job" {
        let pod = &mut o["spec"]["template"]["spec"];
        ensure!(pod.is_object(), "the Job has no pod template");
        // With the view container beside the brokers, the pod has no init container.
        if pod["initContainers"].is_null() {
            pod["initContainers"] = serde_json::json!([]);
        }
        let inits = pod["initContainers"]
            .as_array_mut()
            .context("the Job's initContainers is not a list")?;
        inits.insert(
            0,
            serde_json::json!({
                "name": name,
                "image": "rockylinux:9",
                "command": ["sh", "-c", format!("{skip} || sleep {seconds}")],
            }),
        );
    }
    Ok(())
}

/// Tears a run down; a no-op when none of that name runs.
fn down(script: &Path, name: &str) {
    let _ = std::process::Command::new(script)
        .args(["--down", name])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The log of one container of a run (kept after the run ends).
pub fn log_of(run: &str, pod: &str, container: &str) -> Result<String> {
    let path = state_dir()
        .join(run)
        .join("logs")
        .join(format!("{pod}-{container}.log"));
    std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// `pod NAME: PHASE` lines of a run's summary.
fn pod_phases(output: &str) -> BTreeMap<String, String> {
    output
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pod "))
        .filter_map(|l| l.split_once(": "))
        .map(|(pod, phase)| (pod.to_string(), phase.trim().to_string()))
        .collect()
}

impl Outcome {
    /// The log of one container of the run.
    pub fn log(&self, pod: &str, container: &str) -> Result<String> {
        log_of(&self.run, pod, container)
    }

    /// Fails unless the run passed and exactly `pods` ran, each Succeeded.
    pub fn all_succeeded(&self, pods: &[String]) -> Result<()> {
        let expected: BTreeMap<String, String> = pods
            .iter()
            .map(|p| (p.clone(), "Succeeded".to_string()))
            .collect();
        ensure!(
            self.success && self.pods == expected,
            "expected pods {pods:?} all Succeeded and RESULT: PASS; got {:?} (exit success: {}):\n{}",
            self.pods,
            self.success,
            self.output
        );
        Ok(())
    }
}

/// The pods `<job>-0` .. `<job>-<n-1>` of an Indexed Job (their hostnames in a run).
pub fn indexed(job: &str, n: i32) -> Vec<String> {
    (0..n).map(|i| format!("{job}-{i}")).collect()
}

/// Polls `flux overlay status` on the lead broker of `run` until `done` holds for
/// `hosts`; how long that took. On timeout the error shows the last answer and the output
/// of `run` and of `other` (e.g. a burst's run).
pub async fn overlay_wait(
    run: &FluxRun,
    lead: &str,
    container: &str,
    hosts: &[String],
    other: Option<&FluxRun>,
    done: fn(&str, &[String]) -> bool,
) -> Result<Duration> {
    let start = std::time::Instant::now();
    let mut last = String::new();
    while start.elapsed() < secs(120) {
        match run
            .flux_exec(lead, container, "flux overlay status --no-pretty")
            .await
        {
            Ok(text) if done(&text, hosts) => return Ok(start.elapsed()),
            Ok(text) => last = text,
            Err(e) => last = format!("{e:#}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    bail!(
        "the brokers {hosts:?} never all came up in the lead broker's overlay within {:?}; last `flux overlay status`:\n{last}\nrun {}:\n{}\nother run:\n{}",
        secs(120),
        run.name,
        run.output(),
        other.map(FluxRun::output).unwrap_or_default()
    )
}

/// Whether `flux overlay status --no-pretty` shows the broker of every host in `hosts`
/// up: `full`, or `partial` (some of its children offline, as the lead broker's before
/// the burst joins).
pub fn overlay_up(text: &str, hosts: &[String]) -> bool {
    hosts.iter().all(|h| {
        text.lines()
            .any(|l| l.contains(&format!("{h}:")) && (l.contains("full") || l.contains("partial")))
    })
}

/// Whether `flux overlay status --no-pretty` shows every host in `hosts` as `full`.
pub fn overlay_full(text: &str, hosts: &[String]) -> bool {
    hosts.iter().all(|h| {
        text.lines()
            .any(|l| l.contains(&format!("{h}:")) && l.contains("full"))
    })
}

impl TestEnv {
    /// Waits until the hub has written every object of MiniCluster `name` (Job, headless
    /// Service, `<name>-flux-config`, `<name>-curve`), exports the namespace's objects and
    /// starts a run of them named `run`.
    pub async fn run_flux(&self, name: &str, run: &str, args: &[String]) -> Result<FluxRun> {
        self.wait_for_children(name).await?;
        let file = log_dir()?.join(format!("{run}-objects.yaml"));
        let n = export(&self.client, &self.ns, &file).await?;
        eprintln!(
            "{}: {n} objects of namespace {} exported to {}",
            self.ns,
            self.ns,
            file.display()
        );
        FluxRun::start(run, &[&file], args).await
    }

    /// Waits for the four objects every MiniCluster gets.
    pub async fn wait_for_children(&self, name: &str) -> Result<()> {
        let jobs = self.api::<Job>();
        let services = self.api::<Service>();
        let config_maps = self.api::<ConfigMap>();
        let secrets = self.api::<Secret>();
        let config = format!("{name}-flux-config");
        let curve = format!("{name}-curve");
        self.eventually(
            &format!("the Job, Service, ConfigMap and Secret of MiniCluster {name}"),
            secs(60),
            async || {
                let mut missing = Vec::new();
                if jobs.get_opt(name).await?.is_none() {
                    missing.push(format!("Job {name}"));
                }
                if services.get_opt(name).await?.is_none() {
                    missing.push(format!("Service {name}"));
                }
                if config_maps.get_opt(&config).await?.is_none() {
                    missing.push(format!("ConfigMap {config}"));
                }
                if secrets.get_opt(&curve).await?.is_none() {
                    missing.push(format!("Secret {curve}"));
                }
                Ok(if missing.is_empty() {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!("missing: {}", missing.join(", ")))
                })
            },
        )
        .await
    }
}

/// A short run name unique to a test: `e2e-<prefix>-<the namespace's random suffix>`
/// (`scripts/e2e.sh` tears down `e2e-*` runs a killed test left).
pub fn run_name(ns: &str, prefix: &str) -> String {
    let suffix = ns.rsplit('-').next().unwrap_or("x");
    format!("e2e-{prefix}-{suffix}")
}
