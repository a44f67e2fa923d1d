//! Turning a federation client's failures into text a person can act on: error chains,
//! gRPC status text, what a failed TLS handshake means, and the hub URL.
//!
//! The spoke agent, `flux-spoke` and `flux-hub status` all dial the hub and explain the
//! same failures; keeping the wording rules here keeps their messages consistent.
//!
//! ```
//! use flux_shared::federation::diagnostics::{
//!     TlsFailure, classify_tls_failure, error_chain, status_text,
//! };
//! let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
//! let mut error = tonic::Status::unavailable("tcp connect error");
//! error.set_source(std::sync::Arc::new(refused));
//! assert_eq!(
//!     status_text(&error),
//!     "tcp connect error: refused"
//! );
//! let wrapped = std::io::Error::other(std::io::Error::other("dns error"));
//! assert_eq!(error_chain(&wrapped), "dns error");
//! assert_eq!(
//!     classify_tls_failure("invalid peer certificate: UnknownIssuer", false),
//!     Some(TlsFailure::ServerNotFromCa)
//! );
//! ```

use std::error::Error;

/// `error: source: source...`, for messages.
///
/// Many errors quote their source in their own message (tonic, hyper, `anyhow` contexts
/// sometimes do), so a source whose text the line already contains is left out, as is an
/// empty one; the `: ` separator is only written between non-empty parts.
pub fn error_chain(error: &dyn Error) -> String {
    join_sources(error.to_string(), error.source())
}

/// A gRPC status's message followed by the chain of its source (a transport error keeps
/// the TLS alert or I/O cause there, not in the message).
///
/// Not [`error_chain`]: a [`tonic::Status`]'s `Display` is a debugging dump (code,
/// message, details, metadata), while this starts from the bare message.
pub fn status_text(status: &tonic::Status) -> String {
    join_sources(status.message().to_string(), Error::source(status))
}

/// `head`, then each source's text not already in the line, `: `-separated.
fn join_sources(head: String, mut source: Option<&dyn Error>) -> String {
    let mut out = head;
    while let Some(s) = source {
        let text = s.to_string();
        if !text.is_empty() && !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// What a failed connection's error text says about TLS, as far as the client can tell.
///
/// The classification works on text ([`error_chain`] / [`status_text`] output) because
/// tonic erases the rustls error types behind boxed sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsFailure {
    /// The hub refused this client's certificate: it sent a TLS alert such as `UnknownCA`,
    /// `BadCertificate` or `CertificateRequired` (wrong CA, wrong kind, or none at all).
    ClientCertificateRefused,
    /// The hub's certificate does not carry the name the client expects (`--hub-domain`,
    /// by default the URL's host).
    ServerNameMismatch,
    /// The hub's certificate is not issued by the CA the client trusts (`--ca`).
    ServerNotFromCa,
    /// The connection closed right after a completed handshake. With TLS 1.3 the server
    /// checks the client certificate after the client considers the handshake done, and
    /// its refusal alert is often lost: the first call just sees the connection close.
    ClosedAfterHandshake,
    /// Some other handshake or certificate problem.
    Other,
}

/// TLS alerts a server sends when it refuses the client's certificate.
const REFUSAL_ALERTS: [&str; 8] = [
    "CertificateRequired",
    "UnknownCA",
    "BadCertificate",
    "UnsupportedCertificate",
    "CertificateRevoked",
    "CertificateExpired",
    "CertificateUnknown",
    "AccessDenied",
];

/// What `text` (an error chain) says went wrong with TLS; `None` when it does not read
/// like a TLS problem (for example a refused TCP connection).
///
/// `handshake_done`: the failure came after the connection was established (with a call),
/// so an abrupt close is read as [`TlsFailure::ClosedAfterHandshake`].
pub fn classify_tls_failure(text: &str, handshake_done: bool) -> Option<TlsFailure> {
    // rustls prints alert names in CamelCase after "received fatal alert".
    if text.contains("alert") && REFUSAL_ALERTS.iter().any(|alert| text.contains(alert)) {
        return Some(TlsFailure::ClientCertificateRefused);
    }
    let lower = text.to_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
    if has(&["notvalidforname", "not valid for name"]) {
        Some(TlsFailure::ServerNameMismatch)
    } else if has(&["unknownissuer", "unknown issuer"]) {
        Some(TlsFailure::ServerNotFromCa)
    } else if handshake_done && has(&["connection closed", "connection reset", "broken pipe"]) {
        Some(TlsFailure::ClosedAfterHandshake)
    } else if has(&["alert", "certificate", "handshake"]) {
        Some(TlsFailure::Other)
    } else {
        None
    }
}

/// Whether `text` (an error chain) holds the `access_denied` alert: the hub knows the
/// certificate (same CA, right kind) and refuses it anyway. The hub sends it for a spoke
/// certificate that is not the one pinned for its name (replaced by `join --rotate`, or
/// the spoke unjoined).
pub fn is_access_denied(text: &str) -> bool {
    text.contains("alert") && text.contains("AccessDenied")
}

/// `--hub` with a scheme: a bare `host:port` gets `https://` (or `http://` when
/// `insecure`), so that users can paste what `kubectl get svc` shows. Surrounding
/// whitespace is dropped.
pub fn normalize_hub_url(url: &str, insecure: bool) -> String {
    let url = url.trim();
    if url.contains("://") {
        url.to_string()
    } else if insecure {
        format!("http://{url}")
    } else {
        format!("https://{url}")
    }
}

/// Why [`hub_host`] found no host in a hub URL.
#[derive(Debug, thiserror::Error)]
pub enum HubUrlError {
    /// The text does not parse as a URI.
    #[error(transparent)]
    Invalid(#[from] tonic::codegen::http::uri::InvalidUri),
    /// The URI parses but names no host (a path, or an empty authority).
    #[error("no host in the URL")]
    NoHost,
}

/// The host of a hub URL, without IPv6 brackets: the default name the hub's certificate
/// must carry (the TLS server name).
pub fn hub_host(url: &str) -> Result<String, HubUrlError> {
    let uri: tonic::transport::Uri = url.parse()?;
    let host = uri.host().ok_or(HubUrlError::NoHost)?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(HubUrlError::NoHost);
    }
    Ok(host.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    /// An error whose message quotes its source, as hyper's and tonic's often do.
    #[derive(Debug)]
    struct Quoting(io::Error);

    impl std::fmt::Display for Quoting {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "dial failed ({})", self.0)
        }
    }

    impl Error for Quoting {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    /// An error with its own message and a source.
    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Context(&'static str, #[source] io::Error);

    #[test]
    fn chains_join_every_source() {
        let inner = io::Error::new(io::ErrorKind::ConnectionRefused, "connection refused");
        let middle = Context("tcp connect error", inner);
        let outer = Context("transport error", io::Error::other(middle));
        assert_eq!(
            error_chain(&outer),
            "transport error: tcp connect error: connection refused"
        );
    }

    #[test]
    fn io_errors_wrapped_twice_show_once() {
        // io::Error is transparent: it displays and sources what it wraps.
        let twice = io::Error::other(io::Error::other(Context(
            "tcp connect error",
            io::Error::new(io::ErrorKind::ConnectionRefused, "connection refused"),
        )));
        assert_eq!(error_chain(&twice), "tcp connect error: connection refused");
        let bare = io::Error::other(io::Error::other("dns error"));
        assert_eq!(error_chain(&bare), "dns error");
    }

    #[test]
    fn chains_leave_out_quoted_and_empty_sources() {
        let quoting = Quoting(io::Error::other("connection reset by peer"));
        assert_eq!(
            error_chain(&quoting),
            "dial failed (connection reset by peer)"
        );
        let empty = Context(
            "outer",
            io::Error::other(Context("", io::Error::other("x"))),
        );
        assert_eq!(error_chain(&empty), "outer: x");
        let empty_head = Context("", io::Error::other("cause"));
        assert_eq!(error_chain(&empty_head), "cause");
    }

    #[test]
    fn chains_show_rustls_errors() {
        let unknown_issuer = Context(
            "transport error",
            io::Error::other(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            )),
        );
        assert_eq!(
            error_chain(&unknown_issuer),
            "transport error: invalid peer certificate: UnknownIssuer"
        );
        let alert = Context(
            "transport error",
            io::Error::other(rustls::Error::AlertReceived(
                rustls::AlertDescription::UnknownCA,
            )),
        );
        assert_eq!(
            error_chain(&alert),
            "transport error: received fatal alert: UnknownCA"
        );
    }

    #[test]
    fn chains_of_anyhow_style_trait_objects() {
        // `flux-spoke` passes `&*anyhow::Error`: a `dyn Error + Send + Sync`.
        let boxed: Box<dyn Error + Send + Sync> = Box::new(Context(
            "loading the TLS files",
            io::Error::other("no such file"),
        ));
        assert_eq!(error_chain(&*boxed), "loading the TLS files: no such file");
    }

    #[test]
    fn status_text_starts_from_the_message() {
        let plain = tonic::Status::unavailable("the hub is not serving assignments yet");
        assert_eq!(
            status_text(&plain),
            "the hub is not serving assignments yet"
        );
        let mut with_source = tonic::Status::unknown("transport error");
        with_source.set_source(std::sync::Arc::new(io::Error::other(
            rustls::Error::AlertReceived(rustls::AlertDescription::BadCertificate),
        )));
        assert_eq!(
            status_text(&with_source),
            "transport error: received fatal alert: BadCertificate"
        );
        let mut empty = tonic::Status::cancelled("");
        empty.set_source(std::sync::Arc::new(io::Error::other("connection closed")));
        assert_eq!(status_text(&empty), "connection closed");
        let mut quoted = tonic::Status::unknown("h2 protocol error: connection reset");
        quoted.set_source(std::sync::Arc::new(io::Error::other("connection reset")));
        assert_eq!(status_text(&quoted), "h2 protocol error: connection reset");
    }

    #[test]
    fn certificate_refusals_are_recognised() {
        let refused =
            |text| classify_tls_failure(text, false) == Some(TlsFailure::ClientCertificateRefused);
        assert!(refused("transport error: received fatal alert: UnknownCA"));
        assert!(refused("received fatal alert: CertificateRequired"));
        assert!(!refused(
            "tcp connect error: Connection refused (os error 111)"
        ));
        assert!(!refused("invalid peer certificate: UnknownIssuer"));
        assert!(is_access_denied(
            "transport error: received fatal alert: AccessDenied"
        ));
        assert!(!is_access_denied("AccessDenied"));
        assert!(!is_access_denied(
            "transport error: received fatal alert: UnknownCA"
        ));
        // An alert name alone is not an alert.
        assert!(!refused("UnknownCA"));
    }

    #[test]
    fn tls_problems_are_recognised() {
        for text in [
            "transport error: received fatal alert: UnknownCA",
            "invalid peer certificate: UnknownIssuer",
            "invalid peer certificate: NotValidForName",
            "tls handshake eof",
        ] {
            assert!(classify_tls_failure(text, false).is_some(), "{text}");
        }
        for text in [
            "connection refused",
            "the hub is not serving assignments yet",
            // A stream that broke is retried quickly, not as a TLS refusal.
            "h2 protocol error: connection reset",
        ] {
            assert!(classify_tls_failure(text, false).is_none(), "{text}");
        }
    }

    #[test]
    fn tls_failures_say_what_to_fix() {
        let classify = |text| classify_tls_failure(text, false);
        assert_eq!(
            classify("invalid peer certificate: NotValidForName"),
            Some(TlsFailure::ServerNameMismatch)
        );
        assert_eq!(
            classify(
                "invalid peer certificate: certificate not valid for name \"x\"; \
                 certificate is only valid for localhost"
            ),
            Some(TlsFailure::ServerNameMismatch)
        );
        assert_eq!(
            classify("invalid peer certificate: UnknownIssuer"),
            Some(TlsFailure::ServerNotFromCa)
        );
        assert_eq!(classify("tls handshake eof"), Some(TlsFailure::Other));
        // A closed connection is a TLS matter only after the handshake.
        assert_eq!(classify("connection closed before message completed"), None);
        assert_eq!(
            classify_tls_failure("connection closed before message completed", true),
            Some(TlsFailure::ClosedAfterHandshake)
        );
        assert_eq!(
            classify_tls_failure("Broken pipe (os error 32)", true),
            Some(TlsFailure::ClosedAfterHandshake)
        );
        // A refusal wins over everything else in the text.
        assert_eq!(
            classify_tls_failure(
                "received fatal alert: BadCertificate: connection reset",
                true
            ),
            Some(TlsFailure::ClientCertificateRefused)
        );
    }

    #[test]
    fn urls_and_hosts() {
        assert_eq!(normalize_hub_url("hub:8443", false), "https://hub:8443");
        assert_eq!(normalize_hub_url("hub:8443", true), "http://hub:8443");
        assert_eq!(normalize_hub_url(" https://h:1 ", true), "https://h:1");
        let host = |url| hub_host(url).ok();
        assert_eq!(
            host("https://hub.example.org:8443").as_deref(),
            Some("hub.example.org")
        );
        assert_eq!(host("https://127.0.0.1:1").as_deref(), Some("127.0.0.1"));
        assert_eq!(host("https://[::1]:8443").as_deref(), Some("::1"));
        assert_eq!(host("not a url"), None);
    }

    #[test]
    fn host_errors_say_why() {
        assert_eq!(
            hub_host("not a url").map_err(|e| e.to_string()),
            Err("invalid uri character".to_string())
        );
        assert!(matches!(hub_host("/only/a/path"), Err(HubUrlError::NoHost)));
    }
}
