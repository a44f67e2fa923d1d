//! The alerting rules in `deploy/prometheus/`: valid (`promtool check rules`), each
//! firing on what it is for and not before (`promtool test rules`, Prometheus's own
//! evaluator on the series of `flux-rules.test.yaml`), the PrometheusRule's groups the
//! plain file's, and every metric they name one that flux-hub or flux-spoke exports.
//! `promtool` comes from Debian's `prometheus` package (`scripts/test.sh` unpacks it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use flux_hub::ops::metrics::Metrics;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus")
}

fn yaml(name: &str) -> serde_json::Value {
    let path = dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn promtool(args: &[&str]) {
    let version = Command::new("promtool").arg("--version").output();
    assert!(
        version.is_ok_and(|o| o.status.success()),
        "promtool is required for this test: scripts/test.sh unpacks Debian's prometheus package into .venv (or apt-get install -y prometheus)"
    );
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir())
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool {}:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_rules_are_valid_and_fire_on_what_they_are_for() {
    promtool(&["check", "rules", "flux-rules.yaml"]);
    promtool(&["test", "rules", "flux-rules.test.yaml"]);
}

#[test]
fn the_prometheus_rule_holds_the_same_groups() {
    let plain = yaml("flux-rules.yaml");
    let operator = yaml("prometheus-rule.yaml");
    assert_eq!(operator["kind"], "PrometheusRule");
    assert_eq!(operator["spec"]["groups"], plain["groups"]);
}

/// The metric names in `expr`: words that start `flux_`.
fn metric_names(expr: &str) -> BTreeSet<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("flux_"))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_metric_the_rules_name_is_exported() {
    // The names the hub and the spoke register their metrics under (a family with no
    // labelled sample yet encodes nothing, so the registrations are read, not /metrics).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let sources: String = [
        "hub/src/ops/metrics.rs",
        "hub/src/ops/fleet_metrics.rs",
        "spoke/src/metrics.rs",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(root.join(f)).expect("metrics source"))
    .collect();
    // And one of them is what /metrics shows: the registrations are the exported names.
    assert!(
        Metrics::new()
            .encode()
            .contains("# TYPE flux_hub_bursts_unplaced gauge")
    );
    let plain = yaml("flux-rules.yaml");
    let mut named = BTreeSet::new();
    for group in plain["groups"].as_array().expect("groups") {
        for rule in group["rules"].as_array().expect("rules") {
            named.extend(metric_names(rule["expr"].as_str().expect("expr")));
        }
    }
    assert!(named.len() >= 8, "{named:?}");
    for name in named {
        // Counters are registered without `_total`; their samples carry it.
        let family = name.strip_suffix("_total").unwrap_or(&name);
        assert!(
            sources.contains(&format!("\"{family}\"")),
            "the rules name {name}, which neither flux-hub nor flux-spoke registers"
        );
    }
}
