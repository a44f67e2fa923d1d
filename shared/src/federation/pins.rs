//! Pinned spoke certificates: which certificate may speak for each spoke name.
//!
//! Any certificate the federation CA issued for a spoke name would otherwise be accepted
//! for its whole validity, including one rotated out by `flux-hub join --rotate` or one left
//! behind by `flux-hub unjoin`. `join` pins the certificate it installs: the hub keeps the
//! SHA-256 fingerprint of each spoke's certificate in the ConfigMap [`PINS_CONFIGMAP`] of
//! its namespace and serves a spoke name only to that certificate. Once the ConfigMap
//! exists, a spoke without a pin is refused too; without it (an install older than pinning)
//! nothing is pinned.
//!
//! Admin certificates are not pinned (an admin may hold several); one that leaked is
//! revoked instead: the ConfigMap [`REVOKED_ADMINS_CONFIGMAP`] lists revoked certificates
//! by fingerprint, or every certificate of an admin name, and the hub refuses them
//! ([`admin_revoked`]).

use std::collections::BTreeMap;

/// The ConfigMap, in the hub's namespace, mapping spoke names to certificate fingerprints.
pub const PINS_CONFIGMAP: &str = "flux-hub-spoke-pins";

/// The fingerprint of a DER certificate: `sha256:` and 64 lowercase hex digits.
pub fn fingerprint(der: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in digest.as_ref() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The fingerprint of the first certificate of a PEM text.
pub fn fingerprint_of_pem(pem: &str) -> Result<String, String> {
    let (_, parsed) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|e| format!("not a PEM certificate: {e}"))?;
    Ok(fingerprint(&parsed.contents))
}

/// Whether `text` is a fingerprint as [`fingerprint`] writes it.
pub fn is_fingerprint(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Whether the certificate with fingerprint `presented` may speak for spoke `spoke`, given
/// the pins (`None`: no pin ConfigMap, nothing is pinned). The error says why not.
pub fn check(
    pins: Option<&BTreeMap<String, String>>,
    spoke: &str,
    presented: &str,
) -> Result<(), String> {
    let Some(pins) = pins else {
        return Ok(());
    };
    match pins.get(spoke) {
        Some(pinned) if pinned == presented => Ok(()),
        Some(_) => Err(format!(
            "this certificate of spoke {spoke} is not the one pinned for it (it was replaced by flux-hub join --rotate, or issued outside flux-hub join); use the spoke's current certificate"
        )),
        None => Err(format!(
            "spoke {spoke} has no pinned certificate at this hub (it was unjoined, or never joined with flux-hub join); run flux-hub join {spoke} to pin one"
        )),
    }
}

/// The ConfigMap, in the hub's namespace, listing revoked admin certificates; its keys
/// are [`certificate_revocation_key`]s and [`admin_revocation_key`]s, its values notes for
/// people (who revoked, when, why).
pub const REVOKED_ADMINS_CONFIGMAP: &str = "flux-hub-revoked-admins";

/// The key that revokes the one certificate with fingerprint `fingerprint`:
/// `sha256-` and its 64 hex digits (a ConfigMap key cannot hold `:`).
pub fn certificate_revocation_key(fingerprint: &str) -> String {
    fingerprint.replacen("sha256:", "sha256-", 1)
}

/// The key that revokes every certificate of admin `name`, issued before or after: a
/// replacement takes another name.
pub fn admin_revocation_key(name: &str) -> String {
    format!("admin-{name}")
}

/// Why the certificate with fingerprint `presented`, issued to admin `admin`, is revoked by
/// `revoked` (the data of [`REVOKED_ADMINS_CONFIGMAP`]), or `None` if it is not.
pub fn admin_revoked(
    revoked: &BTreeMap<String, String>,
    admin: &str,
    presented: &str,
) -> Option<String> {
    let (key, what) = [
        (certificate_revocation_key(presented), "this certificate"),
        (
            admin_revocation_key(admin),
            "every certificate of this admin",
        ),
    ]
    .into_iter()
    .find(|(key, _)| revoked.contains_key(key))?;
    let note = revoked.get(&key).map(String::as_str).unwrap_or_default();
    let note = if note.is_empty() {
        String::new()
    } else {
        format!(": {note}")
    };
    Some(format!(
        "admin {admin}: {what} is revoked ({REVOKED_ADMINS_CONFIGMAP} key {key}{note}); ask for a new certificate under another name, or flux-hub revoke-admin --lift"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_and_checks() {
        let f = fingerprint(b"abc");
        assert_eq!(
            f,
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_fingerprint(&f));
        assert!(!is_fingerprint("sha256:BA78"));
        assert!(!is_fingerprint(&f.replace("sha256:", "md5:")));
        let g = fingerprint(b"abd");
        assert_eq!(check(None, "a", &f), Ok(()), "no pins: nothing is pinned");
        let pins = BTreeMap::from([("a".to_string(), f.clone())]);
        assert_eq!(check(Some(&pins), "a", &f), Ok(()));
        assert!(check(Some(&pins), "a", &g).is_err_and(|e| e.contains("not the one pinned")));
        assert!(check(Some(&pins), "b", &f).is_err_and(|e| e.contains("no pinned certificate")));
    }

    #[test]
    fn revocations_by_certificate_or_by_name() {
        let (f, g) = (fingerprint(b"abc"), fingerprint(b"abd"));
        let revoked = BTreeMap::from([
            (
                certificate_revocation_key(&f),
                "leaked 2026-11-27".to_string(),
            ),
            (admin_revocation_key("mallory"), String::new()),
        ]);
        assert!(
            certificate_revocation_key(&f)
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-'),
            "a valid ConfigMap key"
        );
        let why = admin_revoked(&revoked, "alice", &f).expect("revoked by fingerprint");
        assert!(why.contains("this certificate is revoked") && why.contains("leaked 2026-11-27"));
        assert_eq!(
            admin_revoked(&revoked, "alice", &g),
            None,
            "another certificate"
        );
        let why = admin_revoked(&revoked, "mallory", &g).expect("revoked by name");
        assert!(why.contains("every certificate of this admin"));
        assert_eq!(admin_revoked(&BTreeMap::new(), "mallory", &g), None);
    }
}
