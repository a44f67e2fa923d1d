//! Flux settings: the view container, arch, timeouts, scheduler, topology, the CURVE
//! certificate and the broker configuration.

use crate::api::{MiniClusterSpec, defaults};
use crate::curve;

use super::{Validator, is_fsd};

fn is_topology(t: &str) -> bool {
    let with_k = |prefix: &str| {
        t.strip_prefix(prefix)
            .is_some_and(|k| !k.is_empty() && k.bytes().all(|c| c.is_ascii_digit()))
    };
    matches!(t, "binomial" | "mincrit" | "custom") || with_k("kary:") || with_k("mincrit:")
}

impl Validator {
    pub(super) fn flux(&mut self, name: &str, spec: &MiniClusterSpec) {
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
        if view.image_volume == Some(true) {
            check!(
                self,
                view.init_container != Some(true),
                "spec.flux.container.imageVolume",
                "cannot be true with spec.flux.container.initContainer: the view comes either \
                 from an image volume or from an init container's copy",
            );
            check!(
                self,
                !view.disabled(),
                "spec.flux.container.imageVolume",
                "cannot be true with spec.flux.container.disable: a disabled view has no image",
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
        if let Some(t) = flux.drain_timeout_seconds {
            check!(
                self,
                (0..=86_400).contains(&t),
                "spec.flux.drainTimeoutSeconds",
                format!("{t} must be between 0 (no draining) and 86400 (one day)"),
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
}
