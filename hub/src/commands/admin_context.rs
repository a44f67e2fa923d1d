//! Admin contexts, like a kubeconfig's: where a hub is and which admin certificate to ask
//! it with, kept in one file so that `flux-hub status` and `flux-hub burst` need no flags.
//! `flux-hub init` writes one for the hub it installs and makes it current.
//!
//! The file is `$FLUX_HUB_CONFIG`, else `$XDG_CONFIG_HOME/flux-hub/config.yaml`, else
//! `~/.config/flux-hub/config.yaml`:
//!
//! ```yaml
//! current: root
//! contexts:
//!   - name: root
//!     hub: https://hub.example.org:8443
//!     ca: /home/me/certs/ca.crt
//!     cert: /home/me/certs/admin-flux-hub-admin.crt
//!     key: /home/me/certs/admin-flux-hub-admin.key
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The environment variable naming the context file.
pub const CONFIG_ENV: &str = "FLUX_HUB_CONFIG";

/// One hub and the admin certificate to ask it with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdminContext {
    /// The context's name.
    pub name: String,
    /// The hub's federation endpoint (`https://HOST:PORT`).
    pub hub: String,
    /// The name (or IP) the hub's certificate carries, when not the URL's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub_domain: Option<String>,
    /// The federation CA (PEM).
    pub ca: PathBuf,
    /// The admin certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

/// The context file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContextFile {
    /// The context used when none is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
    /// Every context.
    #[serde(default)]
    pub contexts: Vec<AdminContext>,
}

impl ContextFile {
    /// Context `name`, or the current one when `None`; the error says what is there.
    pub fn pick(&self, name: Option<&str>) -> Result<&AdminContext, String> {
        let wanted = name.or(self.current.as_deref()).ok_or_else(|| {
            "the context file names no current context: pass --hub-context NAME".to_string()
        })?;
        self.contexts
            .iter()
            .find(|c| c.name == wanted)
            .ok_or_else(|| {
                let known: Vec<&str> = self.contexts.iter().map(|c| c.name.as_str()).collect();
                format!(
                    "no admin context {wanted:?} (known: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                )
            })
    }

    /// Adds `context`, replacing one of the same name, and makes it current.
    pub fn set_current(&mut self, context: AdminContext) {
        self.current = Some(context.name.clone());
        match self.contexts.iter_mut().find(|c| c.name == context.name) {
            Some(existing) => *existing = context,
            None => self.contexts.push(context),
        }
    }
}

/// Where the context file is: [`CONFIG_ENV`], else under the user's configuration
/// directory; `None` without either (no HOME).
pub fn path() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env(CONFIG_ENV).or_else(|| {
        env("XDG_CONFIG_HOME")
            .or_else(|| env("HOME").map(|h| h.join(".config")))
            .map(|d| d.join("flux-hub").join("config.yaml"))
    })
}

/// Reads the context file at `path`; a missing file is an empty one.
pub fn load(path: &Path) -> Result<ContextFile, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_yaml_ng::from_str(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ContextFile::default()),
        Err(e) => Err(format!("reading {}: {e}", path.display())),
    }
}

/// Writes `file` to `path` whole (a temporary file renamed over it), readable by its owner
/// only: it names private keys.
pub fn save(path: &Path, file: &ContextFile) -> Result<(), String> {
    let text = serde_yaml_ng::to_string(file).map_err(|e| e.to_string())?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let tmp = path.with_extension("yaml.tmp");
    let write = || -> std::io::Result<()> {
        use std::io::Write as _;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut f = options.open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Which hub a command talks to: `--hub`, or the admin context that names it; and the name
/// its certificate carries. Shared by the admin commands and by `join`/`unjoin`.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct HubAddress {
    /// The hub's federation endpoint, `https://HOST:PORT` as `flux-hub init` printed it
    /// (`http://HOST:PORT` with --insecure; a bare `HOST:PORT` gets the scheme of the
    /// security mode). Without it, the admin context (--hub-context, else the current
    /// one, which `flux-hub init` writes) gives the hub and its certificates.
    #[arg(long, env = "FLUX_HUB", value_name = "URL")]
    pub hub: Option<String>,
    /// The admin context to use (default: the current one of the context file,
    /// FLUX_HUB_CONFIG or ~/.config/flux-hub/config.yaml).
    #[arg(
        long,
        env = "FLUX_HUB_CONTEXT",
        value_name = "NAME",
        conflicts_with = "hub"
    )]
    pub hub_context: Option<String>,
    /// The DNS name (or IP address) the hub's certificate must carry (default: the host of
    /// --hub, or the context's).
    #[arg(long, value_name = "DNS")]
    pub hub_domain: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(name: &str, hub: &str) -> AdminContext {
        AdminContext {
            name: name.into(),
            hub: hub.into(),
            hub_domain: None,
            ca: "/c/ca.crt".into(),
            cert: "/c/a.crt".into(),
            key: "/c/a.key".into(),
        }
    }

    #[test]
    fn contexts_are_picked_by_name_or_current_and_replaced_by_name() {
        let mut file = ContextFile::default();
        assert!(file.pick(None).unwrap_err().contains("no current context"));
        file.set_current(context("root", "https://a:8443"));
        file.set_current(context("lab", "https://b:8443"));
        assert_eq!(file.pick(None).unwrap().hub, "https://b:8443");
        assert_eq!(file.pick(Some("root")).unwrap().hub, "https://a:8443");
        assert!(
            file.pick(Some("gke"))
                .unwrap_err()
                .contains("no admin context \"gke\" (known: root, lab)")
        );
        file.set_current(context("root", "https://c:8443"));
        assert_eq!(file.contexts.len(), 2);
        assert_eq!(file.pick(None).unwrap().hub, "https://c:8443");
    }

    #[test]
    fn the_file_round_trips_privately_and_a_missing_one_is_empty() {
        let dir = std::env::temp_dir().join(format!("flux-hub-context-{}", std::process::id()));
        let path = dir.join("sub").join("config.yaml");
        assert_eq!(load(&path).unwrap(), ContextFile::default());
        let mut file = ContextFile::default();
        file.set_current(context("root", "https://a:8443"));
        save(&path, &file).unwrap();
        assert_eq!(load(&path).unwrap(), file);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "owner only: {mode:o}");
        }
        std::fs::write(&path, "contexts: [{name: x}]").unwrap();
        assert!(load(&path).unwrap_err().contains("missing field"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
