//! The one-shot commands of `flux-hub` (everything but `run`), and what they share at the
//! binary's edge: a single-threaded runtime, standard output, and the exit status.

pub mod admin_client;
pub mod admin_context;
pub mod burst;
pub mod certs;
pub mod convert;
pub mod federation;
pub mod init;
pub mod install;
pub mod install_apply;
pub mod join;
pub mod render;
pub mod revoke_admin;
pub mod spoke_install;
pub mod status;
pub mod trust_change;
pub mod unjoin;
pub mod version;

use std::fmt::Display;
use std::io::Write;
use std::process::ExitCode;

/// Runs `command` (given standard output) on a current-thread runtime: exit status 0, or
/// 1 after printing `<name>: <error>` on standard error.
pub fn run<E: Display>(
    name: &str,
    command: impl AsyncFnOnce(&mut dyn Write) -> Result<(), E>,
) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{name}: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    match runtime.block_on(command(&mut out)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Output format (`-o`) of every command that reports something, in kubectl's words: a
/// table (or lines) for a person, or one document for a program. `render` and `convert`,
/// which print manifests, take `yaml` and `json` only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns or lines for a person (`text` is accepted too).
    #[default]
    #[value(alias = "text")]
    Table,
    /// One JSON document.
    Json,
    /// One YAML document.
    Yaml,
}

/// `value` as a `-o json` (pretty) or `-o yaml` document, ending in a newline; `None` for
/// `-o table`, which each command prints in its own way.
pub fn document<T: serde::Serialize>(format: Format, value: &T) -> std::io::Result<Option<String>> {
    let text = match format {
        Format::Table => return Ok(None),
        Format::Json => serde_json::to_string_pretty(value).map(|mut t| {
            t.push('\n');
            t
        }),
        Format::Yaml => {
            return serde_yaml_ng::to_string(value)
                .map(Some)
                .map_err(std::io::Error::other);
        }
    };
    text.map(Some).map_err(std::io::Error::other)
}
