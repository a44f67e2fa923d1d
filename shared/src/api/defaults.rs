//! Documented defaults of the MiniCluster API, in one place.
//!
//! One deliberate change from the reference documentation: the headless Service is named
//! after the MiniCluster, not `flux-service`, so that two MiniClusters in one namespace
//! never share (and on deletion take down) the same Service.

/// Default `spec.size`.
pub fn size() -> i32 {
    1
}

/// Default `spec.tasks`.
pub const TASKS: i32 = 1;
/// Default Job `backoffLimit`.
pub const BACKOFF_LIMIT: i32 = 100;
/// Default Job `activeDeadlineSeconds` (about a year).
pub const DEADLINE_SECONDS: i64 = 31_500_000;
/// Default `flux.connectTimeout`.
pub const CONNECT_TIMEOUT: &str = "5s";
/// Default `flux.logLevel`.
pub const LOG_LEVEL: i32 = 6;
/// Default `flux.scheduler.queuePolicy`.
pub const QUEUE_POLICY: &str = "fcfs";
/// Queue policies fluxion's qmanager accepts.
pub const QUEUE_POLICIES: &[&str] = &["fcfs", "easy", "hybrid", "conservative"];
/// Default flux view init container name.
pub const VIEW_NAME: &str = "flux-view";
/// Default flux view image.
pub const VIEW_IMAGE: &str = "ghcr.io/converged-computing/flux-view-ubuntu:tag-noble";
/// Default flux view image for `flux.arch: arm` (ARM64 nodes).
pub const VIEW_IMAGE_ARM: &str = "ghcr.io/converged-computing/flux-view-ubuntu:arm-jammy";
/// Accepted `flux.arch` values for ARM64 and for x86-64.
pub const ARCH_ARM: &[&str] = &["arm", "arm64", "aarch64"];
/// Accepted `flux.arch` values for x86-64.
pub const ARCH_X86: &[&str] = &["amd64", "x86_64"];
/// Default mount path of the flux view and configuration.
pub const MOUNT_PATH: &str = "/mnt/flux";
/// Default batch output directory.
pub const BATCH_LOGS: &str = "/tmp/fluxout";
/// Default Flux user name.
pub const FLUX_USER_NAME: &str = "flux";
/// Default Flux user id.
pub const FLUX_USER_UID: i64 = 1000;
/// Default cores per pod declared in R.
pub const CORES: i32 = 1;
/// Seconds a leaving worker broker waits for the jobs on its node (`flux.drainTimeoutSeconds`).
pub const DRAIN_TIMEOUT_SECONDS: i32 = 300;
/// Seconds a broker gets to stop after its drain (added to the drain timeout for the pod's
/// `terminationGracePeriodSeconds`; Kubernetes' own default grace).
pub const BROKER_STOP_SECONDS: i64 = 30;
/// `autoscale.scaleUpAfterSeconds`.
pub const SCALE_UP_AFTER_SECONDS: i32 = 30;
/// `autoscale.scaleDownAfterSeconds`.
pub const SCALE_DOWN_AFTER_SECONDS: i32 = 300;
/// `autoscale.maxStep`.
pub const AUTOSCALE_MAX_STEP: i32 = 4;
/// `autoscale.intervalSeconds`.
pub const AUTOSCALE_INTERVAL_SECONDS: i32 = 10;
/// Port of the queue reporter the lead broker runs for bursting on demand.
pub const REPORTER_PORT: i32 = 8051;
/// Port the brokers listen on.
pub const BROKER_PORT: i32 = 8050;
/// Default pod restart policy.
pub const RESTART_POLICY: &str = "OnFailure";
/// Mount path of the emptyDir volumes a container declares.
pub const EMPTY_DIR_PATH: &str = "/dev/shm";
