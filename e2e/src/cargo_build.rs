//! `cargo build` of this workspace's binaries from inside a running test, reusing what
//! `cargo test --workspace` built.
//!
//! Cargo unifies features over what a command selects, and a test process carries the
//! variables cargo set for it: a plain `cargo build -p flux-hub` from a test resolved other
//! features (no dev-dependencies: tokio without `test-util`, ...) and, with
//! `CARGO_MANIFEST_DIR` and the like set, re-ran ring's build script (it names them in
//! `rerun-if-env-changed`), so ring, rustls, tonic, kube and the workspace's own crates were
//! compiled again, and once more by the next cargo command outside a test.

use std::path::Path;
use std::process::Command;

/// What cargo sets for a test process about its package, besides `CARGO_PKG_*` and
/// `CARGO_BIN_EXE_*`.
const PACKAGE_VARS: [&str; 6] = [
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_CRATE_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "OUT_DIR",
];

/// `cargo build --workspace --bin B... --test TEST` in `workspace` (whose `--test` target,
/// here the calling test crate, makes the dev-dependencies count as in `cargo test
/// --workspace`), without the calling test's package variables. The caller adds the
/// profile and target directory.
pub fn command(workspace: &Path, bins: &[&str], test: &str) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace).args(["build", "--workspace"]);
    for bin in bins {
        cmd.args(["--bin", bin]);
    }
    cmd.args(["--test", test]);
    for (key, _) in std::env::vars_os() {
        let name = key.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_")
            || PACKAGE_VARS.contains(&&*name)
        {
            cmd.env_remove(&key);
        }
    }
    cmd
}
