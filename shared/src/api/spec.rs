//! The `MiniCluster` custom resource (`flux-framework.org/v1alpha2`).
//!
//! Field names and shapes follow the MiniCluster reference documentation. Optional
//! fields stay `Option` here so that "absent" and "set to the default" are distinct;
//! the documented defaults live in the accessor methods and in [`super::defaults`], so
//! there is exactly one place that decides them.
//!
//! Size: the API types and their field documentation (which becomes the CRD's schema
//! descriptions), kept together as the reference docs present them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PodSecurityContext, ResourceRequirements, SecurityContext, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::defaults;
use super::status::MiniClusterStatus;

/// Desired state of a MiniCluster: an Indexed Job of `size` pods forming one Flux instance.
// kube's `printcolumn(...)` repeats its keys once per column.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "flux-framework.org",
    version = "v1alpha2",
    kind = "MiniCluster",
    plural = "miniclusters",
    singular = "minicluster",
    shortname = "mc",
    namespaced,
    status = "MiniClusterStatus",
    derive = "PartialEq",
    doc = "A MiniCluster is a Flux instance running as an Indexed Job, optionally bursting to other clusters.",
    scale(
        spec_replicas_path = ".spec.size",
        status_replicas_path = ".status.size",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Size",
        type_ = "integer",
        json_path = ".spec.size",
        description = "Requested number of broker pods"
    ),
    printcolumn(
        name = "Max",
        type_ = "integer",
        json_path = ".status.maximumSize",
        description = "Largest size the instance can scale to"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.brokers",
        description = "Brokers ready / total"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Lifecycle phase"
    ),
    printcolumn(
        name = "Bursts",
        type_ = "string",
        json_path = ".status.burstsRunning",
        description = "Bursts running / declared"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    cel,
    validation = Rule::new("!has(self.maxSize) || self.maxSize >= self.size").message("spec.maxSize: must be greater than or equal to spec.size"),
    validation = Rule::new("!has(self.minSize) || self.minSize <= self.size").message("spec.minSize: must be less than or equal to spec.size"),
    validation = Rule::new("self.containers.size() == 1 || self.containers.filter(c, has(c.runFlux) && c.runFlux).size() == 1 || (!self.containers.exists(c, has(c.runFlux) && c.runFlux) && self.containers.filter(c, !has(c.runFlux)).size() == 1)").message("spec.containers: exactly one container must run Flux: set runFlux: true on it, or runFlux: false on every other container"),
    validation = Rule::new("!has(self.flux) || !has(self.flux.leadBroker) || !has(self.flux.bursting) || !has(self.flux.bursting.leadBroker)").message("spec.flux.leadBroker: set the lead broker either under spec.flux or under spec.flux.bursting, not both"),
)]
#[serde(rename_all = "camelCase")]
pub struct MiniClusterSpec {
    /// Containers of every pod. Exactly one of them runs Flux (`runFlux`); a single
    /// container always does.
    #[schemars(length(min = 1, max = 16))]
    #[x_kube(validation = Rule::new("self.size() == 1 || self.all(c, (has(c.name) && size(c.name) > 0) || (has(c.runFlux) && c.runFlux) || (!has(c.runFlux) && !self.exists(d, has(d.runFlux) && d.runFlux)))").message("spec.containers: every container that does not run Flux needs a name"))]
    pub containers: Vec<MiniClusterContainer>,

    /// Service containers run in one extra pod next to the Job (`<name>-services`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub services: Vec<MiniClusterContainer>,

    /// Networking options for the broker pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,

    /// Labels added to the Job object (not to its pods).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub job_labels: BTreeMap<String, String>,

    /// Start the brokers without running a command; the instance stays up for `flux proxy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interactive: Option<bool>,

    /// Run the flux-running container's command directly under `flux start` (no
    /// `flux submit`), for tools that submit their own jobs. Same as the container-level
    /// `launcher`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<bool>,

    /// Flux options shared by every broker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flux: Option<FluxSpec>,

    /// Output modes of the entrypoint scripts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<LoggingSpec>,

    /// Flux archive to restore at start-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<Archive>,

    /// Share one process namespace between the containers of a pod. Broker pods whose
    /// containers are never restarted (`restartPolicy: Never`) share one unless this is
    /// `false`, which then brings back the view's init container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_process_namespace: Option<bool>,

    /// Create the Job suspended: no broker pod starts until the Job is resumed, by a queue
    /// manager such as Kueue (which admits a Job by resuming it) or by changing this field
    /// to `false`. The hub writes the Job's `suspend` only when this field changes, so a
    /// suspend or resume of another manager stands; without the field the hub never
    /// writes it. The root Job only: bursts follow their own size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// Delete the MiniCluster once the lead broker pod has finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleanup: Option<bool>,

    /// Number of broker pods; also the number of brokers Flux waits for before it starts.
    /// At most 16384 (`docs/limits.md`).
    #[serde(default = "defaults::size")]
    #[schemars(range(min = 1, max = super::MAX_BROKERS))]
    pub size: i32,

    /// Largest size the MiniCluster may scale to; every host up to it is declared to Flux.
    /// Defaults to `size`. At most 16384, root and bursts together (`docs/limits.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = super::MAX_BROKERS))]
    pub max_size: Option<i32>,

    /// Broker quorum: how many brokers must be online before the instance starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = super::MAX_BROKERS))]
    pub min_size: Option<i32>,

    /// Job `backoffLimit` (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub backoff_limit: Option<i32>,

    /// Tasks for the submitted command: more tasks than nodes gives `-N size -n tasks`,
    /// fewer gives `-n tasks`, `0` gives only `-N size`. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub tasks: Option<i32>,

    /// Job `activeDeadlineSeconds` (default 31500000, about a year).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub deadline_seconds: Option<i64>,

    /// Settings of every pod of the Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodSpec>,
}

/// Networking of the broker pods.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    /// Name of the headless Service (and pod subdomain). Defaults to the MiniCluster's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headless_name: Option<String>,

    /// Drop the one-pod-per-node affinity and anti-affinity rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_affinity: Option<bool>,
}

/// Flux settings shared by every broker of the instance.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct FluxSpec {
    /// The flux view container that provides Flux to the application container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<FluxContainer>,

    /// Node architecture: `arm` (or `arm64`, `aarch64`) picks the ARM build of the default
    /// flux view image; `amd64` / `x86_64` keep the default. An explicit image wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,

    /// Replaces `flux submit` in submit mode (for example `flux mini submit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submit_command: Option<String>,

    /// Passed as `--wrap=<value>` to `flux start` on every broker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrap: Option<String>,

    /// ZeroMQ connect timeout (`tbon.connect_timeout`); default `5s`, empty string to omit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout: Option<String>,

    /// Extra flags for `flux submit` / `flux batch`, e.g. `-ompi=openmpi@5`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub option_flags: Option<String>,

    /// Expose only the lead broker through a ClusterIP Service instead of a headless one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimal_service: Option<bool>,

    /// Do not set the broker's `local-uri` socket path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_socket: Option<bool>,

    /// Tree-based overlay network topology (`tbon.topo`), e.g. `kary:2` or `binomial`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<String>,

    /// Sidecar containers do not wait for the broker socket before running their command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_wait_socket: Option<bool>,

    /// Worker brokers exit after their broker stops instead of restarting it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete_workers: Option<bool>,

    /// How long a worker broker that is leaving (a scale-down, a burst shrinking or going,
    /// an eviction) waits in its pod's preStop hook for the Flux jobs on its node: it is
    /// drained first, so no new job lands there. Default 300; 0 turns draining off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub drain_timeout_seconds: Option<i32>,

    /// Broker stderr log level (`log-stderr-level`), default 6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 7))]
    pub log_level: Option<i32>,

    /// A CURVE certificate (zcert text) to use instead of a generated one; needed to join
    /// brokers of clusters that do not share a hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub curve_cert: Option<String>,

    /// Scheduler settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<FluxScheduler>,

    /// Burst clusters this instance declares, or the lead broker it joins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bursting: Option<Bursting>,

    /// The lead broker to join (marks a burst MiniCluster). Also accepted under
    /// `flux.bursting.leadBroker`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lead_broker: Option<LeadBroker>,

    /// A complete broker.toml that replaces the generated one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_config: Option<String>,

    /// Extra environment exported by `flux-view.sh` for shells that use the instance.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
}

/// The flux view: by default the view image mounted as an image volume where the cluster
/// has them, else a container of the view image beside the brokers that copies the view
/// into the pod while they start; with `initContainer`, an init container that copies it
/// before they start.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct FluxContainer {
    /// Flux is already installed in the application image: no view.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable: Option<bool>,

    /// Copy the view with an init container before the brokers start, as the reference
    /// operator's pod does (and the broker copies the software tree back), instead of a
    /// view container copying it while they start. Applies to Jobs created from then on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container: Option<bool>,

    /// Mount the view image as an image volume (Kubernetes' ImageVolume: Kubernetes 1.35+,
    /// or the feature gate, and containerd 2.1+ or CRI-O 1.31+ on the nodes): no view
    /// container and no copy. Unset: where the cluster has them, known from the versions
    /// of its API server and of every node the brokers may run on. `true`: always (a
    /// cluster without them refuses the Job, or its pods do not start). `false`: never.
    /// Applies to Jobs created from then on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_volume: Option<bool>,

    /// View container name (default `flux-view`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// View container working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,

    /// PYTHONPATH entry for Flux's Python bindings (detected when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_path: Option<String>,

    /// View container resources. Beside the brokers, the view container lives as long as
    /// the pod and sleeps once it copied the view: a fraction of a CPU keeps a Guaranteed
    /// pod from pinning a whole one to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Pull secret for the view image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secret: Option<String>,

    /// View image (default `ghcr.io/converged-computing/flux-view-ubuntu:tag-noble`, or
    /// `...:arm-jammy` with `flux.arch: arm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,

    /// Always pull the view image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_always: Option<bool>,

    /// View container security context. When unset, the view container beside the
    /// brokers takes the flux-running container's: the copy belongs to their user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,

    /// Where the view and the Flux configuration are mounted (default `/mnt/flux`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_path: Option<String>,
}

/// Scheduler settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct FluxScheduler {
    /// Keep `sched-simple` instead of asking for fluxion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simple: Option<bool>,

    /// Fluxion queue policy: `fcfs` (default), `easy`, `hybrid` or `conservative`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_policy: Option<String>,
}

/// Bursting: the burst clusters a root instance declares, or the lead broker a burst joins.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bursting {
    /// The lead broker to join (marks a burst MiniCluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lead_broker: Option<LeadBroker>,

    /// A verbatim hostlist for every rank (local and remote), replacing the generated
    /// one; cannot be combined with `clusters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostlist: Option<String>,

    /// Root instance with burst clusters: the address (IP or DNS name) at which burst
    /// brokers reach the lead broker's NodePort. Default: the hub's `--lead-broker-address`,
    /// else the ExternalIP, then InternalIP, of the node running the lead broker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lead_address: Option<String>,

    /// Root instance with burst clusters: a fixed node port for the lead broker's NodePort
    /// Service (for firewall rules); default: one the cluster allocates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub lead_node_port: Option<i32>,

    /// Burst clusters, in rank order after the root hosts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub clusters: Vec<BurstCluster>,

    /// Bursting on demand (off when absent): the hub grows bursts, in declared order and
    /// within each one's `maxSize`, when jobs wait for more nodes than the instance has,
    /// and shrinks a burst (its leaving brokers drain first) after its nodes were idle.
    /// The hub then owns each burst's `size`, between its `minSize` and `maxSize`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<Autoscale>,
}

/// Settings of bursting on demand.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Autoscale {
    /// Grow when a job has waited this long for nodes the instance does not have
    /// (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub scale_up_after_seconds: Option<i32>,

    /// Shrink a burst after its highest nodes were idle this long (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub scale_down_after_seconds: Option<i32>,

    /// The most brokers one decision adds to or removes from a burst (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_step: Option<i32>,

    /// How often the hub reads the instance's queue from the lead broker (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub interval_seconds: Option<i32>,
}

/// One burst cluster: hosts `<name>-0 .. <name>-(maxSize-1)`, of which the first `size`
/// run brokers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    cel,
    validation = Rule::new("!has(self.maxSize) || !has(self.size) || self.size <= self.maxSize").message("spec.flux.bursting.clusters[].size: must be less than or equal to its maxSize"),
    validation = Rule::new("!has(self.cluster) || !has(self.candidates)").message("spec.flux.bursting.clusters[].candidates: name either one cluster or candidates, not both"),
)]
pub struct BurstCluster {
    /// Host prefix and Job name of the burst (default `burst-<position>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// Number of brokers in the burst (default: the MiniCluster's size). May move
    /// between 0 and `maxSize` while the MiniCluster runs; 0 runs no broker pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = super::MAX_BROKERS))]
    pub size: Option<i32>,

    /// Hosts the burst declares (default: its `size`), fixed when the MiniCluster is
    /// first reconciled: the ranks every broker of the instance knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = super::MAX_BROKERS))]
    pub max_size: Option<i32>,

    /// Spoke cluster that runs this burst (default: the burst's name, unless `candidates`
    /// are named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,

    /// Spoke clusters that may run this burst, in order of preference (instead of one
    /// `cluster`). The hub places the burst on the first that is connected, admits it
    /// (its owner's policy) and has room for its brokers, and moves it to the next when
    /// that one refuses it, places none of its pods in time, or goes away, as long as none
    /// of its brokers has started. A burst whose brokers run stays where it is until it is
    /// scaled to 0. `status.bursts[].placement` says where it went and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub candidates: Vec<BurstCandidate>,

    /// With `autoscale`: the fewest brokers the hub shrinks this burst to (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = super::MAX_BROKERS))]
    pub min_size: Option<i32>,

    /// `true`: the burst's brokers reach the lead broker through their spoke, which
    /// carries each connection to the hub over its own connection to the hub, and the hub
    /// to the lead broker inside this cluster. Nothing but the spoke's connection crosses
    /// the clusters: no NodePort, no firewall rule, no `leadAddress`. `false`: the brokers
    /// connect to the lead broker's NodePort at `leadAddress`. Unset (the default): the hub
    /// chooses for each placement, from what the burst's spoke says of how its brokers
    /// reach the root's nodes, and switches a direct burst whose spoke cannot reach the
    /// lead broker to the relay before any of its brokers joined;
    /// `status.bursts[].pathReason` says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay: Option<bool>,
}

/// One entry of a burst's `candidates`: a spoke by name, or every spoke with some labels.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    cel,
    validation = Rule::new("has(self.cluster) != has(self.matchLabels)").message("spec.flux.bursting.clusters[].candidates[]: set exactly one of cluster and matchLabels"),
)]
pub struct BurstCandidate {
    /// A spoke cluster, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,

    /// Every spoke whose labels (`flux-spoke run --label`, set by `flux-hub join
    /// --label`) include all of these, in name order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub match_labels: Option<BTreeMap<String, String>>,
}

/// The lead broker a burst MiniCluster joins.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeadBroker {
    /// Address (IP or DNS name) at which the lead broker is reachable from this cluster.
    pub address: String,

    /// Name of the lead MiniCluster (its hosts are `<name>-<index>`).
    pub name: String,

    /// Number of hosts the lead declares (its `maxSize`).
    #[schemars(range(min = 1, max = super::MAX_BROKERS))]
    pub size: i32,

    /// Port at which the lead broker is reachable (default 8050; usually a NodePort).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,

    /// A verbatim hostlist for every rank (same as `flux.bursting.hostlist`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostlist: Option<String>,
}

/// Output modes of the entrypoint scripts.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoggingSpec {
    /// Print only the job's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet: Option<bool>,

    /// Stop at the first failing command (`set -eEu -o pipefail`); default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,

    /// Time `flux start` and the main command with `/usr/bin/time`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed: Option<bool>,

    /// Verbose `flux submit` / `flux batch` (`-vvv`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug: Option<bool>,

    /// Log ZeroMQ socket events (`tbon.zmqdebug`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zeromq: Option<bool>,
}

/// A Flux archive (from `flux dump`) restored at start-up when the file exists.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Archive {
    /// Path of the archive inside the flux-running container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Settings of every pod of the Job (and, where they apply, of the services pod).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    /// Pod annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,

    /// Pod labels (the operator's own labels win on conflict).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,

    /// Pod overhead; Kubernetes only accepts it together with a `runtimeClassName` whose
    /// RuntimeClass defines the same overhead.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, Quantity>,

    /// Custom scheduler for the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,

    /// Service account of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// Pod restart policy (default `OnFailure`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,

    /// RuntimeClass of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,

    /// Mount the service account token (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automount_service_account_token: Option<bool>,

    /// Node selector of the pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Required node affinity: each label must have one of the listed values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_affinity: BTreeMap<String, Vec<String>>,

    /// Tolerations of the pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// DNS policy of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_policy: Option<String>,

    /// Use the host's IPC namespace.
    #[serde(default, rename = "hostIPC", skip_serializing_if = "Option::is_none")]
    pub host_ipc: Option<bool>,

    /// Use the host's PID namespace.
    #[serde(default, rename = "hostPID", skip_serializing_if = "Option::is_none")]
    pub host_pid: Option<bool>,

    /// Pod security context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
}

/// A container of the broker pods (or of the services pod).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MiniClusterContainer {
    /// Container name; required for containers that do not run Flux. The flux-running
    /// container is always named after the MiniCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// Container image.
    pub image: String,

    /// The command. For the flux-running container it runs under Flux (see `launcher`,
    /// `batch`); for others it runs once the broker socket exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,

    /// Working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,

    /// Name of an existing image pull secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secret: Option<String>,

    /// Always pull the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_always: Option<bool>,

    /// Image pull policy (`pullAlways` wins; default `IfNotPresent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,

    /// Container ports (TCP); sidecars with ports also get a Service of their own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<i32>,

    /// Environment variables.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,

    /// Environment variables read from existing Secrets, keyed by variable name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, SecretKeyRef>,

    /// Run the command directly under `flux start` (it submits its own jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<bool>,

    /// Treat each line of the command as one job of a `flux batch` script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<bool>,

    /// With `batch`: use the lines verbatim instead of wrapping each in `flux submit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_raw: Option<bool>,

    /// Directory for batch job output (default `/tmp/fluxout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<String>,

    /// This container runs the Flux broker. Unset means true (the reference's default):
    /// with one container it always runs Flux; with several, exactly one runs it, either
    /// the one that sets `true` or, when none does, the only one that leaves it unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_flux: Option<bool>,

    /// Keep the image's own entrypoint (sidecars only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_wrap_entrypoint: Option<bool>,

    /// Volumes that already exist (or emptyDirs), keyed by volume name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub volumes: BTreeMap<String, ContainerVolume>,

    /// Lifecycle hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub life_cycle: Option<LifeCycle>,

    /// Resource requests and limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Hooks and a custom script for the entrypoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commands: Option<Commands>,

    /// Container security context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,

    /// Cores per pod declared to Flux in the resource set R (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub cores: Option<i32>,

    /// The Flux user, created in the container when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flux_user: Option<FluxUser>,

    /// Run Flux diagnostics and keep the instance up instead of the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<bool>,
}

/// An environment variable taken from a key of an existing Secret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Key in the Secret.
    pub key: String,
}

/// A volume mounted into a container.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerVolume {
    /// Mount path in the container (emptyDir volumes mount at `/dev/shm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,

    /// A directory on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,

    /// An existing ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,

    /// ConfigMap keys to project, key -> relative path.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub items: BTreeMap<String, String>,

    /// An existing PersistentVolumeClaim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,

    /// An existing Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,

    /// Mount read-only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,

    /// An emptyDir volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_dir: Option<bool>,

    /// emptyDir medium: `memory` for tmpfs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_dir_medium: Option<String>,

    /// emptyDir size limit (a quantity such as `64Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub empty_dir_size_limit: Option<String>,

    /// A CSI driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi_driver: Option<String>,

    /// CSI volume attributes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub csi_driver_attributes: BTreeMap<String, String>,
}

/// Container lifecycle hooks; each value is run with `/bin/sh -c`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct LifeCycle {
    /// Run after the container starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_start_exec: Option<String>,

    /// Run before the container stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_stop_exec: Option<String>,
}

/// Shell snippets run at fixed points of the entrypoint.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Commands {
    /// First thing the entrypoint runs, before Flux is on the PATH.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init: Option<String>,

    /// Runs on every broker once the configuration is in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre: Option<String>,

    /// Runs on the lead broker only, before `flux start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_pre: Option<String>,

    /// Runs on worker brokers only, before `flux start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_pre: Option<String>,

    /// Runs in sidecar containers before their command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_pre: Option<String>,

    /// Runs after the broker (or the sidecar command) exits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post: Option<String>,

    /// Wrapper placed in front of the main command (e.g. `fusion`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,

    /// A script written to a file and used as the command (exclusive with `command`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
}

/// The Flux user.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct FluxUser {
    /// User name (default `flux`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// Numeric user id (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub uid: Option<i64>,
}
