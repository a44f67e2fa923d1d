//! `spec`: finds the flux runner, converts the containers and services, and moves the
//! cluster-wide settings (network, sizes, flux, logging, archive, pod) to their v1alpha2
//! places.

use serde_json::{Map, Value};

use super::containers::{Role, Runner, convert_container};
use super::dropped::{restful, users};
use super::fields::{ARCHIVE_KEYS, LOGGING_KEYS, NETWORK_KEYS, POD_KEYS, SPEC_KEYS};
use super::flux::convert_flux;
use super::input::{Cx, Obj, object, put, put_object};
use super::volumes::spec_volumes;

pub(super) fn convert_spec(cx: &mut Cx, value: &Value) -> Option<Map<String, Value>> {
    let s = object(cx, value, "spec", SPEC_KEYS)?;
    let mut out = Map::new();

    let volumes = spec_volumes(cx, &s);

    // The flux runner: the only container, or the one with runFlux: true.
    let containers = s.array(cx, "containers");
    let runner_index = match containers.map(Vec::as_slice) {
        None | Some([]) => {
            cx.err("spec.containers", "at least one container is required");
            None
        }
        Some([_]) => Some(0),
        Some(list) => {
            let runners: Vec<usize> = list
                .iter()
                .enumerate()
                .filter(|(_, c)| c.get("runFlux") == Some(&Value::Bool(true)))
                .map(|(i, _)| i)
                .collect();
            match runners.as_slice() {
                [one] => Some(*one),
                _ => {
                    cx.err(
                        "spec.containers",
                        format!(
                            "exactly one container must set runFlux: true when there are several (found {})",
                            runners.len()
                        ),
                    );
                    None
                }
            }
        }
    };
    let single = containers.is_some_and(|c| c.len() == 1);
    let mut runner = Runner::default();
    let mut converted = Vec::new();
    for (i, c) in containers.into_iter().flatten().enumerate() {
        let role = if Some(i) == runner_index {
            Role::Runner
        } else {
            Role::Sidecar
        };
        let path = format!("spec.containers[{i}]");
        if let Some(c) = convert_container(cx, c, &path, role, single, &volumes, &mut runner) {
            converted.push(Value::Object(c));
        }
    }
    out.insert("containers".into(), Value::Array(converted));

    if let Some(services) = s.array(cx, "services") {
        let mut converted = Vec::new();
        for (i, c) in services.iter().enumerate() {
            let path = format!("spec.services[{i}]");
            let mut ignored = Runner::default();
            if let Some(c) =
                convert_container(cx, c, &path, Role::Service, false, &volumes, &mut ignored)
            {
                converted.push(Value::Object(c));
            }
        }
        if !converted.is_empty() {
            out.insert("services".into(), Value::Array(converted));
        }
    }

    let mut network = Map::new();
    if let Some(n) = s.object(cx, "network", "spec.network", NETWORK_KEYS) {
        put(&mut network, "headlessName", n.text(cx, "headlessName"));
    }
    if network.is_empty() {
        cx.note(
            "spec.network.headlessName",
            "the headless Service is now named after the MiniCluster (v1alpha1: flux-service); set it to flux-service to keep the old host names",
        );
    }
    put_object(&mut out, "network", network);

    put(&mut out, "jobLabels", s.string_map(cx, "jobLabels"));
    let interactive = s.boolean(cx, "interactive");
    put(&mut out, "interactive", interactive);
    put(&mut out, "launcher", s.boolean(cx, "launcher"));
    put(
        &mut out,
        "shareProcessNamespace",
        s.boolean(cx, "shareProcessNamespace"),
    );
    put(&mut out, "cleanup", s.boolean(cx, "cleanup"));
    put(&mut out, "size", s.int32(cx, "size"));
    put(
        &mut out,
        "maxSize",
        s.int32(cx, "maxSize").filter(|n| *n != 0),
    );
    put(&mut out, "tasks", s.int32(cx, "tasks"));
    put(
        &mut out,
        "deadlineSeconds",
        s.int(cx, "deadlineSeconds", i64::MIN, i64::MAX),
    );

    let flux = convert_flux(cx, &s, &runner);
    put_object(&mut out, "flux", flux);
    put_object(&mut out, "logging", convert_logging(cx, &s));
    if let Some(a) = s.object(cx, "archive", "spec.archive", ARCHIVE_KEYS) {
        let mut archive = Map::new();
        put(&mut archive, "path", a.text(cx, "path"));
        put_object(&mut out, "archive", archive);
    }
    put_object(&mut out, "pod", convert_pod(cx, &s));

    users(cx, &s);
    restful(cx, &s, &runner, interactive.unwrap_or(false), runner_index);
    Some(out)
}

fn convert_logging(cx: &mut Cx, s: &Obj<'_>) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(l) = s.object(cx, "logging", "spec.logging", LOGGING_KEYS) else {
        return out;
    };
    for key in ["strict", "debug", "timed", "zeromq"] {
        put(&mut out, key, l.boolean(cx, key));
    }
    let quiet = l.boolean(cx, "quiet");
    let test = l.boolean(cx, "test");
    match (quiet, test) {
        (Some(q), Some(t)) if q != t => cx.err(
            l.at("test"),
            "is the early name of logging.quiet and disagrees with it: keep one",
        ),
        (_, Some(t)) => {
            cx.note(l.at("test"), "renamed to logging.quiet");
            out.insert("quiet".into(), Value::Bool(t));
        }
        (q, None) => put(&mut out, "quiet", q),
    }
    out
}

fn convert_pod(cx: &mut Cx, s: &Obj<'_>) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(p) = s.object(cx, "pod", "spec.pod", POD_KEYS) else {
        return out;
    };
    put(&mut out, "annotations", p.string_map(cx, "annotations"));
    put(&mut out, "labels", p.string_map(cx, "labels"));
    put(&mut out, "nodeSelector", p.string_map(cx, "nodeSelector"));
    put(
        &mut out,
        "serviceAccountName",
        p.text(cx, "serviceAccountName"),
    );
    if p.quantities(cx, "resources").is_some() {
        cx.lose(
            p.at("resources"),
            "v1alpha1 copied them into the pod overhead, which Kubernetes only accepts together with a RuntimeClass defining the same overhead: request resources per container with spec.containers[].resources, or set spec.pod.runtimeClassName and put them back under spec.pod.resources",
        );
    }
    out
}
