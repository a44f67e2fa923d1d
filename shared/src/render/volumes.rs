//! Pod volumes and mounts: the operator's helpers and the users' declared volumes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    CSIVolumeSource, ConfigMapVolumeSource, EmptyDirVolumeSource, HostPathVolumeSource, KeyToPath,
    PersistentVolumeClaimVolumeSource, SecretVolumeSource, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::{ContainerVolume, MiniClusterContainer, defaults};

use super::{non_empty, non_empty_vec};

pub(super) fn key_to_path(key: &str, mode: Option<i32>) -> KeyToPath {
    KeyToPath {
        key: key.into(),
        path: key.into(),
        mode,
    }
}

pub(super) fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

pub(super) fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

pub(super) fn user_mount(name: &str, v: &ContainerVolume) -> VolumeMount {
    let path = if v.empty_dir == Some(true) {
        defaults::EMPTY_DIR_PATH.to_string()
    } else {
        v.path.clone().unwrap_or_default()
    };
    mount(name, &path, v.read_only.unwrap_or(false))
}

/// Pod volumes for the user volumes of `containers`, once per name (validation made
/// same-named volumes identical).
pub(super) fn user_volumes(containers: &[MiniClusterContainer]) -> Vec<Volume> {
    let mut seen = BTreeMap::new();
    for c in containers {
        for (name, v) in &c.volumes {
            seen.entry(name.clone())
                .or_insert_with(|| user_volume(name, v));
        }
    }
    seen.into_values().collect()
}

fn user_volume(name: &str, v: &ContainerVolume) -> Volume {
    let set = |o: &Option<String>| o.clone().filter(|s| !s.is_empty());
    let mut volume = Volume {
        name: name.into(),
        ..Default::default()
    };
    if let Some(driver) = set(&v.csi_driver) {
        volume.csi = Some(CSIVolumeSource {
            driver,
            volume_attributes: non_empty(v.csi_driver_attributes.clone()),
            read_only: v.read_only,
            ..Default::default()
        });
    } else if let Some(secret) = set(&v.secret_name) {
        volume.secret = Some(SecretVolumeSource {
            secret_name: Some(secret),
            ..Default::default()
        });
    } else if v.empty_dir == Some(true) {
        volume.empty_dir = Some(EmptyDirVolumeSource {
            medium: (v.empty_dir_medium.as_deref() == Some("memory")).then(|| "Memory".into()),
            size_limit: set(&v.empty_dir_size_limit).map(Quantity),
        });
    } else if let Some(path) = set(&v.host_path) {
        volume.host_path = Some(HostPathVolumeSource {
            path,
            type_: Some("Directory".into()),
        });
    } else if let Some(config_map) = set(&v.config_map_name) {
        volume.config_map = Some(ConfigMapVolumeSource {
            name: config_map,
            items: non_empty_vec(
                v.items
                    .iter()
                    .map(|(k, p)| KeyToPath {
                        key: k.clone(),
                        path: p.clone(),
                        mode: None,
                    })
                    .collect(),
            ),
            ..Default::default()
        });
    } else {
        volume.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
            claim_name: v.claim_name.clone().unwrap_or_default(),
            read_only: v.read_only,
        });
    }
    volume
}
