//! Transport of the federation: mutual TLS from PEM, and the keepalive, timeout and size
//! settings every hub server and spoke/admin client uses.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use flux_shared::federation::tls::{ClientSecurity, ServerSecurity, TlsPem, TransportSettings};
//! let settings = TransportSettings::default();
//!
//! // Hub: serve with client certificates required, and authorize with the matching
//! // authenticator.
//! let security = ServerSecurity::Mtls(TlsPem::from_files("ca.crt", "hub.crt", "hub.key")?);
//! let auth = security.authenticator();
//! let mut server = settings.server(&security)?;
//!
//! // Spoke: dial the hub with its client certificate.
//! let client = ClientSecurity::Mtls {
//!     tls: TlsPem::from_files("ca.crt", "spoke-gke.crt", "spoke-gke.key")?,
//!     domain: "hub.example.org".to_string(),
//! };
//! let channel = settings.endpoint("https://hub.example.org:8443", &client)?.connect().await?;
//! # let _ = (auth, &mut server, channel); Ok(()) }
//! ```
//!
//! Plaintext exists only as the explicitly named `InsecureDevelopment` variants, meant for
//! local development behind a `--insecure` flag.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{
    Certificate, ClientTlsConfig, Endpoint, Identity as TlsIdentity, Server, ServerTlsConfig,
};

use super::auth::{Authenticator, IdentityInterceptor};
use super::diagnostics::error_chain;
use super::pki::{Identity, IdentityKind};
use super::proto::admin_server::{Admin, AdminServer};
use super::proto::spoke_server::{Spoke, SpokeServer};

/// Timeouts, keepalives and limits of the federation's gRPC connections.
///
/// [`TransportSettings::RECOMMENDED`] (the [`Default`]) holds the values of the design
/// anchors (section C3): aggressive enough to notice a dead spoke or hub (for example a
/// NAT dropping an idle watch stream) within about a minute, lax enough for WAN links.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportSettings {
    /// TLS handshake deadline, server and client.
    pub tls_handshake_timeout: Duration,
    /// Server: HTTP/2 PING interval on every connection.
    pub server_keepalive_interval: Duration,
    /// Server: close the connection when a PING is not answered within this time.
    pub server_keepalive_timeout: Duration,
    /// Client: HTTP/2 PING interval (also while no call is in flight).
    pub client_keepalive_interval: Duration,
    /// Client: close the connection when a PING is not answered within this time.
    pub client_keepalive_timeout: Duration,
    /// TCP keepalive on both sides.
    pub tcp_keepalive: Duration,
    /// Client: TCP connect deadline.
    pub connect_timeout: Duration,
    /// Largest message the hub's services accept and send, in bytes. A snapshot carries
    /// every assignment of one spoke, roughly 5–10 KiB each (spec JSON, broker.toml, R,
    /// curve certificate), so 4 MiB holds several hundred; raise it on both sides for
    /// spokes with more. (tonic's generated clients default to 4 MiB too; set
    /// `max_decoding_message_size` on them to match a larger value.)
    pub max_decoding_message_size: usize,
    /// Server: concurrent HTTP/2 streams per connection.
    pub max_concurrent_streams: u32,
    /// Deadline of unary calls. Clients send it with every unary call
    /// ([`TransportSettings::unary_request`]); the server also applies it to every handler
    /// until it returns its response. For a streaming call that is the time to open the
    /// stream, not the stream's lifetime, which has no deadline (keepalives detect dead
    /// peers).
    pub unary_deadline: Duration,
}

impl TransportSettings {
    /// The recommended values: handshake 5 s, server PING every 30 s (10 s timeout), client
    /// PING every 20 s while idle too (10 s timeout), TCP keepalive 45 s, connect 5 s,
    /// messages up to 4 MiB, 200 streams per connection, unary deadline 10 s.
    pub const RECOMMENDED: TransportSettings = TransportSettings {
        tls_handshake_timeout: Duration::from_secs(5),
        server_keepalive_interval: Duration::from_secs(30),
        server_keepalive_timeout: Duration::from_secs(10),
        client_keepalive_interval: Duration::from_secs(20),
        client_keepalive_timeout: Duration::from_secs(10),
        tcp_keepalive: Duration::from_secs(45),
        connect_timeout: Duration::from_secs(5),
        max_decoding_message_size: 4 * 1024 * 1024,
        max_concurrent_streams: 200,
        unary_deadline: Duration::from_secs(10),
    };

    /// A server builder with these settings and `security`'s TLS (none for
    /// [`ServerSecurity::InsecureDevelopment`]). Add services with
    /// [`TransportSettings::spoke_service`] / [`TransportSettings::admin_service`], passing
    /// [`ServerSecurity::authenticator`].
    pub fn server(&self, security: &ServerSecurity) -> Result<Server, TlsError> {
        let server = self.plain_server();
        match security {
            ServerSecurity::Mtls(pem) => server
                .tls_config(pem.server_config(self.tls_handshake_timeout))
                .map_err(|e| TlsError::Config(error_chain(&e))),
            ServerSecurity::InsecureDevelopment => Ok(server),
        }
    }

    /// A server builder with these settings and no TLS: for plaintext, or for a server that
    /// terminates TLS itself and serves the accepted streams.
    pub fn plain_server(&self) -> Server {
        Server::builder()
            .http2_keepalive_interval(Some(self.server_keepalive_interval))
            .http2_keepalive_timeout(Some(self.server_keepalive_timeout))
            .tcp_keepalive(Some(self.tcp_keepalive))
            .max_concurrent_streams(Some(self.max_concurrent_streams))
            .timeout(self.unary_deadline)
    }

    /// A client endpoint for `uri` with these settings and `security`'s TLS. mTLS needs an
    /// `https://` URI and plaintext an `http://` one: tonic would silently connect in
    /// plaintext to an `http://` URI even with TLS configured, so that is refused here.
    pub fn endpoint(&self, uri: &str, security: &ClientSecurity) -> Result<Endpoint, TlsError> {
        let endpoint = Endpoint::from_shared(uri.to_string())
            .map_err(|e| TlsError::Uri(uri.to_string(), error_chain(&e)))?
            .connect_timeout(self.connect_timeout)
            .tcp_keepalive(Some(self.tcp_keepalive))
            .http2_keep_alive_interval(self.client_keepalive_interval)
            .keep_alive_timeout(self.client_keepalive_timeout)
            .keep_alive_while_idle(true);
        let scheme = endpoint.uri().scheme_str().unwrap_or_default().to_string();
        match security {
            ClientSecurity::Mtls { tls, domain } => {
                if scheme != "https" {
                    return Err(TlsError::Scheme {
                        uri: uri.to_string(),
                        expected: "https",
                    });
                }
                endpoint
                    .tls_config(tls.client_config(domain, self.tls_handshake_timeout))
                    .map_err(|e| TlsError::Config(error_chain(&e)))
            }
            ClientSecurity::InsecureDevelopment(_) => {
                if scheme != "http" {
                    return Err(TlsError::Scheme {
                        uri: uri.to_string(),
                        expected: "http",
                    });
                }
                Ok(endpoint)
            }
        }
    }

    /// A request for a unary call, carrying [`TransportSettings::unary_deadline`] as its
    /// `grpc-timeout`. Do not use it for streaming calls (the deadline would end the stream).
    pub fn unary_request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(self.unary_deadline);
        request
    }

    /// The `Spoke` service for a server: message size limits applied, and every call
    /// refused unless `auth` finds a spoke identity (handlers still call
    /// [`Authenticator::require_spoke`] to learn which spoke).
    pub fn spoke_service<S: Spoke>(
        &self,
        service: S,
        auth: Authenticator,
    ) -> InterceptedService<SpokeServer<S>, impl ServiceInterceptor> {
        InterceptedService::new(
            SpokeServer::new(service)
                .max_decoding_message_size(self.max_decoding_message_size)
                .max_encoding_message_size(self.max_decoding_message_size),
            auth.interceptor(IdentityKind::Spoke),
        )
    }

    /// The `Admin` service for a server: message size limits applied, and every call
    /// refused unless `auth` finds an admin identity.
    pub fn admin_service<S: Admin>(
        &self,
        service: S,
        auth: Authenticator,
    ) -> InterceptedService<AdminServer<S>, impl ServiceInterceptor> {
        InterceptedService::new(
            AdminServer::new(service)
                .max_decoding_message_size(self.max_decoding_message_size)
                .max_encoding_message_size(self.max_decoding_message_size),
            auth.interceptor(IdentityKind::Admin),
        )
    }
}

/// The server-side interceptors of [`TransportSettings::spoke_service`] and
/// [`TransportSettings::admin_service`].
pub trait ServiceInterceptor:
    FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<F> ServiceInterceptor for F where
    F: FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>
        + Clone
        + Send
        + Sync
        + 'static
{
}

impl Default for TransportSettings {
    fn default() -> Self {
        TransportSettings::RECOMMENDED
    }
}

/// How the hub's gRPC server authenticates callers.
#[derive(Clone, Debug)]
pub enum ServerSecurity {
    /// TLS with the hub's certificate; every client must present a certificate issued by
    /// the CA, and its identity authorizes each call.
    Mtls(TlsPem),
    /// LOCAL DEVELOPMENT ONLY: plaintext, no certificates; callers name themselves in a
    /// request header (see [`Authenticator::InsecureDevelopment`]), so anyone who can reach
    /// the port can impersonate any spoke and read every curve certificate. Select it only
    /// from an explicit `--insecure` flag.
    InsecureDevelopment,
}

impl ServerSecurity {
    /// The authenticator that goes with this security: [`Authenticator::Mtls`] for mTLS,
    /// [`Authenticator::InsecureDevelopment`] for plaintext.
    pub fn authenticator(&self) -> Authenticator {
        match self {
            ServerSecurity::Mtls(_) => Authenticator::Mtls,
            ServerSecurity::InsecureDevelopment => Authenticator::InsecureDevelopment,
        }
    }
}

/// How a spoke or admin client connects to the hub.
#[derive(Clone, Debug)]
pub enum ClientSecurity {
    /// TLS with a client certificate; the hub's certificate must be issued by the CA and
    /// name `domain`.
    Mtls {
        /// CA, client certificate and key.
        tls: TlsPem,
        /// The DNS name (or IP address) the hub's certificate must carry.
        domain: String,
    },
    /// LOCAL DEVELOPMENT ONLY: plaintext; the client names itself in a request header, which
    /// only a hub started in insecure mode believes. Attach the header with
    /// [`ClientSecurity::interceptor`].
    InsecureDevelopment(Identity),
}

impl ClientSecurity {
    /// The interceptor every call of this client goes through: a no-op for mTLS (the
    /// certificate speaks for the client), the identity header for insecure development.
    pub fn interceptor(&self) -> IdentityInterceptor {
        match self {
            ClientSecurity::Mtls { .. } => IdentityInterceptor::none(),
            ClientSecurity::InsecureDevelopment(identity) => {
                IdentityInterceptor::insecure_development(identity)
            }
        }
    }
}

/// The PEM material of one side of an mTLS connection: the CA both sides trust, and this
/// side's certificate (chain) and private key.
#[derive(Clone)]
pub struct TlsPem {
    ca: String,
    cert: String,
    key: String,
}

impl std::fmt::Debug for TlsPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsPem")
            .field("ca", &self.ca)
            .field("cert", &self.cert)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// The files mutual TLS material is read from (a mounted Secret, or `--ca`, `--cert` and
/// `--key`), read again when they change: a renewed certificate is picked up in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The federation CA's certificate(s).
    pub ca: PathBuf,
    /// This process's certificate (chain).
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

impl TlsFiles {
    /// Reads and checks the three files ([`TlsPem::from_files`]).
    pub fn read(&self) -> Result<TlsPem, TlsError> {
        TlsPem::from_files(&self.ca, &self.cert, &self.key)
    }
}

impl TlsPem {
    /// Checks that `ca` and `cert` hold at least one certificate each and `key` one private
    /// key (PKCS#8, PKCS#1 or SEC1), so that mistakes surface here, naming the file, rather
    /// than as a handshake failure later.
    pub fn new(ca: String, cert: String, key: String) -> Result<TlsPem, TlsError> {
        check_certs("CA certificate", &ca)?;
        check_certs("certificate", &cert)?;
        PrivateKeyDer::from_pem_slice(key.as_bytes())
            .map_err(|e| TlsError::Pem("private key".to_string(), e.to_string()))?;
        Ok(TlsPem { ca, cert, key })
    }

    /// Reads and checks the three PEM files (for example `ca.crt`, `spoke-gke.crt`,
    /// `spoke-gke.key` from `flux-hub certs`).
    pub fn from_files(
        ca: impl AsRef<Path>,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<TlsPem, TlsError> {
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|e| TlsError::Read(path.display().to_string(), e))
        };
        let (ca, cert, key) = (ca.as_ref(), cert.as_ref(), key.as_ref());
        let ca_pem = read(ca)?;
        let cert_pem = read(cert)?;
        let key_pem = read(key)?;
        check_certs(&ca.display().to_string(), &ca_pem)?;
        check_certs(&cert.display().to_string(), &cert_pem)?;
        PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| TlsError::Pem(key.display().to_string(), e.to_string()))?;
        Ok(TlsPem {
            ca: ca_pem,
            cert: cert_pem,
            key: key_pem,
        })
    }

    /// The CA certificate(s), PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca
    }

    /// This side's certificate (chain), PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert
    }

    /// This side's private key, PEM (for servers that terminate TLS themselves).
    pub fn key_pem(&self) -> &str {
        &self.key
    }

    /// Server TLS: this certificate and key, client certificates REQUIRED and verified
    /// against the CA, the given handshake deadline.
    pub fn server_config(&self, handshake_timeout: Duration) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(TlsIdentity::from_pem(&self.cert, &self.key))
            .client_ca_root(Certificate::from_pem(&self.ca))
            .client_auth_optional(false)
            .timeout(handshake_timeout)
    }

    /// Client TLS: trust only the CA (no system roots), present this certificate, and
    /// require the server's certificate to name `domain`.
    pub fn client_config(&self, domain: &str, handshake_timeout: Duration) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(TlsIdentity::from_pem(&self.cert, &self.key))
            .domain_name(domain)
            .assume_http2(true)
            .timeout(handshake_timeout)
    }
}

fn check_certs(what: &str, pem: &str) -> Result<(), TlsError> {
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
        cert.map_err(|e| TlsError::Pem(what.to_string(), e.to_string()))?;
        count += 1;
    }
    if count == 0 {
        return Err(TlsError::Pem(
            what.to_string(),
            "no CERTIFICATE block".to_string(),
        ));
    }
    Ok(())
}

/// Errors building TLS configuration and endpoints.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read.
    #[error("reading {0}: {1}")]
    Read(String, #[source] std::io::Error),
    /// A PEM file or string holds no usable certificate or key.
    #[error("{0}: {1}")]
    Pem(String, String),
    /// tonic/rustls refused the configuration.
    #[error("TLS configuration: {0}")]
    Config(String),
    /// The endpoint URI does not parse.
    #[error("invalid endpoint URI {0:?}: {1}")]
    Uri(String, String),
    /// The URI scheme does not match the security mode.
    #[error("endpoint {uri:?} must use {expected}:// in this security mode")]
    Scheme {
        /// The URI.
        uri: String,
        /// The scheme the mode needs.
        expected: &'static str,
    },
}
