//! A burst whose cluster is lost (its spoke away past the grace, the lead broker seeing
//! none of its brokers online) is placed again on the next candidate, without waiting for
//! the lost spoke to confirm it gone; a restarted hub keeps it there, and the lost spoke's
//! snapshot leaves it out.

use std::sync::Arc;
use std::time::SystemTime;

use flux_hub::federation::served::Served;
use flux_shared::federation::{BurstKey, McKey};
use flux_shared::plan::Plan;

use super::candidate_bursts::{placed_earlier, room_report};
use super::fixtures::*;
use super::mock_api::*;

#[tokio::test]
async fn a_running_burst_whose_cluster_is_lost_runs_again_on_the_next_candidate() {
    let (client, server) = ApiServer::start(Arc::new(echo));
    let (ctx, _writers) = context(client);
    let mut mc = minicluster(CANDIDATES);
    mc.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    // It ran on a, as the last hub left it: a's first snapshot would hold it.
    mc.status = placed_earlier("a", "Running", &[]);
    flux_hub::controller::federate::rebuild::prime(&ctx, std::slice::from_ref(&mc));
    let registry = ctx.registry.clone();
    let key = &BurstKey::new("hpc", "flux-sample", "burst");
    let on_a = registry.snapshot("a");
    assert_eq!(
        on_a.assignments.len() + on_a.retained_keys.len(),
        1,
        "a keeps what it runs"
    );
    // a never comes back (this hub's clock is far past the grace since it started); b is
    // connected with room.
    let _b = registry
        .clone()
        .subscribe(
            "b",
            "test",
            Default::default(),
            [("tier".to_string(), "spot".to_string())].into(),
        )
        .expect("primed");
    room_report(&registry, "b", 8, vec![]);
    let now = SystemTime::from((ctx.now)().0);

    // The lead has not been read: its brokers may still serve it. Nothing moves.
    let from = server.calls().len();
    run(&ctx, mc.clone()).await.expect("reconcile");
    let (status, _) = written(&server, from);
    assert_eq!(status["bursts"][0]["cluster"], "a", "{status}");
    assert!(registry.snapshot("b").assignments.is_empty());

    // The lead sees one of them: still serving, nothing moves.
    let plan = Plan::new(&mc).expect("plan");
    let mc_key = McKey::new("hpc", "flux-sample");
    ctx.lead_views
        .record(&mc_key, &plan, [("burst-0", true), ("burst-1", false)], now);
    mc.status = serde_json::from_value(status).ok();
    run(&ctx, mc.clone()).await.expect("reconcile");
    assert!(registry.snapshot("b").assignments.is_empty());

    // None of them since half a grace ago or more, and still at the last read: lost. Placed on b at
    // once (a cannot confirm anything), same ranks.
    let grace = flux_hub::federation::placement::Timeouts::default().lost;
    ctx.lead_views
        .record(&mc_key, &plan, [("burst-0", false)], now - grace);
    ctx.lead_views
        .record(&mc_key, &plan, [("burst-0", false)], now);
    let from = server.calls().len();
    run(&ctx, mc.clone()).await.expect("reconcile");
    let (status, events) = written(&server, from);
    let burst = &status["bursts"][0];
    assert_eq!(burst["cluster"], "b", "{burst}");
    assert_eq!(burst["placement"]["skipped"][0]["cluster"], "a");
    assert_eq!(burst["placement"]["skipped"][0]["reason"], "Lost");
    assert!(burst["placement"]["heldBy"].is_null(), "{burst}");
    let moved = events
        .iter()
        .find(|e| e["reason"] == "BurstMoved")
        .expect("a BurstMoved Event");
    assert!(
        moved["note"].as_str().is_some_and(|n| n.contains("Lost")),
        "{moved}"
    );
    let on_b = registry.snapshot("b");
    assert_eq!(on_b.assignments.len(), 1, "sent to b");
    assert_eq!(
        on_b.assignments[0].burst_name, "burst",
        "the same burst: its hosts and ranks"
    );
    let on_a = registry.snapshot("a");
    assert!(
        on_a.assignments.is_empty() && on_a.retained_keys.is_empty(),
        "not a's any more: {on_a:?}"
    );

    // The next pass keeps sending it to b, though a never confirmed.
    mc.status = serde_json::from_value(status.clone()).ok();
    run(&ctx, mc.clone()).await.expect("reconcile");
    assert_eq!(registry.snapshot("b").assignments.len(), 1);
    // a may still hold it until it is back and deletes it; the burst does not wait.
    assert_eq!(registry.held_elsewhere(key, ""), ["a", "b"]);

    // A restarted hub: b's first snapshot holds it, a's does not.
    let (client, _server) = ApiServer::start(Arc::new(echo));
    let (restarted, _writers) = context(client);
    flux_hub::controller::federate::rebuild::prime(&restarted, std::slice::from_ref(&mc));
    let on_b = restarted.registry.snapshot("b");
    assert_eq!(
        on_b.assignments.len() + on_b.retained_keys.len(),
        1,
        "b keeps running it: {on_b:?}"
    );
    let on_a = restarted.registry.snapshot("a");
    assert!(
        on_a.assignments.is_empty() && on_a.retained_keys.is_empty(),
        "a deletes it when it is back: {on_a:?}"
    );
}
