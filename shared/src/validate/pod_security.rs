//! The Kubernetes Pod Security Standards as they apply to bursts, in one place: the
//! *baseline* level's rules on a MiniCluster's spec (every burst meets them unless its
//! namespace's `allow` lifts one: see `burst_safety`), and what the *restricted* level asks
//! beyond them of a rendered pod (checked by the spoke for a namespace that enforces it).

use k8s_openapi::api::core::v1::{Container, PodSecurityContext, PodSpec, SecurityContext};

use super::burst_exceptions::Exceptions;

/// Annotation prefixes that set a container's AppArmor profile, and the values a burst
/// may give them (the Pod Security baseline's: the runtime's default or a profile loaded
/// on the node).
const APPARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";

/// Annotations that set a pod's or a container's seccomp profile (before the field).
const SECCOMP_ANNOTATIONS: [&str; 2] = [
    "seccomp.security.alpha.kubernetes.io/pod",
    "container.seccomp.security.alpha.kubernetes.io/",
];

/// Sysctls the Pod Security Standards' baseline profile allows: namespaced and unable to
/// affect other pods or the node.
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// SELinux types the baseline profile allows (besides none).
const SAFE_SELINUX_TYPES: &[&str] = &[
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// What the pod and the container security contexts have alike (two types with the same
/// fields).
struct Shared<'a> {
    seccomp: Option<&'a str>,
    app_armor: Option<&'a str>,
    se_linux: Option<&'a k8s_openapi::api::core::v1::SELinuxOptions>,
    host_process: bool,
}

/// [`Shared`] of a pod or container security context.
macro_rules! shared_fields {
    ($sc:expr) => {
        Shared {
            seccomp: $sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
            app_armor: $sc.app_armor_profile.as_ref().map(|p| p.type_.as_str()),
            se_linux: $sc.se_linux_options.as_ref(),
            host_process: $sc
                .windows_options
                .as_ref()
                .and_then(|w| w.host_process)
                .unwrap_or(false),
        }
    };
}

/// AppArmor and seccomp set by annotation are checked like the fields: only the runtime's
/// default or a profile of the node.
pub(super) fn security_annotations(
    annotations: &std::collections::BTreeMap<String, String>,
    deny: &mut impl FnMut(String, String),
) {
    for (key, value) in annotations {
        let confined = if key.starts_with(APPARMOR_ANNOTATION) {
            value == "runtime/default" || value.starts_with("localhost/")
        } else if key == SECCOMP_ANNOTATIONS[0] || key.starts_with(SECCOMP_ANNOTATIONS[1]) {
            matches!(value.as_str(), "runtime/default" | "docker/default")
                || value.starts_with("localhost/")
        } else {
            true
        };
        if !confined {
            deny(
                format!("spec.pod.annotations[{key:?}]"),
                format!(
                    "{value:?}: a burst's profile must be runtime/default or localhost/<profile>"
                ),
            );
        }
    }
}

/// The baseline rules of one container's security context.
pub(super) fn container_security_context(
    field: &str,
    sc: &SecurityContext,
    exceptions: &Exceptions,
    deny: &mut impl FnMut(String, String),
) {
    if sc.privileged == Some(true) && !exceptions.privileged {
        deny(
            format!("{field}.privileged"),
            "must not be true in a burst: a privileged container controls the node".into(),
        );
    }
    let added: Vec<&str> = sc
        .capabilities
        .as_ref()
        .and_then(|c| c.add.as_ref())
        .into_iter()
        .flatten()
        .map(String::as_str)
        .filter(|c| !exceptions.capabilities.iter().any(|e| e == c))
        .collect();
    if !added.is_empty() {
        deny(
            format!("{field}.capabilities.add"),
            format!(
                "must be empty in a burst (adds {}): added capabilities reach beyond the container",
                added.join(", ")
            ),
        );
    }
    if sc.proc_mount.as_deref() == Some("Unmasked") {
        deny(
            format!("{field}.procMount"),
            "must not be Unmasked in a burst: it exposes the node's /proc".into(),
        );
    }
    shared_security(field, shared_fields!(sc), deny);
}

/// The baseline rules of the pod's security context.
pub(super) fn pod_security_context(sc: &PodSecurityContext, deny: &mut impl FnMut(String, String)) {
    let field = "spec.pod.securityContext";
    shared_security(field, shared_fields!(sc), deny);
    for (i, s) in sc.sysctls.iter().flatten().enumerate() {
        if !SAFE_SYSCTLS.contains(&s.name.as_str()) {
            deny(
                format!("{field}.sysctls[{i}].name"),
                format!(
                    "{:?} is not one of the safe sysctls a burst may set ({})",
                    s.name,
                    SAFE_SYSCTLS.join(", ")
                ),
            );
        }
    }
}

/// Rules the pod and container security contexts share.
fn shared_security(field: &str, shared: Shared<'_>, deny: &mut impl FnMut(String, String)) {
    let Shared {
        seccomp,
        app_armor,
        se_linux,
        host_process,
    } = shared;
    if seccomp == Some("Unconfined") {
        deny(
            format!("{field}.seccompProfile.type"),
            "must not be Unconfined in a burst".into(),
        );
    }
    if app_armor == Some("Unconfined") {
        deny(
            format!("{field}.appArmorProfile.type"),
            "must not be Unconfined in a burst".into(),
        );
    }
    if let Some(se) = se_linux {
        for (name, value) in [("user", &se.user), ("role", &se.role)] {
            if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
                deny(
                    format!("{field}.seLinuxOptions.{name}"),
                    format!("{v:?}: a burst may not pick its SELinux {name}"),
                );
            }
        }
        if let Some(t) = se
            .type_
            .as_deref()
            .filter(|t| !t.is_empty() && !SAFE_SELINUX_TYPES.contains(t))
        {
            deny(
                format!("{field}.seLinuxOptions.type"),
                format!(
                    "{t:?} is not one of the SELinux types a burst may use ({})",
                    SAFE_SELINUX_TYPES.join(", ")
                ),
            );
        }
    }
    if host_process {
        deny(
            format!("{field}.windowsOptions.hostProcess"),
            "must not be true in a burst: a host process runs on the node".into(),
        );
    }
}

/// Every container of a pod, init containers first, with the field that lists it.
pub fn containers(pod: &PodSpec) -> impl Iterator<Item = (&'static str, &Container)> {
    pod.init_containers
        .iter()
        .flatten()
        .map(|c| ("initContainers", c))
        .chain(pod.containers.iter().map(|c| ("containers", c)))
}

/// What the restricted level asks of `pod` beyond the baseline (which
/// [`unsafe_burst`](super::unsafe_burst) enforces), one problem per container or volume;
/// empty when the pod meets it.
pub fn restricted(pod: &PodSpec) -> Vec<String> {
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
    problems
}
