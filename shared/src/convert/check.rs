//! Checking the v1alpha2 result: it must deserialize into the typed MiniCluster (a failure
//! names its field), validate, and carry every converted field.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value};

use super::input::join;
use crate::api::{MiniCluster, MiniClusterContainer, MiniClusterSpec, MiniClusterStatus};
use crate::validate::{self, FieldError, ValidationErrors};

/// Deserialize into [`MiniCluster`] and validate.
pub(super) fn check_v1alpha2(doc: &Value) -> Result<MiniCluster, ValidationErrors> {
    let mc: MiniCluster =
        serde_json::from_value(doc.clone()).map_err(|e| ValidationErrors(vec![locate(doc, &e)]))?;
    validate::validate(&mc)?;
    Ok(mc)
}

/// Whether a value says nothing (absent, null, empty list or map).
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Collect the paths of `output` whose values `typed` (the re-serialized MiniCluster)
/// does not carry.
pub(super) fn unrepresented(output: &Value, typed: &Value, path: &str, missing: &mut Vec<String>) {
    match (output, typed) {
        (Value::Object(o), Value::Object(t)) => {
            for (k, v) in o.iter().filter(|(_, v)| !is_empty(v)) {
                match t.get(k) {
                    Some(tv) => unrepresented(v, tv, &join(path, k), missing),
                    None => missing.push(join(path, k)),
                }
            }
        }
        (Value::Array(o), Value::Array(t)) if o.len() == t.len() => {
            for (i, (v, tv)) in o.iter().zip(t).enumerate() {
                unrepresented(v, tv, &format!("{path}[{i}]"), missing);
            }
        }
        (o, t) if o == t => {}
        _ => missing.push(path.to_string()),
    }
}

/// Name the field a deserialization error comes from, by deserializing the parts alone.
fn locate(doc: &Value, err: &serde_json::Error) -> FieldError {
    let problem = |field: String, e: &serde_json::Error| FieldError {
        field,
        rule: e.to_string(),
    };
    let Some(obj) = doc.as_object() else {
        return problem("document".into(), err);
    };
    if let Some(Err(e)) = obj
        .get("metadata")
        .map(|m| serde_json::from_value::<ObjectMeta>(m.clone()))
    {
        return problem("metadata".into(), &e);
    }
    if let Some(Err(e)) = obj
        .get("status")
        .filter(|s| !s.is_null())
        .map(|s| serde_json::from_value::<MiniClusterStatus>(s.clone()))
    {
        return problem("status".into(), &e);
    }
    let Some(spec) = obj.get("spec").and_then(Value::as_object) else {
        return problem("spec".into(), err);
    };
    for (key, value) in spec {
        if let ("containers" | "services", Some(list)) = (key.as_str(), value.as_array()) {
            for (i, c) in list.iter().enumerate() {
                if let Err(e) = serde_json::from_value::<MiniClusterContainer>(c.clone()) {
                    let base = format!("spec.{key}[{i}]");
                    return c
                        .as_object()
                        .and_then(|fields| {
                            fields.iter().find_map(|(k, v)| {
                                let mut probe = Map::new();
                                probe.insert("image".into(), "".into());
                                probe.insert(k.clone(), v.clone());
                                serde_json::from_value::<MiniClusterContainer>(Value::Object(probe))
                                    .err()
                                    .map(|e| problem(format!("{base}.{k}"), &e))
                            })
                        })
                        .unwrap_or_else(|| problem(base, &e));
                }
            }
        }
        let mut probe = Map::new();
        probe.insert("containers".into(), Value::Array(Vec::new()));
        probe.insert(key.clone(), value.clone());
        if let Err(e) = serde_json::from_value::<MiniClusterSpec>(Value::Object(probe)) {
            return problem(format!("spec.{key}"), &e);
        }
    }
    problem("spec".into(), err)
}
