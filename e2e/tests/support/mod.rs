//! Helpers of the end-to-end tests: cluster access, one namespace and one hub process per
//! test, polling with deadlines, and the diagnostics printed when a test fails.
//!
//! Environment:
//! - `KUBECONFIG` (required: cluster tests are `#[ignore]`d by default, and fail when asked
//!   for without a reachable cluster);
//! - `FLUX_HUB_BIN`: the `flux-hub` binary to run (default: built in this workspace with
//!   [`flux_e2e::cargo_build`], a no-op when it is up to date, then
//!   `<target>/<profile>/flux-hub`);
//! - `FLUX_HUB_ARGS`: extra arguments for `flux-hub run`, split on whitespace;
//! - `FLUX_E2E_TIMEOUT_SCALE`: multiplies every deadline (e.g. `3` for a slow cluster);
//! - `FLUX_E2E_KEEP_NAMESPACE=1`: keep the namespace of a failed test for inspection;
//! - `RUST_LOG`: passed to the hub (default `info,kube=warn,flux_hub=debug`) and the spoke
//!   (default `info,kube=warn,flux_spoke=debug`).
//!
//! Two-cluster tests (`bursting.rs`) also need:
//! - `SPOKE_KUBECONFIG`: the burst cluster, where a `flux-spoke run` child process applies
//!   what the hub assigns (required, as `KUBECONFIG`);
//! - `SPOKE2_KUBECONFIG`: a second burst cluster, for the test whose bursts run in two
//!   spoke clusters at once (one `flux-spoke run` each); it must be another cluster than
//!   `SPOKE_KUBECONFIG`'s (on kind: a third kind cluster). Required by that test only;
//! - `FLUX_SPOKE_BIN`: the `flux-spoke` binary (default: `cargo build -p flux-spoke`, as for
//!   the hub); `FLUX_SPOKE_ARGS`: extra arguments for every `flux-spoke run`.

// Each test crate (hub.rs, bursting.rs, flux.rs) uses part of these helpers.
#![allow(dead_code)]

pub mod dataplane;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use flux_shared::api::MiniCluster;
use futures::FutureExt as _;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config, Resource, ResourceExt as _};
use serde::Serialize;
use serde_json::{Value, json};

/// Field manager of every server-side apply the tests make.
pub const FIELD_MANAGER: &str = "flux-e2e";

/// Label on every test namespace (`kubectl delete ns -l flux-e2e=true` removes leftovers).
pub const NAMESPACE_LABEL: &str = "flux-e2e";

/// How often conditions are polled.
const POLL: Duration = Duration::from_millis(500);

/// The workspace root (`crds/`, `examples/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the e2e crate lives inside the workspace")
        .to_path_buf()
}

/// `n` seconds, times `FLUX_E2E_TIMEOUT_SCALE` (default 1).
pub fn secs(n: u64) -> Duration {
    static SCALE: OnceLock<f64> = OnceLock::new();
    let scale = *SCALE.get_or_init(|| {
        std::env::var("FLUX_E2E_TIMEOUT_SCALE")
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .unwrap_or(1.0)
    });
    Duration::from_secs_f64(n as f64 * scale)
}

/// A client for the cluster named by `KUBECONFIG`. Cluster tests are `#[ignore]`d by
/// default, so `cargo test` lists them as ignored (never as passed) on machines without a
/// cluster; one that runs (`--include-ignored`, as `scripts/e2e.sh` does) without a cluster,
/// or with one that does not answer, fails.
pub async fn client() -> (Client, Config) {
    if std::env::var_os("KUBECONFIG").is_none_or(|v| v.is_empty()) {
        panic!(
            "KUBECONFIG is not set: this test needs a real cluster (scripts/e2e.sh starts local ones)"
        );
    }
    let config = Config::from_kubeconfig(&KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("KUBECONFIG is set but cannot be loaded: {e}"));
    let client = Client::try_from(config.clone())
        .unwrap_or_else(|e| panic!("cannot build a client from KUBECONFIG: {e}"));
    match client.apiserver_version().await {
        Ok(v) => eprintln!(
            "cluster {} (Kubernetes {})",
            config.cluster_url, v.git_version
        ),
        Err(e) => panic!(
            "KUBECONFIG names {} but its API server does not answer: {e}",
            config.cluster_url
        ),
    }
    (client, config)
}

/// The outcome of one probe of [`TestEnv::eventually`].
pub enum Probe<T> {
    /// The condition holds; stop polling.
    Done(T),
    /// Not yet; the text describes what was observed (printed on timeout).
    Waiting(String),
}

/// Runs one test: a fresh namespace (and a hub when `hub`), the body, diagnostics when it
/// fails, then cleanup. Fails without a reachable `KUBECONFIG` cluster.
pub async fn run(test: &'static str, hub: bool, body: impl AsyncFnOnce(&TestEnv) -> Result<()>) {
    let env = TestEnv::start(test, hub).await;
    let result = AssertUnwindSafe(body(&env)).catch_unwind().await;
    env.finish(result).await;
}

/// One test's namespace and hub process. Cleaned up by [`TestEnv::finish`]; if that
/// never runs (a panic during setup), `Drop` kills the hub and deletes the namespace.
pub struct TestEnv {
    /// Client of the cluster under test.
    pub client: Client,
    /// The test namespace (unique, `flux-e2e-<test>-<random>`).
    pub ns: String,
    test: &'static str,
    config: Config,
    hub: Mutex<Option<Proc>>,
    hub_logs: Mutex<Vec<PathBuf>>,
    /// Arguments of `flux-hub run` besides `--namespace` and `--metrics-addr`.
    hub_args: Mutex<Vec<String>>,
    /// The burst clusters and their spoke processes, in two-cluster tests (one per spoke,
    /// in the order they were attached).
    spokes: Mutex<Vec<SpokeSide>>,
    cleaned: bool,
}

/// One burst cluster of a two-cluster test and the `flux-spoke run` process serving it.
struct SpokeSide {
    /// The spoke's name (`--name`, the `cluster` of the bursts it runs).
    name: String,
    client: Client,
    config: Config,
    /// Its kubeconfig file (e.g. `SPOKE_KUBECONFIG`), given to the spoke process as its
    /// `KUBECONFIG`.
    kubeconfig: PathBuf,
    /// Arguments of `flux-spoke run` besides `--metrics-addr`.
    args: Vec<String>,
    /// The spoke policy written before each start ([`TestEnv::set_spoke_policy_of`]); by
    /// default it admits the test's namespace.
    policy: Option<String>,
    process: Option<Proc>,
    logs: Vec<PathBuf>,
}

impl TestEnv {
    /// Installs the CRD, creates the namespace and, when `hub`, starts `flux-hub run`
    /// watching that namespace. Panics without a reachable `KUBECONFIG` cluster.
    pub async fn start(test: &'static str, hub: bool) -> TestEnv {
        let (client, config) = client().await;
        install_crd(&client)
            .await
            .unwrap_or_else(|e| panic!("{test}: installing the MiniCluster CRD: {e:?}"));
        let ns = create_namespace(&client, test)
            .await
            .unwrap_or_else(|e| panic!("{test}: creating the test namespace: {e:?}"));
        eprintln!("{test}: namespace {ns}");
        let env = TestEnv {
            client,
            ns,
            test,
            config,
            hub: Mutex::new(None),
            hub_logs: Mutex::new(Vec::new()),
            hub_args: Mutex::new(Vec::new()),
            spokes: Mutex::new(Vec::new()),
            cleaned: false,
        };
        if hub && let Err(e) = env.start_hub().await {
            env.finish(Ok(Err(e.context("starting the hub")))).await;
            unreachable!("finish panics on failure");
        }
        env
    }

    /// An API of namespaced objects in the test namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// The last `n` lines of the current hub's log (empty before it started).
    pub fn hub_log_tail(&self, n: usize) -> String {
        lock(&self.hub_logs)
            .last()
            .map(|log| tail(log, n))
            .unwrap_or_default()
    }

    /// Server-side applies `examples/<file>` into the test namespace.
    pub async fn apply_example(&self, file: &str) -> Result<MiniCluster> {
        let doc = example(file)?;
        self.apply_minicluster(&doc)
            .await
            .with_context(|| format!("applying examples/{file}"))
    }

    /// Server-side applies a MiniCluster document (its namespace is replaced by the test
    /// namespace). Retries what a just-installed CRD or a busy API server can answer
    /// (404 for the resource, 429, 5xx, transport errors) for a few seconds; any other
    /// error, such as a validation failure (422), is returned as is.
    pub async fn apply_minicluster(&self, doc: &Value) -> Result<MiniCluster, kube::Error> {
        let mut doc = doc.clone();
        doc["metadata"]["namespace"] = json!(self.ns);
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let api: Api<MiniCluster> = self.api();
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let deadline = Instant::now() + secs(15);
        loop {
            match api.patch(&name, &params, &Patch::Apply(&doc)).await {
                Err(e) if is_transient(&e) && Instant::now() < deadline => {
                    eprintln!("{}: applying MiniCluster {name}: {e}; retrying", self.test);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                other => return other,
            }
        }
    }

    /// Polls `probe` until it is done or `timeout` passes. `Ok(Err(last observation))`
    /// on timeout; `Err` only when the hub process died meanwhile. Probe errors (API
    /// hiccups, objects not there yet) count as "not yet".
    pub async fn poll<T>(
        &self,
        timeout: Duration,
        mut probe: impl AsyncFnMut() -> Result<Probe<T>>,
    ) -> Result<Result<T, String>> {
        let start = Instant::now();
        loop {
            let last = match probe().await {
                Ok(Probe::Done(v)) => return Ok(Ok(v)),
                Ok(Probe::Waiting(state)) => state,
                Err(e) => format!("error: {e:#}"),
            };
            if let Some(exit) = self.exited() {
                bail!("{exit}; last observed:\n{last}");
            }
            if start.elapsed() >= timeout {
                return Ok(Err(last));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// [`TestEnv::poll`], failing with `what` and the last observation on timeout.
    pub async fn eventually<T>(
        &self,
        what: &str,
        timeout: Duration,
        probe: impl AsyncFnMut() -> Result<Probe<T>>,
    ) -> Result<T> {
        match self
            .poll(timeout, probe)
            .await
            .with_context(|| format!("waiting for {what}"))?
        {
            Ok(v) => Ok(v),
            Err(last) => {
                bail!("timed out after {timeout:?} waiting for {what}; last observed:\n{last}")
            }
        }
    }

    /// Checks for `window` that `check` keeps finding nothing wrong: it returns
    /// `Ok(Some(violation))` to fail, `Ok(None)` when fine; its errors are API hiccups and
    /// are ignored.
    pub async fn holds_for(
        &self,
        what: &str,
        window: Duration,
        mut check: impl AsyncFnMut() -> Result<Option<String>>,
    ) -> Result<()> {
        let start = Instant::now();
        loop {
            match check().await {
                Ok(Some(violation)) => {
                    bail!("{what}: violated after {:?}: {violation}", start.elapsed())
                }
                Ok(None) => {}
                Err(e) => eprintln!("{}: {what}: {e:#} (ignored)", self.test),
            }
            if let Some(exit) = self.exited() {
                bail!("{what}: {exit}");
            }
            if start.elapsed() >= window {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Events (events.k8s.io/v1, which also shows core/v1 Events) about one object.
    pub async fn events_about(&self, kind: &str, name: &str) -> Result<Vec<Event>> {
        let events = self.api::<Event>().list(&ListParams::default()).await?;
        Ok(events
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name)
                })
            })
            .collect())
    }

    /// The pods of a Job, by the Job's own selector.
    pub async fn job_pods(&self, job: &Job) -> Result<Vec<Pod>> {
        let selector = job
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .and_then(|s| s.match_labels.as_ref())
            .filter(|l| !l.is_empty())
            .map(|l| {
                l.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .with_context(|| format!("Job {} has no selector yet", job.name_any()))?;
        Ok(self
            .api::<Pod>()
            .list(&ListParams::default().labels(&selector))
            .await?
            .items)
    }

    /// Pod phases and waiting reasons, and the last log lines of every container that
    /// started, for failure messages.
    pub async fn pod_report(&self, pods: &[Pod]) -> String {
        let mut out = pod_summary(pods);
        let api = self.api::<Pod>();
        for pod in pods {
            let Some(status) = &pod.status else { continue };
            let started = status
                .init_container_statuses
                .iter()
                .chain(status.container_statuses.iter())
                .flatten()
                .filter(|c| {
                    c.state
                        .as_ref()
                        .is_some_and(|s| s.running.is_some() || s.terminated.is_some())
                })
                .map(|c| c.name.clone());
            for container in started {
                let params = LogParams {
                    container: Some(container.clone()),
                    tail_lines: Some(30),
                    ..LogParams::default()
                };
                let logs = api
                    .logs(&pod.name_any(), &params)
                    .await
                    .unwrap_or_else(|e| format!("(no logs: {e})"));
                let _ = writeln!(
                    out,
                    "--- logs of {}/{container} (tail):\n{logs}",
                    pod.name_any()
                );
            }
        }
        out
    }

    /// Kills the hub and starts a new one (as after a crash or an upgrade).
    pub async fn restart_hub(&self) -> Result<()> {
        self.stop_hub();
        self.start_hub().await
    }

    /// Kills the hub (SIGKILL, as in a crash), if one runs.
    pub fn stop_hub(&self) {
        let old = lock(&self.hub).take();
        drop(old);
    }

    /// The arguments of the next `flux-hub run` besides `--namespace` and
    /// `--metrics-addr`.
    pub fn hub_args(&self) -> Vec<String> {
        lock(&self.hub_args).clone()
    }

    /// Arguments of every later `flux-hub run` of this test (besides `--namespace`,
    /// `--metrics-addr` and `FLUX_HUB_ARGS`).
    pub fn set_hub_args(&self, args: Vec<String>) {
        *lock(&self.hub_args) = args;
    }

    /// Spawns `cmd` (a controller serving `addr`) with stdin closed, stdout and stderr in
    /// `log`, and `RUST_LOG` defaulting to `rust_log`.
    fn spawn_logged(
        &self,
        mut cmd: Command,
        what: &str,
        rust_log: &str,
        addr: SocketAddr,
        log: &Path,
    ) -> Result<Child> {
        let file = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", rust_log);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning {}", cmd.get_program().to_string_lossy()))?;
        eprintln!(
            "{}: {what} pid {} serving {addr}, log {}",
            self.test,
            child.id(),
            log.display()
        );
        Ok(child)
    }

    /// Starts `flux-hub run` watching the test namespace and waits until it is ready.
    pub async fn start_hub(&self) -> Result<()> {
        let bin = tokio::task::spawn_blocking(hub_binary).await??;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
        let n = lock(&self.hub_logs).len();
        let log = log_dir()?.join(format!("{}-hub-{n}.log", self.ns));
        let mut cmd = Command::new(&bin);
        cmd.arg("run")
            .arg("--namespace")
            .arg(&self.ns)
            .arg("--metrics-addr")
            .arg(addr.to_string())
            .args(lock(&self.hub_args).iter())
            .args(extra_args("FLUX_HUB_ARGS"));
        // Each test's hub keeps its spoke pins in the test's namespace: a test that pins
        // (join) turns pinning on for itself only; the others' spokes are not pinned.
        if !lock(&self.hub_args).iter().any(|a| a == "--spoke-pins") {
            cmd.arg("--spoke-pins")
                .arg(format!(
                    "{}/{}",
                    self.ns,
                    flux_shared::federation::pins::PINS_CONFIGMAP
                ))
                .arg("--allow-unpinned-spokes");
        }
        let child = self.spawn_logged(cmd, "hub", "info,kube=warn,flux_hub=debug", addr, &log)?;
        lock(&self.hub_logs).push(log.clone());
        *lock(&self.hub) = Some(Proc { child });
        self.wait_ready("hub", addr, "/readyz", &log).await
    }

    /// Waits until `GET path` on `addr` answers 200, failing early when a process of the
    /// test exits.
    async fn wait_ready(
        &self,
        what: &str,
        addr: SocketAddr,
        path: &'static str,
        log: &Path,
    ) -> Result<()> {
        let timeout = secs(60);
        let start = Instant::now();
        loop {
            if let Some(exit) = self.exited() {
                bail!(
                    "{exit} before the {what} was ready; its log:\n{}",
                    tail(log, 60)
                );
            }
            let last = match tokio::task::spawn_blocking(move || http_status(addr, path)).await? {
                Ok(200) => return Ok(()),
                Ok(code) => format!("HTTP {code}"),
                Err(e) => e.to_string(),
            };
            if start.elapsed() >= timeout {
                bail!(
                    "the {what} was not ready on http://{addr}{path} after {timeout:?} (last answer: {last}); its log:\n{}",
                    tail(log, 60)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Why the test cannot go on: the hub or a spoke process exited on its own.
    fn exited(&self) -> Option<String> {
        if let Some(hub) = lock(&self.hub).as_mut()
            && let Some(status) = hub.exit()
        {
            return Some(format!("the hub exited ({status})"));
        }
        lock(&self.spokes).iter_mut().find_map(|spoke| {
            let status = spoke.process.as_mut()?.exit()?;
            Some(format!("the spoke {} exited ({status})", spoke.name))
        })
    }

    /// Adds a burst cluster to this test: `client` (`config`, from the file `kubeconfig`)
    /// is where [`TestEnv::start_spoke_of`]`(name)` runs `flux-spoke run <args>`. The test
    /// namespace is deleted there too at the end.
    pub fn attach_spoke(
        &self,
        name: &str,
        client: Client,
        config: Config,
        kubeconfig: PathBuf,
        args: Vec<String>,
    ) -> Result<()> {
        let mut spokes = lock(&self.spokes);
        if spokes.iter().any(|s| s.name == name) {
            bail!("spoke {name} is attached twice");
        }
        spokes.push(SpokeSide {
            name: name.to_string(),
            client,
            config,
            kubeconfig,
            args,
            policy: None,
            process: None,
            logs: Vec::new(),
        });
        Ok(())
    }

    /// The policy every test's spoke runs with unless the test sets one: bursts of the
    /// test's namespace (created `privileged` when the spoke creates it, as the hollow
    /// nodes do not enforce Pod Security anyway), up to 1024 brokers.
    pub fn default_spoke_policy(&self) -> String {
        format!(
            "namespaces: [{{name: {}, podSecurity: privileged}}]\nmaxBrokers: 1024\n",
            self.ns
        )
    }

    /// Sets the policy of the spoke `name` (YAML, `None`: no policy at all) in its burst
    /// cluster now, and for its later starts.
    pub async fn set_spoke_policy_of(&self, name: &str, policy: Option<&str>) -> Result<()> {
        let client = self.with_spoke(Some(name), |s| {
            s.policy = Some(policy.unwrap_or_default().to_string());
            s.client.clone()
        })?;
        write_spoke_policy(&client, policy).await
    }

    /// Runs `f` on the spoke named `name`, or, with `None`, on the only one (an error when
    /// the test attached none or several: it must name one).
    fn with_spoke<T>(&self, name: Option<&str>, f: impl FnOnce(&mut SpokeSide) -> T) -> Result<T> {
        let mut spokes = lock(&self.spokes);
        let spoke = match name {
            Some(name) => spokes
                .iter_mut()
                .find(|s| s.name == name)
                .with_context(|| format!("no spoke {name} is attached to this test"))?,
            None => match spokes.as_mut_slice() {
                [only] => only,
                [] => bail!("no spoke is attached to this test"),
                several => bail!(
                    "this test runs {} spokes: name the one meant (the *_of methods)",
                    several.len()
                ),
            },
        };
        Ok(f(spoke))
    }

    /// Client of the burst cluster of a one-spoke test.
    pub fn spoke_client(&self) -> Client {
        self.with_spoke(None, |s| s.client.clone())
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Client of the burst cluster of the spoke `name`.
    pub fn spoke_client_of(&self, name: &str) -> Client {
        self.with_spoke(Some(name), |s| s.client.clone())
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// An API of namespaced objects in the test namespace of the burst cluster of a
    /// one-spoke test.
    pub fn spoke_api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.spoke_client(), &self.ns)
    }

    /// An API of namespaced objects in the test namespace of the burst cluster of the spoke
    /// `name`.
    pub fn spoke_api_of<K>(&self, name: &str) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope>,
        <K as Resource>::DynamicType: Default,
    {
        Api::namespaced(self.spoke_client_of(name), &self.ns)
    }

    /// [`TestEnv::start_spoke_of`] the only spoke of a one-spoke test.
    pub async fn start_spoke(&self) -> Result<()> {
        self.start_spoke_side(None).await
    }

    /// Starts `flux-spoke run` of the spoke `name` against its burst cluster and waits
    /// until it serves `/healthz` (not `/readyz`: a spoke is not ready while the hub is
    /// away, and tests start it in that state too).
    pub async fn start_spoke_of(&self, name: &str) -> Result<()> {
        self.start_spoke_side(Some(name)).await
    }

    async fn start_spoke_side(&self, name: Option<&str>) -> Result<()> {
        let bin = tokio::task::spawn_blocking(spoke_binary).await??;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
        let (spoke, kubeconfig, args, n, policy, client) = self.with_spoke(name, |s| {
            (
                s.name.clone(),
                s.kubeconfig.clone(),
                s.args.clone(),
                s.logs.len(),
                s.policy.clone(),
                s.client.clone(),
            )
        })?;
        // Federated tests run one at a time, so the one policy of the burst cluster is
        // this test's. An empty text set by the test: no policy.
        let policy = policy.unwrap_or_else(|| self.default_spoke_policy());
        write_spoke_policy(&client, Some(policy.as_str()).filter(|p| !p.is_empty()))
            .await
            .with_context(|| format!("writing the policy of spoke {spoke}"))?;
        let log = log_dir()?.join(format!("{}-spoke-{spoke}-{n}.log", self.ns));
        let mut cmd = Command::new(&bin);
        cmd.arg("run")
            .args(&args)
            .arg("--metrics-addr")
            .arg(addr.to_string())
            .args(extra_args("FLUX_SPOKE_ARGS"))
            .env("KUBECONFIG", &kubeconfig);
        let what = format!("spoke {spoke}");
        let child = self.spawn_logged(cmd, &what, "info,kube=warn,flux_spoke=debug", addr, &log)?;
        self.with_spoke(Some(&spoke), |s| {
            s.logs.push(log.clone());
            s.process = Some(Proc { child });
        })?;
        self.wait_ready(&what, addr, "/healthz", &log).await
    }

    /// Kills the spoke of a one-spoke test (SIGKILL, as in a crash), if it runs.
    pub fn stop_spoke(&self) {
        let old = self
            .with_spoke(None, |s| s.process.take())
            .unwrap_or_else(|e| panic!("{e:#}"));
        drop(old);
    }

    /// Kills the spoke `name` (SIGKILL, as in a crash), if it runs.
    pub fn stop_spoke_of(&self, name: &str) {
        let old = self
            .with_spoke(Some(name), |s| s.process.take())
            .unwrap_or_else(|e| panic!("{e:#}"));
        drop(old);
    }

    /// Kills every spoke that runs.
    fn stop_spokes(&self) {
        let old: Vec<Proc> = lock(&self.spokes)
            .iter_mut()
            .filter_map(|s| s.process.take())
            .collect();
        drop(old);
    }

    /// Kills the spoke of a one-spoke test and starts a new one.
    pub async fn restart_spoke(&self) -> Result<()> {
        self.stop_spoke();
        self.start_spoke().await
    }

    /// Kills the spoke `name` and starts a new one.
    pub async fn restart_spoke_of(&self, name: &str) -> Result<()> {
        self.stop_spoke_of(name);
        self.start_spoke_of(name).await
    }

    /// Ends the test: diagnostics when it failed, cleanup, then the failure (if any) is
    /// raised again.
    pub async fn finish(mut self, result: std::thread::Result<Result<()>>) {
        let failed = !matches!(result, Ok(Ok(())));
        if failed {
            if let Ok(Err(e)) = &result {
                eprintln!("{}: FAILED: {e:?}", self.test);
            }
            self.dump().await;
        }
        let keep = failed && std::env::var_os("FLUX_E2E_KEEP_NAMESPACE").is_some_and(|v| v == "1");
        self.teardown(keep).await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("{} (namespace {}): {e:?}", self.test, self.ns),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    async fn teardown(&mut self, keep: bool) {
        if keep {
            self.stop_hub();
            self.stop_spokes();
            eprintln!(
                "{}: keeping namespace {} (FLUX_E2E_KEEP_NAMESPACE=1); delete it with kubectl delete ns {}",
                self.test, self.ns, self.ns
            );
            self.cleaned = true;
            return;
        }
        // MiniClusters go first while the hub still runs, so it can release any
        // finalizer it put on them; then nothing may block the namespace's deletion.
        let mcs: Api<MiniCluster> = self.api();
        if let Ok(list) = mcs.list(&ListParams::default()).await {
            for mc in list {
                let _ = mcs
                    .delete(&mc.name_any(), &DeleteParams::background())
                    .await;
            }
            // A bursting MiniCluster's finalizer waits for the spoke to delete its objects.
            let wait = if !lock(&self.spokes).is_empty() {
                secs(90)
            } else {
                secs(20)
            };
            let _ = tokio::time::timeout(wait, async {
                while mcs
                    .list(&ListParams::default())
                    .await
                    .is_ok_and(|l| !l.items.is_empty())
                {
                    tokio::time::sleep(POLL).await;
                }
            })
            .await;
        }
        self.stop_hub();
        self.stop_spokes();
        if let Err(e) = delete_namespace(&self.client, &self.ns).await {
            eprintln!("{}: deleting namespace {}: {e:#}", self.test, self.ns);
        }
        let spokes: Vec<(String, Client)> = lock(&self.spokes)
            .iter()
            .map(|s| (s.name.clone(), s.client.clone()))
            .collect();
        for (spoke, client) in spokes {
            if let Err(e) = delete_spoke_namespace(&client, &self.ns).await {
                eprintln!(
                    "{}: deleting namespace {} in the burst cluster of spoke {spoke}: {e:#}",
                    self.test, self.ns
                );
            }
        }
        self.cleaned = true;
    }

    /// Prints what the namespace holds and the hub's logs.
    async fn dump(&self) {
        let mut out = format!(
            "===== diagnostics of test {} (namespace {}) =====\n",
            self.test, self.ns
        );
        match self.api::<MiniCluster>().list(&ListParams::default()).await {
            Ok(list) => {
                for mc in list {
                    let _ = writeln!(out, "--- MiniCluster {}:\n{}", mc.name_any(), yaml(&mc));
                }
            }
            Err(e) => {
                let _ = writeln!(out, "--- cannot list MiniClusters: {e}");
            }
        }
        match self.api::<Job>().list(&ListParams::default()).await {
            Ok(list) => {
                for job in list {
                    let _ = writeln!(
                        out,
                        "--- Job {}: spec.parallelism {:?}, status:\n{}",
                        job.name_any(),
                        job.spec.as_ref().and_then(|s| s.parallelism),
                        yaml(&job.status)
                    );
                }
            }
            Err(e) => {
                let _ = writeln!(out, "--- cannot list Jobs: {e}");
            }
        }
        match self.api::<Pod>().list(&ListParams::default()).await {
            Ok(list) => {
                let _ = writeln!(out, "--- Pods:\n{}", pod_summary(&list.items));
            }
            Err(e) => {
                let _ = writeln!(out, "--- cannot list Pods: {e}");
            }
        }
        match self.api::<Event>().list(&ListParams::default()).await {
            Ok(list) => {
                let _ = writeln!(out, "--- Events:");
                for e in &list.items {
                    let _ = writeln!(out, "{}", describe_event(e));
                }
            }
            Err(e) => {
                let _ = writeln!(out, "--- cannot list Events: {e}");
            }
        }
        for log in lock(&self.hub_logs).iter() {
            let _ = writeln!(
                out,
                "--- hub log {} (tail):\n{}",
                log.display(),
                tail(log, 200)
            );
        }
        let spokes: Vec<(String, Client, String, Vec<PathBuf>)> = lock(&self.spokes)
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    s.client.clone(),
                    s.config.cluster_url.to_string(),
                    s.logs.clone(),
                )
            })
            .collect();
        for (spoke, client, url, logs) in spokes {
            let _ = writeln!(
                out,
                "--- burst cluster of spoke {spoke} ({url}), namespace {}:",
                self.ns
            );
            out.push_str(&describe_spoke_namespace(&client, &self.ns).await);
            for log in &logs {
                let _ = writeln!(
                    out,
                    "--- log of spoke {spoke} {} (tail):\n{}",
                    log.display(),
                    tail(log, 200)
                );
            }
        }
        let _ = writeln!(out, "===== end of diagnostics of test {} =====", self.test);
        eprintln!("{out}");
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if self.cleaned {
            return;
        }
        // Setup failed or the test was torn down abnormally: kill the hub (and spokes), then
        // delete the namespace (in every cluster) from a fresh runtime (this one may be
        // unusable while unwinding).
        self.stop_hub();
        self.stop_spokes();
        eprintln!("{}: drop guard: deleting namespace {}", self.test, self.ns);
        let (config, ns) = (self.config.clone(), self.ns.clone());
        let spoke_configs: Vec<Config> = lock(&self.spokes)
            .iter()
            .map(|s| s.config.clone())
            .collect();
        // Every cluster is tried, whichever fails.
        let cleanup = std::thread::spawn(move || -> Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let mut failed = Vec::new();
                let root = async {
                    let client = Client::try_from(config)?;
                    tokio::time::timeout(secs(30), delete_namespace(&client, &ns))
                        .await
                        .map_err(|_| anyhow!("timed out"))?
                };
                if let Err(e) = root.await {
                    failed.push(format!("root cluster: {e:#}"));
                }
                for config in spoke_configs {
                    let url = config.cluster_url.clone();
                    let burst = async {
                        let client = Client::try_from(config)?;
                        tokio::time::timeout(secs(30), delete_spoke_namespace(&client, &ns))
                            .await
                            .map_err(|_| anyhow!("timed out"))?
                    };
                    if let Err(e) = burst.await {
                        failed.push(format!("burst cluster {url}: {e:#}"));
                    }
                }
                if failed.is_empty() {
                    Ok(())
                } else {
                    bail!("{}", failed.join("; "))
                }
            })
        });
        match cleanup.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("{}: drop guard: {e:#}", self.test),
            Err(_) => eprintln!("{}: drop guard: cleanup thread panicked", self.test),
        }
    }
}

/// A hub or spoke process; killed when dropped.
struct Proc {
    child: Child,
}

impl Proc {
    /// How it exited, when it did.
    fn exit(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("unknown: {e}")),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Errors worth retrying: unknown resource right after the CRD was installed, throttling,
/// server errors, transport failures.
fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 404 || s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Server-side applies `crds/miniclusters.flux-framework.org.yaml` and waits until the
/// CRD is Established.
async fn install_crd(client: &Client) -> Result<()> {
    let path = workspace_root().join("crds/miniclusters.flux-framework.org.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let crd: Value =
        serde_yaml_ng::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let name = crd["metadata"]["name"]
        .as_str()
        .context("the CRD has no metadata.name")?
        .to_string();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .with_context(|| format!("server-side applying CRD {name}"))?;
    let timeout = secs(30);
    match tokio::time::timeout(
        timeout,
        await_condition(api.clone(), &name, conditions::is_crd_established()),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e).with_context(|| format!("watching CRD {name}")),
        Err(_) => {
            let status = api.get(&name).await.map(|c| yaml(&c.status));
            bail!("CRD {name} not Established after {timeout:?}; status: {status:?}")
        }
    }
}

async fn create_namespace(client: &Client, test: &str) -> Result<String> {
    let ns = Namespace {
        metadata: ObjectMeta {
            generate_name: Some(format!("flux-e2e-{test}-")),
            labels: Some(BTreeMap::from([
                (NAMESPACE_LABEL.to_string(), "true".to_string()),
                ("flux-e2e/test".to_string(), test.to_string()),
            ])),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    let created = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    created
        .metadata
        .name
        .context("created namespace has no name")
}

/// Deletes the namespace (without waiting for it to go), after removing finalizers from
/// any MiniCluster left in it: with the hub gone nothing would ever release them.
async fn delete_namespace(client: &Client, ns: &str) -> Result<()> {
    let mcs: Api<MiniCluster> = Api::namespaced(client.clone(), ns);
    if let Ok(list) = mcs.list(&ListParams::default()).await {
        for mc in list {
            if !mc.finalizers().is_empty() {
                let _ = mcs
                    .patch(
                        &mc.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
            }
        }
    }
    match Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::background())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Deletes the test namespace in the burst cluster (created there by the spoke), if it
/// exists. Nothing in it carries a finalizer of ours.
async fn delete_spoke_namespace(client: &Client, ns: &str) -> Result<()> {
    match Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::background())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// What the test namespace of the burst cluster holds, for diagnostics.
async fn describe_spoke_namespace(client: &Client, ns: &str) -> String {
    let mut out = String::new();
    match Api::<Namespace>::all(client.clone()).get_opt(ns).await {
        Ok(Some(n)) => {
            let _ = writeln!(
                out,
                "namespace {ns}: {}",
                n.status.and_then(|s| s.phase).unwrap_or_else(|| "?".into())
            );
        }
        Ok(None) => {
            let _ = writeln!(out, "namespace {ns} does not exist");
            return out;
        }
        Err(e) => {
            let _ = writeln!(out, "cannot read namespace {ns}: {e}");
            return out;
        }
    }
    let all = ListParams::default();
    match Api::<Job>::namespaced(client.clone(), ns).list(&all).await {
        Ok(list) => {
            for job in list {
                let _ = writeln!(
                    out,
                    "--- Job {} (uid {}): labels {:?}, annotations {:?}, spec.parallelism {:?}, status:\n{}",
                    job.name_any(),
                    job.metadata.uid.as_deref().unwrap_or("?"),
                    job.metadata.labels.clone().unwrap_or_default(),
                    job.metadata.annotations.clone().unwrap_or_default(),
                    job.spec.as_ref().and_then(|s| s.parallelism),
                    yaml(&job.status)
                );
            }
        }
        Err(e) => {
            let _ = writeln!(out, "--- cannot list Jobs: {e}");
        }
    }
    let names = |kind: &str, items: Result<Vec<String>, kube::Error>| match items {
        Ok(names) => format!("--- {kind}: {}\n", names.join(", ")),
        Err(e) => format!("--- cannot list {kind}: {e}\n"),
    };
    let cms = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .list(&all)
        .await
        .map(|l| l.items.iter().map(|o| o.name_any()).collect());
    out.push_str(&names("ConfigMaps", cms));
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns)
        .list(&all)
        .await
        .map(|l| l.items.iter().map(|o| o.name_any()).collect());
    out.push_str(&names("Secrets", secrets));
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), ns)
        .list(&all)
        .await
        .map(|l| l.items.iter().map(|o| o.name_any()).collect());
    out.push_str(&names("Services", services));
    match Api::<Pod>::namespaced(client.clone(), ns).list(&all).await {
        Ok(list) => {
            let _ = writeln!(out, "--- Pods:\n{}", pod_summary(&list.items));
        }
        Err(e) => {
            let _ = writeln!(out, "--- cannot list Pods: {e}");
        }
    }
    match Api::<Event>::namespaced(client.clone(), ns)
        .list(&all)
        .await
    {
        Ok(list) => {
            let _ = writeln!(out, "--- Events:");
            for e in &list.items {
                let _ = writeln!(out, "{}", describe_event(e));
            }
        }
        Err(e) => {
            let _ = writeln!(out, "--- cannot list Events: {e}");
        }
    }
    out
}

/// A burst cluster named by an environment variable (`SPOKE_KUBECONFIG`,
/// `SPOKE2_KUBECONFIG`): a client, its config and the kubeconfig file.
pub struct SpokeCluster {
    /// The variable that named it.
    pub var: &'static str,
    pub client: Client,
    pub config: Config,
    /// The kubeconfig file, given to the spoke process as its `KUBECONFIG`.
    pub kubeconfig: PathBuf,
}

/// The burst cluster named by the variable `var` (one kubeconfig file); `why` says what
/// needs it. Unset, unreadable or unreachable: the test fails.
pub async fn spoke_cluster_from(var: &'static str, why: &str) -> SpokeCluster {
    let Some(path) = std::env::var_os(var).filter(|v| !v.is_empty()) else {
        panic!("{var} is not set: {why} (scripts/e2e.sh starts local ones)");
    };
    let path = PathBuf::from(path);
    let kubeconfig = Kubeconfig::read_from(&path).unwrap_or_else(|e| {
        panic!(
            "{var}={} cannot be read (one kubeconfig file is expected): {e}",
            path.display()
        )
    });
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{var}={} cannot be loaded: {e}", path.display()));
    let client = Client::try_from(config.clone())
        .unwrap_or_else(|e| panic!("cannot build a client from {var}: {e}"));
    match client.apiserver_version().await {
        Ok(v) => eprintln!(
            "burst cluster {} from {var} (Kubernetes {})",
            config.cluster_url, v.git_version
        ),
        Err(e) => panic!(
            "{var} names {} but its API server does not answer: {e}",
            config.cluster_url
        ),
    }
    SpokeCluster {
        var,
        client,
        config,
        kubeconfig: path,
    }
}

/// The federation of a two-cluster test: certificates from `flux-hub certs`, the hub's
/// gRPC address, and the spokes' names. The hub runs with `--grpc-addr` and mTLS, each
/// spoke dials it with its own client certificate.
pub struct Federation {
    /// Directory of `ca.crt`, `hub.crt`, `spoke-<name>.crt` (one per spoke),
    /// `admin-e2e.crt` and keys.
    pub certs: PathBuf,
    /// Where the hub serves gRPC (127.0.0.1).
    pub grpc: SocketAddr,
    /// The spokes' names (the `cluster` of the bursts each runs), in the order the test
    /// gave them.
    pub spokes: Vec<String>,
}

/// Name of the admin certificate the tests issue.
pub const ADMIN: &str = "e2e";

impl Federation {
    /// Issues the certificates, starts the hub with its gRPC server and every spoke, each
    /// against its own burst cluster.
    async fn setup(env: &TestEnv, spokes: Vec<(String, SpokeCluster)>) -> Result<Federation> {
        for (spoke, cluster) in &spokes {
            if cluster.config.cluster_url == env.config.cluster_url {
                eprintln!(
                    "{}: {} names the same cluster as KUBECONFIG; the bursts of spoke {spoke} run next to the root",
                    env.test, cluster.var
                );
            }
        }
        let certs = profile_dir()?
            .parent()
            .context("the profile directory has no parent")?
            .join("flux-e2e-certs")
            .join(&env.ns);
        let _ = std::fs::remove_dir_all(&certs);
        let hub = tokio::task::spawn_blocking(hub_binary).await??;
        let mut cmd = Command::new(&hub);
        cmd.arg("certs").arg("--out").arg(&certs).args([
            "--hub-dns",
            "localhost",
            "--hub-ip",
            "127.0.0.1",
        ]);
        for (spoke, _) in &spokes {
            cmd.args(["--spoke", spoke]);
        }
        let out = cmd
            .args(["--admin", ADMIN])
            .output()
            .context("running flux-hub certs")?;
        if !out.status.success() {
            bail!(
                "flux-hub certs failed ({}):\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let grpc = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
        let fed = Federation {
            certs,
            grpc,
            spokes: spokes.iter().map(|(name, _)| name.clone()).collect(),
        };
        env.set_hub_args(vec![
            "--grpc-addr".into(),
            grpc.to_string(),
            "--ca".into(),
            fed.file("ca.crt"),
            "--cert".into(),
            fed.file("hub.crt"),
            "--key".into(),
            fed.file("hub.key"),
        ]);
        env.start_hub().await.context("starting the hub")?;
        for (spoke, cluster) in spokes {
            env.attach_spoke(
                &spoke,
                cluster.client,
                cluster.config,
                cluster.kubeconfig,
                vec![
                    "--hub".into(),
                    fed.hub_url(),
                    "--hub-domain".into(),
                    "localhost".into(),
                    "--name".into(),
                    spoke.clone(),
                    "--ca".into(),
                    fed.file("ca.crt"),
                    "--cert".into(),
                    fed.file(&format!("spoke-{spoke}.crt")),
                    "--key".into(),
                    fed.file(&format!("spoke-{spoke}.key")),
                ],
            )?;
            env.start_spoke_of(&spoke)
                .await
                .with_context(|| format!("starting spoke {spoke}"))?;
        }
        Ok(fed)
    }

    /// The name of the only spoke of a one-spoke test.
    pub fn spoke(&self) -> &str {
        match self.spokes.as_slice() {
            [only] => only,
            several => panic!(
                "this test runs {} spokes ({several:?}): name the one meant",
                several.len()
            ),
        }
    }

    /// A file of the certificate directory.
    pub fn file(&self, name: &str) -> String {
        self.certs.join(name).display().to_string()
    }

    /// The hub's gRPC URL.
    pub fn hub_url(&self) -> String {
        format!("https://{}", self.grpc)
    }

    /// Runs the admin command `flux-hub WORDS... ARGS...` with the admin certificate.
    async fn admin_command(&self, words: &[&str]) -> Result<std::process::Output> {
        self.admin_command_as(ADMIN, words).await
    }

    /// Runs the admin command `flux-hub WORDS... ARGS...` with the certificate of admin
    /// `admin` (`admin-<admin>.crt` in [`Federation::certs`]).
    pub async fn admin_command_as(
        &self,
        admin: &str,
        words: &[&str],
    ) -> Result<std::process::Output> {
        let hub = tokio::task::spawn_blocking(hub_binary).await??;
        let mut cmd = Command::new(hub);
        cmd.args(words)
            .args(["--hub", &self.hub_url(), "--hub-domain", "localhost"])
            .args(["--ca", &self.file("ca.crt")])
            .args(["--cert", &self.file(&format!("admin-{admin}.crt"))])
            .args(["--key", &self.file(&format!("admin-{admin}.key"))])
            .env_remove("FLUX_HUB")
            .env_remove("FLUX_CA")
            .env_remove("FLUX_CERT")
            .env_remove("FLUX_KEY")
            .stdin(Stdio::null());
        let what = words.join(" ");
        tokio::task::spawn_blocking(move || cmd.output())
            .await?
            .with_context(|| format!("running flux-hub {what}"))
    }

    /// `flux-hub status -o json` with the admin certificate, parsed.
    pub async fn hub_status(&self, ns: &str) -> Result<Value> {
        let out = self
            .admin_command(&["status", "--namespace", ns, "-o", "json"])
            .await?;
        if !out.status.success() {
            bail!(
                "flux-hub status failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        serde_json::from_slice(&out.stdout).with_context(|| {
            format!(
                "flux-hub status -o json printed no JSON: {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// `flux-hub burst scale NS/NAME BURST SIZE -o json` with the admin certificate: the
    /// hub's answer, or (`Err` inside) what the command said on standard error when it
    /// failed.
    pub async fn burst_scale(
        &self,
        ns: &str,
        name: &str,
        burst: &str,
        size: i32,
    ) -> Result<std::result::Result<Value, String>> {
        let minicluster = format!("{ns}/{name}");
        let size = size.to_string();
        let out = self
            .admin_command(&["burst", "scale", &minicluster, burst, &size, "-o", "json"])
            .await?;
        if !out.status.success() {
            return Ok(Err(String::from_utf8_lossy(&out.stderr).trim().to_string()));
        }
        Ok(Ok(serde_json::from_slice(&out.stdout).with_context(
            || {
                format!(
                    "flux-hub burst scale -o json printed no JSON: {}",
                    String::from_utf8_lossy(&out.stdout)
                )
            },
        )?))
    }
}

/// Writes (or, with `None`, deletes) the spoke policy ConfigMap of a burst cluster, in
/// the namespace a spoke process of these tests runs as (`flux-spoke-system`, created
/// when missing).
pub async fn write_spoke_policy(client: &Client, policy: Option<&str>) -> Result<()> {
    use flux_shared::federation::policy::{POLICY_CONFIGMAP, POLICY_KEY};
    use flux_shared::validate::DEFAULT_SPOKE_NAMESPACE;
    use k8s_openapi::api::core::v1::ConfigMap;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // An earlier test's unjoin may still be deleting the namespace: a policy written into
    // it now would go with it. Wait until it is gone (bounded), then create it again.
    for _ in 0..240 {
        match namespaces.get_opt(DEFAULT_SPOKE_NAMESPACE).await? {
            Some(ns) if ns.metadata.deletion_timestamp.is_some() => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            _ => break,
        }
    }
    if namespaces.get_opt(DEFAULT_SPOKE_NAMESPACE).await?.is_none() {
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(DEFAULT_SPOKE_NAMESPACE.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        match namespaces.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), DEFAULT_SPOKE_NAMESPACE);
    match policy {
        None => {
            match config_maps
                .delete(POLICY_CONFIGMAP, &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Some(text) => {
            let cm = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": POLICY_CONFIGMAP, "namespace": DEFAULT_SPOKE_NAMESPACE},
                "data": {POLICY_KEY: text},
            });
            config_maps
                .patch(
                    POLICY_CONFIGMAP,
                    &PatchParams::apply("flux-e2e").force(),
                    &Patch::Apply(&cm),
                )
                .await?;
        }
    }
    Ok(())
}

/// Runs one two-cluster test: like [`run`] without a hub, then issues certificates and
/// starts the hub (with its gRPC server) and a spoke named `spoke` against
/// `SPOKE_KUBECONFIG`. Fails without `KUBECONFIG` or `SPOKE_KUBECONFIG`.
pub async fn run_federated(
    test: &'static str,
    spoke: &str,
    body: impl AsyncFnOnce(&TestEnv, &Federation) -> Result<()>,
) {
    run_federated_spokes(test, &[(spoke, "SPOKE_KUBECONFIG")], body).await;
}

/// [`run_federated`] with several spokes: `(name, variable)` pairs, each spoke a
/// `flux-spoke run` with its own certificate against the burst cluster the variable names
/// (e.g. `SPOKE2_KUBECONFIG`). Fails without any of those clusters, and when two spokes
/// would share one.
///
/// These tests run one at a time: a spoke owns every object labelled
/// `app.kubernetes.io/managed-by=flux-spoke` in its cluster and deletes those its hub does
/// not list for it, so two spokes (of one hub or of two) must never share a burst cluster.
pub async fn run_federated_spokes(
    test: &'static str,
    spokes: &[(&str, &'static str)],
    body: impl AsyncFnOnce(&TestEnv, &Federation) -> Result<()>,
) {
    static ONE_SPOKE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _serial = ONE_SPOKE_AT_A_TIME.lock().await;
    let mut clusters: Vec<(String, SpokeCluster)> = Vec::new();
    for (i, &(spoke, var)) in spokes.iter().enumerate() {
        let why = if i == 0 {
            "two-cluster tests need a burst cluster as well as KUBECONFIG's".to_string()
        } else {
            format!(
                "this test runs spoke {spoke} in another burst cluster than {}'s (with kind: one more kind cluster)",
                spokes[0].1
            )
        };
        let cluster = spoke_cluster_from(var, &why).await;
        if let Some((other, same)) = clusters
            .iter()
            .find(|(_, c)| c.config.cluster_url == cluster.config.cluster_url)
        {
            panic!(
                "{} and {} both name the API server {}: spokes {other} and {spoke} would delete each other's bursts (a spoke owns every flux-spoke object of its cluster); give each spoke its own cluster",
                same.var, cluster.var, cluster.config.cluster_url
            );
        }
        clusters.push((spoke.to_string(), cluster));
    }
    let env = TestEnv::start(test, false).await;
    let result = AssertUnwindSafe(async {
        let fed = Federation::setup(&env, clusters)
            .await
            .context("setting up the hub and the spokes")?;
        body(&env, &fed).await
    })
    .catch_unwind()
    .await;
    env.finish(result).await;
}

/// `examples/<file>` as JSON.
pub fn example(file: &str) -> Result<Value> {
    let path = workspace_root().join("examples").join(file);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_yaml_ng::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// The `flux-hub` binary: `FLUX_HUB_BIN`, or this workspace's, built once per test run.
pub fn hub_binary() -> Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    binary("FLUX_HUB_BIN", "flux-hub", &BUILT)
}

/// The `flux-spoke` binary: `FLUX_SPOKE_BIN`, or this workspace's, built once per test run.
pub fn spoke_binary() -> Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    binary("FLUX_SPOKE_BIN", "flux-spoke", &BUILT)
}

/// The binary named by the variable `var`, else `package`'s (its binary has the same name),
/// built once per test run.
fn binary(
    var: &str,
    package: &'static str,
    built: &'static OnceLock<Result<PathBuf, String>>,
) -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        let bin = PathBuf::from(bin);
        if !bin.is_file() {
            bail!("{var}={} is not a file", bin.display());
        }
        return Ok(bin);
    }
    built
        .get_or_init(|| build(package, var).map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!(e))
}

/// `<target>/<profile>`, the directory of this test executable's `deps/`.
fn profile_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the test executable")?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .with_context(|| format!("{} is not in <target>/<profile>/deps", exe.display()))
}

/// Runs `cargo build --workspace --bin <package> --test <this test>` for this test's profile
/// and target directory (fast when nothing changed, and never runs a stale binary), then
/// returns the binary's path.
///
/// Cargo unifies features over the packages and targets a command selects: the whole
/// workspace with a test target (whose dev-dependencies count) resolves them as `cargo test
/// --workspace` and `scripts/e2e.sh` do, so this reuses their build of every dependency.
/// `cargo build -p <package>` resolved others (tokio without `test-util`, kube without
/// `unstable-runtime` for the spoke, ...) and compiled up to 22 third-party crates and the
/// workspace's own again.
fn build(package: &str, var: &str) -> Result<PathBuf> {
    let profile_dir = profile_dir()?;
    let bin = profile_dir.join(format!("{package}{}", std::env::consts::EXE_SUFFIX));
    let target_dir = profile_dir
        .parent()
        .context("the profile directory has no parent")?;
    let profile = profile_dir
        .file_name()
        .and_then(|p| p.to_str())
        .unwrap_or("debug");
    let mut cmd =
        flux_e2e::cargo_build::command(&workspace_root(), &[package], env!("CARGO_CRATE_NAME"));
    cmd.env("CARGO_TARGET_DIR", target_dir);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    eprintln!("building {package}: {cmd:?}");
    match cmd.output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => bail!(
            "cargo build --workspace --bin {package} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) if bin.is_file() => {
            eprintln!(
                "cannot run cargo ({e}); using the existing {}",
                bin.display()
            );
        }
        Err(e) => bail!("cannot run cargo to build {package} ({e}); set {var}"),
    }
    if !bin.is_file() {
        bail!("cargo built {package} but {} does not exist", bin.display());
    }
    Ok(bin)
}

/// Extra arguments from the variable `var`, split on whitespace.
fn extra_args(var: &str) -> Vec<String> {
    std::env::var(var)
        .map(|a| a.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// `<target>/flux-e2e-logs`, where hub and spoke logs go.
fn log_dir() -> Result<PathBuf> {
    let dir = profile_dir()?
        .parent()
        .context("the profile directory has no parent")?
        .join("flux-e2e-logs");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// A file under the test logs folder (`<target>/flux-e2e-logs/<name>`).
pub fn log_file(name: &str) -> Result<PathBuf> {
    Ok(log_dir()?.join(name))
}

/// A TCP port free on 127.0.0.1 right now.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// The status code of `GET path` (a tiny HTTP/1.1 client: the tests need no more).
fn http_status(addr: SocketAddr, path: &str) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = Vec::new();
    let mut buf = [0u8; 256];
    while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 4096 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    head.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not an HTTP response: {head:?}"),
            )
        })
}

/// The last `n` lines of a file.
fn tail(path: &Path, n: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// An object as YAML for messages, without managedFields and with Secret values hidden.
pub fn yaml<T: Serialize>(obj: &T) -> String {
    let mut v = serde_json::to_value(obj).unwrap_or(Value::Null);
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    if v.get("kind").and_then(Value::as_str) == Some("Secret")
        && let Some(data) = v.get_mut("data").and_then(Value::as_object_mut)
    {
        for value in data.values_mut() {
            *value = json!("<redacted>");
        }
    }
    serde_yaml_ng::to_string(&v).unwrap_or_else(|e| format!("<unprintable: {e}>"))
}

/// One line per Event.
pub fn describe_event(e: &Event) -> String {
    let regarding = e.regarding.as_ref().map_or_else(String::new, |r| {
        format!(
            "{}/{}",
            r.kind.as_deref().unwrap_or(""),
            r.name.as_deref().unwrap_or("")
        )
    });
    format!(
        "{} {} {regarding}: {}",
        e.type_.as_deref().unwrap_or(""),
        e.reason.as_deref().unwrap_or(""),
        e.note.as_deref().unwrap_or("")
    )
}

/// One line per pod: phase, why it is not scheduled, why containers wait or ended.
pub fn pod_summary(pods: &[Pod]) -> String {
    if pods.is_empty() {
        return "(no pods)\n".into();
    }
    let mut out = String::new();
    for pod in pods {
        let status = pod.status.as_ref();
        let _ = write!(
            out,
            "{}: {}",
            pod.name_any(),
            status.and_then(|s| s.phase.as_deref()).unwrap_or("?")
        );
        for c in status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
        {
            if c.status != "True" && c.reason.is_some() {
                let _ = write!(
                    out,
                    "; {} {}: {}",
                    c.type_,
                    c.reason.as_deref().unwrap_or(""),
                    c.message.as_deref().unwrap_or("")
                );
            }
        }
        let containers = status
            .into_iter()
            .flat_map(|s| {
                s.init_container_statuses
                    .iter()
                    .chain(s.container_statuses.iter())
            })
            .flatten();
        for c in containers {
            let state = c.state.as_ref();
            if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
                let _ = write!(
                    out,
                    "; {} waiting: {} {}",
                    c.name,
                    w.reason.as_deref().unwrap_or(""),
                    w.message.as_deref().unwrap_or("")
                );
            } else if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
                let _ = write!(
                    out,
                    "; {} exited {} {}",
                    c.name,
                    t.exit_code,
                    t.reason.as_deref().unwrap_or("")
                );
            } else if state.is_some_and(|s| s.running.is_some()) {
                let _ = write!(out, "; {} running (restarts {})", c.name, c.restart_count);
            }
        }
        out.push('\n');
    }
    out
}

/// Whether a pod has started running (or already finished).
pub fn pod_ran(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running" | "Succeeded")
    )
}

/// Whether an equality-based label selector (`a=b,c==d,e!=f,g,!h`, as in
/// `status.selector`) matches `labels`.
pub fn selector_matches(selector: &str, labels: &BTreeMap<String, String>) -> Result<bool> {
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let ok = if let Some((k, v)) = term.split_once("!=") {
            labels.get(k.trim()).map(String::as_str) != Some(v.trim())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            labels.get(k.trim()).map(String::as_str) == Some(v.trim())
        } else if term.contains(' ') || term.contains('(') {
            bail!("set-based selector term {term:?} is not supported here");
        } else if let Some(k) = term.strip_prefix('!') {
            !labels.contains_key(k.trim())
        } else {
            labels.contains_key(term)
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Checks that `meta` names `mc` as its controlling owner.
pub fn ensure_controlled_by(what: &str, meta: &ObjectMeta, mc: &MiniCluster) -> Result<()> {
    let uid = mc
        .metadata
        .uid
        .as_deref()
        .context("the MiniCluster has no uid")?;
    let refs = meta.owner_references.as_deref().unwrap_or_default();
    let owned = refs.iter().any(|r| {
        r.api_version == "flux-framework.org/v1alpha2"
            && r.kind == "MiniCluster"
            && r.name == mc.name_any()
            && r.uid == uid
            && r.controller == Some(true)
    });
    if !owned {
        bail!(
            "{what} is not controlled by MiniCluster {} (uid {uid}); ownerReferences: {}",
            mc.name_any(),
            yaml(&refs)
        );
    }
    Ok(())
}

/// The conditions of a MiniCluster's status.
pub fn mc_conditions(mc: &MiniCluster) -> &[Condition] {
    mc.status.as_ref().map_or(&[], |s| s.conditions.as_slice())
}

/// Whether a text talks about a maximum (`maxSize`, "maximum size", ...).
pub fn mentions_max(text: &str) -> bool {
    text.to_lowercase().contains("max")
}

/// Whether service account `namespace/name` may `verb` `group`/`resource` (with an optional
/// `/subresource`) in namespace `ns`, as the API server's authorizer answers a
/// SubjectAccessReview (what `kubectl auth can-i --as=system:serviceaccount:...` asks).
pub async fn service_account_can(
    client: &Client,
    account: (&str, &str),
    group: &str,
    resource: &str,
    verb: &str,
    ns: &str,
) -> Result<bool> {
    service_account_can_on(client, account, group, resource, verb, ns, "").await
}

/// Writes to `out` a kubeconfig for the cluster of `kubeconfig` that authenticates as
/// service account `namespace/name` (a one-hour token from `kubectl create token`): what a
/// pod of that account may do, and nothing more.
pub async fn service_account_kubeconfig(
    kubeconfig: &str,
    account: (&str, &str),
    out: &std::path::Path,
) -> Result<()> {
    let token = tokio::process::Command::new("kubectl")
        .args(["--kubeconfig", kubeconfig, "-n", account.0])
        .args(["create", "token", account.1, "--duration", "1h"])
        .output()
        .await?;
    anyhow::ensure!(
        token.status.success(),
        "kubectl create token {}/{}: {}",
        account.0,
        account.1,
        String::from_utf8_lossy(&token.stderr)
    );
    let token = String::from_utf8(token.stdout)?.trim().to_string();
    let mut config = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let user = format!("{}-{}", account.0, account.1);
    config.auth_infos = vec![kube::config::NamedAuthInfo {
        name: user.clone(),
        auth_info: Some(kube::config::AuthInfo {
            token: Some(token.into()),
            ..Default::default()
        }),
        other: Default::default(),
    }];
    for context in &mut config.contexts {
        if let Some(c) = context.context.as_mut() {
            c.user = Some(user.clone());
        }
    }
    std::fs::write(out, serde_yaml_ng::to_string(&config)?)?;
    Ok(())
}

/// [`service_account_can`] on the object `name` (for grants limited by resourceNames).
pub async fn service_account_can_on(
    client: &Client,
    account: (&str, &str),
    group: &str,
    resource: &str,
    verb: &str,
    ns: &str,
    name: &str,
) -> Result<bool> {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": format!("system:serviceaccount:{}:{}", account.0, account.1),
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{}", account.0), "system:authenticated"],
            "resourceAttributes": {"group": group, "resource": resource, "subresource": subresource, "verb": verb, "namespace": ns, "name": name},
        }
    }))?;
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&Default::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// Runs `script` in the Flux environment of `pod`'s container `container` (kubectl exec),
/// retrying until it succeeds and `done` accepts its standard output (kubectl's own
/// warnings go to standard error and are not part of it).
pub async fn flux_in(
    env: &TestEnv,
    pod: &str,
    container: &str,
    script: &str,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> Result<String> {
    let script = dataplane::in_flux_env(script);
    env.eventually(what, secs(120), async || {
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.args(["--namespace", &env.ns, "exec", pod, "-c", container, "--"])
            .args(["bash", "-c", &script]);
        let out = match tokio::time::timeout(secs(30), cmd.output()).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Ok(Probe::Waiting(format!("kubectl exec {pod}: {e}"))),
            Err(_) => return Ok(Probe::Waiting(format!("kubectl exec {pod} timed out"))),
        };
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        Ok(if out.status.success() && done(&stdout) {
            Probe::Done(stdout)
        } else {
            Probe::Waiting(format!(
                "{} ({}): {stdout}{}",
                pod,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        })
    })
    .await
}

/// One `Spoke.Report` (empty) to the hub at `hub_url` with the spoke certificate in `dir`
/// (`ca.crt`, `tls.crt`, `tls.key`, as the spoke's TLS Secret holds them): what the hub
/// answers a spoke presenting that certificate.
pub async fn spoke_report_with(hub_url: &str, dir: &Path) -> Result<(), tonic::Status> {
    use flux_shared::federation::proto::ReportRequest;
    use flux_shared::federation::proto::spoke_client::SpokeClient;
    use flux_shared::federation::tls::{ClientSecurity, TlsPem, TransportSettings};
    let failed = |e: String| tonic::Status::unknown(e);
    let tls = TlsPem::from_files(dir.join("ca.crt"), dir.join("tls.crt"), dir.join("tls.key"))
        .map_err(|e| failed(e.to_string()))?;
    let security = ClientSecurity::Mtls {
        tls,
        domain: "localhost".into(),
    };
    let settings = TransportSettings::default();
    let channel = settings
        .endpoint(hub_url, &security)
        .map_err(|e| failed(e.to_string()))?
        .connect()
        .await
        .map_err(|e| failed(flux_shared::federation::diagnostics::error_chain(&e)))?;
    let mut client = SpokeClient::with_interceptor(channel, security.interceptor());
    client
        .report(settings.unary_request(ReportRequest::default()))
        .await
        .map(|_| ())
        .map_err(|status| {
            // A refusal in the TLS handshake is a transport error: keep its cause.
            match std::error::Error::source(&status) {
                Some(cause) => tonic::Status::new(
                    status.code(),
                    format!(
                        "{}: {}",
                        status.message(),
                        flux_shared::federation::diagnostics::error_chain(cause)
                    ),
                ),
                None => status,
            }
        })
}
