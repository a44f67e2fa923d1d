//! Checks shared by the hub's and the spoke's install-manifest tests.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, PodSpec};

/// The value of `--flag VALUE` or `--flag=VALUE` in `args`.
pub fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter().enumerate().find_map(|(i, a)| {
        if a == flag {
            args.get(i + 1).map(String::as_str)
        } else {
            a.strip_prefix(flag).and_then(|rest| rest.strip_prefix('='))
        }
    })
}

/// `--ca`, `--cert` and `--key` of container `c` name files of the Secret `secret`,
/// mounted read-only and required, readable by the pod's group `uid` (fsGroup) and by
/// nobody else.
pub fn assert_certificates_from_secret(pod: &PodSpec, c: &Container, secret: &str, uid: i64) {
    let args = c.args.as_deref().unwrap_or_default();
    let (volume, source) = pod
        .volumes
        .iter()
        .flatten()
        .find_map(|v| {
            v.secret
                .as_ref()
                .filter(|s| s.secret_name.as_deref() == Some(secret))
                .map(|s| (v.name.clone(), s.clone()))
        })
        .unwrap_or_else(|| panic!("a volume of the Secret {secret}"));
    assert_ne!(
        source.optional,
        Some(true),
        "{secret}: required, the process cannot run without its certificate"
    );
    let mode = source.default_mode.expect("a defaultMode");
    assert_eq!(
        mode & 0o007,
        0,
        "the key is not world-readable (mode {mode:o})"
    );
    assert_eq!(mode & 0o040, 0o040, "group-readable (mode {mode:o})");
    assert_eq!(
        pod.security_context.as_ref().and_then(|s| s.fs_group),
        Some(uid),
        "fsGroup lets user {uid} read the certificate files"
    );
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|vm| vm.name == volume)
        .expect("the TLS volume is mounted");
    assert_eq!(mount.read_only, Some(true), "mounted read-only");
    let items: BTreeMap<String, String> = source
        .items
        .iter()
        .flatten()
        .map(|i| (i.path.clone(), i.key.clone()))
        .collect();
    for flag in ["--ca", "--cert", "--key"] {
        let path = flag_value(args, flag).unwrap_or_else(|| panic!("{flag} is set"));
        let file = Path::new(path)
            .strip_prefix(&mount.mount_path)
            .unwrap_or_else(|_| panic!("{flag}={path} is not under {}", mount.mount_path))
            .to_str()
            .expect("UTF-8 path");
        assert!(
            items.is_empty() || items.contains_key(file),
            "{flag}={path}: the Secret volume projects no {file} (items {items:?})"
        );
    }
}
