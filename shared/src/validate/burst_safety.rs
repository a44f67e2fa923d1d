//! Safe bursts by default: what a burst may not ask of the cluster it runs in.
//!
//! A root MiniCluster runs in its own cluster, on its users' authority. A burst runs in
//! someone else's cluster, created by the spoke with the spoke's own permissions, so a spec
//! that asks for host access or for the spoke's credentials would hand them to whoever can
//! write a MiniCluster in the root cluster. The rules follow the Kubernetes Pod Security
//! Standards' *baseline* profile (no privileged containers, no added capabilities, no host
//! namespaces or host paths, no unconfined seccomp / AppArmor, no custom SELinux user or
//! role, no unmasked /proc, no Windows host processes, only the safe sysctls), plus the
//! credentials a burst could borrow: a named service account, a mounted token, and the
//! spoke's own or the system's namespaces. The hub runs it before it assigns a burst, the
//! spoke again before it creates anything. The Pod Security rules are in `pod_security`;
//! what an owner may lift of these rules, in `burst_exceptions`.
//!
//! Size: about 400 of its lines are the tests.

use super::FieldError;
use super::burst_exceptions::Exceptions;
use super::pod_security::{container_security_context, pod_security_context, security_annotations};
use crate::api::MiniClusterSpec;

/// The namespace the spoke is deployed to unless told otherwise (`deploy/spoke`).
pub const DEFAULT_SPOKE_NAMESPACE: &str = "flux-spoke-system";

/// Everything in `spec` that a burst in `namespace` of a spoke's cluster may not have,
/// each naming the field and the rule; empty when the burst is safe to create.
/// `spoke_namespace` is the spoke's own namespace; the hub, which does not know it, passes
/// `None` and [`DEFAULT_SPOKE_NAMESPACE`] is assumed. Only what a burst renders is looked
/// at: the services pod runs in the root cluster alone.
pub fn unsafe_burst(
    spec: &MiniClusterSpec,
    namespace: &str,
    spoke_namespace: Option<&str>,
) -> Vec<FieldError> {
    unsafe_burst_except(spec, namespace, spoke_namespace, &Exceptions::default())
}

/// [`unsafe_burst`], with the rules `exceptions` lifts left out.
pub fn unsafe_burst_except(
    spec: &MiniClusterSpec,
    namespace: &str,
    spoke_namespace: Option<&str>,
    exceptions: &Exceptions,
) -> Vec<FieldError> {
    let mut out = Vec::new();
    let mut deny = |field: String, rule: String| out.push(FieldError { field, rule });
    let spoke_namespace = spoke_namespace.unwrap_or(DEFAULT_SPOKE_NAMESPACE);
    if namespace == spoke_namespace {
        deny(
            "metadata.namespace".into(),
            format!(
                "{namespace:?} is the spoke's own namespace: a burst there could reach the spoke's credentials; use another namespace"
            ),
        );
    }
    if namespace.starts_with("kube-") {
        deny(
            "metadata.namespace".into(),
            format!(
                "{namespace:?}: kube-* namespaces belong to the burst cluster's system components; use another namespace"
            ),
        );
    }
    let pod = spec.pod();
    if let Some(account) = pod
        .service_account_name
        .as_deref()
        .filter(|a| !a.is_empty() && *a != "default")
        .filter(|a| !exceptions.service_accounts.iter().any(|e| e == a))
    {
        deny(
            "spec.pod.serviceAccountName".into(),
            format!(
                "{account:?}: a burst runs as its namespace's default service account; a named one would lend its permissions in the burst cluster"
            ),
        );
    }
    if pod.automount_service_account_token == Some(true) {
        deny(
            "spec.pod.automountServiceAccountToken".into(),
            "must not be true in a burst: the token would let the brokers act on the burst cluster's API".into(),
        );
    }
    if pod.host_ipc == Some(true) && !exceptions.host_namespaces {
        deny(
            "spec.pod.hostIPC".into(),
            "must not be true in a burst: it shares the node's IPC namespace".into(),
        );
    }
    if pod.host_pid == Some(true) && !exceptions.host_namespaces {
        deny(
            "spec.pod.hostPID".into(),
            "must not be true in a burst: it shares the node's process namespace".into(),
        );
    }
    if let Some(sc) = &pod.security_context {
        pod_security_context(sc, &mut deny);
    }
    borrowed(spec, exceptions, &mut deny);
    security_annotations(&pod.annotations, &mut deny);
    if let Some(sc) = spec.flux().view().security_context.as_ref() {
        container_security_context(
            "spec.flux.container.securityContext",
            sc,
            exceptions,
            &mut deny,
        );
    }
    for (i, c) in spec.containers.iter().enumerate() {
        if let Some(sc) = &c.security_context {
            container_security_context(
                &format!("spec.containers[{i}].securityContext"),
                sc,
                exceptions,
                &mut deny,
            );
        }
        for (name, v) in &c.volumes {
            if let Some(path) = v
                .host_path
                .as_deref()
                .filter(|p| !p.is_empty() && !exceptions.host_path_allowed(p))
            {
                deny(
                    format!("spec.containers[{i}].volumes[{name:?}].hostPath"),
                    format!(
                        "{path:?}: a burst may not mount a directory of the burst cluster's nodes"
                    ),
                );
            }
        }
    }
    out
}

/// What a burst could borrow of its cluster beyond what the spoke makes for it: Secrets
/// and ConfigMaps of the namespace, tolerations of tainted nodes, runtime classes and
/// schedulers, resources beyond cpu and memory. Each needs the namespace rule's `allow`.
fn borrowed(
    spec: &MiniClusterSpec,
    exceptions: &Exceptions,
    deny: &mut impl FnMut(String, String),
) {
    let pod = spec.pod();
    let secret = |name: &str| exceptions.secrets.iter().any(|s| s == name);
    let view = spec.flux().view();
    if let Some(name) = view
        .image_pull_secret
        .as_deref()
        .filter(|n| !n.is_empty() && !secret(n))
    {
        deny(
            "spec.flux.container.imagePullSecret".into(),
            format!(
                "{name:?}: a burst may use a Secret of its cluster only when that cluster's policy lists it (allow.secrets)"
            ),
        );
    }
    if let Some(r) = &view.resources {
        resources("spec.flux.container.resources", r, exceptions, deny);
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let field = format!("spec.containers[{i}]");
        if let Some(name) = c
            .image_pull_secret
            .as_deref()
            .filter(|n| !n.is_empty() && !secret(n))
        {
            deny(
                format!("{field}.imagePullSecret"),
                format!(
                    "{name:?}: a burst may use a Secret of its cluster only when that cluster's policy lists it (allow.secrets)"
                ),
            );
        }
        for (var, r) in &c.secrets {
            if !secret(&r.name) {
                deny(
                    format!("{field}.secrets[{var:?}]"),
                    format!(
                        "Secret {:?}: a burst may read a Secret of its cluster only when that cluster's policy lists it (allow.secrets)",
                        r.name
                    ),
                );
            }
        }
        for (name, v) in &c.volumes {
            if let Some(s) = v
                .secret_name
                .as_deref()
                .filter(|n| !n.is_empty() && !secret(n))
            {
                deny(
                    format!("{field}.volumes[{name:?}].secretName"),
                    format!(
                        "{s:?}: a burst may mount a Secret of its cluster only when that cluster's policy lists it (allow.secrets)"
                    ),
                );
            }
            if let Some(m) = v
                .config_map_name
                .as_deref()
                .filter(|n| !n.is_empty() && !exceptions.config_maps.iter().any(|c| c == n))
            {
                deny(
                    format!("{field}.volumes[{name:?}].configMapName"),
                    format!(
                        "{m:?}: a burst may mount a ConfigMap of its cluster only when that cluster's policy lists it (allow.configMaps)"
                    ),
                );
            }
        }
        if let Some(r) = &c.resources {
            resources(&format!("{field}.resources"), r, exceptions, deny);
        }
    }
    for (i, t) in pod.tolerations.iter().enumerate() {
        let key = t.key.as_deref().filter(|k| !k.is_empty());
        if !exceptions.toleration_allowed(key) {
            deny(
                format!("spec.pod.tolerations[{i}]"),
                format!(
                    "tolerates {}: a burst may run on tainted nodes only when its cluster's policy lists the taint (allow.tolerations)",
                    key.map_or_else(|| "every taint".to_string(), |k| format!("taint {k:?}"))
                ),
            );
        }
    }
    for (field, value, list, what) in [
        (
            "spec.pod.runtimeClassName",
            &pod.runtime_class_name,
            &exceptions.runtime_classes,
            "allow.runtimeClasses",
        ),
        (
            "spec.pod.schedulerName",
            &pod.scheduler_name,
            &exceptions.schedulers,
            "allow.schedulers",
        ),
    ] {
        if let Some(v) = value
            .as_deref()
            .filter(|v| !v.is_empty() && !list.iter().any(|l| l == v))
        {
            deny(
                field.into(),
                format!(
                    "{v:?}: a burst may name it only when its cluster's policy lists it ({what})"
                ),
            );
        }
    }
    for (resource, q) in &pod.resources {
        if !exceptions.resource_allowed(resource, &q.0) {
            deny(
                format!("spec.pod.resources[{resource:?}]"),
                format!(
                    "{} of {resource}: more than its cluster's policy admits per container (allow.resources)",
                    q.0
                ),
            );
        }
    }
}

/// Requests and limits beyond cpu and memory, each within the policy's `allow.resources`.
fn resources(
    field: &str,
    r: &k8s_openapi::api::core::v1::ResourceRequirements,
    exceptions: &Exceptions,
    deny: &mut impl FnMut(String, String),
) {
    for (kind, map) in [("requests", &r.requests), ("limits", &r.limits)] {
        for (resource, q) in map.iter().flatten() {
            if !exceptions.resource_allowed(resource, &q.0) {
                deny(
                    format!("{field}.{kind}[{resource:?}]"),
                    format!(
                        "{} of {resource}: a burst may ask for resources beyond cpu and memory only up to what its cluster's policy admits per container (allow.resources)",
                        q.0
                    ),
                );
            }
        }
    }
}

/// The violations as one message: `field: rule; field: rule`.
pub fn describe_violations(violations: &[FieldError]) -> String {
    super::ValidationErrors(violations.to_vec()).to_string()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::validate::{MAX_EXCEPTION_ENTRIES, liftable};

    /// A spec of `extra` (`, key: value` pairs), with one plain container unless `extra`
    /// lists its own.
    fn spec(extra: &str) -> MiniClusterSpec {
        let containers = if extra.contains(" containers: [") {
            ""
        } else {
            ", containers: [{image: a}]"
        };
        serde_yaml_ng::from_str(&format!("{{size: 1{containers}{extra}}}"))
            .expect("test spec parses")
    }

    fn fields(extra: &str, namespace: &str, spoke: Option<&str>) -> Vec<String> {
        unsafe_burst(&spec(extra), namespace, spoke)
            .into_iter()
            .map(|v| v.field)
            .collect()
    }

    fn only(extra: &str) -> Vec<String> {
        fields(extra, "default", None)
    }

    #[test]
    fn exceptions_lift_their_own_rule_and_nothing_else() {
        let unsafe_spec = spec(
            ", pod: {serviceAccountName: runner, hostPID: true, hostIPC: true, automountServiceAccountToken: true}, containers: [{image: a, securityContext: {privileged: true, capabilities: {add: [SYS_PTRACE, NET_ADMIN]}}, volumes: {s: {hostPath: /scratch/x, path: /s}, r: {hostPath: /scratch2, path: /r}}}]",
        );
        let with = |e: &Exceptions| -> Vec<String> {
            unsafe_burst_except(&unsafe_spec, "lab", None, e)
                .into_iter()
                .map(|v| format!("{}: {}", v.field, v.rule))
                .collect()
        };
        let all = with(&Exceptions::default());
        assert_eq!(all.len(), 8, "{all:#?}");
        let lifted = Exceptions {
            privileged: true,
            capabilities: vec!["SYS_PTRACE".into()],
            host_namespaces: true,
            host_paths: vec!["/scratch/".into()],
            service_accounts: vec!["runner".into()],
            ..Default::default()
        };
        assert_eq!(lifted.check(), Ok(()));
        let left = with(&lifted);
        assert_eq!(left.len(), 3, "{left:#?}");
        assert!(
            left[0].starts_with("spec.pod.automountServiceAccountToken"),
            "{left:?}"
        );
        assert!(
            left[1].starts_with("spec.containers[0].securityContext.capabilities.add")
                && left[1].contains("adds NET_ADMIN)"),
            "{left:?}"
        );
        assert!(
            left[2].starts_with("spec.containers[0].volumes[\"r\"].hostPath"),
            "whole components only: {left:?}"
        );
        // The namespace rules are never lifted.
        assert_eq!(
            unsafe_burst_except(&spec(""), "kube-system", None, &lifted).len(),
            1
        );
        // What an allow could lift, and what it never can.
        let refused =
            unsafe_burst_except(&unsafe_spec, "kube-system", None, &Exceptions::default());
        let (lift, hold): (Vec<_>, Vec<_>) = refused.iter().partition(|v| liftable(v));
        assert_eq!(lift.len(), 7, "{lift:?}");
        let held: Vec<&str> = hold.iter().map(|v| v.field.as_str()).collect();
        assert_eq!(
            held,
            [
                "metadata.namespace",
                "spec.pod.automountServiceAccountToken"
            ]
        );
    }

    /// The owner's credentials (the case found on two real clusters: a Secret volume of
    /// the burst cluster's service-account token) and everything else a burst could borrow
    /// of its cluster: refused, each naming the field, unless the rule's allow lists it.
    #[test]
    fn a_burst_borrows_nothing_of_its_cluster_unless_the_policy_lists_it() {
        let borrowing = spec(concat!(
            ", pod: {tolerations: [{key: gpu, operator: Exists}, {operator: Exists}], runtimeClassName: kata, schedulerName: volcano,",
            " annotations: {container.apparmor.security.beta.kubernetes.io/a: unconfined, seccomp.security.alpha.kubernetes.io/pod: unconfined, example.com/x: y}},",
            " flux: {container: {imagePullSecret: regcred}},",
            " containers: [{image: a, imagePullSecret: regcred, secrets: {TOKEN: {name: owner-token, key: token}},",
            " resources: {limits: {nvidia.com/gpu: 2, memory: 1Gi}, requests: {ephemeral-storage: 10Gi}},",
            " volumes: {t: {secretName: owner-token, path: /t}, c: {configMapName: owner-config, path: /c}}}]",
        ));
        let fields = |e: &Exceptions| -> Vec<String> {
            unsafe_burst_except(&borrowing, "lab", None, e)
                .into_iter()
                .map(|v| v.field)
                .collect()
        };
        let all = fields(&Exceptions::default());
        assert_eq!(
            all,
            [
                "spec.flux.container.imagePullSecret",
                "spec.containers[0].imagePullSecret",
                "spec.containers[0].secrets[\"TOKEN\"]",
                "spec.containers[0].volumes[\"c\"].configMapName",
                "spec.containers[0].volumes[\"t\"].secretName",
                "spec.containers[0].resources.requests[\"ephemeral-storage\"]",
                "spec.containers[0].resources.limits[\"nvidia.com/gpu\"]",
                "spec.pod.tolerations[0]",
                "spec.pod.tolerations[1]",
                "spec.pod.runtimeClassName",
                "spec.pod.schedulerName",
                "spec.pod.annotations[\"container.apparmor.security.beta.kubernetes.io/a\"]",
                "spec.pod.annotations[\"seccomp.security.alpha.kubernetes.io/pod\"]",
            ]
        );
        let refused = unsafe_burst_except(&borrowing, "lab", None, &Exceptions::default());
        let held: Vec<&str> = refused
            .iter()
            .filter(|v| !liftable(v))
            .map(|v| v.field.as_str())
            .collect();
        assert_eq!(held.len(), 2, "annotations are never lifted: {held:?}");
        let lifted = Exceptions {
            secrets: vec!["owner-token".into(), "regcred".into()],
            config_maps: vec!["owner-config".into()],
            tolerations: vec!["gpu".into()],
            runtime_classes: vec!["kata".into()],
            schedulers: vec!["volcano".into()],
            resources: BTreeMap::from([
                ("nvidia.com/gpu".into(), "1".into()),
                ("ephemeral-storage".into(), "20Gi".into()),
            ]),
            ..Default::default()
        };
        assert_eq!(lifted.check(), Ok(()));
        let left: Vec<String> = fields(&lifted)
            .into_iter()
            .filter(|f| !f.starts_with("spec.pod.annotations"))
            .collect();
        assert_eq!(
            left,
            [
                "spec.containers[0].resources.limits[\"nvidia.com/gpu\"]",
                "spec.pod.tolerations[1]",
            ],
            "2 GPUs are more than the 1 admitted; a toleration of every taint needs *"
        );
        let every_taint = Exceptions {
            tolerations: vec!["*".into()],
            ..lifted
        };
        assert!(!fields(&every_taint).contains(&"spec.pod.tolerations[1]".to_string()));
    }

    #[test]
    fn malformed_exceptions_name_the_entry() {
        for (e, field) in [
            (
                Exceptions {
                    capabilities: vec!["sys_ptrace".into()],
                    ..Default::default()
                },
                "capabilities[0]",
            ),
            (
                Exceptions {
                    host_paths: vec!["/a".into(), "scratch".into()],
                    ..Default::default()
                },
                "hostPaths[1]",
            ),
            (
                Exceptions {
                    host_paths: vec!["/a/../etc".into()],
                    ..Default::default()
                },
                "hostPaths[0]",
            ),
            (
                Exceptions {
                    service_accounts: vec!["Runner".into()],
                    ..Default::default()
                },
                "serviceAccounts[0]",
            ),
            (
                Exceptions {
                    capabilities: vec!["A".into(); MAX_EXCEPTION_ENTRIES + 1],
                    ..Default::default()
                },
                "capabilities",
            ),
            (
                Exceptions {
                    secrets: vec!["Owner_Token".into()],
                    ..Default::default()
                },
                "secrets[0]",
            ),
            (
                Exceptions {
                    tolerations: vec!["a b".into()],
                    ..Default::default()
                },
                "tolerations[0]",
            ),
            (
                Exceptions {
                    resources: BTreeMap::from([("cpu".into(), "1".into())]),
                    ..Default::default()
                },
                "resources[\"cpu\"]",
            ),
            (
                Exceptions {
                    resources: BTreeMap::from([("nvidia.com/gpu".into(), "lots".into())]),
                    ..Default::default()
                },
                "resources[\"nvidia.com/gpu\"]",
            ),
        ] {
            assert_eq!(e.check().unwrap_err().0, field, "{e:?}");
        }
    }

    #[test]
    fn a_plain_burst_is_safe() {
        assert_eq!(only(""), Vec::<String>::new());
        // The harmless settings of every field the rules look at.
        assert_eq!(
            only(
                ", pod: {serviceAccountName: default, automountServiceAccountToken: false, hostIPC: false, hostPID: false, securityContext: {runAsUser: 1000, seccompProfile: {type: RuntimeDefault}, sysctls: [{name: net.ipv4.tcp_syncookies, value: '1'}], seLinuxOptions: {type: container_t, level: 's0:c1'}}}"
            ),
            Vec::<String>::new()
        );
        assert_eq!(
            fields(
                ", containers: [{image: a, securityContext: {privileged: false, capabilities: {drop: [ALL], add: []}, procMount: Default, allowPrivilegeEscalation: false}, volumes: {data: {claimName: c, path: /data}, shm: {emptyDir: true}}}]",
                "flux-spoke-system",
                Some("spokes")
            ),
            Vec::<String>::new()
        );
    }

    #[test]
    fn the_spokes_namespace_and_system_namespaces_are_refused() {
        assert_eq!(
            fields("", "flux-spoke-system", None),
            ["metadata.namespace"]
        );
        assert_eq!(fields("", "spokes", Some("spokes")), ["metadata.namespace"]);
        assert_eq!(fields("", "kube-system", None), ["metadata.namespace"]);
        assert_eq!(fields("", "kube-public", Some("x")), ["metadata.namespace"]);
        // Only a prefix match on `kube-`, and only the spoke's actual namespace.
        assert_eq!(fields("", "kubeflow", None), Vec::<String>::new());
        assert_eq!(
            fields("", "flux-spoke-system", Some("spokes")),
            Vec::<String>::new()
        );
    }

    #[test]
    fn credentials_are_refused() {
        assert_eq!(
            only(", pod: {serviceAccountName: flux-spoke}"),
            ["spec.pod.serviceAccountName"]
        );
        assert_eq!(
            only(", pod: {serviceAccountName: ''}"),
            Vec::<String>::new()
        );
        assert_eq!(
            only(", pod: {automountServiceAccountToken: true}"),
            ["spec.pod.automountServiceAccountToken"]
        );
    }

    #[test]
    fn host_namespaces_are_refused() {
        assert_eq!(only(", pod: {hostIPC: true}"), ["spec.pod.hostIPC"]);
        assert_eq!(only(", pod: {hostPID: true}"), ["spec.pod.hostPID"]);
    }

    #[test]
    fn privileged_containers_and_capabilities_are_refused_in_every_container() {
        let sc = |s: &str| {
            only(&format!(
                ", containers: [{{image: a}}, {{image: b, name: side, runFlux: false, securityContext: {s}}}]"
            ))
        };
        assert_eq!(
            sc("{privileged: true}"),
            ["spec.containers[1].securityContext.privileged"]
        );
        assert_eq!(
            sc("{capabilities: {add: [SYS_ADMIN]}}"),
            ["spec.containers[1].securityContext.capabilities.add"]
        );
        assert_eq!(
            sc("{procMount: Unmasked}"),
            ["spec.containers[1].securityContext.procMount"]
        );
        assert_eq!(
            sc("{seccompProfile: {type: Unconfined}}"),
            ["spec.containers[1].securityContext.seccompProfile.type"]
        );
        assert_eq!(
            sc("{appArmorProfile: {type: Unconfined}}"),
            ["spec.containers[1].securityContext.appArmorProfile.type"]
        );
        assert_eq!(
            sc("{seLinuxOptions: {user: system_u, role: system_r, type: spc_t}}"),
            [
                "spec.containers[1].securityContext.seLinuxOptions.user",
                "spec.containers[1].securityContext.seLinuxOptions.role",
                "spec.containers[1].securityContext.seLinuxOptions.type"
            ]
        );
        assert_eq!(
            sc("{windowsOptions: {hostProcess: true}}"),
            ["spec.containers[1].securityContext.windowsOptions.hostProcess"]
        );
    }

    #[test]
    fn the_flux_view_container_is_checked_too() {
        assert_eq!(
            only(
                ", flux: {container: {securityContext: {privileged: true, capabilities: {add: [NET_ADMIN]}}}}"
            ),
            [
                "spec.flux.container.securityContext.privileged",
                "spec.flux.container.securityContext.capabilities.add"
            ]
        );
    }

    #[test]
    fn the_pod_security_context_is_checked() {
        assert_eq!(
            only(
                ", pod: {securityContext: {seccompProfile: {type: Unconfined}, appArmorProfile: {type: Unconfined}, seLinuxOptions: {role: r}, windowsOptions: {hostProcess: true}, sysctls: [{name: kernel.msgmax, value: '1'}]}}"
            ),
            [
                "spec.pod.securityContext.seccompProfile.type",
                "spec.pod.securityContext.appArmorProfile.type",
                "spec.pod.securityContext.seLinuxOptions.role",
                "spec.pod.securityContext.windowsOptions.hostProcess",
                "spec.pod.securityContext.sysctls[0].name"
            ]
        );
    }

    #[test]
    fn host_paths_are_refused() {
        assert_eq!(
            only(", containers: [{image: a, volumes: {root: {hostPath: /, path: /host}}}]"),
            ["spec.containers[0].volumes[\"root\"].hostPath"]
        );
    }

    #[test]
    fn services_run_in_the_root_only_and_are_not_checked() {
        assert_eq!(
            only(", services: [{image: s, name: s, securityContext: {privileged: true}}]"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn the_reported_case_lists_every_violation() {
        let v = unsafe_burst(
            &spec(
                ", pod: {serviceAccountName: flux-spoke, automountServiceAccountToken: true}, containers: [{image: a, securityContext: {privileged: true}, volumes: {root: {hostPath: /, path: /host}}}]",
            ),
            "flux-spoke-system",
            None,
        );
        let message = describe_violations(&v);
        for part in [
            "metadata.namespace: \"flux-spoke-system\" is the spoke's own namespace",
            "spec.pod.serviceAccountName: \"flux-spoke\"",
            "spec.pod.automountServiceAccountToken: must not be true",
            "spec.containers[0].securityContext.privileged: must not be true",
            "spec.containers[0].volumes[\"root\"].hostPath: \"/\"",
        ] {
            assert!(message.contains(part), "{part:?} not in {message}");
        }
        assert_eq!(v.len(), 5);
    }
}
