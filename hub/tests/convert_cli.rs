//! `flux-hub convert` as users run it: exit statuses (0 lossless, 3 losses, 1 invalid),
//! the stderr format, nothing on stdout for invalid input, document order and
//! pass-through, JSON output, and the round trip into `flux-hub render`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize;

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

/// A scratch file, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str, text: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("flux-convert-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write scratch file");
        Scratch(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn convert(file: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["convert", file];
    args.extend_from_slice(extra);
    let out = hub(&args);
    (
        out.status.code().expect("exit status"),
        String::from_utf8(out.stdout).expect("utf-8 stdout"),
        String::from_utf8(out.stderr).expect("utf-8 stderr"),
    )
}

fn docs(yaml: &str) -> Vec<serde_json::Value> {
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|d| serde_json::Value::deserialize(d).expect("yaml document"))
        .filter(|v| !v.is_null())
        .collect()
}

/// `flux-hub render` accepts the converted text.
fn renders(name: &str, yaml: &str) {
    let file = Scratch::new(name, yaml);
    let out = hub(&["render", file.path()]);
    assert!(
        out.status.success(),
        "render of the converted {name} failed: {}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.stdout.is_empty());
}

const LOSSLESS: &str = r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata:
  name: lammps
spec:
  size: 2
  containers:
    - image: ghcr.io/rse-ops/lammps:flux-sched-focal
      command: lmp -in in.reaxc.hns
      fluxOptionFlags: "-ompi=openmpi@5"
      fluxLogLevel: 7
      preCommand: source /etc/profile
"#;

const LOSSY: &str = r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata:
  name: restful
spec:
  size: 2
  users:
    - name: peenut
      password: butter
  fluxRestful:
    secretKey: notsosecrethoo
  pod:
    resources:
      cpu: 4
  volumes:
    data:
      path: /tmp/data
      storageClass: csi-gcs
      capacity: 25Gi
  containers:
    - image: ghcr.io/flux-framework/flux-restful-api:latest
      commands:
        runFluxAsRoot: false
      volumes:
        data:
          path: /data
"#;

#[test]
fn lossless_conversion_exits_0_and_renders() {
    let file = Scratch::new("lossless.yaml", LOSSLESS);
    let (code, stdout, stderr) = convert(file.path(), &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    let out = docs(&stdout);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["apiVersion"], "flux-framework.org/v1alpha2");
    assert_eq!(out[0]["spec"]["flux"]["optionFlags"], "-ompi=openmpi@5");
    assert_eq!(out[0]["spec"]["flux"]["logLevel"], 7);
    assert_eq!(out[0]["spec"]["flux"]["container"]["disable"], true);
    assert_eq!(
        out[0]["spec"]["containers"][0]["commands"]["pre"],
        "source /etc/profile"
    );
    assert!(stdout.starts_with("---\n"), "{stdout}");
    assert!(
        stdout.contains("# note: spec.flux.container.disable: set to true"),
        "{stdout}"
    );
    renders("lossless-v1alpha2.yaml", &stdout);
}

#[test]
fn losses_exit_3_with_one_line_each_on_stderr_and_still_render() {
    let file = Scratch::new("lossy.yaml", LOSSY);
    let (code, stdout, stderr) = convert(file.path(), &[]);
    assert_eq!(code, 3, "{stderr}");
    let prefix = format!("{}: ", file.path());
    let lines: Vec<&str> = stderr.lines().collect();
    let fields: Vec<&str> = lines
        .iter()
        .map(|l| {
            let rest = l
                .strip_prefix(&prefix)
                .unwrap_or_else(|| panic!("{l:?} does not start with {prefix:?}"));
            let (field, advice) = rest
                .split_once(": no v1alpha2 equivalent: ")
                .unwrap_or_else(|| panic!("{l:?} is not FILE: field: no v1alpha2 equivalent: ..."));
            assert!(field.starts_with("spec."), "{l}");
            assert!(advice.len() > 20, "advice too short: {l}");
            field
        })
        .collect();
    assert_eq!(
        fields,
        [
            r#"spec.volumes["data"]"#,
            "spec.containers[0].commands.runFluxAsRoot",
            "spec.pod.resources",
            "spec.users",
            "spec.fluxRestful",
        ],
        "{stderr}"
    );
    assert!(stderr.contains("claimName"), "{stderr}");
    assert!(
        stderr.contains("create a PersistentVolumeClaim"),
        "{stderr}"
    );
    for secret in ["butter", "notsosecrethoo"] {
        assert!(!stderr.contains(secret) && !stdout.contains(secret));
    }
    // The losses are also recorded next to the converted document.
    assert!(stdout.contains("# lost: spec.users: no v1alpha2 equivalent:"));
    let out = docs(&stdout);
    assert_eq!(
        out[0]["spec"]["containers"][0]["volumes"]["data"]["claimName"],
        "data"
    );
    assert!(out[0]["spec"].get("pod").is_none());
    renders("lossy-v1alpha2.yaml", &stdout);
}

#[test]
fn invalid_input_exits_1_with_nothing_on_stdout() {
    let unknown = Scratch::new(
        "unknown.yaml",
        &LOSSLESS.replace(
            "      fluxLogLevel: 7\n",
            "      fluxLogLevel: 7\n      gpus: 2\n",
        ),
    );
    let (code, stdout, stderr) = convert(unknown.path(), &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "{}: spec.containers[0].gpus: unknown v1alpha1 field (not part of the v1alpha1 MiniCluster API)",
            unknown.path()
        )
    );

    // Valid v1alpha1, but not valid v1alpha2: the v1alpha2 path is named.
    let port = Scratch::new(
        "port.yaml",
        &LOSSLESS.replace(
            "      fluxLogLevel: 7\n",
            "      fluxLogLevel: 7\n      ports: [8050]\n",
        ),
    );
    let (code, stdout, stderr) = convert(port.path(), &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.starts_with(&format!("{}: spec.containers[0].ports[0]: ", port.path())),
        "{stderr}"
    );

    // One bad document fails the whole file, even after a good one.
    let mixed = Scratch::new(
        "mixed-bad.yaml",
        &format!("{LOSSLESS}---\n{}", LOSSLESS.replace("image: ", "imag: ")),
    );
    let (code, stdout, stderr) = convert(mixed.path(), &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains("spec.containers[0].imag: unknown v1alpha1 field"));
    assert!(stderr.contains("spec.containers[0].image: is required"));

    let broken = Scratch::new("broken.yaml", "apiVersion: [unclosed\n");
    let (code, stdout, stderr) = convert(broken.path(), &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.starts_with(&format!("{}: document 1: ", broken.path())));

    let empty = Scratch::new("empty.yaml", "# nothing here\n");
    let (code, stdout, _) = convert(empty.path(), &[]);
    assert_eq!(code, 1);
    assert!(stdout.is_empty());

    let (code, stdout, stderr) = convert("no/such/file.yaml", &[]);
    assert_eq!(code, 1);
    assert!(stdout.is_empty());
    assert!(
        stderr.starts_with("no/such/file.yaml: cannot read"),
        "{stderr}"
    );
}

#[test]
fn documents_keep_their_order_and_others_pass_through_verbatim() {
    let config_map = "# keep this comment\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg  # and this one\ndata:\n  key: value\n";
    let v1alpha2 = std::fs::read_to_string(root().join("examples/hello-world.yaml"))
        .expect("hello-world example");
    let namespace = "apiVersion: v1\nkind: Namespace\nmetadata: {name: flux-operator}\n";
    let text = format!("{config_map}---\n{LOSSLESS}---\n{v1alpha2}---\n{namespace}");
    let file = Scratch::new("mixed.yaml", &text);
    let (code, stdout, stderr) = convert(file.path(), &[]);
    assert_eq!(code, 0, "{stderr}");
    // Pass-through documents are copied as they were, comments included.
    assert!(
        stdout.starts_with(&format!("---\n{config_map}---\n")),
        "{stdout}"
    );
    assert!(stdout.contains(&v1alpha2), "{stdout}");
    assert!(stdout.ends_with(&format!("---\n{namespace}")), "{stdout}");
    let input = docs(&text);
    let out = docs(&stdout);
    assert_eq!(out.len(), 4);
    assert_eq!(out[0], input[0]);
    assert_eq!(out[1]["metadata"]["name"], "lammps");
    assert_eq!(out[1]["apiVersion"], "flux-framework.org/v1alpha2");
    assert_eq!(out[2], input[2]);
    assert_eq!(out[3], input[3]);
}

#[test]
fn v1alpha2_examples_pass_through_unchanged() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .expect("examples")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for file in files {
        let (code, stdout, stderr) = convert(file.to_str().expect("path"), &[]);
        assert_eq!(code, 0, "{}: {stderr}", file.display());
        assert!(stderr.is_empty());
        let text = std::fs::read_to_string(&file).expect("read");
        assert_eq!(docs(&stdout), docs(&text), "{}", file.display());
        assert!(stdout.contains(&text), "{}: not verbatim", file.display());
    }
}

#[test]
fn json_output_is_one_object_or_a_list() {
    let file = Scratch::new("json.yaml", LOSSLESS);
    let (code, stdout, stderr) = convert(file.path(), &["-o", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(v["apiVersion"], "flux-framework.org/v1alpha2");
    assert_eq!(v["kind"], "MiniCluster");
    renders("from-json.yaml", &stdout);

    let two = Scratch::new("json-two.yaml", &format!("{LOSSLESS}---\n{LOSSY}"));
    let (code, stdout, stderr) = convert(two.path(), &["--output", "json"]);
    assert_eq!(code, 3, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(v["kind"], "List");
    assert_eq!(v["items"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["items"][1]["metadata"]["name"], "restful");
}

#[test]
fn the_v1alpha1_examples_convert_and_render() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("examples/v1alpha1"))
        .expect("examples/v1alpha1")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    let mut codes = Vec::new();
    for file in &files {
        let (code, stdout, stderr) = convert(file.to_str().expect("path"), &[]);
        assert!(
            code == 0 || code == 3,
            "{}: {code}: {stderr}",
            file.display()
        );
        assert_eq!(code == 0, stderr.is_empty(), "{}: {stderr}", file.display());
        let name = file.file_name().and_then(|n| n.to_str()).expect("name");
        renders(&format!("converted-{name}"), &stdout);
        // Converting the converted output again changes nothing.
        let again = Scratch::new(&format!("again-{name}"), &stdout);
        let (code2, stdout2, _) = convert(again.path(), &[]);
        assert_eq!(code2, 0);
        assert_eq!(docs(&stdout2), docs(&stdout));
        codes.push(code);
    }
    assert!(codes.contains(&0) && codes.contains(&3), "{codes:?}");
}
