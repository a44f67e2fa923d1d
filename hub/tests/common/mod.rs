//! Helpers shared by the hub's integration tests.

use std::path::{Path, PathBuf};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `kubernetes-validate` oracle next to the test interpreter (`ORACLE_PYTHON`, else
/// the workspace's `.venv`); fails with an install hint when it is missing.
pub fn kubernetes_validate() -> PathBuf {
    let python = std::env::var_os("ORACLE_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv/bin/python"));
    let bin = python.with_file_name("kubernetes-validate");
    assert!(
        bin.exists(),
        "{} not found: run scripts/test.sh, which installs the test oracles",
        bin.display()
    );
    bin
}
