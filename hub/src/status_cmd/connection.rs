//! The connection of `flux-hub status` to the hub: dialing it with the admin certificate
//! (or the insecure development identity) and the federation's transport settings, the two
//! calls it makes, what each failure means for the user, and reconnecting after a broken
//! `--watch` stream.

use std::time::Duration;

use backon::{ExponentialBackoff, ExponentialBuilder};
use flux_shared::federation::auth::IdentityInterceptor;
use flux_shared::federation::diagnostics::{
    TlsFailure, classify_tls_failure, error_chain, hub_host, normalize_hub_url, status_text,
};
use flux_shared::federation::proto::admin_client::AdminClient;
use flux_shared::federation::proto::{
    ListMiniClustersRequest, ListSpokesRequest, ListSpokesResponse, MiniClusterSnapshot,
};
use flux_shared::federation::tls::{ClientSecurity, TlsError, TlsPem, TransportSettings};
use flux_shared::federation::{Identity, identity_from_pem};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Status};

use super::{DEFAULT_ADMIN_NAME, StatusOptions};

/// Why `flux-hub status` failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// Bad flags or certificate files; nothing was sent.
    #[error("{0}")]
    Setup(String),
    /// The hub could not be reached (TCP, TLS handshake, or the stream broke).
    #[error("cannot reach the hub at {url}: {cause}")]
    Unreachable {
        /// `--hub`.
        url: String,
        /// What went wrong, with its causes.
        cause: String,
    },
    /// The hub refused the caller (its certificate or its identity).
    #[error("{0}")]
    Refused(String),
    /// The hub answered a call with an error.
    #[error("the hub at {url} failed {call}: {code:?}: {message}")]
    Call {
        /// `--hub`.
        url: String,
        /// The RPC.
        call: &'static str,
        /// gRPC status code.
        code: Code,
        /// The hub's message and causes.
        message: String,
    },
    /// Standard output could not be written.
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

impl StatusError {
    /// Whether `--watch` gives up on this error (rather than reconnecting).
    pub(super) fn is_fatal(&self) -> bool {
        match self {
            StatusError::Setup(_) | StatusError::Refused(_) | StatusError::Output(_) => true,
            StatusError::Unreachable { .. } => false,
            StatusError::Call { code, .. } => !matches!(
                code,
                Code::Unavailable
                    | Code::Unknown
                    | Code::Internal
                    | Code::DeadlineExceeded
                    | Code::Cancelled
                    | Code::Aborted
                    | Code::ResourceExhausted
            ),
        }
    }
}

/// First `--watch` reconnect delay.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Largest `--watch` reconnect delay.
const MAX_RETRY: Duration = Duration::from_secs(30);

/// The `--watch` reconnect delays: 1 s, doubling up to 30 s, no jitter (one admin at a
/// terminal, not a fleet), for as long as the failures are transient.
pub(super) fn reconnect_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(FIRST_RETRY)
        .with_factor(2.0)
        .with_max_delay(MAX_RETRY)
        .without_max_times()
}

/// The `Admin` client, with the insecure mode's identity header when there is one.
pub(super) type Client = AdminClient<InterceptedService<Channel, IdentityInterceptor>>;

/// The hub being dialed, and everything needed to (re)connect to it: its URL, the TLS
/// settings and admin certificate (or the insecure identity), who we are for messages,
/// and the namespace the calls select. (Not a `plan::Target`: that is where the planner
/// puts a burst.)
pub(super) struct HubEndpoint {
    url: String,
    settings: TransportSettings,
    security: ClientSecurity,
    /// Who we are, for messages: the certificate file and its identity, or the admin name.
    caller: String,
    insecure: bool,
    pub(super) namespace: String,
}

const ADMIN_HINT: &str = "`flux-hub status` needs an admin client certificate issued by the hub's CA: \
     create one with `flux-hub certs --out DIR --admin NAME` and pass it with --ca, --cert and --key";

impl HubEndpoint {
    /// The hub of `--hub` and how to dial it, from the flags; every mistake in the flags or
    /// the certificate files is reported here, before anything connects.
    pub(super) fn new(opts: &StatusOptions) -> Result<HubEndpoint, StatusError> {
        let url = normalize_hub_url(&opts.hub, opts.insecure);
        let namespace = opts.namespace.clone().unwrap_or_default();
        if opts.insecure {
            let name = opts.admin_name.as_deref().unwrap_or(DEFAULT_ADMIN_NAME);
            let identity = Identity::admin(name)
                .map_err(|e| StatusError::Setup(format!("--admin-name {name:?}: {e}")))?;
            return Ok(HubEndpoint {
                url,
                settings: TransportSettings::default(),
                caller: format!("{identity} (insecure mode)"),
                security: ClientSecurity::InsecureDevelopment(identity),
                insecure: true,
                namespace,
            });
        }
        let (Some(ca), Some(cert), Some(key)) = (&opts.ca, &opts.cert, &opts.key) else {
            let missing: Vec<&str> = [
                ("--ca", opts.ca.is_none()),
                ("--cert", opts.cert.is_none()),
                ("--key", opts.key.is_none()),
            ]
            .into_iter()
            .filter_map(|(flag, missing)| missing.then_some(flag))
            .collect();
            return Err(StatusError::Setup(format!(
                "missing {} (or FLUX_CA, FLUX_CERT, FLUX_KEY): the hub requires mutual TLS. \
                 {ADMIN_HINT}. (--insecure is for a development hub started with --insecure.)",
                missing.join(", ")
            )));
        };
        let tls = TlsPem::from_files(ca, cert, key).map_err(|e| {
            // Name the flag too: the library names only the file.
            let file = match &e {
                TlsError::Read(file, _) | TlsError::Pem(file, _) => file.as_str(),
                _ => "",
            };
            let flag = [
                ("--ca (the CA certificate, PEM)", ca),
                ("--cert (the admin certificate, PEM)", cert),
                ("--key (its private key, PEM)", key),
            ]
            .into_iter()
            .find(|(_, path)| path.display().to_string() == file)
            .map_or(String::new(), |(flag, _)| format!("{flag}: "));
            StatusError::Setup(format!("{flag}{e}"))
        })?;
        let identity = match identity_from_pem(tls.cert_pem()) {
            Ok(identity) => identity.to_string(),
            Err(e) => format!("no federation identity: {e}"),
        };
        let domain = match &opts.hub_domain {
            Some(domain) => domain.clone(),
            None => hub_host(&url).map_err(|_| {
                StatusError::Setup(format!(
                    "--hub {url}: no host in the URL; name the hub's certificate name with --hub-domain"
                ))
            })?,
        };
        Ok(HubEndpoint {
            url,
            settings: TransportSettings::default(),
            caller: format!("the certificate {} ({identity})", cert.display()),
            security: ClientSecurity::Mtls { tls, domain },
            insecure: false,
            namespace,
        })
    }

    /// Dials the hub (TCP and, with mTLS, the handshake).
    pub(super) async fn connect(&self) -> Result<Client, StatusError> {
        let endpoint = self
            .settings
            .endpoint(&self.url, &self.security)
            .map_err(|e| {
                let hint = if self.insecure {
                    "--insecure needs an http:// URL"
                } else {
                    "mTLS needs an https:// URL (--insecure for a plaintext development hub)"
                };
                StatusError::Setup(format!("--hub: {e} ({hint})"))
            })?;
        match endpoint.connect().await {
            Ok(channel) => Ok(
                AdminClient::with_interceptor(channel, self.security.interceptor())
                    .max_decoding_message_size(self.settings.max_decoding_message_size),
            ),
            Err(e) => Err(self.connection_error(error_chain(&e), false)),
        }
    }

    /// A failure before any answer: a refused client certificate, or unreachable.
    /// `connected`: the TLS handshake had completed (the failure came with a call).
    fn connection_error(&self, cause: String, connected: bool) -> StatusError {
        let failure = classify_tls_failure(&cause, connected);
        if failure == Some(TlsFailure::ClientCertificateRefused) {
            return StatusError::Refused(format!(
                "the hub at {} refused {} during the TLS handshake ({cause}). {ADMIN_HINT}",
                self.url, self.caller
            ));
        }
        let hint = match (&self.security, failure) {
            (ClientSecurity::Mtls { domain, .. }, Some(TlsFailure::ServerNameMismatch)) => {
                format!(
                    " (the hub's certificate does not name {domain:?}: set --hub-domain to a \
                     name it carries)"
                )
            }
            (ClientSecurity::Mtls { .. }, Some(TlsFailure::ServerNotFromCa)) => {
                " (the hub's certificate is not issued by the CA of --ca)".to_string()
            }
            // With TLS 1.3 the hub checks the client certificate after the client considers
            // the handshake done, and its alert is often lost: the first call just sees the
            // connection close.
            (ClientSecurity::Mtls { .. }, Some(TlsFailure::ClosedAfterHandshake)) => {
                format!(
                    " (the hub closed the connection right after the TLS handshake: it probably \
                     refused {}, which happens when it was not issued by the hub's CA. \
                     {ADMIN_HINT})",
                    self.caller
                )
            }
            _ => String::new(),
        };
        StatusError::Unreachable {
            url: self.url.clone(),
            cause: format!("{cause}{hint}"),
        }
    }

    /// What a failed call means: a refusal, a transport failure (see
    /// [`HubEndpoint::connection_error`]), or the hub's own error.
    pub(super) fn call_error(&self, call: &'static str, status: &Status) -> StatusError {
        let cause = status_text(status);
        match status.code() {
            Code::Unauthenticated | Code::PermissionDenied => {
                let mode = if self.insecure {
                    " Is the hub running with --insecure? Otherwise use mTLS."
                } else {
                    ""
                };
                StatusError::Refused(format!(
                    "the hub at {} refused {}: {:?}: {}. {ADMIN_HINT}.{mode}",
                    self.url,
                    self.caller,
                    status.code(),
                    status.message()
                ))
            }
            // tonic reports transport failures as Unavailable, Unknown or Cancelled with a
            // source.
            Code::Unavailable | Code::Unknown | Code::Cancelled
                if classify_tls_failure(&cause, true)
                    == Some(TlsFailure::ClientCertificateRefused)
                    || std::error::Error::source(status).is_some() =>
            {
                self.connection_error(cause, true)
            }
            code => StatusError::Call {
                url: self.url.clone(),
                call,
                code,
                message: cause,
            },
        }
    }

    /// One snapshot of the MiniClusters (of the namespace) and the spokes.
    pub(super) async fn list(
        &self,
        client: &mut Client,
    ) -> Result<(MiniClusterSnapshot, ListSpokesResponse), StatusError> {
        let snapshot = client
            .list_mini_clusters(self.settings.unary_request(ListMiniClustersRequest {
                namespace: self.namespace.clone(),
            }))
            .await
            .map_err(|s| self.call_error("ListMiniClusters", &s))?
            .into_inner();
        let spokes = self.spokes(client).await?;
        Ok((snapshot, spokes))
    }

    /// Every spoke the hub knows.
    pub(super) async fn spokes(
        &self,
        client: &mut Client,
    ) -> Result<ListSpokesResponse, StatusError> {
        Ok(client
            .list_spokes(self.settings.unary_request(ListSpokesRequest {}))
            .await
            .map_err(|s| self.call_error("ListSpokes", &s))?
            .into_inner())
    }
}

impl HubEndpoint {
    /// After a broken `--watch` stream (`reason`): waits the next delay of `backoff`, dials
    /// again, and repeats while the failure is transient, saying so on standard error each
    /// time. A fatal failure (refused, bad setup) ends it.
    pub(super) async fn reconnect(
        &self,
        reason: &str,
        backoff: &mut ExponentialBackoff,
    ) -> Result<Client, StatusError> {
        loop {
            // Never `None`: the backoff has no maximum number of attempts.
            let delay = backoff.next().unwrap_or(MAX_RETRY);
            eprintln!(
                "flux-hub status: {reason}; reconnecting in {}s",
                delay.as_secs()
            );
            tokio::time::sleep(delay).await;
            match self.connect().await {
                Ok(client) => return Ok(client),
                Err(e) if e.is_fatal() => return Err(e),
                Err(e) => eprintln!("flux-hub status: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use backon::BackoffBuilder as _;

    #[test]
    fn only_transient_failures_are_retried_by_watch() {
        let unreachable = StatusError::Unreachable {
            url: "u".into(),
            cause: "c".into(),
        };
        assert!(!unreachable.is_fatal());
        assert!(StatusError::Refused("r".into()).is_fatal());
        let call = |code| StatusError::Call {
            url: "u".into(),
            call: "c",
            code,
            message: "m".into(),
        };
        assert!(!call(Code::Unavailable).is_fatal());
        assert!(call(Code::Unimplemented).is_fatal());
        assert!(call(Code::InvalidArgument).is_fatal());
    }

    #[test]
    fn watch_reconnects_after_1s_doubling_up_to_30s_forever() {
        let delays: Vec<u64> = reconnect_backoff()
            .build()
            .take(8)
            .map(|d| d.as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert!(reconnect_backoff().build().nth(10_000).is_some());
    }
}
