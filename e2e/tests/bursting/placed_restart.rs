//! A burst that names candidates through hub restarts (issue 47): a restart never moves,
//! un-places or deletes it, with its spoke connected, reconnecting late, or in the middle
//! of a move to another spoke. The hub runs with a 20 s placement timeout, so every restart
//! below happens long past it.

use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use flux_shared::api::MiniCluster;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use crate::support;
use crate::support::{Federation, Probe, TestEnv, secs, yaml};

use super::burst_fixture::*;
use super::burst_steps::*;
use super::spoke_objects::*;

/// A burst that names candidates, running past the placement timeout, through a hub
/// restart and through one while its spoke is away and reconnects late: same objects, no
/// move, no `BurstMoved` or `BurstNotPlaced` Event.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn a_hub_restart_never_moves_a_placed_burst() {
    support::run_federated("burst-placed-restart", "e2e-spoke", restarts).await;
}

/// A hub restarted in the middle of a move to another spoke sends the burst there only
/// once the spoke it leaves has deleted it (its status says which spoke still holds it).
#[tokio::test]
#[ignore = "needs three clusters: KUBECONFIG, SPOKE_KUBECONFIG, SPOKE2_KUBECONFIG (scripts/e2e.sh)"]
async fn a_hub_restarted_mid_move_waits_for_the_spoke_the_burst_leaves() {
    support::run_federated_spokes(
        "burst-mid-move",
        &[
            ("e2e-spoke", "SPOKE_KUBECONFIG"),
            ("e2e-spoke2", "SPOKE2_KUBECONFIG"),
        ],
        mid_move,
    )
    .await;
}

/// The placement timeout these tests give the hub.
const PLACEMENT_TIMEOUT: u64 = 20;

/// Restarts the hub with `--placement-timeout-seconds` [`PLACEMENT_TIMEOUT`].
async fn with_short_placement_timeout(env: &TestEnv) -> Result<()> {
    env.stop_hub();
    let mut args = env.hub_args();
    args.extend([
        "--placement-timeout-seconds".to_string(),
        PLACEMENT_TIMEOUT.to_string(),
    ]);
    env.set_hub_args(args);
    env.start_hub().await
}

/// The test's MiniCluster with one burst that names `candidates` (spoke names, in order).
fn with_candidates(burst: &str, candidates: &[&str]) -> Value {
    let mut doc = minicluster(burst, "unused", lead_address_override().as_deref());
    let named: Vec<Value> = candidates.iter().map(|c| json!({"cluster": c})).collect();
    doc["spec"]["flux"]["bursting"]["clusters"] =
        json!([{"name": burst, "size": BURST_SIZE, "candidates": named}]);
    doc
}

/// The burst's status entry.
async fn burst_entry(env: &TestEnv) -> Result<flux_shared::api::BurstStatus> {
    let mc = env.api::<MiniCluster>().get(NAME).await?;
    mc.status
        .and_then(|s| s.bursts.into_iter().next())
        .context("no status.bursts[0]")
}

/// Placement Events about the MiniCluster that say a burst moved or was placed nowhere,
/// each with how many times it was seen (an Event seen again counts up in its series).
async fn moves(env: &TestEnv) -> Result<Vec<String>> {
    Ok(env
        .events_about("MiniCluster", NAME)
        .await?
        .into_iter()
        .filter(|e| {
            matches!(
                e.reason.as_deref(),
                Some("BurstMoved") | Some("BurstNotPlaced")
            )
        })
        .map(|e| {
            let seen = e.series.as_ref().map_or(1, |s| s.count);
            format!("{:?} x{seen}: {:?}", e.reason, e.note)
        })
        .collect())
}

/// Waits until every spoke of the federation is connected and has reported its room (a
/// burst created before would wait for it, or be placed by the others' room alone).
async fn spokes_ready(env: &TestEnv, fed: &Federation) -> Result<()> {
    env.eventually(
        "every spoke connected, its room reported",
        objects_deadline(),
        async || {
            let status = fed.hub_status(&env.ns).await?;
            let spokes = status["spokes"].as_array().cloned().unwrap_or_default();
            let ready = fed.spokes.iter().all(|name| {
                spokes.iter().any(|s| {
                    s["name"] == name.as_str()
                        && s["connected"] == true
                        && s["roomObservedUnixMillis"].as_i64().is_some()
                })
            });
            Ok(if ready {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("{spokes:?}"))
            })
        },
    )
    .await
}

/// The burst's four objects in the burst cluster of `spoke`, once there.
async fn placed_objects(env: &TestEnv, spoke: &str, burst: &str) -> Result<Vec<SpokeObject>> {
    let job = wait_spoke_object::<Job>(env, spoke, burst).await?;
    let config =
        wait_spoke_object::<ConfigMap>(env, spoke, &format!("{burst}-flux-config")).await?;
    let secret = wait_spoke_object::<Secret>(env, spoke, &format!("{burst}-curve")).await?;
    let service = wait_spoke_object::<Service>(env, spoke, burst).await?;
    Ok(vec![
        spoke_object("Job", &job),
        spoke_object("ConfigMap", &config),
        spoke_object("Secret", &secret),
        spoke_object("Service", &service),
    ])
}

/// Holds for `how_long`: the burst's objects are the same (uids) and its status still
/// places it on `spoke`, and no Event says it moved or was placed nowhere beyond those of
/// `before`.
async fn stays(
    env: &TestEnv,
    what: &str,
    how_long: Duration,
    spoke: &str,
    objects: &[SpokeObject],
    before: &[String],
) -> Result<()> {
    env.holds_for(what, how_long, async || {
        if let Some(changed) = same_objects(env, objects).await? {
            return Ok(Some(changed));
        }
        let b = burst_entry(env).await?;
        if b.cluster != spoke {
            return Ok(Some(format!(
                "status places it on {:?}: {}",
                b.cluster,
                yaml(&b)
            )));
        }
        let mut moved = moves(env).await?;
        moved.retain(|m| !before.contains(m));
        Ok((!moved.is_empty()).then(|| format!("Events: {moved:?}")))
    })
    .await
}

/// Test 1 and 2: a candidate burst running past the placement timeout stays through a hub
/// restart, and through one while its spoke is away and reconnects late (past the hub's
/// 30 s wait for candidates after a start).
pub(super) async fn restarts(env: &TestEnv, fed: &Federation) -> Result<()> {
    with_short_placement_timeout(env).await?;
    spokes_ready(env, fed).await?;
    let spoke = fed.spoke();
    let burst = burst_name(&env.ns);
    env.apply_minicluster(&with_candidates(&burst, &[spoke]))
        .await
        .context("applying the MiniCluster")?;
    let objects = placed_objects(env, spoke, &burst).await?;
    wait_burst_phase(env, "Running", pods_deadline()).await?;
    // Past the placement timeout.
    tokio::time::sleep(secs(PLACEMENT_TIMEOUT + 5)).await;
    let placed_at = burst_entry(env).await?.placement.and_then(|p| p.placed_at);
    ensure!(
        placed_at.is_some(),
        "the burst's status says when it was placed"
    );
    let before = moves(env).await?;

    let back = now_millis();
    env.restart_hub().await?;
    spoke_synced(env, fed, &burst, back).await?;
    stays(
        env,
        "a restarted hub keeps the running burst where it is (same uids, no move)",
        secs(PLACEMENT_TIMEOUT + 10),
        spoke,
        &objects,
        &before,
    )
    .await?;

    env.stop_spoke();
    env.restart_hub().await?;
    stays(
        env,
        "a restarted hub keeps the burst while its spoke is away",
        secs(35),
        spoke,
        &objects,
        &before,
    )
    .await?;
    let late = now_millis();
    env.start_spoke().await?;
    spoke_synced(env, fed, &burst, late).await?;
    stays(
        env,
        "the spoke reconnects late: the burst stays (same uids, no move)",
        secs(PLACEMENT_TIMEOUT + 5),
        spoke,
        &objects,
        &before,
    )
    .await?;
    let b = burst_entry(env).await?;
    ensure!(
        b.placement.and_then(|p| p.placed_at) == placed_at,
        "placedAt is unchanged"
    );
    Ok(())
}

/// Test 3: a hub restarted in the middle of a move. The burst runs on the first spoke;
/// with the hub and that spoke stopped, its status is put in the state a move leaves it
/// in (placed on the second spoke, held by the first, which has not confirmed it gone).
/// The restarted hub sends it to the second spoke only once the first, back, has deleted
/// its objects: never both at once.
pub(super) async fn mid_move(env: &TestEnv, fed: &Federation) -> Result<()> {
    let [first, second] = fed.spokes.as_slice() else {
        bail!("this test needs exactly two spokes, got {:?}", fed.spokes);
    };
    with_short_placement_timeout(env).await?;
    spokes_ready(env, fed).await?;
    let burst = burst_name(&env.ns);
    env.apply_minicluster(&with_candidates(&burst, &[first, second]))
        .await
        .context("applying the MiniCluster")?;
    placed_objects(env, first, &burst).await?;
    wait_burst_phase(env, "Running", pods_deadline()).await?;

    env.stop_hub();
    env.stop_spoke_of(first);
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let mut status = serde_json::to_value(
        env.api::<MiniCluster>()
            .get(NAME)
            .await?
            .status
            .context("a status")?,
    )?;
    status["bursts"][0]["cluster"] = json!(second);
    status["bursts"][0]["phase"] = json!("Pending");
    status["bursts"][0]["placement"] = json!({"placedAt": now, "heldBy": [first]});
    env.api::<MiniCluster>()
        .patch_status(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .context("writing the status a move leaves")?;

    env.start_hub().await?;
    env.holds_for(
        "the restarted hub sends nothing to the second spoke while the first holds the burst",
        secs(20),
        async || {
            let there = spoke_objects_of(env, second, &burst).await?;
            if !there.is_empty() {
                return Ok(Some(format!("in the second spoke's cluster: {there:?}")));
            }
            let b = burst_entry(env).await?;
            let held = b.placement.as_ref().map(|p| p.held_by.clone());
            Ok((b.cluster != *second || held != Some(vec![first.clone()]))
                .then(|| format!("status: {}", yaml(&b))))
        },
    )
    .await?;

    // The first spoke comes back: its first snapshot leaves the burst out, it deletes its
    // objects and says so; only then does the second get the burst.
    env.start_spoke_of(first).await?;
    let job = wait_spoke_object::<Job>(env, second, &burst).await?;
    let created = job.metadata.creation_timestamp.clone().context("created")?;
    let left = env.spoke_api_of::<Job>(first).get_opt(&burst).await?;
    if let Some(left) = left {
        let deleting = left.metadata.deletion_timestamp.context(
            "the first spoke's Job is neither gone nor being deleted when the second spoke's appears",
        )?;
        ensure!(
            deleting.0 <= created.0,
            "the second spoke's Job ({}) was created before the first's was deleted ({})",
            created.0,
            deleting.0
        );
    }
    env.eventually(
        "the move done: status places the burst on the second spoke, held by none",
        objects_deadline(),
        async || {
            let b = burst_entry(env).await?;
            let held = b.placement.as_ref().map_or(0, |p| p.held_by.len());
            Ok(if b.cluster == *second && held == 0 {
                Probe::Done(())
            } else {
                Probe::Waiting(yaml(&b))
            })
        },
    )
    .await
}
