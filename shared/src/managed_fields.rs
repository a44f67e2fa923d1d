//! Creating with POST, changing with server-side apply.
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
//!
//! The spoke does the same: it creates with a POST (so that an existing object of someone
//! else is never taken over) and applies changes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use serde_json::Value;

/// `entries` with every `Update` entry of `manager` on the main resource (not a
/// subresource such as `status`) folded into its `Apply` entry, or `None` when there is
/// no such `Update` entry (nothing to change).
///
/// `released` names fields by their path (`["spec", "suspend"]`) that the POST set
/// but the manager's applies must not own: left to no manager, the API server keeps their
/// value until someone else writes it, where an apply that stops sending an owned field
/// would reset it.
pub fn as_applied(
    entries: &[ManagedFieldsEntry],
    manager: &str,
    released: &[&[&str]],
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
    if let Some(fields) = applied.as_mut().and_then(|a| a.fields_v1.as_mut()) {
        for path in released {
            release(&mut fields.0, path);
        }
    }
    others.extend(applied);
    Some(others)
}

/// Removes the field at `path` from a FieldsV1 tree (whose keys are `f:<field>`), and the
/// objects it leaves empty but for their `"."` marker.
fn release(tree: &mut Value, path: &[&str]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let Some(object) = tree.as_object_mut() else {
        return;
    };
    let key = format!("f:{first}");
    if rest.is_empty() {
        object.remove(&key);
    } else if let Some(child) = object.get_mut(&key) {
        release(child, rest);
        if child
            .as_object()
            .is_some_and(|c| c.keys().all(|k| k == "."))
        {
            object.remove(&key);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        assert_eq!(as_applied(&entries, "flux-hub", &[]), None);
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
        let rewritten = as_applied(&entries, "flux-hub", &[]).expect("a change");
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
        let rewritten = as_applied(&entries, "flux-hub", &[]).expect("a change");
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

    #[test]
    fn released_fields_are_owned_by_no_one() {
        let entries = [entry(
            "flux-hub",
            "Update",
            None,
            json!({"f:spec": {"f:suspend": {}, "f:parallelism": {}}, "f:status": {"f:x": {}}}),
        )];
        let rewritten = as_applied(
            &entries,
            "flux-hub",
            &[&["spec", "suspend"], &["status", "x"], &["absent", "y"]],
        )
        .expect("a change");
        assert_eq!(
            rewritten[0].fields_v1.as_ref().map(|f| &f.0),
            Some(&json!({"f:spec": {"f:parallelism": {}}})),
            "the released leaf goes, and a parent left empty with it"
        );
    }
}
