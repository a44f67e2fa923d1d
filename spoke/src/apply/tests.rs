//! The applier's writes when a burst's path to the lead broker changes, against the
//! in-memory cluster: exactly what is written and deleted, pass by pass.

use std::sync::Arc;

use flux_shared::federation::Identity;
use flux_shared::federation::assignment::realize;
use flux_shared::federation::proto::{Assignment, Snapshot};
use flux_shared::federation::tls::ClientSecurity;
use flux_shared::render::Object;
use flux_shared::render::labels::LEAD_PATH;

use super::Applier;
use crate::agent_config::AgentConfig;
use crate::burst_status::Outcome;
use crate::cluster::{Kind, ObjectRef};
use crate::metrics::Metrics;
use crate::state::State;
use crate::testing::{FakeCluster, FakeOp, Op, sample_identity, sample_routed_assignments};

const SPOKE: &str = "gke";

fn applier(cluster: &FakeCluster) -> Applier<FakeCluster> {
    let security = ClientSecurity::InsecureDevelopment(Identity::spoke(SPOKE).expect("a name"));
    let config = AgentConfig {
        relay_address: Some(std::net::Ipv4Addr::LOCALHOST.into()),
        ..AgentConfig::new("http://127.0.0.1:1", security).expect("a spoke identity")
    };
    Applier::new(&config, cluster.clone(), Arc::new(Metrics::new()))
}

/// Burst `x` of `hpc/m`, of `size` brokers, on the path the hub chose.
fn burst(size: i32, relayed: bool) -> Assignment {
    sample_routed_assignments("hpc", "m", &[("x", size)], relayed).remove(0)
}

fn snapshot(version: u64, assignment: &Assignment) -> Snapshot {
    Snapshot {
        hub_epoch: "e1".into(),
        version,
        assignments: vec![assignment.clone()],
        ..Snapshot::default()
    }
}

fn r(kind: Kind, name: &str) -> ObjectRef {
    ObjectRef {
        kind,
        namespace: "hpc".into(),
        name: name.into(),
    }
}

/// The lead-path annotation of Job `x`, and whether it is being deleted.
fn job(cluster: &FakeCluster) -> Option<(Option<String>, bool)> {
    match cluster.get(Kind::Job, "hpc", "x")? {
        Object::Job(j) => Some((
            j.metadata
                .annotations
                .and_then(|a| a.get(LEAD_PATH).cloned()),
            j.metadata.deletion_timestamp.is_some(),
        )),
        _ => None,
    }
}

fn deletes(cluster: &FakeCluster) -> Vec<Op> {
    cluster
        .ops()
        .into_iter()
        .filter(|op| matches!(op, Op::Delete(_) | Op::DeleteForeground(_)))
        .collect()
}

/// What an older spoke left: `assignment`'s objects, its Job without the annotation.
fn leftovers(cluster: &FakeCluster, assignment: &Assignment) {
    let realized = realize(assignment, &sample_identity(SPOKE)).expect("realizes");
    for mut object in realized.objects {
        if let Object::Job(j) = &mut object
            && let Some(a) = j.metadata.annotations.as_mut()
        {
            a.remove(LEAD_PATH);
        }
        cluster.insert(object);
    }
}

#[tokio::test]
async fn the_same_path_writes_the_job_and_deletes_nothing() {
    let cluster = FakeCluster::new();
    let applier = applier(&cluster);
    let mut state = State::default();
    applier
        .apply(&mut state, snapshot(1, &burst(2, false)))
        .await;
    assert!(state.complete);
    assert_eq!(job(&cluster), Some((Some("direct".into()), false)));
    cluster.clear_ops();

    // Grown, still direct: written over, nothing deleted.
    applier
        .apply(&mut state, snapshot(2, &burst(3, false)))
        .await;
    assert!(state.complete);
    assert!(deletes(&cluster).is_empty(), "{:?}", cluster.ops());
    assert!(cluster.applied().contains(&r(Kind::Job, "x")));
    assert_eq!(job(&cluster), Some((Some("direct".into()), false)));
}

#[tokio::test]
async fn a_new_path_deletes_the_job_then_creates_it_once_it_is_gone() {
    let cluster = FakeCluster::new();
    let applier = applier(&cluster);
    let mut state = State::default();
    applier
        .apply(&mut state, snapshot(1, &burst(2, false)))
        .await;
    cluster.clear_ops();

    // Switched to the relay: its configuration and relay Service are written, its Job
    // deleted (in the foreground: its pods go first) and not written.
    let relayed = burst(2, true);
    applier.apply(&mut state, snapshot(2, &relayed)).await;
    assert_eq!(
        cluster.ops(),
        [
            Op::Apply(r(Kind::ConfigMap, "x-flux-config")),
            Op::Apply(r(Kind::Secret, "x-curve")),
            Op::Apply(r(Kind::Service, "x")),
            Op::Apply(r(Kind::Service, "x-relay")),
            Op::DeleteForeground(r(Kind::Job, "x")),
        ]
    );
    assert_eq!(job(&cluster), Some((Some("direct".into()), true)));
    assert!(
        !state.complete,
        "not acknowledged while its Job is replaced"
    );
    assert_eq!(state.acked, 1);
    let tracked = state.tracked.iter().find(|t| t.key == relayed.key);
    assert!(
        matches!(
            tracked.map(|t| (&t.outcome, t.observed_version)),
            Some((Outcome::Failed { message }, 1)) if message.contains("from direct to relay")
        ),
        "{tracked:?}"
    );
    assert!(!applier.replaced_gone(&state).await);

    // Retried while its pods stop: neither deleted again nor created.
    cluster.clear_ops();
    applier.apply(&mut state, snapshot(2, &relayed)).await;
    assert!(deletes(&cluster).is_empty(), "{:?}", cluster.ops());
    assert!(!cluster.applied().contains(&r(Kind::Job, "x")));
    assert!(!state.complete);

    // Gone: created anew, for the relay, and its listener served.
    assert!(cluster.finish_deletion("hpc", "x"));
    assert!(applier.replaced_gone(&state).await);
    cluster.clear_ops();
    applier.apply(&mut state, snapshot(2, &relayed)).await;
    assert!(cluster.applied().contains(&r(Kind::Job, "x")));
    assert!(deletes(&cluster).is_empty(), "{:?}", cluster.ops());
    assert!(
        cluster
            .ops()
            .iter()
            .any(|op| matches!(op, Op::ServeRelay(s, _) if s == "hpc/x-relay"))
    );
    assert_eq!(job(&cluster), Some((Some("relay".into()), false)));
    assert!(state.complete);
    assert_eq!(state.acked, 2);
    assert!(state.replacing.is_empty());

    // And back to direct: the relay Service goes with the Job.
    cluster.clear_ops();
    applier
        .apply(&mut state, snapshot(3, &burst(2, false)))
        .await;
    assert_eq!(
        deletes(&cluster),
        [
            Op::DeleteForeground(r(Kind::Job, "x")),
            Op::Delete(r(Kind::Service, "x-relay")),
        ]
    );
}

#[tokio::test]
async fn an_older_spokes_job_keeps_its_path_by_its_relay_service() {
    // Direct, and still direct: applied over, never deleted.
    let cluster = FakeCluster::new();
    leftovers(&cluster, &burst(2, false));
    assert_eq!(job(&cluster), Some((None, false)));
    let mut state = State::default();
    applier(&cluster)
        .apply(&mut state, snapshot(1, &burst(2, false)))
        .await;
    assert!(deletes(&cluster).is_empty(), "{:?}", cluster.ops());
    assert_eq!(job(&cluster), Some((Some("direct".into()), false)));
    assert!(state.complete);

    // Relayed (it has its relay Service), and still relayed: the same.
    let cluster = FakeCluster::new();
    leftovers(&cluster, &burst(2, true));
    let mut state = State::default();
    applier(&cluster)
        .apply(&mut state, snapshot(1, &burst(2, true)))
        .await;
    assert!(deletes(&cluster).is_empty(), "{:?}", cluster.ops());
    assert_eq!(job(&cluster), Some((Some("relay".into()), false)));

    // Direct, now relayed: replaced.
    let cluster = FakeCluster::new();
    leftovers(&cluster, &burst(2, false));
    let mut state = State::default();
    applier(&cluster)
        .apply(&mut state, snapshot(1, &burst(2, true)))
        .await;
    assert_eq!(deletes(&cluster), [Op::DeleteForeground(r(Kind::Job, "x"))]);
    assert!(!state.complete);
}

/// The value of one metric line (`name{labels}`) of `metrics`, 0 when absent.
fn metric(metrics: &Metrics, series: &str) -> f64 {
    metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a_fenced_burst_is_created_anew_by_a_snapshot_once_its_job_is_gone() {
    use crate::fence::{Fencing, carry_out_due};
    use std::time::{Duration, Instant};
    const AFTER: Duration = Duration::from_secs(120);
    let cluster = FakeCluster::new();
    let applier = applier(&cluster);
    let mut state = State {
        fencing: Fencing::new(AFTER, Instant::now()),
        ..State::default()
    };
    let direct = burst(2, false);
    let relayed = sample_routed_assignments("hpc", "r", &[("y", 1)], true).remove(0);
    let both = Snapshot {
        assignments: vec![direct.clone(), relayed.clone()],
        ..snapshot(1, &direct)
    };
    applier.apply(&mut state, both.clone()).await;
    assert!(state.complete);
    assert_eq!(
        state.fencing.watched(),
        std::slice::from_ref(&direct.key),
        "a relayed burst is never watched"
    );

    // Neither the hub nor the lead heard for longer than AFTER: the direct burst's Job
    // is deleted in the foreground, once.
    let metrics = Metrics::new();
    let me = sample_identity(SPOKE);
    let later = Instant::now() + AFTER + Duration::from_secs(1);
    cluster.fail_kind(FakeOp::Delete, Some(Kind::Job), "forbidden");
    assert!(carry_out_due(&state.fencing, &cluster, &me, &metrics, later).await);
    assert_eq!(
        metric(&metrics, "flux_spoke_errors_total{kind=\"fence\"}"),
        1.0
    );
    assert_eq!(job(&cluster), Some((Some("direct".into()), false)));
    cluster.heal();
    cluster.clear_ops();
    assert!(!carry_out_due(&state.fencing, &cluster, &me, &metrics, later).await);
    assert_eq!(deletes(&cluster), [Op::DeleteForeground(r(Kind::Job, "x"))]);
    assert_eq!(metric(&metrics, "flux_spoke_fenced_total"), 1.0);
    assert_eq!(
        metric(&metrics, "flux_spoke_deletes_total{kind=\"Job\"}"),
        1.0
    );
    assert!(!carry_out_due(&state.fencing, &cluster, &me, &metrics, later).await);
    assert_eq!(
        metric(&metrics, "flux_spoke_fenced_total"),
        1.0,
        "fenced once"
    );
    let fenced = |state: &State| state.fencing.condition(&direct.key).map(|c| c.status);
    assert_eq!(fenced(&state).as_deref(), Some("True"));

    // A snapshot that still lists it, while its pods stop: its Job is not written onto.
    cluster.clear_ops();
    applier.apply(&mut state, both.clone()).await;
    assert!(!cluster.applied().contains(&r(Kind::Job, "x")));
    assert!(!state.complete);
    let tracked = state.tracked.iter().find(|t| t.key == direct.key);
    assert!(
        matches!(
            tracked.map(|t| &t.outcome),
            Some(Outcome::Failed { message }) if message.contains("being deleted")
        ),
        "{tracked:?}"
    );
    assert!(!applier.replaced_gone(&state).await);
    assert_eq!(fenced(&state).as_deref(), Some("True"));

    // Gone: created anew, and watched again.
    assert!(cluster.finish_deletion("hpc", "x"));
    assert!(applier.replaced_gone(&state).await);
    applier.apply(&mut state, both).await;
    assert!(cluster.applied().contains(&r(Kind::Job, "x")));
    assert_eq!(job(&cluster), Some((Some("direct".into()), false)));
    assert!(state.complete);
    assert_eq!(fenced(&state).as_deref(), Some("False"));
    assert_eq!(state.fencing.watched(), std::slice::from_ref(&direct.key));
}

/// A relayed burst the policy no longer admits as sent keeps running, and keeps its relay
/// after the spoke restarts: the new process, which never applied it, serves its relay
/// Service from the assignment held (seen lost in an upgrade of the spoke, whose brokers
/// could reach their lead no more).
#[tokio::test]
async fn a_held_relayed_burst_keeps_its_relay_after_a_restart() {
    let cluster = FakeCluster::new();
    let relayed = burst(2, true);
    applier(&cluster)
        .apply(&mut State::default(), snapshot(1, &relayed))
        .await;
    assert!(
        cluster
            .ops()
            .iter()
            .any(|op| matches!(op, Op::ServeRelay(s, _) if s == "hpc/x-relay"))
    );
    // The owner now admits one broker only, and the spoke restarts (nothing remembered).
    cluster.set_policy(Some(
        "namespaces: [{name: '*', podSecurity: privileged}]\nmaxBrokers: 1\n",
    ));
    cluster.clear_ops();
    let mut state = State::default();
    applier(&cluster)
        .apply(&mut state, snapshot(1, &relayed))
        .await;
    let tracked = state.tracked.iter().find(|t| t.key == relayed.key);
    assert!(
        matches!(tracked.map(|t| &t.outcome), Some(Outcome::Held { .. })),
        "{tracked:?}"
    );
    assert!(deletes(&cluster).is_empty(), "{:?}", cluster.ops());
    assert!(
        cluster
            .ops()
            .iter()
            .any(|op| matches!(op, Op::ServeRelay(s, _) if s == "hpc/x-relay")),
        "the held burst's relay is served: {:?}",
        cluster.ops()
    );
    assert!(
        !cluster.applied().contains(&r(Kind::Job, "x")),
        "its Job is not written"
    );
}
