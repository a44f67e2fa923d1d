//! One YAML document: MiniClusters by apiVersion, `List`s item by item, everything else
//! passed through; a v1alpha1 MiniCluster's top level (metadata, status, spec) and the
//! check that its v1alpha2 result is valid and fully carried by the typed MiniCluster.

use serde_json::{Map, Value};

use super::check::{check_v1alpha2, unrepresented};
use super::fields::{SERVER_METADATA, TOP_KEYS};
use super::input::Cx;
use super::spec::convert_spec;
use super::{API_GROUP, Conversion, ConvertError, Loss, Note, V1ALPHA1, V1ALPHA2};
use crate::validate::{FieldError, ValidationErrors};

/// Convert one document: a v1alpha1 MiniCluster becomes v1alpha2; a v1alpha2 MiniCluster
/// is validated and passed through; anything else passes through unchanged.
pub fn convert_document(doc: &Value) -> Result<Conversion, ConvertError> {
    let Some(obj) = doc.as_object() else {
        return Ok(Conversion::unchanged(doc));
    };
    let kind = obj.get("kind").and_then(Value::as_str);
    let api_version = obj.get("apiVersion").and_then(Value::as_str);
    match kind {
        Some("MiniCluster") => {}
        Some("List" | "MiniClusterList") if obj.get("items").is_some_and(Value::is_array) => {
            return convert_list(obj);
        }
        _ => return Ok(Conversion::unchanged(doc)),
    }
    match api_version {
        Some(V1ALPHA1) => convert_v1alpha1(obj),
        Some(V1ALPHA2) => {
            check_v1alpha2(doc).map_err(ConvertError::Output)?;
            Ok(Conversion::unchanged(doc))
        }
        Some(other) if other.split('/').next() != Some(API_GROUP) => Ok(Conversion::unchanged(doc)),
        other => Err(ConvertError::Input(ValidationErrors::single(
            "apiVersion",
            format!(
                "{:?} is not a MiniCluster version this tool knows (expected {V1ALPHA1} or {V1ALPHA2})",
                other.unwrap_or_default()
            ),
        ))),
    }
}

/// Convert every item of a `List` / `MiniClusterList`.
fn convert_list(obj: &Map<String, Value>) -> Result<Conversion, ConvertError> {
    let mut output = obj.clone();
    let mut lost = Vec::new();
    let mut notes = Vec::new();
    let mut passed_through = true;
    let mut items = Vec::new();
    let source = obj.get("items").and_then(Value::as_array);
    for (i, item) in source.into_iter().flatten().enumerate() {
        let prefix = format!("items[{i}].");
        let c = convert_document(item).map_err(|e| e.prefixed(&prefix))?;
        passed_through &= c.passed_through;
        lost.extend(c.lost.into_iter().map(|l| Loss {
            field: format!("{prefix}{}", l.field),
            advice: l.advice,
        }));
        notes.extend(c.notes.into_iter().map(|n| Note {
            field: format!("{prefix}{}", n.field),
            text: n.text,
        }));
        items.push(c.output);
    }
    if obj.get("apiVersion").and_then(Value::as_str) == Some(V1ALPHA1) {
        output.insert("apiVersion".into(), V1ALPHA2.into());
        passed_through = false;
    }
    if passed_through {
        return Ok(Conversion::unchanged(&Value::Object(obj.clone())));
    }
    output.insert("items".into(), Value::Array(items));
    Ok(Conversion {
        output: Value::Object(output),
        lost,
        notes,
        passed_through,
    })
}

fn convert_v1alpha1(doc: &Map<String, Value>) -> Result<Conversion, ConvertError> {
    let mut cx = Cx::default();
    let mut out = Map::new();
    out.insert("apiVersion".into(), V1ALPHA2.into());
    out.insert("kind".into(), "MiniCluster".into());
    // Unknown top-level keys are errors, like everywhere else.
    for key in doc.keys().filter(|k| !TOP_KEYS.contains(&k.as_str())) {
        cx.err(
            key.as_str(),
            "unknown v1alpha1 field (not part of the v1alpha1 MiniCluster API)",
        );
    }
    match doc.get("metadata").filter(|m| !m.is_null()) {
        Some(Value::Object(meta)) => {
            let mut meta = meta.clone();
            let removed: Vec<&str> = SERVER_METADATA
                .iter()
                .copied()
                .filter(|k| meta.remove(*k).is_some())
                .collect();
            if !removed.is_empty() {
                cx.note(
                    "metadata",
                    format!(
                        "removed {}: written by the API server for the v1alpha1 object",
                        removed.join(", ")
                    ),
                );
            }
            out.insert("metadata".into(), Value::Object(meta));
        }
        Some(_) => cx.err("metadata", "must be an object"),
        None => cx.err("metadata.name", "is required"),
    }
    if doc.get("status").is_some_and(|s| !s.is_null()) {
        cx.note(
            "status",
            "dropped: the status is written by the operator, not part of the manifest",
        );
    }
    match doc.get("spec").filter(|s| !s.is_null()) {
        Some(spec) => {
            if let Some(spec) = convert_spec(&mut cx, spec) {
                out.insert("spec".into(), Value::Object(spec));
            }
        }
        None => cx.err("spec.containers", "is required"),
    }
    if !cx.errors.is_empty() {
        return Err(ConvertError::Input(ValidationErrors(cx.errors)));
    }
    let output = Value::Object(out);
    let mc = check_v1alpha2(&output).map_err(ConvertError::Output)?;
    // Everything converted must survive in the typed MiniCluster: nothing is dropped.
    let typed = serde_json::to_value(&mc).unwrap_or(Value::Null);
    let mut missing = Vec::new();
    unrepresented(&output, &typed, "", &mut missing);
    if !missing.is_empty() {
        return Err(ConvertError::Output(ValidationErrors(
            missing
                .into_iter()
                .map(|field| FieldError {
                    field,
                    rule: "is not carried by the v1alpha2 MiniCluster type".into(),
                })
                .collect(),
        )));
    }
    Ok(Conversion {
        output,
        lost: cx.lost,
        notes: cx.notes,
        passed_through: false,
    })
}
