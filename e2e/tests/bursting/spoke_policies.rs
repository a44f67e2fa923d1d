//! The spoke's policy deciding what runs in the burst cluster, and a large tenant not
//! stopping another tenant's burst from scaling.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use flux_shared::api::MiniCluster;
use k8s_openapi::api::batch::v1::Job;
use serde_json::json;

use crate::support;
use crate::support::{Federation, Probe, TestEnv};

use super::burst_fixture::*;
use super::burst_steps::*;
use super::spoke_objects::*;

/// The burst cluster's owner decides, on two real API servers: a burst from a namespace
/// the spoke's policy does not name is refused (status.bursts[] Refused, reason
/// `NamespaceNotAllowed`, one `BurstRefused` Event) and nothing of it is written there; an
/// edit of the policy that still refuses its image says `ImageNotAllowed`; one that
/// admits it starts the waiting burst without anyone touching the MiniCluster; the
/// policy's broker ceiling holds against `flux-hub burst scale` (the Job keeps its size,
/// the status says `TooManyBrokers` with the admitted size); admins scoped to another
/// namespace or to reading cannot scale it; with no policy at all the spoke says so and
/// keeps what runs.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn the_spoke_policy_decides_what_runs_in_the_burst_cluster() {
    support::run_federated("burst-policy", "e2e-spoke", spoke_policy).await;
}

/// Two MiniClusters of one namespace declare bursts of the same name on one spoke: the
/// second's burst would take the first's objects in the burst cluster, so it is refused
/// (NameTaken, naming the first's assignment) and the first keeps running, untouched, also
/// when the second is deleted.
/// A tenant with nearly 1 MiB of scripts (as much as its ConfigMap can hold) and five
/// bursts on one spoke (a snapshot over gRPC's 4 MiB message limit, so it travels in parts)
/// does not stop another tenant's burst there from starting and being resized.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn a_large_tenant_does_not_stop_another_tenants_burst_from_scaling() {
    support::run_federated("burst-large", "e2e-spoke", large_tenant).await;
}

async fn spoke_policy(env: &TestEnv, fed: &Federation) -> Result<()> {
    let spoke = fed.spoke();
    let burst = burst_name(&env.ns);
    let admit = |extra: &str| {
        format!(
            "namespaces: [{{name: {}, podSecurity: privileged}}]\n{extra}",
            env.ns
        )
    };
    // 1. A namespace the policy does not name.
    env.set_spoke_policy_of(spoke, Some("namespaces: [{name: somebody-else}]\n"))
        .await?;
    let mut doc = minicluster(&burst, spoke, lead_address_override().as_deref());
    doc["spec"]["flux"]["bursting"]["clusters"][0]["maxSize"] = json!(BURST_SIZE + 2);
    env.apply_minicluster(&doc).await?;
    let b = wait_burst(env, "the burst refused by the policy", |b| {
        b.phase == "Refused" && b.reason.as_deref() == Some("NamespaceNotAllowed")
    })
    .await?;
    let message = b.message.clone().unwrap_or_default();
    ensure!(
        message.contains(&format!("namespace {:?}", env.ns)) && message.contains("somebody-else"),
        "the refusal names the namespace and what is admitted: {message}"
    );
    ensure!(
        b.admitted_size.is_some(),
        "the spoke said what it admits: {b:?}"
    );
    let refusals = env
        .events_about("MiniCluster", NAME)
        .await?
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("BurstRefused"))
        .count();
    ensure!(refusals == 1, "one BurstRefused Event, found {refusals}");
    let written = spoke_objects_of(env, spoke, &burst).await?;
    ensure!(written.is_empty(), "nothing written: {written:?}");
    let status = fed.hub_status(&env.ns).await?;
    let row = &status["miniClusters"][0]["bursts"][0];
    ensure!(
        row["phase"] == "Refused" && row["reason"] == "NamespaceNotAllowed",
        "flux-hub status shows the refusal: {row}"
    );

    // 2. Admitted namespace, but not its image.
    env.set_spoke_policy_of(spoke, Some(&admit("images: [example.org/only/]\n")))
        .await?;
    let b = wait_burst(env, "the image refused", |b| {
        b.reason.as_deref() == Some("ImageNotAllowed")
    })
    .await?;
    ensure!(
        b.message
            .as_deref()
            .is_some_and(|m| m.contains("example.org/only/")),
        "{b:?}"
    );

    // 3. An edit that admits it: the waiting burst starts, the MiniCluster untouched.
    let generation = env
        .api::<MiniCluster>()
        .get(NAME)
        .await?
        .metadata
        .generation;
    env.set_spoke_policy_of(spoke, Some(&admit(&format!("maxBrokers: {BURST_SIZE}\n"))))
        .await?;
    let jobs = env.spoke_api_of::<Job>(spoke);
    env.eventually(
        "the burst's Job in the burst cluster",
        objects_deadline(),
        async || {
            Ok(match jobs.get_opt(&burst).await? {
                Some(job) => Probe::Done(job),
                None => Probe::Waiting("no Job yet".into()),
            })
        },
    )
    .await?;
    let b = wait_burst(env, "the burst admitted", |b| {
        b.reason.is_none() && b.admitted_size == Some(BURST_SIZE)
    })
    .await?;
    ensure!(
        env.api::<MiniCluster>()
            .get(NAME)
            .await?
            .metadata
            .generation
            == generation,
        "the MiniCluster was not touched: {b:?}"
    );

    // 4. The ceiling holds against burst scale: the Job keeps its size, and says why.
    fed.burst_scale(&env.ns, NAME, &burst, BURST_SIZE + 1)
        .await?
        .map_err(|e| anyhow::anyhow!("flux-hub burst scale failed: {e}"))?;
    let b = wait_burst(env, "the growth refused by the ceiling", |b| {
        b.reason.as_deref() == Some("TooManyBrokers")
    })
    .await?;
    ensure!(b.admitted_size == Some(BURST_SIZE), "{b:?}");
    env.holds_for(
        "the burst's Job keeps its size",
        Duration::from_secs(5),
        async || {
            let parallelism = jobs.get(&burst).await?.spec.and_then(|s| s.parallelism);
            Ok((parallelism != Some(BURST_SIZE)).then(|| format!("parallelism {parallelism:?}")))
        },
    )
    .await?;

    // 4b. Admin scopes: an admin of another namespace may not scale this burst, and a
    //     read-only one may look but not scale; nothing changes.
    let hub = tokio::task::spawn_blocking(support::hub_binary).await??;
    for (admin, extra) in [
        ("other-team", vec!["--admin-namespace", "somewhere-else"]),
        ("viewer", vec!["--admin-permission", "read"]),
    ] {
        let issued = tokio::process::Command::new(&hub)
            .arg("certs")
            .arg("--out")
            .arg(&fed.certs)
            .args(["--admin", admin])
            .args(&extra)
            .output()
            .await?;
        ensure!(
            issued.status.success(),
            "flux-hub certs --admin {admin}: {}",
            String::from_utf8_lossy(&issued.stderr)
        );
        let minicluster = format!("{}/{NAME}", env.ns);
        let out = fed
            .admin_command_as(admin, &["burst", "scale", &minicluster, &burst, "1"])
            .await?;
        let said = String::from_utf8_lossy(&out.stderr).to_string();
        ensure!(
            !out.status.success() && said.contains(&format!("admin {admin} may not scale")),
            "admin {admin} must not scale {minicluster}: {said}"
        );
    }
    let out = fed
        .admin_command_as("viewer", &["status", "--namespace", &env.ns, "-o", "json"])
        .await?;
    ensure!(
        out.status.success(),
        "a read-only admin reads: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        env.api::<MiniCluster>().get(NAME).await?.spec.bursts()[0].size == BURST_SIZE + 1,
        "the refused admins changed nothing"
    );

    // 5. No policy at all: nothing new is admitted, what runs is kept.
    env.set_spoke_policy_of(spoke, None).await?;
    wait_burst(env, "the spoke says it has no policy", |b| {
        b.reason.as_deref() == Some("NoPolicy")
    })
    .await?;
    ensure!(
        jobs.get_opt(&burst).await?.is_some(),
        "a policy change never deletes running brokers"
    );
    Ok(())
}

async fn large_tenant(env: &TestEnv, fed: &Federation) -> Result<()> {
    let big_bursts: Vec<String> = (0..5).map(|i| format!("big-{i}")).collect();
    let mut bursting = json!({
        "clusters": big_bursts
            .iter()
            .map(|b| json!({"name": b, "size": 1, "cluster": fed.spoke()}))
            .collect::<Vec<_>>(),
    });
    if let Some(address) = lead_address_override() {
        bursting["leadAddress"] = json!(address);
    }
    // 900 kB: the root's ConfigMap (at most 1 MiB) holds it once, with the rest.
    let script = "echo 'one line of a large setup script, repeated'\n".repeat(18_000);
    env.apply_minicluster(&json!({
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": "big"},
        "spec": {
            "size": 1,
            "interactive": true,
            "flux": {"bursting": bursting},
            "containers": [{"image": image(), "commands": {"pre": script}}],
        },
    }))
    .await
    .context("applying the large tenant's MiniCluster")?;
    let jobs = env.spoke_api::<Job>();
    env.eventually(
        "the large tenant's five bursts in the burst cluster",
        objects_deadline(),
        async || {
            let mut missing = Vec::new();
            for b in &big_bursts {
                if jobs.get_opt(b).await?.is_none() {
                    missing.push(b.clone());
                }
            }
            Ok(if missing.is_empty() {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("no Job yet: {missing:?}"))
            })
        },
    )
    .await?;

    // The other tenant: its burst starts, then shrinks to one broker.
    let burst = dispatch(env, fed).await?;
    let mcs = env.api::<MiniCluster>();
    let mut mc = mcs.get(NAME).await?;
    let clusters = &mut mc
        .spec
        .flux
        .as_mut()
        .and_then(|f| f.bursting.as_mut())
        .context("the MiniCluster's bursting")?
        .clusters;
    clusters[0].size = Some(1);
    let patch = json!({"spec": {"flux": {"bursting": {"clusters": clusters}}}});
    mcs.patch(
        NAME,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await?;
    env.eventually(
        "the other tenant's burst Job resized to 1",
        objects_deadline(),
        async || {
            let job = jobs.get_opt(&burst.name).await?;
            let parallelism = job.as_ref().and_then(|j| j.spec.as_ref()?.parallelism);
            Ok(if parallelism == Some(1) {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("parallelism {parallelism:?}"))
            })
        },
    )
    .await?;
    let log = std::fs::read_to_string(support::log_file(&format!(
        "{}-spoke-{}-0.log",
        env.ns,
        fed.spoke()
    ))?)
    .unwrap_or_default();
    ensure!(
        !log.contains("decoded message length too large"),
        "the spoke hit the message limit:\n{log}"
    );
    eprintln!(
        "{}: the other tenant's burst {} resized next to five bursts of a 900 kB spec",
        env.ns, burst.name
    );
    Ok(())
}
