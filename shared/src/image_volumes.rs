//! Whether a cluster mounts images as volumes (Kubernetes' ImageVolume), the fastest way for
//! broker pods to get the Flux view ([`crate::api::ViewMode::ImageVolume`]). Known from
//! versions, since a cluster without it fails late: an API server whose feature gate is
//! off drops the volume's source (the Job is refused), a kubelet whose gate is off leaves
//! the pod waiting for its volume, and a runtime without it starts the containers without
//! the volume. The gate is on by default from Kubernetes 1.35 in the API server and the
//! kubelet; the runtime needs containerd 2.1 or CRI-O 1.31.
//!
//! The versions are parsed here rather than with `semver`: nodes report distribution
//! versions (`1.7.24~ds1`, `2.1.9+unknown`, `v1.35.0-gke.1200`) that are not all semver,
//! and only the major and minor numbers (and a Kubernetes pre-release) matter.

use k8s_openapi::api::core::v1::Node;

/// The first Kubernetes minor release with ImageVolume on by default.
const KUBERNETES: (u64, u64) = (1, 35);
/// The first release of each container runtime that mounts images as volumes.
const RUNTIMES: &[(&str, (u64, u64))] = &[("containerd", (2, 1)), ("cri-o", (1, 31))];

/// The major and minor numbers of a version such as `v1.35.0-gke.1`, `2.1.9+unknown` or
/// `1.31`.
fn major_minor(version: &str) -> Option<(u64, u64)> {
    let version = version.strip_prefix('v').unwrap_or(version);
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor: String = parts
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

/// Whether a Kubernetes version is a pre-release (`-alpha.N`, `-beta.N`, `-rc.N`): those of
/// the first minor release may still have the gate off, as it became default during their
/// cycle. A vendor's suffix (`-gke.1200`, `-eks-...`) is a release.
fn kubernetes_pre_release(version: &str) -> bool {
    let Some((_, rest)) = version.split_once('-') else {
        return false;
    };
    ["alpha", "beta", "rc"].iter().any(|p| rest.starts_with(p))
}

/// Whether a Kubernetes component of version `version` (an API server's `gitVersion`, a
/// kubelet's `kubeletVersion`) has ImageVolume on by default.
pub fn kubernetes_has_image_volumes(version: &str) -> bool {
    match major_minor(version) {
        Some(v) if v > KUBERNETES => true,
        Some(v) if v == KUBERNETES => !kubernetes_pre_release(version),
        _ => false,
    }
}

/// Whether a container runtime version as a node reports it (`containerd://2.1.9`,
/// `cri-o://1.31.0`) mounts images as volumes.
pub fn runtime_has_image_volumes(runtime: &str) -> bool {
    let Some((name, version)) = runtime.split_once("://") else {
        return false;
    };
    RUNTIMES
        .iter()
        .any(|(n, first)| *n == name && major_minor(version).is_some_and(|v| v >= *first))
}

/// What a node says of image volumes: `None` when it does not count (cordoned: no new pod
/// lands there), else whether its kubelet and runtime mount images as volumes.
pub fn node_has_image_volumes(node: &Node) -> Option<bool> {
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        return None;
    }
    let info = node.status.as_ref().and_then(|s| s.node_info.as_ref());
    Some(info.is_some_and(|i| {
        kubernetes_has_image_volumes(&i.kubelet_version)
            && runtime_has_image_volumes(&i.container_runtime_version)
    }))
}

/// Whether a cluster mounts images as volumes: its API server does, and so does every node
/// that counts, of which there is at least one (each node's
/// [`node_has_image_volumes`]). Any node may run a broker, so one without them is enough
/// to say no.
pub fn cluster_has_image_volumes(
    api_server_version: &str,
    nodes: impl IntoIterator<Item = Option<bool>>,
) -> bool {
    if !kubernetes_has_image_volumes(api_server_version) {
        return false;
    }
    let mut counted = 0usize;
    for node in nodes.into_iter().flatten() {
        if !node {
            return false;
        }
        counted += 1;
    }
    counted > 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus, NodeSystemInfo};

    fn node(kubelet: &str, runtime: &str, cordoned: bool) -> Node {
        Node {
            spec: Some(NodeSpec {
                unschedulable: cordoned.then_some(true),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                node_info: Some(NodeSystemInfo {
                    kubelet_version: kubelet.into(),
                    container_runtime_version: runtime.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn kubernetes_versions_from_1_35_have_the_gate_on() {
        for (version, has) in [
            ("v1.35.0", true),
            ("v1.35.2-gke.1200", true),
            ("v1.35.1-eks-abc123", true),
            ("v1.36.0-alpha.1", true),
            ("v2.0.0", true),
            // The testbed's build: the gate's default was still off.
            ("v1.35.0-alpha.0+awborg.fea8a54f4", false),
            ("v1.35.0-rc.1", false),
            ("v1.34.2", false),
            ("v1.33.0", false),
            ("", false),
            ("garbage", false),
        ] {
            assert_eq!(kubernetes_has_image_volumes(version), has, "{version}");
        }
    }

    #[test]
    fn runtimes_from_containerd_2_1_and_cri_o_1_31_mount_images() {
        for (runtime, has) in [
            ("containerd://2.1.9+unknown", true),
            ("containerd://2.2.0", true),
            ("containerd://3.0.0", true),
            ("cri-o://1.31.0", true),
            ("cri-o://1.33.2", true),
            ("containerd://2.0.5", false),
            ("containerd://1.7.24~ds1", false),
            ("containerd://1.6.20~ds1", false),
            ("cri-o://1.30.4", false),
            ("docker://27.0.1", false),
            ("fake://1.0", false),
            ("containerd:2.1.0", false),
            ("", false),
        ] {
            assert_eq!(runtime_has_image_volumes(runtime), has, "{runtime}");
        }
    }

    #[test]
    fn a_cordoned_node_does_not_count_and_another_runtime_says_no() {
        assert_eq!(
            node_has_image_volumes(&node("v1.35.0", "containerd://2.1.0", false)),
            Some(true)
        );
        assert_eq!(
            node_has_image_volumes(&node("v1.34.0", "containerd://2.1.0", false)),
            Some(false)
        );
        assert_eq!(
            node_has_image_volumes(&node("v1.35.0", "containerd://1.7.0", false)),
            Some(false)
        );
        assert_eq!(
            node_has_image_volumes(&node("v1.34.0", "containerd://1.7.0", true)),
            None
        );
        assert_eq!(node_has_image_volumes(&Node::default()), Some(false));
    }

    #[test]
    fn a_cluster_has_image_volumes_when_its_api_server_and_every_counted_node_do() {
        let yes = Some(true);
        assert!(cluster_has_image_volumes("v1.35.0", [yes, yes, None]));
        assert!(!cluster_has_image_volumes("v1.34.0", [yes, yes]));
        assert!(!cluster_has_image_volumes("v1.35.0", [yes, Some(false)]));
        // No node to run on says nothing.
        assert!(!cluster_has_image_volumes("v1.35.0", [None]));
        assert!(!cluster_has_image_volumes("v1.35.0", []));
    }
}
