//! `flux-hub init`: the hub's install in one command. Creates the federation CA and the
//! hub's certificate in `--certs` when missing (reuses them otherwise), server-side applies
//! what `deploy/` holds (CRD, namespace, RBAC, Deployment, Services, PDB; see
//! [`crate::commands::install`]) plus the `flux-hub-tls` Secret with field manager
//! [`INSTALLER_FIELD_MANAGER`](flux_shared::crd::INSTALLER_FIELD_MANAGER), waits until the hub is available, and prints the endpoint
//! spokes should dial. Progress goes to standard error, the result to standard output
//! (`-o json` for scripts). Running it again changes nothing. When an apply fails, what
//! this run created is deleted again, so nothing half-installed is left behind.

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::api::{Api, ListParams};
use serde::Serialize;

use crate::commands::Format;
use crate::commands::certs::{self, CertsOptions};
use crate::commands::install::{self, FEDERATION_PORT, FEDERATION_SERVICE, HUB_NAMESPACE};
use crate::commands::install_apply::{
    Applied, ClusterOptions, Outcome, apply_all, explain, wait_available,
};

/// Options of `flux-hub init`.
#[derive(clap::Args, Debug, Clone)]
pub struct InitOptions {
    /// The root cluster.
    #[command(flatten)]
    pub cluster: ClusterOptions,
    /// Directory of the federation's certificates (`flux-hub certs` layout); the CA and the
    /// hub's certificate are created there when missing. Without it, and without
    /// --hub-dns/--hub-ip, the hub runs MiniClusters in this cluster only (run init again
    /// with them to burst).
    #[arg(long, value_name = "DIR")]
    pub certs: Option<PathBuf>,
    /// DNS names spokes reach the hub at (its certificate carries them).
    #[arg(long = "hub-dns", value_name = "NAME", num_args = 1.., value_delimiter = ',')]
    pub hub_dns: Vec<String>,
    /// IP addresses spokes reach the hub at (its certificate carries them).
    #[arg(long = "hub-ip", value_name = "IP", num_args = 1.., value_delimiter = ',')]
    pub hub_ip: Vec<IpAddr>,
    /// How spokes reach the hub: `node-port` (the first --hub-dns, else --hub-ip, on the
    /// federation Service's node port: kind, bare metal) or `load-balancer` (the Service's
    /// load balancer address, waited for up to --timeout-seconds: GKE and other clouds).
    /// Default: `load-balancer` when only --hub-dns is given, else `node-port`.
    #[arg(long, value_enum, value_name = "MODE")]
    pub endpoint: Option<EndpointMode>,
    /// The hub's image (default: this release's, the one `deploy/deployment.yaml` names).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Wait until the hub is available (`--wait=false`: return after applying).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub wait: bool,
    /// How long to wait for the hub (and for a load balancer's address), in seconds.
    #[arg(long, default_value_t = 180, value_name = "SECONDS")]
    pub timeout_seconds: u64,
    /// The admin context init writes for this hub and makes current (see `flux-hub
    /// status`, which then needs no flags).
    #[arg(long, default_value = "default", value_name = "NAME")]
    pub hub_context: String,
    /// Install even though another controller of MiniClusters (the reference Go
    /// operator) is found in the cluster, replacing its CRD with flux-hub's.
    #[arg(long)]
    pub take_over: bool,
    /// Make the hub stop trusting a CA (`flux-hub certs --drop-previous-ca`) even while
    /// connected spokes still present certificates it issued: they are cut off until
    /// joined again.
    #[arg(long)]
    pub force: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Format,
}

/// What says that another controller of MiniClusters runs in the cluster of `client`
/// ([`crate::controller::coexist::other_controllers`]).
pub async fn other_controllers(client: &Client) -> anyhow::Result<Vec<String>> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds
        .get_metadata_opt("miniclusters.flux-framework.org")
        .await
        .map_err(explain)?;
    let deployments: Api<Deployment> = Api::all(client.clone());
    let listed = deployments
        .list(&ListParams::default())
        .await
        .map_err(explain)?;
    Ok(crate::controller::coexist::other_controllers(
        crd.as_ref().map(|c| &c.metadata),
        &listed.items,
    ))
}

/// The result of `flux-hub init`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitResult {
    /// Every object, in apply order.
    pub applied: Vec<Applied>,
    /// Whether the hub was seen available (false with `--wait=false`).
    pub ready: bool,
    /// The URL spokes dial (`https://HOST:8443`), when known.
    pub endpoint: Option<String>,
    /// The certificate directory; `None` for a single-cluster hub.
    pub certs: Option<String>,
    /// The admin context written for this hub, and the file it is in (with an endpoint).
    pub admin_context: Option<(String, String)>,
}

/// How spokes reach the hub (`init --endpoint`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndpointMode {
    /// A node's address (--hub-dns / --hub-ip) on the federation Service's node port.
    NodePort,
    /// The federation Service's load balancer address, on port 8443.
    LoadBalancer,
}

impl EndpointMode {
    /// `--endpoint`, or its default: a name alone (`--hub-dns`) means a cloud's load
    /// balancer the name will point at; a node address (`--hub-ip`) the node port.
    pub fn of(opts: &InitOptions) -> EndpointMode {
        opts.endpoint
            .unwrap_or(if opts.hub_ip.is_empty() && !opts.hub_dns.is_empty() {
                EndpointMode::LoadBalancer
            } else {
                EndpointMode::NodePort
            })
    }
}

/// The endpoint spokes dial: with `LoadBalancer`, the federation Service's balancer
/// address on port 8443 (`None` until the cloud set it); with `NodePort`, the first
/// `--hub-dns`, else the first `--hub-ip`, on the Service's node port (reachable on every
/// node without a balancer).
pub fn endpoint(
    service: Option<&Service>,
    mode: EndpointMode,
    hub_dns: &[String],
    hub_ip: &[IpAddr],
) -> Option<String> {
    if mode == EndpointMode::LoadBalancer {
        return balancer_address(service).map(|host| format!("https://{host}:{FEDERATION_PORT}"));
    }
    let host = hub_dns.first().cloned().or_else(|| {
        hub_ip.first().map(|ip| match ip {
            IpAddr::V6(v6) => format!("[{v6}]"),
            IpAddr::V4(v4) => v4.to_string(),
        })
    })?;
    let node_port = service
        .and_then(|s| s.spec.as_ref()?.ports.as_ref()?.first()?.node_port)
        .and_then(|p| u16::try_from(p).ok());
    Some(format!(
        "https://{host}:{}",
        node_port.unwrap_or(FEDERATION_PORT)
    ))
}

/// The first load balancer address (host name, else IP) of `service`.
fn balancer_address(service: Option<&Service>) -> Option<String> {
    service
        .and_then(|s| {
            s.status
                .as_ref()?
                .load_balancer
                .as_ref()?
                .ingress
                .as_ref()?
                .first()
                .cloned()
        })
        .and_then(|i| i.hostname.or(i.ip))
}

/// The endpoint spokes dial, reading the federation Service; with a load balancer, read
/// again every 2 s until the cloud gives it an address or `timeout` passes, saying on
/// standard error what it waits for. `None` for `timeout`: read once, without waiting
/// (`--wait=false`), and `None` while the balancer has no address.
async fn wait_endpoint(
    client: &Client,
    opts: &InitOptions,
    timeout: Option<Duration>,
) -> anyhow::Result<Option<String>> {
    let services: Api<Service> = Api::namespaced(client.clone(), HUB_NAMESPACE);
    let mode = EndpointMode::of(opts);
    let started = tokio::time::Instant::now();
    let mut said = false;
    loop {
        let service = services
            .get_opt(FEDERATION_SERVICE)
            .await
            .map_err(explain)?;
        let found = endpoint(service.as_ref(), mode, &opts.hub_dns, &opts.hub_ip);
        if found.is_some() || mode == EndpointMode::NodePort {
            return Ok(found);
        }
        let Some(timeout) = timeout else {
            return Ok(None);
        };
        if started.elapsed() >= timeout {
            bail!(
                "the Service {HUB_NAMESPACE}/{FEDERATION_SERVICE} got no load balancer address in {}s: a cluster without a load balancer controller (kind, bare metal) never gives one; run init again with --endpoint node-port and --hub-ip NODE_ADDRESS (or --hub-dns)",
                timeout.as_secs()
            );
        }
        if !said {
            eprintln!(
                "waiting up to {}s for the load balancer address of Service {HUB_NAMESPACE}/{FEDERATION_SERVICE} (the cloud provisions it; --endpoint node-port does without)",
                timeout.as_secs()
            );
            said = true;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The hub's TLS material: reused from `--certs` when there, issued there for
/// `--hub-dns`/`--hub-ip` otherwise; `None` for a single-cluster hub (neither given, or a
/// certificate directory with no hub certificate and no address to issue one for).
fn hub_certificates(opts: &InitOptions) -> anyhow::Result<Option<install::HubTls>> {
    let addresses = !(opts.hub_dns.is_empty() && opts.hub_ip.is_empty());
    let Some(dir) = &opts.certs else {
        if addresses {
            bail!(
                "--hub-dns/--hub-ip issue the hub's certificate: name where it goes with --certs DIR"
            );
        }
        return Ok(None);
    };
    let read = |name: &str| std::fs::read_to_string(dir.join(name));
    let tls = || -> anyhow::Result<install::HubTls> {
        Ok(install::HubTls {
            ca_pem: read("ca.crt")?,
            cert_pem: read("hub.crt")?,
            key_pem: read("hub.key")?,
        })
    };
    if let Ok(existing) = tls() {
        eprintln!(
            "{}: reusing the CA and the hub's certificate",
            dir.display()
        );
        return Ok(Some(existing));
    }
    if !addresses {
        eprintln!(
            "{}: no hub certificate, and no --hub-dns/--hub-ip to issue one for: installing a single-cluster hub",
            dir.display()
        );
        return Ok(None);
    }
    let summary = certs::run(&CertsOptions {
        hub_dns: opts.hub_dns.clone(),
        hub_ip: opts.hub_ip.clone(),
        ..CertsOptions::in_dir(dir)
    })?;
    eprint!("{summary}");
    Ok(Some(tls()?))
}

/// The admin that `init` writes a context for: it may read and scale, not manage spokes.
const INIT_ADMIN: &str = "flux-hub-admin";

/// Issues the admin certificate of [`INIT_ADMIN`] in `dir` when missing and writes the
/// admin context `--hub-context` for the hub at `url`, made current. Returns its name and
/// the file.
fn write_admin_context(
    opts: &InitOptions,
    dir: &Path,
    url: &str,
) -> anyhow::Result<(String, String)> {
    let dir = dir
        .canonicalize()
        .with_context(|| format!("--certs {}", dir.display()))?;
    let (cert, key) = (
        dir.join(format!("admin-{INIT_ADMIN}.crt")),
        dir.join(format!("admin-{INIT_ADMIN}.key")),
    );
    if !cert.is_file() || !key.is_file() {
        let summary = certs::run(&CertsOptions {
            admins: vec![INIT_ADMIN.to_string()],
            ..CertsOptions::in_dir(&dir)
        })?;
        eprint!("{summary}");
    }
    let path = crate::commands::admin_context::path()
        .context("no place for the admin context: set FLUX_HUB_CONFIG, XDG_CONFIG_HOME or HOME")?;
    let mut file = crate::commands::admin_context::load(&path).map_err(anyhow::Error::msg)?;
    file.set_current(crate::commands::admin_context::AdminContext {
        name: opts.hub_context.clone(),
        hub: url.to_string(),
        hub_domain: None,
        ca: dir.join("ca.crt"),
        cert,
        key,
    });
    crate::commands::admin_context::save(&path, &file).map_err(anyhow::Error::msg)?;
    Ok((opts.hub_context.clone(), path.display().to_string()))
}

/// Runs `flux-hub init`.
pub async fn run(opts: &InitOptions, out: &mut dyn Write) -> anyhow::Result<()> {
    let client = opts.cluster.client().await?;
    // Before anything is issued or applied: two controllers must not share MiniClusters.
    let others = other_controllers(&client).await?;
    if !others.is_empty() {
        if !opts.take_over {
            bail!("{}", crate::controller::coexist::refusal(&others));
        }
        eprintln!(
            "taking over from another controller of MiniClusters (--take-over): {}",
            others.join("; ")
        );
    }
    let tls = hub_certificates(opts)?;
    if let Some(tls) = &tls {
        crate::commands::trust_change::refuse_to_cut_off_spokes(
            &client,
            &tls.ca_pem,
            &opts.hub_context,
            opts.force,
        )
        .await?;
    }
    let objects = install::hub_objects(opts.image.as_deref(), tls.as_ref())?;
    let applied = apply_all(&client, &objects).await?;
    let ready = if opts.wait {
        wait_available(
            &client,
            HUB_NAMESPACE,
            "flux-hub",
            Duration::from_secs(opts.timeout_seconds),
        )
        .await?;
        true
    } else {
        false
    };
    let endpoint_url = match &tls {
        Some(_) => {
            let timeout = opts.wait.then(|| Duration::from_secs(opts.timeout_seconds));
            wait_endpoint(&client, opts, timeout).await?
        }
        None => None,
    };
    let admin_context = match (&opts.certs, &endpoint_url) {
        (Some(dir), Some(url)) => Some(write_admin_context(opts, dir, url)?),
        _ => None,
    };
    let result = InitResult {
        applied,
        ready,
        endpoint: endpoint_url,
        admin_context,
        certs: tls
            .as_ref()
            .and(opts.certs.as_ref())
            .map(|d| d.display().to_string()),
    };
    match crate::commands::document(opts.output, &result)? {
        Some(document) => out.write_all(document.as_bytes())?,
        None => {
            let changed = result
                .applied
                .iter()
                .filter(|a| a.outcome != Outcome::Unchanged)
                .count();
            writeln!(
                out,
                "hub installed in namespace {HUB_NAMESPACE} ({changed} of {} objects changed){}",
                result.applied.len(),
                if ready { ", available" } else { "" }
            )?;
            match (&result.certs, &result.endpoint) {
                (None, _) => writeln!(
                    out,
                    "single cluster: MiniClusters run here (kubectl apply -f examples/hello-world.yaml); to burst into other clusters, run init again with --certs DIR and --hub-dns or --hub-ip"
                )?,
                (Some(certs), Some(url)) => {
                    writeln!(
                        out,
                        "spokes dial {url}; add one with: flux-hub join NAME --kubeconfig FILE --certs {certs} --hub {url}"
                    )?;
                    if let Some((name, path)) = &result.admin_context {
                        writeln!(
                            out,
                            "admin context {name} (current) written to {path}: flux-hub status needs no flags"
                        )?;
                    }
                }
                (Some(_), None) => writeln!(out, "{}", no_endpoint_yet(EndpointMode::of(opts)))?,
            }
        }
    }
    Ok(())
}

/// What init says when it knows no endpoint for spokes: with a load balancer (and
/// `--wait=false`), that the cloud has not given the address yet and how the admin context,
/// which `status` and `join` read the hub from, gets it.
fn no_endpoint_yet(mode: EndpointMode) -> String {
    match mode {
        EndpointMode::LoadBalancer => format!(
            "no address for spokes yet: the Service {HUB_NAMESPACE}/{FEDERATION_SERVICE} has no load balancer address (--wait=false did not wait for the cloud to give one); run this init again without --wait=false: it changes nothing else, waits for the address, prints it and writes the admin context that flux-hub status and join read the hub from"
        ),
        EndpointMode::NodePort => "no address for spokes yet: give --hub-ip (a node's address, --endpoint node-port) or --hub-dns (--endpoint load-balancer)".to_string(),
    }
}

/// Entry point of `flux-hub init` (from `main`).
pub fn main(opts: &InitOptions) -> ExitCode {
    crate::commands::run("flux-hub init", async |out| {
        run(opts, out).await.map_err(|e| format!("{e:#}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_the_balancer_else_a_given_name() {
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "flux-hub-federation"},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.5"}]}},
        }))
        .expect("service");
        let ip: IpAddr = "192.0.2.9".parse().expect("ip");
        let (lb, np) = (EndpointMode::LoadBalancer, EndpointMode::NodePort);
        assert_eq!(
            endpoint(Some(&service), lb, &["hub.example.org".into()], &[]).as_deref(),
            Some("https://203.0.113.5:8443")
        );
        assert_eq!(
            endpoint(None, np, &["hub.example.org".into()], &[ip]).as_deref(),
            Some("https://hub.example.org:8443")
        );
        assert_eq!(
            endpoint(None, np, &[], &["2001:db8::1".parse().expect("ip")]).as_deref(),
            Some("https://[2001:db8::1]:8443")
        );
        assert_eq!(endpoint(None, np, &[], &[]), None);
        // A balancer still pending: no endpoint yet (init waits for it).
        assert_eq!(endpoint(None, lb, &["hub.example.org".into()], &[]), None);
        // No balancer (kind): the given name on the Service's node port.
        let kind: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "flux-hub-federation"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 8443, "nodePort": 31443}]},
        }))
        .expect("service");
        assert_eq!(
            endpoint(Some(&kind), np, &[], &["172.18.0.2".parse().expect("ip")]).as_deref(),
            Some("https://172.18.0.2:31443")
        );
        assert_eq!(endpoint(Some(&kind), lb, &[], &[]), None);
    }
}
