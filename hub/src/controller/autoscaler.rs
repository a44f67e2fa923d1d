//! The lead brokers' reporters read, and the autoscaler. Every MiniCluster that declares
//! bursts has its lead broker's reporter read ([`crate::autoscale::queue`]): what it sees
//! of each burst's brokers goes to [`Context::lead_views`] (a change wakes the reconcile,
//! whose status shows a burst Running once it joined), every [`VIEW_FAST`] while a burst
//! waits to join and every [`VIEW_SLOW`] otherwise.
//!
//! With `flux.bursting.autoscale` it is also read every `intervalSeconds`, and the pure
//! policy ([`crate::autoscale::decide`]) decides its bursts' sizes; the changes are patched
//! into the MiniCluster's spec like `flux-hub burst scale` does, so the API object stays
//! the source of truth and the reconcile and the spokes do the rest. One Event per change.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flux_shared::api::MiniCluster;
use flux_shared::elasticity;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use tracing::{Instrument as _, info, info_span, warn};

use crate::autoscale::{decide, queue};
use crate::controller::context::{Context, mc_key};
use crate::controller::desired::stored_certificate;
use crate::controller::federate::placement;
use crate::controller::status::events;
use crate::resize::{self, SetSizeError};
use flux_shared::federation::McKey;

/// How long one read of a reporter may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(3);
/// Field manager of the autoscaler's size patches.
const MANAGER: &str = "flux-hub-autoscaler";

/// What the autoscaler remembers of one MiniCluster between polls.
#[derive(Default)]
pub struct Tracked {
    next: Option<Instant>,
    idle_since: HashMap<String, f64>,
    /// Hosts added for a waiting job, and when that job was submitted.
    growing: Vec<(Vec<String>, f64)>,
    last_note: Option<String>,
    /// Whether the ignored queue-reporter annotation was warned about.
    annotation_ignored: bool,
}

/// How often the lead of a MiniCluster with a burst waiting to join is read.
pub const VIEW_FAST: Duration = Duration::from_secs(2);
/// How often the lead of any other bursting MiniCluster is read.
pub const VIEW_SLOW: Duration = Duration::from_secs(15);

/// How often `mc`'s lead is read for its view: [`VIEW_FAST`] while one of its bursts has
/// brokers ready that the status does not show joined, or its spoke is away; else
/// [`VIEW_SLOW`].
fn view_interval(mc: &MiniCluster) -> Duration {
    // Also while a spoke is away: whether its bursts' brokers still serve the lead decides
    // whether its cluster is lost.
    let waiting = mc.status.as_ref().is_some_and(|s| {
        s.bursts.iter().any(|b| {
            b.phase == flux_shared::api::BurstStatusPhase::Joining
                || b.phase == flux_shared::api::BurstStatusPhase::Unreachable
                || (b.brokers_ready > 0 && b.brokers_joined.unwrap_or(0) == 0)
        })
    });
    if waiting { VIEW_FAST } else { VIEW_SLOW }
}

/// Polls of lead brokers' queues in flight at once: each may read and parse up to 4 MiB
/// from a tenant's pod, so their number, not the MiniClusters', bounds the memory.
const CONCURRENT_POLLS: usize = 8;

/// Runs until the hub stops: polls every autoscaled MiniCluster of `miniclusters` when due,
/// the due ones concurrently, at most [`CONCURRENT_POLLS`] at a time (a reporter that does
/// not answer delays no other beyond its timeout).
///
/// `allow_annotation` (`--allow-queue-reporter-annotation`): whether the
/// [`queue::REPORTER_ANNOTATION`] may redirect the hub's reads (with the reporter's bearer
/// token) to an address a MiniCluster's author picks. Without it the annotation is
/// ignored, with a warning once per MiniCluster.
pub async fn run(ctx: Arc<Context>, miniclusters: Store<MiniCluster>, allow_annotation: bool) {
    let mut tracked: HashMap<McKey, Tracked> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = Instant::now();
        let mut seen = std::collections::HashSet::new();
        let mut due = Vec::new();
        for mc in miniclusters.state() {
            if !mc.spec.is_bursting_root() || mc.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let key = mc_key(&mc);
            seen.insert(key.clone());
            let mut state = tracked.remove(&key).unwrap_or_default();
            if state.next.is_some_and(|next| now < next) {
                tracked.insert(key, state);
                continue;
            }
            let every = match mc.spec.autoscale() {
                Some(settings) => settings.interval().min(view_interval(&mc)),
                None => view_interval(&mc),
            };
            state.next = Some(now + every);
            due.push((key, mc, state));
        }
        let polls = due.into_iter().map(|(key, mc, mut state)| {
            let ctx = ctx.clone();
            async move {
                let span = info_span!("lead_view", namespace = %key.namespace, name = %key.name);
                let annotation = mc
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(queue::REPORTER_ANNOTATION))
                    .cloned();
                let annotated = honoured(annotation.as_deref(), allow_annotation);
                if annotation.is_some() && annotated.is_none() && !state.annotation_ignored {
                    state.annotation_ignored = true;
                    warn!(parent: &span, annotation = queue::REPORTER_ANNOTATION, "ignoring the annotation: the hub reads the queue at the lead broker's pod unless started with --allow-queue-reporter-annotation");
                }
                // The annotation, else the lead pod's address as cached, else its cluster
                // DNS name (a pod not cached yet).
                let reporter = |plan: &flux_shared::plan::Plan| match &annotated {
                    Some(address) => address.clone(),
                    None => crate::controller::federate::lead_pod_ip(
                        &ctx.stores,
                        &plan.namespace,
                        &plan.name,
                    )
                    .map_or_else(
                        || queue::address(plan),
                        |ip| queue::address_at(&ip),
                    ),
                };
                poll(&ctx, &mc, &mut state, &reporter)
                    .instrument(span)
                    .await;
                (key, state)
            }
        });
        let done: Vec<(McKey, Tracked)> = futures::StreamExt::collect(
            futures::StreamExt::buffer_unordered(futures::stream::iter(polls), CONCURRENT_POLLS),
        )
        .await;
        tracked.extend(done);
        tracked.retain(|k, _| seen.contains(k));
        ctx.lead_views.retain(|k| seen.contains(k));
    }
}

/// The address the queue-reporter annotation names, if the hub honours it: only when
/// started with `--allow-queue-reporter-annotation`, since the hub sends the reporter's
/// bearer token wherever it points.
fn honoured(annotation: Option<&str>, allowed: bool) -> Option<String> {
    annotation
        .filter(|a| allowed && !a.trim().is_empty())
        .map(str::to_string)
}

/// The most a burst may grow to: its `maxSize`, or less when its spoke's policy admits
/// less (`status.bursts[].admittedSize`, as last reported). Never below its current size:
/// a stricter policy stops growth, it does not shrink a burst.
fn admitted_max(mc: &MiniCluster, burst: &str, size: i32, max_size: i32) -> i32 {
    let admitted = mc
        .status
        .as_ref()
        .and_then(|s| s.bursts.iter().find(|b| b.name == burst))
        .and_then(|b| b.admitted_size);
    match admitted {
        Some(admitted) => max_size.min(admitted.max(size)),
        None => max_size,
    }
}

/// How many more brokers burst `index` can have placed now: what its spoke's nodes have
/// room for (its `cluster`, or the spoke it is placed on); for a burst that names
/// candidates and runs nowhere yet, the most any connected candidate that admits it has.
/// `None` when not known (a spoke that does not report its room).
fn room_for(
    ctx: &Context,
    mc: &MiniCluster,
    plan: &flux_shared::plan::Plan,
    index: usize,
) -> Option<i32> {
    let burst = &plan.bursts[index];
    let placed = mc
        .status
        .as_ref()
        .and_then(|s| s.bursts.iter().find(|b| b.name == burst.name))
        .map(|b| b.cluster.clone())
        .filter(|c| !c.is_empty());
    let runs_somewhere = burst.size > 0 && placed.is_some();
    let spokes: Vec<String> = match (&placed, burst.candidates.is_empty()) {
        (Some(spoke), _) if runs_somewhere || burst.candidates.is_empty() => vec![spoke.clone()],
        (None, true) => vec![burst.cluster.clone()],
        _ => crate::federation::placement::expand(
            &burst.candidates,
            &flux_shared::federation::assignment_key(&plan.namespace, &plan.name, &burst.name),
            |l| ctx.registry.spokes_matching(l),
        ),
    };
    // Rendered only when a spoke reports a room to count it against.
    let shape =
        crate::federation::placement::LazyShape::new(|| placement::burst_shape(plan, index));
    let facts = ctx.registry.placement_facts(&spokes, &plan.namespace);
    let mut best: Option<i32> = Some(0);
    for f in facts.iter().filter(|f| f.connected) {
        let room = f.room.as_ref()?;
        if !room.policy.admits_namespace(&plan.namespace) {
            continue;
        }
        let fits = i32::try_from(room.fits(shape.get())?).unwrap_or(i32::MAX);
        best = best.max(Some(fits.min(room.policy.admits(0, 0))));
    }
    best
}

/// One poll of one MiniCluster: read its lead's reporter (at the address `reporter` gives
/// for its plan: [`queue::address`] in the cluster), keep what it sees of the bursts, and
/// for an autoscaled one decide and apply.
pub async fn poll(
    ctx: &Context,
    mc: &MiniCluster,
    state: &mut Tracked,
    reporter: &dyn Fn(&flux_shared::plan::Plan) -> String,
) {
    let key = mc_key(mc);
    let autoscaled = mc.spec.autoscale().is_some();
    // The spec the reconcile applies: a refused change is not scaled on top of.
    let plan = match elasticity::effective(mc).map(|e| e.plan()) {
        Ok(Ok(plan)) => plan,
        Ok(Err(_)) | Err(_) => {
            if autoscaled {
                ctx.metrics.autoscale_decision("refused");
            }
            return;
        }
    };
    let Some(cert) = stored_certificate(
        ctx,
        &key.namespace,
        &key.name,
        mc.metadata.uid.as_deref().unwrap_or_default(),
    ) else {
        // No Secret yet: the instance is not there either.
        return;
    };
    let address = reporter(&plan);
    let read = queue::fetch(&address, &queue::token(&cert), FETCH_TIMEOUT).await;
    let at = std::time::SystemTime::now();
    let queue = match read {
        Ok(q) => q,
        Err(error) => {
            if autoscaled {
                ctx.metrics.autoscale_decision("unreachable");
            }
            if ctx.lead_views.failed(&key, error.to_string(), at) {
                info!(%error, "the lead broker's reporter cannot be read");
                ctx.registry.wake(key);
            }
            return;
        }
    };
    let hosts = queue.hosts.iter().map(|h| (h.host.as_str(), h.online));
    if ctx.lead_views.record(&key, &plan, hosts, at) {
        ctx.registry.wake(key.clone());
    }
    if autoscaled {
        autoscale(ctx, mc, state, &plan, &queue).await;
    }
}

/// The autoscaler's part of a poll: decide from `queue` and apply.
async fn autoscale(
    ctx: &Context,
    mc: &MiniCluster,
    state: &mut Tracked,
    plan: &flux_shared::plan::Plan,
    queue: &decide::Queue,
) {
    let McKey {
        namespace: ns,
        name,
    } = mc_key(mc);
    let Some(settings) = mc.spec.autoscale() else {
        return;
    };

    state.idle_since = decide::remember_idle(&state.idle_since, queue);
    state.growing.retain(|(hosts, submitted)| {
        let online = hosts
            .iter()
            .all(|h| queue.hosts.iter().any(|q| &q.host == h && q.online));
        if online {
            ctx.metrics
                .autoscale_pending_to_online((queue.now - submitted).max(0.0));
        }
        // Give up on growths that never came online within a day.
        !online && queue.now - submitted < 86_400.0
    });
    let bursts: Vec<decide::Burst> = plan
        .bursts
        .iter()
        .enumerate()
        .filter(|(_, b)| !b.retired)
        .map(|(index, b)| decide::Burst {
            name: b.name.clone(),
            size: b.size,
            min: b.min_size,
            max: admitted_max(mc, &b.name, b.size, b.max_size),
            room: room_for(ctx, mc, plan, index),
        })
        .collect();
    let decision = decide::decide(
        settings,
        &plan.name,
        plan.spec.size,
        &bursts,
        queue,
        &state.idle_since,
    );
    if decision.note != state.last_note {
        if let Some(note) = &decision.note {
            events::publish(ctx, mc, EventType::Warning, "BurstCannotHelp", note.clone()).await;
        }
        state.last_note = decision.note.clone();
    }
    let outcome = if decision.changes.is_empty() {
        if decision.note.is_some() {
            "unsatisfiable"
        } else {
            "none"
        }
    } else if decision.grows() {
        "grow"
    } else {
        "shrink"
    };
    ctx.metrics.autoscale_decision(outcome);
    for change in decision.changes {
        let target = resize::Target {
            namespace: &ns,
            name: &name,
            burst: &change.burst,
        };
        let up = change.to > change.from;
        match resize::set_size(&ctx.client, &ctx.metrics, &target, change.to, MANAGER).await {
            Ok(_) => {
                ctx.metrics.autoscale_change(
                    if up { "up" } else { "down" },
                    if up { "jobs_waiting" } else { "idle" },
                );
                if let Some(submitted) = change.for_job_submitted {
                    let hosts = (change.from..change.to)
                        .map(|i| format!("{}-{i}", change.burst))
                        .collect();
                    state.growing.push((hosts, submitted));
                }
                events::publish(
                    ctx,
                    mc,
                    EventType::Normal,
                    if up {
                        "BurstScaledUp"
                    } else {
                        "BurstScaledDown"
                    },
                    format!(
                        "burst {}: size {} -> {}: {}",
                        change.burst, change.from, change.to, change.reason
                    ),
                )
                .await;
            }
            Err(SetSizeError::Refused(refusal)) => {
                ctx.metrics.autoscale_decision("refused");
                warn!(burst = %change.burst, reason = %refusal.message, "autoscaling refused");
            }
            Err(error) => {
                ctx.metrics.autoscale_decision("error");
                warn!(burst = %change.burst, %error, "autoscaling failed; next poll retries");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::admitted_max;
    use flux_shared::api::MiniCluster;

    fn with_admitted(admitted: Option<i32>) -> MiniCluster {
        let mut mc: MiniCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "flux-framework.org/v1alpha2",
            "kind": "MiniCluster",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"size": 1, "containers": [{"image": "app"}]},
            "status": {"bursts": [{"name": "b", "cluster": "gke", "phase": "Running"}]},
        }))
        .unwrap();
        if let Some(s) = mc.status.as_mut() {
            s.bursts[0].admitted_size = admitted;
        }
        mc
    }

    #[test]
    fn the_reporter_annotation_is_honoured_only_when_allowed() {
        use super::honoured;
        assert_eq!(honoured(Some("127.0.0.1:9"), false), None);
        assert_eq!(
            honoured(Some("127.0.0.1:9"), true).as_deref(),
            Some("127.0.0.1:9")
        );
        assert_eq!(honoured(Some(" "), true), None);
        assert_eq!(honoured(None, true), None);
    }

    #[test]
    fn the_spokes_admitted_size_caps_growth_and_never_shrinks() {
        assert_eq!(admitted_max(&with_admitted(None), "b", 2, 8), 8);
        assert_eq!(admitted_max(&with_admitted(Some(5)), "b", 2, 8), 5);
        assert_eq!(admitted_max(&with_admitted(Some(20)), "b", 2, 8), 8);
        assert_eq!(
            admitted_max(&with_admitted(Some(1)), "b", 3, 8),
            3,
            "a stricter policy stops growth, no more"
        );
        assert_eq!(
            admitted_max(&with_admitted(Some(0)), "other", 0, 8),
            8,
            "another burst's figure"
        );
    }
}
