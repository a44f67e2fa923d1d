//! Builds the images the real-node tests run, offline: no registry, no Docker.
//!
//! ```text
//! flux-images controller --out target/images [--profile release | --bin-dir DIR] [--tag 0.1.0]
//! flux-images app --out target/images [--tag bookworm]
//! flux-images view --out target/images --view /opt/testbed/flux/view [--tag bookworm]
//! ```
//! writes `<image>-<tag>.oci.tar` (load it with `ctr -n k8s.io images import`) and prints
//! its path, manifest digest and name.

use std::path::PathBuf;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use flux_e2e::images;

#[derive(Debug, Parser)]
#[command(
    name = "flux-images",
    about = "Build the real-node tests' images offline"
)]
struct Cli {
    #[command(subcommand)]
    image: Image,
}

#[derive(Debug, Subcommand)]
enum Image {
    /// The controller image (flux-hub and flux-spoke), as the Dockerfile lays it out.
    Controller {
        /// Folder for the archive and the cached base layer.
        #[arg(long, default_value = "target/images")]
        out: PathBuf,
        /// Which build of the binaries: `release` or `debug` (under target/).
        #[arg(long, default_value = "release")]
        profile: String,
        /// The folder of the binaries instead (e.g. the last release's,
        /// `target/released/VERSION`, from scripts/released.sh).
        #[arg(long, conflicts_with = "profile")]
        bin_dir: Option<PathBuf>,
        /// The image tag.
        #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
        tag: String,
    },
    /// An application image: Debian with Flux's run-time packages (Flux comes from a view).
    App {
        /// Folder for the archive and the cached root filesystems.
        #[arg(long, default_value = "target/images")]
        out: PathBuf,
        /// The image tag.
        #[arg(long, default_value = "bookworm")]
        tag: String,
    },
    /// A flux view image of a flux-core installation built for prefix /mnt/flux/view.
    View {
        /// Folder for the archive and the cached root filesystems.
        #[arg(long, default_value = "target/images")]
        out: PathBuf,
        /// The flux-core view (the testbed's `flux/view`).
        #[arg(long, default_value = "/opt/testbed/flux/view")]
        view: PathBuf,
        /// The image tag.
        #[arg(long, default_value = "bookworm")]
        tag: String,
    },
    /// The pod sandbox image of a static `pause` binary.
    Pause {
        /// Folder for the archive.
        #[arg(long, default_value = "target/images")]
        out: PathBuf,
        /// The static pause binary.
        #[arg(long, default_value = "/opt/testbed/k8s/bin/pause")]
        pause: PathBuf,
        /// The image tag.
        #[arg(long, default_value = "testbed")]
        tag: String,
    },
}

/// Writes `archive` as `<out>/<file>-<tag>.oci.tar` and says so.
fn write(
    out: &std::path::Path,
    file: &str,
    name: &str,
    tag: &str,
    built: (Vec<u8>, String),
) -> Result<()> {
    let (archive, digest) = built;
    // The pause image needs no cache folder, so on a fresh checkout nothing made `out` yet.
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let path = out.join(format!("{file}-{tag}.oci.tar"));
    std::fs::write(&path, &archive).with_context(|| format!("writing {}", path.display()))?;
    println!("{} {digest} {name}:{tag}", path.display());
    Ok(())
}

fn main() -> Result<()> {
    match Cli::parse().image {
        Image::Controller {
            out,
            profile,
            bin_dir,
            tag,
        } => {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("target"));
            let bin_dir = bin_dir.unwrap_or_else(|| target.join(&profile));
            let built = images::controller_archive(&out.join("cache"), &bin_dir, &tag)?;
            write(&out, "flux-hub", images::CONTROLLER_IMAGE, &tag, built)
        }
        Image::App { out, tag } => {
            let built = images::app_archive(&out.join("cache"), &tag)?;
            write(&out, "flux-app", images::APP_IMAGE, &tag, built)
        }
        Image::Pause { out, pause, tag } => {
            let built = images::pause_archive(&pause, &tag)?;
            write(&out, "pause", images::PAUSE_IMAGE, &tag, built)
        }
        Image::View { out, view, tag } => {
            let built = images::view_archive(&out.join("cache"), &view, &tag)?;
            write(&out, "flux-view", images::VIEW_IMAGE, &tag, built)
        }
    }
}
