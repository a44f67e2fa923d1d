//! The spoke policy: what the owner of a burst cluster lets the spoke run there.
//!
//! A spoke runs other people's workloads in a cluster it does not own. Its owner writes a
//! policy once (`flux-hub join --allow-namespace NS` or `--policy FILE`), kept as the
//! ConfigMap [`POLICY_CONFIGMAP`] (key [`POLICY_KEY`]) in the spoke's namespace and editable
//! later; the spoke reads it before it creates anything. Deny by default: a spoke without a
//! policy runs no burst, and a policy admits only the namespaces it names.
//!
//! ```yaml
//! version: 1
//! namespaces:                     # root namespaces that may burst here (same name here)
//!   - name: default
//!   - name: hpc-*                 # a trailing * matches a prefix
//!     podSecurity: baseline       # Pod Security level of a namespace the spoke creates
//! maxBrokers: 32                  # every burst here together (default 32)
//! maxBrokersPerMiniCluster: 8     # one MiniCluster's bursts here (default: maxBrokers)
//! perBroker: {cpu: "2", memory: 4Gi}   # the most one broker's pod may use (limits)
//! images: [ghcr.io/flux-framework/]    # allowed image prefixes (default: any image)
//! volumes: [persistentVolumeClaim]     # volume kinds besides the ones every burst has
//! ```
//!
//! Everything here is pure: [`SpokePolicy::parse`] checks a policy's text, [`admit`] decides
//! for every burst of a snapshot at once (the broker ceilings are shared).
//!
//! What a policy cannot loosen: the baseline refusals of
//! [`crate::validate::unsafe_burst`] (privileged, host namespaces and paths, a named service
//! account, the spoke's own or a `kube-*` namespace) hold whatever the policy says.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::{Container, PodSpec, SecurityContext};
use serde::{Deserialize, Serialize};

use super::proto;
use crate::validate::{Exceptions, MAX_BROKERS, is_dns_label};

/// Name of the ConfigMap that holds a spoke's policy, in the spoke's own namespace.
pub const POLICY_CONFIGMAP: &str = "flux-spoke-policy";

/// Key of the policy document in [`POLICY_CONFIGMAP`].
pub const POLICY_KEY: &str = "policy.yaml";

/// `maxBrokers` when a policy does not say.
pub const DEFAULT_MAX_BROKERS: i32 = 32;

/// Label Kubernetes Pod Security admission enforces on a namespace.
pub const POD_SECURITY_ENFORCE: &str = "pod-security.kubernetes.io/enforce";

/// Labels Pod Security admission warns and audits with.
pub const POD_SECURITY_WARN_AUDIT: [&str; 2] = [
    "pod-security.kubernetes.io/warn",
    "pod-security.kubernetes.io/audit",
];

/// Machine-readable reasons of a policy refusal (`AssignmentStatus.reason`).
pub mod reason {
    /// The spoke has no policy: it runs no burst.
    pub const NO_POLICY: &str = "NoPolicy";
    /// The spoke's policy does not parse or breaks a rule: it runs no new burst.
    pub const POLICY_INVALID: &str = "PolicyInvalid";
    /// The burst's namespace is not one the policy names.
    pub const NAMESPACE_NOT_ALLOWED: &str = "NamespaceNotAllowed";
    /// More brokers than the policy admits, in all or for one MiniCluster.
    pub const TOO_MANY_BROKERS: &str = "TooManyBrokers";
    /// An image outside the policy's prefixes.
    pub const IMAGE_NOT_ALLOWED: &str = "ImageNotAllowed";
    /// A volume kind the policy does not list.
    pub const VOLUME_NOT_ALLOWED: &str = "VolumeNotAllowed";
    /// More CPU or memory per broker than the policy admits, or no limit where it sets one.
    pub const RESOURCES_NOT_ALLOWED: &str = "ResourcesNotAllowed";
    /// The pods would not pass the namespace's Pod Security level.
    pub const POD_SECURITY: &str = "PodSecurity";
}

/// A Pod Security Standards level. A namespace the spoke creates enforces `baseline`
/// unless the policy says otherwise: the strictest level a plain burst's pods meet as
/// rendered (the flux view's copy and the broker's entrypoint run as root), and the one
/// [`crate::validate::unsafe_burst`] enforces anyway.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// No restriction.
    Privileged,
    /// Known privilege escalations refused.
    #[default]
    Baseline,
    /// Hardened pods only (non-root, no privilege escalation, every capability dropped, a
    /// seccomp profile, a short list of volume kinds).
    Restricted,
}

impl Level {
    /// The label value (`privileged`, `baseline`, `restricted`).
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }

    /// The level named by a namespace's enforce label; an unknown value is read as the
    /// strictest (the API server refuses it too).
    pub fn from_label(value: &str) -> Level {
        match value {
            "privileged" => Level::Privileged,
            "baseline" => Level::Baseline,
            _ => Level::Restricted,
        }
    }
}

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
    fn matches(&self, namespace: &str) -> bool {
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

fn one() -> u32 {
    1
}

/// A policy that does not parse or breaks a rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("spoke policy: {0}")]
pub struct PolicyError(pub String);

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
                    && parse_quantity(v).is_none()
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

/// A quantity (`2`, `500m`, `4Gi`, `1e3`) in thousandths of its unit, rounded up; `None`
/// when it does not parse or is negative.
pub fn parse_quantity(s: &str) -> Option<u128> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty()
        || whole.len() > 20
        || fraction.len() > 9
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let mut digits: u128 = 0;
    for b in whole.bytes().chain(fraction.bytes()) {
        digits = digits.checked_mul(10)?.checked_add(u128::from(b - b'0'))?;
    }
    // value = digits / 10^fraction.len() * multiplier / divisor, in thousandths.
    let (multiplier, divisor): (u128, u128) = match suffix {
        "" => (1000, 1),
        "m" => (1, 1),
        "k" => (1_000_000, 1),
        "M" => (1_000_000_000, 1),
        "G" => (1_000_000_000_000, 1),
        "T" => (1_000_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000_000, 1),
        "Ki" => (1000 << 10, 1),
        "Mi" => (1000 << 20, 1),
        "Gi" => (1000 << 30, 1),
        "Ti" => (1000 << 40, 1),
        "Pi" => (1000 << 50, 1),
        "Ei" => (1000 << 60, 1),
        e if e.starts_with(['e', 'E']) => {
            let exp: u32 = e[1..].parse().ok().filter(|x| *x <= 18)?;
            (1000 * 10u128.pow(exp), 1)
        }
        _ => return None,
    };
    let scale = 10u128.pow(u32::try_from(fraction.len()).ok()?) * divisor;
    let numerator = digits.checked_mul(multiplier)?;
    Some(numerator.div_ceil(scale))
}

/// The policy as the spoke found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyState {
    /// No policy ConfigMap (or no [`POLICY_KEY`] in it).
    Missing,
    /// A policy that does not parse or breaks a rule.
    Invalid(PolicyError),
    /// A valid policy.
    Valid(SpokePolicy),
}

impl PolicyState {
    /// The state of a policy document, `None` when there is none.
    pub fn of(text: Option<&str>) -> PolicyState {
        match text {
            None => PolicyState::Missing,
            Some(t) => match SpokePolicy::parse(t) {
                Ok(p) => PolicyState::Valid(p),
                Err(e) => PolicyState::Invalid(e),
            },
        }
    }
}

/// A namespace of the burst cluster, as the spoke read it before deciding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceState {
    /// It does not exist: the spoke creates it (with the policy's Pod Security level) if
    /// the burst is admitted.
    Missing,
    /// It exists, with this Pod Security enforce label (`None`: no label).
    Exists {
        /// Its `pod-security.kubernetes.io/enforce` label.
        enforce: Option<String>,
    },
    /// The spoke's RBAC does not cover it (a spoke with per-namespace Roles, and a
    /// namespace outside them or one deleted since `join` made it): the spoke may neither
    /// create it nor write in it, whatever the policy says.
    NotGranted {
        /// The namespaces the spoke's RBAC covers.
        granted: Vec<String>,
    },
}

/// One burst of a snapshot, as [`admit`] needs it.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    /// Assignment key.
    pub key: &'a str,
    /// `namespace/name` of its MiniCluster (bursts of one MiniCluster share a ceiling).
    pub minicluster: String,
    /// The namespace its objects go to.
    pub namespace: &'a str,
    /// Brokers it asks for.
    pub size: i32,
    /// Its Job's pod template.
    pub pod: Option<&'a PodSpec>,
    /// Brokers of this key already running (its applied Job), 0 if none.
    pub running: i32,
}

/// A refusal: the reason (one of [`reason`]) and what, for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Machine-readable reason.
    pub reason: &'static str,
    /// Every rule the burst breaks.
    pub message: String,
}

/// The policy's answer for one burst.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The most brokers this burst may have now, given the policy and the other bursts
    /// (what the hub's autoscaler may grow it to).
    pub admitted_size: i32,
    /// Why it is not admitted, if it is not.
    pub refusal: Option<Refusal>,
    /// The namespace to create first, with its Pod Security level (admitted bursts whose
    /// namespace is missing).
    pub create_namespace: Option<Level>,
}

/// Decides every candidate of one snapshot (in key order, so that the outcome does not
/// depend on the order the hub sent them in). The broker ceilings count what already runs:
/// a burst is measured against the others' running brokers, so a new or growing burst can
/// never push out one that runs; an admitted one then counts with its new size.
pub fn admit(
    policy: &PolicyState,
    candidates: &[Candidate<'_>],
    namespaces: &BTreeMap<String, NamespaceState>,
) -> BTreeMap<String, Verdict> {
    admit_beside(policy, candidates, &[], namespaces)
}

/// Brokers that run for a burst that is not a candidate: one the hub told the spoke to
/// retain, or one held as it runs (refused, or no longer safe). They are not examined, but
/// they occupy the cluster, so they count toward the ceilings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Running {
    /// `namespace/name` of its MiniCluster.
    pub minicluster: String,
    /// Brokers its Job runs.
    pub brokers: i32,
}

/// [`admit`], with `others` counted toward the broker ceilings.
pub fn admit_beside(
    policy: &PolicyState,
    candidates: &[Candidate<'_>],
    others: &[Running],
    namespaces: &BTreeMap<String, NamespaceState>,
) -> BTreeMap<String, Verdict> {
    let policy = match policy {
        PolicyState::Valid(p) => p,
        PolicyState::Missing => {
            return refuse_all(
                candidates,
                reason::NO_POLICY,
                &format!(
                    "this cluster's spoke has no policy (ConfigMap {POLICY_CONFIGMAP}, key {POLICY_KEY}, in the spoke's namespace): it runs no burst until its owner writes one (flux-hub join --allow-namespace NS, or --policy FILE)"
                ),
            );
        }
        PolicyState::Invalid(e) => {
            return refuse_all(
                candidates,
                reason::POLICY_INVALID,
                &format!("this cluster's spoke policy is not valid, so it admits no burst: {e}"),
            );
        }
    };
    let mut sorted: Vec<&Candidate<'_>> = candidates.iter().collect();
    sorted.sort_by_key(|c| c.key);
    let mut total: i64 = sorted.iter().map(|c| i64::from(c.running)).sum::<i64>()
        + others.iter().map(|o| i64::from(o.brokers)).sum::<i64>();
    let mut per_mc: BTreeMap<&str, i64> = BTreeMap::new();
    for c in &sorted {
        *per_mc.entry(c.minicluster.as_str()).or_default() += i64::from(c.running);
    }
    for o in others {
        *per_mc.entry(o.minicluster.as_str()).or_default() += i64::from(o.brokers);
    }
    let mut out = BTreeMap::new();
    for c in sorted {
        let mine = per_mc.get(c.minicluster.as_str()).copied().unwrap_or(0);
        let room_total = i64::from(policy.max_brokers()) - (total - i64::from(c.running));
        let room_mc =
            i64::from(policy.max_brokers_per_minicluster()) - (mine - i64::from(c.running));
        let admitted = i32::try_from(room_total.min(room_mc).max(0)).unwrap_or(i32::MAX);
        let mut violations: Vec<(&'static str, String)> = Vec::new();
        let rule = policy.namespace_rule(c.namespace);
        if rule.is_none() {
            violations.push((
                reason::NAMESPACE_NOT_ALLOWED,
                format!(
                    "namespace {:?} is not one this cluster's policy admits bursts in ({})",
                    c.namespace,
                    list_or_none(policy.namespaces.iter().map(|n| n.name.as_str()))
                ),
            ));
        }
        if c.size > admitted {
            violations.push((
                reason::TOO_MANY_BROKERS,
                format!(
                    "{} brokers asked, {admitted} admitted now (policy: maxBrokers {} in all, maxBrokersPerMiniCluster {}; {} run here for other bursts, {} for this MiniCluster's others)",
                    c.size,
                    policy.max_brokers(),
                    policy.max_brokers_per_minicluster(),
                    total - i64::from(c.running),
                    mine - i64::from(c.running),
                ),
            ));
        }
        if let Some(NamespaceState::NotGranted { granted }) = namespaces.get(c.namespace) {
            violations.push((
                reason::NAMESPACE_NOT_ALLOWED,
                format!(
                    "the spoke's RBAC does not cover namespace {:?} (it covers: {}; `flux-hub join` grants the namespaces the policy names, and creates them)",
                    c.namespace,
                    list_or_none(granted.iter().map(String::as_str))
                ),
            ));
        }
        let (level, labelled) = match namespaces.get(c.namespace) {
            Some(NamespaceState::Exists { enforce }) => (
                enforce
                    .as_deref()
                    .map_or(Level::Privileged, Level::from_label),
                true,
            ),
            _ => (rule.and_then(|r| r.pod_security).unwrap_or_default(), false),
        };
        if let Some(pod) = c.pod {
            let exceptions = rule.and_then(|r| r.allow.as_ref());
            let restricted = (level == Level::Restricted).then_some(Restricted {
                namespace: c.namespace,
                labelled,
            });
            pod_violations(policy, pod, restricted, exceptions, &mut violations);
        }
        let refusal = violations.first().map(|(first, _)| Refusal {
            reason: first,
            message: violations
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        });
        if refusal.is_none() {
            total += i64::from(c.size - c.running);
            *per_mc.entry(c.minicluster.as_str()).or_default() += i64::from(c.size - c.running);
        }
        let create_namespace = (refusal.is_none()
            && !matches!(
                namespaces.get(c.namespace),
                Some(NamespaceState::Exists { .. })
            ))
        .then_some(level);
        out.insert(
            c.key.to_string(),
            Verdict {
                admitted_size: admitted,
                refusal,
                create_namespace,
            },
        );
    }
    out
}

fn refuse_all(
    candidates: &[Candidate<'_>],
    reason: &'static str,
    message: &str,
) -> BTreeMap<String, Verdict> {
    candidates
        .iter()
        .map(|c| {
            (
                c.key.to_string(),
                Verdict {
                    admitted_size: 0,
                    refusal: Some(Refusal {
                        reason,
                        message: message.to_string(),
                    }),
                    create_namespace: None,
                },
            )
        })
        .collect()
}

fn list_or_none<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = items.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// Every container of a pod, init containers first, with the field prefix that names it.
fn containers(pod: &PodSpec) -> impl Iterator<Item = (&'static str, &Container)> {
    pod.init_containers
        .iter()
        .flatten()
        .map(|c| ("initContainers", c))
        .chain(pod.containers.iter().map(|c| ("containers", c)))
}

/// A namespace enforcing the restricted level, and whether that comes from its own label
/// (it exists) or from the policy (the spoke would create it so).
struct Restricted<'a> {
    namespace: &'a str,
    labelled: bool,
}

fn pod_violations(
    policy: &SpokePolicy,
    pod: &PodSpec,
    restricted: Option<Restricted<'_>>,
    exceptions: Option<&Exceptions>,
    out: &mut Vec<(&'static str, String)>,
) {
    for (_, c) in containers(pod) {
        let image = c.image.as_deref().unwrap_or("");
        if !policy.image_allowed(image) {
            out.push((
                reason::IMAGE_NOT_ALLOWED,
                format!(
                    "container {:?}: image {image:?} is not under an allowed prefix ({})",
                    c.name,
                    list_or_none(policy.images.iter().flatten().map(String::as_str))
                ),
            ));
        }
    }
    for v in pod.volumes.iter().flatten() {
        // configMap, secret and emptyDir are what every burst renders; a hostPath is the
        // namespace rule's `allow.hostPaths` to admit (the baseline check, which runs
        // first, names it otherwise).
        let host_path_allowed = v
            .host_path
            .as_ref()
            .is_some_and(|h| exceptions.is_some_and(|e| e.host_path_allowed(&h.path)));
        let (kind, name) = if v.config_map.is_some()
            || v.secret.is_some()
            || v.empty_dir.is_some()
            || host_path_allowed
        {
            continue;
        } else if v.persistent_volume_claim.is_some() {
            (
                Some(VolumeKind::PersistentVolumeClaim),
                "persistentVolumeClaim",
            )
        } else if v.csi.is_some() {
            (Some(VolumeKind::Csi), "csi")
        } else {
            (None, "kind of")
        };
        if kind.is_none_or(|k| !policy.volumes.contains(&k)) {
            out.push((
                reason::VOLUME_NOT_ALLOWED,
                format!(
                    "volume {:?} is a {name} volume, which this cluster's policy does not list (volumes: {})",
                    v.name,
                    list_or_none(policy.volumes.iter().map(|k| k.as_str()))
                ),
            ));
        }
    }
    if let Some(per) = &policy.per_broker {
        for (resource, bound) in [("cpu", &per.cpu), ("memory", &per.memory)] {
            let Some(bound) = bound.as_deref() else {
                continue;
            };
            let Some(max) = parse_quantity(bound) else {
                continue;
            };
            resource_violations(pod, resource, bound, max, out);
        }
    }
    if let Some(r) = restricted {
        restricted_violations(pod, &r, out);
    }
}

/// The pod's effective limit of `resource` (its containers' sum, or its largest init
/// container if larger), or the containers that set none.
fn resource_violations(
    pod: &PodSpec,
    resource: &str,
    bound: &str,
    max: u128,
    out: &mut Vec<(&'static str, String)>,
) {
    let limit = |c: &Container| {
        c.resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get(resource))
            .and_then(|q| parse_quantity(&q.0))
    };
    let mut missing = Vec::new();
    let mut sum: u128 = 0;
    let mut init_max: u128 = 0;
    for (kind, c) in containers(pod) {
        match limit(c) {
            None => missing.push(c.name.as_str()),
            // A native sidecar (restartable init container) runs beside the others.
            Some(v) if kind == "containers" || c.restart_policy.as_deref() == Some("Always") => {
                sum = sum.saturating_add(v);
            }
            Some(v) => init_max = init_max.max(v),
        }
    }
    if !missing.is_empty() {
        out.push((
            reason::RESOURCES_NOT_ALLOWED,
            format!(
                "this cluster admits at most {bound} {resource} per broker, so every container needs a {resource} limit; none on {}",
                missing.join(", ")
            ),
        ));
    } else if sum.max(init_max) > max {
        out.push((
            reason::RESOURCES_NOT_ALLOWED,
            format!(
                "a broker's pod may use {} {resource}, more than the {bound} this cluster admits per broker",
                show_quantity(sum.max(init_max), resource)
            ),
        ));
    }
}

fn show_quantity(thousandths: u128, resource: &str) -> String {
    if resource == "cpu" {
        format!("{thousandths}m")
    } else {
        format!("{}", thousandths.div_ceil(1000))
    }
}

/// What the Pod Security Standards' restricted level asks beyond the baseline (which
/// [`crate::validate::unsafe_burst`] already enforces).
fn restricted_violations(
    pod: &PodSpec,
    ns: &Restricted<'_>,
    out: &mut Vec<(&'static str, String)>,
) {
    let psc = pod.security_context.as_ref();
    let pod_non_root = psc.and_then(|s| s.run_as_non_root);
    let pod_user = psc.and_then(|s| s.run_as_user);
    let pod_seccomp = psc
        .and_then(|s| s.seccomp_profile.as_ref())
        .map(|p| p.type_.clone());
    let mut problems: Vec<String> = Vec::new();
    for (_, c) in containers(pod) {
        let sc: Option<&SecurityContext> = c.security_context.as_ref();
        let mut wrong = Vec::new();
        if sc.and_then(|s| s.allow_privilege_escalation) != Some(false) {
            wrong.push("allowPrivilegeEscalation: false");
        }
        let caps = sc.and_then(|s| s.capabilities.as_ref());
        if !caps
            .and_then(|c| c.drop.as_ref())
            .is_some_and(|d| d.iter().any(|x| x == "ALL"))
        {
            wrong.push("capabilities.drop: [ALL]");
        }
        if caps
            .and_then(|c| c.add.as_ref())
            .is_some_and(|a| a.iter().any(|x| x != "NET_BIND_SERVICE"))
        {
            wrong.push("capabilities.add: only NET_BIND_SERVICE");
        }
        if sc.and_then(|s| s.run_as_non_root).or(pod_non_root) != Some(true) {
            wrong.push("runAsNonRoot: true");
        }
        if sc.and_then(|s| s.run_as_user).or(pod_user) == Some(0) {
            wrong.push("runAsUser: not 0");
        }
        let seccomp = sc
            .and_then(|s| s.seccomp_profile.as_ref())
            .map(|p| p.type_.clone())
            .or_else(|| pod_seccomp.clone());
        if !matches!(seccomp.as_deref(), Some("RuntimeDefault" | "Localhost")) {
            wrong.push("seccompProfile.type: RuntimeDefault");
        }
        if !wrong.is_empty() {
            problems.push(format!("container {:?} needs {}", c.name, wrong.join(", ")));
        }
    }
    for v in pod.volumes.iter().flatten() {
        let allowed = v.config_map.is_some()
            || v.csi.is_some()
            || v.downward_api.is_some()
            || v.empty_dir.is_some()
            || v.ephemeral.is_some()
            || v.persistent_volume_claim.is_some()
            || v.projected.is_some()
            || v.secret.is_some();
        if !allowed {
            problems.push(format!(
                "volume {:?} is of a kind restricted pods may not use",
                v.name
            ));
        }
    }
    if !problems.is_empty() {
        // The baseline level admits them (its rules are the burst safety rules every
        // burst already meets); say who can get there, and how.
        let owner = if ns.labelled {
            format!(
                "the burst cluster's owner can relabel namespace {0:?} (kubectl label namespace {0} pod-security.kubernetes.io/enforce=baseline --overwrite)",
                ns.namespace
            )
        } else {
            format!(
                "the burst cluster's owner can let the policy create namespace {:?} at podSecurity: baseline (the default)",
                ns.namespace
            )
        };
        out.push((
            reason::POD_SECURITY,
            format!(
                "namespace {:?} enforces the restricted Pod Security level, which the burst's pods do not meet: {}. The baseline level admits this burst: {owner} (docs/bursting-policy.md says why restricted is not the default)",
                ns.namespace,
                problems.join("; ")
            ),
        ));
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The most namespace rules a spoke may announce to the hub.
pub const MAX_ANNOUNCED_RULES: usize = 256;

/// What a spoke tells the hub of its policy (`WatchRequest.exceptions`): every namespace
/// rule, in order (the first match applies), with its exceptions. Empty when no rule lifts
/// anything (the same answer for every namespace: the baseline), so that editing such a
/// policy never reconnects the spoke, and unless the policy is valid.
pub fn announce(policy: &PolicyState) -> Vec<proto::NamespaceExceptions> {
    let PolicyState::Valid(p) = policy else {
        return Vec::new();
    };
    if p.namespaces
        .iter()
        .all(|r| r.allow.as_ref().is_none_or(Exceptions::is_empty))
    {
        return Vec::new();
    }
    p.namespaces
        .iter()
        .map(|rule| {
            let e = rule.allow.clone().unwrap_or_default();
            proto::NamespaceExceptions {
                namespace: rule.name.clone(),
                privileged: e.privileged,
                capabilities: e.capabilities,
                host_namespaces: e.host_namespaces,
                host_paths: e.host_paths,
                service_accounts: e.service_accounts,
                secrets: e.secrets,
                config_maps: e.config_maps,
                tolerations: e.tolerations,
                runtime_classes: e.runtime_classes,
                schedulers: e.schedulers,
                resources: e.resources.into_iter().collect(),
            }
        })
        .collect()
}

/// The exceptions a spoke announced, as the hub keeps them: checked and bounded, for
/// [`Announced::for_namespace`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Announced(Vec<NamespaceRule>);

impl Announced {
    /// Checks what a spoke sent: at most [`MAX_ANNOUNCED_RULES`] rules, each a namespace
    /// name or prefix and well-formed exceptions. The error names the entry.
    pub fn from_proto(rules: &[proto::NamespaceExceptions]) -> Result<Announced, String> {
        if rules.len() > MAX_ANNOUNCED_RULES {
            return Err(format!(
                "exceptions: {} namespace rules, at most {MAX_ANNOUNCED_RULES}",
                rules.len()
            ));
        }
        let mut out = Vec::with_capacity(rules.len());
        for (i, r) in rules.iter().enumerate() {
            let allow = Exceptions {
                privileged: r.privileged,
                capabilities: r.capabilities.clone(),
                host_namespaces: r.host_namespaces,
                host_paths: r.host_paths.clone(),
                service_accounts: r.service_accounts.clone(),
                secrets: r.secrets.clone(),
                config_maps: r.config_maps.clone(),
                tolerations: r.tolerations.clone(),
                runtime_classes: r.runtime_classes.clone(),
                schedulers: r.schedulers.clone(),
                resources: r
                    .resources
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            };
            let rule = NamespaceRule {
                name: r.namespace.clone(),
                pod_security: None,
                allow: (!allow.is_empty()).then_some(allow),
            };
            // The policy's own checks of a name and of exceptions (not the Pod Security
            // coherence: the spoke's level is its own business).
            let base = rule.name.strip_suffix('*').unwrap_or(&rule.name);
            let name_ok = is_dns_label(&rule.name)
                || (rule.name.ends_with('*')
                    && base.len() < 63
                    && base
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
            if !name_ok {
                return Err(format!(
                    "exceptions[{i}].namespace: {:?} is neither a namespace name nor a prefix followed by *",
                    rule.name
                ));
            }
            if let Some(allow) = &rule.allow
                && let Err((field, why)) = allow.check()
            {
                return Err(format!("exceptions[{i}].{field}: {why}"));
            }
            out.push(rule);
        }
        Ok(Announced(out))
    }

    /// What bursts in `namespace` may have beyond the baseline at that spoke.
    pub fn for_namespace(&self, namespace: &str) -> Exceptions {
        self.0
            .iter()
            .find(|r| r.matches(namespace))
            .and_then(|r| r.allow.clone())
            .unwrap_or_default()
    }
}
