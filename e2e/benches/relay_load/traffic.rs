//! The load: a lead broker that echoes, and a spoke's `Relay` calls, either opened and
//! closed at a rate (calls) or kept open carrying frames (bytes).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use flux_shared::federation::RELAY_KEY;
use flux_shared::federation::proto::RelayFrame;
use flux_shared::federation::proto::spoke_client::SpokeClient;
use flux_shared::federation::tls::{ClientSecurity, TransportSettings};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tonic::transport::Channel;

use crate::report::Samples;
use crate::{PATIENCE, STREAMS_PER_CONNECTION};

/// How long a greeted call is held before the spoke closes it.
const HOLD: Duration = Duration::from_millis(500);

/// A lead broker: greets every connection (`lead:`), then echoes what it reads, one write
/// per read, until the hub closes. It reads and writes apart, as ZeroMQ's I/O thread does
/// (a lead that stops reading while its writes wait would stall the hub's side of the
/// connection, whose writes to the lead wait in turn).
pub async fn lead_broker() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            let (mut r, mut w) = tcp.into_split();
            let (echo, mut echoes) = mpsc::unbounded_channel::<Vec<u8>>();
            tokio::spawn(async move {
                if w.write_all(b"lead:").await.is_err() {
                    return;
                }
                while let Some(data) = echoes.recv().await {
                    if w.write_all(&data).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                while let Ok(n) = r.read(&mut buf).await {
                    if n == 0 || echo.send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// `n` connections of a spoke to the hub at `uri`.
pub async fn spoke_clients(
    uri: &str,
    security: &ClientSecurity,
    n: usize,
) -> Vec<SpokeClient<Channel>> {
    let endpoint = TransportSettings::default()
        .endpoint(uri, security)
        .expect("endpoint");
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        let channel = tokio::time::timeout(PATIENCE, endpoint.connect())
            .await
            .expect("connected in time")
            .expect("spoke connects");
        clients.push(SpokeClient::new(channel));
    }
    clients
}

type Call = (mpsc::Sender<RelayFrame>, tonic::Streaming<RelayFrame>);

/// A `Relay` call for burst `key`, or its refusal.
async fn relay(client: &mut SpokeClient<Channel>, key: &str) -> Result<Call, tonic::Status> {
    let (tx, rx) = mpsc::channel(4);
    let frames = futures::stream::unfold(rx, |mut rx| async move {
        let frame = rx.recv().await?;
        Some((frame, rx))
    });
    let mut request = tonic::Request::new(frames);
    request
        .metadata_mut()
        .insert(RELAY_KEY, key.parse().expect("ascii key"));
    match tokio::time::timeout(PATIENCE, client.relay(request)).await {
        Ok(Ok(response)) => Ok((tx, response.into_inner())),
        Ok(Err(status)) => Err(status),
        Err(_) => Err(tonic::Status::deadline_exceeded("no answer to the call")),
    }
}

/// What the spoke counted in a calls phase.
#[derive(Default)]
pub struct CallCounts {
    pub greeted: AtomicU64,
    pub refused_rate: AtomicU64,
    pub refused_other: AtomicU64,
    pub failed: AtomicU64,
}

/// Calls for `key` on `clients`: `burst` at once, then `per_second` until `run_for` is
/// over; each greeted one held for [`HOLD`] and closed. Returns once every call ended.
pub async fn drive_calls(
    clients: Vec<SpokeClient<Channel>>,
    key: String,
    per_second: f64,
    burst: usize,
    run_for: Duration,
    counts: Arc<CallCounts>,
    greeting_times: Samples,
) {
    let start = tokio::time::Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for i in 0usize.. {
        let due = if i < burst {
            start
        } else {
            start + Duration::from_secs_f64((i - burst) as f64 / per_second)
        };
        if due >= start + run_for {
            break;
        }
        tokio::time::sleep_until(due).await;
        let mut client = clients[i % clients.len()].clone();
        let key = key.clone();
        let counts = counts.clone();
        let greeting_times = greeting_times.clone();
        calls.spawn(async move {
            let asked = Instant::now();
            let (tx, mut rx) = match relay(&mut client, &key).await {
                Ok(call) => call,
                Err(status) if status.code() == tonic::Code::ResourceExhausted => {
                    counts.refused_rate.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(_) => {
                    counts.refused_other.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            match tokio::time::timeout(PATIENCE, rx.next()).await {
                Ok(Some(Ok(_))) => {
                    counts.greeted.fetch_add(1, Ordering::Relaxed);
                    greeting_times
                        .lock()
                        .expect("samples")
                        .push((asked, asked.elapsed()));
                }
                _ => {
                    counts.failed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
            tokio::time::sleep(HOLD).await;
            drop(tx);
            let _ = tokio::time::timeout(PATIENCE, async {
                while let Some(Ok(_)) = rx.next().await {}
            })
            .await;
        });
    }
    while calls.join_next().await.is_some() {}
}

/// Frames and bytes the spoke sent and got in a byte phase.
#[derive(Default)]
pub struct ByteCounts {
    pub sent_frames: AtomicU64,
    pub got_frames: AtomicU64,
}

/// A small xorshift: frame sizes without a dependency.
struct Sizes(u64);

impl Sizes {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// How a byte phase's spoke sends.
#[derive(Clone, Copy)]
pub struct Load {
    /// Connections.
    pub connections: usize,
    /// Frames of 100-300 bytes (else 16 KiB).
    pub small: bool,
    /// Each connection sends one frame this often (else as fast as the hub takes them).
    pub every: Option<Duration>,
    /// All connections together send at most this many bytes a second, each second's at
    /// once, as fast as the hub takes them (pulses).
    pub per_second: Option<u64>,
}

/// The bytes sent in the current second of a pulsed load.
struct Pulses {
    origin: Instant,
    second: AtomicU64,
    sent: AtomicU64,
}

impl Pulses {
    /// Whether `len` more bytes may go this second, or when the next second starts.
    fn admit(&self, len: u64, quota: u64) -> Result<(), Instant> {
        let elapsed = self.origin.elapsed();
        let second = elapsed.as_secs();
        if self.second.swap(second, Ordering::Relaxed) != second {
            self.sent.store(0, Ordering::Relaxed);
        }
        if self.sent.fetch_add(len, Ordering::Relaxed) < quota {
            Ok(())
        } else {
            Err(self.origin + Duration::from_secs(second + 1))
        }
    }
}

/// `load.connections` connections for `key`, each sending frames until `stop`; returns
/// once all ended.
pub async fn drive_bytes(
    clients: Vec<SpokeClient<Channel>>,
    key: String,
    load: Load,
    mut stop: watch::Receiver<bool>,
    counts: Arc<ByteCounts>,
) {
    let mut connections = tokio::task::JoinSet::new();
    let pulses = Arc::new(Pulses {
        origin: Instant::now(),
        second: AtomicU64::new(0),
        sent: AtomicU64::new(0),
    });
    for i in 0..load.connections {
        // As the spoke does: 150 on one connection to the hub before the next.
        let mut client = clients[(i / STREAMS_PER_CONNECTION) % clients.len()].clone();
        let deadline = Instant::now() + PATIENCE;
        let (tx, mut rx) = loop {
            match relay(&mut client, &key).await {
                Ok(call) => break call,
                Err(status)
                    if status.code() == tonic::Code::ResourceExhausted
                        && Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(status) => panic!("a byte connection: {status:?}"),
            }
        };
        let mut writer_stop = stop.clone();
        let sent = counts.clone();
        let pulses = pulses.clone();
        connections.spawn(async move {
            let mut sizes = Sizes(0x9E37_79B9_7F4A_7C15 ^ i as u64);
            // Paced connections start spread over one period.
            let mut pace = load.every.map(|every| {
                let first = tokio::time::Instant::now()
                    + every.mul_f64((sizes.next() % 1000) as f64 / 1000.0);
                let mut pace = tokio::time::interval_at(first, every);
                pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                pace
            });
            loop {
                if let Some(pace) = pace.as_mut() {
                    tokio::select! {
                        _ = pace.tick() => {}
                        _ = writer_stop.wait_for(|s| *s) => break,
                    }
                }
                let len = if load.small {
                    100 + (sizes.next() % 201) as usize
                } else {
                    16 * 1024
                };
                if let Some(quota) = load.per_second
                    && let Err(next) = pulses.admit(len as u64, quota)
                {
                    tokio::select! {
                        _ = tokio::time::sleep_until(next.into()) => continue,
                        _ = writer_stop.wait_for(|s| *s) => break,
                    }
                }
                let frame = RelayFrame {
                    data: vec![0x5a; len],
                };
                tokio::select! {
                    sent_ok = tx.send(frame) => {
                        if sent_ok.is_err() {
                            break;
                        }
                        sent.sent_frames.fetch_add(1, Ordering::Relaxed);
                    }
                    _ = writer_stop.wait_for(|s| *s) => break,
                }
            }
        });
        let got = counts.clone();
        connections.spawn(async move {
            while let Some(Ok(_)) = rx.next().await {
                got.got_frames.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let _ = stop.wait_for(|s| *s).await;
    let _ = tokio::time::timeout(PATIENCE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
}
