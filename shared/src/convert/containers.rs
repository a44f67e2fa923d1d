//! `spec.containers[]` and `spec.services[]`: one container each, by its role (flux
//! runner, sidecar or service); the runner's Flux settings are collected for `spec.flux`,
//! and the v1alpha1 hooks move to v1alpha2's commands.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::fields::{
    COMMANDS_KEYS, CONTAINER_KEYS, FLUX_USER_KEYS, LIFE_CYCLE_KEYS, RESOURCES_KEYS, SECRET_KEYS,
    SECURITY_KEYS,
};
use super::input::{Cx, object, put, put_object};
use super::volumes::{SpecVolume, container_volumes};

/// What the flux runner contributes to `spec.flux` and to the RESTful-server decision.
#[derive(Default)]
pub(super) struct Runner {
    pub(super) option_flags: Option<(String, String)>,
    pub(super) log_level: Option<(String, i64)>,
    pub(super) has_command: bool,
    pub(super) diagnostics: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// The container that runs the Flux broker.
    Runner,
    /// Another container of the broker pods.
    Sidecar,
    /// A container of the services pod.
    Service,
}

pub(super) fn convert_container(
    cx: &mut Cx,
    value: &Value,
    path: &str,
    role: Role,
    single: bool,
    spec_volumes: &BTreeMap<String, SpecVolume>,
    runner: &mut Runner,
) -> Option<Map<String, Value>> {
    let c = object(cx, value, path, CONTAINER_KEYS)?;
    let mut out = Map::new();
    match c.string(cx, "image") {
        Some(image) => {
            out.insert("image".into(), image.into());
        }
        None if c.get("image").is_none() => cx.err(c.at("image"), "is required"),
        None => {}
    }
    put(&mut out, "name", c.text(cx, "name"));
    match c.int32(cx, "cores") {
        Some(0) => cx.note(
            c.at("cores"),
            "dropped: 0 meant the default (1 core) in v1alpha1",
        ),
        other => put(&mut out, "cores", other),
    }
    put(&mut out, "workingDir", c.text(cx, "workingDir"));
    let diagnostics = c.boolean(cx, "diagnostics");
    put(&mut out, "diagnostics", diagnostics);
    let command = c.text(cx, "command");
    put(&mut out, "command", command);
    put(&mut out, "environment", c.string_map(cx, "environment"));
    put(&mut out, "imagePullSecret", c.text(cx, "imagePullSecret"));
    for key in ["launcher", "batch", "batchRaw", "pullAlways"] {
        put(&mut out, key, c.boolean(cx, key));
    }
    put(&mut out, "logs", c.text(cx, "logs"));
    match c.boolean(cx, "runFlux") {
        Some(false) if single => cx.note(
            c.at("runFlux"),
            "dropped: v1alpha1 always ran Flux in the only container",
        ),
        other => put(&mut out, "runFlux", other),
    }

    if let Some(ports) = c.array(cx, "ports") {
        let mut list = Vec::new();
        for (j, p) in ports.iter().enumerate() {
            match p.as_i64().and_then(|n| i32::try_from(n).ok()) {
                Some(n) => list.push(Value::from(n)),
                None => cx.err(format!("{}[{j}]", c.at("ports")), "must be a port number"),
            }
        }
        if !list.is_empty() {
            out.insert("ports".into(), Value::Array(list));
        }
    }

    if let Some(secrets) = c.map(cx, "secrets") {
        let mut map = Map::new();
        for (env, value) in secrets {
            let p = format!("{}[{env:?}]", c.at("secrets"));
            if let Some(o) = object(cx, value, &p, SECRET_KEYS) {
                let mut secret = Map::new();
                put(&mut secret, "name", o.string(cx, "name"));
                put(&mut secret, "key", o.string(cx, "key"));
                map.insert(env.clone(), Value::Object(secret));
            }
        }
        put_object(&mut out, "secrets", map);
    }

    let user_path = c.at("fluxUser");
    if let Some(u) = c.object(cx, "fluxUser", &user_path, FLUX_USER_KEYS) {
        let mut user = Map::new();
        put(&mut user, "name", u.text(cx, "name"));
        match u.int(cx, "uid", 0, i64::MAX) {
            Some(0) => cx.note(
                u.at("uid"),
                "dropped: 0 meant the default uid (1000) in v1alpha1",
            ),
            other => put(&mut user, "uid", other),
        }
        put_object(&mut out, "fluxUser", user);
    }

    let life_path = c.at("lifeCycle");
    if let Some(l) = c.object(cx, "lifeCycle", &life_path, LIFE_CYCLE_KEYS) {
        let mut life = Map::new();
        put(&mut life, "postStartExec", l.text(cx, "postStartExec"));
        put(&mut life, "preStopExec", l.text(cx, "preStopExec"));
        put_object(&mut out, "lifeCycle", life);
    }

    let resources_path = c.at("resources");
    if let Some(r) = c.object(cx, "resources", &resources_path, RESOURCES_KEYS) {
        let mut resources = Map::new();
        put(&mut resources, "limits", r.quantities(cx, "limits"));
        put(&mut resources, "requests", r.quantities(cx, "requests"));
        put_object(&mut out, "resources", resources);
    }

    let security_path = c.at("securityContext");
    if let Some(sc) = c.object(cx, "securityContext", &security_path, SECURITY_KEYS) {
        let mut security = Map::new();
        put(&mut security, "privileged", sc.boolean(cx, "privileged"));
        if let Some(caps) = sc.array(cx, "addCapabilities") {
            if caps.iter().all(Value::is_string) {
                if !caps.is_empty() {
                    let mut capabilities = Map::new();
                    capabilities.insert("add".into(), Value::Array(caps.clone()));
                    security.insert("capabilities".into(), Value::Object(capabilities));
                }
            } else {
                cx.err(sc.at("addCapabilities"), "must be a list of strings");
            }
        }
        put_object(&mut out, "securityContext", security);
    }

    container_volumes(cx, &c, spec_volumes, &mut out);

    // Settings v1alpha1 read from the flux runner only.
    let flags = c.string(cx, "fluxOptionFlags");
    let level = c.int32(cx, "fluxLogLevel");
    let pre_command = c.text(cx, "preCommand");
    if role == Role::Runner {
        runner.has_command = command.is_some_and(|s| !s.trim().is_empty());
        runner.diagnostics = diagnostics == Some(true);
        if let Some(flags) = flags.filter(|f| !f.is_empty()) {
            runner.option_flags = Some((c.at("fluxOptionFlags"), flags.to_string()));
        }
        match level {
            Some(0) => cx.note(
                c.at("fluxLogLevel"),
                "dropped: 0 meant the default log level (6) in v1alpha1",
            ),
            Some(n) => runner.log_level = Some((c.at("fluxLogLevel"), n)),
            None => {}
        }
    } else {
        let only = "dropped: v1alpha1 read it only from the container that runs Flux";
        if flags.is_some() {
            cx.note(c.at("fluxOptionFlags"), only);
        }
        if level.is_some() {
            cx.note(c.at("fluxLogLevel"), only);
        }
        if pre_command.is_some() {
            cx.note(c.at("preCommand"), only);
        }
    }
    if role == Role::Runner && pre_command.is_some_and(sets_as_flux) {
        cx.lose(c.at("preCommand"), AS_FLUX_ADVICE);
    }

    let commands_path = c.at("commands");
    let hooks = c.object(cx, "commands", &commands_path, COMMANDS_KEYS);
    let hook = |cx: &mut Cx, key: &str| hooks.and_then(|h| h.text(cx, key));
    let init = hook(cx, "init");
    let pre = hook(cx, "pre");
    let post = hook(cx, "post");
    let prefix = hook(cx, "prefix");
    let broker_pre = hook(cx, "brokerPre");
    let worker_pre = hook(cx, "workerPre");
    let as_root = hooks.and_then(|h| h.boolean(cx, "runFluxAsRoot"));
    let mut commands = Map::new();
    put(&mut commands, "init", init);
    put(&mut commands, "post", post);
    put(&mut commands, "prefix", prefix);
    match role {
        Role::Runner => {
            put(
                &mut commands,
                "pre",
                concat_hooks(pre_command.into_iter().chain(pre)),
            );
            if pre_command.is_some() {
                cx.note(
                    c.at("preCommand"),
                    "moved to commands.pre (ahead of any pre it already had), which runs on every broker at the same point",
                );
            }
            put(&mut commands, "brokerPre", broker_pre);
            put(&mut commands, "workerPre", worker_pre);
            for (key, text) in [("init", init), ("pre", pre)] {
                if text.is_some_and(sets_as_flux) {
                    cx.lose(format!("{commands_path}.{key}"), AS_FLUX_ADVICE);
                }
            }
            let field = format!("{commands_path}.runFluxAsRoot");
            match as_root {
                Some(true) => cx.note(
                    field,
                    "dropped: v1alpha2 always runs Flux as the container's user (root)",
                ),
                Some(false) => cx.lose(
                    field,
                    "v1alpha2 no longer runs Flux as the flux user but as the container's user (root for the images v1alpha1 needed): to run unprivileged, use an image whose USER can run Flux, or set securityContext.runAsUser",
                ),
                None => cx.note(
                    field,
                    "v1alpha2 runs Flux as the container's user (root), not as the flux user as v1alpha1 did by default",
                ),
            }
        }
        Role::Sidecar => {
            let hooks = [broker_pre, worker_pre, pre];
            if hooks.iter().any(Option::is_some) {
                put(
                    &mut commands,
                    "servicePre",
                    concat_hooks(hooks.into_iter().flatten()),
                );
                cx.note(
                    commands_path.clone(),
                    "brokerPre, workerPre and pre of a sidecar moved to commands.servicePre (v1alpha1 ran them, in that order, before the sidecar's command)",
                );
            }
            if as_root.is_some() {
                cx.note(
                    format!("{commands_path}.runFluxAsRoot"),
                    "dropped: it only applied to the container that runs Flux",
                );
            }
            let any_hook = [init, pre, post, broker_pre, worker_pre]
                .iter()
                .any(Option::is_some);
            if command.is_none() && !any_hook {
                out.insert("noWrapEntrypoint".into(), Value::Bool(true));
                cx.note(
                    c.at("noWrapEntrypoint"),
                    "set: a v1alpha1 sidecar without a command ran its image's entrypoint",
                );
            }
        }
        Role::Service => {
            put(&mut commands, "pre", pre);
            put(&mut commands, "brokerPre", broker_pre);
            put(&mut commands, "workerPre", worker_pre);
            if as_root.is_some() {
                cx.note(
                    format!("{commands_path}.runFluxAsRoot"),
                    "dropped: it only applied to the container that runs Flux",
                );
            }
        }
    }
    put_object(&mut out, "commands", commands);
    Some(out)
}

const AS_FLUX_ADVICE: &str = "it sets asFlux, the sudo prefix v1alpha1 ran Flux with; v1alpha2 runs Flux directly as the container's user: export the variables it passed with -E in commands.pre, or list them under environment";

/// Two shell snippets run one after the other.
fn concat_hooks<'a>(parts: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut out = String::new();
    for part in parts.into_iter().filter(|p| !p.trim().is_empty()) {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(part);
    }
    (!out.is_empty()).then_some(out)
}

/// Whether a hook overrides v1alpha1's `asFlux` sudo prefix.
fn sets_as_flux(hook: &str) -> bool {
    hook.lines().any(|l| {
        l.trim_start()
            .trim_start_matches("export ")
            .starts_with("asFlux=")
    })
}
