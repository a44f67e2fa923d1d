//! The view's steps of the entrypoints: Flux's configuration tree, Flux from the view on
//! the search paths, and how a container gets the view: linked to the view image's image
//! volume, copied by the view container beside it while it starts (a wait), or by the init
//! container before it (the software tree copied back).

use crate::api::ViewMode;
use crate::layout;

use super::shell::{Sh, dq_text, parent, sq, word};
use super::steps::Ctx;
use super::{CONFIG_DIR_ENV, VIEW_SOURCE, VIEW_WAIT_SECONDS};

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
        self.view_mode != ViewMode::InitContainer
    }

    /// Flux from the view on the search paths, the view itself (see [`ViewMode`]), the
    /// HOME fallback. `broker`: the flux-running container, for which a view that is not
    /// there is fatal; a sidecar goes on with a warning.
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
                (ViewMode::Alongside, true) => self.wait_for_copy(sh),
                (ViewMode::Alongside, false) => self.wait_for_view(sh),
                (ViewMode::ImageVolume, _) => self.link_view(sh, broker),
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

    /// The software tree the init container copied, copied back where the view's
    /// symlinks point.
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

    /// The view and the entries of its software tree linked to the view image's image
    /// volume (no copy). Every container that uses the view links them, whichever comes
    /// first: a link another one made to the same place will do. `fatal`: the
    /// flux-running container's, which `die`s; a sidecar goes on with a warning.
    fn link_view(&self, sh: &mut Sh, fatal: bool) {
        let image = layout::VIEW_IMAGE_MOUNT;
        let fail = |what: &str| {
            if fatal {
                format!("die \"{what}\"")
            } else {
                format!("echo \"flux-operator: warning: {what}\" >&2")
            }
        };
        sh.linef(format_args!(
            "# The view image is mounted at {image} (an image volume): linked, not copied."
        ));
        sh.line("shopt -s nullglob dotglob");
        sh.linef(format_args!(
            "views=({}/*/)",
            word(&format!("{image}{VIEW_SOURCE}"))
        ));
        sh.linef(format_args!("entries=({image}/opt/software/*)"));
        sh.line("shopt -u nullglob dotglob");
        sh.open("if [ \"${#views[@]}\" -ne 1 ]; then");
        sh.line(&fail(&format!(
            "expected exactly one directory under {VIEW_SOURCE} in the view image, found ${{#views[@]}}"
        )));
        sh.mid("else");
        sh.line("source=${views[0]%/}");
        sh.linef(format_args!(
            "ln -sn \"$source\" \"$view\" 2>/dev/null || [ \"$(readlink \"$view\")\" = \"$source\" ] || {}",
            fail("cannot link $view to $source")
        ));
        sh.open("for entry in \"${entries[@]}\"; do");
        sh.linef(format_args!(
            "link={}/${{entry##*/}}",
            word(layout::SOFTWARE_MOUNT)
        ));
        sh.linef(format_args!(
            "ln -sn \"$entry\" \"$link\" 2>/dev/null || [ \"$(readlink \"$link\")\" = \"$entry\" ] || {}",
            fail("cannot link $link to $entry")
        ));
        sh.close("done");
        sh.close("fi");
    }

    /// The broker's view, copied by the view container while this container started:
    /// it records its PID (for the view container, which ends with it), then waits
    /// (bounded: the view image may still be pulled) for the copy's outcome.
    fn wait_for_copy(&self, sh: &mut Sh) {
        let name = self.spec.flux().view().name();
        sh.linef(format_args!(
            "# The view container {} copies the view while this container starts.",
            super::shell::one_line(name)
        ));
        sh.linef(format_args!(
            "exchange={}",
            word(self.layout.view_exchange())
        ));
        sh.line("namespace=$(readlink \"/proc/$$/ns/pid\" 2>/dev/null) || namespace=unknown");
        sh.line("# Open to every user of the pod, whoever comes first (see the view container's).");
        sh.line("mkdir -p \"$exchange\" || die \"cannot create $exchange\"");
        sh.line("[ ! -O \"$exchange\" ] || chmod 1777 \"$exchange\" || die \"cannot open $exchange to the pod\"");
        sh.line(
            "echo \"$$ $namespace\" >\"$exchange/broker\" || die \"cannot write $exchange/broker\"",
        );
        sh.line("# A broker started again: the view container waits for its end anew.");
        sh.line("rm -f \"$exchange/exit\"");
        self.copy_wait(sh, |sh, what| {
            sh.linef(format_args!("die {what}"));
        });
        sh.linef(format_args!(
            "[ \"$copied\" = ok ] || die \"the view container {}: $copied_message\"",
            dq_text(name)
        ));
    }

    /// A sidecar's view, copied by the view container: waited for (bounded).
    fn wait_for_view(&self, sh: &mut Sh) {
        sh.line("# The view container copies the view while this container starts.");
        sh.linef(format_args!(
            "exchange={}",
            word(self.layout.view_exchange())
        ));
        self.copy_wait(sh, |sh, what| {
            sh.linef(format_args!("echo {what} >&2"));
            sh.line("break");
        });
        sh.open("if [ \"$copied\" != ok ]; then");
        sh.line("echo \"flux-operator: warning: no flux view: ${copied_message:-not copied}\" >&2");
        sh.close("fi");
    }

    /// Waits for `$exchange/copied` (`copied` and `copied_message` hold it); `late`
    /// writes what to do past the bound, given the message as a shell word.
    fn copy_wait(&self, sh: &mut Sh, late: impl Fn(&mut Sh, &str)) {
        let name = self.spec.flux().view().name();
        sh.line("copied='' copied_message=''");
        sh.linef(format_args!("deadline=$((SECONDS + {VIEW_WAIT_SECONDS}))"));
        sh.open("until read -r copied copied_message 2>/dev/null <\"$exchange/copied\" && [ -n \"$copied\" ]; do");
        sh.open("if [ \"$SECONDS\" -ge \"$deadline\" ]; then");
        late(
            sh,
            &sq(&format!(
                "the view container {name} did not copy the view in {VIEW_WAIT_SECONDS}s"
            )),
        );
        sh.close("fi");
        // Short naps: the copy takes about a second; a `sleep` without fractions naps one.
        sh.line("sleep 0.05 2>/dev/null || sleep 1");
        sh.close("done");
    }

    /// The broker's last word to the view container beside it: its exit status (in a
    /// file, then a wake-up on the FIFO), so that the view container ends with it unless
    /// the kubelet starts the broker again.
    pub(super) fn view_end(&self, sh: &mut Sh) {
        if self.view_mode != ViewMode::Alongside {
            return;
        }
        let exchange = self.layout.view_exchange();
        let exit = word(&format!("{exchange}/exit"));
        let tmp = word(&format!("{exchange}/exit.tmp"));
        let requests = word(&format!("{exchange}/requests"));
        sh.line("# The view container stays until the broker has ended for good.");
        sh.linef(format_args!(
            "{{ printf '%s\\n' \"$flux_status\" >{tmp} && mv -f {tmp} {exit}; }} 2>/dev/null || true"
        ));
        sh.linef(format_args!(
            "[ ! -p {requests} ] || printf '\\n' 1<>{requests} || true"
        ));
    }
}
