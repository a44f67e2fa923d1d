//! The admin commands' connection to the hub's `Admin` gRPC API (`flux-hub status`,
//! `flux-hub burst scale`): the connection flags, dialing the hub with the admin
//! certificate (or the insecure development identity) and the federation's transport
//! settings, the calls, and what each failure means for the user.

use flux_shared::federation::auth::IdentityInterceptor;
use flux_shared::federation::diagnostics::{
    TlsFailure, classify_tls_failure, error_chain, hub_host, normalize_hub_url, status_text,
};
use flux_shared::federation::proto::admin_client::AdminClient;
use flux_shared::federation::proto::{
    ForgetSpokeRequest, ListMiniClustersRequest, ListSpokesRequest, ListSpokesResponse,
    MiniClusterSnapshot, PinSpokeRequest, ScaleBurstRequest, ScaleBurstResponse,
};
use flux_shared::federation::tls::{ClientSecurity, TlsError, TlsPem, TransportSettings};
use flux_shared::federation::tls_flags::TlsFlags;
use flux_shared::federation::{Identity, identity_from_pem};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::commands::admin_context::HubAddress;

/// Admin name sent with --insecure when --admin-name is not given.
pub const DEFAULT_ADMIN_NAME: &str = "admin";

/// How to reach the hub's Admin API: the flags every admin command shares.
#[derive(clap::Args, Debug, Clone)]
pub struct HubOptions {
    /// Which hub.
    #[command(flatten)]
    pub address: HubAddress,
    /// The admin certificate (`flux-hub certs --admin NAME`) and the federation's CA.
    #[command(flatten)]
    pub tls: TlsFlags,
    /// LOCAL DEVELOPMENT ONLY: plaintext, for a hub started with --insecure; the admin
    /// names itself in a request header (--admin-name).
    #[arg(long, conflicts_with_all = ["ca", "cert", "key", "hub_domain"])]
    pub insecure: bool,
    /// With --insecure: the admin name to send (default `admin`).
    #[arg(long, value_name = "NAME", requires = "insecure")]
    pub admin_name: Option<String>,
}

/// `opts` with the hub and the certificates of the admin context it names (or the current
/// one); flags given explicitly win over the context's files.
fn from_context(opts: &HubOptions) -> Result<HubOptions, AdminError> {
    let Some(path) = crate::commands::admin_context::path() else {
        return Err(AdminError::Setup(format!(
            "no --hub, and no admin context file (set {} or HOME): pass --hub, --ca, --cert and --key",
            crate::commands::admin_context::CONFIG_ENV
        )));
    };
    let file = crate::commands::admin_context::load(&path).map_err(AdminError::Setup)?;
    if file.contexts.is_empty() {
        return Err(AdminError::Setup(format!(
            "no --hub, and no admin context in {} (flux-hub init --certs DIR --hub-dns/--hub-ip writes one): pass --hub, --ca, --cert and --key",
            path.display()
        )));
    }
    let context = file
        .pick(opts.address.hub_context.as_deref())
        .map_err(|e| AdminError::Setup(format!("{}: {e}", path.display())))?;
    Ok(HubOptions {
        address: HubAddress {
            hub: Some(context.hub.clone()),
            hub_context: None,
            hub_domain: opts
                .address
                .hub_domain
                .clone()
                .or_else(|| context.hub_domain.clone()),
        },
        tls: TlsFlags {
            ca: opts.tls.ca.clone().or_else(|| Some(context.ca.clone())),
            cert: opts.tls.cert.clone().or_else(|| Some(context.cert.clone())),
            key: opts.tls.key.clone().or_else(|| Some(context.key.clone())),
        },
        insecure: false,
        admin_name: None,
    })
}

/// Why an admin command failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
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
    /// The hub declined what was asked (no such object, a size it will not apply), with
    /// its reason; nothing was changed.
    #[error("the hub declined {call}: {message}")]
    Declined {
        /// The RPC.
        call: &'static str,
        /// The hub's reason.
        message: String,
    },
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

impl AdminError {
    /// Whether `--watch` gives up on this error (rather than reconnecting).
    pub fn is_fatal(&self) -> bool {
        match self {
            AdminError::Setup(_)
            | AdminError::Refused(_)
            | AdminError::Declined { .. }
            | AdminError::Output(_) => true,
            AdminError::Unreachable { .. } => false,
            AdminError::Call { code, .. } => !matches!(
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

/// The `Admin` client, with the insecure mode's identity header when there is one.
pub type Client = AdminClient<InterceptedService<Channel, IdentityInterceptor>>;

/// The hub being dialed, and everything needed to (re)connect to it: its URL, the TLS
/// settings and admin certificate (or the insecure identity), and who we are for messages.
/// (Not a `plan::Target`: that is where the planner puts a burst.)
pub struct HubEndpoint {
    url: String,
    settings: TransportSettings,
    security: ClientSecurity,
    /// Who we are, for messages: the certificate file and its identity, or the admin name.
    caller: String,
    insecure: bool,
}

const ADMIN_HINT: &str = "the hub's Admin API needs an admin client certificate issued by the hub's CA: \
     create one with `flux-hub certs --out DIR --admin NAME` and pass it with --ca, --cert and --key";

impl HubEndpoint {
    /// The hub of `--hub` and how to dial it, from the flags; every mistake in the flags or
    /// the certificate files is reported here, before anything connects.
    pub fn new(opts: &HubOptions) -> Result<HubEndpoint, AdminError> {
        if opts.address.hub.is_none() && !opts.insecure {
            return HubEndpoint::new(&from_context(opts)?);
        }
        let Some(hub) = &opts.address.hub else {
            return Err(AdminError::Setup(
                "--insecure needs --hub (a development hub has no admin context)".into(),
            ));
        };
        let url = normalize_hub_url(hub, opts.insecure);
        if opts.insecure {
            let name = opts.admin_name.as_deref().unwrap_or(DEFAULT_ADMIN_NAME);
            let identity = Identity::admin(name)
                .map_err(|e| AdminError::Setup(format!("--admin-name {name:?}: {e}")))?;
            return Ok(HubEndpoint {
                url,
                settings: TransportSettings::default(),
                caller: format!("{identity} (insecure mode)"),
                security: ClientSecurity::InsecureDevelopment(identity),
                insecure: true,
            });
        }
        let files = opts.tls.files().map_err(|missing| {
            AdminError::Setup(format!(
                "missing {} (or FLUX_CA, FLUX_CERT, FLUX_KEY): the hub requires mutual TLS. \
                 {ADMIN_HINT}. (--insecure is for a development hub started with --insecure.)",
                missing.join(", ")
            ))
        })?;
        let (ca, cert, key) = (&files.ca, &files.cert, &files.key);
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
            AdminError::Setup(format!("{flag}{e}"))
        })?;
        let identity = match identity_from_pem(tls.cert_pem()) {
            Ok(identity) => identity.to_string(),
            Err(e) => format!("no federation identity: {e}"),
        };
        let domain = match &opts.address.hub_domain {
            Some(domain) => domain.clone(),
            None => hub_host(&url).map_err(|_| {
                AdminError::Setup(format!(
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
        })
    }

    /// The hub at `url` (certificate name `domain`), asked with the admin certificate in
    /// `tls` (held in memory: e.g. one issued for a single command).
    pub fn with_tls(url: &str, domain: &str, tls: TlsPem) -> HubEndpoint {
        let identity = match identity_from_pem(tls.cert_pem()) {
            Ok(identity) => identity.to_string(),
            Err(e) => format!("no federation identity: {e}"),
        };
        HubEndpoint {
            url: normalize_hub_url(url, false),
            settings: TransportSettings::default(),
            caller: format!("a certificate issued for this command ({identity})"),
            security: ClientSecurity::Mtls {
                tls,
                domain: domain.to_string(),
            },
            insecure: false,
        }
    }

    /// Dials the hub (TCP and, with mTLS, the handshake).
    pub async fn connect(&self) -> Result<Client, AdminError> {
        let endpoint = self
            .settings
            .endpoint(&self.url, &self.security)
            .map_err(|e| {
                let hint = if self.insecure {
                    "--insecure needs an http:// URL"
                } else {
                    "mTLS needs an https:// URL (--insecure for a plaintext development hub)"
                };
                AdminError::Setup(format!("--hub: {e} ({hint})"))
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
    fn connection_error(&self, cause: String, connected: bool) -> AdminError {
        let failure = classify_tls_failure(&cause, connected);
        if failure == Some(TlsFailure::ClientCertificateRefused) {
            return AdminError::Refused(format!(
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
        AdminError::Unreachable {
            url: self.url.clone(),
            cause: format!("{cause}{hint}"),
        }
    }

    /// What a failed call means: a refusal, a transport failure (see
    /// `connection_error`), or the hub's own error.
    pub fn call_error(&self, call: &'static str, status: &Status) -> AdminError {
        let cause = status_text(status);
        match status.code() {
            Code::Unauthenticated | Code::PermissionDenied => {
                let mode = if self.insecure {
                    " Is the hub running with --insecure? Otherwise use mTLS."
                } else {
                    ""
                };
                AdminError::Refused(format!(
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
            Code::NotFound | Code::InvalidArgument | Code::FailedPrecondition => {
                AdminError::Declined {
                    call,
                    message: status.message().to_string(),
                }
            }
            code => AdminError::Call {
                url: self.url.clone(),
                call,
                code,
                message: cause,
            },
        }
    }

    /// One snapshot of the MiniClusters (of `namespace`, or all for "") and the spokes.
    pub async fn list(
        &self,
        client: &mut Client,
        namespace: &str,
    ) -> Result<(MiniClusterSnapshot, ListSpokesResponse), AdminError> {
        let snapshot = client
            .list_mini_clusters(self.settings.unary_request(ListMiniClustersRequest {
                namespace: namespace.to_string(),
            }))
            .await
            .map_err(|s| self.call_error("ListMiniClusters", &s))?
            .into_inner();
        let spokes = self.spokes(client).await?;
        Ok((snapshot, spokes))
    }

    /// Sets a burst's size (`ScaleBurst`).
    pub async fn scale_burst(
        &self,
        client: &mut Client,
        request: ScaleBurstRequest,
    ) -> Result<ScaleBurstResponse, AdminError> {
        Ok(client
            .scale_burst(self.settings.unary_request(request))
            .await
            .map_err(|s| self.call_error("ScaleBurst", &s))?
            .into_inner())
    }

    /// Forgets a spoke (`ForgetSpoke`).
    pub async fn forget_spoke(&self, client: &mut Client, name: &str) -> Result<(), AdminError> {
        client
            .forget_spoke(self.settings.unary_request(ForgetSpokeRequest {
                name: name.to_string(),
            }))
            .await
            .map_err(|s| self.call_error("ForgetSpoke", &s))?;
        Ok(())
    }

    /// Pins a spoke's certificate (`PinSpoke`); returns the fingerprint it replaced, empty
    /// if none.
    pub async fn pin_spoke(
        &self,
        client: &mut Client,
        name: &str,
        certificate_sha256: &str,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> Result<String, AdminError> {
        Ok(client
            .pin_spoke(self.settings.unary_request(PinSpokeRequest {
                name: name.to_string(),
                certificate_sha256: certificate_sha256.to_string(),
                labels: labels.clone().into_iter().collect(),
                grant_labels: true,
            }))
            .await
            .map_err(|s| self.call_error("PinSpoke", &s))?
            .into_inner()
            .previous_sha256)
    }

    /// Every spoke the hub knows.
    pub async fn spokes(&self, client: &mut Client) -> Result<ListSpokesResponse, AdminError> {
        Ok(client
            .list_spokes(self.settings.unary_request(ListSpokesRequest {}))
            .await
            .map_err(|s| self.call_error("ListSpokes", &s))?
            .into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transient_failures_are_retried_by_watch() {
        let unreachable = AdminError::Unreachable {
            url: "u".into(),
            cause: "c".into(),
        };
        assert!(!unreachable.is_fatal());
        assert!(AdminError::Refused("r".into()).is_fatal());
        let call = |code| AdminError::Call {
            url: "u".into(),
            call: "c",
            code,
            message: "m".into(),
        };
        assert!(!call(Code::Unavailable).is_fatal());
        assert!(call(Code::Unimplemented).is_fatal());
        assert!(call(Code::InvalidArgument).is_fatal());
    }
}
