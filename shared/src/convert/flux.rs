//! `spec.flux`: the Flux settings, with the flux runner's `fluxOptionFlags` and
//! `fluxLogLevel` merged in, and bursting.

use std::fmt;

use serde_json::{Map, Value};

use super::containers::Runner;
use super::fields::{
    BURST_CLUSTER_KEYS, BURSTING_KEYS, FLUX_KEYS, LEAD_BROKER_KEYS, SCHEDULER_KEYS,
};
use super::input::{Cx, Obj, object, put, put_object};

pub(super) fn convert_flux(cx: &mut Cx, s: &Obj<'_>, runner: &Runner) -> Map<String, Value> {
    let mut out = Map::new();
    let mut container = Map::new();
    container.insert("disable".into(), Value::Bool(true));
    out.insert("container".into(), Value::Object(container));
    cx.note(
        "spec.flux.container.disable",
        "set to true: Flux comes from the application image, as in v1alpha1 (remove it to use a flux view image instead)",
    );

    let mut option_flags = None;
    let mut log_level = None;
    if let Some(f) = s.object(cx, "flux", "spec.flux", FLUX_KEYS) {
        if let Some(root) = f.text(cx, "installRoot") {
            cx.note(
                f.at("installRoot"),
                format!(
                    "dropped ({root:?}): v1alpha1 used it for the Flux IMP's paths; v1alpha2 runs a single-user instance without the IMP and finds flux on the image's PATH"
                ),
            );
        }
        for key in ["wrap", "curveCert", "brokerConfig"] {
            put(&mut out, key, f.text(cx, key));
        }
        // An empty connectTimeout means "no timeout flag" in both versions.
        put(&mut out, "connectTimeout", f.string(cx, "connectTimeout"));
        put(&mut out, "minimalService", f.boolean(cx, "minimalService"));
        option_flags = f
            .text(cx, "optionFlags")
            .map(|v| (f.at("optionFlags"), v.to_string()));
        match f.int32(cx, "logLevel") {
            Some(0) => cx.note(
                f.at("logLevel"),
                "dropped: 0 meant the default log level (6) in v1alpha1",
            ),
            Some(n) => log_level = Some((f.at("logLevel"), n)),
            None => {}
        }
        if let Some(secret) = f.text(cx, "curveCertSecret") {
            cx.lose(
                f.at("curveCertSecret"),
                format!(
                    "v1alpha2 takes a CURVE certificate only as text: put the certificate from Secret {secret:?} into spec.flux.curveCert (or leave both out and one is generated)"
                ),
            );
        }
        for key in ["mungeSecret", "mungeConfigMap"] {
            if f.text(cx, key).is_some() {
                cx.lose(
                    f.at(key),
                    "v1alpha2 runs a single-user Flux instance that needs no munge key: drop it, or if your jobs still read the key mount it as a container volume (secretName or configMapName) at /etc/munge",
                );
            }
        }
        if let Some(sch) = f.object(cx, "scheduler", "spec.flux.scheduler", SCHEDULER_KEYS) {
            let mut scheduler = Map::new();
            put(&mut scheduler, "queuePolicy", sch.text(cx, "queuePolicy"));
            put_object(&mut out, "scheduler", scheduler);
        }
        put_object(&mut out, "bursting", convert_bursting(cx, &f));
    }

    // fluxOptionFlags / fluxLogLevel moved from the flux runner to spec.flux.
    let option_flags = merge_setting(cx, option_flags, runner.option_flags.clone());
    put(&mut out, "optionFlags", option_flags);
    let log_level = merge_setting(cx, log_level, runner.log_level.clone());
    put(&mut out, "logLevel", log_level);
    out
}

/// A cluster-wide setting given under `spec.flux` and/or on the flux runner.
fn merge_setting<T: PartialEq + fmt::Debug>(
    cx: &mut Cx,
    spec: Option<(String, T)>,
    runner: Option<(String, T)>,
) -> Option<T> {
    match (spec, runner) {
        (Some((field, a)), Some((other, b))) if a != b => {
            cx.err(
                other,
                format!("{b:?} differs from {field} ({a:?}); v1alpha2 has one cluster-wide value"),
            );
            None
        }
        (Some((_, a)), _) => Some(a),
        (None, b) => b.map(|(_, v)| v),
    }
}

fn convert_bursting(cx: &mut Cx, f: &Obj<'_>) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(b) = f.object(cx, "bursting", "spec.flux.bursting", BURSTING_KEYS) else {
        return out;
    };
    if let Some(l) = b.object(
        cx,
        "leadBroker",
        "spec.flux.bursting.leadBroker",
        LEAD_BROKER_KEYS,
    ) {
        let mut lead = Map::new();
        put(&mut lead, "address", l.text(cx, "address"));
        put(&mut lead, "name", l.text(cx, "name"));
        put(&mut lead, "size", l.int32(cx, "size").filter(|n| *n != 0));
        put(&mut lead, "port", l.int32(cx, "port").filter(|n| *n != 0));
        // A Go zero-valued leadBroker (no address) means "no lead broker".
        if lead.contains_key("address") || lead.contains_key("name") {
            out.insert("leadBroker".into(), Value::Object(lead));
        }
    }
    put(&mut out, "hostlist", b.text(cx, "hostlist"));
    if let Some(clusters) = b.array(cx, "clusters") {
        let mut list = Vec::new();
        for (i, value) in clusters.iter().enumerate() {
            let path = format!("spec.flux.bursting.clusters[{i}]");
            if let Some(c) = object(cx, value, &path, BURST_CLUSTER_KEYS) {
                let mut cluster = Map::new();
                put(&mut cluster, "name", c.text(cx, "name"));
                put(
                    &mut cluster,
                    "size",
                    c.int32(cx, "size").filter(|n| *n != 0),
                );
                list.push(Value::Object(cluster));
            }
        }
        if !list.is_empty() {
            cx.note(
                "spec.flux.bursting.clusters",
                "the hub now creates each burst cluster's brokers through the spoke named by its cluster field (default: the burst's name); v1alpha1 left creating them to you",
            );
            out.insert("clusters".into(), Value::Array(list));
        }
    }
    out
}
