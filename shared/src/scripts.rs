//! Entrypoint scripts of a broker pod: the flux view init container's script, the
//! flux-running container's entrypoint and the sidecars' entrypoints.
//!
//! Every function here is pure: the same plan and target always give the same bytes.
//!
//! Shell safety: every user value that is data (paths, names, environment values,
//! the command) is emitted as a single-quoted shell word (or bare when it only holds
//! characters that are never special), so quotes, `$`, backticks or newlines in user
//! input cannot break or inject into a script. The main command keeps its documented
//! meaning of "split into words": it is split here, exactly like bash splits an unquoted
//! expansion on its default `IFS` (space, tab, newline) with globbing disabled, and each
//! word is emitted quoted. Shell syntax in it (`&&`, pipes, `$VAR`) is therefore never
//! interpreted; `commands.script` is the way to run shell logic. The `commands.*` hooks
//! are shell snippets by design and are inserted verbatim.
//!
//! Fixes relative to the reference operator's scripts:
//! - the init script takes every path from the [`Layout`] (the reference hard-coded
//!   `/mnt/flux/config`, breaking custom mount paths);
//! - failures of `flux start` are reflected in the container's exit status, with or
//!   without strict mode, and `commands.post` still runs;
//! - `--wrap` applies to every broker, not only the lead;
//! - the timed-mode check exits the script, not a subshell;
//! - `commands.script` is written with a quoted heredoc (no `$` expansion);
//! - sidecars wait for the broker's real socket with a plain bash loop;
//! - `-Stbon.fanout` is never passed (it silently overrides `tbon.topo`);
//! - the CURVE certificate is copied with `umask 077` and `chmod 600`.
//!
//! Decisions where the reference is silent:
//! - an absent command counts as interactive (`-Sbroker.rc2_none`, no initial program),
//!   so the instance stays up instead of running a shell on a missing TTY;
//!   `diagnostics` wins over `interactive`, which wins over `batch` and `launcher`;
//! - with `flux.completeWorkers` a worker does not restart its broker and exits 0 so
//!   its pod completes instead of being recreated, as documented;
//! - non-raw batch scripts end with `flux job wait --all` after the documented
//!   `flux queue idle` / `flux jobs -a`, so a failed job fails the batch job;
//! - the archive is restored on rank 0 only; it is saved with `flux dump` by the initial
//!   program once the command has finished (not for `diagnostics`, which never ends);
//! - `commands.script` goes to `/tmp/flux-operator-script-<index>.sh` on every broker
//!   (a job may run it anywhere) and runs directly when it has a `#!` line, else with
//!   bash; a sidecar's `commands.script` replaces its command;
//! - a sidecar's command is split into words like the main command;
//! - `<mount>/load-fluxion.sh` is written next to `flux-view.sh` / `flux-connect.sh`,
//!   as the scheduler documentation tells users to run it.
//!
//! For tests, the broker and init scripts honour two optional environment overrides:
//! `FLUX_OPERATOR_CONFIG_DIR` (default [`layout::CONFIG_MOUNT`]) and
//! `FLUX_OPERATOR_CURVE_DIR` (default [`layout::CURVE_MOUNT`]).
//!
//! Size: the three scripts share one shell-emitting layer (`Ctx`, `Program`, `Sh` and the
//! quoting helpers) whose safety argument above covers them all; splitting them would
//! spread that argument over several files. About 250 lines are the tests.

use std::fmt::Write as _;

use crate::api::{Commands, MiniClusterContainer, MiniClusterSpec};
use crate::layout::{self, Layout};
use crate::plan::{Plan, Target};

/// Where the flux view image keeps its spack view (one hash-named directory).
const VIEW_SOURCE: &str = "/opt/views/._view";
/// Seconds a worker waits for the lead broker before starting anyway.
const LEAD_WAIT_SECONDS: u32 = 60;
/// Pause before a worker restarts a broker that failed.
const RESTART_PAUSE_SECONDS: u32 = 15;
/// Environment variable overriding [`layout::CONFIG_MOUNT`] (tests only).
const CONFIG_DIR_ENV: &str = "FLUX_OPERATOR_CONFIG_DIR";
/// Environment variable overriding [`layout::CURVE_MOUNT`] (tests only).
const CURVE_DIR_ENV: &str = "FLUX_OPERATOR_CURVE_DIR";
/// Commands of the `diagnostics` initial program.
const DIAGNOSTICS: &[&str] = &[
    "flux overlay status",
    "flux resource list",
    "flux lsattr -v",
    "flux module list",
    "flux dmesg",
    "sleep infinity",
];

/// `run_broker CMD...`: runs the broker in the background and waits for it, passing on
/// SIGTERM. The entrypoint is the container's PID 1, and bash there ignores SIGTERM
/// unless it traps it: a deleted broker pod (a scale-down, a deleted MiniCluster) then
/// kept running until the grace period (the drain timeout + 30 s) ran out and it was
/// killed (seen on a real kubelet). With the trap the broker gets the signal at once (it
/// leaves, or the lead shuts its instance down), and a worker is not restarted.
fn signal_forwarding(sh: &mut Sh) {
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

/// The script of the flux view init container (run with `/bin/bash` in the view image).
///
/// It creates the configuration tree under the layout's config root, copies broker.toml
/// and R from the ConfigMap, and unless the view is disabled copies the spack view and
/// `/opt/software` into the shared mount.
pub fn init_script(plan: &Plan, target: &Target) -> String {
    let ctx = Ctx::new(plan);
    let l = &ctx.layout;
    let mut sh = Sh::new();
    sh.line("#!/bin/bash");
    sh.linef(format_args!(
        "# Init container of MiniCluster {} (Job {}): prepares {} for the broker containers.",
        one_line(&qualified_name(plan)),
        one_line(&target.job),
        one_line(&l.mount)
    ));
    sh.linef(format_args!(
        "# Generated by the flux operator. {CONFIG_DIR_ENV} may override {}.",
        layout::CONFIG_MOUNT
    ));
    sh.line("set -eEu -o pipefail");
    sh.line("");
    sh.linef(format_args!(
        "config_dir=${{{CONFIG_DIR_ENV}:-{}}}",
        word(layout::CONFIG_MOUNT)
    ));
    ctx.say(&mut sh, &format!("preparing {}", l.mount));
    sh.linef(format_args!(
        "mkdir -p {} {} {} {} {}",
        word(l.broker_config_dir()),
        word(l.cron_dir()),
        word(l.rundir()),
        word(l.statedir()),
        word(parent(l.curve_cert()))
    ));
    sh.linef(format_args!(
        "cp \"$config_dir/{}\" {}",
        layout::BROKER_TOML_KEY,
        word(&format!(
            "{}/{}",
            l.broker_config_dir(),
            layout::BROKER_TOML_KEY
        ))
    ));
    sh.linef(format_args!(
        "cp \"$config_dir/{}\" {}",
        layout::R_KEY,
        word(l.r_path())
    ));
    if ctx.view_disabled {
        sh.line(
            "# flux.container.disable: Flux comes from the application image, no view to copy.",
        );
    } else {
        sh.line("");
        sh.linef(format_args!(
            "# The view image holds exactly one spack view under {VIEW_SOURCE}."
        ));
        sh.line("shopt -s nullglob");
        sh.linef(format_args!("views=({VIEW_SOURCE}/*/)"));
        sh.line("shopt -u nullglob");
        sh.open("if [ \"${#views[@]}\" -ne 1 ]; then");
        sh.linef(format_args!(
            "echo \"flux-operator: error: expected exactly one directory under {VIEW_SOURCE}, found ${{#views[@]}}\" >&2"
        ));
        sh.line("exit 1");
        sh.close("fi");
        ctx.say_dq(
            &mut sh,
            &format!(
                "copying the flux view ${{views[0]}} to {}",
                dq_text(l.view())
            ),
        );
        sh.linef(format_args!(
            "mkdir -p {} {}",
            word(l.view()),
            word(l.software())
        ));
        sh.linef(format_args!(
            "cp -a \"${{views[0]}}.\" {}",
            word(&format!("{}/", l.view()))
        ));
        sh.linef(format_args!(
            "cp -a {} {}",
            word(&format!("{}/.", layout::SOFTWARE_MOUNT)),
            word(&format!("{}/", l.software()))
        ));
    }
    ctx.say(&mut sh, "init done");
    sh.finish()
}

/// The entrypoint of the flux-running container (`plan.runner`) of `target`.
///
/// Rank 0 (only in the root cluster) runs `flux start` with the initial program that
/// the spec asks for; every other broker waits (bounded) for the lead broker, then runs
/// `flux start` in a loop that restarts a failed broker unless `flux.completeWorkers`.
/// The script exits with Flux's exit status.
pub fn broker_script(plan: &Plan, target: &Target) -> String {
    let ctx = Ctx::new(plan);
    let l = &ctx.layout;
    let runner = ctx.runner;
    let hooks = runner.map(|c| c.commands()).unwrap_or(&NO_COMMANDS);
    let program = Program::of(plan, runner);
    let mut sh = Sh::new();

    sh.line("#!/bin/bash");
    sh.linef(format_args!(
        "# Entrypoint of the Flux broker container of MiniCluster {} (Job {}).",
        one_line(&qualified_name(plan)),
        one_line(&target.job)
    ));
    sh.linef(format_args!(
        "# Generated by the flux operator. {CONFIG_DIR_ENV} and {CURVE_DIR_ENV} may override {} and {}.",
        layout::CONFIG_MOUNT,
        layout::CURVE_MOUNT
    ));
    ctx.prologue(&mut sh, true);
    if ctx.timed {
        sh.line("");
        sh.open("if [ ! -x /usr/bin/time ]; then");
        sh.line("die 'logging.timed needs /usr/bin/time in the image'");
        sh.close("fi");
    }
    ctx.init_hook(&mut sh, hooks);

    sh.line("");
    ctx.view_environment(&mut sh, true);
    sh.line("");
    ctx.helper_files(&mut sh);
    sh.line("");
    ctx.flux_user(&mut sh);
    sh.line("");
    ctx.curve_cert(&mut sh);

    if let Some(c) = runner.filter(|c| c.batch.unwrap_or(false) && !c.batch_raw.unwrap_or(false)) {
        sh.line("");
        sh.line(
            "# Batch jobs may run on any broker: their output directory must exist everywhere.",
        );
        sh.linef(format_args!(
            "mkdir -p {} || die {}",
            word(c.logs()),
            sq(&format!("cannot create {}", c.logs()))
        ));
    }
    if let Some(script) = &program.script {
        sh.line("");
        write_script_file(&mut sh, script, &custom_script_path(plan.runner));
    }
    ctx.hook(&mut sh, "pre", Commands::hook(&hooks.pre));

    let mut args = Vec::new();
    if let Some(wrap) = ctx.spec.flux().wrap.as_deref().filter(|w| !w.is_empty()) {
        args.push(word(&format!("--wrap={wrap}")));
    }
    args.push(format!(
        "-o {}",
        word(&format!("--config-path={}", l.broker_config_dir()))
    ));
    args.extend(broker_attributes(plan, target).iter().map(|a| word(a)));
    sh.line("");
    if args.iter().any(|a| a.contains(',')) {
        sh.line("# shellcheck disable=SC2054 # commas belong to the values (--wrap takes a list)");
    }
    sh.open("broker_args=(");
    for arg in &args {
        sh.line(arg);
    }
    sh.close(")");
    sh.line("flux_status=0");
    signal_forwarding(&mut sh);

    sh.line("");
    if target.is_root() {
        sh.line("host=$(hostname 2>/dev/null || uname -n)");
        sh.open(&format!(
            "if [ \"$host\" = {} ]; then",
            word(&target.lead_host)
        ));
        ctx.lead(&mut sh, hooks, &program);
        sh.mid("else");
        ctx.worker(&mut sh, hooks, target);
        sh.close("fi");
    } else {
        ctx.worker(&mut sh, hooks, target);
    }

    ctx.hook(&mut sh, "post", Commands::hook(&hooks.post));
    sh.line("");
    // A deleted pod must not count as a completed index of the Job: its index would
    // never run again (not after a scale-up either), so a stopped broker fails the pod.
    sh.open("if $terminating; then");
    ctx.say_dq(&mut sh, "stopped by SIGTERM (the pod is being deleted)");
    sh.line("flux_status=143");
    sh.close("fi");
    ctx.say_dq(&mut sh, "flux exited with status $flux_status");
    sh.line("exit \"$flux_status\"");
    sh.finish()
}

/// Reason a leaving broker's node is drained with; a broker that joins again takes back
/// only a drain with this reason (one an admin set stays).
const DRAIN_REASON: &str = "flux-operator: leaving";
/// How long a broker that (re)starts keeps trying to take back its node's drain.
const REJOIN_SECONDS: u32 = 600;

/// The drain script (ConfigMap key [`layout::DRAIN_SCRIPT_KEY`]), `None` when
/// `flux.drainTimeoutSeconds` is 0.
///
/// `flux-drain.sh leave` is the flux-running container's preStop hook: a worker broker
/// that is going away (scale-down, a burst shrinking or removed, an eviction) drains its
/// node in Flux, so no new job lands there, and waits until no job runs on it, at most the
/// drain timeout; past that it says so and exits 1 (the kubelet records a
/// `FailedPreStopHook` Event) and the pod stops anyway. Nothing to do on the lead broker
/// (its instance ends with it) or when the broker is gone.
///
/// `flux-drain.sh rejoin` runs in the background of every worker broker start: Flux keeps
/// a drained node drained, so a broker of that host joining again (the burst or Job grew
/// back) takes back the drain, unless someone else drained it with another reason.
///
/// It reads the instance's environment from `flux-view.sh`, which the entrypoint writes.
pub fn drain_script(plan: &Plan, target: &Target) -> Option<String> {
    let timeout = plan.spec.flux().drain_timeout_seconds();
    if timeout == 0 {
        return None;
    }
    let l = &plan.layout;
    let mut sh = Sh::new();
    sh.line("#!/bin/bash");
    sh.linef(format_args!(
        "# Drain script of the Flux brokers of MiniCluster {} (Job {}).",
        one_line(&qualified_name(plan)),
        one_line(&target.job)
    ));
    sh.line("# Generated by the flux operator. `leave`: preStop hook; `rejoin`: at broker start.");
    sh.line("mode=${1:-leave}");
    sh.linef(format_args!("drain_timeout={timeout}"));
    sh.linef(format_args!("reason={}", sq(DRAIN_REASON)));
    sh.line("host=$(hostname 2>/dev/null || uname -n)");
    sh.line("# The lead broker's instance ends with it: nothing to drain there.");
    sh.open(&format!(
        "if [ \"$host\" = {} ]; then",
        word(&target.lead_host)
    ));
    sh.line("exit 0");
    sh.close("fi");
    sh.linef(format_args!(
        "view_env={}",
        word(&format!("{}/flux-view.sh", l.mount))
    ));
    sh.line("# Written by the entrypoint once the broker starts: no broker, nothing to drain.");
    sh.open("if [ ! -f \"$view_env\" ]; then");
    sh.line("exit 0");
    sh.close("fi");
    sh.line("# shellcheck disable=SC1090 # generated at start-up");
    sh.line(". \"$view_env\"");
    sh.line("socket=${fluxsocket:-}");
    sh.line("socket=${socket#local://}");
    sh.line("export FLUX_URI=\"local://$socket\"");
    sh.line("");
    sh.line("# Every call is bounded: a broker that lost its instance must not hang the hook.");
    sh.open("flux_call() {");
    sh.open("if command -v timeout >/dev/null 2>&1; then");
    sh.line("timeout 10 flux \"$@\"");
    sh.mid("else");
    sh.line("flux \"$@\"");
    sh.close("fi");
    sh.close("}");
    sh.line("");
    sh.line("# This node's drain state and reason (empty when not drained).");
    sh.open("drain_state() {");
    sh.line("flux_call resource drain -i \"$host\" -no '{state}|{reason}' 2>/dev/null");
    sh.close("}");
    sh.line("");
    sh.open("case \"$mode\" in");
    sh.open("leave)");
    sh.open("if [ ! -S \"$socket\" ]; then");
    sh.line("exit 0");
    sh.close("fi");
    sh.line("# -u keeps a drain (and its reason) that is already there.");
    sh.open("if ! flux_call resource drain -u \"$host\" \"$reason (pod terminating)\" >/dev/null 2>&1; then");
    sh.line("exit 0");
    sh.close("fi");
    sh.line(
        "echo \"flux-operator: drained $host; waiting up to ${drain_timeout}s for its jobs\" >&2",
    );
    sh.line("deadline=$((SECONDS + drain_timeout))");
    sh.open("while :; do");
    sh.line("# The instance is gone (its lead stopped): no job is left to wait for.");
    sh.line("state=$(drain_state) || exit 0");
    sh.open("case \"$state\" in");
    sh.line("draining*) ;;");
    sh.line("*) exit 0 ;;");
    sh.close("esac");
    sh.open("if [ \"$SECONDS\" -ge \"$deadline\" ]; then");
    sh.line(
        "echo \"flux-operator: $host still runs jobs after ${drain_timeout}s; leaving anyway\" >&2",
    );
    sh.line("exit 1");
    sh.close("fi");
    sh.line("sleep 1");
    sh.close("done");
    sh.line(";;");
    sh.dedent();
    sh.open("rejoin)");
    sh.linef(format_args!("deadline=$((SECONDS + {REJOIN_SECONDS}))"));
    sh.open("while [ \"$SECONDS\" -lt \"$deadline\" ]; do");
    sh.open("if [ -S \"$socket\" ] && state=$(drain_state); then");
    sh.open("case \"$state\" in");
    sh.open("*\"|$reason\"*)");
    sh.line("flux_call resource undrain \"$host\" >/dev/null 2>&1 && echo \"flux-operator: $host is back; undrained\" >&2");
    sh.line("exit 0");
    sh.line(";;");
    sh.dedent();
    sh.line("*) exit 0 ;;");
    sh.close("esac");
    sh.close("fi");
    sh.line("# The broker is starting: ask again soon, so its node is back as it joins.");
    sh.line("sleep 0.2 2>/dev/null || sleep 1");
    sh.close("done");
    sh.line(";;");
    sh.dedent();
    sh.open("*)");
    sh.line("echo \"flux-drain.sh: unknown mode $mode (leave or rejoin)\" >&2");
    sh.line("exit 2");
    sh.line(";;");
    sh.dedent();
    sh.close("esac");
    Some(sh.finish())
}

/// Prefix of the bearer token of the queue reporter: the token is the SHA-256 (hex) of
/// this and the instance's CURVE certificate, so whoever can read the certificate (and
/// could join the instance anyway) can read the queue, and nobody else.
pub const REPORTER_TOKEN_CONTEXT: &[u8] = b"flux-operator reporter\0";

/// The queue reporter (ConfigMap key [`layout::REPORTER_SCRIPT_KEY`]) of a root instance
/// with `flux.bursting.autoscale`; `None` otherwise.
///
/// The lead broker's entrypoint runs it with `flux python` next to the broker. It serves
/// one read-only document, `GET /v1/queue` on port [`crate::api::defaults::REPORTER_PORT`]
/// with `Authorization: Bearer <token>` ([`REPORTER_TOKEN_CONTEXT`]): every host's rank,
/// whether its broker is online, drained and allocated, and every pending job with the
/// nodes it asks for and when it was submitted. It changes nothing in the instance.
pub fn reporter_script(plan: &Plan, target: &Target) -> Option<String> {
    if !target.is_root() || plan.spec.autoscale().is_none() {
        return None;
    }
    let context = String::from_utf8_lossy(REPORTER_TOKEN_CONTEXT).replace('\0', "\\0");
    Some(format!(
        r#"#!/usr/bin/env python3
# Queue reporter of MiniCluster {name}: what the hub needs to burst on demand, read-only.
# Generated by the flux operator; the lead broker runs it with `flux python`.
import hashlib
import hmac
import json
import math
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

PORT = {port}
CERT = os.path.join(os.environ.get("{curve_env}", "{curve_mount}"), "{curve_key}")


def token():
    with open(CERT, "rb") as f:
        return hashlib.sha256(b"{context}" + f.read()).hexdigest()


HANDLE = None


def handle():
    global HANDLE
    if HANDLE is None:
        import flux

        HANDLE = flux.Flux()
    return HANDLE


def queue():
    import flux.hostlist
    import flux.idset
    import flux.job
    import flux.resource

    h = handle()
    status = h.rpc("resource.status").get()
    execution = status["R"]["execution"]
    hosts = list(flux.hostlist.Hostlist(execution["nodelist"]))
    cores = max(len(flux.idset.IDset(execution["R_lite"][0]["children"]["core"])), 1)
    online = flux.idset.IDset(status.get("online") or "")
    drained = set()
    for ranks in (status.get("drain") or {{}}).keys():
        drained.update(flux.idset.IDset(ranks))
    allocated = flux.resource.resource_list(h).get().allocated.ranks
    pending = []
    attrs = ["nnodes", "ntasks", "ncores", "t_submit"]
    for job in flux.job.JobList(h, filters=["pending"], attrs=attrs).jobs():
        nodes = job.nnodes or math.ceil(max(job.ncores or job.ntasks or 1, 1) / cores)
        pending.append({{"id": int(job.id), "nodes": int(nodes), "submitted": job.t_submit}})
    return {{
        "version": 1,
        "now": time.time(),
        "hosts": [
            {{
                "host": host,
                "rank": rank,
                "online": rank in online,
                "drained": rank in drained,
                "allocated": rank in allocated,
            }}
            for rank, host in enumerate(hosts)
        ],
        "pending": pending,
    }}


class Reporter(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/v1/queue":
            return self.answer(404, {{"error": "only GET /v1/queue"}})
        given = self.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), ("Bearer " + token()).encode()):
            return self.answer(401, {{"error": "a bearer token is needed"}})
        try:
            self.answer(200, queue())
        except Exception as e:
            global HANDLE
            HANDLE = None
            self.answer(503, {{"error": "the instance does not answer: %s" % e}})

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    try:
        HTTPServer(("", PORT), Reporter).serve_forever()
    except OSError as e:
        sys.exit("flux-operator: the queue reporter cannot serve port %d: %s" % (PORT, e))
"#,
        name = one_line(&qualified_name(plan)),
        port = crate::api::defaults::REPORTER_PORT,
        curve_env = CURVE_DIR_ENV,
        curve_mount = layout::CURVE_MOUNT,
        curve_key = layout::CURVE_KEY,
    ))
}

/// The entrypoint of sidecar container `index` (a container that does not run Flux and
/// does not set `noWrapEntrypoint`): hooks, the view environment, a wait for the
/// broker's local socket, then the container's command (split into words like the main
/// command) or its `commands.script`.
///
/// An `index` that names no container gives a script that fails with a message.
pub fn sidecar_script(plan: &Plan, target: &Target, index: usize) -> String {
    let ctx = Ctx::new(plan);
    let l = &ctx.layout;
    let mut sh = Sh::new();
    sh.line("#!/bin/bash");
    let Some(container) = plan.spec.containers.get(index) else {
        sh.linef(format_args!(
            "echo 'flux-operator: error: MiniCluster has no container {index}' >&2"
        ));
        sh.line("exit 1");
        return sh.finish();
    };
    let hooks = container.commands();
    let name = container.name.as_deref().unwrap_or_default();
    sh.linef(format_args!(
        "# Entrypoint of sidecar container {} of MiniCluster {} (Job {}).",
        one_line(name),
        one_line(&qualified_name(plan)),
        one_line(&target.job)
    ));
    sh.line("# Generated by the flux operator.");
    let script = Commands::hook(&hooks.script);
    ctx.init_hook(&mut sh, hooks);
    ctx.prologue(&mut sh, script.is_some());
    sh.line("");
    ctx.view_environment(&mut sh, false);
    ctx.hook(&mut sh, "servicePre", Commands::hook(&hooks.service_pre));

    sh.line("");
    sh.linef(format_args!("socket={}", word(l.local_socket())));
    if ctx.spec.flux().no_wait_socket.unwrap_or(false) {
        sh.line("# flux.noWaitSocket: not waiting for the broker socket.");
    } else {
        ctx.say(
            &mut sh,
            &format!("waiting for the broker socket {}", l.local_socket()),
        );
        sh.line("waited=0");
        sh.open("until [ -S \"$socket\" ]; do");
        sh.line("waited=$((waited + 1))");
        sh.open("if [ $((waited % 60)) -eq 0 ]; then");
        sh.line("echo \"flux-operator: still waiting for $socket (${waited}s)\" >&2");
        sh.close("fi");
        sh.line("sleep 1");
        sh.close("done");
    }
    sh.line("export fluxsocket=\"local://$socket\"");

    sh.line("");
    let words: Vec<String> = if let Some(text) = script {
        let path = sidecar_script_path(index);
        write_script_file(&mut sh, text, &path);
        script_invocation(text, &path)
    } else {
        container
            .command()
            .map(|c| split_words(c).map(word).collect())
            .unwrap_or_default()
    };
    sh.line("command_status=0");
    match words.split_first() {
        None => ctx.say(&mut sh, "no command to run"),
        // The first word is always quoted: in command position a bare `A=b` would be an
        // assignment and `if` or `time` a keyword.
        Some((first, rest)) => {
            let first = if first.starts_with('\'') {
                first.clone()
            } else {
                sq(first)
            };
            let mut line = first;
            for w in rest {
                line.push(' ');
                line.push_str(w);
            }
            sh.linef(format_args!("{line} || command_status=$?"));
        }
    }
    ctx.hook(&mut sh, "post", Commands::hook(&hooks.post));
    sh.line("exit \"$command_status\"");
    sh.finish()
}

/// The broker attributes (`-S<name>=<value>` arguments of `flux start`) of every broker
/// of `target`, in a fixed order. Never `tbon.fanout`, which would override `tbon.topo`.
pub fn broker_attributes(plan: &Plan, _target: &Target) -> Vec<String> {
    let spec = &plan.spec;
    let flux = spec.flux();
    let logging = spec.logging();
    let l = &plan.layout;
    let mut attrs = vec![
        format!("-Scron.directory={}", l.cron_dir()),
        format!("-Srundir={}", l.rundir()),
        format!("-Sstatedir={}", l.statedir()),
    ];
    if !flux.disable_socket.unwrap_or(false) {
        attrs.push(format!("-Slocal-uri=local://{}", l.local_socket()));
    }
    attrs.push("-Slog-stderr-mode=local".to_string());
    let level = if logging.quiet() { 0 } else { flux.log_level() };
    attrs.push(format!("-Slog-stderr-level={level}"));
    if let Some(timeout) = flux.connect_timeout() {
        attrs.push(format!("-Stbon.connect_timeout={timeout}"));
    }
    match flux.topology.as_deref().filter(|t| !t.trim().is_empty()) {
        Some(topo) => attrs.push(format!("-Stbon.topo={topo}")),
        // Rank 0 is the only broker reachable across clusters, so every broker of a
        // federated instance is its direct child.
        None if plan.is_federated() => {
            let fanout = plan.hosts.len().saturating_sub(1).max(1);
            attrs.push(format!("-Stbon.topo=kary:{fanout}"));
        }
        None => {}
    }
    if let Some(quorum) = plan.quorum() {
        attrs.push(format!("-Sbroker.quorum={quorum}"));
    }
    if matches!(
        Program::kind(spec, spec.containers.get(plan.runner)),
        Kind::Interactive
    ) {
        attrs.push("-Sbroker.rc2_none".to_string());
    }
    if logging.zeromq() {
        attrs.push("-Stbon.zmqdebug=1".to_string());
    }
    attrs
}

static NO_COMMANDS: Commands = Commands {
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
enum Kind {
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
enum Initial {
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
struct Program<'a> {
    kind: Kind,
    /// `commands.script`, written to a file and used as the command.
    script: Option<&'a str>,
    /// The command as shell words (already quoted).
    words: Vec<String>,
    /// The command's lines, for batch mode.
    lines: Vec<String>,
}

impl<'a> Program<'a> {
    fn kind(spec: &MiniClusterSpec, runner: Option<&MiniClusterContainer>) -> Kind {
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

    fn of(plan: &Plan, runner: Option<&'a MiniClusterContainer>) -> Program<'a> {
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

/// Everything the script builders share.
struct Ctx<'a> {
    plan: &'a Plan,
    spec: &'a MiniClusterSpec,
    layout: &'a Layout,
    runner: Option<&'a MiniClusterContainer>,
    quiet: bool,
    strict: bool,
    timed: bool,
    view_disabled: bool,
}

impl<'a> Ctx<'a> {
    fn new(plan: &'a Plan) -> Ctx<'a> {
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
        }
    }

    /// A progress message (dropped in quiet mode); `msg` is data.
    fn say(&self, sh: &mut Sh, msg: &str) {
        if !self.quiet {
            sh.linef(format_args!(
                "echo {}",
                sq(&format!("flux-operator: {msg}"))
            ));
        }
    }

    /// A progress message that expands shell variables; `msg` must be double-quote safe.
    fn say_dq(&self, sh: &mut Sh, msg: &str) {
        if !self.quiet {
            sh.linef(format_args!("echo \"flux-operator: {msg}\""));
        }
    }

    /// Strict mode, the error trap and (when the script uses it) `die`.
    fn prologue(&self, sh: &mut Sh, with_die: bool) {
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
    fn init_hook(&self, sh: &mut Sh, hooks: &Commands) {
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
    fn hook(&self, sh: &mut Sh, name: &str, text: Option<&str>) {
        if let Some(text) = text {
            sh.line("");
            sh.linef(format_args!("# commands.{name}"));
            sh.raw(text);
        }
    }

    /// Flux from the view on the search paths, the software tree, the HOME fallback.
    /// A failed software copy is fatal for the broker and a warning for sidecars.
    fn view_environment(&self, sh: &mut Sh, fatal: bool) {
        let l = &self.layout;
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
            let failure = if fatal {
                format!(
                    "die {}",
                    sq(&format!(
                        "cannot copy {} to {}",
                        l.software(),
                        layout::SOFTWARE_MOUNT
                    ))
                )
            } else {
                format!(
                    "echo {} >&2",
                    sq(&format!(
                        "flux-operator: warning: cannot copy {} to {}",
                        l.software(),
                        layout::SOFTWARE_MOUNT
                    ))
                )
            };
            sh.linef(format_args!(
                "{{ mkdir -p {sw} && cp -a {from} {to}; }} || {failure}",
                sw = word(layout::SOFTWARE_MOUNT),
                from = word(&format!("{}/.", l.software())),
                to = word(&format!("{}/", layout::SOFTWARE_MOUNT)),
            ));
        }
        sh.open(&format!(
            "if [ \"${{HOME:-/}}\" = / ] && [ -d {home} ]; then",
            home = word(layout::HOME_MOUNT)
        ));
        sh.linef(format_args!("export HOME={}", word(layout::HOME_MOUNT)));
        sh.close("fi");
    }

    /// `flux-view.sh`, `flux-connect.sh` and `load-fluxion.sh` under the mount, for
    /// people who `kubectl exec` into a pod.
    fn helper_files(&self, sh: &mut Sh) {
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
    fn flux_user(&self, sh: &mut Sh) {
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
    fn curve_cert(&self, sh: &mut Sh) {
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

    /// Rank 0: batch file, `commands.brokerPre`, archive restore, `flux start` with the
    /// initial program.
    fn lead(&self, sh: &mut Sh, hooks: &Commands, program: &Program) {
        self.say(sh, "this is the lead broker (rank 0)");
        let logging = self.spec.logging();
        let flags = self.flags(logging.debug());
        let archive = self
            .spec
            .archive
            .as_ref()
            .and_then(|a| a.path.as_deref())
            .filter(|p| !p.is_empty());

        if program.kind == Kind::Batch {
            let c = self.runner;
            let raw = c.is_some_and(|c| c.batch_raw.unwrap_or(false));
            let logs = c
                .map(|c| c.logs())
                .unwrap_or(crate::api::defaults::BATCH_LOGS);
            let mut content = String::from("#!/bin/bash\n");
            for (j, line) in program.lines.iter().enumerate() {
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                if !raw {
                    let _ = write!(
                        content,
                        "flux submit --flags waitable {} {} ",
                        word(&format!("--error={logs}/job-{j}.err")),
                        word(&format!("--output={logs}/job-{j}.out"))
                    );
                }
                content.push_str(line);
                content.push('\n');
            }
            if !raw {
                content.push_str("flux queue idle\nflux jobs -a\nflux job wait --all\n");
            }
            sh.line("batch_file=$(mktemp \"${TMPDIR:-/tmp}/flux-batch.XXXXXX\") || die 'cannot create the batch script'");
            sh.linef(format_args!(
                "printf '%s' {} >\"$batch_file\"",
                sq(&content)
            ));
        }
        self.hook(sh, "brokerPre", Commands::hook(&hooks.broker_pre));

        if let Some(path) = archive {
            sh.open(&format!("if [ -e {} ]; then", word(path)));
            self.say(sh, &format!("restoring the archive {path}"));
            sh.linef(format_args!(
                "broker_args+=({})",
                word(&format!("-Scontent.restore={path}"))
            ));
            sh.close("fi");
        }

        if self.spec.autoscale().is_some() {
            sh.linef(format_args!(
                "# Bursting on demand: the queue reporter the hub reads (port {}).",
                crate::api::defaults::REPORTER_PORT
            ));
            sh.linef(format_args!(
                "FLUX_URI={} flux python \"${{{CONFIG_DIR_ENV}:-{}}}/{}\" &",
                word(&format!("local://{}", self.layout.local_socket())),
                dq_text(layout::CONFIG_MOUNT),
                layout::REPORTER_SCRIPT_KEY
            ));
        }

        // The initial program: direct words, or a bash program with its arguments.
        let submit_words: Vec<String> = split_words(self.spec.flux().submit_command())
            .map(word)
            .collect();
        let initial = match program.kind {
            Kind::Interactive => Initial::None,
            Kind::Diagnostics => Initial::Wrapped {
                lines: DIAGNOSTICS.iter().map(|s| s.to_string()).collect(),
                args: Vec::new(),
            },
            Kind::Batch => {
                let quiet = if self.quiet { " >/dev/null" } else { "" };
                Initial::Wrapped {
                    lines: vec![format!(
                        "flux batch {} --flags waitable \"$1\"{quiet} && flux job wait --all",
                        flags.join(" ")
                    )],
                    args: vec!["\"$batch_file\"".to_string()],
                }
            }
            Kind::Launcher | Kind::Submit => {
                let mut head = Vec::new();
                if program.kind == Kind::Submit {
                    head.extend(submit_words.iter().cloned());
                    head.extend(flags.iter().cloned());
                    head.push("--quiet".to_string());
                    head.push("--watch".to_string());
                }
                if archive.is_some() {
                    head.push("\"$@\"".to_string());
                    Initial::Wrapped {
                        lines: vec![head.join(" ")],
                        args: program.words.clone(),
                    }
                } else {
                    head.extend(program.words.iter().cloned());
                    Initial::Direct(head)
                }
            }
        };

        let mut line = String::from("run_broker ");
        if self.timed {
            line.push_str("/usr/bin/time -f 'FLUXTIME fluxstart wall time %E' ");
        }
        line.push_str("flux start \"${broker_args[@]}\"");
        let mut parts = Vec::new();
        if !matches!(initial, Initial::None) {
            if self.timed {
                parts.push("/usr/bin/time -f 'FLUXTIME fluxsubmit wall time %E'".to_string());
            }
            if let Some(prefix) = Commands::hook(&hooks.prefix) {
                parts.push(prefix.trim().to_string());
            }
        }
        match initial {
            Initial::None => {}
            Initial::Direct(words) => parts.extend(words),
            Initial::Wrapped { mut lines, args } => {
                // The archive is saved from inside the instance, once the command is done.
                if let (Some(path), true) = (archive, program.kind != Kind::Diagnostics) {
                    let main = lines.join("\n");
                    lines = vec![
                        "status=0".to_string(),
                        format!("{main} || status=$?"),
                        format!(
                            "flux dump {} || echo {} >&2",
                            word(path),
                            sq(&format!("flux-operator: warning: flux dump {path} failed"))
                        ),
                        "exit \"$status\"".to_string(),
                    ];
                }
                let text = lines.join("\n");
                if text.contains(['$', '`']) {
                    sh.line("# shellcheck disable=SC2016 # expanded by the initial program");
                }
                sh.linef(format_args!("initial_program={}", sq(&text)));
                parts.push("bash -c \"$initial_program\" flux-initial-program".to_string());
                parts.extend(args);
            }
        }
        for part in parts {
            line.push(' ');
            line.push_str(&part);
        }
        match program.kind {
            Kind::Interactive => self.say(
                sh,
                "starting Flux; the instance stays up until flux shutdown",
            ),
            _ => self.say(sh, "starting Flux"),
        }
        sh.linef(format_args!("{line} || flux_status=$?"));
    }

    /// Every other broker: `commands.workerPre`, a bounded wait for the lead broker,
    /// then `flux start`, restarted after a failure unless `completeWorkers`.
    fn worker(&self, sh: &mut Sh, hooks: &Commands, target: &Target) {
        self.say(sh, "this is a worker broker");
        self.hook(sh, "workerPre", Commands::hook(&hooks.worker_pre));
        sh.linef(format_args!(
            "# Wait up to {LEAD_WAIT_SECONDS}s for the lead broker (Flux keeps retrying after that)."
        ));
        let (guard, probe, what) = match &target.lead {
            None => {
                let fqdn = format!(
                    "{}.{}.{}.svc.cluster.local",
                    target.lead_host, target.headless, self.plan.namespace
                );
                (
                    "getent",
                    format!("getent hosts {} >/dev/null 2>&1", word(&fqdn)),
                    format!("{fqdn} does not resolve"),
                )
            }
            Some(endpoint) => (
                "timeout",
                format!(
                    "timeout 2 bash -c 'exec 3<>\"/dev/tcp/$1/$2\"' lead-probe {} {} 2>/dev/null",
                    word(&endpoint.address),
                    endpoint.port
                ),
                format!("{} is not reachable", endpoint.uri()),
            ),
        };
        sh.open(&format!("if command -v {guard} >/dev/null 2>&1; then"));
        sh.linef(format_args!(
            "tries=0 deadline=$((SECONDS + {LEAD_WAIT_SECONDS}))"
        ));
        if target.lead.is_some() {
            sh.line("# shellcheck disable=SC2016 # expanded by the probe");
        }
        sh.open(&format!("until {probe}; do"));
        sh.line("tries=$((tries + 1))");
        sh.open(&format!(
            "if [ \"$tries\" -ge {} ] || [ \"$SECONDS\" -ge \"$deadline\" ]; then",
            LEAD_WAIT_SECONDS * 5
        ));
        sh.linef(format_args!(
            "echo {} >&2",
            sq(&format!("flux-operator: {what} yet; starting anyway"))
        ));
        sh.line("break");
        sh.close("fi");
        sh.line("# Short naps: the broker starts as soon as the name resolves (a `sleep` that");
        sh.line("# takes no fractions naps a second).");
        sh.line("sleep 0.2 2>/dev/null || sleep 1");
        sh.close("done");
        sh.close("fi");

        let start = if self.timed {
            "run_broker /usr/bin/time -f 'FLUXTIME fluxstart wall time %E' flux start \"${broker_args[@]}\""
        } else {
            "run_broker flux start \"${broker_args[@]}\""
        };
        let rejoin = self.spec.flux().drain_timeout_seconds() > 0;
        if rejoin {
            sh.linef(format_args!(
                "drain_script=\"${{{CONFIG_DIR_ENV}:-{}}}/{}\"",
                dq_text(layout::CONFIG_MOUNT),
                layout::DRAIN_SCRIPT_KEY
            ));
        }
        // A host that left drained (preStop) takes its drain back once its broker is in.
        let rejoin_line = "[ ! -f \"$drain_script\" ] || /bin/bash \"$drain_script\" rejoin &";
        self.say(sh, "starting Flux");
        if self.spec.flux().complete_workers.unwrap_or(false) {
            if rejoin {
                sh.line(rejoin_line);
            }
            // Documented: the worker completes (is not recreated) whatever the broker's
            // exit status, e.g. after `flux resource drain` and a scale-down.
            sh.line("# flux.completeWorkers: the broker is not restarted and the pod completes.");
            sh.linef(format_args!("{start} || flux_status=$?"));
            sh.open("if [ \"$flux_status\" -ne 0 ]; then");
            sh.line("echo \"flux-operator: broker exited with status $flux_status; completing (flux.completeWorkers)\" >&2");
            sh.line("flux_status=0");
            sh.close("fi");
        } else {
            sh.open("while :; do");
            sh.line("flux_status=0");
            if rejoin {
                sh.line(rejoin_line);
            }
            sh.linef(format_args!("{start} || flux_status=$?"));
            sh.line("# Stopped on purpose (SIGTERM): not restarted.");
            sh.open("if [ \"$flux_status\" -eq 0 ] || $terminating; then");
            sh.line("break");
            sh.close("fi");
            sh.linef(format_args!(
                "echo \"flux-operator: broker exited with status $flux_status; restarting in {RESTART_PAUSE_SECONDS}s\" >&2"
            ));
            sh.linef(format_args!("sleep {RESTART_PAUSE_SECONDS}"));
            sh.close("done");
        }
    }

    /// `flux submit` / `flux batch` flags: node and task counts, `optionFlags`, `-vvv`.
    fn flags(&self, debug: bool) -> Vec<String> {
        let size = self.spec.size;
        let tasks = self.spec.tasks();
        let mut flags = Vec::new();
        if tasks <= 0 {
            flags.extend(["-N".to_string(), size.to_string()]);
        } else if tasks >= size {
            flags.extend([
                "-N".to_string(),
                size.to_string(),
                "-n".to_string(),
                tasks.to_string(),
            ]);
        } else {
            flags.extend(["-n".to_string(), tasks.to_string()]);
        }
        if let Some(option_flags) = self.spec.flux().option_flags.as_deref() {
            flags.extend(split_words(option_flags).map(word));
        }
        if debug {
            flags.push("-vvv".to_string());
        }
        flags
    }
}

/// `<namespace>/<name>` of the MiniCluster.
fn qualified_name(plan: &Plan) -> String {
    format!("{}/{}", plan.namespace, plan.name)
}

/// Path of the file `commands.script` of the flux runner is written to. It is the same
/// on every broker, since a job may run it on any of them.
fn custom_script_path(index: usize) -> String {
    format!("/tmp/flux-operator-script-{index}.sh")
}

/// Path of the file `commands.script` of a sidecar is written to.
fn sidecar_script_path(index: usize) -> String {
    format!("/tmp/flux-operator-sidecar-{index}.sh")
}

/// The shell words that run a custom script written to `path`: directly when it has
/// a `#!` line, else with bash.
fn script_invocation(text: &str, path: &str) -> Vec<String> {
    if text.trim_start().starts_with("#!") {
        vec![word(path)]
    } else {
        vec!["/bin/bash".to_string(), word(path)]
    }
}

/// Write `text` to `path` with a quoted heredoc (no expansion at all) whose delimiter
/// does not occur as a line of `text`, and make it executable.
fn write_script_file(sh: &mut Sh, text: &str, path: &str) {
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

/// Words of `text` as bash splits an unquoted expansion with the default `IFS`.
fn split_words(text: &str) -> impl Iterator<Item = &str> {
    text.split([' ', '\t', '\n']).filter(|w| !w.is_empty())
}

/// `s` as one single-quoted shell word. NUL bytes, which a shell cannot hold, are dropped.
fn sq(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("'\\''"),
            '\0' => {}
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// `s` as one shell word: bare when every character is never special to the shell in
/// an argument position, else single-quoted.
fn word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,".contains(&b));
    if plain { s.to_string() } else { sq(s) }
}

/// `s` escaped for use inside double quotes.
fn dq_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '"' | '$' | '`' => {
                out.push('\\');
                out.push(c);
            }
            '\0' => {}
            c => out.push(c),
        }
    }
    out
}

/// `s` on one line, for comments.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// The directory part of an absolute path (`/` for a top-level file).
fn parent(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((dir, _)) => dir,
    }
}

/// Whether `s` is a valid shell variable name.
fn is_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A script under construction, two-space indented by block depth. Verbatim text
/// (hooks, heredoc bodies) is never indented.
#[derive(Default)]
struct Sh {
    out: String,
    depth: usize,
}

impl Sh {
    fn new() -> Sh {
        Sh {
            out: String::with_capacity(8 * 1024),
            depth: 0,
        }
    }

    /// A formatted, non-empty line (formats straight into the script, no temporary).
    fn linef(&mut self, args: std::fmt::Arguments<'_>) {
        use std::fmt::Write as _;
        for _ in 0..self.depth {
            self.out.push_str("  ");
        }
        // Writing to a String cannot fail.
        let _ = self.out.write_fmt(args);
        self.out.push('\n');
    }

    fn line(&mut self, text: &str) {
        if !text.is_empty() {
            for _ in 0..self.depth {
                self.out.push_str("  ");
            }
            self.out.push_str(text);
        }
        self.out.push('\n');
    }

    fn raw(&mut self, text: &str) {
        self.out.push_str(text);
        if !text.ends_with('\n') {
            self.out.push('\n');
        }
    }

    fn open(&mut self, text: &str) {
        self.line(text);
        self.depth += 1;
    }

    /// A line between two blocks at the same depth (`else`, `elif`).
    fn mid(&mut self, text: &str) {
        self.close(text);
        self.depth += 1;
    }

    fn close(&mut self, text: &str) {
        self.depth = self.depth.saturating_sub(1);
        self.line(text);
    }

    /// End a block that has no closing line (a `case` arm after its `;;`).
    fn dedent(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::MiniCluster;
    use crate::plan::{Endpoint, Role};

    fn plan(yaml: &str) -> Plan {
        let mc: MiniCluster = serde_yaml_ng::from_str(yaml).expect("test YAML parses");
        Plan::new(&mc).expect("test MiniCluster is valid")
    }

    fn with(spec: &str) -> Plan {
        plan(&format!(
            "metadata: {{name: mc, namespace: ns}}\nspec:\n{spec}"
        ))
    }

    const ONE: &str = "  containers:\n    - image: rockylinux:9\n      command: hostname\n";

    fn attrs(p: &Plan) -> Vec<String> {
        let target = p.target(&Role::Root).expect("root target");
        broker_attributes(p, &target)
    }

    #[test]
    fn default_attributes() {
        let p = with(&format!("  size: 2\n{ONE}"));
        assert_eq!(
            attrs(&p),
            [
                "-Scron.directory=/mnt/flux/config/etc/flux/system/cron.d",
                "-Srundir=/mnt/flux/config/run/flux",
                "-Sstatedir=/mnt/flux/config/var/lib/flux",
                "-Slocal-uri=local:///mnt/flux/config/run/flux/local",
                "-Slog-stderr-mode=local",
                "-Slog-stderr-level=6",
                "-Stbon.connect_timeout=5s",
            ]
        );
    }

    #[test]
    fn attributes_follow_the_spec() {
        let p = with(&format!(
            "  size: 2\n  maxSize: 4\n  interactive: true\n  logging: {{quiet: true, zeromq: true}}\n  flux:\n    disableSocket: true\n    connectTimeout: \"\"\n    topology: binomial\n    container: {{mountPath: /m/}}\n{ONE}"
        ));
        assert_eq!(
            attrs(&p),
            [
                "-Scron.directory=/m/config/etc/flux/system/cron.d",
                "-Srundir=/m/config/run/flux",
                "-Sstatedir=/m/config/var/lib/flux",
                "-Slog-stderr-mode=local",
                "-Slog-stderr-level=0",
                "-Stbon.topo=binomial",
                "-Sbroker.quorum=2",
                "-Sbroker.rc2_none",
                "-Stbon.zmqdebug=1",
            ]
        );
    }

    #[test]
    fn no_command_means_rc2_none_and_never_fanout() {
        let p = with("  containers:\n    - image: rockylinux:9\n");
        let a = attrs(&p);
        assert!(a.contains(&"-Sbroker.rc2_none".to_string()));
        assert!(a.iter().all(|x| !x.contains("fanout")));
        // diagnostics keeps rc2 (its program ends in sleep infinity)
        let p = with("  containers:\n    - image: rockylinux:9\n      diagnostics: true\n");
        assert!(!attrs(&p).contains(&"-Sbroker.rc2_none".to_string()));
    }

    #[test]
    fn federated_plans_get_a_flat_tree() {
        let bursts = "  flux:\n    bursting:\n      clusters:\n        - {name: b, size: 3}\n";
        let p = with(&format!("  size: 2\n{bursts}{ONE}"));
        let a = attrs(&p);
        assert!(a.contains(&"-Stbon.topo=kary:4".to_string()), "{a:?}");
        assert!(a.contains(&"-Sbroker.quorum=2".to_string()));
        let burst = p
            .target(&Role::Burst {
                index: 0,
                lead: Endpoint {
                    address: "10.0.0.1".into(),
                    port: 30050,
                },
            })
            .expect("burst target");
        assert_eq!(
            broker_attributes(&p, &burst),
            a,
            "same attributes everywhere"
        );

        // (validation refuses flux.topology together with bursting)

        // a single-host federation still gets a valid k
        let p = with(
            "  size: 1\n  flux:\n    bursting:\n      hostlist: \"mc-0\"\n  containers:\n    - image: x\n",
        );
        assert!(attrs(&p).contains(&"-Stbon.topo=kary:1".to_string()));
    }

    #[test]
    fn submit_flags_follow_the_documented_task_rules() {
        let flags = |spec: &str| {
            let p = with(&format!("{spec}{ONE}"));
            Ctx::new(&p).flags(false).join(" ")
        };
        assert_eq!(flags("  size: 4\n"), "-n 1");
        assert_eq!(flags("  size: 4\n  tasks: 4\n"), "-N 4 -n 4");
        assert_eq!(flags("  size: 4\n  tasks: 8\n"), "-N 4 -n 8");
        assert_eq!(flags("  size: 4\n  tasks: 2\n"), "-n 2");
        assert_eq!(flags("  size: 4\n  tasks: 0\n"), "-N 4");
        assert_eq!(
            flags("  size: 2\n  tasks: 0\n  flux: {optionFlags: \"-ompi=openmpi@5  -o 'x'\"}\n"),
            "-N 2 -ompi=openmpi@5 -o ''\\''x'\\'''"
        );
        let p = with(&format!("  size: 3\n  logging: {{debug: true}}\n{ONE}"));
        assert_eq!(Ctx::new(&p).flags(true).join(" "), "-n 1 -vvv");
    }

    #[test]
    fn quoting() {
        assert_eq!(sq("a b"), "'a b'");
        assert_eq!(sq("it's"), "'it'\\''s'");
        assert_eq!(sq("a\0b"), "'ab'");
        assert_eq!(word("/mnt/flux-1/x=y,z@v%+:"), "/mnt/flux-1/x=y,z@v%+:");
        assert_eq!(word(""), "''");
        for special in [
            "a b", "$x", "`x`", "a*", "~", "a;b", "a\nb", "{a,b}", "a'b", "!",
        ] {
            assert!(
                word(special).starts_with('\''),
                "{special:?} must be quoted"
            );
        }
        assert_eq!(dq_text("a\"$`\\b"), "a\\\"\\$\\`\\\\b");
        assert_eq!(one_line("a\nb\tc"), "a b c");
    }

    #[test]
    fn words_split_like_bash_default_ifs() {
        let words: Vec<&str> = split_words("  lmp\t-in  in.lj\n-x\r ").collect();
        assert_eq!(words, ["lmp", "-in", "in.lj", "-x\r"]);
        assert_eq!(split_words(" \n\t").count(), 0);
    }

    #[test]
    fn helpers() {
        assert_eq!(parent("/a/b/c"), "/a/b");
        assert_eq!(parent("/c"), "/");
        assert!(is_identifier("_A1"));
        for bad in ["", "1A", "A-B", "A B", "A=B"] {
            assert!(!is_identifier(bad), "{bad:?}");
        }
        assert_eq!(
            script_invocation("#!/usr/bin/env python3\n", "/tmp/s"),
            ["/tmp/s"]
        );
        assert_eq!(
            script_invocation("echo hi\n", "/tmp/s"),
            ["/bin/bash", "/tmp/s"]
        );
    }

    #[test]
    fn heredoc_delimiter_never_occurs_in_the_script() {
        let text = "echo $HOME\nFLUX_OPERATOR_SCRIPT_EOF\nFLUX_OPERATOR_SCRIPT_EOF_1\n";
        let mut sh = Sh::new();
        write_script_file(&mut sh, text, "/tmp/s");
        let out = sh.finish();
        assert!(out.contains("<<'FLUX_OPERATOR_SCRIPT_EOF_2'\n"), "{out}");
        assert!(
            out.contains(&format!("\n{text}FLUX_OPERATOR_SCRIPT_EOF_2\n")),
            "{out}"
        );
    }

    #[test]
    fn lead_branch_only_in_the_root_cluster() {
        let p = with(&format!(
            "  size: 2\n  flux:\n    bursting:\n      clusters:\n        - {{name: b}}\n{ONE}"
        ));
        let root = p.target(&Role::Root).expect("root");
        let script = broker_script(&p, &root);
        assert!(script.contains("if [ \"$host\" = mc-0 ]; then"));
        assert!(script.contains("getent hosts mc-0.mc.ns.svc.cluster.local"));
        let burst = p
            .target(&Role::Burst {
                index: 0,
                lead: Endpoint {
                    address: "lead.example.org".into(),
                    port: 31000,
                },
            })
            .expect("burst");
        let script = broker_script(&p, &burst);
        assert!(!script.contains("$host"));
        assert!(!script.contains("flux submit"));
        assert!(script.contains("lead-probe lead.example.org 31000"));
    }

    #[test]
    fn wrap_applies_to_every_broker() {
        let p = with(&format!(
            "  size: 2\n  flux: {{wrap: \"strace,-tt\"}}\n{ONE}"
        ));
        let root = p.target(&Role::Root).expect("root");
        let script = broker_script(&p, &root);
        // in the shared argument array, used by the lead and the worker loop alike
        assert!(script.contains("broker_args=(\n  --wrap=strace,-tt\n"));
        assert_eq!(
            script.matches("flux start \"${broker_args[@]}\"").count(),
            2
        );
    }

    #[test]
    fn strict_mode_is_on_by_default_and_can_be_turned_off() {
        let p = with(ONE);
        let root = p.target(&Role::Root).expect("root");
        assert!(broker_script(&p, &root).contains("\nset -eEu -o pipefail\n"));
        let p = with(&format!("  logging: {{strict: false}}\n{ONE}"));
        assert!(!broker_script(&p, &root).contains("set -e"));
    }

    #[test]
    fn sidecar_command_word_is_never_an_assignment_or_keyword() {
        let p = with(
            "  containers:\n    - image: a\n      runFlux: true\n    - image: b\n      name: s\n      command: A=1 time x\n    - image: c\n      name: t\n      command: time x\n",
        );
        let root = p.target(&Role::Root).expect("root");
        assert!(sidecar_script(&p, &root, 1).contains("\n'A=1' time x || command_status=$?\n"));
        assert!(sidecar_script(&p, &root, 2).contains("\n'time' x || command_status=$?\n"));
    }

    #[test]
    fn bad_sidecar_index_gives_a_failing_script() {
        let p = with(ONE);
        let root = p.target(&Role::Root).expect("root");
        let script = sidecar_script(&p, &root, 7);
        assert!(script.contains("exit 1"));
    }
}
