//! Benchmark driver for `scripts/bench-apiserver.sh`: flux-hub, a bare client and the
//! reference Go flux-operator on a real kube-apiserver (the cluster of `KUBECONFIG`).
//!
//! Subcommands (the script runs them in order, one JSON file each, then `report`):
//!
//! - `phase --kind bare|hub|reference`: waits for a quiet API server, starts the controller
//!   (cluster-wide, like the Go operator; killed at the end), one warm-up MiniCluster (not
//!   measured), then `--n` MiniClusters of size 2 created one at a time (each waits for its
//!   Job), then `--burst` created at once. The creation window closes once the Job
//!   controller has made every Pod, the controller has labelled them and is quiet (+3 s);
//!   an idle window of `--idle` seconds follows. Latency is client side: from sending the
//!   create (the first of the four objects for the bare client) to the Job's first event on
//!   a metadata watch of Jobs. The controller's CPU time (`/proc/PID/stat` utime+stime) and
//!   memory (`/proc/PID/status` VmRSS, VmHWM), the API server's and etcd's CPU time, and
//!   the API server's `apiserver_request_total` counters are read between the steps.
//! - `scale --kind hub|reference`: `--count` MiniClusters created with no controller
//!   running (`--concurrency` in flight), then the controller started (cold): time until
//!   every Job exists, memory sampled every 50 ms; once every Pod exists and is labelled
//!   and the controller is quiet, it is killed and started again with every child present
//!   (warm): time until `/readyz` answers 200, peak RSS, and what it asked the API server.
//! - `report --dir DIR`: reads the phases' JSON, subtracts the bare client and the API
//!   server's background traffic, prints a markdown table next to the targets and writes
//!   every figure to `DIR/results.json`.
//!
//! `harness = false`: without a subcommand (e.g. `cargo bench` or `cargo test
//! --all-targets`) it only says how to run it.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use clap::{Args, Parser, Subcommand, ValueEnum};
use flux_shared::curve::CurveCert;
use flux_shared::plan::Plan;
use flux_shared::render::{self, Object};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

#[derive(Parser)]
#[command(
    name = "apiserver",
    about = "flux-hub / bare client / Go operator on a real API server"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// One-at-a-time and at-once creation, CPU, memory, API requests and an idle window.
    Phase(PhaseArgs),
    /// Many MiniClusters created before the controller starts; cold and warm start.
    Scale(ScaleArgs),
    /// Print the table and write results.json from the phases' JSON files.
    Report(ReportArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    /// Creates the four objects a MiniCluster turns into itself; no controller.
    Bare,
    /// flux-hub.
    Hub,
    /// The reference Go flux-operator.
    Reference,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Bare => "bare client",
            Kind::Hub => "flux-hub",
            Kind::Reference => "Go operator",
        }
    }
}

#[derive(Args, Clone)]
struct Common {
    /// Namespace to create the MiniClusters (or the bare objects) in; created if missing.
    #[arg(long)]
    namespace: String,
    /// The MiniCluster every benchmark object is made from (its size is set to --size).
    #[arg(long, default_value = "examples/hello-world.yaml")]
    example: PathBuf,
    /// Brokers per MiniCluster.
    #[arg(long, default_value_t = 2)]
    size: i64,
    /// The flux-hub binary.
    #[arg(long, default_value = "target/release/flux-hub")]
    hub_bin: PathBuf,
    /// The reference Go operator's manager binary.
    #[arg(long)]
    reference_bin: Option<PathBuf>,
    /// Where the controllers' logs go.
    #[arg(long, default_value = "target/bench-apiserver/logs")]
    log_dir: PathBuf,
    /// Written with the PID of a running controller (so the script can kill it if the
    /// driver itself is killed).
    #[arg(long)]
    pid_file: Option<PathBuf>,
    /// PIDs of the API server and etcd, whose CPU time is measured too (repeatable).
    #[arg(long)]
    server_pid: Vec<u32>,
    /// The JSON file to write.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
struct PhaseArgs {
    #[arg(long, value_enum)]
    kind: Kind,
    /// MiniClusters created one at a time.
    #[arg(long, default_value_t = 40)]
    n: usize,
    /// MiniClusters created at once, after those.
    #[arg(long, default_value_t = 20)]
    burst: usize,
    /// Seconds of the idle window after creation.
    #[arg(long, default_value_t = 30)]
    idle: u64,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct ScaleArgs {
    #[arg(long, value_enum, default_value = "hub")]
    kind: Kind,
    /// MiniClusters created before the controller starts.
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// Creates in flight.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Longest wait for every Job after the cold start, in seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct ReportArgs {
    /// The folder with bare.json, hub.json, [reference.json], [scale-hub.json],
    /// [scale-reference.json].
    #[arg(long, default_value = "target/bench-apiserver")]
    dir: PathBuf,
}

fn main() -> std::process::ExitCode {
    // `cargo bench` appends --bench; `cargo test --benches` passes nothing.
    let args = std::env::args().filter(|a| a != "--bench");
    let cli = Cli::parse_from(args);
    let Some(cmd) = cli.command else {
        println!(
            "apiserver: needs a cluster; run scripts/bench-apiserver.sh (or this binary with \
             `phase`, `scale`, `report`, see --help). Nothing run."
        );
        return std::process::ExitCode::SUCCESS;
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("apiserver: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        match cmd {
            Cmd::Phase(a) => phase(a).await,
            Cmd::Scale(a) => scale(a).await,
            Cmd::Report(a) => report(&a),
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("apiserver: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------
// The objects

/// The example MiniCluster as JSON, with the benchmark's size.
fn load_example(path: &Path, size: i64) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut v: Value = serde_yaml_ng::from_str(&text)
        .with_context(|| format!("{}: not one YAML document", path.display()))?;
    ensure!(
        v["kind"] == "MiniCluster",
        "{}: not a MiniCluster",
        path.display()
    );
    v["spec"]["size"] = json!(size);
    Ok(v)
}

fn named(example: &Value, ns: &str, name: &str) -> Value {
    let mut v = example.clone();
    v["metadata"] = json!({"name": name, "namespace": ns});
    v
}

fn minicluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("flux-framework.org", "v1alpha2", "MiniCluster"),
        "miniclusters",
    )
}

/// What the bare client creates for one MiniCluster: the renderer's ConfigMap, Secret,
/// headless Service and Job (no owner: there is no MiniCluster object).
fn bare_objects(example: &Value, ns: &str, name: &str) -> Result<Vec<Object>> {
    let mc: flux_shared::api::MiniCluster = serde_json::from_value(named(example, ns, name))
        .context("the example does not parse as flux-hub's MiniCluster")?;
    let plan = Plan::new(&mc).map_err(|e| anyhow!("the example is invalid: {e:?}"))?;
    let cert = CurveCert::generate(&plan.name).to_zcert();
    let objects = render::render(&plan, &plan.local_role(), &cert)
        .context("the renderer produced nothing for the root")?;
    let kinds: Vec<String> = objects
        .iter()
        .map(|o| o.describe().split('/').next().unwrap_or("").to_string())
        .collect();
    ensure!(
        kinds == ["ConfigMap", "Secret", "Service", "Job"],
        "expected a ConfigMap, a Secret, a Service and a Job, the example renders {kinds:?}"
    );
    Ok(objects)
}

/// Creates one benchmark MiniCluster: its four objects (bare) or the MiniCluster.
#[derive(Clone)]
struct Creator {
    client: Client,
    ns: String,
    example: Arc<Value>,
    /// Pre-rendered objects by name (bare client only; rendering is not timed).
    bare: Option<Arc<HashMap<String, Vec<Object>>>>,
}

impl Creator {
    fn new(client: Client, ns: &str, example: Value, kind: Kind, names: &[String]) -> Result<Self> {
        let bare = if kind == Kind::Bare {
            let mut map = HashMap::new();
            for name in names {
                map.insert(name.clone(), bare_objects(&example, ns, name)?);
            }
            Some(Arc::new(map))
        } else {
            None
        };
        Ok(Creator {
            client,
            ns: ns.to_string(),
            example: Arc::new(example),
            bare,
        })
    }

    async fn create(&self, name: &str) -> Result<()> {
        let pp = PostParams::default();
        let Some(bare) = &self.bare else {
            let obj: DynamicObject = serde_json::from_value(named(&self.example, &self.ns, name))?;
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &self.ns, &minicluster_resource());
            api.create(&pp, &obj)
                .await
                .with_context(|| format!("creating MiniCluster {}/{name}", self.ns))?;
            return Ok(());
        };
        let objects = bare
            .get(name)
            .with_context(|| format!("{name} was not rendered"))?;
        let c = &self.client;
        let ns = self.ns.as_str();
        for o in objects {
            let what = o.describe();
            let r = match o {
                Object::ConfigMap(x) => Api::<ConfigMap>::namespaced(c.clone(), ns)
                    .create(&pp, x)
                    .await
                    .map(drop),
                Object::Secret(x) => Api::<Secret>::namespaced(c.clone(), ns)
                    .create(&pp, x)
                    .await
                    .map(drop),
                Object::Service(x) => Api::<Service>::namespaced(c.clone(), ns)
                    .create(&pp, x)
                    .await
                    .map(drop),
                Object::Job(x) => Api::<Job>::namespaced(c.clone(), ns)
                    .create(&pp, x)
                    .await
                    .map(drop),
                Object::Pod(_) => bail!("{what}: the bare client creates no Pods"),
            };
            r.with_context(|| format!("creating {what} in {ns}"))?;
        }
        Ok(())
    }
}

async fn ensure_namespace(client: &Client, ns: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {ns}")),
    }
}

// ---------------------------------------------------------------------------------------
// Jobs and Pods, as a watch sees them

/// One object of a watched kind.
#[derive(Clone, Copy)]
struct Entry {
    /// When the watch first showed it.
    first: Instant,
    /// Whether it carries the tracked label (Pods: `job-index`).
    labelled: bool,
}

/// The objects of one kind in one namespace, from a metadata watch.
struct Watched {
    what: &'static str,
    seen: Arc<Mutex<HashMap<String, Entry>>>,
    notify: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The label the MiniCluster docs promise on every broker pod (both controllers add it).
const JOB_INDEX: &str = "job-index";

impl Watched {
    /// Starts the watch (metadata only) and returns once its initial list is done. A
    /// watch runs from before a measured window to after it, so the API server counts its
    /// request outside every window.
    async fn start<K>(
        client: Client,
        ns: &str,
        what: &'static str,
        label: &'static str,
    ) -> Result<Watched>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        let seen = Arc::new(Mutex::new(HashMap::<String, Entry>::new()));
        let notify = Arc::new(Notify::new());
        let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
        let api: Api<PartialObjectMeta<K>> = Api::namespaced(client, ns);
        let task = {
            let seen = seen.clone();
            let notify = notify.clone();
            tokio::spawn(async move {
                let mut listed = Some(listed_tx);
                let mut stream =
                    std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
                while let Some(event) = stream.next().await {
                    let now = Instant::now();
                    match event {
                        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                            let labelled = o.labels().contains_key(label);
                            seen.lock()
                                .expect("watch lock")
                                .entry(o.name_any())
                                .or_insert(Entry {
                                    first: now,
                                    labelled,
                                })
                                .labelled |= labelled;
                            notify.notify_waiters();
                        }
                        Ok(watcher::Event::InitDone) => {
                            if let Some(tx) = listed.take() {
                                let _ = tx.send(());
                            }
                        }
                        Ok(_) => {}
                        Err(e) => eprintln!("apiserver: {what} watch: {e} (retrying)"),
                    }
                }
            })
        };
        tokio::time::timeout(Duration::from_secs(30), listed_rx)
            .await
            .with_context(|| format!("the {what} watch did not list within 30 s"))?
            .with_context(|| format!("the {what} watch ended"))?;
        Ok(Watched {
            what,
            seen,
            notify,
            task,
        })
    }

    /// Waits until `done` holds for what the watch has seen, returning its answer;
    /// fails at `deadline` with `describe`'s account.
    async fn wait_until<T>(
        &self,
        deadline: tokio::time::Instant,
        done: impl Fn(&HashMap<String, Entry>) -> Option<T>,
        describe: impl Fn(&HashMap<String, Entry>) -> String,
    ) -> Result<T> {
        loop {
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            {
                let seen = self.seen.lock().expect("watch lock");
                if let Some(t) = done(&seen) {
                    return Ok(t);
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let seen = self.seen.lock().expect("watch lock");
                bail!("timed out waiting: {}", describe(&seen));
            }
        }
    }

    /// When `name` was first seen; fails at `deadline`.
    async fn wait(&self, name: &str, deadline: tokio::time::Instant) -> Result<Instant> {
        let what = self.what;
        self.wait_until(
            deadline,
            |s| s.get(name).map(|e| e.first),
            |_| format!("no {what} {name}"),
        )
        .await
    }

    /// Waits until `n` objects whose names start with `prefix` exist (and, with
    /// `labelled`, carry the label); returns when the last of them was first seen.
    async fn wait_count(
        &self,
        prefix: &str,
        n: usize,
        labelled: bool,
        deadline: tokio::time::Instant,
    ) -> Result<Instant> {
        let what = self.what;
        let count = |s: &HashMap<String, Entry>| {
            let mut count = 0;
            let mut last = None;
            for (name, e) in s {
                if name.starts_with(prefix) && (!labelled || e.labelled) {
                    count += 1;
                    last = last.max(Some(e.first));
                }
            }
            (count, last)
        };
        self.wait_until(
            deadline,
            |s| match count(s) {
                (c, Some(last)) if c >= n => Some(last),
                _ => None,
            },
            |s| {
                let (c, _) = count(s);
                let l = if labelled { " labelled" } else { "" };
                format!("{c} of {n} {what}s {prefix}*{l}")
            },
        )
        .await
    }

    /// How many there are, and how many carry the label.
    fn count(&self) -> (usize, usize) {
        let seen = self.seen.lock().expect("watch lock");
        (seen.len(), seen.values().filter(|e| e.labelled).count())
    }
}

// ---------------------------------------------------------------------------------------
// The controller process

/// A controller started by the driver; killed (SIGKILL) when dropped.
struct Controller {
    kind: Kind,
    child: Child,
    pid: u32,
    probe: SocketAddr,
    log: PathBuf,
    pid_file: Option<PathBuf>,
    started: Instant,
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

impl Controller {
    fn spawn(kind: Kind, common: &Common, tag: &str) -> Result<Controller> {
        let probe = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
        let mut cmd = match kind {
            Kind::Bare => bail!("the bare client has no controller"),
            Kind::Hub => {
                ensure!(
                    common.hub_bin.is_file(),
                    "no flux-hub binary at {} (cargo build --release -p flux-hub)",
                    common.hub_bin.display()
                );
                let mut c = Command::new(&common.hub_bin);
                c.args(["run", "--metrics-addr", &probe.to_string()]);
                c
            }
            Kind::Reference => {
                let bin = common
                    .reference_bin
                    .as_ref()
                    .context("--reference-bin is needed for the Go operator")?;
                ensure!(bin.is_file(), "no reference manager at {}", bin.display());
                let mut c = Command::new(bin);
                c.args([
                    "--metrics-bind-address=127.0.0.1:0".to_string(),
                    format!("--health-probe-bind-address={probe}"),
                    "--leader-elect=false".to_string(),
                ]);
                c
            }
        };
        std::fs::create_dir_all(&common.log_dir)
            .with_context(|| format!("creating {}", common.log_dir.display()))?;
        let log = common.log_dir.join(format!("{tag}.log"));
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let started = Instant::now();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {}", kind.label()))?;
        let pid = child.id();
        if let Some(f) = &common.pid_file {
            std::fs::write(f, format!("{pid}\n"))
                .with_context(|| format!("writing {}", f.display()))?;
        }
        Ok(Controller {
            kind,
            child,
            pid,
            probe,
            log,
            pid_file: common.pid_file.clone(),
            started,
        })
    }

    /// Polls `/readyz` every `every` until it answers 200; returns the time since start.
    async fn wait_ready(&mut self, timeout: Duration, every: Duration) -> Result<Duration> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{} exited ({status}) before it was ready; log {}:\n{}",
                    self.kind.label(),
                    self.log.display(),
                    tail(&self.log, 30)
                );
            }
            if http_status(self.probe, "/readyz").await.ok() == Some(200) {
                return Ok(self.started.elapsed());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} not ready within {timeout:?}; log {}:\n{}",
                    self.kind.label(),
                    self.log.display(),
                    tail(&self.log, 30)
                );
            }
            tokio::time::sleep(every).await;
        }
    }

    /// Fails if the process has exited.
    fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{} exited ({status}); log {}:\n{}",
                self.kind.label(),
                self.log.display(),
                tail(&self.log, 30)
            );
        }
        Ok(())
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(f) = &self.pid_file {
            let _ = std::fs::remove_file(f);
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.kill();
    }
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `flux_hub_reconciles_total` from the hub's `/metrics` at `addr`.
async fn hub_reconciles(addr: SocketAddr) -> Result<f64> {
    let io = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
        let mut text = String::new();
        s.read_to_string(&mut text).await?;
        anyhow::Ok(text)
    };
    let text = tokio::time::timeout(Duration::from_secs(5), io).await??;
    text.lines()
        .find_map(|l| l.strip_prefix("flux_hub_reconciles_total "))
        .and_then(|v| v.trim().parse().ok())
        .context("no flux_hub_reconciles_total in the hub's /metrics")
}

/// The status code of `GET path` over HTTP/1.1, with short timeouts.
async fn http_status(addr: SocketAddr, path: &str) -> Result<u16> {
    let io = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
        let mut head = Vec::new();
        let mut buf = [0u8; 256];
        while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 4096 {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        anyhow::Ok(head)
    };
    let head = tokio::time::timeout(Duration::from_secs(2), io).await??;
    let head = String::from_utf8_lossy(&head);
    head.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("not an HTTP response: {head:?}"))
}

// ---------------------------------------------------------------------------------------
// /proc

fn clk_tck() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of the process (every thread, dead ones included), in clock ticks.
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // Fields after "pid (comm) ": state is field 3, utime 14, stime 15.
    let rest = stat
        .rsplit_once(") ")
        .map(|(_, r)| r)
        .context("malformed /proc/PID/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .context("malformed /proc/PID/stat")
    };
    Ok(get(11)? + get(12)?)
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
struct Mem {
    vm_rss_kib: u64,
    vm_hwm_kib: u64,
}

fn mem(pid: u32) -> Result<Mem> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let field = |key: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .with_context(|| format!("no {key} in /proc/{pid}/status"))
    };
    Ok(Mem {
        vm_rss_kib: field("VmRSS:")?,
        vm_hwm_kib: field("VmHWM:")?,
    })
}

// ---------------------------------------------------------------------------------------
// The API server's request counters

/// `apiserver_request_total` summed over code, scope and component, by
/// `VERB resource[.group][/subresource]`; non-resource requests (`/metrics`, `/healthz`,
/// discovery) are left out.
type Counts = BTreeMap<String, f64>;

/// One reading of the API server's request metrics.
struct Metrics {
    /// `apiserver_request_total`.
    counts: Counts,
    /// `apiserver_request_duration_seconds` sum and count, same keys.
    duration_sum: Counts,
    duration_count: Counts,
}

async fn request_counts(client: &Client) -> Result<Counts> {
    Ok(metrics(client).await?.counts)
}

async fn metrics(client: &Client) -> Result<Metrics> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client
        .request_text(req)
        .await
        .context("reading the API server's /metrics")?;
    let mut m = Metrics {
        counts: Counts::new(),
        duration_sum: Counts::new(),
        duration_count: Counts::new(),
    };
    for line in text.lines() {
        let (map, rest) = if let Some(r) = line.strip_prefix("apiserver_request_total{") {
            (&mut m.counts, r)
        } else if let Some(r) = line.strip_prefix("apiserver_request_duration_seconds_sum{") {
            (&mut m.duration_sum, r)
        } else if let Some(r) = line.strip_prefix("apiserver_request_duration_seconds_count{") {
            (&mut m.duration_count, r)
        } else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let labels = parse_labels(labels);
        let l = |k: &str| labels.get(k).map(String::as_str).unwrap_or("");
        if l("resource").is_empty() {
            continue;
        }
        let mut key = format!("{} {}", l("verb"), l("resource"));
        if !l("group").is_empty() {
            key = format!("{key}.{}", l("group"));
        }
        if !l("subresource").is_empty() {
            key = format!("{key}/{}", l("subresource"));
        }
        let value: f64 = value.trim().parse().unwrap_or(0.0);
        *map.entry(key).or_default() += value;
    }
    ensure!(
        !m.counts.is_empty(),
        "no apiserver_request_total in /metrics"
    );
    Ok(m)
}

/// Mean server-side duration (ms) and count of each kind of request between two
/// readings; watches (long-running) and leases left out.
fn durations(after: &Metrics, before: &Metrics) -> BTreeMap<String, (f64, f64)> {
    let count = delta(&after.duration_count, &before.duration_count);
    let sum = delta(&after.duration_sum, &before.duration_sum);
    count
        .into_iter()
        .filter(|(k, n)| {
            *n > 0.0 && !is_watch(k) && !is_background(k) && !k.starts_with("CONNECT ")
        })
        .map(|(k, n)| {
            let mean = sum.get(&k).copied().unwrap_or(0.0) / n * 1000.0;
            (k, (n, (mean * 100.0).round() / 100.0))
        })
        .collect()
}

fn parse_labels(s: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut rest = s;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(n);
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').trim().to_string(), value);
        rest = &after[end..];
    }
    out
}

fn delta(after: &Counts, before: &Counts) -> Counts {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v != 0.0)
        .collect()
}

/// Leader-election leases of the control plane's own components renew every few seconds:
/// background, never a MiniCluster's doing.
fn is_background(key: &str) -> bool {
    key.contains(" leases.coordination.k8s.io")
}

fn is_watch(key: &str) -> bool {
    key.starts_with("WATCH ")
}

// ---------------------------------------------------------------------------------------
// phase

#[derive(Serialize, Deserialize, Default)]
struct Window {
    secs: f64,
    /// Controller CPU time (utime + stime) in the window, ms.
    cpu_ms: Option<f64>,
    /// kube-apiserver + etcd CPU time in the window, ms.
    server_cpu_ms: Option<f64>,
    /// Request counter deltas in the window, by key.
    requests: Counts,
    /// (count, mean server-side duration in ms) of each kind of request in the window.
    #[serde(default)]
    durations_ms: BTreeMap<String, (f64, f64)>,
    /// Reconciles the controller ran in the window (flux-hub's own counter).
    #[serde(default)]
    reconciles: Option<f64>,
}

#[derive(Serialize, Deserialize)]
struct PhaseResult {
    kind: Kind,
    namespace: String,
    n: usize,
    burst: usize,
    size: i64,
    warmup: usize,
    /// Waiting for the API server to be quiet before starting, s.
    api_quiet_wait_secs: f64,
    /// Start → `/readyz` 200, ms.
    ready_ms: Option<f64>,
    /// Create → Job seen, one at a time, ms, in creation order.
    sequential_ms: Vec<f64>,
    /// All `burst` created at once: start → each Job seen, ms.
    burst_ms: Vec<f64>,
    /// Pods (and of them labelled `job-index`) when the creation window closed: the
    /// window waits for every Pod (and label) so that the idle window is idle.
    pods_at_settle: (usize, usize),
    /// From before the first measured create to 3 s after every Pod exists (and, with a
    /// controller, is labelled and the controller is quiet).
    create_window: Window,
    idle_window: Window,
    mem_after_sequential: Option<Mem>,
    mem_after_burst: Option<Mem>,
    mem_after_idle: Option<Mem>,
}

/// CPU ticks of several processes together (the API server and etcd).
fn ticks_of(pids: &[u32]) -> Result<Option<u64>> {
    if pids.is_empty() {
        return Ok(None);
    }
    let mut sum = 0;
    for pid in pids {
        sum += cpu_ticks(*pid)?;
    }
    Ok(Some(sum))
}

/// Waits until the API server has served no resource request (leases and watches aside)
/// for three consecutive seconds: a cluster that just started is still busy for a while.
async fn wait_api_quiet(client: &Client, cap: Duration) -> Result<f64> {
    let start = Instant::now();
    let busy = |c: &Counts| -> f64 {
        c.iter()
            .filter(|(k, _)| !is_background(k) && !is_watch(k))
            .map(|(_, v)| v)
            .sum()
    };
    let mut last = request_counts(client).await?;
    let mut quiet = 0;
    while start.elapsed() < cap {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = request_counts(client).await?;
        if busy(&delta(&now, &last)) == 0.0 {
            quiet += 1;
            if quiet >= 3 {
                return Ok(start.elapsed().as_secs_f64());
            }
        } else {
            quiet = 0;
        }
        last = now;
    }
    eprintln!("apiserver: warning: the API server is still busy after {cap:?}; measuring anyway");
    Ok(start.elapsed().as_secs_f64())
}

/// Waits until the control plane's own writes for what was created (`INDUCED`: Pods, Job
/// status, core Events, EndpointSlices) stopped for two consecutive seconds (at most `cap`).
async fn wait_induced_quiet(client: &Client, cap: Duration) -> Result<()> {
    let start = Instant::now();
    let induced = |c: &Counts| -> f64 {
        c.iter()
            .filter(|(k, _)| INDUCED.contains(&k.as_str()))
            .map(|(_, v)| v)
            .sum()
    };
    let mut last = induced(&request_counts(client).await?);
    let mut quiet = 0;
    while start.elapsed() < cap {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = induced(&request_counts(client).await?);
        if now == last {
            quiet += 1;
            if quiet >= 2 {
                return Ok(());
            }
        } else {
            quiet = 0;
        }
        last = now;
    }
    eprintln!("apiserver: warning: the control plane still writes after {cap:?}; measuring anyway");
    Ok(())
}

/// Waits (bounded, warning only) until `want` Pods exist and, with `labelled`, carry the
/// `job-index` label.
async fn wait_pods(pods: &Watched, want: usize, labelled: bool, secs: u64) -> (usize, usize) {
    if let Err(e) = pods.wait_count("", want, false, deadline(secs)).await {
        eprintln!("apiserver: warning: {e}");
    } else if labelled && let Err(e) = pods.wait_count("", want, true, deadline(secs / 2)).await {
        eprintln!("apiserver: warning: {e}");
    }
    pods.count()
}

async fn phase(a: PhaseArgs) -> Result<()> {
    let common = &a.common;
    let client = Client::try_default()
        .await
        .context("no cluster: set KUBECONFIG")?;
    let ns = common.namespace.as_str();
    ensure_namespace(&client, ns).await?;
    let example = load_example(&common.example, common.size)?;
    let seq: Vec<String> = (1..=a.n).map(|i| format!("seq-{i:03}")).collect();
    let burst: Vec<String> = (1..=a.burst).map(|i| format!("burst-{i:03}")).collect();
    let mut all = vec!["warmup".to_string()];
    all.extend(seq.iter().cloned());
    all.extend(burst.iter().cloned());
    let creator = Creator::new(client.clone(), ns, example, a.kind, &all)?;
    let label = a.kind.label();
    let api_quiet_wait_secs = wait_api_quiet(&client, Duration::from_secs(60)).await?;
    let jobs = Watched::start::<Job>(client.clone(), ns, "Job", JOB_INDEX).await?;
    let pods = Watched::start::<Pod>(client.clone(), ns, "Pod", JOB_INDEX).await?;
    let tck = clk_tck();
    let servers = &common.server_pid;

    let mut ctrl = match a.kind {
        Kind::Bare => None,
        kind => Some(Controller::spawn(
            kind,
            common,
            &format!("{}-{ns}", tag(kind)),
        )?),
    };
    let ready_ms = match &mut ctrl {
        Some(c) => {
            let ready = c
                .wait_ready(Duration::from_secs(90), Duration::from_millis(20))
                .await?;
            // controller-runtime's readyz is a ping: give every controller the same time
            // to sync its caches before the warm-up.
            tokio::time::sleep(Duration::from_secs(2)).await;
            Some(ms(ready))
        }
        None => None,
    };
    let pid = ctrl.as_ref().map(|c| c.pid);
    let cpu = |pid: Option<u32>| -> Result<Option<u64>> { pid.map(cpu_ticks).transpose() };
    let memory = |pid: Option<u32>| -> Result<Option<Mem>> { pid.map(mem).transpose() };
    let size = usize::try_from(common.size).unwrap_or(0);
    eprintln!("[{label}] warm-up MiniCluster");
    creator.create("warmup").await?;
    jobs.wait("warmup", deadline(60)).await?;
    wait_pods(&pods, size, pid.is_some(), 60).await;
    // Start from a quiet controller (the Go operator's requeues of the warm-up decay with
    // its exponential backoff), but not forever.
    let settle = Instant::now();
    if let Some(pid) = pid {
        wait_quiet(pid, Duration::from_secs(10)).await?;
    }
    if settle.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_secs(1) - settle.elapsed()).await;
    }

    let reconciles = async |ctrl: &Option<Controller>| match ctrl {
        Some(c) if c.kind == Kind::Hub => hub_reconciles(c.probe).await.map(Some),
        _ => Ok(None),
    };
    let r0 = reconciles(&ctrl).await?;
    let m0 = metrics(&client).await?;
    let c0 = cpu(pid)?;
    let s0 = ticks_of(servers)?;
    let t0 = Instant::now();
    eprintln!("[{label}] {} MiniClusters one at a time", a.n);
    let mut sequential_ms = Vec::with_capacity(a.n);
    for name in &seq {
        let sent = Instant::now();
        creator.create(name).await?;
        let seen = jobs.wait(name, deadline(60)).await?;
        sequential_ms.push(ms(seen.saturating_duration_since(sent)));
    }
    if let Some(c) = &mut ctrl {
        c.check_alive()?;
    }
    let mem_after_sequential = memory(pid)?;

    eprintln!("[{label}] {} MiniClusters at once", a.burst);
    let start = Instant::now();
    futures::stream::iter(burst.iter())
        .map(|name| creator.create(name))
        .buffer_unordered(a.burst.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    let mut burst_ms = Vec::with_capacity(a.burst);
    for name in &burst {
        let seen = jobs.wait(name, deadline(120)).await?;
        burst_ms.push(ms(seen.saturating_duration_since(start)));
    }
    let mem_after_burst = memory(pid)?;
    // What creating the objects sets off (the Job controller's Pods, the controller's
    // labels on them) belongs to the creation window, not to the idle one.
    let pods_at_settle = wait_pods(&pods, size * all.len(), pid.is_some(), 180).await;
    if let Some(pid) = pid {
        wait_quiet(pid, Duration::from_secs(10)).await?;
    }
    // The Job controller's Events and status updates trail its Pods (its client is
    // rate-limited): they too belong to the creation window.
    wait_induced_quiet(&client, Duration::from_secs(30)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let m1 = metrics(&client).await?;
    let c1 = cpu(pid)?;
    let s1 = ticks_of(servers)?;
    let t1 = Instant::now();
    let r1 = reconciles(&ctrl).await?;

    eprintln!("[{label}] idle for {} s", a.idle);
    tokio::time::sleep(Duration::from_secs(a.idle)).await;
    let m2 = metrics(&client).await?;
    let c2 = cpu(pid)?;
    let s2 = ticks_of(servers)?;
    let t2 = Instant::now();
    let r2 = reconciles(&ctrl).await?;
    let mem_after_idle = memory(pid)?;
    if let Some(c) = &mut ctrl {
        c.check_alive()?;
        c.kill();
    }
    let ticks_ms =
        |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| (b - a) as f64 * 1000.0 / tck);

    let result = PhaseResult {
        kind: a.kind,
        namespace: ns.to_string(),
        n: a.n,
        burst: a.burst,
        size: common.size,
        warmup: 1,
        api_quiet_wait_secs,
        ready_ms,
        sequential_ms,
        burst_ms,
        pods_at_settle,
        create_window: Window {
            secs: (t1 - t0).as_secs_f64(),
            cpu_ms: ticks_ms(c0, c1),
            server_cpu_ms: ticks_ms(s0, s1),
            requests: delta(&m1.counts, &m0.counts),
            durations_ms: durations(&m1, &m0),
            reconciles: r1.zip(r0).map(|(b, a)| b - a),
        },
        idle_window: Window {
            secs: (t2 - t1).as_secs_f64(),
            cpu_ms: ticks_ms(c1, c2),
            server_cpu_ms: ticks_ms(s1, s2),
            requests: delta(&m2.counts, &m1.counts),
            durations_ms: durations(&m2, &m1),
            reconciles: r2.zip(r1).map(|(b, a)| b - a),
        },
        mem_after_sequential,
        mem_after_burst,
        mem_after_idle,
    };
    eprintln!(
        "[{label}] one at a time p50/p99 {:.1}/{:.1} ms, at once p50/p99 {:.1}/{:.1} ms",
        percentile(&result.sequential_ms, 50.0),
        percentile(&result.sequential_ms, 99.0),
        percentile(&result.burst_ms, 50.0),
        percentile(&result.burst_ms, 99.0)
    );
    write_json(&common.out, &result)
}

fn tag(kind: Kind) -> &'static str {
    match kind {
        Kind::Bare => "bare",
        Kind::Hub => "hub",
        Kind::Reference => "reference",
    }
}

fn deadline(secs: u64) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(secs)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, serde_json::to_string_pretty(value)? + "\n")
        .with_context(|| format!("writing {}", path.display()))
}

/// Nearest-rank percentile (p99 of 40 samples is the largest).
fn percentile(samples: &[f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

// ---------------------------------------------------------------------------------------
// scale

#[derive(Serialize, Deserialize)]
struct StartResult {
    /// Pods (and of them labelled `job-index`) when the controller started.
    pods_at_start: (usize, usize),
    /// Start → `/readyz` 200, ms.
    ready_ms: f64,
    /// Start → every Job exists (cold start only), ms.
    all_jobs_ms: Option<f64>,
    /// Start → the given share of the Jobs exists (10, 25, 50, 75, 90 %), ms.
    jobs_quantiles_ms: Vec<(f64, f64)>,
    /// Start → every Pod exists and is labelled (cold start only; the Job controller
    /// creates them at its own pace), ms; None: not within the wait.
    pods_labelled_ms: Option<f64>,
    /// Start → no controller CPU used for two consecutive seconds, ms (None: still busy
    /// at the cap).
    quiet_ms: Option<f64>,
    /// Largest VmRSS sampled every 50 ms, KiB.
    max_sampled_rss_kib: u64,
    mem_at_ready: Option<Mem>,
    mem_at_all_jobs: Option<Mem>,
    mem_at_quiet: Mem,
    /// Controller CPU from start to every Job / to quiet, ms.
    cpu_ms_at_all_jobs: Option<f64>,
    cpu_ms: f64,
    /// kube-apiserver + etcd CPU from start to every Job / to quiet, ms.
    server_cpu_ms_at_all_jobs: Option<f64>,
    server_cpu_ms: Option<f64>,
    /// Request counter deltas from the start to quiet.
    requests: Counts,
    /// (count, mean server-side duration in ms) of each kind of request, start to quiet.
    #[serde(default)]
    durations_ms: BTreeMap<String, (f64, f64)>,
    /// (seconds since start, VmRSS KiB, controller CPU ms) every 250 ms.
    timeline: Vec<Sample>,
}

#[derive(Serialize, Deserialize)]
struct ScaleResult {
    kind: Kind,
    namespace: String,
    count: usize,
    size: i64,
    concurrency: usize,
    api_quiet_wait_secs: f64,
    /// Creating every MiniCluster, no controller running, ms.
    create_ms: f64,
    cold: StartResult,
    warm: StartResult,
}

/// (seconds since start, VmRSS KiB, CPU ms).
type Sample = (f64, u64, f64);

/// Samples the controller's memory every 50 ms until told to stop.
struct Sampler {
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<(u64, Vec<Sample>)>,
}

impl Sampler {
    fn start(pid: u32, since: Instant, tck: f64) -> Sampler {
        let stop = Arc::new(Notify::new());
        let task = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut max = 0;
                let mut timeline = Vec::new();
                let mut last_point = None::<Instant>;
                let mut tick = tokio::time::interval(Duration::from_millis(50));
                loop {
                    tokio::select! {
                        _ = stop.notified() => break,
                        _ = tick.tick() => {}
                    }
                    let Ok(m) = mem(pid) else { break };
                    max = max.max(m.vm_rss_kib);
                    if last_point.is_none_or(|t| t.elapsed() >= Duration::from_millis(250)) {
                        last_point = Some(Instant::now());
                        let cpu = cpu_ticks(pid).unwrap_or(0) as f64 * 1000.0 / tck;
                        timeline.push((since.elapsed().as_secs_f64(), m.vm_rss_kib, cpu));
                    }
                }
                (max, timeline)
            })
        };
        Sampler { stop, task }
    }

    async fn finish(self) -> (u64, Vec<Sample>) {
        self.stop.notify_one();
        self.task.await.unwrap_or_default()
    }
}

/// Waits until the process used no CPU tick for two consecutive seconds (at most `cap`);
/// returns when that quiet started, or None.
async fn wait_quiet(pid: u32, cap: Duration) -> Result<Option<Instant>> {
    let end = Instant::now() + cap;
    let mut last = cpu_ticks(pid)?;
    let mut quiet_since: Option<Instant> = None;
    let mut quiet_secs = 0;
    while Instant::now() < end {
        let before = Instant::now();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = cpu_ticks(pid)?;
        if now - last <= 1 {
            quiet_since.get_or_insert(before);
            quiet_secs += 1;
            if quiet_secs >= 2 {
                return Ok(quiet_since);
            }
        } else {
            quiet_since = None;
            quiet_secs = 0;
        }
        last = now;
    }
    Ok(None)
}

/// What a start is measured against.
struct Start<'a> {
    client: &'a Client,
    jobs: &'a Watched,
    pods: &'a Watched,
    /// MiniClusters (every Job is waited for on a cold start).
    count: usize,
    size: usize,
    cold: bool,
    timeout: u64,
    servers: &'a [u32],
    tck: f64,
}

/// Starts the controller and measures it until it is quiet.
async fn measure_start(
    at: &Start<'_>,
    kind: Kind,
    common: &Common,
    tag: &str,
) -> Result<StartResult> {
    let pods_at_start = at.pods.count();
    let m0 = metrics(at.client).await?;
    let s0 = ticks_of(at.servers)?;
    let mut ctrl = Controller::spawn(kind, common, tag)?;
    let start = ctrl.started;
    let pid = ctrl.pid;
    let tck = at.tck;
    let sampler = Sampler::start(pid, start, tck);
    let ready = async {
        let ready = ctrl
            .wait_ready(Duration::from_secs(300), Duration::from_millis(10))
            .await;
        (ready, mem(pid).ok())
    };
    let all = async {
        if !at.cold {
            return Ok(None);
        }
        let last = at
            .jobs
            .wait_count("mc-", at.count, false, deadline(at.timeout))
            .await?;
        Ok::<_, anyhow::Error>(Some((
            last,
            mem(pid)?,
            cpu_ticks(pid)?,
            ticks_of(at.servers)?,
        )))
    };
    let ((ready, mem_at_ready), all) = tokio::join!(ready, all);
    let ready = ready?;
    let all = all?;
    let jobs_quantiles_ms = if at.cold {
        quantiles(at.jobs, start)
    } else {
        Vec::new()
    };
    let pods_labelled_ms = if at.cold {
        eprintln!(
            "[{} scale] every Job exists; waiting for the Job controller's Pods and their labels",
            kind.label()
        );
        let (pods, labelled) = wait_pods(at.pods, at.size * at.count, true, at.timeout).await;
        (labelled >= at.size * at.count && pods >= at.size * at.count).then(|| ms(start.elapsed()))
    } else {
        None
    };
    let quiet = wait_quiet(pid, Duration::from_secs(60)).await?;
    ctrl.check_alive()?;
    let mem_at_quiet = mem(pid)?;
    let cpu_ms = cpu_ticks(pid)? as f64 * 1000.0 / tck;
    let s1 = ticks_of(at.servers)?;
    let m1 = metrics(at.client).await?;
    let (max_sampled_rss_kib, timeline) = sampler.finish().await;
    ctrl.kill();
    let to_ms = |t: u64| t as f64 * 1000.0 / tck;
    Ok(StartResult {
        pods_at_start,
        ready_ms: ms(ready),
        all_jobs_ms: all.map(|(t, ..)| ms(t.saturating_duration_since(start))),
        jobs_quantiles_ms,
        pods_labelled_ms,
        quiet_ms: quiet.map(|t| ms(t.saturating_duration_since(start))),
        max_sampled_rss_kib,
        mem_at_ready,
        mem_at_all_jobs: all.map(|(_, m, ..)| m),
        mem_at_quiet,
        cpu_ms_at_all_jobs: all.map(|(_, _, c, _)| to_ms(c)),
        cpu_ms,
        server_cpu_ms_at_all_jobs: all
            .and_then(|(.., s)| s.zip(s0))
            .map(|(s, s0)| to_ms(s - s0)),
        server_cpu_ms: s1.zip(s0).map(|(s1, s0)| to_ms(s1 - s0)),
        requests: delta(&m1.counts, &m0.counts),
        durations_ms: durations(&m1, &m0),
        timeline,
    })
}

/// The floor for the cold start: a bare client creating the four objects of `count`
/// MiniClusters (`concurrency` in flight) on a fresh cluster.
#[derive(Serialize, Deserialize)]
struct BareScaleResult {
    count: usize,
    size: i64,
    concurrency: usize,
    api_quiet_wait_secs: f64,
    /// Start → every Job exists, ms.
    all_jobs_ms: f64,
    /// Start → the given share of the Jobs exists (10, 25, 50, 75, 90 %), ms.
    jobs_quantiles_ms: Vec<(f64, f64)>,
    /// kube-apiserver + etcd CPU from start to every Job, ms.
    server_cpu_ms_at_all_jobs: Option<f64>,
    /// (count, mean server-side duration in ms) of each kind of request, start to every Job.
    #[serde(default)]
    durations_ms: BTreeMap<String, (f64, f64)>,
}

fn quantiles(w: &Watched, start: Instant) -> Vec<(f64, f64)> {
    let mut firsts: Vec<f64> = w
        .seen
        .lock()
        .expect("watch lock")
        .values()
        .map(|e| ms(e.first.saturating_duration_since(start)))
        .collect();
    firsts.sort_by(f64::total_cmp);
    [10.0, 25.0, 50.0, 75.0, 90.0]
        .into_iter()
        .map(|p| (p, percentile(&firsts, p)))
        .collect()
}

async fn bare_scale(a: &ScaleArgs) -> Result<()> {
    let common = &a.common;
    let client = Client::try_default()
        .await
        .context("no cluster: set KUBECONFIG")?;
    let ns = common.namespace.as_str();
    ensure_namespace(&client, ns).await?;
    let example = load_example(&common.example, common.size)?;
    let names: Vec<String> = (1..=a.count).map(|i| format!("mc-{i:05}")).collect();
    let creator = Creator::new(client.clone(), ns, example, Kind::Bare, &names)?;
    let api_quiet_wait_secs = wait_api_quiet(&client, Duration::from_secs(60)).await?;
    let jobs = Watched::start::<Job>(client.clone(), ns, "Job", JOB_INDEX).await?;
    eprintln!(
        "[bare client scale] creating the objects of {} MiniClusters ({} in flight)",
        a.count, a.concurrency
    );
    let tck = clk_tck();
    let s0 = ticks_of(&common.server_pid)?;
    let m0 = metrics(&client).await?;
    let start = Instant::now();
    futures::stream::iter(names.iter())
        .map(|name| creator.create(name))
        .buffer_unordered(a.concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    let last = jobs
        .wait_count("mc-", a.count, false, deadline(a.timeout))
        .await?;
    let s1 = ticks_of(&common.server_pid)?;
    let m1 = metrics(&client).await?;
    let result = BareScaleResult {
        count: a.count,
        size: common.size,
        concurrency: a.concurrency,
        api_quiet_wait_secs,
        all_jobs_ms: ms(last.saturating_duration_since(start)),
        jobs_quantiles_ms: quantiles(&jobs, start),
        server_cpu_ms_at_all_jobs: s1.zip(s0).map(|(s1, s0)| (s1 - s0) as f64 * 1000.0 / tck),
        durations_ms: durations(&m1, &m0),
    };
    eprintln!(
        "[bare client scale] every Job exists after {:.2} s",
        result.all_jobs_ms / 1000.0
    );
    write_json(&common.out, &result)
}

async fn scale(a: ScaleArgs) -> Result<()> {
    if a.kind == Kind::Bare {
        return bare_scale(&a).await;
    }
    let common = &a.common;
    let client = Client::try_default()
        .await
        .context("no cluster: set KUBECONFIG")?;
    let ns = common.namespace.as_str();
    ensure_namespace(&client, ns).await?;
    let example = load_example(&common.example, common.size)?;
    let names: Vec<String> = (1..=a.count).map(|i| format!("mc-{i:05}")).collect();
    let creator = Creator::new(client.clone(), ns, example, a.kind, &names)?;
    let label = a.kind.label();
    let api_quiet_wait_secs = wait_api_quiet(&client, Duration::from_secs(60)).await?;

    eprintln!(
        "[{label} scale] creating {} MiniClusters ({} in flight), no controller running",
        a.count, a.concurrency
    );
    let t = Instant::now();
    futures::stream::iter(names.iter())
        .map(|name| creator.create(name))
        .buffer_unordered(a.concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    let create_ms = ms(t.elapsed());
    let jobs = Watched::start::<Job>(client.clone(), ns, "Job", JOB_INDEX).await?;
    let pods = Watched::start::<Pod>(client.clone(), ns, "Pod", JOB_INDEX).await?;
    let (existing, _) = jobs.count();
    ensure!(
        existing == 0,
        "{existing} Jobs exist before the controller started"
    );
    let mut at = Start {
        client: &client,
        jobs: &jobs,
        pods: &pods,
        count: a.count,
        size: usize::try_from(common.size).unwrap_or(0),
        cold: true,
        timeout: a.timeout,
        servers: &common.server_pid,
        tck: clk_tck(),
    };

    eprintln!("[{label} scale] cold start");
    let cold = measure_start(&at, a.kind, common, &format!("{}-{ns}-cold", tag(a.kind))).await?;
    eprintln!("[{label} scale] warm restart (every child present)");
    at.cold = false;
    let warm = measure_start(&at, a.kind, common, &format!("{}-{ns}-warm", tag(a.kind))).await?;

    let result = ScaleResult {
        kind: a.kind,
        namespace: ns.to_string(),
        count: a.count,
        size: common.size,
        concurrency: a.concurrency,
        api_quiet_wait_secs,
        create_ms,
        cold,
        warm,
    };
    eprintln!(
        "[{label} scale] cold: all Jobs {:.2} s, VmHWM {:.1} MiB; warm: ready {:.2} s, VmHWM {:.1} MiB",
        result.cold.all_jobs_ms.unwrap_or(f64::NAN) / 1000.0,
        mib(result.cold.mem_at_quiet.vm_hwm_kib),
        result.warm.ready_ms / 1000.0,
        mib(result.warm.mem_at_quiet.vm_hwm_kib)
    );
    write_json(&common.out, &result)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

// ---------------------------------------------------------------------------------------
// report

/// What one controller did per MiniCluster, after subtracting the API server's background
/// (the bare phase's idle window, per second) and what creating the four objects causes
/// (the bare phase's creation window: the Job controller's Pods, status updates...).
#[derive(Serialize)]
struct Derived {
    kind: Kind,
    sequential_p50_ms: f64,
    sequential_p99_ms: f64,
    burst_p50_ms: f64,
    burst_p99_ms: f64,
    cpu_ms_per_minicluster: Option<f64>,
    /// Reconciles per MiniCluster (flux-hub only).
    #[serde(default)]
    reconciles_per_minicluster: Option<f64>,
    /// kube-apiserver + etcd CPU per MiniCluster, their idle rate subtracted.
    server_cpu_ms_per_minicluster: Option<f64>,
    /// kube-apiserver + etcd CPU in the idle window beyond their idle rate.
    idle_server_cpu_ms: Option<f64>,
    /// Non-watch requests the controller made per MiniCluster, by key.
    requests_per_minicluster_by_key: BTreeMap<String, f64>,
    requests_per_minicluster: f64,
    /// `PATCH pods`: the per-pod `job-index` label patches.
    pod_label_patches_per_minicluster: f64,
    beyond_bare_4: f64,
    beyond_bare_4_and_pod_patches: f64,
    /// Watches started and ended in the creation window (informational).
    watch_requests_in_create_window: f64,
    idle_requests: f64,
    idle_requests_by_key: BTreeMap<String, f64>,
    idle_cpu_ms: Option<f64>,
    idle_secs: f64,
    rss_after_sequential_mib: Option<f64>,
    hwm_after_sequential_mib: Option<f64>,
    rss_after_idle_mib: Option<f64>,
    hwm_after_idle_mib: Option<f64>,
    ready_ms: Option<f64>,
}

/// Writes of the four object kinds a bare client makes per MiniCluster.
const BARE_CREATES: [&str; 4] = [
    "POST configmaps",
    "POST secrets",
    "POST services",
    "POST jobs.batch",
];
const MC_CREATE: &str = "POST miniclusters.flux-framework.org";

fn derive(p: &PhaseResult, bare: &PhaseResult) -> Derived {
    let m = (p.n + p.burst) as f64;
    let mb = (bare.n + bare.burst) as f64;
    let bg_secs = bare.idle_window.secs.max(1.0);
    let keys: std::collections::BTreeSet<&String> = p
        .create_window
        .requests
        .keys()
        .chain(bare.create_window.requests.keys())
        .chain(p.idle_window.requests.keys())
        .chain(bare.idle_window.requests.keys())
        .collect();
    let get = |c: &Counts, k: &str| c.get(k).copied().unwrap_or(0.0);
    let mut by_key = BTreeMap::new();
    let mut idle_by_key = BTreeMap::new();
    let mut watches = 0.0;
    let mut total = 0.0;
    let mut idle_total = 0.0;
    for k in keys {
        if is_background(k) {
            continue;
        }
        let bg = get(&bare.idle_window.requests, k) / bg_secs;
        let mine = (get(&p.create_window.requests, k) - bg * p.create_window.secs) / m;
        let caused = (get(&bare.create_window.requests, k) - bg * bare.create_window.secs) / mb;
        let mut own = mine - caused;
        if p.kind != Kind::Bare {
            if BARE_CREATES.contains(&k.as_str()) {
                own += 1.0;
            }
            if k == MC_CREATE {
                own -= 1.0;
            }
        } else if BARE_CREATES.contains(&k.as_str()) {
            own += 1.0;
        }
        let idle = get(&p.idle_window.requests, k) - bg * p.idle_window.secs;
        if is_watch(k) {
            watches += get(&p.create_window.requests, k);
            continue;
        }
        total += own;
        idle_total += idle;
        // Shown by kind when it is more than noise; the totals have everything.
        if own.abs() >= 0.05 {
            by_key.insert(k.clone(), round2(own));
        }
        if idle.abs() >= 0.5 {
            idle_by_key.insert(k.clone(), round2(idle));
        }
    }
    let total = round2(total);
    let patches = by_key.get("PATCH pods").copied().unwrap_or(0.0);
    let idle = round2(idle_total);
    let ctrl = p.kind != Kind::Bare;
    // The API server's and etcd's own CPU per second when nothing happens.
    let server_bg = bare.idle_window.server_cpu_ms.map(|c| c / bg_secs);
    let server_cpu = |w: &Window| {
        w.server_cpu_ms
            .zip(server_bg)
            .map(|(c, bg)| c - bg * w.secs)
    };
    Derived {
        kind: p.kind,
        sequential_p50_ms: percentile(&p.sequential_ms, 50.0),
        sequential_p99_ms: percentile(&p.sequential_ms, 99.0),
        burst_p50_ms: percentile(&p.burst_ms, 50.0),
        burst_p99_ms: percentile(&p.burst_ms, 99.0),
        cpu_ms_per_minicluster: p.create_window.cpu_ms.map(|c| c / m),
        reconciles_per_minicluster: p.create_window.reconciles.map(|r| r / m),
        server_cpu_ms_per_minicluster: server_cpu(&p.create_window).map(|c| c / m),
        idle_server_cpu_ms: server_cpu(&p.idle_window),
        requests_per_minicluster_by_key: by_key,
        requests_per_minicluster: total,
        pod_label_patches_per_minicluster: patches,
        beyond_bare_4: if ctrl { total - 4.0 } else { 0.0 },
        beyond_bare_4_and_pod_patches: if ctrl { total - 4.0 - patches } else { 0.0 },
        watch_requests_in_create_window: watches,
        idle_requests: if ctrl { idle } else { 0.0 },
        idle_requests_by_key: idle_by_key,
        idle_cpu_ms: p.idle_window.cpu_ms,
        idle_secs: p.idle_window.secs,
        rss_after_sequential_mib: p.mem_after_sequential.map(|x| mib(x.vm_rss_kib)),
        hwm_after_sequential_mib: p.mem_after_sequential.map(|x| mib(x.vm_hwm_kib)),
        rss_after_idle_mib: p.mem_after_idle.map(|x| mib(x.vm_rss_kib)),
        hwm_after_idle_mib: p.mem_after_idle.map(|x| mib(x.vm_hwm_kib)),
        ready_ms: p.ready_ms,
    }
}

/// Two decimals, and never -0.
fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0 + 0.0
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn mark(ok: bool) -> &'static str {
    if ok { "yes" } else { "**NO**" }
}

fn report(a: &ReportArgs) -> Result<()> {
    let bare: PhaseResult =
        read_json(&a.dir.join("bare.json"))?.context("no bare.json: run the bare phase first")?;
    let hub: Option<PhaseResult> = read_json(&a.dir.join("hub.json"))?;
    let reference: Option<PhaseResult> = read_json(&a.dir.join("reference.json"))?;
    let scale_hub: Option<ScaleResult> = read_json(&a.dir.join("scale-hub.json"))?;
    let scale_ref: Option<ScaleResult> = read_json(&a.dir.join("scale-reference.json"))?;

    let d_bare = derive(&bare, &bare);
    let d_hub = hub.as_ref().map(|p| derive(p, &bare));
    let d_ref = reference.as_ref().map(|p| derive(p, &bare));
    let cols: Vec<&Derived> = std::iter::once(&d_bare)
        .chain(d_hub.as_ref())
        .chain(d_ref.as_ref())
        .collect();
    let t = phase_table(&bare, &cols, d_hub.as_ref());
    let scales: Vec<&ScaleResult> = scale_hub.iter().chain(scale_ref.iter()).collect();
    let scale_bare: Option<BareScaleResult> = read_json(&a.dir.join("scale-bare.json"))?;
    let s = scale_table(&scales, scale_bare.as_ref());

    println!("\n## flux-hub on a real API server ({})\n", bench_context());
    print!("{t}");
    println!(
        "\nLatencies: client side, create sent → the Job's first event on a watch; nearest-rank \
         percentiles (p99 of {} is the largest). Requests: apiserver_request_total deltas, \
         leader-election leases and watches left out, minus the API server's background rate \
         (the bare client's idle window) and minus what the bare client's objects set off \
         (the Job controller's Pods, Events and status updates, EndpointSlices). The creation \
         window lasts until every Pod exists and is labelled and the controller is quiet.",
        bare.n
    );
    if !s.is_empty() {
        println!();
        print!("{s}");
    }
    for p in std::iter::once(&bare)
        .chain(hub.as_ref())
        .chain(reference.as_ref())
    {
        let window = &p.create_window;
        let shown: Vec<String> = window
            .durations_ms
            .iter()
            .filter(|(_, (n, _))| *n >= 5.0)
            .map(|(k, (n, mean))| format!("{k} {mean:.1} ({n:.0})"))
            .collect();
        if !shown.is_empty() {
            println!(
                "\n{}: mean server-side duration in the creation window, ms (count): {}",
                p.kind.label(),
                shown.join(", ")
            );
        }
    }
    for d in cols.iter().filter(|d| d.kind != Kind::Bare) {
        println!(
            "\n{} requests per MiniCluster by kind: {}",
            d.kind.label(),
            fmt_counts(&d.requests_per_minicluster_by_key)
        );
        println!(
            "{} idle requests by kind: {}",
            d.kind.label(),
            fmt_counts(&d.idle_requests_by_key)
        );
    }
    let mean_durations = |d: &BTreeMap<String, (f64, f64)>, min: f64| -> String {
        d.iter()
            .filter(|(k, (n, _))| *n >= min && is_write(k))
            .map(|(k, (n, mean))| format!("{k} {mean:.1} ({n:.0})"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(b) = &scale_bare {
        println!(
            "\nbare client at scale: mean server-side duration of its writes, ms (count): {}",
            mean_durations(&b.durations_ms, 10.0)
        );
    }
    for r in &scales {
        println!(
            "{} cold start: mean server-side duration of writes, ms (count): {}",
            r.kind.label(),
            mean_durations(&r.cold.durations_ms, 10.0)
        );
    }
    for r in &scales {
        let n = r.count as f64;
        let per_mc: BTreeMap<String, f64> = controller_requests(&r.cold.requests)
            .into_iter()
            .map(|(k, v)| (k, round2(v / n)))
            .filter(|(_, v)| v.abs() >= 0.01)
            .collect();
        println!(
            "\n{} cold start, controller requests per MiniCluster by kind: {}",
            r.kind.label(),
            fmt_counts(&per_mc)
        );
        println!(
            "{} warm restart, controller requests by kind (totals): {}",
            r.kind.label(),
            fmt_counts(&controller_requests(&r.warm.requests))
        );
    }
    let results = json!({
        "derived": {
            "bare": d_bare,
            "hub": d_hub,
            "reference": d_ref,
        },
        "targets": {
            "sequential_p50_ms": 30, "sequential_p99_ms": 60,
            "burst_p50_ms": 150, "burst_p99_ms": 250,
            "cpu_ms_per_minicluster": 3,
            "requests_per_minicluster_beyond_bare_and_pod_patches": 5,
            "idle_requests": 0, "idle_cpu_s": 0.05,
            "rss_mib_at_40": 20, "rss_mib_at_1000": 60, "cold_1000_all_jobs_s": 10,
        },
        "raw": {
            "bare": bare,
            "hub": hub,
            "reference": reference,
            "scale_hub": scale_hub,
            "scale_reference": scale_ref,
            "scale_bare": scale_bare,
        },
        "markdown": format!("{t}\n{s}"),
        "source": std::fs::read_to_string(a.dir.join("source.txt")).unwrap_or_default(),
    });
    let out = a.dir.join("results.json");
    write_json(&out, &results)?;
    println!("\nRaw numbers: {}", out.display());
    Ok(())
}

fn opt(x: Option<f64>, prec: usize) -> String {
    x.map_or("—".to_string(), |v| format!("{v:.prec$}"))
}

/// One markdown row: the figure for each column, the target, whether flux-hub meets it.
fn table_row(t: &mut String, what: &str, cells: &[String], target: &str, ok: Option<bool>) {
    let _ = writeln!(
        t,
        "| {what} | {} | {target} | {} |",
        cells.join(" | "),
        ok.map_or("", mark)
    );
}

fn phase_table(bare: &PhaseResult, cols: &[&Derived], hub: Option<&Derived>) -> String {
    let mut t = String::new();
    let header: Vec<&str> = cols.iter().map(|d| d.kind.label()).collect();
    let _ = writeln!(
        t,
        "| What | {} | target | flux-hub meets it |",
        header.join(" | ")
    );
    let _ = writeln!(t, "|---|{}---|---|", "---|".repeat(cols.len()));
    let mut row = |what: &str,
                   f: &dyn Fn(&Derived) -> String,
                   target: &str,
                   ok: &dyn Fn(&Derived) -> Option<bool>| {
        let cells: Vec<String> = cols.iter().map(|d| f(d)).collect();
        table_row(&mut t, what, &cells, target, hub.and_then(ok));
    };
    let ctrl_only = |d: &Derived, v: String| {
        if d.kind == Kind::Bare {
            "—".to_string()
        } else {
            v
        }
    };
    let n = bare.n;
    row(
        &format!("create → Job, one at a time (N={n}), p50 / p99 ms"),
        &|d| format!("{:.1} / {:.1}", d.sequential_p50_ms, d.sequential_p99_ms),
        "≤ 30 / 60",
        &|d| Some(d.sequential_p50_ms <= 30.0 && d.sequential_p99_ms <= 60.0),
    );
    row(
        &format!("{} created at once → each Job, p50 / p99 ms", bare.burst),
        &|d| format!("{:.1} / {:.1}", d.burst_p50_ms, d.burst_p99_ms),
        "≤ 150 / 250",
        &|d| Some(d.burst_p50_ms <= 150.0 && d.burst_p99_ms <= 250.0),
    );
    row(
        "controller CPU per MiniCluster created, ms",
        &|d| opt(d.cpu_ms_per_minicluster, 2),
        "≤ 3",
        &|d| d.cpu_ms_per_minicluster.map(|c| c <= 3.0),
    );
    row(
        "… reconciles per MiniCluster created",
        &|d| opt(d.reconciles_per_minicluster, 1),
        "",
        &|_| None,
    );
    row(
        "kube-apiserver + etcd CPU per MiniCluster created, ms",
        &|d| opt(d.server_cpu_ms_per_minicluster, 1),
        "",
        &|_| None,
    );
    row(
        "API requests per MiniCluster by the client/controller (non-watch)",
        &|d| format!("{:.1}", d.requests_per_minicluster),
        "",
        &|_| None,
    );
    row(
        "… beyond a bare client's 4",
        &|d| ctrl_only(d, format!("{:.1}", d.beyond_bare_4)),
        "",
        &|_| None,
    );
    row(
        "… of which per-pod `job-index` label patches (PATCH pods)",
        &|d| format!("{:.1}", d.pod_label_patches_per_minicluster),
        "",
        &|_| None,
    );
    row(
        "… beyond the bare client's 4 and the label patches",
        &|d| ctrl_only(d, format!("{:.1}", d.beyond_bare_4_and_pod_patches)),
        "≤ 5",
        &|d| Some(d.beyond_bare_4_and_pod_patches <= 5.0),
    );
    row(
        &format!(
            "idle {:.0} s after creation: API requests (non-watch, beyond background) / controller CPU s",
            bare.idle_window.secs
        ),
        &|d| {
            ctrl_only(
                d,
                format!(
                    "{:.0} / {}",
                    d.idle_requests.round() + 0.0,
                    opt(d.idle_cpu_ms.map(|c| c / 1000.0), 2)
                ),
            )
        },
        "0 / < 0.05",
        &|d| Some(d.idle_requests.abs() < 0.5 && d.idle_cpu_ms.is_some_and(|c| c < 50.0)),
    );
    row(
        &format!("RSS (VmRSS) with {n} (+1 warm-up) MiniClusters, MiB"),
        &|d| opt(d.rss_after_sequential_mib, 1),
        "≤ 20",
        &|d| d.rss_after_sequential_mib.map(|r| r <= 20.0),
    );
    row(
        "peak RSS (VmHWM) up to then, start-up included, MiB",
        &|d| opt(d.hwm_after_sequential_mib, 1),
        "≤ 20",
        &|d| d.hwm_after_sequential_mib.map(|r| r <= 20.0),
    );
    row(
        &format!(
            "RSS / peak RSS with {} (after the idle window), MiB",
            n + bare.burst + 1
        ),
        &|d| match (d.rss_after_idle_mib, d.hwm_after_idle_mib) {
            (Some(r), Some(h)) => format!("{r:.1} / {h:.1}"),
            _ => "—".into(),
        },
        "",
        &|_| None,
    );
    row(
        "start → /readyz, ms",
        &|d| opt(d.ready_ms, 0),
        "",
        &|_| None,
    );
    t
}

/// "10 % / 50 % / 90 %" of Job-creation quantiles, in seconds.
/// The largest of every memory reading of a start (the kernel's RSS counters are
/// per-thread batched, so VmHWM can read a little below an earlier VmRSS sample).
fn peak_mib(r: &StartResult) -> f64 {
    let hwm = [r.mem_at_ready, r.mem_at_all_jobs, Some(r.mem_at_quiet)]
        .into_iter()
        .flatten()
        .map(|m| m.vm_hwm_kib)
        .max()
        .unwrap_or(0);
    mib(hwm.max(r.max_sampled_rss_kib))
}

fn deciles(q: &[(f64, f64)]) -> String {
    let at = |p: f64| {
        q.iter()
            .find(|(x, _)| *x == p)
            .map_or("—".to_string(), |(_, v)| format!("{:.1}", v / 1000.0))
    };
    format!("{} / {} / {}", at(10.0), at(50.0), at(90.0))
}

fn scale_table(scales: &[&ScaleResult], bare: Option<&BareScaleResult>) -> String {
    let mut s = String::new();
    let Some(first) = scales.first() else {
        return s;
    };
    let mut header: Vec<&str> = bare.map(|_| Kind::Bare.label()).into_iter().collect();
    header.extend(scales.iter().map(|r| r.kind.label()));
    let _ = writeln!(
        s,
        "| {} MiniClusters of size {} | {} | target | flux-hub meets it |",
        first.count,
        first.size,
        header.join(" | ")
    );
    let _ = writeln!(s, "|---|{}---|---|", "---|".repeat(header.len()));
    let hub = scales.iter().find(|r| r.kind == Kind::Hub);
    // `b`: the bare client's cell, where the row applies to it.
    let mut row = |what: &str,
                   b: Option<&dyn Fn(&BareScaleResult) -> String>,
                   f: &dyn Fn(&ScaleResult) -> String,
                   target: &str,
                   ok: &dyn Fn(&ScaleResult) -> Option<bool>| {
        let mut cells: Vec<String> = bare
            .map(|r| b.map_or("—".to_string(), |b| b(r)))
            .into_iter()
            .collect();
        cells.extend(scales.iter().map(|r| f(r)));
        table_row(&mut s, what, &cells, target, hub.and_then(|r| ok(r)));
    };
    let secs = |x: Option<f64>| {
        x.map_or("not within the wait".to_string(), |v| {
            format!("{:.2}", v / 1000.0)
        })
    };
    let hwm = |m: Option<Mem>| m.map_or("—".to_string(), |m| format!("{:.1}", mib(m.vm_hwm_kib)));
    row(
        &format!(
            "creating the MiniClusters, no controller running ({} in flight), s",
            first.concurrency
        ),
        None,
        &|r| format!("{:.2}", r.create_ms / 1000.0),
        "",
        &|_| None,
    );
    row(
        "cold: start → every Job exists (bare client: creating the 4 objects of each, same concurrency), s",
        Some(&|b| format!("{:.2}", b.all_jobs_ms / 1000.0)),
        &|r| secs(r.cold.all_jobs_ms),
        "≤ 10",
        &|r| Some(r.cold.all_jobs_ms.is_some_and(|v| v <= 10_000.0)),
    );
    row(
        "cold: start → 10 / 50 / 90 % of the Jobs, s",
        Some(&|b| deciles(&b.jobs_quantiles_ms)),
        &|r| deciles(&r.cold.jobs_quantiles_ms),
        "",
        &|_| None,
    );
    row(
        "cold: start → /readyz, s",
        None,
        &|r| secs(Some(r.cold.ready_ms)),
        "",
        &|_| None,
    );
    row(
        "cold: peak RSS (VmHWM) at /readyz / every Job / until quiet, MiB",
        None,
        &|r| {
            format!(
                "{} / {} / {:.1}",
                hwm(r.cold.mem_at_ready),
                hwm(r.cold.mem_at_all_jobs),
                peak_mib(&r.cold)
            )
        },
        "≤ 60",
        &|r| Some(peak_mib(&r.cold) <= 60.0),
    );
    row(
        "cold: controller CPU until every Job, s; kube-apiserver + etcd CPU then, s",
        Some(&|b| {
            format!(
                "—; {}",
                opt(b.server_cpu_ms_at_all_jobs.map(|c| c / 1000.0), 2)
            )
        }),
        &|r| {
            format!(
                "{}; {}",
                opt(r.cold.cpu_ms_at_all_jobs.map(|c| c / 1000.0), 2),
                opt(r.cold.server_cpu_ms_at_all_jobs.map(|c| c / 1000.0), 2)
            )
        },
        "",
        &|_| None,
    );
    row(
        "cold: start → every Pod exists and is labelled / → quiet, s",
        None,
        &|r| {
            format!(
                "{} / {}",
                secs(r.cold.pods_labelled_ms),
                secs(r.cold.quiet_ms)
            )
        },
        "",
        &|_| None,
    );
    row(
        "cold, to quiet: controller CPU per MiniCluster, ms; controller API requests per MiniCluster (writes)",
        None,
        &|r| {
            let c = controller_requests(&r.cold.requests);
            let n = r.count as f64;
            format!(
                "{:.2}; {:.1} ({:.1})",
                r.cold.cpu_ms / n,
                (c.values().sum::<f64>() + 0.0) / n,
                writes(&c) / n
            )
        },
        "",
        &|_| None,
    );
    row(
        "warm restart (Pods present / labelled): start → /readyz, s",
        None,
        &|r| {
            format!(
                "({} / {}) {}",
                r.warm.pods_at_start.0,
                r.warm.pods_at_start.1,
                secs(Some(r.warm.ready_ms))
            )
        },
        "",
        &|_| None,
    );
    row(
        "warm: peak RSS (VmHWM) at /readyz / until quiet, MiB",
        None,
        &|r| format!("{} / {:.1}", hwm(r.warm.mem_at_ready), peak_mib(&r.warm)),
        "≤ 60",
        &|r| Some(peak_mib(&r.warm) <= 60.0),
    );
    row(
        "warm: RSS when quiet, MiB; start → quiet, s",
        None,
        &|r| {
            format!(
                "{:.1}; {}",
                mib(r.warm.mem_at_quiet.vm_rss_kib),
                secs(r.warm.quiet_ms)
            )
        },
        "",
        &|_| None,
    );
    row(
        "warm, to quiet: controller CPU, s; controller API requests (writes)",
        None,
        &|r| {
            let c = controller_requests(&r.warm.requests);
            format!(
                "{:.2}; {:.0} ({:.0})",
                r.warm.cpu_ms / 1000.0,
                c.values().sum::<f64>() + 0.0,
                writes(&c)
            )
        },
        "",
        &|_| None,
    );
    s
}

/// Writes the control plane makes itself for the objects a MiniCluster turns into (the Job
/// controller's Pods, Job status and core/v1 Events, the EndpointSlice and Endpoints
/// controllers): never the MiniCluster controller's.
const INDUCED: [&str; 11] = [
    "POST pods",
    "PUT pods/status",
    "PATCH pods/status",
    "PUT jobs.batch/status",
    "PATCH jobs.batch/status",
    "POST endpoints",
    "PUT endpoints",
    "POST endpointslices.discovery.k8s.io",
    "PUT endpointslices.discovery.k8s.io",
    "POST events",
    "PATCH events",
];

fn is_write(key: &str) -> bool {
    [
        "POST ",
        "PUT ",
        "PATCH ",
        "APPLY ",
        "DELETE ",
        "DELETECOLLECTION ",
    ]
    .iter()
    .any(|v| key.starts_with(v))
}

/// The requests of a window with no other client than the controller: watches, leases and
/// what the control plane writes itself (`INDUCED`) left out.
fn controller_requests(c: &Counts) -> BTreeMap<String, f64> {
    c.iter()
        .filter(|(k, _)| !is_background(k) && !is_watch(k) && !INDUCED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// (`+ 0.0`: the sum of nothing is -0.0.)
fn writes(c: &BTreeMap<String, f64>) -> f64 {
    c.iter()
        .filter(|(k, _)| is_write(k))
        .map(|(_, v)| v)
        .sum::<f64>()
        + 0.0
}

fn fmt_counts(c: &BTreeMap<String, f64>) -> String {
    if c.is_empty() {
        return "none".into();
    }
    c.iter()
        .map(|(k, v)| format!("{k} {v:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn bench_context() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "{} cores, host {}, {}",
        cores,
        host.trim(),
        Command::new("date")
            .arg("-u")
            .arg("+%Y-%m-%d %H:%M UTC")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .unwrap_or_default()
            .trim()
    )
}
