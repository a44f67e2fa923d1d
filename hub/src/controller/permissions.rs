//! Every Kubernetes API permission the hub uses. The mock-API tests check that each
//! request the controller makes is covered by this list, and the install manifests'
//! RBAC test checks that `deploy/` grants exactly this list: so the RBAC is
//! least-privilege and complete.

/// One RBAC rule: API group, resource (with subresource, e.g. `miniclusters/status`),
/// whether it is namespaced to the hub's own namespace only, and the verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permission {
    /// API group (`""` for core).
    pub group: &'static str,
    /// Resource, or `resource/subresource`.
    pub resource: &'static str,
    /// Only in the hub's own namespace (a Role), instead of cluster-wide (a ClusterRole).
    pub own_namespace_only: bool,
    /// Verbs.
    pub verbs: &'static [&'static str],
    /// Only the objects of these names (`resourceNames`); empty: every object.
    pub resource_names: &'static [&'static str],
}

const fn cluster(
    group: &'static str,
    resource: &'static str,
    verbs: &'static [&'static str],
) -> Permission {
    Permission {
        group,
        resource,
        own_namespace_only: false,
        verbs,
        resource_names: &[],
    }
}

/// What the controller needs. Objects are created with POST and changed with server-side
/// apply, after one GET of the live object (`ownership.rs`); those a spec change drops are
/// deleted (`orphans.rs`; Jobs never are).
pub const REQUIRED: &[Permission] = &[
    // get: ScaleBurst and the autoscaler read a MiniCluster before patching a burst's size.
    cluster(
        "flux-framework.org",
        "miniclusters",
        &["get", "list", "watch", "patch", "delete"],
    ),
    cluster("flux-framework.org", "miniclusters/status", &["patch"]),
    // Owner references with blockOwnerDeletion need this where the
    // OwnerReferencesPermissionEnforcement admission plugin is on (e.g. OpenShift).
    cluster("flux-framework.org", "miniclusters/finalizers", &["update"]),
    cluster(
        "batch",
        "jobs",
        &["get", "list", "watch", "create", "patch"],
    ),
    cluster(
        "",
        "services",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    cluster(
        "",
        "configmaps",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    cluster(
        "",
        "secrets",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    cluster(
        "",
        "pods",
        &["get", "list", "watch", "create", "patch", "delete"],
    ),
    // A lead broker's node (its address), and every node's versions: whether the
    // cluster mounts the view image as a volume.
    cluster("", "nodes", &["get", "list", "watch"]),
    cluster("events.k8s.io", "events", &["create", "patch"]),
    // At start-up, whether the MiniCluster CRD is flux-hub's or another controller's
    // (`controller::coexist`): that one CRD, by name.
    Permission {
        group: "apiextensions.k8s.io",
        resource: "customresourcedefinitions",
        own_namespace_only: false,
        verbs: &["get"],
        resource_names: &[flux_shared::crd::CRD_NAME],
    },
    Permission {
        group: "coordination.k8s.io",
        resource: "leases",
        own_namespace_only: true,
        verbs: &["get", "create", "update"],
        resource_names: &[],
    },
];

/// Whether `REQUIRED` grants `verb` on `group`/`resource`.
pub fn allows(group: &str, resource: &str, verb: &str) -> bool {
    REQUIRED
        .iter()
        .any(|p| p.group == group && p.resource == resource && p.verbs.contains(&verb))
}
