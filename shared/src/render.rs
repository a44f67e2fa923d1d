//! The renderer: `Plan` + role -> every Kubernetes object one cluster needs.
//!
//! Output is deterministic (fixed object order, sorted maps) so that golden tests and
//! "is the applied object already what we want" comparisons are meaningful.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Affinity, CSIVolumeSource, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort,
    EmptyDirVolumeSource, EnvVar, EnvVarSource, ExecAction, HostPathVolumeSource, KeyToPath,
    Lifecycle, LifecycleHandler, LocalObjectReference, NodeAffinity, NodeSelector,
    NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaimVolumeSource, Pod, PodAffinity,
    PodAffinityTerm, PodAntiAffinity, PodSpec, PodTemplateSpec, Secret, SecretKeySelector,
    SecretVolumeSource, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use crate::api::{ContainerVolume, MiniClusterContainer, defaults};
use crate::flux_config;
use crate::layout;
use crate::plan::{Plan, Role, Target};
use crate::scripts;

/// Labels the renderer puts on what it creates.
pub mod labels {
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
    /// Completion index label Kubernetes (>= 1.28) sets on Indexed Job pods.
    pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
}

/// One rendered object.
// A render yields a handful of these; boxing the Job would only add allocations.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Object {
    /// Scripts, broker.toml and R.
    ConfigMap(ConfigMap),
    /// The CURVE certificate.
    Secret(Secret),
    /// Headless, minimal, lead-broker or sidecar Service.
    Service(Service),
    /// The Indexed Job of brokers.
    Job(Job),
    /// The services pod.
    Pod(Pod),
}

impl Object {
    /// `Kind/name`, for messages.
    pub fn describe(&self) -> String {
        let (kind, meta) = match self {
            Object::ConfigMap(o) => ("ConfigMap", &o.metadata),
            Object::Secret(o) => ("Secret", &o.metadata),
            Object::Service(o) => ("Service", &o.metadata),
            Object::Job(o) => ("Job", &o.metadata),
            Object::Pod(o) => ("Pod", &o.metadata),
        };
        format!("{kind}/{}", meta.name.as_deref().unwrap_or(""))
    }
}

/// Name of the Service exposing the lead broker outside the root cluster.
pub fn lead_service_name(plan: &Plan) -> String {
    format!("{}-lead", plan.name)
}

/// Name of the Secret holding a target's CURVE certificate.
pub fn curve_secret_name(job: &str) -> String {
    format!("{job}-curve")
}

/// Name of the ConfigMap holding a target's scripts and Flux configuration.
pub fn config_map_name(job: &str) -> String {
    format!("{job}-flux-config")
}

/// Label selector of a root Job's broker pods (`status.selector`).
pub fn selector(plan: &Plan) -> String {
    format!("{}={}", labels::JOB, plan.name)
}

/// Every object of one role, in apply order: ConfigMap and Secret before the pods that
/// mount them. `curve_cert` is the zcert text to store (ignored when the spec carries
/// its own). `None` when the role names a burst that does not exist.
pub fn render(plan: &Plan, role: &Role, curve_cert: &str) -> Option<Vec<Object>> {
    let target = plan.target(role)?;
    let r = Renderer::new(plan, &target);
    let cert = plan.spec.flux().curve_cert().unwrap_or(curve_cert);
    let mut objects = vec![
        Object::ConfigMap(r.config_map()),
        Object::Secret(r.curve_secret(cert)),
        Object::Service(r.headless_service()),
    ];
    if target.is_root() && !plan.bursts.is_empty() {
        objects.push(Object::Service(r.lead_service()));
    }
    objects.extend(r.sidecar_services().into_iter().map(Object::Service));
    if target.is_root() && !plan.spec.services.is_empty() {
        objects.push(Object::Pod(r.services_pod()));
    }
    objects.push(Object::Job(r.job()));
    Some(objects)
}

struct Renderer<'a> {
    plan: &'a Plan,
    target: &'a Target,
    labels: BTreeMap<String, String>,
}

impl<'a> Renderer<'a> {
    fn new(plan: &'a Plan, target: &'a Target) -> Self {
        Renderer {
            plan,
            target,
            labels: common_labels(plan, target),
        }
    }

    /// Objects of the root, and of a hand-applied burst MiniCluster, live next to the
    /// MiniCluster and are owned by it; a spoke's objects cannot be (other cluster).
    fn owner(&self) -> Option<Vec<OwnerReference>> {
        let uid = self.plan.uid.clone()?;
        let local = self.target.is_root() || self.target.job == self.plan.name;
        local.then(|| {
            vec![OwnerReference {
                api_version: "flux-framework.org/v1alpha2".into(),
                kind: "MiniCluster".into(),
                name: self.plan.name.clone(),
                uid,
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]
        })
    }

    fn labels(&self) -> BTreeMap<String, String> {
        self.labels.clone()
    }

    fn meta(&self, name: String) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.plan.namespace.clone()),
            labels: Some(self.labels()),
            owner_references: self.owner(),
            ..Default::default()
        }
    }

    fn config_map(&self) -> ConfigMap {
        let mut data = BTreeMap::from([
            (
                layout::BROKER_TOML_KEY.to_string(),
                flux_config::broker_toml(self.plan, self.target),
            ),
            (layout::R_KEY.to_string(), self.plan.resources.clone()),
            (
                layout::INIT_SCRIPT_KEY.to_string(),
                scripts::init_script(self.plan, self.target),
            ),
        ]);
        for (i, c) in self.plan.spec.containers.iter().enumerate() {
            if i == self.plan.runner {
                data.insert(
                    layout::entrypoint_key(i, true),
                    scripts::broker_script(self.plan, self.target),
                );
            } else if !c.no_wrap_entrypoint.unwrap_or(false) {
                data.insert(
                    layout::entrypoint_key(i, false),
                    scripts::sidecar_script(self.plan, self.target, i),
                );
            }
        }
        ConfigMap {
            metadata: self.meta(config_map_name(&self.target.job)),
            data: Some(data),
            ..Default::default()
        }
    }

    fn curve_secret(&self, cert: &str) -> Secret {
        Secret {
            metadata: self.meta(curve_secret_name(&self.target.job)),
            type_: Some("Opaque".into()),
            data: Some(BTreeMap::from([(
                layout::CURVE_KEY.to_string(),
                ByteString(cert.as_bytes().to_vec()),
            )])),
            ..Default::default()
        }
    }

    fn job_selector(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(labels::JOB.to_string(), self.target.job.clone())])
    }

    fn headless_service(&self) -> Service {
        let minimal = self.plan.spec.flux().minimal_service.unwrap_or(false);
        let spec = if minimal {
            // Only the lead broker needs to be reachable by name.
            let mut selector = self.job_selector();
            selector.insert(labels::COMPLETION_INDEX.into(), "0".into());
            ServiceSpec {
                selector: Some(selector),
                ports: Some(vec![broker_port()]),
                ..Default::default()
            }
        } else {
            ServiceSpec {
                cluster_ip: Some("None".into()),
                selector: Some(BTreeMap::from([(
                    labels::NETWORK.to_string(),
                    self.target.headless.clone(),
                )])),
                // DNS records as soon as pods have IPs: brokers connect before Ready.
                publish_not_ready_addresses: Some(true),
                ..Default::default()
            }
        };
        Service {
            metadata: self.meta(self.target.headless.clone()),
            spec: Some(spec),
            ..Default::default()
        }
    }

    fn lead_service(&self) -> Service {
        let mut selector = self.job_selector();
        selector.insert(labels::COMPLETION_INDEX.into(), "0".into());
        Service {
            metadata: self.meta(lead_service_name(self.plan)),
            spec: Some(ServiceSpec {
                type_: Some("NodePort".into()),
                selector: Some(selector),
                ports: Some(vec![ServicePort {
                    node_port: self
                        .plan
                        .spec
                        .flux()
                        .bursting
                        .as_ref()
                        .and_then(|b| b.lead_node_port),
                    ..broker_port()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn sidecar_services(&self) -> Vec<Service> {
        self.plan
            .spec
            .containers
            .iter()
            .enumerate()
            .filter(|(i, c)| *i != self.plan.runner && !c.ports.is_empty())
            .map(|(_, c)| {
                let name = c.name.clone().unwrap_or_default();
                Service {
                    metadata: self.meta(format!("{}-{name}", self.target.job)),
                    spec: Some(ServiceSpec {
                        selector: Some(self.job_selector()),
                        ports: Some(
                            c.ports
                                .iter()
                                .map(|p| ServicePort {
                                    name: Some(format!("tcp-{p}")),
                                    port: *p,
                                    target_port: Some(IntOrString::Int(*p)),
                                    protocol: Some("TCP".into()),
                                    ..Default::default()
                                })
                                .collect(),
                        ),
                        ..Default::default()
                    }),
                    ..Default::default()
                }
            })
            .collect()
    }

    fn pod_labels(&self) -> BTreeMap<String, String> {
        let mut l = self.plan.spec.pod().labels.clone();
        l.extend(self.labels());
        l.insert(labels::NETWORK.into(), self.target.headless.clone());
        l
    }

    fn job(&self) -> Job {
        let spec = &self.plan.spec;
        let mut meta = self.meta(self.target.job.clone());
        let mut job_labels = spec.job_labels.clone();
        job_labels.extend(self.labels());
        meta.labels = Some(job_labels);
        let mut pod_labels = self.pod_labels();
        pod_labels.extend(self.job_selector());
        Job {
            metadata: meta,
            spec: Some(JobSpec {
                completion_mode: Some("Indexed".into()),
                completions: Some(self.target.size),
                parallelism: Some(self.target.size),
                backoff_limit: Some(spec.backoff_limit()),
                active_deadline_seconds: Some(spec.deadline_seconds()),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(pod_labels),
                        annotations: non_empty(spec.pod().annotations.clone()),
                        ..Default::default()
                    }),
                    spec: Some(self.broker_pod_spec()),
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn broker_pod_spec(&self) -> PodSpec {
        let spec = &self.plan.spec;
        let pod = spec.pod();
        let view = spec.flux().view();
        let pull_secrets = image_pull_secrets(
            spec.containers
                .iter()
                .map(|c| &c.image_pull_secret)
                .chain([&view.image_pull_secret]),
        );
        let containers = spec
            .containers
            .iter()
            .enumerate()
            .map(|(i, c)| self.container(i, c))
            .collect();
        PodSpec {
            subdomain: Some(self.target.headless.clone()),
            set_hostname_as_fqdn: Some(false),
            restart_policy: Some(
                pod.restart_policy
                    .clone()
                    .unwrap_or_else(|| defaults::RESTART_POLICY.into()),
            ),
            share_process_namespace: spec.share_process_namespace,
            service_account_name: pod.service_account_name.clone(),
            automount_service_account_token: Some(
                pod.automount_service_account_token.unwrap_or(false),
            ),
            node_selector: non_empty(pod.node_selector.clone()),
            tolerations: (!pod.tolerations.is_empty()).then(|| pod.tolerations.clone()),
            scheduler_name: pod.scheduler_name.clone(),
            host_ipc: pod.host_ipc,
            host_pid: pod.host_pid,
            dns_policy: pod.dns_policy.clone(),
            runtime_class_name: pod.runtime_class_name.clone(),
            security_context: pod.security_context.clone(),
            overhead: non_empty(pod.resources.clone()),
            image_pull_secrets: pull_secrets,
            affinity: (!spec.disable_affinity()).then(|| self.affinity()),
            volumes: Some(self.volumes()),
            init_containers: Some(vec![self.view_container()]),
            containers,
            ..Default::default()
        }
    }

    fn affinity(&self) -> Affinity {
        let same_job = || LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: labels::JOB.into(),
                operator: "In".into(),
                values: Some(vec![self.target.job.clone()]),
            }]),
            ..Default::default()
        };
        let preferred = |topology_key: &str| {
            Some(vec![WeightedPodAffinityTerm {
                weight: 100,
                pod_affinity_term: PodAffinityTerm {
                    label_selector: Some(same_job()),
                    topology_key: topology_key.into(),
                    ..Default::default()
                },
            }])
        };
        let node_affinity = &self.plan.spec.pod().node_affinity;
        Affinity {
            // Keep the brokers in one zone, one per node where possible.
            pod_affinity: Some(PodAffinity {
                preferred_during_scheduling_ignored_during_execution: preferred(
                    "topology.kubernetes.io/zone",
                ),
                ..Default::default()
            }),
            pod_anti_affinity: Some(PodAntiAffinity {
                preferred_during_scheduling_ignored_during_execution: preferred(
                    "kubernetes.io/hostname",
                ),
                ..Default::default()
            }),
            node_affinity: (!node_affinity.is_empty()).then(|| NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(
                            node_affinity
                                .iter()
                                .map(|(key, values)| NodeSelectorRequirement {
                                    key: key.clone(),
                                    operator: "In".into(),
                                    values: Some(values.clone()),
                                })
                                .collect(),
                        ),
                        ..Default::default()
                    }],
                }),
                ..Default::default()
            }),
        }
    }

    fn volumes(&self) -> Vec<Volume> {
        let view = self.plan.spec.flux().view();
        let mut items = vec![
            key_to_path(layout::BROKER_TOML_KEY, None),
            key_to_path(layout::R_KEY, None),
            key_to_path(layout::INIT_SCRIPT_KEY, Some(0o755)),
        ];
        for (i, c) in self.plan.spec.containers.iter().enumerate() {
            if i == self.plan.runner {
                items.push(key_to_path(&layout::entrypoint_key(i, true), Some(0o755)));
            } else if !c.no_wrap_entrypoint.unwrap_or(false) {
                items.push(key_to_path(&layout::entrypoint_key(i, false), Some(0o755)));
            }
        }
        let mut volumes = vec![
            empty_dir(view.name()),
            empty_dir("spack-software"),
            empty_dir("flux-home"),
            Volume {
                name: "flux-config".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: config_map_name(&self.target.job),
                    items: Some(items),
                    ..Default::default()
                }),
                ..Default::default()
            },
            Volume {
                name: "flux-curve".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(curve_secret_name(&self.target.job)),
                    // Readable by whatever user the image runs as; the entrypoint copies
                    // it to a 0600 file because Flux refuses a group/other-readable cert.
                    default_mode: Some(0o444),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ];
        volumes.extend(user_volumes(&self.plan.spec.containers));
        volumes
    }

    fn flux_mounts(&self) -> Vec<VolumeMount> {
        let view = self.plan.spec.flux().view();
        vec![
            mount(view.name(), view.mount_path(), false),
            mount("flux-config", layout::CONFIG_MOUNT, true),
            mount("flux-curve", layout::CURVE_MOUNT, true),
            mount("flux-home", layout::HOME_MOUNT, false),
        ]
    }

    fn view_container(&self) -> Container {
        let view = self.plan.spec.flux().view();
        Container {
            name: view.name().into(),
            image: Some(self.plan.spec.flux().view_image().into()),
            image_pull_policy: Some(view.pull_policy().into()),
            command: Some(vec![
                "/bin/bash".into(),
                format!("{}/{}", layout::CONFIG_MOUNT, layout::INIT_SCRIPT_KEY),
            ]),
            working_dir: view.working_dir.clone().filter(|d| !d.is_empty()),
            resources: view.resources.clone(),
            security_context: view.security_context.clone(),
            // Not the software emptyDir: that would hide the view image's own install.
            volume_mounts: Some(vec![
                mount(view.name(), view.mount_path(), false),
                mount("flux-config", layout::CONFIG_MOUNT, true),
            ]),
            ..Default::default()
        }
    }

    fn container(&self, index: usize, c: &MiniClusterContainer) -> Container {
        let runs_flux = index == self.plan.runner;
        let name = if runs_flux {
            self.plan.name.clone()
        } else {
            c.name.clone().unwrap_or_default()
        };
        let command = if runs_flux || !c.no_wrap_entrypoint.unwrap_or(false) {
            Some(vec![
                "/bin/bash".into(),
                format!(
                    "{}/{}",
                    layout::CONFIG_MOUNT,
                    layout::entrypoint_key(index, runs_flux)
                ),
            ])
        } else {
            None
        };
        let mut mounts = self.flux_mounts();
        mounts.push(mount("spack-software", layout::SOFTWARE_MOUNT, false));
        mounts.extend(c.volumes.iter().map(|(n, v)| user_mount(n, v)));
        Container {
            name,
            image: Some(c.image.clone()),
            image_pull_policy: Some(c.pull_policy().into()),
            command,
            working_dir: c.working_dir.clone().filter(|d| !d.is_empty()),
            env: env(c),
            ports: ports(c),
            resources: c.resources.clone(),
            security_context: c.security_context.clone(),
            lifecycle: lifecycle(c),
            // A terminal for `flux proxy` sessions and interactive brokers.
            stdin: Some(true),
            tty: Some(true),
            volume_mounts: Some(mounts),
            ..Default::default()
        }
    }

    fn services_pod(&self) -> Pod {
        let spec = &self.plan.spec;
        let pod = spec.pod();
        let name = format!("{}-services", self.plan.name);
        let mut meta = self.meta(name.clone());
        let mut pod_labels = spec.pod().labels.clone();
        pod_labels.extend(self.labels());
        pod_labels.insert(labels::NETWORK.into(), self.target.headless.clone());
        meta.labels = Some(pod_labels);
        meta.annotations = non_empty(pod.annotations.clone());
        let containers = spec
            .services
            .iter()
            .map(|s| Container {
                name: s.name.clone().unwrap_or_default(),
                image: Some(s.image.clone()),
                image_pull_policy: Some(s.pull_policy().into()),
                // The image's own entrypoint unless a command is given.
                command: s
                    .command()
                    .map(|cmd| vec!["/bin/sh".into(), "-c".into(), cmd.into()]),
                working_dir: s.working_dir.clone().filter(|d| !d.is_empty()),
                env: env(s),
                ports: ports(s),
                resources: s.resources.clone(),
                security_context: s.security_context.clone(),
                lifecycle: lifecycle(s),
                volume_mounts: non_empty_vec(
                    s.volumes.iter().map(|(n, v)| user_mount(n, v)).collect(),
                ),
                ..Default::default()
            })
            .collect();
        let pull_secrets = image_pull_secrets(
            spec.containers
                .iter()
                .chain(&spec.services)
                .map(|c| &c.image_pull_secret),
        );
        Pod {
            metadata: meta,
            spec: Some(PodSpec {
                hostname: Some(name),
                subdomain: Some(self.target.headless.clone()),
                set_hostname_as_fqdn: Some(false),
                restart_policy: Some(
                    pod.restart_policy
                        .clone()
                        .unwrap_or_else(|| defaults::RESTART_POLICY.into()),
                ),
                service_account_name: pod.service_account_name.clone(),
                automount_service_account_token: Some(
                    pod.automount_service_account_token.unwrap_or(false),
                ),
                node_selector: non_empty(pod.node_selector.clone()),
                dns_policy: pod.dns_policy.clone(),
                runtime_class_name: pod.runtime_class_name.clone(),
                image_pull_secrets: pull_secrets,
                volumes: non_empty_vec(user_volumes(&spec.services)),
                containers,
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

fn common_labels(plan: &Plan, target: &Target) -> BTreeMap<String, String> {
    let mut l = BTreeMap::from([
        (labels::MINICLUSTER.to_string(), plan.name.clone()),
        (labels::APP_NAME.to_string(), plan.name.clone()),
        (labels::MANAGED_BY.to_string(), labels::MANAGER.to_string()),
    ]);
    match &target.role {
        Role::Root => {
            l.insert(labels::ROLE.into(), "root".into());
        }
        Role::Burst { .. } => {
            l.insert(labels::ROLE.into(), "burst".into());
            l.insert(labels::BURST.into(), target.job.clone());
        }
    }
    l
}

/// The distinct, non-empty pull secrets named by containers, sorted.
fn image_pull_secrets<'a>(
    names: impl Iterator<Item = &'a Option<String>>,
) -> Option<Vec<LocalObjectReference>> {
    let names: std::collections::BTreeSet<&str> = names
        .filter_map(|n| n.as_deref())
        .filter(|n| !n.is_empty())
        .collect();
    non_empty_vec(
        names
            .into_iter()
            .map(|name| LocalObjectReference { name: name.into() })
            .collect(),
    )
}

fn broker_port() -> ServicePort {
    ServicePort {
        name: Some("flux-broker".into()),
        port: defaults::BROKER_PORT,
        target_port: Some(IntOrString::Int(defaults::BROKER_PORT)),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

fn non_empty<K, V>(m: BTreeMap<K, V>) -> Option<BTreeMap<K, V>> {
    (!m.is_empty()).then_some(m)
}

fn non_empty_vec<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn key_to_path(key: &str, mode: Option<i32>) -> KeyToPath {
    KeyToPath {
        key: key.into(),
        path: key.into(),
        mode,
    }
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

fn user_mount(name: &str, v: &ContainerVolume) -> VolumeMount {
    let path = if v.empty_dir == Some(true) {
        defaults::EMPTY_DIR_PATH.to_string()
    } else {
        v.path.clone().unwrap_or_default()
    };
    mount(name, &path, v.read_only.unwrap_or(false))
}

/// Pod volumes for the user volumes of `containers`, once per name (validation made
/// same-named volumes identical).
fn user_volumes(containers: &[MiniClusterContainer]) -> Vec<Volume> {
    let mut seen = BTreeMap::new();
    for c in containers {
        for (name, v) in &c.volumes {
            seen.entry(name.clone())
                .or_insert_with(|| user_volume(name, v));
        }
    }
    seen.into_values().collect()
}

fn user_volume(name: &str, v: &ContainerVolume) -> Volume {
    let set = |o: &Option<String>| o.clone().filter(|s| !s.is_empty());
    let mut volume = Volume {
        name: name.into(),
        ..Default::default()
    };
    if let Some(driver) = set(&v.csi_driver) {
        volume.csi = Some(CSIVolumeSource {
            driver,
            volume_attributes: non_empty(v.csi_driver_attributes.clone()),
            read_only: v.read_only,
            ..Default::default()
        });
    } else if let Some(secret) = set(&v.secret_name) {
        volume.secret = Some(SecretVolumeSource {
            secret_name: Some(secret),
            ..Default::default()
        });
    } else if v.empty_dir == Some(true) {
        volume.empty_dir = Some(EmptyDirVolumeSource {
            medium: (v.empty_dir_medium.as_deref() == Some("memory")).then(|| "Memory".into()),
            size_limit: set(&v.empty_dir_size_limit).map(Quantity),
        });
    } else if let Some(path) = set(&v.host_path) {
        volume.host_path = Some(HostPathVolumeSource {
            path,
            type_: Some("Directory".into()),
        });
    } else if let Some(config_map) = set(&v.config_map_name) {
        volume.config_map = Some(ConfigMapVolumeSource {
            name: config_map,
            items: non_empty_vec(
                v.items
                    .iter()
                    .map(|(k, p)| KeyToPath {
                        key: k.clone(),
                        path: p.clone(),
                        mode: None,
                    })
                    .collect(),
            ),
            ..Default::default()
        });
    } else {
        volume.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
            claim_name: v.claim_name.clone().unwrap_or_default(),
            read_only: v.read_only,
        });
    }
    volume
}

fn env(c: &MiniClusterContainer) -> Option<Vec<EnvVar>> {
    let mut vars: Vec<EnvVar> = c
        .environment
        .iter()
        .map(|(k, v)| EnvVar {
            name: k.clone(),
            value: Some(v.clone()),
            ..Default::default()
        })
        .chain(c.secrets.iter().map(|(k, s)| EnvVar {
            name: k.clone(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: s.name.clone(),
                    key: s.key.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }))
        .collect();
    vars.sort_by(|a, b| a.name.cmp(&b.name));
    non_empty_vec(vars)
}

fn ports(c: &MiniClusterContainer) -> Option<Vec<ContainerPort>> {
    non_empty_vec(
        c.ports
            .iter()
            .map(|p| ContainerPort {
                container_port: *p,
                protocol: Some("TCP".into()),
                ..Default::default()
            })
            .collect(),
    )
}

fn lifecycle(c: &MiniClusterContainer) -> Option<Lifecycle> {
    let lc = c.life_cycle.as_ref()?;
    let hook = |cmd: &Option<String>| {
        cmd.as_deref()
            .filter(|s| !s.trim().is_empty())
            .map(|s| LifecycleHandler {
                exec: Some(ExecAction {
                    command: Some(vec!["/bin/sh".into(), "-c".into(), s.into()]),
                }),
                ..Default::default()
            })
    };
    let lifecycle = Lifecycle {
        post_start: hook(&lc.post_start_exec),
        pre_stop: hook(&lc.pre_stop_exec),
        ..Default::default()
    };
    (lifecycle.post_start.is_some() || lifecycle.pre_stop.is_some()).then_some(lifecycle)
}
