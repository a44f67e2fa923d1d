//! What a burst cluster's owner may lift of the burst safety rules for one namespace (a
//! spoke policy's `allow`), checked before it travels to the hub, and which rules it can
//! lift at all.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::FieldError;

/// What a burst cluster's owner lets bursts in a namespace have beyond the baseline (the
/// `allow` of a spoke policy's namespace rule, announced to the hub). Each item lifts one
/// rule of [`unsafe_burst`](super::unsafe_burst), and only that one; the namespace rules (`kube-*`, the spoke's
/// own) and the rest (seccomp, AppArmor, SELinux, sysctls, /proc, Windows host processes,
/// mounted tokens) are never lifted. Empty: the baseline.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Exceptions {
    /// Privileged containers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub privileged: bool,
    /// Capabilities containers may add (`SYS_PTRACE`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    /// The node's process and IPC namespaces (`hostPID`, `hostIPC`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_namespaces: bool,
    /// Directories of the nodes a `hostPath` volume may mount: absolute paths, matched
    /// whole components (`/scratch` admits `/scratch/a`, not `/scratch2`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_paths: Vec<String>,
    /// Service accounts of the burst's namespace the pods may run as.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_accounts: Vec<String>,
    /// Secrets of the burst's namespace its pods may use (volumes, environment, image pull
    /// secrets), besides the one the spoke makes for the burst.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// ConfigMaps of the burst's namespace its pods may mount, besides the one the spoke
    /// makes for the burst.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config_maps: Vec<String>,
    /// Taint keys the pods may tolerate; `*` admits any, and a toleration without a key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<String>,
    /// RuntimeClasses the pods may name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_classes: Vec<String>,
    /// Schedulers the pods may name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedulers: Vec<String>,
    /// Resources beyond cpu and memory (extended resources such as `nvidia.com/gpu`,
    /// `hugepages-2Mi`, `ephemeral-storage`), each with the most one container may request
    /// or limit (a quantity).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, String>,
}

/// Whether a policy's `allow` could lift `violation` (privileged, added capabilities, host
/// namespaces, a host path, a named service account, a Secret or ConfigMap of the burst
/// cluster, tolerations, a runtime class or scheduler, resources beyond cpu and memory);
/// the other rules hold regardless.
pub fn liftable(violation: &FieldError) -> bool {
    let f = violation.field.as_str();
    f.ends_with(".privileged")
        || f.ends_with(".capabilities.add")
        || f.ends_with(".hostPath")
        || f.ends_with(".secretName")
        || f.ends_with(".configMapName")
        || f.ends_with(".imagePullSecret")
        || f.contains("].secrets[")
        || f.contains(".resources.")
        || f.starts_with("spec.pod.tolerations[")
        || f.starts_with("spec.pod.resources[")
        || matches!(
            f,
            "spec.pod.hostIPC"
                | "spec.pod.hostPID"
                | "spec.pod.serviceAccountName"
                | "spec.pod.runtimeClassName"
                | "spec.pod.schedulerName"
        )
}

/// Resources every burst may ask for without an exception.
const PLAIN_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// The most entries an [`Exceptions`] list may hold (it travels to the hub).
pub const MAX_EXCEPTION_ENTRIES: usize = 32;

impl Exceptions {
    /// Whether these lift nothing.
    pub fn is_empty(&self) -> bool {
        *self == Exceptions::default()
    }

    /// Every entry well formed, each problem as (field below `allow`, rule).
    pub fn check(&self) -> Result<(), (String, String)> {
        let lists = [
            ("capabilities", &self.capabilities),
            ("hostPaths", &self.host_paths),
            ("serviceAccounts", &self.service_accounts),
            ("secrets", &self.secrets),
            ("configMaps", &self.config_maps),
            ("tolerations", &self.tolerations),
            ("runtimeClasses", &self.runtime_classes),
            ("schedulers", &self.schedulers),
        ];
        for (field, list) in lists {
            if list.len() > MAX_EXCEPTION_ENTRIES {
                return Err((
                    field.into(),
                    format!("{} entries, at most {MAX_EXCEPTION_ENTRIES}", list.len()),
                ));
            }
        }
        if self.resources.len() > MAX_EXCEPTION_ENTRIES {
            return Err((
                "resources".into(),
                format!(
                    "{} entries, at most {MAX_EXCEPTION_ENTRIES}",
                    self.resources.len()
                ),
            ));
        }
        let object_names = [
            ("secrets", &self.secrets),
            ("configMaps", &self.config_maps),
            ("runtimeClasses", &self.runtime_classes),
            ("schedulers", &self.schedulers),
        ];
        for (field, list) in object_names {
            for (i, n) in list.iter().enumerate() {
                if n.len() > 253 || !n.split('.').all(super::is_dns_label) {
                    return Err((
                        format!("{field}[{i}]"),
                        format!("{n:?} is not an object name (a DNS subdomain)"),
                    ));
                }
            }
        }
        for (i, k) in self.tolerations.iter().enumerate() {
            let ok = k == "*"
                || (!k.is_empty()
                    && k.len() <= 317
                    && k.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/')
                    }));
            if !ok {
                return Err((
                    format!("tolerations[{i}]"),
                    format!("{k:?} is not a taint key (or *)"),
                ));
            }
        }
        for (name, most) in &self.resources {
            let name_ok = !name.is_empty()
                && name.len() <= 253
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'));
            if !name_ok || PLAIN_RESOURCES.contains(&name.as_str()) {
                return Err((
                    format!("resources[{name:?}]"),
                    "must name a resource other than cpu and memory (which perBroker bounds)"
                        .into(),
                ));
            }
            if crate::quantity::thousandths(most).is_none() {
                return Err((
                    format!("resources[{name:?}]"),
                    format!("{most:?} is not a quantity"),
                ));
            }
        }
        for (i, c) in self.capabilities.iter().enumerate() {
            let ok = !c.is_empty()
                && c.len() <= 64
                && c.bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
            if !ok {
                return Err((
                    format!("capabilities[{i}]"),
                    format!("{c:?} is not a capability name (like SYS_PTRACE)"),
                ));
            }
        }
        for (i, p) in self.host_paths.iter().enumerate() {
            let ok = p.starts_with('/')
                && p.len() <= 4096
                && !p.split('/').any(|c| c == ".." || c == ".")
                && !p.chars().any(char::is_control);
            if !ok {
                return Err((
                    format!("hostPaths[{i}]"),
                    format!("{p:?} is not an absolute path without . or .. components"),
                ));
            }
        }
        for (i, a) in self.service_accounts.iter().enumerate() {
            // A DNS-1123 subdomain, lowercase.
            if a.len() > 253 || !a.split('.').all(super::is_dns_label) {
                return Err((
                    format!("serviceAccounts[{i}]"),
                    format!("{a:?} is not a service account name"),
                ));
            }
        }
        Ok(())
    }

    /// Whether a toleration of taint key `key` (`None`: every taint) is admitted.
    pub(super) fn toleration_allowed(&self, key: Option<&str>) -> bool {
        self.tolerations
            .iter()
            .any(|k| k == "*" || key.is_some_and(|key| k == key))
    }

    /// Whether one container may ask for `quantity` of `resource`.
    pub(super) fn resource_allowed(&self, resource: &str, quantity: &str) -> bool {
        let parse = crate::quantity::thousandths;
        PLAIN_RESOURCES.contains(&resource)
            || self
                .resources
                .get(resource)
                .and_then(|most| parse(most))
                .zip(parse(quantity))
                .is_some_and(|(most, asked)| asked <= most)
    }

    /// Whether a `hostPath` volume of `path` is among [`Exceptions::host_paths`].
    pub fn host_path_allowed(&self, path: &str) -> bool {
        self.host_paths.iter().any(|allowed| {
            let allowed = allowed.trim_end_matches('/');
            allowed.is_empty()
                || path == allowed
                || path
                    .strip_prefix(allowed)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }
}
