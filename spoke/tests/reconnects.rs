//! What the real [`Agent`] does across connections to the hub (the in-process hub of
//! `support`): nothing is reported in a connection before its first snapshot is applied,
//! and a direct burst is fenced, its Job deleted, once neither the hub nor its lead broker
//! was heard for `fence_after`, and created anew only by a snapshot that still lists it.
//!
//! [`Agent`]: flux_spoke::Agent

mod support;

use std::time::Duration;

use flux_shared::federation::proto::ReportRequest;
use flux_spoke::burst_status::FENCED;
use flux_spoke::cluster::{Kind, ObjectRef};
use flux_spoke::testing::{FakeCluster, Op, sample_assignments_led_by, sample_relayed_assignments};
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

/// The `Fenced` condition of `key` in `report`: (status, reason, message).
fn fenced(report: &ReportRequest, key: &str) -> Option<(String, String, String)> {
    status(report, key)?
        .conditions
        .iter()
        .find(|c| c.r#type == FENCED)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn a_direct_burst_is_fenced_once_neither_the_hub_nor_its_lead_answers() {
    const AFTER: Duration = Duration::from_millis(1500);
    let pki = Pki::new();
    // A lead that never answers.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let lead = flux_shared::plan::Endpoint {
        address: "127.0.0.1".into(),
        port: i32::from(closed.local_addr().unwrap().port()),
    };
    drop(closed);
    let x = sample_assignments_led_by("hpc", "m1", &[("x", 2)], &lead).remove(0);
    let y = sample_relayed_assignments("hpc", "m2", &[("y", 1)]).remove(0);
    let both = || snapshot("e1", 1, vec![x.clone(), y.clone()]);
    let hub = HubState::new(both());
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let addr = server.addr;
    let cluster = FakeCluster::new();
    // Reports every hour: only its answers to the spoke's contact reports say the hub is
    // there.
    let agent = RunningAgent::start_configured(&pki, &pki.spoke, addr, &cluster, |c| {
        c.relay_address = Some(std::net::Ipv4Addr::LOCALHOST.into());
        c.fence_after = AFTER;
    });
    hub.ack("e1", 1).await;
    let job = |name: &str| ObjectRef {
        kind: Kind::Job,
        namespace: "hpc".into(),
        name: name.into(),
    };
    let fences = |cluster: &FakeCluster| {
        cluster
            .ops()
            .into_iter()
            .filter(|op| matches!(op, Op::DeleteForeground(_)))
            .collect::<Vec<_>>()
    };

    // Connected, its lead unreachable: the hub answers, nothing is fenced.
    tokio::time::sleep(AFTER * 2).await;
    assert!(fences(&cluster).is_empty(), "{:?}", cluster.ops());

    // The hub gone too: the direct burst is fenced, the relayed one never.
    server.stop().await;
    eventually("the direct burst fenced", || {
        (!fences(&cluster).is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(AFTER).await;
    assert_eq!(fences(&cluster), [Op::DeleteForeground(job("x"))]);
    assert_eq!(agent.metric("flux_spoke_fenced_total"), 1.0);

    // The hub back, still assigning it: said fenced at once, and created anew once its
    // old pods are gone.
    let back = HubState::new(snapshot("e2", 1, vec![x.clone(), y.clone()]));
    let server = RunningHub::start(&pki, &back, addr).await;
    let report = back.report_where(0, "the first report", |_| true).await;
    let (state, reason, message) = fenced(&report, &x.key).expect("said fenced");
    assert_eq!(
        (state.as_str(), reason.as_str()),
        ("True", "HubAndLeadUnreachable")
    );
    assert!(
        message.contains(&format!("127.0.0.1:{}", lead.port)),
        "{message}"
    );
    assert!(fenced(&report, &y.key).is_none());
    let applied_x = || cluster.applied().iter().filter(|r| **r == job("x")).count();
    assert_eq!(applied_x(), 1, "not written onto while it is being deleted");
    assert!(cluster.finish_deletion("hpc", "x"));
    let report = back.ack("e2", 1).await;
    assert_eq!(
        fenced(&report, &x.key).map(|f| (f.0, f.1)),
        Some(("False".to_string(), "CreatedAnew".to_string()))
    );
    assert_eq!(applied_x(), 2, "created anew");
    assert_eq!(agent.metric("flux_spoke_fenced_total"), 1.0);
    agent.stop().await;
    server.stop().await;
}
