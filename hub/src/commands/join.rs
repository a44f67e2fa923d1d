//! `flux-hub join NAME`: a spoke's install in one command. Issues the spoke's client
//! certificate (SPIFFE identity of NAME) from the CA in `--certs` when missing (`--rotate`
//! issues a new one), server-side applies what `deploy/spoke/` holds with the hub's URL
//! and the spoke's name filled in, plus the `flux-spoke-tls` Secret, into the burst
//! cluster, then waits until the hub lists the spoke as connected (its Admin API, with an
//! admin certificate from `--certs`) and prints the spoke's status line. Running it again
//! changes nothing. It refuses, naming both values, to change the name or the hub of a
//! spoke already installed there (a `join` aimed at the wrong cluster would rename a
//! running spoke) unless `--force`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use flux_shared::federation::diagnostics::hub_host;
use flux_shared::federation::policy::{POLICY_CONFIGMAP, SpokePolicy};
use flux_shared::federation::proto::SpokeInfo;
use kube::Api;
use serde::Serialize;

use crate::commands::Format;
use crate::commands::certs::{self, CertsOptions};
use crate::commands::federation::{FederationArgs, FederationOptions, admin_certificate};
use crate::commands::install::{self, SPOKE_NAMESPACE, SpokeRbac, SpokeSettings};
use crate::commands::install_apply::{Applied, ClusterOptions, apply_all, wait_available};
use crate::commands::spoke_install::{delete_namespace_rbac, installed_policy, installed_spoke};

/// Options of `flux-hub join`.
#[derive(clap::Args, Debug, Clone)]
pub struct JoinOptions {
    /// The spoke's name: its certificate's identity and the bursts' `cluster`.
    pub name: String,
    /// The burst cluster.
    #[command(flatten)]
    pub cluster: ClusterOptions,
    /// The federation: its certificates and its hub.
    #[command(flatten)]
    pub federation: FederationArgs,
    /// The spoke's image (default: the one `deploy/spoke/deployment.yaml` names).
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Admit bursts from this namespace of the root cluster (repeatable; `NAME` or a
    /// prefix `NAME*`). Writes the spoke's policy with every other rule at its default
    /// (at most 32 brokers, namespaces it creates enforce Pod Security `baseline`).
    /// Without it or --policy, an existing policy is kept; a spoke with none runs no burst.
    #[arg(long, value_name = "NAMESPACE", conflicts_with = "policy")]
    pub allow_namespace: Vec<String>,
    /// Write the spoke's policy from this file (YAML; see docs/bursting-policy.md), checked
    /// before anything is applied.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Grant the spoke its permissions in every namespace (a ClusterRole; it then creates
    /// the namespaces bursts need) instead of a Role in each namespace the policy names
    /// (which join creates when missing). Needed when the policy admits namespaces by
    /// prefix.
    #[arg(long)]
    pub cluster_wide_rbac: bool,
    /// A label of the spoke, `KEY=VALUE` (repeatable): bursts whose `candidates` name
    /// `matchLabels` select spokes by them (region, cost tier, ...).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = flux_shared::federation::spoke_labels::parse_flag)]
    pub labels: Vec<(String, String)>,
    /// How the burst cluster's pods reach the root cluster's nodes, as you know it: `direct`
    /// (they reach its NodePorts) or `relay` (they do not). The hub chooses the path of
    /// each burst that leaves `relay` unset from it and from what the spoke measures.
    /// Written to the spoke's settings (join without it removes it).
    #[arg(long, value_name = "direct|relay", value_parser = flux_shared::federation::root_reach::parse_flag)]
    pub root_reach: Option<flux_shared::federation::proto::RootPath>,
    /// The spoke's `flux-spoke run --fence-after-seconds` (10 to 3600; default: the
    /// spoke's, 120): it deletes a direct burst's Job once neither the hub nor the burst's
    /// lead broker answered this long. Keep it below half the hub's --lost-cluster-grace-seconds.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(10..=3600))]
    pub fence_after_seconds: Option<u64>,
    /// The spoke's `flux-spoke run --lead-unreachable-after-seconds` (1 to 3600; default:
    /// the spoke's, 60): a direct burst whose lead broker refused every probe this long is
    /// reported `LeadUnreachable`, and the hub switches it to the relay when none of its
    /// brokers joined. Shorter switches sooner; a lead still starting refuses at first.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub lead_unreachable_after_seconds: Option<u64>,
    /// Do not let the spoke read the cluster's nodes and pods to measure its room for the
    /// hub's placement (no `flux-spoke-room` ClusterRole): the hub then places bursts here
    /// without knowing the room.
    #[arg(long)]
    pub no_room: bool,
    /// Issue a new certificate for the spoke (the spoke restarts with it).
    #[arg(long)]
    pub rotate: bool,
    /// Replace a spoke installed there with another name or another hub URL. The old
    /// spoke's running bursts are not deleted (they carry its name), but its hub loses it.
    #[arg(long)]
    pub force: bool,
    /// Wait until the hub lists the spoke as connected (`--wait=false`: return after
    /// applying).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub wait: bool,
    /// How long to wait, in seconds.
    #[arg(long, default_value_t = 180, value_name = "SECONDS")]
    pub timeout_seconds: u64,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Format,
}

/// The result of `flux-hub join`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JoinResult {
    /// The spoke.
    pub name: String,
    /// Every object, in apply order.
    pub applied: Vec<Applied>,
    /// Whether the hub listed the spoke as connected (false with `--wait=false`).
    pub connected: bool,
    /// The spoke's version as the hub saw it, when connected.
    pub spoke_version: Option<String>,
    /// The namespaces the spoke's RBAC covers; `None`: every namespace
    /// (`--cluster-wide-rbac`).
    pub rbac_namespaces: Option<Vec<String>>,
    /// The admin context join wrote for a hub given by `--hub` that the context file did
    /// not know: (name, file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_context: Option<(String, String)>,
}

/// The admin context for a hub `join` was given by flag (`url`, certificate name
/// `domain`), when the context file has none for it: join's read-only admin certificate,
/// named after the hub's host, current when no context is. An existing context (init's,
/// which may scale) is never replaced. Returns (name, file) when written.
fn write_join_context(
    fed: &FederationOptions,
    url: &str,
    domain: &str,
) -> anyhow::Result<Option<(String, String)>> {
    use crate::commands::admin_context as context;
    let Some(path) = context::path() else {
        return Ok(None);
    };
    let mut file = context::load(&path).map_err(anyhow::Error::msg)?;
    if file.contexts.iter().any(|c| c.hub == url) {
        return Ok(None);
    }
    let dir = fed
        .certs
        .canonicalize()
        .with_context(|| format!("--certs {}", fed.certs.display()))?;
    let (cert, key) = admin_certificate(&dir)?;
    let host = hub_host(url).map_err(anyhow::Error::msg)?;
    let mut name = host.clone();
    let mut n = 1;
    while file.contexts.iter().any(|c| c.name == name) {
        n += 1;
        name = format!("{host}-{n}");
    }
    let written = context::AdminContext {
        name: name.clone(),
        hub: url.to_string(),
        hub_domain: (domain != host).then(|| domain.to_string()),
        ca: dir.join("ca.crt"),
        cert,
        key,
    };
    if file.current.is_none() {
        file.set_current(written);
    } else {
        file.contexts.push(written);
    }
    context::save(&path, &file).map_err(anyhow::Error::msg)?;
    Ok(Some((name, path.display().to_string())))
}

/// The spoke's certificate and key (issued when missing or with `--rotate`).
fn spoke_certificates(
    opts: &JoinOptions,
    fed: &FederationOptions,
) -> anyhow::Result<(String, String)> {
    let dir = &fed.certs;
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .with_context(|| format!("{}: no {name} (run flux-hub init first)", dir.display()))
    };
    let (cert_file, key_file) = (
        format!("spoke-{}.crt", opts.name),
        format!("spoke-{}.key", opts.name),
    );
    let have = dir.join(&cert_file).is_file() && dir.join(&key_file).is_file();
    if !have || opts.rotate {
        let summary = certs::run(&CertsOptions {
            spokes: vec![opts.name.clone()],
            force: opts.rotate,
            ..CertsOptions::in_dir(dir)
        })?;
        eprint!("{summary}");
    } else {
        eprintln!(
            "{}: reusing the certificate of spoke {}",
            dir.display(),
            opts.name
        );
    }
    Ok((read(&cert_file)?, read(&key_file)?))
}

/// Pins `fingerprint` for the spoke at the hub and grants it its `--label`s there, retrying while the hub cannot be reached
/// or answers that it is not ready (a hub just installed or rolling out) for at most the
/// join's timeout. Returns the fingerprint it replaced, empty if none.
async fn pin(
    opts: &JoinOptions,
    fed: &FederationOptions,
    fingerprint: &str,
) -> anyhow::Result<String> {
    let hub = fed.spokes_admin_endpoint()?;
    // The spoke's labels are granted in the root with its pin: the hub selects it by
    // these, not by what it announces.
    let labels: std::collections::BTreeMap<String, String> = opts.labels.iter().cloned().collect();
    let timeout = Duration::from_secs(opts.timeout_seconds);
    let start = Instant::now();
    let mut last = String::new();
    loop {
        let attempt = async {
            let mut client = hub.connect().await?;
            hub.pin_spoke(&mut client, &opts.name, fingerprint, &labels)
                .await
        }
        .await;
        let error = match attempt {
            Ok(previous) => return Ok(previous),
            // The hub answered and declined: retrying will not change its mind. (A refused
            // certificate is retried: a hub just installed may still serve the TLS material
            // of an earlier install until its pods see the new Secret.)
            Err(e @ crate::commands::admin_client::AdminError::Declined { .. }) => {
                return Err(
                    anyhow::Error::from(e).context("pinning the spoke's certificate at the hub")
                );
            }
            Err(e) => format!("{e:#}"),
        };
        if start.elapsed() > timeout {
            bail!(
                "pinning the spoke's certificate at {} (for {}s): {error}",
                fed.hub,
                timeout.as_secs()
            );
        }
        if error != last {
            eprintln!("pinning the spoke's certificate: {error}; retrying");
            last = error;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits until the hub's Admin API lists spoke `name` as connected.
async fn wait_connected(
    opts: &JoinOptions,
    fed: &FederationOptions,
    timeout: Duration,
) -> anyhow::Result<SpokeInfo> {
    let hub = fed.admin_endpoint()?;
    let start = Instant::now();
    let mut last = String::new();
    loop {
        let seen = match hub.connect().await {
            Ok(mut client) => hub.spokes(&mut client).await.map_err(anyhow::Error::from),
            Err(e) => Err(anyhow::Error::from(e)),
        };
        let said = match seen {
            Ok(list) => match list.spokes.into_iter().find(|s| s.name == opts.name) {
                Some(s) if s.connected => return Ok(s),
                Some(_) => format!(
                    "the hub knows spoke {} but it is not connected yet",
                    opts.name
                ),
                None => format!("the hub has not heard from spoke {} yet", opts.name),
            },
            Err(e) => format!("{e:#}"),
        };
        if said != last {
            eprintln!("{said}; waiting");
            last = said.clone();
        }
        if start.elapsed() > timeout {
            bail!(
                "spoke {} did not connect to {} within {}s: {said} (kubectl -n {SPOKE_NAMESPACE} logs deployment/flux-spoke)",
                opts.name,
                fed.hub,
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Fails, naming the installed and the new values, when the burst cluster runs a spoke of
/// another name or hub (unless `--force`).
async fn refuse_to_change_another_spoke(
    client: &kube::Client,
    opts: &JoinOptions,
    settings: &SpokeSettings,
) -> anyhow::Result<()> {
    let Some(installed) = installed_spoke(client).await? else {
        return Ok(());
    };
    let changes = install::join_changes(&installed, settings);
    if changes.is_empty() {
        return Ok(());
    }
    let context = opts
        .cluster
        .context
        .as_deref()
        .unwrap_or("(current context)");
    if opts.force {
        eprintln!(
            "--force: replacing the spoke installed in {context}: {}",
            changes.join("; ")
        );
        return Ok(());
    }
    bail!(
        "the cluster of context {context} already runs a spoke, and join would change it: {}. \
         Is this the burst cluster you meant (--context, --kubeconfig)? To replace that spoke, \
         run `flux-hub unjoin` for it first, or pass --force",
        changes.join("; ")
    )
}

/// The policy `join` writes: from `--policy FILE` or `--allow-namespace`, checked; `None`
/// when neither is given (the installed one, if any, is kept).
pub fn requested_policy(opts: &JoinOptions) -> anyhow::Result<Option<SpokePolicy>> {
    if let Some(file) = &opts.policy {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("--policy {}: reading it", file.display()))?;
        let policy = SpokePolicy::parse(&text)
            .map_err(|e| anyhow::anyhow!("--policy {}: {e}", file.display()))?;
        return Ok(Some(policy));
    }
    if opts.allow_namespace.is_empty() {
        return Ok(None);
    }
    let policy = SpokePolicy::allowing(&opts.allow_namespace);
    policy.check().map_err(|e| {
        anyhow::anyhow!(
            "--allow-namespace {}: {e}",
            opts.allow_namespace.join(" --allow-namespace ")
        )
    })?;
    Ok(Some(policy))
}

/// The spoke's RBAC for `policy` (the one join writes, or the installed one): a Role in
/// each namespace the policy names, or every namespace when the owner asks for it
/// (`cluster_wide`). A policy admitting namespaces by prefix cannot be granted namespace
/// by namespace, and is refused without `--cluster-wide-rbac`.
pub fn spoke_rbac(policy: Option<&SpokePolicy>, cluster_wide: bool) -> anyhow::Result<SpokeRbac> {
    if cluster_wide {
        return Ok(SpokeRbac::ClusterWide);
    }
    let Some(policy) = policy else {
        return Ok(SpokeRbac::Namespaces(Default::default()));
    };
    let names = policy.granted_namespaces().map_err(|prefixes| {
        anyhow::anyhow!(
            "the policy admits namespaces by prefix ({}), and RBAC cannot grant those one by one: name the namespaces in the policy, or pass --cluster-wide-rbac to let the spoke act in every namespace",
            prefixes.join(", ")
        )
    })?;
    if names.contains(SPOKE_NAMESPACE) {
        bail!(
            "the policy names {SPOKE_NAMESPACE}, the spoke's own namespace, where no burst may run"
        );
    }
    Ok(SpokeRbac::Namespaces(names))
}

/// Creates each namespace of `rbac` that does not exist, with the Pod Security level the
/// policy gives it (`baseline` by default), so that the spoke's Roles have somewhere to
/// live. A namespace that exists is left exactly as it is.
async fn create_namespaces(
    client: &kube::Client,
    rbac: &SpokeRbac,
    policy: Option<&SpokePolicy>,
) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    let SpokeRbac::Namespaces(names) = rbac else {
        return Ok(());
    };
    let api: Api<Namespace> = Api::all(client.clone());
    for name in names {
        let level = policy
            .and_then(|p| p.namespace_rule(name))
            .and_then(|r| r.pod_security)
            .unwrap_or_default();
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                labels: Some(flux_shared::federation::spoke_rbac::namespace_labels(level)),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&kube::api::PostParams::default(), &ns).await {
            Ok(_) => eprintln!("Namespace {name}: created (Pod Security {level})"),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                eprintln!("Namespace {name}: exists (left as it is)");
            }
            Err(e) => return Err(e).with_context(|| format!("creating namespace {name}")),
        }
    }
    Ok(())
}

/// Runs `flux-hub join`.
pub async fn run(opts: &JoinOptions, out: &mut dyn Write) -> anyhow::Result<()> {
    flux_shared::federation::Identity::spoke(&opts.name)
        .map_err(|e| anyhow::anyhow!("NAME {:?}: {e}", opts.name))?;
    // A policy that does not check is refused before anything is issued or applied.
    let policy = requested_policy(opts)?;
    let (fed, from_context) = opts.federation.resolve()?;
    let (hub_url, hub_domain) = fed.hub_url_and_domain()?;
    let client = opts.cluster.client().await?;
    let settings = SpokeSettings {
        name: opts.name.clone(),
        hub_url: hub_url.clone(),
        hub_domain: hub_domain.clone(),
        labels: opts.labels.iter().cloned().collect(),
        room: !opts.no_room,
        root_reach: opts.root_reach.unwrap_or_default(),
        fence_after_seconds: opts.fence_after_seconds,
        lead_unreachable_after_seconds: opts.lead_unreachable_after_seconds,
    };
    flux_shared::federation::spoke_labels::check(&settings.labels)
        .map_err(|e| anyhow::anyhow!("--label: {e}"))?;
    // Before issuing anything: the wrong cluster is a refusal, not a new certificate.
    refuse_to_change_another_spoke(&client, opts, &settings).await?;
    // Before issuing anything too: while the CA is renewed, the hub must serve the new one.
    let ca = fed.spoke_trust().await?;
    if crate::commands::certs::renewal_under_way(&fed.certs) {
        eprintln!(
            "spoke {}: the CA is being renewed: the spoke trusts the new CA alone, and refuses the previous one's certificates",
            opts.name
        );
    }
    let (cert, key) = spoke_certificates(opts, &fed)?;
    // Pinned before the spoke runs with it: the hub then serves this name to this
    // certificate only, and a replaced one (--rotate) is refused from now on.
    let fingerprint = flux_shared::federation::pins::fingerprint_of_pem(&cert)
        .map_err(|e| anyhow::anyhow!("the spoke's certificate: {e}"))?;
    let replaced = pin(opts, &fed, &fingerprint).await?;
    if !replaced.is_empty() && replaced != fingerprint {
        eprintln!(
            "spoke {}: certificate {fingerprint} pinned; the one it replaces ({replaced}) is refused from now on",
            opts.name
        );
    }
    let installed_policy = match &policy {
        Some(_) => None,
        None => installed_policy(&client).await?,
    };
    let has_policy = policy.is_some() || installed_policy.is_some();
    let effective = policy.as_ref().or(installed_policy.as_ref());
    let rbac = spoke_rbac(effective, opts.cluster_wide_rbac)?;
    let mut objects =
        install::spoke_objects(&settings, opts.image.as_deref(), &rbac, &ca, &cert, &key)?;
    if let Some(p) = &policy {
        objects.push(install::spoke_policy_object(p));
    }
    create_namespaces(&client, &rbac, effective).await?;
    let applied = apply_all(&client, &objects).await?;
    delete_namespace_rbac(
        &client,
        match &rbac {
            SpokeRbac::Namespaces(names) => Some(names),
            SpokeRbac::ClusterWide => None,
        },
    )
    .await?;
    let timeout = Duration::from_secs(opts.timeout_seconds);
    let info = if opts.wait {
        wait_available(&client, SPOKE_NAMESPACE, "flux-spoke", timeout).await?;
        Some(wait_connected(opts, &fed, timeout).await?)
    } else {
        None
    };
    let result = JoinResult {
        name: opts.name.clone(),
        applied,
        connected: info.is_some(),
        spoke_version: info.as_ref().map(|i| i.spoke_version.clone()),
        rbac_namespaces: match &rbac {
            SpokeRbac::Namespaces(names) => Some(names.iter().cloned().collect()),
            SpokeRbac::ClusterWide => None,
        },
        admin_context: if from_context {
            None
        } else {
            write_join_context(&fed, &hub_url, &hub_domain)?
        },
    };
    match crate::commands::document(opts.output, &result)? {
        Some(document) => out.write_all(document.as_bytes())?,
        None => {
            let changed = result
                .applied
                .iter()
                .filter(|a| a.outcome != crate::commands::install_apply::Outcome::Unchanged)
                .count();
            writeln!(
                out,
                "spoke {} installed in namespace {SPOKE_NAMESPACE} ({changed} of {} objects changed)",
                result.name,
                result.applied.len()
            )?;
            match &policy {
                Some(p) => writeln!(
                    out,
                    "policy: bursts admitted from namespaces {} (at most {} brokers; to change it, edit ConfigMap {SPOKE_NAMESPACE}/{POLICY_CONFIGMAP}, then run join again to grant new namespaces)",
                    p.namespaces
                        .iter()
                        .map(|n| n.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    p.max_brokers()
                )?,
                None if has_policy => writeln!(
                    out,
                    "policy: the installed one is kept (ConfigMap {SPOKE_NAMESPACE}/{POLICY_CONFIGMAP})"
                )?,
                None => writeln!(
                    out,
                    "policy: none, so this spoke runs no burst; admit some with flux-hub join {} --allow-namespace NAMESPACE (or --policy FILE)",
                    opts.name
                )?,
            }
            match &result.rbac_namespaces {
                Some(names) if names.is_empty() => writeln!(
                    out,
                    "rbac: the spoke may act in no namespace (its policy names none)"
                )?,
                Some(names) => writeln!(
                    out,
                    "rbac: the spoke may act in namespaces {} only (a Role in each)",
                    names.join(", ")
                )?,
                None => writeln!(
                    out,
                    "rbac: the spoke may act in every namespace (ClusterRole, --cluster-wide-rbac)"
                )?,
            }
            match &info {
                Some(i) => writeln!(
                    out,
                    "spoke {} connected to {hub_url} (spoke version {}, {} assignments); bursts with cluster: {} run there",
                    i.name,
                    if i.spoke_version.is_empty() {
                        "?"
                    } else {
                        &i.spoke_version
                    },
                    i.assignments,
                    i.name
                )?,
                None => writeln!(
                    out,
                    "not waiting for it to connect (--wait=false); see flux-hub status"
                )?,
            }
            if let Some((name, path)) = &result.admin_context {
                writeln!(
                    out,
                    "admin context {name} written to {path} (read-only: flux-hub status --hub-context {name})"
                )?;
            }
        }
    }
    Ok(())
}

/// Entry point of `flux-hub join` (from `main`).
pub fn main(opts: &JoinOptions) -> ExitCode {
    crate::commands::run("flux-hub join", async |out| {
        run(opts, out).await.map_err(|e| format!("{e:#}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spokes_rbac_follows_the_policys_namespaces_and_is_cluster_wide_only_when_asked() {
        let named = SpokePolicy::allowing(&["team".into(), "lab".into()]);
        assert_eq!(
            spoke_rbac(Some(&named), false).unwrap(),
            SpokeRbac::Namespaces(["lab".to_string(), "team".to_string()].into())
        );
        assert_eq!(
            spoke_rbac(Some(&named), true).unwrap(),
            SpokeRbac::ClusterWide
        );
        assert_eq!(
            spoke_rbac(None, false).unwrap(),
            SpokeRbac::Namespaces(Default::default())
        );
        let prefixed = SpokePolicy::allowing(&["team".into(), "hpc-*".into()]);
        let err = spoke_rbac(Some(&prefixed), false).unwrap_err().to_string();
        assert!(
            err.contains("by prefix (hpc-*)") && err.contains("--cluster-wide-rbac"),
            "{err}"
        );
        assert_eq!(
            spoke_rbac(Some(&prefixed), true).unwrap(),
            SpokeRbac::ClusterWide
        );
        // The policy may name it (the spoke refuses such bursts); join grants nothing there.
        let own = SpokePolicy::allowing(&[SPOKE_NAMESPACE.into()]);
        let err = spoke_rbac(Some(&own), false).unwrap_err().to_string();
        assert!(err.contains("the spoke's own namespace"), "{err}");
    }
}
