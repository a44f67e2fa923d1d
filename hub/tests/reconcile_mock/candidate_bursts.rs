//! Bursts that name candidates: placed where there is room, moved only once the first spoke
//! lets go, and never moved (nor sent elsewhere) by a restarted hub before its spoke reports.

use flux_shared::federation::{BurstKey, McKey};
use std::sync::Arc;

use flux_hub::federation::served::Served;
use serde_json::json;

use super::fixtures::*;
use super::mock_api::*;

/// After a restart, a burst that names candidates stays with the spoke its status placed
/// it on: that spoke's first snapshot keeps it (nothing running is deleted), and no other
/// candidate is sent it.
#[tokio::test]
async fn a_restarted_hub_keeps_a_placed_burst_where_its_status_says_it_runs() {
    let (client, _server) = ApiServer::start(Arc::new(echo));
    let (ctx, _writers) = context(client);
    let mut mc = minicluster(CANDIDATES);
    mc.status = serde_json::from_value(json!({
        "bursts": [{"name": "burst", "cluster": "b", "phase": "Running", "size": 3,
                    "placement": {"skipped": [{"cluster": "a", "reason": "NoRoom"}]}}]
    }))
    .ok();
    flux_hub::controller::federate::rebuild::prime(&ctx, &[mc]);
    let on_b = ctx.registry.snapshot("b");
    let keys: Vec<&String> = on_b
        .retained_keys
        .iter()
        .chain(on_b.assignments.iter().map(|a| &a.key))
        .collect();
    assert_eq!(keys, ["hpc/flux-sample/burst"]);
    let on_a = ctx.registry.snapshot("a");
    assert!(on_a.assignments.is_empty() && on_a.retained_keys.is_empty());
}

/// A report of room `pods` free pod slots, the policy admitting namespace `hpc`.
pub(crate) fn room_report(
    registry: &flux_hub::federation::registry::Registry,
    spoke: &str,
    pods: i64,
    statuses: Vec<flux_shared::federation::proto::AssignmentStatus>,
) {
    use flux_shared::federation::proto;
    let version = registry
        .spokes(&|_| true)
        .spokes
        .iter()
        .find(|s| s.name == spoke)
        .map_or(0, |s| s.current_version);
    registry.report(
        spoke,
        proto::ReportRequest {
            hub_epoch: registry.epoch().to_string(),
            applied_version: version,
            statuses,
            cluster_access: None,
            root_reach: None,
            room: Some(proto::ClusterRoom {
                nodes: vec![proto::NodeRoom {
                    count: 1,
                    free_milli: [("pods".to_string(), pods * 1000)].into(),
                }],
                policy: Some(proto::PolicyRoom {
                    valid: true,
                    namespaces: vec!["hpc".into()],
                    max_brokers: 32,
                    max_brokers_per_minicluster: 32,
                    brokers: 0,
                }),
                ..proto::ClusterRoom::default()
            }),
        },
    );
}

#[tokio::test]
async fn a_burst_with_candidates_goes_where_there_is_room_and_moves_only_once_the_first_lets_go() {
    use flux_shared::federation::proto::{AssignmentStatus, BurstPhase};
    let (client, server) = ApiServer::start(Arc::new(echo));
    let (ctx, _writers) = context(client);
    ctx.registry.set_primed();
    let registry = ctx.registry.clone();
    let _a = registry
        .clone()
        .subscribe("a", "test", Default::default(), Default::default())
        .expect("primed");
    let _b = registry
        .clone()
        .subscribe(
            "b",
            "test",
            Default::default(),
            [("tier".to_string(), "spot".to_string())].into(),
        )
        .expect("primed");
    room_report(&registry, "a", 1, vec![]);
    room_report(&registry, "b", 8, vec![]);

    // a, first, has room for 1 of 3 brokers: the burst goes to b, which matches the labels.
    let mut mc = minicluster(CANDIDATES);
    mc.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let (status, events) = written(&server, 0);
    let burst = &status["bursts"][0];
    assert_eq!(burst["cluster"], "b", "{burst}");
    assert_eq!(
        burst["placement"]["skipped"],
        json!([{"cluster": "a", "reason": "NoRoom",
                "message": "its nodes have room for 1 of 3 brokers"}])
    );
    let placed = events
        .iter()
        .find(|e| e["reason"] == "BurstPlaced")
        .expect("an Event");
    assert_eq!(
        placed["note"],
        "burst burst placed on spoke b (skipped a: NoRoom (its nodes have room for 1 of 3 brokers))"
    );
    assert!(
        !events.iter().any(|e| e["reason"] == "BurstDispatched"),
        "one Event says it was placed and sent: {events:?}"
    );
    let key = &BurstKey::new("hpc", "flux-sample", "burst");
    assert_eq!(
        registry.held_elsewhere(key, ""),
        ["b"],
        "assigned to b only"
    );

    // b refuses it before any broker runs: it moves on, to a (no room there either, but
    // it admits it), once b has let go of it.
    room_report(
        &registry,
        "b",
        8,
        vec![AssignmentStatus {
            key: key.to_string(),
            phase: BurstPhase::Refused as i32,
            reason: "ImageNotAllowed".into(),
            message: "image rockylinux:9 is not allowed".into(),
            observed_version: 1,
            ..AssignmentStatus::default()
        }],
    );
    mc.status = serde_json::from_value(status).ok();
    let from = server.calls().len();
    run(&ctx, mc.clone()).await.expect("reconcile");
    let (status, events) = written(&server, from);
    let burst = &status["bursts"][0];
    assert_eq!(burst["cluster"], "a", "{burst}");
    assert_eq!(burst["phase"], "Pending");
    assert!(
        burst["message"]
            .as_str()
            .unwrap()
            .starts_with("moving to spoke a: waiting for spoke b"),
        "{burst}"
    );
    assert_eq!(burst["placement"]["skipped"][0]["reason"], "Refused");
    assert!(
        events.iter().any(|e| e["reason"] == "BurstMoved"),
        "{events:?}"
    );
    assert_eq!(
        registry.held_elsewhere(key, "a"),
        ["b"],
        "not sent to a while b may hold it"
    );

    // b applies the snapshot without it: now a gets it.
    room_report(&registry, "b", 8, vec![]);
    mc.status = serde_json::from_value(status).ok();
    let from = server.calls().len();
    run(&ctx, mc).await.expect("reconcile");
    let (status, _) = written(&server, from);
    assert_eq!(status["bursts"][0]["cluster"], "a");
    assert_eq!(registry.held_elsewhere(key, ""), ["a"]);
}

/// The status of a burst of CANDIDATES placed on `cluster` by an earlier hub, in 2026
/// (before this process started, far past the placement timeout), with `held_by`.
pub(crate) fn placed_earlier(
    cluster: &str,
    phase: &str,
    held_by: &[&str],
) -> Option<flux_shared::api::MiniClusterStatus> {
    serde_json::from_value(json!({
        "bursts": [{"name": "burst", "cluster": cluster, "phase": phase, "size": 3,
                    "placement": {"placedAt": "2026-01-01T00:00:00Z", "heldBy": held_by}}]
    }))
    .ok()
}

/// A spoke's report on burst `key` of CANDIDATES: `phase`, `ready` of 3 brokers ready.
fn on_burst(
    key: &str,
    phase: flux_shared::federation::proto::BurstPhase,
    ready: i32,
) -> flux_shared::federation::proto::AssignmentStatus {
    flux_shared::federation::proto::AssignmentStatus {
        key: key.into(),
        phase: phase as i32,
        size: 3,
        brokers_ready: ready,
        observed_version: 1,
        ..Default::default()
    }
}

/// A hub restarted long after a candidate burst was placed: its spokes reconnect and it
/// reconciles before the burst's spoke reports. The burst stays where it runs: no move, no
/// `BurstNotPlaced` or `BurstMoved`, its spoke keeps it, and another candidate with room
/// gets nothing; once its spoke reports it running, still so.
#[tokio::test]
async fn a_restarted_hub_never_moves_a_candidate_burst_before_its_spoke_reports() {
    use flux_shared::federation::proto::BurstPhase;
    let (client, server) = ApiServer::start(Arc::new(echo));
    let (ctx, _writers) = context(client);
    let mut mc = minicluster(CANDIDATES);
    mc.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    mc.status = placed_earlier("b", "Running", &[]);
    flux_hub::controller::federate::rebuild::prime(&ctx, std::slice::from_ref(&mc));
    let registry = ctx.registry.clone();
    let _a = registry
        .clone()
        .subscribe("a", "test", Default::default(), Default::default())
        .expect("primed");
    let _b = registry
        .clone()
        .subscribe(
            "b",
            "test",
            Default::default(),
            [("tier".to_string(), "spot".to_string())].into(),
        )
        .expect("primed");
    // a, first in order, has room; b has said nothing yet.
    room_report(&registry, "a", 8, vec![]);
    let key = &BurstKey::new("hpc", "flux-sample", "burst");
    for report in [
        None,
        Some(on_burst(&key.to_string(), BurstPhase::Running, 3)),
    ] {
        if let Some(report) = report {
            room_report(&registry, "b", 8, vec![report]);
        }
        let from = server.calls().len();
        run(&ctx, mc.clone()).await.expect("reconcile");
        let (status, events) = written(&server, from);
        let burst = &status["bursts"][0];
        assert_eq!(burst["cluster"], "b", "{burst}");
        assert_eq!(burst["placement"]["placedAt"], "2026-01-01T00:00:00Z");
        assert!(
            !events
                .iter()
                .any(|e| e["reason"] == "BurstMoved" || e["reason"] == "BurstNotPlaced"),
            "{events:?}"
        );
        assert_eq!(
            registry.held_elsewhere(key, ""),
            ["b"],
            "assigned to b only"
        );
        assert!(!registry.has_unconfirmed_withdrawals(&McKey::new("hpc", "flux-sample")));
        mc.status = serde_json::from_value(status).ok();
    }
}

/// A hub restarted while a candidate burst was moving (its status names the new spoke and
/// the one it left, which had not confirmed it gone): the new spoke gets nothing until the
/// one it left confirms, as before the restart, and that spoke's first snapshot leaves the
/// burst out.
#[tokio::test]
async fn a_restarted_hub_finishes_a_move_only_once_the_spoke_left_confirms() {
    let (client, server) = ApiServer::start(Arc::new(echo));
    let (ctx, _writers) = context(client);
    let mut mc = minicluster(CANDIDATES);
    mc.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    mc.status = placed_earlier("a", "Pending", &["b"]);
    flux_hub::controller::federate::rebuild::prime(&ctx, std::slice::from_ref(&mc));
    let registry = ctx.registry.clone();
    let key = &BurstKey::new("hpc", "flux-sample", "burst");
    let on_b = registry.snapshot("b");
    assert!(
        on_b.assignments.is_empty() && on_b.retained_keys.is_empty(),
        "b's first snapshot leaves the burst out: {on_b:?}"
    );
    assert_eq!(registry.held_elsewhere(key, "a"), ["b"]);
    let _a = registry
        .clone()
        .subscribe("a", "test", Default::default(), Default::default())
        .expect("primed");
    let _b = registry
        .clone()
        .subscribe("b", "test", Default::default(), Default::default())
        .expect("primed");
    room_report(&registry, "a", 8, vec![]);
    let from = server.calls().len();
    run(&ctx, mc.clone()).await.expect("reconcile");
    let (status, events) = written(&server, from);
    let burst = &status["bursts"][0];
    assert_eq!(burst["cluster"], "a", "{burst}");
    assert_eq!(burst["placement"]["heldBy"], json!(["b"]), "{burst}");
    assert!(
        burst["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("moving to spoke a: waiting for spoke b"),
        "{burst}"
    );
    assert!(
        !events.iter().any(|e| e["reason"] == "BurstMoved"),
        "{events:?}"
    );
    assert!(
        registry.snapshot("a").assignments.is_empty(),
        "not sent to a while b may hold it"
    );

    // b applies a snapshot of this hub without it: a gets it, and the status says so.
    room_report(&registry, "b", 8, vec![]);
    mc.status = serde_json::from_value(status).ok();
    let from = server.calls().len();
    run(&ctx, mc).await.expect("reconcile");
    let (status, _) = written(&server, from);
    assert_eq!(status["bursts"][0]["cluster"], "a");
    assert!(
        status["bursts"][0]["placement"]["heldBy"].is_null(),
        "{status}"
    );
    assert_eq!(registry.held_elsewhere(key, ""), ["a"]);
}
