//! The hub's own TLS termination (`flux_hub::server::tls_accept`) over real sockets,
//! with tonic clients: a client certificate that the admission rule refuses ends in the
//! handshake, before any call; an admitted one reaches the handler with its certificate
//! (what the services authorize with); a certificate from another CA, or none, is refused;
//! renewed certificate files are served to new connections without a restart, and files
//! that do not load leave the current certificate in place.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flux_hub::server::tls_accept::{Accepting, Admit, HubTls, incoming};
use flux_shared::federation::pki::{Ca, IssuedCert};
use flux_shared::federation::tls::TlsFiles;
use flux_shared::federation::tls::{ClientSecurity, TlsPem, TransportSettings};
use flux_shared::federation::{Identity, identity_from_der};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

const LIMIT: Duration = Duration::from_secs(10);

struct Pki {
    ca: Ca,
    dir: PathBuf,
}

impl Pki {
    fn new(test: &str) -> Pki {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("tls-{test}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ca = Ca::generate("tls test CA").unwrap();
        std::fs::write(dir.join("ca.crt"), ca.cert_pem()).unwrap();
        Pki { ca, dir }
    }

    /// A hub certificate for `name` (and 127.0.0.1), written as `hub.crt`/`hub.key`.
    fn hub(&self, name: &str) -> IssuedCert {
        let hub = self
            .ca
            .issue_server(&[name.into()], &["127.0.0.1".parse().unwrap()], 1)
            .unwrap();
        write(&self.dir, "hub", &hub);
        hub
    }

    fn client(&self, identity: Identity) -> TlsPem {
        let cert = self.ca.issue_client(&identity, 1).unwrap();
        TlsPem::new(self.ca.cert_pem().into(), cert.cert_pem, cert.key_pem).unwrap()
    }

    fn files(&self) -> TlsFiles {
        TlsFiles {
            ca: self.dir.join("ca.crt"),
            cert: self.dir.join("hub.crt"),
            key: self.dir.join("hub.key"),
        }
    }
}

fn write(dir: &Path, stem: &str, cert: &IssuedCert) {
    std::fs::write(dir.join(format!("{stem}.crt")), &cert.cert_pem).unwrap();
    std::fs::write(dir.join(format!("{stem}.key")), &cert.key_pem).unwrap();
}

/// Refuses spoke `revoked`; records the identity of every certificate it admits.
fn admit(seen: Arc<Mutex<Vec<String>>>) -> Admit {
    Arc::new(move |leaf: &[u8]| {
        let identity = identity_from_der(leaf).map_err(|e| e.to_string())?;
        if identity == Identity::spoke("revoked").unwrap() {
            return Err("spoke revoked: not the pinned certificate".into());
        }
        seen.lock().unwrap().push(identity.to_string());
        Ok(())
    })
}

/// Serves the health service behind `tls`; its interceptor refuses a call without the
/// peer's certificate (the services' authorization needs it).
async fn serve(tls: HubTls) -> SocketAddr {
    let settings = TransportSettings::default();
    serve_with(
        tls,
        Accepting::new(settings.tls_handshake_timeout, settings.tcp_keepalive),
    )
    .await
}

async fn serve_with(tls: HubTls, accepting: Accepting) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let settings = TransportSettings::default();
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let health = tonic::service::interceptor::InterceptedService::new(
        health,
        |request: tonic::Request<()>| {
            let certs = request.peer_certs();
            match certs.as_deref().and_then(|c| c.first()) {
                Some(leaf) if identity_from_der(leaf).is_ok() => Ok(request),
                _ => Err(tonic::Status::unauthenticated("no peer certificate")),
            }
        },
    );
    let incoming = incoming(listener, tls, accepting);
    tokio::spawn(
        settings
            .plain_server()
            .add_service(health)
            .serve_with_incoming(incoming),
    );
    addr
}

/// One health check as the holder of `tls`, expecting the hub to be `domain`.
async fn check(addr: SocketAddr, tls: TlsPem, domain: &str) -> Result<(), String> {
    let channel = connect(addr, tls, domain).await?;
    call(channel).await
}

/// A connection (TCP and TLS) as the holder of `tls`.
async fn connect(
    addr: SocketAddr,
    tls: TlsPem,
    domain: &str,
) -> Result<tonic::transport::Channel, String> {
    let security = ClientSecurity::Mtls {
        tls,
        domain: domain.into(),
    };
    let endpoint = TransportSettings::default()
        .endpoint(&format!("https://{addr}"), &security)
        .map_err(|e| e.to_string())?;
    tokio::time::timeout(LIMIT, endpoint.connect())
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| error_chain(&e))
}

/// One health check on `channel`.
async fn call(channel: tonic::transport::Channel) -> Result<(), String> {
    let call = async {
        HealthClient::new(channel)
            .check(HealthCheckRequest::default())
            .await
            .map(drop)
            .map_err(|s| format!("{:?}: {} {}", s.code(), s.message(), source_chain(&s)))
    };
    tokio::time::timeout(LIMIT, call)
        .await
        .map_err(|_| "timed out".to_string())?
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

fn source_chain(s: &tonic::Status) -> String {
    std::error::Error::source(s)
        .map(error_chain)
        .unwrap_or_default()
}

#[tokio::test]
async fn an_admitted_certificate_reaches_the_handler_and_a_refused_one_ends_in_the_handshake() {
    let pki = Pki::new("admit");
    let hub = pki.hub("localhost");
    let pem = TlsPem::new(pki.ca.cert_pem().into(), hub.cert_pem, hub.key_pem).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let addr = serve(HubTls::new(&pem, admit(seen.clone())).unwrap()).await;

    check(addr, pki.client(Identity::spoke("a").unwrap()), "localhost")
        .await
        .expect("spoke a is admitted");
    check(
        addr,
        pki.client(Identity::admin("ops").unwrap()),
        "localhost",
    )
    .await
    .expect("admin ops is admitted");
    assert_eq!(
        *seen.lock().unwrap(),
        [
            Identity::spoke("a").unwrap().to_string(),
            Identity::admin("ops").unwrap().to_string()
        ]
    );

    // Every time: the client reads the alert rather than a reset connection.
    for _ in 0..20 {
        let refused = check(
            addr,
            pki.client(Identity::spoke("revoked").unwrap()),
            "localhost",
        )
        .await
        .expect_err("a refused certificate never reaches the handler");
        assert!(
            refused.contains("received fatal alert: AccessDenied"),
            "the handshake ends with the access_denied alert: {refused}"
        );
    }

    // Another CA's certificate fails the chain check, before the admission rule runs.
    let other = Ca::generate("someone else's CA").unwrap();
    let impostor = other
        .issue_client(&Identity::spoke("a").unwrap(), 1)
        .unwrap();
    let impostor = TlsPem::new(
        pki.ca.cert_pem().into(),
        impostor.cert_pem,
        impostor.key_pem,
    )
    .unwrap();
    check(addr, impostor, "localhost")
        .await
        .expect_err("another CA's certificate is refused");
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "admission ran after the chain check only"
    );
}

/// A hub serving `served` and reloading from `pki`'s files every 50 ms: its address and
/// the certificates each reload served.
async fn reloading_hub(pki: &Pki, served: &TlsPem) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let tls = HubTls::new(served, admit(Arc::default())).unwrap();
    let reloads = Arc::new(Mutex::new(Vec::new()));
    let record = reloads.clone();
    tokio::spawn(
        tls.clone()
            .reload_from(pki.files(), Duration::from_millis(50), move |pem| {
                record.lock().unwrap().push(pem.cert_pem().to_string())
            }),
    );
    (serve(tls).await, reloads)
}

/// Whether the hub at `addr` serves a certificate for `name` within 5 s.
async fn eventually_serves(addr: SocketAddr, pki: &Pki, name: &str) -> bool {
    for _ in 0..100 {
        if check(addr, pki.client(Identity::spoke("a").unwrap()), name)
            .await
            .is_ok()
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn renewed_certificate_files_are_served_to_new_connections_without_a_restart() {
    let pki = Pki::new("reload");
    pki.hub("old.example");
    let files = pki.files();
    let pem = TlsPem::from_files(&files.ca, &files.cert, &files.key).unwrap();
    let (addr, reloads) = reloading_hub(&pki, &pem).await;
    let spoke = || pki.client(Identity::spoke("a").unwrap());
    check(addr, spoke(), "old.example")
        .await
        .expect("the first certificate");
    check(addr, spoke(), "new.example")
        .await
        .expect_err("not renewed yet");

    // A half-written renewal (a key that does not parse) is not served...
    std::fs::write(&files.key, "not a key").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    check(addr, spoke(), "old.example")
        .await
        .expect("still the old certificate");
    assert!(reloads.lock().unwrap().is_empty());

    // ...the complete one is, from the next connection on.
    let renewed = pki.hub("new.example");
    assert!(
        eventually_serves(addr, &pki, "new.example").await,
        "the renewed certificate is served"
    );
    check(addr, spoke(), "old.example")
        .await
        .expect_err("the old one no more");
    assert_eq!(*reloads.lock().unwrap(), [renewed.cert_pem]);
}

#[tokio::test]
async fn files_renewed_before_the_reload_starts_are_served() {
    // A pod of a rollout reads its mounted Secret at start, the new Secret lands a moment
    // later, and the reload starts only once the replica leads: what it serves is compared
    // with the files, not what the files held when the reload started.
    let pki = Pki::new("reload-early");
    pki.hub("old.example");
    let files = pki.files();
    let read_at_start = TlsPem::from_files(&files.ca, &files.cert, &files.key).unwrap();
    let renewed = pki.hub("new.example");
    let (addr, reloads) = reloading_hub(&pki, &read_at_start).await;
    assert!(
        eventually_serves(addr, &pki, "new.example").await,
        "the certificate the files hold is served"
    );
    assert_eq!(*reloads.lock().unwrap(), [renewed.cert_pem]);
}

/// A TCP connection to `addr` from loopback address `source` (Linux routes all of
/// 127/8 to the loopback interface, so each is a source of its own).
async fn connect_from(source: [u8; 4], addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((source, 0)))?;
    socket.connect(addr).await
}

/// The first bytes of a TLS record that announces a ClientHello and never delivers it: a
/// slow handshake, past the hello deadline.
const STALLED_HELLO: [u8; 6] = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01];

/// A stranger's flood on loopback (bounded: 300 idle connections from one address and
/// from the client's own, 300 stalled handshakes from 30 addresses, all held open for the
/// test; at most 128 handshakes in flight, so that both bounds are reached with few file
/// descriptors) while an admin and a spoke connect and call. The handshake deadline is a
/// minute, so handshakes that waited for the flood's to end (the former shared pool of
/// permits) would time out here; they must not wait at all.
#[tokio::test]
async fn a_flood_of_idle_and_stalled_handshakes_does_not_stall_an_admin_or_a_spoke() {
    let pki = Pki::new("flood");
    let hub = pki.hub("localhost");
    let pem = TlsPem::new(pki.ca.cert_pem().into(), hub.cert_pem, hub.key_pem).unwrap();
    let refusals = Arc::new(Mutex::new(Vec::new()));
    let counted = refusals.clone();
    let mut accepting = Accepting {
        refused: Arc::new(move |reason| counted.lock().unwrap().push(reason)),
        ..Accepting::new(Duration::from_secs(60), Duration::from_secs(45))
    };
    accepting.limits.total = 128;
    let addr = serve_with(HubTls::new(&pem, admit(Arc::default())).unwrap(), accepting).await;

    let mut held = Vec::new();
    for i in 0..300u32 {
        // Idle: nothing sent. Half from the admin's own address.
        let source = if i % 2 == 0 {
            [127, 0, 0, 2]
        } else {
            [127, 0, 0, 1]
        };
        held.push(connect_from(source, addr).await.expect("idle connection"));
    }
    for i in 0..300u32 {
        use tokio::io::AsyncWriteExt;
        let source = [127, 0, 1, u8::try_from(i % 30).unwrap() + 1];
        let mut stream = connect_from(source, addr)
            .await
            .expect("stalled connection");
        stream
            .write_all(&STALLED_HELLO)
            .await
            .expect("partial hello");
        held.push(stream);
    }

    let mut took = Vec::new();
    for identity in [
        Identity::admin("ops").unwrap(),
        Identity::spoke("a").unwrap(),
        Identity::admin("ops").unwrap(),
    ] {
        let started = std::time::Instant::now();
        check(addr, pki.client(identity.clone()), "localhost")
            .await
            .unwrap_or_else(|e| panic!("{identity} during the flood: {e}"));
        took.push(started.elapsed());
    }
    eprintln!("calls during the flood took {took:?}");
    let refusals = refusals.lock().unwrap().clone();
    assert!(
        refusals.contains(&"displaced_by_source") && refusals.contains(&"displaced_by_total"),
        "the flood was displaced by both bounds: {} refusals",
        refusals.len()
    );
    drop(held);
}

/// An identity holds at most its bound of connections; one that closes makes room, and
/// other identities are not affected.
#[tokio::test]
async fn an_identity_holds_at_most_its_bound_of_connections() {
    let pki = Pki::new("per-identity");
    let hub = pki.hub("localhost");
    let pem = TlsPem::new(pki.ca.cert_pem().into(), hub.cert_pem, hub.key_pem).unwrap();
    let settings = TransportSettings::default();
    let mut accepting = Accepting::new(settings.tls_handshake_timeout, settings.tcp_keepalive);
    accepting.limits.per_identity = 3;
    let addr = serve_with(HubTls::new(&pem, admit(Arc::default())).unwrap(), accepting).await;
    let admin = || pki.client(Identity::admin("ops").unwrap());

    let mut open = Vec::new();
    for _ in 0..3 {
        let channel = connect(addr, admin(), "localhost")
            .await
            .expect("within the bound");
        call(channel.clone()).await.expect("a call on it");
        open.push(channel);
    }
    let over = check(addr, admin(), "localhost").await;
    assert!(over.is_err(), "a fourth connection of admin ops is closed");
    check(addr, pki.client(Identity::spoke("a").unwrap()), "localhost")
        .await
        .expect("another identity connects");
    for channel in &open {
        call(channel.clone())
            .await
            .expect("the first three keep working");
    }
    open.pop();
    // The hub sees the close when the client's connection task ends it.
    let mut again = Err(String::new());
    for _ in 0..50 {
        again = check(addr, admin(), "localhost").await;
        if again.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    again.expect("a closed connection makes room");
}

/// A CA renewed while everything runs: a hub and clients of either CA meet through the
/// new CA's certificate signed by the previous one, whichever side moved first, and once
/// the hub trusts the new CA alone, the previous one's certificates are refused.
#[tokio::test]
async fn a_renewed_ca_meets_the_previous_one_until_it_is_dropped() {
    use flux_shared::federation::pki::renewal::trust_during_renewal;
    let old = Ca::generate("previous CA").unwrap();
    let new = old.renew("renewed CA", 10).unwrap().ca;
    let both = trust_during_renewal(&new, old.cert_pem());
    let names = ["localhost".to_string()];
    let ip = ["127.0.0.1".parse().unwrap()];
    let serve_as = |ca: &Ca, trust: &str| {
        let hub = ca.issue_server(&names, &ip, 1).unwrap();
        let pem = TlsPem::new(trust.into(), hub.cert_pem, hub.key_pem).unwrap();
        serve(HubTls::new(&pem, admit(Arc::default())).unwrap())
    };
    let client = |ca: &Ca, trust: &str, name: &str| {
        let cert = ca.issue_client(&Identity::spoke(name).unwrap(), 1).unwrap();
        TlsPem::new(trust.into(), cert.cert_pem, cert.key_pem).unwrap()
    };

    // The hub not renewed yet (previous certificate, previous CA alone): a spoke already
    // on the new CA's certificate, still trusting the previous CA, gets in.
    let addr = serve_as(&old, old.cert_pem()).await;
    check(addr, client(&new, old.cert_pem(), "early"), "localhost")
        .await
        .expect("a new certificate reaches a hub that trusts only the previous CA");
    check(addr, client(&old, old.cert_pem(), "late"), "localhost")
        .await
        .expect("the previous one too");

    // The hub renewed, trusting both: spokes of either, trusting either, get in.
    let addr = serve_as(&new, &both).await;
    for (ca, trust) in [
        (&old, old.cert_pem()),
        (&new, old.cert_pem()),
        (&new, new.cert_pem()),
        (&old, both.as_str()),
    ] {
        check(addr, client(ca, trust, "spoke"), "localhost")
            .await
            .expect("both CAs meet while the renewal is under way");
    }
    // Admin certificates only from the CA of the hub's own: the previous CA's are refused
    // from the moment the hub serves the new one.
    let admin = |ca: &Ca, trust: &str| {
        let scope = flux_shared::federation::scope::AdminScope::unscoped();
        let cert = ca.issue_admin("ops", &scope, 1).unwrap();
        TlsPem::new(trust.into(), cert.cert_pem, cert.key_pem).unwrap()
    };
    check(addr, admin(&new, &both), "localhost")
        .await
        .expect("an admin certificate of the new CA");
    let refused = check(addr, admin(&old, &both), "localhost")
        .await
        .expect_err(
            "an admin certificate of the previous CA is refused once the hub serves the new one",
        );
    assert!(refused.contains("AccessDenied"), "{refused}");
    let early = serve_as(&old, &both).await;
    check(early, admin(&old, &both), "localhost")
        .await
        .expect("before, the previous CA's admins");

    // A spoke trusting the new CA alone refuses a hub still on the previous one's.
    let stale = serve_as(&old, &both).await;
    check(stale, client(&new, new.cert_pem(), "spoke"), "localhost")
        .await
        .expect_err("the previous CA's hub certificate refused by a spoke that dropped it");

    // The previous CA dropped: its certificates are refused, the new ones still get in.
    let addr = serve_as(&new, new.cert_pem()).await;
    check(addr, client(&new, new.cert_pem(), "renewed"), "localhost")
        .await
        .expect("the new CA's certificate");
    check(addr, client(&old, &both, "stale"), "localhost")
        .await
        .expect_err("the previous CA's certificate refused once it is dropped");
}
