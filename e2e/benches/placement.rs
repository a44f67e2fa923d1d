//! Benchmark driver for `scripts/bench-placement.sh`: the hub's placement of bursts that
//! name candidates against today's fixed placement, in the same run, on a real
//! kube-apiserver (the cluster of `KUBECONFIG`, no nodes needed).
//!
//! `run`: for each round and each mode (fixed and candidates, which goes first every other
//! round, as the API server slows with every run's objects), a fresh namespace and a
//! fresh `flux-hub run` process (watching that namespace, with its federation port on
//! loopback), `--spokes` spokes connected over mutual TLS (light clients of the `Spoke`
//! service: a Watch stream with their labels, a report of their room at once and every
//! 10 s, as a spoke sends them), then `--miniclusters` MiniClusters created
//! (`--concurrency` in flight), each with one relayed burst of one broker (so that the
//! hub assigns it without a lead endpoint). Half the spokes report no room. Fixed: burst
//! `i` names spoke `n/2 + i % (n/2)`. Candidates: it names spoke `i % (n/2)` (no room)
//! first, then every spoke labelled `shard: i % (n/2)` (the one it lands on): the same
//! end state, reached by placement. Measured: from sending each create to the burst's
//! assignment first appearing in a spoke's snapshot (client side), the hub's CPU time
//! over the window (`/proc/PID/stat`) and its memory (`VmRSS`, `VmHWM`) at the end.
//! Writes `DIR/placement.json` and prints a markdown table with the ratios.
//!
//! `harness = false`: without a subcommand (`cargo bench`, `cargo test --all-targets`) it
//! only says how to run it.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::{Args, Parser, Subcommand};
use flux_shared::federation::Identity;
use flux_shared::federation::pki::Ca;
use flux_shared::federation::proto::spoke_client::SpokeClient;
use flux_shared::federation::proto::{
    ClusterRoom, NodeRoom, PolicyRoom, ReportRequest, WatchRequest,
};
use flux_shared::federation::tls::{ClientSecurity, TlsPem, TransportSettings};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde::Serialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Parser)]
#[command(
    name = "placement",
    about = "placement by candidates against fixed placement"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Every round: fixed placement, then placement by candidates.
    Run(RunArgs),
}

#[derive(Args)]
struct RunArgs {
    /// The flux-hub binary to measure.
    #[arg(long)]
    hub_bin: PathBuf,
    /// Connected spokes (even: half report no room).
    #[arg(long, default_value_t = 100)]
    spokes: usize,
    /// MiniClusters per mode and round.
    #[arg(long, default_value_t = 1000)]
    miniclusters: usize,
    /// Rounds (each: both modes, in turn first).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Creates in flight.
    #[arg(long, default_value_t = 20)]
    concurrency: usize,
    /// Where results and logs go.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Fixed,
    Candidates,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Fixed => "fixed",
            Mode::Candidates => "candidates",
        }
    }
}

#[derive(Debug, Serialize)]
struct RunResult {
    mode: Mode,
    round: usize,
    miniclusters: usize,
    spokes: usize,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    wall_s: f64,
    cpu_ms_per_minicluster: f64,
    rss_mib: f64,
    hwm_mib: f64,
}

const HUB_DNS: &str = "localhost";

/// The federation's certificates: files for the hub, client settings per spoke.
struct Pki {
    dir: PathBuf,
    spokes: Vec<(String, ClientSecurity)>,
}

fn pki(dir: &Path, spokes: usize) -> Result<Pki> {
    std::fs::create_dir_all(dir)?;
    let ca = Ca::generate("placement bench CA")?;
    let hub = ca.issue_server(&[HUB_DNS.to_string()], &[Ipv4Addr::LOCALHOST.into()], 1)?;
    std::fs::write(dir.join("ca.crt"), ca.cert_pem())?;
    std::fs::write(dir.join("hub.crt"), &hub.cert_pem)?;
    std::fs::write(dir.join("hub.key"), &hub.key_pem)?;
    let spokes = (0..spokes)
        .map(|i| {
            let name = format!("spoke-{i}");
            let leaf = ca.issue_client(&Identity::spoke(&name)?, 1)?;
            let tls = TlsPem::new(ca.cert_pem().to_string(), leaf.cert_pem, leaf.key_pem)?;
            Ok((
                name,
                ClientSecurity::Mtls {
                    tls,
                    domain: HUB_DNS.to_string(),
                },
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Pki {
        dir: dir.to_path_buf(),
        spokes,
    })
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// `GET path` on `addr`: the HTTP status code.
async fn http_status(addr: SocketAddr, path: &str) -> Result<u16> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf);
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("an HTTP status line")
}

fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').context("stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

fn clk_tck() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// (VmRSS, VmHWM) in MiB.
fn memory(pid: u32) -> Result<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |key: &str| -> Result<f64> {
        let line = status
            .lines()
            .find(|l| l.starts_with(key))
            .with_context(|| format!("{key} in /proc/{pid}/status"))?;
        let n: f64 = line
            .split_whitespace()
            .nth(1)
            .context("a number")?
            .parse()?;
        Ok(n / 1024.0)
    };
    Ok((kib("VmRSS:")?, kib("VmHWM:")?))
}

/// What the spokes have seen: the time each burst's assignment first arrived.
type Seen = Arc<Mutex<HashMap<String, Instant>>>;

/// The room spoke `i` of `n` reports: none for the first half, plenty for the second.
fn room(i: usize, n: usize) -> ClusterRoom {
    let pods = if i < n / 2 { 0 } else { 1_000_000 };
    ClusterRoom {
        nodes: vec![NodeRoom {
            count: 1,
            free_milli: [("pods".to_string(), pods)].into(),
        }],
        nodes_left_out: 0,
        observed_unix_millis: 1,
        error: String::new(),
        policy: Some(PolicyRoom {
            valid: true,
            namespaces: vec!["place-*".into()],
            max_brokers: 1_000_000,
            max_brokers_per_minicluster: 1_000_000,
            brokers: 0,
        }),
    }
}

/// One light spoke: its Watch stream (each snapshot's new keys recorded in `seen`) and a
/// report of its room at once and every 10 s. Returns once the first snapshot came.
async fn spoke(
    uri: &str,
    name: &str,
    security: &ClientSecurity,
    labels: BTreeMap<String, String>,
    room: ClusterRoom,
    seen: Seen,
) -> Result<tokio::task::JoinHandle<()>> {
    let settings = TransportSettings::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    let channel = loop {
        match settings.endpoint(uri, security)?.connect().await {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => bail!("spoke {name} cannot connect: {e}"),
        }
    };
    let mut client = SpokeClient::with_interceptor(channel, security.interceptor())
        .max_decoding_message_size(settings.max_decoding_message_size);
    let mut stream = client
        .watch(WatchRequest {
            labels: labels.into_iter().collect(),
            ..WatchRequest::default()
        })
        .await?
        .into_inner();
    let first = stream.message().await?.context("a first snapshot")?;
    let report = move |epoch: String, version: u64| ReportRequest {
        hub_epoch: epoch,
        applied_version: version,
        statuses: Vec::new(),
        cluster_access: None,
        room: Some(room.clone()),
        root_reach: None,
    };
    client
        .report(settings.unary_request(report(first.hub_epoch.clone(), first.version)))
        .await?;
    Ok(tokio::spawn(async move {
        let mut epoch = first.hub_epoch;
        let mut version = first.version;
        let mut ticks = tokio::time::interval(Duration::from_secs(10));
        loop {
            tokio::select! {
                message = stream.message() => match message {
                    Ok(Some(snapshot)) => {
                        let now = Instant::now();
                        let mut seen = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        for a in &snapshot.assignments {
                            seen.entry(a.key.clone()).or_insert(now);
                        }
                        epoch = snapshot.hub_epoch;
                        version = snapshot.version;
                    }
                    _ => return,
                },
                _ = ticks.tick() => {
                    let _ = client.report(settings.unary_request(report(epoch.clone(), version))).await;
                }
            }
        }
    }))
}

fn minicluster(mode: Mode, i: usize, spokes: usize) -> serde_json::Value {
    let half = spokes / 2;
    let burst = match mode {
        Mode::Fixed => json!({"name": "b", "size": 1, "relay": true,
                              "cluster": format!("spoke-{}", half + i % half)}),
        Mode::Candidates => json!({"name": "b", "size": 1, "relay": true, "candidates": [
            {"cluster": format!("spoke-{}", i % half)},
            {"matchLabels": {"shard": (i % half).to_string()}},
        ]}),
    };
    json!({
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": format!("mc-{i}")},
        "spec": {
            "size": 1,
            "containers": [{"image": "ghcr.io/converged-computing/metric-lammps:latest"}],
            "flux": {"bursting": {"clusters": [burst]}},
        },
    })
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Kills the hub when dropped.
struct HubProcess(Child);

impl Drop for HubProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn one(
    a: &RunArgs,
    pki: &Pki,
    client: &Client,
    mode: Mode,
    round: usize,
) -> Result<RunResult> {
    let ns = format!("place-{}-{round}", mode.name());
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await
        .with_context(|| format!("creating namespace {ns}"))?;
    let metrics: SocketAddr = (Ipv4Addr::LOCALHOST, free_port()?).into();
    let grpc: SocketAddr = (Ipv4Addr::LOCALHOST, free_port()?).into();
    let log = std::fs::File::create(a.out.join(format!("logs/hub-{ns}.log")))?;
    let hub = HubProcess(
        Command::new(&a.hub_bin)
            .args(["run", "--namespace", &ns])
            .args(["--metrics-addr", &metrics.to_string()])
            .args(["--grpc-addr", &grpc.to_string()])
            .arg("--ca")
            .arg(pki.dir.join("ca.crt"))
            .arg("--cert")
            .arg(pki.dir.join("hub.crt"))
            .arg("--key")
            .arg(pki.dir.join("hub.key"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting flux-hub")?,
    );
    let pid = hub.0.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    while http_status(metrics, "/readyz").await.ok() != Some(200) {
        ensure!(Instant::now() < deadline, "the hub was not ready in 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let uri = format!("https://{grpc}");
    let seen: Seen = Arc::default();
    let half = a.spokes / 2;
    let mut tasks = Vec::new();
    for (i, (name, security)) in pki.spokes.iter().enumerate() {
        let labels = if i >= half {
            BTreeMap::from([("shard".to_string(), (i - half).to_string())])
        } else {
            BTreeMap::new()
        };
        tasks.push(
            spoke(
                &uri,
                name,
                security,
                labels,
                room(i, a.spokes),
                seen.clone(),
            )
            .await?,
        );
    }
    // Past the hub's settling window, as in steady operation.
    tokio::time::sleep(Duration::from_secs(31)).await;
    let api: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("flux-framework.org", "v1alpha2", "MiniCluster"),
            "miniclusters",
        ),
    );
    let ticks_before = cpu_ticks(pid)?;
    let started = Instant::now();
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let creates = futures::StreamExt::map(futures::stream::iter(0..a.miniclusters), |i| {
        let api = api.clone();
        let sent = sent.clone();
        let ns = ns.clone();
        async move {
            let object: DynamicObject = serde_json::from_value(minicluster(mode, i, a.spokes))?;
            let at = Instant::now();
            api.create(&PostParams::default(), &object).await?;
            sent.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(format!("{ns}/mc-{i}/b"), at);
            anyhow::Ok(())
        }
    });
    let results: Vec<Result<()>> =
        futures::StreamExt::collect(futures::StreamExt::buffer_unordered(creates, a.concurrency))
            .await;
    for r in results {
        r?;
    }
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let count = seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .keys()
            .filter(|k| k.starts_with(&format!("{ns}/")))
            .count();
        if count >= a.miniclusters {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{count} of {} bursts assigned after 15 minutes",
            a.miniclusters
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let wall = started.elapsed();
    let ticks = cpu_ticks(pid)? - ticks_before;
    let (rss, hwm) = memory(pid)?;
    for t in tasks {
        t.abort();
    }
    drop(hub);
    let sent = sent
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let seen = seen
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut latencies: Vec<f64> = sent
        .iter()
        .filter_map(|(k, at)| Some(seen.get(k)?.duration_since(*at).as_secs_f64() * 1000.0))
        .collect();
    ensure!(latencies.len() == a.miniclusters, "every burst timed");
    latencies.sort_by(f64::total_cmp);
    Ok(RunResult {
        mode,
        round,
        miniclusters: a.miniclusters,
        spokes: a.spokes,
        p50_ms: percentile(&latencies, 50.0),
        p95_ms: percentile(&latencies, 95.0),
        p99_ms: percentile(&latencies, 99.0),
        max_ms: percentile(&latencies, 100.0),
        wall_s: wall.as_secs_f64(),
        cpu_ms_per_minicluster: ticks as f64 / clk_tck() * 1000.0 / a.miniclusters as f64,
        rss_mib: rss,
        hwm_mib: hwm,
    })
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n.is_multiple_of(2) => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        n => v[n / 2],
    }
}

async fn run(a: RunArgs) -> Result<()> {
    ensure!(
        a.spokes >= 2 && a.spokes.is_multiple_of(2),
        "--spokes must be even"
    );
    std::fs::create_dir_all(a.out.join("logs"))?;
    let pki = pki(&a.out.join("pki"), a.spokes)?;
    let client = Client::try_default().await.context("KUBECONFIG")?;
    let mut results = Vec::new();
    for round in 0..a.rounds {
        // The API server slows as objects pile up: each mode goes first every other round.
        let order = if round % 2 == 0 {
            [Mode::Fixed, Mode::Candidates]
        } else {
            [Mode::Candidates, Mode::Fixed]
        };
        for mode in order {
            let r = one(&a, &pki, &client, mode, round).await?;
            eprintln!(
                "[placement] round {round} {}: p50 {:.1} ms, p99 {:.1} ms, wall {:.1} s, CPU {:.2} ms/MiniCluster, RSS {:.1} MiB (peak {:.1})",
                mode.name(),
                r.p50_ms,
                r.p99_ms,
                r.wall_s,
                r.cpu_ms_per_minicluster,
                r.rss_mib,
                r.hwm_mib
            );
            results.push(r);
        }
    }
    std::fs::write(
        a.out.join("placement.json"),
        serde_json::to_string_pretty(&results)?,
    )?;
    let of = |mode: Mode, f: fn(&RunResult) -> f64| {
        median(results.iter().filter(|r| r.mode == mode).map(f))
    };
    type Row = (&'static str, fn(&RunResult) -> f64);
    let rows: [Row; 6] = [
        ("create -> assigned, p50 (ms)", |r| r.p50_ms),
        ("create -> assigned, p99 (ms)", |r| r.p99_ms),
        ("all assigned (s)", |r| r.wall_s),
        ("hub CPU per MiniCluster (ms)", |r| r.cpu_ms_per_minicluster),
        ("hub RSS at the end (MiB)", |r| r.rss_mib),
        ("hub peak RSS (MiB)", |r| r.hwm_mib),
    ];
    println!(
        "{} spokes, {} MiniClusters per run, median of {} rounds\n",
        a.spokes, a.miniclusters, a.rounds
    );
    println!("| | fixed | candidates | ratio (target <= 1.2) |");
    println!("|---|---|---|---|");
    for (what, f) in rows {
        let (fixed, cand) = (of(Mode::Fixed, f), of(Mode::Candidates, f));
        println!("| {what} | {fixed:.2} | {cand:.2} | {:.2} |", cand / fixed);
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let args = std::env::args().filter(|a| a != "--bench");
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return std::process::ExitCode::from(2);
        }
    };
    let Some(Cmd::Run(a)) = cli.command else {
        println!("placement: run it with scripts/bench-placement.sh (see its --help)");
        return std::process::ExitCode::SUCCESS;
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("placement: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(a)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("placement: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
