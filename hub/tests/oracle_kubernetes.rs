//! Oracle: `kubernetes-validate --strict` (the upstream OpenAPI schemas) accepts every
//! object rendered from every example, for every cluster.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::root;

fn validator() -> PathBuf {
    common::kubernetes_validate()
}

#[test]
fn kubernetes_validate_accepts_every_rendered_object() {
    let validator = validator();
    let dir = std::env::temp_dir().join(format!("flux-k8s-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let mut files = Vec::new();
    let mut examples: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .expect("examples")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    examples.sort();
    for example in &examples {
        let out = Command::new(env!("CARGO_BIN_EXE_flux-hub"))
            .args(["render", example.to_str().expect("path"), "-o", "json"])
            .output()
            .expect("run flux-hub");
        assert!(
            out.status.success(),
            "{}: {}",
            example.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        for group in v["clusters"].as_array().expect("clusters") {
            for (i, object) in group["objects"]
                .as_array()
                .expect("objects")
                .iter()
                .enumerate()
            {
                let stem = example.file_stem().and_then(|s| s.to_str()).unwrap_or("x");
                let file = dir.join(format!(
                    "{stem}-{}-{i}.json",
                    group["cluster"].as_str().unwrap_or("x")
                ));
                std::fs::write(&file, serde_json::to_vec_pretty(object).expect("json"))
                    .expect("write");
                files.push(file);
            }
        }
    }
    assert!(files.len() > 20, "rendered only {} objects", files.len());
    // The oldest version our types target and the newest the oracle knows.
    for version in ["1.33.0", "1.37.0"] {
        let out = Command::new(&validator)
            .args(["--strict", "--quiet", "-k", version])
            .args(&files)
            .output()
            .expect("run kubernetes-validate");
        assert!(
            out.status.success(),
            "kubernetes-validate -k {version} rejected rendered objects:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
