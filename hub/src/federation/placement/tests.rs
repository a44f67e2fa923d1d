//! The placement rules, one test each.
//!
//! Size: over 600 lines because every rule is a table of cases, kept beside the others.

use super::*;
use flux_shared::federation::proto;

const T0: Duration = Duration::from_secs(1_000_000);

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + T0 + Duration::from_secs(secs)
}

/// A room of `pods` free pod slots on one node, with `policy` maxBrokers and `in_use`.
fn room(pods: i64, max_brokers: i32, in_use: i32) -> Room {
    Room::from_proto(&proto::ClusterRoom {
        nodes: vec![proto::NodeRoom {
            count: 1,
            free_milli: [("pods".to_string(), pods * 1000)].into_iter().collect(),
        }],
        policy: Some(proto::PolicyRoom {
            valid: true,
            namespaces: vec!["default".into()],
            max_brokers,
            max_brokers_per_minicluster: max_brokers,
            brokers: in_use,
        }),
        ..proto::ClusterRoom::default()
    })
    .unwrap()
}

fn candidate<'a>(name: &'a str, room: Option<&'a Room>) -> Candidate<'a> {
    Candidate {
        name,
        connected: true,
        room,
        room_pending: false,
        unsafe_because: None,
        others: 0,
    }
}

fn ask<'a>(shape: &'a LazyShape<'a>, size: i32) -> Ask<'a> {
    Ask {
        namespace: "default",
        size,
        shape,
    }
}

fn reasons(p: &Placement) -> Vec<(String, String)> {
    p.skipped
        .iter()
        .map(|s| (s.cluster.clone(), s.reason.clone()))
        .collect()
}

fn pair(spoke: &str, reason: &str) -> (String, String) {
    (spoke.to_string(), reason.to_string())
}

fn fresh(candidates: &[Candidate<'_>], size: i32) -> Placement {
    let shape = LazyShape::new(Shape::default);
    place(
        candidates,
        &ask(&shape, size),
        None,
        &[],
        at(0),
        Timeouts::default(),
        false,
    )
}

fn placed_on(spoke: &str, since: u64, report: Option<Reported>) -> Current {
    Current {
        spoke: spoke.into(),
        since: at(since),
        delivered: true,
        sent_at: None,
        report,
        away_since: None,
        was_empty: false,
        lead_sees_none: None,
    }
}

fn reported(phase: BurstPhase, size: i32, ready: i32) -> Reported {
    Reported {
        phase,
        size,
        brokers_ready: ready,
        brokers_draining: 0,
        reason: String::new(),
        message: String::new(),
    }
}

#[test]
fn the_first_candidate_with_room_gets_the_burst_and_those_before_say_why_not() {
    let full = room(2, 32, 0);
    let roomy = room(8, 32, 0);
    let p = fresh(
        &[candidate("a", Some(&full)), candidate("b", Some(&roomy))],
        4,
    );
    assert_eq!(p.spoke.as_deref(), Some("b"));
    assert_eq!(p.since, Some(at(0)));
    assert_eq!(reasons(&p), [pair("a", reason::NO_ROOM)]);
    assert_eq!(
        p.skipped[0].message,
        "its nodes have room for 2 of 4 brokers"
    );
    // Decided again while it waits or runs there: it stays, and still says why.
    let shape = LazyShape::new(Shape::default);
    for report in [None, Some(reported(BurstPhase::Running, 4, 4))] {
        let again = place(
            &[candidate("a", Some(&roomy)), candidate("b", Some(&roomy))],
            &ask(&shape, 4),
            Some(&placed_on("b", 0, report)),
            &p.skipped,
            at(10),
            Timeouts::default(),
            false,
        );
        assert_eq!(
            (again.spoke.as_deref(), &again.skipped),
            (Some("b"), &p.skipped)
        );
    }
    // In order: the first one wins when both have room.
    let p = fresh(
        &[candidate("b", Some(&roomy)), candidate("a", Some(&roomy))],
        4,
    );
    assert_eq!((p.spoke.as_deref(), p.skipped.len()), (Some("b"), 0));
}

#[test]
fn with_room_nowhere_the_first_that_admits_it_gets_it_and_its_pods_wait() {
    let full = room(1, 32, 0);
    let ceiling = room(64, 2, 0);
    let p = fresh(
        &[
            candidate("low", Some(&ceiling)),
            candidate("a", Some(&full)),
            candidate("b", Some(&full)),
        ],
        4,
    );
    assert_eq!(p.spoke.as_deref(), Some("a"));
    assert_eq!(reasons(&p), [pair("low", reason::NOT_ADMITTED)]);
}

#[test]
fn a_spoke_that_says_nothing_of_its_room_may_have_room() {
    let full = room(0, 32, 0);
    let p = fresh(&[candidate("a", Some(&full)), candidate("old", None)], 4);
    assert_eq!(p.spoke.as_deref(), Some("old"));
    let unmeasured = Room::from_proto(&proto::ClusterRoom {
        error: "nodes is forbidden".into(),
        policy: Some(proto::PolicyRoom {
            valid: true,
            namespaces: vec!["default".into()],
            max_brokers: 32,
            max_brokers_per_minicluster: 32,
            brokers: 0,
        }),
        ..proto::ClusterRoom::default()
    })
    .unwrap();
    let p = fresh(&[candidate("blind", Some(&unmeasured))], 4);
    assert_eq!(p.spoke.as_deref(), Some("blind"));
    // One that just connected and has not reported its room yet is waited for.
    let mut fresh_spoke = candidate("fresh", None);
    fresh_spoke.room_pending = true;
    let roomy_later = room(64, 32, 0);
    let p = fresh(&[fresh_spoke, candidate("b", Some(&roomy_later))], 4);
    assert_eq!(
        (p.spoke.as_deref(), p.recheck),
        (None, Some(Duration::from_secs(5)))
    );
    assert_eq!(reasons(&p), [pair("fresh", reason::ROOM_UNKNOWN)]);
    // Room it could not measure is not room: a later candidate known to have some wins.
    let roomy = room(64, 32, 0);
    for blind in [Some(&unmeasured), None] {
        let p = fresh(
            &[candidate("blind", blind), candidate("b", Some(&roomy))],
            4,
        );
        assert_eq!(p.spoke.as_deref(), Some("b"));
        assert_eq!(reasons(&p), [pair("blind", reason::ROOM_UNKNOWN)]);
    }
    assert!(
        fresh(
            &[
                candidate("blind", Some(&unmeasured)),
                candidate("b", Some(&roomy))
            ],
            4
        )
        .skipped[0]
            .message
            .contains("nodes is forbidden")
    );
}

#[test]
fn policy_namespace_ceiling_safety_and_connection_are_each_named() {
    let roomy = room(64, 32, 0);
    let busy = room(64, 32, 30);
    let mut elsewhere = room(64, 32, 0);
    elsewhere.policy.namespaces = vec!["hpc-*".into()];
    let mut per_mc = room(64, 32, 0);
    per_mc.policy.max_brokers_per_minicluster = 5;
    let mut gone = candidate("gone", Some(&roomy));
    gone.connected = false;
    let mut strict = candidate("strict", Some(&roomy));
    strict.unsafe_because = Some("privileged containers".into());
    let mut mine = candidate("mine", Some(&per_mc));
    mine.others = 2;
    let p = fresh(
        &[
            gone,
            strict,
            candidate("elsewhere", Some(&elsewhere)),
            candidate("busy", Some(&busy)),
            mine,
            candidate("ok", Some(&roomy)),
        ],
        4,
    );
    assert_eq!(p.spoke.as_deref(), Some("ok"));
    assert_eq!(
        reasons(&p),
        [
            pair("gone", reason::NOT_CONNECTED),
            pair("strict", reason::UNSAFE),
            pair("elsewhere", reason::NOT_ADMITTED),
            pair("busy", reason::NOT_ADMITTED),
            pair("mine", reason::NOT_ADMITTED),
        ]
    );
    assert!(
        p.skipped[3]
            .message
            .starts_with("its policy admits 2 of 4 brokers"),
        "{}",
        p.skipped[3].message
    );
    assert!(p.skipped[4].message.starts_with("its policy admits 3 of 4"));
    // Nothing may run it: placed nowhere, every reason said.
    let p = fresh(&[candidate("busy", Some(&busy))], 4);
    assert_eq!((p.spoke.as_deref(), reasons(&p).len()), (None, 1));
}

#[test]
fn a_hub_that_just_started_waits_for_a_candidate_not_connected_yet() {
    let roomy = room(64, 32, 0);
    let mut first = candidate("a", Some(&roomy));
    first.connected = false;
    let shape = LazyShape::new(Shape::default);
    let p = place(
        &[first.clone(), candidate("b", Some(&roomy))],
        &ask(&shape, 2),
        None,
        &[],
        at(0),
        Timeouts::default(),
        true,
    );
    assert_eq!(p.spoke, None);
    assert!(p.recheck.is_some());
    let p = place(
        &[first, candidate("b", Some(&roomy))],
        &ask(&shape, 2),
        None,
        &[],
        at(0),
        Timeouts::default(),
        false,
    );
    assert_eq!(p.spoke.as_deref(), Some("b"));
}

#[test]
fn a_burst_whose_brokers_run_is_never_moved() {
    let roomy = room(64, 32, 0);
    let shape = LazyShape::new(Shape::default);
    let candidates = [candidate("a", Some(&roomy)), candidate("b", Some(&roomy))];
    for report in [
        reported(BurstPhase::Running, 4, 4),
        reported(BurstPhase::Applied, 4, 1),
        Reported {
            brokers_draining: 2,
            ..reported(BurstPhase::Applied, 2, 0)
        },
        // Refused as sent, kept as it runs (a lowered ceiling): still where it is.
        Reported {
            reason: "TooManyBrokers".into(),
            ..reported(BurstPhase::Running, 4, 4)
        },
    ] {
        let cur = placed_on("b", 0, Some(report.clone()));
        // Long after the deadline, with the first candidate free.
        let p = place(
            &candidates,
            &ask(&shape, 4),
            Some(&cur),
            &[],
            at(10_000),
            Timeouts::default(),
            false,
        );
        assert_eq!(p.spoke.as_deref(), Some("b"), "{report:?}");
        assert_eq!(p.since, Some(at(0)));
    }
}

#[test]
fn a_refusal_moves_the_burst_on_and_it_keeps_away_until_scaled_to_0() {
    let roomy = room(64, 32, 0);
    let shape = LazyShape::new(Shape::default);
    let candidates = [candidate("a", Some(&roomy)), candidate("b", Some(&roomy))];
    let refused = Reported {
        reason: "ImageNotAllowed".into(),
        message: "image x is not allowed".into(),
        ..reported(BurstPhase::Refused, 0, 0)
    };
    let cur = placed_on("a", 0, Some(refused));
    let p = place(
        &candidates,
        &ask(&shape, 4),
        Some(&cur),
        &[],
        at(5),
        Timeouts::default(),
        false,
    );
    assert_eq!(p.spoke.as_deref(), Some("b"));
    assert_eq!(p.since, Some(at(5)));
    assert_eq!(reasons(&p), [pair("a", reason::REFUSED)]);
    assert_eq!(
        p.skipped[0].message,
        "ImageNotAllowed: image x is not allowed"
    );
    // On b, a is still left out: nothing brings it back while b is fine.
    let on_b = placed_on("b", 5, None);
    let p2 = place(
        &candidates,
        &ask(&shape, 4),
        Some(&on_b),
        &p.skipped,
        at(6),
        Timeouts::default(),
        false,
    );
    assert_eq!(
        (p2.spoke.as_deref(), reasons(&p2)),
        (Some("b"), reasons(&p))
    );
    // Should b fail too, a is not tried again: placed nowhere.
    let b_refuses = placed_on("b", 5, Some(reported(BurstPhase::Refused, 0, 0)));
    let p3 = place(
        &candidates,
        &ask(&shape, 4),
        Some(&b_refuses),
        &p.skipped,
        at(7),
        Timeouts::default(),
        false,
    );
    assert_eq!(p3.spoke, None);
    assert_eq!(
        reasons(&p3),
        [pair("a", reason::REFUSED), pair("b", reason::REFUSED)]
    );
    // Scaled to 0, it forgets; scaled up again, a is first again.
    let idle_on_b = Current {
        was_empty: true,
        ..placed_on("b", 5, Some(reported(BurstPhase::Applied, 0, 0)))
    };
    let p4 = place(
        &candidates,
        &ask(&shape, 0),
        Some(&idle_on_b),
        &p.skipped,
        at(100),
        Timeouts::default(),
        false,
    );
    assert_eq!((p4.spoke.as_deref(), p4.skipped.len()), (Some("b"), 0));
    let p5 = place(
        &candidates,
        &ask(&shape, 2),
        Some(&idle_on_b),
        &p4.skipped,
        at(200),
        Timeouts::default(),
        false,
    );
    assert_eq!((p5.spoke.as_deref(), p5.since), (Some("a"), Some(at(200))));
}

#[test]
fn a_burst_with_no_broker_ready_in_time_moves_on_and_not_before() {
    let roomy = room(64, 32, 0);
    let shape = LazyShape::new(Shape::default);
    let candidates = [candidate("a", Some(&roomy)), candidate("b", Some(&roomy))];
    let timeouts = Timeouts::default();
    let cur = placed_on("a", 0, Some(reported(BurstPhase::Applied, 4, 0)));
    let at_place = |secs| {
        place(
            &candidates,
            &ask(&shape, 4),
            Some(&cur),
            &[],
            at(secs),
            timeouts,
            false,
        )
    };
    let before = at_place(299);
    assert_eq!(before.spoke.as_deref(), Some("a"));
    assert_eq!(before.recheck, Some(Duration::from_secs(1)));
    let after = at_place(300);
    assert_eq!(after.spoke.as_deref(), Some("b"));
    assert_eq!(reasons(&after), [pair("a", reason::NOT_PLACED_IN_TIME)]);
    assert!(
        after.skipped[0].message.contains("0 of 4"),
        "{:?}",
        after.skipped
    );
}

/// A burst that waited for the spoke it left gets the whole placement timeout at its new
/// spoke, counted from when it was sent there.
#[test]
fn the_placement_deadline_counts_from_when_the_burst_was_sent() {
    let roomy = room(64, 32, 0);
    let shape = LazyShape::new(Shape::default);
    let candidates = [candidate("a", Some(&roomy)), candidate("b", Some(&roomy))];
    let mut cur = placed_on("a", 0, Some(reported(BurstPhase::Applied, 4, 0)));
    cur.sent_at = Some(at(250));
    let go = |secs| {
        place(
            &candidates,
            &ask(&shape, 4),
            Some(&cur),
            &[],
            at(secs),
            Timeouts::default(),
            false,
        )
    };
    let p = go(300);
    assert_eq!(
        (p.spoke.as_deref(), p.recheck),
        (Some("a"), Some(Duration::from_secs(250)))
    );
    assert_eq!(go(550).spoke.as_deref(), Some("b"));
}

#[test]
fn a_spoke_that_goes_away_loses_the_burst_only_if_it_never_received_it() {
    let roomy = room(64, 32, 0);
    let shape = LazyShape::new(Shape::default);
    let candidates = [candidate("a", Some(&roomy)), candidate("b", Some(&roomy))];
    let mut cur = placed_on("a", 0, None);
    cur.delivered = false;
    cur.away_since = Some(at(10));
    let go = |cur: &Current, secs| {
        place(
            &candidates,
            &ask(&shape, 4),
            Some(cur),
            &[],
            at(secs),
            Timeouts::default(),
            false,
        )
    };
    let p = go(&cur, 20);
    assert_eq!(
        (p.spoke.as_deref(), p.recheck),
        (Some("a"), Some(Duration::from_secs(20)))
    );
    let p = go(&cur, 40);
    assert_eq!(p.spoke.as_deref(), Some("b"));
    assert_eq!(reasons(&p), [pair("a", reason::WENT_AWAY)]);
    // Received (it may hold its objects): it stays, even past the placement deadline.
    cur.delivered = true;
    let p = go(&cur, 10_000);
    assert_eq!((p.spoke.as_deref(), p.recheck), (Some("a"), None));
}

#[test]
fn candidates_expand_in_order_with_label_matches_in_each_bursts_own_order_and_each_once() {
    let labels: BTreeMap<String, BTreeMap<String, String>> = [
        (
            "gke-west",
            [("region", "west"), ("tier", "spot")].as_slice(),
        ),
        ("gke-east", &[("region", "east"), ("tier", "spot")]),
        ("kind", &[]),
    ]
    .into_iter()
    .map(|(n, l)| {
        (
            n.to_string(),
            l.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    })
    .collect();
    let spot = PlacementCandidate::Labels(BTreeMap::from([("tier".into(), "spot".into())]));
    let west = PlacementCandidate::Labels(BTreeMap::from([("region".into(), "west".into())]));
    let named = |n: &str| PlacementCandidate::Cluster(n.into());
    let matching = |want: &BTreeMap<String, String>| -> Vec<String> {
        labels
            .iter()
            .filter(|(name, l)| PlacementCandidate::Labels(want.clone()).matches(name, l))
            .map(|(name, _)| name.clone())
            .collect()
    };
    // The spokes a label candidate matches come in the burst's own order of them.
    let key = "hpc/mc/burst";
    let mut spots = ["gke-east", "gke-west"];
    spots.sort_by_key(|n| rendezvous(key, n));
    assert_eq!(
        expand(
            &[named("kind"), spot.clone(), named("gke-west")],
            key,
            matching
        ),
        ["kind", spots[0], spots[1]]
    );
    assert_eq!(
        expand(&[west, spot.clone()], key, matching),
        ["gke-west", "gke-east"]
    );
    // A named spoke the hub has not heard of is still a candidate (not connected).
    assert_eq!(expand(&[named("lab")], key, matching), ["lab"]);
    // No spoke comes first by its name: over bursts, each matching spoke leads some.
    let firsts: std::collections::BTreeSet<String> = (0..32)
        .map(|i| {
            expand(
                std::slice::from_ref(&spot),
                &format!("hpc/mc{i}/burst"),
                matching,
            )[0]
            .clone()
        })
        .collect();
    assert_eq!(firsts.len(), 2, "{firsts:?}");
}

/// After a hub restart its spoke reconnects before its first report: a burst placed long
/// ago is kept (not judged on silence) until the spoke says whether a broker runs.
#[test]
fn a_burst_is_never_moved_before_its_spoke_reported_to_this_hub() {
    let roomy = room(64, 32, 0);
    let shape = LazyShape::new(Shape::default);
    let candidates = [candidate("a", Some(&roomy)), candidate("b", Some(&roomy))];
    let go = |cur: &Current| {
        place(
            &candidates,
            &ask(&shape, 4),
            Some(cur),
            &[],
            at(10_000),
            Timeouts::default(),
            false,
        )
    };
    let silent = placed_on("a", 0, None);
    let p = go(&silent);
    assert_eq!(
        (p.spoke.as_deref(), p.since, p.recheck),
        (Some("a"), Some(at(0)), None)
    );
    assert!(p.skipped.is_empty(), "{:?}", p.skipped);
    // Its report says brokers run: it stays.
    let running = placed_on("a", 0, Some(reported(BurstPhase::Running, 4, 4)));
    assert_eq!(go(&running).spoke.as_deref(), Some("a"));
    // Its report says none is ready, long past the deadline: that is known now, it moves.
    let pending = placed_on("a", 0, Some(reported(BurstPhase::Applied, 4, 0)));
    let p = go(&pending);
    assert_eq!(p.spoke.as_deref(), Some("b"));
    assert_eq!(reasons(&p), [pair("a", reason::NOT_PLACED_IN_TIME)]);
}

#[test]
fn a_burst_whose_cluster_is_lost_is_placed_again_and_only_then() {
    use std::time::Duration as D;
    let roomy = room(64, 32, 0);
    let shape = LazyShape::new(Shape::default);
    let candidates = [
        Candidate {
            connected: false,
            ..candidate("a", Some(&roomy))
        },
        candidate("b", Some(&roomy)),
    ];
    let grace = Timeouts::default().lost;
    let away = 1_000;
    let after = |secs: u64| at(away) + grace + D::from_secs(secs);
    // Away since `away`; the lead has seen none of its brokers since `none_since`, last
    // read at `read_at`.
    let running = |none: Option<(SystemTime, SystemTime)>| Current {
        away_since: Some(at(away)),
        lead_sees_none: none.map(|(since, read_at)| LeadSeesNone { since, read_at }),
        ..placed_on("a", 0, Some(reported(BurstPhase::Running, 4, 4)))
    };
    let decide = |cur: &Current, now: SystemTime| {
        place(
            &candidates,
            &ask(&shape, 4),
            Some(cur),
            &[],
            now,
            Timeouts::default(),
            false,
        )
    };
    // Within the grace, even seen down all along: it stays, looked at again at its end.
    let p = decide(&running(Some((at(away), at(away + 10)))), at(away + 10));
    assert_eq!(p.spoke.as_deref(), Some("a"));
    assert_eq!(p.recheck, Some(grace - D::from_secs(10)));
    // Past the grace, but its brokers still serve the lead (or it was not read): it stays.
    let p = decide(&running(None), after(5));
    assert_eq!(
        (p.spoke.as_deref(), p.lost_from.as_deref()),
        (Some("a"), None)
    );
    // Past the spoke's grace, but the lead has seen none only for a while: it stays until
    // that is half the grace (a spoke fences its brokers before then).
    let p = decide(&running(Some((after(0), after(5)))), after(5));
    assert_eq!(p.spoke.as_deref(), Some("a"));
    assert_eq!(p.recheck, Some(grace / 2 - D::from_secs(5)));
    let p = decide(
        &running(Some((after(0), after(0) + grace / 2))),
        after(0) + grace / 2,
    );
    assert_eq!(
        p.lost_from.as_deref(),
        Some("a"),
        "half the grace is enough"
    );
    // Both long enough, but the last read is stale: it stays.
    let p = decide(&running(Some((at(away), after(0)))), after(60));
    assert_eq!(p.spoke.as_deref(), Some("a"));
    // Both long enough, read fresh: placed on the next candidate at once, kept away from
    // the lost one.
    let p = decide(&running(Some((at(away), after(1)))), after(2));
    assert_eq!(
        (p.spoke.as_deref(), p.lost_from.as_deref(), p.since),
        (Some("b"), Some("a"), Some(after(2)))
    );
    assert_eq!(reasons(&p), vec![pair("a", reason::LOST)]);
    assert!(reason::is_remembered(reason::LOST));
    // A connected spoke is never lost, whatever the lead sees.
    let connected = Current {
        away_since: None,
        ..running(Some((at(away), after(1))))
    };
    assert_eq!(decide(&connected, after(2)).spoke.as_deref(), Some("a"));
    // Scaled to 0: nothing to place again.
    let p = place(
        &candidates,
        &ask(&shape, 0),
        Some(&running(Some((at(away), after(1))))),
        &[],
        after(2),
        Timeouts::default(),
        false,
    );
    assert_eq!((p.spoke.as_deref(), p.lost_from), (Some("a"), None));
}
