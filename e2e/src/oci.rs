//! OCI image archives without a registry or Docker: layers are plain (uncompressed) tar
//! files, and an archive is the OCI image layout in one tar (`oci-layout`, `index.json`,
//! `blobs/sha256/...`), which `ctr images import` loads into containerd.
//!
//! Everything written is reproducible: entries sorted, every time stamp 0, fixed owners,
//! so the same inputs give the same digests.
//!
//! The manifests are five small `json!` documents written here rather than `oci-spec`'s
//! types: that crate would add about fifteen crates (six of them proc macros, and a second
//! `darling`) to a test harness for what these few lines state.

use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::{Value, json};

/// What a file of a layer is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// A regular file with these bytes.
    File(Vec<u8>),
    /// A directory.
    Dir,
    /// A symbolic link to this target.
    Symlink(String),
}

/// One entry of a layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Path inside the image, without a leading `/` (`usr/local/bin/flux-hub`).
    pub path: String,
    /// Permission bits (`0o755`).
    pub mode: u32,
    /// Owner.
    pub uid: u64,
    /// Group.
    pub gid: u64,
    /// File or directory.
    pub content: Content,
}

impl Entry {
    /// A root-owned file.
    pub fn file(path: &str, mode: u32, data: Vec<u8>) -> Entry {
        Entry {
            path: path.trim_start_matches('/').to_string(),
            mode,
            uid: 0,
            gid: 0,
            content: Content::File(data),
        }
    }

    /// A directory owned by `uid`:`gid`.
    pub fn dir(path: &str, mode: u32, uid: u64, gid: u64) -> Entry {
        Entry {
            path: path.trim_start_matches('/').to_string(),
            mode,
            uid,
            gid,
            content: Content::Dir,
        }
    }
}

/// The entries of the directory tree `src`, placed under `dest` (a path in the image), with
/// its files' modes, owned by root: directories, regular files and symbolic links (as
/// they are). Anything else (a socket, a device) is an error.
pub fn tree(src: &Path, dest: &str) -> io::Result<Vec<Entry>> {
    let dest = dest.trim_matches('/');
    let mut out = vec![Entry::dir(dest, 0o755, 0, 0)];
    let mut pending = vec![(src.to_path_buf(), dest.to_string())];
    while let Some((dir, at)) = pending.pop() {
        for item in std::fs::read_dir(&dir)? {
            let item = item?;
            let name = item.file_name().to_string_lossy().to_string();
            let path = format!("{at}/{name}");
            let meta = std::fs::symlink_metadata(item.path())?;
            let mode = meta.permissions().mode() & 0o7777;
            let kind = meta.file_type();
            let content = if kind.is_symlink() {
                Content::Symlink(
                    std::fs::read_link(item.path())?
                        .to_string_lossy()
                        .to_string(),
                )
            } else if kind.is_dir() {
                pending.push((item.path(), path.clone()));
                Content::Dir
            } else if kind.is_file() {
                Content::File(std::fs::read(item.path())?)
            } else {
                return Err(io::Error::other(format!(
                    "{} is neither a file, a directory nor a symbolic link",
                    item.path().display()
                )));
            };
            out.push(Entry {
                path,
                mode,
                uid: 0,
                gid: 0,
                content,
            });
        }
    }
    Ok(out)
}

/// A layer (an uncompressed tar) of `entries`, sorted by path.
pub fn layer(entries: &[Entry]) -> io::Result<Vec<u8>> {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    let mut out = tar::Builder::new(Vec::new());
    for e in sorted {
        let mut header = tar::Header::new_gnu();
        header.set_mode(e.mode);
        header.set_uid(e.uid);
        header.set_gid(e.gid);
        header.set_mtime(0);
        match &e.content {
            Content::File(data) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_size(data.len() as u64);
                out.append_data(&mut header, &e.path, data.as_slice())?;
            }
            Content::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_size(0);
                out.append_data(&mut header, format!("{}/", e.path), io::empty())?;
            }
            Content::Symlink(target) => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_size(0);
                out.append_link(&mut header, &e.path, target)?;
            }
        }
    }
    out.into_inner()
}

/// How a container of the image starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageConfig {
    /// `uid:gid` the process runs as.
    pub user: String,
    /// The program and its first arguments.
    pub entrypoint: Vec<String>,
    /// Default arguments after the entrypoint.
    pub cmd: Vec<String>,
    /// Environment, `NAME=value`.
    pub env: Vec<String>,
    /// Ports the image says it listens on, `8080/tcp`.
    pub exposed_ports: Vec<String>,
}

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The OCI archive of an image of `layers` (bottom first) started as `config`, tagged with
/// every name of `names` (`registry/repo:tag`). Returns the archive and the manifest's
/// digest.
pub fn archive(
    names: &[&str],
    config: &ImageConfig,
    layers: &[&[u8]],
) -> io::Result<(Vec<u8>, String)> {
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    let mut layer_descriptors = Vec::new();
    let mut diff_ids = Vec::new();
    for layer in layers {
        let d = digest(layer);
        diff_ids.push(json!(d));
        layer_descriptors.push(json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": d,
            "size": layer.len(),
        }));
        blobs.push((d, layer.to_vec()));
    }
    let ports: serde_json::Map<String, Value> = config
        .exposed_ports
        .iter()
        .map(|p| (p.clone(), json!({})))
        .collect();
    let image_config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": config.user,
            "Entrypoint": config.entrypoint,
            "Cmd": config.cmd,
            "Env": config.env,
            "ExposedPorts": ports,
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    });
    let config_bytes = serde_json::to_vec(&image_config)?;
    let config_digest = digest(&config_bytes);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_bytes.len(),
        },
        "layers": layer_descriptors,
    });
    blobs.push((config_digest, config_bytes));
    let manifest_bytes = serde_json::to_vec(&manifest)?;
    let manifest_digest = digest(&manifest_bytes);
    blobs.push((manifest_digest.clone(), manifest_bytes.clone()));
    let index = json!({
        "schemaVersion": 2,
        "manifests": names.iter().map(|name| json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest_bytes.len(),
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": name.rsplit(':').next().unwrap_or(name),
            },
        })).collect::<Vec<_>>(),
    });
    blobs.sort_by(|a, b| a.0.cmp(&b.0));
    blobs.dedup_by(|a, b| a.0 == b.0);

    let mut out = tar::Builder::new(Vec::new());
    let mut add = |path: &str, data: &[u8]| -> io::Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header.set_size(data.len() as u64);
        header.set_entry_type(tar::EntryType::Regular);
        out.append_data(&mut header, path, data)
    };
    add(
        "oci-layout",
        &serde_json::to_vec(&json!({"imageLayoutVersion": "1.0.0"}))?,
    )?;
    add("index.json", &serde_json::to_vec(&index)?)?;
    for (d, bytes) in &blobs {
        let hex = d.trim_start_matches("sha256:");
        add(&format!("blobs/sha256/{hex}"), bytes)?;
    }
    let mut bytes = out.into_inner()?;
    bytes.flush()?;
    Ok((bytes, manifest_digest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn entries_of(tar_bytes: &[u8]) -> Vec<(String, Vec<u8>, u32, u64)> {
        let mut archive = tar::Archive::new(tar_bytes);
        archive
            .entries()
            .expect("entries")
            .map(|e| {
                let mut e = e.expect("entry");
                let path = e.path().expect("path").to_string_lossy().to_string();
                let mode = e.header().mode().expect("mode");
                let uid = e.header().uid().expect("uid");
                let mut data = Vec::new();
                e.read_to_end(&mut data).expect("read");
                (path, data, mode, uid)
            })
            .collect()
    }

    fn config() -> ImageConfig {
        ImageConfig {
            user: "65532:65532".into(),
            entrypoint: vec!["/usr/local/bin/flux-hub".into()],
            cmd: vec!["run".into()],
            env: vec!["PATH=/usr/bin".into()],
            exposed_ports: vec!["8080/tcp".into()],
        }
    }

    #[test]
    fn a_layer_is_sorted_timeless_and_keeps_modes_and_owners() {
        let l = layer(&[
            Entry::file("/usr/local/bin/b", 0o755, b"bin".to_vec()),
            Entry::dir("home/nonroot", 0o700, 65532, 65532),
            Entry::file(
                "etc/passwd",
                0o644,
                b"root:x:0:0::/root:/sbin/nologin\n".to_vec(),
            ),
        ])
        .expect("layer");
        let got = entries_of(&l);
        let paths: Vec<&str> = got.iter().map(|e| e.0.as_str()).collect();
        assert_eq!(paths, ["etc/passwd", "home/nonroot/", "usr/local/bin/b"]);
        assert_eq!((got[1].2, got[1].3), (0o700, 65532));
        assert_eq!((got[2].1.as_slice(), got[2].2), (b"bin".as_slice(), 0o755));
        // The same entries in another order give the same bytes (the same digest).
        let again = layer(&[
            Entry::dir("home/nonroot", 0o700, 65532, 65532),
            Entry::file(
                "etc/passwd",
                0o644,
                b"root:x:0:0::/root:/sbin/nologin\n".to_vec(),
            ),
            Entry::file("usr/local/bin/b", 0o755, b"bin".to_vec()),
        ])
        .expect("layer");
        assert_eq!(digest(&l), digest(&again));
    }

    #[test]
    fn a_tree_keeps_files_links_and_modes_under_its_destination() {
        let dir = std::env::temp_dir().join(format!("oci-tree-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("lib")).expect("mkdir");
        std::fs::write(dir.join("lib/libx.so.1"), b"elf").expect("write");
        std::os::unix::fs::symlink("libx.so.1", dir.join("lib/libx.so")).expect("symlink");
        std::fs::write(dir.join("run.sh"), b"#!/bin/sh\n").expect("write");
        std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o750))
            .expect("chmod");
        // Modes set here, whatever the umask.
        for (path, mode) in [("", 0o755), ("lib", 0o755), ("lib/libx.so.1", 0o644)] {
            std::fs::set_permissions(dir.join(path), std::fs::Permissions::from_mode(mode))
                .expect("chmod");
        }
        let entries = tree(&dir, "/opt/views/._view/abc").expect("tree");
        let _ = std::fs::remove_dir_all(&dir);
        let l = layer(&entries).expect("layer");
        let mut archive = tar::Archive::new(l.as_slice());
        let mut seen = Vec::new();
        for e in archive.entries().expect("entries") {
            let e = e.expect("entry");
            let path = e.path().expect("path").to_string_lossy().to_string();
            let link = e
                .link_name()
                .expect("link")
                .map(|l| l.to_string_lossy().to_string());
            seen.push((path, e.header().mode().expect("mode"), link));
        }
        assert_eq!(
            seen,
            [
                ("opt/views/._view/abc/".to_string(), 0o755, None),
                ("opt/views/._view/abc/lib/".to_string(), 0o755, None),
                (
                    "opt/views/._view/abc/lib/libx.so".to_string(),
                    0o777,
                    Some("libx.so.1".to_string())
                ),
                (
                    "opt/views/._view/abc/lib/libx.so.1".to_string(),
                    0o644,
                    None
                ),
                ("opt/views/._view/abc/run.sh".to_string(), 0o750, None),
            ]
        );
    }

    #[test]
    fn an_archive_is_an_oci_layout_whose_digests_check_out() {
        let l = layer(&[Entry::file("hello", 0o644, b"hi".to_vec())]).expect("layer");
        let (bytes, manifest_digest) = archive(
            &["example.org/x:1", "example.org/x:latest"],
            &config(),
            &[&l],
        )
        .expect("archive");
        let files = entries_of(&bytes);
        let get = |path: &str| {
            files
                .iter()
                .find(|f| f.0 == path)
                .map(|f| f.1.clone())
                .unwrap_or_else(|| {
                    panic!(
                        "no {path} in {:?}",
                        files.iter().map(|f| &f.0).collect::<Vec<_>>()
                    )
                })
        };
        let blob = |d: &str| get(&format!("blobs/sha256/{}", d.trim_start_matches("sha256:")));
        assert_eq!(get("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#);
        // Every blob is stored under its own digest.
        for (path, data, _, _) in files.iter().filter(|f| f.0.starts_with("blobs/")) {
            assert_eq!(
                digest(data),
                format!("sha256:{}", &path["blobs/sha256/".len()..])
            );
        }
        let index: Value = serde_json::from_slice(&get("index.json")).expect("index");
        let names: Vec<&str> = index["manifests"]
            .as_array()
            .expect("manifests")
            .iter()
            .map(|m| {
                assert_eq!(m["digest"], manifest_digest);
                m["annotations"]["io.containerd.image.name"]
                    .as_str()
                    .expect("name")
            })
            .collect();
        assert_eq!(names, ["example.org/x:1", "example.org/x:latest"]);
        let manifest: Value = serde_json::from_slice(&blob(&manifest_digest)).expect("manifest");
        let layer_digest = manifest["layers"][0]["digest"]
            .as_str()
            .expect("layer digest");
        assert_eq!(blob(layer_digest), l);
        let image: Value = serde_json::from_slice(&blob(
            manifest["config"]["digest"].as_str().expect("config"),
        ))
        .expect("config");
        assert_eq!(image["config"]["User"], "65532:65532");
        assert_eq!(
            image["config"]["Entrypoint"],
            json!(["/usr/local/bin/flux-hub"])
        );
        assert_eq!(image["config"]["Cmd"], json!(["run"]));
        assert_eq!(image["config"]["ExposedPorts"], json!({"8080/tcp": {}}));
        assert_eq!(image["rootfs"]["diff_ids"], json!([layer_digest]));
    }
}
