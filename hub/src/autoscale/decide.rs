//! The autoscaling decision, pure: the instance's queue (from its reporter), the bursts'
//! sizes and bounds, and how long each host has been idle, in; the bursts' new sizes and
//! why, out. No clock and no I/O here: the caller passes the reporter's `now` and keeps
//! the idle times between polls ([`remember_idle`]).
//!
//! Safety rules:
//! - Grow only for a job that has waited `scaleUpAfterSeconds` and needs more nodes than
//!   the instance has or is already getting (sizes asked for count, started or not), and
//!   only if the instance could ever hold it: a job larger than every root and burst host
//!   together grows nothing.
//! - Grow bursts in declared order, each within its `maxSize`, first those whose cluster
//!   has room for them (a burst that names candidates: its best candidate), then, for what
//!   is still missing, in declared order whatever the room; shrink in reverse order, never
//!   below `minSize`.
//! - Shrink only the highest hosts of a burst (the ones a smaller Job removes), only when
//!   each has been idle `scaleDownAfterSeconds`, never while a job is pending that would
//!   need them, and never in the same decision as a growth.
//! - A burst below its `minSize` grows to it before anything else is decided.
//! - At most `maxStep` brokers per burst per decision.

use std::collections::{HashMap, HashSet};

use flux_shared::api::Autoscale;

/// What the lead broker's reporter says about the instance.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct Queue {
    /// Reporter document version (1).
    pub version: u32,
    /// The reporter's clock, Unix seconds.
    pub now: f64,
    /// Every host of the instance, in rank order.
    pub hosts: Vec<HostState>,
    /// Jobs waiting for resources.
    pub pending: Vec<PendingJob>,
}

/// One host of the instance.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct HostState {
    /// Host name (`<job>-<index>`).
    pub host: String,
    /// Its rank.
    pub rank: u32,
    /// Its broker is online.
    pub online: bool,
    /// It is drained (no new job lands there).
    pub drained: bool,
    /// A job runs there.
    pub allocated: bool,
}

/// A job waiting for resources.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
pub struct PendingJob {
    /// Flux job id.
    pub id: u64,
    /// Nodes it asks for.
    pub nodes: i32,
    /// When it was submitted, Unix seconds (the reporter's clock).
    pub submitted: f64,
}

/// A burst as it is now.
#[derive(Clone, Debug, PartialEq)]
pub struct Burst {
    /// Its name (host prefix).
    pub name: String,
    /// Brokers asked for now (`size`).
    pub size: i32,
    /// `minSize`.
    pub min: i32,
    /// `maxSize`.
    pub max: i32,
    /// How many more brokers its cluster can place now (for a burst that names
    /// candidates and runs nowhere yet: the best candidate's); `None` when not known.
    pub room: Option<i32>,
}

/// One burst's new size.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The burst.
    pub burst: String,
    /// Its size now.
    pub from: i32,
    /// Its new size.
    pub to: i32,
    /// Why, for the Event and the log.
    pub reason: String,
    /// For a growth: when the job it is for was submitted (reporter clock).
    pub for_job_submitted: Option<f64>,
}

/// What a decision found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// The size changes to make (none: nothing to do).
    pub changes: Vec<Change>,
    /// Why a waiting job grows nothing, when it cannot ever run.
    pub note: Option<String>,
}

impl Decision {
    /// Whether a change grows a burst.
    pub fn grows(&self) -> bool {
        self.changes.iter().any(|c| c.to > c.from)
    }
}

/// Idle-since times of the hosts for the next decision: a host with a job is not idle; an
/// idle one keeps the time it was first seen idle (a host whose broker never came counts
/// as idle too: capacity that does not arrive goes away like capacity unused).
pub fn remember_idle(previous: &HashMap<String, f64>, queue: &Queue) -> HashMap<String, f64> {
    queue
        .hosts
        .iter()
        .filter(|h| !h.allocated)
        .map(|h| {
            let since = previous.get(&h.host).copied().unwrap_or(queue.now);
            (h.host.clone(), since)
        })
        .collect()
}

/// The new sizes of `bursts` for root `root_name` with `root_size` brokers, given the
/// `queue` and the hosts' `idle_since` times (from [`remember_idle`]).
pub fn decide(
    settings: &Autoscale,
    root_name: &str,
    root_size: i32,
    bursts: &[Burst],
    queue: &Queue,
    idle_since: &HashMap<String, f64>,
) -> Decision {
    // A set, once: the queue comes from the tenant's lead pod (up to 4 MiB of hosts) and
    // every declared host is looked up, so a scan per host would cost hosts x maxSize.
    let drained_hosts: HashSet<&str> = queue
        .hosts
        .iter()
        .filter(|h| h.drained)
        .map(|h| h.host.as_str())
        .collect();
    let drained = |host: &str| drained_hosts.contains(host);
    let hosts_of = |prefix: &str, count: i32| -> Vec<String> {
        (0..count.max(0)).map(|i| format!("{prefix}-{i}")).collect()
    };
    let usable = |prefix: &str, count: i32| -> i32 {
        let n = hosts_of(prefix, count)
            .iter()
            .filter(|h| !drained(h))
            .count();
        i32::try_from(n).unwrap_or(i32::MAX)
    };
    let root_usable = usable(root_name, root_size);
    let have: i32 = root_usable + bursts.iter().map(|b| usable(&b.name, b.size)).sum::<i32>();
    let most: i32 = root_usable + bursts.iter().map(|b| usable(&b.name, b.max)).sum::<i32>();
    let waited = settings.scale_up_after().as_secs_f64();
    let largest_pending = queue.pending.iter().map(|j| j.nodes).max().unwrap_or(0);
    let waiting = queue
        .pending
        .iter()
        .filter(|j| queue.now - j.submitted >= waited && j.nodes > have)
        .max_by_key(|j| j.nodes);

    let mut decision = Decision::default();
    // A burst below its floor (a new MiniCluster, or a hand-set size) grows to it first.
    for b in bursts.iter().filter(|b| b.size < b.min) {
        decision.changes.push(Change {
            burst: b.name.clone(),
            from: b.size,
            to: b.min.min(b.size + settings.max_step()),
            reason: format!("below its minSize {}", b.min),
            for_job_submitted: None,
        });
    }
    if !decision.changes.is_empty() {
        return decision;
    }
    if let Some(job) = waiting {
        if job.nodes > most {
            decision.note = Some(format!(
                "job {} needs {} nodes; this instance can have at most {most}, so no burst grows for it",
                job.id, job.nodes
            ));
        } else {
            let mut missing = job.nodes - have;
            // First where there is room, in declared order; what is still missing then
            // goes where room is not known or short (its pods wait for nodes there).
            let mut added: HashMap<&str, i32> = HashMap::new();
            for with_room in [true, false] {
                for b in bursts {
                    if missing <= 0 {
                        break;
                    }
                    let already = added.get(b.name.as_str()).copied().unwrap_or(0);
                    // Not known: it may have room (as placement has it).
                    let room = if with_room {
                        b.room.unwrap_or(i32::MAX).max(0)
                    } else {
                        i32::MAX
                    };
                    let add = missing
                        .min(b.max - b.size - already)
                        .min(settings.max_step() - already)
                        .min(room - already);
                    if add > 0 {
                        *added.entry(b.name.as_str()).or_default() += add;
                        missing -= add;
                    }
                }
            }
            for b in bursts {
                let Some(add) = added.get(b.name.as_str()).copied() else {
                    continue;
                };
                {
                    decision.changes.push(Change {
                        burst: b.name.clone(),
                        from: b.size,
                        to: b.size + add,
                        reason: format!(
                            "job {} has waited {:.0}s for {} nodes; the instance has {have}",
                            job.id,
                            queue.now - job.submitted,
                            job.nodes
                        ),
                        for_job_submitted: Some(job.submitted),
                    });
                }
            }
        }
        return decision;
    }

    let idle_for = settings.scale_down_after().as_secs_f64();
    let mut spare = have - largest_pending;
    for b in bursts.iter().rev() {
        if spare <= 0 {
            break;
        }
        // The highest hosts first: those are the ones a smaller Job removes.
        let idle: Vec<String> = hosts_of(&b.name, b.size)
            .into_iter()
            .rev()
            .take_while(|h| idle_since.get(h).is_some_and(|t| queue.now - t >= idle_for))
            .collect();
        let remove = i32::try_from(idle.len())
            .unwrap_or(i32::MAX)
            .min(b.size - b.min)
            .min(settings.max_step())
            .min(spare);
        if remove > 0 {
            let gone: Vec<&str> = idle
                .iter()
                .take(remove as usize)
                .map(String::as_str)
                .collect();
            decision.changes.push(Change {
                burst: b.name.clone(),
                from: b.size,
                to: b.size - remove,
                reason: format!("{} idle for {:.0}s or more", gone.join(", "), idle_for),
                for_job_submitted: None,
            });
            spare -= remove;
        }
    }
    decision
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Autoscale {
        Autoscale {
            scale_up_after_seconds: Some(30),
            scale_down_after_seconds: Some(300),
            max_step: Some(4),
            interval_seconds: None,
        }
    }

    const NOW: f64 = 10_000.0;

    fn host(name: &str, allocated: bool) -> HostState {
        HostState {
            host: name.into(),
            rank: 0,
            online: true,
            drained: false,
            allocated,
        }
    }

    /// Root `r` of 2 (both busy), bursts `a` (max 4) and `b` (max 4) at the given sizes.
    fn case(a: i32, b: i32, pending: &[(i32, f64)]) -> (Vec<Burst>, Queue) {
        let bursts = vec![
            Burst {
                name: "a".into(),
                size: a,
                min: 0,
                max: 4,
                room: None,
            },
            Burst {
                name: "b".into(),
                size: b,
                min: 1,
                max: 4,
                room: None,
            },
        ];
        let mut hosts = vec![host("r-0", true), host("r-1", true)];
        for (prefix, n) in [("a", a), ("b", b)] {
            hosts.extend((0..n).map(|i| host(&format!("{prefix}-{i}"), false)));
        }
        let queue = Queue {
            version: 1,
            now: NOW,
            hosts,
            pending: pending
                .iter()
                .enumerate()
                .map(|(i, (nodes, age))| PendingJob {
                    id: i as u64 + 1,
                    nodes: *nodes,
                    submitted: NOW - age,
                })
                .collect(),
        };
        (bursts, queue)
    }

    fn sizes(d: &Decision) -> Vec<(&str, i32, i32)> {
        d.changes
            .iter()
            .map(|c| (c.burst.as_str(), c.from, c.to))
            .collect()
    }

    #[test]
    fn table() {
        let all_idle_long = |q: &Queue| -> HashMap<String, f64> {
            q.hosts
                .iter()
                .filter(|h| !h.allocated)
                .map(|h| (h.host.clone(), NOW - 1_000.0))
                .collect()
        };
        // (what, a, b, pending (nodes, waited s), idle long?, expected changes)
        type Row = (
            &'static str,
            i32,
            i32,
            Vec<(i32, f64)>,
            bool,
            Vec<(&'static str, i32, i32)>,
        );
        let cases: Vec<Row> = vec![
            (
                "nothing pending, nothing idle: no change",
                0,
                1,
                vec![],
                false,
                vec![],
            ),
            (
                "a job that fits waits, nothing grows",
                0,
                1,
                vec![(3, 100.0)],
                false,
                vec![],
            ),
            (
                "not waited long enough",
                0,
                1,
                vec![(6, 10.0)],
                false,
                vec![],
            ),
            (
                "grow the first burst by the deficit",
                0,
                1,
                vec![(6, 40.0)],
                false,
                vec![("a", 0, 3)],
            ),
            (
                "first burst full: the next one grows",
                4,
                1,
                vec![(9, 40.0)],
                false,
                vec![("b", 1, 3)],
            ),
            (
                "a deficit larger than the first burst spills over, each within maxStep",
                0,
                1,
                vec![(10, 40.0)],
                false,
                vec![("a", 0, 4), ("b", 1, 4)],
            ),
            (
                "the deficit spills over to the next burst",
                0,
                1,
                vec![(8, 40.0)],
                false,
                vec![("a", 0, 4), ("b", 1, 2)],
            ),
            (
                "a job larger than the instance can be grows nothing",
                0,
                1,
                vec![(11, 40.0)],
                false,
                vec![],
            ),
            (
                "idle highest hosts shrink, last burst first, never below minSize",
                2,
                3,
                vec![],
                true,
                vec![("b", 3, 1), ("a", 2, 0)],
            ),
            ("idle, but not for long enough", 2, 3, vec![], false, vec![]),
            (
                "a pending job that needs the idle hosts keeps them",
                2,
                3,
                vec![(7, 5.0)],
                true,
                vec![],
            ),
            (
                "a small pending job keeps only what it needs",
                2,
                3,
                vec![(5, 5.0)],
                true,
                vec![("b", 3, 1)],
            ),
        ];
        for (what, a, b, pending, idle, want) in cases {
            let (bursts, queue) = case(a, b, &pending);
            let idle_since = if idle {
                all_idle_long(&queue)
            } else {
                remember_idle(&HashMap::new(), &queue)
            };
            let d = decide(&settings(), "r", 2, &bursts, &queue, &idle_since);
            assert_eq!(sizes(&d), want, "{what}: {d:?}");
        }
    }

    #[test]
    fn a_burst_below_its_floor_grows_to_it_first() {
        let (mut bursts, queue) = case(0, 0, &[(3, 100.0)]);
        bursts[1].min = 2;
        let d = decide(&settings(), "r", 2, &bursts, &queue, &HashMap::new());
        assert_eq!(sizes(&d), [("b", 0, 2)]);
        assert_eq!(d.changes[0].reason, "below its minSize 2");
    }

    #[test]
    fn max_step_bounds_each_burst_per_decision() {
        let step2 = Autoscale {
            max_step: Some(2),
            ..settings()
        };
        let (bursts, queue) = case(0, 1, &[(8, 40.0)]);
        let d = decide(&step2, "r", 2, &bursts, &queue, &HashMap::new());
        assert_eq!(
            sizes(&d),
            [("a", 0, 2), ("b", 1, 3)],
            "the rest comes next time"
        );
    }

    #[test]
    fn only_the_highest_idle_hosts_go() {
        let (bursts, mut queue) = case(0, 4, &[]);
        // b-3 runs a job: b-2 and b-1 are idle but b cannot drop them without b-3.
        for h in &mut queue.hosts {
            if h.host == "b-3" {
                h.allocated = true;
            }
        }
        let idle: HashMap<String, f64> = ["b-0", "b-1", "b-2"]
            .iter()
            .map(|h| (h.to_string(), NOW - 1_000.0))
            .collect();
        let d = decide(&settings(), "r", 2, &bursts, &queue, &idle);
        assert!(d.changes.is_empty(), "{d:?}");
    }

    /// At the limits (16,384 hosts reported by the tenant's lead pod, as many declared):
    /// drained hosts count as no capacity, looked up once each.
    #[test]
    fn a_report_at_the_host_limit_is_decided_from_a_set_of_drained_hosts() {
        let max = flux_shared::api::MAX_BROKERS - 1;
        let bursts = vec![Burst {
            name: "a".into(),
            size: max,
            min: 0,
            max,
            room: None,
        }];
        let mut hosts = vec![host("r-0", true)];
        hosts.extend((0..max).map(|i| HostState {
            drained: i % 100 == 0,
            ..host(&format!("a-{i}"), true)
        }));
        let drained = hosts.iter().filter(|h| h.drained).count();
        let queue = Queue {
            version: 1,
            now: NOW,
            hosts,
            pending: vec![PendingJob {
                id: 1,
                nodes: max + 1,
                submitted: NOW - 60.0,
            }],
        };
        let d = decide(&settings(), "r", 1, &bursts, &queue, &HashMap::new());
        let usable = max + 1 - i32::try_from(drained).unwrap();
        assert_eq!(
            d.note.as_deref(),
            Some(
                format!(
                    "job 1 needs {} nodes; this instance can have at most {usable}, so no burst grows for it",
                    max + 1
                )
                .as_str()
            )
        );
    }

    #[test]
    fn a_job_that_can_never_run_says_so() {
        let (bursts, queue) = case(0, 1, &[(11, 40.0)]);
        let d = decide(&settings(), "r", 2, &bursts, &queue, &HashMap::new());
        assert_eq!(
            d.note.as_deref(),
            Some(
                "job 1 needs 11 nodes; this instance can have at most 10, so no burst grows for it"
            )
        );
    }

    #[test]
    fn drained_hosts_do_not_count_as_capacity() {
        let (bursts, mut queue) = case(2, 1, &[(5, 40.0)]);
        for h in &mut queue.hosts {
            if h.host == "a-1" {
                h.drained = true;
            }
        }
        // Usable: r-0, r-1, a-0, b-0 = 4 < 5: grow a by one (a-2).
        let d = decide(&settings(), "r", 2, &bursts, &queue, &HashMap::new());
        assert_eq!(sizes(&d), [("a", 2, 3)]);
    }

    #[test]
    fn idle_times_are_kept_across_polls_and_reset_by_a_job() {
        let (_, mut queue) = case(1, 1, &[]);
        let first = remember_idle(&HashMap::new(), &queue);
        assert_eq!(first.get("a-0"), Some(&NOW));
        queue.now += 60.0;
        let second = remember_idle(&first, &queue);
        assert_eq!(
            second.get("a-0"),
            Some(&NOW),
            "still idle since the first poll"
        );
        for h in &mut queue.hosts {
            if h.host == "a-0" {
                h.allocated = true;
            }
        }
        assert_eq!(remember_idle(&second, &queue).get("a-0"), None);
    }

    /// With room known: the burst whose cluster has room grows first, whatever the declared
    /// order; what none has room for goes, in declared order, where the pods may wait; and
    /// a job already being grown for grows nothing more (sizes asked for count).
    #[test]
    fn growth_goes_where_there_is_room_first_and_once() {
        let (mut bursts, queue) = case(0, 1, &[(7, 40.0)]);
        // Root 2 + b 1 = 3; 4 more needed. a's cluster is full, b's has room for 2.
        bursts[0].room = Some(0);
        bursts[1].room = Some(2);
        let d = decide(&settings(), "r", 2, &bursts, &queue, &HashMap::new());
        assert_eq!(sizes(&d), [("a", 0, 2), ("b", 1, 3)]);
        // Room for more in b: b grows to its maxSize first; a, first in order but full,
        // takes only what b cannot.
        bursts[1].room = Some(8);
        let d = decide(&settings(), "r", 2, &bursts, &queue, &HashMap::new());
        assert_eq!(sizes(&d), [("a", 0, 1), ("b", 1, 4)]);
        // Room not known anywhere: declared order, as before.
        bursts[0].room = None;
        bursts[1].room = None;
        let d = decide(&settings(), "r", 2, &bursts, &queue, &HashMap::new());
        assert_eq!(sizes(&d), [("a", 0, 4)]);
        // Once asked for, the same waiting job grows nothing more, wherever the room.
        let (mut grown, queue) = case(4, 1, &[(7, 40.0)]);
        grown[1].room = Some(8);
        let d = decide(&settings(), "r", 2, &grown, &queue, &HashMap::new());
        assert!(d.changes.is_empty(), "{d:?}");
    }
}
