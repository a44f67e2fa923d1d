//! `flux-spoke run` refuses bad flags, files and certificates before connecting to
//! anything, with a message naming the problem.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use flux_shared::federation::Identity;
use flux_shared::federation::pki::{Ca, IssuedCert};

/// A fresh directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flux-spoke-cli-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes the CA and `leaf` as `ca.crt`, `tls.crt`, `tls.key` in `dir`.
fn write_pki(dir: &Path, ca: &Ca, leaf: &IssuedCert) -> [PathBuf; 3] {
    let files = [dir.join("ca.crt"), dir.join("tls.crt"), dir.join("tls.key")];
    std::fs::write(&files[0], ca.cert_pem()).unwrap();
    std::fs::write(&files[1], &leaf.cert_pem).unwrap();
    std::fs::write(&files[2], &leaf.key_pem).unwrap();
    files
}

fn flux_spoke(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flux-spoke"))
        .args(args)
        .env_remove("FLUX_HUB")
        .env_remove("FLUX_SPOKE_NAME")
        .env_remove("FLUX_CA")
        .env_remove("FLUX_CERT")
        .env_remove("FLUX_KEY")
        // Were validation skipped, the process would go on to the Kubernetes API: make
        // sure that fails differently.
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap()
}

/// The run failed with exit code 1 and a `flux-spoke:` message; returns it.
fn failure(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("flux-spoke: "))
        .unwrap_or_else(|| panic!("no `flux-spoke:` line in {stderr}"));
    line.to_string()
}

fn run_with(name: &str, files: &[PathBuf; 3]) -> Output {
    let [ca, cert, key] = files.each_ref().map(|p| p.to_str().unwrap());
    flux_spoke(&[
        "run",
        "--hub",
        "https://127.0.0.1:1",
        "--name",
        name,
        "--ca",
        ca,
        "--cert",
        cert,
        "--key",
        key,
        "--metrics-addr",
        "127.0.0.1:0",
    ])
}

#[test]
fn a_certificate_for_another_spoke_is_refused() {
    let dir = scratch("other-spoke");
    let ca = Ca::generate("cli test").unwrap();
    let leaf = ca
        .issue_client(&Identity::spoke("gke").unwrap(), 1)
        .unwrap();
    let files = write_pki(&dir, &ca, &leaf);
    let message = failure(&run_with("edge", &files));
    assert!(
        message.contains("is for spoke \"gke\"") && message.contains("--name is \"edge\""),
        "{message}"
    );
    assert!(message.contains("tls.crt"), "names the file: {message}");

    let admin = ca
        .issue_client(&Identity::admin("ops").unwrap(), 1)
        .unwrap();
    let files = write_pki(&dir, &ca, &admin);
    let message = failure(&run_with("edge", &files));
    assert!(message.contains("admin certificate"), "{message}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_files_and_flags_are_named() {
    let dir = scratch("missing");
    let ca = Ca::generate("cli test").unwrap();
    let leaf = ca
        .issue_client(&Identity::spoke("gke").unwrap(), 1)
        .unwrap();
    let mut files = write_pki(&dir, &ca, &leaf);
    files[2] = dir.join("absent.key");
    let message = failure(&run_with("gke", &files));
    assert!(message.contains("absent.key"), "{message}");

    let message = failure(&flux_spoke(&[
        "run",
        "--hub",
        "https://127.0.0.1:1",
        "--name",
        "gke",
        "--ca",
        files[0].to_str().unwrap(),
    ]));
    assert!(message.contains("missing: --cert, --key"), "{message}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn insecure_mode_must_be_consistent() {
    let message = failure(&flux_spoke(&[
        "run",
        "--hub",
        "https://127.0.0.1:1",
        "--name",
        "gke",
        "--insecure",
    ]));
    assert!(message.contains("http://"), "{message}");

    let message = failure(&flux_spoke(&[
        "run",
        "--hub",
        "http://127.0.0.1:1",
        "--name",
        "gke",
        "--insecure",
        "--ca",
        "ca.crt",
    ]));
    assert!(message.contains("drop --ca"), "{message}");

    let message = failure(&flux_spoke(&[
        "run",
        "--hub",
        "http://127.0.0.1:1",
        "--name",
        "Not_A_Name",
        "--insecure",
    ]));
    assert!(message.contains("--name"), "{message}");
}

#[test]
fn a_matching_certificate_passes_validation() {
    // Everything checks out, so the run gets as far as the Kubernetes API, which this
    // test points at a file that does not exist.
    let dir = scratch("matching");
    let ca = Ca::generate("cli test").unwrap();
    let leaf = ca
        .issue_client(&Identity::spoke("gke").unwrap(), 1)
        .unwrap();
    let files = write_pki(&dir, &ca, &leaf);
    let message = failure(&run_with("gke", &files));
    assert!(message.contains("Kubernetes API"), "{message}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_root_reach_is_direct_or_relay_from_the_flag_or_the_environment() {
    let run = |extra: &[&str], env: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_flux-spoke"));
        command
            .args([
                "run",
                "--hub",
                "http://127.0.0.1:1",
                "--name",
                "gke",
                "--insecure",
            ])
            .args(extra)
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .env_remove("FLUX_SPOKE_ROOT_REACH");
        if let Some(value) = env {
            command.env("FLUX_SPOKE_ROOT_REACH", value);
        }
        command.output().unwrap()
    };
    for (extra, env) in [
        (&["--root-reach", "nodeport"][..], None),
        (&[][..], Some("sideways")),
    ] {
        let out = run(extra, env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?} {env:?}: {stderr}");
        assert!(stderr.contains("expected direct or relay"), "{stderr}");
    }
    for (extra, env) in [
        (&["--root-reach", "direct"][..], None),
        (&[][..], Some("relay")),
        (&[][..], None),
        // A setting left blank declares nothing.
        (&[][..], Some("")),
    ] {
        // Taken: the run goes on to the Kubernetes API.
        let message = failure(&run(extra, env));
        assert!(
            message.contains("Kubernetes API"),
            "{extra:?} {env:?}: {message}"
        );
    }
}

#[test]
fn the_fence_and_lead_unreachable_delays_are_bounded_from_the_flag_or_the_environment() {
    let run = |extra: &[&str], env: &[(&str, &str)]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_flux-spoke"));
        command
            .args([
                "run",
                "--hub",
                "http://127.0.0.1:1",
                "--name",
                "gke",
                "--insecure",
            ])
            .args(extra)
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .env_remove("FLUX_SPOKE_FENCE_AFTER_SECONDS")
            .env_remove("FLUX_SPOKE_LEAD_UNREACHABLE_AFTER_SECONDS")
            .envs(env.iter().copied());
        command.output().unwrap()
    };
    let fence = "FLUX_SPOKE_FENCE_AFTER_SECONDS";
    let lead = "FLUX_SPOKE_LEAD_UNREACHABLE_AFTER_SECONDS";
    for (extra, env) in [
        (&["--fence-after-seconds", "9"][..], &[][..]),
        (&["--fence-after-seconds", "3601"][..], &[][..]),
        (&[][..], &[(fence, "0")][..]),
        (&["--lead-unreachable-after-seconds", "0"][..], &[][..]),
        (&[][..], &[(lead, "3601")][..]),
    ] {
        let out = run(extra, env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?} {env:?}: {stderr}");
        assert!(stderr.contains("not in"), "{stderr}");
    }
    for (extra, env) in [
        (&[][..], &[][..]),
        (&["--fence-after-seconds", "10"][..], &[][..]),
        (&[][..], &[(fence, "3600"), (lead, "1")][..]),
        (&["--lead-unreachable-after-seconds", "3600"][..], &[][..]),
    ] {
        // Taken: the run goes on to the Kubernetes API.
        let message = failure(&run(extra, env));
        assert!(
            message.contains("Kubernetes API"),
            "{extra:?} {env:?}: {message}"
        );
    }
    let help = Command::new(env!("CARGO_BIN_EXE_flux-spoke"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("--lost-cluster-grace-seconds"),
        "the fence's help says what it must stay below: {help}"
    );
}
