//! The burst clusters of two-cluster tests: their spoke processes started, stopped and
//! restarted, their policy, their clients, and the spoke cluster named by a kubeconfig.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, Resource};
use serde_json::json;

use super::*;

/// One burst cluster of a two-cluster test and the `flux-spoke run` process serving it.
pub(super) struct SpokeSide {
    /// The spoke's name (`--name`, the `cluster` of the bursts it runs).
    pub(super) name: String,
    pub(super) client: Client,
    pub(super) config: Config,
    /// Its kubeconfig file (e.g. `SPOKE_KUBECONFIG`), given to the spoke process as its
    /// `KUBECONFIG`.
    pub(super) kubeconfig: PathBuf,
    /// Arguments of `flux-spoke run` besides `--metrics-addr`.
    pub(super) args: Vec<String>,
    /// The spoke policy written before each start ([`TestEnv::set_spoke_policy_of`]); by
    /// default it admits the test's namespace.
    pub(super) policy: Option<String>,
    pub(super) process: Option<Proc>,
    pub(super) logs: Vec<PathBuf>,
    /// Where its current process serves `/metrics` (`--metrics-addr`).
    pub(super) metrics: Option<SocketAddr>,
}

/// Deletes the test namespace in the burst cluster (created there by the spoke), if it
/// exists. Nothing in it carries a finalizer of ours.
pub(super) async fn delete_spoke_namespace(client: &Client, ns: &str) -> Result<()> {
    match Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::background())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
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

/// Writes (or, with `None`, deletes) the spoke policy ConfigMap `name` of a burst cluster,
/// in the namespace a spoke process of these tests runs as (`flux-spoke-system`, created
/// when missing).
pub async fn write_spoke_policy(client: &Client, name: &str, policy: Option<&str>) -> Result<()> {
    use flux_shared::federation::policy::POLICY_KEY;
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
        None => match config_maps.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        },
        Some(text) => {
            let cm = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": DEFAULT_SPOKE_NAMESPACE},
                "data": {POLICY_KEY: text},
            });
            config_maps
                .patch(
                    name,
                    &PatchParams::apply("flux-e2e").force(),
                    &Patch::Apply(&cm),
                )
                .await?;
        }
    }
    Ok(())
}

impl TestEnv {
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
            metrics: None,
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
        write_spoke_policy(&client, &self.spoke_policy_name(), policy).await
    }

    /// The name of the policy ConfigMap of this test's spokes (`flux-spoke run --policy`):
    /// tests that run at the same time share the burst clusters, each with a policy of its
    /// own.
    pub fn spoke_policy_name(&self) -> String {
        format!(
            "{}-{}",
            flux_shared::federation::policy::POLICY_CONFIGMAP,
            self.ns
        )
    }

    /// Runs `f` on the spoke named `name`, or, with `None`, on the only one (an error when
    /// the test attached none or several: it must name one).
    pub(super) fn with_spoke<T>(
        &self,
        name: Option<&str>,
        f: impl FnOnce(&mut SpokeSide) -> T,
    ) -> Result<T> {
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

    pub(super) async fn start_spoke_side(&self, name: Option<&str>) -> Result<()> {
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
        // An empty text set by the test: no policy.
        let policy = policy.unwrap_or_else(|| self.default_spoke_policy());
        let policy_name = self.spoke_policy_name();
        write_spoke_policy(
            &client,
            &policy_name,
            Some(policy.as_str()).filter(|p| !p.is_empty()),
        )
        .await
        .with_context(|| format!("writing the policy of spoke {spoke}"))?;
        let log = log_dir()?.join(format!("{}-spoke-{spoke}-{n}.log", self.ns));
        let mut cmd = Command::new(&bin);
        cmd.arg("run")
            .args(&args)
            .args(["--policy", &policy_name])
            .arg("--metrics-addr")
            .arg(addr.to_string())
            .args(extra_args("FLUX_SPOKE_ARGS"))
            .env("KUBECONFIG", &kubeconfig);
        let what = format!("spoke {spoke}");
        let child = self.spawn_logged(cmd, &what, "info,kube=warn,flux_spoke=debug", addr, &log)?;
        self.with_spoke(Some(&spoke), |s| {
            s.logs.push(log.clone());
            s.process = Some(Proc { child });
            s.metrics = Some(addr);
        })?;
        self.wait_ready(&what, addr, "/healthz", &log).await
    }

    /// Where the spoke `name`'s current process serves `/metrics`, once one started.
    pub fn spoke_metrics_addr_of(&self, name: &str) -> Result<Option<SocketAddr>> {
        self.with_spoke(Some(name), |s| s.metrics)
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
    pub(super) fn stop_spokes(&self) {
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
}
