//! Deleting a bursting MiniCluster: the finalizer waits for the spoke (or its timeout), not
//! for a spoke that is away, and for the spoke a candidate burst was placed on.

use std::sync::Arc;
use std::time::Duration;

use flux_hub::federation::served::Served;
use serde_json::json;

use super::fixtures::*;
use super::mock_api::*;

#[tokio::test]
async fn deletion_waits_for_the_spoke_then_releases_the_finalizer() {
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, _writers) = context(client);
    ctx.registry.set_primed();
    let _spoke = ctx
        .registry
        .clone()
        .subscribe("gke", "test", Default::default(), Default::default())
        .expect("primed");
    let action = run(&ctx, deleted(10)).await.expect("reconcile");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(290)),
        "waits until the deletion timeout at most"
    );
    let calls = server.calls();
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status");
    assert_eq!(status.body["status"]["bursts"][0]["phase"], "Deleting");
    assert!(
        calls
            .iter()
            .all(|c| !c.body["metadata"]["finalizers"].is_array())
    );

    // The spoke applies the snapshot without the burst and acknowledges it.
    let version = ctx.registry.spokes(&|_| true).spokes[0].current_version;
    ctx.registry.report(
        "gke",
        flux_shared::federation::proto::ReportRequest {
            room: None,
            hub_epoch: ctx.registry.epoch().to_string(),
            applied_version: version,
            statuses: vec![],
            cluster_access: None,
            root_reach: None,
        },
    );
    let before = server.calls().len();
    let action = run(&ctx, deleted(12)).await.expect("reconcile");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    let calls = server.calls()[before..].to_vec();
    assert_permitted(&calls);
    let event = calls.iter().find(|c| c.method == "POST").expect("event");
    assert_eq!(event.body["reason"], "BurstsDeleted");
    let release = calls
        .iter()
        .find(|c| c.path.ends_with("/miniclusters/flux-sample"))
        .expect("finalizer released");
    assert_eq!(release.body["metadata"]["finalizers"], json!([]));
    assert!(ctx.registry.admin_snapshot("").miniclusters.is_empty());
}

#[tokio::test]
async fn a_connected_spoke_that_never_confirms_delays_deletion_only_until_the_timeout() {
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, _writers) = context(client);
    ctx.registry.set_primed();
    let _spoke = ctx
        .registry
        .clone()
        .subscribe("gke", "test", Default::default(), Default::default())
        .expect("primed");
    let action = run(&ctx, deleted(301)).await.expect("reconcile");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    let calls = server.calls();
    let event = calls.iter().find(|c| c.method == "POST").expect("event");
    assert_eq!(event.body["type"], "Warning");
    assert_eq!(event.body["reason"], "SpokeUnreachable");
    assert!(
        event.body["note"]
            .as_str()
            .expect("note")
            .contains("spoke gke did not confirm deleting burst burst-gke"),
        "{}",
        event.body["note"]
    );
    let release = calls
        .iter()
        .find(|c| c.path.ends_with("/miniclusters/flux-sample"))
        .expect("finalizer released");
    assert_eq!(release.body["metadata"]["finalizers"], json!([]));
}

#[tokio::test]
async fn a_spoke_that_is_away_does_not_delay_deletion() {
    // Spoke gke never connected (a typo in `cluster`, or not installed): nothing can be
    // waiting there, and should it come, its first snapshot no longer lists the burst.
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, _writers) = context(client);
    ctx.registry.set_primed();
    let action = run(&ctx, deleted(1)).await.expect("reconcile");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    let calls = server.calls();
    let event = calls.iter().find(|c| c.method == "POST").expect("event");
    assert_eq!(event.body["reason"], "SpokeAway");
    assert_eq!(
        event.body["note"],
        "spoke gke is not connected: it deletes burst burst-gke when it connects again (its snapshot no longer lists it)"
    );
    let release = calls
        .iter()
        .find(|c| c.path.ends_with("/miniclusters/flux-sample"))
        .expect("finalizer released at once, not after the deletion timeout");
    assert_eq!(release.body["metadata"]["finalizers"], json!([]));
}

/// A deleted MiniCluster whose burst names candidates waits for the spoke its status
/// placed the burst on to confirm it gone, as for a burst with one `cluster`.
#[tokio::test]
async fn a_deleted_minicluster_waits_for_the_spoke_a_candidate_burst_was_placed_on() {
    let (client, server) = ApiServer::start(Arc::new(echo));
    let (ctx, _writers) = context(client);
    ctx.registry.set_primed();
    let _b = ctx
        .registry
        .clone()
        .subscribe("b", "test", Default::default(), Default::default())
        .expect("primed");
    let mut mc = deleted_from(CANDIDATES, 10);
    mc.status = serde_json::from_value(json!({
        "bursts": [{"name": "burst", "cluster": "b", "phase": "Running", "size": 3,
                    "placement": {}}]
    }))
    .ok();
    let action = run(&ctx, mc).await.expect("reconcile");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(Duration::from_secs(290)),
        "waits for spoke b"
    );
    let calls = server.calls();
    assert!(
        calls
            .iter()
            .all(|c| !c.body["metadata"]["finalizers"].is_array()),
        "the finalizer is kept"
    );
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status");
    assert_eq!(status.body["status"]["bursts"][0]["phase"], "Deleting");
    assert_eq!(status.body["status"]["bursts"][0]["cluster"], "b");
}
