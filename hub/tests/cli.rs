//! The `flux-hub` binary as users run it: `crd`, `render` on every example, errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn hub(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flux-hub"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run flux-hub")
}

fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .expect("examples dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 9,
        "expected the documented examples, found {files:?}"
    );
    files
}

fn docs(yaml: &str) -> Vec<serde_yaml_ng::Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|d| serde_yaml_ng::Value::deserialize(d).expect("yaml document"))
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn checked_in_crd_matches_the_generated_one() {
    let out = hub(&["crd"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).expect("utf8");
    let file = root().join("crds/miniclusters.flux-framework.org.yaml");
    let checked_in = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        generated == checked_in,
        "{} is out of date: run `cargo run -p flux-hub -- crd > {}`",
        file.display(),
        file.display()
    );
    let crd = &docs(&generated)[0];
    let version = &crd["spec"]["versions"][0];
    assert_eq!(
        version["subresources"]["scale"]["specReplicasPath"].as_str(),
        Some(".spec.size")
    );
    assert_eq!(
        version["subresources"]["scale"]["statusReplicasPath"].as_str(),
        Some(".status.size")
    );
    assert_eq!(
        version["subresources"]["scale"]["labelSelectorPath"].as_str(),
        Some(".status.selector")
    );
    assert!(version["subresources"]["status"].is_mapping());
    assert!(generated.contains("x-kubernetes-validations"));
}

#[test]
fn every_example_renders_for_every_cluster() {
    for file in examples() {
        let f = file.to_str().expect("path");
        let out = hub(&["render", f]);
        assert!(
            out.status.success(),
            "{f}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).expect("utf8");
        let objects = docs(&text);
        let jobs = objects
            .iter()
            .filter(|o| o["kind"].as_str() == Some("Job"))
            .count();
        assert!(jobs >= 1, "{f}: no Job rendered");
        for o in &objects {
            assert!(
                o["apiVersion"].is_string() && o["kind"].is_string(),
                "{f}: {o:?}"
            );
        }
    }
}

#[test]
fn bursting_example_renders_root_and_each_burst_cluster() {
    let out = hub(&["render", "examples/bursting.yaml", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let clusters: Vec<&str> = v["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .map(|c| c["cluster"].as_str().expect("cluster"))
        .collect();
    // Each burst leaves `relay` unset: printed for each path the hub may choose.
    assert_eq!(
        clusters,
        [
            "root",
            "gke-us-central1",
            "gke-us-central1",
            "kind-spoke",
            "kind-spoke"
        ]
    );
    let paths: Vec<(&str, bool)> = v["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .skip(1)
        .map(|c| {
            (
                c["path"].as_str().expect("a burst's path"),
                c["pathChosenByHub"] == true,
            )
        })
        .collect();
    assert_eq!(
        paths,
        [
            ("Direct", true),
            ("Relay", true),
            ("Direct", true),
            ("Relay", true)
        ]
    );
    assert!(v["clusters"][0].get("path").is_none(), "the root has none");
    let names = |i: usize| -> Vec<String> {
        v["clusters"][i]["objects"]
            .as_array()
            .expect("objects")
            .iter()
            .map(|o| {
                let kind = o["kind"].as_str().unwrap_or("");
                let path = &o["metadata"]["annotations"]["flux-framework.org/lead-path"];
                match path.as_str() {
                    Some(path) => format!(
                        "{kind}/{} ({path})",
                        o["metadata"]["name"].as_str().unwrap_or("")
                    ),
                    None => format!("{kind}/{}", o["metadata"]["name"].as_str().unwrap_or("")),
                }
            })
            .collect()
    };
    assert_eq!(
        names(1),
        [
            "ConfigMap/burst-gke-flux-config",
            "Secret/burst-gke-curve",
            "Service/burst-gke",
            "Job/burst-gke (direct)"
        ]
    );
    assert_eq!(
        names(2),
        [
            "ConfigMap/burst-gke-flux-config",
            "Secret/burst-gke-curve",
            "Service/burst-gke",
            "Service/burst-gke-relay",
            "Job/burst-gke (relay)"
        ]
    );
    let broker_toml = |i: usize| {
        v["clusters"][i]["objects"][0]["data"]["broker.toml"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert!(
        broker_toml(1).contains("tcp://192.0.2.1:"),
        "{}",
        broker_toml(1)
    );
    assert!(
        broker_toml(2).contains("tcp://burst-gke-relay:8050"),
        "{}",
        broker_toml(2)
    );
    let root_kinds: Vec<String> = v["clusters"][0]["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        root_kinds,
        [
            "ConfigMap/bursty-flux-config",
            "Secret/bursty-curve",
            "Service/bursty",
            "Service/bursty-lead",
            "Job/bursty"
        ]
    );
    let gke_job = v["clusters"][1]["objects"]
        .as_array()
        .expect("objects")
        .iter()
        .find(|o| o["kind"] == "Job")
        .expect("burst job");
    assert_eq!(gke_job["metadata"]["name"], "burst-gke");
    assert_eq!(gke_job["spec"]["parallelism"], 4);

    let only = hub(&[
        "render",
        "examples/bursting.yaml",
        "--cluster",
        "kind-spoke",
        "-o",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&only.stdout).expect("json");
    assert_eq!(v["clusters"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["clusters"][0]["cluster"], "kind-spoke");
    assert_eq!(v["clusters"][1]["cluster"], "kind-spoke");

    // The YAML says which path each object is for; a burst whose spec sets `relay` is
    // printed once.
    let yaml = hub(&["render", "examples/bursting.yaml"]);
    let text = String::from_utf8(yaml.stdout).expect("utf8");
    let comments: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("# cluster: "))
        .collect();
    for path in ["Direct", "Relay"] {
        assert!(
            comments
                .iter()
                .any(|c| c.starts_with("# cluster: kind-spoke ")
                    && c.ends_with(&format!("path {path} (the hub's choice at run time)"))),
            "{comments:#?}"
        );
    }
    let set = hub(&["render", "examples/bursting-candidates.yaml", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&set.stdout).expect("json");
    let bursts: Vec<(&str, &str)> = v["clusters"]
        .as_array()
        .expect("clusters")
        .iter()
        .skip(1)
        .map(|c| {
            (
                c["cluster"].as_str().unwrap_or(""),
                c["path"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        bursts,
        [
            ("kind-desk", "Relay"),
            ("labels tier=spot", "Relay"),
            ("gke-us-central1", "Relay")
        ],
        "relay: true, once per candidate"
    );
    assert!(v["clusters"][1].get("pathChosenByHub").is_none());

    let none = hub(&["render", "examples/bursting.yaml", "--cluster", "nowhere"]);
    assert!(!none.status.success());
    assert!(none.stdout.is_empty());
}

#[test]
fn invalid_input_lists_every_problem_and_prints_nothing() {
    let dir = std::env::temp_dir().join(format!("flux-hub-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let file = dir.join("bad.yaml");
    std::fs::write(
        &file,
        r#"apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {name: bad}
spec:
  size: 4
  maxSize: 2
  flux: {connectTimeout: soon}
  containers:
    - image: rockylinux:9
      command: hostname
      commands: {script: "echo hi"}
"#,
    )
    .expect("write");
    let f = file.to_str().expect("path");
    let out = hub(&["render", f]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "nothing on stdout");
    let stderr = String::from_utf8(out.stderr).expect("utf8");
    for expected in [
        format!("{f}: spec.maxSize: must be greater than or equal to spec.size (2 < 4)"),
        format!("{f}: spec.flux.connectTimeout: "),
        format!("{f}: spec.containers[0].commands.script: script and command are exclusive"),
    ] {
        assert!(
            stderr.contains(&expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }

    std::fs::write(&file, "apiVersion: [unclosed\n").expect("write");
    let out = hub(&["render", f]);
    assert!(
        !out.status.success(),
        "a YAML syntax error fails (and does not hang)"
    );
    assert!(out.stdout.is_empty());

    std::fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
    )
    .expect("write");
    let out = hub(&["render", f]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected kind MiniCluster"));

    std::fs::write(&file, "apiVersion: flux-framework.org/v1alpha2\nkind: MiniCluster\nmetadata: {name: x}\nspec: {size: many, containers: []}\n").expect("write");
    let out = hub(&["render", f]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("{f}: spec.size: ")),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_refuses_an_incomplete_federation_setup_before_touching_a_cluster() {
    // No KUBECONFIG is needed: flags are checked first. Certificate files that are all
    // missing are awaited (a single-cluster hub); some there but not loading is an error.
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-grpc-files");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let broken = dir.join("ca.crt");
    std::fs::write(&broken, "not a certificate").expect("write");
    let broken = broken.display().to_string();
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--grpc-addr", "127.0.0.1:0"],
            "--grpc-addr needs --ca, --cert and --key",
        ),
        (
            &["run", "--ca", "ca.crt"],
            "configure the gRPC server: set --grpc-addr too",
        ),
        (
            &[
                "run",
                "--grpc-addr",
                "127.0.0.1:0",
                "--ca",
                &broken,
                "--cert",
                "/nonexistent/hub.crt",
                "--key",
                "/nonexistent/hub.key",
            ],
            "loading the gRPC server's TLS files",
        ),
        (
            &["run", "--lead-broker-address", "not an address"],
            "--lead-broker-address \"not an address\": must be an IP address or a DNS name",
        ),
    ];
    for (args, expected) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_flux-hub"))
            .args(*args)
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .output()
            .expect("run flux-hub");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn completion_scripts_cover_every_command_and_flag() {
    for shell in ["bash", "zsh", "fish"] {
        let out = hub(&["completion", shell]);
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        for word in [
            "render",
            "status",
            "join",
            "unjoin",
            "hub-context",
            "take-over",
        ] {
            assert!(script.contains(word), "{shell}: {word} missing");
        }
    }
    let out = hub(&["completion", "tcsh"]);
    assert!(!out.status.success(), "an unknown shell is refused");
}

#[test]
fn join_takes_a_fence_delay_the_spoke_accepts() {
    for bad in ["9", "3601", "two"] {
        let out = hub(&["join", "gke", "--fence-after-seconds", bad]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("--fence-after-seconds"), "{stderr}");
    }
    let help = String::from_utf8_lossy(&hub(&["join", "--help"]).stdout).to_string();
    assert!(help.contains("--fence-after-seconds"), "{help}");
}
