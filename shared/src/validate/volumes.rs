//! Volumes: one source each, a mount path, and one meaning per name across containers.

use std::collections::BTreeMap;

use crate::api::{ContainerVolume, MiniClusterContainer, defaults};

use super::Validator;
use crate::quantity::is_quantity;

/// Names the renderer gives its own pod volumes; user volumes must not reuse them.
const RESERVED_VOLUMES: &[&str] = &[
    "flux-config",
    "flux-curve",
    "flux-home",
    "spack-software",
    crate::layout::VIEW_IMAGE_VOLUME,
];

impl Validator {
    pub(super) fn volumes(&mut self, containers: &[MiniClusterContainer], list: &str) {
        let mut first: BTreeMap<&str, (&ContainerVolume, usize)> = BTreeMap::new();
        for (i, c) in containers.iter().enumerate() {
            for (name, volume) in &c.volumes {
                let field = format!("{list}[{i}].volumes[{name:?}]");
                self.dns_label(name, field.clone());
                check!(
                    self,
                    !RESERVED_VOLUMES.contains(&name.as_str()),
                    field.clone(),
                    format!("{name:?} is a volume name the operator uses itself"),
                );
                self.volume(&field, volume);
                match first.get(name.as_str()) {
                    Some((other, j)) if *other != volume => self.err(
                        field,
                        format!("is declared differently in {list}[{j}]; a volume name must mean one volume"),
                    ),
                    Some(_) => {}
                    None => {
                        first.insert(name, (volume, i));
                    }
                }
            }
        }
    }

    fn volume(&mut self, field: &str, v: &ContainerVolume) {
        let set = |o: &Option<String>| o.as_deref().is_some_and(|s| !s.is_empty());
        let sources: Vec<&str> = [
            ("claimName", set(&v.claim_name)),
            ("hostPath", set(&v.host_path)),
            ("configMapName", set(&v.config_map_name)),
            ("secretName", set(&v.secret_name)),
            ("emptyDir", v.empty_dir == Some(true)),
            ("csiDriver", set(&v.csi_driver)),
        ]
        .into_iter()
        .filter(|(_, on)| *on)
        .map(|(n, _)| n)
        .collect();
        match sources.len() {
            0 => self.err(
                field,
                "needs exactly one source: claimName, hostPath, configMapName, secretName, emptyDir or csiDriver",
            ),
            1 => {}
            _ => self.err(field, format!("has several sources ({}); choose one", sources.join(", "))),
        }
        let empty_dir = v.empty_dir == Some(true);
        match v.path.as_deref().filter(|p| !p.is_empty()) {
            Some(path) => {
                check!(
                    self,
                    path.starts_with('/'),
                    format!("{field}.path"),
                    "must be an absolute path",
                );
                check!(
                    self,
                    !empty_dir || path == defaults::EMPTY_DIR_PATH,
                    format!("{field}.path"),
                    format!(
                        "emptyDir volumes are always mounted at {}",
                        defaults::EMPTY_DIR_PATH
                    ),
                );
            }
            None if !empty_dir => self.err(
                format!("{field}.path"),
                "is required (where to mount the volume)",
            ),
            None => {}
        }
        if let Some(medium) = v.empty_dir_medium.as_deref().filter(|m| !m.is_empty()) {
            check!(
                self,
                empty_dir,
                format!("{field}.emptyDirMedium"),
                "only applies with emptyDir: true",
            );
            check!(
                self,
                medium == "memory",
                format!("{field}.emptyDirMedium"),
                format!("{medium:?} must be \"memory\""),
            );
        }
        if let Some(limit) = v.empty_dir_size_limit.as_deref().filter(|m| !m.is_empty()) {
            check!(
                self,
                empty_dir,
                format!("{field}.emptyDirSizeLimit"),
                "only applies with emptyDir: true",
            );
            check!(
                self,
                is_quantity(limit),
                format!("{field}.emptyDirSizeLimit"),
                format!("{limit:?} is not a quantity such as 64Gi"),
            );
        }
        check!(
            self,
            v.items.is_empty() || set(&v.config_map_name),
            format!("{field}.items"),
            "only applies to configMapName volumes",
        );
        for (key, path) in &v.items {
            check!(
                self,
                !path.is_empty() && !path.starts_with('/') && !path.split('/').any(|p| p == ".."),
                format!("{field}.items[{key:?}]"),
                "must be a relative path without '..'",
            );
        }
        check!(
            self,
            v.csi_driver_attributes.is_empty() || set(&v.csi_driver),
            format!("{field}.csiDriverAttributes"),
            "only applies to csiDriver volumes",
        );
        if let Some(host) = v.host_path.as_deref().filter(|p| !p.is_empty()) {
            check!(
                self,
                host.starts_with('/'),
                format!("{field}.hostPath"),
                "must be an absolute path",
            );
        }
    }
}
