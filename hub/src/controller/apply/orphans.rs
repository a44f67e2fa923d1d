//! Stage "delete orphans": objects a MiniCluster owns that its plan no longer has. A spec
//! change can drop objects (removing `flux.bursting` drops the lead broker's NodePort
//! Service, which holds a port on every node; removing `services` drops the services pod
//! and its Services), and owner references remove them only with the MiniCluster. The Job
//! is never an orphan (its name is the MiniCluster's), and the reconcile skips this stage
//! while the running Job could not take the change: its pods may still use what the new
//! plan dropped.

use std::collections::BTreeSet;

use flux_shared::api::MiniCluster;
use flux_shared::render::Object;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tracing::info;

use crate::controller::context::{ApiError, Context, kube_err, mc_key};
use crate::controller::status::events::publish;

/// An object to delete: its name and UID (the delete is conditional on the UID, so an
/// object re-created under the same name meanwhile is left alone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// Object name.
    pub name: String,
    /// Object UID.
    pub uid: String,
}

/// The objects of `cached` (one kind) in `ns` controlled by the MiniCluster `owner_uid`
/// whose names `wanted` does not hold. Objects already being deleted are not listed.
pub fn orphans<'a, K: Resource + 'a>(
    cached: impl IntoIterator<Item = &'a K>,
    ns: &str,
    owner_uid: &str,
    wanted: &BTreeSet<&str>,
) -> Vec<Orphan> {
    cached
        .into_iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(ns))
        .filter(|o| o.meta().deletion_timestamp.is_none())
        .filter(|o| {
            o.meta().owner_references.iter().flatten().any(|r| {
                r.uid == owner_uid && r.kind == "MiniCluster" && r.controller == Some(true)
            })
        })
        .filter_map(|o| {
            let name = o.meta().name.as_deref()?;
            let uid = o.meta().uid.as_deref()?;
            (!wanted.contains(name)).then(|| Orphan {
                name: name.to_string(),
                uid: uid.to_string(),
            })
        })
        .collect()
}

/// Whether `mc` may own objects its current plan does not have. Only a spec change makes
/// them: a generation its status already describes was pruned when it was applied (the
/// status is written after this stage, and not when it fails), and a MiniCluster first
/// seen at generation 1 has no older spec. So a restarted hub scans nothing, and a new
/// MiniCluster costs no scan of every cached object.
pub fn may_have_orphans(mc: &MiniCluster) -> bool {
    let generation = mc.metadata.generation.unwrap_or_default();
    match mc.status.as_ref().and_then(|s| s.observed_generation) {
        Some(observed) => observed != generation,
        None => generation > 1,
    }
}

/// Delete the ConfigMaps, Secrets, Services and services pods of `mc` that `objects` (the
/// whole plan, just applied) no longer has; one Event names them. Once per generation:
/// only a spec change makes orphans, and the scan reads every cached object of those kinds.
pub(in crate::controller) async fn delete_orphans(
    ctx: &Context,
    mc: &MiniCluster,
    ns: &str,
    objects: &[Object],
) -> Result<(), ApiError> {
    let Some(owner) = mc.metadata.uid.as_deref() else {
        return Ok(());
    };
    // The Context's maps are keyed by (namespace, name) pairs.
    let key = mc_key(mc);
    let done = (
        owner.to_string(),
        mc.metadata.generation.unwrap_or_default(),
    );
    if !may_have_orphans(mc)
        || ctx
            .memory
            .read(&key, |m| m.pruned.as_ref() == Some(&done))
            .unwrap_or(false)
    {
        return Ok(());
    }
    let s = &ctx.stores;
    let mut deleted = Vec::new();
    deleted.extend(delete_kind(ctx, &s.config_maps, ns, owner, objects).await?);
    deleted.extend(delete_kind(ctx, &s.secrets, ns, owner, objects).await?);
    deleted.extend(delete_kind(ctx, &s.services, ns, owner, objects).await?);
    deleted.extend(delete_kind(ctx, &s.pods, ns, owner, objects).await?);
    if !deleted.is_empty() {
        publish(
            ctx,
            mc,
            EventType::Normal,
            "Pruned",
            format!(
                "deleted what the spec no longer has: {}",
                deleted.join(", ")
            ),
        )
        .await;
    }
    ctx.memory.with(&key, |m| m.pruned = Some(done));
    Ok(())
}

/// Delete the orphans of one kind; returns `Kind/name` of each deleted.
async fn delete_kind<K>(
    ctx: &Context,
    store: &Store<K>,
    ns: &str,
    owner: &str,
    objects: &[Object],
) -> Result<Vec<String>, ApiError>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + DeserializeOwned,
{
    let kind = K::kind(&());
    // `Kind/name` of every object the plan has.
    let described: Vec<String> = objects.iter().map(Object::describe).collect();
    let wanted: BTreeSet<&str> = described
        .iter()
        .filter_map(|d| d.strip_prefix(kind.as_ref())?.strip_prefix('/'))
        .collect();
    let state = store.state();
    let found = orphans(state.iter().map(|o| &**o), ns, owner, &wanted);
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    let mut deleted = Vec::new();
    for orphan in found {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(orphan.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(&orphan.name, &params).await {
            Ok(_) => {
                ctx.metrics.api_write(&kind, "delete");
                info!(kind = %kind, object = %orphan.name, "deleted: no longer in the spec");
                deleted.push(format!("{kind}/{}", orphan.name));
            }
            // Gone already, or another object of that name now (the UID precondition).
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => {
                return Err(kube_err(format!("deleting {kind} {ns}/{}", orphan.name))(e));
            }
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use serde_json::json;

    fn service(name: &str, owner: &str, controller: bool) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "hpc", "uid": format!("uid-{name}"),
                "ownerReferences": [{"apiVersion": "flux-framework.org/v1alpha2",
                    "kind": "MiniCluster", "name": "mc", "uid": owner, "controller": controller}]}
        }))
        .expect("service")
    }

    #[test]
    fn only_owned_objects_the_plan_dropped_are_orphans() {
        let cached = [
            service("mc", "mc-uid", true),
            service("mc-lead", "mc-uid", true),
            service("other-lead", "other-uid", true),
            service("mc-extra", "mc-uid", false),
        ];
        let wanted = BTreeSet::from(["mc"]);
        assert_eq!(
            orphans(&cached, "hpc", "mc-uid", &wanted),
            [Orphan {
                name: "mc-lead".into(),
                uid: "uid-mc-lead".into()
            }]
        );
        assert!(orphans(&cached, "elsewhere", "mc-uid", &wanted).is_empty());
        let everything = BTreeSet::from(["mc", "mc-lead"]);
        assert!(orphans(&cached, "hpc", "mc-uid", &everything).is_empty());
    }

    #[test]
    fn only_a_spec_the_status_does_not_describe_yet_may_leave_orphans() {
        let mc = |generation: i64, observed: Option<i64>| -> MiniCluster {
            let mut mc: MiniCluster = serde_json::from_value(json!({
                "apiVersion": "flux-framework.org/v1alpha2", "kind": "MiniCluster",
                "metadata": {"name": "mc", "namespace": "hpc", "generation": generation},
                "spec": {"size": 1, "containers": [{"image": "x"}]}
            }))
            .expect("mc");
            if let Some(observed) = observed {
                mc.status = Some(flux_shared::api::MiniClusterStatus {
                    observed_generation: Some(observed),
                    ..Default::default()
                });
            }
            mc
        };
        assert!(!may_have_orphans(&mc(1, None)), "new");
        assert!(may_have_orphans(&mc(2, None)), "changed before any status");
        assert!(!may_have_orphans(&mc(3, Some(3))), "settled");
        assert!(may_have_orphans(&mc(4, Some(3))), "changed");
    }

    #[test]
    fn objects_being_deleted_are_left_to_the_api_server() {
        let mut going = service("mc-lead", "mc-uid", true);
        going.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(orphans([&going], "hpc", "mc-uid", &BTreeSet::new()).is_empty());
    }
}
