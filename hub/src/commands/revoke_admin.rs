//! `flux-hub revoke-admin`: refuse admin certificates from now on, or lift that.
//!
//! Admin certificates are not pinned (an admin may hold several at once), so one that
//! leaked is listed instead in the ConfigMap the hub watches
//! ([`flux_shared::federation::pins::REVOKED_ADMINS_CONFIGMAP`]): by its fingerprint, or
//! every certificate of an admin name. The hub refuses a listed certificate in the TLS
//! handshake and on every call, and ends its open streams, within seconds of the write.
//! Whoever may patch ConfigMaps in the hub's namespace may revoke: the root cluster's RBAC
//! decides, not the federation's certificates.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use flux_shared::federation::{Identity, pins, pki};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::commands::install::HUB_NAMESPACE;
use crate::commands::install_apply::ClusterOptions;

/// Options of `flux-hub revoke-admin`.
#[derive(clap::Args, Debug, Clone)]
pub struct RevokeAdminOptions {
    /// The root cluster (where the hub runs).
    #[command(flatten)]
    pub cluster: ClusterOptions,
    /// Admin certificate files (PEM, from `flux-hub certs --admin`): each of these
    /// certificates, and no other.
    #[arg(long = "cert", value_name = "FILE", num_args = 1.., value_delimiter = ',')]
    pub certs: Vec<PathBuf>,
    /// Certificate fingerprints (`sha256:` and 64 hex digits, as `openssl x509 -fingerprint
    /// -sha256` shows them without the colons, lowercase).
    #[arg(long = "fingerprint", value_name = "SHA256", num_args = 1.., value_delimiter = ',')]
    pub fingerprints: Vec<String>,
    /// Admin names: every certificate of each, issued before or after (a replacement
    /// certificate takes another name).
    #[arg(long = "admin", value_name = "NAME", num_args = 1.., value_delimiter = ',')]
    pub admins: Vec<String>,
    /// Why, kept beside each revocation for whoever reads the ConfigMap.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Lift these revocations instead: the certificates are accepted again.
    #[arg(long)]
    pub lift: bool,
    /// The ConfigMap the hub watches (its --revoked-admins): NAME in the hub's namespace,
    /// or NAMESPACE/NAME.
    #[arg(long, value_name = "CONFIGMAP", default_value = pins::REVOKED_ADMINS_CONFIGMAP)]
    pub configmap: String,
}

/// The longest `--reason` kept (a ConfigMap holds at most 1 MiB in all).
const MAX_REASON: usize = 256;

/// The ConfigMap keys these options name, each with the note to keep (`None` when lifting),
/// checked: nothing is written unless every one is valid.
pub fn entries(
    opts: &RevokeAdminOptions,
    read: impl Fn(&std::path::Path) -> std::io::Result<String>,
    now: &str,
) -> anyhow::Result<BTreeMap<String, Option<String>>> {
    if opts.certs.is_empty() && opts.fingerprints.is_empty() && opts.admins.is_empty() {
        bail!("name what to revoke: --cert FILE, --fingerprint SHA256 or --admin NAME");
    }
    let reason = opts.reason.as_deref().unwrap_or_default().trim();
    if reason.len() > MAX_REASON || reason.chars().any(char::is_control) {
        bail!("--reason: at most {MAX_REASON} bytes on one line");
    }
    let note = |what: String| {
        let mut note = format!("{what}, revoked {now}");
        if !reason.is_empty() {
            note.push_str(": ");
            note.push_str(reason);
        }
        (!opts.lift).then_some(note)
    };
    let mut out = BTreeMap::new();
    for path in &opts.certs {
        let pem = read(path).with_context(|| format!("--cert {}", path.display()))?;
        let identity = pki::identity_from_pem(&pem)
            .map_err(|e| anyhow::anyhow!("--cert {}: {e}", path.display()))?;
        let Identity::Admin(admin) = identity else {
            bail!(
                "--cert {}: {identity} is not an admin certificate (a spoke's certificate is replaced by flux-hub join --rotate, or refused after flux-hub unjoin)",
                path.display()
            );
        };
        let fingerprint = pins::fingerprint_of_pem(&pem)
            .map_err(|e| anyhow::anyhow!("--cert {}: {e}", path.display()))?;
        out.insert(
            pins::certificate_revocation_key(&fingerprint),
            note(format!("a certificate of admin {admin}")),
        );
    }
    for fingerprint in &opts.fingerprints {
        let fingerprint = fingerprint.to_ascii_lowercase();
        if !pins::is_fingerprint(&fingerprint) {
            bail!("--fingerprint {fingerprint:?}: must be sha256: and 64 hex digits");
        }
        out.insert(
            pins::certificate_revocation_key(&fingerprint),
            note("a certificate".to_string()),
        );
    }
    for admin in &opts.admins {
        let identity = Identity::admin(admin).map_err(|e| anyhow::anyhow!("--admin: {e}"))?;
        out.insert(
            pins::admin_revocation_key(identity.name()),
            note(format!("every certificate of admin {admin}")),
        );
    }
    Ok(out)
}

/// `--configmap` as (namespace, name).
fn location(opts: &RevokeAdminOptions) -> anyhow::Result<(String, String)> {
    flux_shared::validate::configmap_location(&opts.configmap, HUB_NAMESPACE).with_context(|| {
        format!(
            "--configmap {:?}: must be a ConfigMap name, or NAMESPACE/NAME",
            opts.configmap
        )
    })
}

/// Writes the revocations (or lifts them) and says what changed.
pub async fn run(opts: &RevokeAdminOptions, out: &mut dyn Write) -> anyhow::Result<()> {
    let now = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .context("formatting the time")?;
    let entries = entries(opts, |p| std::fs::read_to_string(p), &now)?;
    let (namespace, name) = location(opts)?;
    let client = opts.cluster.client().await?;
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let patch = json!({ "data": entries });
    let params = PatchParams::default();
    match api.patch(&name, &params, &Patch::Merge(&patch)).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 && opts.lift => {
            writeln!(
                out,
                "nothing is revoked: ConfigMap {namespace}/{name} does not exist"
            )?;
            return Ok(());
        }
        Err(kube::Error::Api(e)) if e.code == 404 => {
            let data: BTreeMap<&String, &String> = entries
                .iter()
                .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
                .collect();
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {
                    "app.kubernetes.io/name": "flux-hub",
                    "app.kubernetes.io/part-of": "flux-operator",
                }},
                "data": data,
            }))?;
            match api.create(&PostParams::default(), &cm).await {
                Ok(_) => {}
                // Created meanwhile: merge into it.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    api.patch(&name, &params, &Patch::Merge(&patch))
                        .await
                        .with_context(|| format!("writing ConfigMap {namespace}/{name}"))?;
                }
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("creating ConfigMap {namespace}/{name}"));
                }
            }
        }
        Err(e) => return Err(e).with_context(|| format!("writing ConfigMap {namespace}/{name}")),
    }
    let verb = if opts.lift { "lifted" } else { "revoked" };
    for key in entries.keys() {
        writeln!(out, "{verb} {key} (ConfigMap {namespace}/{name})")?;
    }
    writeln!(
        out,
        "the hub applies this within seconds, without a restart (it watches the ConfigMap)"
    )?;
    Ok(())
}

/// `flux-hub revoke-admin`.
pub fn main(opts: &RevokeAdminOptions) -> ExitCode {
    crate::commands::run("flux-hub revoke-admin", async |out| {
        run(opts, out).await.map_err(|e| format!("{e:#}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        opts: RevokeAdminOptions,
    }

    fn parse(args: &[&str]) -> RevokeAdminOptions {
        Cli::parse_from(std::iter::once("revoke-admin").chain(args.iter().copied())).opts
    }

    #[test]
    fn names_certificates_fingerprints_and_admins() {
        let ca = pki::Ca::generate("test CA").unwrap();
        let scope = flux_shared::federation::scope::AdminScope::everything();
        let alice = ca.issue_admin("alice", &scope, 30).unwrap();
        let spoke = ca
            .issue_client(&Identity::spoke("burst").unwrap(), 30)
            .unwrap();
        let files = BTreeMap::from([
            ("alice.crt", alice.cert_pem.clone()),
            ("spoke.crt", spoke.cert_pem.clone()),
        ]);
        let read = |p: &std::path::Path| {
            files
                .get(p.to_str().unwrap_or_default())
                .cloned()
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
        };
        let fp = pins::fingerprint(&alice.cert_der);
        let got = entries(
            &parse(&[
                "--cert",
                "alice.crt",
                "--admin",
                "mallory",
                "--reason",
                "laptop lost",
            ]),
            read,
            "2026-11-27T08:00:00Z",
        )
        .unwrap();
        assert_eq!(
            got,
            BTreeMap::from([
                (
                    pins::certificate_revocation_key(&fp),
                    Some("a certificate of admin alice, revoked 2026-11-27T08:00:00Z: laptop lost".into())
                ),
                (
                    "admin-mallory".into(),
                    Some("every certificate of admin mallory, revoked 2026-11-27T08:00:00Z: laptop lost".into())
                ),
            ])
        );
        let lifted = entries(&parse(&["--admin", "mallory", "--lift"]), read, "t").unwrap();
        assert_eq!(lifted, BTreeMap::from([("admin-mallory".into(), None)]));

        let refused = |args: &[&str], says: &str| {
            let e = entries(&parse(args), read, "t").unwrap_err().to_string();
            assert!(e.contains(says), "{args:?}: {e}");
        };
        refused(&[], "name what to revoke");
        refused(&["--cert", "spoke.crt"], "not an admin certificate");
        refused(&["--cert", "missing.crt"], "--cert missing.crt");
        refused(&["--fingerprint", "sha256:abc"], "64 hex digits");
        refused(&["--admin", "Not_A_Name"], "--admin");
        refused(&["--admin", "a", "--reason", "two\nlines"], "one line");
    }

    #[test]
    fn the_configmap_defaults_to_the_hubs_namespace() {
        let at = |args: &[&str]| location(&parse(args)).map_err(|e| e.to_string());
        assert_eq!(
            at(&["--admin", "a"]),
            Ok((HUB_NAMESPACE.into(), pins::REVOKED_ADMINS_CONFIGMAP.into()))
        );
        assert_eq!(
            at(&["--configmap", "hub/revoked"]),
            Ok(("hub".into(), "revoked".into()))
        );
        assert!(at(&["--configmap", "Bad/Name"]).is_err());
    }
}
