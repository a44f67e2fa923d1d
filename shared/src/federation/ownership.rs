//! Who made an object in a burst cluster, and whether a spoke may touch it.
//!
//! A spoke changes or deletes only what it made: objects labelled
//! `app.kubernetes.io/managed-by: flux-spoke` with its name ([`SPOKE_LABEL`]) and its
//! federation's identity ([`FEDERATION_LABEL`]), annotated with the assignment key
//! ([`ASSIGNMENT_ANNOTATION`]). The managed-by label alone proves nothing: anyone can
//! write it, and two spokes (or one spoke name in two federations) may share a cluster. Objects an older spoke made carry neither label and are still
//! recognised ([`Ownership::Ours`] with `legacy`), so an upgrade adopts exactly what the
//! old version managed; they get the labels on the next apply.
//!
//! The federation's identity is a digest of its first CA's certificate, which renewed CAs
//! name ([`federation_id`]): a hub reinstalled with another CA is another
//! federation, and its spokes leave the old one's bursts alone, while a renewed CA
//! ([`super::pki::renewal`]) keeps the federation and everything its spokes made.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::tls::ClientSecurity;
use super::{Identity, identity_from_pem};
use crate::render::labels;

// The marks of a spoke's objects are defined here, with what reads them; assignment.rs
// stamps them on what it makes.

/// Value of `app.kubernetes.io/managed-by` on every object a spoke creates.
pub const SPOKE_MANAGER: &str = "flux-spoke";

/// Annotation holding the assignment key (`<namespace>/<name>/<burst>`) on every object a
/// spoke creates.
pub const ASSIGNMENT_ANNOTATION: &str = "flux-framework.org/assignment";

/// Label selector of every object a spoke owns.
pub fn spoke_selector() -> String {
    format!("{}={}", labels::MANAGED_BY, SPOKE_MANAGER)
}

/// Label holding the name of the spoke that made an object.
pub const SPOKE_LABEL: &str = "flux-framework.org/spoke";

/// Label holding the identity of the federation ([`federation_id`]) of the spoke that made
/// an object.
pub const FEDERATION_LABEL: &str = "flux-framework.org/federation";

/// Federation identity of a spoke running with `--insecure` (no CA to digest).
pub const INSECURE_FEDERATION: &str = "insecure";

/// Who a spoke is: its name and its federation's identity. Stamped on everything it
/// makes, and required of everything it changes or deletes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SpokeIdentity {
    /// The spoke's name (the cluster name MiniClusters burst to).
    pub name: String,
    /// The federation's identity ([`federation_id`], or [`INSECURE_FEDERATION`]).
    pub federation: String,
}

/// Errors computing a [`SpokeIdentity`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpokeIdentityError {
    /// The CA PEM holds no readable certificate.
    #[error("the federation CA: {0}")]
    Ca(String),
    /// The client certificate does not name a spoke.
    #[error("the client certificate does not name a spoke: {0}")]
    NotASpoke(String),
}

impl SpokeIdentity {
    /// The identity of a spoke connecting with `security`: the spoke named in the client
    /// certificate and the digest of the CA (mTLS), or the spoke named in the insecure
    /// development identity and [`INSECURE_FEDERATION`].
    pub fn of_client(security: &ClientSecurity) -> Result<SpokeIdentity, SpokeIdentityError> {
        let (identity, federation) = match security {
            ClientSecurity::Mtls { tls, .. } => (
                identity_from_pem(tls.cert_pem())
                    .map_err(|e| SpokeIdentityError::NotASpoke(e.to_string()))?,
                federation_id(tls.ca_pem())?,
            ),
            ClientSecurity::InsecureDevelopment(identity) => {
                (identity.clone(), INSECURE_FEDERATION.to_string())
            }
        };
        match identity {
            Identity::Spoke(name) => Ok(SpokeIdentity { name, federation }),
            Identity::Admin(name) => Err(SpokeIdentityError::NotASpoke(format!(
                "it is the admin certificate {name:?}"
            ))),
        }
    }

    /// The identity an object claims (its spoke and federation labels), if it has both.
    pub fn of_object(meta: &ObjectMeta) -> Option<SpokeIdentity> {
        let labels = meta.labels.as_ref()?;
        Some(SpokeIdentity {
            name: labels.get(SPOKE_LABEL)?.clone(),
            federation: labels.get(FEDERATION_LABEL)?.clone(),
        })
    }
}

/// The identity of the federation whose CAs `ca_pem` holds (one, or the new and the
/// previous while a renewal is under way): the one they all name
/// ([`super::pki::renewal::federation_of_trust`]), 32 lowercase hex characters, a valid
/// label value.
pub fn federation_id(ca_pem: &str) -> Result<String, SpokeIdentityError> {
    super::pki::renewal::federation_of_trust(ca_pem)
        .map_err(|e| SpokeIdentityError::Ca(e.to_string()))
}

/// Who made an object, as far as a spoke is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership<'a> {
    /// Made by this spoke of this federation, for assignment `key`. `legacy`: made by an
    /// older spoke version (no spoke and federation labels), trusted as ours.
    Ours {
        /// The assignment key of the object.
        key: &'a str,
        /// Whether it lacks the spoke and federation labels.
        legacy: bool,
    },
    /// Made by a spoke, but another one: another name, another federation, or labels
    /// only partly present. Never patched, never deleted.
    OtherSpoke {
        /// Its spoke label, if any.
        spoke: Option<&'a str>,
        /// Its federation label, if any.
        federation: Option<&'a str>,
    },
    /// Not made by a spoke (no `managed-by: flux-spoke` or no assignment annotation).
    Foreign,
}

/// Who made the object described by `meta`, seen by the spoke `me`.
pub fn ownership<'a>(meta: &'a ObjectMeta, me: &SpokeIdentity) -> Ownership<'a> {
    let label = |name: &str| {
        meta.labels
            .as_ref()
            .and_then(|l| l.get(name))
            .map(String::as_str)
    };
    let key = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(ASSIGNMENT_ANNOTATION))
        .map(String::as_str);
    let (Some(SPOKE_MANAGER), Some(key)) = (label(labels::MANAGED_BY), key) else {
        return Ownership::Foreign;
    };
    match (label(SPOKE_LABEL), label(FEDERATION_LABEL)) {
        (None, None) => Ownership::Ours { key, legacy: true },
        (Some(spoke), Some(federation)) if spoke == me.name && federation == me.federation => {
            Ownership::Ours { key, legacy: false }
        }
        (spoke, federation) => Ownership::OtherSpoke { spoke, federation },
    }
}

/// Whether the object described by `meta` is the spoke `me`'s object of assignment `key`:
/// the only objects it may patch or delete for that assignment.
pub fn is_ours(meta: &ObjectMeta, me: &SpokeIdentity, key: &str) -> bool {
    matches!(ownership(meta, me), Ownership::Ours { key: k, .. } if k == key)
}

/// Whether `existing` belongs to whoever `desired` (an object a spoke is about to write,
/// carrying its full claim) says it is: same spoke, federation and assignment key. False
/// when `desired` does not carry a full claim.
pub fn same_owner(existing: &ObjectMeta, desired: &ObjectMeta) -> bool {
    let Some(me) = SpokeIdentity::of_object(desired) else {
        return false;
    };
    match owned_key(desired) {
        Some(key) => is_ours(existing, &me, key),
        None => false,
    }
}

/// The assignment key of an object made by some spoke (`managed-by: flux-spoke` and the
/// assignment annotation), `None` for anything else. Which spoke made it is
/// [`ownership`]'s question.
pub fn owned_key(meta: &ObjectMeta) -> Option<&str> {
    let managed = meta.labels.as_ref()?.get(labels::MANAGED_BY)?;
    if managed != SPOKE_MANAGER {
        return None;
    }
    meta.annotations
        .as_ref()?
        .get(ASSIGNMENT_ANNOTATION)
        .map(String::as_str)
}

/// Who seems to own the object described by `meta`, for messages: its managed-by label,
/// and for a spoke's object its spoke, federation and assignment.
pub fn describe_owner(meta: &ObjectMeta) -> String {
    let label = |name: &str| {
        meta.labels
            .as_ref()
            .and_then(|l| l.get(name))
            .map(String::as_str)
    };
    let Some(manager) = label(labels::MANAGED_BY) else {
        return "no app.kubernetes.io/managed-by label".to_string();
    };
    let mut out = format!("managed by {manager:?}");
    if manager == SPOKE_MANAGER {
        out.push_str(&format!(
            " (spoke {:?}, federation {:?}",
            label(SPOKE_LABEL).unwrap_or("?"),
            label(FEDERATION_LABEL).unwrap_or("?")
        ));
        if let Some(key) = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(ASSIGNMENT_ANNOTATION))
        {
            out.push_str(&format!(", assignment {key:?}"));
        }
        out.push(')');
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::federation::pki::Ca;
    use crate::federation::tls::TlsPem;

    fn me() -> SpokeIdentity {
        SpokeIdentity {
            name: "gke".into(),
            federation: "f1".into(),
        }
    }

    fn meta(labels: &[(&str, &str)], key: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some("x".into()),
            namespace: Some("hpc".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            annotations: key.map(|k| BTreeMap::from([(ASSIGNMENT_ANNOTATION.into(), k.into())])),
            ..Default::default()
        }
    }

    const M: &str = labels::MANAGED_BY;

    #[test]
    fn the_ours_decision() {
        let me = me();
        let full = [
            (M, "flux-spoke"),
            (SPOKE_LABEL, "gke"),
            (FEDERATION_LABEL, "f1"),
        ];
        let ours = meta(&full, Some("hpc/m/x"));
        assert_eq!(
            ownership(&ours, &me),
            Ownership::Ours {
                key: "hpc/m/x",
                legacy: false
            }
        );
        assert!(is_ours(&ours, &me, "hpc/m/x"));
        assert!(!is_ours(&ours, &me, "hpc/m/y"), "another assignment's");

        let legacy = meta(&[(M, "flux-spoke")], Some("hpc/m/x"));
        assert_eq!(
            ownership(&legacy, &me),
            Ownership::Ours {
                key: "hpc/m/x",
                legacy: true
            }
        );
        assert!(is_ours(&legacy, &me, "hpc/m/x"));

        let other_spoke = meta(
            &[
                (M, "flux-spoke"),
                (SPOKE_LABEL, "edge"),
                (FEDERATION_LABEL, "f1"),
            ],
            Some("hpc/m/x"),
        );
        assert_eq!(
            ownership(&other_spoke, &me),
            Ownership::OtherSpoke {
                spoke: Some("edge"),
                federation: Some("f1")
            }
        );
        assert!(!is_ours(&other_spoke, &me, "hpc/m/x"));

        let other_federation = meta(
            &[
                (M, "flux-spoke"),
                (SPOKE_LABEL, "gke"),
                (FEDERATION_LABEL, "f2"),
            ],
            Some("hpc/m/x"),
        );
        assert!(matches!(
            ownership(&other_federation, &me),
            Ownership::OtherSpoke { .. }
        ));
        assert!(!is_ours(&other_federation, &me, "hpc/m/x"));

        // One label without the other is not a legacy object: somebody wrote it.
        let partial = meta(&[(M, "flux-spoke"), (SPOKE_LABEL, "gke")], Some("hpc/m/x"));
        assert!(!is_ours(&partial, &me, "hpc/m/x"));

        let foreign = meta(&[(M, "helm")], Some("hpc/m/x"));
        assert_eq!(ownership(&foreign, &me), Ownership::Foreign);
        let unlabelled = ObjectMeta::default();
        assert_eq!(ownership(&unlabelled, &me), Ownership::Foreign);
        assert!(!is_ours(&unlabelled, &me, "hpc/m/x"));
        let no_key = meta(&full, None);
        assert_eq!(ownership(&no_key, &me), Ownership::Foreign);
    }

    #[test]
    fn same_owner_takes_the_claim_from_the_object_to_write() {
        let full = [
            (M, "flux-spoke"),
            (SPOKE_LABEL, "gke"),
            (FEDERATION_LABEL, "f1"),
        ];
        let desired = meta(&full, Some("hpc/m/x"));
        assert!(same_owner(&meta(&full, Some("hpc/m/x")), &desired));
        assert!(same_owner(
            &meta(&[(M, "flux-spoke")], Some("hpc/m/x")),
            &desired
        ));
        assert!(!same_owner(&meta(&full, Some("hpc/m/y")), &desired));
        assert!(!same_owner(&meta(&[(M, "helm")], None), &desired));
        // An object to write without a full claim matches nothing.
        let bare = meta(&[(M, "flux-spoke")], Some("hpc/m/x"));
        assert!(!same_owner(&bare, &bare));
    }

    #[test]
    fn owners_are_described_for_refusals() {
        assert_eq!(
            describe_owner(&ObjectMeta::default()),
            "no app.kubernetes.io/managed-by label"
        );
        assert_eq!(
            describe_owner(&meta(&[(M, "helm")], None)),
            "managed by \"helm\""
        );
        assert_eq!(
            describe_owner(&meta(
                &[(M, "flux-spoke"), (SPOKE_LABEL, "edge")],
                Some("a/b/c")
            )),
            "managed by \"flux-spoke\" (spoke \"edge\", federation \"?\", assignment \"a/b/c\")"
        );
    }

    #[test]
    fn the_federation_is_its_first_cas_digest_and_survives_a_renewal() {
        let a = Ca::generate("a").unwrap();
        let b = Ca::generate("b").unwrap();
        let id = federation_id(a.cert_pem()).unwrap();
        assert_eq!(id.len(), 32);
        assert!(
            id.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(id, a.federation());
        assert_ne!(id, federation_id(b.cert_pem()).unwrap());
        let renewed = a.renew("a, renewed", 10).unwrap().ca;
        let both = crate::federation::pki::renewal::trust_during_renewal(&renewed, a.cert_pem());
        assert_eq!(federation_id(&both).unwrap(), id);
        assert_eq!(federation_id(renewed.cert_pem()).unwrap(), id);
        assert!(matches!(
            federation_id("not a pem"),
            Err(SpokeIdentityError::Ca(_))
        ));
    }

    #[test]
    fn a_spoke_knows_who_it_is_from_its_client_security() {
        let ca = Ca::generate("fed").unwrap();
        let spoke = ca
            .issue_client(&Identity::spoke("gke").unwrap(), 1)
            .unwrap();
        let tls = TlsPem::new(
            ca.cert_pem().to_string(),
            spoke.cert_pem.clone(),
            spoke.key_pem.clone(),
        )
        .unwrap();
        let security = ClientSecurity::Mtls {
            tls,
            domain: "hub".into(),
        };
        assert_eq!(
            SpokeIdentity::of_client(&security).unwrap(),
            SpokeIdentity {
                name: "gke".into(),
                federation: federation_id(ca.cert_pem()).unwrap()
            }
        );
        let insecure = ClientSecurity::InsecureDevelopment(Identity::spoke("edge").unwrap());
        assert_eq!(
            SpokeIdentity::of_client(&insecure).unwrap(),
            SpokeIdentity {
                name: "edge".into(),
                federation: INSECURE_FEDERATION.into()
            }
        );
        let admin = ClientSecurity::InsecureDevelopment(Identity::admin("ops").unwrap());
        assert!(matches!(
            SpokeIdentity::of_client(&admin),
            Err(SpokeIdentityError::NotASpoke(_))
        ));
    }

    #[test]
    fn only_spoke_objects_have_an_owner_key() {
        let mut meta = ObjectMeta {
            labels: Some(BTreeMap::from([(
                labels::MANAGED_BY.to_string(),
                labels::MANAGER.to_string(),
            )])),
            annotations: Some(BTreeMap::from([(
                ASSIGNMENT_ANNOTATION.to_string(),
                "a/b/c".to_string(),
            )])),
            ..Default::default()
        };
        assert_eq!(owned_key(&meta), None);
        meta.labels
            .as_mut()
            .unwrap()
            .insert(labels::MANAGED_BY.into(), SPOKE_MANAGER.into());
        assert_eq!(owned_key(&meta), Some("a/b/c"));
        assert_eq!(spoke_selector(), "app.kubernetes.io/managed-by=flux-spoke");
    }
}
