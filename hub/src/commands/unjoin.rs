//! `flux-hub unjoin NAME`: takes a spoke's install out of its burst cluster and makes the
//! hub forget the spoke. Refused, with the list, while MiniClusters assign bursts to it
//! (unless `--force`: the install goes, and the hub keeps the spoke, whose bursts show
//! Unreachable, until those bursts go). Removes what `flux-hub join` applied: the
//! `flux-spoke-system` namespace (the Deployment, ConfigMap and Secret with it) and the
//! spoke's ClusterRole and ClusterRoleBinding. The spoke's certificate files stay in
//! `--certs`.
//!
//! It first checks that the cluster it talks to runs spoke NAME (refusing, naming the
//! installed spoke, otherwise: the wrong `--context` must not uninstall another spoke).
//! With `--force`, a hub that cannot be reached does not stop it: the install goes and the
//! output says that the hub was not told, and what the hub does about it.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, DeleteParams};
use tonic::Code;

use crate::commands::admin_client::AdminError;
use crate::commands::federation::FederationArgs;
use crate::commands::install::SPOKE_ROOM_RBAC_NAME;
use crate::commands::install::{self, SPOKE_NAMESPACE};
use crate::commands::install_apply::ClusterOptions;
use crate::commands::spoke_install::installed_spoke;

/// Options of `flux-hub unjoin`.
#[derive(clap::Args, Debug, Clone)]
pub struct UnjoinOptions {
    /// The spoke's name.
    pub name: String,
    /// The burst cluster.
    #[command(flatten)]
    pub cluster: ClusterOptions,
    /// The federation: its certificates (for an admin certificate) and its hub.
    #[command(flatten)]
    pub federation: FederationArgs,
    /// Remove the install even while bursts are assigned to the spoke, or when the hub
    /// cannot be reached (it is then not told).
    #[arg(long)]
    pub force: bool,
    /// How long to wait for the spoke to disconnect and its namespace to go, in seconds.
    #[arg(long, default_value_t = 120, value_name = "SECONDS")]
    pub timeout_seconds: u64,
}

/// Runs `flux-hub unjoin`.
pub async fn run(opts: &UnjoinOptions, out: &mut dyn Write) -> anyhow::Result<()> {
    let cluster = opts.cluster.client().await?;
    let installed = installed_spoke(&cluster).await?;
    if let Some(why) = install::unjoin_mismatch(installed.as_ref(), &opts.name) {
        bail!(
            "refusing to unjoin spoke {}: {why}. Is this the burst cluster you meant (--context, --kubeconfig)?",
            opts.name
        );
    }

    // Forgetting a spoke (and removing its pin) needs the spokes permission: a
    // certificate issued from the CA for this command only.
    let (fed, _) = opts.federation.resolve()?;
    let hub = fed.spokes_admin_endpoint()?;
    let reached = async {
        let mut client = hub.connect().await?;
        let (snapshot, _) = hub.list(&mut client, "").await?;
        Ok::<_, AdminError>((client, snapshot))
    }
    .await;
    let (mut admin_client, snapshot) = match reached {
        Ok(reached) => reached,
        Err(e) if unreachable(&e) && opts.force => {
            eprintln!("{e}; --force: removing the install without telling the hub");
            return remove_install(opts, &cluster).await.and_then(|()| {
                writeln!(out, "{}", untold(&opts.name))?;
                Ok(())
            });
        }
        Err(e) if unreachable(&e) => bail!(
            "{e}; the hub must be told that spoke {} leaves (or pass --force to remove the install without telling it)",
            opts.name
        ),
        Err(e) => return Err(e.into()),
    };
    let assigned: Vec<String> = snapshot
        .miniclusters
        .iter()
        .flat_map(|mc| {
            let key = mc
                .minicluster
                .as_ref()
                .map(|r| format!("{}/{}", r.namespace, r.name))
                .unwrap_or_default();
            mc.bursts
                .iter()
                .filter(|b| b.spoke == opts.name)
                .map(move |b| format!("{key} (burst {})", b.burst_name))
        })
        .collect();
    if !assigned.is_empty() && !opts.force {
        bail!(
            "MiniClusters still burst into spoke {}: {}; remove those bursts first, or --force",
            opts.name,
            assigned.join(", ")
        );
    }

    remove_install(opts, &cluster).await?;
    let start = Instant::now();
    let timeout = Duration::from_secs(opts.timeout_seconds);
    if !assigned.is_empty() {
        writeln!(
            out,
            "spoke {} uninstalled; the hub keeps it while bursts are assigned to it: {}",
            opts.name,
            assigned.join(", ")
        )?;
        return Ok(());
    }
    // The spoke's stream ends with its pod; then the hub may forget it.
    loop {
        match hub.forget_spoke(&mut admin_client, &opts.name).await {
            Ok(()) => break,
            Err(crate::commands::admin_client::AdminError::Declined { message, .. })
                if message.contains("does not know") =>
            {
                break;
            }
            Err(e) if start.elapsed() > timeout => {
                bail!("the hub did not forget spoke {}: {e}", opts.name)
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
    writeln!(
        out,
        "spoke {} uninstalled and forgotten by the hub; its certificate is no longer pinned there, so the hub refuses it (the files stay in {})",
        opts.name,
        fed.certs.display()
    )?;
    Ok(())
}

/// Whether the hub could not be reached at all (as opposed to refusing or declining).
fn unreachable(error: &AdminError) -> bool {
    matches!(
        error,
        AdminError::Unreachable { .. }
            | AdminError::Call {
                code: Code::Unavailable | Code::DeadlineExceeded,
                ..
            }
    )
}

/// What `unjoin --force` says when the hub was not told (see `Registry::forget_spoke` and
/// the burst statuses of the hub for what it does).
fn untold(name: &str) -> String {
    format!(
        "spoke {name} uninstalled WITHOUT telling the hub (it could not be reached). The hub \
         still lists spoke {name}, disconnected. Bursts MiniClusters assign to it stay \
         assigned and show Unreachable (after 30 s); deleting such a MiniCluster waits \
         (bounded) for a spoke that will not answer. The burst objects it made stay in this \
         cluster (label flux-framework.org/spoke={name}) until you delete them. Drop those \
         bursts from their MiniClusters, then run `flux-hub unjoin {name}` again with the hub \
         reachable so that it forgets the spoke (a hub restart also forgets a spoke with no \
         bursts)"
    )
}

/// Deletes what `join` installed in the burst cluster and waits for its namespace to go.
async fn remove_install(opts: &UnjoinOptions, cluster: &kube::Client) -> anyhow::Result<()> {
    let dp = DeleteParams::background();
    let gone = |r: Result<_, kube::Error>, what: &str| match r {
        Ok(_) => {
            eprintln!("{what}: deleted");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => {
            eprintln!("{what}: not there");
            Ok(())
        }
        Err(e) => Err(anyhow::anyhow!("deleting {what}: {e}")),
    };
    let namespaces: Api<Namespace> = Api::all(cluster.clone());
    gone(
        namespaces.delete(SPOKE_NAMESPACE, &dp).await.map(drop),
        &format!("Namespace {SPOKE_NAMESPACE}"),
    )?;
    for name in ["flux-spoke", SPOKE_ROOM_RBAC_NAME] {
        gone(
            Api::<ClusterRoleBinding>::all(cluster.clone())
                .delete(name, &dp)
                .await
                .map(drop),
            &format!("ClusterRoleBinding {name}"),
        )?;
        gone(
            Api::<ClusterRole>::all(cluster.clone())
                .delete(name, &dp)
                .await
                .map(drop),
            &format!("ClusterRole {name}"),
        )?;
    }
    // The Roles join made in burst namespaces (the namespaces themselves stay: they may
    // hold more than bursts).
    crate::commands::spoke_install::delete_namespace_rbac(cluster, None).await?;

    let timeout = Duration::from_secs(opts.timeout_seconds);
    let start = Instant::now();
    while namespaces.get_opt(SPOKE_NAMESPACE).await?.is_some() {
        if start.elapsed() > timeout {
            bail!(
                "Namespace {SPOKE_NAMESPACE} is still terminating after {}s",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(())
}

/// Entry point of `flux-hub unjoin` (from `main`).
pub fn main(opts: &UnjoinOptions) -> ExitCode {
    crate::commands::run("flux-hub unjoin", async |out| {
        run(opts, out).await.map_err(|e| format!("{e:#}"))
    })
}
