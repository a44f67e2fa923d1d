//! Accessors that apply the documented defaults to an optional field, so the planner,
//! validator and renderer agree on every default.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use super::defaults;
use super::spec::*;

static NO_FLUX: LazyLock<FluxSpec> = LazyLock::new(FluxSpec::default);
static NO_LOGGING: LazyLock<LoggingSpec> = LazyLock::new(LoggingSpec::default);
static NO_VIEW: LazyLock<FluxContainer> = LazyLock::new(FluxContainer::default);
static NO_POD: LazyLock<PodSpec> = LazyLock::new(PodSpec::default);
static NO_COMMANDS: LazyLock<Commands> = LazyLock::new(Commands::default);

/// A burst cluster with its defaults applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedBurst {
    /// Host prefix and Job name (`burst-<position>` by default).
    pub name: String,
    /// Number of brokers.
    pub size: i32,
    /// Hosts declared (`maxSize`, defaulting to the size).
    pub max_size: i32,
    /// Spoke cluster that runs it: its `cluster` (the burst's name by default); for a burst
    /// with `candidates`, empty until the hub places it ([`crate::plan::Plan::place`]).
    pub cluster: String,
    /// Its `candidates` in order of preference; empty for a burst with one `cluster`.
    pub candidates: Vec<PlacementCandidate>,
    /// With autoscale, the fewest brokers the hub shrinks it to (`minSize`, default 0).
    pub min_size: i32,
    /// Its brokers reach the lead broker through their spoke and the hub: the path in use.
    /// For a burst whose spec leaves `relay` unset, `false` until the hub chooses
    /// ([`crate::plan::Plan::route`]).
    pub relay: bool,
    /// `relay` as the spec sets it: `None` lets the hub choose the path for each placement.
    pub relay_spec: Option<bool>,
    /// Removed from a running MiniCluster's spec: its hosts keep their ranks (the running
    /// brokers know them), but it runs nowhere. Only the hub sets it
    /// ([`crate::plan::Plan::retire`]); a spec never does.
    pub retired: bool,
}

/// One of a burst's `candidates`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PlacementCandidate {
    /// A spoke by name.
    Cluster(String),
    /// Every spoke whose labels include all of these.
    Labels(BTreeMap<String, String>),
}

impl PlacementCandidate {
    /// Whether spoke `name` with `labels` is this candidate.
    pub fn matches(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        match self {
            PlacementCandidate::Cluster(c) => c == name,
            PlacementCandidate::Labels(want) => want
                .iter()
                .all(|(k, v)| labels.get(k).is_some_and(|l| l == v)),
        }
    }
}

impl std::fmt::Display for PlacementCandidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlacementCandidate::Cluster(c) => f.write_str(c),
            PlacementCandidate::Labels(labels) => {
                let terms: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "labels {}", terms.join(","))
            }
        }
    }
}

impl ResolvedBurst {
    /// Whether the hub chooses this burst's path: its spec leaves `relay` unset.
    pub fn path_chosen_by_hub(&self) -> bool {
        self.relay_spec.is_none()
    }

    /// Whether this burst may be relayed: its relay Service's name ([`Self::relay_service`])
    /// is a DNS label. A burst whose name leaves no room for it connects directly.
    pub fn can_relay(&self) -> bool {
        let service = self.relay_service();
        service.len() <= 63 && self.name.starts_with(|c: char| c.is_ascii_lowercase())
    }

    /// The Service in a relayed burst's cluster at which its brokers reach the lead broker
    /// (the spoke serves it): `<burst>-relay`.
    pub fn relay_service(&self) -> String {
        format!("{}-relay", self.name)
    }
}

impl MiniClusterSpec {
    /// `maxSize`, defaulting to `size`.
    pub fn max_size(&self) -> i32 {
        self.max_size.unwrap_or(self.size)
    }

    /// `tasks`, defaulting to 1.
    pub fn tasks(&self) -> i32 {
        self.tasks.unwrap_or(defaults::TASKS)
    }

    /// Job `backoffLimit`.
    pub fn backoff_limit(&self) -> i32 {
        self.backoff_limit.unwrap_or(defaults::BACKOFF_LIMIT)
    }

    /// Job `activeDeadlineSeconds`.
    pub fn deadline_seconds(&self) -> i64 {
        self.deadline_seconds.unwrap_or(defaults::DEADLINE_SECONDS)
    }

    /// Interactive mode.
    pub fn interactive(&self) -> bool {
        self.interactive.unwrap_or(false)
    }

    /// Flux settings (all defaults when `flux` is absent).
    pub fn flux(&self) -> &FluxSpec {
        self.flux.as_ref().unwrap_or(&NO_FLUX)
    }

    /// Logging settings.
    pub fn logging(&self) -> &LoggingSpec {
        self.logging.as_ref().unwrap_or(&NO_LOGGING)
    }

    /// Pod settings.
    pub fn pod(&self) -> &PodSpec {
        self.pod.as_ref().unwrap_or(&NO_POD)
    }

    /// Name of the headless Service, defaulting to the MiniCluster's own name.
    pub fn headless_name<'a>(&'a self, name: &'a str) -> &'a str {
        self.network
            .as_ref()
            .and_then(|n| n.headless_name.as_deref())
            .filter(|n| !n.is_empty())
            .unwrap_or(name)
    }

    /// Whether the one-pod-per-node affinity rules are dropped.
    pub fn disable_affinity(&self) -> bool {
        self.network
            .as_ref()
            .and_then(|n| n.disable_affinity)
            .unwrap_or(false)
    }

    /// The lead broker this MiniCluster joins, from either accepted location.
    pub fn lead_broker(&self) -> Option<&LeadBroker> {
        let flux = self.flux.as_ref()?;
        flux.lead_broker
            .as_ref()
            .or_else(|| flux.bursting.as_ref()?.lead_broker.as_ref())
    }

    /// A verbatim hostlist, from `flux.bursting.hostlist` or `leadBroker.hostlist`.
    pub fn custom_hostlist(&self) -> Option<&str> {
        let from_bursting = self
            .flux
            .as_ref()
            .and_then(|f| f.bursting.as_ref())
            .and_then(|b| b.hostlist.as_deref());
        from_bursting
            .or_else(|| self.lead_broker().and_then(|l| l.hostlist.as_deref()))
            .filter(|h| !h.is_empty())
    }

    /// The declared burst clusters with defaults applied, in spec order.
    pub fn bursts(&self) -> Vec<ResolvedBurst> {
        let clusters = self
            .flux
            .as_ref()
            .and_then(|f| f.bursting.as_ref())
            .map(|b| b.clusters.as_slice())
            .unwrap_or_default();
        clusters
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let name = c.name.clone().unwrap_or_else(|| format!("burst-{i}"));
                let size = c.size.unwrap_or(self.size);
                let candidates: Vec<PlacementCandidate> = c
                    .candidates
                    .iter()
                    .filter_map(|c| match (&c.cluster, &c.match_labels) {
                        (Some(name), _) => Some(PlacementCandidate::Cluster(name.clone())),
                        (None, Some(labels)) => Some(PlacementCandidate::Labels(labels.clone())),
                        (None, None) => None,
                    })
                    .collect();
                let cluster = match (&c.cluster, candidates.is_empty()) {
                    (Some(cluster), _) => cluster.clone(),
                    (None, true) => name.clone(),
                    (None, false) => String::new(),
                };
                ResolvedBurst {
                    size,
                    max_size: c.max_size.unwrap_or(size),
                    cluster,
                    candidates,
                    min_size: c.min_size.unwrap_or(0),
                    relay: c.relay.unwrap_or(false),
                    relay_spec: c.relay,
                    name,
                    retired: false,
                }
            })
            .collect()
    }

    /// Bursting on demand, for a root instance that declares bursts (a MiniCluster that
    /// joins a lead broker or names its hosts verbatim has none to scale).
    pub fn autoscale(&self) -> Option<&Autoscale> {
        if !self.is_bursting_root() {
            return None;
        }
        self.flux.as_ref()?.bursting.as_ref()?.autoscale.as_ref()
    }

    /// Whether this is a root instance that declares bursts (not one that joins a lead
    /// broker or names its hosts verbatim): its lead broker serves the hub its view of the
    /// instance ([`crate::scripts::reporter_script`]).
    pub fn is_bursting_root(&self) -> bool {
        self.flux
            .as_ref()
            .and_then(|f| f.bursting.as_ref())
            .is_some_and(|b| !b.clusters.is_empty())
            && self.lead_broker().is_none()
            && self.custom_hostlist().is_none()
    }

    /// Index of the container that runs Flux: the only container; else the one with
    /// `runFlux: true`; else, when no container sets it, the one that leaves `runFlux`
    /// unset (the reference documents `true` as its default and advises setting
    /// `runFlux: false` on the others). `None` when that is ambiguous or empty
    /// (validation reports it).
    pub fn flux_runner_index(&self) -> Option<usize> {
        if self.containers.len() == 1 {
            return Some(0);
        }
        let (explicit, unset) = self.flux_runner_candidates();
        match (explicit.as_slice(), unset.as_slice()) {
            ([i], _) | ([], [i]) => Some(*i),
            _ => None,
        }
    }

    /// Indices of the containers with `runFlux: true`, and of those that leave it unset.
    pub fn flux_runner_candidates(&self) -> (Vec<usize>, Vec<usize>) {
        let with = |want: Option<bool>| {
            self.containers
                .iter()
                .enumerate()
                .filter(|(_, c)| c.run_flux == want)
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        };
        (with(Some(true)), with(None))
    }
}

/// How the broker pods of a MiniCluster get the Flux view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewMode {
    /// A container of the view image, first in the pod, copies the view (and its software
    /// tree, straight into the pod's software volume) while the brokers' containers start,
    /// which wait for it; then it stays until the broker has ended for good. No init
    /// container: the kubelet starts every container in one pass. The default.
    Alongside,
    /// An init container copies the view before the brokers start, and the broker copies
    /// the software tree back (the reference operator's pod): `flux.container.initContainer`
    /// (see [`MiniClusterSpec::view_mode`]).
    InitContainer,
    /// Flux comes from the application image (`flux.container.disable`): no view container.
    Image,
    /// The view image is an image volume of the pod, which the containers link the view and
    /// its software tree to: no view container, no copy (`flux.container.imageVolume`, or
    /// a cluster that has image volumes: see [`MiniClusterSpec::view_mode_on`]).
    ImageVolume,
}

impl MiniClusterSpec {
    /// How broker pods get the Flux view on a cluster without image volumes (see
    /// [`MiniClusterSpec::view_mode_on`]).
    pub fn view_mode(&self) -> ViewMode {
        self.view_mode_on(false)
    }

    /// How broker pods get the Flux view on a cluster that has image volumes
    /// (`image_volumes`) or not. `initContainer` keeps the init container, even with the
    /// view disabled. `imageVolume: true` asks for the image volume on any cluster,
    /// `false` never. Otherwise a pod whose containers are never restarted
    /// (`restartPolicy: Never`) that may not share its process namespace keeps the init
    /// container where there is no image volume: a view container could not see a killed
    /// broker go.
    pub fn view_mode_on(&self, image_volumes: bool) -> ViewMode {
        let view = self.flux().view();
        let unwatched = !self.restarts_containers() && self.share_process_namespace == Some(false);
        let image_volume = view.image_volume.unwrap_or(image_volumes);
        if view.init_container == Some(true) {
            ViewMode::InitContainer
        } else if view.disabled() {
            ViewMode::Image
        } else if image_volume {
            ViewMode::ImageVolume
        } else if unwatched {
            ViewMode::InitContainer
        } else {
            ViewMode::Alongside
        }
    }

    /// Whether the kubelet starts a failed container of a broker pod again: its restart
    /// policy (default `OnFailure`) is not `Never`.
    pub fn restarts_containers(&self) -> bool {
        self.pod()
            .restart_policy
            .as_deref()
            .filter(|p| !p.is_empty())
            .unwrap_or(defaults::RESTART_POLICY)
            != "Never"
    }
}

impl FluxSpec {
    /// The flux view container settings.
    pub fn view(&self) -> &FluxContainer {
        self.container.as_ref().unwrap_or(&NO_VIEW)
    }

    /// The flux view image: `flux.container.image`, else the default for `flux.arch`.
    pub fn view_image(&self) -> &str {
        if let Some(image) = self.view().image.as_deref().filter(|s| !s.is_empty()) {
            return image;
        }
        match self.arch.as_deref() {
            Some(arch) if defaults::ARCH_ARM.contains(&arch) => defaults::VIEW_IMAGE_ARM,
            _ => defaults::VIEW_IMAGE,
        }
    }

    /// `tbon.connect_timeout`; `None` when set to the empty string (omit the attribute).
    pub fn connect_timeout(&self) -> Option<&str> {
        match self.connect_timeout.as_deref() {
            None => Some(defaults::CONNECT_TIMEOUT),
            Some("") => None,
            Some(t) => Some(t),
        }
    }

    /// `drainTimeoutSeconds`, defaulted; 0 when draining is off.
    pub fn drain_timeout_seconds(&self) -> i32 {
        self.drain_timeout_seconds
            .unwrap_or(defaults::DRAIN_TIMEOUT_SECONDS)
            .max(0)
    }

    /// Broker log level.
    pub fn log_level(&self) -> i32 {
        self.log_level.unwrap_or(defaults::LOG_LEVEL)
    }

    /// Fluxion queue policy.
    pub fn queue_policy(&self) -> &str {
        self.scheduler
            .as_ref()
            .and_then(|s| s.queue_policy.as_deref())
            .filter(|p| !p.is_empty())
            .unwrap_or(defaults::QUEUE_POLICY)
    }

    /// Whether to stay on `sched-simple`.
    pub fn simple_scheduler(&self) -> bool {
        self.scheduler
            .as_ref()
            .and_then(|s| s.simple)
            .unwrap_or(false)
    }

    /// `submitCommand`, defaulting to `flux submit`.
    pub fn submit_command(&self) -> &str {
        self.submit_command
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or("flux submit")
    }

    /// A custom broker.toml, when given.
    pub fn broker_config(&self) -> Option<&str> {
        self.broker_config
            .as_deref()
            .filter(|s| !s.trim().is_empty())
    }

    /// A custom curve certificate, when given.
    pub fn curve_cert(&self) -> Option<&str> {
        self.curve_cert.as_deref().filter(|s| !s.trim().is_empty())
    }
}

impl FluxContainer {
    /// View container name.
    pub fn name(&self) -> &str {
        self.name
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or(defaults::VIEW_NAME)
    }

    /// Mount path of the view and the configuration, without a trailing slash.
    pub fn mount_path(&self) -> &str {
        self.mount_path
            .as_deref()
            .map(|p| p.trim_end_matches('/'))
            .filter(|p| !p.is_empty())
            .unwrap_or(defaults::MOUNT_PATH)
    }

    /// Whether the view is disabled (Flux comes from the application image).
    pub fn disabled(&self) -> bool {
        self.disable.unwrap_or(false)
    }

    /// Image pull policy of the view image.
    pub fn pull_policy(&self) -> &'static str {
        if self.pull_always.unwrap_or(false) {
            "Always"
        } else {
            "IfNotPresent"
        }
    }
}

impl LoggingSpec {
    /// Quiet mode.
    pub fn quiet(&self) -> bool {
        self.quiet.unwrap_or(false)
    }
    /// Strict mode (default on, as documented).
    pub fn strict(&self) -> bool {
        self.strict.unwrap_or(true)
    }
    /// Timed mode.
    pub fn timed(&self) -> bool {
        self.timed.unwrap_or(false)
    }
    /// Debug mode.
    pub fn debug(&self) -> bool {
        self.debug.unwrap_or(false)
    }
    /// ZeroMQ debug logging.
    pub fn zeromq(&self) -> bool {
        self.zeromq.unwrap_or(false)
    }
}

impl MiniClusterContainer {
    /// Hooks (all empty when `commands` is absent).
    pub fn commands(&self) -> &Commands {
        self.commands.as_ref().unwrap_or(&NO_COMMANDS)
    }

    /// The command, `None` when absent or blank.
    pub fn command(&self) -> Option<&str> {
        self.command.as_deref().filter(|c| !c.trim().is_empty())
    }

    /// Image pull policy: `pullAlways` wins, then `imagePullPolicy`, then `IfNotPresent`.
    pub fn pull_policy(&self) -> &str {
        if self.pull_always.unwrap_or(false) {
            return "Always";
        }
        self.image_pull_policy
            .as_deref()
            .filter(|p| !p.is_empty())
            .unwrap_or("IfNotPresent")
    }

    /// Cores per pod declared in R.
    pub fn cores(&self) -> i32 {
        self.cores.unwrap_or(defaults::CORES)
    }

    /// Batch output directory.
    pub fn logs(&self) -> &str {
        self.logs
            .as_deref()
            .filter(|l| !l.is_empty())
            .unwrap_or(defaults::BATCH_LOGS)
    }

    /// Flux user name and uid.
    pub fn flux_user(&self) -> (&str, i64) {
        let user = self.flux_user.as_ref();
        (
            user.and_then(|u| u.name.as_deref())
                .filter(|n| !n.is_empty())
                .unwrap_or(defaults::FLUX_USER_NAME),
            user.and_then(|u| u.uid).unwrap_or(defaults::FLUX_USER_UID),
        )
    }
}

impl Commands {
    /// A hook's text, `None` when absent or blank.
    pub fn hook(value: &Option<String>) -> Option<&str> {
        value.as_deref().filter(|v| !v.trim().is_empty())
    }
}

impl Autoscale {
    /// `scaleUpAfterSeconds`, defaulted.
    pub fn scale_up_after(&self) -> std::time::Duration {
        secs(
            self.scale_up_after_seconds,
            defaults::SCALE_UP_AFTER_SECONDS,
        )
    }

    /// `scaleDownAfterSeconds`, defaulted.
    pub fn scale_down_after(&self) -> std::time::Duration {
        secs(
            self.scale_down_after_seconds,
            defaults::SCALE_DOWN_AFTER_SECONDS,
        )
    }

    /// `maxStep`, defaulted (at least 1).
    pub fn max_step(&self) -> i32 {
        self.max_step.unwrap_or(defaults::AUTOSCALE_MAX_STEP).max(1)
    }

    /// `intervalSeconds`, defaulted (at least 1 s).
    pub fn interval(&self) -> std::time::Duration {
        secs(self.interval_seconds, defaults::AUTOSCALE_INTERVAL_SECONDS)
            .max(std::time::Duration::from_secs(1))
    }
}

/// `value` seconds (never negative), else `default`.
fn secs(value: Option<i32>, default: i32) -> std::time::Duration {
    std::time::Duration::from_secs(u64::try_from(value.unwrap_or(default)).unwrap_or(0))
}
