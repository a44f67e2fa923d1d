//! The federation a spoke joins or leaves (`join`, `unjoin`): the certificates `flux-hub
//! init` made and the hub's endpoint, from the flags or else from the admin context, and
//! the admin certificates these commands ask the hub with.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use flux_shared::federation::diagnostics::{hub_host, normalize_hub_url};

use flux_shared::federation::tls_flags::TlsFlags;

use crate::commands::admin_client::{HubEndpoint, HubOptions};
use crate::commands::admin_context::HubAddress;
use crate::commands::certs::{self, CertsOptions};

/// Name of the admin certificate `join` issues for itself to ask the hub.
const JOIN_ADMIN: &str = "flux-hub-join";

/// The federation a spoke joins or leaves, as given: the certificates `flux-hub init` made
/// and the hub's endpoint, from the flags or else from the admin context init wrote.
#[derive(clap::Args, Debug, Clone)]
pub struct FederationArgs {
    /// Directory of the federation's certificates (the CA `flux-hub init` made; default:
    /// the directory of the admin context's CA).
    #[arg(long, value_name = "DIR")]
    pub certs: Option<PathBuf>,
    /// Which hub.
    #[command(flatten)]
    pub address: HubAddress,
}

impl FederationArgs {
    /// The federation: the flags, completed from the admin context when `--hub` is not
    /// given (its hub, its certificate name, and its CA's directory for `--certs`). The
    /// second value says whether the context gave the hub.
    pub fn resolve(&self) -> anyhow::Result<(FederationOptions, bool)> {
        if let Some(hub) = &self.address.hub {
            let certs = self.certs.clone().context(
                "--certs DIR: the federation's certificates (flux-hub init made them) are needed with --hub",
            )?;
            let fed = FederationOptions {
                certs,
                hub: hub.clone(),
                hub_domain: self.address.hub_domain.clone(),
            };
            return Ok((fed, false));
        }
        let no_context = || {
            anyhow::anyhow!(
                "no --hub, and no admin context to take it from ({} or ~/.config/flux-hub/config.yaml; flux-hub init --certs DIR --hub-dns/--hub-ip writes one): pass --hub URL and --certs DIR",
                crate::commands::admin_context::CONFIG_ENV
            )
        };
        let path = crate::commands::admin_context::path().ok_or_else(no_context)?;
        let file = crate::commands::admin_context::load(&path).map_err(anyhow::Error::msg)?;
        if file.contexts.is_empty() {
            return Err(no_context());
        }
        Ok((self.completed_by(&path, &file)?, true))
    }

    /// The federation of the admin context these flags name (or the current one) in
    /// `file` (read from `path`), the flags given winning.
    fn completed_by(
        &self,
        path: &std::path::Path,
        file: &crate::commands::admin_context::ContextFile,
    ) -> anyhow::Result<FederationOptions> {
        let context = file
            .pick(self.address.hub_context.as_deref())
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let certs = match (&self.certs, context.ca.parent()) {
            (Some(dir), _) => dir.clone(),
            (None, Some(dir)) => dir.to_path_buf(),
            (None, None) => bail!(
                "admin context {}: its CA {} has no directory: pass --certs DIR",
                context.name,
                context.ca.display()
            ),
        };
        let fed = FederationOptions {
            certs,
            hub: context.hub.clone(),
            hub_domain: self
                .address
                .hub_domain
                .clone()
                .or_else(|| context.hub_domain.clone()),
        };
        Ok(fed)
    }
}

/// The federation a spoke joins or leaves: the certificates `flux-hub init` made and the
/// hub's endpoint ([`FederationArgs::resolve`]).
#[derive(Debug, Clone)]
pub struct FederationOptions {
    /// Directory of the federation's certificates.
    pub certs: PathBuf,
    /// The hub's endpoint (`https://HOST:8443`).
    pub hub: String,
    /// The name (or IP) the hub's certificate carries (default: the host of `hub`).
    pub hub_domain: Option<String>,
}

impl FederationOptions {
    /// The hub's URL and the name its certificate must carry.
    pub fn hub_url_and_domain(&self) -> anyhow::Result<(String, String)> {
        let url = normalize_hub_url(&self.hub, false);
        let domain = match &self.hub_domain {
            Some(d) => d.clone(),
            None => hub_host(&url).map_err(|e| {
                anyhow::anyhow!(
                    "--hub {url}: {e}; name the hub's certificate name with --hub-domain"
                )
            })?,
        };
        Ok((url, domain))
    }

    /// The hub's Admin API as an admin that may pin and forget spokes: a certificate
    /// issued from the CA in `--certs` for this command only (kept in memory, valid one
    /// day), so that no file on disk carries that permission.
    pub fn spokes_admin_endpoint(&self) -> anyhow::Result<HubEndpoint> {
        use flux_shared::federation::scope::Permission;
        let ca_pem = std::fs::read_to_string(self.certs.join("ca.crt"))
            .with_context(|| format!("{}: no ca.crt", self.certs.display()))?;
        let (endpoint, _) =
            self.throwaway_admin(&[Permission::Read, Permission::Spokes], Some(ca_pem))?;
        Ok(endpoint)
    }

    /// The hub's Admin API as an admin certificate with `permissions`, issued from the CA in
    /// `--certs` for this command only (in memory, valid one day), trusting `trust` (default:
    /// that CA alone, returned too).
    fn throwaway_admin(
        &self,
        permissions: &[flux_shared::federation::scope::Permission],
        trust: Option<String>,
    ) -> anyhow::Result<(HubEndpoint, String)> {
        let (url, domain) = self.hub_url_and_domain()?;
        let ca = certs::load_ca(&self.certs).with_context(|| {
            format!(
                "{}: the federation CA (from flux-hub init)",
                self.certs.display()
            )
        })?;
        let scope =
            flux_shared::federation::scope::AdminScope::new(permissions.iter().copied(), &[])
                .map_err(anyhow::Error::msg)?;
        let cert = ca.issue_admin(JOIN_ADMIN, &scope, 1)?;
        let current = ca.cert_pem().to_string();
        let trust = trust.unwrap_or_else(|| current.clone());
        let tls = flux_shared::federation::tls::TlsPem::new(trust, cert.cert_pem, cert.key_pem)?;
        Ok((HubEndpoint::with_tls(&url, &domain, tls), current))
    }

    /// What a spoke is given to trust: `ca.crt`; while a renewal of the CA is under way
    /// ([`certs::renewal_under_way`]), the new CA alone, so that the spoke refuses the
    /// previous CA's certificates from its next start. That needs the hub to present a
    /// certificate of the new CA already (asked once, with a throwaway admin certificate and
    /// that trust alone): until `flux-hub init` has handed it one, this is an error saying
    /// so.
    pub async fn spoke_trust(&self) -> anyhow::Result<String> {
        use flux_shared::federation::scope::Permission;
        if !certs::renewal_under_way(&self.certs) {
            return std::fs::read_to_string(self.certs.join("ca.crt"))
                .with_context(|| format!("{}: no ca.crt", self.certs.display()));
        }
        let (hub, current) = self.throwaway_admin(&[Permission::Read], None)?;
        let answered = async {
            let mut client = hub.connect().await?;
            hub.spokes(&mut client).await
        }
        .await;
        match answered {
            Ok(_) => Ok(current),
            Err(e) => bail!(
                "a renewal of the CA in {} is under way, and the hub at {} does not present a certificate of the new CA ({e}): run flux-hub init first, then join",
                self.certs.display(),
                self.hub
            ),
        }
    }

    /// The hub's Admin API, as the read-only admin certificate the install commands ask
    /// with (issued from the CA in `--certs` when missing).
    pub fn admin_endpoint(&self) -> anyhow::Result<HubEndpoint> {
        let (_, domain) = self.hub_url_and_domain()?;
        let (cert, key) = admin_certificate(&self.certs)?;
        Ok(HubEndpoint::new(&HubOptions {
            address: HubAddress {
                hub: Some(self.hub.clone()),
                hub_context: None,
                hub_domain: Some(domain),
            },
            tls: TlsFlags {
                ca: Some(self.certs.join("ca.crt")),
                cert: Some(cert),
                key: Some(key),
            },
            insecure: false,
            admin_name: None,
        })?)
    }
}

/// The admin certificate and key the install commands ask the hub with, issued from the
/// CA in `dir` when missing.
pub(crate) fn admin_certificate(dir: &std::path::Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let (cert, key) = (
        dir.join(format!("admin-{JOIN_ADMIN}.crt")),
        dir.join(format!("admin-{JOIN_ADMIN}.key")),
    );
    if !cert.is_file() || !key.is_file() {
        let summary = certs::run(&CertsOptions {
            admins: vec![JOIN_ADMIN.to_string()],
            // It only waits for spokes and shows status: read-only.
            admin_permissions: vec!["read".into()],
            ..CertsOptions::in_dir(dir)
        })?;
        eprint!("{summary}");
    }
    Ok((cert, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_hub_the_admin_context_gives_the_hub_and_the_certificates() {
        use crate::commands::admin_context::{AdminContext, ContextFile};
        let context = |name: &str, hub: &str| AdminContext {
            name: name.into(),
            hub: hub.into(),
            hub_domain: Some("hub.example.org".into()),
            ca: PathBuf::from("/home/me/certs/ca.crt"),
            cert: PathBuf::from("/home/me/certs/admin-flux-hub-admin.crt"),
            key: PathBuf::from("/home/me/certs/admin-flux-hub-admin.key"),
        };
        let file = ContextFile {
            current: Some("root".into()),
            contexts: vec![
                context("root", "https://192.0.2.1:31443"),
                context("other", "https://192.0.2.2:8443"),
            ],
        };
        let args = |certs: Option<&str>, name: Option<&str>| FederationArgs {
            certs: certs.map(PathBuf::from),
            address: HubAddress {
                hub_context: name.map(String::from),
                ..HubAddress::default()
            },
        };
        let path = std::path::Path::new("/home/me/.config/flux-hub/config.yaml");
        let fed = args(None, None).completed_by(path, &file).unwrap();
        assert_eq!(fed.hub, "https://192.0.2.1:31443");
        assert_eq!(fed.certs, PathBuf::from("/home/me/certs"));
        assert_eq!(fed.hub_domain.as_deref(), Some("hub.example.org"));
        let fed = args(Some("elsewhere"), Some("other"))
            .completed_by(path, &file)
            .unwrap();
        assert_eq!(
            (fed.hub.as_str(), fed.certs),
            ("https://192.0.2.2:8443", PathBuf::from("elsewhere"))
        );
        let e = args(None, Some("gone"))
            .completed_by(path, &file)
            .unwrap_err();
        assert!(
            format!("{e}").contains("no admin context \"gone\" (known: root, other)"),
            "{e}"
        );
        // Given --hub, the context is not read, and --certs is needed.
        let given = FederationArgs {
            address: HubAddress {
                hub: Some("https://192.0.2.9:8443".into()),
                ..HubAddress::default()
            },
            ..args(None, None)
        };
        let e = given.resolve().unwrap_err();
        assert!(format!("{e}").contains("--certs DIR"), "{e}");
    }
}
