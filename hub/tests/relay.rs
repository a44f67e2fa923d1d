//! `Spoke.Relay` on the hub's real services and TLS over 127.0.0.1, with a TCP echo server
//! as the lead broker: a spoke's relayed connection carries bytes both ways; a burst that is
//! not the caller's, not relayed or at its bound is refused; and the connection ends when
//! the burst stops being relayed to that spoke (after a grace when it was scaled to 0).
//! On the same services, the fleet metrics follow a spoke's Watch stream.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flux_hub::federation::registry::{BurstInfo, McInfo, Registry};
use flux_hub::ops::metrics::Metrics;
use flux_hub::server::relay::{Rates, Timeouts};
use flux_hub::server::service::{self, Services};
use flux_shared::federation::assignment::SpokeAssignment;
use flux_shared::federation::pki::{Ca, IssuedCert};
use flux_shared::federation::proto::spoke_client::SpokeClient;
use flux_shared::federation::proto::{Assignment, RelayFrame};
use flux_shared::federation::tls::{ServerSecurity, TlsPem, TransportSettings};
use flux_shared::federation::{BurstKey, McKey, RELAY_KEY, RELAY_MAX_FRAME, RELAY_SLACK};
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
        &McKey::new("hpc", "mc"),
        McInfo {
            relay_to: Some(Endpoint {
                address: lead.ip().to_string(),
                port: i32::from(lead.port()),
            }),
            ..McInfo::default()
        },
        vec![BurstInfo {
            skipped: Vec::new(),
            route: None,
            key: KEY.parse().expect("a burst key"),
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
    serve_services(pki, registry, metrics, |s| s.with_relay_timeouts(timeouts)).await
}

/// The hub's services over `registry`, as `configure` makes them, on 127.0.0.1.
async fn serve_services(
    pki: &Pki,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    configure: impl FnOnce(Services) -> Services,
) -> SocketAddr {
    let listener = service::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let security = ServerSecurity::Mtls(pki.pem(&pki.hub));
    let services = configure(Services::new(
        registry,
        security.authenticator(),
        metrics,
        grpc::no_api_server(),
    ));
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
    spoke_client_with(pki, addr, &spoke_certificate(pki, name)).await
}

fn spoke_certificate(pki: &Pki, name: &str) -> IssuedCert {
    pki.ca
        .issue_client(&flux_shared::federation::Identity::spoke(name).unwrap(), 1)
        .unwrap()
}

async fn spoke_client_with(
    pki: &Pki,
    addr: SocketAddr,
    leaf: &IssuedCert,
) -> SpokeClient<tonic::transport::Channel> {
    grpc::spoke_client(&pki.ca, leaf, addr).await
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
    for chunk in bytes.chunks(RELAY_MAX_FRAME) {
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
    let metrics = Arc::new(Metrics::new().with_minicluster_labels(true));
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
    for _ in 1..2 + RELAY_SLACK {
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
        "flux_hub_relay_refused_total{spoke=\"a\",reason=\"not_relayed\"}",
        "flux_hub_relay_refused_total{spoke=\"other\",reason=\"not_assigned\"} 1",
        "flux_hub_relay_refused_total{spoke=\"a\",reason=\"not_assigned\"} 1",
        "flux_hub_relay_refused_total{spoke=\"a\",reason=\"too_many\"} 1",
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
    for _ in 0..2 * (2 + RELAY_SLACK) {
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
    for _ in 0..2 + RELAY_SLACK {
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
    for _ in 0..2 + RELAY_SLACK {
        cancelled.push(relay_within(&mut a, KEY, LIMIT).await);
    }
    drop(cancelled);
    let again = tokio::time::Instant::now();
    for _ in 0..2 + RELAY_SLACK {
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
    let mut last_moved = opened;
    for _ in 0..10 {
        assert_eq!(round_trip(&busy_tx, &mut busy, b"beat").await, b"beat");
        last_moved = tokio::time::Instant::now();
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
    // Once quiet too, the busy one ends an idle time after its last bytes moved (counted
    // from when the echo came back, which the hub saw a moment before: the margin), however
    // late this task woke from its sleeps on a busy machine.
    assert!(ends(&mut busy, LIMIT).await);
    assert!(last_moved.elapsed() >= idle - Duration::from_millis(50));
    churn.abort();
    drop((quiet_tx, busy_tx));
}

/// An API server that holds only the spoke pins ConfigMap `flux-system/spoke-pins`: listed
/// with `data`, then changed to each of `changes` in turn, one per watch request, when the
/// test sends it.
fn pins_api_server(
    data: serde_json::Value,
    mut changes: mpsc::UnboundedReceiver<serde_json::Value>,
) -> kube::Client {
    use kube::client::Body;
    let (mock, mut handle) = tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
    let configmap = |data: serde_json::Value, version: u64| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "spoke-pins", "namespace": "flux-system",
                         "resourceVersion": version.to_string()},
            "data": data,
        })
    };
    tokio::spawn(async move {
        let mut version = 1;
        let mut pending = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            let watch = request.uri().query().unwrap_or("").contains("watch=true");
            let body = if watch {
                let Some(data) = changes.recv().await else {
                    // Nothing more changes: the watch stays open.
                    pending.push(send);
                    continue;
                };
                version += 1;
                let event =
                    serde_json::json!({"type": "MODIFIED", "object": configmap(data, version)});
                format!("{event}\n")
            } else {
                serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMapList",
                    "metadata": {"resourceVersion": version.to_string()},
                    "items": [configmap(data.clone(), version)],
                })
                .to_string()
            };
            send.send_response(
                http::Response::builder()
                    .status(200)
                    .body(Body::from(body.into_bytes()))
                    .unwrap(),
            );
        }
    });
    kube::Client::new(mock, "default")
}

/// Waits until `rx` ends with an error of `code`, skipping the frames before.
async fn ends_with(rx: &mut tonic::Streaming<RelayFrame>, code: Code) {
    let ended = tokio::time::timeout(LIMIT, async {
        loop {
            match rx.next().await {
                Some(Ok(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the call ends in time");
    assert!(
        matches!(ended, Some(Err(ref s)) if s.code() == code),
        "{ended:?}"
    );
}

/// Like a Watch, a relayed connection ends when its spoke's certificate is no longer the
/// one pinned for it (replaced by a rotation, or unpinned), and when the hub stops.
#[tokio::test]
async fn a_relayed_connection_ends_when_its_certificate_is_unpinned_or_rotated_or_the_hub_stops() {
    use flux_hub::server::pin_store::PinStore;
    use flux_shared::federation::pins::fingerprint;
    let pki = Pki::new();
    let lead = echo_lead().await;
    let registry = Registry::new();
    registry.set_primed();
    let leaf = spoke_certificate(&pki, "a");
    let pinned = serde_json::json!({"a": fingerprint(&leaf.cert_der)});
    let (change, changes) = mpsc::unbounded_channel();
    let pins = PinStore::watch(
        pins_api_server(pinned.clone(), changes),
        "flux-system",
        "spoke-pins",
    );
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let addr = serve_services(&pki, registry.clone(), Arc::new(Metrics::new()), |s| {
        s.with_pins(pins).with_stop(stopping)
    })
    .await;
    let mut a = spoke_client_with(&pki, addr, &leaf).await;
    publish(&registry, lead, true, 2);
    // Relayed once the pins are read (until then: UNAVAILABLE, retry).
    let open = |a: &mut SpokeClient<tonic::transport::Channel>| {
        let mut a = a.clone();
        async move {
            let deadline = tokio::time::Instant::now() + LIMIT;
            loop {
                match relay(&mut a, KEY).await {
                    Ok(open) => return open,
                    Err(code) => assert!(
                        tokio::time::Instant::now() < deadline,
                        "not relayed: {code:?}"
                    ),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };

    // Rotated: another certificate is pinned for the spoke.
    let (tx, mut rx) = open(&mut a).await;
    assert_eq!(round_trip(&tx, &mut rx, b"before").await, b"before");
    let other = spoke_certificate(&pki, "a");
    change
        .send(serde_json::json!({"a": fingerprint(&other.cert_der)}))
        .unwrap();
    ends_with(&mut rx, Code::PermissionDenied).await;

    // Pinned again, then unpinned.
    change.send(pinned).unwrap();
    let (tx, mut rx) = open(&mut a).await;
    assert_eq!(round_trip(&tx, &mut rx, b"again").await, b"again");
    change.send(serde_json::json!({})).unwrap();
    ends_with(&mut rx, Code::PermissionDenied).await;
    drop(tx);

    // The hub stops: its open relayed connections end (a graceful shutdown does not wait
    // on them).
    let b_leaf = spoke_certificate(&pki, "b");
    change
        .send(serde_json::json!({"b": fingerprint(&b_leaf.cert_der)}))
        .unwrap();
    registry.set(
        &McKey::new("hpc", "other"),
        McInfo {
            relay_to: Some(Endpoint {
                address: lead.ip().to_string(),
                port: i32::from(lead.port()),
            }),
            ..McInfo::default()
        },
        vec![BurstInfo {
            skipped: Vec::new(),
            route: None,
            key: BurstKey::new("hpc", "other", "b"),
            name: "b".into(),
            spoke: "b".into(),
            size: 1,
            max_size: 1,
            relayed: true,
        }],
        vec![SpokeAssignment {
            spoke: "b".into(),
            assignment: Assignment {
                key: "hpc/other/b".into(),
                burst_size: 1,
                ..Assignment::default()
            },
        }],
    );
    let mut b = spoke_client_with(&pki, addr, &b_leaf).await;
    let (_tx, mut rx) = {
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            match relay(&mut b, "hpc/other/b").await {
                Ok(open) => break open,
                Err(code) => assert!(
                    tokio::time::Instant::now() < deadline,
                    "not relayed: {code:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    stop.send_replace(true);
    ends_with(&mut rx, Code::Unavailable).await;
}

/// Each spoke makes at most so many new relayed connections a second (after a burst of
/// them); a call beyond is refused, and another spoke's are not counted with it.
#[tokio::test]
async fn a_spokes_new_relayed_connections_are_bounded_per_second() {
    let pki = Pki::new();
    let lead = echo_lead().await;
    let registry = Registry::new();
    registry.set_primed();
    let metrics = Arc::new(Metrics::new());
    let timeouts = Timeouts {
        rates: Rates {
            calls_per_second: 0.5,
            call_burst: 3.0,
            ..Rates::default()
        },
        ..Timeouts::default()
    };
    let addr = serve_with(&pki, registry.clone(), metrics.clone(), timeouts).await;
    let mut a = spoke_client(&pki, addr, "a").await;
    let mut other = spoke_client(&pki, addr, "other").await;
    publish(&registry, lead, true, 8);
    let start = tokio::time::Instant::now();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(relay(&mut a, KEY).await.expect("within the burst"));
    }
    assert_eq!(
        relay(&mut a, KEY).await.err(),
        Some(Code::ResourceExhausted),
        "the fourth at once"
    );
    // Another spoke's calls are its own (refused here for the burst is not its own).
    for _ in 0..3 {
        assert_eq!(
            relay(&mut other, KEY).await.err(),
            Some(Code::PermissionDenied)
        );
    }
    // Two seconds after the first (one each two seconds), one more.
    tokio::time::sleep_until(start + Duration::from_millis(2100)).await;
    held.push(relay(&mut a, KEY).await.expect("after the rate's time"));
    assert!(
        metrics
            .encode()
            .contains("flux_hub_relay_refused_total{spoke=\"a\",reason=\"call_rate\"} 1"),
        "{}",
        metrics.encode()
    );
}

/// Each spoke's relayed bytes, both ways and all its connections together, move at most
/// so fast (after a burst); carried, not refused.
#[tokio::test]
async fn a_spokes_relayed_bytes_are_bounded_per_second() {
    let pki = Pki::new();
    let lead = echo_lead().await;
    let registry = Registry::new();
    registry.set_primed();
    let (rate, burst) = (256.0 * 1024.0, 64.0 * 1024.0);
    let timeouts = Timeouts {
        rates: Rates {
            bytes_per_second: rate,
            byte_burst: burst,
            ..Rates::default()
        },
        ..Timeouts::default()
    };
    let addr = serve_with(&pki, registry.clone(), Arc::new(Metrics::new()), timeouts).await;
    let mut a = spoke_client(&pki, addr, "a").await;
    publish(&registry, lead, true, 2);
    let (tx, mut rx) = relay(&mut a, KEY).await.expect("relayed");
    let (tx2, mut rx2) = relay(&mut a, KEY).await.expect("relayed");
    // 128 KiB echoed on each of two connections: 512 KiB through the hub, 64 KiB of it at
    // once and the rest at 256 KiB/s, so no sooner than 1.75 s.
    let payload: Vec<u8> = (0..128 * 1024u32).map(|i| (i % 251) as u8).collect();
    let start = tokio::time::Instant::now();
    let (one, two) = tokio::join!(
        round_trip(&tx, &mut rx, &payload),
        round_trip(&tx2, &mut rx2, &payload)
    );
    let took = start.elapsed();
    assert_eq!((one.len(), two.len()), (payload.len(), payload.len()));
    let least = Duration::from_secs_f64((4.0 * payload.len() as f64 - burst) / rate);
    assert!(
        took >= least - Duration::from_millis(100) && took < LIMIT,
        "took {took:?}, at least {least:?}"
    );
}

/// `flux_hub_spoke_connected{spoke}` follows the spoke's Watch stream on the hub's real
/// services: 1 while it holds one, 0 once it ends, 1 again when the spoke comes back (the
/// stream's end is marked before the registry lets the next one in).
#[tokio::test]
async fn the_fleet_metrics_follow_a_spokes_watch_stream() {
    let pki = Pki::new();
    let registry = Registry::new();
    registry.set_primed();
    let metrics = Arc::new(Metrics::new());
    let addr = serve(&pki, registry.clone(), metrics.clone()).await;
    let connected = |v: u8| format!("flux_hub_spoke_connected{{spoke=\"a\"}} {v}");
    let shows = async |text: String| {
        let deadline = tokio::time::Instant::now() + LIMIT;
        while !metrics.encode().contains(&text) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never {text}:\n{}",
                metrics.encode()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    for _ in 0..2 {
        let mut client = spoke_client(&pki, addr, "a").await;
        let mut stream = client
            .watch(flux_shared::federation::proto::WatchRequest::default())
            .await
            .expect("a Watch stream")
            .into_inner();
        let first = tokio::time::timeout(LIMIT, stream.next()).await;
        assert!(
            matches!(first, Ok(Some(Ok(_)))),
            "a first snapshot: {first:?}"
        );
        shows(connected(1)).await;
        drop(stream);
        drop(client);
        shows(connected(0)).await;
    }
}
