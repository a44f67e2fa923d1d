//! The controller image built offline (`flux-images`): it agrees with the `Dockerfile`
//! (paths, user, entrypoint, command, ports), and it runs in containerd: both binaries
//! start in a real container of it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use flux_e2e::images::{self, HUB_PATH, SPOKE_PATH};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace holds e2e/")
        .to_path_buf()
}

#[test]
fn the_controller_image_and_the_dockerfile_agree() {
    let text = std::fs::read_to_string(workspace().join("Dockerfile")).expect("Dockerfile");
    let stage = images::dockerfile_runtime(&text).expect("the Dockerfile reads");
    let config = images::controller_config();
    assert_eq!(stage.copied_to, [HUB_PATH, SPOKE_PATH], "binaries' paths");
    assert_eq!(stage.user.as_deref(), Some(config.user.as_str()), "user");
    assert_eq!(stage.entrypoint, config.entrypoint, "entrypoint");
    assert_eq!(stage.cmd, config.cmd, "command");
    assert_eq!(stage.exposed_ports, config.exposed_ports, "ports");
    // The deploy manifests name the image the harness tags.
    let deployment =
        std::fs::read_to_string(workspace().join("deploy/deployment.yaml")).expect("deployment");
    assert!(
        deployment.contains(&format!("image: {}:", images::CONTROLLER_IMAGE)),
        "deploy/deployment.yaml names {}",
        images::CONTROLLER_IMAGE
    );
}

/// A containerd of the test's own (own root, state and socket, no CRI), stopped on drop.
struct Containerd {
    dir: PathBuf,
    process: Child,
}

impl Containerd {
    fn start(dir: &Path) -> Result<Containerd> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)?;
        let config = format!(
            "version = 2\nroot = \"{0}/root\"\nstate = \"{0}/state\"\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n[grpc]\n  address = \"{0}/containerd.sock\"\n",
            dir.display()
        );
        std::fs::write(dir.join("config.toml"), config)?;
        let log = std::fs::File::create(dir.join("containerd.log"))?;
        let process = Command::new("containerd")
            .arg("--config")
            .arg(dir.join("config.toml"))
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting containerd (Debian package containerd; the testbed's `install --real-nodes`)")?;
        let me = Containerd {
            dir: dir.to_path_buf(),
            process,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while me.ctr(&["version"]).is_err() {
            ensure!(
                Instant::now() < deadline,
                "containerd did not answer within 30 s: {}",
                std::fs::read_to_string(dir.join("containerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(me)
    }

    /// `ctr` against this containerd, in namespace `flux-e2e`: its standard output.
    fn ctr(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("ctr")
            .arg("--address")
            .arg(self.dir.join("containerd.sock"))
            .args(["--namespace", "flux-e2e"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .context("running ctr")?;
        if !out.status.success() {
            bail!(
                "ctr {}: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
        // Snapshots are overlay mounts under root/: unmounted with the tasks; the folder
        // goes with the next start.
    }
}

#[test]
#[ignore = "needs root, mmdebstrap, containerd and runc (scripts/e2e.sh on the testbed)"]
fn the_controller_image_runs_in_containerd() -> Result<()> {
    let root = workspace();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let built = flux_e2e::cargo_build::command(&root, &["flux-hub", "flux-spoke"], "images")
        .status()
        .context("building the binaries")?;
    ensure!(built.success(), "cargo build failed");
    let images_dir = target.join("images");
    let (archive, digest) =
        images::controller_archive(&images_dir.join("cache"), &target.join("debug"), "e2e")?;
    // Not the archive scripts/e2e.sh loads into the real nodes, which may be read while
    // this test runs.
    let path = images_dir.join("flux-hub-e2e-images-test.oci.tar");
    std::fs::write(&path, &archive)?;
    eprintln!(
        "controller image {} ({} MB), {digest}",
        path.display(),
        archive.len() / 1_000_000
    );

    let containerd = Containerd::start(&target.join("containerd-images-test"))?;
    let name = format!("{}:e2e", images::CONTROLLER_IMAGE);
    containerd.ctr(&["images", "import", &path.to_string_lossy()])?;
    let listed = containerd.ctr(&["images", "ls", "--quiet"])?;
    ensure!(
        listed.lines().any(|l| l == name),
        "imported as {name}: {listed}"
    );
    let version = env!("CARGO_PKG_VERSION");
    for (binary, expected) in [
        (HUB_PATH, format!("flux-hub {version}")),
        (SPOKE_PATH, format!("flux-spoke {version}")),
    ] {
        let id = format!("version-{}", std::process::id());
        let out = containerd.ctr(&["run", "--rm", &name, &id, binary, "--version"])?;
        ensure!(
            out.trim() == expected,
            "{binary} --version in a container of the image said {out:?}, expected {expected:?}"
        );
        eprintln!("in a container of {name}: {}", out.trim());
    }
    // The default process: the entrypoint with its command, as the nonroot user.
    let id = format!("spec-{}", std::process::id());
    containerd.ctr(&["containers", "create", &name, &id])?;
    let info: serde_json::Value =
        serde_json::from_str(&containerd.ctr(&["containers", "info", &id])?)?;
    containerd.ctr(&["containers", "rm", &id])?;
    let process = &info["Spec"]["process"];
    ensure!(
        process["args"] == serde_json::json!([HUB_PATH, "run"])
            && process["user"]["uid"] == images::NONROOT
            && process["user"]["gid"] == images::NONROOT,
        "the container runs `flux-hub run` as {}: {process}",
        images::NONROOT
    );
    Ok(())
}

/// The flux view image's copy of its view (what the init container does) into a folder
/// both containers mount, then Flux from that copy in a container of the application
/// image: the pod's two halves, in real containers.
#[test]
#[ignore = "needs root, mmdebstrap, containerd, runc and the testbed's flux view (scripts/e2e.sh on the testbed)"]
fn flux_copied_from_the_view_image_runs_in_the_application_image() -> Result<()> {
    let root = workspace();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let flux = std::env::var_os("TESTBED_FLUX")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/testbed/flux"));
    let images_dir = target.join("images");
    let cache = images_dir.join("cache");
    let (view, _) = images::view_archive(&cache, &flux.join("view"), "e2e")?;
    let (app, _) = images::app_archive(&cache, "e2e")?;
    let containerd = Containerd::start(&target.join("containerd-view-test"))?;
    for (file, bytes) in [
        ("flux-view-e2e.oci.tar", &view),
        ("flux-app-e2e.oci.tar", &app),
    ] {
        let path = images_dir.join(file);
        std::fs::write(&path, bytes)?;
        containerd.ctr(&["images", "import", &path.to_string_lossy()])?;
    }
    let shared = target.join("containerd-view-test/mnt-flux");
    std::fs::create_dir_all(&shared)?;
    let mount = format!(
        "type=bind,src={},dst=/mnt/flux,options=rbind:rw",
        shared.display()
    );
    let id = |what: &str| format!("{what}-{}", std::process::id());
    let view_image = format!("{}:e2e", images::VIEW_IMAGE);
    let app_image = format!("{}:e2e", images::APP_IMAGE);
    // As the rendered init script copies it: the one view under /opt/views/._view.
    containerd.ctr(&[
        "run", "--rm", "--mount", &mount, &view_image, &id("copy"), "/bin/bash", "-c",
        "shopt -s nullglob; views=(/opt/views/._view/*/); [ ${#views[@]} -eq 1 ] && mkdir -p /mnt/flux/view && cp -a \"${views[0]}.\" /mnt/flux/view/",
    ])?;
    let out = containerd.ctr(&[
        "run",
        "--rm",
        "--mount",
        &mount,
        &app_image,
        &id("flux"),
        "/mnt/flux/view/bin/flux",
        "version",
    ])?;
    eprintln!("flux version in a container of {app_image}:\n{out}");
    ensure!(
        out.contains("commands:") && out.contains("libflux-core:"),
        "flux version from the copied view: {out}"
    );
    // A real broker: a one-rank instance runs a command under Flux.
    let out = containerd.ctr(&[
        "run",
        "--rm",
        "--mount",
        &mount,
        &app_image,
        &id("broker"),
        "/mnt/flux/view/bin/flux",
        "start",
        "/mnt/flux/view/bin/flux",
        "run",
        "echo",
        "hello from a flux job",
    ])?;
    ensure!(
        out.contains("hello from a flux job"),
        "a one-broker instance in a container of the application image: {out}"
    );
    Ok(())
}
