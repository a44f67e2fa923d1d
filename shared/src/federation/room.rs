//! Room: how many brokers of a burst a spoke's cluster can place now, and how many its
//! owner's policy still admits, for the hub's placement of bursts that name candidates.
//!
//! The spoke measures ([`measure`]) from its nodes' allocatable resources less the
//! requests of the pods bound to them, as the scheduler counts them ([`Shape::of_pod`]),
//! and reports it (`ReportRequest.room`). The hub checks what it receives
//! ([`Room::from_proto`]: it crosses a trust line) and asks it how many pods of a burst's
//! shape fit ([`Room::fits`]). Node affinity, topology spread and the like are not
//! counted: a burst they keep from being placed is moved on after the hub's deadline.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Node, PodSpec};

use super::proto;
use crate::quantity::thousandths;

/// The most node groups a report holds ([`measure`] keeps those with the most room).
pub const MAX_GROUPS: usize = 256;
/// The most resources one group names.
pub const MAX_RESOURCES: usize = 16;
/// The most namespace rules a policy's room names.
pub const MAX_NAMESPACES: usize = 256;
/// The resource name of a node's pod count.
pub const PODS: &str = "pods";

/// What one pod asks of its node, in thousandths of each resource's unit (with `pods`:
/// 1,000, one pod).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape(BTreeMap<String, i64>);

impl Default for Shape {
    fn default() -> Shape {
        Shape(BTreeMap::from([(PODS.to_string(), 1000)]))
    }
}

impl Shape {
    /// What the scheduler counts for a pod: the sum of its containers' and restartable
    /// init containers' (sidecars') requests, or the largest one-off init container if
    /// that is more, plus the pod's overhead. A container's limit stands for a request it
    /// does not set, as Kubernetes defaults it. An amount that does not parse counts 0;
    /// sums saturate at `i64::MAX` (a spec's amounts are the author's: a sum that wrapped
    /// would ask for less than nothing, and fit anywhere).
    pub fn of_pod(spec: &PodSpec) -> Shape {
        let mut sum: BTreeMap<String, i64> = BTreeMap::new();
        let sidecars = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        for c in spec.containers.iter().chain(sidecars) {
            for (k, v) in requests(c) {
                let e = sum.entry(k).or_default();
                *e = e.saturating_add(v);
            }
        }
        for c in spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() != Some("Always"))
        {
            for (k, v) in requests(c) {
                let e = sum.entry(k).or_default();
                *e = (*e).max(v);
            }
        }
        for (k, q) in spec.overhead.iter().flatten() {
            let e = sum.entry(k.clone()).or_default();
            *e = e.saturating_add(amount(&q.0));
        }
        sum.insert(PODS.to_string(), 1000);
        Shape(sum)
    }

    /// The amounts, in thousandths.
    pub fn amounts(&self) -> &BTreeMap<String, i64> {
        &self.0
    }
}

/// A container's requests, a limit standing for a request it does not set.
fn requests(c: &Container) -> BTreeMap<String, i64> {
    let Some(r) = c.resources.as_ref() else {
        return BTreeMap::new();
    };
    let mut out: BTreeMap<String, i64> = r
        .limits
        .iter()
        .flatten()
        .map(|(k, q)| (k.clone(), amount(&q.0)))
        .collect();
    for (k, q) in r.requests.iter().flatten() {
        out.insert(k.clone(), amount(&q.0));
    }
    out
}

/// A quantity in thousandths, 0 when it does not parse, saturated at `i64::MAX`.
fn amount(q: &str) -> i64 {
    thousandths(q).map_or(0, |t| i64::try_from(t).unwrap_or(i64::MAX))
}

/// A node as room is measured: whether a burst's pod may be placed there, and what it
/// has in all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFacts {
    /// Ready, not cordoned, and without a NoSchedule or NoExecute taint.
    pub usable: bool,
    /// `status.allocatable`, in thousandths.
    pub allocatable: BTreeMap<String, i64>,
}

impl NodeFacts {
    /// The facts of `node`.
    pub fn of(node: &Node) -> NodeFacts {
        let spec = node.spec.as_ref();
        let status = node.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        let tainted = spec.and_then(|s| s.taints.as_ref()).is_some_and(|ts| {
            ts.iter()
                .any(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        });
        NodeFacts {
            usable: ready && !cordoned && !tainted,
            allocatable: status
                .and_then(|s| s.allocatable.as_ref())
                .into_iter()
                .flatten()
                .take(MAX_RESOURCES)
                .map(|(k, q)| (k.clone(), amount(&q.0)))
                .collect(),
        }
    }
}

/// The room of `nodes` (by name) given the pods bound to them (`used`: node name and
/// shape), grouped by what each usable node has free, the groups with the most room
/// first ([`MAX_GROUPS`] at most): the groups and how many nodes were left out.
pub fn measure<'a>(
    nodes: &BTreeMap<String, NodeFacts>,
    used: impl IntoIterator<Item = (&'a str, &'a Shape)>,
) -> (Vec<proto::NodeRoom>, u32) {
    let mut taken: BTreeMap<&str, BTreeMap<&str, i64>> = BTreeMap::new();
    for (node, shape) in used {
        let Some((name, _)) = nodes.get_key_value(node) else {
            continue;
        };
        let t = taken.entry(name.as_str()).or_default();
        for (k, v) in &shape.0 {
            let e = t.entry(k.as_str()).or_default();
            *e = e.saturating_add(*v);
        }
    }
    let mut groups: BTreeMap<BTreeMap<String, i64>, u32> = BTreeMap::new();
    for (name, facts) in nodes.iter().filter(|(_, f)| f.usable) {
        let t = taken.get(name.as_str());
        let free: BTreeMap<String, i64> = facts
            .allocatable
            .iter()
            .map(|(k, v)| {
                let used = t.and_then(|t| t.get(k.as_str())).copied().unwrap_or(0);
                (k.clone(), v.saturating_sub(used).max(0))
            })
            .collect();
        *groups.entry(free).or_default() += 1;
    }
    let mut groups: Vec<(BTreeMap<String, i64>, u32)> = groups.into_iter().collect();
    // Most pods free first, then most CPU: what is left out matters least.
    groups.sort_by_key(|(free, _)| {
        std::cmp::Reverse((
            free.get(PODS).copied().unwrap_or(0),
            free.get("cpu").copied().unwrap_or(0),
        ))
    });
    let left_out: u32 = groups.iter().skip(MAX_GROUPS).map(|(_, n)| *n).sum();
    let kept = groups
        .into_iter()
        .take(MAX_GROUPS)
        .map(|(free_milli, count)| proto::NodeRoom {
            count,
            free_milli: free_milli.into_iter().collect(),
        })
        .collect();
    (kept, left_out)
}

/// `text` cut to at most `max` bytes at a character boundary.
fn cut(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

/// A spoke's room as the hub keeps it, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Room {
    /// Node groups: how many nodes, and what each has free.
    nodes: Vec<(u32, BTreeMap<String, i64>)>,
    /// Whether the spoke measured the nodes (`false`: it could not, the room is unknown).
    measured: bool,
    /// Why it could not, when it could not.
    pub error: Option<String>,
    /// What its policy admits.
    pub policy: PolicyRoom,
    /// When the spoke measured it, Unix milliseconds.
    pub observed_unix_millis: i64,
}

/// What a spoke's policy admits, as the hub keeps it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyRoom {
    /// A valid policy (without one the spoke runs no burst).
    pub valid: bool,
    /// Its namespace rules (a name, or a prefix and `*`).
    pub namespaces: Vec<String>,
    /// `maxBrokers`.
    pub max_brokers: i32,
    /// `maxBrokersPerMiniCluster`.
    pub max_brokers_per_minicluster: i32,
    /// Brokers admitted now for every burst there.
    pub brokers: i32,
}

impl PolicyRoom {
    /// Whether a burst in `namespace` may run there at all.
    pub fn admits_namespace(&self, namespace: &str) -> bool {
        self.valid
            && self
                .namespaces
                .iter()
                .any(|rule| match rule.strip_suffix('*') {
                    Some(prefix) => namespace.starts_with(prefix),
                    None => rule == namespace,
                })
    }

    /// The most brokers a burst may have there, given that `mine` brokers of its
    /// MiniCluster's other bursts run there and `own` of its own (counted in `brokers`).
    pub fn admits(&self, mine: i32, own: i32) -> i32 {
        let total = self
            .max_brokers
            .saturating_sub(self.brokers.saturating_sub(own));
        let per_mc = self.max_brokers_per_minicluster.saturating_sub(mine);
        total.min(per_mc).max(0)
    }
}

impl Room {
    /// Checks what a spoke sent: at most [`MAX_GROUPS`] groups of at most
    /// [`MAX_RESOURCES`] resources with names of at most 253 characters and amounts not
    /// negative, at most [`MAX_NAMESPACES`] namespace rules. The error names the entry.
    pub fn from_proto(room: &proto::ClusterRoom) -> Result<Room, String> {
        if room.nodes.len() > MAX_GROUPS {
            return Err(format!(
                "room.nodes: {} groups, at most {MAX_GROUPS}",
                room.nodes.len()
            ));
        }
        let mut nodes = Vec::with_capacity(room.nodes.len());
        for (i, g) in room.nodes.iter().enumerate() {
            if g.free_milli.len() > MAX_RESOURCES {
                return Err(format!(
                    "room.nodes[{i}]: {} resources, at most {MAX_RESOURCES}",
                    g.free_milli.len()
                ));
            }
            if let Some((k, v)) = g
                .free_milli
                .iter()
                .find(|(k, v)| k.is_empty() || k.len() > 253 || **v < 0)
            {
                return Err(format!(
                    "room.nodes[{i}].free_milli[{k:?}]: {v} is not a room"
                ));
            }
            nodes.push((
                g.count,
                g.free_milli.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            ));
        }
        let p = room.policy.clone().unwrap_or_default();
        if p.namespaces.len() > MAX_NAMESPACES || p.namespaces.iter().any(|n| n.len() > 64) {
            return Err(format!(
                "room.policy.namespaces: at most {MAX_NAMESPACES} rules of at most 64 characters"
            ));
        }
        let mut error = room.error.clone();
        cut(&mut error, 256);
        Ok(Room {
            nodes,
            measured: room.error.is_empty(),
            error: (!error.is_empty()).then_some(error),
            policy: PolicyRoom {
                valid: p.valid,
                namespaces: p.namespaces,
                max_brokers: p.max_brokers.max(0),
                max_brokers_per_minicluster: p.max_brokers_per_minicluster.max(0),
                brokers: p.brokers.max(0),
            },
            observed_unix_millis: room.observed_unix_millis,
        })
    }

    /// Whether `other` says the same of the room, whenever it was measured.
    pub fn same(&self, other: &Room) -> bool {
        self.nodes == other.nodes && self.measured == other.measured && self.policy == other.policy
    }

    /// How many pods of `shape` fit on the nodes, `None` when the spoke could not measure
    /// them. A resource the shape asks for and a node does not have fits none there.
    pub fn fits(&self, shape: &Shape) -> Option<i64> {
        if !self.measured {
            return None;
        }
        let mut total: i64 = 0;
        for (count, free) in &self.nodes {
            let per_node = shape
                .0
                .iter()
                .filter(|(_, want)| **want > 0)
                .map(|(k, want)| free.get(k).copied().unwrap_or(0) / want)
                .min()
                .unwrap_or(0);
            total = total.saturating_add(per_node.saturating_mul(i64::from(*count)));
        }
        Some(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        NodeCondition, NodeSpec, NodeStatus, ResourceRequirements, Taint,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn q(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect()
    }

    fn container(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        Container {
            resources: Some(ResourceRequirements {
                requests: Some(q(requests)),
                limits: Some(q(limits)),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        }
    }

    fn shape(pairs: &[(&str, i64)]) -> Shape {
        let mut s = Shape::default();
        s.0.extend(pairs.iter().map(|(k, v)| (k.to_string(), *v)));
        s
    }

    fn node(ready: bool, taint: Option<&str>, allocatable: &[(&str, &str)]) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: taint.map(|effect| {
                    vec![Taint {
                        effect: effect.into(),
                        key: "k".into(),
                        ..Taint::default()
                    }]
                }),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                allocatable: Some(q(allocatable)),
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn a_pods_shape_is_what_the_scheduler_counts() {
        let spec = PodSpec {
            containers: vec![
                container(&[("cpu", "500m")], &[("cpu", "1"), ("memory", "1Gi")]),
                container(&[("cpu", "250m"), ("memory", "512Mi")], &[]),
            ],
            init_containers: Some(vec![
                // A one-off init container larger than the rest: its amount counts.
                container(&[("cpu", "2")], &[]),
                Container {
                    restart_policy: Some("Always".into()),
                    ..container(&[("memory", "1Mi")], &[])
                },
            ]),
            overhead: Some(q(&[("cpu", "100m")])),
            ..PodSpec::default()
        };
        let s = Shape::of_pod(&spec);
        assert_eq!(s.0["cpu"], 2100, "max(750, 2000) + 100");
        assert_eq!(
            s.0["memory"],
            (1 << 30) * 1000 + (512 << 20) * 1000 + (1 << 20) * 1000
        );
        assert_eq!(s.0[PODS], 1000);
        assert_eq!(Shape::of_pod(&PodSpec::default()), Shape::default());
    }

    #[test]
    fn a_pods_shape_saturates_rather_than_wraps() {
        // Each request alone fits in i64 thousandths; their sum does not.
        let huge = container(&[("example.com/slot", "5000000000000000")], &[]);
        let spec = PodSpec {
            containers: vec![huge.clone(), huge],
            overhead: Some(q(&[("example.com/slot", "5000000000000000")])),
            ..PodSpec::default()
        };
        let s = Shape::of_pod(&spec);
        assert_eq!(s.0["example.com/slot"], i64::MAX);
        let room = Room::from_proto(&proto::ClusterRoom {
            nodes: vec![proto::NodeRoom {
                count: 1,
                free_milli: [
                    ("pods".to_string(), 1000),
                    ("example.com/slot".to_string(), 1000),
                ]
                .into_iter()
                .collect(),
            }],
            ..proto::ClusterRoom::default()
        })
        .expect("room");
        assert_eq!(room.fits(&s), Some(0), "it fits nowhere");
    }

    #[test]
    fn only_ready_untainted_schedulable_nodes_have_room() {
        assert!(NodeFacts::of(&node(true, None, &[("cpu", "2")])).usable);
        assert!(NodeFacts::of(&node(true, Some("PreferNoSchedule"), &[])).usable);
        assert!(!NodeFacts::of(&node(false, None, &[])).usable);
        assert!(!NodeFacts::of(&node(true, Some("NoSchedule"), &[])).usable);
        assert!(!NodeFacts::of(&node(true, Some("NoExecute"), &[])).usable);
        let mut cordoned = node(true, None, &[]);
        cordoned.spec.as_mut().unwrap().unschedulable = Some(true);
        assert!(!NodeFacts::of(&cordoned).usable);
    }

    fn facts(cpu: i64, pods: i64) -> NodeFacts {
        NodeFacts {
            usable: true,
            allocatable: BTreeMap::from([("cpu".into(), cpu), (PODS.into(), pods * 1000)]),
        }
    }

    fn room_of(groups: Vec<proto::NodeRoom>) -> Room {
        Room::from_proto(&proto::ClusterRoom {
            nodes: groups,
            ..proto::ClusterRoom::default()
        })
        .unwrap()
    }

    #[test]
    fn room_is_allocatable_less_bound_pods_grouped_and_counted_per_shape() {
        let nodes = BTreeMap::from([
            ("a".to_string(), facts(4000, 110)),
            ("b".to_string(), facts(4000, 110)),
            ("c".to_string(), facts(2000, 110)),
            (
                "down".to_string(),
                NodeFacts {
                    usable: false,
                    ..facts(64_000, 110)
                },
            ),
        ]);
        let one_cpu = shape(&[("cpu", 1000)]);
        let half = shape(&[("cpu", 500)]);
        let used = [("a", &one_cpu), ("c", &half), ("gone", &one_cpu)];
        let (groups, left_out) = measure(&nodes, used);
        assert_eq!(left_out, 0);
        // a: 3000 free, b: 4000, c: 1500; the unusable node is not room.
        assert_eq!(groups.len(), 3);
        let room = room_of(groups);
        assert_eq!(room.fits(&one_cpu), Some(3 + 4 + 1));
        assert_eq!(room.fits(&half), Some(6 + 8 + 3));
        // A resource no node has fits nowhere; a shape of nothing fits by pod count.
        assert_eq!(room.fits(&shape(&[("nvidia.com/gpu", 1000)])), Some(0));
        assert_eq!(room.fits(&Shape::default()), Some(109 + 110 + 109));
    }

    #[test]
    fn identical_nodes_make_one_group_and_the_bound_keeps_the_roomiest() {
        let nodes: BTreeMap<String, NodeFacts> = (0..1000)
            .map(|i| (format!("n{i:04}"), facts(1000 * (i % 300), 110)))
            .collect();
        let (groups, left_out) = measure(&nodes, []);
        assert_eq!(groups.len(), MAX_GROUPS);
        let kept: u32 = groups.iter().map(|g| g.count).sum();
        assert_eq!(kept + left_out, 1000);
        assert_eq!(groups[0].free_milli["cpu"], 299_000, "the most CPU first");
        assert!(groups.iter().all(|g| g.free_milli["cpu"] >= 44_000));
    }

    #[test]
    fn a_room_that_breaks_a_bound_is_refused_naming_the_entry() {
        let group = |n: usize| proto::NodeRoom {
            count: 1,
            free_milli: (0..n).map(|i| (format!("r{i}"), 1)).collect(),
        };
        let refuse = |room: proto::ClusterRoom| Room::from_proto(&room).unwrap_err();
        let e = refuse(proto::ClusterRoom {
            nodes: vec![group(1); MAX_GROUPS + 1],
            ..proto::ClusterRoom::default()
        });
        assert!(e.starts_with("room.nodes: 257 groups"), "{e}");
        let e = refuse(proto::ClusterRoom {
            nodes: vec![group(MAX_RESOURCES + 1)],
            ..proto::ClusterRoom::default()
        });
        assert!(e.starts_with("room.nodes[0]: 17 resources"), "{e}");
        let mut negative = group(1);
        negative.free_milli.insert("cpu".into(), -1);
        let e = refuse(proto::ClusterRoom {
            nodes: vec![negative],
            ..proto::ClusterRoom::default()
        });
        assert!(e.contains("free_milli[\"cpu\"]: -1"), "{e}");
        let unmeasured = Room::from_proto(&proto::ClusterRoom {
            error: "forbidden".into(),
            ..proto::ClusterRoom::default()
        })
        .unwrap();
        assert_eq!(unmeasured.fits(&Shape::default()), None);
    }

    #[test]
    fn a_policy_admits_its_namespaces_up_to_both_ceilings() {
        let p = PolicyRoom {
            valid: true,
            namespaces: vec!["default".into(), "hpc-*".into()],
            max_brokers: 10,
            max_brokers_per_minicluster: 6,
            brokers: 7,
        };
        assert!(p.admits_namespace("default") && p.admits_namespace("hpc-a"));
        assert!(!p.admits_namespace("other"));
        assert!(
            !PolicyRoom {
                valid: false,
                ..p.clone()
            }
            .admits_namespace("default")
        );
        assert_eq!(p.admits(0, 0), 3, "10 in all, 7 used");
        assert_eq!(p.admits(0, 2), 5, "its own 2 are counted in the 7");
        assert_eq!(p.admits(4, 4), 2, "6 per MiniCluster, 4 of its others here");
        assert_eq!(p.admits(9, 0), 0);
    }
}
