//! Whose object is it, and creating with POST, changing with server-side apply.
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
//! On the API server a server-side apply that creates an object costs several times a
//! POST (measured on the testbed: 80-90 ms against 20-25 ms per object under load), and a
//! new MiniCluster's four objects are most of what the hub writes. So the hub creates
//! them with a POST under its field manager and applies only changes. A POST records its
//! fields under an `Update` entry of that manager, though, and an apply never removes a
//! field that an `Update` entry still owns: a key dropped from a ConfigMap would stay. So
//! before the first apply to such an object the hub rewrites that entry as the manager's
//! `Apply` entry (the API server accepts a managedFields change like any other field),
//! and from then on applies own and prune exactly what they send.

use flux_shared::render::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, ObjectMeta};
use serde_json::Value;

/// `entries` with every `Update` entry of `manager` on the main resource (not a
/// subresource such as `status`) folded into its `Apply` entry, or `None` when there is
/// no such `Update` entry (nothing to change).
pub fn as_applied(
    entries: &[ManagedFieldsEntry],
    manager: &str,
) -> Option<Vec<ManagedFieldsEntry>> {
    let is_mine = |e: &ManagedFieldsEntry, operation: &str| {
        e.manager.as_deref() == Some(manager)
            && e.operation.as_deref() == Some(operation)
            && e.subresource.as_deref().unwrap_or("").is_empty()
    };
    if !entries.iter().any(|e| is_mine(e, "Update")) {
        return None;
    }
    let mut applied: Option<ManagedFieldsEntry> = None;
    let mut others = Vec::with_capacity(entries.len());
    for entry in entries {
        if is_mine(entry, "Update") || is_mine(entry, "Apply") {
            applied = Some(match applied {
                None => ManagedFieldsEntry {
                    operation: Some("Apply".into()),
                    ..entry.clone()
                },
                Some(mut into) => {
                    let fields = union(
                        into.fields_v1.as_ref().map(|f| &f.0),
                        entry.fields_v1.as_ref().map(|f| &f.0),
                    );
                    into.fields_v1 = Some(FieldsV1(fields));
                    // An apply's entry carries the version it was applied at; keep it.
                    if is_mine(entry, "Apply") {
                        into.api_version.clone_from(&entry.api_version);
                    }
                    into
                }
            });
        } else {
            others.push(entry.clone());
        }
    }
    others.extend(applied);
    Some(others)
}

/// The union of two FieldsV1 trees (nested objects whose keys name fields; leaves are
/// empty objects).
fn union(a: Option<&Value>, b: Option<&Value>) -> Value {
    match (a, b) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let mut merged = a.clone();
            for (key, value) in b {
                let joined = union(merged.get(key), Some(value));
                merged.insert(key.clone(), joined);
            }
            Value::Object(merged)
        }
        (Some(a), None) => a.clone(),
        (_, Some(b)) => b.clone(),
        (None, None) => Value::Object(Default::default()),
    }
}

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
    use serde_json::json;

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

    fn entry(
        manager: &str,
        operation: &str,
        subresource: Option<&str>,
        fields: Value,
    ) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            api_version: Some("v1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: subresource.map(Into::into),
            time: None,
        }
    }

    #[test]
    fn nothing_to_do_without_an_update_entry_of_the_manager() {
        let entries = [
            entry("flux-hub", "Apply", None, json!({"f:data": {}})),
            entry(
                "flux-hub",
                "Update",
                Some("status"),
                json!({"f:status": {}}),
            ),
            entry(
                "kube-controller-manager",
                "Update",
                None,
                json!({"f:spec": {}}),
            ),
        ];
        assert_eq!(as_applied(&entries, "flux-hub"), None);
    }

    #[test]
    fn a_created_objects_entry_becomes_the_managers_apply_entry() {
        let created = json!({"f:data": {".": {}, "f:keep": {}, "f:drop": {}}});
        let controller = entry(
            "kube-controller-manager",
            "Update",
            Some("status"),
            json!({"f:status": {}}),
        );
        let entries = [
            entry("flux-hub", "Update", None, created.clone()),
            controller.clone(),
        ];
        let rewritten = as_applied(&entries, "flux-hub").expect("a change");
        assert_eq!(rewritten.len(), 2);
        assert_eq!(
            rewritten[0], controller,
            "other managers' entries are kept as they are"
        );
        let mine = &rewritten[1];
        assert_eq!(mine.operation.as_deref(), Some("Apply"));
        assert_eq!(mine.manager.as_deref(), Some("flux-hub"));
        assert_eq!(mine.fields_v1.as_ref().map(|f| &f.0), Some(&created));
    }

    #[test]
    fn an_update_entry_next_to_an_apply_entry_is_folded_into_it() {
        let mut applied = entry("flux-hub", "Apply", None, json!({"f:data": {"f:a": {}}}));
        applied.api_version = Some("batch/v1".into());
        let entries = [
            entry(
                "flux-hub",
                "Update",
                None,
                json!({"f:data": {"f:b": {}}, "f:metadata": {"f:labels": {"f:x": {}}}}),
            ),
            applied,
        ];
        let rewritten = as_applied(&entries, "flux-hub").expect("a change");
        assert_eq!(rewritten.len(), 1);
        assert_eq!(rewritten[0].operation.as_deref(), Some("Apply"));
        assert_eq!(rewritten[0].api_version.as_deref(), Some("batch/v1"));
        assert_eq!(
            rewritten[0].fields_v1.as_ref().map(|f| &f.0),
            Some(
                &json!({"f:data": {"f:a": {}, "f:b": {}}, "f:metadata": {"f:labels": {"f:x": {}}}})
            )
        );
    }
}
