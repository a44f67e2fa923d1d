//! Who is calling: the caller's [`Identity`], from its verified client certificate, and the
//! per-call authorization checks of the hub's services.
//!
//! Every handler of the `Spoke` service starts with [`require_spoke`] (or
//! [`Authenticator::require_spoke`]) and uses the name it returns — never anything in the
//! request message — to select what the caller may see. Every `Admin` handler starts with
//! [`require_admin`]. For defence in depth, whole services are wrapped with
//! [`Authenticator::interceptor`] so that a handler added later cannot forget the check;
//! [`TransportSettings::spoke_service`](super::tls::TransportSettings::spoke_service) and
//! [`admin_service`](super::tls::TransportSettings::admin_service) do that (and set the
//! message size limits):
//!
//! ```no_run
//! # use flux_shared::federation::{proto, tls::{ServerSecurity, TransportSettings}};
//! # fn demo<S: proto::spoke_server::Spoke + Clone, A: proto::admin_server::Admin>(
//! #     hub: S, admin: A, security: ServerSecurity) -> Result<(), Box<dyn std::error::Error>> {
//! let settings = TransportSettings::default();
//! let auth = security.authenticator();
//! let router = settings
//!     .server(&security)?
//!     .add_service(settings.spoke_service(hub, auth))
//!     .add_service(settings.admin_service(admin, auth));
//! # let _ = router; Ok(()) }
//! ```
//!
//! Status codes: no client certificate, or one without an identity, is `UNAUTHENTICATED`;
//! a valid identity of the wrong kind (a spoke calling `Admin`, an admin calling `Spoke`)
//! is `PERMISSION_DENIED`. Clients must not retry either.

use rustls_pki_types::CertificateDer;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::{Request, Status};

use super::pki::{Identity, IdentityKind, identity_from_der};

/// Request header naming a spoke in insecure development mode (value: the spoke name).
pub const SPOKE_HEADER: &str = "x-flux-spoke";

/// Request header naming an admin in insecure development mode (value: the admin name).
pub const ADMIN_HEADER: &str = "x-flux-admin";

/// How the hub learns who is calling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Authenticator {
    /// From the verified client certificate only (the TLS layer has checked it against the
    /// CA). Request headers are ignored. The default.
    #[default]
    Mtls,
    /// LOCAL DEVELOPMENT ONLY, for a plaintext hub started with an explicit `--insecure`
    /// flag. A client certificate still wins if there is one; otherwise the caller names
    /// itself with exactly one of the headers [`SPOKE_HEADER`] or [`ADMIN_HEADER`]. Nothing
    /// checks that claim: anyone who can reach the port can act as any spoke or admin.
    InsecureDevelopment,
}

impl Authenticator {
    /// The caller's identity.
    pub fn identify<T>(&self, request: &Request<T>) -> Result<Identity, Status> {
        let certs = request.peer_certs();
        self.identify_parts(certs.as_deref().map(Vec::as_slice), request.metadata())
    }

    /// The caller's identity from its verified certificate chain (end-entity first, as
    /// rustls reports it) and the request metadata. For servers that terminate TLS
    /// themselves (for example to rotate certificates) and so cannot use
    /// [`Request::peer_certs`].
    pub fn identify_parts(
        &self,
        peer_certs: Option<&[CertificateDer<'_>]>,
        metadata: &MetadataMap,
    ) -> Result<Identity, Status> {
        if let Some(leaf) = peer_certs.and_then(<[_]>::first) {
            return identity_from_der(leaf)
                .map_err(|e| Status::unauthenticated(format!("client certificate: {e}")));
        }
        match self {
            Authenticator::Mtls => Err(Status::unauthenticated(
                "a client certificate issued by the federation CA is required",
            )),
            Authenticator::InsecureDevelopment => header_identity(metadata),
        }
    }

    /// The caller's identity, which must be of `kind`.
    pub fn require<T>(&self, request: &Request<T>, kind: IdentityKind) -> Result<Identity, Status> {
        let identity = self.identify(request)?;
        if identity.kind() == kind {
            Ok(identity)
        } else {
            Err(Status::permission_denied(format!(
                "this method is for {kind} clients; the caller is {identity}"
            )))
        }
    }

    /// The calling spoke's name. `UNAUTHENTICATED` without an identity, `PERMISSION_DENIED`
    /// for an admin.
    pub fn require_spoke<T>(&self, request: &Request<T>) -> Result<String, Status> {
        match self.require(request, IdentityKind::Spoke)? {
            Identity::Spoke(name) | Identity::Admin(name) => Ok(name),
        }
    }

    /// The calling admin's name. `UNAUTHENTICATED` without an identity, `PERMISSION_DENIED`
    /// for a spoke.
    pub fn require_admin<T>(&self, request: &Request<T>) -> Result<String, Status> {
        match self.require(request, IdentityKind::Admin)? {
            Identity::Spoke(name) | Identity::Admin(name) => Ok(name),
        }
    }

    /// A tonic interceptor for a whole service: refuses every call whose caller is not of
    /// `kind` before any handler runs, and stores the caller's [`Identity`] in the request
    /// extensions. Use with the generated `XxxServer::with_interceptor`.
    pub fn interceptor(
        self,
        kind: IdentityKind,
    ) -> impl FnMut(Request<()>) -> Result<Request<()>, Status> + Clone + Send + Sync + 'static
    {
        move |mut request: Request<()>| {
            let identity = self.require(&request, kind)?;
            request.extensions_mut().insert(identity);
            Ok(request)
        }
    }
}

/// The caller's spoke name, from its client certificate ([`Authenticator::Mtls`]).
pub fn require_spoke<T>(request: &Request<T>) -> Result<String, Status> {
    Authenticator::Mtls.require_spoke(request)
}

/// The caller's admin name, from its client certificate ([`Authenticator::Mtls`]).
pub fn require_admin<T>(request: &Request<T>) -> Result<String, Status> {
    Authenticator::Mtls.require_admin(request)
}

fn header_identity(metadata: &MetadataMap) -> Result<Identity, Status> {
    let header = |name: &str| -> Result<Option<String>, Status> {
        match metadata.get(name) {
            None => Ok(None),
            Some(value) => value
                .to_str()
                .map(|s| Some(s.to_string()))
                .map_err(|_| Status::unauthenticated(format!("{name}: not ASCII"))),
        }
    };
    let bad = |e: super::pki::IdentityError| Status::unauthenticated(e.to_string());
    match (header(SPOKE_HEADER)?, header(ADMIN_HEADER)?) {
        (Some(spoke), None) => Identity::spoke(&spoke).map_err(bad),
        (None, Some(admin)) => Identity::admin(&admin).map_err(bad),
        (Some(_), Some(_)) => Err(Status::unauthenticated(format!(
            "insecure development mode: send {SPOKE_HEADER} or {ADMIN_HEADER}, not both"
        ))),
        (None, None) => Err(Status::unauthenticated(format!(
            "insecure development mode: name the caller with the {SPOKE_HEADER} or \
             {ADMIN_HEADER} header"
        ))),
    }
}

/// Client-side interceptor that attaches this build's protocol revision
/// ([`super::protocol::REVISION_HEADER`]) and, in insecure development, the identity header
/// (mTLS clients are named by their certificate). Use with the generated `XxxClient::with_interceptor`; build
/// it with [`super::tls::ClientSecurity::interceptor`].
#[derive(Clone, Debug, Default)]
pub struct IdentityInterceptor {
    header: Option<(&'static str, AsciiMetadataValue)>,
}

impl IdentityInterceptor {
    /// Adds nothing: the client certificate identifies the caller.
    pub fn none() -> IdentityInterceptor {
        IdentityInterceptor { header: None }
    }

    /// LOCAL DEVELOPMENT ONLY: names the caller in [`SPOKE_HEADER`] / [`ADMIN_HEADER`].
    /// Only a hub using [`Authenticator::InsecureDevelopment`] believes it.
    pub fn insecure_development(identity: &Identity) -> IdentityInterceptor {
        let name = match identity.kind() {
            IdentityKind::Spoke => SPOKE_HEADER,
            IdentityKind::Admin => ADMIN_HEADER,
        };
        // A name that is not a valid header value cannot be a valid identity either; send
        // nothing and let the hub refuse the call.
        let header = identity.name().parse().ok().map(|value| (name, value));
        IdentityInterceptor { header }
    }
}

impl tonic::service::Interceptor for IdentityInterceptor {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        // Every call says which protocol revision it speaks (super::protocol).
        request.metadata_mut().insert(
            super::protocol::REVISION_HEADER,
            super::protocol::revision_value(),
        );
        if let Some((name, value)) = &self.header {
            request.metadata_mut().insert(*name, value.clone());
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::federation::pki::Ca;

    fn request_with(headers: &[(&'static str, &str)]) -> Request<()> {
        let mut request = Request::new(());
        for (name, value) in headers {
            request.metadata_mut().insert(*name, value.parse().unwrap());
        }
        request
    }

    #[test]
    fn mtls_ignores_headers() {
        let request = request_with(&[(SPOKE_HEADER, "a"), (ADMIN_HEADER, "b")]);
        let err = Authenticator::Mtls.identify(&request).unwrap_err();
        assert_eq!(err.code(), tonic::Code::Unauthenticated);
        assert_eq!(
            require_spoke(&request).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(Authenticator::default(), Authenticator::Mtls);
    }

    #[test]
    fn insecure_mode_reads_exactly_one_header() {
        let auth = Authenticator::InsecureDevelopment;
        let spoke = request_with(&[(SPOKE_HEADER, "a")]);
        assert_eq!(auth.require_spoke(&spoke).unwrap(), "a");
        assert_eq!(
            auth.require_admin(&spoke).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
        let admin = request_with(&[(ADMIN_HEADER, "ops")]);
        assert_eq!(auth.require_admin(&admin).unwrap(), "ops");
        for bad in [
            request_with(&[]),
            request_with(&[(SPOKE_HEADER, "a"), (ADMIN_HEADER, "b")]),
            request_with(&[(SPOKE_HEADER, "Not_A_Label")]),
            request_with(&[(SPOKE_HEADER, "")]),
        ] {
            assert_eq!(
                auth.identify(&bad).unwrap_err().code(),
                tonic::Code::Unauthenticated
            );
        }
    }

    #[test]
    fn certificates_win_over_headers_and_must_carry_an_identity() {
        let ca = Ca::generate("t").unwrap();
        let spoke = ca.issue_client(&Identity::Spoke("a".into()), 1).unwrap();
        let hub = ca.issue_server(&["hub".into()], &[], 1).unwrap();
        let metadata = request_with(&[(SPOKE_HEADER, "b")]).into_parts().0;
        for auth in [Authenticator::Mtls, Authenticator::InsecureDevelopment] {
            let certs = [CertificateDer::from(spoke.cert_der.clone())];
            assert_eq!(
                auth.identify_parts(Some(&certs), &metadata).unwrap(),
                Identity::Spoke("a".into())
            );
            let certs = [CertificateDer::from(hub.cert_der.clone())];
            assert_eq!(
                auth.identify_parts(Some(&certs), &metadata)
                    .unwrap_err()
                    .code(),
                tonic::Code::Unauthenticated
            );
        }
    }

    #[test]
    fn interceptor_checks_the_kind_and_records_the_identity() {
        let mut spoke_only = Authenticator::InsecureDevelopment.interceptor(IdentityKind::Spoke);
        let passed = spoke_only(request_with(&[(SPOKE_HEADER, "a")])).unwrap();
        assert_eq!(
            passed.extensions().get::<Identity>(),
            Some(&Identity::Spoke("a".into()))
        );
        assert_eq!(
            spoke_only(request_with(&[(ADMIN_HEADER, "a")]))
                .unwrap_err()
                .code(),
            tonic::Code::PermissionDenied
        );
    }

    #[test]
    fn client_interceptor_sets_the_header_only_in_insecure_mode() {
        use tonic::service::Interceptor;
        let mut none = IdentityInterceptor::none();
        let request = none.call(Request::new(())).unwrap();
        assert!(request.metadata().get(SPOKE_HEADER).is_none());
        assert!(request.metadata().get(ADMIN_HEADER).is_none());
        assert_eq!(
            super::super::protocol::peer_revision(request.metadata()),
            Ok(super::super::protocol::REVISION)
        );
        let mut dev = IdentityInterceptor::insecure_development(&Identity::Admin("ops".into()));
        let request = dev.call(Request::new(())).unwrap();
        assert_eq!(request.metadata().get(ADMIN_HEADER).unwrap(), "ops");
        assert!(request.metadata().get(SPOKE_HEADER).is_none());
    }
}
