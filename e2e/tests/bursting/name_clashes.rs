//! Names taken in the burst cluster: refused, other spokes' objects untouched; a second
//! MiniCluster whose burst collides is refused and the first keeps running.

use anyhow::{Context as _, Result, bail, ensure};
use flux_shared::api::MiniCluster;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams};
use serde_json::json;

use crate::support;
use crate::support::{Federation, Probe, TestEnv, secs, yaml};

use super::burst_fixture::*;
use super::burst_steps::*;
use super::spoke_objects::*;

/// "Touch only what we made", in the burst cluster. Someone else's ConfigMap, Secret,
/// headless Service and Job hold every name a burst would use: the spoke refuses the burst
/// (status.bursts[] Refused, reason `NameTaken`, each object named), writes nothing (all four keep
/// their resourceVersion, also over several report intervals), and the four survive the
/// MiniCluster's deletion. Then a running burst, and a second spoke process of the same
/// federation under another name against the same cluster: its first snapshot (empty)
/// deletes none of the first spoke's objects.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn names_taken_in_the_burst_cluster_are_refused_and_other_spokes_objects_survive() {
    support::run_federated("burst-taken", "e2e-spoke", names_taken).await;
}

#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn a_second_minicluster_whose_burst_collides_is_refused_and_the_first_keeps_running() {
    support::run_federated("burst-collide", "e2e-spoke", collide).await;
}

/// Someone else's objects holding the names of burst `burst` in the burst cluster's test
/// namespace: (kind, name, resourceVersion, uid) of each, as created.
async fn squat(
    env: &TestEnv,
    fed: &Federation,
    burst: &str,
) -> Result<Vec<(&'static str, String, String, String)>> {
    let ns_api: Api<Namespace> = Api::all(env.spoke_client_of(fed.spoke()));
    if ns_api.get_opt(&env.ns).await?.is_none() {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": env.ns}}))?;
        ns_api.create(&Default::default(), &ns).await?;
    }
    let labels = json!({"app.kubernetes.io/managed-by": "someone-else", "owner": "e2e"});
    let pp = Default::default();
    let mut out = Vec::new();
    let rv = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        (
            m.resource_version.clone().unwrap_or_default(),
            m.uid.clone().unwrap_or_default(),
        )
    };
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": format!("{burst}-flux-config"), "labels": labels},
        "data": {"theirs": "precious"},
    }))?;
    let cm = env
        .spoke_api_of::<ConfigMap>(fed.spoke())
        .create(&pp, &cm)
        .await?;
    let (v, u) = rv(&cm.metadata);
    out.push(("ConfigMap", cm.name_any(), v, u));
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{burst}-curve"), "labels": labels},
        "stringData": {"password": "hunter2"},
    }))?;
    let secret = env
        .spoke_api_of::<Secret>(fed.spoke())
        .create(&pp, &secret)
        .await?;
    let (v, u) = rv(&secret.metadata);
    out.push(("Secret", secret.name_any(), v, u));
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": burst, "labels": labels},
        "spec": {"clusterIP": "None", "selector": {"app": "theirs"},
                 "ports": [{"name": "db", "port": 5432}]},
    }))?;
    let svc = env
        .spoke_api_of::<Service>(fed.spoke())
        .create(&pp, &svc)
        .await?;
    let (v, u) = rv(&svc.metadata);
    out.push(("Service", svc.name_any(), v, u));
    // Suspended: it runs nothing, so nothing but a writer changes its resourceVersion.
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": burst, "labels": labels},
        "spec": {"suspend": true, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "theirs", "image": image(), "command": ["true"]}],
        }}},
    }))?;
    let job = env
        .spoke_api_of::<Job>(fed.spoke())
        .create(&pp, &job)
        .await?;
    let (v, u) = rv(&job.metadata);
    out.push(("Job", job.name_any(), v, u));
    // The API server may bump a new Job's resourceVersion once (its controller adds a
    // condition or status); take what it settles on.
    tokio::time::sleep(secs(3)).await;
    for o in &mut out {
        if let Some((v, u)) = spoke_meta(env, fed.spoke(), o.0, &o.1).await? {
            o.2 = v;
            o.3 = u;
        }
    }
    Ok(out)
}

async fn names_taken(env: &TestEnv, fed: &Federation) -> Result<()> {
    let mcs = env.api::<MiniCluster>();
    // 1. Every name of the burst taken by someone else.
    let taken = format!("{}-t", burst_name(&env.ns));
    let theirs = squat(env, fed, &taken).await?;
    let doc = minicluster(&taken, fed.spoke(), lead_address_override().as_deref());
    env.apply_minicluster(&doc).await?;
    let message = burst_refused_as_name_taken(env, NAME).await?;
    let (phase, message) = message;
    ensure!(
        phase == "Refused",
        "the refused burst is Refused: {phase}: {message}"
    );
    for (kind, name, _, _) in &theirs {
        ensure!(
            message.contains(&format!("{kind} {}/{name}", env.ns)),
            "the refusal names {kind} {name}: {message}"
        );
    }
    ensure!(
        message.contains("someone-else"),
        "and who owns them: {message}"
    );
    // Several report intervals: still nothing written (not retried every few seconds).
    env.holds_for("the squatted objects untouched", secs(10), async || {
        untouched(env, fed.spoke(), &theirs).await
    })
    .await?;
    eprintln!("{}: refused: {message}", env.ns);
    mcs.delete(NAME, &DeleteParams::background()).await?;
    env.eventually("the MiniCluster gone", secs(120), async || {
        Ok(match mcs.get_opt(NAME).await? {
            None => Probe::Done(()),
            Some(mc) => Probe::Waiting(yaml(&mc.status)),
        })
    })
    .await?;
    tokio::time::sleep(secs(3)).await;
    if let Some(changed) = untouched(env, fed.spoke(), &theirs).await? {
        bail!("deleting the MiniCluster touched someone else's objects: {changed}");
    }

    // 2. A running burst, and a second spoke of this federation (another name) against
    // the same cluster: its first snapshot lists nothing, and deletes nothing of ours.
    let burst = dispatch(env, fed).await?;
    let renamed = format!("{}-renamed", fed.spoke());
    let hub = tokio::task::spawn_blocking(support::hub_binary).await??;
    let out = std::process::Command::new(&hub)
        .arg("certs")
        .arg("--out")
        .arg(&fed.certs)
        .args(["--spoke", &renamed])
        .output()
        .context("running flux-hub certs")?;
    ensure!(
        out.status.success(),
        "flux-hub certs --spoke {renamed}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cluster = support::spoke_cluster_from("SPOKE_KUBECONFIG", "the renamed spoke").await;
    env.attach_spoke(
        &renamed,
        cluster.client,
        cluster.config,
        cluster.kubeconfig,
        vec![
            "--hub".into(),
            fed.hub_url(),
            "--hub-domain".into(),
            "localhost".into(),
            "--name".into(),
            renamed.clone(),
            "--ca".into(),
            fed.file("ca.crt"),
            "--cert".into(),
            fed.file(&format!("spoke-{renamed}.crt")),
            "--key".into(),
            fed.file(&format!("spoke-{renamed}.key")),
        ],
    )?;
    env.start_spoke_of(&renamed).await?;
    let log = support::log_file(&format!("{}-spoke-{renamed}-0.log", env.ns))?;
    env.eventually(
        "the renamed spoke's first snapshot applied",
        secs(60),
        async || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            Ok(if text.contains("snapshot applied") {
                Probe::Done(())
            } else {
                Probe::Waiting(text.lines().rev().take(5).collect::<Vec<_>>().join("\n"))
            })
        },
    )
    .await?;
    env.holds_for(
        "the first spoke's burst objects kept",
        secs(5),
        async || {
            let mut changed = Vec::new();
            for o in &burst.objects {
                match spoke_meta(env, fed.spoke(), o.kind, &o.name).await? {
                    Some((_, uid)) if Some(&uid) == o.uid.as_ref() => {}
                    other => changed.push(format!("{} {}: {other:?}", o.kind, o.name)),
                }
            }
            Ok((!changed.is_empty()).then(|| changed.join("; ")))
        },
    )
    .await?;
    env.stop_spoke_of(&renamed);
    if let Some(changed) = untouched(env, fed.spoke(), &theirs).await? {
        bail!("someone else's objects changed: {changed}");
    }
    eprintln!(
        "{}: spoke {renamed} left spoke {}'s burst {} alone",
        env.ns,
        fed.spoke(),
        burst.name
    );
    Ok(())
}

async fn collide(env: &TestEnv, fed: &Federation) -> Result<()> {
    const SECOND: &str = "second";
    let mcs = env.api::<MiniCluster>();
    let burst = dispatch(env, fed).await?;
    wait_burst_phase(env, "Running", objects_deadline()).await?;
    let mut second = minicluster(&burst.name, fed.spoke(), lead_address_override().as_deref());
    second["metadata"]["name"] = json!(SECOND);
    env.apply_minicluster(&second).await?;
    let (_, message) = burst_refused_as_name_taken(env, SECOND).await?;
    let first_key = format!("{}/{NAME}/{}", env.ns, burst.name);
    ensure!(
        message.contains(&first_key),
        "the refusal names the first MiniCluster's burst {first_key}: {message}"
    );
    eprintln!("{}: the colliding burst was refused: {message}", env.ns);
    let first_running = async || -> Result<Option<String>> {
        let mc = mcs.get(NAME).await?;
        let phase = mc
            .status
            .as_ref()
            .and_then(|s| s.bursts.first())
            .map(|b| b.phase.clone());
        if phase.as_deref() != Some("Running") {
            return Ok(Some(format!("the first burst is {phase:?}")));
        }
        same_objects(env, &burst.objects).await
    };
    env.holds_for(
        "the first MiniCluster's burst keeps running with the same objects",
        secs(10),
        first_running,
    )
    .await?;
    mcs.delete(SECOND, &DeleteParams::background()).await?;
    env.eventually("the second MiniCluster gone", secs(120), async || {
        Ok(match mcs.get_opt(SECOND).await? {
            None => Probe::Done(()),
            Some(mc) => Probe::Waiting(yaml(&mc.status)),
        })
    })
    .await?;
    env.holds_for(
        "the first burst survives the second MiniCluster's deletion",
        secs(5),
        first_running,
    )
    .await
}

/// The phase and message of MiniCluster `name`'s first burst, once the spoke refused it
/// as NameTaken.
async fn burst_refused_as_name_taken(env: &TestEnv, name: &str) -> Result<(String, String)> {
    let mcs = env.api::<MiniCluster>();
    env.eventually(
        &format!("the burst of {name} refused as NameTaken"),
        objects_deadline(),
        async || {
            let mc = mcs.get(name).await?;
            let b = mc.status.as_ref().and_then(|s| s.bursts.first().cloned());
            Ok(match b {
                Some(b)
                    if b.message
                        .as_deref()
                        .is_some_and(|m| m.contains("NameTaken"))
                        && b.reason.as_deref() == Some("NameTaken") =>
                {
                    Probe::Done((b.phase, b.message.unwrap_or_default()))
                }
                _ => Probe::Waiting(yaml(&mc.status)),
            })
        },
    )
    .await
}
