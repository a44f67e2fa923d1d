//! What rank 0 runs as its initial program ([`Program`], from the flux-running
//! container's command, `commands.script` and mode flags), and where the scripts put the
//! files a command needs.

use crate::api::{Commands, MiniClusterContainer, MiniClusterSpec};
use crate::plan::Plan;

use super::shell::sq;
use super::shell::{Sh, split_words, word};

pub(super) static NO_COMMANDS: Commands = Commands {
    init: None,
    pre: None,
    broker_pre: None,
    worker_pre: None,
    service_pre: None,
    post: None,
    prefix: None,
    script: None,
};

/// What rank 0 runs as its initial program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// No initial program: the broker stays up until `flux shutdown` (`broker.rc2_none`).
    Interactive,
    /// Flux diagnostics, then `sleep infinity`.
    Diagnostics,
    /// The command itself (it submits its own jobs).
    Launcher,
    /// A `flux batch` script of the command's lines.
    Batch,
    /// `flux submit ... --watch <command>`.
    Submit,
}

/// How rank 0's initial program is given to `flux start`.
pub(super) enum Initial {
    /// No initial program.
    None,
    /// Shell words placed after the broker arguments.
    Direct(Vec<String>),
    /// A bash program (`lines`) run with `bash -c`, and its positional arguments.
    Wrapped {
        lines: Vec<String>,
        args: Vec<String>,
    },
}

/// The resolved initial program of rank 0.
pub(super) struct Program<'a> {
    pub(super) kind: Kind,
    /// `commands.script`, written to a file and used as the command.
    pub(super) script: Option<&'a str>,
    /// The command as shell words (already quoted).
    pub(super) words: Vec<String>,
    /// The command's lines, for batch mode.
    pub(super) lines: Vec<String>,
}

impl<'a> Program<'a> {
    pub(super) fn kind(spec: &MiniClusterSpec, runner: Option<&MiniClusterContainer>) -> Kind {
        let Some(c) = runner else {
            return Kind::Interactive;
        };
        let has_command = c.command().is_some() || Commands::hook(&c.commands().script).is_some();
        if c.diagnostics.unwrap_or(false) {
            Kind::Diagnostics
        } else if spec.interactive() || !has_command {
            Kind::Interactive
        } else if c.batch.unwrap_or(false) {
            Kind::Batch
        } else if c.launcher.unwrap_or(false) || spec.launcher.unwrap_or(false) {
            Kind::Launcher
        } else {
            Kind::Submit
        }
    }

    pub(super) fn of(plan: &Plan, runner: Option<&'a MiniClusterContainer>) -> Program<'a> {
        let kind = Program::kind(&plan.spec, runner);
        let script = runner.and_then(|c| Commands::hook(&c.commands().script));
        let (words, lines) = match (script, runner.and_then(|c| c.command())) {
            (Some(text), _) => {
                let words = script_invocation(text, &custom_script_path(plan.runner));
                let line = words.join(" ");
                (words, vec![line])
            }
            (None, Some(command)) => (
                split_words(command).map(word).collect(),
                command.lines().map(str::to_string).collect(),
            ),
            (None, None) => (Vec::new(), Vec::new()),
        };
        Program {
            kind,
            // Only a flux-running container that runs something needs the file.
            script: script.filter(|_| kind != Kind::Interactive && kind != Kind::Diagnostics),
            words,
            lines,
        }
    }
}

/// `<namespace>/<name>` of the MiniCluster.
pub(super) fn qualified_name(plan: &Plan) -> String {
    format!("{}/{}", plan.namespace, plan.name)
}

/// Path of the file `commands.script` of the flux runner is written to. It is the same
/// on every broker, since a job may run it on any of them.
pub(super) fn custom_script_path(index: usize) -> String {
    format!("/tmp/flux-operator-script-{index}.sh")
}

/// Path of the file `commands.script` of a sidecar is written to.
pub(super) fn sidecar_script_path(index: usize) -> String {
    format!("/tmp/flux-operator-sidecar-{index}.sh")
}

/// The shell words that run a custom script written to `path`: directly when it has
/// a `#!` line, else with bash.
pub(super) fn script_invocation(text: &str, path: &str) -> Vec<String> {
    if text.trim_start().starts_with("#!") {
        vec![word(path)]
    } else {
        vec!["/bin/bash".to_string(), word(path)]
    }
}

/// Write `text` to `path` with a quoted heredoc (no expansion at all) whose delimiter
/// does not occur as a line of `text`, and make it executable.
pub(super) fn write_script_file(sh: &mut Sh, text: &str, path: &str) {
    let mut delimiter = String::from("FLUX_OPERATOR_SCRIPT_EOF");
    let mut n = 0;
    while text.lines().any(|l| l == delimiter) {
        n += 1;
        delimiter = format!("FLUX_OPERATOR_SCRIPT_EOF_{n}");
    }
    sh.line("# commands.script, written verbatim (no expansion).");
    sh.linef(format_args!("cat >{} <<'{delimiter}'", word(path)));
    sh.raw(text);
    sh.raw(&delimiter);
    sh.linef(format_args!(
        "chmod 0755 {} || die {}",
        word(path),
        sq(&format!("cannot write {path}"))
    ));
}
