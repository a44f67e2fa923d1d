//! The controllers' Kubernetes client speaks HTTP/2 when the server offers it, and shares
//! one connection among requests in flight (kube's own client: HTTP/1.1, one connection
//! per request in flight). The server is a local HTTPS server offering both protocols.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// What the server saw.
#[derive(Default)]
struct Seen {
    /// Requests still to answer with 503 Service Unavailable.
    unavailable: AtomicUsize,
    connections: AtomicUsize,
    http2: AtomicUsize,
    http1: AtomicUsize,
}

/// An HTTPS server on loopback answering the first `unavailable` requests with 503 and
/// every other with an empty ConfigMap list; returns its URL, its certificate and what it
/// sees.
async fn server(unavailable: usize) -> (String, CertificateDer<'static>, Arc<Seen>) {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()])
        .expect("a self-signed certificate");
    let der = cert.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
    let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_no_client_auth()
    .with_single_cert(vec![der.clone()], key)
    .expect("a server certificate");
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let url = format!("https://{}", listener.local_addr().expect("an address"));
    let seen = Arc::new(Seen {
        unavailable: AtomicUsize::new(unavailable),
        ..Seen::default()
    });
    let counts = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            counts.connections.fetch_add(1, Ordering::SeqCst);
            let (acceptor, counts) = (acceptor.clone(), counts.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let counts = counts.clone();
                    async move {
                        match req.version() {
                            Version::HTTP_2 => counts.http2.fetch_add(1, Ordering::SeqCst),
                            _ => counts.http1.fetch_add(1, Ordering::SeqCst),
                        };
                        // Requests overlap: each answer waits a little.
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        let refuse = counts
                            .unavailable
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok();
                        if refuse {
                            return Ok(Response::builder()
                                .status(503)
                                .body(Full::new(Bytes::from("busy")))
                                .expect("a response"));
                        }
                        let body = r#"{"apiVersion":"v1","kind":"ConfigMapList","metadata":{},"items":[]}"#;
                        Ok::<_, std::convert::Infallible>(
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(body)))
                                .expect("a response"),
                        )
                    }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url, der, seen)
}

#[tokio::test]
async fn requests_in_flight_share_one_http2_connection() {
    let (url, cert, seen) = server(0).await;
    let api = configmaps(&url, cert);
    let params = Default::default();
    // The first request makes the connection (until ALPN has said h2, requests at once
    // would each start one; the controllers' first requests are one at a time).
    assert!(api.list(&params).await.expect("a list").items.is_empty());
    let lists = (0..8).map(|_| api.list(&params));
    for list in futures::future::join_all(lists).await {
        assert!(list.expect("a list").items.is_empty());
    }
    assert_eq!(
        seen.http2.load(Ordering::SeqCst),
        9,
        "every request over HTTP/2"
    );
    assert_eq!(seen.http1.load(Ordering::SeqCst), 0);
    assert_eq!(
        seen.connections.load(Ordering::SeqCst),
        1,
        "eight requests in flight on the first one's connection"
    );
}

/// The ConfigMaps of namespace `default` at `url`, through the controllers' client.
fn configmaps(url: &str, cert: CertificateDer<'static>) -> Api<ConfigMap> {
    let mut config = kube::Config::new(url.parse().expect("a URL"));
    config.root_cert = Some(vec![cert.to_vec()]);
    config.default_namespace = "default".into();
    let client = flux_shared::ops::kube_client::from_config(config).expect("a client");
    Api::default_namespaced(client)
}

#[tokio::test]
async fn a_busy_api_server_is_asked_again_as_kube_does() {
    let (url, cert, seen) = server(2).await;
    let api = configmaps(&url, cert);
    let list = api
        .list(&Default::default())
        .await
        .expect("a list after two 503s");
    assert!(list.items.is_empty());
    assert_eq!(
        seen.http2.load(Ordering::SeqCst),
        3,
        "two refused, one answered"
    );
}

#[tokio::test]
async fn a_tls_server_name_that_is_no_name_is_refused_with_it() {
    let mut config = kube::Config::new("https://127.0.0.1:1".parse().expect("a URL"));
    config.tls_server_name = Some("not a name!".into());
    let err = flux_shared::ops::kube_client::from_config(config)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("not a name!"), "{err}");
}
