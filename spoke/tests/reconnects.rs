//! What the real [`Agent`] does across connections to the hub (the in-process hub of
//! `support`): nothing is reported in a connection before its first snapshot is applied.
//!
//! [`Agent`]: flux_spoke::Agent

mod support;

use std::time::Duration;

use flux_spoke::cluster::{Kind, ObjectRef};
use flux_spoke::testing::FakeCluster;
use k8s_openapi::api::batch::v1::JobStatus;

use support::*;

#[tokio::test]
async fn nothing_is_reported_in_a_connection_before_its_first_snapshot_is_applied() {
    let pki = Pki::new();
    let x = assignment("m1", "x", 2);
    let hub = HubState::new(snapshot("e1", 1, vec![x.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let addr = server.addr;
    let cluster = FakeCluster::new();
    // Reports every 100 ms: the timer alone would report at once.
    let agent = RunningAgent::start(&pki, &pki.spoke, addr, &cluster, Duration::from_millis(100));
    hub.ack("e1", 1).await;
    server.stop().await;
    eventually("the agent to notice", || {
        (agent.metric("flux_spoke_connected") == 0.0).then_some(())
    })
    .await;

    // The hub is back, burst x placed elsewhere meanwhile; its first snapshot is late.
    let back = HubState::new(snapshot("e2", 1, vec![]));
    back.hold(true);
    let server = RunningHub::start(&pki, &back, addr).await;
    eventually("a Watch", || (!back.watches().is_empty()).then_some(())).await;
    // The Job changes, and the report timer ticks, before the snapshot comes.
    assert!(cluster.set_job_status(
        "hpc",
        "x",
        JobStatus {
            ready: Some(2),
            ..JobStatus::default()
        }
    ));
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(back.report_count(), 0, "{:?}", back.reports());
    assert!(cluster.deleted().is_empty());

    back.hold(false);
    let report = back.ack("e2", 1).await;
    let first = back.reports().remove(0);
    assert_eq!(first, report, "the first report acknowledges the snapshot");
    assert_eq!(
        phase_of(&first, &x.key),
        Some(flux_shared::federation::proto::BurstPhase::Deleted),
        "and says burst x is gone"
    );
    assert!(cluster.deleted().contains(&ObjectRef {
        kind: Kind::Job,
        namespace: "hpc".into(),
        name: "x".into(),
    }));
    agent.stop().await;
    server.stop().await;
}
