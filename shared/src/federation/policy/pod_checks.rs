//! What a burst's pods are checked for against the policy: their resources per broker,
//! and the Pod Security level of their namespace.

use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::{SpokePolicy, VolumeKind, list_or_none, reason};
use crate::quantity::thousandths;
use crate::validate::Exceptions;
use crate::validate::pod_security::{self, containers};

/// A namespace enforcing the restricted level, and whether that comes from its own label
/// (it exists) or from the policy (the spoke would create it so).
pub(super) struct Restricted<'a> {
    pub(super) namespace: &'a str,
    pub(super) labelled: bool,
}

pub(super) fn pod_violations(
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
        // An image volume (the view image's) is an image the pods read: allowed as one.
        if let Some(image) = &v.image {
            let reference = image.reference.as_deref().unwrap_or("");
            if !policy.image_allowed(reference) {
                out.push((
                    reason::IMAGE_NOT_ALLOWED,
                    format!(
                        "volume {:?}: image {reference:?} is not under an allowed prefix ({})",
                        v.name,
                        list_or_none(policy.images.iter().flatten().map(String::as_str))
                    ),
                ));
            }
            continue;
        }
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
            let Some(max) = thousandths(bound) else {
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
pub(super) fn resource_violations(
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
            .and_then(|q| thousandths(&q.0))
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

pub(super) fn show_quantity(thousandths: u128, resource: &str) -> String {
    if resource == "cpu" {
        format!("{thousandths}m")
    } else {
        format!("{}", thousandths.div_ceil(1000))
    }
}

/// The restricted level's problems with `pod` ([`pod_security::restricted`]) as one
/// refusal that says who can admit the burst, and how.
pub(super) fn restricted_violations(
    pod: &PodSpec,
    ns: &Restricted<'_>,
    out: &mut Vec<(&'static str, String)>,
) {
    let problems = pod_security::restricted(pod);
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
