//! Whose object is it: the hub changes only its MiniCluster's own children.
//!
//! # Only what we made
//!
//! A MiniCluster's children have names derived from its own (`X`, `X-flux-config`,
//! `X-curve`, ...), so someone else's object can carry a name the hub would use. The hub
//! changes an object only when it is this MiniCluster's: its controller reference names
//! the MiniCluster by UID ([`holder`]). Anything else (someone else's object, another
//! MiniCluster's, one of an earlier MiniCluster of the same name) is never patched,
//! adopted or deleted: the MiniCluster is refused with the object named. The controller
//! reference is the test because it is what the garbage collector acts on (adopting an
//! object would hand it to the MiniCluster's deletion) and because every hub version
//! wrote it, so objects an older hub made are still recognised.
//!
//! # Create with POST
//!
//! The hub creates its objects with a POST and changes them with server-side apply; see
//! [`flux_shared::managed_fields`] for the one step that needs.

use flux_shared::render::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Who holds an existing object whose name a MiniCluster's child would take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// The MiniCluster itself: its controller reference names it by UID.
    Ours,
    /// Anyone else, described for the refusal ("controlled by MiniCluster hpc/other",
    /// "managed by helm", "made by someone else").
    Theirs(String),
}

/// Who holds `meta` with respect to the MiniCluster whose UID is `mc_uid`.
pub fn holder(meta: &ObjectMeta, mc_uid: &str) -> Holder {
    let controller = meta
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true));
    if let Some(r) = controller {
        let ours = r.kind == "MiniCluster"
            && r.api_version.split('/').next() == Some(MINICLUSTER_GROUP)
            && !mc_uid.is_empty()
            && r.uid == mc_uid;
        if ours {
            return Holder::Ours;
        }
        let ns = meta.namespace.as_deref().unwrap_or_default();
        return Holder::Theirs(if r.kind == "MiniCluster" {
            format!(
                "controlled by another MiniCluster {ns}/{} (uid {})",
                r.name, r.uid
            )
        } else {
            format!("controlled by {} {}", r.kind, r.name)
        });
    }
    let managed_by = meta.labels.as_ref().and_then(|l| l.get(labels::MANAGED_BY));
    Holder::Theirs(match managed_by {
        Some(m) if m == labels::MANAGER => {
            "labelled as flux-hub's but controlled by no MiniCluster".to_string()
        }
        Some(m) => format!("managed by {m}"),
        None => "made by someone else".to_string(),
    })
}

/// API group of the MiniCluster kind (any version).
const MINICLUSTER_GROUP: &str = "flux-framework.org";

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(owner: Option<(&str, &str, &str, bool)>, managed_by: Option<&str>) -> ObjectMeta {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        ObjectMeta {
            name: Some("x-flux-config".into()),
            namespace: Some("hpc".into()),
            owner_references: owner.map(|(api_version, kind, uid, controller)| {
                vec![OwnerReference {
                    api_version: api_version.into(),
                    kind: kind.into(),
                    name: "x".into(),
                    uid: uid.into(),
                    controller: Some(controller),
                    block_owner_deletion: Some(true),
                }]
            }),
            labels: managed_by.map(|m| [(labels::MANAGED_BY.to_string(), m.to_string())].into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn ours_is_the_minicluster_named_by_uid_as_controller() {
        let mine = ("flux-framework.org/v1alpha2", "MiniCluster", "u-1", true);
        assert_eq!(
            holder(&meta(Some(mine), Some("flux-hub")), "u-1"),
            Holder::Ours
        );
        // An older hub's object: the same reference, whatever the labels.
        assert_eq!(holder(&meta(Some(mine), None), "u-1"), Holder::Ours);
        // Another version of the API names the same kind.
        let v1 = ("flux-framework.org/v1alpha1", "MiniCluster", "u-1", true);
        assert_eq!(holder(&meta(Some(v1), None), "u-1"), Holder::Ours);
    }

    #[test]
    fn anything_else_is_theirs_and_says_whose() {
        let cases = [
            // Another MiniCluster of this namespace, or an earlier one of the same name.
            (
                meta(
                    Some(("flux-framework.org/v1alpha2", "MiniCluster", "u-2", true)),
                    Some("flux-hub"),
                ),
                "controlled by another MiniCluster hpc/x (uid u-2)",
            ),
            // Not the controller: an owner reference alone makes nothing ours.
            (
                meta(
                    Some(("flux-framework.org/v1alpha2", "MiniCluster", "u-1", false)),
                    None,
                ),
                "made by someone else",
            ),
            // Another group's kind of the same name.
            (
                meta(Some(("example.com/v1", "MiniCluster", "u-1", true)), None),
                "controlled by another MiniCluster hpc/x (uid u-1)",
            ),
            (
                meta(Some(("apps/v1", "Deployment", "u-9", true)), None),
                "controlled by Deployment x",
            ),
            // Our label is not enough: anyone may write it.
            (
                meta(None, Some("flux-hub")),
                "labelled as flux-hub's but controlled by no MiniCluster",
            ),
            (meta(None, Some("Helm")), "managed by Helm"),
            (meta(None, None), "made by someone else"),
        ];
        for (meta, why) in cases {
            assert_eq!(holder(&meta, "u-1"), Holder::Theirs(why.into()), "{meta:?}");
        }
        // A MiniCluster without a UID (never from the API server) owns nothing.
        let mine = ("flux-framework.org/v1alpha2", "MiniCluster", "", true);
        assert!(matches!(
            holder(&meta(Some(mine), None), ""),
            Holder::Theirs(_)
        ));
    }
}
