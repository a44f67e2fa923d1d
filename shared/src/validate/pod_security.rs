//! The Kubernetes Pod Security Standards as they apply to bursts, in one place: the
//! *baseline* level's rules on a MiniCluster's spec (every burst meets them unless its
//! namespace's `allow` lifts one: see `burst_safety`), and what the *restricted* level asks
//! beyond them of a rendered pod (checked by the spoke for a namespace that enforces it).

use k8s_openapi::api::core::v1::{
    Container, PodSecurityContext, PodSpec, SELinuxOptions, SecurityContext,
};

use super::burst_exceptions::Exceptions;

/// Annotation prefix that sets a container's AppArmor profile.
const APPARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";

/// Annotations that set a pod's or a container's seccomp profile (before the field): the
/// pod's key, and the containers' prefix.
const SECCOMP_ANNOTATIONS: [&str; 2] = [
    "seccomp.security.alpha.kubernetes.io/pod",
    "container.seccomp.security.alpha.kubernetes.io/",
];

/// What those annotations may say besides `localhost/<profile>` (a profile loaded on the
/// node): the runtime's default.
const APPARMOR_VALUES: &[&str] = &["runtime/default"];
const SECCOMP_VALUES: &[&str] = &["runtime/default", "docker/default"];
const LOCALHOST: &str = "localhost/";

/// Sysctls the Pod Security Standards' baseline profile allows: namespaced and unable to
/// affect other pods or the node.
pub const SAFE_SYSCTLS: &[&str] = &[
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
pub const SAFE_SELINUX_TYPES: &[&str] = &[
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// A CEL list literal of `items` (`['a', 'b']`); the items are our constants, free of quotes.
pub(super) fn cel_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("'{i}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// A security context of a container or of the pod, as the baseline rules see it (the two
/// Kubernetes types share most fields). What a burst's exceptions lift is left out of it.
pub(super) struct Sc<'a> {
    privileged: bool,
    add: Vec<&'a str>,
    proc_mount: Option<&'a str>,
    seccomp: Option<&'a str>,
    app_armor: Option<&'a str>,
    se_linux: Option<&'a SELinuxOptions>,
    host_process: bool,
    sysctls: Vec<&'a str>,
}

impl<'a> Sc<'a> {
    /// A container's security context.
    pub(super) fn container(sc: &'a SecurityContext) -> Self {
        Sc {
            privileged: sc.privileged == Some(true),
            add: sc
                .capabilities
                .as_ref()
                .and_then(|c| c.add.as_ref())
                .into_iter()
                .flatten()
                .map(String::as_str)
                .collect(),
            proc_mount: sc.proc_mount.as_deref(),
            seccomp: sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
            app_armor: sc.app_armor_profile.as_ref().map(|p| p.type_.as_str()),
            se_linux: sc.se_linux_options.as_ref(),
            host_process: sc
                .windows_options
                .as_ref()
                .and_then(|w| w.host_process)
                .unwrap_or(false),
            sysctls: Vec::new(),
        }
    }

    /// The pod's security context.
    pub(super) fn pod(sc: &'a PodSecurityContext) -> Self {
        Sc {
            privileged: false,
            add: Vec::new(),
            proc_mount: None,
            seccomp: sc.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
            app_armor: sc.app_armor_profile.as_ref().map(|p| p.type_.as_str()),
            se_linux: sc.se_linux_options.as_ref(),
            host_process: sc
                .windows_options
                .as_ref()
                .and_then(|w| w.host_process)
                .unwrap_or(false),
            sysctls: sc
                .sysctls
                .iter()
                .flatten()
                .map(|s| s.name.as_str())
                .collect(),
        }
    }

    /// This context with what `exceptions` lifts taken out (a burst's namespace rule).
    fn except(mut self, exceptions: &Exceptions) -> Self {
        self.privileged &= !exceptions.privileged;
        self.add
            .retain(|c| !exceptions.capabilities.iter().any(|e| e == c));
        self
    }
}

/// One rule of the baseline level on a security context. Each carries its Rust check
/// ([`ScRule::broken`]) and the same check in CEL ([`ScRule::cel`]), side by side: the
/// burst checks use the first, the root cluster's admission policy the second
/// (`author_rules`), and a test evaluates both on the same specs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScRule {
    /// `privileged: true`.
    Privileged,
    /// Any `capabilities.add`.
    CapabilitiesAdd,
    /// `procMount: Unmasked`.
    ProcMount,
    /// `seccompProfile.type: Unconfined`.
    Seccomp,
    /// `appArmorProfile.type: Unconfined`.
    AppArmor,
    /// An SELinux `user` or `role`.
    SeLinuxUserRole,
    /// An SELinux `type` outside [`SAFE_SELINUX_TYPES`].
    SeLinuxType,
    /// `windowsOptions.hostProcess: true`.
    HostProcess,
    /// A sysctl outside [`SAFE_SYSCTLS`] (the pod's only).
    Sysctls,
}

/// One field a rule finds broken: its path below the security context and the value.
pub(super) struct Broken {
    pub(super) field: String,
    pub(super) value: String,
}

impl ScRule {
    /// The rules of a container's security context, in the order they are reported.
    pub const CONTAINER: [ScRule; 8] = [
        ScRule::Privileged,
        ScRule::CapabilitiesAdd,
        ScRule::ProcMount,
        ScRule::Seccomp,
        ScRule::AppArmor,
        ScRule::SeLinuxUserRole,
        ScRule::SeLinuxType,
        ScRule::HostProcess,
    ];

    /// The rules of the pod's security context, in the order they are reported.
    pub const POD: [ScRule; 6] = [
        ScRule::Seccomp,
        ScRule::AppArmor,
        ScRule::SeLinuxUserRole,
        ScRule::SeLinuxType,
        ScRule::HostProcess,
        ScRule::Sysctls,
    ];

    /// The field below the security context, as a message names it.
    pub fn field(self) -> &'static str {
        match self {
            ScRule::Privileged => "privileged",
            ScRule::CapabilitiesAdd => "capabilities.add",
            ScRule::ProcMount => "procMount",
            ScRule::Seccomp => "seccompProfile.type",
            ScRule::AppArmor => "appArmorProfile.type",
            ScRule::SeLinuxUserRole => "seLinuxOptions.user/role",
            ScRule::SeLinuxType => "seLinuxOptions.type",
            ScRule::HostProcess => "windowsOptions.hostProcess",
            ScRule::Sysctls => "sysctls[].name",
        }
    }

    /// What asking for it gets, in words.
    pub fn grants(self) -> String {
        match self {
            ScRule::Privileged => "a privileged container controls the node".into(),
            ScRule::CapabilitiesAdd => "added capabilities reach beyond the container".into(),
            ScRule::ProcMount => "Unmasked exposes the node's /proc".into(),
            ScRule::Seccomp => {
                "an Unconfined seccomp profile lifts the runtime's syscall filter".into()
            }
            ScRule::AppArmor => {
                "an Unconfined AppArmor profile lifts the runtime's confinement".into()
            }
            ScRule::SeLinuxUserRole => "an SELinux user or role of one's choosing".into(),
            ScRule::SeLinuxType => format!(
                "an SELinux type other than {} (spc_t runs unconfined)",
                SAFE_SELINUX_TYPES.join(", ")
            ),
            ScRule::HostProcess => "a host process runs on the node".into(),
            ScRule::Sysctls => format!(
                "a sysctl outside the safe set ({}) reaches the node or other pods",
                SAFE_SYSCTLS.join(", ")
            ),
        }
    }

    /// The fields of `sc` that break the rule, in the order they are reported.
    pub(super) fn broken(self, sc: &Sc<'_>) -> Vec<Broken> {
        let one = |field: &str, value: &str| {
            vec![Broken {
                field: field.into(),
                value: value.into(),
            }]
        };
        match self {
            ScRule::Privileged if sc.privileged => one("privileged", "true"),
            ScRule::CapabilitiesAdd if !sc.add.is_empty() => {
                one("capabilities.add", &sc.add.join(", "))
            }
            ScRule::ProcMount if sc.proc_mount == Some("Unmasked") => one("procMount", "Unmasked"),
            ScRule::Seccomp if sc.seccomp == Some("Unconfined") => {
                one("seccompProfile.type", "Unconfined")
            }
            ScRule::AppArmor if sc.app_armor == Some("Unconfined") => {
                one("appArmorProfile.type", "Unconfined")
            }
            ScRule::SeLinuxUserRole => sc
                .se_linux
                .into_iter()
                .flat_map(|se| [("user", &se.user), ("role", &se.role)])
                .filter_map(|(name, v)| {
                    let v = v.as_deref().filter(|v| !v.is_empty())?;
                    Some(Broken {
                        field: format!("seLinuxOptions.{name}"),
                        value: v.into(),
                    })
                })
                .collect(),
            ScRule::SeLinuxType => sc
                .se_linux
                .and_then(|se| se.type_.as_deref())
                .filter(|t| !t.is_empty() && !SAFE_SELINUX_TYPES.contains(t))
                .map(|t| one("seLinuxOptions.type", t))
                .unwrap_or_default(),
            ScRule::HostProcess if sc.host_process => one("windowsOptions.hostProcess", "true"),
            ScRule::Sysctls => sc
                .sysctls
                .iter()
                .enumerate()
                .filter(|(_, s)| !SAFE_SYSCTLS.contains(s))
                .map(|(i, s)| Broken {
                    field: format!("sysctls[{i}].name"),
                    value: (*s).into(),
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// CEL that is true when the security context `sc` (a CEL expression of an object
    /// that is present) breaks the rule: [`ScRule::broken`] in the admission policy.
    pub fn cel(self, sc: &str) -> String {
        let set = |f: &str| format!("has({sc}.{f})");
        match self {
            ScRule::Privileged => format!("{} && {sc}.privileged", set("privileged")),
            ScRule::CapabilitiesAdd => format!(
                "{} && {} && size({sc}.capabilities.add) > 0",
                set("capabilities"),
                set("capabilities.add")
            ),
            ScRule::ProcMount => format!("{} && {sc}.procMount == 'Unmasked'", set("procMount")),
            ScRule::Seccomp => format!(
                "{} && {sc}.seccompProfile.type == 'Unconfined'",
                set("seccompProfile")
            ),
            ScRule::AppArmor => format!(
                "{} && {sc}.appArmorProfile.type == 'Unconfined'",
                set("appArmorProfile")
            ),
            ScRule::SeLinuxUserRole => format!(
                "{} && (({} && {sc}.seLinuxOptions.user != '') || ({} && {sc}.seLinuxOptions.role != ''))",
                set("seLinuxOptions"),
                set("seLinuxOptions.user"),
                set("seLinuxOptions.role")
            ),
            ScRule::SeLinuxType => format!(
                "{} && {} && !({sc}.seLinuxOptions.type in {})",
                set("seLinuxOptions"),
                set("seLinuxOptions.type"),
                cel_list(&[&[""], SAFE_SELINUX_TYPES].concat())
            ),
            ScRule::HostProcess => format!(
                "{} && {} && {sc}.windowsOptions.hostProcess",
                set("windowsOptions"),
                set("windowsOptions.hostProcess")
            ),
            ScRule::Sysctls => format!(
                "{} && {sc}.sysctls.exists(s, !(s.name in {}))",
                set("sysctls"),
                cel_list(SAFE_SYSCTLS)
            ),
        }
    }

    /// The burst checks' rule for a broken field of value `value`.
    fn burst_rule(self, field: &str, value: &str) -> String {
        match self {
            ScRule::Privileged => {
                "must not be true in a burst: a privileged container controls the node".into()
            }
            ScRule::CapabilitiesAdd => format!(
                "must be empty in a burst (adds {value}): added capabilities reach beyond the container"
            ),
            ScRule::ProcMount => {
                "must not be Unmasked in a burst: it exposes the node's /proc".into()
            }
            ScRule::Seccomp | ScRule::AppArmor => "must not be Unconfined in a burst".into(),
            ScRule::SeLinuxUserRole => {
                let name = field.rsplit('.').next().unwrap_or(field);
                format!("{value:?}: a burst may not pick its SELinux {name}")
            }
            ScRule::SeLinuxType => format!(
                "{value:?} is not one of the SELinux types a burst may use ({})",
                SAFE_SELINUX_TYPES.join(", ")
            ),
            ScRule::HostProcess => {
                "must not be true in a burst: a host process runs on the node".into()
            }
            ScRule::Sysctls => format!(
                "{value:?} is not one of the safe sysctls a burst may set ({})",
                SAFE_SYSCTLS.join(", ")
            ),
        }
    }
}

/// The AppArmor and seccomp annotations (before the fields): each carries its Rust check
/// and its CEL, like [`ScRule`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnnotationRule {
    /// `container.apparmor.security.beta.kubernetes.io/*` other than the runtime's default
    /// or a profile of the node.
    AppArmor,
    /// `seccomp.security.alpha.kubernetes.io/pod`, `container.seccomp.security.alpha.kubernetes.io/*`
    /// other than the runtime's default or a profile of the node.
    Seccomp,
}

impl AnnotationRule {
    /// Both.
    pub const ALL: [AnnotationRule; 2] = [AnnotationRule::AppArmor, AnnotationRule::Seccomp];

    /// The keys, as a message names them.
    pub fn field(self) -> &'static str {
        match self {
            AnnotationRule::AppArmor => {
                "spec.pod.annotations[container.apparmor.security.beta.kubernetes.io/*]"
            }
            AnnotationRule::Seccomp => {
                "spec.pod.annotations[seccomp.security.alpha.kubernetes.io/pod, container.seccomp.security.alpha.kubernetes.io/*]"
            }
        }
    }

    /// What asking for it gets, in words.
    pub fn grants(self) -> String {
        let (what, values) = match self {
            AnnotationRule::AppArmor => ("AppArmor", APPARMOR_VALUES),
            AnnotationRule::Seccomp => ("seccomp", SECCOMP_VALUES),
        };
        format!(
            "a {what} profile other than {} or {LOCALHOST}<profile> (unconfined)",
            values.join(", ")
        )
    }

    fn keys(self, key: &str) -> bool {
        match self {
            AnnotationRule::AppArmor => key.starts_with(APPARMOR_ANNOTATION),
            AnnotationRule::Seccomp => {
                key == SECCOMP_ANNOTATIONS[0] || key.starts_with(SECCOMP_ANNOTATIONS[1])
            }
        }
    }

    fn values(self) -> &'static [&'static str] {
        match self {
            AnnotationRule::AppArmor => APPARMOR_VALUES,
            AnnotationRule::Seccomp => SECCOMP_VALUES,
        }
    }

    /// The annotations that break the rule.
    pub(super) fn broken(
        self,
        annotations: &std::collections::BTreeMap<String, String>,
    ) -> impl Iterator<Item = (&String, &String)> {
        annotations.iter().filter(move |(k, v)| {
            self.keys(k) && !self.values().contains(&v.as_str()) && !v.starts_with(LOCALHOST)
        })
    }

    /// CEL that is true when the annotations `a` (a CEL expression of a map that is
    /// present) break the rule.
    pub fn cel(self, a: &str) -> String {
        let key = match self {
            AnnotationRule::AppArmor => format!("k.startsWith('{APPARMOR_ANNOTATION}')"),
            AnnotationRule::Seccomp => format!(
                "(k == '{}' || k.startsWith('{}'))",
                SECCOMP_ANNOTATIONS[0], SECCOMP_ANNOTATIONS[1]
            ),
        };
        format!(
            "{a}.exists(k, {key} && !({a}[k] in {} || {a}[k].startsWith('{LOCALHOST}')))",
            cel_list(self.values())
        )
    }
}

/// AppArmor and seccomp set by annotation are checked like the fields: only the runtime's
/// default or a profile of the node.
pub(super) fn security_annotations(
    annotations: &std::collections::BTreeMap<String, String>,
    deny: &mut impl FnMut(String, String),
) {
    let mut broken: Vec<_> = AnnotationRule::ALL
        .iter()
        .flat_map(|r| r.broken(annotations))
        .collect();
    broken.sort();
    for (key, value) in broken {
        deny(
            format!("spec.pod.annotations[{key:?}]"),
            format!("{value:?}: a burst's profile must be runtime/default or localhost/<profile>"),
        );
    }
}

/// Every rule of `rules` on `sc`, reported below `field`.
fn check_rules(field: &str, rules: &[ScRule], sc: &Sc<'_>, deny: &mut impl FnMut(String, String)) {
    for rule in rules {
        for b in rule.broken(sc) {
            let rule_text = rule.burst_rule(&b.field, &b.value);
            deny(format!("{field}.{}", b.field), rule_text);
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
    let sc = Sc::container(sc).except(exceptions);
    check_rules(field, &ScRule::CONTAINER, &sc, deny);
}

/// The baseline rules of the pod's security context.
pub(super) fn pod_security_context(sc: &PodSecurityContext, deny: &mut impl FnMut(String, String)) {
    check_rules("spec.pod.securityContext", &ScRule::POD, &Sc::pod(sc), deny);
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
