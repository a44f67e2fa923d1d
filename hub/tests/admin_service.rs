//! The hub's real Admin service and TLS termination on 127.0.0.1, as an adversary holding
//! an admin certificate would try them: a revoked certificate is refused in the handshake,
//! an open admin stream ends when its certificate is revoked, and another admin's
//! certificate keeps working; a revocation by name covers every certificate of that
//! admin; an admin's open watches are bounded.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flux_hub::federation::registry::Registry;
use flux_hub::ops::metrics::Metrics;
use flux_hub::server::revocations::Revocations;
use flux_hub::server::service::{self, Services};
use flux_hub::server::watched_data::{Known, WatchedData};
use flux_shared::federation::pins;
use flux_shared::federation::pki::{Ca, IssuedCert};
use flux_shared::federation::proto::admin_client::AdminClient;
use flux_shared::federation::proto::{ListMiniClustersRequest, WatchMiniClustersRequest};
use flux_shared::federation::scope::AdminScope;
use flux_shared::federation::tls::{ClientSecurity, ServerSecurity, TlsPem, TransportSettings};
use futures::StreamExt;

mod grpc;

const LIMIT: Duration = Duration::from_secs(10);

struct Pki {
    ca: Ca,
    hub: IssuedCert,
}

impl Pki {
    fn new() -> Pki {
        let ca = Ca::generate("revocation test CA").unwrap();
        let hub = ca
            .issue_server(&["hub.test".into()], &["127.0.0.1".parse().unwrap()], 1)
            .unwrap();
        Pki { ca, hub }
    }

    fn admin(&self, name: &str) -> IssuedCert {
        self.ca
            .issue_admin(name, &AdminScope::everything(), 1)
            .unwrap()
    }

    fn pem(&self, leaf: &IssuedCert) -> TlsPem {
        grpc::pem(&self.ca, leaf)
    }
}

async fn serve(pki: &Pki, revoked: WatchedData, metrics: Arc<Metrics>) -> SocketAddr {
    let listener = service::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let security = ServerSecurity::Mtls(pki.pem(&pki.hub));
    let services = Services::new(
        Registry::new(),
        security.authenticator(),
        metrics,
        grpc::no_api_server(),
    )
    .with_revocations(Revocations::from(revoked));
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

async fn admin_client(
    pki: &Pki,
    addr: SocketAddr,
    leaf: &IssuedCert,
) -> Result<AdminClient<tonic::transport::Channel>, String> {
    let security = ClientSecurity::Mtls {
        tls: pki.pem(leaf),
        domain: "hub.test".into(),
    };
    let endpoint = TransportSettings::default()
        .endpoint(&format!("https://{addr}"), &security)
        .map_err(|e| e.to_string())?;
    let channel = tokio::time::timeout(LIMIT, endpoint.connect())
        .await
        .map_err(|_| "timed out".to_string())?
        .map_err(|e| format!("{e:?}"))?;
    Ok(AdminClient::new(channel))
}

/// One ListMiniClusters on a new connection: the error's text when refused.
async fn list(pki: &Pki, addr: SocketAddr, leaf: &IssuedCert) -> Result<(), String> {
    let mut client = admin_client(pki, addr, leaf).await?;
    tokio::time::timeout(
        LIMIT,
        client.list_mini_clusters(ListMiniClustersRequest::default()),
    )
    .await
    .map_err(|_| "timed out".to_string())?
    .map(|_| ())
    .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
}

fn revoking(keys: &[String]) -> Known {
    Known::Data(
        keys.iter()
            .map(|k| (k.clone(), "revoked by the test".to_string()))
            .collect::<BTreeMap<_, _>>(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_admin_certificate_is_refused_and_its_open_stream_ends() {
    let pki = Pki::new();
    let (alice, alice_new, bob) = (pki.admin("alice"), pki.admin("alice"), pki.admin("bob"));
    let revoked = WatchedData::fixed(Known::NotYet);
    let metrics = Arc::new(Metrics::new());
    let addr = serve(&pki, revoked.clone(), metrics.clone()).await;

    // Until the revocations are read, admins are asked to retry, not served blind.
    let waiting = list(&pki, addr, &alice).await.unwrap_err();
    assert!(waiting.starts_with("Unavailable"), "{waiting}");
    revoked.set(Known::Missing);
    list(&pki, addr, &alice).await.expect("nothing revoked");

    // Alice watches; her certificate is revoked meanwhile.
    let mut client = admin_client(&pki, addr, &alice).await.unwrap();
    let mut stream = client
        .watch_mini_clusters(WatchMiniClustersRequest::default())
        .await
        .expect("watch")
        .into_inner();
    tokio::time::timeout(LIMIT, stream.next())
        .await
        .expect("first snapshot")
        .expect("a snapshot")
        .expect("ok");
    let fingerprint = pins::fingerprint(&alice.cert_der);
    revoked.set(revoking(&[pins::certificate_revocation_key(&fingerprint)]));
    let ended = tokio::time::timeout(LIMIT, async {
        loop {
            match stream.next().await {
                Some(Ok(_)) => continue,
                other => return other,
            }
        }
    })
    .await
    .expect("the open stream ends");
    assert!(ended.as_ref().is_none_or(|r| r.is_err()), "{ended:?}");

    // New connections with that certificate end in the handshake; her other certificate
    // and bob's work.
    let refused = list(&pki, addr, &alice).await.unwrap_err();
    assert!(!refused.starts_with("Ok"), "{refused}");
    list(&pki, addr, &alice_new)
        .await
        .expect("another certificate");
    list(&pki, addr, &bob).await.expect("another admin");

    // By name: every certificate of alice.
    revoked.set(revoking(&[pins::admin_revocation_key("alice")]));
    assert!(list(&pki, addr, &alice_new).await.is_err());
    list(&pki, addr, &bob).await.expect("another admin");

    // Lifted: accepted again.
    revoked.set(Known::Missing);
    list(&pki, addr, &alice).await.expect("lifted");

    let text = metrics.encode();
    assert!(
        text.lines().any(
            |l| l.starts_with("flux_hub_admin_certificates_refused_total ") && !l.ends_with(" 0")
        ),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_holds_a_bounded_number_of_watches() {
    let pki = Pki::new();
    let (alice, bob) = (pki.admin("alice"), pki.admin("bob"));
    let metrics = Arc::new(Metrics::new());
    let addr = serve(&pki, WatchedData::fixed(Known::Missing), metrics).await;
    let mut client = admin_client(&pki, addr, &alice).await.unwrap();
    let mut open = Vec::new();
    for _ in 0..service::ADMIN_WATCHES_PER_IDENTITY {
        open.push(
            client
                .watch_mini_clusters(WatchMiniClustersRequest::default())
                .await
                .expect("within the bound")
                .into_inner(),
        );
    }
    let refused = client
        .watch_mini_clusters(WatchMiniClustersRequest::default())
        .await
        .expect_err("over the bound");
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(refused.message().contains("admin alice"), "{refused:?}");
    // Another admin is not affected; an ended watch gives its place back.
    let mut other = admin_client(&pki, addr, &bob).await.unwrap();
    other
        .watch_mini_clusters(WatchMiniClustersRequest::default())
        .await
        .expect("another admin");
    drop(open.pop());
    tokio::time::timeout(LIMIT, async {
        loop {
            match client
                .watch_mini_clusters(WatchMiniClustersRequest::default())
                .await
            {
                Ok(stream) => return stream,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    })
    .await
    .expect("the ended watch's place is given back");
}
