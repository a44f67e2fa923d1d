//! What a failed test prints: the namespaces' objects and Events, the hub's and spokes' log
//! tails, pods summarized, objects as YAML.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Result;
use flux_shared::api::MiniCluster;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt as _};
use serde::Serialize;
use serde_json::{Value, json};

use super::*;

/// What the test namespace of the burst cluster holds, for diagnostics.
pub(super) async fn describe_spoke_namespace(client: &Client, ns: &str) -> String {
    let mut out = String::new();
    match Api::<Namespace>::all(client.clone()).get_opt(ns).await {
        Ok(Some(n)) => {
            let _ = writeln!(
                out,
                "namespace {ns}: {}",
                n.status.and_then(|s| s.phase).unwrap_or_else(|| "?".into())
            );
        }
        Ok(None) => {
            let _ = writeln!(out, "namespace {ns} does not exist");
            return out;
        }
        Err(e) => {
            let _ = writeln!(out, "cannot read namespace {ns}: {e}");
            return out;
        }
    }
    let all = ListParams::default();
    match Api::<Job>::namespaced(client.clone(), ns).list(&all).await {
        Ok(list) => {
            for job in list {
                let _ = writeln!(
                    out,
                    "--- Job {} (uid {}): labels {:?}, annotations {:?}, spec.parallelism {:?}, status:\n{}",
                    job.name_any(),
                    job.metadata.uid.as_deref().unwrap_or("?"),
                    job.metadata.labels.clone().unwrap_or_default(),
                    job.metadata.annotations.clone().unwrap_or_default(),
                    job.spec.as_ref().and_then(|s| s.parallelism),
                    yaml(&job.status)
                );
            }
        }
        Err(e) => {
            let _ = writeln!(out, "--- cannot list Jobs: {e}");
        }
    }
    let names = |kind: &str, items: Result<Vec<String>, kube::Error>| match items {
        Ok(names) => format!("--- {kind}: {}\n", names.join(", ")),
        Err(e) => format!("--- cannot list {kind}: {e}\n"),
    };
    let cms = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns)
        .list(&all)
        .await
        .map(|l| l.items.iter().map(|o| o.name_any()).collect());
    out.push_str(&names("ConfigMaps", cms));
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns)
        .list(&all)
        .await
        .map(|l| l.items.iter().map(|o| o.name_any()).collect());
    out.push_str(&names("Secrets", secrets));
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), ns)
        .list(&all)
        .await
        .map(|l| l.items.iter().map(|o| o.name_any()).collect());
    out.push_str(&names("Services", services));
    match Api::<Pod>::namespaced(client.clone(), ns).list(&all).await {
        Ok(list) => {
            let _ = writeln!(out, "--- Pods:\n{}", pod_summary(&list.items));
        }
        Err(e) => {
            let _ = writeln!(out, "--- cannot list Pods: {e}");
        }
    }
    match Api::<Event>::namespaced(client.clone(), ns)
        .list(&all)
        .await
    {
        Ok(list) => {
            let _ = writeln!(out, "--- Events:");
            for e in &list.items {
                let _ = writeln!(out, "{}", describe_event(e));
            }
        }
        Err(e) => {
            let _ = writeln!(out, "--- cannot list Events: {e}");
        }
    }
    out
}

/// An object as YAML for messages, without managedFields and with Secret values hidden.
pub fn yaml<T: Serialize>(obj: &T) -> String {
    let mut v = serde_json::to_value(obj).unwrap_or(Value::Null);
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
    if v.get("kind").and_then(Value::as_str) == Some("Secret")
        && let Some(data) = v.get_mut("data").and_then(Value::as_object_mut)
    {
        for value in data.values_mut() {
            *value = json!("<redacted>");
        }
    }
    serde_yaml_ng::to_string(&v).unwrap_or_else(|e| format!("<unprintable: {e}>"))
}

/// One line per Event.
pub fn describe_event(e: &Event) -> String {
    let regarding = e.regarding.as_ref().map_or_else(String::new, |r| {
        format!(
            "{}/{}",
            r.kind.as_deref().unwrap_or(""),
            r.name.as_deref().unwrap_or("")
        )
    });
    format!(
        "{} {} {regarding}: {}",
        e.type_.as_deref().unwrap_or(""),
        e.reason.as_deref().unwrap_or(""),
        e.note.as_deref().unwrap_or("")
    )
}

/// One line per pod: phase, why it is not scheduled, why containers wait or ended.
pub fn pod_summary(pods: &[Pod]) -> String {
    if pods.is_empty() {
        return "(no pods)\n".into();
    }
    let mut out = String::new();
    for pod in pods {
        let status = pod.status.as_ref();
        let _ = write!(
            out,
            "{}: {}",
            pod.name_any(),
            status.and_then(|s| s.phase.as_deref()).unwrap_or("?")
        );
        for c in status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
        {
            if c.status != "True" && c.reason.is_some() {
                let _ = write!(
                    out,
                    "; {} {}: {}",
                    c.type_,
                    c.reason.as_deref().unwrap_or(""),
                    c.message.as_deref().unwrap_or("")
                );
            }
        }
        let containers = status
            .into_iter()
            .flat_map(|s| {
                s.init_container_statuses
                    .iter()
                    .chain(s.container_statuses.iter())
            })
            .flatten();
        for c in containers {
            let state = c.state.as_ref();
            if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
                let _ = write!(
                    out,
                    "; {} waiting: {} {}",
                    c.name,
                    w.reason.as_deref().unwrap_or(""),
                    w.message.as_deref().unwrap_or("")
                );
            } else if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
                let _ = write!(
                    out,
                    "; {} exited {} {}",
                    c.name,
                    t.exit_code,
                    t.reason.as_deref().unwrap_or("")
                );
            } else if state.is_some_and(|s| s.running.is_some()) {
                let _ = write!(out, "; {} running (restarts {})", c.name, c.restart_count);
            }
        }
        out.push('\n');
    }
    out
}

/// Whether a pod has started running (or already finished).
pub fn pod_ran(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running" | "Succeeded")
    )
}

impl TestEnv {
    /// Prints what the namespace holds and the hub's logs.
    pub(super) async fn dump(&self) {
        let mut out = format!(
            "===== diagnostics of test {} (namespace {}) =====\n",
            self.test, self.ns
        );
        match self.api::<MiniCluster>().list(&ListParams::default()).await {
            Ok(list) => {
                for mc in list {
                    let _ = writeln!(out, "--- MiniCluster {}:\n{}", mc.name_any(), yaml(&mc));
                }
            }
            Err(e) => {
                let _ = writeln!(out, "--- cannot list MiniClusters: {e}");
            }
        }
        match self.api::<Job>().list(&ListParams::default()).await {
            Ok(list) => {
                for job in list {
                    let _ = writeln!(
                        out,
                        "--- Job {}: spec.parallelism {:?}, status:\n{}",
                        job.name_any(),
                        job.spec.as_ref().and_then(|s| s.parallelism),
                        yaml(&job.status)
                    );
                }
            }
            Err(e) => {
                let _ = writeln!(out, "--- cannot list Jobs: {e}");
            }
        }
        match self.api::<Pod>().list(&ListParams::default()).await {
            Ok(list) => {
                let _ = writeln!(out, "--- Pods:\n{}", pod_summary(&list.items));
            }
            Err(e) => {
                let _ = writeln!(out, "--- cannot list Pods: {e}");
            }
        }
        match self.api::<Event>().list(&ListParams::default()).await {
            Ok(list) => {
                let _ = writeln!(out, "--- Events:");
                for e in &list.items {
                    let _ = writeln!(out, "{}", describe_event(e));
                }
            }
            Err(e) => {
                let _ = writeln!(out, "--- cannot list Events: {e}");
            }
        }
        for log in lock(&self.hub_logs).iter() {
            let _ = writeln!(
                out,
                "--- hub log {} (tail):\n{}",
                log.display(),
                tail(log, 200)
            );
        }
        let spokes: Vec<(String, Client, String, Vec<PathBuf>)> = lock(&self.spokes)
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    s.client.clone(),
                    s.config.cluster_url.to_string(),
                    s.logs.clone(),
                )
            })
            .collect();
        for (spoke, client, url, logs) in spokes {
            let _ = writeln!(
                out,
                "--- burst cluster of spoke {spoke} ({url}), namespace {}:",
                self.ns
            );
            out.push_str(&describe_spoke_namespace(&client, &self.ns).await);
            for log in &logs {
                let _ = writeln!(
                    out,
                    "--- log of spoke {spoke} {} (tail):\n{}",
                    log.display(),
                    tail(log, 200)
                );
            }
        }
        let _ = writeln!(out, "===== end of diagnostics of test {} =====", self.test);
        eprintln!("{out}");
    }
}
