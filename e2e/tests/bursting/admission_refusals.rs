//! Bursts refused before anything is written: an unsafe burst, a huge MiniCluster, and a
//! burst mounting the burst cluster owner's Secret.

use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use flux_shared::api::MiniCluster;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use crate::support;
use crate::support::{Federation, Probe, TestEnv, secs, yaml};

use super::burst_fixture::*;
use super::burst_steps::*;
use super::spoke_objects::*;

/// Safe bursts by default: a burst asking for the spoke's service account and its token, a
/// privileged container and the node's `/` is not assigned (status.bursts[] Invalid,
/// `UnsafeBurst`, each field named, one Event) and nothing of it reaches the burst cluster.
/// And sizes are bounded (docs/limits.md): `maxSize: 10000000` is refused by the API server
/// (the CRD's maximum); a total over the limit that no single field shows is refused by
/// the hub (status Invalid, naming the rule).
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn an_unsafe_burst_and_a_huge_minicluster_are_refused_and_write_nothing() {
    support::run_federated("burst-unsafe", "e2e-spoke", unsafe_and_huge).await;
}

/// A burst borrows nothing of its cluster: the burst cluster's owner keeps a token Secret
/// in the admitted namespace, and a MiniCluster whose burst mounts it (and names a
/// toleration) is not assigned (UnsafeBurst, each field named) and no Job of it reaches
/// the burst cluster; once the owner's policy lists both, the burst runs with them.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn a_burst_cannot_mount_the_burst_cluster_owners_secret() {
    support::run_federated("burst-borrow", "e2e-spoke", borrowing).await;
}

async fn borrowing(env: &TestEnv, fed: &Federation) -> Result<()> {
    // The owner's namespace in the burst cluster, with a Secret of theirs.
    let namespaces: Api<Namespace> = Api::all(env.spoke_client());
    if namespaces.get_opt(&env.ns).await?.is_none() {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": env.ns}}))?,
            )
            .await?;
    }
    env.spoke_api::<Secret>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "owner-token"},
                "stringData": {"token": "the owner's API token"},
            }))?,
        )
        .await?;
    let burst = burst_name(&env.ns);
    let mut doc = minicluster(&burst, fed.spoke(), lead_address_override().as_deref());
    doc["spec"]["containers"][0]["volumes"] =
        json!({"token": {"secretName": "owner-token", "path": "/token"}});
    doc["spec"]["pod"] = json!({"tolerations": [{"key": "dedicated", "operator": "Exists"}]});
    env.apply_minicluster(&doc).await?;
    let (_, message) = wait_burst_phase(env, "Invalid", objects_deadline()).await?;
    for part in [
        "UnsafeBurst: ",
        "spec.containers[0].volumes[\"token\"].secretName",
        "allow.secrets",
        "spec.pod.tolerations[0]",
    ] {
        ensure!(
            message.contains(part),
            "{part:?} not in the burst's message: {message}"
        );
    }
    let jobs = env.spoke_api::<Job>();
    env.holds_for(
        "no Job of the borrowing burst in the burst cluster",
        Duration::from_secs(5),
        async || {
            Ok(jobs
                .get_opt(&burst)
                .await?
                .map(|_| "a Job was created".to_string()))
        },
    )
    .await?;

    // The owner lists the Secret and the taint: the burst runs with them.
    env.set_spoke_policy_of(
        fed.spoke(),
        Some(&format!(
            "namespaces:\n- name: {}\n  podSecurity: privileged\n  allow: {{secrets: [owner-token], tolerations: [dedicated]}}\n",
            env.ns
        )),
    )
    .await?;
    let job = spoke_job(
        env,
        &jobs,
        &burst,
        "the burst's Job, once the owner's policy lists the Secret",
    )
    .await?;
    let pod = job
        .spec
        .and_then(|s| s.template.spec)
        .context("the Job's pod template")?;
    ensure!(
        pod.volumes.iter().flatten().any(|v| v
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref())
            == Some("owner-token")),
        "the listed Secret is mounted: {:?}",
        pod.volumes
    );
    Ok(())
}

async fn unsafe_and_huge(env: &TestEnv, fed: &Federation) -> Result<()> {
    let burst = burst_name(&env.ns);
    let mut doc = minicluster(&burst, fed.spoke(), lead_address_override().as_deref());
    doc["spec"]["pod"] =
        json!({"serviceAccountName": "flux-spoke", "automountServiceAccountToken": true});
    doc["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    doc["spec"]["containers"][0]["volumes"] = json!({"root": {"hostPath": "/", "path": "/host"}});
    env.apply_minicluster(&doc).await?;
    let (_, message) = wait_burst_phase(env, "Invalid", objects_deadline()).await?;
    for part in [
        "UnsafeBurst: ",
        "spec.pod.serviceAccountName",
        "spec.pod.automountServiceAccountToken",
        "spec.containers[0].securityContext.privileged",
        "spec.containers[0].volumes[\"root\"].hostPath",
    ] {
        ensure!(
            message.contains(part),
            "{part:?} not in the burst's message: {message}"
        );
    }
    let events = env.events_about("MiniCluster", NAME).await?;
    let refusals = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("UnsafeBurst"))
        .count();
    ensure!(refusals == 1, "one UnsafeBurst Event, found {refusals}");
    // Over several report intervals: nothing of the burst in the burst cluster.
    env.holds_for(
        "nothing of the unsafe burst in the burst cluster",
        Duration::from_secs(10),
        async || {
            let mut found = spoke_objects_of(env, fed.spoke(), &burst).await?;
            let all = ListParams::default();
            let ns = &env.ns;
            for j in env.spoke_api::<Job>().list(&all).await? {
                found.push(format!("Job {ns}/{}", j.name_any()));
            }
            for c in env.spoke_api::<ConfigMap>().list(&all).await? {
                // Every namespace has the API server's CA bundle.
                if c.name_any() != "kube-root-ca.crt" {
                    found.push(format!("ConfigMap {ns}/{}", c.name_any()));
                }
            }
            for s in env.spoke_api::<Secret>().list(&all).await? {
                found.push(format!("Secret {ns}/{}", s.name_any()));
            }
            for s in env.spoke_api::<Service>().list(&all).await? {
                found.push(format!("Service {ns}/{}", s.name_any()));
            }
            Ok((!found.is_empty()).then(|| format!("written: {}", found.join(", "))))
        },
    )
    .await?;
    // The burst cluster's owner lists what the burst asks for, but for the token, which no
    // policy lifts: the hub, told by the spoke, refuses it for the token alone. Without
    // it, the burst runs, privileged, as listed.
    env.set_spoke_policy_of(
        fed.spoke(),
        Some(&format!(
            "namespaces:\n- name: {}\n  podSecurity: privileged\n  allow: {{privileged: true, hostPaths: [/], serviceAccounts: [flux-spoke, runner]}}\n",
            env.ns
        )),
    )
    .await?;
    let b = wait_burst(env, "the refusal to name the token alone", |b| {
        b.message.as_deref().is_some_and(|m| {
            m.starts_with("UnsafeBurst: ")
                && m.contains("spec.pod.automountServiceAccountToken")
                && !m.contains("privileged")
                && !m.contains("hostPath")
                && !m.contains("serviceAccountName")
        })
    })
    .await?;
    ensure!(b.phase == "Invalid", "{b:?}");
    // The same burst without the token, in a MiniCluster of its own (a running Job's pods
    // cannot change): it runs as the policy allows.
    // Its pods run as `runner`, which exists in the root's namespace (the Job controller
    // creates no pod for an account that does not).
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = env.api();
    accounts
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": "runner"}}))?,
        )
        .await?;
    let listed = format!("{burst}-ok");
    let mut ok = minicluster(&listed, fed.spoke(), lead_address_override().as_deref());
    ok["metadata"]["name"] = json!("listed");
    ok["spec"]["pod"] = json!({"serviceAccountName": "runner"});
    ok["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    ok["spec"]["containers"][0]["volumes"] = json!({"root": {"hostPath": "/", "path": "/host"}});
    env.apply_minicluster(&ok).await?;
    let jobs = env.spoke_api::<Job>();
    let job = env
        .eventually(
            "the listed burst's Job in the burst cluster, as the policy allows",
            objects_deadline(),
            async || {
                Ok(match jobs.get_opt(&listed).await? {
                    Some(job) => Probe::Done(job),
                    None => Probe::Waiting("no Job yet".into()),
                })
            },
        )
        .await?;
    let pod = job
        .spec
        .and_then(|s| s.template.spec)
        .context("the Job's pod template")?;
    ensure!(
        pod.service_account_name.as_deref() == Some("runner")
            && pod.containers.iter().any(|c| {
                c.security_context
                    .as_ref()
                    .and_then(|s| s.privileged)
                    .unwrap_or(false)
            }),
        "the burst runs as the policy allows: {pod:?}"
    );
    eprintln!(
        "{}: the spoke's exceptions let the privileged burst run",
        env.ns
    );

    let mcs = env.api::<MiniCluster>();
    mcs.delete("listed", &DeleteParams::background()).await?;
    mcs.delete(NAME, &DeleteParams::background()).await?;
    env.eventually("the unsafe MiniCluster gone", secs(60), async || {
        Ok(match mcs.get_opt(NAME).await? {
            None => Probe::Done(()),
            Some(mc) => Probe::Waiting(yaml(&mc.status)),
        })
    })
    .await?;

    // Ten million hosts: the CRD's maximum refuses it at the API server.
    let mut huge = minicluster(&burst, fed.spoke(), None);
    huge["metadata"]["name"] = json!("huge");
    huge["spec"]["maxSize"] = json!(10_000_000);
    match env.apply_minicluster(&huge).await {
        Ok(_) => bail!("the API server accepted maxSize 10000000"),
        Err(e) => {
            let text = e.to_string();
            ensure!(
                text.contains("maxSize") && text.contains("16384"),
                "the refusal names the field and the limit: {text}"
            );
        }
    }
    // 10000 + 10000 hosts: each field within the CRD's maximum, the total refused by the hub.
    let mut total = minicluster(&burst, fed.spoke(), None);
    total["metadata"]["name"] = json!("total");
    total["spec"]["size"] = json!(1);
    total["spec"]["maxSize"] = json!(10_000);
    total["spec"]["flux"]["bursting"]["clusters"][0]["size"] = json!(10_000);
    env.apply_minicluster(&total).await?;
    let text = env
        .eventually(
            "MiniCluster total to be Invalid, naming the limit",
            objects_deadline(),
            async || {
                let mc = mcs.get("total").await?;
                let status = mc.status.as_ref();
                let said = status
                    .into_iter()
                    .flat_map(|s| s.conditions.iter())
                    .map(|c| c.message.clone())
                    .find(|m| m.contains("limit of 16384"));
                Ok(match (status.and_then(|s| s.phase.as_deref()), said) {
                    (Some("Invalid"), Some(m)) => Probe::Done(m),
                    _ => Probe::Waiting(yaml(&mc.status)),
                })
            },
        )
        .await?;
    ensure!(
        text.contains("spec.flux.bursting.clusters: the instance declares 20000 hosts"),
        "{text}"
    );
    ensure!(
        env.api::<Job>().get_opt("total").await?.is_none(),
        "no root Job for a refused MiniCluster"
    );
    eprintln!("{}: {message}; {text}", env.ns);
    Ok(())
}
