//! The controller image, built offline: a root filesystem of Debian packages
//! (`mmdebstrap --variant=extract`: the C library and libgcc the binaries link, no shell,
//! no package manager, as the Dockerfile's distroless base) and a layer with `flux-hub`,
//! `flux-spoke`, the nonroot user and its home, laid out as the `Dockerfile` lays them out
//! ([`dockerfile_runtime`] reads that, and a test keeps both in agreement).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail, ensure};

use crate::oci::{self, Entry, ImageConfig};

/// The image name the deploy manifests use (`deploy/deployment.yaml`).
pub const CONTROLLER_IMAGE: &str = flux_shared::IMAGE_REPOSITORY;

/// Where the binaries go in the image.
pub const HUB_PATH: &str = "/usr/local/bin/flux-hub";
/// See [`HUB_PATH`].
pub const SPOKE_PATH: &str = "/usr/local/bin/flux-spoke";

/// The user the controllers run as (distroless's `nonroot`).
pub const NONROOT: u64 = 65532;

/// The Debian suite and packages of the base: what the binaries need at run time (glibc,
/// libgcc: TLS is rustls), the files every image has (`base-files`: os-release, ...),
/// `netbase` (/etc/services, /etc/protocols) and `tzdata`.
pub const BASE_SUITE: &str = "bookworm";
/// See [`BASE_SUITE`].
pub const BASE_PACKAGES: &[&str] = &["libc6", "libgcc-s1", "base-files", "netbase", "tzdata"];

/// How the controller image starts: as the `Dockerfile` says.
pub fn controller_config() -> ImageConfig {
    ImageConfig {
        user: format!("{NONROOT}:{NONROOT}"),
        entrypoint: vec![HUB_PATH.to_string()],
        cmd: vec!["run".to_string()],
        env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string()],
        exposed_ports: ["8080/tcp", "8443/tcp", "8081/tcp"]
            .map(str::to_string)
            .to_vec(),
    }
}

/// The controller layer: both binaries, and the users and home of the nonroot user (the
/// base has no /etc/passwd: `extract` runs no maintainer script).
pub fn controller_entries(hub: Vec<u8>, spoke: Vec<u8>) -> Vec<Entry> {
    let passwd = format!(
        "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n"
    );
    let group = format!("root:x:0:\nnogroup:x:65534:\nnonroot:x:{NONROOT}:\n");
    vec![
        Entry::file(HUB_PATH, 0o755, hub),
        Entry::file(SPOKE_PATH, 0o755, spoke),
        Entry::file("etc/passwd", 0o644, passwd.into_bytes()),
        Entry::file("etc/group", 0o644, group.into_bytes()),
        Entry::dir("home/nonroot", 0o700, NONROOT, NONROOT),
        Entry::dir("tmp", 0o1777, 0, 0),
    ]
}

/// What the `Dockerfile`'s last stage says of the image: where it copies files, the user,
/// entrypoint, command and exposed ports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeStage {
    /// Destinations of its `COPY` lines.
    pub copied_to: Vec<String>,
    /// `USER`.
    pub user: Option<String>,
    /// `ENTRYPOINT` (exec form).
    pub entrypoint: Vec<String>,
    /// `CMD` (exec form).
    pub cmd: Vec<String>,
    /// `EXPOSE`, as `port/tcp`.
    pub exposed_ports: Vec<String>,
}

/// Reads the last stage (after the last `FROM`) of a Dockerfile. Only the instructions
/// this project's Dockerfile uses are read; exec forms must be JSON arrays.
pub fn dockerfile_runtime(text: &str) -> Result<RuntimeStage> {
    // Continuation lines joined, comments dropped.
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || trimmed.is_empty() && current.is_empty() {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        lines.push(std::mem::take(&mut current));
    }
    let last_from = lines
        .iter()
        .rposition(|l| l.to_ascii_uppercase().starts_with("FROM "))
        .context("the Dockerfile has no FROM")?;
    let mut stage = RuntimeStage::default();
    for line in &lines[last_from + 1..] {
        let (instruction, rest) = line.split_once(' ').unwrap_or((line, ""));
        let rest = rest.trim();
        let exec_form = |what: &str| -> Result<Vec<String>> {
            serde_json::from_str(rest)
                .with_context(|| format!("{what} must be an exec-form JSON array: {rest}"))
        };
        match instruction.to_ascii_uppercase().as_str() {
            "COPY" => {
                let dest = rest
                    .split_whitespace()
                    .rfind(|w| !w.starts_with("--"))
                    .context("COPY without a destination")?;
                stage.copied_to.push(dest.to_string());
            }
            "USER" => stage.user = Some(rest.to_string()),
            "ENTRYPOINT" => stage.entrypoint = exec_form("ENTRYPOINT")?,
            "CMD" => stage.cmd = exec_form("CMD")?,
            "EXPOSE" => stage.exposed_ports.extend(rest.split_whitespace().map(|p| {
                if p.contains('/') {
                    p.to_string()
                } else {
                    format!("{p}/tcp")
                }
            })),
            other => bail!("the runtime stage uses {other}, which this reader does not know"),
        }
    }
    Ok(stage)
}

/// The base root filesystem as a layer (an uncompressed tar), made by mmdebstrap from
/// [`BASE_PACKAGES`] once and kept in `cache` (keyed by suite and packages). Time stamps
/// come from `SOURCE_DATE_EPOCH` (0), so a rebuild from the same package versions gives
/// the same layer.
pub fn base_layer(cache: &Path) -> Result<PathBuf> {
    rootfs_layer(cache, "extract", BASE_PACKAGES)
}

/// A root filesystem of Debian [`BASE_SUITE`] as a layer: mmdebstrap's `variant` with
/// `packages`, made once and kept in `cache` (keyed by variant and packages).
pub fn rootfs_layer(cache: &Path, variant: &str, packages: &[&str]) -> Result<PathBuf> {
    let key = format!("{BASE_SUITE}-{variant}-{}", packages.join("_"));
    let out = cache.join(format!(
        "rootfs-{}.tar",
        &oci::digest(key.as_bytes())[7..23]
    ));
    if out.is_file() {
        return Ok(out);
    }
    std::fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
    let partial = out.with_extension("partial.tar");
    let status = Command::new("mmdebstrap")
        .env("SOURCE_DATE_EPOCH", "0")
        .arg(format!("--variant={variant}"))
        .args(["--format=tar", "--quiet", "--skip=output/dev"])
        .arg(format!("--include={}", packages.join(",")))
        .arg(BASE_SUITE)
        .arg(&partial)
        .status()
        .context("running mmdebstrap (Debian package mmdebstrap; the testbed's `install --real-nodes` installs it)")?;
    ensure!(
        status.success(),
        "mmdebstrap --variant={variant} failed ({status})"
    );
    std::fs::rename(&partial, &out)?;
    Ok(out)
}

/// What Flux's programs need at run time in an application image (the flux view brings
/// Flux itself): its libraries, Python 3.11 with its modules, Lua 5.3 for flux-cron.
pub const FLUX_RUNTIME_PACKAGES: &[&str] = &[
    "libjansson4",
    "libuuid1",
    "libzmq5",
    "libhwloc15",
    "libarchive13",
    "liblz4-1",
    "libsqlite3-0",
    "libncursesw6",
    "libtinfo6",
    "liblua5.3-0",
    "libpython3.11",
    "python3",
    "python3-cffi-backend",
    "python3-yaml",
    "python3-ply",
    "lua5.3",
    "lua-posix",
];

/// Name of the application image (a Debian system with Flux's run-time packages).
pub const APP_IMAGE: &str = "localhost/flux-app-debian";
/// Name of the flux view image built from a flux-core view.
pub const VIEW_IMAGE: &str = "localhost/flux-view-debian";

/// The application image: Debian `minbase` (bash, coreutils) with
/// [`FLUX_RUNTIME_PACKAGES`], as root, `/bin/bash` by default.
pub fn app_archive(cache: &Path, tag: &str) -> Result<(Vec<u8>, String)> {
    let mut packages = vec!["bash"];
    packages.extend(FLUX_RUNTIME_PACKAGES);
    let rootfs = std::fs::read(rootfs_layer(cache, "minbase", &packages)?)?;
    let name = format!("{APP_IMAGE}:{tag}");
    Ok(oci::archive(&[&name], &shell_config(), &[&rootfs])?)
}

/// A flux view image: Debian `minbase` (the init container's copy needs bash and
/// coreutils) with the flux-core view `view` (built for the prefix the view is copied to,
/// `/mnt/flux/view`) as its one spack view under `/opt/views/._view/<digest>/`, and an
/// empty `/opt/software`, as the reference view images lay them out.
pub fn view_archive(cache: &Path, view: &Path, tag: &str) -> Result<(Vec<u8>, String)> {
    let rootfs = std::fs::read(rootfs_layer(cache, "minbase", &["bash"])?)?;
    let mut entries = oci::tree(view, "opt/views/._view/flux")
        .with_context(|| format!("reading the flux view {}", view.display()))?;
    entries.push(Entry::dir("opt/software", 0o755, 0, 0));
    let layer = oci::layer(&entries)?;
    let name = format!("{VIEW_IMAGE}:{tag}");
    Ok(oci::archive(&[&name], &shell_config(), &[&rootfs, &layer])?)
}

/// Name of the pod sandbox image real nodes use (containerd's `sandbox_image`).
pub const PAUSE_IMAGE: &str = "localhost/pause";

/// The pod sandbox image: the static `pause` binary (the testbed's `k8s/bin/pause`) alone,
/// as `/pause`.
pub fn pause_archive(pause: &Path, tag: &str) -> Result<(Vec<u8>, String)> {
    let binary = std::fs::read(pause).with_context(|| format!("reading {}", pause.display()))?;
    let layer = oci::layer(&[Entry::file("pause", 0o755, binary)])?;
    let config = ImageConfig {
        user: "65535:65535".to_string(),
        entrypoint: vec!["/pause".to_string()],
        cmd: Vec::new(),
        env: Vec::new(),
        exposed_ports: Vec::new(),
    };
    let name = format!("{PAUSE_IMAGE}:{tag}");
    Ok(oci::archive(&[&name], &config, &[&layer])?)
}

/// Root, `/bin/bash`: the application and view images.
fn shell_config() -> ImageConfig {
    ImageConfig {
        user: "0:0".to_string(),
        entrypoint: Vec::new(),
        cmd: vec!["/bin/bash".to_string()],
        env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string()],
        exposed_ports: Vec::new(),
    }
}

/// The controller image's OCI archive, from the base layer in `cache` and the binaries in
/// `bin_dir` (`target/release` or `target/debug`), tagged `CONTROLLER_IMAGE:tag`. Returns
/// the archive and its manifest digest.
pub fn controller_archive(cache: &Path, bin_dir: &Path, tag: &str) -> Result<(Vec<u8>, String)> {
    let base = std::fs::read(base_layer(cache)?).context("reading the base layer")?;
    let read = |name: &str| {
        let path = bin_dir.join(name);
        ensure!(path.is_file(), "no {} (build it first)", path.display());
        without_debug_info(&path)
    };
    let layer = oci::layer(&controller_entries(read("flux-hub")?, read("flux-spoke")?))?;
    let name = format!("{CONTROLLER_IMAGE}:{tag}");
    Ok(oci::archive(
        &[&name],
        &controller_config(),
        &[&base, &layer],
    )?)
}

/// The bytes of the executable at `path` without its debug information (`objcopy
/// --strip-debug`, as the Dockerfile does): the release profile keeps line tables for
/// profiling, which were four fifths of the image. Symbols stay, so a backtrace still
/// names functions.
pub fn without_debug_info(path: &Path) -> Result<Vec<u8>> {
    let name = path.file_name().context("a file")?.to_string_lossy();
    let out = std::env::temp_dir().join(format!("flux-images-{}-{name}", std::process::id()));
    let status = Command::new("objcopy")
        .arg("--strip-debug")
        .arg(path)
        .arg(&out)
        .status()
        .context("running objcopy (binutils)")?;
    let bytes = std::fs::read(&out);
    let _ = std::fs::remove_file(&out);
    ensure!(
        status.success(),
        "objcopy --strip-debug {}: {status}",
        path.display()
    );
    bytes.with_context(|| format!("reading {}", out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_executable_loses_its_debug_information_and_stays_one() {
        // This test's own executable, built with debug information.
        let exe = std::env::current_exe().expect("the test executable");
        let before = std::fs::metadata(&exe).expect("size").len();
        let after = without_debug_info(&exe).expect("objcopy");
        assert!(after.starts_with(b"\x7fELF"), "still an ELF executable");
        assert!(
            (after.len() as u64) < before / 2,
            "{before} bytes with debug information, {} without",
            after.len()
        );
    }

    #[test]
    fn the_runtime_stage_of_a_dockerfile_is_read() {
        let text = r#"
FROM rust AS build
COPY . .
RUN cargo build
# the image
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/a /usr/local/bin/a
COPY --from=build \
     /out/b /usr/local/bin/b
USER 65532:65532
EXPOSE 8080 8443/udp
ENTRYPOINT ["/usr/local/bin/a"]
CMD ["run"]
"#;
        let stage = dockerfile_runtime(text).expect("reads");
        assert_eq!(
            stage,
            RuntimeStage {
                copied_to: vec!["/usr/local/bin/a".into(), "/usr/local/bin/b".into()],
                user: Some("65532:65532".into()),
                entrypoint: vec!["/usr/local/bin/a".into()],
                cmd: vec!["run".into()],
                exposed_ports: vec!["8080/tcp".into(), "8443/udp".into()],
            }
        );
        assert!(
            dockerfile_runtime("FROM x\nCMD run\n").is_err(),
            "shell form"
        );
        assert!(
            dockerfile_runtime("FROM x\nRUN true\n").is_err(),
            "unknown here"
        );
    }
}
