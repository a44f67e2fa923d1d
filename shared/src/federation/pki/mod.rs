//! Certificates of the federation: a private CA, the hub's server certificate and client
//! certificates for spokes and admins.
//!
//! # Identity scheme
//!
//! A client certificate names its holder in exactly one URI subject alternative name, a
//! [SPIFFE ID](https://github.com/spiffe/spiffe/blob/main/standards/SPIFFE-ID.md) in the
//! trust domain [`TRUST_DOMAIN`]:
//!
//! | holder | URI SAN |
//! |---|---|
//! | spoke controller of cluster `<name>` | `spiffe://flux-framework.org/spoke/<name>` |
//! | admin client `<name>` | `spiffe://flux-framework.org/admin/<name>` |
//!
//! `<name>` is a DNS-1123 label (lowercase letters, digits and `-`, at most 63
//! characters); a spoke's name is the cluster name that MiniClusters' bursts refer to.
//! The subject common name is informational only and never used for authorization. As
//! in SPIFFE's X.509-SVID rules, a certificate with no `spiffe:` URI, or with more than
//! one (for example both a spoke and an admin identity), carries no identity and is
//! refused; URIs with other schemes are ignored. Client certificates have the
//! `clientAuth` extended key usage only, so one cannot serve as the hub's certificate;
//! the hub's certificate has `serverAuth` only, so it cannot be used to call the hub.
//!
//! All keys are ECDSA P-256 in PKCS#8 PEM.
//!
//! # The federation's identity and a renewed CA
//!
//! A federation is identified by a digest of its first CA's certificate
//! ([`federation_of_ca_der`]), as spokes of every release compute it. A renewed CA
//! ([`renewal`]) names its predecessor's identity in a URI SAN
//! (`urn:flux-framework.org:federation:<32 hex digits>`, [`federation_of_der`]), so that
//! spokes keep recognising the objects they made while the federation's trust moves to the
//! new CA.
//!
//! Size: about 260 of its lines are the tests.

pub mod renewal;

use std::fmt;
use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use time::OffsetDateTime;
use x509_parser::extensions::GeneralName;

use crate::validate::is_dns_label;

/// The SPIFFE trust domain of client identities.
pub const TRUST_DOMAIN: &str = "flux-framework.org";

/// Default lifetime of the CA certificate, in days (10 years).
pub const DEFAULT_CA_VALIDITY_DAYS: u32 = 3650;

/// Default lifetime of server and client certificates, in days (1 year).
pub const DEFAULT_LEAF_VALIDITY_DAYS: u32 = 365;

/// Longest lifetime accepted for any certificate, in days (100 years).
pub const MAX_VALIDITY_DAYS: u32 = 36_500;

/// Certificates start being valid this long before they are issued, so that a peer
/// whose clock is slightly behind accepts them.
const BACKDATE: time::Duration = time::Duration::minutes(5);

/// Who holds a client certificate.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Identity {
    /// The spoke controller of the burst cluster with this name.
    Spoke(String),
    /// An admin client with this name.
    Admin(String),
}

impl Identity {
    /// A spoke identity, checking that `name` is a DNS-1123 label.
    pub fn spoke(name: &str) -> Result<Identity, IdentityError> {
        check_name(IdentityKind::Spoke, name)?;
        Ok(Identity::Spoke(name.to_string()))
    }

    /// An admin identity, checking that `name` is a DNS-1123 label.
    pub fn admin(name: &str) -> Result<Identity, IdentityError> {
        check_name(IdentityKind::Admin, name)?;
        Ok(Identity::Admin(name.to_string()))
    }

    /// The holder's name.
    pub fn name(&self) -> &str {
        match self {
            Identity::Spoke(name) | Identity::Admin(name) => name,
        }
    }

    /// Spoke or admin.
    pub fn kind(&self) -> IdentityKind {
        match self {
            Identity::Spoke(_) => IdentityKind::Spoke,
            Identity::Admin(_) => IdentityKind::Admin,
        }
    }

    /// The SPIFFE ID that encodes this identity in a certificate's URI SAN.
    pub fn spiffe_id(&self) -> String {
        format!("spiffe://{TRUST_DOMAIN}/{}/{}", self.kind(), self.name())
    }

    /// Parses a SPIFFE ID of this scheme (exact form, lowercase, no trailing slash, query
    /// or fragment).
    pub fn from_spiffe_id(uri: &str) -> Result<Identity, IdentityError> {
        let invalid = |reason: &'static str| IdentityError::InvalidUri {
            uri: uri.to_string(),
            reason,
        };
        let rest = uri
            .strip_prefix("spiffe://")
            .ok_or_else(|| invalid("the scheme is not `spiffe`"))?;
        let path = rest
            .strip_prefix(TRUST_DOMAIN)
            .and_then(|p| p.strip_prefix('/'))
            .ok_or_else(|| invalid("the trust domain is not flux-framework.org"))?;
        let (kind, name) = path
            .split_once('/')
            .ok_or_else(|| invalid("the path is not /spoke/<name> or /admin/<name>"))?;
        match kind {
            "spoke" => Identity::spoke(name),
            "admin" => Identity::admin(name),
            _ => Err(invalid("the path is not /spoke/<name> or /admin/<name>")),
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.kind(), self.name())
    }
}

/// The two kinds of client identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IdentityKind {
    /// A spoke controller: may call only the `Spoke` service.
    Spoke,
    /// An admin client: may call only the `Admin` service.
    Admin,
}

impl IdentityKind {
    /// `"spoke"` or `"admin"`: the first segment of the SPIFFE ID's path.
    pub fn as_str(self) -> &'static str {
        match self {
            IdentityKind::Spoke => "spoke",
            IdentityKind::Admin => "admin",
        }
    }
}

impl fmt::Display for IdentityKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn check_name(kind: IdentityKind, name: &str) -> Result<(), IdentityError> {
    if is_dns_label(name) {
        Ok(())
    } else {
        Err(IdentityError::InvalidName {
            kind,
            name: name.to_string(),
        })
    }
}

/// Why a certificate or a name does not yield an [`Identity`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The bytes are not a DER X.509 certificate.
    #[error("not a valid X.509 certificate: {0}")]
    Certificate(String),
    /// No `spiffe:` URI SAN.
    #[error(
        "the certificate carries no identity (a URI SAN spiffe://{TRUST_DOMAIN}/spoke/<name> \
         or spiffe://{TRUST_DOMAIN}/admin/<name>)"
    )]
    Missing,
    /// More than one `spiffe:` URI SAN.
    #[error("the certificate carries {0} SPIFFE IDs; exactly one is allowed")]
    Ambiguous(usize),
    /// A `spiffe:` URI that is not of this scheme.
    #[error("{uri:?} is not a flux-federation identity: {reason}")]
    InvalidUri {
        /// The offending URI.
        uri: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The name is not a DNS-1123 label.
    #[error(
        "{name:?} is not a valid {kind} name: it must be a DNS-1123 label (lowercase letters, \
         digits and '-', starting and ending with a letter or digit, at most 63 characters)"
    )]
    InvalidName {
        /// Spoke or admin.
        kind: IdentityKind,
        /// The offending name.
        name: String,
    },
}

/// The identity in a DER client certificate (see the [module docs](self) for the scheme).
///
/// This only reads the certificate: it does not verify its signature, validity period or
/// key usage. Call it on certificates the TLS layer has already verified against the CA.
pub fn identity_from_der(cert_der: &[u8]) -> Result<Identity, IdentityError> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert_der)
        .map_err(|e| IdentityError::Certificate(e.to_string()))?;
    let sans = cert
        .subject_alternative_name()
        .map_err(|e| IdentityError::Certificate(format!("subject alternative names: {e}")))?;
    let spiffe_ids: Vec<&str> = sans
        .iter()
        .flat_map(|ext| ext.value.general_names.iter())
        .filter_map(|name| match name {
            GeneralName::URI(uri) => Some(*uri),
            _ => None,
        })
        .filter(|uri| {
            uri.get(..7)
                .is_some_and(|scheme| scheme.eq_ignore_ascii_case("spiffe:"))
        })
        .collect();
    match spiffe_ids.as_slice() {
        [] => Err(IdentityError::Missing),
        [uri] => Identity::from_spiffe_id(uri),
        many => Err(IdentityError::Ambiguous(many.len())),
    }
}

/// When a DER certificate stops being valid (its `notAfter`), Unix seconds; `None` when
/// it does not parse.
pub fn not_after_unix(cert_der: &[u8]) -> Option<i64> {
    use x509_parser::prelude::FromDer as _;
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(cert_der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

/// The earliest [`not_after_unix`] of the certificates of a PEM text (the first of several
/// CAs to expire); `None` when none parses.
pub fn earliest_not_after_of_pem(certs_pem: &str) -> Option<i64> {
    CertificateDer::pem_slice_iter(certs_pem.as_bytes())
        .filter_map(Result::ok)
        .filter_map(|der| not_after_unix(&der))
        .min()
}

/// [`not_after_unix`] of the first certificate of a PEM text.
pub fn not_after_of_pem(cert_pem: &str) -> Option<i64> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes()).ok()?;
    not_after_unix(&pem.contents)
}

/// The identity in the first certificate of a PEM string (see [`identity_from_der`]).
pub fn identity_from_pem(cert_pem: &str) -> Result<Identity, IdentityError> {
    let der = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .next()
        .ok_or_else(|| IdentityError::Certificate("no CERTIFICATE block".to_string()))?
        .map_err(|e| IdentityError::Certificate(e.to_string()))?;
    identity_from_der(&der)
}

/// Errors issuing certificates.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// Key or certificate generation failed.
    #[error("generating a certificate: {0}")]
    Generate(String),
    /// The CA certificate PEM holds no parsable certificate.
    #[error("the CA certificate does not parse: {0}")]
    CaCertificate(String),
    /// The CA key PEM holds no parsable PKCS#8 key.
    #[error("the CA key does not parse (a PKCS#8 PEM key is expected): {0}")]
    CaKey(String),
    /// The CA certificate lacks `basicConstraints cA:TRUE`.
    #[error("the CA certificate is not a CA certificate (basicConstraints cA is not set)")]
    NotACa,
    /// The CA key is not the key of the CA certificate.
    #[error("the CA key does not belong to the CA certificate")]
    KeyMismatch,
    /// The CA certificate has expired.
    #[error("the CA certificate expired at {0}")]
    CaExpired(OffsetDateTime),
    /// A server certificate request named no DNS name and no IP address.
    #[error("a server certificate needs at least one DNS name or IP address")]
    NoServerNames,
    /// A server DNS name is not a lowercase DNS-1123 subdomain.
    #[error("{0:?} is not a valid DNS name (lowercase DNS-1123 subdomain)")]
    InvalidDnsName(String),
    /// A lifetime of 0 days or more than [`MAX_VALIDITY_DAYS`].
    #[error("a certificate lifetime must be 1 to {MAX_VALIDITY_DAYS} days, not {0}")]
    InvalidValidity(u32),
    /// A client identity's name is invalid.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// A certificate to issue again does not say what to issue.
    #[error("the certificate to issue again: {0}")]
    Reissue(String),
}

fn generate_error(e: rcgen::Error) -> PkiError {
    PkiError::Generate(e.to_string())
}

/// A certificate and its private key, in PEM.
#[derive(Clone)]
pub struct IssuedCert {
    /// The certificate, PEM (`CERTIFICATE`).
    pub cert_pem: String,
    /// Its private key, PEM (`PRIVATE KEY`, PKCS#8). Secret.
    pub key_pem: String,
    /// The certificate, DER.
    pub cert_der: Vec<u8>,
}

impl fmt::Debug for IssuedCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedCert")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// A certificate authority that issues the federation's certificates.
pub struct Ca {
    cert_pem: String,
    cert_der: Vec<u8>,
    not_after: OffsetDateTime,
    issuer: Issuer<'static, KeyPair>,
    /// Certificates appended to every certificate it issues: while a renewal is under way,
    /// its certificate signed by the previous CA, so that peers still trusting only the
    /// previous CA accept what it issues.
    chain_pem: String,
}

impl fmt::Debug for Ca {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ca")
            .field("cert_pem", &self.cert_pem)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl Ca {
    /// A new self-signed CA with subject `CN=<common_name>`, valid for
    /// [`DEFAULT_CA_VALIDITY_DAYS`].
    pub fn generate(common_name: &str) -> Result<Ca, PkiError> {
        Ca::generate_with_validity(common_name, DEFAULT_CA_VALIDITY_DAYS)
    }

    /// A new self-signed CA valid for `days` days. It may sign only end-entity
    /// certificates (path length 0).
    pub fn generate_with_validity(common_name: &str, days: u32) -> Result<Ca, PkiError> {
        // No federation named: a new federation is known by this certificate's digest.
        let params = ca_params(common_name, days, None)?;
        let not_after = params.not_after;
        let key = KeyPair::generate().map_err(generate_error)?;
        let cert = params.self_signed(&key).map_err(generate_error)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
            not_after,
            issuer: Issuer::new(params, key),
            chain_pem: String::new(),
        })
    }

    /// Loads an existing CA (for example `ca.crt` and `ca.key` written earlier) to issue
    /// more certificates. `cert_pem` holds the CA's certificate, alone or among the other
    /// CAs the federation trusts (while a renewal is under way): the one whose public key is
    /// `key_pem`'s (a PKCS#8 private key) is the CA. Its certificate is kept byte for byte.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Ca, PkiError> {
        let key = KeyPair::from_pem(key_pem).map_err(|e| PkiError::CaKey(e.to_string()))?;
        let blocks = certificate_blocks(cert_pem);
        if blocks.is_empty() {
            return Err(PkiError::CaCertificate("no CERTIFICATE block".to_string()));
        }
        for block in &blocks {
            let der = CertificateDer::from_pem_slice(block.as_bytes())
                .map_err(|e| PkiError::CaCertificate(e.to_string()))?;
            let (_, cert) = x509_parser::parse_x509_certificate(&der)
                .map_err(|e| PkiError::CaCertificate(e.to_string()))?;
            if cert.public_key().subject_public_key.data.as_ref() == key.public_key_raw() {
                if !cert.is_ca() {
                    return Err(PkiError::NotACa);
                }
                let not_after = cert.validity().not_after.to_datetime();
                if not_after <= OffsetDateTime::now_utc() {
                    return Err(PkiError::CaExpired(not_after));
                }
                let cert_der = der.to_vec();
                let issuer = Issuer::from_ca_cert_der(&der, key)
                    .map_err(|e| PkiError::CaCertificate(e.to_string()))?;
                return Ok(Ca {
                    cert_pem: (*block).to_string(),
                    cert_der,
                    not_after,
                    issuer,
                    chain_pem: String::new(),
                });
            }
        }
        Err(PkiError::KeyMismatch)
    }

    /// This CA, appending `chain_pem` (certificates, PEM) to every certificate it issues:
    /// the CA's certificate cross-signed by its predecessor ([`renewal`]) while peers may
    /// still trust only the predecessor. Empty: nothing appended.
    pub fn with_chain(mut self, chain_pem: &str) -> Ca {
        self.chain_pem = chain_pem.to_string();
        self
    }

    /// The CA certificate, PEM: what servers and clients trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The identity of the federation this CA serves ([`federation_of_der`], or the digest
    /// of a CA made before CAs carried one).
    pub fn federation(&self) -> String {
        federation_of_ca_der(&self.cert_der)
    }

    /// The key identifier of the CA's public key: the `authorityKeyIdentifier` of what it
    /// issues ([`issuer_key_id_of_pem`]), lowercase hex.
    pub fn key_id(&self) -> Option<String> {
        subject_key_id(&self.cert_der)
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The CA's private key, PEM (PKCS#8). Secret: whoever holds it can mint identities.
    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// When the CA certificate expires. Certificates it issues never outlive it.
    pub fn not_after(&self) -> OffsetDateTime {
        self.not_after
    }

    /// Issues the hub's server certificate for these DNS names and IP addresses (at least
    /// one in all), valid for `days` days (`serverAuth` only).
    pub fn issue_server(
        &self,
        dns_names: &[String],
        ips: &[IpAddr],
        days: u32,
    ) -> Result<IssuedCert, PkiError> {
        if dns_names.is_empty() && ips.is_empty() {
            return Err(PkiError::NoServerNames);
        }
        let mut sans = Vec::with_capacity(dns_names.len() + ips.len());
        for name in dns_names {
            if !is_dns_subdomain(name) {
                return Err(PkiError::InvalidDnsName(name.clone()));
            }
            let ia5 = name
                .clone()
                .try_into()
                .map_err(|_| PkiError::InvalidDnsName(name.clone()))?;
            sans.push(SanType::DnsName(ia5));
        }
        sans.extend(ips.iter().copied().map(SanType::IpAddress));
        let common_name = dns_names
            .first()
            .cloned()
            .or_else(|| ips.first().map(IpAddr::to_string))
            .unwrap_or_default();
        self.issue(
            &common_name,
            sans,
            ExtendedKeyUsagePurpose::ServerAuth,
            days,
        )
    }

    /// Issues a client certificate for `identity`, valid for `days` days (`clientAuth`
    /// only). Its subject is `CN=<kind>/<name>`; the identity is in its URI SAN.
    pub fn issue_client(&self, identity: &Identity, days: u32) -> Result<IssuedCert, PkiError> {
        // Re-check: the variants can be built without the checking constructors.
        check_name(identity.kind(), identity.name())?;
        let uri = identity
            .spiffe_id()
            .try_into()
            .map_err(|e: rcgen::Error| PkiError::Generate(e.to_string()))?;
        self.issue(
            &format!("{}/{}", identity.kind(), identity.name()),
            vec![SanType::URI(uri)],
            ExtendedKeyUsagePurpose::ClientAuth,
            days,
        )
    }

    /// Issues an admin client certificate for `name` carrying `scope` in URI SANs
    /// ([`super::scope`]), valid for `days` days.
    pub fn issue_admin(
        &self,
        name: &str,
        scope: &super::scope::AdminScope,
        days: u32,
    ) -> Result<IssuedCert, PkiError> {
        let identity = Identity::admin(name)?;
        let uri = |u: String| {
            u.try_into()
                .map(SanType::URI)
                .map_err(|e: rcgen::Error| PkiError::Generate(e.to_string()))
        };
        let mut sans = vec![uri(identity.spiffe_id())?];
        for u in scope.uris() {
            sans.push(uri(u)?);
        }
        self.issue(
            &format!("admin/{name}"),
            sans,
            ExtendedKeyUsagePurpose::ClientAuth,
            days,
        )
    }

    fn issue(
        &self,
        common_name: &str,
        sans: Vec<SanType>,
        usage: ExtendedKeyUsagePurpose,
        days: u32,
    ) -> Result<IssuedCert, PkiError> {
        let (not_before, not_after) = validity(days)?;
        if self.not_after <= OffsetDateTime::now_utc() {
            return Err(PkiError::CaExpired(self.not_after));
        }
        let mut params = CertificateParams::default();
        params.distinguished_name = distinguished_name(common_name);
        params.subject_alt_names = sans;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        params.use_authority_key_identifier_extension = true;
        params.not_before = not_before;
        params.not_after = not_after.min(self.not_after);
        let key = KeyPair::generate().map_err(generate_error)?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(generate_error)?;
        Ok(IssuedCert {
            cert_pem: format!("{}{}", cert.pem(), self.chain_pem),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().to_vec(),
        })
    }
}

/// The parameters of a CA certificate naming the federation `federation` (a renewed CA;
/// `None`: a new federation's), valid `days` days from now. It may sign only end-entity
/// certificates (path length 0).
fn ca_params(
    common_name: &str,
    days: u32,
    federation: Option<&str>,
) -> Result<CertificateParams, PkiError> {
    let (not_before, not_after) = validity(days)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = distinguished_name(common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    if let Some(federation) = federation {
        let urn = format!("{FEDERATION_URN_PREFIX}{federation}")
            .try_into()
            .map_err(|e: rcgen::Error| PkiError::Generate(e.to_string()))?;
        params.subject_alt_names = vec![SanType::URI(urn)];
    }
    params.not_before = not_before;
    params.not_after = not_after;
    Ok(params)
}

/// Prefix of the URI SAN naming the federation on its CA certificates.
pub const FEDERATION_URN_PREFIX: &str = "urn:flux-framework.org:federation:";

/// The federation a CA certificate (DER) names in its URI SAN
/// (`urn:flux-framework.org:federation:<id>`, `<id>` 32 lowercase hex digits); `None` when
/// it names none (or does not parse).
pub fn federation_of_der(cert_der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert_der).ok()?;
    let sans = cert.subject_alternative_name().ok()??;
    sans.value.general_names.iter().find_map(|name| match name {
        GeneralName::URI(uri) => uri
            .strip_prefix(FEDERATION_URN_PREFIX)
            .filter(|id| {
                id.len() == 32
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            })
            .map(str::to_string),
        _ => None,
    })
}

/// The federation of a CA certificate (DER): the one it names ([`federation_of_der`]), or
/// else the first 128 bits of the SHA-256 of the certificate, lowercase hex (how a CA made
/// before CAs named their federation is known; 32 characters, a valid label value).
pub fn federation_of_ca_der(cert_der: &[u8]) -> String {
    federation_of_der(cert_der).unwrap_or_else(|| {
        hex(&ring::digest::digest(&ring::digest::SHA256, cert_der).as_ref()[..16])
    })
}

/// The `authorityKeyIdentifier` (lowercase hex) of the first certificate of a PEM text:
/// which CA key issued it ([`Ca::key_id`]). `None` when it has none or does not parse.
pub fn issuer_key_id_of_pem(cert_pem: &str) -> Option<String> {
    let der = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .next()?
        .ok()?;
    issuer_key_id(&der)
}

/// The `authorityKeyIdentifier` (lowercase hex) of a DER certificate.
pub fn issuer_key_id(cert_der: &[u8]) -> Option<String> {
    use x509_parser::extensions::ParsedExtension;
    let (_, cert) = x509_parser::parse_x509_certificate(cert_der).ok()?;
    cert.extensions()
        .iter()
        .find_map(|ext| match ext.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(aki) => {
                aki.key_identifier.as_ref().map(|id| hex(id.0))
            }
            _ => None,
        })
}

/// The `subjectKeyIdentifier` (lowercase hex) of every certificate of a PEM text, in order
/// (certificates without one are skipped).
pub fn key_ids_of_pem(certs_pem: &str) -> Vec<String> {
    CertificateDer::pem_slice_iter(certs_pem.as_bytes())
        .filter_map(Result::ok)
        .filter_map(|der| subject_key_id(&der))
        .collect()
}

/// The `subjectKeyIdentifier` of a DER certificate, lowercase hex.
fn subject_key_id(cert_der: &[u8]) -> Option<String> {
    use x509_parser::extensions::ParsedExtension;
    let (_, cert) = x509_parser::parse_x509_certificate(cert_der).ok()?;
    cert.extensions()
        .iter()
        .find_map(|ext| match ext.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(id) => Some(hex(id.0)),
            _ => None,
        })
}

/// The `-----BEGIN CERTIFICATE-----` … `-----END CERTIFICATE-----` blocks of a PEM text,
/// each with its line end, byte for byte (so that a certificate picked from a bundle is
/// written back unchanged).
pub fn certificate_blocks(pem: &str) -> Vec<&str> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut blocks = Vec::new();
    let mut rest = pem;
    let mut offset = 0;
    while let Some(start) = rest.find(BEGIN) {
        let Some(end) = rest[start..].find(END) else {
            break;
        };
        let mut stop = start + end + END.len();
        if rest[stop..].starts_with("\r\n") {
            stop += 2;
        } else if rest[stop..].starts_with('\n') {
            stop += 1;
        }
        blocks.push(&pem[offset + start..offset + stop]);
        offset += stop;
        rest = &pem[offset..];
    }
    blocks
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn distinguished_name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

fn validity(days: u32) -> Result<(OffsetDateTime, OffsetDateTime), PkiError> {
    if days == 0 || days > MAX_VALIDITY_DAYS {
        return Err(PkiError::InvalidValidity(days));
    }
    // Whole seconds: that is all X.509 keeps, and it keeps comparisons exact.
    let now = OffsetDateTime::now_utc();
    let now = now.replace_nanosecond(0).unwrap_or(now);
    Ok((now - BACKDATE, now + time::Duration::days(i64::from(days))))
}

/// Whether `s` is a lowercase DNS-1123 subdomain (dot-separated labels, at most 253
/// characters).
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client certificate with exactly these URI SANs, signed by a throwaway CA.
    fn cert_with_uris(uris: &[&str]) -> Vec<u8> {
        let ca = Ca::generate("test").unwrap();
        let mut params = CertificateParams::default();
        params.subject_alt_names = uris
            .iter()
            .map(|u| SanType::URI(u.to_string().try_into().unwrap()))
            .collect();
        let key = KeyPair::generate().unwrap();
        params.signed_by(&key, &ca.issuer).unwrap().der().to_vec()
    }

    #[test]
    fn identity_round_trips_through_certificates() {
        let ca = Ca::generate("test").unwrap();
        for id in [
            Identity::spoke("cluster-a").unwrap(),
            Identity::admin("alice").unwrap(),
            Identity::spoke("0").unwrap(),
            Identity::spoke(&"a".repeat(63)).unwrap(),
        ] {
            let cert = ca.issue_client(&id, 1).unwrap();
            assert_eq!(identity_from_der(&cert.cert_der), Ok(id.clone()));
            assert_eq!(Identity::from_spiffe_id(&id.spiffe_id()), Ok(id));
        }
    }

    #[test]
    fn identity_from_pem_reads_the_first_certificate() {
        let ca = Ca::generate("test").unwrap();
        let cert = ca.issue_client(&Identity::Admin("x".into()), 1).unwrap();
        let chain = format!("{}{}", cert.cert_pem, ca.cert_pem());
        assert_eq!(identity_from_pem(&chain), Ok(Identity::Admin("x".into())));
        assert!(matches!(
            identity_from_pem("not pem"),
            Err(IdentityError::Certificate(_))
        ));
    }

    #[test]
    fn spiffe_ids_have_the_documented_form() {
        assert_eq!(
            Identity::spoke("gke-1").unwrap().spiffe_id(),
            "spiffe://flux-framework.org/spoke/gke-1"
        );
        assert_eq!(
            Identity::admin("ops").unwrap().spiffe_id(),
            "spiffe://flux-framework.org/admin/ops"
        );
    }

    #[test]
    fn both_kinds_or_two_ids_are_refused() {
        let both = cert_with_uris(&[
            "spiffe://flux-framework.org/spoke/a",
            "spiffe://flux-framework.org/admin/a",
        ]);
        assert_eq!(identity_from_der(&both), Err(IdentityError::Ambiguous(2)));
        let two_spokes = cert_with_uris(&[
            "spiffe://flux-framework.org/spoke/a",
            "spiffe://flux-framework.org/spoke/b",
        ]);
        assert_eq!(
            identity_from_der(&two_spokes),
            Err(IdentityError::Ambiguous(2))
        );
        // Even a duplicate of the same ID is not "exactly one".
        let twice = cert_with_uris(&[
            "spiffe://flux-framework.org/spoke/a",
            "spiffe://flux-framework.org/spoke/a",
        ]);
        assert_eq!(identity_from_der(&twice), Err(IdentityError::Ambiguous(2)));
        // A foreign SPIFFE ID next to ours makes it ambiguous too.
        let foreign = cert_with_uris(&[
            "spiffe://flux-framework.org/spoke/a",
            "spiffe://example.org/spoke/a",
        ]);
        assert_eq!(
            identity_from_der(&foreign),
            Err(IdentityError::Ambiguous(2))
        );
    }

    #[test]
    fn no_identity_is_refused() {
        assert_eq!(
            identity_from_der(&cert_with_uris(&[])),
            Err(IdentityError::Missing)
        );
        assert_eq!(
            identity_from_der(&cert_with_uris(&["https://flux-framework.org/spoke/a"])),
            Err(IdentityError::Missing)
        );
        // A server certificate (DNS SANs only) is not a client identity.
        let ca = Ca::generate("test").unwrap();
        let hub = ca
            .issue_server(&["hub.example".to_string()], &[], 1)
            .unwrap();
        assert_eq!(
            identity_from_der(&hub.cert_der),
            Err(IdentityError::Missing)
        );
    }

    #[test]
    fn other_uri_schemes_are_ignored() {
        let der = cert_with_uris(&[
            "https://example.org/x",
            "spiffe://flux-framework.org/admin/bob",
        ]);
        assert_eq!(identity_from_der(&der), Ok(Identity::Admin("bob".into())));
    }

    #[test]
    fn malformed_spiffe_ids_are_refused() {
        for uri in [
            "spiffe://example.org/spoke/a",
            "spiffe://flux-framework.org.evil/spoke/a",
            "spiffe://flux-framework.org",
            "spiffe://flux-framework.org/",
            "spiffe://flux-framework.org/spoke",
            "spiffe://flux-framework.org/spoke/",
            "spiffe://flux-framework.org/spoke/a/",
            "spiffe://flux-framework.org/spoke/a/b",
            "spiffe://flux-framework.org/spoke/A",
            "spiffe://flux-framework.org/spoke/-a",
            "spiffe://flux-framework.org/spoke/a_b",
            "spiffe://flux-framework.org/spoke/a?x=1",
            "spiffe://flux-framework.org/spoke/a#f",
            "spiffe://flux-framework.org/spoke/a%2fb",
            "spiffe://flux-framework.org/hub/a",
            "spiffe://flux-framework.org/Spoke/a",
            "SPIFFE://flux-framework.org/spoke/a",
            "spiffe://FLUX-FRAMEWORK.ORG/spoke/a",
            "spiffe://user@flux-framework.org/spoke/a",
            "spiffe://flux-framework.org:443/spoke/a",
        ] {
            let der = cert_with_uris(&[uri]);
            let got = identity_from_der(&der);
            assert!(
                matches!(
                    got,
                    Err(IdentityError::InvalidUri { .. } | IdentityError::InvalidName { .. })
                ),
                "{uri}: {got:?}"
            );
        }
        let long = format!("spiffe://flux-framework.org/spoke/{}", "a".repeat(64));
        assert!(matches!(
            identity_from_der(&cert_with_uris(&[&long])),
            Err(IdentityError::InvalidName {
                kind: IdentityKind::Spoke,
                ..
            })
        ));
    }

    #[test]
    fn garbage_is_not_a_certificate() {
        assert!(matches!(
            identity_from_der(b""),
            Err(IdentityError::Certificate(_))
        ));
        assert!(matches!(
            identity_from_der(b"\x30\x03\x02\x01\x01"),
            Err(IdentityError::Certificate(_))
        ));
        let mut der = Ca::generate("t")
            .unwrap()
            .issue_client(&Identity::Spoke("a".into()), 1)
            .unwrap()
            .cert_der;
        der.truncate(der.len() / 2);
        assert!(matches!(
            identity_from_der(&der),
            Err(IdentityError::Certificate(_))
        ));
    }

    #[test]
    fn names_are_checked_when_issuing() {
        let ca = Ca::generate("test").unwrap();
        assert!(Identity::spoke("Bad").is_err());
        assert!(Identity::admin("").is_err());
        assert!(matches!(
            ca.issue_client(&Identity::Spoke("no_underscores".into()), 1),
            Err(PkiError::Identity(IdentityError::InvalidName { .. }))
        ));
        assert!(matches!(
            ca.issue_server(&[], &[], 1),
            Err(PkiError::NoServerNames)
        ));
        assert!(matches!(
            ca.issue_server(&["Hub.Example".into()], &[], 1),
            Err(PkiError::InvalidDnsName(_))
        ));
        assert!(matches!(
            ca.issue_client(&Identity::Admin("a".into()), 0),
            Err(PkiError::InvalidValidity(0))
        ));
    }

    #[test]
    fn loaded_ca_issues_certificates_chaining_to_the_same_certificate() {
        let ca = Ca::generate("test CA").unwrap();
        let loaded = Ca::from_pem(ca.cert_pem(), &ca.key_pem()).unwrap();
        assert_eq!(loaded.cert_der(), ca.cert_der());
        let leaf = loaded
            .issue_client(&Identity::Spoke("late".into()), 30)
            .unwrap();
        let (_, leaf_cert) = x509_parser::parse_x509_certificate(&leaf.cert_der).unwrap();
        let (_, ca_cert) = x509_parser::parse_x509_certificate(ca.cert_der()).unwrap();
        assert_eq!(leaf_cert.issuer(), ca_cert.subject());
        leaf_cert
            .verify_signature(Some(ca_cert.public_key()))
            .unwrap();
    }

    #[test]
    fn loading_checks_the_ca() {
        let ca = Ca::generate("a").unwrap();
        let other = Ca::generate("b").unwrap();
        assert!(matches!(
            Ca::from_pem(ca.cert_pem(), &other.key_pem()),
            Err(PkiError::KeyMismatch)
        ));
        let leaf = ca.issue_client(&Identity::Admin("x".into()), 1).unwrap();
        assert!(matches!(
            Ca::from_pem(&leaf.cert_pem, &leaf.key_pem),
            Err(PkiError::NotACa)
        ));
        assert!(matches!(
            Ca::from_pem("", &ca.key_pem()),
            Err(PkiError::CaCertificate(_))
        ));
        assert!(matches!(
            Ca::from_pem(ca.cert_pem(), "junk"),
            Err(PkiError::CaKey(_))
        ));
    }

    #[test]
    fn validity_periods_follow_the_request_and_never_outlive_the_ca() {
        let ca = Ca::generate_with_validity("short", 10).unwrap();
        let leaf = ca.issue_client(&Identity::Admin("x".into()), 365).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&leaf.cert_der).unwrap();
        assert_eq!(cert.validity().not_after.to_datetime(), ca.not_after());
        let leaf = ca.issue_client(&Identity::Admin("x".into()), 2).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&leaf.cert_der).unwrap();
        let days = (cert.validity().not_after.to_datetime()
            - cert.validity().not_before.to_datetime())
        .whole_minutes();
        assert_eq!(days, 2 * 24 * 60 + 5);
        assert!(!cert.is_ca());
    }
}
