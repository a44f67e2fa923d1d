//! Validation: every rule, reported with its field path, all problems at once; and the
//! CRD's CEL rules reject the same cross-field mistakes as the Rust validator.

use flux_shared::api::{MiniCluster, MiniClusterSpec};
use flux_shared::validate::validate;

fn mc(yaml: &str) -> MiniCluster {
    serde_yaml_ng::from_str(yaml).expect("test yaml parses")
}

const BASE: &str = "apiVersion: flux-framework.org/v1alpha2\nkind: MiniCluster\nmetadata: {name: flux-sample, namespace: default}\n";

fn errors(spec: &str) -> Vec<String> {
    match validate(&mc(&format!("{BASE}spec:\n{spec}"))) {
        Ok(()) => Vec::new(),
        Err(e) => e.0.iter().map(ToString::to_string).collect(),
    }
}

fn assert_rejects(spec: &str, field: &str, rule_part: &str) {
    let errs = errors(spec);
    assert!(
        errs.iter()
            .any(|e| e.starts_with(&format!("{field}: ")) && e.contains(rule_part)),
        "expected `{field}: ...{rule_part}...` for\n{spec}\ngot {errs:#?}"
    );
}

#[test]
fn a_minimal_minicluster_is_valid() {
    assert_eq!(
        errors("  containers: [{image: rockylinux:9}]\n"),
        Vec::<String>::new()
    );
}

#[test]
fn size_rules() {
    let c = "  containers: [{image: busybox}]\n";
    assert_rejects(&format!("  size: 0\n{c}"), "spec.size", "at least 1");
    assert_rejects(
        &format!("  size: 4\n  maxSize: 2\n{c}"),
        "spec.maxSize",
        "greater than or equal",
    );
    assert_rejects(
        &format!("  size: 2\n  minSize: 3\n{c}"),
        "spec.minSize",
        "between 1 and",
    );
    assert_rejects(&format!("  tasks: -1\n{c}"), "spec.tasks", "negative");
    assert_rejects(
        &format!("  deadlineSeconds: 0\n{c}"),
        "spec.deadlineSeconds",
        "at least 1",
    );
    assert_eq!(
        errors(&format!(
            "  size: 2\n  maxSize: 2\n  minSize: 1\n  tasks: 0\n{c}"
        )),
        Vec::<String>::new()
    );
}

#[test]
fn container_rules() {
    assert_rejects(
        "  containers: [{image: a, name: one}, {image: b, name: two}]\n",
        "spec.containers",
        "exactly one container must run Flux: set runFlux: true on it, or runFlux: false on every other container (found 0 with runFlux: true, 2 unset)",
    );
    assert_rejects(
        "  containers: [{image: a, runFlux: false, name: a}, {image: b, runFlux: false, name: b}]\n",
        "spec.containers",
        "(found 0 with runFlux: true, 0 unset)",
    );
    assert_rejects(
        "  containers: [{image: a}, {image: b, runFlux: false}]\n",
        "spec.containers[1].name",
        "required",
    );
    assert_rejects(
        "  containers: [{image: a, runFlux: true}, {image: b, runFlux: true, name: b}]\n",
        "spec.containers",
        "found 2",
    );
    assert_rejects(
        "  containers: [{image: a, runFlux: true}, {image: b}]\n",
        "spec.containers[1].name",
        "required",
    );
    assert_rejects(
        "  containers: [{image: a, runFlux: false}]\n",
        "spec.containers[0].runFlux",
        "always runs Flux",
    );
    assert_rejects(
        "  containers: [{image: a, command: x, commands: {script: y}}]\n",
        "spec.containers[0].commands.script",
        "exclusive",
    );
    assert_rejects(
        "  containers: [{image: a, batch: true, launcher: true}]\n",
        "spec.containers[0].batch",
        "launcher",
    );
    assert_rejects(
        "  launcher: true\n  containers: [{image: a, batch: true}]\n",
        "spec.containers[0].batch",
        "launcher",
    );
    assert_rejects(
        "  containers: [{image: a, batchRaw: true}]\n",
        "spec.containers[0].batchRaw",
        "batch: true",
    );
    assert_rejects(
        "  containers: [{image: ''}]\n",
        "spec.containers[0].image",
        "required",
    );
    assert_rejects(
        "  containers: [{image: a, ports: [0]}]\n",
        "spec.containers[0].ports[0]",
        "not a port",
    );
    assert_rejects(
        "  containers: [{image: a, ports: [70000]}]\n",
        "spec.containers[0].ports[0]",
        "not a port",
    );
    assert_rejects(
        "  containers: [{image: a, ports: [80, 80]}]\n",
        "spec.containers[0].ports[1]",
        "twice",
    );
    assert_rejects(
        "  containers: [{image: a, runFlux: true}, {image: b, name: Bad_Name}]\n",
        "spec.containers[1].name",
        "DNS-1123",
    );
    assert_rejects(
        "  containers: [{image: a, runFlux: true}, {image: b, name: flux-sample}]\n",
        "spec.containers[1].name",
        "more than one container",
    );
    assert_rejects(
        "  containers: [{image: a, runFlux: true}, {image: b, name: w, batch: true}]\n",
        "spec.containers[1].batch",
        "only applies to the container that runs Flux",
    );
    assert_rejects(
        "  containers: [{image: a, imagePullPolicy: Sometimes}]\n",
        "spec.containers[0].imagePullPolicy",
        "one of",
    );
    assert_rejects(
        "  containers: [{image: a, workingDir: rel}]\n",
        "spec.containers[0].workingDir",
        "absolute",
    );
    assert_rejects(
        "  containers: [{image: a, environment: {A: x}, secrets: {A: {name: s, key: k}}}]\n",
        "spec.containers[0].secrets[\"A\"]",
        "choose one",
    );
}

#[test]
fn volume_rules() {
    let v = |vol: &str| format!("  containers:\n    - image: a\n      volumes:\n        {vol}\n");
    assert_rejects(
        &v("Data: {path: /d, claimName: c}"),
        "spec.containers[0].volumes[\"Data\"]",
        "DNS-1123",
    );
    assert_rejects(
        &v("data: {claimName: c}"),
        "spec.containers[0].volumes[\"data\"].path",
        "required",
    );
    assert_rejects(
        &v("data: {path: /d}"),
        "spec.containers[0].volumes[\"data\"]",
        "exactly one source",
    );
    assert_rejects(
        &v("data: {path: /d, claimName: c, hostPath: /h}"),
        "spec.containers[0].volumes[\"data\"]",
        "several sources",
    );
    assert_rejects(
        &v("shm: {emptyDir: true, emptyDirMedium: disk}"),
        "spec.containers[0].volumes[\"shm\"].emptyDirMedium",
        "memory",
    );
    assert_rejects(
        &v("shm: {emptyDir: true, emptyDirSizeLimit: lots}"),
        "spec.containers[0].volumes[\"shm\"].emptyDirSizeLimit",
        "quantity",
    );
    assert_rejects(
        &v("shm: {emptyDir: true, path: /data}"),
        "spec.containers[0].volumes[\"shm\"].path",
        "/dev/shm",
    );
    assert_rejects(
        &v("d: {path: /d, claimName: c, items: {a: b}}"),
        "spec.containers[0].volumes[\"d\"].items",
        "configMapName",
    );
    assert_rejects(
        &v("d: {path: /d, configMapName: c, items: {a: ../b}}"),
        "spec.containers[0].volumes[\"d\"].items[\"a\"]",
        "relative",
    );
    assert_rejects(
        &v("flux-config: {path: /d, claimName: c}"),
        "spec.containers[0].volumes[\"flux-config\"]",
        "operator uses",
    );
    assert_eq!(
        errors(&v(
            "shm: {emptyDir: true, emptyDirMedium: memory, emptyDirSizeLimit: 64Gi}"
        )),
        Vec::<String>::new()
    );
    assert_rejects(
        "  containers:\n    - {image: a, runFlux: true, volumes: {d: {path: /a, claimName: x}}}\n    - {image: b, name: s, volumes: {d: {path: /a, claimName: y}}}\n",
        "spec.containers[1].volumes[\"d\"]",
        "declared differently",
    );
}

#[test]
fn service_rules() {
    let c = "  containers: [{image: a}]\n";
    assert_rejects(
        &format!("{c}  services: [{{image: nginx}}]\n"),
        "spec.services[0].name",
        "required",
    );
    assert_rejects(
        &format!("{c}  services: [{{image: nginx, name: n, commands: {{pre: x}}}}]\n"),
        "spec.services[0].commands.pre",
        "broker hooks",
    );
    assert_rejects(
        &format!("{c}  services: [{{image: nginx, name: n}}, {{image: x, name: n}}]\n"),
        "spec.services[1].name",
        "more than one",
    );
}

#[test]
fn flux_rules() {
    let c = "  containers: [{image: a}]\n";
    assert_rejects(
        &format!("  flux: {{connectTimeout: soon}}\n{c}"),
        "spec.flux.connectTimeout",
        "duration",
    );
    assert_eq!(
        errors(&format!("  flux: {{connectTimeout: ''}}\n{c}")),
        Vec::<String>::new()
    );
    assert_eq!(
        errors(&format!("  flux: {{connectTimeout: 500ms}}\n{c}")),
        Vec::<String>::new()
    );
    assert_rejects(
        &format!("  flux: {{scheduler: {{queuePolicy: lifo}}}}\n{c}"),
        "spec.flux.scheduler.queuePolicy",
        "one of",
    );
    assert_rejects(
        &format!("  flux: {{topology: ring}}\n{c}"),
        "spec.flux.topology",
        "kary",
    );
    assert_rejects(
        &format!("  flux: {{curveCert: 'not a cert'}}\n{c}"),
        "spec.flux.curveCert",
        "",
    );
    assert_rejects(
        &format!("  flux: {{brokerConfig: '[access'}}\n{c}"),
        "spec.flux.brokerConfig",
        "TOML",
    );
    assert_rejects(
        &format!("  flux: {{container: {{mountPath: relative}}}}\n{c}"),
        "spec.flux.container.mountPath",
        "absolute",
    );
}

#[test]
fn bursting_rules() {
    let c = "  containers: [{image: a}]\n";
    assert_rejects(
        &format!("  flux: {{bursting: {{clusters: [{{name: b, size: 3, maxSize: 2}}]}}}}\n{c}"),
        "spec.flux.bursting.clusters[0].size",
        "3 is above the burst's maxSize 2",
    );
    assert_rejects(
        &format!("  flux: {{bursting: {{clusters: [{{name: b, size: 0, maxSize: 0}}]}}}}\n{c}"),
        "spec.flux.bursting.clusters[0].maxSize",
        "at least 1",
    );
    assert_rejects(
        &format!("  flux: {{bursting: {{clusters: [{{name: b, size: -1, maxSize: 2}}]}}}}\n{c}"),
        "spec.flux.bursting.clusters[0].size",
        "at least 0",
    );
    assert!(
        errors(&format!(
            "  flux: {{bursting: {{clusters: [{{name: b, size: 0, maxSize: 3}}]}}}}\n{c}"
        ))
        .is_empty(),
        "a burst scaled to 0 is valid"
    );
    assert_rejects(
        &format!(
            "  flux: {{bursting: {{clusters: [{{name: b, size: 1, minSize: 4, maxSize: 3}}]}}}}\n{c}"
        ),
        "spec.flux.bursting.clusters[0].minSize",
        "4 must be between 0 and the burst's maxSize 3",
    );
    assert_rejects(
        &format!("  flux: {{drainTimeoutSeconds: -5}}\n{c}"),
        "spec.flux.drainTimeoutSeconds",
        "between 0 (no draining) and 86400",
    );
    assert_rejects(
        &format!("  flux: {{bursting: {{autoscale: {{}}}}}}\n{c}"),
        "spec.flux.bursting.autoscale",
        "needs bursting.clusters on a root instance",
    );
    assert!(
        errors(&format!(
            "  flux: {{bursting: {{autoscale: {{maxStep: 2}}, clusters: [{{name: b, size: 0, minSize: 1, maxSize: 3}}]}}}}\n{c}"
        ))
        .iter()
        .all(|e| !e.contains("autoscale") && !e.contains("minSize")),
        "autoscale with bursts is valid (a size below minSize is raised by the autoscaler)"
    );
    assert_rejects(
        &format!("  flux: {{bursting: {{clusters: [{{name: flux-sample, size: 2}}]}}}}\n{c}"),
        "spec.flux.bursting.clusters[0].name",
        "differ from the MiniCluster's own name",
    );
    assert_rejects(
        &format!(
            "  flux: {{bursting: {{clusters: [{{name: b, size: 2}}, {{name: b, size: 1}}]}}}}\n{c}"
        ),
        "spec.flux.bursting.clusters[1].name",
        "more than one burst",
    );
    assert_rejects(
        &format!("  flux: {{bursting: {{clusters: [{{name: B_x}}]}}}}\n{c}"),
        "spec.flux.bursting.clusters[0].name",
        "DNS-1123",
    );
    // The default name of the second entry is burst-1, which collides.
    assert_rejects(
        &format!("  flux: {{bursting: {{clusters: [{{name: burst-1}}, {{size: 2}}]}}}}\n{c}"),
        "spec.flux.bursting.clusters[1].name",
        "more than one burst",
    );
    assert_rejects(
        &format!("  flux: {{bursting: {{hostlist: 'x-[0-1]', clusters: [{{name: b}}]}}}}\n{c}"),
        "spec.flux.bursting.hostlist",
        "cannot be combined",
    );
    assert_rejects(
        &format!("  flux: {{bursting: {{hostlist: 'other-[0-3]'}}}}\n{c}"),
        "spec.flux.bursting.hostlist",
        "flux-sample-0",
    );
    assert_rejects(
        &format!("  flux: {{bursting: {{hostlist: 'flux-sample-[0-'}}}}\n{c}"),
        "spec.flux.bursting.hostlist",
        "",
    );
    assert_rejects(
        &format!("  flux: {{topology: 'kary:2', bursting: {{clusters: [{{name: b}}]}}}}\n{c}"),
        "spec.flux.topology",
        "flat",
    );
    // A hand-applied burst must list itself and may not name itself as the lead.
    assert_rejects(
        &format!(
            "  flux: {{leadBroker: {{name: lead, address: 10.0.0.1, size: 2}}, bursting: {{clusters: [{{name: other}}]}}}}\n{c}"
        ),
        "spec.flux.bursting.clusters",
        "must list itself",
    );
    assert_rejects(
        &format!(
            "  size: 4\n  flux: {{leadBroker: {{name: lead, address: 10.0.0.1, size: 2}}, bursting: {{clusters: [{{name: flux-sample, size: 2}}]}}}}\n{c}"
        ),
        "spec.flux.bursting.clusters[0].size",
        "declares 2 hosts",
    );
    assert_rejects(
        &format!(
            "  flux: {{leadBroker: {{name: lead, address: '', size: 2, port: 0}}, bursting: {{clusters: [{{name: flux-sample}}]}}}}\n{c}"
        ),
        "spec.flux.leadBroker.address",
        "required",
    );
    assert_rejects(
        &format!(
            "  flux:\n    leadBroker: {{name: lead, address: a, size: 1}}\n    bursting: {{leadBroker: {{name: lead, address: a, size: 1}}, clusters: [{{name: flux-sample}}]}}\n{c}"
        ),
        "spec.flux.leadBroker",
        "not both",
    );
    // Both documented places for leadBroker are accepted.
    for yaml in [
        "  flux: {leadBroker: {name: lead, address: 10.0.0.1, size: 2}, bursting: {clusters: [{name: flux-sample}]}}\n",
        "  flux: {bursting: {leadBroker: {name: lead, address: 10.0.0.1, size: 2}, clusters: [{name: flux-sample}]}}\n",
    ] {
        assert_eq!(
            errors(&format!("{yaml}{c}")),
            Vec::<String>::new(),
            "{yaml}"
        );
    }
}

#[test]
fn lead_endpoint_settings_are_for_a_root_with_bursts() {
    let c = "  containers: [{image: a}]\n";
    assert!(
        errors(&format!(
            "  flux: {{bursting: {{leadAddress: lead.example.org, leadNodePort: 30093, clusters: [{{name: b}}]}}}}\n{c}"
        ))
        .is_empty()
    );
    assert!(
        errors(&format!(
            "  flux: {{bursting: {{leadAddress: '2001:db8::7', clusters: [{{name: b}}]}}}}\n{c}"
        ))
        .is_empty()
    );
    assert_rejects(
        &format!(
            "  flux: {{bursting: {{leadAddress: 'not an address', clusters: [{{name: b}}]}}}}\n{c}"
        ),
        "spec.flux.bursting.leadAddress",
        "IP address or a DNS name",
    );
    assert_rejects(
        &format!("  flux: {{bursting: {{leadAddress: 10.0.0.1}}}}\n{c}"),
        "spec.flux.bursting.leadAddress",
        "only a root MiniCluster with bursting.clusters",
    );
    assert_rejects(
        &format!("  flux: {{bursting: {{leadNodePort: 70000, clusters: [{{name: b}}]}}}}\n{c}"),
        "spec.flux.bursting.leadNodePort",
        "port number",
    );
    assert_rejects(
        &format!(
            "  flux: {{leadBroker: {{name: lead, address: 10.0.0.1, size: 2}}, bursting: {{leadNodePort: 30093, clusters: [{{name: flux-sample}}]}}}}\n{c}"
        ),
        "spec.flux.bursting.leadNodePort",
        "only a root MiniCluster",
    );
}

#[test]
fn pod_and_metadata_rules() {
    let c = "  containers: [{image: a}]\n";
    assert_rejects(
        &format!("  pod: {{restartPolicy: Always}}\n{c}"),
        "spec.pod.restartPolicy",
        "OnFailure or Never",
    );
    assert_rejects(
        &format!("  pod: {{dnsPolicy: Sometimes}}\n{c}"),
        "spec.pod.dnsPolicy",
        "one of",
    );
    assert_rejects(
        &format!("  pod: {{resources: {{cpu: '4'}}}}\n{c}"),
        "spec.pod.resources",
        "runtimeClassName",
    );
    assert_rejects(
        &format!("  pod: {{nodeAffinity: {{zone: []}}}}\n{c}"),
        "spec.pod.nodeAffinity[\"zone\"]",
        "at least one",
    );
    assert_rejects(
        &format!("  archive: {{path: state.tar}}\n{c}"),
        "spec.archive.path",
        "absolute",
    );
    let long = format!(
        "apiVersion: flux-framework.org/v1alpha2\nkind: MiniCluster\nmetadata: {{name: {}}}\nspec:\n  size: 10\n{c}",
        "a".repeat(62)
    );
    let errs = validate(&mc(&long)).expect_err("too long");
    assert!(
        errs.0
            .iter()
            .any(|e| e.field == "metadata.name" && e.rule.contains("63 characters")),
        "{errs}"
    );
    let unnamed = mc(&format!(
        "apiVersion: flux-framework.org/v1alpha2\nkind: MiniCluster\nmetadata: {{}}\nspec:\n{c}"
    ));
    assert!(
        validate(&unnamed)
            .expect_err("no name")
            .0
            .iter()
            .any(|e| e.field == "metadata.name")
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let errs = errors(
        "  size: 0\n  maxSize: -1\n  flux: {connectTimeout: x, scheduler: {queuePolicy: y}}\n  containers: [{image: '', ports: [0]}]\n",
    );
    assert!(errs.len() >= 5, "{errs:#?}");
}

/// An unset `runFlux` means true: with the others set to false, that container runs
/// Flux and is named after the MiniCluster.
#[test]
fn unset_run_flux_is_the_runner_when_the_others_opt_out() {
    let mc = mc(&format!(
        "{BASE}spec:\n  containers: [{{image: side, name: side, runFlux: false}}, {{image: app}}]\n"
    ));
    assert_eq!(validate(&mc).map_err(|e| e.to_string()), Ok(()));
    assert_eq!(mc.spec.flux_runner_index(), Some(1));
    let plan = flux_shared::plan::Plan::new(&mc).expect("plan");
    let cert = flux_shared::curve::CurveCert::generate("x").to_zcert();
    let objects = flux_shared::render::render(&plan, &flux_shared::plan::Role::Root, &cert)
        .expect("root objects");
    let job = objects
        .iter()
        .find_map(|o| match o {
            flux_shared::render::Object::Job(j) => Some(j.clone()),
            _ => None,
        })
        .expect("a Job");
    let pod = job.spec.and_then(|s| s.template.spec).expect("pod spec");
    let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    let images: Vec<Option<&str>> = pod.containers.iter().map(|c| c.image.as_deref()).collect();
    let runner = names
        .iter()
        .position(|n| *n == "flux-sample")
        .unwrap_or_else(|| panic!("the runner is named after the MiniCluster: {names:?}"));
    assert_eq!(images[runner], Some("app"), "{names:?} {images:?}");
}

/// The CRD's CEL rules, evaluated client-side, reject the same cross-field mistakes.
#[test]
fn cel_rules_agree_with_the_validator() {
    let cases = [
        (
            "  size: 4\n  maxSize: 2\n  containers: [{image: a}]\n",
            false,
        ),
        (
            "  size: 2\n  minSize: 3\n  containers: [{image: a}]\n",
            false,
        ),
        (
            "  containers: [{image: a, name: x}, {image: b, name: y}]\n",
            false,
        ),
        (
            "  containers: [{image: a, runFlux: true}, {image: b}]\n",
            false,
        ),
        (
            "  flux:\n    leadBroker: {name: l, address: a, size: 1}\n    bursting: {leadBroker: {name: l, address: a, size: 1}}\n  containers: [{image: a}]\n",
            false,
        ),
        (
            "  size: 2\n  maxSize: 4\n  minSize: 1\n  containers: [{image: a}]\n",
            true,
        ),
        (
            "  containers: [{image: a, runFlux: true}, {image: b, name: side}]\n",
            true,
        ),
        // runFlux defaults to true: the docs' advice, runFlux: false on the others.
        (
            "  containers: [{image: a}, {image: b, name: side, runFlux: false}]\n",
            true,
        ),
        (
            "  containers: [{image: a, name: x}, {image: b, name: y, runFlux: false}, {image: c, name: z, runFlux: false}]\n",
            true,
        ),
        ("  containers: [{image: a}, {image: b}]\n", false),
        (
            "  containers: [{image: a, runFlux: false, name: x}, {image: b, runFlux: false, name: y}]\n",
            false,
        ),
        (
            "  containers: [{image: a}, {image: b, runFlux: false}]\n",
            false,
        ),
    ];
    for (burst, valid) in [
        ("{name: b, size: 3, maxSize: 2}", false),
        ("{name: b, size: 0, maxSize: 2}", true),
        ("{name: b, maxSize: 1}", true),
        (
            "{name: b, candidates: [{cluster: x}, {matchLabels: {tier: spot}}]}",
            true,
        ),
        ("{name: b, cluster: x, candidates: [{cluster: y}]}", false),
    ] {
        let spec = format!(
            "  flux: {{bursting: {{clusters: [{burst}]}}}}\n  containers: [{{image: a}}]\n"
        );
        let mc = mc(&format!("{BASE}spec:\n{spec}"));
        let value: serde_json::Value = serde_yaml_ng::from_str(burst).expect("yaml");
        let cel = flux_shared::api::BurstCluster::validate_cel(&value, None);
        assert_eq!(cel.is_ok(), valid, "CEL on {burst}: {cel:?}");
        assert_eq!(validate(&mc).is_ok(), valid, "validator on {burst}");
    }
    for (candidate, valid) in [
        ("{cluster: x}", true),
        ("{matchLabels: {tier: spot}}", true),
        ("{cluster: x, matchLabels: {tier: spot}}", false),
        ("{}", false),
    ] {
        let value: serde_json::Value = serde_yaml_ng::from_str(candidate).expect("yaml");
        let cel = flux_shared::api::BurstCandidate::validate_cel(&value, None);
        assert_eq!(cel.is_ok(), valid, "CEL on {candidate}: {cel:?}");
        let spec = format!(
            "  flux: {{bursting: {{clusters: [{{name: b, candidates: [{candidate}]}}]}}}}\n  containers: [{{image: a}}]\n"
        );
        assert_eq!(
            validate(&mc(&format!("{BASE}spec:\n{spec}"))).is_ok(),
            valid,
            "validator on {candidate}"
        );
    }
    for (spec, valid) in cases {
        let mc = mc(&format!("{BASE}spec:\n{spec}"));
        // The API server applies the schema default for size before CEL runs.
        let value = serde_json::to_value(&mc.spec).expect("json");
        let cel = MiniClusterSpec::validate_cel(&value, None);
        assert_eq!(cel.is_ok(), valid, "CEL on\n{spec}\n{cel:?}");
        assert_eq!(validate(&mc).is_ok(), valid, "validator on\n{spec}");
    }
}

/// A size of ten million is refused by the host-count bound alone: the checks that build
/// host names (and the planner) never run. The name below is too long for its pod host
/// names, which a later check would report; that it does not shows the bound came first.
#[test]
fn ten_million_hosts_are_refused_before_any_host_is_built() {
    let long = "a".repeat(60);
    let root = mc(&format!(
        "apiVersion: flux-framework.org/v1alpha2\nkind: MiniCluster\nmetadata: {{name: {long}}}\nspec:\n  size: 1\n  maxSize: 10000000\n  containers: [{{image: busybox}}]\n"
    ));
    let burst = mc(&format!(
        "{BASE}spec:\n  containers: [{{image: busybox}}]\n  flux:\n    bursting:\n      clusters: [{{name: {long}, size: 10000000}}]\n"
    ));
    for (mc, field) in [
        (&root, "spec.maxSize"),
        (&burst, "spec.flux.bursting.clusters[0].size"),
    ] {
        let want = vec![format!(
            "{field}: 10000000 is above the limit of 16384 brokers per MiniCluster (docs/limits.md)"
        )];
        let got: Vec<String> = validate(mc)
            .expect_err("refused")
            .0
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(got, want);
        let planned: Vec<String> = flux_shared::plan::Plan::new(mc)
            .expect_err("the planner refuses too")
            .0
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(planned, want);
    }
}

#[test]
fn the_limit_itself_is_valid() {
    assert_eq!(
        errors("  size: 1\n  maxSize: 16384\n  containers: [{image: busybox}]\n"),
        Vec::<String>::new()
    );
}

/// A tenant's pods and Job cannot carry the keys that say whose object it is: a pod
/// annotated with another burst's assignment would pass for the spoke's own.
#[test]
fn the_operators_label_and_annotation_prefix_is_reserved() {
    let c = "  containers: [{image: busybox}]\n";
    for (spec, field) in [
        (
            "  pod:\n    annotations: {flux-framework.org/assignment: hpc/other/burst}\n",
            "spec.pod.annotations[\"flux-framework.org/assignment\"]",
        ),
        (
            "  pod:\n    labels: {flux-framework.org/spoke: lab}\n",
            "spec.pod.labels[\"flux-framework.org/spoke\"]",
        ),
        (
            "  jobLabels: {flux-framework.org/federation: x}\n",
            "spec.jobLabels[\"flux-framework.org/federation\"]",
        ),
    ] {
        assert_rejects(&format!("{spec}{c}"), field, "is reserved");
    }
    assert_eq!(
        errors(&format!(
            "  jobLabels: {{kueue.x-k8s.io/queue-name: q}}\n  pod:\n    annotations: {{example.com/x: y}}\n{c}"
        )),
        Vec::<String>::new(),
        "other prefixes are the author's"
    );
}

#[test]
fn candidate_rules() {
    let c = "  containers: [{image: a}]\n";
    let with = |candidates: &str| {
        format!("  flux: {{bursting: {{clusters: [{{name: b, candidates: {candidates}}}]}}}}\n{c}")
    };
    let field = "spec.flux.bursting.clusters[0].candidates";
    assert!(
        errors(&with(
            "[{cluster: kind}, {matchLabels: {region: eu, tier: spot}}]"
        ))
        .is_empty()
    );
    assert_rejects(
        &with("[{cluster: Kind_1}]"),
        &format!("{field}[0].cluster"),
        "must be a DNS-1123 label",
    );
    assert_rejects(
        &with("[{matchLabels: {}}]"),
        &format!("{field}[0].matchLabels"),
        "between 1 and 16 labels",
    );
    assert_rejects(
        &with("[{matchLabels: {tier: 'a b'}}]"),
        &format!("{field}[0].matchLabels[\"tier\"]"),
        "valid label value",
    );
    assert_rejects(
        &with("[{matchLabels: {'-x': a}}]"),
        &format!("{field}[0].matchLabels[\"-x\"]"),
        "valid label key",
    );
    assert_rejects(
        &with("[{cluster: a}, {cluster: a}]"),
        &format!("{field}[1]"),
        "is named twice",
    );
    let many: Vec<String> = (0..17).map(|i| format!("{{cluster: c{i}}}")).collect();
    assert_rejects(
        &with(&format!("[{}]", many.join(", "))),
        field,
        "at most 16 candidates",
    );
    assert_rejects(
        &format!(
            "  flux: {{bursting: {{clusters: [{{name: b, cluster: a, candidates: [{{cluster: c}}]}}]}}}}\n{c}"
        ),
        field,
        "either one cluster or candidates",
    );
    assert_rejects(
        &format!(
            "  flux:\n    leadBroker: {{name: l, address: a, size: 1}}\n    bursting: {{clusters: [{{name: b, candidates: [{{cluster: c}}]}}]}}\n{c}"
        ),
        field,
        "only a root MiniCluster's bursts are placed by the hub",
    );
}
