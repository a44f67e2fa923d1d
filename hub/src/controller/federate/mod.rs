//! Stage "federate", for a MiniCluster with bursts: keep the finalizer, resolve the lead
//! broker's endpoint, build each burst's assignment, and publish them to the registry that
//! spokes receive their snapshots from.
//!
//! Also the deleted MiniCluster's bursts (`finalize`) and the registry rebuilt at
//! start-up (`rebuild`).

pub(in crate::controller) mod finalize;
pub(in crate::controller) mod path;
pub(in crate::controller) mod placement;
pub mod rebuild;

use std::time::SystemTime;

use flux_shared::api::{LeadBrokerStatus, MiniCluster, MiniClusterStatus};
use flux_shared::federation::assignment::{self, SpokeAssignment};
use flux_shared::federation::{BurstKey, McKey, parts};
use flux_shared::plan::{Plan, Role};
use flux_shared::render;
use flux_shared::validate::{Exceptions, describe_violations, liftable, unsafe_burst_except};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use tracing::warn;

use crate::controller::apply::ownership::{Holder, holder};
use crate::controller::apply::pod_labels::COMPLETION_INDEX;
use crate::controller::context::{ApiError, Context, kube_err, mc_key};
use crate::controller::status::bursts::{ASSIGNMENT_TOO_LARGE, OVER_BUDGET, UNSAFE_BURST};
use crate::controller::watch::stores::{Stores, get};
use crate::federation::placement::Placed;
use crate::federation::{self, BurstInfo, Disposition, McInfo, lead};

/// What the federation decided in one reconcile of a planned MiniCluster.
pub struct Federated {
    /// The lead broker's endpoint, when known.
    pub(in crate::controller) lead: Option<LeadBrokerStatus>,
    /// The declared bursts.
    pub(in crate::controller) bursts: Vec<BurstInfo>,
    /// What to do with them: the one thing the registry is told.
    pub(in crate::controller) disposition: Disposition,
    /// Where the bursts that name candidates were placed.
    pub(in crate::controller) placed: Placed,
}

/// Whether the bursts of a MiniCluster may be sent ([`unsafe_refusal`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::controller) enum Safety {
    /// Safe for every spoke they go to.
    Safe,
    /// Not assigned, with the message (starting with [`UNSAFE_BURST`]).
    Refused(String),
    /// They need what a spoke's policy must allow, and that spoke has not said yet what it
    /// allows (not connected since this hub started): held as they are until it does.
    Unknown(String),
}

/// Whether the bursts of `plan` may be sent: the checks every spoke applies before it
/// creates anything ([`flux_shared::validate::unsafe_burst_except`]), run here so the
/// author hears at once, with what each burst's spoke announced its policy lets through
/// (`exceptions_of(spoke)`; `None` for a spoke that has not connected to this hub yet).
/// The hub does not know a spoke's namespace: the default one is checked.
pub(in crate::controller) fn unsafe_refusal(
    plan: &Plan,
    exceptions_of: impl Fn(&str) -> Option<Exceptions>,
) -> Safety {
    let mut spokes: Vec<&str> = plan
        .bursts
        .iter()
        .filter(|b| !b.retired)
        .map(|b| b.cluster.as_str())
        // A burst placed nowhere goes nowhere.
        .filter(|spoke| !spoke.is_empty())
        .collect();
    spokes.sort_unstable();
    spokes.dedup();
    let mut refused: Vec<String> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut lifted = false;
    for spoke in spokes {
        let exceptions = exceptions_of(spoke);
        lifted |= exceptions.as_ref().is_some_and(|e| !e.is_empty());
        let violations = unsafe_burst_except(
            &plan.spec,
            &plan.namespace,
            None,
            exceptions.as_ref().unwrap_or(&Exceptions::default()),
        );
        if violations.is_empty() {
            continue;
        }
        let said = format!("spoke {spoke}: {}", describe_violations(&violations));
        // Not known yet, and nothing a policy could not lift: wait for the spoke.
        if exceptions.is_none() && violations.iter().all(liftable) {
            unknown.push(said);
        } else {
            refused.push(said);
        }
    }
    if !refused.is_empty() {
        Safety::Refused(format!(
            "{UNSAFE_BURST}: not assigned, a burst may not have this in another cluster{}: {}",
            if lifted {
                ""
            } else {
                " (unless that cluster's policy lists it in a namespace rule's allow)"
            },
            refused.join("; ")
        ))
    } else if !unknown.is_empty() {
        Safety::Unknown(format!(
            "waiting for the spoke to connect and say what its policy allows, which this burst needs: {}",
            unknown.join("; ")
        ))
    } else {
        Safety::Safe
    }
}

/// Bursts: keep the finalizer, resolve the lead broker's endpoint, build the assignments.
pub(in crate::controller) async fn federate(
    ctx: &Context,
    mc: &MiniCluster,
    plan: &Plan,
    cert: &str,
    ns: &str,
    name: &str,
) -> Result<Federated, ApiError> {
    let now = SystemTime::from((ctx.now)().0);
    let placing = placement::place(ctx, mc, plan, now);
    let (plan, placed) = match placing {
        Some((plan, placed)) => (plan, placed),
        None => (plan.clone(), Placed::default()),
    };
    let (routed, routes) = path::route(ctx, mc, plan);
    let plan = &routed;
    let mut bursts = burst_infos(plan);
    for b in &mut bursts {
        if let Some(p) = placed.bursts.get(&b.name) {
            b.skipped.clone_from(&p.skipped);
        }
        b.route = routes.get(&b.name).cloned();
    }
    let placing_waits = placed
        .bursts
        .values()
        .any(|b| b.since.is_none() || !b.held_by.is_empty());
    let undecided = routes
        .values()
        .any(|c| matches!(c, crate::federation::path::Choice::Undecided(_)));
    // Woken when a spoke connects, or reports its room or its reach.
    ctx.registry
        .set_waiting(&mc_key(mc), placing_waits || undecided);
    if bursts.is_empty() {
        // Bursts removed from the spec: release the finalizer once spokes confirmed.
        if has_finalizer(mc) && !ctx.registry.has_unconfirmed_withdrawals(&mc_key(mc)) {
            set_finalizers(ctx, mc, finalizers_but_ours(mc)).await?;
        }
        return Ok(Federated {
            lead: None,
            bursts,
            disposition: Disposition::Assign(Vec::new()),
            placed,
        });
    }
    if !has_finalizer(mc) {
        let mut all: Vec<String> = mc.finalizers().to_vec();
        all.push(federation::FINALIZER.to_string());
        set_finalizers(ctx, mc, all).await?;
    }
    let previous = mc.status.as_ref().and_then(|s| s.lead_broker.as_ref());
    let node_port = own_lead_service(&ctx.stores, mc, ns, &render::lead_service_name(&plan.name))
        .and_then(|s| s.spec.as_ref()?.ports.as_ref()?.first()?.node_port);
    let lead_node = lead_pod_node(&ctx.stores, ns, name);
    let spec_address = plan
        .spec
        .flux()
        .bursting
        .as_ref()
        .and_then(|b| b.lead_address.as_deref());
    let mut inputs = lead::Inputs {
        spec_address,
        flag_address: ctx.lead_address.as_deref(),
        node_port,
        lead_node: lead_node.as_deref(),
        node_addresses: None,
        previous,
    };
    let node_addresses;
    if plan.has_direct_bursts()
        && lead::needs_node_lookup(&inputs)
        && let Some(node) = lead_node.as_deref()
    {
        let api: Api<Node> = Api::all(ctx.client.clone());
        let found = api
            .get_opt(node)
            .await
            .map_err(kube_err(format!("reading Node {node}")))?;
        node_addresses = found.and_then(|n| n.status?.addresses).unwrap_or_default();
        inputs.node_addresses = Some(&node_addresses);
    }
    let (lead, waiting) = match lead::resolve(&inputs) {
        Ok(lead) => (Some(lead), None),
        // Relayed bursts reach the lead through the hub: no external endpoint to wait for.
        Err(_) if !plan.has_direct_bursts() => (None, None),
        Err(reason) => (None, Some(reason)),
    };
    let safety = unsafe_refusal(plan, |spoke| {
        ctx.registry.exceptions(spoke, &plan.namespace)
    });
    let (refused, held) = match safety {
        Safety::Safe => (None, None),
        Safety::Refused(m) => (Some(m), None),
        Safety::Unknown(m) => (None, Some(m)),
    };
    let endpoint = lead.as_ref().map(|l| flux_shared::plan::Endpoint {
        address: l.address.clone(),
        port: l.port,
    });
    let assignments = match &endpoint {
        // Unsafe, or not known to be safe: nothing is sent (the spoke would refuse it).
        _ if refused.is_some() || held.is_some() => Vec::new(),
        // Relayed bursts need no external endpoint; one that connects directly does.
        None if plan.has_direct_bursts() => Vec::new(),
        endpoint => {
            // Serialising a validated spec cannot fail; should it, nothing is sent and
            // the reason shows in the bursts' status.
            match assignment::build(plan, cert, endpoint.as_ref()) {
                Ok(a) => a,
                Err(e) => {
                    warn!(error = %e, "cannot build assignments");
                    return Ok(Federated {
                        lead,
                        bursts,
                        disposition: Disposition::Wait(e.to_string()),
                        placed,
                    });
                }
            }
        }
    };
    // An assignment carries the whole spec: one too large to send is refused on this
    // MiniCluster alone (no spoke's snapshot is held up by it).
    let refused = refused
        .or_else(|| too_large_refusal(&assignments))
        .or_else(|| over_budget_refusal(&assignments));
    let disposition = match (refused, held, waiting) {
        (Some(why), _, _) => Disposition::Refuse(why),
        (None, Some(why), _) => Disposition::Hold(why),
        // Nothing could be built (the lead's endpoint is not known): not a reason to stop
        // what runs.
        (None, None, Some(why)) if assignments.is_empty() => Disposition::Wait(why),
        (None, None, _) => {
            let mut assignments = assignments;
            // A burst moving to another spoke is sent there once the one it leaves
            // confirms it gone: no two clusters start brokers of the same ranks.
            assignments.retain(|a| {
                placed
                    .bursts
                    .get(&a.assignment.burst_name)
                    .is_none_or(|p| p.held_by.is_empty())
            });
            // A burst whose path is not chosen yet is sent once it is.
            assignments.retain(|a| path::undecided(&routes, &a.assignment.burst_name).is_none());
            Disposition::Assign(assignments)
        }
    };
    Ok(Federated {
        lead,
        bursts,
        disposition,
        placed,
    })
}

/// Why the bursts are not assigned when `assignments` together hold more than one
/// MiniCluster's budget ([`parts::MAX_MINICLUSTER_BYTES`], a shared spec counted once).
pub(in crate::controller) fn over_budget_refusal(
    assignments: &[SpokeAssignment],
) -> Option<String> {
    let held = parts::held_bytes(assignments.iter().map(|a| &a.assignment));
    (held > parts::MAX_MINICLUSTER_BYTES).then(|| {
        format!(
            "{OVER_BUDGET}: not assigned, the {} bursts' assignments hold {} KiB together, above the {} KiB one MiniCluster may have in the federation (fewer bursts, or a smaller spec: keep large scripts in a ConfigMap volume)",
            assignments.len(),
            held / 1024,
            parts::MAX_MINICLUSTER_BYTES / 1024
        )
    })
}

/// Why the bursts are not assigned when one of `assignments` is larger than a spoke can
/// receive ([`parts::MAX_ASSIGNMENT_BYTES`]).
pub(in crate::controller) fn too_large_refusal(assignments: &[SpokeAssignment]) -> Option<String> {
    let (a, size) = assignments
        .iter()
        .find_map(|a| Some((a, parts::too_large(&a.assignment)?)))?;
    Some(format!(
        "{ASSIGNMENT_TOO_LARGE}: not assigned, the assignment of burst {} is {} KiB, above the {} KiB a spoke receives (it carries the whole MiniCluster spec: keep large scripts in a ConfigMap volume instead)",
        a.assignment.burst_name,
        size / 1024,
        parts::MAX_ASSIGNMENT_BYTES / 1024
    ))
}

/// Stage "publish": `fed`'s decision to the registry, in one call (each spoke gets its own
/// assignments in its next snapshot), with what admin clients see of `mc` taken from
/// `status` (as computed in this pass). Returns the decision as the status shows it.
pub(in crate::controller) fn publish(
    ctx: &Context,
    mc: &MiniCluster,
    status: &MiniClusterStatus,
    lead: Option<&LeadBrokerStatus>,
    bursts: Vec<BurstInfo>,
    disposition: Disposition,
) -> Disposition {
    let summary = disposition.summary();
    let info = mc_info(mc, status, lead, relay_to(&ctx.stores, mc));
    ctx.registry.record(&mc_key(mc), info, bursts, disposition);
    let (connected, assignments) = ctx.registry.counts();
    ctx.metrics.set_federation(connected, assignments);
    ctx.metrics.fleet.set_bursts(
        &mc_key(mc).to_string(),
        status
            .bursts
            .iter()
            .map(|b| (b.cluster.as_str(), b.phase.as_str())),
    );
    summary
}

/// A MiniCluster whose spec cannot be applied keeps its bursts running as they are: its
/// spokes are told to retain what they run for bursts the registry has no assignment for
/// (after a hub restart), taken from the status.
pub(in crate::controller) fn retain_from_status(ctx: &Context, mc: &MiniCluster) {
    let key = mc_key(mc);
    let bursts: Vec<BurstInfo> = mc
        .status
        .iter()
        .flat_map(|s| s.bursts.iter())
        .map(|b| BurstInfo {
            key: BurstKey::new(&key.namespace, &key.name, &b.name),
            name: b.name.clone(),
            spoke: b.cluster.clone(),
            size: b.size,
            max_size: b.declared_hosts(),
            relayed: b.path.as_deref() == Some(flux_shared::api::burst_path::RELAY),
            skipped: Vec::new(),
            route: None,
        })
        .collect();
    if !bursts.is_empty() {
        ctx.registry.retain(&key, &bursts);
    }
}

/// `plan` with each burst that names candidates placed where `mc`'s status says it runs,
/// and each burst whose path the hub chooses on the path it runs with there (after a
/// restart, before any placement or path is decided again).
pub(in crate::controller) fn placed_as_in_status(mc: &MiniCluster, plan: Plan) -> Plan {
    let plan = path::as_in_status(mc, plan);
    if plan.bursts.iter().all(|b| b.candidates.is_empty()) {
        return plan;
    }
    let bursts = mc
        .status
        .as_ref()
        .map(|s| s.bursts.as_slice())
        .unwrap_or_default();
    let names: Vec<String> = plan.bursts.iter().map(|b| b.name.clone()).collect();
    plan.place(|index| {
        bursts
            .iter()
            .find(|b| b.name == names[index])
            .map(|b| b.cluster.clone())
            .filter(|c| !c.is_empty())
    })
}

/// The bursts of `plan` that run (a retired one has no assignment and no status).
pub fn burst_infos(plan: &Plan) -> Vec<BurstInfo> {
    plan.bursts
        .iter()
        .enumerate()
        .filter(|(_, b)| !b.retired)
        .map(|(index, b)| BurstInfo {
            key: BurstKey::new(&plan.namespace, &plan.name, &b.name),
            name: b.name.clone(),
            spoke: b.cluster.clone(),
            size: plan
                .target(&Role::Burst {
                    index,
                    lead: flux_shared::plan::Endpoint {
                        address: String::new(),
                        port: 0,
                    },
                })
                .map_or(b.size, |t| t.size),
            max_size: b.max_size,
            relayed: b.relay,
            skipped: Vec::new(),
            route: None,
        })
        .collect()
}

/// The MiniCluster's finalizers without the hub's.
pub(in crate::controller) fn finalizers_but_ours(mc: &MiniCluster) -> Vec<String> {
    mc.finalizers()
        .iter()
        .filter(|f| *f != federation::FINALIZER)
        .cloned()
        .collect()
}

pub(in crate::controller) fn has_finalizer(mc: &MiniCluster) -> bool {
    mc.finalizers().iter().any(|f| f == federation::FINALIZER)
}

/// Replace the MiniCluster's finalizers, guarded by its resourceVersion (a concurrent
/// change makes this fail with 409 and the reconcile retry).
pub(in crate::controller) async fn set_finalizers(
    ctx: &Context,
    mc: &MiniCluster,
    finalizers: Vec<String>,
) -> Result<(), ApiError> {
    let ns = mc.namespace().unwrap_or_default();
    let name = mc.name_any();
    let mut metadata = serde_json::json!({ "finalizers": finalizers });
    if let Some(rv) = &mc.metadata.resource_version {
        metadata["resourceVersion"] = serde_json::Value::String(rv.clone());
    }
    let api: Api<MiniCluster> = Api::namespaced(ctx.client.clone(), &ns);
    match api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({ "metadata": metadata })),
        )
        .await
    {
        Ok(_) => {
            ctx.metrics.api_write("MiniCluster", "patch");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(kube_err(format!(
            "updating finalizers of MiniCluster {ns}/{name}"
        ))(e)),
    }
}

/// The node running the lead broker (completion index 0) pod of Job `job`.
pub(in crate::controller) fn lead_pod_node(stores: &Stores, ns: &str, job: &str) -> Option<String> {
    lead_pods(stores, ns, job).find_map(|p| p.spec.as_ref()?.node_name.clone())
}

/// The address of the lead broker pod of Job `job` in `ns`, from the cache.
pub(in crate::controller) fn lead_pod_ip(stores: &Stores, ns: &str, job: &str) -> Option<String> {
    lead_pods(stores, ns, job).find_map(|p| p.status.as_ref()?.pod_ip.clone())
}

/// The (not deleted) index-0 pods of Job `job` in `ns`.
fn lead_pods(
    stores: &Stores,
    ns: &str,
    job: &str,
) -> impl Iterator<Item = std::sync::Arc<k8s_openapi::api::core::v1::Pod>> {
    stores
        .broker_pods
        .of_job(ns, job)
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.labels()
                .get(render::labels::COMPLETION_INDEX)
                .map(String::as_str)
                == Some("0")
                || p.annotations().get(COMPLETION_INDEX).map(String::as_str) == Some("0")
        })
}

/// The lead broker's Service `name` of `mc` from the cache, only when `mc` controls it
/// (its controller reference names the MiniCluster by UID): a Service of that name that
/// someone else made never tells the hub where the lead broker is.
fn own_lead_service(
    stores: &Stores,
    mc: &MiniCluster,
    ns: &str,
    name: &str,
) -> Option<std::sync::Arc<k8s_openapi::api::core::v1::Service>> {
    let uid = mc.metadata.uid.as_deref().unwrap_or_default();
    get(&stores.services, ns, name).filter(|s| holder(&s.metadata, uid) == Holder::Ours)
}

/// What the registry shows admin clients of `mc`, from a status (the one computed now, or
/// the last one written).
pub(in crate::controller) fn mc_info(
    mc: &MiniCluster,
    status: &MiniClusterStatus,
    lead: Option<&LeadBrokerStatus>,
    relay_to: Option<flux_shared::plan::Endpoint>,
) -> McInfo {
    McInfo {
        uid: mc.metadata.uid.clone().unwrap_or_default(),
        generation: mc.metadata.generation.unwrap_or_default(),
        created_unix_millis: mc
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_millisecond()),
        phase: status.phase.clone().unwrap_or_default(),
        size: status.size,
        brokers_ready: status.brokers_ready,
        lead: lead.map(|l| flux_shared::plan::Endpoint {
            address: l.address.clone(),
            port: l.port,
        }),
        relay_to,
    }
}

/// Each burst of `status` as admin clients see it, by burst name.
pub(in crate::controller) fn shown(
    status: &MiniClusterStatus,
) -> std::collections::BTreeMap<String, crate::federation::registry::BurstShown> {
    status
        .bursts
        .iter()
        .map(|b| {
            let shown = crate::federation::registry::BurstShown {
                phase: b.phase.to_string(),
                path: b.path.clone(),
                path_reason: b.path_reason.clone(),
                brokers_joined: b.brokers_joined,
            };
            (b.name.clone(), shown)
        })
        .collect()
}

/// Where relayed burst connections reach MiniCluster `name`'s lead broker in this cluster:
/// its lead Service's cluster address and port, once the Service has one.
pub(in crate::controller) fn relay_to(
    stores: &Stores,
    mc: &MiniCluster,
) -> Option<flux_shared::plan::Endpoint> {
    let McKey {
        namespace: ns,
        name,
    } = mc_key(mc);
    let service = own_lead_service(stores, mc, &ns, &render::lead_service_name(&name))?;
    let spec = service.spec.as_ref()?;
    let address = spec
        .cluster_ip
        .as_deref()
        .filter(|ip| !ip.is_empty() && *ip != "None")?;
    Some(flux_shared::plan::Endpoint {
        address: address.to_string(),
        port: spec.ports.as_ref()?.first()?.port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flux_shared::federation::proto;
    use kube::runtime::reflector;
    use kube::runtime::watcher;

    /// Stores whose Services cache holds `services`, the others empty.
    fn stores_with(services: Vec<k8s_openapi::api::core::v1::Service>) -> Stores {
        let (jobs, _) = reflector::store();
        let (secrets, _) = reflector::store();
        let (config_maps, _) = reflector::store();
        let (services_store, mut writer) = reflector::store();
        let (broker_pods, _) = crate::controller::watch::broker_pods::store();
        let (pods, _) = reflector::store();
        for s in services {
            writer.apply_watcher_event(&watcher::Event::Apply(s));
        }
        Stores {
            jobs,
            secrets,
            config_maps,
            services: services_store,
            broker_pods,
            pods,
            echoes: Default::default(),
        }
    }

    #[test]
    fn relayed_connections_go_only_to_a_lead_service_the_minicluster_controls() {
        let mc: MiniCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "flux-framework.org/v1alpha2", "kind": "MiniCluster",
            "metadata": {"name": "mc", "namespace": "hpc", "uid": "mc-uid"},
            "spec": {"size": 1, "containers": [{"image": "x"}]},
        }))
        .expect("MiniCluster");
        let lead = |owner_uid: Option<&str>| -> k8s_openapi::api::core::v1::Service {
            let owners = owner_uid.map(|uid| {
                serde_json::json!([{
                    "apiVersion": "flux-framework.org/v1alpha2", "kind": "MiniCluster",
                    "name": "mc", "uid": uid, "controller": true,
                }])
            });
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "mc-lead", "namespace": "hpc", "ownerReferences": owners,
                             "labels": {"app.kubernetes.io/managed-by": "flux-hub"}},
                "spec": {"clusterIP": "10.0.0.9", "ports": [{"port": 8050}]},
            }))
            .expect("Service")
        };
        let ours = relay_to(&stores_with(vec![lead(Some("mc-uid"))]), &mc);
        assert_eq!(
            ours,
            Some(flux_shared::plan::Endpoint {
                address: "10.0.0.9".into(),
                port: 8050
            })
        );
        for theirs in [lead(None), lead(Some("an-earlier-mc"))] {
            assert_eq!(relay_to(&stores_with(vec![theirs]), &mc), None);
        }
    }

    fn spoke_assignment(burst: &str, spec_bytes: usize) -> SpokeAssignment {
        SpokeAssignment {
            spoke: "gke".into(),
            assignment: proto::Assignment {
                burst_name: burst.into(),
                minicluster_spec_json: "x".repeat(spec_bytes).into(),
                ..proto::Assignment::default()
            },
        }
    }

    #[test]
    fn a_shared_spec_counts_once_toward_the_minicluster_budget() {
        let spec: prost::bytes::Bytes = "x".repeat(1 << 20).into();
        let bursts = |n: usize| -> Vec<SpokeAssignment> {
            (0..n)
                .map(|i| SpokeAssignment {
                    spoke: "gke".into(),
                    assignment: proto::Assignment {
                        burst_name: format!("b{i}"),
                        minicluster_spec_json: spec.clone(),
                        broker_toml: "t".repeat(1024),
                        ..proto::Assignment::default()
                    },
                })
                .collect()
        };
        assert_eq!(
            over_budget_refusal(&bursts(64)),
            None,
            "1 MiB once, 64 small tomls"
        );
        // Specs that are equal but not shared count each time (what building them avoids).
        let copies: Vec<SpokeAssignment> = bursts(8)
            .into_iter()
            .map(|mut a| {
                a.assignment.minicluster_spec_json =
                    prost::bytes::Bytes::copy_from_slice(&a.assignment.minicluster_spec_json);
                a
            })
            .collect();
        let message = over_budget_refusal(&copies).expect("over");
        assert!(
            message.starts_with("FederationBudgetExceeded: "),
            "{message}"
        );
    }

    #[test]
    fn only_an_assignment_above_the_limit_refuses_the_bursts() {
        let fits = [spoke_assignment("a", 1 << 20), spoke_assignment("b", 10)];
        assert_eq!(too_large_refusal(&fits), None);
        let large = [
            spoke_assignment("a", 10),
            spoke_assignment("b", parts::MAX_ASSIGNMENT_BYTES),
        ];
        let message = too_large_refusal(&large).expect("refused");
        assert!(message.starts_with("AssignmentTooLarge: "), "{message}");
        assert!(message.contains("burst b is 3072 KiB"), "{message}");
    }
}
