//! The policy document: its YAML, parsed and checked ([`SpokePolicy::parse`]).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{DEFAULT_MAX_BROKERS, Level};
use crate::api::MAX_BROKERS;
use crate::quantity::thousandths;
use crate::validate::{Exceptions, is_dns_label};

/// A namespace bursts may run in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NamespaceRule {
    /// A namespace name, or a prefix followed by `*`.
    pub name: String,
    /// Pod Security level (enforce, warn and audit labels) of a matching namespace the spoke
    /// creates; `restricted` when unset. A namespace that exists keeps its own labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security: Option<Level>,
    /// What bursts in a matching namespace may have beyond the baseline (privileged
    /// containers, added capabilities, host namespaces, host paths, named service
    /// accounts); none when unset. The namespace's Pod Security level must let the pods
    /// run: `privileged` for the first, third and fourth, at least `baseline` for
    /// capabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Exceptions>,
}

impl NamespaceRule {
    pub(super) fn matches(&self, namespace: &str) -> bool {
        match self.name.strip_suffix('*') {
            Some(prefix) => namespace.starts_with(prefix),
            None => self.name == namespace,
        }
    }
}

/// The most one broker's pod may use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PerBroker {
    /// CPU (a quantity: `2`, `500m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Memory (a quantity: `4Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
}

/// Volume kinds a policy may add to the ones every burst has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum VolumeKind {
    /// `persistentVolumeClaim` (the MiniCluster's `claimName`).
    PersistentVolumeClaim,
    /// `csi` (the MiniCluster's `csiDriver`).
    Csi,
}

impl VolumeKind {
    /// The name in a policy (`persistentVolumeClaim`, `csi`).
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeKind::PersistentVolumeClaim => "persistentVolumeClaim",
            VolumeKind::Csi => "csi",
        }
    }
}

/// A spoke policy (see the module documentation for the format).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SpokePolicy {
    /// Format version: 1.
    #[serde(default = "one")]
    pub version: u32,
    /// Namespaces bursts may run in; none admits no burst.
    #[serde(default)]
    pub namespaces: Vec<NamespaceRule>,
    /// The most brokers of every burst here together ([`DEFAULT_MAX_BROKERS`] when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_brokers: Option<i32>,
    /// The most brokers of one MiniCluster's bursts here (`maxBrokers` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_brokers_per_mini_cluster: Option<i32>,
    /// CPU and memory bounds per broker; unset: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_broker: Option<PerBroker>,
    /// Allowed image prefixes; unset: any image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<String>>,
    /// Volume kinds allowed besides configMap, secret, emptyDir (which every burst uses).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<VolumeKind>,
}

impl SpokePolicy {
    /// A policy admitting bursts in `namespaces` (their own Pod Security level when the
    /// spoke creates them: `restricted`), with every other field at its default.
    pub fn allowing(namespaces: &[String]) -> SpokePolicy {
        SpokePolicy {
            version: 1,
            namespaces: namespaces
                .iter()
                .map(|n| NamespaceRule {
                    name: n.clone(),
                    pod_security: None,
                    allow: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    /// Parses and checks a policy document (YAML or JSON); the error names the field.
    pub fn parse(text: &str) -> Result<SpokePolicy, PolicyError> {
        let policy: SpokePolicy = if text.trim().is_empty() {
            return Err(PolicyError("the document is empty".into()));
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| PolicyError(e.to_string()))?
        };
        policy.check()?;
        Ok(policy)
    }

    /// The policy as the YAML document [`SpokePolicy::parse`] reads.
    pub fn to_yaml(&self) -> String {
        serde_yaml_ng::to_string(self).unwrap_or_default()
    }

    /// Checks every field; the error names the first field that breaks a rule.
    pub fn check(&self) -> Result<(), PolicyError> {
        let err = |field: &str, rule: String| Err(PolicyError(format!("{field}: {rule}")));
        if self.version != 1 {
            return err(
                "version",
                format!("{} is not a known version (1)", self.version),
            );
        }
        for (i, n) in self.namespaces.iter().enumerate() {
            let base = n.name.strip_suffix('*').unwrap_or(&n.name);
            let prefix_ok = n.name.ends_with('*')
                && base
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !(is_dns_label(&n.name) || prefix_ok) {
                return err(
                    &format!("namespaces[{i}].name"),
                    format!(
                        "{:?} is neither a namespace name nor a prefix followed by *",
                        n.name
                    ),
                );
            }
            if base.starts_with("kube-") {
                return err(
                    &format!("namespaces[{i}].name"),
                    format!(
                        "{:?}: kube-* namespaces belong to the cluster's system components",
                        n.name
                    ),
                );
            }
            if let Some(allow) = &n.allow {
                if let Err((field, rule)) = allow.check() {
                    return err(&format!("namespaces[{i}].allow.{field}"), rule);
                }
                let level = n.pod_security.unwrap_or_default();
                let needs_privileged = [
                    ("privileged", allow.privileged),
                    ("hostNamespaces", allow.host_namespaces),
                    ("hostPaths", !allow.host_paths.is_empty()),
                ];
                for (field, asked) in needs_privileged {
                    if asked && level != Level::Privileged {
                        return err(
                            &format!("namespaces[{i}].allow.{field}"),
                            format!(
                                "needs podSecurity: privileged in this rule (the namespace's {level} level would refuse such pods)"
                            ),
                        );
                    }
                }
                if !allow.capabilities.is_empty() && level == Level::Restricted {
                    return err(
                        &format!("namespaces[{i}].allow.capabilities"),
                        "needs podSecurity: baseline or privileged in this rule (the restricted level refuses added capabilities)".to_string(),
                    );
                }
            }
        }
        for (field, value) in [
            ("maxBrokers", self.max_brokers),
            (
                "maxBrokersPerMiniCluster",
                self.max_brokers_per_mini_cluster,
            ),
        ] {
            if let Some(v) = value
                && !(0..=MAX_BROKERS).contains(&v)
            {
                return err(field, format!("{v} is not between 0 and {MAX_BROKERS}"));
            }
        }
        if let Some(p) = &self.per_broker {
            for (field, value) in [("perBroker.cpu", &p.cpu), ("perBroker.memory", &p.memory)] {
                if let Some(v) = value
                    && thousandths(v).is_none()
                {
                    return err(
                        field,
                        format!("{v:?} is not a quantity (e.g. 2, 500m, 4Gi)"),
                    );
                }
            }
        }
        for (i, prefix) in self.images.iter().flatten().enumerate() {
            if prefix.trim().is_empty() || prefix.chars().any(char::is_whitespace) {
                return err(
                    &format!("images[{i}]"),
                    format!("{prefix:?} is not an image prefix"),
                );
            }
        }
        Ok(())
    }

    /// `maxBrokers`, defaulted.
    pub fn max_brokers(&self) -> i32 {
        self.max_brokers.unwrap_or(DEFAULT_MAX_BROKERS)
    }

    /// `maxBrokersPerMiniCluster`, defaulted.
    pub fn max_brokers_per_minicluster(&self) -> i32 {
        self.max_brokers_per_mini_cluster
            .unwrap_or_else(|| self.max_brokers())
    }

    /// The namespaces the spoke's per-namespace RBAC must cover: every namespace the policy
    /// names. Prefix rules (`hpc-*`) cannot be granted namespace by namespace, so they are
    /// the `Err`, listed: such a policy needs the cluster-wide form.
    pub fn granted_namespaces(&self) -> Result<BTreeSet<String>, Vec<String>> {
        let (prefixes, names): (Vec<&NamespaceRule>, Vec<&NamespaceRule>) =
            self.namespaces.iter().partition(|n| n.name.ends_with('*'));
        if prefixes.is_empty() {
            Ok(names.into_iter().map(|n| n.name.clone()).collect())
        } else {
            Err(prefixes.into_iter().map(|n| n.name.clone()).collect())
        }
    }

    /// What bursts in `namespace` may have beyond the baseline (its rule's `allow`).
    pub fn exceptions_for(&self, namespace: &str) -> Exceptions {
        self.namespace_rule(namespace)
            .and_then(|r| r.allow.clone())
            .unwrap_or_default()
    }

    /// The rule admitting bursts in `namespace`, if any (the first that matches).
    pub fn namespace_rule(&self, namespace: &str) -> Option<&NamespaceRule> {
        self.namespaces.iter().find(|n| n.matches(namespace))
    }

    /// Whether `image` starts with one of the allowed prefixes. A prefix matches whole
    /// name components: `ghcr.io/flux` admits `ghcr.io/flux:1` and `ghcr.io/flux/x`, not
    /// `ghcr.io/flux-evil`; one ending in `/`, `:` or `@` matches as written.
    pub fn image_allowed(&self, image: &str) -> bool {
        let Some(prefixes) = &self.images else {
            return true;
        };
        prefixes.iter().any(|p| {
            if p.ends_with(['/', ':', '@']) {
                image.starts_with(p.as_str())
            } else {
                image == p
                    || image
                        .strip_prefix(p.as_str())
                        .is_some_and(|rest| rest.starts_with(['/', ':', '@']))
            }
        })
    }
}

pub(super) fn one() -> u32 {
    1
}

/// A policy that does not parse or breaks a rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("spoke policy: {0}")]
pub struct PolicyError(pub String);
