//! The steps the scripts share ([`Ctx`]): progress messages, strict mode, the hooks, the
//! helper files, the flux user, the CURVE certificate, and the broker's signal forwarding
//! (the view's steps are in `view_steps.rs`).

use crate::api::{Commands, MiniClusterContainer, MiniClusterSpec, ViewMode};
use crate::layout::{self, Layout};
use crate::plan::Plan;

use super::CURVE_DIR_ENV;
use super::shell::{Sh, dq_text, parent, sq, word};
use super::shell::{is_identifier, one_line};

/// `run_broker CMD...`: runs the broker in the background and waits for it, passing on
/// SIGTERM. The entrypoint is the container's PID 1, and bash there ignores SIGTERM
/// unless it traps it: a deleted broker pod (a scale-down, a deleted MiniCluster) then
/// kept running until the grace period (the drain timeout + 30 s) ran out and it was
/// killed (seen on a real kubelet). With the trap the broker gets the signal at once (it
/// leaves, or the lead shuts its instance down), and a worker is not restarted.
pub(super) fn signal_forwarding(sh: &mut Sh) {
    sh.line("broker_pid=''");
    sh.line("terminating=false");
    sh.line("trap 'terminating=true; [ -z \"$broker_pid\" ] || kill -TERM \"$broker_pid\" 2>/dev/null || true' TERM");
    sh.open("run_broker() {");
    sh.line("# exec: broker_pid is the broker itself, not a subshell (traps keep bash from");
    sh.line("# running the command in place of the subshell).");
    sh.line("(exec \"$@\") &");
    sh.line("broker_pid=$!");
    sh.line("# A SIGTERM that came before broker_pid was set is passed on now.");
    sh.line("! $terminating || kill -TERM \"$broker_pid\" 2>/dev/null || true");
    sh.line("local status=0");
    sh.open("while :; do");
    sh.line("wait \"$broker_pid\" && status=0 || status=$?");
    sh.line("# A trapped signal interrupts wait: wait again while the broker runs.");
    sh.line("kill -0 \"$broker_pid\" 2>/dev/null || break");
    sh.close("done");
    sh.line("broker_pid=''");
    sh.line("return \"$status\"");
    sh.close("}");
}

/// Everything the script builders share.
pub(super) struct Ctx<'a> {
    pub(super) plan: &'a Plan,
    pub(super) spec: &'a MiniClusterSpec,
    pub(super) layout: &'a Layout,
    pub(super) runner: Option<&'a MiniClusterContainer>,
    pub(super) quiet: bool,
    pub(super) strict: bool,
    pub(super) timed: bool,
    pub(super) view_disabled: bool,
    pub(super) view_mode: ViewMode,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(plan: &'a Plan) -> Ctx<'a> {
        let spec = &plan.spec;
        let logging = spec.logging();
        Ctx {
            plan,
            spec,
            layout: &plan.layout,
            runner: spec.containers.get(plan.runner),
            quiet: logging.quiet(),
            strict: logging.strict(),
            timed: logging.timed(),
            view_disabled: spec.flux().view().disabled(),
            view_mode: plan.view_mode,
        }
    }

    /// A progress message (dropped in quiet mode); `msg` is data.
    pub(super) fn say(&self, sh: &mut Sh, msg: &str) {
        if !self.quiet {
            sh.linef(format_args!(
                "echo {}",
                sq(&format!("flux-operator: {msg}"))
            ));
        }
    }

    /// A progress message that expands shell variables; `msg` must be double-quote safe.
    pub(super) fn say_dq(&self, sh: &mut Sh, msg: &str) {
        if !self.quiet {
            sh.linef(format_args!("echo \"flux-operator: {msg}\""));
        }
    }

    /// Strict mode, the error trap and (when the script uses it) `die`.
    pub(super) fn prologue(&self, sh: &mut Sh, with_die: bool) {
        if self.strict {
            sh.line("set -eEu -o pipefail");
            sh.line(
                "trap 'echo \"flux-operator: command failed with status $? at line $LINENO\" >&2' ERR",
            );
        }
        if with_die {
            sh.line("");
            sh.open("die() {");
            sh.line("echo \"flux-operator: error: $*\" >&2");
            sh.line("exit 1");
            sh.close("}");
        }
    }

    /// `commands.init`, with its standard output silenced in quiet mode.
    pub(super) fn init_hook(&self, sh: &mut Sh, hooks: &Commands) {
        let Some(init) = Commands::hook(&hooks.init) else {
            return;
        };
        sh.line("");
        sh.line("# commands.init");
        if self.quiet {
            sh.line("{");
            sh.raw(init);
            sh.line("} >/dev/null");
        } else {
            sh.raw(init);
        }
    }

    /// A verbatim hook, preceded by a comment naming it.
    pub(super) fn hook(&self, sh: &mut Sh, name: &str, text: Option<&str>) {
        if let Some(text) = text {
            sh.line("");
            sh.linef(format_args!("# commands.{name}"));
            sh.raw(text);
        }
    }

    /// `flux-view.sh`, `flux-connect.sh` and `load-fluxion.sh` under the mount, for
    /// people who `kubectl exec` into a pod.
    pub(super) fn helper_files(&self, sh: &mut Sh) {
        let l = &self.layout;
        let view_sh = format!("{}/flux-view.sh", l.mount);
        let connect_sh = format!("{}/flux-connect.sh", l.mount);
        let fluxion_sh = format!("{}/load-fluxion.sh", l.mount);
        sh.linef(format_args!(
            "# Helpers for interactive use: . {}; then flux proxy to the instance (or run {}).",
            one_line(&view_sh),
            one_line(&connect_sh)
        ));
        sh.open("{");
        sh.linef(format_args!(
            "printf '%s\\n' {}",
            sq("# Environment of the Flux instance of this pod (generated at start-up).")
        ));
        sh.line("printf 'export PATH=%q\\n' \"$PATH\"");
        sh.line("printf 'export PYTHONPATH=%q\\n' \"${PYTHONPATH:-}\"");
        sh.line("printf 'export LD_LIBRARY_PATH=%q\\n' \"${LD_LIBRARY_PATH:-}\"");
        let mut statics = vec![format!(
            "export fluxsocket={}",
            word(&format!("local://{}", l.local_socket()))
        )];
        for (key, value) in &self.spec.flux().environment {
            if is_identifier(key) {
                statics.push(format!("export {key}={}", sq(value)));
            } else {
                statics.push(
                    "# skipped a flux.environment entry whose name is not a valid variable name"
                        .to_string(),
                );
            }
        }
        for line in statics {
            sh.linef(format_args!("printf '%s\\n' {}", sq(&line)));
        }
        sh.close(&format!("}} >{}", word(&view_sh)));
        sh.line("# shellcheck disable=SC2016 # expanded when flux-connect.sh runs");
        sh.linef(format_args!(
            "printf '%s\\n' '#!/bin/bash' {} 'exec flux proxy \"$fluxsocket\" bash' >{}",
            sq(&format!(". {}", word(&view_sh))),
            word(&connect_sh)
        ));
        sh.linef(format_args!(
            "printf '%s\\n' '#!/bin/bash' {} 'flux module remove sched-simple' 'flux module load sched-fluxion-resource' 'flux module load sched-fluxion-qmanager' >{}",
            sq("# Replace sched-simple with fluxion; run inside the instance (flux proxy)."),
            word(&fluxion_sh)
        ));
        sh.linef(format_args!(
            "chmod 0755 {} {}",
            word(&connect_sh),
            word(&fluxion_sh)
        ));
    }

    /// Create the flux user when running as root and it does not exist; never fatal.
    pub(super) fn flux_user(&self, sh: &mut Sh) {
        let (name, uid) = self.runner.map(|c| c.flux_user()).unwrap_or((
            crate::api::defaults::FLUX_USER_NAME,
            crate::api::defaults::FLUX_USER_UID,
        ));
        let user = word(name);
        let warn = format!(
            "echo {} >&2",
            sq(&format!(
                "flux-operator: warning: could not create user {name}"
            ))
        );
        sh.line("# The flux user (created when running as root and missing; never fatal).");
        sh.open(&format!(
            "if [ \"$(id -u)\" = 0 ] && ! id {user} >/dev/null 2>&1; then"
        ));
        sh.open("if command -v useradd >/dev/null 2>&1; then");
        sh.linef(format_args!(
            "useradd -m -u {uid} {user} >/dev/null 2>&1 || useradd -m {user} >/dev/null 2>&1 || {warn}"
        ));
        sh.mid("elif command -v adduser >/dev/null 2>&1; then");
        sh.linef(format_args!(
            "adduser -D -u {uid} {user} >/dev/null 2>&1 || adduser --disabled-password --gecos '' --uid {uid} {user} >/dev/null 2>&1 || {warn}"
        ));
        sh.mid("else");
        sh.line(&warn);
        sh.close("fi");
        sh.close("fi");
    }

    /// Copy the CURVE certificate where broker.toml expects it, private to this user.
    pub(super) fn curve_cert(&self, sh: &mut Sh) {
        let cert = self.layout.curve_cert();
        let dest = word(cert);
        sh.line("# Flux refuses a CURVE certificate that group or others can read.");
        sh.linef(format_args!(
            "curve_source=\"${{{CURVE_DIR_ENV}:-{}}}/{}\"",
            dq_text(layout::CURVE_MOUNT),
            layout::CURVE_KEY
        ));
        sh.linef(format_args!("mkdir -p {}", word(parent(cert))));
        sh.linef(format_args!("rm -f {dest}"));
        sh.linef(format_args!(
            "(umask 077 && cp \"$curve_source\" {dest}) || die \"cannot copy $curve_source\""
        ));
        sh.linef(format_args!("chmod 600 {dest}"));
    }
}
