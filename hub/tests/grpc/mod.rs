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
