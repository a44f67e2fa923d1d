//! What a controller and an admin see while one spoke relays at its per-spoke bounds
//! (docs/limits.md, "Relayed connections"): the hub's federation services (mTLS gRPC on
//! 127.0.0.1) on a single-threaded runtime, as `flux-hub run` has one, with a periodic task
//! on that runtime standing for the controller and an admin calling `ListMiniClusters`
//! over mTLS, while one spoke
//!
//! - `calls`: makes new `Relay` calls at the call-rate bound (the hub's burst at once, then
//!   its rate; each call greeted by the lead, held 0.5 s, closed);
//! - `calls-steady`: makes them at the rate, without the burst;
//! - `calls-over`: makes them at ten times the rate, without the burst (the refusals'
//!   cost);
//! - `small`: relays Flux-like small frames (100-300 bytes) at the byte bound, half each
//!   way: 1,000 connections each sending a frame now and then, the lead echoing what it
//!   reads, so that frames seldom meet in one read or one write (as on a Flux overlay);
//! - `small-flood`: 16 connections sending such frames as fast as the hub takes them (the
//!   byte bound holds them; frames meet in reads and writes);
//! - `small-pulse`: the same, but each second's bytes at once and then nothing until the
//!   next second (the byte burst spent as soon as it is whole again);
//! - `large`: the same with 16 KiB frames (the most a spoke reads at once);
//!
//! each against `idle` (no relay load) in the same process (all idle phases together),
//! modes alternating, rounds repeated. Per phase: the relay's achieved rate (the hub's own
//! byte counters; calls the lead greeted), the hub's CPU (its thread, from
//! /proc/self/task), the spoke's and lead's, other processes' (/proc/stat), the periodic
//! task's scheduling delay (p50/p99/max) and the admin call's latency (p50/p99/max).
//!
//! The hub's thread has CPU 0 to itself; the spoke, the lead and the admin share CPU 1
//! (the spoke and the lead at nice 10, so the admin's calls are not queued behind them):
//! on a 2-core machine, what the hub's one thread can do when nothing else takes its core.
//! Run (about 4 minutes after the build) with
//!
//! ```sh
//! cargo bench -p flux-e2e --bench relay_load [-- --rounds 3 --modes idle,small --mib-per-second 8]
//! ```

#[path = "../../tests/in_process/mod.rs"]
mod in_process;
mod machine;
mod report;
mod traffic;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use flux_hub::federation::registry::Registry;
use flux_hub::ops::metrics::Metrics;
use flux_hub::server::relay::{Rates, Timeouts};
use flux_hub::server::service::{self, Services};
use flux_shared::federation::assignment_key;
use flux_shared::federation::proto::ListMiniClustersRequest;
use flux_shared::federation::proto::admin_client::AdminClient;
use flux_shared::federation::tls::TransportSettings;
use flux_shared::plan::Endpoint;
use in_process::{FakeApi, Pki, assign_with, minicluster, relayed};
use tokio::sync::watch;

use machine::{
    cpu_of, machine_and_process_cpu, metric_sum, place_this_thread, runtime_thread, thread_cpu,
};
use report::{Phase, Samples, window};
use traffic::{ByteCounts, CallCounts, Load, drive_bytes, drive_calls, lead_broker, spoke_clients};

const MIB: f64 = 1024.0 * 1024.0;
/// The controller's stand-in wakes this often.
const TICK: Duration = Duration::from_millis(10);
/// The admin calls this often.
const ADMIN_EVERY: Duration = Duration::from_millis(10);
/// Byte modes run this long before they are measured (connections opened, the byte
/// bucket's burst spent).
const WARM_UP: Duration = Duration::from_secs(2);
/// Between phases, once every relayed connection is closed.
const SETTLE: Duration = Duration::from_secs(1);
/// Connections of the byte modes that send as fast as the hub takes their frames.
const BYTE_CONNECTIONS: usize = 16;
/// Connections of the paced mode: many, each sending now and then, as a Flux overlay's
/// brokers do (so frames seldom meet in one read or one write).
const PACED_CONNECTIONS: usize = 1000;
/// Hub connections relayed calls ride on, and calls on each (the spoke's own bounds).
const SPOKE_CONNECTIONS: usize = 13;
const STREAMS_PER_CONNECTION: usize = 150;
/// Any one wait of the benchmark.
const PATIENCE: Duration = Duration::from_secs(30);
const NS: &str = "bench";

/// A phase's load (the module's doc says what each is).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    Idle,
    Calls,
    CallsSteady,
    CallsOver,
    Small,
    SmallFlood,
    SmallPulse,
    Large,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Idle => "idle",
            Mode::Calls => "calls",
            Mode::CallsSteady => "calls-steady",
            Mode::CallsOver => "calls-over",
            Mode::Small => "small",
            Mode::SmallFlood => "small-flood",
            Mode::SmallPulse => "small-pulse",
            Mode::Large => "large",
        }
    }
}

#[derive(Parser)]
struct Args {
    /// Measured seconds per phase.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Rounds of every mode, alternating.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// The phases of a round, in order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "idle,calls,calls-steady,calls-over,small,small-flood,small-pulse,large"
    )]
    modes: Vec<Mode>,
    /// The hub's byte bound for this run, and what `small` and `small-pulse` offer
    /// (default: the hub's).
    #[arg(long)]
    mib_per_second: Option<f64>,
    /// The byte bound's burst (default: in the hub's proportion to the rate).
    #[arg(long)]
    burst_mib: Option<f64>,
    /// Leave the threads unpinned.
    #[arg(long)]
    no_pin: bool,
    /// What `cargo bench` passes.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let args = Args::parse();
    let pin = !args.no_pin && std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    let (hub_cpu, others_cpu) = if pin {
        (Some(0), Some(1))
    } else {
        (None, None)
    };
    place_this_thread(others_cpu, 0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(measure(args, hub_cpu, others_cpu));
}

async fn measure(args: Args, hub_cpu: Option<usize>, others_cpu: Option<usize>) {
    let seconds = args.seconds;
    let rounds = args.rounds;
    let modes = args.modes.clone();
    let defaults = Rates::default();
    let byte_rate = args
        .mib_per_second
        .unwrap_or(defaults.bytes_per_second / MIB)
        * MIB;
    let byte_burst = args
        .burst_mib
        .unwrap_or(byte_rate / MIB * defaults.byte_burst / defaults.bytes_per_second)
        * MIB;
    let rates = Rates {
        bytes_per_second: byte_rate,
        byte_burst,
        ..defaults
    };
    let measured = Duration::from_secs(seconds);
    let budget = Duration::from_secs(
        (rounds * modes.len()) as u64 * (seconds + 2 * PATIENCE.as_secs()) + 120,
    );

    let (hub, _hub_stop) = runtime_thread("hub", hub_cpu, 0);
    let (spoke, _spoke_stop) = runtime_thread("spoke", others_cpu, 10);
    let (lead_rt, _lead_stop) = runtime_thread("lead", others_cpu, 10);
    let (admin_rt, _admin_stop) = runtime_thread("admin", others_cpu, 0);

    let pki = Pki::new(&["a", "b", "c", "d"].map(String::from));
    let lead = lead_rt.spawn(lead_broker()).await.expect("lead");
    let registry = Registry::new();
    registry.set_primed();
    let to_lead = Endpoint {
        address: lead.ip().to_string(),
        port: i32::from(lead.port()),
    };
    // Per mode its own spoke: the rates are per spoke, so one mode's calls do not spend
    // another's. Bursts large enough that places never bind, only the rates.
    for (name, burst, spoke, size) in [
        ("calls", "burst-a", "a", 4000),
        ("bytes", "burst-b", "b", 4000),
        ("over", "burst-c", "c", 4000),
        ("steady", "burst-d", "d", 4000),
    ] {
        let mc = relayed(minicluster(
            NS,
            name,
            "ghcr.io/x/app:1",
            &[(burst, spoke, size)],
        ));
        assign_with(&registry, &mc, Some(to_lead.clone()));
    }

    // The hub: its services and the controller's stand-in, on its one thread.
    let ticks: Samples = Arc::default();
    let (stop_hub, hub_stopped) = watch::channel(false);
    let security = pki.server();
    let served = registry.clone();
    let tick_samples = ticks.clone();
    let (addr, metrics) = hub
        .spawn(async move {
            let listener = service::bind("127.0.0.1:0".parse().expect("addr"))
                .await
                .expect("bind");
            let addr = listener.local_addr().expect("addr");
            let metrics = Arc::new(Metrics::new());
            let services = Services::new(
                served,
                security.authenticator(),
                metrics.clone(),
                FakeApi::unreachable(),
            )
            .with_stop(hub_stopped.clone())
            .with_relay_timeouts(Timeouts {
                rates,
                ..Timeouts::default()
            });
            let mut stopped = hub_stopped;
            tokio::spawn(service::serve(
                listener,
                security,
                None,
                TransportSettings::default(),
                services,
                async move {
                    let _ = stopped.wait_for(|s| *s).await;
                },
            ));
            tokio::spawn(async move {
                loop {
                    let due = tokio::time::Instant::now() + TICK;
                    tokio::time::sleep_until(due).await;
                    let late = due.elapsed();
                    tick_samples
                        .lock()
                        .expect("samples")
                        .push((Instant::now(), late));
                }
            });
            (addr, metrics)
        })
        .await
        .expect("hub started");
    let uri = format!("https://{addr}");

    // The admin, calling all along.
    let admin_samples: Samples = Arc::default();
    let (admin_security, admin_uri, samples) = (pki.admin(), uri.clone(), admin_samples.clone());
    let admin = admin_rt.spawn(async move {
        let channel = TransportSettings::default()
            .endpoint(&admin_uri, &admin_security)
            .expect("endpoint")
            .connect()
            .await
            .expect("admin connects");
        let mut admin = AdminClient::new(channel);
        loop {
            let asked = Instant::now();
            let answer = tokio::time::timeout(
                PATIENCE,
                admin.list_mini_clusters(ListMiniClustersRequest::default()),
            )
            .await;
            let took = asked.elapsed();
            assert!(matches!(answer, Ok(Ok(_))), "ListMiniClusters: {answer:?}");
            samples.lock().expect("samples").push((asked, took));
            tokio::time::sleep(ADMIN_EVERY).await;
        }
    });

    let clients = |name: &str, n: usize| {
        let (security, uri) = (pki.spoke(name), uri.clone());
        spoke.spawn(async move { spoke_clients(&uri, &security, n).await })
    };
    let calls_a = clients("a", SPOKE_CONNECTIONS).await.expect("spoke a");
    let calls_c = clients("c", SPOKE_CONNECTIONS).await.expect("spoke c");
    let calls_d = clients("d", SPOKE_CONNECTIONS).await.expect("spoke d");
    let bytes_b = clients("b", SPOKE_CONNECTIONS).await.expect("spoke b");
    // Let the connections' first calls and the admin's settle.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let driver_threads = ["spoke", "spoke-blocking", "lead", "lead-blocking"];
    let hub_threads = ["hub", "hub-blocking"];
    let open_on = |spoke: &str| {
        metric_sum(
            &metrics,
            &format!("flux_hub_relay_connections{{spoke=\"{spoke}\""),
        )
    };
    let bytes_of = |spoke: &str| {
        metric_sum(
            &metrics,
            &format!("flux_hub_relay_bytes_total{{spoke=\"{spoke}\""),
        )
    };

    let run = async {
        let mut phases = Vec::new();
        for round in 1..=rounds {
            for &mode in &modes {
                let greeting: Samples = Arc::default();
                let call_counts = Arc::new(CallCounts::default());
                let byte_counts = Arc::new(ByteCounts::default());
                let (stop, stopped) = watch::channel(false);
                let driver = match mode {
                    Mode::Idle => None,
                    Mode::Calls | Mode::CallsSteady | Mode::CallsOver => {
                        let (clients, key, per_second, burst) = match mode {
                            Mode::Calls => (
                                calls_a.clone(),
                                assignment_key(NS, "calls", "burst-a"),
                                rates.calls_per_second,
                                rates.call_burst as usize,
                            ),
                            Mode::CallsSteady => (
                                calls_d.clone(),
                                assignment_key(NS, "steady", "burst-d"),
                                rates.calls_per_second,
                                0,
                            ),
                            _ => (
                                calls_c.clone(),
                                assignment_key(NS, "over", "burst-c"),
                                10.0 * rates.calls_per_second,
                                0,
                            ),
                        };
                        Some(spoke.spawn(drive_calls(
                            clients,
                            key,
                            per_second,
                            burst,
                            measured,
                            call_counts.clone(),
                            greeting.clone(),
                        )))
                    }
                    Mode::Small | Mode::SmallFlood | Mode::SmallPulse | Mode::Large => {
                        let load = match mode {
                            // Each connection's share of the bound, half each way (the
                            // lead echoes), in frames of 200 bytes on average.
                            Mode::Small => Load {
                                connections: PACED_CONNECTIONS,
                                small: true,
                                every: Some(Duration::from_secs_f64(
                                    PACED_CONNECTIONS as f64 * 200.0
                                        / (rates.bytes_per_second / 2.0),
                                )),
                                per_second: None,
                            },
                            Mode::SmallFlood => Load {
                                connections: BYTE_CONNECTIONS,
                                small: true,
                                every: None,
                                per_second: None,
                            },
                            // Each second's bytes at once, half each way: the burst spent
                            // as soon as it is whole again.
                            Mode::SmallPulse => Load {
                                connections: BYTE_CONNECTIONS,
                                small: true,
                                every: None,
                                per_second: Some((rates.bytes_per_second / 2.0) as u64),
                            },
                            _ => Load {
                                connections: BYTE_CONNECTIONS,
                                small: false,
                                every: None,
                                per_second: None,
                            },
                        };
                        let driver = spoke.spawn(drive_bytes(
                            bytes_b.clone(),
                            assignment_key(NS, "bytes", "burst-b"),
                            load,
                            stopped,
                            byte_counts.clone(),
                        ));
                        tokio::time::sleep(WARM_UP).await;
                        Some(driver)
                    }
                };
                let from = Instant::now();
                let cpu_before = thread_cpu();
                let machine_before = machine_and_process_cpu();
                let bytes_before = bytes_of("b");
                let (sent_before, got_before) = (
                    byte_counts.sent_frames.load(Ordering::Relaxed),
                    byte_counts.got_frames.load(Ordering::Relaxed),
                );
                tokio::time::sleep(measured).await;
                let to = Instant::now();
                let cpu_after = thread_cpu();
                let machine_after = machine_and_process_cpu();
                let bytes_after = bytes_of("b");
                let seconds = (to - from).as_secs_f64();
                let frames_to_lead = byte_counts.sent_frames.load(Ordering::Relaxed) - sent_before;
                let frames_from_lead = byte_counts.got_frames.load(Ordering::Relaxed) - got_before;
                stop.send_replace(true);
                if let Some(driver) = driver {
                    tokio::time::timeout(2 * PATIENCE, driver)
                        .await
                        .expect("the spoke's calls end in time")
                        .expect("driver");
                }
                let deadline = Instant::now() + PATIENCE;
                while ["a", "b", "c", "d"].iter().any(|s| open_on(s) > 0.0) {
                    assert!(Instant::now() < deadline, "relayed connections left open");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                // Every call the lead greeted: the spoke makes them within the measured
                // time, some are greeted after it.
                let greeted = call_counts.greeted.load(Ordering::Relaxed);
                let failed = call_counts.failed.load(Ordering::Relaxed)
                    + call_counts.refused_other.load(Ordering::Relaxed);
                assert_eq!(failed, 0, "calls failed other than by the call rate");
                let phase = Phase {
                    round,
                    mode,
                    seconds,
                    relayed_mib: (bytes_after - bytes_before) / MIB,
                    frames_to_lead,
                    frames_from_lead,
                    greeted,
                    refused: call_counts.refused_rate.load(Ordering::Relaxed),
                    greeting: {
                        let mut all: Vec<Duration> = greeting
                            .lock()
                            .expect("samples")
                            .iter()
                            .map(|(_, d)| *d)
                            .collect();
                        all.sort();
                        all
                    },
                    hub_cpu: cpu_of(&cpu_after, &hub_threads)
                        .saturating_sub(cpu_of(&cpu_before, &hub_threads)),
                    driver_cpu: cpu_of(&cpu_after, &driver_threads)
                        .saturating_sub(cpu_of(&cpu_before, &driver_threads)),
                    others_cpu: (machine_after.0.saturating_sub(machine_before.0))
                        .saturating_sub(machine_after.1.saturating_sub(machine_before.1)),
                    ticks: window(&ticks, from, to),
                    admin: window(&admin_samples, from, to),
                };
                assert!(
                    !phase.ticks.is_empty() && !phase.admin.is_empty(),
                    "the tick and the admin were sampled"
                );
                eprintln!("{}", phase.row());
                phases.push(phase);
                tokio::time::sleep(SETTLE).await;
            }
        }
        phases
    };
    let phases = tokio::time::timeout(budget, run)
        .await
        .expect("the benchmark ends within its budget");
    admin.abort();
    let _ = admin.await;
    stop_hub.send_replace(true);
    report::print(&phases, &modes, &rates, hub_cpu.is_some(), seconds, rounds);
}
