//! The Kubernetes permissions of a spoke: one list per form of its RBAC. The spoke's
//! mock-API tests check every request it makes against them; `flux-hub join` generates
//! the spoke's Roles from them and `deploy/spoke/rbac.yaml` grants [`REQUIRED`] (tests
//! check both).

use std::collections::BTreeMap;

use super::policy::{Level, POD_SECURITY_ENFORCE, POD_SECURITY_WARN_AUDIT};

/// One RBAC rule the spoke needs: API group (`""` for core), resource, verbs.
pub type Permission = (&'static str, &'static str, &'static [&'static str]);

/// Every Kubernetes permission the spoke uses, cluster-wide. New objects are created
/// (`create`), the spoke's own updated with server-side apply (`patch`); a name not known
/// to be the spoke's is checked first (`get`); owned objects are found with metadata-only
/// lists; Jobs are also watched (status reports). `deploy/spoke/rbac.yaml`
/// grants exactly this (a test checks), and the mock-API tests check that every request
/// is covered.
pub const REQUIRED: &[Permission] = &[
    ("", "namespaces", &["get", "create"]),
    NAMESPACED_REQUIRED[0],
    NAMESPACED_REQUIRED[1],
    NAMESPACED_REQUIRED[2],
    NAMESPACED_REQUIRED[3],
    NAMESPACED_REQUIRED[4],
    NAMESPACED_REQUIRED[5],
];

/// What a spoke with per-namespace RBAC (`--namespaces`) needs in each of its
/// namespaces (a Role there): [`REQUIRED`] without the cluster-scoped namespaces, which it
/// may only read, by name ([`NAMESPACE_READ`]), and never create (`flux-hub join` creates
/// them with the policy's Pod Security level).
pub const NAMESPACED_REQUIRED: &[Permission] = &[
    (
        "",
        "configmaps",
        &["get", "list", "create", "patch", "delete"],
    ),
    ("", "secrets", &["get", "list", "create", "patch", "delete"]),
    (
        "",
        "services",
        &["get", "list", "create", "patch", "delete"],
    ),
    (
        "batch",
        "jobs",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    ("", "pods", &["list", "delete"]),
    // A relayed burst's Service points at the spoke's relay listener (server-side apply;
    // it goes with its Service).
    ("discovery.k8s.io", "endpointslices", &["create", "patch"]),
];

/// What the spoke reads to measure its cluster's room for the hub's placement
/// ([`super::room`]), cluster-wide in both forms of its RBAC (a ClusterRole of its own,
/// `flux-spoke-room`): its nodes' allocatable resources and the requests of the pods bound
/// to them. `flux-hub join --no-room` leaves it out (the spoke then runs with `--no-room`).
pub const ROOM_PERMISSIONS: &[Permission] = &[
    ("", "nodes", &["list", "watch"]),
    ("", "pods", &["list", "watch"]),
];

/// What a spoke with per-namespace RBAC may do to the namespaces themselves, limited by
/// `resourceNames` to its own: read their Pod Security labels.
pub const NAMESPACE_READ: Permission = ("", "namespaces", &["get"]);

/// What the spoke needs besides [`REQUIRED`] in its own namespace only: read and watch
/// its policy ConfigMap, and write Events about itself on its Pod (a hub whose protocol
/// revision it does not serve).
pub const POLICY_PERMISSIONS: &[Permission] = &[
    ("", "configmaps", &["get", "list", "watch"]),
    ("events.k8s.io", "events", &["create", "patch"]),
];

/// The labels of a namespace the spoke creates: Pod Security `level` enforced, warned and
/// audited.
pub fn namespace_labels(level: Level) -> BTreeMap<String, String> {
    std::iter::once(POD_SECURITY_ENFORCE)
        .chain(POD_SECURITY_WARN_AUDIT)
        .map(|k| (k.to_string(), level.as_str().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_namespace_permissions_are_the_cluster_wide_ones_but_namespaces() {
        let cluster: Vec<&Permission> = REQUIRED.iter().filter(|p| p.1 != "namespaces").collect();
        let namespaced: Vec<&Permission> = NAMESPACED_REQUIRED.iter().collect();
        assert_eq!(cluster, namespaced);
        let namespaces = REQUIRED.iter().find(|p| p.1 == "namespaces");
        assert_eq!(
            namespaces,
            Some(&("", "namespaces", &["get", "create"][..]))
        );
        assert_eq!(NAMESPACE_READ, ("", "namespaces", &["get"][..]));
    }
}
