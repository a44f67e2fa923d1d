//! Applying one snapshot: the agent's I/O around the pure decisions of
//! [`crate::admit::plan_snapshot`], as named steps.
//!
//! 1. [`begin`]: a new hub epoch resets the acknowledgements;
//! 2. `observe`: the spoke's own objects, its policy, the bursts' namespaces and Jobs, as
//!    the cluster shows them now (any read that fails stops here: nothing is applied or
//!    deleted on incomplete knowledge);
//! 3. `plan_snapshot` decides (pure);
//! 4. `create_namespaces` the admitted bursts lack;
//! 5. `realize` each assignment: apply, refuse, hold or keep, tracked for the reports;
//! 6. `serve_relays`: a listener for each relayed burst, its Service pointed at it;
//! 7. `delete_stale` objects no assignment renders any more;
//! 8. [`settle`] the tracked outcomes and what the spoke remembers;
//! 9. `finish`: acknowledge the snapshot when everything in it is done, else retry.
//!
//! Size: the steps in the order they run, one method each, so that what happens to a
//! snapshot reads top to bottom in one place.

use std::collections::{BTreeMap, BTreeSet};

use flux_shared::federation::assignment::Realized;
use flux_shared::federation::ownership::{Ownership, SpokeIdentity, ownership, same_owner};
use flux_shared::federation::policy::{Level, NamespaceState, PolicyState};
use flux_shared::federation::proto::{Assignment, Snapshot};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tracing::{debug, error, info, warn};

use crate::admit::{
    Applied, AssignmentRefusal, Context, Decision, NAME_TAKEN, Planned, plan_snapshot,
};
use crate::agent::{Agent, AppliedSnapshot, State};
use crate::burst_status::{Outcome, Tracked};
use crate::cluster::{Cluster, Kind, ObjectRef, OwnedObject, Taken, metadata};
use crate::metrics::ErrorKind;

/// Why an assignment's objects were not all applied.
enum ApplyError {
    /// Names taken by objects the spoke did not make: refuse the assignment.
    Taken(Vec<Taken>),
    /// Anything else: retried.
    Failed(String),
}

/// What the cluster shows before a snapshot is decided.
struct Observed {
    owned: Vec<OwnedObject>,
    policy_text: Option<String>,
    policy: PolicyState,
    namespaces: BTreeMap<String, NamespaceState>,
    running: BTreeMap<String, i32>,
}

/// What realizing the assignments came to.
#[derive(Default)]
struct Realizing {
    tracked: Vec<Tracked>,
    /// Keys refused now for a taken name: their older objects are kept, like those of
    /// any refused assignment.
    refused_now: BTreeSet<String>,
    /// Something failed: the snapshot is retried.
    failed: bool,
    /// Keys whose objects were written now (not unchanged).
    applied_now: BTreeSet<String>,
}

impl<C: Cluster> Agent<C> {
    /// Makes the cluster match `snapshot` (the steps at the top of this file).
    pub(crate) async fn apply_snapshot(&self, state: &mut State, snapshot: Snapshot) {
        begin(state, &snapshot);
        let me = &self.config.identity;
        let Some(observed) = self.observe(&snapshot).await else {
            return;
        };
        let cx = Context {
            spoke_namespace: &self.config.namespace,
            policy: &observed.policy,
            namespaces: &observed.namespaces,
            running: &observed.running,
        };
        let plan = plan_snapshot(&snapshot, &observed.owned, &state.memory, me, &cx);
        state.policy = Some(observed.policy_text.clone());
        let previous: BTreeMap<String, Tracked> = std::mem::take(&mut state.tracked)
            .into_iter()
            .map(|t| (t.key.clone(), t))
            .collect();
        let namespaces = self.create_namespaces(&plan.create_namespaces).await;
        let mut realizing = Realizing::default();
        for planned in plan.assignments {
            self.realize(
                state,
                &snapshot,
                &observed.owned,
                &namespaces,
                &previous,
                planned,
                &mut realizing,
            )
            .await;
        }
        // The keys the snapshot lists: the relays and probes of every other burst stop.
        let listed = listed(&snapshot);
        self.serve_relays(state, &listed, &mut realizing).await;
        probe_leads(state, &listed);
        let delete_errors = self
            .delete_stale(&plan.delete, &plan.removed, &mut realizing)
            .await;
        settle(
            state,
            realizing.tracked,
            &delete_errors,
            plan.removed,
            plan.forget,
            snapshot.version,
        );
        self.finish(state, &snapshot, realizing.failed);
    }

    /// Step 2: the cluster as it is now; `None` (logged and counted) when a read failed.
    async fn observe(&self, snapshot: &Snapshot) -> Option<Observed> {
        let me = &self.config.identity;
        let owned = match self.cluster.owned(me).await {
            Ok(owned) => owned,
            Err(e) => {
                self.metrics.error(ErrorKind::List);
                error!(error = %e, "cannot list the spoke's objects; nothing applied or deleted, retrying later");
                return None;
            }
        };
        let policy_text = match self.cluster.policy() {
            Ok(text) => text,
            Err(e) => {
                self.metrics.error(ErrorKind::Policy);
                error!(error = %e, "cannot read the spoke policy; nothing applied or deleted, retrying later");
                return None;
            }
        };
        let policy = PolicyState::of(policy_text.as_deref());
        if let PolicyState::Invalid(e) = &policy {
            warn!(error = %e, "the spoke policy is not valid: no burst is admitted until it is fixed");
        }
        let mut namespaces = BTreeMap::new();
        for a in &snapshot.assignments {
            let Some(ns) = a.minicluster.as_ref().map(|m| m.namespace.as_str()) else {
                continue;
            };
            if namespaces.contains_key(ns) || ns.is_empty() {
                continue;
            }
            match self.cluster.namespace(ns).await {
                Ok(state) => {
                    namespaces.insert(ns.to_string(), state);
                }
                Err(e) => {
                    self.metrics.error(ErrorKind::Namespace);
                    error!(namespace = %ns, error = %e, "cannot read a burst's namespace; nothing applied or deleted, retrying later");
                    return None;
                }
            }
        }
        let running = match self.cluster.jobs().await {
            Ok(jobs) => running_sizes(&jobs, me),
            Err(e) => {
                self.metrics.error(ErrorKind::Jobs);
                error!(error = %e, "cannot read the spoke's Jobs; nothing applied or deleted, retrying later");
                return None;
            }
        };
        Some(Observed {
            owned,
            policy_text,
            policy,
            namespaces,
            running,
        })
    }

    /// Step 4: the namespaces admitted assignments lack, once each, at the policy's Pod
    /// Security level; what became of each.
    async fn create_namespaces(
        &self,
        wanted: &BTreeMap<String, Level>,
    ) -> BTreeMap<String, Result<(), String>> {
        let mut created = BTreeMap::new();
        for (namespace, level) in wanted {
            let result = match self.cluster.ensure_namespace(namespace, *level).await {
                Ok(()) => Ok(()),
                Err(e) => {
                    self.metrics.error(ErrorKind::Namespace);
                    error!(%namespace, error = %e, "cannot create the namespace");
                    Err(e.to_string())
                }
            };
            created.insert(namespace.clone(), result);
        }
        created
    }

    /// Step 5, for one assignment: carries out its decision and tracks the outcome.
    #[allow(clippy::too_many_arguments)]
    async fn realize(
        &self,
        state: &mut State,
        snapshot: &Snapshot,
        owned: &[OwnedObject],
        namespaces: &BTreeMap<String, Result<(), String>>,
        previous: &BTreeMap<String, Tracked>,
        planned: Planned,
        realizing: &mut Realizing,
    ) {
        let Planned {
            key,
            decision,
            admitted_size,
        } = planned;
        let version = snapshot.version;
        let assignment = |key: &str| snapshot.assignments.iter().find(|a| a.key == key);
        match decision {
            Decision::Apply(realized) => {
                let result = match namespaces.get(&realized.namespace) {
                    Some(Err(e)) => Err(ApplyError::Failed(e.clone())),
                    _ => {
                        let listed: BTreeSet<&ObjectRef> = owned
                            .iter()
                            .filter(|o| o.key == key)
                            .map(|o| &o.object)
                            .collect();
                        self.apply_objects(&realized, &listed).await
                    }
                };
                let job = Some((realized.namespace.clone(), realized.job.clone()));
                let size = realized.size;
                match result {
                    Ok(()) => {
                        info!(%key, objects = realized.objects.len(), "assignment applied");
                        realizing.applied_now.insert(key.clone());
                        state.memory.refused.remove(&key);
                        if let Some(assignment) = assignment(&key) {
                            state.memory.applied.insert(
                                key.clone(),
                                Applied {
                                    assignment: assignment.clone(),
                                    realized: *realized,
                                },
                            );
                        }
                        realizing.tracked.push(Tracked {
                            key,
                            observed_version: version,
                            job,
                            size,
                            outcome: Outcome::Applied,
                            admitted_size,
                        });
                    }
                    Err(ApplyError::Taken(taken)) => {
                        self.metrics.error(ErrorKind::Invalid);
                        let message = name_taken_message(&taken);
                        warn!(%key, reason = NAME_TAKEN, blocking = taken.len(), error = %message, "assignment refused: a name it needs is taken");
                        if let Some(assignment) = assignment(&key) {
                            realizing.tracked.push(refused(
                                &key,
                                version,
                                assignment,
                                NAME_TAKEN,
                                &message,
                                admitted_size,
                            ));
                            state.memory.refused.insert(
                                key.clone(),
                                AssignmentRefusal {
                                    assignment: assignment.clone(),
                                    reason: NAME_TAKEN,
                                    message,
                                },
                            );
                        }
                        state.blockers.insert(key.clone(), taken);
                        realizing.refused_now.insert(key);
                    }
                    Err(ApplyError::Failed(message)) => {
                        realizing.failed = true;
                        state.memory.applied.remove(&key);
                        let observed_version = previous
                            .get(&key)
                            .filter(|t| {
                                matches!(t.outcome, Outcome::Applied | Outcome::Failed { .. })
                            })
                            .map_or(0, |t| t.observed_version);
                        realizing.tracked.push(Tracked {
                            key,
                            observed_version,
                            job,
                            size,
                            outcome: Outcome::Failed { message },
                            admitted_size,
                        });
                    }
                }
            }
            Decision::Unchanged => {
                state.memory.refused.remove(&key);
                if let Some(applied) = state.memory.applied.get(&key) {
                    let r = &applied.realized;
                    realizing.tracked.push(Tracked {
                        key,
                        observed_version: version,
                        job: Some((r.namespace.clone(), r.job.clone())),
                        size: r.size,
                        outcome: Outcome::Applied,
                        admitted_size,
                    });
                }
            }
            Decision::Refuse(refusal) => {
                // A policy refusal is decided again with every snapshot: said (and counted)
                // once, while it stays the same.
                let known =
                    state.memory.refused.get(&key).is_some_and(|r| {
                        r.reason == refusal.reason && r.message == refusal.message
                    });
                if known {
                    debug!(%key, reason = refusal.reason, "assignment still refused");
                } else {
                    self.metrics.error(ErrorKind::Invalid);
                    warn!(%key, reason = refusal.reason, error = %refusal.message, "assignment refused");
                }
                realizing.tracked.push(refused(
                    &key,
                    version,
                    &refusal.assignment,
                    refusal.reason,
                    &refusal.message,
                    admitted_size,
                ));
                state.memory.refused.insert(key, *refusal);
            }
            Decision::StillRefused => {
                if let Some(r) = state.memory.refused.get(&key) {
                    realizing.tracked.push(refused(
                        &key,
                        version,
                        &r.assignment,
                        r.reason,
                        &r.message,
                        admitted_size,
                    ));
                }
            }
            Decision::Hold(refusal) => {
                warn!(%key, reason = refusal.reason, error = %refusal.message, "assignment not admitted by the policy; its running objects are kept as they are");
                let a = &refusal.assignment;
                let job = match state.memory.applied.get(&key) {
                    Some(applied) => (
                        applied.realized.namespace.clone(),
                        applied.realized.job.clone(),
                    ),
                    None => (
                        a.minicluster
                            .as_ref()
                            .map(|m| m.namespace.clone())
                            .unwrap_or_default(),
                        a.burst_name.clone(),
                    ),
                };
                realizing.tracked.push(Tracked {
                    key,
                    observed_version: version,
                    job: Some(job),
                    size: a.burst_size,
                    outcome: Outcome::Held {
                        reason: refusal.reason.to_string(),
                        message: refusal.message.clone(),
                    },
                    admitted_size,
                });
            }
        }
    }

    /// Step 6: a relay listener for every relayed burst that runs, its Service pointed at
    /// it (written again when the Service was, or the port changed); the listeners of
    /// bursts the snapshot no longer lists are closed. A burst whose relay cannot be
    /// served is reported failed with the reason, and the snapshot retried.
    async fn serve_relays(
        &self,
        state: &mut State,
        listed: &BTreeSet<String>,
        realizing: &mut Realizing,
    ) {
        state.relays.retain(listed);
        let relayed: Vec<(String, ObjectMeta, i32, String)> = state
            .memory
            .applied
            .iter()
            .filter(|(key, _)| listed.contains(*key))
            .filter_map(|(key, a)| {
                let r = &a.realized;
                Some((key.clone(), r.relay()?.clone(), r.hosts, r.job.clone()))
            })
            .collect();
        for (key, service, hosts, job) in relayed {
            if realizing.applied_now.contains(&key) {
                state.relays.unwritten(&key);
            }
            let result = match self.config.relay_address {
                None => Err("the burst is relayed and this spoke has no relay address (flux-spoke run --relay-address, which its Deployment sets from the pod's status.podIP): its brokers cannot reach their lead broker".to_string()),
                Some(address) => {
                    let pods = crate::relay_listeners::BurstPods {
                        cluster: self.cluster.clone(),
                        namespace: service.namespace.clone().unwrap_or_default(),
                        job,
                    };
                    self.serve_relay(state, &key, &service, hosts, address, pods)
                        .await
                }
            };
            if let Err(message) = result {
                self.metrics.error(ErrorKind::Apply);
                error!(%key, error = %message, "cannot serve the relayed burst");
                realizing.failed = true;
                if let Some(t) = realizing.tracked.iter_mut().find(|t| t.key == key) {
                    t.outcome = Outcome::Failed { message };
                }
            }
        }
    }

    /// Opens burst `key`'s listener unless it has one (serving the broker pods of `pods`),
    /// and points its relay `service` at it at `address` unless it already does.
    async fn serve_relay(
        &self,
        state: &mut State,
        key: &str,
        service: &ObjectMeta,
        hosts: i32,
        address: std::net::IpAddr,
        pods: crate::relay_listeners::BurstPods<C>,
    ) -> Result<(), String> {
        let port = state
            .relays
            .listen(
                key,
                usize::try_from(hosts).unwrap_or(0),
                &state.lead_reach,
                pods,
            )
            .await
            .map_err(|e| format!("cannot open the burst's relay listener: {e}"))?;
        let at = (
            service.namespace.clone().unwrap_or_default(),
            service.name.clone().unwrap_or_default(),
            port,
        );
        if state.relays.written(key, &at) {
            return Ok(());
        }
        self.cluster
            .serve_relay(service, address, port)
            .await
            .map_err(|e| e.to_string())?;
        info!(%key, service = %at.1, %address, port, "relay Service points at this spoke");
        state.relays.wrote(key, at);
        Ok(())
    }

    /// Step 7: deletes `delete`, except the objects of a key refused now for a taken name
    /// (kept like those of any refused assignment) unless its key is `removed`. Returns
    /// the first error of each key whose deletion failed.
    async fn delete_stale(
        &self,
        delete: &[OwnedObject],
        removed: &BTreeSet<String>,
        realizing: &mut Realizing,
    ) -> BTreeMap<String, String> {
        let mut errors: BTreeMap<String, String> = BTreeMap::new();
        for o in delete {
            if realizing.refused_now.contains(&o.key) && !removed.contains(&o.key) {
                continue;
            }
            match self.cluster.delete(o).await {
                Ok(()) => {
                    self.metrics.deleted(o.object.kind.as_str());
                    info!(object = %o.object, key = %o.key, "deleted");
                }
                Err(e) => {
                    realizing.failed = true;
                    self.metrics.error(ErrorKind::Delete);
                    error!(object = %o.object, key = %o.key, error = %e, "delete failed");
                    errors.entry(o.key.clone()).or_insert_with(|| e.to_string());
                }
            }
        }
        errors
    }

    /// Step 9: acknowledges the snapshot when nothing `failed`; else it is retried.
    fn finish(&self, state: &mut State, snapshot: &Snapshot, failed: bool) {
        if failed {
            warn!(retry_in = ?self.config.report_interval, "snapshot partly applied; retrying");
            return;
        }
        state.complete = true;
        state.pending = None;
        state.acked = snapshot.version;
        let applied = AppliedSnapshot {
            hub_epoch: snapshot.hub_epoch.clone(),
            version: snapshot.version,
        };
        state.applied = Some(applied.clone());
        self.applied.send_replace(Some(applied));
        self.metrics.snapshot_applied(snapshot.version);
        info!("snapshot applied");
    }

    /// Applies one assignment's objects in order, stopping at the first error. `listed`:
    /// those of its objects the spoke listed as its own. Every other name is read first,
    /// and if any holds an object the spoke did not make for this assignment, nothing is
    /// written (no half-applied burst).
    async fn apply_objects(
        &self,
        realized: &Realized,
        listed: &BTreeSet<&ObjectRef>,
    ) -> Result<(), ApplyError> {
        let mut ours = Vec::with_capacity(realized.objects.len());
        let mut taken = Vec::new();
        for object in &realized.objects {
            let r = ObjectRef::of(object);
            if listed.contains(&r) {
                ours.push(true);
                continue;
            }
            match self.cluster.inspect(&r).await {
                Ok(None) => ours.push(false),
                // Ours, though not listed (made meanwhile): applied as ours.
                Ok(Some(meta)) if same_owner(&meta, metadata(object)) => ours.push(true),
                Ok(Some(meta)) => taken.push(Taken::new(&r, &meta)),
                Err(e) => {
                    self.metrics.error(ErrorKind::Apply);
                    error!(key = %realized.key, object = %r, error = %e, "cannot check whether the name is free");
                    return Err(ApplyError::Failed(e.to_string()));
                }
            }
        }
        if !taken.is_empty() {
            return Err(ApplyError::Taken(taken));
        }
        for (object, owned) in realized.objects.iter().zip(ours) {
            let kind = Kind::of(object);
            match self.cluster.apply(object, owned).await {
                Ok(()) => self.metrics.applied(kind.as_str()),
                // Taken between the check and the create.
                Err(e) if e.taken.is_some() => {
                    return Err(ApplyError::Taken(e.taken.into_iter().map(|t| *t).collect()));
                }
                Err(e) => {
                    self.metrics.error(ErrorKind::Apply);
                    error!(key = %realized.key, object = %object.describe(), error = %e, "apply failed");
                    return Err(ApplyError::Failed(e.to_string()));
                }
            }
        }
        Ok(())
    }

    /// Reads every object blocking a `NameTaken` refusal; forgets the refusals whose
    /// blocking objects changed or went (so that the next processing examines them again),
    /// and says whether there were any. A read that fails changes nothing.
    pub(crate) async fn blockers_changed(&self, state: &mut State) -> bool {
        let mut changed = Vec::new();
        for (key, taken) in &state.blockers {
            for t in taken {
                match self.cluster.inspect(&t.object).await {
                    Ok(now) if t.changed(now.as_ref()) => {
                        info!(%key, object = %t.object, gone = now.is_none(), "an object blocking an assignment changed");
                        changed.push(key.clone());
                        break;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        debug!(%key, object = %t.object, error = %e, "cannot re-read an object blocking an assignment");
                    }
                }
            }
        }
        for key in &changed {
            state.blockers.remove(key);
            state.memory.refused.remove(key);
        }
        !changed.is_empty()
    }
}

/// The keys `snapshot` lists: its assignments and the keys it retains.
fn listed(snapshot: &Snapshot) -> BTreeSet<String> {
    snapshot
        .assignments
        .iter()
        .map(|a| a.key.clone())
        .chain(snapshot.retained_keys.iter().cloned())
        .collect()
}

/// Step 6, continued: the lead endpoint of every burst that runs here and connects
/// directly is probed ([`crate::lead_reach`]); what is known of bursts the snapshot no
/// longer lists is forgotten.
fn probe_leads(state: &mut State, listed: &BTreeSet<String>) {
    let targets: BTreeMap<String, String> = state
        .memory
        .applied
        .iter()
        .filter(|(key, a)| listed.contains(*key) && a.realized.relay_service.is_none())
        .filter_map(|(key, a)| {
            let lead = a.assignment.lead_endpoint.as_ref()?;
            Some((
                key.clone(),
                crate::lead_reach::target(&lead.address, lead.port),
            ))
        })
        .collect();
    state.lead_reach.retain(listed);
    state.probes.set(targets, &state.lead_reach);
}

/// Step 1: a snapshot of another hub epoch resets what was acknowledged; the snapshot is
/// the one in progress until it is fully applied.
fn begin(state: &mut State, snapshot: &Snapshot) {
    if snapshot.hub_epoch != state.epoch {
        if !state.epoch.is_empty() {
            info!(old = %state.epoch, new = %snapshot.hub_epoch, "new hub epoch (the hub restarted)");
        }
        state.epoch = snapshot.hub_epoch.clone();
        state.acked = 0;
        // Versions of another epoch mean nothing in this one.
        for t in &mut state.tracked {
            t.observed_version = 0;
        }
    }
    state.last = Some((snapshot.hub_epoch.clone(), snapshot.version));
    state.complete = false;
    state.pending = Some(snapshot.clone());
    state.current = Some(snapshot.clone());
}

/// Step 8: an assignment whose stale objects could not be deleted failed; removed keys
/// are `Deleted` (or still `Deleting`) and forgotten with the keys no longer listed; the
/// blockers of refusals no longer remembered go.
fn settle(
    state: &mut State,
    mut tracked: Vec<Tracked>,
    delete_errors: &BTreeMap<String, String>,
    removed: BTreeSet<String>,
    forget: BTreeSet<String>,
    version: u64,
) {
    for t in &mut tracked {
        if let Some(message) = delete_errors.get(&t.key)
            && t.outcome == Outcome::Applied
        {
            t.outcome = Outcome::Failed {
                message: message.clone(),
            };
        }
    }
    for key in removed {
        let outcome = match delete_errors.get(&key) {
            Some(message) => Outcome::Deleting {
                message: message.clone(),
            },
            None => Outcome::Deleted,
        };
        state.memory.applied.remove(&key);
        state.memory.refused.remove(&key);
        tracked.push(Tracked {
            key,
            observed_version: version,
            job: None,
            size: 0,
            outcome,
            admitted_size: None,
        });
    }
    for key in forget {
        state.memory.applied.remove(&key);
        state.memory.refused.remove(&key);
    }
    tracked.sort_by(|a, b| a.key.cmp(&b.key));
    state.tracked = tracked;
    // Blockers matter only while their refusal is remembered.
    let refused = &state.memory.refused;
    state
        .blockers
        .retain(|key, _| refused.get(key).is_some_and(|r| r.reason == NAME_TAKEN));
}

fn refused(
    key: &str,
    version: u64,
    assignment: &Assignment,
    reason: &str,
    message: &str,
    admitted_size: Option<i32>,
) -> Tracked {
    Tracked {
        key: key.to_string(),
        observed_version: version,
        job: None,
        size: assignment.burst_size,
        outcome: Outcome::Refused {
            reason: reason.to_string(),
            message: message.to_string(),
        },
        admitted_size,
    }
}

/// Brokers each of the spoke's own Jobs runs (its parallelism; 0 when suspended: a burst
/// scaled to 0), by assignment key.
fn running_sizes(jobs: &[Job], me: &SpokeIdentity) -> BTreeMap<String, i32> {
    jobs.iter()
        .filter_map(|j| match ownership(&j.metadata, me) {
            Ownership::Ours { key, .. } => {
                let spec = j.spec.as_ref();
                let size = if spec.and_then(|s| s.suspend) == Some(true) {
                    0
                } else {
                    spec.and_then(|s| s.parallelism).unwrap_or(1)
                };
                Some((key.to_string(), size))
            }
            _ => None,
        })
        .collect()
}

/// The message of a `NameTaken` refusal: every blocking object and who seems to own it.
fn name_taken_message(taken: &[Taken]) -> String {
    let objects: Vec<String> = taken.iter().map(Taken::to_string).collect();
    format!(
        "{NAME_TAKEN}: refusing this burst rather than taking over objects it did not make: {}; delete or rename them, or rename the burst",
        objects.join("; ")
    )
}
