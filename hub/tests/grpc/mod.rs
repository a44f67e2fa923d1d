//! What the hub's gRPC tests share: TLS material from a test CA, and a client of no API
//! server (for calls that do not need one).

use flux_shared::federation::pki::{Ca, IssuedCert};
use flux_shared::federation::tls::TlsPem;

/// `leaf` with the CA of `ca`, as a server or client presents it.
pub fn pem(ca: &Ca, leaf: &IssuedCert) -> TlsPem {
    TlsPem::new(
        ca.cert_pem().into(),
        leaf.cert_pem.clone(),
        leaf.key_pem.clone(),
    )
    .expect("test PEM")
}

/// A client that never reaches an API server.
pub fn no_api_server() -> kube::Client {
    let (service, _) = tower_test::mock::pair::<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >();
    kube::Client::new(service, "default")
}

/// A `Spoke` client of the hub at `addr` (whose certificate names `hub.test`), presenting
/// `leaf` of `ca`, with no interceptor: what it sends is what each call sets.
// Not every test binary that includes this module dials the Spoke service.
#[allow(dead_code)]
pub async fn spoke_client(
    ca: &Ca,
    leaf: &IssuedCert,
    addr: std::net::SocketAddr,
) -> flux_shared::federation::proto::spoke_client::SpokeClient<tonic::transport::Channel> {
    use flux_shared::federation::tls::{ClientSecurity, TransportSettings};
    let security = ClientSecurity::Mtls {
        tls: pem(ca, leaf),
        domain: "hub.test".into(),
    };
    let endpoint = TransportSettings::default()
        .endpoint(&format!("https://{addr}"), &security)
        .expect("an endpoint");
    let channel = tokio::time::timeout(std::time::Duration::from_secs(10), endpoint.connect())
        .await
        .expect("connected in time")
        .expect("connected");
    flux_shared::federation::proto::spoke_client::SpokeClient::new(channel)
}
