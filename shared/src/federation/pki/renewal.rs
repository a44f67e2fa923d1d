//! Renewing the federation's CA while everything keeps running.
//!
//! A renewed CA has a new key and the same federation ([`Ca::federation`]). It comes with
//! a second certificate of its own, signed by the CA it replaces (a cross-signed copy): the
//! certificates it issues carry that copy after themselves ([`Ca::with_chain`]), so a peer
//! that still trusts only the previous CA accepts them (leaf, copy, previous CA), and a
//! peer that trusts the new CA accepts them directly. The hub and the spokes can therefore
//! move to new certificates one at a time, in any order, and the previous CA is dropped
//! from what they trust only once all of them hold certificates of the new one.

use std::net::IpAddr;

use rcgen::{Issuer, KeyPair};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use time::OffsetDateTime;
use x509_parser::extensions::GeneralName;

use super::{
    Ca, Identity, IssuedCert, PkiError, ca_params, certificate_blocks, federation_of_ca_der,
    generate_error, identity_from_der,
};
use crate::federation::scope::admin_scope_from_der;

/// A renewed CA ([`Ca::renew`]).
#[derive(Debug)]
pub struct Renewal {
    /// The new CA: its self-signed certificate, its key, and the cross-signed copy
    /// appended to everything it issues.
    pub ca: Ca,
    /// Its certificate signed by the CA it replaces, PEM. It expires with that CA.
    pub cross_pem: String,
}

impl Ca {
    /// This CA's successor: a new key, the same federation, `CN=<common_name>`, valid
    /// `days` days; and its certificate signed by this CA, appended to everything it
    /// issues.
    pub fn renew(&self, common_name: &str, days: u32) -> Result<Renewal, PkiError> {
        if self.not_after <= OffsetDateTime::now_utc() {
            return Err(PkiError::CaExpired(self.not_after));
        }
        let params = ca_params(common_name, days, Some(&self.federation()))?;
        let key = KeyPair::generate().map_err(generate_error)?;
        let cert = params.self_signed(&key).map_err(generate_error)?;
        let mut cross = params.clone();
        // A certificate never outlives its issuer.
        cross.not_after = params.not_after.min(self.not_after);
        cross.use_authority_key_identifier_extension = true;
        let cross = cross
            .signed_by(&key, &self.issuer)
            .map_err(generate_error)?;
        let not_after = params.not_after;
        let cross_pem = cross.pem();
        Ok(Renewal {
            ca: Ca {
                cert_pem: cert.pem(),
                cert_der: cert.der().to_vec(),
                not_after,
                issuer: Issuer::new(params, key),
                chain_pem: cross_pem.clone(),
            },
            cross_pem,
        })
    }
}

impl Ca {
    /// A certificate like `cert_pem` (the first certificate of the text), issued by this CA
    /// with a new key for `days` days: the hub's server certificate with the same DNS names
    /// and IP addresses, a spoke's with the same name, an admin's with the same name and
    /// scope.
    pub fn reissue(&self, cert_pem: &str, days: u32) -> Result<IssuedCert, PkiError> {
        let der = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .next()
            .ok_or_else(|| PkiError::Reissue("no CERTIFICATE block".to_string()))?
            .map_err(|e| PkiError::Reissue(e.to_string()))?;
        let (_, cert) = x509_parser::parse_x509_certificate(&der)
            .map_err(|e| PkiError::Reissue(e.to_string()))?;
        let server = cert
            .extended_key_usage()
            .ok()
            .flatten()
            .is_some_and(|eku| eku.value.server_auth);
        if server {
            let (mut dns, mut ips) = (Vec::new(), Vec::new());
            if let Ok(Some(sans)) = cert.subject_alternative_name() {
                for name in &sans.value.general_names {
                    match name {
                        GeneralName::DNSName(n) => dns.push((*n).to_string()),
                        GeneralName::IPAddress(bytes) => match <[u8; 4]>::try_from(*bytes) {
                            Ok(v4) => ips.push(IpAddr::from(v4)),
                            Err(_) => {
                                let v6 = <[u8; 16]>::try_from(*bytes).map_err(|_| {
                                    PkiError::Reissue(format!(
                                        "an IP address of {} bytes",
                                        bytes.len()
                                    ))
                                })?;
                                ips.push(IpAddr::from(v6));
                            }
                        },
                        _ => {}
                    }
                }
            }
            return self.issue_server(&dns, &ips, days);
        }
        match identity_from_der(&der)? {
            Identity::Spoke(name) => self.issue_client(&Identity::Spoke(name), days),
            Identity::Admin(name) => {
                let scope = admin_scope_from_der(&der).map_err(PkiError::Reissue)?;
                self.issue_admin(&name, &scope, days)
            }
        }
    }
}

/// What a federation whose current CA is `current` trusts while `previous` (the PEM of the
/// CAs it trusted until now) is kept for the renewal: every certificate of `previous` that
/// is not `current`'s, byte for byte, then `current`. (The previous CA first: a spoke of
/// release 0.1.0 takes the federation's identity from the first certificate.)
pub fn trust_during_renewal(current: &Ca, previous: &str) -> String {
    let mut out = String::new();
    for block in certificate_blocks(previous) {
        let same = CertificateDer::from_pem_slice(block.as_bytes())
            .is_ok_and(|der| der.as_ref() == current.cert_der());
        if !same {
            out.push_str(block);
            if !block.ends_with('\n') {
                out.push('\n');
            }
        }
    }
    out.push_str(current.cert_pem());
    out
}

/// Errors reading the CAs a federation trusts.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TrustError {
    /// No certificate, or one that does not parse.
    #[error("the CA certificates: {0}")]
    Unreadable(String),
    /// The certificates belong to different federations.
    #[error(
        "the CA certificates belong to different federations ({0}): a renewed CA carries its \
         predecessor's federation; these were not renewed from one another"
    )]
    Mixed(String),
}

/// The federation of the CAs in `ca_pem` (one, or several while a renewal is under way):
/// every certificate must name the same one ([`federation_of_ca_der`]).
pub fn federation_of_trust(ca_pem: &str) -> Result<String, TrustError> {
    let mut found: Vec<String> = Vec::new();
    for der in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let der = der.map_err(|e| TrustError::Unreadable(e.to_string()))?;
        x509_parser::parse_x509_certificate(&der)
            .map_err(|e| TrustError::Unreadable(e.to_string()))?;
        let id = federation_of_ca_der(&der);
        if !found.contains(&id) {
            found.push(id);
        }
    }
    match found.as_slice() {
        [] => Err(TrustError::Unreadable("no CERTIFICATE block".to_string())),
        [one] => Ok(one.clone()),
        many => Err(TrustError::Mixed(many.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::client::danger::ServerCertVerifier as _;
    use rustls::pki_types::{ServerName, UnixTime};

    use super::super::{Identity, federation_of_der, issuer_key_id_of_pem};
    use super::*;

    /// Whether a server presenting `chain_pem` (leaf first) for `hub.example.org` is
    /// accepted by a client trusting `roots_pem`, with rustls' own verifier.
    fn accepted(roots_pem: &str, chain_pem: &str) -> bool {
        let mut roots = rustls::RootCertStore::empty();
        for der in CertificateDer::pem_slice_iter(roots_pem.as_bytes()) {
            roots.add(der.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
        let chain: Vec<CertificateDer> = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
            .map(Result::unwrap)
            .collect();
        verifier
            .verify_server_cert(
                &chain[0],
                &chain[1..],
                &ServerName::try_from("hub.example.org").unwrap(),
                &[],
                UnixTime::now(),
            )
            .is_ok()
    }

    fn hub_cert(ca: &Ca) -> String {
        ca.issue_server(&["hub.example.org".to_string()], &[], 30)
            .unwrap()
            .cert_pem
    }

    #[test]
    fn either_trust_accepts_what_the_renewed_ca_issues_and_only_the_new_one_refuses_the_old() {
        let old = Ca::generate("flux-federation CA").unwrap();
        let renewal = old.renew("flux-federation CA, renewed", 3650).unwrap();
        let new = &renewal.ca;
        let issued = hub_cert(new);
        let both = trust_during_renewal(new, old.cert_pem());
        // A peer still trusting only the previous CA accepts it through the copy.
        assert!(accepted(old.cert_pem(), &issued));
        assert!(accepted(&both, &issued));
        assert!(accepted(new.cert_pem(), &issued));
        // Without the copy, only the new trust accepts it.
        let bare = &issued[..issued.find("-----END CERTIFICATE-----").unwrap() + 26];
        assert!(!accepted(old.cert_pem(), bare));
        assert!(accepted(new.cert_pem(), bare));
        // The previous CA's certificates: accepted while both are trusted, refused after.
        let previous = hub_cert(&old);
        assert!(accepted(&both, &previous));
        assert!(!accepted(new.cert_pem(), &previous));
        assert_eq!(issuer_key_id_of_pem(&issued), new.key_id());
        assert_eq!(issuer_key_id_of_pem(&previous), old.key_id());
        assert_ne!(new.key_id(), old.key_id());
    }

    #[test]
    fn a_renewed_ca_names_the_federation_its_first_ca_is_known_by() {
        // A new federation is known by its CA's digest, as every release computes it.
        let first = Ca::generate("a").unwrap();
        let digest = first.federation();
        assert_eq!(federation_of_der(first.cert_der()), None);
        assert_eq!(digest, federation_of_ca_der(first.cert_der()));
        assert_eq!(digest.len(), 32);
        let expected: String = ring::digest::digest(&ring::digest::SHA256, first.cert_der())
            .as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(digest, expected);
        // Its successors name it.
        let second = first.renew("b", 10).unwrap().ca;
        assert_eq!(federation_of_der(second.cert_der()), Some(digest.clone()));
        let both = trust_during_renewal(&second, first.cert_pem());
        assert_eq!(federation_of_trust(&both), Ok(digest.clone()));
        assert_eq!(federation_of_trust(second.cert_pem()), Ok(digest.clone()));
        let third = second.renew("c", 10).unwrap().ca;
        assert_eq!(
            federation_of_trust(&trust_during_renewal(&third, second.cert_pem())),
            Ok(digest)
        );
        let old = first;

        // Two unrelated CAs are two federations.
        let other = Ca::generate("other").unwrap();
        let mixed = trust_during_renewal(&other, old.cert_pem());
        assert!(matches!(
            federation_of_trust(&mixed),
            Err(TrustError::Mixed(_))
        ));
        assert!(matches!(
            federation_of_trust("junk"),
            Err(TrustError::Unreadable(_))
        ));
    }

    #[test]
    fn a_reissued_certificate_is_the_same_holder_from_the_new_ca() {
        use crate::federation::scope::{AdminScope, Permission};
        let old = Ca::generate("old").unwrap();
        let new = old.renew("new", 10).unwrap().ca;
        let ips = ["192.0.2.7".parse().unwrap(), "2001:db8::1".parse().unwrap()];
        let hub = old
            .issue_server(&["hub.example.org".to_string()], &ips, 10)
            .unwrap();
        let again = new.reissue(&hub.cert_pem, 5).unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&again.cert_der).unwrap();
        let sans = cert.subject_alternative_name().unwrap().unwrap();
        assert_eq!(sans.value.general_names.len(), 3, "{sans:?}");
        assert_eq!(issuer_key_id_of_pem(&again.cert_pem), new.key_id());
        assert_ne!(again.key_pem, hub.key_pem);
        assert!(accepted(old.cert_pem(), &again.cert_pem));

        let scope = AdminScope::new([Permission::Read], &["hpc".to_string()]).unwrap();
        let admin = old.issue_admin("ops", &scope, 10).unwrap();
        let again = new.reissue(&admin.cert_pem, 5).unwrap();
        assert_eq!(
            super::super::identity_from_pem(&again.cert_pem),
            Ok(Identity::Admin("ops".into()))
        );
        assert_eq!(admin_scope_from_der(&again.cert_der).unwrap(), scope);
        let spoke = old
            .issue_client(&Identity::Spoke("gke".into()), 10)
            .unwrap();
        let again = new.reissue(&spoke.cert_pem, 5).unwrap();
        assert_eq!(
            super::super::identity_from_pem(&again.cert_pem),
            Ok(Identity::Spoke("gke".into()))
        );
        assert!(matches!(new.reissue("junk", 5), Err(PkiError::Reissue(_))));
    }

    #[test]
    fn the_bundle_lists_the_new_ca_first_and_each_certificate_once_and_loads_by_key() {
        let old = Ca::generate("old").unwrap();
        let new = old.renew("new", 10).unwrap().ca;
        let both = trust_during_renewal(&new, old.cert_pem());
        assert_eq!(both, format!("{}{}", old.cert_pem(), new.cert_pem()));
        assert_eq!(trust_during_renewal(&new, &both), both);
        // The CA is the bundle's certificate its key matches, wherever it is.
        let reordered = format!("{}{}", new.cert_pem(), old.cert_pem());
        let loaded = Ca::from_pem(&reordered, &new.key_pem()).unwrap();
        assert_eq!(loaded.cert_pem(), new.cert_pem());
        assert_eq!(
            Ca::from_pem(&reordered, &old.key_pem()).unwrap().cert_pem(),
            old.cert_pem()
        );
        let stranger = Ca::generate("stranger").unwrap();
        assert!(matches!(
            Ca::from_pem(&both, &stranger.key_pem()),
            Err(PkiError::KeyMismatch)
        ));
        // A client certificate of the new CA carries the copy and keeps its identity.
        let spoke = new
            .issue_client(&Identity::Spoke("gke".into()), 10)
            .unwrap();
        assert_eq!(certificate_blocks(&spoke.cert_pem).len(), 2);
        assert_eq!(
            super::super::identity_from_pem(&spoke.cert_pem),
            Ok(Identity::Spoke("gke".into()))
        );
    }
}
