//! `flux-spoke`: the spoke controller binary (see the `flux_spoke` library for what it
//! does).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use flux_shared::federation::diagnostics::{HubUrlError, error_chain, hub_host};
use flux_shared::federation::tls::{ClientSecurity, TransportSettings};
use flux_shared::federation::tls_flags::TlsFlags;
use flux_shared::federation::{Identity, identity_from_pem};
use flux_shared::ops::{Health, logging, server, shutdown};
use flux_spoke::cluster::Scope;
use flux_spoke::{Agent, AgentConfig, KubeCluster, Metrics};
use tokio::sync::watch;

/// Spoke controller: runs the bursts a Flux hub assigns to this cluster.
#[derive(Debug, Parser)]
#[command(name = "flux-spoke", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Connect to the hub, apply this cluster's assignments and report their status.
    Run(RunArgs),
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The hub's federation endpoint, e.g. `https://hub.example.org:8443` (`http://` with
    /// --insecure).
    #[arg(long, env = "FLUX_HUB", value_name = "URL")]
    hub: String,

    /// This spoke's name: the cluster name MiniClusters burst to. Must be the name in the
    /// client certificate.
    #[arg(long, env = "FLUX_SPOKE_NAME", value_name = "NAME")]
    name: String,

    /// This spoke's client certificate (`spoke-<name>.crt`) and the federation's CA.
    #[command(flatten)]
    tls: TlsFlags,

    /// The name the hub's certificate must carry [default: the host of --hub].
    #[arg(long, value_name = "DNS")]
    hub_domain: Option<String>,

    /// LOCAL DEVELOPMENT ONLY: plaintext to an insecure hub, naming this spoke in a request
    /// header that anyone could forge.
    #[arg(long)]
    insecure: bool,

    /// Address of the /metrics, /healthz and /readyz HTTP server.
    #[arg(long, default_value = "0.0.0.0:8081", value_name = "ADDR")]
    metrics_addr: SocketAddr,

    /// Log JSON lines instead of text.
    #[arg(long)]
    log_json: bool,

    /// Name of the ConfigMap, in this spoke's namespace, that holds its policy (key
    /// `policy.yaml`; `flux-hub join` writes it). Without one the spoke runs no burst.
    #[arg(long, env = "FLUX_SPOKE_POLICY", default_value = flux_shared::federation::policy::POLICY_CONFIGMAP, value_name = "CONFIGMAP")]
    policy: String,

    /// Act only in these namespaces (comma-separated; `flux-hub join` sets it to the
    /// namespaces its per-namespace Roles cover). Without it the spoke acts in every
    /// namespace, which needs its ClusterRole; an empty list: in none.
    #[arg(long, env = "FLUX_SPOKE_NAMESPACES", value_name = "NS,...")]
    namespaces: Option<String>,

    /// The address at which pods of this cluster reach this spoke (its pod IP; the
    /// Deployment sets it from `status.podIP`): where relayed bursts' brokers connect.
    /// Without it a relayed burst fails to apply, saying so.
    #[arg(long, env = "FLUX_SPOKE_RELAY_ADDRESS", value_name = "IP")]
    relay_address: Option<std::net::IpAddr>,

    /// A label of this spoke, `KEY=VALUE` (repeatable; `flux-hub join --label` sets them),
    /// announced to the hub: bursts whose `candidates` name `matchLabels` select spokes by
    /// the labels the root granted (join grants these at the hub); others are ignored.
    #[arg(long = "label", env = "FLUX_SPOKE_LABELS", value_delimiter = ',', value_name = "KEY=VALUE",
          value_parser = flux_shared::federation::spoke_labels::parse_flag)]
    labels: Vec<(String, String)>,

    /// How this cluster's pods reach the root cluster's nodes, as you know it: `direct`
    /// (they reach its NodePorts) or `relay` (they do not: bursts are relayed through this
    /// spoke and the hub). `flux-hub join --root-reach` sets it. The hub chooses the path
    /// of each burst that leaves `relay` unset from it and from what this spoke measures;
    /// without it, from the measurement alone.
    #[arg(long, env = "FLUX_SPOKE_ROOT_REACH", value_name = "direct|relay",
          value_parser = flux_shared::federation::root_reach::parse_flag)]
    root_reach: Option<flux_shared::federation::proto::RootPath>,

    /// Do not measure this cluster's room for the hub's placement (no `list`/`watch` on
    /// nodes and pods; the hub then places bursts here without knowing the room).
    #[arg(long)]
    no_room: bool,

    /// Delete a direct burst's Job once nothing was heard from the hub and its lead
    /// broker's endpoint was not reached for this long, in seconds, so that its brokers
    /// never come back beside the brokers the hub placed elsewhere with the same ranks. Keep
    /// it below half the hub's `--lost-cluster-grace-seconds` (default 300): the hub may
    /// place the burst elsewhere once its spoke was gone that long and its lead saw none of
    /// its brokers for half as long. `flux-hub join
    /// --fence-after-seconds` sets it.
    #[arg(long, env = "FLUX_SPOKE_FENCE_AFTER_SECONDS", default_value_t = AgentConfig::DEFAULT_FENCE_AFTER.as_secs(), value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(10..=3600))]
    fence_after_seconds: u64,

    /// Report a burst's lead broker unreachable once every attempt to reach it failed for
    /// this long, in seconds (a lead still starting refuses at first).
    #[arg(long, env = "FLUX_SPOKE_LEAD_UNREACHABLE_AFTER_SECONDS", default_value_t = AgentConfig::DEFAULT_LEAD_UNREACHABLE_AFTER.as_secs(), value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    lead_unreachable_after_seconds: u64,

    /// Report every assignment's status at least this often, in seconds.
    #[arg(long, default_value_t = 30, value_name = "SECONDS",
          value_parser = clap::value_parser!(u64).range(1..))]
    report_interval_seconds: u64,
}

/// Where the pod's namespace is mounted with its service account token.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The namespace this spoke runs in (no burst may be created there): `POD_NAMESPACE`, else
/// the service account's namespace file, else the default install's namespace.
fn own_namespace() -> String {
    pick_namespace(
        std::env::var("POD_NAMESPACE").ok(),
        std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE).ok(),
    )
}

fn pick_namespace(env: Option<String>, file: Option<String>) -> String {
    [env, file]
        .into_iter()
        .flatten()
        .map(|n| n.trim().to_string())
        .find(|n| !n.is_empty())
        .unwrap_or_else(|| flux_shared::validate::DEFAULT_SPOKE_NAMESPACE.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("flux-spoke: {}", error_chain(&*error));
            ExitCode::FAILURE
        }
    }
}

/// How to reach the hub, from the flags; every mistake is reported before anything
/// connects.
fn client_security(args: &RunArgs) -> Result<ClientSecurity> {
    let identity =
        Identity::spoke(&args.name).with_context(|| format!("--name {:?}", args.name))?;
    if args.insecure {
        let given = args.tls.given();
        if !given.is_empty() {
            bail!(
                "--insecure connects without TLS; drop {} (or drop --insecure to use mTLS)",
                given.join(", ")
            );
        }
        return Ok(ClientSecurity::InsecureDevelopment(identity));
    }
    let files = match args.tls.files() {
        Ok(files) => files,
        Err(missing) => bail!(
            "mutual TLS needs --ca, --cert and --key (missing: {}); --insecure is for local development only",
            missing.join(", ")
        ),
    };
    let tls = files.read().context("loading the TLS files")?;
    let cert = &files.cert;
    let cert_identity = identity_from_pem(tls.cert_pem()).with_context(|| {
        format!(
            "{}: not a federation client certificate (issue one with `flux-hub certs --spoke {}`)",
            cert.display(),
            args.name
        )
    })?;
    match cert_identity {
        Identity::Spoke(name) if name == args.name => {}
        Identity::Spoke(name) => bail!(
            "the client certificate {} is for spoke {name:?}, but --name is {:?}: use the certificate issued for this spoke (`flux-hub certs --spoke {}`) or fix --name",
            cert.display(),
            args.name,
            args.name
        ),
        Identity::Admin(name) => bail!(
            "the client certificate {} is an admin certificate ({name:?}), not a spoke certificate for {:?}",
            cert.display(),
            args.name
        ),
    }
    let domain = match &args.hub_domain {
        Some(domain) => domain.clone(),
        None => host_of_hub(&args.hub)?,
    };
    Ok(ClientSecurity::Mtls { tls, domain })
}

/// The host of the hub URL (without IPv6 brackets), or why `--hub` names none.
fn host_of_hub(hub: &str) -> Result<String> {
    match hub_host(hub) {
        Ok(host) => Ok(host),
        Err(e @ HubUrlError::Invalid(_)) => Err(e).context(format!("--hub {hub:?} is not a URL")),
        Err(HubUrlError::NoHost) => bail!(
            "--hub {hub:?} names no host; give one, or the hub's certificate name with --hub-domain"
        ),
    }
}

async fn run(args: RunArgs) -> Result<()> {
    logging::init(args.log_json);
    let security = client_security(&args)?;
    let settings = TransportSettings::default();
    // Reject a URL that does not fit the security mode now rather than in the retry loop.
    settings.endpoint(&args.hub, &security).with_context(|| {
        let mode = if args.insecure {
            "--insecure uses plaintext http://"
        } else {
            "mutual TLS uses https://"
        };
        format!("--hub {:?} ({mode})", args.hub)
    })?;

    let client = flux_shared::ops::kube_client::infer().await.context(
        "connecting to this cluster's Kubernetes API (in-cluster service account or KUBECONFIG)",
    )?;
    let namespace = own_namespace();
    let scope = Scope::from_flag(args.namespaces.as_deref()).map_err(anyhow::Error::msg)?;
    if scope.covers(&namespace) && scope != Scope::Cluster {
        anyhow::bail!(
            "--namespaces: {namespace:?} is this spoke's own namespace, where no burst may run"
        );
    }
    let labels: std::collections::BTreeMap<String, String> = args.labels.iter().cloned().collect();
    flux_shared::federation::spoke_labels::check(&labels)
        .map_err(|e| anyhow::anyhow!("--label: {e}"))?;
    let mut cluster = KubeCluster::new(client, scope).with_policy(&namespace, &args.policy);
    if !args.no_room {
        cluster = cluster.with_room();
    }
    // Events about the spoke go on its own Pod: `POD_NAME` (the Deployment sets it), else
    // the host name, which is the pod's name in Kubernetes.
    match std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .filter(|n| !n.is_empty())
    {
        Some(pod) => cluster = cluster.with_pod_events(&namespace, &pod),
        None => tracing::info!("no POD_NAME or HOSTNAME: no Events about the spoke"),
    }

    let metrics = Arc::new(Metrics::new());
    if let ClientSecurity::Mtls { tls, .. } = &security
        && let Some(not_after) = flux_shared::federation::pki::not_after_of_pem(tls.cert_pem())
    {
        metrics.set_certificate_expiry(not_after);
        let left = not_after
            - std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        if left < 30 * 86_400 {
            tracing::warn!(
                days_left = left / 86_400,
                "this spoke's certificate expires soon: renew it with flux-hub join --rotate"
            );
        }
    }
    let health = Arc::new(Health::new());
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            // The sender lives until the end of `run`.
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };

    let listener = server::bind(args.metrics_addr)
        .await
        .with_context(|| format!("binding --metrics-addr {}", args.metrics_addr))?;
    let encoder = {
        let metrics = Arc::clone(&metrics);
        move || metrics.encode()
    };
    let http = tokio::spawn(server::serve_listener(
        listener,
        encoder,
        Arc::clone(&health),
        stopped(),
    ));

    let config = AgentConfig {
        settings,
        report_interval: Duration::from_secs(args.report_interval_seconds),
        spoke_version: env!("CARGO_PKG_VERSION").to_string(),
        namespace: namespace.clone(),
        // Secret volumes are renewed in place: a rotated certificate is picked up.
        tls_files: args.tls.files().ok().filter(|_| !args.insecure),
        relay_address: args.relay_address,
        labels,
        root_reach: args.root_reach.unwrap_or_default(),
        fence_after: Duration::from_secs(args.fence_after_seconds),
        lead_unreachable_after: Duration::from_secs(args.lead_unreachable_after_seconds),
        ..AgentConfig::new(args.hub.clone(), security).context("this spoke's identity")?
    };
    tracing::info!(spoke = %args.name, federation = %config.identity.federation, hub = %args.hub, version = %config.spoke_version, %namespace, policy = %args.policy, namespaces = ?cluster.scope(), "flux-spoke starting");
    let agent = Agent::new(config, cluster, metrics);
    let mut applied = agent.applied();
    let ready = Arc::clone(&health);
    tokio::spawn(async move {
        if applied.wait_for(Option::is_some).await.is_ok() {
            ready.set_ready(true);
        }
    });
    tokio::spawn(async move {
        shutdown::signal().await;
        stop_tx.send_replace(true);
    });

    agent.run(stopped()).await;
    health.set_ready(false);
    match http.await {
        Ok(result) => result.context("the metrics server failed"),
        Err(e) => Err(e).context("the metrics server task failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::pick_namespace;

    #[test]
    fn the_namespace_comes_from_the_environment_then_the_service_account_then_the_default() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(pick_namespace(s("a"), s("b\n")), "a");
        assert_eq!(pick_namespace(s(""), s("b\n")), "b");
        assert_eq!(pick_namespace(None, None), "flux-spoke-system");
    }
}
