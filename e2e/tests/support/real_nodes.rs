//! Real-node clusters (`scripts/real-node.sh` nodes of testbed control planes): their
//! nodes' addresses, a node cut off from another cluster, a whole cluster stopped and
//! started again, and what makes a MiniCluster's pods meet Pod Security `restricted`.

use std::path::PathBuf;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;

/// The address of the (single) real node of the cluster of `client`: what kind's
/// `docker inspect` gives the quickstart as `ROOT_IP`.
pub async fn node_ip(client: &kube::Client) -> Result<String> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .list(&ListParams::default().labels("testbed/real-node=true"))
        .await?
        .items
        .iter()
        .find_map(internal_ip)
        .context("the root cluster has no real node with an InternalIP")
}

/// A node's InternalIP.
pub fn internal_ip(node: &Node) -> Option<String> {
    node.status
        .iter()
        .flat_map(|s| s.addresses.iter().flatten())
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
}

/// A burst cluster's node cut off from the root's nodes and pods but for one port (the
/// hub's federation port: `scripts/real-node.sh isolate`) while this lives.
pub struct Isolation {
    args: Vec<String>,
}

impl Isolation {
    /// Isolates the one real node of the cluster of `client` from the nodes of the cluster
    /// of `root` except on TCP `port`. The nodes' addresses say which `real-node.sh` made
    /// them: 10.251.OFFSET.(10+INDEX), named NAME-real-INDEX.
    pub async fn of(client: &kube::Client, root: &kube::Client, port: u16) -> Result<Isolation> {
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default().labels("testbed/real-node=true"))
            .await?;
        let node = nodes
            .items
            .first()
            .context("a real node in the burst cluster")?;
        let name = node.metadata.name.clone().unwrap_or_default();
        let (cluster, index) = name
            .rsplit_once("-real-")
            .context("a real-node.sh node name")?;
        let offset = |ip: &str| ip.split('.').nth(2).map(str::to_string);
        let own = internal_ip(node)
            .as_deref()
            .and_then(offset)
            .context("the burst node's address")?;
        let peer = node_ip(root).await?;
        let peer = offset(&peer).context("the root node's address")?;
        let args: Vec<String> = [cluster, &own, index]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let script = super::workspace_root().join("scripts/real-node.sh");
        let out = tokio::process::Command::new(&script)
            .arg("isolate")
            .args(&args)
            .args([peer, port.to_string()])
            .output()
            .await?;
        ensure!(
            out.status.success(),
            "real-node.sh isolate: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(Isolation { args })
    }
}

impl Drop for Isolation {
    fn drop(&mut self) {
        let script = super::workspace_root().join("scripts/real-node.sh");
        let _ = std::process::Command::new(script)
            .arg("unisolate")
            .args(&self.args)
            .status();
    }
}

/// The one real node of a testbed cluster: `NAME-real-INDEX` at 10.251.OFFSET.(10+INDEX).
#[derive(Clone, Debug)]
pub struct RealCluster {
    /// The testbed cluster's name.
    pub name: String,
    /// Its port offset.
    pub offset: String,
    /// Its node's index.
    pub index: String,
}

impl RealCluster {
    /// The cluster of `client`, from its real node's name and address.
    pub async fn of(client: &kube::Client) -> Result<RealCluster> {
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default().labels("testbed/real-node=true"))
            .await?;
        let node = nodes.items.first().context("a real node")?;
        let name = node.metadata.name.clone().unwrap_or_default();
        let (cluster, index) = name
            .rsplit_once("-real-")
            .context("a real-node.sh node name")?;
        let offset = internal_ip(node)
            .as_deref()
            .and_then(|ip| ip.split('.').nth(2).map(str::to_string))
            .context("the node's address")?;
        Ok(RealCluster {
            name: cluster.to_string(),
            offset,
            index: index.to_string(),
        })
    }

    /// Kills every process of its node at once (`real-node.sh lose`): kubelet,
    /// containerd and every pod, the spoke's and the brokers' with them, as a crash would.
    /// [`RealCluster::stop`] cleans up after.
    pub async fn lose(&self) -> Result<()> {
        run(
            super::workspace_root().join("scripts/real-node.sh"),
            &["lose", &self.name, &self.offset, &self.index],
        )
        .await
    }

    /// Stops the whole cluster: its node (kubelet, containerd and every pod on it, the
    /// spoke's with them; the node's state goes) and its control plane (its data stays).
    pub async fn stop(&self) -> Result<()> {
        run(
            super::workspace_root().join("scripts/real-node.sh"),
            &["down", &self.name, &self.offset, &self.index],
        )
        .await?;
        run(testbed()?.join("k8s/stop.sh"), &[&self.name]).await
    }

    /// Starts it again: its control plane with the data it had, and a fresh node of the
    /// same name with the images `scripts/e2e.sh` built (the pods bound to it start again).
    pub async fn start(&self) -> Result<()> {
        run(
            testbed()?.join("k8s/start.sh"),
            &[&self.name, &self.offset, "0"],
        )
        .await?;
        let images = super::workspace_root().join("target/images");
        let mut args: Vec<String> = ["up", &self.name, &self.offset, &self.index]
            .iter()
            .map(|s| s.to_string())
            .collect();
        for image in [
            "pause-testbed",
            "flux-app-bookworm",
            "flux-view-bookworm",
            "flux-hub-e2e",
        ] {
            args.push(
                images
                    .join(format!("{image}.oci.tar"))
                    .display()
                    .to_string(),
            );
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(super::workspace_root().join("scripts/real-node.sh"), &args).await
    }
}

/// The cluster DNS records (`scripts/real-node-dns.sh`) of the real-node cluster of
/// `client` that name namespace `ns`: for a test's diagnostics.
pub async fn dns_records(client: &kube::Client, ns: &str) -> String {
    let Ok(cluster) = RealCluster::of(client).await else {
        return "(not a real-node cluster)".to_string();
    };
    let file = format!("/opt/testbed/real-nodes/{}/hosts", cluster.name);
    match std::fs::read_to_string(&file) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().filter(|l| l.contains(ns)).collect();
            format!(
                "{file}: {} lines, for {ns}: {lines:?}",
                text.lines().count()
            )
        }
        Err(e) => format!("{file}: {e}"),
    }
}

/// The testbed (`FLUX_E2E_TESTBED`, which `scripts/e2e.sh` sets).
fn testbed() -> Result<PathBuf> {
    std::env::var_os("FLUX_E2E_TESTBED")
        .map(PathBuf::from)
        .context("FLUX_E2E_TESTBED (scripts/e2e.sh sets it)")
}

/// Runs `program` with `args` to its end; an error with its output unless it succeeds.
async fn run(program: PathBuf, args: &[&str]) -> Result<()> {
    let out = tokio::process::Command::new(&program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {}", program.display()))?;
    ensure!(
        out.status.success(),
        "{} {args:?}: {}\n{}",
        program.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// What an author sets so that every pod of the MiniCluster `doc` meets Pod Security
/// `restricted` (in the root cluster and in each burst cluster, which render the same
/// spec): one non-root user for the whole instance, no privilege escalation, every
/// capability dropped, the runtime's seccomp profile.
pub fn restricted(doc: &mut serde_json::Value) {
    let locked =
        serde_json::json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
    doc["spec"]["pod"]["securityContext"] = serde_json::json!({
        "runAsNonRoot": true,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    doc["spec"]["flux"]["container"]["securityContext"] = locked.clone();
    doc["spec"]["containers"][0]["securityContext"] = locked;
}
