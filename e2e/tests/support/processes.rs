//! The hub and spoke child processes: the binaries built (or given), started with logs,
//! waited for, stopped; free ports and HTTP probes of them.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};

use super::*;

/// A hub or spoke process; killed when dropped.
pub(super) struct Proc {
    pub(super) child: Child,
}

impl Proc {
    /// How it exited, when it did.
    pub(super) fn exit(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("unknown: {e}")),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `flux-hub` binary: `FLUX_HUB_BIN`, or this workspace's, built once per test run.
pub fn hub_binary() -> Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    binary("FLUX_HUB_BIN", "flux-hub", &BUILT)
}

/// The `flux-spoke` binary: `FLUX_SPOKE_BIN`, or this workspace's, built once per test run.
pub fn spoke_binary() -> Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    binary("FLUX_SPOKE_BIN", "flux-spoke", &BUILT)
}

/// The binary named by the variable `var`, else `package`'s (its binary has the same name),
/// built once per test run.
pub(super) fn binary(
    var: &str,
    package: &'static str,
    built: &'static OnceLock<Result<PathBuf, String>>,
) -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        let bin = PathBuf::from(bin);
        if !bin.is_file() {
            bail!("{var}={} is not a file", bin.display());
        }
        return Ok(bin);
    }
    built
        .get_or_init(|| build(package, var).map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!(e))
}

/// `<target>/<profile>`, the directory of this test executable's `deps/`.
pub(super) fn profile_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the test executable")?;
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .with_context(|| format!("{} is not in <target>/<profile>/deps", exe.display()))
}

/// Runs `cargo build --workspace --bin <package> --test <this test>` for this test's profile
/// and target directory (fast when nothing changed, and never runs a stale binary), then
/// returns the binary's path.
///
/// Cargo unifies features over the packages and targets a command selects: the whole
/// workspace with a test target (whose dev-dependencies count) resolves them as `cargo test
/// --workspace` and `scripts/e2e.sh` do, so this reuses their build of every dependency.
/// `cargo build -p <package>` resolved others (tokio without `test-util`, kube without
/// `unstable-runtime` for the spoke, ...) and compiled up to 22 third-party crates and the
/// workspace's own again.
pub(super) fn build(package: &str, var: &str) -> Result<PathBuf> {
    let profile_dir = profile_dir()?;
    let bin = profile_dir.join(format!("{package}{}", std::env::consts::EXE_SUFFIX));
    let target_dir = profile_dir
        .parent()
        .context("the profile directory has no parent")?;
    let profile = profile_dir
        .file_name()
        .and_then(|p| p.to_str())
        .unwrap_or("debug");
    let mut cmd =
        flux_e2e::cargo_build::command(&workspace_root(), &[package], env!("CARGO_CRATE_NAME"));
    cmd.env("CARGO_TARGET_DIR", target_dir);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    eprintln!("building {package}: {cmd:?}");
    match cmd.output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => bail!(
            "cargo build --workspace --bin {package} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) if bin.is_file() => {
            eprintln!(
                "cannot run cargo ({e}); using the existing {}",
                bin.display()
            );
        }
        Err(e) => bail!("cannot run cargo to build {package} ({e}); set {var}"),
    }
    if !bin.is_file() {
        bail!("cargo built {package} but {} does not exist", bin.display());
    }
    Ok(bin)
}

/// Extra arguments from the variable `var`, split on whitespace.
pub(super) fn extra_args(var: &str) -> Vec<String> {
    std::env::var(var)
        .map(|a| a.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// `<target>/flux-e2e-logs`, where hub and spoke logs go.
pub(super) fn log_dir() -> Result<PathBuf> {
    let dir = profile_dir()?
        .parent()
        .context("the profile directory has no parent")?
        .join("flux-e2e-logs");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// A file under the test logs folder (`<target>/flux-e2e-logs/<name>`).
pub fn log_file(name: &str) -> Result<PathBuf> {
    Ok(log_dir()?.join(name))
}

/// A TCP port free on 127.0.0.1 right now.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// The status code of `GET path` (a tiny HTTP/1.1 client: the tests need no more).
pub(super) fn http_status(addr: SocketAddr, path: &str) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = Vec::new();
    let mut buf = [0u8; 256];
    while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 4096 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    head.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("not an HTTP response: {head:?}"),
            )
        })
}

/// The last `n` lines of a file.
pub(super) fn tail(path: &Path, n: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

impl TestEnv {
    /// The last `n` lines of the current hub's log (empty before it started).
    pub fn hub_log_tail(&self, n: usize) -> String {
        lock(&self.hub_logs)
            .last()
            .map(|log| tail(log, n))
            .unwrap_or_default()
    }

    /// Kills the hub and starts a new one (as after a crash or an upgrade).
    pub async fn restart_hub(&self) -> Result<()> {
        self.stop_hub();
        self.start_hub().await
    }

    /// Where the current hub serves `/metrics`, once one started.
    pub fn hub_metrics_addr(&self) -> Option<SocketAddr> {
        *lock(&self.hub_metrics)
    }

    /// Kills the hub (SIGKILL, as in a crash), if one runs.
    pub fn stop_hub(&self) {
        let old = lock(&self.hub).take();
        drop(old);
    }

    /// The arguments of the next `flux-hub run` besides `--namespace` and
    /// `--metrics-addr`.
    pub fn hub_args(&self) -> Vec<String> {
        lock(&self.hub_args).clone()
    }

    /// Arguments of every later `flux-hub run` of this test (besides `--namespace`,
    /// `--metrics-addr` and `FLUX_HUB_ARGS`).
    pub fn set_hub_args(&self, args: Vec<String>) {
        *lock(&self.hub_args) = args;
    }

    /// Spawns `cmd` (a controller serving `addr`) with stdin closed, stdout and stderr in
    /// `log`, and `RUST_LOG` defaulting to `rust_log`.
    pub(super) fn spawn_logged(
        &self,
        mut cmd: Command,
        what: &str,
        rust_log: &str,
        addr: SocketAddr,
        log: &Path,
    ) -> Result<Child> {
        let file = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", rust_log);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning {}", cmd.get_program().to_string_lossy()))?;
        eprintln!(
            "{}: {what} pid {} serving {addr}, log {}",
            self.test,
            child.id(),
            log.display()
        );
        Ok(child)
    }

    /// Starts `flux-hub run` watching the test namespace and waits until it is ready.
    pub async fn start_hub(&self) -> Result<()> {
        let bin = tokio::task::spawn_blocking(hub_binary).await??;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
        let n = lock(&self.hub_logs).len();
        let log = log_dir()?.join(format!("{}-hub-{n}.log", self.ns));
        let mut cmd = Command::new(&bin);
        cmd.arg("run")
            .arg("--namespace")
            .arg(&self.ns)
            .arg("--metrics-addr")
            .arg(addr.to_string())
            .args(lock(&self.hub_args).iter())
            .args(extra_args("FLUX_HUB_ARGS"));
        // Each test's hub keeps its spoke pins in the test's namespace: a test that pins
        // (join) turns pinning on for itself only; the others' spokes are not pinned.
        if !lock(&self.hub_args).iter().any(|a| a == "--spoke-pins") {
            cmd.arg("--spoke-pins")
                .arg(format!(
                    "{}/{}",
                    self.ns,
                    flux_shared::federation::pins::PINS_CONFIGMAP
                ))
                .arg("--allow-unpinned-spokes");
        }
        let child = self.spawn_logged(cmd, "hub", "info,kube=warn,flux_hub=debug", addr, &log)?;
        lock(&self.hub_logs).push(log.clone());
        *lock(&self.hub_metrics) = Some(addr);
        *lock(&self.hub) = Some(Proc { child });
        self.wait_ready("hub", addr, "/readyz", &log).await
    }

    /// Waits until `GET path` on `addr` answers 200, failing early when a process of the
    /// test exits.
    pub(super) async fn wait_ready(
        &self,
        what: &str,
        addr: SocketAddr,
        path: &'static str,
        log: &Path,
    ) -> Result<()> {
        let timeout = secs(60);
        let start = Instant::now();
        loop {
            if let Some(exit) = self.exited() {
                bail!(
                    "{exit} before the {what} was ready; its log:\n{}",
                    tail(log, 60)
                );
            }
            let last = match tokio::task::spawn_blocking(move || http_status(addr, path)).await? {
                Ok(200) => return Ok(()),
                Ok(code) => format!("HTTP {code}"),
                Err(e) => e.to_string(),
            };
            if start.elapsed() >= timeout {
                bail!(
                    "the {what} was not ready on http://{addr}{path} after {timeout:?} (last answer: {last}); its log:\n{}",
                    tail(log, 60)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Why the test cannot go on: the hub or a spoke process exited on its own.
    pub(super) fn exited(&self) -> Option<String> {
        if let Some(hub) = lock(&self.hub).as_mut()
            && let Some(status) = hub.exit()
        {
            return Some(format!("the hub exited ({status})"));
        }
        lock(&self.spokes).iter_mut().find_map(|spoke| {
            let status = spoke.process.as_mut()?.exit()?;
            Some(format!("the spoke {} exited ({status})", spoke.name))
        })
    }
}
