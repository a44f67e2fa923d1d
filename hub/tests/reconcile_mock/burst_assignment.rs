//! A bursting MiniCluster's finalizer, its lead broker endpoint and its bursts' assignments:
//! assigned once the endpoint is known, kept while it is unknown, retained after a restart,
//! none when the root refuses the MiniCluster.

use flux_shared::federation::McKey;
use std::sync::Arc;

use flux_hub::federation::served::Served;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::watcher;
use serde_json::json;

use super::fixtures::*;
use super::mock_api::*;

#[tokio::test]
async fn a_bursting_minicluster_gets_a_finalizer_and_waits_for_its_lead_endpoint_then_assigns() {
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, mut writers) = context(client);
    let mc = minicluster(BURSTING);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let calls = server.calls();
    let finalizer = calls
        .iter()
        .find(|c| {
            c.path == "/apis/flux-framework.org/v1alpha2/namespaces/hpc/miniclusters/flux-sample"
        })
        .expect("finalizer patch");
    assert_eq!(
        finalizer.body["metadata"]["finalizers"],
        json!(["flux-framework.org/bursts"])
    );
    assert_eq!(
        finalizer.body["metadata"]["resourceVersion"], "7",
        "guarded by resourceVersion"
    );
    assert!(
        calls
            .iter()
            .any(|c| writes_object(c, "services", "flux-sample-lead"))
    );
    assert_permitted(&calls);
    let status = observe(&calls, &mut writers).expect("status");
    assert_eq!(status["bursts"][0]["name"], "burst-gke");
    assert_eq!(status["bursts"][0]["cluster"], "gke");
    assert_eq!(status["bursts"][0]["phase"], "Pending");
    assert_eq!(
        status["bursts"][0]["message"],
        "waiting for the lead broker Service's NodePort"
    );
    assert!(
        ctx.registry
            .spokes(&|_| true)
            .spokes
            .iter()
            .all(|s| s.assignments == 0)
    );

    // The API server allocated the NodePort and the lead pod runs on n1; spoke gke says
    // how its brokers reach this cluster (nothing: they connect directly).
    lead_known(&calls, &mut writers);
    spoke_reports_reach(&ctx, "gke", None);
    let mut next = mc.clone();
    next.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    next.metadata.creation_timestamp = Some(Time("2026-11-01T08:00:00Z".parse().expect("time")));
    next.status = Some(serde_json::from_value(status).expect("status"));
    let before = server.calls().len();
    run(&ctx, next.clone()).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    assert_permitted(&calls);
    assert!(calls.iter().any(|c| c.short() == "GET /api/v1/nodes/n1"));
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status")
        .body["status"]
        .clone();
    assert_eq!(
        status["leadBroker"],
        json!({"address": "203.0.113.4", "port": 30093, "node": "n1"})
    );
    assert_eq!(
        status["bursts"][0]["phase"], "Unreachable",
        "spoke gke never connected"
    );
    let bursts_ready = status["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "BurstsReady")
        .expect("BurstsReady");
    assert_eq!(bursts_ready["reason"], "SpokeUnreachable");
    let spokes = ctx.registry.spokes(&|_| true).spokes;
    assert_eq!((spokes[0].name.as_str(), spokes[0].assignments), ("gke", 1));
    // Admin clients see the MiniCluster's age (flux-hub status AGE).
    let admin = ctx.registry.admin_snapshot("");
    assert_eq!(
        admin.miniclusters[0].created_unix_millis,
        next.metadata
            .creation_timestamp
            .as_ref()
            .expect("creationTimestamp")
            .0
            .as_millisecond()
    );

    // Same state again: the node is not looked up again, nothing is written.
    next.status = Some(serde_json::from_value(status).expect("status"));
    let before = server.calls().len();
    run(&ctx, next).await.expect("reconcile");
    let extra: Vec<String> = server.calls()[before..].iter().map(Call::short).collect();
    assert!(extra.is_empty(), "{extra:?}");
}

/// A running burst is never withdrawn for what the hub does not know at the moment: the
/// lead Service gone from the cache (deleted, being re-created) leaves its NodePort
/// unknown, and the burst keeps its assignment (the last known endpoint) rather than
/// being deleted by its spoke.
#[tokio::test]
async fn a_burst_keeps_its_assignment_while_the_lead_endpoint_is_unknown() {
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, mut writers) = context(client);
    let mc = minicluster(BURSTING);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let calls = server.calls();
    let status = observe(&calls, &mut writers).expect("status");
    lead_known(&calls, &mut writers);
    spoke_reports_reach(&ctx, "gke", None);
    let mut next = mc.clone();
    next.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    next.status = Some(serde_json::from_value(status).expect("status"));
    let before = server.calls().len();
    run(&ctx, next.clone()).await.expect("reconcile");
    let status = server.calls()[before..]
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status")
        .body["status"]
        .clone();
    let assigned = ctx.registry.snapshot("gke");
    assert_eq!(assigned.assignments.len(), 1, "assigned");

    // The lead Service disappears from the cache: its NodePort is not known any more.
    let lead = writers_service(&calls);
    writers
        .services
        .apply_watcher_event(&watcher::Event::Delete(lead));
    next.status = Some(serde_json::from_value(status).expect("status"));
    run(&ctx, next).await.expect("reconcile");
    let snapshot = ctx.registry.snapshot("gke");
    assert_eq!(
        snapshot.assignments, assigned.assignments,
        "the burst keeps its assignment as it was"
    );
    assert!(
        !ctx.registry
            .has_unconfirmed_withdrawals(&McKey::new("hpc", "flux-sample")),
        "nothing is withdrawn"
    );
}

/// After a restart, a MiniCluster whose status does not name its lead broker yet (the hub
/// stopped before it wrote it) has its bursts retained in the spokes' first snapshots.
#[tokio::test]
async fn a_restarted_hub_retains_bursts_it_cannot_assign_yet() {
    let (client, _server) = ApiServer::start(Arc::new(with_node));
    let (ctx, _writers) = context(client);
    flux_hub::controller::federate::rebuild::prime(&ctx, &[minicluster(BURSTING)]);
    let snapshot = ctx.registry.snapshot("gke");
    assert!(snapshot.assignments.is_empty());
    assert_eq!(snapshot.retained_keys, ["hpc/flux-sample/burst-gke"]);
}

/// A bursting MiniCluster whose objects the root API server refuses (its ConfigMap over
/// the limit) gets no assignment, though its lead broker's address and port are pinned:
/// its bursts say why, and no spoke holds its spec.
#[tokio::test]
async fn a_minicluster_the_root_refuses_gets_no_assignment() {
    let responder: Responder = Arc::new(|call: &Call| {
        if let Some(refusal) = config_map_too_long(call) {
            return refusal;
        }
        with_node(call)
    });
    let (client, server) = ApiServer::start(responder);
    let (ctx, mut writers) = context(client);
    let mut mc = minicluster(&BURSTING.replace(
        "    bursting:\n",
        "    bursting:\n      leadAddress: 203.0.113.9\n      leadNodePort: 30111\n",
    ));
    mc.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    run(&ctx, mc.clone()).await.expect("not an error");
    // The lead Service as the cache then has it (a NodePort allocated): the lead endpoint
    // is known on the next pass.
    lead_known(&server.calls(), &mut writers);
    let before = server.calls().len();
    run(&ctx, mc).await.expect("not an error");
    let snapshot = ctx.registry.snapshot("gke");
    assert!(
        snapshot.assignments.is_empty(),
        "assigned: {:?}",
        snapshot
            .assignments
            .iter()
            .map(|a| &a.key)
            .collect::<Vec<_>>()
    );
    let status = server.calls()[before..]
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status")
        .body["status"]
        .clone();
    assert_eq!(status["phase"], "Invalid");
    let message = status["bursts"][0]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("RootRefused: "), "{status}");
}
