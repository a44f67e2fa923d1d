//! Reading v1alpha1 objects: the problems, losses and notes of one document ([`Cx`]), typed
//! access to objects whose keys were checked ([`Obj`]), and the helpers that write the
//! v1alpha2 fields only when there is something to write.

use serde_json::{Map, Value};

use super::{Loss, Note};
use crate::validate::FieldError;

/// Problems, losses and notes collected while converting one document.
#[derive(Default)]
pub(super) struct Cx {
    pub(super) errors: Vec<FieldError>,
    pub(super) lost: Vec<Loss>,
    pub(super) notes: Vec<Note>,
}

impl Cx {
    pub(super) fn err(&mut self, field: impl Into<String>, rule: impl Into<String>) {
        self.errors.push(FieldError {
            field: field.into(),
            rule: rule.into(),
        });
    }

    pub(super) fn lose(&mut self, field: impl Into<String>, advice: impl Into<String>) {
        self.lost.push(Loss {
            field: field.into(),
            advice: advice.into(),
        });
    }

    pub(super) fn note(&mut self, field: impl Into<String>, text: impl Into<String>) {
        self.notes.push(Note {
            field: field.into(),
            text: text.into(),
        });
    }
}

pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A v1alpha1 object whose keys were all checked against the known fields.
#[derive(Clone, Copy)]
pub(super) struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: &'a str,
}

/// Read `value` at `path` as an object with the `known` keys; reports unknown keys.
pub(super) fn object<'a>(
    cx: &mut Cx,
    value: &'a Value,
    path: &'a str,
    known: &[&str],
) -> Option<Obj<'a>> {
    let Value::Object(map) = value else {
        cx.err(path, "must be an object");
        return None;
    };
    for key in map.keys() {
        if !known.contains(&key.as_str()) {
            cx.err(
                join(path, key),
                "unknown v1alpha1 field (not part of the v1alpha1 MiniCluster API)",
            );
        }
    }
    Some(Obj { map, path })
}

impl<'a> Obj<'a> {
    pub(super) fn at(&self, key: &str) -> String {
        join(self.path, key)
    }

    /// The value of `key`, `None` when absent or null.
    pub(super) fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub(super) fn string(&self, cx: &mut Cx, key: &str) -> Option<&'a str> {
        match self.get(key)? {
            Value::String(s) => Some(s.as_str()),
            _ => {
                cx.err(self.at(key), "must be a string");
                None
            }
        }
    }

    /// A string, `None` also when empty (Go's zero value: unset).
    pub(super) fn text(&self, cx: &mut Cx, key: &str) -> Option<&'a str> {
        self.string(cx, key).filter(|s| !s.is_empty())
    }

    pub(super) fn boolean(&self, cx: &mut Cx, key: &str) -> Option<bool> {
        match self.get(key)? {
            Value::Bool(b) => Some(*b),
            _ => {
                cx.err(self.at(key), "must be true or false");
                None
            }
        }
    }

    /// An integer within `min..=max`.
    pub(super) fn int(&self, cx: &mut Cx, key: &str, min: i64, max: i64) -> Option<i64> {
        let value = self.get(key)?;
        match value.as_i64() {
            Some(n) if (min..=max).contains(&n) => Some(n),
            Some(n) => {
                cx.err(
                    self.at(key),
                    format!("{n} is out of range ({min} to {max})"),
                );
                None
            }
            None => {
                cx.err(self.at(key), "must be an integer");
                None
            }
        }
    }

    pub(super) fn int32(&self, cx: &mut Cx, key: &str) -> Option<i64> {
        self.int(cx, key, i64::from(i32::MIN), i64::from(i32::MAX))
    }

    pub(super) fn object(
        &self,
        cx: &mut Cx,
        key: &str,
        path: &'a str,
        known: &[&str],
    ) -> Option<Obj<'a>> {
        object(cx, self.get(key)?, path, known)
    }

    pub(super) fn array(&self, cx: &mut Cx, key: &str) -> Option<&'a Vec<Value>> {
        match self.get(key)? {
            Value::Array(items) => Some(items),
            _ => {
                cx.err(self.at(key), "must be a list");
                None
            }
        }
    }

    /// A map (of any values); `None` when absent.
    pub(super) fn map(&self, cx: &mut Cx, key: &str) -> Option<&'a Map<String, Value>> {
        match self.get(key)? {
            Value::Object(m) => Some(m),
            _ => {
                cx.err(self.at(key), "must be a map");
                None
            }
        }
    }

    /// A map of strings, `None` when absent or empty.
    pub(super) fn string_map(&self, cx: &mut Cx, key: &str) -> Option<Value> {
        let map = self.map(cx, key)?;
        let mut ok = true;
        for (k, v) in map {
            if !v.is_string() {
                cx.err(format!("{}[{k:?}]", self.at(key)), "must be a string");
                ok = false;
            }
        }
        (ok && !map.is_empty()).then(|| Value::Object(map.clone()))
    }

    /// A map of integers or strings (a Kubernetes resource list), as quantity strings.
    pub(super) fn quantities(&self, cx: &mut Cx, key: &str) -> Option<Value> {
        let map = self.map(cx, key)?;
        let mut out = Map::new();
        for (k, v) in map {
            match v {
                Value::String(s) => {
                    out.insert(k.clone(), Value::String(s.clone()));
                }
                Value::Number(n) if n.is_i64() || n.is_u64() => {
                    out.insert(k.clone(), Value::String(n.to_string()));
                }
                _ => cx.err(
                    format!("{}[{k:?}]", self.at(key)),
                    "must be an integer or a string",
                ),
            }
        }
        (!out.is_empty()).then_some(Value::Object(out))
    }
}

/// Insert `value` unless it is `None`.
pub(super) fn put(out: &mut Map<String, Value>, key: &str, value: Option<impl Into<Value>>) {
    if let Some(v) = value {
        out.insert(key.to_string(), v.into());
    }
}

/// Insert a nested object unless it is empty.
pub(super) fn put_object(out: &mut Map<String, Value>, key: &str, value: Map<String, Value>) {
    if !value.is_empty() {
        out.insert(key.to_string(), Value::Object(value));
    }
}
