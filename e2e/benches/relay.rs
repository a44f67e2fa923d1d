//! What a relayed burst costs, in one process on loopback: the real hub and a real spoke
//! agent (mTLS gRPC on 127.0.0.1), a lead broker that echoes, and brokers that connect
//! either to the lead directly or to the spoke's relay listener (spoke -> `Spoke.Relay` on
//! its hub connection -> hub -> lead). Measured in the same run, relay against direct:
//!
//! - round trip of a 64-byte message, p50/p99 (one connection, one message at a time);
//! - throughput of one connection (MiB/s, echoed both ways) and the process CPU time per
//!   MiB carried; the relay's extra CPU is the hub's and the spoke's together;
//! - live heap per idle connection: every connection greeted by the lead, then the heap
//!   counted by the global allocator; the relay's extra bytes per connection are the hub's
//!   and the spoke's together, so they bound the hub's own share from above
//!   (target: the hub's at most 64 KiB per idle relayed connection).
//!
//! Loopback has no wire latency, so the round trip added here is the relay's own work;
//! on real nodes (`scripts/bench-real-node.sh`) it adds to the network's. Run with
//! `cargo bench -p flux-e2e --bench relay [-- --connections N --messages N --mib N]`.

#[path = "../../hub/benches/support/counting.rs"]
mod counting;
#[path = "../tests/in_process/mod.rs"]
mod in_process;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use flux_hub::federation::registry::Registry;
use in_process::{Hub, Pki, echo_lead, minicluster, relayed, relaying_spoke};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Parser)]
struct Args {
    /// Idle connections held at once for the memory figure (the burst's size is this
    /// minus the hub's slack of 2).
    #[arg(long, default_value_t = 1000)]
    connections: usize,
    /// Round trips timed per path.
    #[arg(long, default_value_t = 5000)]
    messages: usize,
    /// MiB echoed through one connection per path for the throughput figure.
    #[arg(long, default_value_t = 256)]
    mib: usize,
    /// Accepted and ignored (`cargo bench` passes `--bench`).
    #[arg(long, hide = true)]
    bench: bool,
}

const PATIENCE: Duration = Duration::from_secs(60);

/// A broker's connection to `at`, once the lead greeted it.
async fn connect(at: SocketAddr) -> Result<TcpStream> {
    let mut tcp = TcpStream::connect(at).await.context("connect")?;
    tcp.set_nodelay(true)?;
    let mut greeting = [0u8; 5];
    tokio::time::timeout(PATIENCE, tcp.read_exact(&mut greeting))
        .await
        .context("no greeting in time")??;
    ensure!(&greeting == b"lead:", "greeted with {greeting:?}");
    Ok(tcp)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Round trips of a 64-byte message, sorted.
async fn round_trips(at: SocketAddr, n: usize) -> Result<Vec<Duration>> {
    let mut tcp = connect(at).await?;
    let message = [7u8; 64];
    let mut back = [0u8; 64];
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        tcp.write_all(&message).await?;
        tcp.read_exact(&mut back).await?;
        times.push(start.elapsed());
    }
    times.sort();
    Ok(times)
}

/// This process's CPU time so far (user + system), from /proc/self/stat.
fn cpu_time() -> Result<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields after the command (which may hold spaces) start at the last ')'.
    let after = stat.rsplit_once(')').map(|(_, a)| a).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> Result<u64> {
        Ok(fields
            .get(i)
            .context("short /proc/self/stat")?
            .parse::<u64>()?)
    };
    // utime and stime are fields 14 and 15 of stat(5), 11 and 12 after the command.
    let total = ticks(11)? + ticks(12)?;
    // USER_HZ is 100 on Linux.
    Ok(Duration::from_millis(total * 10))
}

/// `mib` MiB written through `at` and read back; (wall time, CPU time).
async fn throughput(at: SocketAddr, mib: usize) -> Result<(Duration, Duration)> {
    let tcp = connect(at).await?;
    let (mut r, mut w) = tcp.into_split();
    let cpu = cpu_time()?;
    let start = Instant::now();
    let writer = tokio::spawn(async move {
        let chunk = vec![1u8; 1 << 20];
        for _ in 0..mib {
            w.write_all(&chunk).await?;
        }
        w.flush().await?;
        Ok::<_, std::io::Error>(w)
    });
    let mut buf = vec![0u8; 1 << 16];
    let mut left = mib << 20;
    while left > 0 {
        let n = r.read(&mut buf).await?;
        ensure!(n > 0, "closed with {left} bytes to go");
        left -= n.min(left);
    }
    let wall = start.elapsed();
    let cpu = cpu_time()?.saturating_sub(cpu);
    writer.await??;
    Ok((wall, cpu))
}

/// Live heap bytes per connection of `n` idle connections to `at` (each greeted), after
/// `settled` says the far side holds them all.
async fn heap_per_connection(
    at: SocketAddr,
    n: usize,
    settled: impl Fn() -> bool,
) -> Result<(f64, Vec<TcpStream>)> {
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = counting::live();
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(connect(at).await?);
    }
    let deadline = Instant::now() + PATIENCE;
    while !settled() {
        if Instant::now() > deadline {
            bail!("the connections were not all counted within {PATIENCE:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = counting::live();
    Ok(((after as f64 - before as f64) / n as f64, held))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn run(args: Args) -> Result<()> {
    ensure!(args.connections >= 3, "--connections is at least 3");
    ensure!(
        args.messages >= 1 && args.mib >= 1,
        "--messages and --mib are at least 1"
    );
    let pki = Pki::new(&["a".to_string()]);
    let registry = Registry::new();
    registry.set_primed();
    let hub = Hub::start(&pki, registry.clone(), "127.0.0.1:0".parse()?).await;
    let lead = echo_lead().await;
    let size = i32::try_from(args.connections - 2)?;
    let mc = relayed(minicluster(
        "bench",
        "relay",
        "ghcr.io/x/app:1",
        &[("burst-a", "a", size)],
    ));
    let (spoke, relay) = relaying_spoke(&pki, &hub, &mc, "burst-a", lead).await;

    // Warm both paths (TLS session, allocator arenas, the lead's accept loop).
    round_trips(lead, 200).await?;
    round_trips(relay, 200).await?;
    let direct_rtt = round_trips(lead, args.messages).await?;
    let relay_rtt = round_trips(relay, args.messages).await?;
    let (direct_wall, direct_cpu) = throughput(lead, args.mib).await?;
    let (relay_wall, relay_cpu) = throughput(relay, args.mib).await?;

    let relayed_now = || {
        hub.metrics
            .encode()
            .lines()
            .find_map(|l| {
                l.strip_prefix(
                    "flux_hub_relay_connections{spoke=\"a\",minicluster=\"bench/relay\"}",
                )?
                .trim()
                .parse::<f64>()
                .ok()
            })
            .unwrap_or(0.0)
    };
    // The throughput connections are closed: wait until the hub counts none.
    let deadline = Instant::now() + PATIENCE;
    while relayed_now() != 0.0 {
        ensure!(Instant::now() < deadline, "relayed connections left open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let n = args.connections;
    let (direct_heap, direct_held) = heap_per_connection(lead, n, || true).await?;
    let (relay_heap, relay_held) =
        heap_per_connection(relay, n, || relayed_now() == n as f64).await?;
    drop((direct_held, relay_held));

    let mib = args.mib as f64;
    let row = |name: &str, rtt: &[Duration], wall: Duration, cpu: Duration, heap: f64| {
        println!(
            "| {name} | {:.3} | {:.3} | {:.0} | {:.2} | {:.1} |",
            ms(percentile(rtt, 50.0)),
            ms(percentile(rtt, 99.0)),
            mib / wall.as_secs_f64(),
            ms(cpu) / mib,
            heap / 1024.0,
        )
    };
    println!(
        "Relay against direct on loopback: {} round trips of 64 B, {} MiB echoed through one connection, {} idle connections held",
        args.messages, args.mib, n
    );
    println!();
    println!(
        "| path | round trip p50 (ms) | p99 (ms) | throughput (MiB/s) | CPU per MiB (ms) | live heap per idle connection (KiB) |"
    );
    println!("|---|---|---|---|---|---|");
    row("direct", &direct_rtt, direct_wall, direct_cpu, direct_heap);
    row("relay", &relay_rtt, relay_wall, relay_cpu, relay_heap);
    println!();
    println!(
        "relay - direct: round trip p50 {:+.3} ms, CPU per MiB {:+.2} ms (hub and spoke), heap per idle connection {:+.1} KiB (hub and spoke; target for the hub alone <= 64 KiB)",
        ms(percentile(&relay_rtt, 50.0)) - ms(percentile(&direct_rtt, 50.0)),
        (ms(relay_cpu) - ms(direct_cpu)) / mib,
        (relay_heap - direct_heap) / 1024.0,
    );
    spoke.stop().await;
    hub.stop().await;
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}
