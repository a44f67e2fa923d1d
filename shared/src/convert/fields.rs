//! The v1alpha1 fields (union of the v1alpha1 releases): the keys each v1alpha1 object may
//! have, so that any other key is an error naming it.

pub(super) const TOP_KEYS: &[&str] = &["apiVersion", "kind", "metadata", "spec", "status"];
pub(super) const SPEC_KEYS: &[&str] = &[
    "containers",
    "services",
    "network",
    "users",
    "jobLabels",
    "interactive",
    "launcher",
    "flux",
    "volumes",
    "logging",
    "archive",
    "shareProcessNamespace",
    "fluxRestful",
    "cleanup",
    "size",
    "maxSize",
    "tasks",
    "deadlineSeconds",
    "pod",
];
pub(super) const NETWORK_KEYS: &[&str] = &["headlessName"];
pub(super) const USER_KEYS: &[&str] = &["name", "password"];
pub(super) const LOGGING_KEYS: &[&str] = &["quiet", "strict", "debug", "timed", "zeromq", "test"];
pub(super) const ARCHIVE_KEYS: &[&str] = &["path"];
pub(super) const RESTFUL_KEYS: &[&str] = &["branch", "port", "secretKey", "username", "token"];
pub(super) const POD_KEYS: &[&str] = &[
    "annotations",
    "labels",
    "resources",
    "serviceAccountName",
    "nodeSelector",
];
pub(super) const FLUX_KEYS: &[&str] = &[
    "installRoot",
    "wrap",
    "connectTimeout",
    "optionFlags",
    "minimalService",
    "logLevel",
    "curveCert",
    "curveCertSecret",
    "scheduler",
    "mungeSecret",
    "mungeConfigMap",
    "bursting",
    "brokerConfig",
];
pub(super) const SCHEDULER_KEYS: &[&str] = &["queuePolicy"];
pub(super) const BURSTING_KEYS: &[&str] = &["leadBroker", "hostlist", "clusters"];
pub(super) const LEAD_BROKER_KEYS: &[&str] = &["address", "name", "size", "port"];
pub(super) const BURST_CLUSTER_KEYS: &[&str] = &["name", "size"];
pub(super) const VOLUME_KEYS: &[&str] = &[
    "path",
    "labels",
    "annotations",
    "claimAnnotations",
    "attributes",
    "volumeHandle",
    "volumeName",
    "storageClass",
    "class",
    "PVCclass",
    "driver",
    "delete",
    "secret",
    "secretNamespace",
    "capacity",
];
pub(super) const CONTAINER_KEYS: &[&str] = &[
    "image",
    "name",
    "cores",
    "workingDir",
    "diagnostics",
    "fluxUser",
    "ports",
    "environment",
    "secrets",
    "imagePullSecret",
    "command",
    "launcher",
    "batch",
    "batchRaw",
    "logs",
    "pullAlways",
    "runFlux",
    "volumes",
    "existingVolumes",
    "fluxOptionFlags",
    "fluxLogLevel",
    "preCommand",
    "lifeCycle",
    "resources",
    "commands",
    "securityContext",
];
pub(super) const FLUX_USER_KEYS: &[&str] = &["name", "uid"];
pub(super) const SECRET_KEYS: &[&str] = &["name", "key"];
pub(super) const MOUNT_KEYS: &[&str] = &["path", "readOnly"];
pub(super) const EXISTING_VOLUME_KEYS: &[&str] = &[
    "path",
    "configMapName",
    "items",
    "claimName",
    "secretName",
    "readOnly",
];
pub(super) const LIFE_CYCLE_KEYS: &[&str] = &["postStartExec", "preStopExec"];
pub(super) const RESOURCES_KEYS: &[&str] = &["limits", "requests"];
pub(super) const COMMANDS_KEYS: &[&str] = &[
    "runFluxAsRoot",
    "prefix",
    "init",
    "pre",
    "post",
    "workerPre",
    "brokerPre",
];
pub(super) const SECURITY_KEYS: &[&str] = &["privileged", "addCapabilities"];
/// Metadata the API server writes; meaningless (or harmful) in a manifest to apply.
pub(super) const SERVER_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
];
