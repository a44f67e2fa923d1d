//! A hub and its spokes federated over mTLS ([`Federation`]: certificates, admin context),
//! and the runners of two-cluster tests ([`run_federated`], [`run_federated_spokes`]).

use std::net::{Ipv4Addr, SocketAddr};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};
use futures::FutureExt as _;
use serde_json::Value;

use super::*;

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
    pub(super) async fn setup(
        env: &TestEnv,
        spokes: Vec<(String, SpokeCluster)>,
    ) -> Result<Federation> {
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
            // The lead brokers' views are read where a test says (the nodes may run no
            // Flux: see `fake_lead`).
            "--allow-queue-reporter-annotation".into(),
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
    pub(super) async fn admin_command(&self, words: &[&str]) -> Result<std::process::Output> {
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

/// [`run_federated`] for a test that stops or starts the burst cluster, or installs and
/// removes a spoke there (`flux-hub join`/`unjoin`: the namespace `flux-spoke-system`,
/// which also holds every other test's spoke policy): no other two-cluster test runs
/// meanwhile.
pub async fn run_federated_alone(
    test: &'static str,
    spoke: &str,
    body: impl AsyncFnOnce(&TestEnv, &Federation) -> Result<()>,
) {
    let _alone = BURST_CLUSTERS.write().await;
    federated(test, &[(spoke, "SPOKE_KUBECONFIG")], body).await;
}

/// [`run_federated`] with several spokes: `(name, variable)` pairs, each spoke a
/// `flux-spoke run` with its own certificate against the burst cluster the variable names
/// (e.g. `SPOKE2_KUBECONFIG`). Fails without any of those clusters, and when two spokes
/// would share one.
pub async fn run_federated_spokes(
    test: &'static str,
    spokes: &[(&str, &'static str)],
    body: impl AsyncFnOnce(&TestEnv, &Federation) -> Result<()>,
) {
    let _shared = BURST_CLUSTERS.read().await;
    federated(test, spokes, body).await;
}

/// Two-cluster tests share the burst clusters: each test issues its own CA, so its spokes
/// stamp their objects with a federation identity of their own and never list, change or
/// delete another test's, and each reads a policy of its own
/// ([`TestEnv::spoke_policy_name`]). Only a test that stops a burst cluster or removes the
/// spokes' namespace needs it alone ([`run_federated_alone`]).
static BURST_CLUSTERS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// What [`run_federated_spokes`] and [`run_federated_alone`] run once they may.
async fn federated(
    test: &'static str,
    spokes: &[(&str, &'static str)],
    body: impl AsyncFnOnce(&TestEnv, &Federation) -> Result<()>,
) {
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
                "{} and {} both name the API server {}: this test runs spokes {other} and {spoke} in two clusters; give each spoke its own",
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
