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

#[test]
fn examples_render_as_recorded() {
    let cert = CurveCert::from_secret([3; 32], "golden").to_zcert();
    let lead = Endpoint {
        address: "192.0.2.1".into(),
        port: 30050,
    };
    // examples/*.yaml and the quickstart's MiniCluster.
    let mut examples: Vec<PathBuf> = ["../examples", "../examples/quickstart"]
        .iter()
        .flat_map(|dir| std::fs::read_dir(root().join(dir)).expect("examples"))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    examples.sort();
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for example in examples {
        let mc: MiniCluster =
            serde_yaml_ng::from_str(&std::fs::read_to_string(&example).expect("read"))
                .expect("example parses");
        let plan = Plan::new(&mc).expect("example is valid");
        let roles = match plan.local_role() {
            Role::Root => plan.roles(&lead),
            local => vec![local],
        };
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
