//! What an admin certificate may do: its scope.
//!
//! An admin identity (`spiffe://flux-framework.org/admin/<name>`) carries its scope in more
//! URI subject alternative names, which the hub reads from the verified certificate on
//! every call:
//!
//! | URI SAN | allows |
//! |---|---|
//! | `urn:flux-framework.org:admin:permission:read` | `ListMiniClusters`, `WatchMiniClusters`, `ListSpokes` |
//! | `urn:flux-framework.org:admin:permission:scale` | `ScaleBurst` |
//! | `urn:flux-framework.org:admin:permission:spokes` | `PinSpoke`, `ForgetSpoke` |
//! | `urn:flux-framework.org:admin:namespace:<ns>` | only MiniClusters of these namespaces (any number) |
//!
//! An admin certificate without any permission URI (issued before scopes existed) may read
//! and scale in every namespace, never manage spokes. `spokes` is refused to a certificate
//! restricted to namespaces: spokes serve every namespace.

use std::collections::BTreeSet;
use std::fmt;

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

use crate::validate::is_dns_label;

const PERMISSION_PREFIX: &str = "urn:flux-framework.org:admin:permission:";
const NAMESPACE_PREFIX: &str = "urn:flux-framework.org:admin:namespace:";

/// One thing an admin may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permission {
    /// See MiniClusters, bursts and spokes.
    Read,
    /// Resize bursts.
    Scale,
    /// Pin and forget spokes (`join`, `unjoin`).
    Spokes,
}

impl Permission {
    /// Every permission.
    pub const ALL: [Permission; 3] = [Permission::Read, Permission::Scale, Permission::Spokes];

    /// Its name (`read`, `scale`, `spokes`).
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Scale => "scale",
            Permission::Spokes => "spokes",
        }
    }

    /// The permission named `name`.
    pub fn parse(name: &str) -> Option<Permission> {
        Permission::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An admin certificate's scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminScope {
    /// What it may do.
    pub permissions: BTreeSet<Permission>,
    /// The namespaces whose MiniClusters it may see and scale; `None`: every namespace.
    pub namespaces: Option<BTreeSet<String>>,
}

impl AdminScope {
    /// The scope of a certificate without scope URIs: read and scale everywhere.
    pub fn unscoped() -> AdminScope {
        AdminScope {
            permissions: BTreeSet::from([Permission::Read, Permission::Scale]),
            namespaces: None,
        }
    }

    /// Every permission, every namespace (insecure development, where callers name
    /// themselves anyway).
    pub fn everything() -> AdminScope {
        AdminScope {
            permissions: Permission::ALL.into_iter().collect(),
            namespaces: None,
        }
    }

    /// `permissions` in `namespaces` (empty: every namespace); the error names what is
    /// wrong (a namespace that is not one, `spokes` with namespaces, no permission).
    pub fn new(
        permissions: impl IntoIterator<Item = Permission>,
        namespaces: &[String],
    ) -> Result<AdminScope, String> {
        let permissions: BTreeSet<Permission> = permissions.into_iter().collect();
        if permissions.is_empty() {
            return Err(
                "an admin scope needs at least one permission (read, scale, spokes)".into(),
            );
        }
        if let Some(bad) = namespaces.iter().find(|n| !is_dns_label(n)) {
            return Err(format!("{bad:?} is not a namespace name"));
        }
        if !namespaces.is_empty() && permissions.contains(&Permission::Spokes) {
            return Err(
                "the spokes permission cannot be limited to namespaces: a spoke serves every namespace"
                    .into(),
            );
        }
        Ok(AdminScope {
            permissions,
            namespaces: (!namespaces.is_empty()).then(|| namespaces.iter().cloned().collect()),
        })
    }

    /// The URI SANs that carry this scope in a certificate.
    pub fn uris(&self) -> Vec<String> {
        self.permissions
            .iter()
            .map(|p| format!("{PERMISSION_PREFIX}{p}"))
            .chain(
                self.namespaces
                    .iter()
                    .flatten()
                    .map(|n| format!("{NAMESPACE_PREFIX}{n}")),
            )
            .collect()
    }

    /// The scope carried by a certificate's URI SANs (other URIs are ignored); an unknown
    /// permission or a bad namespace is an error, never ignored.
    pub fn from_uris<'a>(uris: impl IntoIterator<Item = &'a str>) -> Result<AdminScope, String> {
        let mut permissions = Vec::new();
        let mut namespaces = Vec::new();
        for uri in uris {
            if let Some(p) = uri.strip_prefix(PERMISSION_PREFIX) {
                permissions.push(
                    Permission::parse(p)
                        .ok_or_else(|| format!("unknown admin permission {p:?}"))?,
                );
            } else if let Some(n) = uri.strip_prefix(NAMESPACE_PREFIX) {
                namespaces.push(n.to_string());
            }
        }
        if permissions.is_empty() {
            if !namespaces.is_empty() {
                return Err("admin namespaces without a permission".into());
            }
            return Ok(AdminScope::unscoped());
        }
        AdminScope::new(permissions, &namespaces)
    }

    /// Whether it may do `permission`, for MiniClusters of `namespace` (`None`: not about
    /// one namespace, e.g. listing spokes or every namespace).
    pub fn allows(&self, permission: Permission, namespace: Option<&str>) -> bool {
        self.permissions.contains(&permission)
            && match (&self.namespaces, namespace) {
                (None, _) => true,
                (Some(allowed), Some(ns)) => allowed.contains(ns),
                // Restricted to namespaces, asked about all of them: only reading, which
                // the caller then filters with `sees`.
                (Some(_), None) => permission == Permission::Read,
            }
    }

    /// Whether MiniClusters of `namespace` are visible to it.
    pub fn sees(&self, namespace: &str) -> bool {
        self.namespaces
            .as_ref()
            .is_none_or(|n| n.contains(namespace))
    }
}

impl fmt::Display for AdminScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let permissions: Vec<&str> = self.permissions.iter().map(|p| p.as_str()).collect();
        write!(f, "{}", permissions.join(","))?;
        match &self.namespaces {
            None => write!(f, " in every namespace"),
            Some(n) => write!(
                f,
                " in {}",
                n.iter().map(String::as_str).collect::<Vec<_>>().join(",")
            ),
        }
    }
}

/// The admin scope carried by a DER certificate's URI SANs.
pub fn admin_scope_from_der(der: &[u8]) -> Result<AdminScope, String> {
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(der)
        .map_err(|e| format!("the client certificate does not parse: {e}"))?;
    let mut uris = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let GeneralName::URI(uri) = name {
                uris.push(*uri);
            }
        }
    }
    AdminScope::from_uris(uris)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scoped_admin_certificate_carries_its_scope_and_identity() {
        let ca = crate::federation::pki::Ca::generate("test").unwrap();
        let scope = AdminScope::new([Permission::Read], &["a".into(), "b".into()]).unwrap();
        let cert = ca.issue_admin("ops", &scope, 30).unwrap();
        let der = &cert.cert_der;
        assert_eq!(admin_scope_from_der(der).unwrap(), scope);
        assert_eq!(
            crate::federation::identity_from_der(der).unwrap(),
            crate::federation::Identity::admin("ops").unwrap()
        );
        // Its expiry, as the hub and the spoke read it for their metrics.
        let not_after = crate::federation::pki::not_after_unix(der).unwrap();
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        assert!(
            (now + 29 * 86_400..=now + 31 * 86_400).contains(&not_after),
            "{not_after} is about 30 days from {now}"
        );
        assert_eq!(
            crate::federation::pki::not_after_of_pem(&cert.cert_pem),
            Some(not_after)
        );
        assert_eq!(crate::federation::pki::not_after_unix(b"junk"), None);
    }

    #[test]
    fn scopes_round_trip_through_uris_and_decide() {
        let s = AdminScope::new([Permission::Read, Permission::Scale], &["hpc".into()]).unwrap();
        assert_eq!(
            s.uris(),
            [
                "urn:flux-framework.org:admin:permission:read",
                "urn:flux-framework.org:admin:permission:scale",
                "urn:flux-framework.org:admin:namespace:hpc"
            ]
        );
        let back = AdminScope::from_uris(s.uris().iter().map(String::as_str)).unwrap();
        assert_eq!(back, s);
        assert!(s.allows(Permission::Scale, Some("hpc")));
        assert!(!s.allows(Permission::Scale, Some("other")));
        assert!(!s.allows(Permission::Scale, None));
        assert!(s.allows(Permission::Read, None), "reads, filtered");
        assert!(!s.sees("other") && s.sees("hpc"));
        assert!(!s.allows(Permission::Spokes, None));
        assert_eq!(s.to_string(), "read,scale in hpc");

        let legacy = AdminScope::from_uris(["spiffe://flux-framework.org/admin/ops"]).unwrap();
        assert_eq!(legacy, AdminScope::unscoped());
        assert!(legacy.allows(Permission::Scale, Some("any")));
        assert!(
            !legacy.allows(Permission::Spokes, None),
            "spokes needs an explicit scope"
        );

        assert!(AdminScope::new([Permission::Spokes], &["hpc".into()]).is_err());
        assert!(AdminScope::new([], &[]).is_err());
        assert!(AdminScope::new([Permission::Read], &["Bad".into()]).is_err());
        assert!(AdminScope::from_uris(["urn:flux-framework.org:admin:permission:root"]).is_err());
        assert!(AdminScope::from_uris(["urn:flux-framework.org:admin:namespace:hpc"]).is_err());
    }
}
