//! Relayed bursts end to end in one process: a broker's TCP connection to its spoke's
//! relay listener goes over the spoke's own mTLS connection to the real hub, which
//! connects it to the lead broker (a TCP server on loopback), and back; bounded per burst,
//! ended when the burst stops running there, and counted; only from the burst's own broker
//! pods (other loopback addresses stand for other pods).

mod in_process;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flux_shared::federation::McKey;
use flux_shared::plan::Endpoint;
use in_process::{
    Hub, Pki, RELAY_LEAVE_GRACE, assign_with, echo_lead, eventually, minicluster, relayed,
    relaying_spoke, version_of,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

const PATIENCE: Duration = Duration::from_secs(30);
const NS: &str = "hpc";

/// A broker's connection, once the lead has greeted it.
async fn connect(at: SocketAddr) -> TcpStream {
    let mut tcp = TcpStream::connect(at).await.expect("connect");
    let mut greeting = [0u8; 5];
    tokio::time::timeout(PATIENCE, tcp.read_exact(&mut greeting))
        .await
        .expect("greeted in time")
        .expect("greeted");
    assert_eq!(&greeting, b"lead:");
    tcp
}

/// A connection from loopback address `from` (another pod's address, in these tests).
async fn connect_from(from: [u8; 4], at: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::from((from, 0)))
        .expect("bind a loopback address");
    socket.connect(at).await.expect("connect")
}

/// A broker's connection from `from`, once the lead has greeted it.
async fn greeted_from(from: [u8; 4], at: SocketAddr) -> TcpStream {
    let mut tcp = connect_from(from, at).await;
    let mut greeting = [0u8; 5];
    tokio::time::timeout(PATIENCE, tcp.read_exact(&mut greeting))
        .await
        .expect("greeted in time")
        .expect("greeted");
    assert_eq!(&greeting, b"lead:");
    tcp
}

/// A lead broker that greets every connection with `lead:` and echoes what it reads,
/// counting the connections it accepted.
async fn counting_lead() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if tcp.write_all(b"lead:").await.is_err() {
                    return;
                }
                let (mut r, mut w) = tcp.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    (addr, accepted)
}

/// A lead broker that greets every connection with `lead:` and then, when `close`, closes
/// it at once (as ZeroMQ closes a connection it does not authenticate), or else reads it
/// to its end and never closes it.
async fn greeting_lead(close: bool) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                if tcp.write_all(b"lead:").await.is_err() || close {
                    return;
                }
                let mut buf = [0u8; 1024];
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

/// The namespace and name of the Job of the burst the spoke runs.
fn burst_job(spoke: &in_process::SpokeAgent) -> (String, String) {
    spoke
        .cluster
        .refs()
        .into_iter()
        .find(|r| r.kind == flux_spoke::cluster::Kind::Job)
        .map(|r| (r.namespace, r.name))
        .expect("the burst's Job")
}

/// Whether the other side closed `tcp` (reads end) within the patience.
async fn closed(tcp: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(PATIENCE, tcp.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

fn metric(hub: &Hub, series: &str) -> f64 {
    hub.metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a_relayed_burst_reaches_its_lead_through_the_spokes_connection_alone() {
    let pki = Pki::new(&["a".to_string()]);
    let registry = flux_hub::federation::registry::Registry::new();
    registry.set_primed();
    let hub = Hub::start(&pki, registry.clone(), "127.0.0.1:0".parse().expect("addr")).await;
    let lead = echo_lead().await;
    let lead_endpoint = Endpoint {
        address: lead.ip().to_string(),
        port: i32::from(lead.port()),
    };
    let mc = relayed(minicluster(
        NS,
        "lammps",
        "ghcr.io/x/lammps:1",
        &[("burst-a", "a", 2)],
    ));
    let (mut spoke, at) = relaying_spoke(&pki, &hub, &mc, "burst-a", lead).await;

    // Bytes both ways, through spoke and hub, in order.
    let mut broker = connect(at).await;
    broker.write_all(b"hello lead").await.expect("write");
    let mut back = [0u8; 10];
    broker.read_exact(&mut back).await.expect("echo");
    assert_eq!(&back, b"hello lead");
    let series = "flux_hub_relay_connections{spoke=\"a\",minicluster=\"hpc/lammps\"}";
    eventually("the connection counted", || {
        (metric(&hub, series) == 1.0).then_some(())
    })
    .await;
    // Its bytes are counted as they move, not when it closes (it may last for days).
    let bytes = |direction: &str| {
        metric(
            &hub,
            &format!(
                "flux_hub_relay_bytes_total{{spoke=\"a\",minicluster=\"hpc/lammps\",direction=\"{direction}\"}}"
            ),
        )
    };
    eventually("the open connection's bytes counted", || {
        (bytes("to_lead") == 10.0 && bytes("from_lead") == 15.0).then_some(())
    })
    .await;

    // The burst holds at most its two brokers plus two: the fifth is closed at once.
    let mut held = vec![broker];
    for _ in 0..3 {
        held.push(connect(at).await);
    }
    let mut fifth = TcpStream::connect(at).await.expect("connect");
    assert!(closed(&mut fifth).await, "a fifth connection is closed");
    eventually("four connections held", || {
        (metric(&hub, series) == 4.0).then_some(())
    })
    .await;

    // Scaled to 0: the hub ends every relayed connection of the burst.
    let key = McKey::new("hpc", "lammps");
    let mut zero = relayed(minicluster(
        NS,
        "lammps",
        "ghcr.io/x/lammps:1",
        &[("burst-a", "a", 0)],
    ));
    if let Some(b) = zero.spec.flux.as_mut().and_then(|f| f.bursting.as_mut()) {
        b.clusters[0].max_size = Some(2);
    }
    assign_with(&registry, &zero, Some(lead_endpoint));
    let scaled_to_0 = tokio::time::Instant::now();
    // Its brokers are leaving: a new connection is refused, while those held still carry
    // their last words to the lead for the grace, and are ended after it.
    let mut late = TcpStream::connect(at).await.expect("connect");
    assert!(closed(&mut late).await, "a new connection is refused");
    held[0].write_all(b"bye").await.expect("write");
    let mut back = [0u8; 3];
    held[0].read_exact(&mut back).await.expect("echo");
    assert_eq!(&back, b"bye");
    for tcp in &mut held {
        assert!(
            closed(tcp).await,
            "ended within the grace after the burst stopped running brokers"
        );
    }
    assert!(
        scaled_to_0.elapsed() >= RELAY_LEAVE_GRACE - Duration::from_millis(200),
        "not ended before the grace: {:?}",
        scaled_to_0.elapsed()
    );
    eventually("no connection held", || {
        (metric(&hub, series) == 0.0).then_some(())
    })
    .await;
    assert!(
        metric(
            &hub,
            "flux_hub_relay_bytes_total{spoke=\"a\",minicluster=\"hpc/lammps\",direction=\"to_lead\"}"
        ) >= 10.0
    );

    // Refused because the burst runs no broker: that says nothing of the lead, whose path
    // worked; the spoke still reports it reachable.
    let lead_reachable = || {
        let (report, _) = registry.bursts(&key).pop()?.report?;
        report
            .conditions
            .into_iter()
            .find(|c| c.r#type == flux_shared::federation::LEAD_REACHABLE)
            .map(|c| (c.status, c.message))
    };
    let mut refused = TcpStream::connect(at).await.expect("connect");
    assert!(closed(&mut refused).await);
    // (The spoke reports a change within its 10 ms debounce: a while later it is still so.)
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(lead_reachable().map(|(s, _)| s).as_deref(), Some("True"));
    // The lead no longer answers: the next broker connection says so.
    let gone = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let nowhere = gone.local_addr().expect("addr");
    drop(gone);
    let two = relayed(minicluster(
        NS,
        "lammps",
        "ghcr.io/x/lammps:1",
        &[("burst-a", "a", 2)],
    ));
    assign_with(
        &registry,
        &two,
        Some(Endpoint {
            address: nowhere.ip().to_string(),
            port: i32::from(nowhere.port()),
        }),
    );
    spoke
        .applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;
    let mut unanswered = TcpStream::connect(at).await.expect("connect");
    assert!(closed(&mut unanswered).await);
    let (_, message) = eventually("the lead reported unreachable", || {
        lead_reachable().filter(|(s, _)| s == "False")
    })
    .await;
    assert!(message.contains(&nowhere.to_string()), "{message}");

    // The burst removed: its listener goes with it.
    registry.set(&key, Default::default(), vec![], vec![]);
    spoke
        .applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;
    eventually("the listener closed", || {
        std::net::TcpStream::connect_timeout(&at, Duration::from_secs(1))
            .is_err()
            .then_some(())
    })
    .await;
    spoke.stop().await;
    hub.stop().await;
}

/// The hub serves at most 200 streams on one connection: a burst of 400 brokers still gets
/// every one of its connections through, on more connections of the spoke's to the hub.
#[tokio::test]
async fn more_relayed_connections_than_one_hub_connection_carries_all_reach_the_lead() {
    let pki = Pki::new(&["a".to_string()]);
    let registry = flux_hub::federation::registry::Registry::new();
    registry.set_primed();
    let hub = Hub::start(&pki, registry.clone(), "127.0.0.1:0".parse().expect("addr")).await;
    let lead = echo_lead().await;
    let mc = relayed(minicluster(
        NS,
        "big",
        "ghcr.io/x/lammps:1",
        &[("burst-a", "a", 400)],
    ));
    let (spoke, at) = relaying_spoke(&pki, &hub, &mc, "burst-a", lead).await;
    let mut held = Vec::new();
    for _ in 0..400 {
        held.push(connect(at).await);
    }
    // Every one carries bytes both ways, the last as well as the first.
    for i in [0, 399] {
        let tcp = &mut held[i];
        tcp.write_all(b"ping").await.expect("write");
        let mut back = [0u8; 4];
        tcp.read_exact(&mut back).await.expect("echo");
        assert_eq!(&back, b"ping");
    }
    let series = "flux_hub_relay_connections{spoke=\"a\",minicluster=\"hpc/big\"}";
    eventually("400 connections relayed", || {
        (metric(&hub, series) == 400.0).then_some(())
    })
    .await;
    drop(held);
    spoke.stop().await;
    hub.stop().await;
}

/// The relay Service is reachable from every pod of the burst cluster: only the burst's
/// own broker pods get through its listener, and nothing else reaches the hub or the lead
/// (a pod of another namespace once held a thousand connections and kept a replaced
/// broker out). A pod's connections end when it is gone.
#[tokio::test]
async fn only_the_bursts_own_broker_pods_get_through_its_relay_listener() {
    let pki = Pki::new(&["a".to_string()]);
    let registry = flux_hub::federation::registry::Registry::new();
    registry.set_primed();
    let hub = Hub::start(&pki, registry.clone(), "127.0.0.1:0".parse().expect("addr")).await;
    let (lead, dialled) = counting_lead().await;
    let mc = relayed(minicluster(
        NS,
        "guarded",
        "ghcr.io/x/lammps:1",
        &[("burst-a", "a", 2)],
    ));
    let (spoke, at) = relaying_spoke(&pki, &hub, &mc, "burst-a", lead).await;
    let (ns, job) = burst_job(&spoke);
    // The burst's two broker pods hold 127.0.0.2 and 127.0.0.3; anything else (127.0.0.1
    // here) is another pod of the cluster.
    let pod = |last: u8| IpAddr::from([127, 0, 0, last]);
    spoke
        .cluster
        .set_broker_addresses(&ns, &job, [pod(2), pod(3)]);
    let mut broker = greeted_from([127, 0, 0, 2], at).await;
    assert_eq!(dialled.load(Ordering::SeqCst), 1);

    // A stranger's connections are closed, however many; none reaches the hub or the lead.
    let series = "flux_hub_relay_connections{spoke=\"a\",minicluster=\"hpc/guarded\"}";
    let mut strangers = Vec::new();
    for _ in 0..40 {
        strangers.push(connect_from([127, 0, 0, 1], at).await);
    }
    for tcp in &mut strangers {
        assert!(closed(tcp).await, "a stranger's connection is closed");
    }
    assert_eq!(
        dialled.load(Ordering::SeqCst),
        1,
        "no stranger reached the lead"
    );
    assert_eq!(metric(&hub, series), 1.0);
    assert!(
        !hub.metrics
            .encode()
            .contains("flux_hub_relay_refused_total{"),
        "no stranger's call reached the hub"
    );

    // The burst's own brokers still get every place it has (2 brokers + 2).
    let mut held = vec![greeted_from([127, 0, 0, 3], at).await];
    held.push(greeted_from([127, 0, 0, 2], at).await);
    held.push(greeted_from([127, 0, 0, 3], at).await);
    broker.write_all(b"still").await.expect("write");
    let mut back = [0u8; 5];
    broker.read_exact(&mut back).await.expect("echo");
    assert_eq!(&back, b"still");

    // The pod at 127.0.0.2 is gone, replaced by one at 127.0.0.4: the gone pod's
    // connections end (their places are given back), the new pod gets in.
    spoke
        .cluster
        .set_broker_addresses(&ns, &job, [pod(3), pod(4)]);
    assert!(closed(&mut broker).await, "the gone pod's connection ends");
    assert!(closed(&mut held[1]).await, "the gone pod's connection ends");
    let replacement = greeted_from([127, 0, 0, 4], at).await;
    let mut late = connect_from([127, 0, 0, 2], at).await;
    assert!(closed(&mut late).await, "the gone pod's address is refused");
    eventually("the gone pod's connections given back", || {
        (metric(&hub, series) == 3.0).then_some(())
    })
    .await;
    drop((held, replacement, strangers));
    spoke.stop().await;
    hub.stop().await;
}

/// A burst's place is given back when either side closes: the lead (the broker sees its
/// connection end) or the broker (though the lead never closes). Twice as many
/// connections as the burst may hold at once each get through in turn.
#[tokio::test]
async fn a_relayed_connection_gives_its_place_back_when_either_side_closes() {
    let pki = Pki::new(&["a".to_string()]);
    let registry = flux_hub::federation::registry::Registry::new();
    registry.set_primed();
    let hub = Hub::start(&pki, registry.clone(), "127.0.0.1:0".parse().expect("addr")).await;
    let closing = greeting_lead(true).await;
    let mc = relayed(minicluster(
        NS,
        "closing",
        "ghcr.io/x/lammps:1",
        &[("burst-a", "a", 2)],
    ));
    let (spoke, at) = relaying_spoke(&pki, &hub, &mc, "burst-a", closing).await;
    // The lead closes each: the broker's connection ends, its place comes back.
    let mut ended = Vec::new();
    for _ in 0..8 {
        let mut broker = connect(at).await;
        assert!(
            closed(&mut broker).await,
            "the lead closed: so does the relay"
        );
        ended.push(broker);
    }
    let series = "flux_hub_relay_connections{spoke=\"a\",minicluster=\"hpc/closing\"}";
    eventually("no connection held", || {
        (metric(&hub, series) == 0.0).then_some(())
    })
    .await;
    spoke.stop().await;

    // The lead holds its connections: brokers that close give their places back too.
    let holding = greeting_lead(false).await;
    let mc = relayed(minicluster(
        NS,
        "holding",
        "ghcr.io/x/lammps:1",
        &[("burst-a", "a", 2)],
    ));
    let (spoke, at) = relaying_spoke(&pki, &hub, &mc, "burst-a", holding).await;
    for round in 0..2 {
        let mut held = Vec::new();
        for _ in 0..4 {
            let deadline = tokio::time::Instant::now() + PATIENCE;
            let tcp = loop {
                let mut tcp = TcpStream::connect(at).await.expect("connect");
                let mut greeting = [0u8; 5];
                if let Ok(Ok(_)) =
                    tokio::time::timeout(PATIENCE, tcp.read_exact(&mut greeting)).await
                {
                    break tcp;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "round {round}: no place given back"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            held.push(tcp);
        }
        // The brokers close.
        drop(held);
    }
    let series = "flux_hub_relay_connections{spoke=\"a\",minicluster=\"hpc/holding\"}";
    eventually("no connection held", || {
        (metric(&hub, series) == 0.0).then_some(())
    })
    .await;
    spoke.stop().await;
    hub.stop().await;
}

/// The spoke's graceful stop ends its relayed connections: the brokers' and, at once (the
/// lead here never closes one), the hub's to the lead, whose places are given back.
#[tokio::test]
async fn a_spokes_graceful_stop_ends_its_relayed_connections_at_once() {
    let pki = Pki::new(&["a".to_string()]);
    let registry = flux_hub::federation::registry::Registry::new();
    registry.set_primed();
    let hub = Hub::start(&pki, registry.clone(), "127.0.0.1:0".parse().expect("addr")).await;
    let holding = greeting_lead(false).await;
    let mc = relayed(minicluster(
        NS,
        "stopping",
        "ghcr.io/x/lammps:1",
        &[("burst-a", "a", 2)],
    ));
    let (spoke, at) = relaying_spoke(&pki, &hub, &mc, "burst-a", holding).await;
    let mut brokers = vec![connect(at).await, connect(at).await];
    let series = "flux_hub_relay_connections{spoke=\"a\",minicluster=\"hpc/stopping\"}";
    eventually("two connections relayed", || {
        (metric(&hub, series) == 2.0).then_some(())
    })
    .await;
    let stopping = tokio::time::Instant::now();
    spoke.stop().await;
    for broker in &mut brokers {
        assert!(closed(broker).await, "the broker's connection ends");
    }
    eventually("the hub's connections ended", || {
        (metric(&hub, series) == 0.0).then_some(())
    })
    .await;
    assert!(
        stopping.elapsed() < flux_hub::server::relay::LINGER,
        "ended at once, not after a linger: {:?}",
        stopping.elapsed()
    );
    hub.stop().await;
}
