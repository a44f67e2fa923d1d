//! `flux-hub certs`: create the federation's CA and issue the hub's server certificate and
//! spoke / admin client certificates.
//!
//! Files written into `--out` (keys mode 0600, certificates 0644, a new directory 0700):
//!
//! | file | what |
//! |---|---|
//! | `ca.crt`, `ca.key` | the CA (created when absent, reused when both exist) |
//! | `ca-cross.crt` | while a renewal of the CA is under way: the new CA signed by the previous one |
//! | `hub.crt`, `hub.key` | the hub's server certificate (with `--hub-dns` / `--hub-ip`) |
//! | `spoke-<name>.crt`, `spoke-<name>.key` | per `--spoke`: `spiffe://flux-framework.org/spoke/<name>` |
//! | `admin-<name>.crt`, `admin-<name>.key` | per `--admin`: `spiffe://flux-framework.org/admin/<name>` |
//!
//! Existing files are never overwritten without `--force`, and nothing is written unless
//! every file can be. An existing CA is always reused (also with `--force`), so spokes can
//! be added later; delete `ca.crt` and `ca.key` to start over with a new CA (a new
//! federation: every certificate issued before is refused, and spokes leave the bursts of
//! the old one alone).
//!
//! # Renewing the CA
//!
//! `--renew-ca` replaces the CA without stopping anything ([`pki::renewal`]): a new CA of
//! the same federation in `ca.key`, `ca.crt` holding the new CA and the previous one (both
//! trusted), `ca-cross.crt` the new CA signed by the previous one (appended to every
//! certificate issued while it is there), and every certificate of the directory issued
//! again from the new CA with a new key (same names, same scopes). `flux-hub init` and
//! `flux-hub join` then hand them out. `--drop-previous-ca` ends the renewal: `ca.crt`
//! holds the new CA alone, and the next `init` makes the hub refuse every certificate of
//! the previous one.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use flux_shared::federation::Identity;
use flux_shared::federation::pki::{
    self, Ca, DEFAULT_CA_VALIDITY_DAYS, DEFAULT_LEAF_VALIDITY_DAYS, IssuedCert,
};
use flux_shared::federation::scope::{AdminScope, Permission};

/// Options of `flux-hub certs`.
#[derive(clap::Args, Debug, Clone)]
pub struct CertsOptions {
    /// Directory to write into (created, mode 0700, when missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// DNS names for the hub's server certificate (repeat the flag or separate with commas).
    #[arg(long = "hub-dns", value_name = "NAME", num_args = 1.., value_delimiter = ',')]
    pub hub_dns: Vec<String>,
    /// IP addresses for the hub's server certificate.
    #[arg(long = "hub-ip", value_name = "IP", num_args = 1.., value_delimiter = ',')]
    pub hub_ip: Vec<IpAddr>,
    /// Spoke (burst cluster) names to issue client certificates for (DNS-1123 labels).
    #[arg(long = "spoke", value_name = "NAME", num_args = 1.., value_delimiter = ',')]
    pub spokes: Vec<String>,
    /// Admin names to issue client certificates for (DNS-1123 labels).
    #[arg(long = "admin", value_name = "NAME", num_args = 1.., value_delimiter = ',')]
    pub admins: Vec<String>,
    /// What the --admin certificates may do (repeat or separate with commas): `read`
    /// (status), `scale` (burst scale), `spokes` (join/unjoin's pin and forget).
    #[arg(long = "admin-permission", value_name = "PERMISSION", num_args = 1.., value_delimiter = ',', default_values_t = ["read".to_string(), "scale".to_string()])]
    pub admin_permissions: Vec<String>,
    /// Limit the --admin certificates to MiniClusters of these namespaces (repeat or
    /// separate with commas; default: every namespace).
    #[arg(long = "admin-namespace", value_name = "NAMESPACE", num_args = 1.., value_delimiter = ',')]
    pub admin_namespaces: Vec<String>,
    /// Lifetime of the hub, spoke and admin certificates, in days (capped at the CA's).
    #[arg(long, value_name = "DAYS", default_value_t = DEFAULT_LEAF_VALIDITY_DAYS)]
    pub days: u32,
    /// Lifetime of a newly created CA, in days.
    #[arg(long, value_name = "DAYS", default_value_t = DEFAULT_CA_VALIDITY_DAYS)]
    pub ca_days: u32,
    /// Common name of a newly created CA.
    #[arg(long, value_name = "NAME", default_value = "flux-federation CA")]
    pub ca_name: String,
    /// Overwrite existing certificates and keys (the CA is still reused).
    #[arg(long)]
    pub force: bool,
    /// Replace the CA with a new one of the same federation and issue every certificate of
    /// the directory again from it; both CAs are trusted until --drop-previous-ca. Then run
    /// `flux-hub init` and `flux-hub join` for each spoke again.
    #[arg(long, conflicts_with_all = ["hub_dns", "hub_ip", "spokes", "admins", "force", "drop_previous_ca"])]
    pub renew_ca: bool,
    /// End a renewal (--renew-ca): trust the new CA alone. Then run `flux-hub init` again;
    /// the hub refuses every certificate of the previous CA from then on.
    #[arg(long, conflicts_with_all = ["hub_dns", "hub_ip", "spokes", "admins", "force"])]
    pub drop_previous_ca: bool,
}

impl CertsOptions {
    /// The options of a plain `flux-hub certs --out DIR`: the CA (created or reused) and
    /// nothing else, at the default validities and permissions; set the fields to issue.
    pub fn in_dir(out: &std::path::Path) -> CertsOptions {
        CertsOptions {
            out: out.to_path_buf(),
            hub_dns: Vec::new(),
            hub_ip: Vec::new(),
            spokes: Vec::new(),
            admins: Vec::new(),
            admin_permissions: vec!["read".into(), "scale".into()],
            admin_namespaces: Vec::new(),
            days: DEFAULT_LEAF_VALIDITY_DAYS,
            ca_days: DEFAULT_CA_VALIDITY_DAYS,
            ca_name: "flux-federation CA".into(),
            force: false,
            renew_ca: false,
            drop_previous_ca: false,
        }
    }
}

const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
/// The new CA signed by the previous one, while a renewal is under way.
pub const CA_CROSS: &str = "ca-cross.crt";
const CERT_MODE: u32 = 0o644;
const KEY_MODE: u32 = 0o600;

/// One file to write.
struct Output {
    name: String,
    contents: String,
    mode: u32,
}

/// Runs `flux-hub certs`; returns the summary to print.
pub fn run(opts: &CertsOptions) -> anyhow::Result<String> {
    if opts.renew_ca {
        return renew_ca(opts);
    }
    if opts.drop_previous_ca {
        return drop_previous_ca(&opts.out);
    }
    let identities = identities(opts)?;
    let want_hub = !opts.hub_dns.is_empty() || !opts.hub_ip.is_empty();

    let dir = &opts.out;
    let (ca, ca_is_new) = load_or_create_ca(dir, opts)?;
    if !ca_is_new && !want_hub && identities.is_empty() {
        bail!(
            "{}: the CA exists and nothing else was asked for; name --hub-dns/--hub-ip, \
             --spoke or --admin",
            dir.display()
        );
    }

    // Issue everything in memory first: a bad name must not leave half the files behind.
    let mut outputs = Vec::new();
    let mut summary = Vec::new();
    if ca_is_new {
        outputs.push(cert_output(CA_CERT, ca.cert_pem().to_string()));
        outputs.push(key_output(CA_KEY, ca.key_pem()));
        summary.push(format!(
            "{CA_CERT}, {CA_KEY}: new CA {:?}, valid until {}",
            opts.ca_name,
            date(ca.not_after())
        ));
    } else {
        summary.push(format!(
            "{CA_CERT}, {CA_KEY}: existing CA reused, valid until {}",
            date(ca.not_after())
        ));
    }
    if want_hub {
        let hub = ca
            .issue_server(&opts.hub_dns, &opts.hub_ip, opts.days)
            .context("hub certificate")?;
        let names: Vec<String> = opts
            .hub_dns
            .iter()
            .cloned()
            .chain(opts.hub_ip.iter().map(IpAddr::to_string))
            .collect();
        summary.push(format!("hub.crt, hub.key: server {}", names.join(", ")));
        push_leaf(&mut outputs, "hub", hub);
    }
    let scope = admin_scope(opts)?;
    for identity in &identities {
        let stem = format!("{}-{}", identity.kind(), identity.name());
        let (cert, what) = match identity {
            Identity::Admin(name) => (
                ca.issue_admin(name, &scope, opts.days),
                format!("{} ({scope})", identity.spiffe_id()),
            ),
            Identity::Spoke(_) => (ca.issue_client(identity, opts.days), identity.spiffe_id()),
        };
        let cert = cert.with_context(|| format!("{stem} certificate"))?;
        summary.push(format!("{stem}.crt, {stem}.key: client {what}"));
        push_leaf(&mut outputs, &stem, cert);
    }

    if !opts.force {
        let existing: Vec<String> = outputs
            .iter()
            .map(|o| dir.join(&o.name))
            .filter(|p| p.exists())
            .map(|p| p.display().to_string())
            .collect();
        if !existing.is_empty() {
            bail!(
                "refusing to overwrite {} (pass --force to replace them)",
                existing.join(", ")
            );
        }
    }

    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    for output in &outputs {
        write_file(dir, output)?;
    }
    Ok(summarize(dir, summary))
}

fn summarize(dir: &Path, summary: Vec<String>) -> String {
    let mut out = format!("{}:\n", dir.display());
    for line in summary {
        out.push_str("  ");
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The CA of `dir` (`ca.crt`, `ca.key`), with the cross-signed copy appended to what it
/// issues while a renewal is under way (`ca-cross.crt`).
pub fn load_ca(dir: &Path) -> anyhow::Result<Ca> {
    let read = |name: &str| {
        fs::read_to_string(dir.join(name))
            .with_context(|| format!("reading {}", dir.join(name).display()))
    };
    let ca = Ca::from_pem(&read(CA_CERT)?, &read(CA_KEY)?)
        .with_context(|| format!("loading the CA from {}", dir.display()))?;
    match dir.join(CA_CROSS).exists() {
        true => Ok(ca.with_chain(&read(CA_CROSS)?)),
        false => Ok(ca),
    }
}

/// Whether a renewal of the CA in `dir` is under way (`--renew-ca` and no
/// `--drop-previous-ca` yet).
pub fn renewal_under_way(dir: &Path) -> bool {
    dir.join(CA_CROSS).exists()
}

/// The certificates of `dir` besides the CA's (`hub.crt`, `spoke-*.crt`, `admin-*.crt`
/// with their keys), by stem, sorted.
fn leaves(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut stems = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".crt") else {
            continue;
        };
        let ours = stem == "hub" || stem.starts_with("spoke-") || stem.starts_with("admin-");
        if ours && dir.join(format!("{stem}.key")).is_file() {
            stems.push(stem.to_string());
        }
    }
    stems.sort();
    Ok(stems)
}

/// `--renew-ca`: a new CA of the same federation, both trusted, every certificate issued
/// again from the new one.
fn renew_ca(opts: &CertsOptions) -> anyhow::Result<String> {
    let dir = &opts.out;
    if renewal_under_way(dir) {
        bail!(
            "{}: a renewal of the CA is under way ({CA_CROSS} exists): finish it with --drop-previous-ca (after flux-hub init and join) before renewing again",
            dir.display()
        );
    }
    let previous = load_ca(dir)?;
    let trusted = fs::read_to_string(dir.join(CA_CERT))
        .with_context(|| format!("reading {}", dir.join(CA_CERT).display()))?;
    let now = time::OffsetDateTime::now_utc();
    // A name of its own: the previous CA stays trusted beside it.
    let name = format!(
        "{} (renewed {} {:02}:{:02}:{:02} UTC)",
        opts.ca_name,
        date(now),
        now.hour(),
        now.minute(),
        now.second()
    );
    let renewal = previous.renew(&name, opts.ca_days)?;
    let ca = &renewal.ca;
    let mut outputs = vec![
        cert_output(CA_CERT, pki::renewal::trust_during_renewal(ca, &trusted)),
        key_output(CA_KEY, ca.key_pem()),
        cert_output(CA_CROSS, renewal.cross_pem.clone()),
    ];
    let mut summary = vec![
        format!(
            "{CA_CERT}, {CA_KEY}: new CA {name:?} of federation {}, valid until {}; {CA_CERT} also trusts the previous CA until --drop-previous-ca",
            ca.federation(),
            date(ca.not_after())
        ),
        format!(
            "{CA_CROSS}: the new CA signed by the previous one, appended to every certificate it issues"
        ),
    ];
    for stem in leaves(dir)? {
        let path = dir.join(format!("{stem}.crt"));
        let pem =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let cert = ca
            .reissue(&pem, opts.days)
            .with_context(|| format!("{}", path.display()))?;
        summary.push(format!(
            "{stem}.crt, {stem}.key: issued again from the new CA"
        ));
        push_leaf(&mut outputs, &stem, cert);
    }
    summary.push(
        "next: flux-hub init and flux-hub join for each spoke, then flux-hub certs --drop-previous-ca and flux-hub init"
            .to_string(),
    );
    // The CA's files last: a failure part way leaves the previous CA in charge.
    outputs.rotate_left(3);
    for output in &outputs {
        write_file(dir, output)?;
    }
    Ok(summarize(dir, summary))
}

/// `--drop-previous-ca`: trust the current CA alone.
fn drop_previous_ca(dir: &Path) -> anyhow::Result<String> {
    if !renewal_under_way(dir) {
        bail!(
            "{}: no renewal of the CA is under way (no {CA_CROSS}; flux-hub certs --renew-ca starts one)",
            dir.display()
        );
    }
    let ca = load_ca(dir)?;
    let key_id = ca.key_id();
    let mut outputs = vec![cert_output(CA_CERT, ca.cert_pem().to_string())];
    let mut summary = vec![format!(
        "{CA_CERT}: the current CA alone, valid until {}; run flux-hub init: the hub then refuses every certificate of the previous CA",
        date(ca.not_after())
    )];
    for stem in leaves(dir)? {
        let path = dir.join(format!("{stem}.crt"));
        let pem =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        if pki::issuer_key_id_of_pem(&pem) != key_id {
            summary.push(format!(
                "{stem}.crt: issued by another CA, refused once the hub trusts the current CA alone (issue it again with --force)"
            ));
            continue;
        }
        // The copy signed by the previous CA is of no use any more.
        if let Some(leaf) = pki::certificate_blocks(&pem).first()
            && leaf.len() < pem.len()
        {
            outputs.push(cert_output(&format!("{stem}.crt"), (*leaf).to_string()));
        }
    }
    for output in &outputs {
        write_file(dir, output)?;
    }
    fs::remove_file(dir.join(CA_CROSS))
        .with_context(|| format!("removing {}", dir.join(CA_CROSS).display()))?;
    Ok(summarize(dir, summary))
}

/// The scope of the --admin certificates, checked.
pub fn admin_scope(opts: &CertsOptions) -> anyhow::Result<AdminScope> {
    let permissions = opts
        .admin_permissions
        .iter()
        .map(|p| {
            Permission::parse(p).ok_or_else(|| {
                anyhow::anyhow!("--admin-permission {p:?}: one of read, scale, spokes")
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    AdminScope::new(permissions, &opts.admin_namespaces)
        .map_err(|e| anyhow::anyhow!("--admin-permission / --admin-namespace: {e}"))
}

/// The requested client identities, validated, without duplicates.
fn identities(opts: &CertsOptions) -> anyhow::Result<Vec<Identity>> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let spokes = opts.spokes.iter().map(|n| Identity::spoke(n));
    let admins = opts.admins.iter().map(|n| Identity::admin(n));
    for identity in spokes.chain(admins) {
        let identity = identity?;
        if !seen.insert(identity.clone()) {
            bail!("{identity} is named twice");
        }
        out.push(identity);
    }
    Ok(out)
}

fn load_or_create_ca(dir: &Path, opts: &CertsOptions) -> anyhow::Result<(Ca, bool)> {
    let (cert_path, key_path) = (dir.join(CA_CERT), dir.join(CA_KEY));
    match (cert_path.exists(), key_path.exists()) {
        (true, true) => Ok((load_ca(dir)?, false)),
        (false, false) => Ok((
            Ca::generate_with_validity(&opts.ca_name, opts.ca_days)?,
            true,
        )),
        (true, false) => bail!(
            "{} exists but {} does not: both or neither are needed",
            cert_path.display(),
            key_path.display()
        ),
        (false, true) => bail!(
            "{} exists but {} does not: both or neither are needed",
            key_path.display(),
            cert_path.display()
        ),
    }
}

/// `YYYY-MM-DD` (UTC).
fn date(t: time::OffsetDateTime) -> String {
    format!("{:04}-{:02}-{:02}", t.year(), u8::from(t.month()), t.day())
}

fn cert_output(name: &str, contents: String) -> Output {
    Output {
        name: name.to_string(),
        contents,
        mode: CERT_MODE,
    }
}

fn key_output(name: &str, contents: String) -> Output {
    Output {
        name: name.to_string(),
        contents,
        mode: KEY_MODE,
    }
}

fn push_leaf(outputs: &mut Vec<Output>, stem: &str, cert: IssuedCert) {
    outputs.push(cert_output(&format!("{stem}.crt"), cert.cert_pem));
    outputs.push(key_output(&format!("{stem}.key"), cert.key_pem));
}

/// Writes through a temporary file created with the final mode, then renames it into
/// place: a key is never readable by others, not even briefly, and a reader never sees a
/// half-written file.
fn write_file(dir: &Path, output: &Output) -> anyhow::Result<()> {
    let path = dir.join(&output.name);
    let tmp = dir.join(format!(".{}.tmp-{}", output.name, std::process::id()));
    let result = (|| -> std::io::Result<()> {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(output.mode)
            .open(&tmp)?;
        // The umask may have removed bits; set exactly the intended mode.
        file.set_permissions(fs::Permissions::from_mode(output.mode))?;
        file.write_all(output.contents.as_bytes())?;
        file.sync_all()?;
        fs::rename(&tmp, &path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.with_context(|| format!("writing {}", path.display()))
}
