//! The registry as the gRPC services see it ([`Served`]): a spoke's subscription, its
//! snapshot and reports, and the admins' views, each built as the wire message from the
//! index ([`super`]) under one short lock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use flux_shared::federation::BurstKey;
use flux_shared::federation::policy::Announced;
use flux_shared::federation::proto::{self, Snapshot};
use flux_shared::federation::room::Room;
use tokio::sync::watch;
use tracing::warn;

use super::{ConnectionGuard, McKey, Registry, SpokeState, affected_by_spoke, unix_millis};
use crate::federation::served::{RelayRefusal, RelayTarget};
use crate::federation::served::{ReportOutcome, Served, SubscribeError, Subscription};

impl Served for Registry {
    fn admin_changes(&self) -> watch::Receiver<u64> {
        self.admin.subscribe()
    }

    fn subscribe(
        self: Arc<Self>,
        spoke: &str,
        spoke_version: &str,
        exceptions: Announced,
        labels: BTreeMap<String, String>,
    ) -> Result<Subscription, SubscribeError> {
        if !self.is_primed() {
            return Err(SubscribeError::NotReady);
        }
        let mut inner = self.lock();
        if inner.grants == super::LabelGrants::NotYet {
            // Which labels are its own is not known yet: not let in before.
            return Err(SubscribeError::NotReady);
        }
        let state = inner
            .spokes
            .entry(spoke.to_string())
            .or_insert_with(|| SpokeState::new(&self.epoch));
        if state.connections > 0 {
            state.refused_streams += 1;
            return Err(SubscribeError::AlreadyConnected);
        }
        state.connections += 1;
        state.last_seen = Some(SystemTime::now());
        state.connected_at = state.last_seen;
        state.spoke_version = spoke_version.to_string();
        state.refusal = None;
        state.exceptions = Some(exceptions);
        state.labels = labels;
        let versions = state.tx.subscribe();
        let first = state.connections == 1;
        let ignored = inner
            .spokes
            .get(spoke)
            .map(|s| inner.ignored_labels(spoke, s))
            .unwrap_or_default();
        if !ignored.is_empty() {
            warn!(%spoke, ?ignored, "the spoke announces labels the root did not grant it: ignored (flux-hub join --label grants them)");
        }
        let affected = if first {
            affected_by_spoke(&inner, spoke)
        } else {
            Vec::new()
        };
        self.bump_admin(&mut inner);
        drop(inner);
        for mc in affected {
            let _ = self.changes.send(mc);
        }
        Ok(Subscription {
            versions,
            guard: Box::new(ConnectionGuard {
                registry: self.clone(),
                spoke: spoke.to_string(),
            }),
        })
    }

    fn snapshot(&self, spoke: &str) -> Snapshot {
        let mut inner = self.lock();
        match inner.spokes.get_mut(spoke) {
            None => Snapshot {
                hub_epoch: self.epoch.clone(),
                version: 1,
                assignments: Vec::new(),
                retained_keys: Vec::new(),
                ..Snapshot::default()
            },
            Some(state) => {
                state.sent = state.sent.max(state.version);
                let now = SystemTime::now();
                for slot in state.assignments.values_mut() {
                    slot.sent_at.get_or_insert(now);
                    if slot.dispatched == super::Dispatched::NotYet
                        && slot.assignment.burst_size > 0
                    {
                        slot.dispatched = super::Dispatched::At(std::time::Instant::now());
                    }
                }
                Snapshot {
                    hub_epoch: self.epoch.clone(),
                    version: state.version,
                    assignments: state
                        .assignments
                        .values()
                        .map(|slot| proto::Assignment::clone(&slot.assignment))
                        .collect(),
                    retained_keys: state.retained.iter().map(BurstKey::to_string).collect(),
                    ..Snapshot::default()
                }
            }
        }
    }

    fn set_certificate(&self, spoke: &str, not_after: i64, issuer: &str) {
        let mut inner = self.lock();
        if let Some(state) = inner.spokes.get_mut(spoke)
            && (state.certificate_not_after != Some(not_after)
                || state.certificate_issuer != issuer)
        {
            state.certificate_not_after = Some(not_after);
            state.certificate_issuer = issuer.to_string();
            self.bump_admin(&mut inner);
        }
    }

    fn set_hub_certificates(&self, not_after: i64, ca_not_after: i64) {
        let mut inner = self.lock();
        let millis = (
            not_after.saturating_mul(1000),
            ca_not_after.saturating_mul(1000),
        );
        if inner.hub_certificates != millis {
            inner.hub_certificates = millis;
            self.bump_admin(&mut inner);
        }
    }

    fn set_protocol_revision(&self, spoke: &str, revision: u32) {
        let mut inner = self.lock();
        if let Some(state) = inner.spokes.get_mut(spoke)
            && state.protocol_revision != revision
        {
            state.protocol_revision = revision;
            self.bump_admin(&mut inner);
        }
    }

    fn refuse(&self, spoke: &str, reason: &str) -> bool {
        let mut inner = self.lock();
        // Only pinned spokes get here (their certificate is checked first), so the
        // entries a refusal makes are bounded by the pins, as a Watch's are.
        let state = inner
            .spokes
            .entry(spoke.to_string())
            .or_insert_with(|| SpokeState::new(&self.epoch));
        let new = state.refusal.as_ref().is_none_or(|(_, r)| r != reason);
        state.refusal = Some((SystemTime::now(), reason.to_string()));
        if new {
            self.bump_admin(&mut inner);
        }
        new
    }

    fn report(&self, spoke: &str, request: proto::ReportRequest) -> ReportOutcome {
        // Its text is cut to report_bounds' limits first: it ends up in status and Events.
        // Statuses for keys it is not assigned (and has not been withdrawn from), and
        // versions from another epoch, are ignored.
        let request = super::report_bounds::bound_report(request);
        let now = SystemTime::now();
        let mut outcome = ReportOutcome::default();
        let mut inner = self.lock();
        let current_epoch = request.hub_epoch == self.epoch;
        let state = inner
            .spokes
            .entry(spoke.to_string())
            .or_insert_with(|| SpokeState::new(&self.epoch));
        state.last_seen = Some(now);
        let mut notify: BTreeSet<McKey> = BTreeSet::new();
        let access = cluster_unreachable(request.cluster_access.as_ref());
        let access_changed = state.cluster_unreachable != access;
        state.cluster_unreachable = access;
        // Room crosses the trust line too: checked, or dropped (the statuses still count).
        let room_changed = match request.room.as_ref().map(Room::from_proto) {
            Some(Ok(room)) => {
                let changed = state.room.as_ref().is_none_or(|old| !old.same(&room));
                state.room = Some(room);
                changed
            }
            Some(Err(e)) => {
                warn!(%spoke, error = %e, "dropping a room report that breaks a bound");
                false
            }
            None => false,
        };
        let reach = super::report_bounds::reach(request.root_reach.as_ref());
        let reach_changed = state.reach.as_ref() != Some(&reach);
        state.reach = Some(reach);
        if current_epoch && request.applied_version > state.acknowledged {
            let confirmed_before: Vec<bool> = state
                .withdrawn
                .keys()
                .map(|k| state.confirmed_gone(k))
                .collect();
            state.acknowledged = request.applied_version.min(state.version);
            outcome.applied_after = state.acknowledged_up_to(state.acknowledged);
            for ((key, _), before) in state.withdrawn.iter().zip(confirmed_before) {
                if !before && state.confirmed_gone(key) {
                    notify.insert(key.minicluster());
                }
            }
        }
        for mut status in request.statuses {
            // Parsed once: a key that is no burst key is assigned nothing, so ignored too.
            let Ok(key) = status.key.parse::<BurstKey>() else {
                continue;
            };
            let known = state.assignments.contains_key(&key) || state.withdrawn.contains_key(&key);
            if !known {
                continue;
            }
            if !current_epoch {
                status.observed_version = 0;
            }
            let significant = state.reports.get(&key).is_none_or(|(old, _)| {
                old.phase != status.phase
                    || old.brokers_ready != status.brokers_ready
                    || old.brokers_draining != status.brokers_draining
                    || old.size != status.size
                    || old.observed_version != status.observed_version
                    || old.message != status.message
                    || old.conditions != status.conditions
                    // A policy edit may change only these; the autoscaler reads them.
                    || old.reason != status.reason
                    || old.admitted_size != status.admitted_size
            });
            if significant {
                notify.insert(key.minicluster());
            }
            // The first ready broker of a burst this process dispatched: measured only
            // when it saw the burst with none ready first (a burst adopted running is not
            // a dispatch).
            if let Some(slot) = state.assignments.get_mut(&key)
                && status.brokers_ready > 0
                && slot.dispatched != super::Dispatched::Done
            {
                let saw_none = state
                    .reports
                    .get(&key)
                    .is_some_and(|(old, _)| old.brokers_ready == 0);
                if let (super::Dispatched::At(at), true) = (slot.dispatched, saw_none) {
                    outcome.first_ready.push(at.elapsed());
                }
                slot.dispatched = super::Dispatched::Done;
            }
            state.reports.insert(key, (status, now));
        }
        // A confirmed withdrawal is over (the spoke no longer has the burst): forgotten,
        // with its report, so that bursts renamed over and over do not grow the registry.
        let confirmed: Vec<BurstKey> = state
            .withdrawn
            .keys()
            .filter(|key| state.confirmed_gone(key))
            .cloned()
            .collect();
        for key in confirmed {
            state.withdrawn.remove(&key);
            if !state.assignments.contains_key(&key) {
                state.reports.remove(&key);
            }
        }
        if access_changed {
            notify.extend(affected_by_spoke(&inner, spoke));
        }
        if room_changed || reach_changed {
            // Bursts placed nowhere may fit now, and bursts waiting for their spoke's
            // reach may have their path.
            notify.extend(inner.waiting.iter().cloned());
        }
        self.bump_admin(&mut inner);
        drop(inner);
        for mc in notify {
            let _ = self.changes.send(mc);
        }
        outcome
    }

    fn admin_snapshot(&self, namespace: &str) -> proto::MiniClusterSnapshot {
        let inner = self.lock();
        let miniclusters = inner
            .miniclusters
            .iter()
            .filter(|(mc, _)| namespace.is_empty() || mc.namespace == namespace)
            .map(|(mc, entry)| proto::MiniClusterStatus {
                minicluster: Some(proto::MiniClusterRef {
                    namespace: mc.namespace.clone(),
                    name: mc.name.clone(),
                    uid: entry.info.uid.clone(),
                    generation: entry.info.generation,
                }),
                phase: if entry.deleting {
                    "Deleting".to_string()
                } else {
                    entry.info.phase.clone()
                },
                size: entry.info.size,
                brokers_ready: entry.info.brokers_ready,
                lead_endpoint: entry.info.lead.as_ref().map(proto::Endpoint::from),
                created_unix_millis: entry.info.created_unix_millis,
                bursts: entry
                    .bursts
                    .iter()
                    .map(|b| {
                        let state = inner.spokes.get(&b.spoke);
                        let slot = state.and_then(|s| s.assignments.get(&b.key));
                        let report = state.and_then(|s| s.reports.get(&b.key));
                        let shown = entry.shown.get(&b.name).cloned().unwrap_or_default();
                        proto::BurstStatus {
                            key: b.key.to_string(),
                            burst_name: b.name.clone(),
                            spoke: b.spoke.clone(),
                            spoke_connected: state.is_some_and(|s| s.connections > 0),
                            size: b.size,
                            max_size: b.max_size,
                            brokers_ready: report.map_or(0, |(r, _)| r.brokers_ready),
                            phase: report.map_or(0, |(r, _)| r.phase),
                            assigned_version: slot.map_or(0, |s| s.version),
                            observed_version: report.map_or(0, |(r, _)| r.observed_version),
                            conditions: report
                                .map(|(r, _)| r.conditions.clone())
                                .unwrap_or_default(),
                            message: report.map(|(r, _)| r.message.clone()).unwrap_or_default(),
                            last_report_unix_millis: unix_millis(report.map(|(_, at)| *at)),
                            reason: report.map(|(r, _)| r.reason.clone()).unwrap_or_default(),
                            admitted_size: report.and_then(|(r, _)| r.admitted_size),
                            skipped: b
                                .skipped
                                .iter()
                                .map(|s| proto::SkippedCandidate {
                                    spoke: s.cluster.clone(),
                                    reason: s.reason.clone(),
                                    message: s.message.clone(),
                                })
                                .collect(),
                            path: shown.path.unwrap_or_default(),
                            path_reason: shown.path_reason.unwrap_or_default(),
                            brokers_joined: shown.brokers_joined,
                            hub_phase: shown.phase,
                        }
                    })
                    .collect(),
            })
            .collect();
        proto::MiniClusterSnapshot {
            hub_epoch: self.epoch.clone(),
            version: inner.admin_version,
            miniclusters,
        }
    }

    fn spokes(&self, sees: &dyn Fn(&str) -> bool) -> proto::ListSpokesResponse {
        let inner = self.lock();
        proto::ListSpokesResponse {
            hub_epoch: self.epoch.clone(),
            hub_version: env!("CARGO_PKG_VERSION").to_string(),
            hub_protocol_revision: flux_shared::federation::protocol::REVISION,
            hub_certificate_not_after_unix_millis: inner.hub_certificates.0,
            ca_not_after_unix_millis: inner.hub_certificates.1,
            spokes: inner
                .spokes
                .iter()
                .map(|(name, s)| proto::SpokeInfo {
                    name: name.clone(),
                    connected: s.connections > 0,
                    last_seen_unix_millis: unix_millis(s.last_seen),
                    current_version: s.version,
                    acknowledged_version: s.acknowledged,
                    assignments: u32::try_from(
                        s.assignments
                            .keys()
                            .filter(|key| sees(&key.namespace))
                            .count(),
                    )
                    .unwrap_or(u32::MAX),
                    spoke_version: s.spoke_version.clone(),
                    cluster_unreachable_since_unix_millis: unix_millis(
                        s.cluster_unreachable.as_ref().map(|(since, _)| *since),
                    ),
                    cluster_error: s
                        .cluster_unreachable
                        .as_ref()
                        .map(|(_, e)| e.clone())
                        .unwrap_or_default(),
                    refused_streams: s.refused_streams,
                    certificate_not_after_unix_millis: s
                        .certificate_not_after
                        .map_or(0, |t| t.saturating_mul(1000)),
                    certificate_issuer: s.certificate_issuer.clone(),
                    room_observed_unix_millis: s
                        .room
                        .as_ref()
                        .map_or(0, |r| r.observed_unix_millis),
                    room_error: s
                        .room
                        .as_ref()
                        .and_then(|r| r.error.clone())
                        .unwrap_or_default(),
                    labels: inner
                        .labels_of(name, s)
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .collect(),
                    ignored_labels: inner.ignored_labels(name, s).into_iter().collect(),
                    protocol_revision: s.protocol_revision,
                    refusal: s
                        .refusal
                        .as_ref()
                        .map(|(_, r)| r.clone())
                        .unwrap_or_default(),
                    refused_unix_millis: unix_millis(s.refusal.as_ref().map(|(at, _)| *at)),
                })
                .collect(),
        }
    }

    fn forget_spoke(&self, name: &str) -> Result<bool, String> {
        let mut inner = self.lock();
        let Some(state) = inner.spokes.get(name) else {
            return Ok(false);
        };
        if state.connections > 0 {
            return Err(format!("spoke {name} is still connected; stop it first"));
        }
        if !state.assignments.is_empty() {
            let keys: Vec<String> = state.assignments.keys().map(BurstKey::to_string).collect();
            return Err(format!(
                "spoke {name} still has bursts assigned: {}",
                keys.join(", ")
            ));
        }
        inner.spokes.remove(name);
        self.bump_admin(&mut inner);
        Ok(true)
    }

    fn relay_target(&self, spoke: &str, key: &BurstKey) -> Result<RelayTarget, RelayRefusal> {
        let inner = self.lock();
        let not_assigned = || RelayRefusal::NotAssigned(key.to_string());
        let assigned = inner
            .spokes
            .get(spoke)
            .is_some_and(|s| s.assignments.contains_key(key));
        let entry = inner
            .miniclusters
            .get(&key.minicluster())
            .ok_or_else(not_assigned)?;
        let burst = entry
            .bursts
            .iter()
            .find(|b| b.key == *key && b.spoke == spoke)
            .filter(|_| assigned && !entry.deleting)
            .ok_or_else(not_assigned)?;
        if !burst.relayed {
            return Err(RelayRefusal::NotRelayed(key.to_string()));
        }
        let brokers = usize::try_from(burst.size).unwrap_or(0);
        if brokers == 0 {
            return Err(RelayRefusal::NoBrokers(key.to_string()));
        }
        let lead = entry
            .info
            .relay_to
            .clone()
            .ok_or_else(|| RelayRefusal::NoLead(key.to_string()))?;
        Ok(RelayTarget { lead, brokers })
    }
}

/// A report's `cluster_access` as "unreachable since, error" (`None` while reachable).
fn cluster_unreachable(access: Option<&proto::ClusterAccess>) -> Option<(SystemTime, String)> {
    let access = access?;
    let millis = u64::try_from(access.unreachable_since_unix_millis)
        .ok()
        .filter(|m| *m > 0)?;
    Some((
        UNIX_EPOCH + std::time::Duration::from_millis(millis),
        access.error.clone(),
    ))
}
