//! Volumes: `spec.volumes` (claims the operator no longer creates, each a loss) and the
//! containers' mounts of them and `existingVolumes`, merged into v1alpha2's `volumes`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::fields::{EXISTING_VOLUME_KEYS, MOUNT_KEYS, VOLUME_KEYS};
use super::input::{Cx, Obj, object, put, put_object};

/// A `spec.volumes` entry: mounted as a node directory or as a claim of the same name.
pub(super) struct SpecVolume {
    host_path: Option<String>,
}

/// `spec.volumes`: every entry is a loss (the operator no longer creates PVs and claims).
pub(super) fn spec_volumes(cx: &mut Cx, s: &Obj<'_>) -> BTreeMap<String, SpecVolume> {
    let mut out = BTreeMap::new();
    let Some(map) = s.map(cx, "volumes") else {
        return out;
    };
    for (name, value) in map {
        let path = format!("spec.volumes[{name:?}]");
        let Some(v) = object(cx, value, &path, VOLUME_KEYS) else {
            continue;
        };
        let host = v.text(cx, "path");
        if host.is_none() {
            cx.err(v.at("path"), "is required");
        }
        let class = v
            .text(cx, "storageClass")
            .or(v.text(cx, "class"))
            .unwrap_or("hostpath");
        // Type-check the rest; their values only feed the advice.
        let pvc_class = v.text(cx, "PVCclass");
        let driver = v.text(cx, "driver");
        let handle = v.text(cx, "volumeHandle").or(v.text(cx, "volumeName"));
        let secret = v.text(cx, "secret");
        let secret_namespace = v.text(cx, "secretNamespace");
        let capacity = v.text(cx, "capacity");
        let delete = v.boolean(cx, "delete");
        let extras: Vec<&str> = ["labels", "annotations", "claimAnnotations", "attributes"]
            .into_iter()
            .filter(|k| v.string_map(cx, k).is_some())
            .collect();
        let host_path = class == "hostpath";
        let mut details = vec![format!("storageClass {class:?}")];
        details.push(format!("capacity {:?}", capacity.unwrap_or("5Gi")));
        for (label, value) in [
            ("PVC storageClassName", pvc_class),
            ("driver", driver),
            ("volumeHandle", handle),
            ("secret", secret),
            ("secret namespace", secret_namespace),
        ] {
            if let Some(value) = value {
                details.push(format!("{label} {value:?}"));
            }
        }
        if !extras.is_empty() {
            details.push(format!("the same {}", extras.join(", ")));
        }
        let cleanup = if delete == Some(false) {
            ""
        } else {
            "; v1alpha1 deleted it on cleanup, so delete yours when done"
        };
        let advice = match (host_path, host) {
            (true, Some(dir)) => format!(
                "the operator no longer creates PersistentVolumes and claims: the converted containers mount the node directory {dir:?} directly (hostPath); to keep using a claim, create the PersistentVolume ({}) and a PersistentVolumeClaim yourself and mount it with claimName",
                details.join(", ")
            ),
            _ => format!(
                "the operator no longer creates PersistentVolumes and claims: create a PersistentVolumeClaim named {name:?} and its PersistentVolume ({}) before the MiniCluster{cleanup}; the converted containers mount it with claimName: {name}",
                details.join(", ")
            ),
        };
        cx.lose(path.clone(), advice);
        out.insert(
            name.clone(),
            SpecVolume {
                host_path: host.filter(|_| host_path).map(str::to_string),
            },
        );
    }
    out
}

/// A container's `volumes` (mounts of `spec.volumes`) and `existingVolumes`, merged into
/// v1alpha2's `volumes`.
pub(super) fn container_volumes(
    cx: &mut Cx,
    c: &Obj<'_>,
    spec_volumes: &BTreeMap<String, SpecVolume>,
    out: &mut Map<String, Value>,
) {
    let mut volumes = Map::new();
    if let Some(mounts) = c.map(cx, "volumes") {
        for (name, value) in mounts {
            let path = format!("{}[{name:?}]", c.at("volumes"));
            let Some(m) = object(cx, value, &path, MOUNT_KEYS) else {
                continue;
            };
            let mut volume = Map::new();
            match m.text(cx, "path") {
                Some(p) => {
                    volume.insert("path".into(), p.into());
                }
                None => cx.err(m.at("path"), "is required"),
            }
            put(&mut volume, "readOnly", m.boolean(cx, "readOnly"));
            match spec_volumes.get(name) {
                Some(SpecVolume {
                    host_path: Some(dir),
                }) => {
                    volume.insert("hostPath".into(), dir.clone().into());
                }
                Some(SpecVolume { host_path: None }) => {
                    volume.insert("claimName".into(), name.clone().into());
                }
                None => cx.err(
                    path,
                    "is not defined in spec.volumes (v1alpha1 requires every container volume there)",
                ),
            }
            volumes.insert(name.clone(), Value::Object(volume));
        }
    }
    if let Some(existing) = c.map(cx, "existingVolumes") {
        for (name, value) in existing {
            let path = format!("{}[{name:?}]", c.at("existingVolumes"));
            let Some(e) = object(cx, value, &path, EXISTING_VOLUME_KEYS) else {
                continue;
            };
            let mut volume = Map::new();
            for key in ["path", "configMapName", "claimName", "secretName"] {
                put(&mut volume, key, e.text(cx, key));
            }
            put(&mut volume, "items", e.string_map(cx, "items"));
            put(&mut volume, "readOnly", e.boolean(cx, "readOnly"));
            if volumes.contains_key(name) {
                cx.err(
                    path,
                    "is also listed under volumes: v1alpha2 has one volumes map, rename one of them",
                );
                continue;
            }
            volumes.insert(name.clone(), Value::Object(volume));
        }
    }
    put_object(out, "volumes", volumes);
}
