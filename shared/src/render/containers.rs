//! Parts of a container shared by broker pods and the services pod: environment, ports,
//! lifecycle hooks and image pull secrets.

use k8s_openapi::api::core::v1::{
    ContainerPort, EnvVar, EnvVarSource, ExecAction, Lifecycle, LifecycleHandler,
    LocalObjectReference, SecretKeySelector,
};

use crate::api::MiniClusterContainer;
use crate::layout;

use super::non_empty_vec;

/// The distinct, non-empty pull secrets named by containers, sorted.
pub(super) fn image_pull_secrets<'a>(
    names: impl Iterator<Item = &'a Option<String>>,
) -> Option<Vec<LocalObjectReference>> {
    let names: std::collections::BTreeSet<&str> = names
        .filter_map(|n| n.as_deref())
        .filter(|n| !n.is_empty())
        .collect();
    non_empty_vec(
        names
            .into_iter()
            .map(|name| LocalObjectReference { name: name.into() })
            .collect(),
    )
}

pub(super) fn env(c: &MiniClusterContainer) -> Option<Vec<EnvVar>> {
    let mut vars: Vec<EnvVar> = c
        .environment
        .iter()
        .map(|(k, v)| EnvVar {
            name: k.clone(),
            value: Some(v.clone()),
            ..Default::default()
        })
        .chain(c.secrets.iter().map(|(k, s)| EnvVar {
            name: k.clone(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: s.name.clone(),
                    key: s.key.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }))
        .collect();
    vars.sort_by(|a, b| a.name.cmp(&b.name));
    non_empty_vec(vars)
}

pub(super) fn ports(c: &MiniClusterContainer) -> Option<Vec<ContainerPort>> {
    non_empty_vec(
        c.ports
            .iter()
            .map(|p| ContainerPort {
                container_port: *p,
                protocol: Some("TCP".into()),
                ..Default::default()
            })
            .collect(),
    )
}

/// The flux-running container's hooks when leaving brokers drain: the preStop hook runs
/// the drain script (when the ConfigMap has it mounted), then the container's own
/// `preStopExec`, if any.
pub(super) fn drain_lifecycle(c: &MiniClusterContainer) -> Lifecycle {
    let mut script = format!(
        "f={}/{}; [ ! -f \"$f\" ] || /bin/bash \"$f\" leave",
        layout::CONFIG_MOUNT,
        layout::DRAIN_SCRIPT_KEY
    );
    let own = lifecycle(c).unwrap_or_default();
    if let Some(user) = c
        .life_cycle
        .as_ref()
        .and_then(|l| l.pre_stop_exec.as_deref())
        .filter(|s| !s.trim().is_empty())
    {
        script.push('\n');
        script.push_str(user);
    }
    Lifecycle {
        pre_stop: Some(LifecycleHandler {
            exec: Some(ExecAction {
                command: Some(vec!["/bin/sh".into(), "-c".into(), script]),
            }),
            ..Default::default()
        }),
        ..own
    }
}

pub(super) fn lifecycle(c: &MiniClusterContainer) -> Option<Lifecycle> {
    let lc = c.life_cycle.as_ref()?;
    let hook = |cmd: &Option<String>| {
        cmd.as_deref()
            .filter(|s| !s.trim().is_empty())
            .map(|s| LifecycleHandler {
                exec: Some(ExecAction {
                    command: Some(vec!["/bin/sh".into(), "-c".into(), s.into()]),
                }),
                ..Default::default()
            })
    };
    let lifecycle = Lifecycle {
        post_start: hook(&lc.post_start_exec),
        pre_stop: hook(&lc.pre_stop_exec),
        ..Default::default()
    };
    (lifecycle.post_start.is_some() || lifecycle.pre_stop.is_some()).then_some(lifecycle)
}
