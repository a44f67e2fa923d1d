//! The view's steps of the entrypoints: Flux's configuration tree, Flux from the view on
//! the search paths, and how a container gets the view: a copy made by the init
//! container, or the view container's files read in place (linked through its root, or
//! copied by it where the kernel refuses the reader that).

use crate::api::ViewMode;
use crate::layout;

use super::shell::{Sh, dq_text, parent, sq, word};
use super::steps::Ctx;
use super::{CONFIG_DIR_ENV, VIEW_WAIT_SECONDS};

impl Ctx<'_> {
    /// Flux's configuration tree under the mount, broker.toml and R copied from the
    /// ConfigMap: the init container's first step (its strict mode stops it on a
    /// failure), or the broker's own when the pod has no init container (`die`s).
    pub(super) fn config_tree(&self, sh: &mut Sh, guarded: bool) {
        let l = self.layout;
        let guard = |what: &str| {
            if guarded {
                format!(" || die {}", sq(&format!("cannot {what}")))
            } else {
                String::new()
            }
        };
        sh.linef(format_args!(
            "config_dir=${{{CONFIG_DIR_ENV}:-{}}}",
            word(layout::CONFIG_MOUNT)
        ));
        self.say(sh, &format!("preparing {}", l.mount));
        sh.linef(format_args!(
            "mkdir -p {} {} {} {} {}{}",
            word(l.broker_config_dir()),
            word(l.cron_dir()),
            word(l.rundir()),
            word(l.statedir()),
            word(parent(l.curve_cert())),
            guard(&format!(
                "create the configuration tree under {}",
                l.config_root()
            ))
        ));
        for (key, path) in [
            (
                layout::BROKER_TOML_KEY,
                format!("{}/{}", l.broker_config_dir(), layout::BROKER_TOML_KEY),
            ),
            (layout::R_KEY, l.r_path().to_string()),
        ] {
            sh.linef(format_args!(
                "cp \"$config_dir/{key}\" {}{}",
                word(&path),
                guard(&format!("copy {key} to {path}"))
            ));
        }
    }

    /// Whether the broker prepares the configuration tree itself (no init container).
    pub(super) fn broker_prepares_config(&self) -> bool {
        self.view_mode != ViewMode::Copy
    }

    /// Flux from the view on the search paths, the view itself (see [`ViewMode`]), the
    /// HOME fallback. `broker`: the flux-running container, which sets the view up (a
    /// failure is fatal); a sidecar waits for it, or copies the software tree, with a
    /// warning when that fails.
    pub(super) fn view_environment(&self, sh: &mut Sh, broker: bool) {
        let l = self.layout;
        if self.view_disabled {
            sh.line("# flux.container.disable: Flux comes from the image itself.");
        } else {
            sh.line("# Flux from the view.");
            sh.linef(format_args!("view={}", word(l.view())));
            sh.line("export PATH=\"$PATH:$view/bin\"");
            match self
                .spec
                .flux()
                .view()
                .python_path
                .as_deref()
                .filter(|p| !p.is_empty())
            {
                Some(path) => sh.linef(format_args!("python_path={}", word(path))),
                None => {
                    sh.line("python_path=");
                    sh.open("for candidate in \"$view\"/lib/python3*/site-packages; do");
                    sh.open("if [ -d \"$candidate\" ]; then");
                    sh.line("python_path=$candidate");
                    sh.line("break");
                    sh.close("fi");
                    sh.close("done");
                }
            }
            sh.open("if [ -n \"$python_path\" ]; then");
            sh.line("export PYTHONPATH=\"${PYTHONPATH:+$PYTHONPATH:}$python_path\"");
            sh.close("fi");
            sh.line("export LD_LIBRARY_PATH=\"${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$view/lib\"");
            sh.linef(format_args!(
                "# The view's symlinks point into {}.",
                layout::SOFTWARE_MOUNT
            ));
            match (self.view_mode, broker) {
                (ViewMode::InPlace, true) => self.view_in_place(sh),
                (ViewMode::InPlace, false) => self.wait_for_view(sh),
                _ => self.copy_software(sh, broker),
            }
        }
        sh.open(&format!(
            "if [ \"${{HOME:-/}}\" = / ] && [ -d {home} ]; then",
            home = word(layout::HOME_MOUNT)
        ));
        sh.linef(format_args!("export HOME={}", word(layout::HOME_MOUNT)));
        sh.close("fi");
    }

    /// The software tree the init container (or the view container) copied, copied back
    /// where the view's symlinks point.
    fn copy_software(&self, sh: &mut Sh, fatal: bool) {
        let l = self.layout;
        let message = format!("cannot copy {} to {}", l.software(), layout::SOFTWARE_MOUNT);
        let failure = if fatal {
            format!("die {}", sq(&message))
        } else {
            format!(
                "echo {} >&2",
                sq(&format!("flux-operator: warning: {message}"))
            )
        };
        sh.linef(format_args!(
            "{{ mkdir -p {sw} && cp -a {from} {to}; }} || {failure}",
            sw = word(layout::SOFTWARE_MOUNT),
            from = word(&format!("{}/.", l.software())),
            to = word(&format!("{}/", layout::SOFTWARE_MOUNT)),
        ));
    }

    /// The broker's view, read in place: it records its PID (the view container stays
    /// while it runs), finds the view container's process, and links the view and each
    /// entry of the software tree to that process's root. Where the kernel refuses this
    /// container that root (another user, or fewer capabilities than the view container),
    /// the view container copies the view into the mount and the software tree straight
    /// into the pod's software volume (which it mounts under the view mount), as its own
    /// user: nothing is copied twice. Either way the broker then marks the view ready for
    /// the sidecars.
    fn view_in_place(&self, sh: &mut Sh) {
        let l = self.layout;
        let name = self.spec.flux().view().name();
        let exchange = l.view_exchange();
        sh.linef(format_args!(
            "# Read in place from the view container {} (no copy): its files through its root,",
            super::shell::one_line(name)
        ));
        sh.line("# /proc/PID/root, in the pod's process namespace.");
        sh.linef(format_args!("exchange={}", word(exchange)));
        sh.line("namespace=$(readlink \"/proc/$$/ns/pid\" 2>/dev/null) || namespace=unknown");
        sh.line("{ mkdir -p \"$exchange\" && echo \"$$ $namespace\" >\"$exchange/broker\"; } || die \"cannot write $exchange/broker\"");
        sh.linef(format_args!("deadline=$((SECONDS + {VIEW_WAIT_SECONDS}))"));
        sh.open("until [ -s \"$exchange/view\" ]; do");
        sh.linef(format_args!(
            "[ \"$SECONDS\" -lt \"$deadline\" ] || die {}",
            sq(&format!(
                "the view container {name} did not serve the view in {VIEW_WAIT_SECONDS}s"
            ))
        ));
        sh.line("sleep 0.1 2>/dev/null || sleep 1");
        sh.close("done");
        sh.line("read -r view_pid view_namespace view_source <\"$exchange/view\" || die \"cannot read $exchange/view\"");
        sh.linef(format_args!(
            "[ \"$view_pid\" != error ] || die \"the view container {}: $view_namespace $view_source\"",
            dq_text(name)
        ));
        sh.line("view_root=/proc/$view_pid/root");
        sh.line(
            "# In place when both share a process namespace and the kernel lets this container",
        );
        sh.line("# read the other's root (the same user, no capability it lacks).");
        sh.open("if [ \"$view_namespace\" = \"$namespace\" ] && [ \"$namespace\" != unknown ] && [ -d \"$view_root$view_source/bin\" ]; then");
        sh.line("[ -e \"$view\" ] || ln -sfn \"$view_root$view_source\" \"$view\" || die \"cannot link $view\"");
        sh.linef(format_args!(
            "mkdir -p {sw} || die {}",
            sq(&format!("cannot create {}", layout::SOFTWARE_MOUNT)),
            sw = word(layout::SOFTWARE_MOUNT)
        ));
        sh.open(&format!(
            "for entry in \"$view_root\"{}/*; do",
            word(layout::SOFTWARE_MOUNT)
        ));
        sh.linef(format_args!(
            "link={}/${{entry##*/}}",
            word(layout::SOFTWARE_MOUNT)
        ));
        sh.line("[ ! -e \"$entry\" ] || [ -e \"$link\" ] || ln -sfn \"$entry\" \"$link\" || die \"cannot link $link\"");
        sh.close("done");
        sh.mid("else");
        self.say_dq(
            sh,
            &format!(
                "the view container {}'s files are not readable here (another process namespace, another user, or more capabilities): it copies the view",
                dq_text(name)
            ),
        );
        sh.line("{ [ -p \"$exchange/requests\" ] && printf 'copy\\n' 1<>\"$exchange/requests\"; } || die 'cannot ask the view container for a copy'");
        sh.open("until [ -s \"$exchange/copied\" ]; do");
        sh.linef(format_args!(
            "[ \"$SECONDS\" -lt \"$deadline\" ] || die {}",
            sq(&format!(
                "the view container {name} did not copy the view in {VIEW_WAIT_SECONDS}s"
            ))
        ));
        sh.line("sleep 0.2 2>/dev/null || sleep 1");
        sh.close("done");
        sh.line("read -r copied copied_message <\"$exchange/copied\" || die \"cannot read $exchange/copied\"");
        sh.linef(format_args!(
            "[ \"$copied\" = ok ] || die \"the view container {}: $copied_message\"",
            dq_text(name)
        ));
        sh.close("fi");
        sh.line("touch \"$exchange/ready\"");
    }

    /// A sidecar's view, read in place: set up by the broker, waited for (bounded).
    fn wait_for_view(&self, sh: &mut Sh) {
        let ready = format!("{}/ready", self.layout.view_exchange());
        sh.line("# The broker sets the view up (read in place from the view container).");
        sh.linef(format_args!("deadline=$((SECONDS + {VIEW_WAIT_SECONDS}))"));
        sh.open(&format!(
            "until [ -e {} ] || [ \"$SECONDS\" -ge \"$deadline\" ]; do",
            word(&ready)
        ));
        sh.line("sleep 0.2 2>/dev/null || sleep 1");
        sh.close("done");
        sh.linef(format_args!(
            "[ -e {} ] || echo {} >&2",
            word(&ready),
            sq(&format!(
                "flux-operator: warning: the broker did not set the flux view up in {VIEW_WAIT_SECONDS}s"
            ))
        ));
    }

    /// The broker's last word to a view container read in place: its exit status, so
    /// that the view container ends with it unless the kubelet starts the broker again.
    pub(super) fn view_end(&self, sh: &mut Sh) {
        if self.view_mode != ViewMode::InPlace {
            return;
        }
        let requests = word(&format!("{}/requests", self.layout.view_exchange()));
        sh.line("# The view container stays until the broker has ended for good.");
        sh.linef(format_args!(
            "[ ! -p {requests} ] || printf 'exit %s\\n' \"$flux_status\" 1<>{requests} || true"
        ));
    }
}
