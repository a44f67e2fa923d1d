//! The path of a burst whose spec leaves `relay` unset: chosen once its spoke said how its
//! brokers reach the root, written into the spec its assignment carries, shown with why in
//! the status, and switched to the relay only when its spoke cannot reach the lead and the
//! lead sees none of its brokers.

use std::time::SystemTime;

use flux_hub::federation::served::Served;
use flux_shared::federation::proto::{self, RootPath, RootReach};
use flux_shared::federation::{LEAD_REACHABLE, McKey};
use flux_shared::plan::Plan;
use serde_json::{Value, json};

use super::fixtures::*;
use super::mock_api::*;

/// The `relay` of the burst in the spec of spoke gke's assignment; `None` when it has none.
fn assigned_relay(ctx: &flux_hub::controller::context::Context) -> Option<Value> {
    let snapshot = ctx.registry.snapshot("gke");
    let a = snapshot.assignments.first()?;
    let spec: Value = serde_json::from_slice(&a.minicluster_spec_json).expect("spec JSON");
    Some(spec["flux"]["bursting"]["clusters"][0]["relay"].clone())
}

/// One reconcile of `mc` with `status` as its last; the status it writes.
async fn pass(
    ctx: &std::sync::Arc<flux_hub::controller::context::Context>,
    server: &ApiServer,
    mc: &flux_shared::api::MiniCluster,
    status: &Value,
) -> Value {
    let mut next = mc.clone();
    next.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    next.status = Some(serde_json::from_value(status.clone()).expect("status"));
    let before = server.calls().len();
    run(ctx, next).await.expect("reconcile");
    server.calls()[before..]
        .iter()
        .rfind(|c| c.path.ends_with("/status"))
        .map_or_else(|| status.clone(), |c| c.body["status"].clone())
}

/// BURSTING reconciled once, its lead broker's endpoint known, spoke gke connected (and
/// not reported yet): the context, the API server, the MiniCluster, its status and the
/// spoke's subscription.
async fn started() -> (
    std::sync::Arc<flux_hub::controller::context::Context>,
    ApiServer,
    flux_shared::api::MiniCluster,
    Value,
    flux_hub::federation::served::Subscription,
) {
    let (client, server) = ApiServer::start(std::sync::Arc::new(with_node));
    let (ctx, mut writers) = context(client);
    let mc = minicluster(BURSTING);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let calls = server.calls();
    let status = observe(&calls, &mut writers).expect("status");
    lead_known(&calls, &mut writers);
    ctx.registry.set_primed();
    let spoke = ctx
        .registry
        .clone()
        .subscribe("gke", "test", Default::default(), Default::default())
        .expect("primed");
    (ctx, server, mc, status, spoke)
}

#[tokio::test]
async fn a_burst_waits_for_its_spokes_word_then_takes_the_path_it_declared() {
    let (ctx, server, mc, status, _spoke) = started().await;
    let status = pass(&ctx, &server, &mc, &status).await;
    assert_eq!(
        assigned_relay(&ctx),
        None,
        "nothing sent before the spoke's word"
    );
    assert_eq!(status["bursts"][0]["phase"], "Pending");
    assert_eq!(status["bursts"][0]["path"], Value::Null);
    assert!(
        status["bursts"][0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("waiting for spoke gke to report")),
        "{status}"
    );

    spoke_reports_reach(
        &ctx,
        "gke",
        Some(RootReach {
            declared: RootPath::Relay as i32,
            ..RootReach::default()
        }),
    );
    let status = pass(&ctx, &server, &mc, &status).await;
    assert_eq!(
        assigned_relay(&ctx),
        Some(json!(true)),
        "the spoke runs it relayed"
    );
    assert_eq!(status["bursts"][0]["path"], "Relay");
    assert_eq!(status["bursts"][0]["pathReason"], "SpokeDeclared");
    assert_eq!(
        status["leadBroker"]["port"], 30093,
        "the lead keeps its NodePort"
    );

    // The spoke now says its brokers reach the root: the running burst keeps its path.
    spoke_reports_reach(
        &ctx,
        "gke",
        Some(RootReach {
            declared: RootPath::Direct as i32,
            ..RootReach::default()
        }),
    );
    let status = pass(&ctx, &server, &mc, &status).await;
    assert_eq!(assigned_relay(&ctx), Some(json!(true)));
    assert_eq!(status["bursts"][0]["pathReason"], "SpokeDeclared");
}

#[tokio::test]
async fn a_direct_burst_its_spoke_cannot_reach_the_lead_from_goes_to_the_relay_when_none_joined() {
    let (ctx, server, mc, status, _spoke) = started().await;
    // A spoke that measured nothing: direct first.
    spoke_reports_reach(&ctx, "gke", Some(RootReach::default()));
    let status = pass(&ctx, &server, &mc, &status).await;
    assert_eq!(assigned_relay(&ctx), Some(json!(false)));
    assert_eq!(
        (
            &status["bursts"][0]["path"],
            &status["bursts"][0]["pathReason"]
        ),
        (&json!("Direct"), &json!("NotMeasured"))
    );

    // Its brokers are ready but cannot reach the lead, as the spoke reports.
    let version = ctx.registry.snapshot("gke").version;
    ctx.registry.report(
        "gke",
        proto::ReportRequest {
            hub_epoch: ctx.registry.epoch().to_string(),
            applied_version: version,
            statuses: vec![proto::AssignmentStatus {
                key: "hpc/flux-sample/burst-gke".into(),
                observed_version: version,
                phase: proto::BurstPhase::Running as i32,
                brokers_ready: 3,
                size: 3,
                conditions: vec![proto::Condition {
                    r#type: LEAD_REACHABLE.into(),
                    status: "False".into(),
                    reason: "LeadUnreachable".into(),
                    message: "connecting to 203.0.113.4:30093: no answer in 3s".into(),
                    last_transition_unix_millis: 1,
                }],
                ..Default::default()
            }],
            root_reach: Some(RootReach::default()),
            ..Default::default()
        },
    );
    let key = McKey::new("hpc", "flux-sample");
    let plan = Plan::new(&mc).expect("plan");
    // The lead has not been read: nothing is known of what joined, nothing moves.
    let status = pass(&ctx, &server, &mc, &status).await;
    assert_eq!(assigned_relay(&ctx), Some(json!(false)));
    assert_eq!(status["bursts"][0]["phase"], "Joining");
    // The lead sees one of them online: some of it joined, it stays direct.
    ctx.lead_views.record(
        &key,
        &plan,
        [("burst-gke-0", true), ("burst-gke-1", false)],
        SystemTime::now(),
    );
    let status = pass(&ctx, &server, &mc, &status).await;
    assert_eq!(assigned_relay(&ctx), Some(json!(false)));
    assert_eq!(
        (
            &status["bursts"][0]["phase"],
            &status["bursts"][0]["brokersJoined"]
        ),
        (&json!("Running"), &json!(1))
    );
    // None online: switched, and said why.
    ctx.lead_views
        .record(&key, &plan, [("burst-gke-0", false)], SystemTime::now());
    let status = pass(&ctx, &server, &mc, &status).await;
    assert_eq!(assigned_relay(&ctx), Some(json!(true)), "relayed now");
    assert_eq!(status["bursts"][0]["path"], "Relay");
    assert_eq!(status["bursts"][0]["pathReason"], "LeadUnreachable");
    assert!(
        status["bursts"][0]["pathMessage"]
            .as_str()
            .is_some_and(|m| m.contains("no answer in 3s")),
        "{status}"
    );
}
