//! The hub's own TLS termination of the federation port, instead of tonic's, for two
//! things tonic's cannot do:
//!
//! - **Refusal in the handshake.** After the usual chain check against the CA, a spoke
//!   certificate must also pass `admit` (the hub's pins): a rotated-out or unjoined
//!   certificate ends in a TLS `access_denied` alert, before any gRPC call. An admin
//!   certificate must come from the CA that issued the hub's own: while the CA is renewed
//!   the hub trusts the previous CA for its spokes (each pinned) until they are joined
//!   again, but no admin certificate the previous CA issued.
//! - **Certificates reloaded while serving.** [`HubTls::reload_from`] re-reads the CA,
//!   certificate and key files (a renewed Secret volume) and swaps the configuration for
//!   new connections; open connections keep theirs.
//!
//! Accepted connections are `tokio_rustls` server streams, for which tonic records the
//! peer's certificates, so `Request::peer_certs` works as with tonic's TLS.

use std::fmt;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, RootCertStore};
use rustls_pki_types::pem::PemObject;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_util::task::AbortOnDropHandle;
use tracing::{debug, info, warn};

use flux_shared::federation::tls::{TlsFiles, TlsPem};

use super::connection_limits::{Connections, Displaced, Handshakes, Limits, Place, source_of};

/// Decides, after the chain check, whether a client certificate (DER) may connect at all;
/// `Err` says why not (logged). The hub's: a spoke certificate must be the pinned one.
pub type Admit = Arc<dyn Fn(&[u8]) -> Result<(), String> + Send + Sync>;

/// Errors building the TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsAcceptError {
    /// The PEM material does not parse.
    #[error("{0}: {1}")]
    Pem(&'static str, String),
    /// rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    /// The client verifier could not be built (no usable CA).
    #[error("client certificate verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

/// The CA check of rustls, then `admit`.
struct AdmittingVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    admit: Admit,
    /// The key identifier of the CA that issued the hub's own certificate, when the hub
    /// trusts it: the only CA whose admin certificates are accepted.
    admin_issuer: Option<String>,
}

impl fmt::Debug for AdmittingVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdmittingVerifier").finish_non_exhaustive()
    }
}

impl ClientCertVerifier for AdmittingVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if let Some(refusal) = admin_of_another_ca(self.admin_issuer.as_deref(), end_entity) {
            warn!(reason = %refusal, "client certificate refused in the TLS handshake");
            return Err(rustls::Error::InvalidCertificate(
                CertificateError::ApplicationVerificationFailure,
            ));
        }
        match (self.admit)(end_entity.as_ref()) {
            Ok(()) => Ok(verified),
            Err(reason) => {
                warn!(%reason, "client certificate refused in the TLS handshake");
                // rustls answers with the `access_denied` alert.
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::ApplicationVerificationFailure,
                ))
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// Why an admin certificate is refused for its issuer: `admin_issuer` (the CA of the hub's
/// own certificate) did not issue it. `None`: not an admin certificate, or no rule.
fn admin_of_another_ca(admin_issuer: Option<&str>, leaf: &CertificateDer<'_>) -> Option<String> {
    use flux_shared::federation::pki::{Identity, identity_from_der, issuer_key_id};
    let wanted = admin_issuer?;
    let Ok(Identity::Admin(admin)) = identity_from_der(leaf.as_ref()) else {
        return None;
    };
    let issuer = issuer_key_id(leaf.as_ref());
    (issuer.as_deref() != Some(wanted)).then(|| {
        format!(
            "admin {admin}: its certificate was issued by CA {}, not by the CA of the hub's own certificate ({wanted}); issue it again (flux-hub certs --admin {admin} --force)",
            issuer.as_deref().unwrap_or("unknown")
        )
    })
}

/// The server configuration for `pem`: the hub's certificate and key, client certificates
/// required, issued by the CA and admitted by `admit` (admin certificates only from the CA
/// of the hub's own certificate, when it trusts that one), HTTP/2 only.
pub fn server_config(pem: &TlsPem, admit: Admit) -> Result<ServerConfig, TlsAcceptError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem.ca_pem().as_bytes()) {
        let cert = cert.map_err(|e| TlsAcceptError::Pem("CA certificate", e.to_string()))?;
        roots
            .add(cert)
            .map_err(|e| TlsAcceptError::Pem("CA certificate", e.to_string()))?;
    }
    let inner =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build()?;
    let chain = CertificateDer::pem_slice_iter(pem.cert_pem().as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsAcceptError::Pem("certificate", e.to_string()))?;
    let key = PrivateKeyDer::from_pem_slice(pem.key_pem().as_bytes())
        .map_err(|e| TlsAcceptError::Pem("private key", e.to_string()))?;
    let admin_issuer = flux_shared::federation::pki::issuer_key_id_of_pem(pem.cert_pem())
        .filter(|id| flux_shared::federation::pki::key_ids_of_pem(pem.ca_pem()).contains(id));
    let verifier = AdmittingVerifier {
        inner,
        admit,
        admin_issuer,
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(Arc::new(verifier))
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// The hub's TLS: the current configuration (swapped on reload), the material it was made
/// from, and the admission rule.
#[derive(Clone)]
pub struct HubTls {
    current: Arc<RwLock<Served>>,
    admit: Admit,
}

/// A configuration and the bytes of the CA, certificate and key it was made from.
struct Served {
    config: Arc<ServerConfig>,
    contents: [Vec<u8>; 3],
}

impl HubTls {
    /// Serving `pem`, admitting client certificates with `admit`.
    pub fn new(pem: &TlsPem, admit: Admit) -> Result<HubTls, TlsAcceptError> {
        let config = server_config(pem, admit.clone())?;
        Ok(HubTls {
            current: Arc::new(RwLock::new(Served {
                config: Arc::new(config),
                contents: contents(pem),
            })),
            admit,
        })
    }

    /// The configuration new connections get.
    fn config(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .config
            .clone()
    }

    /// Whether `files_now` (CA, certificate, key) are the bytes being served.
    fn serves(&self, files_now: &[Vec<u8>; 3]) -> bool {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contents
            == *files_now
    }

    /// Serve `pem` from the next connection on. On error the current configuration stays.
    pub fn replace(&self, pem: &TlsPem) -> Result<(), TlsAcceptError> {
        let config = server_config(pem, self.admit.clone())?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Served {
            config: Arc::new(config),
            contents: contents(pem),
        };
        Ok(())
    }

    /// Checks `files` every `interval` and serves what they hold once it differs from what
    /// is served and loads, calling `reloaded` with the new certificate's PEM. Content that
    /// does not load (a Secret half-written, a key that does not match) is reported once and
    /// the current configuration kept. Runs until the process ends.
    ///
    /// The comparison is with what is served, not with what the files held when this
    /// started: a Secret updated between the process reading its files and this task
    /// starting (a pod started by a rollout just before its new Secret landed, then waiting
    /// for leadership) would otherwise never be served.
    pub async fn reload_from(
        self,
        files: TlsFiles,
        interval: Duration,
        reloaded: impl Fn(&TlsPem) + Send + 'static,
    ) {
        let mut reported: Option<String> = None;
        loop {
            tokio::time::sleep(interval).await;
            let now = std::fs::read(&files.ca)
                .ok()
                .zip(std::fs::read(&files.cert).ok())
                .zip(std::fs::read(&files.key).ok())
                .map(|((ca, cert), key)| [ca, cert, key]);
            if now.as_ref().is_some_and(|now| self.serves(now)) {
                continue;
            }
            let loaded = files
                .read()
                .map_err(|e| e.to_string())
                .and_then(|pem| self.replace(&pem).map(|()| pem).map_err(|e| e.to_string()));
            match loaded {
                Ok(pem) => {
                    info!(cert = %files.cert.display(), "reloaded the federation certificate: new connections use it");
                    reloaded(&pem);
                    reported = None;
                }
                Err(error) => {
                    if reported.as_deref() != Some(error.as_str()) {
                        warn!(%error, "the federation certificate files changed but do not load; still serving the previous ones");
                        reported = Some(error);
                    }
                }
            }
        }
    }
}

/// The bytes of `pem`'s CA, certificate and key, as the files hold them.
fn contents(pem: &TlsPem) -> [Vec<u8>; 3] {
    [pem.ca_pem(), pem.cert_pem(), pem.key_pem()].map(|text| text.as_bytes().to_vec())
}

/// Counts a connection closed before its first call, by reason (a metric label).
pub type Refused = Arc<dyn Fn(&'static str) + Send + Sync>;

/// How [`incoming`] accepts.
#[derive(Clone)]
pub struct Accepting {
    /// The whole handshake's deadline.
    pub handshake_timeout: Duration,
    /// TCP keepalive of accepted connections.
    pub tcp_keepalive: Duration,
    /// Bounds on handshakes in flight and on each identity's connections.
    pub limits: Limits,
    /// Told of every connection closed before its first call.
    pub refused: Refused,
}

impl Accepting {
    /// `handshake_timeout` and `tcp_keepalive` with the recommended [`Limits`], counting
    /// nothing.
    pub fn new(handshake_timeout: Duration, tcp_keepalive: Duration) -> Self {
        Accepting {
            handshake_timeout,
            tcp_keepalive,
            limits: Limits::RECOMMENDED,
            refused: Arc::new(|_| {}),
        }
    }
}

/// How long a new connection may stay silent: a TLS client sends its hello at once, so
/// one that has sent nothing by then is closed (a stranger's idle connection holds its
/// turn no longer than this).
pub const HELLO_DEADLINE: Duration = Duration::from_secs(2);

/// The TLS connections accepted on `listener`: TCP options set, handshakes run
/// concurrently within the bounds of [`Limits`] (a connection over a bound displaces the
/// oldest handshake of its source, or of all: the accept loop never waits), each given
/// [`HELLO_DEADLINE`] to start and `handshake_timeout` to finish; an authenticated peer
/// holds at most [`Limits::per_identity`] connections. Failed ones are logged, counted
/// and dropped. The accept task stops with the stream.
pub fn incoming(listener: tokio::net::TcpListener, tls: HubTls, accepting: Accepting) -> Incoming {
    let (tx, rx) = mpsc::channel(64);
    let handshakes = Handshakes::new(accepting.limits);
    let connections = Connections::new(accepting.limits.per_identity);
    let task = tokio::spawn(async move {
        let mut tcp = tonic::transport::server::TcpIncoming::from(listener)
            .with_nodelay(Some(true))
            .with_keepalive(Some(accepting.tcp_keepalive));
        while let Some(next) = futures::StreamExt::next(&mut tcp).await {
            let stream: TcpStream = match next {
                Ok(s) => s,
                Err(error) => {
                    debug!(%error, "accepting a federation connection failed");
                    continue;
                }
            };
            if tx.is_closed() {
                return;
            }
            let peer = stream.peer_addr().ok();
            let source = peer.map_or(IpAddr::from([0, 0, 0, 0]), |p| source_of(p.ip()));
            let (turn, displaced) = handshakes.admit(source);
            for d in displaced {
                (accepting.refused)(match d {
                    Displaced::BySource => "displaced_by_source",
                    Displaced::ByTotal => "displaced_by_total",
                });
            }
            let handshake = handshake(
                TlsAcceptor::from(tls.config()),
                stream,
                accepting.handshake_timeout,
            );
            let (tx, connections, refused) =
                (tx.clone(), connections.clone(), accepting.refused.clone());
            tokio::spawn(async move {
                let mut turn = turn;
                let tls = tokio::select! {
                    done = handshake => done,
                    _ = &mut turn.displaced => {
                        debug!(?peer, "TLS handshake displaced by newer connections");
                        return;
                    }
                };
                drop(turn);
                let tls = match tls {
                    Ok(tls) => tls,
                    Err(reason) => {
                        debug!(
                            ?peer,
                            reason, "federation connection closed in the handshake"
                        );
                        refused(reason);
                        return;
                    }
                };
                let identity = peer_identity(&tls);
                let Some(place) = connections.admit(&identity) else {
                    warn!(?peer, %identity, "closing a connection: this identity holds its maximum of connections already");
                    refused("identity_connections");
                    return;
                };
                let _ = tx
                    .send(Accepted {
                        stream: tls,
                        _place: place,
                    })
                    .await;
            });
        }
    });
    Incoming {
        rx,
        _task: AbortOnDropHandle::new(task),
    }
}

/// One handshake: the client's hello within [`HELLO_DEADLINE`], then the whole handshake
/// within `timeout`. `Err` is the reason it failed (a metric label).
async fn handshake(
    acceptor: TlsAcceptor,
    stream: TcpStream,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, &'static str> {
    let started = tokio::time::Instant::now();
    match tokio::time::timeout(HELLO_DEADLINE.min(timeout), stream.readable()).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => return Err("handshake_failed"),
        Err(_) => return Err("hello_timeout"),
    }
    let accept = acceptor.accept(stream).into_fallible();
    match tokio::time::timeout_at(started + timeout, accept).await {
        Ok(Ok(tls)) => Ok(tls),
        Ok(Err((error, io))) => {
            debug!(%error, "TLS handshake failed");
            linger(io).await;
            Err("handshake_failed")
        }
        Err(_) => Err("handshake_timeout"),
    }
}

/// The authenticated peer's identity as its certificate names it (`spoke/NAME`,
/// `admin/NAME`), for the per-identity bound.
fn peer_identity(tls: &TlsStream<TcpStream>) -> String {
    tls.get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .and_then(|leaf| flux_shared::federation::pki::identity_from_der(leaf.as_ref()).ok())
        .map_or_else(|| "unnamed".to_string(), |identity| identity.to_string())
}

/// An accepted connection, holding its identity's place until it closes.
pub struct Accepted {
    stream: TlsStream<TcpStream>,
    _place: Place,
}

impl tokio::io::AsyncRead for Accepted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Accepted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// tonic reads the peer's certificates from here (`Request::peer_certs`), as for its own
/// TLS streams.
impl tonic::transport::server::Connected for Accepted {
    type ConnectInfo = <TlsStream<TcpStream> as tonic::transport::server::Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

/// How long a refused connection is drained before it is closed.
const LINGER: Duration = Duration::from_secs(1);

/// Closes a connection whose handshake failed so that the client reads the alert: with
/// TLS 1.3 the client considers the handshake done before the hub checks its certificate,
/// and has often sent its first request already. Closing with that request unread would
/// reset the connection, and the client would see a broken pipe instead of the alert; so
/// the hub ends its side, then reads and drops what comes until the client closes (at
/// most [`LINGER`]).
async fn linger(mut io: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = io.shutdown().await;
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(LINGER, async {
        while let Ok(n) = io.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

/// The stream of [`incoming`].
pub struct Incoming {
    rx: mpsc::Receiver<Accepted>,
    _task: AbortOnDropHandle<()>,
}

impl Stream for Incoming {
    type Item = Result<Accepted, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx).map(|s| s.map(Ok))
    }
}
