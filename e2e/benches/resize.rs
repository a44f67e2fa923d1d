//! Benchmark driver for `scripts/bench-resize.sh`: how long a burst's size change takes to
//! reach the spoke's Job, on two real API servers (the root cluster of `--root-kubeconfig`
//! and the burst cluster of `--spoke-kubeconfig`), with `flux-hub run` and `flux-spoke run`
//! as processes talking mTLS gRPC on loopback.
//!
//! One MiniCluster with one burst (`maxSize` 8, `leadAddress` set, so no node is needed
//! for the lead broker's endpoint) is created; once its burst Job exists in the burst
//! cluster, `--n` size changes follow one at a time, each a merge patch of the
//! MiniCluster's spec (what `kubectl patch` and `flux-hub burst scale` send), cycling
//! through sizes 2..8, 0 and 1. Each is timed from sending the patch to the burst Job's
//! event on a watch of the burst cluster showing the new size (parallelism, or `suspend`
//! for 0): hub reconcile, registry, snapshot over gRPC, spoke apply and the API server's
//! write, all included. Prints p50 / p90 / p99 / max and writes them as JSON to `--out`.
//!
//! With `--hostile N`, 2N hostile tenants come first (issue: six MiniClusters with 1.3 MB
//! of scripts and 64 bursts each took the hub past its memory limit): N at etcd's object
//! limit (a 1.4 MB `commands.script`, which the root API server refuses as a ConfigMap)
//! and N just under the ConfigMap limit (900 KB, accepted in the root, assigned, and
//! refused by the spoke's policy for their image), each with 64 bursts on the spoke. Once
//! every one of their bursts shows its refusal in status, the size changes are timed
//! (other tenants must still scale within 1 s), and both processes' resident memory is
//! reported: before the hostile tenants, after them, and the peak (`VmHWM`).
//!
//! `harness = false`: without arguments (e.g. `cargo bench` or `cargo test --all-targets`)
//! it only says how to run it.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config};
use serde_json::json;

/// Burst sizes, in the order the changes cycle through (the burst starts at 1).
const SIZES: [i32; 9] = [2, 3, 4, 5, 6, 7, 8, 0, 1];

#[derive(Parser)]
#[command(
    name = "resize",
    about = "time from a burst's size change to the spoke's Job, on two real API servers"
)]
struct Cli {
    /// Kubeconfig of the root cluster (the hub's).
    #[arg(long)]
    root_kubeconfig: Option<PathBuf>,
    /// Kubeconfig of the burst cluster (the spoke's).
    #[arg(long)]
    spoke_kubeconfig: Option<PathBuf>,
    /// Size changes to time.
    #[arg(long, default_value_t = 60)]
    n: usize,
    /// The flux-hub binary.
    #[arg(long, default_value = "target/release/flux-hub")]
    hub_bin: PathBuf,
    /// The flux-spoke binary.
    #[arg(long, default_value = "target/release/flux-spoke")]
    spoke_bin: PathBuf,
    /// Hostile tenants of each kind to create first (see the top of the file).
    #[arg(long, default_value_t = 0)]
    hostile: usize,
    /// Certificates, logs and the JSON results go here.
    #[arg(long, default_value = "target/bench-resize")]
    out: PathBuf,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse_from(std::env::args().filter(|a| a != "--bench"));
    let (Some(root), Some(spoke)) = (cli.root_kubeconfig.clone(), cli.spoke_kubeconfig.clone())
    else {
        println!(
            "resize: run it with scripts/bench-resize.sh (needs two API servers: --root-kubeconfig and --spoke-kubeconfig)"
        );
        return std::process::ExitCode::SUCCESS;
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("resize: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&cli, &root, &spoke)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("resize: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn client(kubeconfig: &Path) -> Result<Client> {
    let config = Config::from_custom_kubeconfig(
        Kubeconfig::read_from(kubeconfig)
            .with_context(|| format!("reading {}", kubeconfig.display()))?,
        &KubeConfigOptions::default(),
    )
    .await?;
    Ok(Client::try_from(config)?)
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// A controller process, killed when dropped.
struct Process {
    child: Child,
    log: PathBuf,
    what: &'static str,
}

impl Process {
    fn spawn(
        what: &'static str,
        mut cmd: Command,
        kubeconfig: &Path,
        log: PathBuf,
    ) -> Result<Process> {
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = cmd
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        Ok(Process { child, log, what })
    }

    fn check(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            bail!(
                "{} exited ({status}); log {}:\n{}",
                self.what,
                self.log.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        Ok(())
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident memory of process `pid` in MiB: now (`VmRSS`) and its peak (`VmHWM`).
fn rss(pid: u32) -> Result<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> Result<f64> {
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .with_context(|| format!("no {name} in /proc/{pid}/status"))?;
        let kib: f64 = line
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .with_context(|| format!("{name} {line:?}"))?;
        Ok(kib / 1024.0)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// Bursts per hostile tenant: the most the CRD accepts.
const HOSTILE_BURSTS: usize = 64;

/// Hostile tenant `i` in namespace `ns`: `refused_at_root` ones carry a script over etcd's
/// object limit, the others one just under the ConfigMap limit and an image the spoke's
/// policy refuses.
fn hostile(ns: &str, i: usize, refused_at_root: bool) -> serde_json::Value {
    let (kind, script_bytes) = if refused_at_root {
        ("huge", 1_400_000)
    } else {
        ("large", 900_000)
    };
    let clusters: Vec<serde_json::Value> = (0..HOSTILE_BURSTS)
        .map(|b| json!({"name": format!("b{b}"), "cluster": "bench", "size": 1}))
        .collect();
    json!({
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": format!("{kind}-{i}"), "namespace": ns},
        "spec": {
            "size": 1,
            "containers": [{"image": "ubuntu:noble", "commands": {"script": "x".repeat(script_bytes)}}],
            "flux": {"bursting": {"leadAddress": "192.0.2.1", "clusters": clusters}},
        },
    })
}

/// Bursts of the hostile MiniClusters in `mcs` whose status shows a refusal (the hub's
/// `Invalid` or the spoke's `Refused`).
async fn hostile_refused(mcs: &Api<DynamicObject>) -> Result<usize> {
    let list = mcs.list(&Default::default()).await?;
    Ok(list
        .items
        .iter()
        .filter(|mc| mc.metadata.name.as_deref() != Some("resize"))
        .filter_map(|mc| mc.data["status"]["bursts"].as_array())
        .flatten()
        .filter(|b| matches!(b["phase"].as_str(), Some("Invalid" | "Refused")))
        .count())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The size a burst Job runs: its parallelism, 0 when suspended.
fn job_size(job: &Job) -> Option<i32> {
    let spec = job.spec.as_ref()?;
    if spec.suspend == Some(true) {
        Some(0)
    } else {
        spec.parallelism
    }
}

async fn run(cli: &Cli, root_kubeconfig: &Path, spoke_kubeconfig: &Path) -> Result<()> {
    for bin in [&cli.hub_bin, &cli.spoke_bin] {
        ensure!(
            bin.is_file(),
            "no binary at {} (cargo build --release)",
            bin.display()
        );
    }
    std::fs::create_dir_all(&cli.out)?;
    let certs = cli.out.join("certs");
    let _ = std::fs::remove_dir_all(&certs);
    let status = Command::new(&cli.hub_bin)
        .args(["certs", "--out"])
        .arg(&certs)
        .args(["--hub-dns", "localhost", "--hub-ip", "127.0.0.1"])
        .args(["--spoke", "bench", "--admin", "bench"])
        .stdout(Stdio::null())
        .status()?;
    ensure!(status.success(), "flux-hub certs failed");
    let file = |name: &str| certs.join(name).display().to_string();

    let root = client(root_kubeconfig).await?;
    let spoke = client(spoke_kubeconfig).await?;
    let ns = format!("bench-resize-{}", std::process::id());
    for c in [&root, &spoke] {
        let namespaces: Api<Namespace> = Api::all(c.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
            )
            .await
            .with_context(|| format!("creating namespace {ns}"))?;
    }

    // The spoke's own namespace and its owner's policy: the benchmark's namespace, bounded,
    // and one image prefix (the hostile tenants' image is not in it).
    let spoke_ns = format!("{ns}-spoke");
    Api::<Namespace>::all(spoke.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": spoke_ns}}))?,
        )
        .await
        .with_context(|| format!("creating namespace {spoke_ns}"))?;
    let policy = format!(
        "version: 1\nnamespaces: [{{name: {ns}}}]\nmaxBrokers: 64\nmaxBrokersPerMiniCluster: 8\nimages: [ghcr.io/converged-computing/]\n"
    );
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(spoke.clone(), &spoke_ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "flux-spoke-policy"},
                "data": {"policy.yaml": policy},
            }))?,
        )
        .await
        .context("creating the spoke's policy")?;

    let grpc = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
    let mut hub_cmd = Command::new(&cli.hub_bin);
    hub_cmd.args([
        "run",
        "--namespace",
        &ns,
        "--metrics-addr",
        &format!("127.0.0.1:{}", free_port()?),
        "--grpc-addr",
        &grpc.to_string(),
        "--ca",
        &file("ca.crt"),
        "--cert",
        &file("hub.crt"),
        "--key",
        &file("hub.key"),
    ]);
    let mut hub = Process::spawn(
        "flux-hub",
        hub_cmd,
        root_kubeconfig,
        cli.out.join("hub.log"),
    )?;
    let mut spoke_cmd = Command::new(&cli.spoke_bin);
    spoke_cmd.args([
        "run",
        "--hub",
        &format!("https://{grpc}"),
        "--hub-domain",
        "localhost",
        "--name",
        "bench",
        "--metrics-addr",
        &format!("127.0.0.1:{}", free_port()?),
        "--ca",
        &file("ca.crt"),
        "--cert",
        &file("spoke-bench.crt"),
        "--key",
        &file("spoke-bench.key"),
    ]);
    spoke_cmd.env("POD_NAMESPACE", &spoke_ns);
    let mut spoke_proc = Process::spawn(
        "flux-spoke",
        spoke_cmd,
        spoke_kubeconfig,
        cli.out.join("spoke.log"),
    )?;

    let gvk = GroupVersionKind::gvk("flux-framework.org", "v1alpha2", "MiniCluster");
    let mcs: Api<DynamicObject> =
        Api::namespaced_with(root.clone(), &ns, &ApiResource::from_gvk(&gvk));
    let burst =
        |size: i32| json!([{"name": "burst", "cluster": "bench", "size": size, "maxSize": 8}]);
    let doc = json!({
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": "resize", "namespace": ns},
        "spec": {
            "size": 1,
            "containers": [{"image": "ghcr.io/converged-computing/metric-lammps:latest"}],
            "flux": {"bursting": {"leadAddress": "192.0.2.1", "clusters": burst(1)}},
        },
    });
    mcs.create(&PostParams::default(), &serde_json::from_value(doc)?)
        .await
        .context("creating the MiniCluster (is the CRD installed in the root cluster?)")?;

    // Every event of the burst Job, with the time it arrived.
    let jobs: Api<Job> = Api::namespaced(spoke.clone(), &ns);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Option<i32>)>();
    let watch = tokio::spawn(async move {
        let mut stream = watcher(
            jobs,
            watcher::Config::default().fields("metadata.name=burst"),
        )
        .applied_objects()
        .boxed();
        while let Some(event) = stream.next().await {
            if let Ok(job) = event
                && tx.send((Instant::now(), job_size(&job))).is_err()
            {
                break;
            }
        }
    });
    let wait_for = async |rx: &mut tokio::sync::mpsc::UnboundedReceiver<(Instant, Option<i32>)>,
                          size: i32,
                          limit: Duration|
           -> Result<Instant> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some((at, Some(s)))) if s == size => return Ok(at),
                Ok(Some(_)) => {}
                Ok(None) => bail!("the watch of the burst Job ended"),
                Err(_) => bail!("the burst Job never showed size {size} within {limit:?}"),
            }
        }
    };
    let first = wait_for(&mut rx, 1, Duration::from_secs(120)).await;
    hub.check()?;
    spoke_proc.check()?;
    first.context("waiting for the burst's Job in the burst cluster")?;
    let (hub_pid, spoke_pid) = (hub.child.id(), spoke_proc.child.id());
    let before = (rss(hub_pid)?, rss(spoke_pid)?);
    let mut after = before;
    if cli.hostile > 0 {
        let started = Instant::now();
        for i in 0..cli.hostile {
            for refused_at_root in [true, false] {
                mcs.create(
                    &PostParams::default(),
                    &serde_json::from_value(hostile(&ns, i, refused_at_root))?,
                )
                .await
                .with_context(|| format!("creating hostile tenant {i}"))?;
            }
        }
        let want = 2 * cli.hostile * HOSTILE_BURSTS;
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            hub.check()?;
            spoke_proc.check()?;
            let refused = hostile_refused(&mcs).await?;
            if refused >= want {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "only {refused} of the hostile tenants' {want} bursts show a refusal after 300 s"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        after = (rss(hub_pid)?, rss(spoke_pid)?);
        eprintln!(
            "resize: {} hostile tenants created; all {want} of their bursts refused after {:.1} s",
            2 * cli.hostile,
            started.elapsed().as_secs_f64()
        );
        while rx.try_recv().is_ok() {}
    }
    eprintln!("resize: burst Job created; timing {} size changes", cli.n);

    let mut samples = Vec::with_capacity(cli.n);
    for i in 0..cli.n {
        let size = SIZES[i % SIZES.len()];
        let patch = json!({"spec": {"flux": {"bursting": {"clusters": burst(size)}}}});
        let sent = Instant::now();
        mcs.patch("resize", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("patching size {size}"))?;
        let at = match wait_for(&mut rx, size, Duration::from_secs(30)).await {
            Ok(at) => at,
            Err(e) => {
                hub.check()?;
                spoke_proc.check()?;
                return Err(e);
            }
        };
        samples.push(at.duration_since(sent).as_secs_f64() * 1000.0);
        // Let the Job controller's own status updates of this step pass first.
        tokio::time::sleep(Duration::from_millis(200)).await;
        while rx.try_recv().is_ok() {}
    }
    watch.abort();
    let peak = (rss(hub_pid)?.1, rss(spoke_pid)?.1);
    let mut sorted = samples.clone();
    sorted.sort_by(f64::total_cmp);
    let (p50, p90, p99, max) = (
        percentile(&sorted, 50.0),
        percentile(&sorted, 90.0),
        percentile(&sorted, 99.0),
        sorted.last().copied().unwrap_or(0.0),
    );
    println!(
        "burst size change -> spoke Job updated ({} changes): p50 {p50:.1} ms, p90 {p90:.1} ms, p99 {p99:.1} ms, max {max:.1} ms",
        samples.len()
    );
    println!(
        "resident memory, MiB: hub {:.1} before, {:.1} with {} hostile tenants, peak {:.1}; spoke {:.1} before, {:.1} with them, peak {:.1}",
        before.0.0,
        after.0.0,
        2 * cli.hostile,
        peak.0,
        before.1.0,
        after.1.0,
        peak.1
    );
    let results = json!({
        "hostile_tenants": 2 * cli.hostile,
        "hub_rss_mib": {"before": before.0.0, "with_hostile": after.0.0, "peak": peak.0},
        "spoke_rss_mib": {"before": before.1.0, "with_hostile": after.1.0, "peak": peak.1},
        "changes": samples.len(),
        "p50_ms": p50, "p90_ms": p90, "p99_ms": p99, "max_ms": max,
        "samples_ms": samples,
    });
    std::fs::write(
        cli.out.join("results.json"),
        serde_json::to_vec_pretty(&results)?,
    )?;
    for c in [&root, &spoke] {
        let namespaces: Api<Namespace> = Api::all(c.clone());
        let _ = namespaces.delete(&ns, &Default::default()).await;
    }
    Ok(())
}
