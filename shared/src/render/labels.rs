//! Labels the renderer puts on what it creates.

/// The MiniCluster an object belongs to.
pub const MINICLUSTER: &str = "flux-framework.org/minicluster";
/// The Job a broker pod belongs to (the scale subresource's selector).
pub const JOB: &str = "flux-framework.org/job";
/// The headless Service (subdomain) a pod is reachable through.
pub const NETWORK: &str = "flux-framework.org/network";
/// `root` or `burst`.
pub const ROLE: &str = "flux-framework.org/role";
/// Which burst (by name) an object of a burst cluster belongs to.
pub const BURST: &str = "flux-framework.org/burst";
/// Standard app name label (the MiniCluster's name).
pub const APP_NAME: &str = "app.kubernetes.io/name";
/// Standard managed-by label.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Value of the managed-by label.
pub const MANAGER: &str = "flux-hub";
/// The label the MiniCluster docs promise on every broker pod (`job-index=<completion
/// index>`), which the hub adds once the pod exists.
pub const JOB_INDEX: &str = "job-index";
/// Completion index label Kubernetes (>= 1.28) sets on Indexed Job pods.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// Annotation on a root Job: the `spec.suspend` the hub last wrote to it (`true` or
/// `false`), so that it writes the Job's `suspend` again only when the MiniCluster's changes.
pub const SUSPEND: &str = "flux-framework.org/suspend";
/// Annotation on the Job of a burst a spoke makes: the path its brokers take to the lead
/// broker, [`LEAD_PATH_RELAY`] or [`LEAD_PATH_DIRECT`]. A change of path changes only the
/// burst's ConfigMap and relay Service, never the pod template, so running pods would keep
/// dialling the old path: the spoke replaces a Job whose annotation differs from the one
/// it renders. Not on a hand-applied burst MiniCluster's Job.
pub const LEAD_PATH: &str = "flux-framework.org/lead-path";
/// [`LEAD_PATH`] of a relayed burst: its brokers dial its relay Service.
pub const LEAD_PATH_RELAY: &str = "relay";
/// [`LEAD_PATH`] of a burst whose brokers dial the lead broker's endpoint directly.
pub const LEAD_PATH_DIRECT: &str = "direct";
/// Pod annotation naming the container `kubectl logs` and `kubectl exec` use when none is
/// given: the broker's, since the view container comes first.
pub const DEFAULT_CONTAINER: &str = "kubectl.kubernetes.io/default-container";
/// Job annotation: how its pods get the Flux view, [`VIEW_ALONGSIDE`], [`VIEW_IMAGE_VOLUME`]
/// or [`VIEW_IMAGE`]. A Job without it has the view's init container (it was made so, or by
/// a release before the view container): see [`super::live_view_mode`].
pub const VIEW: &str = "flux-framework.org/view";
/// [`VIEW`] of a Job whose pods have a view container beside the brokers.
pub const VIEW_ALONGSIDE: &str = "alongside";
/// [`VIEW`] of a Job whose pods mount the view image as an image volume.
pub const VIEW_IMAGE_VOLUME: &str = "image-volume";
/// [`VIEW`] of a Job whose pods take Flux from the application image.
pub const VIEW_IMAGE: &str = "image";
