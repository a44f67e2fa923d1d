//! `flux-hub render` refuses a MiniCluster that declares more brokers than the limit
//! (docs/limits.md), naming the field and the rule, instead of building every host.

use std::process::{Command, Output};

fn render(yaml: &str) -> Output {
    let dir = std::env::temp_dir().join(format!("flux-hub-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join(format!("mc-{:x}.yaml", fxhash(yaml)));
    std::fs::write(&file, yaml).expect("write spec");
    let out = Command::new(env!("CARGO_BIN_EXE_flux-hub"))
        .arg("render")
        .arg(&file)
        .output()
        .expect("run flux-hub");
    let _ = std::fs::remove_file(&file);
    out
}

/// A file name per spec, so tests running in parallel do not overwrite each other's file.
fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

const HEAD: &str = "apiVersion: flux-framework.org/v1alpha2\nkind: MiniCluster\nmetadata: {name: huge, namespace: default}\nspec:\n  size: 1\n  containers: [{image: busybox}]\n";

fn assert_refused(yaml: &str, field: &str) {
    let out = render(yaml);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "rendered:\n{yaml}");
    assert!(out.stdout.is_empty(), "printed objects for\n{yaml}");
    assert!(
        stderr.contains(&format!(
            "{field}: 10000000 is above the limit of 16384 brokers per MiniCluster"
        )),
        "stderr: {stderr}"
    );
}

#[test]
fn render_refuses_a_maxsize_of_ten_million() {
    assert_refused(&format!("{HEAD}  maxSize: 10000000\n"), "spec.maxSize");
}

#[test]
fn render_refuses_a_burst_of_ten_million() {
    assert_refused(
        &format!(
            "{HEAD}  flux:\n    bursting:\n      clusters: [{{name: b, size: 0, maxSize: 10000000}}]\n"
        ),
        "spec.flux.bursting.clusters[0].maxSize",
    );
}

#[test]
fn render_accepts_the_limit_itself() {
    let out = render(&format!("{HEAD}  maxSize: 16384\n"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
