//! Admission: whether the policy admits each burst of a snapshot, and at what size (the
//! broker ceilings are shared by every burst).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodSpec;

use super::pod_checks::{Restricted, pod_violations};
use super::{Level, POLICY_CONFIGMAP, POLICY_KEY, PolicyError, SpokePolicy, list_or_none, reason};

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

pub(super) fn refuse_all(
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
