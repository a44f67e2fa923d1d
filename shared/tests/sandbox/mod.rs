//! The sandbox the script tests run generated scripts in: a private directory tree with
//! fake `flux`, `hostname`, `getent`, `sleep`, `useradd` and `adduser` commands first on
//! the PATH. The fakes record their argv (one line per call, arguments separated by
//! 0x1f) to a log, so a test checks what Flux would have been asked to do.
#![allow(dead_code)] // each test crate uses a part

use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Longest a generated script may run before the test kills it and fails.
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);

pub const CERT: &str = "#   fake certificate\ncurve\n    public-key = \"x\"\n";

/// `flux`: records its argv; `flux start` exits with the next code of FAKE_FLUX_CODES
/// (the last one repeats), or, with FAKE_FLUX_RUN=1, runs the initial program like the
/// real broker would. `flux batch` keeps a copy of its script.
pub const FAKE_FLUX: &str = r#"#!/bin/bash
(IFS=$'\x1f'; printf '%s\n' "flux$IFS$*") >>"$FAKE_LOG"
if [ "${1:-}" = start ]; then
  n=$(cat "$FAKE_STATE/starts" 2>/dev/null || echo 0)
  n=$((n + 1))
  echo "$n" >"$FAKE_STATE/starts"
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      -o) shift 2 ;;
      -*) shift ;;
      *) break ;;
    esac
  done
  if [ $# -gt 0 ] && [ "${FAKE_FLUX_RUN:-0}" = 1 ]; then
    exec "$@"
  fi
  if [ "${FAKE_FLUX_DELETED:-0}" = 1 ]; then
    # The pod is deleted while the broker runs: the container's PID 1 (the entrypoint)
    # gets SIGTERM; a real broker leaves cleanly (status 0) when it is passed on.
    trap 'echo TERM >>"$FAKE_STATE/term"; exit 0' TERM
    # The entrypoint is this process's parent: the broker is its own child.
    /bin/sleep 0.3
    kill -TERM "$PPID"
    # Not holding the script's output open once the broker is gone.
    /bin/sleep 30 >/dev/null 2>&1 &
    wait
    exit 9
  fi
  read -ra codes <<<"${FAKE_FLUX_CODES:-0}"
  if [ "$n" -le "${#codes[@]}" ]; then
    exit "${codes[n - 1]}"
  fi
  exit "${codes[${#codes[@]} - 1]}"
fi
if [ "${1:-}" = batch ]; then
  cp "${!#}" "$FAKE_STATE/batch-script"
fi
exit "${FAKE_FLUX_OTHER_CODE:-0}"
"#;

/// A recorder that exits with `$FAKE_<NAME>_CODE` (default 0).
pub fn recorder(name: &str) -> String {
    format!(
        "#!/bin/bash\n(IFS=$'\\x1f'; printf '%s\\n' \"{name}$IFS$*\") >>\"$FAKE_LOG\"\nexit \"${{FAKE_{}_CODE:-0}}\"\n",
        name.to_uppercase()
    )
}

/// `getent`: records its argv and fails the first `$FAKE_GETENT_FAILS` times; its call
/// number `$FAKE_GETENT_TERM_AT` also sends SIGTERM to the script (the pod deleted while
/// the worker waits for the lead).
pub const FAKE_GETENT: &str = r#"#!/bin/bash
(IFS=$'\x1f'; printf '%s\n' "getent$IFS$*") >>"$FAKE_LOG"
n=$(cat "$FAKE_STATE/getent" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" >"$FAKE_STATE/getent"
[ "$n" != "${FAKE_GETENT_TERM_AT:-0}" ] || kill -TERM "$PPID"
[ "$n" -gt "${FAKE_GETENT_FAILS:-0}" ]
"#;

/// `sleep`: records its argv and returns at once, but for `sleep $FAKE_SLEEP_TERM_ON`: it
/// sends SIGTERM to the script (the pod deleted during that pause) and really sleeps 20 s,
/// holding none of the script's output.
pub const FAKE_SLEEP: &str = r#"#!/bin/bash
(IFS=$'\x1f'; printf '%s\n' "sleep$IFS$*") >>"$FAKE_LOG"
if [ "${1:-}" = "${FAKE_SLEEP_TERM_ON:-}" ]; then
  kill -TERM "$PPID"
  exec /bin/sleep 20 >/dev/null 2>&1
fi
exit 0
"#;

/// A private directory tree removed when the test ends, pass or fail.
pub struct Sandbox {
    pub root: PathBuf,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let root = std::env::temp_dir().join(format!(
            "flux-scripts-run-{}-{nanos}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        for dir in ["bin", "mnt", "config", "curve", "state", "tmp", "home"] {
            fs::create_dir_all(root.join(dir)).expect("create sandbox directory");
        }
        let sandbox = Sandbox { root };
        sandbox.write_exec("bin/flux", FAKE_FLUX);
        sandbox.write_exec("bin/getent", FAKE_GETENT);
        sandbox.write_exec("bin/hostname", "#!/bin/bash\necho \"$FAKE_HOSTNAME\"\n");
        sandbox.write_exec("bin/sleep", FAKE_SLEEP);
        for name in ["useradd", "adduser", "fakecmd"] {
            sandbox.write_exec(&format!("bin/{name}"), &recorder(name));
        }
        fs::write(sandbox.path("config/broker.toml"), "# broker.toml\n").expect("write");
        fs::write(sandbox.path("config/R"), "{}\n").expect("write");
        let cert = sandbox.path("curve/curve.cert");
        fs::write(&cert, CERT).expect("write cert");
        fs::set_permissions(&cert, fs::Permissions::from_mode(0o644)).expect("chmod cert");
        sandbox
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// The mount path used in specs.
    pub fn mount(&self) -> String {
        self.path("mnt").display().to_string()
    }

    pub fn write_exec(&self, rel: &str, text: &str) {
        let path = self.path(rel);
        fs::write(&path, text).expect("write fake command");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod fake");
    }

    /// `bash FILE` in the sandbox: its PATH starts with the fakes, its HOME, TMPDIR, the
    /// scripts' config and curve overrides and the fakes' log and state are the sandbox's.
    pub fn bash(&self, file: &std::path::Path) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg(file)
            .current_dir(&self.root)
            .env_clear()
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", self.path("bin").display()),
            )
            .env("HOME", self.path("home"))
            .env("TMPDIR", self.path("tmp"))
            .env("FLUX_OPERATOR_CONFIG_DIR", self.path("config"))
            .env("FLUX_OPERATOR_CURVE_DIR", self.path("curve"))
            .env("FAKE_LOG", self.path("calls.log"))
            .env("FAKE_STATE", self.path("state"));
        cmd
    }

    /// Runs `script` with bash in the sandbox; returns (exit code, stdout, stderr).
    pub fn run(&self, script: &str, env: &[(&str, &str)]) -> (i32, String, String) {
        self.run_with_args(script, &[], env)
    }

    /// [`Sandbox::run`] with arguments for the script.
    pub fn run_with_args(
        &self,
        script: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> (i32, String, String) {
        let file = self.path("script.sh");
        fs::write(&file, script).expect("write script");
        let mut cmd = self.bash(&file);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("run bash");
        let mut stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let out_reader = thread::spawn(move || {
            let mut s = String::new();
            let _ = stdout.read_to_string(&mut s);
            s
        });
        let err_reader = thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let deadline = Instant::now() + SCRIPT_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for script") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("script did not finish within {SCRIPT_TIMEOUT:?}");
            }
            thread::sleep(Duration::from_millis(10));
        };
        let out = out_reader.join().expect("stdout reader");
        let err = err_reader.join().expect("stderr reader");
        (status.code().unwrap_or(-1), out, err)
    }

    /// Every recorded call, as argv vectors (command name first).
    pub fn calls(&self) -> Vec<Vec<String>> {
        fs::read_to_string(self.path("calls.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| l.split('\u{1f}').map(str::to_string).collect())
            .collect()
    }

    pub fn calls_of(&self, name: &str) -> Vec<Vec<String>> {
        self.calls()
            .into_iter()
            .filter(|c| c.first().is_some_and(|n| n == name))
            .map(|c| c[1..].to_vec())
            .collect()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}
