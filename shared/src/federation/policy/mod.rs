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
//!
//! Where each part lives: `document.rs` (the policy's text, parsed and checked),
//! `admission.rs` (the decision for every burst of a snapshot), `pod_checks.rs` (what a
//! burst's pods are checked for: resources, Pod Security), `announce.rs` (what the spoke
//! tells the hub of its exceptions).

use std::fmt;

use serde::{Deserialize, Serialize};

mod admission;
mod announce;
mod document;
mod pod_checks;

pub use admission::{
    Candidate, NamespaceState, PolicyState, Refusal, Running, Verdict, admit, admit_beside,
};
pub use announce::{Announced, MAX_ANNOUNCED_RULES, announce};
pub use document::{NamespaceRule, PerBroker, PolicyError, SpokePolicy, VolumeKind};

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

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal message's list: `items` joined, or `none`. Here, not in a child, because
/// both the admission and the pod checks word refusals with it.
fn list_or_none<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = items.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}
