//! Builds the images the real-node tests run, offline: no registry, no Docker.
//!
//! ```text
//! flux-images controller --out target/images [--profile release] [--tag 0.1.0]
//! ```
//! writes `flux-hub-<tag>.oci.tar` (load it with `ctr -n k8s.io images import`) and prints
//! its path and manifest digest.

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
        /// The image tag.
        #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
        tag: String,
    },
}

fn main() -> Result<()> {
    match Cli::parse().image {
        Image::Controller { out, profile, tag } => {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("target"));
            let (archive, digest) =
                images::controller_archive(&out.join("cache"), &target.join(&profile), &tag)?;
            let path = out.join(format!("flux-hub-{tag}.oci.tar"));
            std::fs::write(&path, &archive)
                .with_context(|| format!("writing {}", path.display()))?;
            println!(
                "{} {digest} {}:{tag}",
                path.display(),
                images::CONTROLLER_IMAGE
            );
            Ok(())
        }
    }
}
