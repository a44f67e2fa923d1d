//! Pure decisions of the spoke: what to apply and delete for a snapshot
//! ([`plan_snapshot`]): each assignment checked and planned, admitted by the owner's
//! policy, then rendered. How each one is doing is [`crate::burst_status`]'s.
//!
//! No I/O here: the agent reads the cluster, calls these functions and carries out the
//! result.
//!
//! Size: about 380 of its lines are the tests.

use std::collections::{BTreeMap, BTreeSet};

use flux_shared::api::ViewMode;
use flux_shared::federation::assignment::{PlanCache, Prepared, RealizeError, Realized, prepare};
use flux_shared::federation::ownership::SpokeIdentity;
use flux_shared::federation::policy::{self, Candidate, Level, NamespaceState, PolicyState};
use flux_shared::federation::proto::{Assignment, Snapshot};
use flux_shared::federation::{BurstKey, McKey};

use flux_shared::validate::{Exceptions, describe_violations, unsafe_burst_except};
use k8s_openapi::api::core::v1::PodSpec;

use crate::cluster::{ObjectRef, OwnedObject};

/// Reason of a refusal because the burst asks for privileges, host access, credentials or
/// a namespace a burst may not have ([`flux_shared::validate::unsafe_burst`]).
pub const UNSAFE_BURST: &str = "UnsafeBurst";

/// Reason of a refusal because one of the assignment's names is taken in the cluster by an
/// object this spoke did not make for it.
pub const NAME_TAKEN: &str = "NameTaken";

/// An assignment this process applied, and the objects it made of it.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    /// The assignment as received.
    pub assignment: Assignment,
    /// Its objects.
    pub realized: Realized,
}

/// An assignment this process refused (`BURST_PHASE_REFUSED`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssignmentRefusal {
    /// The assignment as received; the same content is not examined again.
    pub assignment: Assignment,
    /// Machine-readable reason: `Malformed`, `InvalidSpec`, `ConfigMismatch`, or
    /// [`NAME_TAKEN`] (decided by the agent when it checks the names in the cluster).
    pub reason: &'static str,
    /// Why, for humans (the [`RealizeError`] message).
    pub message: String,
}

impl AssignmentRefusal {
    /// The refusal of `assignment` for `error`.
    pub fn new(assignment: &Assignment, error: &RealizeError) -> AssignmentRefusal {
        let reason = match error {
            RealizeError::Malformed { .. } => "Malformed",
            RealizeError::InvalidSpec { .. } => "InvalidSpec",
            RealizeError::ConfigMismatch { .. } => "ConfigMismatch",
        };
        AssignmentRefusal {
            assignment: assignment.clone(),
            reason,
            message: error.to_string(),
        }
    }
}

/// What this process remembers between snapshots: the content it applied and the content
/// it refused, per assignment key. Lost on restart, which only costs re-applying (a no-op
/// for the API server) and re-examining.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Memory {
    /// Assignments applied completely, by key.
    pub applied: BTreeMap<String, Applied>,
    /// Relayed bursts held (their objects run, the policy does not admit them as sent)
    /// that this process did not apply, as rendered from the assignment held: what their
    /// relay is served from (the names and hosts are those of the live objects, which the
    /// burst's name and `maxSize` fix). By key.
    pub held: BTreeMap<String, Applied>,
    /// Assignments refused, by key.
    pub refused: BTreeMap<String, AssignmentRefusal>,
}

/// What to do with one assignment of a snapshot.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Apply these objects (new or changed content, or objects missing from the cluster).
    Apply(Box<Realized>),
    /// Identical to what this process applied, and every object is still there.
    Unchanged,
    /// Refuse it (it does not realize): report `BURST_PHASE_REFUSED`.
    Refuse(Box<AssignmentRefusal>),
    /// Identical to content refused before: refused again without re-examining it.
    StillRefused,
    /// The spoke's policy does not admit it as sent, but objects of it run: they are kept
    /// exactly as they are (never grown, never deleted because of the policy).
    Hold(Box<AssignmentRefusal>),
}

/// One assignment of a snapshot and what to do with it.
#[derive(Clone, Debug, PartialEq)]
pub struct Planned {
    /// Assignment key.
    pub key: String,
    /// The decision.
    pub decision: Decision,
    /// The most brokers the policy admits for it now; `None` when it was refused before
    /// the policy was asked.
    pub admitted_size: Option<i32>,
}

/// Everything to do to make the cluster match one snapshot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SnapshotPlan {
    /// The snapshot's assignments in its order (a repeated key is planned once).
    pub assignments: Vec<Planned>,
    /// Owned objects to delete, Jobs first: every object whose key the snapshot lists
    /// neither as an assignment nor as retained, and objects of an applied assignment that
    /// it no longer renders.
    pub delete: Vec<OwnedObject>,
    /// Keys no longer listed whose objects are in `delete` (report them `DELETED` once
    /// those deletions succeed).
    pub removed: BTreeSet<String>,
    /// Keys to forget from [`Memory`]: no longer listed at all.
    pub forget: BTreeSet<String>,
    /// Namespaces to create before applying, with their Pod Security level: those of
    /// admitted assignments that the cluster lacks.
    pub create_namespaces: BTreeMap<String, Level>,
}

/// What the spoke's own cluster looks like to [`plan_snapshot`], besides its objects.
#[derive(Clone, Debug)]
pub struct Context<'a> {
    /// The spoke's own namespace (no burst may run there).
    pub spoke_namespace: &'a str,
    /// The spoke's policy, as read.
    pub policy: &'a PolicyState,
    /// The namespaces of the snapshot's assignments, as read.
    pub namespaces: &'a BTreeMap<String, NamespaceState>,
    /// Brokers each key's Job runs now (its parallelism, 0 when suspended), by key.
    pub running: &'a BTreeMap<String, i32>,
    /// How the pods of each key's live Job get the view: rendered as made.
    pub view_modes: &'a BTreeMap<String, ViewMode>,
    /// Whether the cluster mounts images as volumes: a new burst Job then mounts the view
    /// image (unless its spec says otherwise).
    pub image_volumes: bool,
}

/// Whether a refusal's reason is the policy's (re-examined whenever the snapshot is
/// processed: the policy, or the other bursts, may have changed).
pub fn is_policy_reason(reason: &str) -> bool {
    [
        policy::reason::NO_POLICY,
        policy::reason::POLICY_INVALID,
        policy::reason::NAMESPACE_NOT_ALLOWED,
        policy::reason::TOO_MANY_BROKERS,
        policy::reason::IMAGE_NOT_ALLOWED,
        policy::reason::VOLUME_NOT_ALLOWED,
        policy::reason::RESOURCES_NOT_ALLOWED,
        policy::reason::POD_SECURITY,
        // What the baseline refuses, the policy may allow (a namespace rule's `allow`).
        UNSAFE_BURST,
    ]
    .contains(&reason)
}

/// Plans `snapshot` against the objects the spoke `me` owns (`owned`, which must hold only
/// objects of `me`: everything here may be deleted), what this process remembers
/// (`memory`) and the cluster's policy and namespaces (`cx`).
///
/// * An assignment that does not realize is refused; the same content refused before is
///   not examined again. Its existing objects (from an earlier, valid version) are kept.
/// * An assignment that asks for what a burst may not have
///   ([`flux_shared::validate::unsafe_burst`], with the spoke's own namespace) is refused
///   with [`UNSAFE_BURST`] before anything of it is written.
/// * Every other one goes to the policy ([`policy::admit`], all at once: the broker
///   ceilings are shared). One it does not admit is refused, or held as it runs when it
///   has objects; policy refusals are examined afresh every time.
/// * An admitted assignment whose content equals the one applied before, with every one of
///   its objects still present, is left alone; any other is applied, after its namespace
///   is created when missing.
/// * Owned objects whose key is neither assigned nor retained are deleted; so are owned
///   objects of an applied assignment that its current rendering no longer contains.
/// * Retained keys are neither applied nor deleted.
pub fn plan_snapshot(
    snapshot: &Snapshot,
    owned: &[OwnedObject],
    memory: &Memory,
    me: &SpokeIdentity,
    cx: &Context<'_>,
) -> SnapshotPlan {
    let present: BTreeSet<(&str, &ObjectRef)> =
        owned.iter().map(|o| (o.key.as_str(), &o.object)).collect();
    let has_objects: BTreeSet<&str> = owned.iter().map(|o| o.key.as_str()).collect();
    let mut plan = SnapshotPlan::default();
    let mut seen: BTreeSet<&str> = BTreeSet::new();

    // Check and plan (or refuse) each assignment once; nothing large is rendered before the
    // policy admits it, and the bursts of one MiniCluster share one plan of their spec.
    let mut plans = PlanCache::for_cluster(cx.image_volumes);
    let mut examined: Vec<(&Assignment, Result<Checked, Decision>)> = Vec::new();
    for a in &snapshot.assignments {
        if seen.insert(a.key.as_str()) {
            let result = examine(a, memory, &mut plans).and_then(|mut prepared| {
                // A new Job's view is the plan's, as this cluster gives it (shared).
                if let Some(mode) = cx.view_modes.get(&a.key) {
                    prepared.render_view(*mode);
                }
                // Checked every time, applied content too: the policy's exceptions may
                // have changed. A running burst that is no longer safe is held, not grown.
                let exceptions = match cx.policy {
                    PolicyState::Valid(p) => p.exceptions_for(&prepared.namespace),
                    _ => Exceptions::default(),
                };
                match unsafe_refusal(a, &prepared, cx.spoke_namespace, &exceptions) {
                    None => {
                        let pod = prepared.pod();
                        Ok((prepared, pod))
                    }
                    Some(refusal) if has_objects.contains(a.key.as_str()) => {
                        Err(Decision::Hold(Box::new(refusal)))
                    }
                    Some(refusal) => Err(Decision::Refuse(Box::new(refusal))),
                }
            });
            examined.push((a, result));
        }
    }

    // The policy, for every checked one together.
    let candidates: Vec<Candidate<'_>> = examined
        .iter()
        .filter_map(|(a, r)| r.as_ref().ok().map(|checked| (a, checked)))
        .map(|(a, (prepared, pod))| Candidate {
            key: &a.key,
            minicluster: a
                .minicluster
                .as_ref()
                .map(|m| McKey::new(&m.namespace, &m.name).to_string())
                .unwrap_or_default(),
            namespace: &prepared.namespace,
            size: prepared.size,
            pod: pod.as_ref(),
            running: cx.running.get(&a.key).copied().unwrap_or(0),
        })
        .collect();
    // What runs for bursts that are not candidates (retained, held, refused with their
    // objects kept) still fills the cluster; bursts about to be deleted do not count.
    let candidate_keys: BTreeSet<&str> = candidates.iter().map(|c| c.key).collect();
    let kept: BTreeSet<&str> = snapshot
        .assignments
        .iter()
        .map(|a| a.key.as_str())
        .chain(snapshot.retained_keys.iter().map(String::as_str))
        .collect();
    let others: Vec<policy::Running> = cx
        .running
        .iter()
        .filter(|(key, brokers)| {
            **brokers > 0 && kept.contains(key.as_str()) && !candidate_keys.contains(key.as_str())
        })
        .map(|(key, brokers)| policy::Running {
            minicluster: key
                .parse::<BurstKey>()
                .map_or_else(|_| String::new(), |k| k.minicluster().to_string()),
            brokers: *brokers,
        })
        .collect();
    let verdicts = policy::admit_beside(cx.policy, &candidates, &others, cx.namespaces);

    // Keys whose current rendering is known, with the objects it contains.
    let mut rendered: BTreeMap<&str, BTreeSet<ObjectRef>> = BTreeMap::new();
    for (a, examined) in examined {
        let key = a.key.as_str();
        let verdict = verdicts.get(key);
        let decision = match examined {
            Err(decision) => decision,
            Ok((prepared, _)) => match verdict.and_then(|v| v.refusal.as_ref()) {
                Some(r) => {
                    let refusal = Box::new(AssignmentRefusal {
                        assignment: a.clone(),
                        reason: r.reason,
                        message: format!(
                            "assignment {key:?}: this cluster's policy does not admit it: {}",
                            r.message
                        ),
                    });
                    if has_objects.contains(key) {
                        Decision::Hold(refusal)
                    } else {
                        Decision::Refuse(refusal)
                    }
                }
                None => {
                    // Content applied before is not rendered again.
                    let applied = memory
                        .applied
                        .get(key)
                        .filter(|applied| applied.assignment == *a)
                        .map(|applied| &applied.realized);
                    let (objects, decision) = match applied {
                        Some(realized) => {
                            let objects = objects_of(realized);
                            let decision = if objects.iter().all(|o| present.contains(&(key, o))) {
                                Decision::Unchanged
                            } else {
                                Decision::Apply(Box::new(realized.clone()))
                            };
                            (objects, decision)
                        }
                        None => {
                            let realized = prepared.realize(&a.curve_cert, me);
                            (objects_of(&realized), Decision::Apply(Box::new(realized)))
                        }
                    };
                    if let Some(level) = verdict.and_then(|v| v.create_namespace) {
                        plan.create_namespaces
                            .insert(prepared.namespace.clone(), level);
                    }
                    rendered.insert(key, objects);
                    decision
                }
            },
        };
        plan.assignments.push(Planned {
            key: a.key.clone(),
            decision,
            admitted_size: verdict.map(|v| v.admitted_size),
        });
    }

    let retained: BTreeSet<&str> = snapshot.retained_keys.iter().map(String::as_str).collect();
    for o in owned {
        let key = o.key.as_str();
        if seen.contains(key) {
            if let Some(objects) = rendered.get(key)
                && !objects.contains(&o.object)
            {
                plan.delete.push(o.clone());
            }
        } else if !retained.contains(key) {
            plan.delete.push(o.clone());
            plan.removed.insert(o.key.clone());
        }
    }
    plan.delete
        .sort_by(|a, b| a.object.cmp(&b.object).then(a.key.cmp(&b.key)));

    plan.forget = memory
        .applied
        .keys()
        .chain(memory.refused.keys())
        .filter(|k| !seen.contains(k.as_str()) && !retained.contains(k.as_str()))
        .cloned()
        .collect();
    plan
}

/// An assignment checked and planned, with the pod its Job would run (what the policy
/// decides on).
type Checked = (Prepared, Option<PodSpec>);

/// The objects `realized` holds, by reference.
fn objects_of(realized: &Realized) -> BTreeSet<ObjectRef> {
    realized.objects.iter().map(ObjectRef::of).collect()
}

/// `a` checked and planned (with `plans`, shared by one MiniCluster's bursts), or the
/// decision that refuses it before the policy is asked: the same content refused before
/// for a reason other than the policy's, or content that does not realize.
fn examine(a: &Assignment, memory: &Memory, plans: &mut PlanCache) -> Result<Prepared, Decision> {
    if memory
        .refused
        .get(&a.key)
        .is_some_and(|r| r.assignment == *a && !is_policy_reason(r.reason))
    {
        return Err(Decision::StillRefused);
    }
    prepare(a, plans).map_err(|error| Decision::Refuse(Box::new(AssignmentRefusal::new(a, &error))))
}

/// The refusal of an assignment whose burst asks for what this cluster does not give a
/// burst (privileges, host access, credentials, the spoke's or the system's namespaces)
/// beyond the `exceptions` its policy lists, or `None` when it is safe. The hub checks the
/// same (with the exceptions this spoke announced) before it assigns; this spoke checks
/// again because it, not the hub, answers for its cluster. Refused before the agent writes
/// anything (not even the namespace).
fn unsafe_refusal(
    a: &Assignment,
    prepared: &Prepared,
    spoke_namespace: &str,
    exceptions: &Exceptions,
) -> Option<AssignmentRefusal> {
    let violations = unsafe_burst_except(
        prepared.spec(),
        &prepared.namespace,
        Some(spoke_namespace),
        exceptions,
    );
    (!violations.is_empty()).then(|| AssignmentRefusal {
        assignment: a.clone(),
        reason: UNSAFE_BURST,
        message: format!(
            "assignment {:?}: this cluster does not run such a burst: {}",
            a.key,
            describe_violations(&violations)
        ),
    })
}

#[cfg(test)]
mod tests {
    use flux_shared::federation::assignment::realize;

    use super::*;
    use crate::cluster::Kind;
    use crate::testing::{sample_assignments, sample_identity};
    use flux_shared::validate::DEFAULT_SPOKE_NAMESPACE;

    fn me() -> SpokeIdentity {
        sample_identity("x")
    }

    fn plan_snapshot(snapshot: &Snapshot, owned: &[OwnedObject], memory: &Memory) -> SnapshotPlan {
        plan_with(
            snapshot,
            owned,
            memory,
            &permissive(),
            DEFAULT_SPOKE_NAMESPACE,
        )
    }

    fn permissive() -> PolicyState {
        PolicyState::of(Some(crate::testing::PERMISSIVE_POLICY))
    }

    fn plan_with(
        snapshot: &Snapshot,
        owned: &[OwnedObject],
        memory: &Memory,
        policy: &PolicyState,
        spoke_namespace: &str,
    ) -> SnapshotPlan {
        let running: BTreeMap<String, i32> = memory
            .applied
            .iter()
            .map(|(k, a)| (k.clone(), a.realized.size))
            .collect();
        let cx = Context {
            spoke_namespace,
            policy,
            namespaces: &BTreeMap::new(),
            running: &running,
            view_modes: &BTreeMap::new(),
            image_volumes: false,
        };
        super::plan_snapshot(snapshot, owned, memory, &me(), &cx)
    }

    fn snapshot(assignments: Vec<Assignment>, retained: &[&str]) -> Snapshot {
        Snapshot {
            hub_epoch: "e".into(),
            version: 3,
            assignments,
            retained_keys: retained.iter().map(|s| s.to_string()).collect(),
            ..Snapshot::default()
        }
    }

    fn owned_of(realized: &Realized) -> Vec<OwnedObject> {
        realized
            .objects
            .iter()
            .map(|o| OwnedObject {
                object: ObjectRef::of(o),
                key: realized.key.clone(),
                uid: None,
            })
            .collect()
    }

    fn leftover(key: &str, kind: Kind, name: &str) -> OwnedObject {
        OwnedObject {
            object: ObjectRef {
                kind,
                namespace: "hpc".into(),
                name: name.into(),
            },
            key: key.into(),
            uid: None,
        }
    }

    fn remember(memory: &mut Memory, a: &Assignment) -> Realized {
        let realized = realize(a, &me()).unwrap();
        memory.applied.insert(
            a.key.clone(),
            Applied {
                assignment: a.clone(),
                realized: realized.clone(),
            },
        );
        realized
    }

    /// The assignment of the reported case: a burst in the spoke's own namespace, as the
    /// spoke's service account with its token, privileged, with the node's root mounted.
    fn unsafe_assignment(namespace: &str) -> Assignment {
        let mut a = sample_assignments(namespace, "m", &[("x", 2)]).remove(0);
        let mut spec: serde_json::Value =
            serde_json::from_slice(&a.minicluster_spec_json).expect("sample spec");
        spec["pod"] = serde_json::json!({"serviceAccountName": "flux-spoke", "automountServiceAccountToken": true});
        spec["containers"][0]["securityContext"] = serde_json::json!({"privileged": true});
        spec["containers"][0]["volumes"] =
            serde_json::json!({"root": {"hostPath": "/", "path": "/host"}});
        a.minicluster_spec_json = spec.to_string().into();
        a
    }

    /// The cluster's broker ceiling counts what runs for bursts that are not examined: one
    /// the hub said to retain (after its restart), one held as it runs. Bursts about to be
    /// deleted do not count.
    #[test]
    fn retained_and_held_bursts_count_toward_the_broker_ceiling() {
        let policy = PolicyState::of(Some(
            "namespaces: [{name: '*', podSecurity: privileged}]\nmaxBrokers: 8\n",
        ));
        let new = sample_assignments("hpc", "new", &[("n", 4)]).remove(0);
        let running: BTreeMap<String, i32> =
            [("hpc/old/r".to_string(), 6), ("hpc/gone/g".to_string(), 8)].into();
        let cx = Context {
            spoke_namespace: DEFAULT_SPOKE_NAMESPACE,
            policy: &policy,
            namespaces: &BTreeMap::new(),
            running: &running,
            view_modes: &BTreeMap::new(),
            image_volumes: false,
        };
        let retained = snapshot(vec![new.clone()], &["hpc/old/r"]);
        let plan = super::plan_snapshot(&retained, &[], &Memory::default(), &me(), &cx);
        let Decision::Refuse(refusal) = &plan.assignments[0].decision else {
            panic!("{:?}", plan.assignments[0].decision)
        };
        assert_eq!(refusal.reason, policy::reason::TOO_MANY_BROKERS);
        assert_eq!(plan.assignments[0].admitted_size, Some(2));
        // Without the retained burst (only one about to be deleted), it fits.
        let alone = snapshot(vec![new.clone()], &[]);
        let plan = super::plan_snapshot(&alone, &[], &Memory::default(), &me(), &cx);
        assert!(
            matches!(plan.assignments[0].decision, Decision::Apply(_)),
            "{:?}",
            plan.assignments[0].decision
        );
    }

    /// A burst whose live Job was made with the view's init container (by an earlier
    /// spoke), or with the view container beside the brokers, is rendered as made: its pod
    /// template cannot change, and its ConfigMap must keep its scripts. A new Job of the
    /// same MiniCluster, on a cluster that mounts images as volumes, mounts the view image.
    #[test]
    fn a_burst_job_keeps_its_view_as_made_and_a_new_one_mounts_the_view_image() {
        let policy = permissive();
        let assignments = sample_assignments("hpc", "mc", &[("a", 2), ("b", 2), ("c", 2)]);
        let keys: Vec<String> = assignments.iter().map(|a| a.key.clone()).collect();
        let running = BTreeMap::new();
        let made_before = BTreeMap::from([
            (keys[0].clone(), ViewMode::InitContainer),
            (keys[1].clone(), ViewMode::Alongside),
        ]);
        let cx = Context {
            spoke_namespace: DEFAULT_SPOKE_NAMESPACE,
            policy: &policy,
            namespaces: &BTreeMap::new(),
            running: &running,
            view_modes: &made_before,
            image_volumes: true,
        };
        let plan = super::plan_snapshot(
            &snapshot(assignments, &[]),
            &[],
            &Memory::default(),
            &me(),
            &cx,
        );
        let pods: Vec<(String, k8s_openapi::api::core::v1::PodSpec)> = plan
            .assignments
            .iter()
            .map(|p| {
                let Decision::Apply(realized) = &p.decision else {
                    panic!("{:?}", p.decision)
                };
                let job = realized
                    .objects
                    .iter()
                    .find_map(|o| match o {
                        flux_shared::render::Object::Job(j) => Some(j.clone()),
                        _ => None,
                    })
                    .expect("a Job");
                (
                    realized.key.clone(),
                    job.spec.and_then(|s| s.template.spec).expect("a pod"),
                )
            })
            .collect();
        assert_eq!(pods.len(), 3);
        for (key, pod) in pods {
            let inits = pod.init_containers.as_ref().map_or(0, Vec::len);
            let image_volumes = pod
                .volumes
                .iter()
                .flatten()
                .filter(|v| v.image.is_some())
                .count();
            if key == keys[0] {
                assert_eq!(inits, 1, "{key}: the init container, as made");
                assert_eq!(pod.containers.len(), 1, "{key}");
                assert_eq!(image_volumes, 0, "{key}");
            } else if key == keys[1] {
                assert_eq!(inits, 0, "{key}");
                assert_eq!(pod.containers[0].name, "flux-view", "{key}: as made");
                assert_eq!(image_volumes, 0, "{key}");
            } else {
                assert_eq!(inits, 0, "{key}");
                assert_eq!(pod.containers.len(), 1, "{key}: no view container");
                assert_eq!(image_volumes, 1, "{key}: the view image, mounted");
            }
        }
    }

    #[test]
    fn an_unsafe_burst_is_refused_with_every_violation_and_nothing_to_write() {
        let a = unsafe_assignment("flux-spoke-system");
        // It realizes: only the safety check stands between it and the cluster.
        assert!(realize(&a, &me()).is_ok());
        let plan = plan_snapshot(&snapshot(vec![a.clone()], &[]), &[], &Memory::default());
        let Decision::Refuse(r) = &plan.assignments[0].decision else {
            panic!("{:?}", plan.assignments[0].decision)
        };
        assert_eq!(r.reason, UNSAFE_BURST);
        assert_eq!(r.assignment, a);
        for field in [
            "metadata.namespace",
            "spec.pod.serviceAccountName",
            "spec.pod.automountServiceAccountToken",
            "spec.containers[0].securityContext.privileged",
            "spec.containers[0].volumes[\"root\"].hostPath",
        ] {
            assert!(
                r.message.contains(&format!("{field}: ")),
                "{field} not in {}",
                r.message
            );
        }
        assert!(plan.delete.is_empty() && plan.removed.is_empty());
    }

    #[test]
    fn the_policys_exceptions_admit_an_unsafe_burst_and_their_removal_holds_it() {
        let mut a = sample_assignments("lab", "m", &[("x", 2)]).remove(0);
        let mut spec: serde_json::Value =
            serde_json::from_slice(&a.minicluster_spec_json).expect("sample spec");
        spec["pod"] = serde_json::json!({"serviceAccountName": "runner"});
        spec["containers"][0]["securityContext"] = serde_json::json!({"privileged": true});
        spec["containers"][0]["volumes"] =
            serde_json::json!({"scratch": {"hostPath": "/scratch/lab", "path": "/scratch"}});
        a.minicluster_spec_json = spec.to_string().into();
        let baseline = PolicyState::of(Some("namespaces: [{name: lab, podSecurity: privileged}]"));
        let lifting = PolicyState::of(Some(
            "namespaces: [{name: lab, podSecurity: privileged, allow: {privileged: true, hostPaths: [/scratch], serviceAccounts: [runner]}}]",
        ));
        let decide = |policy: &PolicyState, owned: &[OwnedObject], memory: &Memory| {
            let plan = plan_with(
                &snapshot(vec![a.clone()], &[]),
                owned,
                memory,
                policy,
                DEFAULT_SPOKE_NAMESPACE,
            );
            plan.assignments[0].decision.clone()
        };
        // The baseline refuses it, naming each rule.
        let Decision::Refuse(refused) = decide(&baseline, &[], &Memory::default()) else {
            panic!("refused by the baseline")
        };
        assert_eq!(refused.reason, UNSAFE_BURST);
        // The owner lists the exceptions: the same content, refused before, now runs.
        let mut memory = Memory::default();
        memory.refused.insert(a.key.clone(), *refused);
        let now = decide(&lifting, &[], &memory);
        assert!(matches!(now, Decision::Apply(_)), "{now:?}");
        // Running, the exceptions withdrawn: held as it is, neither grown nor deleted.
        let mut memory = Memory::default();
        let realized = remember(&mut memory, &a);
        let owned = owned_of(&realized);
        assert_eq!(decide(&lifting, &owned, &memory), Decision::Unchanged);
        let Decision::Hold(held) = decide(&baseline, &owned, &memory) else {
            panic!("held")
        };
        assert_eq!(held.reason, UNSAFE_BURST);
        assert!(
            held.message.contains("spec.pod.serviceAccountName"),
            "{}",
            held.message
        );
    }

    #[test]
    fn the_spokes_own_namespace_is_the_one_refused() {
        let mut a = sample_assignments("spokes", "m", &[("x", 2)]).remove(0);
        let refused = |a: &Assignment, ns: &str| {
            let plan = plan_with(
                &snapshot(vec![a.clone()], &[]),
                &[],
                &Memory::default(),
                &permissive(),
                ns,
            );
            match &plan.assignments[0].decision {
                Decision::Refuse(r) => Some((r.reason, r.message.clone())),
                Decision::Apply(_) => None,
                other => panic!("{other:?}"),
            }
        };
        let (reason, message) = refused(&a, "spokes").expect("refused in the spoke's namespace");
        assert_eq!(reason, UNSAFE_BURST);
        assert!(
            message.contains("metadata.namespace: \"spokes\" is the spoke's own namespace"),
            "{message}"
        );
        assert_eq!(refused(&a, DEFAULT_SPOKE_NAMESPACE), None);
        a = sample_assignments("kube-system", "m", &[("x", 2)]).remove(0);
        assert!(refused(&a, "spokes").is_some());
    }

    #[test]
    fn new_assignments_are_applied_in_snapshot_order() {
        let a = sample_assignments("hpc", "m", &[("x", 2), ("y", 1)]);
        let plan = plan_snapshot(&snapshot(a.clone(), &[]), &[], &Memory::default());
        let keys: Vec<_> = plan.assignments.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["hpc/m/x", "hpc/m/y"]);
        for p in &plan.assignments {
            let Decision::Apply(r) = &p.decision else {
                panic!("{p:?}")
            };
            assert_eq!(r.key, p.key);
            assert!(r.objects.iter().any(|o| Kind::of(o) == Kind::Job));
        }
        assert!(plan.delete.is_empty() && plan.removed.is_empty() && plan.forget.is_empty());
    }

    #[test]
    fn identical_content_with_every_object_present_is_left_alone() {
        let a = sample_assignments("hpc", "m", &[("x", 2)]);
        let mut memory = Memory::default();
        let realized = remember(&mut memory, &a[0]);
        let owned = owned_of(&realized);
        let plan = plan_snapshot(&snapshot(a.clone(), &[]), &owned, &memory);
        assert_eq!(plan.assignments[0].decision, Decision::Unchanged);
        assert!(plan.delete.is_empty());

        // An object deleted behind the spoke's back: applied again.
        let plan = plan_snapshot(&snapshot(a.clone(), &[]), &owned[1..], &memory);
        assert!(matches!(plan.assignments[0].decision, Decision::Apply(_)));

        // Changed content: applied again.
        let mut changed = a[0].clone();
        changed.minicluster.as_mut().unwrap().generation += 1;
        let plan = plan_snapshot(&snapshot(vec![changed], &[]), &owned, &memory);
        assert!(matches!(plan.assignments[0].decision, Decision::Apply(_)));
    }

    #[test]
    fn unlisted_keys_are_deleted_jobs_first_and_retained_ones_kept() {
        let a = sample_assignments("hpc", "m", &[("x", 2), ("y", 1), ("z", 1)]);
        let mut owned = Vec::new();
        for r in a.iter().map(|a| realize(a, &me()).unwrap()) {
            owned.extend(owned_of(&r));
        }
        // Only x stays assigned; z is retained; y goes.
        let plan = plan_snapshot(
            &snapshot(vec![a[0].clone()], &["hpc/m/z"]),
            &owned,
            &Memory::default(),
        );
        assert_eq!(plan.removed, BTreeSet::from(["hpc/m/y".to_string()]));
        assert!(!plan.delete.is_empty());
        assert!(plan.delete.iter().all(|o| o.key == "hpc/m/y"));
        assert_eq!(plan.delete[0].object.kind, Kind::Job);
        let expected: BTreeSet<_> = owned_of(&realize(&a[1], &me()).unwrap())
            .into_iter()
            .collect();
        let got: BTreeSet<_> = plan.delete.iter().cloned().collect();
        assert_eq!(got, expected);

        // An empty snapshot deletes everything the spoke owns, retained or not listed.
        let plan = plan_snapshot(&snapshot(vec![], &[]), &owned, &Memory::default());
        assert_eq!(plan.delete.len(), owned.len());
        assert_eq!(plan.removed.len(), 3);
    }

    #[test]
    fn stale_objects_of_an_applied_assignment_are_pruned() {
        let a = sample_assignments("hpc", "m", &[("x", 2)]);
        let mut owned = owned_of(&realize(&a[0], &me()).unwrap());
        let stale = leftover("hpc/m/x", Kind::Service, "x-old-sidecar");
        owned.push(stale.clone());
        let plan = plan_snapshot(&snapshot(a, &[]), &owned, &Memory::default());
        assert_eq!(plan.delete, vec![stale]);
        assert!(plan.removed.is_empty(), "the key is still assigned");
    }

    #[test]
    fn refused_assignments_keep_their_objects_and_are_not_reexamined() {
        let a = sample_assignments("hpc", "m", &[("x", 2)]);
        let owned = owned_of(&realize(&a[0], &me()).unwrap());
        let mut bad = a[0].clone();
        bad.broker_toml.push_str("# tampered\n");
        let plan = plan_snapshot(
            &snapshot(vec![bad.clone()], &[]),
            &owned,
            &Memory::default(),
        );
        let Decision::Refuse(refusal) = &plan.assignments[0].decision else {
            panic!("{:?}", plan.assignments[0])
        };
        assert_eq!(refusal.reason, "ConfigMismatch");
        assert!(
            refusal.message.contains("broker.toml"),
            "{}",
            refusal.message
        );
        assert!(plan.delete.is_empty(), "a refused key's objects stay");

        let mut memory = Memory::default();
        memory
            .refused
            .insert(bad.key.clone(), AssignmentRefusal::clone(refusal));
        let plan = plan_snapshot(&snapshot(vec![bad.clone()], &[]), &owned, &memory);
        assert_eq!(plan.assignments[0].decision, Decision::StillRefused);
        // Fixed content is examined again.
        let plan = plan_snapshot(&snapshot(a.clone(), &[]), &owned, &memory);
        assert!(matches!(plan.assignments[0].decision, Decision::Apply(_)));
    }

    #[test]
    fn memory_of_unlisted_keys_is_forgotten_but_retained_is_kept() {
        let a = sample_assignments("hpc", "m", &[("x", 2), ("y", 1)]);
        let mut memory = Memory::default();
        remember(&mut memory, &a[0]);
        remember(&mut memory, &a[1]);
        let plan = plan_snapshot(&snapshot(vec![], &["hpc/m/y"]), &[], &memory);
        assert_eq!(plan.forget, BTreeSet::from(["hpc/m/x".to_string()]));
    }

    #[test]
    fn repeated_keys_are_planned_once() {
        let a = sample_assignments("hpc", "m", &[("x", 2)]);
        let plan = plan_snapshot(
            &snapshot(vec![a[0].clone(), a[0].clone()], &[]),
            &[],
            &Memory::default(),
        );
        assert_eq!(plan.assignments.len(), 1);
    }
}
