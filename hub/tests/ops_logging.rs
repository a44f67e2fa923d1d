//! `flux_shared::ops::logging::init` installs a global subscriber once and tolerates being
//! called again: the first call's format stays. Checked in a child process (this test
//! binary run again), since the subscriber is process-wide state and its output goes to
//! standard error.

use std::process::Command;

const CHILD: &str = "FLUX_OPS_LOGGING_CHILD";

/// What the child runs: JSON first, then text, then one event.
#[test]
fn child_logs_after_init_twice() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    flux_shared::ops::logging::init(true);
    flux_shared::ops::logging::init(false);
    tracing::info!(probe = 7, "still logging");
}

#[test]
fn init_twice_keeps_the_first_format() {
    let exe = std::env::current_exe().expect("this test binary");
    let out = Command::new(exe)
        .args(["--exact", "child_logs_after_init_twice", "--nocapture"])
        .env(CHILD, "1")
        .env("RUST_LOG", "info")
        .output()
        .expect("run the child");
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let event = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["message"] == "still logging")
        .unwrap_or_else(|| panic!("no JSON line for the event in:\n{stderr}"));
    assert_eq!(event["probe"], 7, "{event}");
    assert_eq!(event["level"], "INFO", "{event}");
}
