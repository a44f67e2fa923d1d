//! Golden files: every example, rendered for every cluster with a fixed certificate and
//! lead endpoint. Regenerate with `UPDATE_GOLDEN=1 cargo test -p flux-shared --test render_golden`.
//!
//! Plain files compared byte for byte rather than `insta` snapshots: the goldens stay the
//! YAML and scripts a reader opens, and insta's header and whitespace normalising would
//! let a lost final newline pass.

use std::path::{Path, PathBuf};

use flux_shared::api::MiniCluster;
use flux_shared::curve::CurveCert;
use flux_shared::plan::{Endpoint, Plan, Role};
use flux_shared::render::render;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// examples/*.yaml and the quickstart's MiniCluster, sorted.
fn examples() -> Vec<PathBuf> {
    let mut examples: Vec<PathBuf> = ["../examples", "../examples/quickstart"]
        .iter()
        .flat_map(|dir| std::fs::read_dir(root().join(dir)).expect("examples"))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    examples.sort();
    examples
}

/// `example`'s plan and every role it renders for: each cluster's, or its own.
fn plan_and_roles(example: &Path, lead: &Endpoint) -> (Plan, Vec<Role>) {
    let mc: MiniCluster = serde_yaml_ng::from_str(&std::fs::read_to_string(example).expect("read"))
        .expect("example parses");
    let plan = Plan::new(&mc).expect("example is valid");
    let roles = match plan.local_role() {
        Role::Root => plan.roles(lead),
        local => vec![local],
    };
    (plan, roles)
}

fn lead() -> Endpoint {
    Endpoint {
        address: "192.0.2.1".into(),
        port: 30050,
    }
}

#[test]
fn examples_render_as_recorded() {
    let cert = CurveCert::from_secret([3; 32], "golden").to_zcert();
    let lead = lead();
    let examples = examples();
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for example in examples {
        let (plan, roles) = plan_and_roles(&example, &lead);
        let mut out = String::new();
        for role in roles {
            for object in render(&plan, &role, &cert).expect("role exists") {
                out.push_str("---\n");
                out.push_str(&serde_yaml_ng::to_string(&object).expect("yaml"));
            }
        }
        let name = example.file_name().expect("name");
        let golden = root().join("tests/golden/render").join(name);
        if update {
            std::fs::create_dir_all(golden.parent().expect("dir")).expect("mkdir");
            std::fs::write(&golden, &out).expect("write golden");
        } else if std::fs::read_to_string(&golden).ok().as_deref() != Some(out.as_str()) {
            stale.push(golden.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "rendering changed; review and run with UPDATE_GOLDEN=1: {stale:#?}"
    );
}

/// The file names a script runs from the operator's config directory
/// (`${FLUX_OPERATOR_CONFIG_DIR:-...}/NAME`).
fn config_files_named(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    let name = |rest: &str| -> String {
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            .collect()
    };
    let mut rest = script;
    while let Some(at) = rest.find("${FLUX_OPERATOR_CONFIG_DIR:-") {
        rest = &rest[at..];
        let Some(close) = rest.find('}') else { break };
        rest = &rest[close + 1..];
        if let Some(file) = rest.strip_prefix('/') {
            out.push(name(file));
        }
    }
    // `config_dir=${FLUX_OPERATOR_CONFIG_DIR:-...}`, then `"$config_dir/NAME"`.
    out.extend(
        script
            .split("$config_dir/")
            .skip(1)
            .map(name)
            .filter(|n| !n.is_empty()),
    );
    out
}

/// Every file a pod's scripts run from the config directory is mounted in that pod, for
/// every example in every cluster: a script the ConfigMap carries but the volume leaves out
/// fails only on a real node (the lead's reporter of a root whose bursts are not autoscaled
/// once did).
#[test]
fn every_script_a_pod_runs_is_mounted() {
    let cert = CurveCert::from_secret([3; 32], "golden").to_zcert();
    let lead = lead();
    for example in examples() {
        let (plan, roles) = plan_and_roles(&example, &lead);
        for role in roles {
            let objects: Vec<serde_json::Value> = render(&plan, &role, &cert)
                .expect("role exists")
                .iter()
                .map(|o| serde_json::to_value(o).expect("json"))
                .collect();
            let Some(job) = objects.iter().find(|o| o["kind"] == "Job") else {
                continue;
            };
            let config = objects
                .iter()
                .find(|o| o["kind"] == "ConfigMap")
                .expect("a Job comes with its ConfigMap");
            let mut mounted: Vec<String> = Vec::new();
            for volume in job["spec"]["template"]["spec"]["volumes"]
                .as_array()
                .expect("volumes")
                .iter()
                .filter(|v| v["configMap"]["name"] == config["metadata"]["name"])
            {
                for item in volume["configMap"]["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let key = item["key"].as_str().expect("key");
                    assert!(
                        config["data"][key].is_string(),
                        "{}: {key} is mounted but not in the ConfigMap",
                        example.display()
                    );
                    mounted.push(key.to_string());
                }
            }
            let data = config["data"].as_object().expect("data");
            for key in &mounted {
                for name in config_files_named(data[key].as_str().expect("text")) {
                    assert!(
                        mounted.contains(&name),
                        "{} ({:?}): {key} runs {name}, which the pod does not mount",
                        example.display(),
                        role
                    );
                }
            }
        }
    }
}
