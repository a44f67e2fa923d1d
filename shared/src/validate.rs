//! Validation of a MiniCluster: every problem at once, each naming the field and the rule.
//!
//! The CRD's CEL rules catch the common cross-field mistakes at `kubectl apply` time; this
//! module is the complete check that the planner relies on.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::api::{ContainerVolume, MiniCluster, MiniClusterContainer, MiniClusterSpec, defaults};
use crate::{curve, hostlist, rank_order};

/// One problem: the field path (`spec.containers[0].image`) and the rule it breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the offending field.
    pub field: String,
    /// The rule, in words.
    pub rule: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.rule)
    }
}

/// Every problem found in a MiniCluster.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<FieldError>);

impl ValidationErrors {
    /// A single problem.
    pub fn single(field: impl Into<String>, rule: impl Into<String>) -> Self {
        ValidationErrors(vec![FieldError {
            field: field.into(),
            rule: rule.into(),
        }])
    }
}

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Names the renderer gives its own pod volumes; user volumes must not reuse them.
const RESERVED_VOLUMES: &[&str] = &["flux-config", "flux-curve", "flux-home", "spack-software"];

/// Check a MiniCluster; `Ok` means the planner and renderer can run without surprises.
pub fn validate(mc: &MiniCluster) -> Result<(), ValidationErrors> {
    validate_hosts(mc).map(drop)
}

/// Validate, and hand the planner the rank-ordered host list computed on the way.
pub(crate) fn validate_hosts(mc: &MiniCluster) -> Result<Vec<String>, ValidationErrors> {
    let mut v = Validator::default();
    let name = mc.metadata.name.as_deref().unwrap_or("");
    v.metadata(name, mc.metadata.namespace.as_deref());
    v.spec(name, &mc.spec);
    match v.hosts.take() {
        Some(hosts) if v.errors.is_empty() => Ok(hosts),
        _ if v.errors.is_empty() => Err(ValidationErrors::single(
            "spec.flux.bursting.hostlist",
            "does not describe any host",
        )),
        _ => Err(ValidationErrors(v.errors)),
    }
}

/// Whether `s` is a DNS-1123 label: at most 63 lowercase alphanumerics or `-`, starting
/// and ending with an alphanumeric.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Whether `s` is an IP address or a DNS name (DNS-1123 subdomain, upper case allowed).
pub fn is_host_address(s: &str) -> bool {
    if s.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let lower = s.to_ascii_lowercase();
    lower.len() <= 253 && lower.split('.').all(is_dns_label)
}

/// Whether `s` is a Flux Standard Duration: a non-negative number with an optional unit
/// `ms`, `s`, `m`, `h` or `d`.
pub fn is_fsd(s: &str) -> bool {
    let number = ["ms", "s", "m", "h", "d"]
        .iter()
        .find_map(|unit| s.strip_suffix(unit))
        .unwrap_or(s);
    let mut parts = number.splitn(2, '.');
    let int = parts.next().unwrap_or("");
    let frac = parts.next();
    !int.is_empty()
        && int.bytes().all(|c| c.is_ascii_digit())
        && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|c| c.is_ascii_digit()))
}

/// Whether `s` is a Kubernetes resource quantity (`64Gi`, `500M`, `1.5`, `100m`, `1e3`).
pub fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits_end);
    let valid_number = !number.is_empty() && number != "." && number.matches('.').count() <= 1;
    let valid_suffix = matches!(
        suffix,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    ) || suffix.strip_prefix(['e', 'E']).is_some_and(|exp| {
        let exp = exp.strip_prefix(['+', '-']).unwrap_or(exp);
        !exp.is_empty() && exp.bytes().all(|c| c.is_ascii_digit())
    });
    valid_number && valid_suffix
}

fn is_topology(t: &str) -> bool {
    let with_k = |prefix: &str| {
        t.strip_prefix(prefix)
            .is_some_and(|k| !k.is_empty() && k.bytes().all(|c| c.is_ascii_digit()))
    };
    matches!(t, "binomial" | "mincrit" | "custom") || with_k("kary:") || with_k("mincrit:")
}

/// Record a problem when `ok` is false; field and rule are only formatted on failure
/// (validation runs on every reconcile, so the passing path must not allocate).
macro_rules! check {
    ($v:expr, $ok:expr, $field:expr, $rule:expr $(,)?) => {
        if !$ok {
            $v.err($field, $rule);
        }
    };
}

#[derive(Default)]
struct Validator {
    errors: Vec<FieldError>,
    /// The instance's hosts in rank order, once computed.
    hosts: Option<Vec<String>>,
}

impl Validator {
    fn err(&mut self, field: impl Into<String>, rule: impl Into<String>) {
        self.errors.push(FieldError {
            field: field.into(),
            rule: rule.into(),
        });
    }

    fn dns_label(&mut self, value: &str, field: impl Into<String>) {
        check!(
            self,
            is_dns_label(value),
            field,
            format!(
                "{value:?} must be a DNS-1123 label: at most 63 lowercase letters, digits or '-', starting and ending with a letter or digit"
            ),
        );
    }

    fn metadata(&mut self, name: &str, namespace: Option<&str>) {
        if name.is_empty() {
            self.err("metadata.name", "is required");
        } else {
            self.dns_label(name, "metadata.name");
        }
        if let Some(ns) = namespace {
            self.dns_label(ns, "metadata.namespace");
        }
    }

    fn spec(&mut self, name: &str, spec: &MiniClusterSpec) {
        self.sizes(name, spec);
        self.containers(name, spec);
        self.services(spec);
        self.flux(name, spec);
        self.pod(spec);
        if let Some(path) = spec.archive.as_ref().and_then(|a| a.path.as_deref()) {
            check!(
                self,
                path.starts_with('/'),
                "spec.archive.path",
                "must be an absolute path",
            );
        }
        for key in spec.job_labels.keys() {
            self.label_key(key, format!("spec.jobLabels[{key:?}]"));
        }
    }

    fn label_key(&mut self, key: &str, field: String) {
        let name = key.rsplit('/').next().unwrap_or(key);
        let ok = !name.is_empty()
            && name.len() <= 63
            && name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && name.as_bytes()[0].is_ascii_alphanumeric()
            && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
        check!(
            self,
            ok,
            field,
            "must be a valid label key (optional DNS prefix and '/', then at most 63 alphanumerics, '-', '_' or '.')"
        );
    }

    fn sizes(&mut self, name: &str, spec: &MiniClusterSpec) {
        check!(
            self,
            spec.size >= 1,
            "spec.size",
            format!("must be at least 1 (got {})", spec.size),
        );
        if let Some(max) = spec.max_size {
            check!(
                self,
                max >= spec.size,
                "spec.maxSize",
                format!(
                    "must be greater than or equal to spec.size ({max} < {})",
                    spec.size
                ),
            );
        }
        if let Some(min) = spec.min_size {
            check!(
                self,
                (1..=spec.size).contains(&min),
                "spec.minSize",
                format!(
                    "must be between 1 and spec.size ({}) (got {min})",
                    spec.size
                ),
            );
        }
        if let Some(tasks) = spec.tasks {
            check!(self, tasks >= 0, "spec.tasks", "must not be negative");
        }
        if let Some(limit) = spec.backoff_limit {
            check!(
                self,
                limit >= 0,
                "spec.backoffLimit",
                "must not be negative"
            );
        }
        if let Some(deadline) = spec.deadline_seconds {
            check!(
                self,
                deadline >= 1,
                "spec.deadlineSeconds",
                "must be at least 1"
            );
        }
        // Pod hostnames are `<name>-<index>` and must fit in a DNS label.
        if is_dns_label(name) && spec.max_size() >= 1 {
            let longest = format!("{name}-{}", spec.max_size() - 1);
            check!(
                self,
                longest.len() <= 63,
                "metadata.name",
                format!("is too long: pod hostname {longest:?} would exceed 63 characters"),
            );
        }
    }

    fn containers(&mut self, name: &str, spec: &MiniClusterSpec) {
        if spec.containers.is_empty() {
            self.err("spec.containers", "at least one container is required");
            return;
        }
        let runner = spec.flux_runner_index();
        if spec.containers.len() == 1 {
            check!(
                self,
                spec.containers[0].run_flux != Some(false),
                "spec.containers[0].runFlux",
                "the only container always runs Flux; remove runFlux: false",
            );
        } else if runner.is_none() {
            let (explicit, unset) = spec.flux_runner_candidates();
            self.err(
                "spec.containers",
                format!(
                    "exactly one container must run Flux: set runFlux: true on it, or runFlux: false on every other container (found {} with runFlux: true, {} unset)",
                    explicit.len(),
                    unset.len()
                ),
            );
        }
        let view_name = spec.flux().view().name().to_string();
        let mut names = BTreeSet::new();
        for (i, c) in spec.containers.iter().enumerate() {
            let field = format!("spec.containers[{i}]");
            let runs_flux = runner == Some(i);
            self.container(&field, c, runs_flux);
            // The flux runner is always named after the MiniCluster.
            let effective = if runs_flux {
                Some(name)
            } else {
                c.name.as_deref()
            };
            match effective {
                None | Some("") if !runs_flux => {
                    self.err(
                        format!("{field}.name"),
                        "is required for containers that do not run Flux",
                    );
                }
                Some(n) if !n.is_empty() => {
                    if !runs_flux {
                        self.dns_label(n, format!("{field}.name"));
                    }
                    check!(
                        self,
                        n != view_name,
                        format!("{field}.name"),
                        format!("{n:?} is the name of the flux view init container"),
                    );
                    check!(
                        self,
                        names.insert(n.to_string()),
                        format!("{field}.name"),
                        format!(
                            "{n:?} is used by more than one container (the flux runner is named after the MiniCluster)"
                        ),
                    );
                }
                _ => {}
            }
            if runs_flux {
                let script = c
                    .commands()
                    .script
                    .as_deref()
                    .filter(|s| !s.trim().is_empty());
                check!(
                    self,
                    !(script.is_some() && c.command().is_some()),
                    format!("{field}.commands.script"),
                    "script and command are exclusive: the script becomes the command",
                );
            } else {
                for flag in [
                    ("launcher", c.launcher),
                    ("batch", c.batch),
                    ("diagnostics", c.diagnostics),
                ] {
                    check!(
                        self,
                        flag.1 != Some(true),
                        format!("{field}.{}", flag.0),
                        "only applies to the container that runs Flux",
                    );
                }
            }
            let launcher = c.launcher.or(spec.launcher).unwrap_or(false);
            check!(
                self,
                !(launcher && c.batch == Some(true)),
                format!("{field}.batch"),
                "batch and launcher are exclusive: choose one",
            );
            check!(
                self,
                !(c.batch_raw == Some(true) && c.batch != Some(true)),
                format!("{field}.batchRaw"),
                "only applies with batch: true",
            );
        }
        self.volumes(&spec.containers, "spec.containers");
    }

    fn container(&mut self, field: &str, c: &MiniClusterContainer, runs_flux: bool) {
        check!(
            self,
            !c.image.trim().is_empty(),
            format!("{field}.image"),
            "is required",
        );
        let mut seen = BTreeSet::new();
        for (j, port) in c.ports.iter().enumerate() {
            check!(
                self,
                (1..=65535).contains(port),
                format!("{field}.ports[{j}]"),
                format!("{port} is not a port number (1-65535)"),
            );
            check!(
                self,
                *port != defaults::BROKER_PORT || !runs_flux,
                format!("{field}.ports[{j}]"),
                "8050 is the Flux broker's own port",
            );
            check!(
                self,
                seen.insert(*port),
                format!("{field}.ports[{j}]"),
                format!("{port} is listed twice"),
            );
        }
        for key in c.environment.keys().chain(c.secrets.keys()) {
            check!(
                self,
                !key.is_empty() && !key.contains('='),
                format!("{field}.environment[{key:?}]"),
                "environment variable names must be non-empty and must not contain '='",
            );
        }
        for key in c.environment.keys().filter(|k| c.secrets.contains_key(*k)) {
            self.err(
                format!("{field}.secrets[{key:?}]"),
                "is also set in environment: choose one",
            );
        }
        for (key, secret) in &c.secrets {
            check!(
                self,
                !secret.name.is_empty() && !secret.key.is_empty(),
                format!("{field}.secrets[{key:?}]"),
                "needs both name and key",
            );
        }
        if let Some(policy) = c.image_pull_policy.as_deref().filter(|p| !p.is_empty()) {
            check!(
                self,
                matches!(policy, "Always" | "IfNotPresent" | "Never"),
                format!("{field}.imagePullPolicy"),
                format!("{policy:?} must be one of Always, IfNotPresent, Never"),
            );
        }
        if let Some(dir) = c.working_dir.as_deref().filter(|d| !d.is_empty()) {
            check!(
                self,
                dir.starts_with('/'),
                format!("{field}.workingDir"),
                "must be an absolute path",
            );
        }
        if let Some(logs) = c.logs.as_deref().filter(|d| !d.is_empty()) {
            check!(
                self,
                logs.starts_with('/'),
                format!("{field}.logs"),
                "must be an absolute path",
            );
        }
        if let Some(user) = c.flux_user.as_ref().and_then(|u| u.name.as_deref()) {
            let ok = !user.is_empty()
                && user.len() <= 32
                && user.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
                })
                && !user.starts_with('-');
            check!(
                self,
                ok,
                format!("{field}.fluxUser.name"),
                "must be a POSIX user name (lowercase letters, digits, '_' or '-')",
            );
        }
    }

    fn services(&mut self, spec: &MiniClusterSpec) {
        let mut names = BTreeSet::new();
        for (i, s) in spec.services.iter().enumerate() {
            let field = format!("spec.services[{i}]");
            match s.name.as_deref() {
                Some(n) if !n.is_empty() => {
                    self.dns_label(n, format!("{field}.name"));
                    check!(
                        self,
                        names.insert(n),
                        format!("{field}.name"),
                        format!("{n:?} is used by more than one service"),
                    );
                }
                _ => self.err(
                    format!("{field}.name"),
                    "is required for service containers",
                ),
            }
            check!(
                self,
                !s.image.trim().is_empty(),
                format!("{field}.image"),
                "is required",
            );
            check!(
                self,
                s.run_flux != Some(true),
                format!("{field}.runFlux"),
                "service containers cannot run Flux",
            );
            let cmds = s.commands();
            for (hook, value) in [
                ("pre", &cmds.pre),
                ("brokerPre", &cmds.broker_pre),
                ("workerPre", &cmds.worker_pre),
            ] {
                check!(
                    self,
                    value.as_deref().is_none_or(|v| v.trim().is_empty()),
                    format!("{field}.commands.{hook}"),
                    "service containers do not run broker hooks",
                );
            }
        }
        self.volumes(&spec.services, "spec.services");
    }

    fn volumes(&mut self, containers: &[MiniClusterContainer], list: &str) {
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

    fn flux(&mut self, name: &str, spec: &MiniClusterSpec) {
        let flux = spec.flux();
        let view = flux.view();
        if let Some(n) = view.name.as_deref().filter(|n| !n.is_empty()) {
            self.dns_label(n, "spec.flux.container.name");
        }
        if let Some(p) = view.mount_path.as_deref().filter(|p| !p.is_empty()) {
            check!(
                self,
                p.starts_with('/') && !p.trim_end_matches('/').is_empty(),
                "spec.flux.container.mountPath",
                "must be an absolute path other than /",
            );
        }
        if let Some(arch) = flux.arch.as_deref().filter(|a| !a.is_empty()) {
            check!(
                self,
                defaults::ARCH_ARM.contains(&arch) || defaults::ARCH_X86.contains(&arch),
                "spec.flux.arch",
                format!("{arch:?} must be one of arm, arm64, aarch64, amd64, x86_64")
            );
        }
        if let Some(t) = flux.connect_timeout.as_deref().filter(|t| !t.is_empty()) {
            check!(
                self,
                is_fsd(t),
                "spec.flux.connectTimeout",
                format!("{t:?} must be a duration such as 5s, 500ms, 1m (or \"\" to omit it)"),
            );
        }
        let policy = flux.queue_policy();
        check!(
            self,
            defaults::QUEUE_POLICIES.contains(&policy),
            "spec.flux.scheduler.queuePolicy",
            format!(
                "{policy:?} must be one of {}",
                defaults::QUEUE_POLICIES.join(", ")
            ),
        );
        if let Some(t) = flux.topology.as_deref().filter(|t| !t.is_empty()) {
            check!(
                self,
                is_topology(t),
                "spec.flux.topology",
                format!("{t:?} must be kary:<k>, binomial, mincrit[:<k>] or custom"),
            );
        }
        if let Some(Err(e)) = flux.curve_cert().map(curve::CurveCert::parse) {
            self.err("spec.flux.curveCert", e.to_string());
        }
        if let Some(Err(e)) = flux.broker_config().map(str::parse::<toml::Table>) {
            self.err(
                "spec.flux.brokerConfig",
                format!("is not valid TOML: {}", e.message()),
            );
        }
        self.bursting(name, spec);
    }

    fn bursting(&mut self, name: &str, spec: &MiniClusterSpec) {
        let flux = spec.flux();
        let bursting = flux.bursting.as_ref();
        let in_bursting = bursting.and_then(|b| b.lead_broker.as_ref());
        if flux.lead_broker.is_some() && in_bursting.is_some() {
            self.err(
                "spec.flux.leadBroker",
                "set the lead broker either under spec.flux or under spec.flux.bursting, not both",
            );
        }
        let lead_field = if flux.lead_broker.is_some() {
            "spec.flux.leadBroker"
        } else {
            "spec.flux.bursting.leadBroker"
        };
        let clusters = bursting.map(|b| b.clusters.as_slice()).unwrap_or_default();
        let custom = spec.custom_hostlist();
        if custom.is_some() && !clusters.is_empty() {
            self.err(
                "spec.flux.bursting.hostlist",
                "a custom hostlist cannot be combined with bursting.clusters; choose one",
            );
        }
        let bursts = spec.bursts();
        let mut names = BTreeSet::new();
        for (i, (b, declared)) in bursts.iter().zip(clusters).enumerate() {
            let field = format!("spec.flux.bursting.clusters[{i}]");
            self.dns_label(&b.name, format!("{field}.name"));
            check!(
                self,
                b.size >= 1,
                format!("{field}.size"),
                "must be at least 1"
            );
            check!(
                self,
                names.insert(b.name.as_str()),
                format!("{field}.name"),
                format!("{:?} is used by more than one burst cluster", b.name),
            );
            if let Some(cluster) = declared.cluster.as_deref() {
                self.dns_label(cluster, format!("{field}.cluster"));
            }
            if is_dns_label(&b.name) && b.size >= 1 {
                let longest = format!("{}-{}", b.name, b.size - 1);
                check!(
                    self,
                    longest.len() <= 63,
                    format!("{field}.name"),
                    format!("is too long: host {longest:?} would exceed 63 characters"),
                );
            }
        }
        if let Some(b) = bursting {
            let root_with_bursts = !clusters.is_empty() && spec.lead_broker().is_none();
            if let Some(address) = b.lead_address.as_deref() {
                check!(
                    self,
                    root_with_bursts,
                    "spec.flux.bursting.leadAddress",
                    "only a root MiniCluster with bursting.clusters exposes its lead broker",
                );
                check!(
                    self,
                    is_host_address(address),
                    "spec.flux.bursting.leadAddress",
                    "must be an IP address or a DNS name",
                );
            }
            if let Some(port) = b.lead_node_port {
                check!(
                    self,
                    root_with_bursts,
                    "spec.flux.bursting.leadNodePort",
                    "only a root MiniCluster with bursting.clusters exposes its lead broker",
                );
                check!(
                    self,
                    (1..=65535).contains(&port),
                    "spec.flux.bursting.leadNodePort",
                    "must be a port number (1-65535)",
                );
            }
        }
        match spec.lead_broker() {
            None => {
                // A root instance: bursts must not reuse the root's host prefix.
                for (i, b) in bursts.iter().enumerate() {
                    check!(
                        self,
                        b.name != name,
                        format!("spec.flux.bursting.clusters[{i}].name"),
                        "must differ from the MiniCluster's own name (its hosts would collide with the root's)",
                    );
                }
            }
            Some(lead) => {
                check!(
                    self,
                    !lead.address.trim().is_empty(),
                    format!("{lead_field}.address"),
                    "is required",
                );
                check!(
                    self,
                    !lead.address.contains(['/', ' ']),
                    format!("{lead_field}.address"),
                    "must be an IP address or host name",
                );
                self.dns_label(&lead.name, format!("{lead_field}.name"));
                check!(
                    self,
                    lead.size >= 1,
                    format!("{lead_field}.size"),
                    "must be at least 1",
                );
                if let Some(port) = lead.port {
                    check!(
                        self,
                        (1..=65535).contains(&port),
                        format!("{lead_field}.port"),
                        "must be a port number (1-65535)",
                    );
                }
                check!(
                    self,
                    lead.name != name,
                    format!("{lead_field}.name"),
                    "names the lead MiniCluster, which must differ from this (burst) MiniCluster's name",
                );
                if custom.is_none() {
                    match bursts.iter().position(|b| b.name == name) {
                        None => self.err(
                            "spec.flux.bursting.clusters",
                            format!("a MiniCluster joining a lead broker must list itself (name {name:?}) among the burst clusters so its hosts have ranks"),
                        ),
                        Some(i) => check!(self,
                            bursts[i].size >= spec.max_size(),
                            format!("spec.flux.bursting.clusters[{i}].size"),
                            format!("declares {} hosts but this MiniCluster can run {}", bursts[i].size, spec.max_size()),
                        ),
                    }
                }
            }
        }
        if let Some(custom) = custom {
            match hostlist::expand(custom) {
                Err(e) => self.err("spec.flux.bursting.hostlist", e.to_string()),
                Ok(hosts) => {
                    for i in 0..spec.max_size() {
                        let host = format!("{name}-{i}");
                        if !hosts.contains(&host) {
                            self.err(
                                "spec.flux.bursting.hostlist",
                                format!("does not list this MiniCluster's host {host:?}, so that broker would have no rank"),
                            );
                            break;
                        }
                    }
                }
            }
        }
        if rank_order::is_federated(spec) && flux.topology.as_deref().is_some_and(|t| !t.is_empty())
        {
            self.err(
                "spec.flux.topology",
                "cannot be set when bursting: brokers in other clusters can only reach the lead broker, so the tree must be flat",
            );
        }
        if let Ok(hosts) = rank_order::hosts(name, spec) {
            let mut seen = BTreeSet::new();
            if let Some(dup) = hosts.iter().find(|h| !seen.insert(h.as_str())) {
                self.err(
                    "spec.flux.bursting",
                    format!("host {dup:?} appears twice in the instance's host list; every broker needs a unique host name"),
                );
            }
            self.hosts = (!hosts.is_empty()).then_some(hosts);
        }
    }

    fn pod(&mut self, spec: &MiniClusterSpec) {
        let pod = spec.pod();
        if let Some(policy) = pod.restart_policy.as_deref().filter(|p| !p.is_empty()) {
            check!(
                self,
                matches!(policy, "OnFailure" | "Never"),
                "spec.pod.restartPolicy",
                format!("{policy:?} must be OnFailure or Never (Jobs do not allow Always)"),
            );
        }
        if let Some(dns) = pod.dns_policy.as_deref().filter(|p| !p.is_empty()) {
            check!(
                self,
                matches!(
                    dns,
                    "ClusterFirst" | "ClusterFirstWithHostNet" | "Default" | "None"
                ),
                "spec.pod.dnsPolicy",
                format!(
                    "{dns:?} must be one of ClusterFirst, ClusterFirstWithHostNet, Default, None"
                ),
            );
        }
        if !pod.resources.is_empty() {
            check!(
                self,
                pod.runtime_class_name
                    .as_deref()
                    .is_some_and(|r| !r.is_empty()),
                "spec.pod.resources",
                "becomes the pod overhead, which Kubernetes only accepts together with spec.pod.runtimeClassName naming a RuntimeClass that defines the same overhead",
            );
        }
        for (k, q) in &pod.resources {
            check!(
                self,
                is_quantity(&q.0),
                format!("spec.pod.resources[{k:?}]"),
                format!("{:?} is not a quantity", q.0),
            );
        }
        for key in pod.labels.keys() {
            self.label_key(key, format!("spec.pod.labels[{key:?}]"));
        }
        for (key, values) in &pod.node_affinity {
            check!(
                self,
                !values.is_empty(),
                format!("spec.pod.nodeAffinity[{key:?}]"),
                "needs at least one value",
            );
        }
    }
}
