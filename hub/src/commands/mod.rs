//! The one-shot commands of `flux-hub` (everything but `run`), and what they share at the
//! binary's edge: a single-threaded runtime, standard output, and the exit status.

pub mod admin_client;
pub mod burst;
pub mod certs;
pub mod coexist;
pub mod context;
pub mod convert;
pub mod init;
pub mod install;
pub mod join;
pub mod render;
pub mod status;
pub mod unjoin;

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

/// Output format of the one-shot commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Lines for a person.
    Text,
    /// One JSON object.
    Json,
}
