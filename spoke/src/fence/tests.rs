//! The fence decision (pure), and [`Fencing`] taking it before a time moves forward.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::*;

const N: Duration = Duration::from_secs(120);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

#[test]
fn a_burst_is_fenced_only_once_both_silences_reach_n() {
    let t0 = Instant::now();
    let reached = BTreeMap::from([
        ("never-since-t0".to_string(), t0),
        ("reached-later".to_string(), t0 + secs(60)),
    ]);
    // The hub silent for N, the lead for N: fenced; the lead reached 60 s ago: not.
    assert_eq!(to_fence(t0, &reached, t0 + N, N), set(&["never-since-t0"]));
    assert_eq!(
        to_fence(t0, &reached, t0 + N + secs(60), N),
        set(&["never-since-t0", "reached-later"])
    );
    // Either silence short of N: nothing.
    assert!(to_fence(t0, &reached, t0 + N - secs(1), N).is_empty());
    assert!(to_fence(t0 + secs(1), &reached, t0 + N, N).is_empty());
    // A time later than now (a clock read out of order) is a silence of zero.
    assert!(to_fence(t0 + N + N, &reached, t0 + N, N).is_empty());
    // Nothing watched: nothing fenced, and nothing to decide later.
    assert!(to_fence(t0, &BTreeMap::new(), t0 + N, N).is_empty());
    assert_eq!(next_decision(t0, &BTreeMap::new(), N), None);
    // Decided next when the later of the two silences of the earliest burst reaches N.
    assert_eq!(next_decision(t0, &reached, N), Some(t0 + N));
    assert_eq!(
        next_decision(t0 + secs(90), &reached, N),
        Some(t0 + secs(90) + N)
    );
}

/// A tracker whose hub was heard at `t0`, watching direct burst `k` since `t0`.
fn watching(t0: Instant) -> Fencing {
    let f = Fencing::new(N, t0);
    f.watch(
        &set(&["k", "other"]),
        BTreeMap::from([(
            "k".to_string(),
            (
                "192.0.2.1:30050".to_string(),
                ("hpc".to_string(), "x".to_string()),
            ),
        )]),
        t0,
    );
    f
}

fn due_keys(f: &Fencing, now: Instant) -> Vec<String> {
    f.due(now).into_iter().map(|(k, _)| k).collect()
}

#[test]
fn heard_and_reached_in_time_nothing_is_fenced() {
    let t0 = Instant::now();
    let f = watching(t0);
    f.probed("k", true, t0 + secs(100));
    assert!(
        due_keys(&f, t0 + N + secs(10)).is_empty(),
        "the lead reached"
    );
    f.probed("k", false, t0 + secs(200));
    f.heard_hub(t0 + secs(200));
    assert!(due_keys(&f, t0 + secs(300)).is_empty(), "the hub heard");
    assert_eq!(f.next_decision(), Some(t0 + secs(200) + N));
    assert_eq!(f.hub_silent(t0 + secs(230)), secs(30));
    assert_eq!(due_keys(&f, t0 + secs(200) + N), ["k"]);
}

#[test]
fn after_a_freeze_the_first_probe_that_connects_comes_too_late() {
    let t0 = Instant::now();
    let f = watching(t0);
    // The process resumes after a gap longer than N: its first probe connects.
    let resumed = t0 + N + secs(30);
    f.probed("k", true, resumed);
    let due = f.due(resumed + secs(1));
    assert_eq!(due.len(), 1, "decided on the times before the probe");
    let (key, due) = &due[0];
    assert_eq!(key, "k");
    assert_eq!(
        (due.hub_silent, due.lead_silent),
        (N + secs(30), N + secs(30))
    );
    assert_eq!(due.lead.job, ("hpc".to_string(), "x".to_string()));
    assert!(f.watched().is_empty(), "no longer watched");
    // Nor does the hub speaking after that undo it.
    f.heard_hub(resumed + secs(2));
    assert_eq!(due_keys(&f, resumed + secs(3)), ["k"]);
}

#[test]
fn after_a_freeze_the_first_word_of_the_hub_comes_too_late() {
    let t0 = Instant::now();
    let f = watching(t0);
    let resumed = t0 + N + secs(1);
    f.heard_hub(resumed);
    f.probed("k", true, resumed);
    assert_eq!(due_keys(&f, resumed), ["k"]);
}

#[test]
fn a_fenced_burst_is_reported_and_watched_again_only_once_created_anew() {
    let t0 = Instant::now();
    let f = watching(t0);
    let carried = f.carried();
    assert_eq!(due_keys(&f, t0 + N), ["k"]);
    assert_eq!(f.condition("k"), None, "not carried out yet");
    f.carried_out("k", 1_000);
    assert!(carried.has_changed().unwrap_or(false), "the agent is told");
    let c = f.condition("k").expect("a condition");
    assert_eq!(
        (c.r#type.as_str(), c.status.as_str(), c.reason.as_str()),
        (FENCED, "True", HUB_AND_LEAD_UNREACHABLE)
    );
    assert_eq!(c.last_transition_unix_millis, 1_000);
    assert!(c.message.contains("192.0.2.1:30050"), "{}", c.message);
    assert!(
        c.message.contains("--fence-after-seconds 120"),
        "{}",
        c.message
    );
    assert!(due_keys(&f, t0 + N + N).is_empty(), "fenced once");
    assert_eq!(f.awaiting_creation(), ["k"]);

    // A snapshot still lists it, its Job not created yet: not watched.
    let target = || {
        BTreeMap::from([(
            "k".to_string(),
            (
                "192.0.2.1:30050".to_string(),
                ("hpc".to_string(), "x".to_string()),
            ),
        )])
    };
    f.watch(&set(&["k"]), target(), t0 + N + N);
    assert!(f.watched().is_empty());
    // Created anew: watched from then on, and the condition says so.
    f.created_anew("k", 2_000);
    assert!(f.awaiting_creation().is_empty());
    let c = f.condition("k").expect("a condition");
    assert_eq!(
        (
            c.status.as_str(),
            c.reason.as_str(),
            c.last_transition_unix_millis
        ),
        ("False", CREATED_ANEW, 2_000)
    );
    let later = t0 + secs(1000);
    f.heard_hub(later);
    f.watch(&set(&["k"]), target(), later);
    assert_eq!(f.watched(), ["k"]);
    assert!(
        due_keys(&f, later + N - secs(1)).is_empty(),
        "counted from then"
    );

    // No longer listed: forgotten.
    f.watch(&BTreeSet::new(), BTreeMap::new(), later);
    assert_eq!(f.condition("k"), None);
    assert!(f.watched().is_empty());
}

#[test]
fn a_burst_not_watched_is_never_fenced() {
    let t0 = Instant::now();
    let f = watching(t0);
    // Listed, but not direct (relayed) or not running: not watched.
    f.watch(&set(&["k"]), BTreeMap::new(), t0);
    f.probed("k", false, t0 + N);
    assert!(due_keys(&f, t0 + N + N).is_empty());
    assert_eq!(f.next_decision(), None);
}
