//! Reading the burst cluster: a spoke's objects by name and uid, whether they are still there
//! and the same, their Jobs, and reports of the root's pods and status for failures.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result, bail};
use flux_shared::api::MiniCluster;
use flux_shared::render::{self, Object};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::ResourceExt as _;
use kube::api::{Api, ListParams};

use crate::support::{Probe, TestEnv, pod_ran, pod_summary, yaml};

use super::burst_fixture::*;

/// Waits for Job `name` of the burst cluster (`jobs`), showing the MiniCluster's status
/// meanwhile.
pub(crate) async fn spoke_job(
    env: &TestEnv,
    jobs: &Api<Job>,
    name: &str,
    what: &str,
) -> Result<Job> {
    env.eventually(what, objects_deadline(), async || {
        Ok(match jobs.get_opt(name).await? {
            Some(job) => Probe::Done(job),
            None => Probe::Waiting(status_of(env).await),
        })
    })
    .await
}

pub(crate) fn config_map(objects: &[Object], name: &str) -> Result<ConfigMap> {
    objects
        .iter()
        .find_map(|o| match o {
            Object::ConfigMap(c) if c.name_any() == name => Some(c.clone()),
            _ => None,
        })
        .with_context(|| format!("no ConfigMap {name} rendered"))
}

/// Waits for a namespaced object in the test namespace of the burst cluster of `spoke`.
pub(crate) async fn wait_spoke_object<K>(env: &TestEnv, spoke: &str, name: &str) -> Result<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    <K as kube::Resource>::DynamicType: Default,
{
    let api = env.spoke_api_of::<K>(spoke);
    let kind = K::kind(&Default::default()).to_string();
    env.eventually(
        &format!("{kind} {name} in the burst cluster of spoke {spoke}"),
        objects_deadline(),
        async || {
            Ok(match api.get_opt(name).await? {
                Some(o) => Probe::Done(o),
                None => Probe::Waiting(status_of(env).await),
            })
        },
    )
    .await
}

pub(crate) fn spoke_object<K: kube::Resource>(kind: &'static str, o: &K) -> SpokeObject {
    SpokeObject {
        kind,
        name: o.name_any(),
        uid: o.meta().uid.clone(),
    }
}

/// The uid of an object of the burst cluster's test namespace, `None` when it is absent.
pub(crate) async fn spoke_uid(env: &TestEnv, kind: &str, name: &str) -> Result<Option<String>> {
    let uid = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| meta.uid.clone();
    Ok(match kind {
        "Job" => env
            .spoke_api::<Job>()
            .get_opt(name)
            .await?
            .and_then(|o| uid(&o.metadata)),
        "ConfigMap" => env
            .spoke_api::<ConfigMap>()
            .get_opt(name)
            .await?
            .and_then(|o| uid(&o.metadata)),
        "Secret" => env
            .spoke_api::<Secret>()
            .get_opt(name)
            .await?
            .and_then(|o| uid(&o.metadata)),
        "Service" => env
            .spoke_api::<Service>()
            .get_opt(name)
            .await?
            .and_then(|o| uid(&o.metadata)),
        other => bail!("unexpected kind {other}"),
    })
}

/// Which of `objects` (the very objects, by uid) still exist.
pub(crate) async fn still_there(env: &TestEnv, objects: &[SpokeObject]) -> Result<Vec<String>> {
    let mut left = Vec::new();
    for o in objects {
        let uid = spoke_uid(env, o.kind, &o.name).await?;
        if uid.is_some() && uid == o.uid {
            left.push(format!("{} {}", o.kind, o.name));
        }
    }
    Ok(left)
}

/// `None` while every one of `objects` exists with its uid, else what changed.
pub(crate) async fn same_objects(env: &TestEnv, objects: &[SpokeObject]) -> Result<Option<String>> {
    let mut changed = Vec::new();
    for o in objects {
        match spoke_uid(env, o.kind, &o.name).await? {
            None => changed.push(format!("{} {} was deleted", o.kind, o.name)),
            Some(uid) if Some(&uid) != o.uid.as_ref() => {
                changed.push(format!("{} {} was re-created (uid {uid})", o.kind, o.name))
            }
            Some(_) => {}
        }
    }
    Ok((!changed.is_empty()).then(|| changed.join("; ")))
}

/// Objects of the burst (`flux-framework.org/burst=<burst>`) in the burst cluster of
/// `spoke`.
pub(crate) async fn spoke_objects_of(
    env: &TestEnv,
    spoke: &str,
    burst: &str,
) -> Result<Vec<String>> {
    let by_label = ListParams::default().labels(&format!("{}={burst}", render::labels::BURST));
    let mut found = Vec::new();
    for o in env.spoke_api_of::<Job>(spoke).list(&by_label).await? {
        found.push(format!("Job {}", o.name_any()));
    }
    for o in env.spoke_api_of::<ConfigMap>(spoke).list(&by_label).await? {
        found.push(format!("ConfigMap {}", o.name_any()));
    }
    for o in env.spoke_api_of::<Secret>(spoke).list(&by_label).await? {
        found.push(format!("Secret {}", o.name_any()));
    }
    for o in env.spoke_api_of::<Service>(spoke).list(&by_label).await? {
        found.push(format!("Service {}", o.name_any()));
    }
    Ok(found)
}

/// A Job's pod selector as a label selector string.
pub(crate) fn job_selector(job: &Job) -> Result<String> {
    job.spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(|s| s.match_labels.as_ref())
        .filter(|l| !l.is_empty())
        .map(|l: &BTreeMap<String, String>| {
            l.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .with_context(|| format!("Job {} has no selector yet", job.name_any()))
}

/// The MiniCluster's status, for waiting messages.
pub(crate) async fn status_of(env: &TestEnv) -> String {
    match env.api::<MiniCluster>().get_opt(NAME).await {
        Ok(Some(mc)) => format!("MiniCluster status:\n{}", yaml(&mc.status)),
        Ok(None) => "the MiniCluster does not exist".into(),
        Err(e) => format!("cannot read the MiniCluster: {e}"),
    }
}

/// The root Job's pods, for waiting messages.
pub(crate) async fn root_pods(env: &TestEnv) -> String {
    let Ok(job) = env.api::<Job>().get(NAME).await else {
        return "(no root Job)\n".into();
    };
    match env.job_pods(&job).await {
        Ok(pods) => pod_summary(&pods),
        Err(e) => format!("(cannot list them: {e:#})\n"),
    }
}

/// Pod phases and the last log lines of started containers in the burst cluster.
pub(crate) async fn pod_report(api: &Api<Pod>, pods: &[Pod]) -> String {
    let mut out = pod_summary(pods);
    for pod in pods.iter().filter(|p| pod_ran(p)) {
        let params = kube::api::LogParams {
            container: Some(NAME.to_string()),
            tail_lines: Some(30),
            ..Default::default()
        };
        let logs = api
            .logs(&pod.name_any(), &params)
            .await
            .unwrap_or_else(|e| format!("(no logs: {e})"));
        out.push_str(&format!("--- logs of {} (tail):\n{logs}\n", pod.name_any()));
    }
    out
}

/// (resourceVersion, uid) of an object of the burst cluster's test namespace.
pub(crate) async fn spoke_meta(
    env: &TestEnv,
    spoke: &str,
    kind: &str,
    name: &str,
) -> Result<Option<(String, String)>> {
    let meta = match kind {
        "Job" => env
            .spoke_api_of::<Job>(spoke)
            .get_opt(name)
            .await?
            .map(|o| o.metadata),
        "ConfigMap" => env
            .spoke_api_of::<ConfigMap>(spoke)
            .get_opt(name)
            .await?
            .map(|o| o.metadata),
        "Secret" => env
            .spoke_api_of::<Secret>(spoke)
            .get_opt(name)
            .await?
            .map(|o| o.metadata),
        "Service" => env
            .spoke_api_of::<Service>(spoke)
            .get_opt(name)
            .await?
            .map(|o| o.metadata),
        other => bail!("unexpected kind {other}"),
    };
    Ok(meta.map(|m| {
        (
            m.resource_version.unwrap_or_default(),
            m.uid.unwrap_or_default(),
        )
    }))
}

/// `None` while every squatted object is exactly as created, else what changed.
pub(crate) async fn untouched(
    env: &TestEnv,
    spoke: &str,
    objects: &[(&'static str, String, String, String)],
) -> Result<Option<String>> {
    let mut changed = Vec::new();
    for (kind, name, rv, uid) in objects {
        match spoke_meta(env, spoke, kind, name).await? {
            None => changed.push(format!("{kind} {name} was deleted")),
            Some((v, u)) if (&v, &u) != (rv, uid) => changed.push(format!(
                "{kind} {name} changed (resourceVersion {rv} -> {v}, uid {uid} -> {u})"
            )),
            Some(_) => {}
        }
    }
    Ok((!changed.is_empty()).then(|| changed.join("; ")))
}
