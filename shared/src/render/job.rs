//! The Indexed Job of brokers and its pod template: pod spec, affinity, the operator's
//! volumes, the flux view container (or init container) and the containers.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Affinity, ConfigMapVolumeSource, Container, ImageVolumeSource, NodeAffinity, NodeSelector,
    NodeSelectorRequirement, NodeSelectorTerm, PodAffinity, PodAffinityTerm, PodAntiAffinity,
    PodSpec, PodTemplateSpec, SecretVolumeSource, Volume, VolumeMount, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};

use crate::api::{MiniClusterContainer, ViewMode, defaults};
use crate::layout;

use super::containers::{drain_lifecycle, env, image_pull_secrets, lifecycle, ports};
use super::volumes::{empty_dir, key_to_path, mount, user_mount, user_volumes};
use super::{Renderer, config_map_name, curve_secret_name, labels, non_empty};

impl Renderer<'_> {
    fn pod_labels(&self) -> BTreeMap<String, String> {
        let mut l = self.plan.spec.pod().labels.clone();
        l.extend(self.labels());
        l.insert(labels::NETWORK.into(), self.target.headless.clone());
        l
    }

    pub(super) fn job(&self) -> Job {
        let spec = &self.plan.spec;
        let mut meta = self.meta(self.target.job.clone());
        let mut job_labels = spec.job_labels.clone();
        job_labels.extend(self.labels());
        meta.labels = Some(job_labels);
        let mut pod_labels = self.pod_labels();
        pod_labels.extend(self.job_selector());
        // A burst scaled to 0 keeps its Job suspended (no pod) rather than at 0
        // completions, which would complete it for good; 1 keeps completions equal to
        // parallelism, as an elastic Indexed Job needs. A burst's `suspend` is always
        // sent, so scaling up again takes it back. The root Job's is the author's, or a
        // queue manager's (Kueue suspends and resumes it): sent only when `spec.suspend`
        // says so, and written by the apply stage only when that changes.
        let size = self.target.size;
        let suspend = if self.target.is_root() {
            if let Some(s) = spec.suspend {
                meta.annotations = Some(BTreeMap::from([(
                    labels::SUSPEND.to_string(),
                    s.to_string(),
                )]));
            }
            spec.suspend
        } else {
            if !self.target.hand_applied {
                // On the Job, not the pod template: a new path replaces the Job (its pods
                // would keep dialling the old one), the same path changes nothing.
                let path = if self.target.relay_service.is_some() {
                    labels::LEAD_PATH_RELAY
                } else {
                    labels::LEAD_PATH_DIRECT
                };
                meta.annotations = Some(BTreeMap::from([(
                    labels::LEAD_PATH.to_string(),
                    path.to_string(),
                )]));
            }
            Some(size == 0)
        };
        let view = match self.plan.view_mode {
            ViewMode::Alongside => Some(labels::VIEW_ALONGSIDE),
            ViewMode::ImageVolume => Some(labels::VIEW_IMAGE_VOLUME),
            ViewMode::Image => Some(labels::VIEW_IMAGE),
            // As a copying Job has always been rendered, annotations included.
            ViewMode::InitContainer => None,
        };
        if let Some(view) = view {
            meta.annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(labels::VIEW.to_string(), view.to_string());
        }
        Job {
            metadata: meta,
            spec: Some(JobSpec {
                completion_mode: Some("Indexed".into()),
                completions: Some(size.max(1)),
                parallelism: Some(size.max(1)),
                suspend,
                backoff_limit: Some(spec.backoff_limit()),
                active_deadline_seconds: Some(spec.deadline_seconds()),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(pod_labels),
                        annotations: non_empty(self.pod_annotations()),
                        ..Default::default()
                    }),
                    spec: Some(self.broker_pod_spec()),
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The spec's pod annotations; with the view container first, `kubectl logs` and
    /// `kubectl exec` default to the broker's container, unless the spec names another.
    fn pod_annotations(&self) -> BTreeMap<String, String> {
        let mut annotations = self.plan.spec.pod().annotations.clone();
        if self.plan.view_mode == ViewMode::Alongside {
            annotations
                .entry(labels::DEFAULT_CONTAINER.to_string())
                .or_insert_with(|| self.plan.name.clone());
        }
        annotations
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
        let mode = self.plan.view_mode;
        // The view container comes first: the kubelet starts containers in order, so its
        // copy starts before the brokers' containers.
        let containers = (mode == ViewMode::Alongside)
            .then(|| self.view_container())
            .into_iter()
            .chain(
                spec.containers
                    .iter()
                    .enumerate()
                    .map(|(i, c)| self.container(i, c)),
            )
            .collect();
        // Where the kubelet restarts no container, one process namespace, so that the view
        // container sees a killed broker go (a pod with hostPID may not also have its own,
        // and is in the node's).
        let watched = mode == ViewMode::Alongside && !spec.restarts_containers();
        let share_process_namespace = if watched && pod.host_pid != Some(true) {
            Some(true)
        } else {
            spec.share_process_namespace
        };
        PodSpec {
            share_process_namespace,
            tolerations: (!pod.tolerations.is_empty()).then(|| pod.tolerations.clone()),
            scheduler_name: pod.scheduler_name.clone(),
            host_ipc: pod.host_ipc,
            host_pid: pod.host_pid,
            security_context: pod.security_context.clone(),
            overhead: non_empty(pod.resources.clone()),
            image_pull_secrets: pull_secrets,
            affinity: (!spec.disable_affinity()).then(|| self.affinity()),
            volumes: Some(self.volumes()),
            init_containers: (mode == ViewMode::InitContainer)
                .then(|| vec![self.view_init_container()]),
            containers,
            // A leaving worker may wait the drain timeout for its jobs, then stop.
            termination_grace_period_seconds: (self.drain_timeout() > 0)
                .then(|| i64::from(self.drain_timeout()) + defaults::BROKER_STOP_SECONDS),
            ..self.pod_basics()
        }
    }

    fn drain_timeout(&self) -> i32 {
        self.plan.spec.flux().drain_timeout_seconds()
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
        ];
        if let Some(key) = view_script_key(self.plan.view_mode) {
            items.push(key_to_path(key, Some(0o755)));
        }
        if self.drain_timeout() > 0 {
            items.push(key_to_path(layout::DRAIN_SCRIPT_KEY, Some(0o755)));
        }
        if crate::scripts::serves_reporter(self.plan, self.target) {
            items.push(key_to_path(layout::REPORTER_SCRIPT_KEY, Some(0o755)));
        }
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
        if self.plan.view_mode == ViewMode::ImageVolume {
            volumes.push(Volume {
                name: layout::VIEW_IMAGE_VOLUME.into(),
                image: Some(ImageVolumeSource {
                    reference: Some(self.plan.spec.flux().view_image().into()),
                    pull_policy: Some(view.pull_policy().into()),
                }),
                ..Default::default()
            });
        }
        volumes.extend(user_volumes(&self.plan.spec.containers));
        volumes
    }

    fn flux_mounts(&self) -> Vec<VolumeMount> {
        let view = self.plan.spec.flux().view();
        let mut mounts = vec![
            mount(view.name(), view.mount_path(), false),
            mount("flux-config", layout::CONFIG_MOUNT, true),
            mount("flux-curve", layout::CURVE_MOUNT, true),
            mount("flux-home", layout::HOME_MOUNT, false),
        ];
        if self.plan.view_mode == ViewMode::ImageVolume {
            mounts.push(mount(
                layout::VIEW_IMAGE_VOLUME,
                layout::VIEW_IMAGE_MOUNT,
                true,
            ));
        }
        mounts
    }

    /// The view container: it copies the view while the brokers' containers start, then
    /// stays until the broker has ended. Unless the spec gives it one, it runs with the
    /// flux-running container's security context: the copy is then the brokers' user's,
    /// and a pod at Pod Security `restricted` stays so.
    fn view_container(&self) -> Container {
        let spec = &self.plan.spec;
        let view = spec.flux().view();
        let security_context = view.security_context.clone().or_else(|| {
            spec.containers
                .get(self.plan.runner)
                .and_then(|c| c.security_context.clone())
        });
        Container {
            name: view.name().into(),
            image: Some(spec.flux().view_image().into()),
            image_pull_policy: Some(view.pull_policy().into()),
            command: Some(vec![
                "/bin/bash".into(),
                format!("{}/{}", layout::CONFIG_MOUNT, layout::VIEW_SCRIPT_KEY),
            ]),
            working_dir: view.working_dir.clone().filter(|d| !d.is_empty()),
            resources: view.resources.clone(),
            security_context,
            // The software emptyDir, not at /opt/software (that would hide the image's
            // own tree), where the view container copies that tree.
            volume_mounts: Some(vec![
                mount(view.name(), view.mount_path(), false),
                mount("spack-software", self.plan.layout.software(), false),
                mount("flux-config", layout::CONFIG_MOUNT, true),
            ]),
            ..Default::default()
        }
    }

    /// The init container that copies the view (`flux.container.initContainer`, the
    /// reference operator's pod).
    fn view_init_container(&self) -> Container {
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
            lifecycle: if runs_flux && self.drain_timeout() > 0 {
                Some(drain_lifecycle(c))
            } else {
                lifecycle(c)
            },
            // A terminal for `flux proxy` sessions and interactive brokers.
            stdin: Some(true),
            tty: Some(true),
            volume_mounts: Some(mounts),
            ..Default::default()
        }
    }
}

/// The ConfigMap key of the script of the pod's view container or init container, if any.
fn view_script_key(mode: ViewMode) -> Option<&'static str> {
    match mode {
        ViewMode::Alongside => Some(layout::VIEW_SCRIPT_KEY),
        ViewMode::InitContainer => Some(layout::INIT_SCRIPT_KEY),
        ViewMode::Image | ViewMode::ImageVolume => None,
    }
}
