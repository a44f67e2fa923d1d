//! "Is the live object already what we want?" without a write.
//!
//! Server-side apply only sets the fields we send, and the API server adds defaults and
//! fields other managers own. So the test is whether every field of the desired object
//! has the same value in the live one: the desired JSON is a subset of the live JSON.

use serde_json::Value;

/// Whether every field set in `desired` has the same value in `live`. Arrays must have
/// the same length and match element by element (the renderer's lists are complete).
pub fn is_subset(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d.iter().all(|(k, dv)| match l.get(k) {
            Some(lv) => is_subset(dv, lv),
            // An explicit null or an empty collection we send is the same as absent.
            None => is_empty(dv),
        }),
        (Value::Array(d), Value::Array(l)) => {
            d.len() == l.len() && d.iter().zip(l).all(|(dv, lv)| is_subset(dv, lv))
        }
        (Value::Number(d), Value::Number(l)) => d.as_f64() == l.as_f64(),
        (d, l) => d == l,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset_rules() {
        let live = json!({"a": 1, "b": {"c": "x", "d": [1, 2]}, "e": "server-default"});
        assert!(is_subset(&json!({"a": 1}), &live));
        assert!(is_subset(&json!({"b": {"d": [1, 2]}}), &live));
        assert!(is_subset(&json!({"a": 1.0}), &live));
        assert!(!is_subset(&json!({"a": 2}), &live));
        assert!(
            !is_subset(&json!({"b": {"d": [1]}}), &live),
            "lists must match in full"
        );
        assert!(!is_subset(&json!({"z": 1}), &live), "missing field");
        assert!(
            is_subset(&json!({"z": null, "y": {}, "x": []}), &live),
            "empty means absent"
        );
        assert!(is_subset(
            &json!([{"name": "a"}]),
            &json!([{"name": "a", "extra": 1}])
        ));
    }
}
