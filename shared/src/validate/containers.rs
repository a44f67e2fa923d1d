//! Containers: which one runs Flux, their names, images, ports, environment and
//! per-container flags; and the service containers of the services pod.

use std::collections::BTreeSet;

use crate::api::{MiniClusterContainer, MiniClusterSpec, defaults};

use super::Validator;

impl Validator {
    pub(super) fn containers(&mut self, name: &str, spec: &MiniClusterSpec) {
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

    pub(super) fn services(&mut self, spec: &MiniClusterSpec) {
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
}
