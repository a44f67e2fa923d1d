//! `Spoke.Relay` on the hub's real services and TLS over 127.0.0.1, with a TCP echo server
//! as the lead broker: a spoke's relayed connection carries bytes both ways; a burst that is
//! not the caller's, not relayed or at its bound is refused; and the connection ends when
//! the burst stops being relayed to that spoke (after a grace when it was scaled to 0).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flux_hub::federation::registry::{BurstInfo, McInfo, Registry};
use flux_hub::federation::relay::{MAX_FRAME, RELAY_KEY, SLACK, Timeouts};
use flux_hub::federation::service::{self, Services};
use flux_hub::ops::metrics::Metrics;
use flux_shared::federation::assignment::SpokeAssignment;
use flux_shared::federation::pki::{Ca, IssuedCert};
use flux_shared::federation::proto::spoke_client::SpokeClient;
use flux_shared::federation::proto::{Assignment, RelayFrame};
use flux_shared::federation::tls::{ClientSecurity, ServerSecurity, TlsPem, TransportSettings};
use flux_shared::plan::Endpoint;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

mod grpc;

const LIMIT: Duration = Duration::from_secs(10);
/// How long the connections of a burst scaled to 0 are still carried here.
const GRACE: Duration = Duration::from_secs(1);
const KEY: &str = "hpc/mc/b";

struct Pki {
    ca: Ca,
    hub: IssuedCert,
}

impl Pki {
    fn new() -> Pki {
        let ca = Ca::generate("relay test CA").unwrap();
        let hub = ca
            .issue_server(&["hub.test".into()], &["127.0.0.1".parse().unwrap()], 1)
            .unwrap();
        Pki { ca, hub }
    }

    fn pem(&self, leaf: &IssuedCert) -> TlsPem {
        grpc::pem(&self.ca, leaf)
    }
}

/// A lead broker that echoes what it reads.
async fn echo_lead() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while let Ok(n) = tcp.read(&mut buf).await {
                    if n == 0 || tcp.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

/// A lead broker that closes every connection at once (as ZeroMQ closes one it does not
/// authenticate).
async fn closing_lead() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            drop(tcp);
        }
    });
    addr
}

/// A lead broker that reads every connection to its end and never closes one.
async fn holding_lead() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while let Ok(n) = tcp.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
                std::future::pending::<()>().await;
                drop(tcp);
            });
        }
    });
    addr
}

/// Whether `rx`, the hub's answers of a relayed connection, ends within `within`.
async fn ends(rx: &mut tonic::Streaming<RelayFrame>, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, rx.next()).await {
            Err(_) => return false,
            Ok(None | Some(Err(_))) => return true,
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// A relayed connection of `key` opened within `within` (its places given back by then).
async fn relay_within(
    client: &mut SpokeClient<tonic::transport::Channel>,
    key: &str,
    within: Duration,
) -> (mpsc::Sender<RelayFrame>, tonic::Streaming<RelayFrame>) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match relay(client, key).await {
            Ok(open) => return open,
            Err(code) => {
                assert_eq!(code, Code::ResourceExhausted);
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "the burst's places were not given back in time"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// MiniCluster hpc/mc with burst `b` on spoke `a` (2 brokers), relayed when `relayed`.
fn publish(registry: &Registry, lead: SocketAddr, relayed: bool, size: i32) {
    registry.set(
        &("hpc".into(), "mc".into()),
        McInfo {
            relay_to: Some(Endpoint {
                address: lead.ip().to_string(),
                port: i32::from(lead.port()),
            }),
            ..McInfo::default()
        },
        vec![BurstInfo {
            skipped: Vec::new(),
            key: KEY.into(),
            name: "b".into(),
            spoke: "a".into(),
            size,
            max_size: 4,
            relayed,
        }],
        vec![SpokeAssignment {
            spoke: "a".into(),
            assignment: Assignment {
                key: KEY.into(),
                burst_size: size,
                ..Assignment::default()
            },
        }],
    );
}

async fn serve(pki: &Pki, registry: Arc<Registry>, metrics: Arc<Metrics>) -> SocketAddr {
    let timeouts = Timeouts {
        leave_grace: GRACE,
        ..Timeouts::default()
    };
    serve_with(pki, registry, metrics, timeouts).await
}

async fn serve_with(
    pki: &Pki,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    timeouts: Timeouts,
) -> SocketAddr {
    let listener = service::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let security = ServerSecurity::Mtls(pki.pem(&pki.hub));
    let services = Services::new(
        registry,
        security.authenticator(),
        metrics,
        grpc::no_api_server(),
    )
    .with_relay_timeouts(timeouts);
    tokio::spawn(service::serve(
        listener,
        security,
        None,
        TransportSettings::default(),
        services,
        std::future::pending(),
    ));
    addr
}

async fn spoke_client(
    pki: &Pki,
    addr: SocketAddr,
    name: &str,
) -> SpokeClient<tonic::transport::Channel> {
    let leaf = pki
        .ca
        .issue_client(&flux_shared::federation::Identity::spoke(name).unwrap(), 1)
        .unwrap();
    let security = ClientSecurity::Mtls {
        tls: pki.pem(&leaf),
        domain: "hub.test".into(),
    };
    let endpoint = TransportSettings::default()
        .endpoint(&format!("https://{addr}"), &security)
        .unwrap();
    SpokeClient::new(
        tokio::time::timeout(LIMIT, endpoint.connect())
            .await
            .unwrap()
            .unwrap(),
    )
}

/// A relayed connection: its sender and the hub's answers, or the refusal's code.
async fn relay(
    client: &mut SpokeClient<tonic::transport::Channel>,
    key: &str,
) -> Result<(mpsc::Sender<RelayFrame>, tonic::Streaming<RelayFrame>), Code> {
    let (tx, rx) = mpsc::channel(4);
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    request
        .metadata_mut()
        .insert(RELAY_KEY, key.parse().unwrap());
    match tokio::time::timeout(LIMIT, client.relay(request))
        .await
        .unwrap()
    {
        Ok(response) => Ok((tx, response.into_inner())),
        Err(status) => Err(status.code()),
    }
}

async fn round_trip(
    tx: &mpsc::Sender<RelayFrame>,
    rx: &mut tonic::Streaming<RelayFrame>,
    bytes: &[u8],
) -> Vec<u8> {
    for chunk in bytes.chunks(MAX_FRAME) {
        tx.send(RelayFrame {
            data: chunk.to_vec(),
        })
        .await
        .unwrap();
    }
    let mut got = Vec::new();
    while got.len() < bytes.len() {
        let frame = tokio::time::timeout(LIMIT, rx.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        got.extend_from_slice(&frame.data);
    }
    got
}

#[tokio::test]
async fn a_relayed_connection_carries_bytes_only_for_the_callers_relayed_burst() {
    let pki = Pki::new();
    let lead = echo_lead().await;
    let registry = Registry::new();
    registry.set_primed();
    let metrics = Arc::new(Metrics::new());
    let addr = serve(&pki, registry.clone(), metrics.clone()).await;
    let mut a = spoke_client(&pki, addr, "a").await;
    let mut other = spoke_client(&pki, addr, "other").await;

    // Not relayed: refused, nothing dialled.
    publish(&registry, lead, false, 2);
    assert_eq!(
        relay(&mut a, KEY).await.err(),
        Some(Code::FailedPrecondition)
    );

    publish(&registry, lead, true, 2);
    // Another spoke's burst, and a key that names nothing: refused.
    assert_eq!(
        relay(&mut other, KEY).await.err(),
        Some(Code::PermissionDenied)
    );
    assert_eq!(
        relay(&mut a, "hpc/mc/nope").await.err(),
        Some(Code::PermissionDenied)
    );

    // The caller's relayed burst: bytes both ways, in order.
    let (tx, mut rx) = relay(&mut a, KEY).await.expect("relayed");
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(round_trip(&tx, &mut rx, &payload).await, payload);

    // At most its brokers plus the slack at once.
    let mut held = Vec::new();
    for _ in 1..2 + SLACK {
        held.push(relay(&mut a, KEY).await.expect("within the bound"));
    }
    assert_eq!(
        relay(&mut a, KEY).await.err(),
        Some(Code::ResourceExhausted)
    );

    // Scaled to 0: its brokers are leaving. A new connection is refused at once; those
    // open still carry the brokers' last words, and end after the grace.
    publish(&registry, lead, true, 0);
    let scaled = tokio::time::Instant::now();
    assert_eq!(
        relay(&mut a, KEY).await.err(),
        Some(Code::FailedPrecondition)
    );
    assert_eq!(round_trip(&tx, &mut rx, b"bye").await, b"bye");
    let ended = tokio::time::timeout(LIMIT, rx.next()).await.unwrap();
    assert!(
        matches!(ended, Some(Err(ref s)) if s.code() == Code::FailedPrecondition),
        "{ended:?}"
    );
    assert!(
        scaled.elapsed() >= GRACE,
        "ended after {:?}",
        scaled.elapsed()
    );

    // No longer relayed to this spoke (here: made direct): ended at once, no grace.
    publish(&registry, lead, true, 2);
    let (_tx, mut rx) = relay(&mut a, KEY).await.expect("relayed again");
    publish(&registry, lead, false, 2);
    let ended = tokio::time::timeout(GRACE / 2, rx.next())
        .await
        .expect("ended before the grace");
    assert!(
        matches!(ended, Some(Err(ref s)) if s.code() == Code::FailedPrecondition),
        "{ended:?}"
    );

    let text = metrics.encode();
    for line in [
        "flux_hub_relay_refused_total{reason=\"not_relayed\"}",
        "flux_hub_relay_refused_total{reason=\"not_assigned\"} 2",
        "flux_hub_relay_refused_total{reason=\"too_many\"} 1",
        "flux_hub_relay_bytes_total{spoke=\"a\",minicluster=\"hpc/mc\",direction=\"to_lead\"}",
    ] {
        assert!(text.contains(line), "{line} missing in\n{text}");
    }
}

/// The lead closes a connection (ZeroMQ closes one it does not authenticate): the hub ends
/// the call at once, though the spoke's side stays open, and the burst's place is given
/// back; twice as many connections as the burst may hold at once all get one in turn.
#[tokio::test]
async fn a_relayed_connection_the_lead_closes_ends_and_gives_its_place_back() {
    let pki = Pki::new();
    let lead = closing_lead().await;
    let registry = Registry::new();
    registry.set_primed();
    let addr = serve(&pki, registry.clone(), Arc::new(Metrics::new())).await;
    let mut a = spoke_client(&pki, addr, "a").await;
    publish(&registry, lead, true, 2);
    let mut open_sides = Vec::new();
    for _ in 0..2 * (2 + SLACK) {
        let (tx, mut rx) = relay_within(&mut a, KEY, LIMIT).await;
        assert!(
            ends(&mut rx, LIMIT).await,
            "the call ends when the lead closes"
        );
        // The spoke's side is still open: the end came from the lead's.
        open_sides.push(tx);
    }
}

/// The broker closes its side (the spoke ends its stream) and the lead never closes: the
/// call ends after the linger. The spoke cancels a call: it ends at once. Either way the
/// burst's places are given back.
#[tokio::test]
async fn a_relayed_connection_the_spoke_ends_gives_its_place_back_though_the_lead_holds_it() {
    let pki = Pki::new();
    let lead = holding_lead().await;
    let registry = Registry::new();
    registry.set_primed();
    let linger = Duration::from_secs(1);
    let timeouts = Timeouts {
        linger,
        ..Timeouts::default()
    };
    let addr = serve_with(&pki, registry.clone(), Arc::new(Metrics::new()), timeouts).await;
    let mut a = spoke_client(&pki, addr, "a").await;
    publish(&registry, lead, true, 2);

    // The spoke ends its stream: the call ends after the linger, not before.
    let mut calls = Vec::new();
    for _ in 0..2 + SLACK {
        calls.push(relay_within(&mut a, KEY, LIMIT).await);
    }
    let closed = tokio::time::Instant::now();
    for (tx, rx) in &mut calls {
        tx.send(RelayFrame {
            data: b"bye".to_vec(),
        })
        .await
        .unwrap();
        drop(std::mem::replace(tx, mpsc::channel(1).0));
        assert!(ends(rx, LIMIT).await, "the call ends after the linger");
    }
    assert!(
        closed.elapsed() >= linger,
        "ended after {:?}",
        closed.elapsed()
    );

    // The places are back; the spoke cancels those calls: their places come back too.
    let mut cancelled = Vec::new();
    for _ in 0..2 + SLACK {
        cancelled.push(relay_within(&mut a, KEY, LIMIT).await);
    }
    drop(cancelled);
    let again = tokio::time::Instant::now();
    for _ in 0..2 + SLACK {
        calls.push(relay_within(&mut a, KEY, LIMIT).await);
    }
    assert!(
        again.elapsed() < linger,
        "cancelled calls end at once, not after the linger: {:?}",
        again.elapsed()
    );
}

/// The idle close counts a connection's own bytes alone: registry changes and reports,
/// which come all the time in a live federation, do not put it off; bytes do.
#[tokio::test]
async fn an_idle_relayed_connection_closes_while_the_registry_keeps_changing() {
    use flux_hub::federation::served::Served;
    let pki = Pki::new();
    let lead = echo_lead().await;
    let registry = Registry::new();
    registry.set_primed();
    let idle = Duration::from_secs(1);
    let timeouts = Timeouts {
        idle,
        ..Timeouts::default()
    };
    let addr = serve_with(&pki, registry.clone(), Arc::new(Metrics::new()), timeouts).await;
    let mut a = spoke_client(&pki, addr, "a").await;
    publish(&registry, lead, true, 2);

    // An admin's changes and the spoke's reports, every 50 ms (for at most 10 s).
    let churn = {
        let registry = registry.clone();
        tokio::spawn(async move {
            for _ in 0..200 {
                publish(&registry, lead, true, 2);
                registry.report("a", Default::default());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let (quiet_tx, mut quiet) = relay(&mut a, KEY).await.expect("relayed");
    let (busy_tx, mut busy) = relay(&mut a, KEY).await.expect("relayed");
    let opened = tokio::time::Instant::now();
    // The busy one moves bytes every 300 ms for three idle times: it stays open.
    for _ in 0..10 {
        assert_eq!(round_trip(&busy_tx, &mut busy, b"beat").await, b"beat");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The quiet one was closed an idle time after it opened.
    let ended = tokio::time::timeout(Duration::from_millis(100), quiet.next())
        .await
        .expect("the quiet connection ended");
    assert!(
        matches!(ended, Some(Err(ref s)) if s.code() == Code::DeadlineExceeded),
        "{ended:?}"
    );
    assert!(opened.elapsed() >= idle);
    // Once quiet too, the busy one ends an idle time later.
    let quiet_since = tokio::time::Instant::now();
    assert!(ends(&mut busy, LIMIT).await);
    assert!(quiet_since.elapsed() >= idle - Duration::from_millis(300));
    churn.abort();
    drop((quiet_tx, busy_tx));
}
