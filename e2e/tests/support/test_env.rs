//! One test's environment ([`TestEnv`]): its start (CRD, namespace, hub), the objects it
//! applies and reads, and its teardown (also on `Drop`, after a panic during setup).

use std::fmt::Write as _;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use flux_shared::api::MiniCluster;
use futures::FutureExt as _;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams};
use kube::{Client, Config, Resource, ResourceExt as _};
use serde_json::{Value, json};

use super::*;

/// Runs one test: a fresh namespace (and a hub when `hub`), the body, diagnostics when it
/// fails, then cleanup. Fails without a reachable `KUBECONFIG` cluster.
pub async fn run(test: &'static str, hub: bool, body: impl AsyncFnOnce(&TestEnv) -> Result<()>) {
    let env = TestEnv::start(test, hub).await;
    let result = AssertUnwindSafe(body(&env)).catch_unwind().await;
    env.finish(result).await;
}

/// Appends `<seconds> <test>` (`FAILED` after it when it failed) to the file
/// `FLUX_E2E_TIMES` names, when set: libtest prints no test's duration, and
/// `scripts/e2e.sh` lists the slowest to keep CI within its time.
fn record_time(test: &str, failed: bool, took: Duration) {
    use std::io::Write as _;
    let Some(path) = std::env::var_os("FLUX_E2E_TIMES") else {
        return;
    };
    let outcome = if failed { " FAILED" } else { "" };
    let line = format!("{:.0} {test}{outcome}\n", took.as_secs_f64());
    // A diagnostic only: a file that cannot be written does not fail the test.
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(line.as_bytes());
    }
}

/// Appends `<test> (namespace <ns>): <why>` on one line to the file `FLUX_E2E_FAILURES`
/// names, when set: `scripts/e2e.sh` prints it last, so that the end of a long run's
/// output (all a CI log may keep) says what failed and why.
fn record_failure(test: &str, ns: &str, why: &str) {
    use std::io::Write as _;
    let Some(path) = std::env::var_os("FLUX_E2E_FAILURES") else {
        return;
    };
    // One line, short enough for a log that folds long ones.
    let mut why = why.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some((cut, _)) = why.char_indices().nth(800) {
        why.truncate(cut);
        why.push_str(" [...]");
    }
    let line = format!("{test} (namespace {ns}): {why}\n");
    // A diagnostic only, as in record_time.
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = file.write_all(line.as_bytes());
    }
}

/// One test's namespace and hub process. Cleaned up by [`TestEnv::finish`]; if that
/// never runs (a panic during setup), `Drop` kills the hub and deletes the namespace.
pub struct TestEnv {
    /// Client of the cluster under test.
    pub client: Client,
    /// The test namespace (unique, `flux-e2e-<test>-<random>`).
    pub ns: String,
    pub(super) test: &'static str,
    pub(super) config: Config,
    pub(super) hub: Mutex<Option<Proc>>,
    pub(super) hub_logs: Mutex<Vec<PathBuf>>,
    /// Where the current hub serves `/metrics` (`--metrics-addr`).
    pub(super) hub_metrics: Mutex<Option<std::net::SocketAddr>>,
    /// Arguments of `flux-hub run` besides `--namespace` and `--metrics-addr`.
    pub(super) hub_args: Mutex<Vec<String>>,
    /// The burst clusters and their spoke processes, in two-cluster tests (one per spoke,
    /// in the order they were attached).
    pub(super) spokes: Mutex<Vec<SpokeSide>>,
    /// Stand-ins for the lead reporters of the bursting MiniClusters applied, by name
    /// ([`super::fake_lead`]).
    pub(super) fake_leads: Mutex<std::collections::BTreeMap<String, super::fake_lead::FakeLead>>,
    pub(super) cleaned: bool,
    /// When the test started ([`record_time`] at its end).
    pub(super) started: Instant,
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

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl TestEnv {
    /// Installs the CRD, creates the namespace and, when `hub`, starts `flux-hub run`
    /// watching that namespace. Panics without a reachable `KUBECONFIG` cluster.
    pub async fn start(test: &'static str, hub: bool) -> TestEnv {
        let started = Instant::now();
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
            hub_metrics: Mutex::new(None),
            hub_args: Mutex::new(Vec::new()),
            spokes: Mutex::new(Vec::new()),
            fake_leads: Mutex::default(),
            cleaned: false,
            started,
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
        // A bursting MiniCluster in a federated test whose nodes run no Flux: its lead's
        // view comes from a stand-in (unless the document names a reporter itself).
        let federated = self
            .hub_args()
            .iter()
            .any(|a| a == "--allow-queue-reporter-annotation");
        if federated && let Some(hosts) = super::fake_lead::bursting_hosts(&doc) {
            let known = {
                let leads = lock(&self.fake_leads);
                leads.get(&name).map(|lead| {
                    lead.set_hosts(hosts.clone());
                    lead.address.clone()
                })
            };
            let address = match known {
                Some(address) => address,
                None => {
                    let lead = super::fake_lead::FakeLead::start(hosts)
                        .await
                        .map_err(|e| kube::Error::Service(e.into()))?;
                    let address = lead.address.clone();
                    lock(&self.fake_leads).insert(name.clone(), lead);
                    address
                }
            };
            doc["metadata"]["annotations"][super::fake_lead::REPORTER_ANNOTATION] = json!(address);
        }
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

    /// Ends the test: diagnostics when it failed, cleanup, then the failure (if any) is
    /// raised again.
    pub async fn finish(mut self, result: std::thread::Result<Result<()>>) {
        let failed = !matches!(result, Ok(Ok(())));
        if failed {
            let why = match &result {
                Ok(Err(e)) => {
                    eprintln!("{}: FAILED: {e:?}", self.test);
                    format!("{e:#}")
                }
                Err(panic) => panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .map_or_else(|| "panicked".to_string(), |m| format!("panicked: {m}")),
                Ok(Ok(())) => String::new(),
            };
            record_failure(self.test, &self.ns, &why);
            self.dump().await;
        }
        let keep = failed && std::env::var_os("FLUX_E2E_KEEP_NAMESPACE").is_some_and(|v| v == "1");
        self.teardown(keep).await;
        record_time(self.test, failed, self.started.elapsed());
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("{} (namespace {}): {e:?}", self.test, self.ns),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    pub(super) async fn teardown(&mut self, keep: bool) {
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
            // The policy of this test's spokes (gone already when an unjoin took the
            // spoke's namespace).
            let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
                Api::namespaced(client, flux_shared::validate::DEFAULT_SPOKE_NAMESPACE);
            let _ = config_maps
                .delete(&self.spoke_policy_name(), &DeleteParams::default())
                .await;
        }
        self.cleaned = true;
    }
}
