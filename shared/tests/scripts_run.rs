//! Behavioural tests: the generated scripts are RUN with bash against fake `flux`,
//! `hostname`, `getent`, `sleep`, `useradd` and `adduser` commands placed first on the
//! PATH. The fakes record their argv (one line per call, arguments separated by 0x1f)
//! to a log, so the tests check what Flux would have been asked to do.
//!
//! Every spec uses a temporary `flux.container.mountPath` and `flux.container.disable`
//! (no view to copy), and the scripts' `FLUX_OPERATOR_CONFIG_DIR` /
//! `FLUX_OPERATOR_CURVE_DIR` overrides point at temporary directories, so nothing
//! outside the temporary directory is touched.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use flux_shared::api::MiniCluster;
use flux_shared::plan::{Endpoint, Plan, Role, Target};
use flux_shared::scripts;

mod sandbox;
use sandbox::{CERT, Sandbox};

/// A MiniCluster `flux-sample` in `default` using the sandbox's mount, no view,
/// with `extra_spec` appended under `spec:` (already indented by two spaces) and
/// `extra_flux` under `spec.flux:` (indented by four).
fn plan(sandbox: &Sandbox, extra_spec: &str, extra_flux: &str) -> Plan {
    let yaml = format!(
        "metadata: {{name: flux-sample, namespace: default}}\n\
         spec:\n\
         \x20 size: 2\n\
         \x20 flux:\n\
         \x20   container:\n\
         \x20     disable: true\n\
         \x20     mountPath: {mount}\n\
         {extra_flux}\
         {extra_spec}",
        mount = sandbox.mount(),
    );
    let mc: MiniCluster = serde_yaml_ng::from_str(&yaml).expect("test YAML parses");
    Plan::new(&mc).expect("test MiniCluster is valid")
}

fn root(plan: &Plan) -> Target {
    plan.target(&Role::Root).expect("root target")
}

/// The argv `flux start` gets on every broker of `target`, before the initial program.
fn start_args(sandbox: &Sandbox, plan: &Plan, target: &Target) -> Vec<String> {
    let mut args = vec![
        "start".to_string(),
        "-o".to_string(),
        format!("--config-path={}/config/etc/flux/config", sandbox.mount()),
    ];
    args.extend(scripts::broker_attributes(plan, target));
    args
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

fn assert_cert_private(sandbox: &Sandbox) {
    let cert = Path::new(&sandbox.mount()).join("config/curve/curve.cert");
    let meta = fs::metadata(&cert).expect("curve cert copied");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "curve cert mode");
    assert_eq!(fs::read_to_string(&cert).expect("read cert"), CERT);
}

const HELLO: &str = "  containers:\n    - image: rockylinux:9\n      command: echo hello world\n";

#[test]
fn lead_runs_flux_start_with_the_submit_program() {
    let sb = Sandbox::new();
    let plan = plan(&sb, HELLO, "");
    let target = root(&plan);
    let (code, out, err) = sb.run(
        &scripts::broker_script(&plan, &target),
        &[("FAKE_HOSTNAME", "flux-sample-0")],
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let mut expected = start_args(&sb, &plan, &target);
    expected.extend(strings(&[
        "flux", "submit", "-n", "1", "--quiet", "--watch", "echo", "hello", "world",
    ]));
    assert_eq!(sb.calls_of("flux"), vec![expected]);
    assert!(sb.calls_of("getent").is_empty(), "the lead does not wait");
    assert!(sb.calls_of("sleep").is_empty());
    assert_cert_private(&sb);
    let view = fs::read_to_string(sb.path("mnt/flux-view.sh")).expect("flux-view.sh written");
    assert!(view.contains(&format!(
        "export fluxsocket=local://{}/config/run/flux/local",
        sb.mount()
    )));
    assert!(sb.path("mnt/flux-connect.sh").exists());
}

#[test]
fn lead_initial_program_runs_inside_the_instance() {
    let sb = Sandbox::new();
    let archive = sb.path("state-archive.tar").display().to_string();
    fs::write(&archive, "dump").expect("write archive");
    let spec = format!("  archive: {{path: {archive}}}\n  tasks: 2\n{HELLO}");
    let plan = plan(&sb, &spec, "");
    let target = root(&plan);
    let (code, out, err) = sb.run(
        &scripts::broker_script(&plan, &target),
        &[("FAKE_HOSTNAME", "flux-sample-0"), ("FAKE_FLUX_RUN", "1")],
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let mut start = start_args(&sb, &plan, &target);
    start.push(format!("-Scontent.restore={archive}"));
    let calls = sb.calls_of("flux");
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(calls[0][..start.len()], start[..], "restore is appended");
    assert_eq!(
        calls[1],
        strings(&[
            "submit", "-N", "2", "-n", "2", "--quiet", "--watch", "echo", "hello", "world"
        ])
    );
    assert_eq!(calls[2], vec!["dump".to_string(), archive]);
}

#[test]
fn lead_exits_with_flux_status_in_strict_and_lax_mode() {
    for strict in [true, false] {
        let sb = Sandbox::new();
        let marker = sb.path("post-ran").display().to_string();
        let spec = format!(
            "  logging: {{strict: {strict}}}\n{HELLO}      commands:\n        post: touch {marker}\n"
        );
        let plan = plan(&sb, &spec, "");
        let target = root(&plan);
        let (code, out, err) = sb.run(
            &scripts::broker_script(&plan, &target),
            &[("FAKE_HOSTNAME", "flux-sample-0"), ("FAKE_FLUX_CODES", "3")],
        );
        assert_eq!(code, 3, "strict={strict}\nstdout:\n{out}\nstderr:\n{err}");
        assert!(
            Path::new(&marker).exists(),
            "commands.post runs after a failure"
        );
        assert_eq!(sb.calls_of("flux").len(), 1, "the lead never restarts");
    }
}

#[test]
fn lead_batch_submits_the_generated_batch_script() {
    let sb = Sandbox::new();
    let logs = sb.path("out").display().to_string();
    let spec = format!(
        "  containers:\n    - image: rockylinux:9\n      batch: true\n      logs: {logs}\n      command: |\n        echo one\n\n        echo 'two' \"$HOME\"\n"
    );
    let plan = plan(&sb, &spec, "");
    let target = root(&plan);
    let (code, out, err) = sb.run(
        &scripts::broker_script(&plan, &target),
        &[("FAKE_HOSTNAME", "flux-sample-0"), ("FAKE_FLUX_RUN", "1")],
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(Path::new(&logs).is_dir(), "batch output directory created");
    let calls = sb.calls_of("flux");
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(
        calls[1][..5],
        strings(&["batch", "-n", "1", "--flags", "waitable"])[..]
    );
    assert_eq!(calls[2], strings(&["job", "wait", "--all"]));
    let batch = fs::read_to_string(sb.path("state/batch-script")).expect("batch script");
    assert_eq!(
        batch,
        format!(
            "#!/bin/bash\n\
             flux submit --flags waitable --error={logs}/job-0.err --output={logs}/job-0.out echo one\n\
             flux submit --flags waitable --error={logs}/job-2.err --output={logs}/job-2.out echo 'two' \"$HOME\"\n\
             flux queue idle\nflux jobs -a\nflux job wait --all\n"
        )
    );
}

#[test]
fn command_is_split_into_words_but_never_interpreted() {
    let sb = Sandbox::new();
    let pwned = sb.path("pwned").display().to_string();
    // Literal YAML block: the command text reaches the script byte for byte.
    let spec = format!(
        "  containers:\n    - image: rockylinux:9\n      launcher: true\n      command: |\n        fakecmd $(touch {pwned}) 'a b' * \"$HOME\" `touch {pwned}`;x\n"
    );
    let flux = "    wrap: \"it's,$(touch /nonexistent)\"\n    environment:\n      QUOTED: \"it's \\\"$HOME\\\" `id`\\nsecond line\"\n";
    let plan = plan(&sb, &spec, flux);
    let target = root(&plan);
    let (code, out, err) = sb.run(
        &scripts::broker_script(&plan, &target),
        &[("FAKE_HOSTNAME", "flux-sample-0"), ("FAKE_FLUX_RUN", "1")],
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(!Path::new(&pwned).exists(), "command substitution ran");
    let start = &sb.calls_of("flux")[0];
    assert_eq!(start[1], "--wrap=it's,$(touch /nonexistent)");
    assert_eq!(
        sb.calls_of("fakecmd"),
        vec![vec![
            "$(touch".to_string(),
            format!("{pwned})"),
            "'a".to_string(),
            "b'".to_string(),
            "*".to_string(),
            "\"$HOME\"".to_string(),
            "`touch".to_string(),
            format!("{pwned}`;x"),
        ]]
    );
    // flux-view.sh gives back the environment value exactly.
    let probe = Command::new("bash")
        .arg("-c")
        .arg(". \"$1\"; printf %s \"$QUOTED\"")
        .arg("probe")
        .arg(sb.path("mnt/flux-view.sh"))
        .output()
        .expect("source flux-view.sh");
    assert_eq!(
        String::from_utf8_lossy(&probe.stdout),
        "it's \"$HOME\" `id`\nsecond line"
    );
}

#[test]
fn worker_waits_for_the_lead_and_restarts_a_failed_broker() {
    let sb = Sandbox::new();
    let plan = plan(&sb, HELLO, "");
    let target = root(&plan);
    let (code, out, err) = sb.run(
        &scripts::broker_script(&plan, &target),
        &[
            ("FAKE_HOSTNAME", "flux-sample-1"),
            ("FAKE_GETENT_FAILS", "2"),
            ("FAKE_FLUX_CODES", "1 2 0"),
        ],
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let fqdn = "flux-sample-0.flux-sample.default.svc.cluster.local";
    let names: Vec<String> = sb
        .calls()
        .iter()
        .map(|c| c[0].clone())
        .filter(|n| ["getent", "sleep", "flux"].contains(&n.as_str()))
        .collect();
    assert_eq!(
        names,
        strings(&[
            "getent", "sleep", "getent", "sleep", "getent", "flux", "sleep", "flux", "sleep",
            "flux"
        ]),
        "wait for the lead, then start, restarting after each failure"
    );
    assert_eq!(sb.calls_of("getent")[0], strings(&["hosts", fqdn]));
    assert_eq!(
        sb.calls_of("sleep"),
        vec![
            strings(&["0.2"]),
            strings(&["0.2"]),
            strings(&["15"]),
            strings(&["15"])
        ]
    );
    let start = start_args(&sb, &plan, &target);
    assert!(
        sb.calls_of("flux").iter().all(|c| *c == start),
        "workers run no program"
    );
    assert!(err.contains("restarting"), "{err}");
    assert_cert_private(&sb);
}

/// A deleted broker pod: the entrypoint passes SIGTERM on to the broker at once (not the
/// grace period later), does not restart it, and fails the pod (143), so that the Job
/// makes the index again instead of counting it complete.
#[test]
fn sigterm_reaches_the_broker_which_is_not_restarted_and_the_pod_fails() {
    let sb = Sandbox::new();
    let plan = plan(&sb, HELLO, "");
    let target = root(&plan);
    let started = Instant::now();
    let (code, out, err) = sb.run(
        &scripts::broker_script(&plan, &target),
        &[
            ("FAKE_HOSTNAME", "flux-sample-1"),
            ("FAKE_FLUX_DELETED", "1"),
        ],
    );
    assert_eq!(code, 143, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the broker was not waited out: {:?}",
        started.elapsed()
    );
    assert_eq!(
        fs::read_to_string(sb.path("state/term")).unwrap_or_default(),
        "TERM\n",
        "the broker got SIGTERM once"
    );
    assert_eq!(sb.calls_of("flux").len(), 1, "not restarted");
    assert!(out.contains("stopped by SIGTERM"), "{out}");
}

/// A worker pod deleted while its broker waits for the lead (a scale-down, a burst moved to
/// the relay because it cannot reach the lead): the wait ends at once and the pod goes,
/// instead of waiting out the rest of the 60 s (seen on a real node: 26 to 38 s).
#[test]
fn sigterm_ends_the_wait_for_the_lead_at_once() {
    let sb = Sandbox::new();
    let plan = plan(&sb, HELLO, "");
    let target = root(&plan);
    let (code, out, err) = sb.run(
        &scripts::broker_script(&plan, &target),
        &[
            ("FAKE_HOSTNAME", "flux-sample-1"),
            ("FAKE_GETENT_FAILS", "1000"),
            ("FAKE_GETENT_TERM_AT", "3"),
        ],
    );
    assert_eq!(code, 143, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(
        sb.calls_of("getent").len(),
        3,
        "no lookup after the SIGTERM"
    );
    assert!(sb.calls_of("flux").len() <= 1, "not restarted");
    assert!(out.contains("stopped by SIGTERM"), "{out}");
}

/// A worker pod deleted while it pauses before restarting a failed broker: it goes at
/// once, without starting the broker again.
#[test]
fn sigterm_ends_the_pause_before_a_restart() {
    let sb = Sandbox::new();
    let plan = plan(&sb, HELLO, "");
    let target = root(&plan);
    let started = Instant::now();
    let (code, out, err) = sb.run(
        &scripts::broker_script(&plan, &target),
        &[
            ("FAKE_HOSTNAME", "flux-sample-1"),
            ("FAKE_FLUX_CODES", "1"),
            ("FAKE_SLEEP_TERM_ON", "15"),
        ],
    );
    assert_eq!(code, 143, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the pause was not waited out: {:?}",
        started.elapsed()
    );
    assert_eq!(sb.calls_of("flux").len(), 1, "not started again");
    assert!(out.contains("stopped by SIGTERM"), "{out}");
}

#[test]
fn worker_wait_for_the_lead_is_bounded() {
    let sb = Sandbox::new();
    let plan = plan(&sb, HELLO, "");
    let target = root(&plan);
    let (code, _, err) = sb.run(
        &scripts::broker_script(&plan, &target),
        &[
            ("FAKE_HOSTNAME", "flux-sample-1"),
            ("FAKE_GETENT_FAILS", "1000"),
        ],
    );
    assert_eq!(code, 0, "{err}");
    // 60 s in naps of 0.2 s (the fake `sleep` returns at once: the count bounds it).
    assert_eq!(sb.calls_of("getent").len(), 300);
    assert_eq!(sb.calls_of("flux").len(), 1, "starts anyway");
    assert!(err.contains("starting anyway"), "{err}");
}

#[test]
fn complete_workers_do_not_restart_and_complete() {
    let sb = Sandbox::new();
    let plan = plan(&sb, HELLO, "    completeWorkers: true\n");
    let target = root(&plan);
    let (code, out, err) = sb.run(
        &scripts::broker_script(&plan, &target),
        &[("FAKE_HOSTNAME", "flux-sample-1"), ("FAKE_FLUX_CODES", "1")],
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(err.contains("completing (flux.completeWorkers)"), "{err}");
    assert_eq!(sb.calls_of("flux").len(), 1);
    assert!(!sb.calls_of("sleep").iter().any(|c| c == &strings(&["15"])));
}

#[test]
fn burst_worker_waits_for_a_tcp_connection_to_the_lead() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind listener");
    let port = listener.local_addr().expect("local addr").port();
    let sb = Sandbox::new();
    let plan = plan(
        &sb,
        HELLO,
        "    bursting:\n      clusters:\n        - {name: burst-0, size: 2}\n",
    );
    let role = Role::Burst {
        index: 0,
        lead: Endpoint {
            address: "127.0.0.1".into(),
            port: i32::from(port),
        },
    };
    let target = plan.target(&role).expect("burst target");
    let script = scripts::broker_script(&plan, &target);
    // Even a pod named like the lead is a worker in a burst cluster.
    let (code, out, err) = sb.run(&script, &[("FAKE_HOSTNAME", "flux-sample-0")]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(sb.calls_of("getent").is_empty());
    assert!(
        sb.calls_of("sleep").is_empty(),
        "the lead is reachable at once"
    );
    assert_eq!(sb.calls_of("flux"), vec![start_args(&sb, &plan, &target)]);
    assert!(
        start_args(&sb, &plan, &target).contains(&"-Stbon.topo=kary:3".to_string()),
        "flat tree under rank 0"
    );
    drop(listener);
}

#[test]
fn sidecar_waits_for_the_socket_and_reports_its_command_status() {
    let sb = Sandbox::new();
    let spec = "  containers:\n    - image: rockylinux:9\n      runFlux: true\n      command: hostname\n    - image: busybox\n      name: helper\n      command: fakecmd --port 8080 'x y'\n";
    let plan = plan(&sb, spec, "");
    let target = root(&plan);
    let rundir = sb.path("mnt/config/run/flux");
    fs::create_dir_all(&rundir).expect("create rundir");
    let _socket = UnixListener::bind(rundir.join("local")).expect("bind broker socket");
    let (code, out, err) = sb.run(
        &scripts::sidecar_script(&plan, &target, 1),
        &[("FAKE_FAKECMD_CODE", "4")],
    );
    assert_eq!(code, 4, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(
        sb.calls_of("fakecmd"),
        vec![strings(&["--port", "8080", "'x", "y'"])]
    );
    assert!(sb.calls_of("sleep").is_empty(), "the socket already exists");
}

#[test]
fn init_script_copies_the_configuration_into_the_layout() {
    let sb = Sandbox::new();
    let plan = plan(&sb, HELLO, "");
    let target = root(&plan);
    let (code, out, err) = sb.run(&scripts::init_script(&plan, &target), &[]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let cfg = sb.path("mnt/config");
    assert_eq!(
        fs::read_to_string(cfg.join("etc/flux/config/broker.toml")).expect("broker.toml"),
        "# broker.toml\n"
    );
    assert_eq!(
        fs::read_to_string(cfg.join("etc/flux/system/R")).expect("R"),
        "{}\n"
    );
    for dir in [
        "etc/flux/system/cron.d",
        "run/flux",
        "var/lib/flux",
        "curve",
    ] {
        assert!(cfg.join(dir).is_dir(), "{dir} created");
    }
    assert!(
        !sb.path("mnt/view").exists(),
        "no view copied when disabled"
    );
}

#[test]
fn flux_user_is_created_only_as_root_and_never_fatally() {
    let sb = Sandbox::new();
    let spec = format!("{HELLO}      fluxUser: {{name: fluxscripttest, uid: 4321}}\n");
    let plan = plan(&sb, &spec, "");
    let target = root(&plan);
    let (code, out, err) = sb.run(
        &scripts::broker_script(&plan, &target),
        &[
            ("FAKE_HOSTNAME", "flux-sample-0"),
            ("FAKE_USERADD_CODE", "9"),
        ],
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    if is_root {
        assert_eq!(
            sb.calls_of("useradd"),
            vec![
                strings(&["-m", "-u", "4321", "fluxscripttest"]),
                strings(&["-m", "fluxscripttest"]),
            ]
        );
        assert!(
            err.contains("could not create user fluxscripttest"),
            "{err}"
        );
    } else {
        assert!(sb.calls_of("useradd").is_empty());
    }
}

/// `flux` for the drain script: `uptime` answers the phases of `$FAKE_PHASES` in turn (the
/// last repeats; unset, it fails as a Flux without `uptime` would); `getattr rank` prints
/// 1; `dmesg --follow` prints the `;`-separated lines of `$FAKE_DMESG` (unset: fails as a
/// Flux without it would), then waits (its pid in `$FAKE_STATE/dmesg.pid`) unless
/// `$FAKE_DMESG_ENDS` is set; `kvs eventlog get` prints `$FAKE_EVENTLOG` (unset: fails);
/// `resource drain -i` prints `$FAKE_DRAIN`.
const FAKE_FLUX_DRAIN: &str = r#"#!/bin/bash
(IFS=$'\x1f'; printf '%s\n' "flux$IFS$*") >>"$FAKE_LOG"
case "${1:-}" in
  uptime)
    [ -n "${FAKE_PHASES:-}" ] || exit 1
    n=$(cat "$FAKE_STATE/uptime" 2>/dev/null || echo 0)
    n=$((n + 1))
    echo "$n" >"$FAKE_STATE/uptime"
    read -ra phases <<<"$FAKE_PHASES"
    i=$((n <= ${#phases[@]} ? n - 1 : ${#phases[@]} - 1))
    echo " 12:00:00 ${phases[i]} 1.2s,  owner root,  depth 0,  size 2"
    ;;
  getattr)
    echo 1
    ;;
  dmesg)
    [ -n "${FAKE_DMESG+set}" ] || exit 1
    if [ -n "$FAKE_DMESG" ]; then
      IFS=';' read -ra lines <<<"$FAKE_DMESG"
      printf '%s\n' "${lines[@]}"
    fi
    [ -z "${FAKE_DMESG_ENDS:-}" ] || exit 0
    echo $$ >"$FAKE_STATE/dmesg.pid"
    exec /bin/sleep 60
    ;;
  kvs)
    [ -n "${FAKE_EVENTLOG+set}" ] || exit 1
    printf '%s\n' "$FAKE_EVENTLOG"
    ;;
  resource)
    if [ "${2:-}" = drain ] && [ "${3:-}" = -i ]; then
      printf '%s\n' "${FAKE_DRAIN:-}"
    fi
    ;;
esac
"#;

/// Runs `flux-drain.sh rejoin` on worker `flux-sample-1` whose broker socket exists;
/// returns the sandbox, to read the calls.
fn rejoin(env: &[(&str, &str)]) -> Sandbox {
    let sb = Sandbox::new();
    fs::create_dir_all(sb.path("state")).expect("create state dir");
    sb.write_exec("bin/flux", FAKE_FLUX_DRAIN);
    let plan = plan(&sb, HELLO, "");
    let target = root(&plan);
    let script = scripts::drain_script(&plan, &target).expect("a drain script by default");
    let socket = sb.path("mnt/config/run/flux/local");
    fs::create_dir_all(socket.parent().expect("rundir")).expect("create rundir");
    let _listener = UnixListener::bind(&socket).expect("bind broker socket");
    fs::write(
        sb.path("mnt/flux-view.sh"),
        format!("export fluxsocket=local://{}\n", socket.display()),
    )
    .expect("write flux-view.sh");
    let mut env = env.to_vec();
    env.push(("FAKE_HOSTNAME", "flux-sample-1"));
    let (code, out, err) = sb.run_with_args(&script, &["rejoin"], &env);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    sb
}

/// The `flux` subcommands called, in order (`uptime`, `resource drain`, ...).
fn flux_verbs(sb: &Sandbox) -> Vec<String> {
    sb.calls_of("flux")
        .into_iter()
        .map(|c| c.iter().take(2).cloned().collect::<Vec<_>>().join(" "))
        .collect()
}

/// Whether the fake `flux dmesg --follow` of this sandbox still runs (waited for up to
/// 5 s: a killed process may take a moment to go).
fn broker_log_still_followed(sb: &Sandbox) -> bool {
    let Ok(pid) = fs::read_to_string(sb.path("state/dmesg.pid")) else {
        return false;
    };
    let stat = format!("/proc/{}/stat", pid.trim());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        // Gone, or a zombie nobody reaped yet: no longer following.
        let running = fs::read_to_string(&stat)
            .map(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(false);
        if !running || Instant::now() > deadline {
            return running;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

const OUR_DRAIN: &str = "drained|flux-operator: leaving (pod terminating)";
const STARTING_LOG: &str = "broker.info[1]: parent-ready: join->config-sync 0.4s;\
broker.info[2]: quorum-full: quorum->run 0.2s;\
broker.info[1]: rc1-success: init->quorum 1.2s;\
broker.info[1]: quorum-full: quorum->run 0.2s";
const NEVER_DRAINED: &str = "1795860656.369909 resource-define method=\"dynamic-discovery\"";
const DRAINED_ONCE: &str = "1795860656.369909 resource-define method=\"dynamic-discovery\"\n\
1795860656.849040 drain idset=\"3\" nodelist=\"flux-sample-3\" reason=\"flux-operator: leaving (pod terminating)\" overwrite=0";

#[test]
fn a_starting_worker_waits_on_its_broker_log_and_asks_nothing_slow_when_never_drained() {
    let sb = rejoin(&[
        ("FAKE_PHASES", "init"),
        ("FAKE_DMESG", STARTING_LOG),
        ("FAKE_EVENTLOG", NEVER_DRAINED),
    ]);
    // One look at the phase, then the log (another rank's `->run` does not count), then
    // the eventlog in C: no Python `flux resource`, no nap, no polling.
    assert_eq!(
        flux_verbs(&sb),
        ["uptime", "getattr rank", "dmesg --follow", "kvs eventlog"]
    );
    assert!(sb.calls_of("sleep").is_empty());
    assert!(
        !broker_log_still_followed(&sb),
        "flux dmesg --follow is stopped once the broker runs"
    );
}

#[test]
fn a_rejoining_worker_takes_back_its_own_drain_once_its_broker_runs() {
    let sb = rejoin(&[
        ("FAKE_PHASES", "join"),
        ("FAKE_DMESG", STARTING_LOG),
        ("FAKE_EVENTLOG", DRAINED_ONCE),
        ("FAKE_DRAIN", OUR_DRAIN),
    ]);
    assert_eq!(
        flux_verbs(&sb),
        [
            "uptime",
            "getattr rank",
            "dmesg --follow",
            "kvs eventlog",
            "resource drain",
            "resource undrain"
        ]
    );
    assert!(!broker_log_still_followed(&sb));
}

#[test]
fn a_rejoining_worker_keeps_a_drain_it_did_not_set() {
    // The instance drained a node with this reason once, but this one an admin drained.
    let sb = rejoin(&[
        ("FAKE_PHASES", "run"),
        ("FAKE_EVENTLOG", DRAINED_ONCE),
        ("FAKE_DRAIN", "drained|maintenance"),
    ]);
    assert_eq!(
        flux_verbs(&sb),
        ["uptime", "kvs eventlog", "resource drain"]
    );
    // Not drained: nothing to take back.
    let sb = rejoin(&[("FAKE_PHASES", "run"), ("FAKE_EVENTLOG", DRAINED_ONCE)]);
    assert_eq!(
        flux_verbs(&sb),
        ["uptime", "kvs eventlog", "resource drain"]
    );
}

#[test]
fn without_the_broker_log_a_rejoining_worker_asks_the_phase() {
    // `flux dmesg --follow` fails: the phase is asked until the broker runs.
    let sb = rejoin(&[
        ("FAKE_PHASES", "join init quorum run"),
        ("FAKE_EVENTLOG", DRAINED_ONCE),
        ("FAKE_DRAIN", OUR_DRAIN),
    ]);
    assert_eq!(
        flux_verbs(&sb),
        [
            "uptime",
            "getattr rank",
            "dmesg --follow",
            "uptime",
            "uptime",
            "uptime",
            "kvs eventlog",
            "resource drain",
            "resource undrain"
        ]
    );
    assert_eq!(
        sb.calls_of("sleep").len(),
        2,
        "a short nap per phase before run"
    );
    // A log that ends without saying `->run`: the same.
    let sb = rejoin(&[
        ("FAKE_PHASES", "init run"),
        (
            "FAKE_DMESG",
            "broker.info[1]: rc1-success: init->quorum 1.2s",
        ),
        ("FAKE_DMESG_ENDS", "1"),
        ("FAKE_EVENTLOG", NEVER_DRAINED),
    ]);
    assert_eq!(
        flux_verbs(&sb),
        [
            "uptime",
            "getattr rank",
            "dmesg --follow",
            "uptime",
            "kvs eventlog"
        ]
    );
}

#[test]
fn a_quiet_broker_log_is_checked_with_the_phase() {
    // The log says nothing for 5 s: the phase is asked, and the broker runs.
    let sb = rejoin(&[
        ("FAKE_PHASES", "init run"),
        ("FAKE_DMESG", ""),
        ("FAKE_EVENTLOG", NEVER_DRAINED),
    ]);
    assert_eq!(
        flux_verbs(&sb),
        [
            "uptime",
            "getattr rank",
            "dmesg --follow",
            "uptime",
            "kvs eventlog"
        ]
    );
    assert!(!broker_log_still_followed(&sb));
}

#[test]
fn an_older_flux_is_asked_for_the_drain_at_once() {
    // No `flux uptime`, no eventlog command: the drain is asked at once, as before.
    let sb = rejoin(&[("FAKE_DRAIN", OUR_DRAIN)]);
    assert_eq!(
        flux_verbs(&sb),
        [
            "uptime",
            "kvs eventlog",
            "resource drain",
            "resource undrain"
        ]
    );
}
