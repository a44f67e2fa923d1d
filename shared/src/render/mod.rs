//! The renderer: `Plan` + role -> every Kubernetes object one cluster needs.
//!
//! Output is deterministic (fixed object order, sorted maps) so that golden tests and
//! "is the applied object already what we want" comparisons are meaningful.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodSpec, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Serialize;

use crate::api::{ViewMode, defaults};
use crate::plan::{Plan, Role, Target};

mod config;
mod containers;
mod job;
pub mod labels;
mod services;
mod services_pod;
mod volumes;

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

/// Name of the Service exposing MiniCluster `minicluster`'s lead broker outside the root
/// cluster (its NodePort) and to relayed connections inside it (its cluster address).
pub fn lead_service_name(minicluster: &str) -> String {
    format!("{minicluster}-lead")
}

/// Name of the Secret holding a target's CURVE certificate.
pub fn curve_secret_name(job: &str) -> String {
    format!("{job}-curve")
}

/// Name of the ConfigMap holding a target's scripts and Flux configuration.
pub fn config_map_name(job: &str) -> String {
    format!("{job}-flux-config")
}

/// How the pods of the live Job of metadata `job` get the view, as it was made: its pod
/// template cannot change, and the ConfigMap its pods mount must keep their scripts, so
/// the Job is rendered so (its plan's `view_mode`). A Job without the [`labels::VIEW`]
/// annotation has the view's init container (made by a release before the view
/// container, or with `flux.container.initContainer`). `None` for a value this release
/// does not know (a later release's).
pub fn live_view_mode(job: &ObjectMeta) -> Option<ViewMode> {
    match job.annotations.as_ref().and_then(|a| a.get(labels::VIEW)) {
        None => Some(ViewMode::InitContainer),
        Some(v) if v == labels::VIEW_ALONGSIDE => Some(ViewMode::Alongside),
        Some(v) if v == labels::VIEW_IMAGE_VOLUME => Some(ViewMode::ImageVolume),
        Some(v) if v == labels::VIEW_IMAGE => Some(ViewMode::Image),
        Some(_) => None,
    }
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
    if target.is_root() && plan.has_running_bursts() {
        objects.push(Object::Service(r.lead_service()));
    }
    if let Some(name) = &target.relay_service {
        objects.push(Object::Service(r.relay_service(name)));
    }
    objects.extend(r.sidecar_services().into_iter().map(Object::Service));
    if target.is_root() && !plan.spec.services.is_empty() {
        objects.push(Object::Pod(r.services_pod()));
    }
    objects.push(Object::Job(r.job()));
    Some(objects)
}

/// The Job of `role` alone (what a spoke's policy checks before anything else is built);
/// `None` when the plan has no such role.
pub fn render_job(plan: &Plan, role: &Role) -> Option<k8s_openapi::api::batch::v1::Job> {
    let target = plan.target(role)?;
    Some(Renderer::new(plan, &target).job())
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

    /// What the broker pods and the services pod share: DNS under the headless Service,
    /// the restart policy, service account, node selection and runtime from `spec.pod`.
    fn pod_basics(&self) -> PodSpec {
        let pod = self.plan.spec.pod();
        PodSpec {
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
            ..Default::default()
        }
    }

    fn job_selector(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(labels::JOB.to_string(), self.target.job.clone())])
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

fn non_empty<K, V>(m: BTreeMap<K, V>) -> Option<BTreeMap<K, V>> {
    (!m.is_empty()).then_some(m)
}

fn non_empty_vec<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}
