//! Decoding only the fields a cache keeps. A watch event carries the whole object, and
//! building all of it in k8s-openapi types (every `managedFields` entry as a JSON tree,
//! every container of a pod spec) was the largest part of the hub's CPU per MiniCluster,
//! only for the caches to drop most of it again. [`Partial`] decodes an object through a
//! [`Fields`] selection instead: unselected fields are skipped in the JSON text and never
//! allocated.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use kube::Resource;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

/// Which fields of a JSON object are decoded.
#[derive(Debug, Clone, Copy)]
pub enum Fields {
    /// The whole value.
    All,
    /// Nothing: the field is decoded as if it were absent.
    Skip,
    /// Every field but those listed, which are decoded with their own selection
    /// ([`Fields::Skip`] to leave one out).
    Except(&'static [(&'static str, Fields)]),
    /// Only the listed fields, each with its own selection.
    Only(&'static [(&'static str, Fields)]),
}

impl Fields {
    /// Everything but `metadata.managedFields`, which no reconcile reads.
    pub const BUT_MANAGED_FIELDS: Fields = Fields::Except(&[(
        "metadata",
        Fields::Except(&[("managedFields", Fields::Skip)]),
    )]);

    /// The selection for field `key` of an object selected by `self`.
    fn child(self, key: &str) -> Fields {
        let find = |list: &[(&str, Fields)]| list.iter().find(|(k, _)| *k == key).map(|e| e.1);
        match self {
            Fields::All => Fields::All,
            Fields::Skip => Fields::Skip,
            Fields::Except(list) => find(list).unwrap_or(Fields::All),
            Fields::Only(list) => find(list).unwrap_or(Fields::Skip),
        }
    }
}

/// The fields of one kind that a watch decodes.
pub trait Selection {
    /// The selection, applied from the object's root.
    const FIELDS: Fields;
}

/// `K` decoded through the selection `S` (by default `K`'s own). Only a carrier between
/// an API response and its reader: watches and the hub's writes unwrap it at once.
pub struct Partial<K, S = K>(pub K, PhantomData<fn() -> S>);

// By hand: derives would also require `S` (a marker) to be Clone and Debug.
impl<K: Clone, S> Clone for Partial<K, S> {
    fn clone(&self) -> Self {
        Partial(self.0.clone(), PhantomData)
    }
}

impl<K: fmt::Debug, S> fmt::Debug for Partial<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<K, S> Partial<K, S> {
    /// The decoded object.
    pub fn into_inner(self) -> K {
        self.0
    }
}

impl<K, S> Partial<K, S> {
    /// `object`, to be sent: a request sends it whole, only the answer is decoded
    /// through the selection.
    pub fn new(object: K) -> Self {
        Partial(object, PhantomData)
    }
}

impl<K: serde::Serialize, S> serde::Serialize for Partial<K, S> {
    fn serialize<Ser: serde::Serializer>(&self, serializer: Ser) -> Result<Ser::Ok, Ser::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de, K: de::Deserialize<'de>, S: Selection> de::Deserialize<'de> for Partial<K, S> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::deserialize(Selective {
            inner: deserializer,
            fields: S::FIELDS,
        })
        .map(|object| Partial(object, PhantomData))
    }
}

impl<K: Resource, S> Resource for Partial<K, S> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        self.0.meta_mut()
    }
}

/// A deserializer that applies `fields` to the objects it yields.
struct Selective<D> {
    inner: D,
    fields: Fields,
}

macro_rules! forward_deserialize {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
            self.inner.$method($($arg,)* Select { inner: visitor, fields: self.fields })
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Selective<D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
        deserialize_ignored_any();
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// Wraps the target type's visitor so that the maps it visits are filtered.
struct Select<V> {
    inner: V,
    fields: Fields,
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty);)*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Select<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_visit! {
        visit_bool(bool);
        visit_i64(i64);
        visit_i128(i128);
        visit_u64(u64);
        visit_u128(u128);
        visit_f64(f64);
        visit_char(char);
        visit_str(&str);
        visit_borrowed_str(&'de str);
        visit_string(String);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }
    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Selective {
            inner: d,
            fields: self.fields,
        })
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(Selective {
            inner: d,
            fields: self.fields,
        })
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(SelectMap {
            inner: map,
            fields: self.fields,
            value: Fields::All,
        })
    }
    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(data)
    }
}

/// A map whose unselected entries are skipped; `value` is the selection of the entry
/// whose key was just returned.
struct SelectMap<A> {
    inner: A,
    fields: Fields,
    value: Fields,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for SelectMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            let Some(Key(key)) = self.inner.next_key::<Key<'de>>()? else {
                return Ok(None);
            };
            match self.fields.child(&key) {
                Fields::Skip => {
                    self.inner.next_value::<IgnoredAny>()?;
                }
                fields => {
                    self.value = fields;
                    return seed
                        .deserialize(de::value::CowStrDeserializer::<A::Error>::new(key))
                        .map(Some);
                }
            }
        }
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        match std::mem::replace(&mut self.value, Fields::All) {
            Fields::All => self.inner.next_value_seed(seed),
            fields => self.inner.next_value_seed(SelectSeed {
                inner: seed,
                fields,
            }),
        }
    }
}

/// A map key, borrowed from the input where it can be.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// The seed of a selected map value: decodes it through its own selection.
struct SelectSeed<T> {
    inner: T,
    fields: Fields,
}

impl<'de, T: DeserializeSeed<'de>> DeserializeSeed<'de> for SelectSeed<T> {
    type Value = T::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T::Value, D::Error> {
        self.inner.deserialize(Selective {
            inner: d,
            fields: self.fields,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    struct NodeOnly;
    impl Selection for NodeOnly {
        const FIELDS: Fields = Fields::Only(&[
            ("apiVersion", Fields::All),
            ("kind", Fields::All),
            (
                "metadata",
                Fields::Except(&[("managedFields", Fields::Skip)]),
            ),
            ("spec", Fields::Only(&[("nodeName", Fields::All)])),
        ]);
    }

    fn pod_json() -> String {
        json!({
            "type": "ADDED",
            "object": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": "mc-0-abcde", "namespace": "ns", "uid": "u1",
                    "labels": {"job-index": "0", "escaped\"key": "v"},
                    "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                                       "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}]
                },
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}],
                         "volumes": [{"name": "v", "emptyDir": {}}]},
                "status": {"phase": "Running", "podIP": "10.0.0.1"}
            }
        })
        .to_string()
    }

    #[test]
    fn a_partial_object_is_sent_whole() {
        let event: serde_json::Value = serde_json::from_str(&pod_json()).expect("json");
        let pod: Pod = serde_json::from_value(event["object"].clone()).expect("a pod");
        let sent = serde_json::to_value(Partial::<Pod, NodeOnly>::new(pod.clone())).expect("json");
        assert_eq!(sent, serde_json::to_value(&pod).expect("json"));
        assert_eq!(sent["spec"]["volumes"][0]["name"], "v");
    }

    #[test]
    fn only_the_selected_fields_are_decoded() {
        let event: kube::api::WatchEvent<Partial<Pod, NodeOnly>> =
            serde_json::from_str(&pod_json()).expect("decodes");
        let kube::api::WatchEvent::Added(Partial(pod, _)) = event else {
            panic!("not an ADDED event");
        };
        assert_eq!(pod.metadata.name.as_deref(), Some("mc-0-abcde"));
        assert_eq!(pod.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("escaped\"key")),
            Some(&"v".to_string())
        );
        assert_eq!(pod.metadata.managed_fields, None);
        let spec = pod.spec.expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert!(spec.containers.is_empty());
        assert_eq!(spec.volumes, None);
        assert_eq!(pod.status, None);
    }

    #[test]
    fn everything_but_managed_fields() {
        struct Lean;
        impl Selection for Lean {
            const FIELDS: Fields = Fields::BUT_MANAGED_FIELDS;
        }
        let json: serde_json::Value = serde_json::from_str(&pod_json()).expect("json");
        let whole: Pod = serde_json::from_value(json["object"].clone()).expect("pod");
        let Partial(lean, _): Partial<Pod, Lean> =
            serde_json::from_value(json["object"].clone()).expect("partial pod");
        assert_eq!(lean.metadata.managed_fields, None);
        let mut expected = whole;
        expected.metadata.managed_fields = None;
        assert_eq!(lean, expected);
    }

    #[test]
    fn a_type_error_in_a_selected_field_is_still_an_error() {
        let bad = json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": 3}, "spec": {"nodeName": "n"}});
        let error =
            serde_json::from_value::<Partial<Pod, NodeOnly>>(bad).expect_err("name is no string");
        assert!(error.to_string().contains("invalid type"), "{error}");
        // The same error in a skipped field is not looked at.
        let skipped = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                             "spec": {"containers": 3}, "status": []});
        assert!(serde_json::from_value::<Partial<Pod, NodeOnly>>(skipped).is_ok());
    }
}
