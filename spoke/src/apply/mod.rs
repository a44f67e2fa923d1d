//! The snapshot applier: makes the cluster match one snapshot, as named steps of I/O
//! around the pure decisions of [`crate::admit::plan_snapshot`]. [`Applier`] owns what
//! the steps need (the cluster handle, this spoke's identity and settings, the metrics,
//! the acknowledgement it publishes); what the spoke remembers between snapshots is the
//! agent's `State`, lent to [`Applier::apply`].
//!
//! 1. `begin`: a new hub epoch resets the acknowledgements;
//! 2. `observe`: the spoke's own objects, its policy, the bursts' namespaces and Jobs, as
//!    the cluster shows them now (any read that fails stops here: nothing is applied or
//!    deleted on incomplete knowledge);
//! 3. `plan`: [`crate::admit::plan_snapshot`] decides (pure), refusing what does not
//!    render as the hub's or what the policy does not admit;
//! 4. `namespace`: create those the admitted bursts lack;
//! 5. realize each assignment: apply, refuse, hold or keep, tracked for the reports;
//!    applying is `names` (every name it needs is free or already its own, else it is
//!    refused as `NameTaken`) then `write` (its objects, server-side applied; a Job made
//!    for another path to the lead broker is deleted instead, and created anew by a later
//!    pass once it is gone: `writes`, `lead_path`);
//! 6. `relay`: a listener for each relayed burst, its Service pointed at it;
//! 7. `delete` the objects no assignment renders any more;
//! 8. `settle` the tracked outcomes and what the spoke remembers;
//! 9. `finish`: acknowledge the snapshot when everything in it is done, else retry (at the
//!    next report tick, or as soon as a replaced Job is gone).
//!
//! Every step that can fail says so with an [`ApplyError`] variant of its name; the step
//! handling it decides what becomes of the snapshot, and [`Applier::record`] alone logs
//! and counts it (`flux_spoke_errors_total{kind="<step>"}`). The synchronous steps are in
//! `bookkeeping`.
//!
//! Size: over 600 lines because the applier's steps are here in the order they run, one
//! method each, so that what happens to a snapshot reads top to bottom in one place
//! (what has no I/O is in `bookkeeping`, the errors and their logs in `error`, the writes
//! of one assignment in `writes`).

mod bookkeeping;
mod error;
mod lead_path;
mod writes;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use flux_shared::federation::ownership::SpokeIdentity;
use flux_shared::federation::policy::{Level, NamespaceState, PolicyState};
use flux_shared::federation::proto::{Assignment, Snapshot};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::admit::{
    Applied, AssignmentRefusal, Context, Decision, NAME_TAKEN, Planned, plan_snapshot,
};
use crate::agent_config::AgentConfig;
use crate::burst_status::{Outcome, Tracked};
use crate::cluster::{Cluster, Kind, ObjectRef, OwnedObject, Taken};
use crate::metrics::Metrics;
use crate::state::{AppliedSnapshot, State};
use bookkeeping::{
    begin, listed, live_view_modes, probe_leads, refused, running_sizes, settle, unapplied,
};
pub(crate) use error::ApplyError;
use error::{NameCheck, Read, name_taken_message};
use writes::Written;

/// Applies snapshots to the spoke's cluster (the steps at the top of this file).
pub(crate) struct Applier<C: Cluster> {
    cluster: C,
    /// Whose objects are listed, written and deleted.
    identity: SpokeIdentity,
    /// The spoke's own namespace (what the policy says of bursts there).
    namespace: String,
    /// Where relayed bursts' Services point (`None`: relayed bursts fail).
    relay_address: Option<IpAddr>,
    /// How soon a partly applied snapshot is retried (said in the log).
    retry_in: Duration,
    metrics: Arc<Metrics>,
    /// The last snapshot fully applied, published for readiness and tests.
    applied: watch::Sender<Option<AppliedSnapshot>>,
}

/// Why an assignment's objects were not all written, as its tracked outcome needs it.
enum NotWritten {
    /// Names taken by objects the spoke did not make: refuse the assignment.
    Taken(Vec<Taken>),
    /// Anything else (the text the hub is told): retried.
    Failed(String),
    /// Everything but its Job, made for another path and being deleted (`job`, with its
    /// `uid`): created anew once it is gone.
    Replacing {
        job: ObjectRef,
        uid: Option<String>,
        message: String,
    },
}

/// What the cluster shows before a snapshot is decided.
struct Observed {
    owned: Vec<OwnedObject>,
    policy_text: Option<String>,
    policy: PolicyState,
    namespaces: BTreeMap<String, NamespaceState>,
    running: BTreeMap<String, i32>,
    view_modes: BTreeMap<String, flux_shared::api::ViewMode>,
    image_volumes: bool,
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
    /// Keys whose Job, made for another path, is being deleted: the Job, with its uid.
    replacing: BTreeMap<String, (ObjectRef, Option<String>)>,
}

impl<C: Cluster> Applier<C> {
    /// An applier writing to `cluster` as `config` says, counting into `metrics`.
    pub(crate) fn new(config: &AgentConfig, cluster: C, metrics: Arc<Metrics>) -> Applier<C> {
        Applier {
            cluster,
            identity: config.identity.clone(),
            namespace: config.namespace.clone(),
            relay_address: config.relay_address,
            retry_in: config.report_interval,
            metrics,
            applied: watch::channel(None).0,
        }
    }

    /// The last snapshot fully applied (`None` until the first one).
    pub(crate) fn applied(&self) -> watch::Receiver<Option<AppliedSnapshot>> {
        self.applied.subscribe()
    }

    /// Logs and counts the error of a step, under the step's name: the one place the
    /// applier's errors are counted.
    fn record(&self, error: &ApplyError) {
        error.log();
        self.metrics.error(error.kind());
    }

    /// Makes the cluster match `snapshot` (the steps at the top of this file).
    pub(crate) async fn apply(&self, state: &mut State, snapshot: Snapshot) {
        begin(state, &snapshot);
        // A fenced burst's Job was deleted behind what the spoke remembers: a snapshot
        // that still lists it writes it in full.
        for key in state.fencing.awaiting_creation() {
            state.memory.applied.remove(&key);
        }
        let observed = match self.observe(&snapshot).await {
            Ok(observed) => observed,
            Err(e) => return self.record(&e),
        };
        let cx = Context {
            spoke_namespace: &self.namespace,
            policy: &observed.policy,
            namespaces: &observed.namespaces,
            running: &observed.running,
            view_modes: &observed.view_modes,
            image_volumes: observed.image_volumes,
        };
        let plan = plan_snapshot(
            &snapshot,
            &observed.owned,
            &state.memory,
            &self.identity,
            &cx,
        );
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
        let replacing = !realizing.replacing.is_empty();
        state.replacing = realizing.replacing;
        self.finish(state, &snapshot, realizing.failed, replacing);
    }

    /// Step `observe`: the cluster as it is now, or the first read that failed.
    async fn observe(&self, snapshot: &Snapshot) -> Result<Observed, ApplyError> {
        let failed = |read| move |source| ApplyError::Observe { read, source };
        let owned = self
            .cluster
            .owned(&self.identity)
            .await
            .map_err(failed(Read::Owned))?;
        let policy_text = self.cluster.policy().map_err(failed(Read::Policy))?;
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
            let state = self
                .cluster
                .namespace(ns)
                .await
                .map_err(failed(Read::Namespace(ns.to_string())))?;
            namespaces.insert(ns.to_string(), state);
        }
        let jobs = self.cluster.jobs().await.map_err(failed(Read::Jobs))?;
        Ok(Observed {
            owned,
            policy_text,
            policy,
            namespaces,
            running: running_sizes(&jobs, &self.identity),
            view_modes: live_view_modes(&jobs, &self.identity),
            image_volumes: self.cluster.image_volumes(),
        })
    }

    /// Step `namespace`: the namespaces admitted assignments lack, once each, at the
    /// policy's Pod Security level; what became of each (the error's text for the
    /// reports of the bursts in it).
    async fn create_namespaces(
        &self,
        wanted: &BTreeMap<String, Level>,
    ) -> BTreeMap<String, Result<(), String>> {
        let mut created = BTreeMap::new();
        for (namespace, level) in wanted {
            let result = match self.cluster.ensure_namespace(namespace, *level).await {
                Ok(()) => Ok(()),
                Err(source) => {
                    let message = source.to_string();
                    self.record(&ApplyError::Namespace {
                        namespace: namespace.clone(),
                        source,
                    });
                    Err(message)
                }
            };
            created.insert(namespace.clone(), result);
        }
        created
    }

    /// Step 5, realizing one assignment: carries out its decision and tracks the outcome.
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
                    // Counted when its namespace could not be created: not again for
                    // each burst in it.
                    Some(Err(e)) => Err(NotWritten::Failed(e.clone())),
                    _ => {
                        let listed: BTreeSet<&ObjectRef> = owned
                            .iter()
                            .filter(|o| o.key == key)
                            .map(|o| &o.object)
                            .collect();
                        // What tells an older spoke's Job's path
                        // (`ResolvedBurst::relay_service`'s name).
                        let had_relay = listed.contains(&ObjectRef {
                            kind: Kind::Service,
                            namespace: realized.namespace.clone(),
                            name: format!("{}-relay", realized.job),
                        });
                        match self.apply_objects(&realized, &listed, had_relay).await {
                            Ok(Written::All) => Ok(()),
                            Ok(Written::JobReplacing { job, uid, message }) => {
                                Err(NotWritten::Replacing { job, uid, message })
                            }
                            Err(e) => {
                                self.record(&e);
                                Err(match e {
                                    ApplyError::Names {
                                        check: NameCheck::Taken(taken),
                                        ..
                                    } => NotWritten::Taken(taken),
                                    other => NotWritten::Failed(other.reported()),
                                })
                            }
                        }
                    }
                };
                let job = Some((realized.namespace.clone(), realized.job.clone()));
                let size = realized.size;
                match result {
                    Ok(()) => {
                        info!(%key, objects = realized.objects.len(), "assignment applied");
                        state.fencing.created_anew(&key, unix_millis_now());
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
                    Err(NotWritten::Taken(taken)) => {
                        let message = name_taken_message(&taken);
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
                    Err(NotWritten::Failed(message)) => {
                        realizing.failed = true;
                        state.memory.applied.remove(&key);
                        realizing.tracked.push(unapplied(
                            previous,
                            key,
                            job,
                            size,
                            message,
                            admitted_size,
                        ));
                    }
                    Err(NotWritten::Replacing {
                        job: old,
                        uid,
                        message,
                    }) => {
                        // Not remembered as applied: the next pass looks at its Job again.
                        state.memory.applied.remove(&key);
                        realizing.replacing.insert(key.clone(), (old, uid));
                        realizing.tracked.push(unapplied(
                            previous,
                            key,
                            job,
                            size,
                            message,
                            admitted_size,
                        ));
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
                    self.record(&ApplyError::Plan {
                        key: key.clone(),
                        reason: refusal.reason,
                        message: refusal.message.clone(),
                    });
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
                self.remember_held(state, &key, a);
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

    /// A held burst this process did not apply (it restarted since) keeps its relay: its
    /// relay Service is learnt by rendering the assignment held, once per content.
    fn remember_held(&self, state: &mut State, key: &str, a: &Assignment) {
        if state.memory.applied.contains_key(key)
            || state
                .memory
                .held
                .get(key)
                .is_some_and(|h| h.assignment == *a)
        {
            return;
        }
        match flux_shared::federation::assignment::realize(a, &self.identity) {
            Ok(realized) if realized.relay_service.is_some() => {
                state.memory.held.insert(
                    key.to_string(),
                    Applied {
                        assignment: a.clone(),
                        realized,
                    },
                );
            }
            Ok(_) => {
                state.memory.held.remove(key);
            }
            Err(e) => {
                debug!(%key, error = %e, "a held burst does not render: no relay served for it");
                state.memory.held.remove(key);
            }
        }
    }

    /// Step `relay`: a relay listener for every relayed burst that runs, its Service pointed
    /// at it (written again when the Service was, or the port changed); the listeners of
    /// bursts the snapshot no longer lists, or that now connect directly, are closed. A
    /// burst whose relay cannot be served is reported failed with the reason, and the
    /// snapshot retried.
    async fn serve_relays(
        &self,
        state: &mut State,
        listed: &BTreeSet<String>,
        realizing: &mut Realizing,
    ) {
        // A burst that now connects directly needs its listener no more.
        let keep: BTreeSet<String> = listed
            .iter()
            .filter(|k| {
                (state.memory.applied.get(*k)).is_none_or(|a| a.realized.relay_service.is_some())
            })
            .cloned()
            .collect();
        state.relays.retain(&keep);
        // Held bursts this process did not apply keep theirs; a held burst applied since,
        // or no longer listed, is forgotten here.
        let applied = &state.memory.applied;
        state
            .memory
            .held
            .retain(|key, _| listed.contains(key) && !applied.contains_key(key));
        let relayed: Vec<(String, ObjectMeta, i32, String)> = state
            .memory
            .applied
            .iter()
            .chain(state.memory.held.iter())
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
            let result = match self.relay_address {
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
                self.record(&ApplyError::Relay {
                    key: key.clone(),
                    message: message.clone(),
                });
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

    /// Step `delete`: deletes `delete`, except the objects of a key refused now for a taken name
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
                Err(source) => {
                    realizing.failed = true;
                    errors
                        .entry(o.key.clone())
                        .or_insert_with(|| source.to_string());
                    self.record(&ApplyError::Delete {
                        key: o.key.clone(),
                        object: o.object.clone(),
                        source,
                    });
                }
            }
        }
        errors
    }

    /// Step `finish`: acknowledges the snapshot when nothing `failed` and no Job is being
    /// `replacing`; else it is retried.
    fn finish(&self, state: &mut State, snapshot: &Snapshot, failed: bool, replacing: bool) {
        if failed {
            warn!(retry_in = ?self.retry_in, "snapshot partly applied; retrying");
            return;
        }
        if replacing {
            info!(
                "a burst's Job is being replaced; the snapshot is applied once it is created anew"
            );
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

/// Now, Unix milliseconds.
fn unix_millis_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests;
