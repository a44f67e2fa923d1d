//! The services pod: the root's service containers, next to the brokers' subdomain.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};

use super::containers::{env, image_pull_secrets, lifecycle, ports};
use super::volumes::{user_mount, user_volumes};
use super::{Renderer, labels, non_empty, non_empty_vec};

impl Renderer<'_> {
    pub(super) fn services_pod(&self) -> Pod {
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
                image_pull_secrets: pull_secrets,
                volumes: non_empty_vec(user_volumes(&spec.services)),
                containers,
                ..self.pod_basics()
            }),
            ..Default::default()
        }
    }
}
