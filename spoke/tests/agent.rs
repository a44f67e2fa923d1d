//! The real [`Agent`] against a small in-process hub (tonic over loopback mutual TLS, the
//! library's transport settings and authorization), with the spoke's Kubernetes reads and
//! writes captured by [`FakeCluster`]. The hub, the certificates and the running agent are
//! in `support`.

mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use flux_shared::federation::Identity;
use flux_shared::federation::assignment::realize;
use flux_shared::federation::ownership::{FEDERATION_LABEL, SPOKE_LABEL, SpokeIdentity};
use flux_shared::federation::pki::IssuedCert;
use flux_shared::federation::proto::{Assignment, BurstPhase, ReportRequest};
use flux_shared::federation::tls::ClientSecurity;
use flux_shared::render::Object;
use flux_spoke::cluster::{Kind, ObjectRef, metadata, metadata_mut};
use flux_spoke::testing::{FakeCluster, FakeOp, Op, sample_assignments};
use flux_spoke::{Agent, AgentConfig, AppliedSnapshot, Metrics};
use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::oneshot;

use support::*;

// ---------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn first_snapshot_is_applied_and_acknowledged_and_heartbeats_are_noops() {
    let pki = Pki::new();
    let x = assignment("m1", "x", 2);
    let y = assignment("m2", "y", 1);
    let hub = HubState::new(snapshot("e1", 1, vec![x.clone(), y.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    let mut agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);

    let report = hub.ack("e1", 1).await;
    // Namespace first, then every object of both assignments, nothing deleted.
    let ops = cluster.ops();
    assert_eq!(ops[0], Op::EnsureNamespace("hpc".into()), "{ops:?}");
    let applied: BTreeSet<_> = cluster.applied().into_iter().collect();
    let expected: BTreeSet<_> = refs_of(&x).union(&refs_of(&y)).cloned().collect();
    assert_eq!(applied, expected);
    assert_eq!(cluster.applied().len(), expected.len(), "each object once");
    assert!(cluster.deleted().is_empty());
    // The Job the hub asked for.
    let Some(Object::Job(job)) = cluster.get(Kind::Job, "hpc", "x") else {
        panic!("no Job hpc/x")
    };
    assert_eq!(job.spec.unwrap().parallelism, Some(2));

    for (key, size) in [("hpc/m1/x", 2), ("hpc/m2/y", 1)] {
        let s = status(&report, key).unwrap();
        assert_eq!(phase_of(&report, key), Some(BurstPhase::Applied), "{s:?}");
        assert_eq!((s.observed_version, s.size, s.brokers_ready), (1, size, 0));
        assert!(
            s.conditions
                .iter()
                .any(|c| c.r#type == "ConfigIdentical" && c.status == "True"),
            "{s:?}"
        );
    }
    let watches = hub.watches();
    assert_eq!(watches[0].applied_hub_epoch, "");
    assert_eq!(watches[0].spoke_version, "test-version");
    agent.applied.wait_for(Option::is_some).await.unwrap();
    assert_eq!(
        *agent.applied.borrow(),
        Some(AppliedSnapshot {
            hub_epoch: "e1".into(),
            version: 1
        })
    );
    assert_eq!(agent.metric("flux_spoke_snapshot_version"), 1.0);
    assert_eq!(agent.metric("flux_spoke_connected"), 1.0);

    // A heartbeat (the same snapshot again) is received but changes nothing.
    let before = cluster.ops();
    hub.publish(snapshot("e1", 1, vec![x.clone(), y.clone()]));
    eventually("the heartbeat", || {
        (agent.metric("flux_spoke_snapshots_received_total") >= 2.0).then_some(())
    })
    .await;
    // And a real change after it is applied, proving the heartbeat was handled first.
    let z = assignment("m3", "z", 1);
    hub.publish(snapshot("e1", 2, vec![x.clone(), y.clone(), z.clone()]));
    hub.ack("e1", 2).await;
    let after: Vec<_> = cluster.ops()[before.len()..].to_vec();
    let expected: Vec<_> = realize(&z, &pki.me())
        .unwrap()
        .objects
        .iter()
        .map(|o| Op::Apply(ObjectRef::of(o)))
        .collect();
    assert_eq!(after, expected, "only the new assignment is applied");

    agent.stop().await;
    server.stop().await;
}

/// The spoke declares its protocol revision on Watch, and reads nothing from a hub more
/// than one revision away: no object is written, the error is counted as `protocol`, and
/// it is not marked connected. A hub one revision away, or one that declares none (release
/// 0.1.0), is served.
#[tokio::test]
async fn a_hub_outside_the_protocol_window_is_not_read() {
    use flux_shared::federation::protocol::REVISION;
    let pki = Pki::new();
    let hub = HubState::new(snapshot("e1", 1, vec![assignment("m1", "x", 2)]));
    let too_new = (REVISION + 2).to_string();
    hub.answer_revision(Some(&too_new));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    let agent = RunningAgent::start_configured(&pki, &pki.spoke, server.addr, &cluster, |c| {
        c.refused_retry_delay = Duration::from_millis(200);
    });
    eventually("the hub's revision refused twice", || {
        (agent.metric("flux_spoke_errors_total{kind=\"protocol\"}") >= 2.0).then_some(())
    })
    .await;
    // Nothing written; one Event says why, however many times it was refused.
    let ops = cluster.ops();
    assert!(
        matches!(ops.as_slice(), [Op::Warning("ProtocolSkew", note)]
            if note.contains(&format!("speaks protocol revision {too_new}")) && note.contains("upgrade this spoke")),
        "{ops:?}"
    );
    assert!(hub.reports().is_empty(), "nothing reported");
    assert_eq!(agent.metric("flux_spoke_connected"), 0.0);
    let declared = hub.watch_revisions.lock().unwrap().clone();
    assert!(
        declared
            .iter()
            .all(|r| r.as_deref() == Some(REVISION.to_string().as_str())),
        "{declared:?}"
    );

    hub.answer_revision(Some(&(REVISION + 1).to_string()));
    hub.ack("e1", 1).await;
    assert!(!cluster.applied().is_empty());
    let refused = agent.metric("flux_spoke_errors_total{kind=\"protocol\"}");
    // A hub of release 0.1.0, which says nothing of its revision.
    hub.answer_revision(None);
    let watches = hub.watch_revisions.lock().unwrap().len();
    hub.break_streams();
    eventually("connected again to a hub that declares no revision", || {
        (hub.watch_revisions.lock().unwrap().len() > watches
            && agent.metric("flux_spoke_connected") == 1.0)
            .then_some(())
    })
    .await;
    assert_eq!(
        agent.metric("flux_spoke_errors_total{kind=\"protocol\"}"),
        refused
    );
    agent.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn an_updated_assignment_is_applied_again_and_an_unchanged_one_is_not() {
    let pki = Pki::new();
    let x = assignment("m1", "x", 2);
    let y = assignment("m2", "y", 1);
    let hub = HubState::new(snapshot("e1", 1, vec![x.clone(), y.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);
    hub.ack("e1", 1).await;
    cluster.clear_ops();

    let x3 = assignment("m1", "x", 3);
    assert_eq!(x3.key, x.key);
    hub.publish(snapshot("e1", 2, vec![x3.clone(), y.clone()]));
    let report = hub.ack("e1", 2).await;
    let applied: BTreeSet<_> = cluster.applied().into_iter().collect();
    assert_eq!(applied, refs_of(&x3), "only the changed assignment");
    assert!(cluster.deleted().is_empty());
    let Some(Object::Job(job)) = cluster.get(Kind::Job, "hpc", "x") else {
        panic!("no Job hpc/x")
    };
    assert_eq!(job.spec.unwrap().parallelism, Some(3));
    let s = status(&report, "hpc/m1/x").unwrap();
    assert_eq!((s.observed_version, s.size), (2, 3));

    agent.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn a_removed_assignment_is_deleted_and_reported_deleted() {
    let pki = Pki::new();
    let x = assignment("m1", "x", 2);
    let y = assignment("m2", "y", 1);
    let hub = HubState::new(snapshot("e1", 1, vec![x.clone(), y.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);
    hub.ack("e1", 1).await;

    hub.publish(snapshot("e1", 2, vec![x.clone()]));
    let report = hub.ack("e1", 2).await;
    assert_eq!(phase_of(&report, "hpc/m2/y"), Some(BurstPhase::Deleted));
    assert_eq!(phase_of(&report, "hpc/m1/x"), Some(BurstPhase::Applied));
    let deleted = cluster.deleted();
    assert_eq!(
        deleted.iter().cloned().collect::<BTreeSet<_>>(),
        refs_of(&y)
    );
    assert_eq!(deleted[0].kind, Kind::Job, "the Job goes first");
    let left: BTreeSet<_> = cluster.refs().into_iter().collect();
    assert_eq!(left, refs_of(&x));
    assert_eq!(agent.metric("flux_spoke_deletes_total{kind=\"Job\"}"), 1.0);

    // An empty snapshot is acknowledged too (the hub needs it to confirm deletions).
    hub.publish(snapshot("e1", 3, vec![]));
    let report = hub.ack("e1", 3).await;
    assert_eq!(phase_of(&report, "hpc/m1/x"), Some(BurstPhase::Deleted));
    assert!(cluster.refs().is_empty());

    agent.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn after_a_restart_leftovers_are_deleted_and_retained_keys_kept() {
    let pki = Pki::new();
    let cluster = FakeCluster::new();
    // Left by an earlier run: an assignment since removed, and one the hub retains.
    let old = assignment("old", "z", 1);
    let kept = assignment("kept", "k", 1);
    for a in [&old, &kept] {
        for o in realize(a, &pki.me()).unwrap().objects {
            cluster.insert(o);
        }
    }
    // Someone else's object in the same namespace.
    let foreign = ConfigMap {
        metadata: ObjectMeta {
            name: Some("not-ours".into()),
            namespace: Some("hpc".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    cluster.insert(Object::ConfigMap(foreign));

    let x = assignment("m1", "x", 2);
    let mut first = snapshot("e1", 7, vec![x.clone()]);
    first.retained_keys = vec![kept.key.clone()];
    let hub = HubState::new(first);
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);

    let report = hub.ack("e1", 7).await;
    assert_eq!(phase_of(&report, &old.key), Some(BurstPhase::Deleted));
    assert_eq!(
        status(&report, &old.key).unwrap().observed_version,
        7,
        "{report:?}"
    );
    assert!(
        status(&report, &kept.key).is_none(),
        "retained: not reported"
    );
    let deleted: BTreeSet<_> = cluster.deleted().into_iter().collect();
    assert_eq!(deleted, refs_of(&old));
    let left: BTreeSet<_> = cluster.refs().into_iter().collect();
    let mut expected: BTreeSet<_> = refs_of(&x).union(&refs_of(&kept)).cloned().collect();
    expected.insert(ObjectRef {
        kind: Kind::ConfigMap,
        namespace: "hpc".into(),
        name: "not-ours".into(),
    });
    assert_eq!(left, expected);
    let applied: BTreeSet<_> = cluster.applied().into_iter().collect();
    assert_eq!(applied, refs_of(&x), "retained keys are not applied");

    agent.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn a_broken_stream_or_a_hub_outage_deletes_nothing_and_the_agent_resumes() {
    let pki = Pki::new();
    let x = assignment("m1", "x", 2);
    let hub = HubState::new(snapshot("e1", 1, vec![x.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let addr = server.addr;
    let cluster = FakeCluster::new();
    let agent = RunningAgent::start(&pki, &pki.spoke, addr, &cluster, LONG);
    hub.ack("e1", 1).await;
    let applies = cluster.applied().len();

    // The stream fails: the agent reconnects to the same hub and reconciles again.
    let seen = hub.report_count();
    hub.break_streams();
    eventually("a second Watch", || {
        (hub.watches().len() >= 2).then_some(())
    })
    .await;
    hub.report_where(seen, "a report after reconnecting", |r| {
        r.applied_version == 1
    })
    .await;
    assert!(
        cluster.deleted().is_empty(),
        "a broken stream deletes nothing"
    );
    assert_eq!(cluster.applied().len(), applies, "nor applies anything");
    assert_eq!(hub.watches()[1].applied_hub_epoch, "e1");
    assert_eq!(hub.watches()[1].applied_version, 1);

    // The hub goes away altogether.
    server.stop().await;
    eventually("the agent to notice", || {
        (agent.metric("flux_spoke_connected") == 0.0).then_some(())
    })
    .await;
    eventually("failed reconnection attempts", || {
        (agent.metric("flux_spoke_errors_total{kind=\"connect\"}") >= 2.0).then_some(())
    })
    .await;
    assert!(cluster.deleted().is_empty(), "an outage deletes nothing");
    assert_eq!(cluster.applied().len(), applies, "nor applies anything");

    // A restarted hub (new epoch, fresh state) on the same port, with one more assignment.
    let w = assignment("m3", "w", 1);
    let restarted = HubState::new(snapshot("e2", 1, vec![x.clone(), w.clone()]));
    let server = RunningHub::start(&pki, &restarted, addr).await;
    let report = restarted.ack("e2", 1).await;
    let last_watch = restarted.watches().pop().unwrap();
    assert_eq!(
        (
            last_watch.applied_hub_epoch.as_str(),
            last_watch.applied_version
        ),
        ("e1", 1)
    );
    assert!(cluster.deleted().is_empty());
    let new: BTreeSet<_> = cluster.applied()[applies..].iter().cloned().collect();
    assert_eq!(new, refs_of(&w), "x is unchanged and not applied again");
    let s = status(&report, &x.key).unwrap();
    assert_eq!(s.observed_version, 1, "observed in the new epoch");
    assert_eq!(agent.metric("flux_spoke_connected"), 1.0);

    agent.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn an_invalid_assignment_is_reported_and_not_applied_until_it_changes() {
    let pki = Pki::new();
    let x = assignment("m1", "x", 2);
    let mut tampered = x.clone();
    tampered.broker_toml = tampered.broker_toml.replace("hosts", "hostz");
    assert_ne!(tampered.broker_toml, x.broker_toml);
    let hub = HubState::new(snapshot("e1", 1, vec![tampered.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);

    let report = hub.ack("e1", 1).await;
    let s = status(&report, &x.key).unwrap();
    assert_eq!(phase_of(&report, &x.key), Some(BurstPhase::Refused));
    assert!(s.message.contains("broker.toml"), "{}", s.message);
    assert!(
        s.conditions
            .iter()
            .any(|c| c.r#type == "ConfigIdentical" && c.status == "False")
    );
    assert!(
        cluster.ops().is_empty(),
        "nothing applied: {:?}",
        cluster.ops()
    );

    // Resent (with another, valid assignment): still refused, not re-examined.
    let y = assignment("m2", "y", 1);
    hub.publish(snapshot("e1", 2, vec![tampered.clone(), y.clone()]));
    let report = hub.ack("e1", 2).await;
    assert_eq!(phase_of(&report, &x.key), Some(BurstPhase::Refused));
    assert_eq!(status(&report, &x.key).unwrap().observed_version, 2);
    assert_eq!(
        cluster.applied().into_iter().collect::<BTreeSet<_>>(),
        refs_of(&y)
    );
    assert_eq!(agent.metric("flux_spoke_errors_total{kind=\"plan\"}"), 1.0);

    // Fixed: applied.
    hub.publish(snapshot("e1", 3, vec![x.clone(), y.clone()]));
    let report = hub.ack("e1", 3).await;
    assert_eq!(phase_of(&report, &x.key), Some(BurstPhase::Applied));
    assert!(cluster.get(Kind::Job, "hpc", "x").is_some());

    agent.stop().await;
    server.stop().await;
}

/// The reported case: a burst in the spoke's own namespace, as the spoke's service account
/// with its token, privileged, with the node's root mounted. Refused before anything is
/// written (not even the namespace), and reported Invalid with reason UnsafeBurst.
#[tokio::test]
async fn an_unsafe_burst_is_refused_before_anything_is_written() {
    let pki = Pki::new();
    let mut a = sample_assignments("flux-spoke-system", "m1", &[("x", 2)]).remove(0);
    let mut spec: serde_json::Value = serde_json::from_slice(&a.minicluster_spec_json).unwrap();
    spec["pod"] = serde_json::json!({"serviceAccountName": "flux-spoke", "automountServiceAccountToken": true});
    spec["containers"][0]["securityContext"] = serde_json::json!({"privileged": true});
    spec["containers"][0]["volumes"] =
        serde_json::json!({"root": {"hostPath": "/", "path": "/host"}});
    a.minicluster_spec_json = spec.to_string().into();
    let hub = HubState::new(snapshot("e1", 1, vec![a.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);

    let report = hub.ack("e1", 1).await;
    assert_eq!(phase_of(&report, &a.key), Some(BurstPhase::Refused));
    let s = status(&report, &a.key).unwrap();
    for field in [
        "metadata.namespace",
        "spec.pod.serviceAccountName",
        "spec.pod.automountServiceAccountToken",
        "spec.containers[0].securityContext.privileged",
        "hostPath",
    ] {
        assert!(s.message.contains(field), "{field} not in {}", s.message);
    }
    assert!(
        s.conditions.iter().any(|c| c.reason == "UnsafeBurst"),
        "{:?}",
        s.conditions
    );
    assert!(
        cluster.ops().is_empty(),
        "nothing written: {:?}",
        cluster.ops()
    );

    agent.stop().await;
    server.stop().await;
}

/// Losing the API server is reported at once (not on the timer), with since when and why,
/// and so is getting it back.
#[tokio::test]
async fn losing_and_regaining_the_api_server_is_reported_at_once() {
    let pki = Pki::new();
    let x = assignment("m1", "x", 2);
    let hub = HubState::new(snapshot("e1", 1, vec![x.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    // The timer would report only after an hour.
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);
    let report = hub.ack("e1", 1).await;
    assert_eq!(report.cluster_access, None);

    let since = std::time::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
    let seen = hub.report_count();
    cluster.set_unreachable(Some((since, "connection refused".into())));
    let report = hub
        .report_where(seen, "a report of the lost API server", |r| {
            r.cluster_access.is_some()
        })
        .await;
    let access = report.cluster_access.unwrap();
    assert_eq!(
        (access.unreachable_since_unix_millis, access.error.as_str()),
        (1_700_000_000_123, "connection refused")
    );

    let seen = hub.report_count();
    cluster.set_unreachable(None);
    let report = hub
        .report_where(seen, "a report of the regained API server", |r| {
            r.cluster_access.is_none()
        })
        .await;
    assert_eq!(report.applied_version, 1);

    agent.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn job_status_changes_are_reported_without_waiting_for_the_timer() {
    let pki = Pki::new();
    let x = assignment("m1", "x", 2);
    let hub = HubState::new(snapshot("e1", 1, vec![x.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    // The timer would report only after an hour.
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);
    let report = hub.ack("e1", 1).await;
    assert_eq!(phase_of(&report, &x.key), Some(BurstPhase::Applied));

    let seen = hub.report_count();
    assert!(cluster.set_job_status(
        "hpc",
        "x",
        JobStatus {
            ready: Some(2),
            active: Some(2),
            ..Default::default()
        }
    ));
    let report = hub
        .report_where(seen, "RUNNING", |r| {
            phase_of(r, "hpc/m1/x") == Some(BurstPhase::Running)
        })
        .await;
    let s = status(&report, &x.key).unwrap();
    assert_eq!((s.brokers_ready, s.size, s.observed_version), (2, 2, 1));
    assert_eq!(report.applied_version, 1);

    let seen = hub.report_count();
    assert!(cluster.set_job_status(
        "hpc",
        "x",
        JobStatus {
            ready: Some(0),
            succeeded: Some(2),
            conditions: Some(vec![JobCondition {
                type_: "Complete".into(),
                status: "True".into(),
                reason: Some("CompletionsReached".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }
    ));
    let report = hub
        .report_where(seen, "SUCCEEDED", |r| {
            phase_of(r, "hpc/m1/x") == Some(BurstPhase::Succeeded)
        })
        .await;
    let s = status(&report, &x.key).unwrap();
    assert!(
        s.conditions
            .iter()
            .any(|c| c.r#type == "Complete" && c.reason == "CompletionsReached"),
        "{s:?}"
    );

    agent.stop().await;
    server.stop().await;
}

/// Where the relay Service of `service` (`namespace/name`) was last pointed.
fn relay_endpoint(cluster: &FakeCluster, service: &str) -> Option<SocketAddr> {
    cluster.ops().into_iter().rev().find_map(|op| match op {
        Op::ServeRelay(s, at) if s == service => Some(at),
        _ => None,
    })
}

/// Writes `bytes` to a connection to `at` and reads as many back (through the test hub's
/// echoing lead).
async fn round_trip(at: SocketAddr, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(at).await?;
    tcp.write_all(bytes).await?;
    let mut back = vec![0u8; bytes.len()];
    tokio::time::timeout(PATIENCE, tcp.read_exact(&mut back)).await??;
    Ok(back)
}

#[tokio::test]
async fn a_relayed_burst_gets_a_listener_its_service_points_at_carried_to_the_hub() {
    let pki = Pki::new();
    let relayed =
        flux_spoke::testing::sample_relayed_assignments("hpc", "m1", &[("x", 2)]).remove(0);
    let hub = HubState::new(snapshot("e1", 1, vec![relayed.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    let agent = RunningAgent::start_with(
        &pki,
        &pki.spoke,
        server.addr,
        &cluster,
        LONG,
        Some("127.0.0.1".parse().unwrap()),
    );
    hub.ack("e1", 1).await;
    assert!(
        cluster.get(Kind::Service, "hpc", "x-relay").is_some(),
        "the relay Service is the burst's"
    );
    let at =
        relay_endpoint(&cluster, "hpc/x-relay").expect("the relay Service points at the spoke");
    assert_eq!(at.ip().to_string(), "127.0.0.1");

    // A broker's bytes go to the hub, named as this burst's, and the lead's come back; a
    // hundred KiB cross in several frames.
    let big: Vec<u8> = (0..100 * 1024).map(|i| (i % 251) as u8).collect();
    assert_eq!(
        round_trip(at, b"ZMTP greeting").await.unwrap(),
        b"ZMTP greeting"
    );
    assert_eq!(round_trip(at, &big).await.unwrap(), big);
    let relays = hub.relays.lock().unwrap().clone();
    assert_eq!(relays, vec![(SPOKE.to_string(), relayed.key.clone()); 2]);
    // A connection the hub carried says the lead answers.
    hub.report_where(0, "the relayed burst's lead reported reachable", |r| {
        lead_reachable(r, &relayed.key).is_some_and(|(s, _)| s == "True")
    })
    .await;

    // Heartbeats write nothing again; removing the burst closes its listener.
    let before = cluster.ops().len();
    hub.publish(snapshot("e1", 2, vec![relayed.clone()]));
    hub.ack("e1", 2).await;
    assert_eq!(
        cluster.ops().len(),
        before,
        "an applied relay is not written again"
    );
    hub.publish(snapshot("e1", 3, vec![]));
    hub.ack("e1", 3).await;
    eventually("the listener closed", || {
        std::net::TcpStream::connect_timeout(&at, Duration::from_secs(1))
            .is_err()
            .then_some(())
    })
    .await;

    agent.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn a_relayed_burst_without_a_relay_address_is_reported_failed_with_the_reason() {
    let pki = Pki::new();
    let relayed =
        flux_spoke::testing::sample_relayed_assignments("hpc", "m1", &[("x", 2)]).remove(0);
    let hub = HubState::new(snapshot("e1", 1, vec![relayed.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    let agent = RunningAgent::start(
        &pki,
        &pki.spoke,
        server.addr,
        &cluster,
        Duration::from_millis(300),
    );
    let report = hub
        .report_where(0, "a report of the missing relay address", |r| {
            status(r, &relayed.key).is_some_and(|s| s.message.contains("--relay-address"))
        })
        .await;
    assert_eq!(report.applied_version, 0, "not acknowledged: retried");
    assert_eq!(relay_endpoint(&cluster, "hpc/x-relay"), None);

    agent.stop().await;
    server.stop().await;
}

/// The `LeadReachable` condition of `key` in `report`: (status, message).
fn lead_reachable(report: &ReportRequest, key: &str) -> Option<(String, String)> {
    status(report, key)?
        .conditions
        .iter()
        .find(|c| c.r#type == flux_shared::federation::LEAD_REACHABLE)
        .map(|c| (c.status.clone(), c.message.clone()))
}

#[tokio::test]
async fn a_direct_bursts_lead_endpoint_is_probed_and_whether_it_answers_reported() {
    let pki = Pki::new();
    // A lead that answers, and one whose port is closed.
    let open = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = |l: &tokio::net::TcpListener| flux_shared::plan::Endpoint {
        address: "127.0.0.1".into(),
        port: i32::from(l.local_addr().unwrap().port()),
    };
    let (up, down) = (endpoint(&open), endpoint(&closed));
    drop(closed);
    let good =
        flux_spoke::testing::sample_assignments_led_by("hpc", "m1", &[("x", 2)], &up).remove(0);
    let bad =
        flux_spoke::testing::sample_assignments_led_by("hpc", "m2", &[("y", 2)], &down).remove(0);
    let hub = HubState::new(snapshot("e1", 1, vec![good.clone(), bad.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);
    let report = hub
        .report_where(0, "both leads probed", |r| {
            lead_reachable(r, &good.key).is_some() && lead_reachable(r, &bad.key).is_some()
        })
        .await;
    assert_eq!(lead_reachable(&report, &good.key).unwrap().0, "True");
    let (state, message) = lead_reachable(&report, &bad.key).unwrap();
    assert_eq!(state, "False");
    assert!(
        message.contains(&format!("127.0.0.1:{}", down.port)),
        "{message}"
    );

    // The burst removed: its lead is no longer probed or reported.
    hub.publish(snapshot("e1", 2, vec![good.clone()]));
    let report = hub.ack("e1", 2).await;
    assert!(lead_reachable(&report, &bad.key).is_none());
    drop(open);
    agent.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn every_report_says_how_the_spoke_reaches_the_root_declared_and_measured() {
    use flux_shared::federation::proto::RootPath;
    let pki = Pki::new();
    let lead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = flux_shared::plan::Endpoint {
        address: "127.0.0.1".into(),
        port: i32::from(lead.local_addr().unwrap().port()),
    };
    let x = flux_spoke::testing::sample_assignments_led_by("hpc", "m1", &[("x", 2)], &up).remove(0);
    let hub = HubState::new(snapshot("e1", 1, vec![x.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    // Reports every hour: a measurement is told because it changed.
    let agent = RunningAgent::start_configured(&pki, &pki.spoke, server.addr, &cluster, |c| {
        c.root_reach = RootPath::Relay;
    });
    let measured = |r: &ReportRequest| r.root_reach.as_ref().map(|r| r.measured());
    let report = hub
        .report_where(0, "the lead's probe measured", |r| {
            measured(r) == Some(RootPath::Direct)
        })
        .await;
    let reach = report.root_reach.expect("root reach");
    assert_eq!(
        reach.declared(),
        RootPath::Relay,
        "as its owner declared it"
    );
    assert_eq!(reach.measured_target, format!("127.0.0.1:{}", up.port));
    assert_eq!(reach.measured_error, "");
    assert!(reach.measured_unix_millis > 0);
    assert!(
        hub.reports()
            .iter()
            .all(|r| r.root_reach.as_ref().map(|r| r.declared()) == Some(RootPath::Relay)),
        "every report says it"
    );

    // The burst goes; what was measured of the root's network stays.
    hub.publish(snapshot("e1", 2, vec![]));
    let report = hub.ack("e1", 2).await;
    assert_eq!(measured(&report), Some(RootPath::Direct));
    drop(lead);
    agent.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn a_burst_switched_to_the_relay_gets_a_new_job_as_soon_as_the_old_one_is_gone() {
    let pki = Pki::new();
    let routed = |relayed| {
        flux_spoke::testing::sample_routed_assignments("hpc", "m1", &[("x", 2)], relayed).remove(0)
    };
    let hub = HubState::new(snapshot("e1", 1, vec![routed(false)]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    // Reports every hour: only the Job going can make the agent apply again.
    let agent = RunningAgent::start_with(
        &pki,
        &pki.spoke,
        server.addr,
        &cluster,
        LONG,
        Some(std::net::Ipv4Addr::LOCALHOST.into()),
    );
    hub.ack("e1", 1).await;
    let job = ObjectRef {
        kind: Kind::Job,
        namespace: "hpc".into(),
        name: "x".into(),
    };
    let path = |cluster: &FakeCluster| match cluster.get(Kind::Job, "hpc", "x") {
        Some(Object::Job(j)) => j
            .metadata
            .annotations
            .and_then(|a| a.get(flux_shared::render::labels::LEAD_PATH).cloned()),
        _ => None,
    };
    assert_eq!(path(&cluster).as_deref(), Some("direct"));

    hub.publish(snapshot("e1", 2, vec![routed(true)]));
    eventually("the direct Job deleted", || {
        cluster
            .ops()
            .contains(&Op::DeleteForeground(job.clone()))
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !hub.reports().iter().any(|r| r.applied_version == 2),
        "not acknowledged while the old Job's pods run"
    );
    assert!(cluster.finish_deletion("hpc", "x"));
    hub.ack("e1", 2).await;
    assert_eq!(path(&cluster).as_deref(), Some("relay"));
    assert_eq!(
        cluster
            .ops()
            .iter()
            .filter(|op| **op == Op::Apply(job.clone()))
            .count(),
        2,
        "created for each path"
    );
    assert_eq!(agent.metric("flux_spoke_deletes_total{kind=\"Job\"}"), 1.0);
    agent.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn a_failed_apply_is_not_acknowledged_and_is_retried() {
    let pki = Pki::new();
    let x = assignment("m1", "x", 2);
    let hub = HubState::new(snapshot("e1", 1, vec![x.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    cluster.fail_kind(FakeOp::Apply, Some(Kind::Job), "admission webhook said no");
    let agent = RunningAgent::start(
        &pki,
        &pki.spoke,
        server.addr,
        &cluster,
        Duration::from_millis(300),
    );

    let report = hub
        .report_where(0, "a report of the failure", |r| {
            status(r, "hpc/m1/x").is_some_and(|s| s.message.contains("admission webhook"))
        })
        .await;
    assert_eq!(report.hub_epoch, "e1");
    assert_eq!(report.applied_version, 0, "not acknowledged");
    assert_eq!(status(&report, &x.key).unwrap().observed_version, 0);
    assert!(agent.applied.borrow().is_none());

    cluster.heal();
    let report = hub.ack("e1", 1).await;
    let s = status(&report, &x.key).unwrap();
    assert!(s.message.is_empty(), "{s:?}");
    assert_eq!(s.observed_version, 1);
    assert!(cluster.get(Kind::Job, "hpc", "x").is_some());

    agent.stop().await;
    server.stop().await;
}

/// Applying failed while the cluster's API server was away: once it answers again the
/// snapshot is applied at once, not at the next report tick.
#[tokio::test]
async fn a_snapshot_the_cluster_could_not_take_is_applied_as_soon_as_it_is_back() {
    let pki = Pki::new();
    let x = assignment("m1", "x", 2);
    let hub = HubState::new(snapshot("e1", 1, vec![x.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    cluster.fail(FakeOp::Apply, "connection refused");
    // Reports (and retries on the timer) only every 60 s: longer than the test waits.
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);
    hub.report_where(0, "a report of the failure", |r| {
        status(r, "hpc/m1/x").is_some_and(|s| s.message.contains("connection refused"))
    })
    .await;
    cluster.set_unreachable(Some((SystemTime::now(), "connection refused".into())));
    // The watch saw the outage; then the API server answers again.
    tokio::time::sleep(Duration::from_millis(100)).await;
    cluster.heal();
    cluster.set_unreachable(None);
    let report = hub.ack("e1", 1).await;
    assert_eq!(status(&report, &x.key).unwrap().observed_version, 1);
    assert!(cluster.get(Kind::Job, "hpc", "x").is_some());
    agent.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn a_refused_certificate_is_retried_without_touching_the_cluster() {
    let pki = Pki::new();
    let hub = HubState::new(snapshot("e1", 1, vec![assignment("m1", "x", 2)]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    // An admin certificate: the hub answers PERMISSION_DENIED.
    let agent = RunningAgent::start(&pki, &pki.admin, server.addr, &cluster, LONG);
    eventually("the refusal", || {
        (agent.metric("flux_spoke_errors_total{kind=\"auth\"}") >= 1.0).then_some(())
    })
    .await;
    assert!(cluster.ops().is_empty());
    assert!(hub.reports().is_empty());
    assert_eq!(agent.metric("flux_spoke_connected"), 0.0);
    // Shutdown interrupts the (long) wait before the next attempt.
    agent.stop().await;
    server.stop().await;
}

/// The objects of `a` as the spoke `who` makes them, with their labels as `relabel` says.
fn objects_of(
    a: &Assignment,
    who: &SpokeIdentity,
    relabel: impl Fn(&mut ObjectMeta),
) -> Vec<Object> {
    realize(a, who)
        .unwrap()
        .objects
        .into_iter()
        .map(|mut o| {
            relabel(metadata_mut(&mut o));
            o
        })
        .collect()
}

/// What an object is in the cluster now: its whole serialised form (uid and
/// resourceVersion included), to tell that nothing wrote it.
fn snapshot_of(cluster: &FakeCluster, r: &ObjectRef) -> Option<serde_json::Value> {
    cluster
        .get(r.kind, &r.namespace, &r.name)
        .map(|o| serde_json::to_value(o).unwrap())
}

/// Someone else's ConfigMap holding a name a burst needs, and a spoke's Secret of another
/// spoke name: the burst is refused as a whole (nothing of it written, not even the objects
/// whose names are free), the refusal names both objects, it is not retried on every
/// report, and it is examined again once the blocking objects go.
#[tokio::test]
async fn a_name_taken_by_someone_else_refuses_the_whole_burst_until_it_is_freed() {
    let pki = Pki::new();
    let x = assignment("m1", "x", 2);
    let cluster = FakeCluster::new();
    let refs: Vec<ObjectRef> = realize(&x, &pki.me())
        .unwrap()
        .objects
        .iter()
        .map(ObjectRef::of)
        .collect();
    let config = refs
        .iter()
        .find(|r| r.kind == Kind::ConfigMap)
        .unwrap()
        .clone();
    let secret = refs
        .iter()
        .find(|r| r.kind == Kind::Secret)
        .unwrap()
        .clone();
    let mut foreign = ConfigMap {
        metadata: ObjectMeta {
            name: Some(config.name.clone()),
            namespace: Some("hpc".into()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_string(),
                    "helm".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    foreign.data = Some([("k".to_string(), "v".to_string())].into());
    cluster.insert(Object::ConfigMap(foreign));
    let other = SpokeIdentity {
        name: "edge".into(),
        ..pki.me()
    };
    for o in objects_of(&x, &other, |_| {}) {
        if ObjectRef::of(&o) == secret {
            cluster.insert(o);
        }
    }
    let before: Vec<_> = [&config, &secret]
        .iter()
        .map(|r| snapshot_of(&cluster, r).unwrap())
        .collect();

    let hub = HubState::new(snapshot("e1", 1, vec![x.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let interval = Duration::from_millis(200);
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, interval);

    let report = hub.ack("e1", 1).await;
    let s = status(&report, &x.key).unwrap();
    assert_eq!(
        phase_of(&report, &x.key),
        Some(BurstPhase::Refused),
        "{s:?}"
    );
    assert!(s.message.starts_with("NameTaken: "), "{}", s.message);
    for needle in [
        format!("ConfigMap hpc/{}", config.name),
        "managed by \"helm\"".to_string(),
        format!("Secret hpc/{}", secret.name),
        "spoke \"edge\"".to_string(),
    ] {
        assert!(
            s.message.contains(&needle),
            "{needle:?} not in {}",
            s.message
        );
    }
    assert!(
        s.conditions
            .iter()
            .any(|c| c.r#type == "ConfigIdentical" && c.reason == "NameTaken"),
        "{s:?}"
    );
    // Not retried every report interval: several reports, still nothing written.
    let seen = hub.report_count();
    hub.report_where(seen + 3, "three more reports", |_| true)
        .await;
    assert!(cluster.applied().is_empty(), "{:?}", cluster.ops());
    assert!(cluster.deleted().is_empty(), "{:?}", cluster.ops());
    let after: Vec<_> = [&config, &secret]
        .iter()
        .map(|r| snapshot_of(&cluster, r).unwrap())
        .collect();
    assert_eq!(after, before, "the blocking objects are untouched");
    assert_eq!(agent.metric("flux_spoke_errors_total{kind=\"names\"}"), 1.0);

    // One blocker goes: still refused (the other one holds), named alone now.
    cluster.remove(config.kind, &config.namespace, &config.name);
    let seen = hub.report_count();
    let report = hub
        .report_where(seen, "a refusal naming only the Secret", |r| {
            status(r, &x.key)
                .is_some_and(|s| !s.message.contains("ConfigMap") && s.message.contains("Secret"))
        })
        .await;
    assert_eq!(phase_of(&report, &x.key), Some(BurstPhase::Refused));
    assert!(cluster.applied().is_empty(), "{:?}", cluster.ops());

    // The other goes too: the burst is applied.
    cluster.remove(secret.kind, &secret.namespace, &secret.name);
    let seen = hub.report_count();
    hub.report_where(seen, "the burst applied", |r| {
        phase_of(r, &x.key) == Some(BurstPhase::Applied)
    })
    .await;
    let applied: BTreeSet<_> = cluster.applied().into_iter().collect();
    assert_eq!(applied, refs_of(&x));
    assert!(cluster.deleted().is_empty());

    agent.stop().await;
    server.stop().await;
}

/// The first snapshot deletes what this spoke made and the hub no longer lists, objects of
/// an older spoke version included, but never objects of another spoke name or another
/// federation, even with the same managed-by label and assignment annotation.
#[tokio::test]
async fn only_this_spokes_objects_are_pruned_and_legacy_ones_are_adopted() {
    let pki = Pki::new();
    let cluster = FakeCluster::new();
    let me = pki.me();
    let renamed = SpokeIdentity {
        name: "old-name".into(),
        ..me.clone()
    };
    let elsewhere = SpokeIdentity {
        federation: "another-federation".into(),
        ..me.clone()
    };
    let strip = |m: &mut ObjectMeta| {
        if let Some(l) = m.labels.as_mut() {
            l.remove(SPOKE_LABEL);
            l.remove(FEDERATION_LABEL);
        }
    };
    // Running bursts of another spoke name and of another federation, in other namespaces
    // than ours, and an old version's leftovers (no spoke or federation labels): one no
    // longer assigned, one assigned.
    let theirs = sample_assignments("a", "m", &[("r", 1)]).remove(0);
    let federated = sample_assignments("b", "m", &[("f", 1)]).remove(0);
    let gone = assignment("gone", "g", 1);
    let x = assignment("m1", "x", 2);
    let mut protected = BTreeSet::new();
    for o in objects_of(&theirs, &renamed, |_| {}) {
        protected.insert(ObjectRef::of(&o));
        cluster.insert(o);
    }
    for o in objects_of(&federated, &elsewhere, |_| {}) {
        protected.insert(ObjectRef::of(&o));
        cluster.insert(o);
    }
    for o in objects_of(&gone, &me, strip)
        .into_iter()
        .chain(objects_of(&x, &me, strip))
    {
        cluster.insert(o);
    }
    let before: Vec<_> = protected.iter().map(|r| snapshot_of(&cluster, r)).collect();

    let hub = HubState::new(snapshot("e1", 1, vec![x.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);
    let report = hub.ack("e1", 1).await;

    assert_eq!(phase_of(&report, &x.key), Some(BurstPhase::Applied));
    let deleted: BTreeSet<_> = cluster.deleted().into_iter().collect();
    assert_eq!(deleted, refs_of(&gone), "only the legacy leftovers");
    let applied: BTreeSet<_> = cluster.applied().into_iter().collect();
    assert_eq!(applied, refs_of(&x));
    for r in refs_of(&x) {
        let o = cluster.get(r.kind, &r.namespace, &r.name).unwrap();
        let labels = metadata(&o).labels.clone().unwrap_or_default();
        assert_eq!(labels.get(SPOKE_LABEL), Some(&me.name), "{r}: relabelled");
        assert_eq!(labels.get(FEDERATION_LABEL), Some(&me.federation), "{r}");
    }
    let after: Vec<_> = protected.iter().map(|r| snapshot_of(&cluster, r)).collect();
    assert_eq!(after, before, "other spokes' objects are untouched");

    // Nor when the hub drops everything.
    hub.publish(snapshot("e1", 2, vec![]));
    hub.ack("e1", 2).await;
    let left: BTreeSet<_> = cluster.refs().into_iter().collect();
    assert_eq!(left, protected);

    agent.stop().await;
    server.stop().await;
}

// ---------------------------------------------------------------------------------------
// The spoke policy
// ---------------------------------------------------------------------------------------

/// Without a policy nothing is written and every burst is refused with the reason; a
/// policy written later admits the waiting burst with no new snapshot from the hub, in a
/// namespace created with the policy's Pod Security level.
#[tokio::test]
async fn no_policy_refuses_every_burst_until_one_admits_it_without_a_new_snapshot() {
    let pki = Pki::new();
    let x = assignment("m1", "x", 2);
    let hub = HubState::new(snapshot("e1", 1, vec![x.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    cluster.set_policy(None);
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);

    let report = hub.ack("e1", 1).await;
    assert_eq!(phase_of(&report, &x.key), Some(BurstPhase::Refused));
    let s = status(&report, &x.key).unwrap();
    assert_eq!(s.reason, "NoPolicy");
    assert_eq!(s.admitted_size, Some(0));
    assert!(
        s.message.contains("flux-hub join --allow-namespace"),
        "{}",
        s.message
    );
    assert!(
        cluster.ops().is_empty(),
        "nothing written: {:?}",
        cluster.ops()
    );

    let seen = hub.report_count();
    cluster.set_policy(Some("namespaces: [{name: hpc, podSecurity: baseline}]\n"));
    let report = hub
        .report_where(seen, "the burst admitted", |r| {
            phase_of(r, &x.key) == Some(BurstPhase::Applied)
        })
        .await;
    let s = status(&report, &x.key).unwrap();
    assert_eq!((s.reason.as_str(), s.admitted_size), ("", Some(32)));
    assert_eq!(cluster.ops()[0], Op::EnsureNamespace("hpc".into()));
    assert_eq!(cluster.namespace_level("hpc").as_deref(), Some("baseline"));
    assert_eq!(cluster.applied().len(), refs_of(&x).len());
    assert_eq!(
        hub.watches().len(),
        1,
        "no reconnection, no new snapshot needed"
    );

    agent.stop().await;
    server.stop().await;
}

/// A policy that no longer admits a running burst keeps its brokers as they are (no
/// growth, no deletion) and says why; removing the burst at the hub still deletes it.
#[tokio::test]
async fn a_running_burst_the_policy_no_longer_admits_is_kept_not_grown_and_reported() {
    let pki = Pki::new();
    let x = assignment("m1", "x", 2);
    let hub = HubState::new(snapshot("e1", 1, vec![x.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);
    hub.ack("e1", 1).await;
    assert!(cluster.set_job_status(
        "hpc",
        "x",
        JobStatus {
            ready: Some(2),
            active: Some(2),
            ..Default::default()
        }
    ));
    cluster.clear_ops();

    let seen = hub.report_count();
    cluster.set_policy(Some("namespaces: [{name: elsewhere}]\n"));
    let report = hub
        .report_where(seen, "the burst held", |r| {
            status(r, &x.key).is_some_and(|s| s.reason == "NamespaceNotAllowed")
        })
        .await;
    let s = status(&report, &x.key).unwrap();
    assert_eq!(phase_of(&report, &x.key), Some(BurstPhase::Running));
    assert_eq!((s.brokers_ready, s.size), (2, 2));
    assert!(
        s.message.contains("running brokers are kept"),
        "{}",
        s.message
    );
    assert!(
        cluster.ops().is_empty(),
        "nothing changed: {:?}",
        cluster.ops()
    );

    // A growth is not applied either.
    hub.publish(snapshot("e1", 2, vec![assignment("m1", "x", 3)]));
    let report = hub.ack("e1", 2).await;
    assert_eq!(
        status(&report, &x.key).unwrap().reason,
        "NamespaceNotAllowed"
    );
    assert!(cluster.ops().is_empty(), "not grown: {:?}", cluster.ops());

    // Removed at the hub: deleted, the policy notwithstanding.
    hub.publish(snapshot("e1", 3, vec![]));
    let report = hub.ack("e1", 3).await;
    assert_eq!(phase_of(&report, &x.key), Some(BurstPhase::Deleted));
    assert_eq!(cluster.deleted().len(), refs_of(&x).len());

    agent.stop().await;
    server.stop().await;
}

/// The hub hears what the policy lets bursts have beyond the baseline when the spoke
/// connects; a policy edit that changes it reconnects the spoke to say so, one that does
/// not never does.
#[tokio::test]
async fn the_policys_exceptions_are_announced_and_a_change_reconnects() {
    let pki = Pki::new();
    let hub = HubState::new(snapshot("e1", 1, vec![]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    cluster.set_policy(Some("namespaces: [{name: hpc}]\n"));
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);
    hub.ack("e1", 1).await;
    assert!(hub.watches()[0].exceptions.is_empty(), "nothing lifted");

    cluster.set_policy(Some("namespaces: [{name: hpc, podSecurity: baseline}]\n"));
    cluster.set_policy(Some(
        "namespaces: [{name: hpc, podSecurity: privileged, allow: {privileged: true, serviceAccounts: [runner]}}]\n",
    ));
    let announced = eventually("the exceptions announced", || {
        hub.watches().get(1).map(|w| w.exceptions.clone())
    })
    .await;
    assert_eq!(announced.len(), 1);
    assert_eq!(announced[0].namespace, "hpc");
    assert!(announced[0].privileged);
    assert_eq!(announced[0].service_accounts, ["runner"]);
    assert_eq!(hub.watches().len(), 2, "one reconnection");

    agent.stop().await;
    server.stop().await;
}

/// The broker ceiling is shared: the second burst gets what is left, and its status
/// says how many that is (what the hub's autoscaler may grow it to).
#[tokio::test]
async fn the_broker_ceiling_is_shared_and_the_admitted_size_reported() {
    let pki = Pki::new();
    let a = assignment("m1", "a", 2);
    let b = assignment("m2", "b", 2);
    let hub = HubState::new(snapshot("e1", 1, vec![a.clone(), b.clone()]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    cluster.set_policy(Some(
        "namespaces: [{name: hpc, podSecurity: privileged}]\nmaxBrokers: 3\n",
    ));
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);
    let report = hub.ack("e1", 1).await;
    let sa = status(&report, &a.key).unwrap();
    assert_eq!((sa.reason.as_str(), sa.admitted_size), ("", Some(3)));
    let sb = status(&report, &b.key).unwrap();
    assert_eq!(phase_of(&report, &b.key), Some(BurstPhase::Refused));
    assert_eq!(
        (sb.reason.as_str(), sb.admitted_size),
        ("TooManyBrokers", Some(1))
    );
    assert_eq!(
        cluster.applied().into_iter().collect::<BTreeSet<_>>(),
        refs_of(&a)
    );

    agent.stop().await;
    server.stop().await;
}

/// A certificate renewed in the files the spoke read (a Secret volume updated in place)
/// is used without a restart: the spoke reconnects with it. Files that hold another
/// spoke's certificate are not used.
#[tokio::test]
async fn a_certificate_renewed_in_its_files_is_used_without_a_restart() {
    use flux_shared::federation::tls::TlsFiles;
    let pki = Pki::new();
    let dir = std::env::temp_dir().join(format!("spoke-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let write = |leaf: &IssuedCert| {
        std::fs::write(dir.join("ca.crt"), pki.ca.cert_pem()).unwrap();
        std::fs::write(dir.join("tls.crt"), &leaf.cert_pem).unwrap();
        std::fs::write(dir.join("tls.key"), &leaf.key_pem).unwrap();
    };
    write(&pki.spoke);
    let hub = HubState::new(snapshot("e1", 1, vec![]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let security = ClientSecurity::Mtls {
        tls: pki.pem(&pki.spoke),
        domain: HUB_DNS.to_string(),
    };
    let config = AgentConfig {
        tls_files: Some(TlsFiles {
            ca: dir.join("ca.crt"),
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        }),
        tls_check_interval: Duration::from_millis(100),
        ..AgentConfig::new(format!("https://{}", server.addr), security).unwrap()
    };
    let agent = Agent::new(config, FakeCluster::new(), Arc::new(Metrics::new()));
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(agent.run(async move {
        let _ = stopped.await;
    }));
    let certs = || hub.watch_certs.lock().unwrap().clone();
    eventually("the first connection", || {
        (certs().len() == 1).then_some(())
    })
    .await;
    assert_eq!(certs()[0], pki.spoke.cert_der);

    // Another spoke's certificate in the files: not used, no reconnection.
    let other = pki
        .ca
        .issue_client(&Identity::spoke("someone-else").unwrap(), 1)
        .unwrap();
    write(&other);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        certs().len(),
        1,
        "another identity's certificate is not used"
    );

    // A renewed certificate of this spoke: the spoke reconnects with it.
    let renewed = pki
        .ca
        .issue_client(&Identity::spoke(SPOKE).unwrap(), 1)
        .unwrap();
    write(&renewed);
    eventually("a connection with the renewed certificate", || {
        certs()
            .last()
            .filter(|c| **c == renewed.cert_der)
            .map(|_| ())
    })
    .await;
    let _ = stop.send(());
    tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A spoke whose policy is not read yet does not announce its exceptions as none: the hub
/// would refuse the running bursts that need them. It opens its Watch once the policy is
/// read.
#[tokio::test]
async fn the_watch_waits_for_the_policy_to_be_read() {
    let pki = Pki::new();
    let hub = HubState::new(snapshot("e1", 1, vec![]));
    let server = RunningHub::start(&pki, &hub, any_port()).await;
    let cluster = FakeCluster::new();
    cluster.set_policy(Some(
        "namespaces: [{name: hpc, podSecurity: privileged, allow: {privileged: true}}]\nmaxBrokers: 8\n",
    ));
    cluster.set_policy_known(false);
    let agent = RunningAgent::start(&pki, &pki.spoke, server.addr, &cluster, LONG);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        hub.watches().is_empty(),
        "no Watch before the policy is read"
    );
    cluster.set_policy_known(true);
    let watch = eventually("a Watch once the policy is read", || {
        hub.watches().into_iter().next()
    })
    .await;
    assert!(
        !watch.exceptions.is_empty(),
        "the policy's exceptions announced: {watch:?}"
    );
    agent.stop().await;
    server.stop().await;
}
