//! What the install commands (`init`, `join`, `unjoin`) do to a cluster: a client from
//! the kubeconfig flags, server-side applies of an install's objects with
//! [`INSTALLER_FIELD_MANAGER`](flux_shared::crd::INSTALLER_FIELD_MANAGER) (undone when one fails), and the wait until a Deployment is
//! available, saying why it is not.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde::Serialize;
use serde_json::Value;

use crate::commands::install;

/// The cluster an install command works on.
#[derive(clap::Args, Debug, Clone)]
pub struct ClusterOptions {
    /// Kubeconfig of the cluster (default: KUBECONFIG, then ~/.kube/config, then
    /// in-cluster).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Context of the kubeconfig to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

impl ClusterOptions {
    /// A client of that cluster.
    pub async fn client(&self) -> anyhow::Result<Client> {
        client(self.kubeconfig.as_deref(), self.context.as_deref()).await
    }
}

/// What happened to one object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// It did not exist.
    Created,
    /// It existed and changed.
    Configured,
    /// It existed as it is.
    Unchanged,
}

/// One applied object.
#[derive(Clone, Debug, Serialize)]
pub struct Applied {
    /// `Kind namespace/name`.
    pub object: String,
    /// What happened.
    pub outcome: Outcome,
}

/// A client of the cluster of `kubeconfig` / `context` (or the default one).
pub async fn client(kubeconfig: Option<&Path>, context: Option<&str>) -> anyhow::Result<Client> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("--kubeconfig {}: cannot read it", path.display()))?;
            Config::from_custom_kubeconfig(kc, &options)
                .await
                .with_context(|| format!("--kubeconfig {}", path.display()))?
        }
        None if context.is_some() => Config::from_kubeconfig(&options)
            .await
            .context("--context: the default kubeconfig")?,
        None => Config::infer()
            .await
            .context("no cluster configuration (set --kubeconfig or KUBECONFIG)")?,
    };
    let url = config.cluster_url.to_string();
    Client::try_from(config).with_context(|| format!("a client for {url}"))
}

/// Server-side applies `objects` in order (field manager [`INSTALLER_FIELD_MANAGER`](flux_shared::crd::INSTALLER_FIELD_MANAGER)),
/// saying each on standard error. On a failure, what this call created is deleted again
/// (in reverse order) before the error is returned.
pub async fn apply_all(client: &Client, objects: &[Value]) -> anyhow::Result<Vec<Applied>> {
    let params = PatchParams::apply(flux_shared::crd::INSTALLER_FIELD_MANAGER).force();
    let mut applied = Vec::new();
    let mut created: Vec<(Api<DynamicObject>, String, String)> = Vec::new();
    for object in objects {
        let what = install::describe(object);
        let result = apply_one(client, object, &params).await;
        match result {
            Ok((outcome, api, name)) => {
                eprintln!("{what}: {}", outcome_word(&outcome));
                if outcome == Outcome::Created {
                    created.push((api, name, what.clone()));
                }
                applied.push(Applied {
                    object: what,
                    outcome,
                });
            }
            Err(e) => {
                for (api, name, what) in created.iter().rev() {
                    match api.delete(name, &DeleteParams::background()).await {
                        Ok(_) => eprintln!("{what}: deleted again (the install failed)"),
                        Err(error) => eprintln!("{what}: could not delete it again: {error}"),
                    }
                }
                return Err(e.context(format!("applying {what}")));
            }
        }
    }
    Ok(applied)
}

fn outcome_word(o: &Outcome) -> &'static str {
    match o {
        Outcome::Created => "created",
        Outcome::Configured => "configured",
        Outcome::Unchanged => "unchanged",
    }
}

async fn apply_one(
    client: &Client,
    object: &Value,
    params: &PatchParams,
) -> anyhow::Result<(Outcome, Api<DynamicObject>, String)> {
    let Some((resource, namespaced)) = install::resource_of(object) else {
        bail!("the installer does not know this kind");
    };
    let name = object["metadata"]["name"]
        .as_str()
        .context("no metadata.name")?
        .to_string();
    let api: Api<DynamicObject> = if namespaced {
        let ns = object["metadata"]["namespace"]
            .as_str()
            .context("no metadata.namespace")?;
        Api::namespaced_with(client.clone(), ns, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    let before = api.get_opt(&name).await.map_err(explain)?;
    let after = api
        .patch(&name, params, &Patch::Apply(install::dynamic(object)?))
        .await
        .map_err(explain)?;
    let outcome = match before {
        None => Outcome::Created,
        Some(b) if unchanged(&b, &after) => Outcome::Unchanged,
        Some(_) => Outcome::Configured,
    };
    Ok((outcome, api, name))
}

/// Whether an apply left an object as it was: the same resourceVersion, or only what
/// others write changed in between (its status, such as the type checking the API server
/// writes into a ValidatingAdmissionPolicy, and its managedFields).
fn unchanged(before: &DynamicObject, after: &DynamicObject) -> bool {
    if before.metadata.resource_version == after.metadata.resource_version {
        return true;
    }
    let ours = |o: &DynamicObject| {
        let mut metadata = o.metadata.clone();
        metadata.resource_version = None;
        metadata.managed_fields = None;
        let mut data = o.data.clone();
        if let Some(map) = data.as_object_mut() {
            map.remove("status");
        }
        (metadata, data)
    };
    ours(before) == ours(after)
}

/// A Kubernetes error with what it means for the installer.
pub(crate) fn explain(e: kube::Error) -> anyhow::Error {
    match e {
        kube::Error::Api(s) if s.code == 403 => anyhow::anyhow!(
            "missing rights: {} (the installer needs cluster-admin-like rights to install RBAC and the CRD)",
            s.message
        ),
        kube::Error::Api(s) => {
            anyhow::anyhow!("the API server refused it ({}): {}", s.code, s.message)
        }
        e => anyhow::anyhow!("cannot reach the cluster: {e}"),
    }
}

/// How long an image that cannot be pulled is waited for before giving up: a registry may
/// be slow once, but a wrong name or tag does not heal.
const PULL_FAILURE_GRACE: Duration = Duration::from_secs(30);

/// Why a pod of the Deployment is not running yet, when it is something the user must fix
/// or should know about: a container that cannot pull its image (`pull` is true), crashes,
/// or lacks its configuration, or a pod that cannot be scheduled.
fn pod_blocker(pod: &Pod) -> Option<(bool, String)> {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let status = pod.status.as_ref()?;
    let statuses = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    for c in statuses {
        let Some(waiting) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
            continue;
        };
        let reason = waiting.reason.as_deref().unwrap_or_default();
        let pull = matches!(
            reason,
            "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "ErrImageNeverPull"
        );
        if pull
            || matches!(
                reason,
                "CrashLoopBackOff" | "CreateContainerConfigError" | "CreateContainerError"
            )
        {
            let message = waiting.message.as_deref().unwrap_or_default();
            return Some((
                pull,
                format!(
                    "pod {name}: container {} ({}): {reason}{}{message}",
                    c.name,
                    c.image,
                    if message.is_empty() { "" } else { ": " }
                ),
            ));
        }
    }
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| {
            (
                false,
                format!(
                    "pod {name}: not scheduled: {}",
                    c.message.as_deref().unwrap_or("no reason given")
                ),
            )
        })
}

/// Where Deployment `d`'s rollout stands: `Ok` once its controller saw the current spec,
/// no pod of an older template is left and one of the current template is available;
/// otherwise what it waits for. Any available replica is not enough: over an existing
/// install the old pods stay available while the new ones start, and they still run the
/// old configuration (a hub or spoke rolled for a new certificate keeps serving the old
/// one until its old pods are gone).
pub fn rollout_state(d: &Deployment) -> Result<(), String> {
    let status = d.status.clone().unwrap_or_default();
    let generation = d.metadata.generation.unwrap_or(0);
    let wanted = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let updated = status.updated_replicas.unwrap_or(0);
    let total = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    if status.observed_generation.unwrap_or(0) < generation {
        return Err("its controller has not seen the new spec yet".into());
    }
    if total > updated {
        return Err(format!(
            "{} of {total} pods still from the previous template",
            total - updated
        ));
    }
    if available == 0 || updated == 0 {
        return Err(format!("{available} available of {wanted}"));
    }
    Ok(())
}

/// Waits until Deployment `namespace/name` has rolled out (see [`rollout_state`]), saying
/// what its pods wait for; gives up early when its image cannot be pulled.
pub async fn wait_available(
    client: &Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let start = Instant::now();
    let mut last = String::new();
    let mut pull_failing_since: Option<Instant> = None;
    loop {
        let d = api.get(name).await.map_err(explain)?;
        let Err(waiting) = rollout_state(&d) else {
            return Ok(());
        };
        let selector = d
            .spec
            .as_ref()
            .and_then(|s| s.selector.match_labels.as_ref())
            .map(|labels| {
                labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        let blockers: Vec<(bool, String)> = if selector.is_empty() {
            Vec::new()
        } else {
            pods.list(&ListParams::default().labels(&selector))
                .await
                .map_err(explain)?
                .items
                .iter()
                .filter_map(pod_blocker)
                .collect()
        };
        let said = format!(
            "Deployment {namespace}/{name}: {waiting}{}",
            blockers
                .first()
                .map(|(_, why)| format!("; {why}"))
                .unwrap_or_default()
        );
        if said != last {
            eprintln!("{said}; waiting");
            last = said;
        }
        let pull_failure = blockers.iter().find(|(pull, _)| *pull);
        match (pull_failure, pull_failing_since) {
            (Some((_, why)), Some(since)) if since.elapsed() >= PULL_FAILURE_GRACE => bail!(
                "Deployment {namespace}/{name}: its image cannot be pulled ({}s): {why} (give an image the cluster's nodes can pull with --image)",
                since.elapsed().as_secs()
            ),
            (Some(_), None) => pull_failing_since = Some(Instant::now()),
            (None, _) => pull_failing_since = None,
            _ => {}
        }
        if start.elapsed() > timeout {
            bail!(
                "Deployment {namespace}/{name} has not rolled out after {}s ({waiting}){} (kubectl -n {namespace} describe deployment {name})",
                timeout.as_secs(),
                blockers
                    .first()
                    .map(|(_, why)| format!(": {why}"))
                    .unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

    fn deployment(generation: i64, status: Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "flux-hub", "generation": generation},
            "spec": {"replicas": 2, "selector": {}, "template": {}},
            "status": status,
        }))
        .expect("a Deployment")
    }

    #[test]
    fn a_rollout_is_done_when_no_old_pod_is_left_and_a_new_one_is_available() {
        // Over an existing install: the old pods are available, the new spec not seen yet.
        let d = deployment(
            3,
            json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2}),
        );
        assert_eq!(
            rollout_state(&d),
            Err("its controller has not seen the new spec yet".to_string())
        );
        // Seen: a new pod started, both old ones still there and available.
        let d = deployment(
            3,
            json!({"observedGeneration": 3, "replicas": 3, "updatedReplicas": 1, "availableReplicas": 2}),
        );
        assert_eq!(
            rollout_state(&d),
            Err("2 of 3 pods still from the previous template".to_string())
        );
        // Only new pods, none available yet.
        let d = deployment(
            3,
            json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2}),
        );
        assert_eq!(rollout_state(&d), Err("0 available of 2".to_string()));
        // One of the new pods available: the old configuration is gone.
        let d = deployment(
            3,
            json!({"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 1}),
        );
        assert_eq!(rollout_state(&d), Ok(()));
        // A fresh install with no status yet.
        let d = deployment(1, json!({}));
        assert!(rollout_state(&d).is_err());
    }

    #[test]
    fn status_writes_of_others_are_not_changes() {
        let object = |rv: &str, status: &str, label: &str| -> DynamicObject {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "X",
                "metadata": {"name": "x", "resourceVersion": rv, "labels": {"a": label}},
                "spec": {"n": 1}, "status": {"s": status},
            }))
            .expect("object")
        };
        assert!(unchanged(&object("1", "a", "l"), &object("1", "a", "l")));
        assert!(unchanged(&object("1", "a", "l"), &object("2", "b", "l")));
        assert!(!unchanged(&object("1", "a", "l"), &object("2", "a", "m")));
    }

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": "flux-hub-1"}, "status": status}),
        )
        .expect("pod")
    }

    #[test]
    fn a_pod_that_cannot_pull_its_image_or_be_scheduled_says_why() {
        let pulling = pod(serde_json::json!({"containerStatuses": [{
            "name": "hub", "image": "flux-hub:dev", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"flux-hub:dev\""}},
        }]}));
        assert_eq!(
            pod_blocker(&pulling),
            Some((
                true,
                "pod flux-hub-1: container hub (flux-hub:dev): ImagePullBackOff: Back-off pulling image \"flux-hub:dev\"".into()
            ))
        );
        let crashing = pod(serde_json::json!({"containerStatuses": [{
            "name": "hub", "image": "i", "imageID": "", "ready": false, "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        }]}));
        assert_eq!(
            pod_blocker(&crashing),
            Some((
                false,
                "pod flux-hub-1: container hub (i): CrashLoopBackOff".into()
            ))
        );
        let unscheduled = pod(serde_json::json!({"conditions": [{
            "type": "PodScheduled", "status": "False", "message": "0/1 nodes are available",
        }]}));
        assert_eq!(
            pod_blocker(&unscheduled),
            Some((
                false,
                "pod flux-hub-1: not scheduled: 0/1 nodes are available".into()
            ))
        );
        let starting = pod(serde_json::json!({"containerStatuses": [{
            "name": "hub", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}},
        }]}));
        assert_eq!(pod_blocker(&starting), None);
    }
}
