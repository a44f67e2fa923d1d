//! Stage "apply": make the live objects what was rendered, writing only what differs from
//! the caches. Objects are created with POST and changed with server-side apply.
//!
//! Its companions: whose object is it (`ownership`, `blockers`), is it already what we
//! want (`diff`), what the plan dropped (`orphans`), and the broker pods' labels
//! (`pod_labels`).

pub mod diff;
pub mod orphans;
pub mod ownership;
pub(in crate::controller) mod pod_labels;

use std::fmt::Debug;

use flux_shared::api::MiniCluster;
use flux_shared::plan::Plan;
use flux_shared::render::{Object, labels};
use futures::future::join_all;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::info;

use crate::controller::apply::diff::is_subset;
use crate::controller::blockers::Taken;
use crate::controller::context::{ApiError, Context, MANAGER, kube_err};
use crate::controller::status::Problem;
use crate::controller::status::events::publish;
use crate::controller::watch::cache::{self, Compact};
use crate::controller::watch::partial_decode::{Partial, Selection};
use crate::controller::watch::stores::get;
use crate::controller::watch::verified::{self, Kind, Version};
use ownership::Holder;

/// What the apply stage wrote.
pub(in crate::controller) struct Outcome {
    /// The Job as written by this pass, if it wrote it.
    pub job: Option<Job>,
    /// Whether this pass created the Job (a POST that made it: after a 409 it was there).
    pub created: bool,
    /// A change the running Job cannot take (its pod template is immutable).
    pub problem: Option<Problem>,
    /// Every object as this pass left it (incomplete when one was not left as rendered).
    pub versions: Vec<Version>,
    /// Names the plan needs that objects of someone else hold: nothing was written to
    /// them, and nothing after the stage that found them (no Job runs without its
    /// configuration).
    pub taken: Vec<Taken>,
}

/// Reason of a spec whose objects the API server refuses as invalid.
const REJECTED: &str = "RejectedByAPIServer";

/// The refusal of a MiniCluster some of whose names are taken: the Degraded condition and
/// its one Event. Nothing is retried until one of those objects changes or goes, or the
/// MiniCluster changes.
pub(in crate::controller) fn name_taken(ns: &str, taken: &[Taken]) -> Problem {
    let objects: Vec<String> = taken
        .iter()
        .map(|t| format!("{} {ns}/{} ({})", t.kind, t.name, t.holder))
        .collect();
    Problem {
        reason: "NameTaken".into(),
        message: format!(
            "{} already exist{} and {} not this MiniCluster's, so nothing of {} is changed: {}; delete or rename {}, or give the MiniCluster another name",
            if taken.len() == 1 {
                "an object"
            } else {
                "objects"
            },
            if taken.len() == 1 { "s" } else { "" },
            if taken.len() == 1 { "is" } else { "are" },
            if taken.len() == 1 { "it" } else { "them" },
            objects.join(", "),
            if taken.len() == 1 { "it" } else { "them" },
        ),
        invalid: false,
    }
}

impl Outcome {
    /// A pass that found every object as the previous one left it.
    pub fn unchanged() -> Self {
        Outcome {
            job: None,
            created: false,
            problem: None,
            versions: Vec::new(),
            taken: Vec::new(),
        }
    }
}

/// Apply every object: ConfigMaps, Secret and Services first, all at once (broker pods
/// mount them), then the Job and the services pod. Only objects of the MiniCluster whose
/// UID is `mc_uid` are changed: a cached object of someone else is found before anything
/// is written, one the cache cannot see (not labelled as the hub's) by the 409 its POST
/// gets; either way the pass stops there with [`Outcome::taken`].
pub(in crate::controller) async fn apply_all(
    ctx: &Context,
    ns: &str,
    mc_uid: &str,
    objects: &[Object],
) -> Result<Outcome, ApiError> {
    let mut outcome = Outcome::unchanged();
    outcome.taken = objects
        .iter()
        .filter_map(|o| cached_holder(ctx, ns, mc_uid, o))
        .collect();
    if !outcome.taken.is_empty() {
        return Ok(outcome);
    }
    let (config, workloads): (Vec<&Object>, Vec<&Object>) = objects
        .iter()
        .partition(|o| !matches!(o, Object::Job(_) | Object::Pod(_)));
    for stage in [config, workloads] {
        let applied = join_all(stage.iter().map(|o| apply_if_changed(ctx, ns, mc_uid, o))).await;
        for (object, result) in stage.into_iter().zip(applied) {
            match result {
                Ok((Applied::Unchanged | Applied::Other, version)) => {
                    outcome.versions.extend(version);
                }
                Ok((Applied::Job(applied, created), version)) => {
                    outcome.created |= created;
                    outcome.job = Some(*applied);
                    outcome.versions.extend(version);
                }
                Ok((Applied::Taken(taken), _)) => outcome.taken.push(taken),
                Err(ApiError {
                    source: kube::Error::Api(e),
                    ..
                }) if e.code == 422 && matches!(object, Object::Job(_)) => {
                    outcome.problem = Some(Problem {
                        reason: "JobSpecImmutable".into(),
                        message: format!(
                            "this change alters the broker pods, which a running Job cannot take ({}); delete and re-create the MiniCluster to apply it",
                            e.message
                        ),
                        invalid: false,
                    });
                }
                // Anything else the API server finds invalid (a ConfigMap over its 1 MiB
                // limit, say) comes from the spec: said once, not retried in a loop.
                Err(ApiError {
                    source: kube::Error::Api(e),
                    ..
                }) if e.code == 422 => {
                    outcome.problem = Some(Problem {
                        reason: REJECTED.into(),
                        message: format!(
                            "the API server refuses {} of this spec: {}",
                            object.describe(),
                            e.message
                        ),
                        invalid: true,
                    });
                }
                Err(e) => return Err(e),
            }
        }
        // A refused configuration: no Job is started without it.
        if outcome
            .problem
            .as_ref()
            .is_some_and(|p| p.reason == REJECTED)
        {
            break;
        }
        if !outcome.taken.is_empty() {
            outcome.taken.sort();
            break;
        }
    }
    Ok(outcome)
}

/// The cached object of `desired`'s name, when it is not the MiniCluster's.
fn cached_holder(ctx: &Context, ns: &str, mc_uid: &str, desired: &Object) -> Option<Taken> {
    fn check<K: Resource<DynamicType = ()> + Clone>(
        store: &Store<K>,
        ns: &str,
        name: Option<&String>,
        mc_uid: &str,
    ) -> Option<Taken> {
        let live = get(store, ns, name?)?;
        match ownership::holder(live.meta(), mc_uid) {
            Holder::Ours => None,
            Holder::Theirs(holder) => Some(Taken::of(&*live, holder)),
        }
    }
    let s = &ctx.stores;
    match desired {
        Object::ConfigMap(o) => check(&s.config_maps, ns, o.metadata.name.as_ref(), mc_uid),
        Object::Secret(o) => check(&s.secrets, ns, o.metadata.name.as_ref(), mc_uid),
        Object::Service(o) => check(&s.services, ns, o.metadata.name.as_ref(), mc_uid),
        Object::Pod(o) => check(&s.pods, ns, o.metadata.name.as_ref(), mc_uid),
        Object::Job(o) => check(&s.jobs, ns, o.metadata.name.as_ref(), mc_uid),
    }
}

/// An Event for a Job this pass created or resized.
pub(in crate::controller) async fn announce(
    ctx: &Context,
    mc: &MiniCluster,
    plan: &Plan,
    live_job: Option<&Job>,
    outcome: &Outcome,
) {
    let parallelism = |j: Option<&Job>| j.and_then(|j| j.spec.as_ref()?.parallelism);
    if outcome.created {
        publish(
            ctx,
            mc,
            EventType::Normal,
            "Created",
            format!("created Job {} with {} brokers", plan.name, plan.spec.size),
        )
        .await;
    } else if let (Some(old), Some(new)) =
        (parallelism(live_job), parallelism(outcome.job.as_ref()))
        && old != new
    {
        publish(
            ctx,
            mc,
            EventType::Normal,
            "Scaled",
            format!("scaled from {old} to {new} brokers"),
        )
        .await;
    }
}

enum Applied {
    Unchanged,
    /// The Job as written, and whether this write created it.
    Job(Box<Job>, bool),
    Other,
    /// The name is someone else's: nothing was written.
    Taken(Taken),
}

/// What [`apply`] did with one object.
enum Written<K> {
    /// Nothing to write.
    Unchanged,
    /// The object as written, and whether this write created it.
    Wrote(K, bool),
    /// The name is someone else's: nothing was written.
    Taken(Taken),
}

/// Applies `object` if it differs; returns what was written and the object's version as
/// this pass leaves it.
async fn apply_if_changed(
    ctx: &Context,
    ns: &str,
    mc_uid: &str,
    object: &Object,
) -> Result<(Applied, Option<Version>), ApiError> {
    let s = &ctx.stores;
    fn other<K>((written, version): (Written<K>, Option<Version>)) -> (Applied, Option<Version>) {
        let applied = match written {
            Written::Unchanged => Applied::Unchanged,
            Written::Wrote(..) => Applied::Other,
            Written::Taken(t) => Applied::Taken(t),
        };
        (applied, version)
    }
    Ok(match object {
        Object::ConfigMap(o) => {
            other(apply(ctx, ns, mc_uid, o, &s.config_maps, Kind::ConfigMap).await?)
        }
        Object::Secret(o) => other(apply(ctx, ns, mc_uid, o, &s.secrets, Kind::Secret).await?),
        Object::Service(o) => other(apply(ctx, ns, mc_uid, o, &s.services, Kind::Service).await?),
        Object::Pod(o) => other(apply(ctx, ns, mc_uid, o, &s.pods, Kind::Pod).await?),
        Object::Job(o) => {
            let job = cache::stamp(o);
            suspend_if_asked(ctx, ns, mc_uid, &job).await?;
            let (written, version) = apply(ctx, ns, mc_uid, &job, &s.jobs, Kind::Job).await?;
            let applied = match written {
                Written::Unchanged => Applied::Unchanged,
                Written::Wrote(j, created) => Applied::Job(Box::new(j), created),
                Written::Taken(t) => Applied::Taken(t),
            };
            (applied, version)
        }
    })
}

/// Make the live object `desired`: nothing when the cached live object already has every
/// field, a POST when the cache has none, else a server-side apply (after taking over,
/// as this manager's apply, the fields a POST recorded: see
/// [`flux_shared::managed_fields`]). An object
/// found by a 409 is changed only when it is the MiniCluster's ([`ownership::holder`]).
/// Returns what was written and the object's version as left.
async fn apply<K>(
    ctx: &Context,
    ns: &str,
    mc_uid: &str,
    desired: &K,
    store: &Store<K>,
    kind_of: Kind,
) -> Result<(Written<K>, Option<Version>), ApiError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + k8s_openapi::Resource
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Compact
        + Selection,
{
    let name = desired.meta().name.clone().unwrap_or_default();
    let kind = K::kind(&());
    let settled = settled_at_creation(&kind);
    // The answers are decoded as the cache decodes watch events: they are compared with
    // the cache and never carry what it drops (managedFields, a Job's pod template).
    let api: Api<Partial<K>> = Api::namespaced(ctx.client.clone(), ns);
    if let Some(live) = get(store, ns, &name) {
        if let Holder::Theirs(holder) = ownership::holder(live.meta(), mc_uid) {
            return Ok((Written::Taken(Taken::of(&*live, holder)), None));
        }
        let (Ok(mut want), Ok(have)) =
            (serde_json::to_value(desired), serde_json::to_value(&*live))
        else {
            return Ok((Written::Unchanged, None));
        };
        K::comparable(&mut want);
        settle(&mut want, settled);
        if is_subset(&want, &have) {
            return Ok((Written::Unchanged, Some(verified::of(kind_of, &*live))));
        }
    } else {
        let params = PostParams {
            field_manager: Some(MANAGER.into()),
            ..PostParams::default()
        };
        let write = ctx.stores.echoes.begin(K::KIND, ns, &name);
        match api.create(&params, &Partial::new(desired.clone())).await {
            Ok(created) => {
                let created = created.into_inner();
                ctx.metrics.api_write(&kind, "create");
                write.done(created.meta().resource_version.as_deref());
                info!(kind = %kind, object = %name, "created");
                let version = verified::of(kind_of, &created);
                return Ok((Written::Wrote(created, true), Some(version)));
            }
            // Someone's: the cache had not seen it yet, or it is not labelled as ours.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(kube_err(format!("creating {kind} {ns}/{name}"))(e)),
        }
    }
    // Reads the managedFields: the whole object.
    let whole: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    if let Err(taken) = take_over_created_fields(ctx, &whole, ns, &name, mc_uid, settled).await? {
        return Ok((Written::Taken(taken), None));
    }
    let mut body = serde_json::to_value(desired).map_err(|e| ApiError {
        action: format!("encoding {kind} {ns}/{name}"),
        source: kube::Error::SerdeError(e),
    })?;
    settle(&mut body, settled);
    let write = ctx.stores.echoes.begin(K::KIND, ns, &name);
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(kube_err(format!("applying {kind} {ns}/{name}")))?
        .into_inner();
    ctx.metrics.api_write(&kind, "apply");
    write.done(applied.meta().resource_version.as_deref());
    info!(kind = %kind, object = %name, "applied");
    let version = verified::of(kind_of, &applied);
    Ok((Written::Wrote(applied, false), Some(version)))
}

/// Rewrites the `Update` entry a POST by this manager left on the object as its `Apply`
/// entry, so the apply that follows prunes what it no longer sends. One metadata GET, and a
/// PATCH
/// only the first time (guarded by the resourceVersion read: a concurrent change makes it
/// fail with 409 and the reconcile retry). An object that is not the MiniCluster's is
/// left as it is and returned as [`Taken`].
async fn take_over_created_fields<K>(
    ctx: &Context,
    api: &Api<K>,
    ns: &str,
    name: &str,
    mc_uid: &str,
    settled: &[&[&str]],
) -> Result<Result<(), Taken>, ApiError>
where
    K: Resource<DynamicType = ()> + k8s_openapi::Resource + Clone + Debug + DeserializeOwned,
{
    let kind = K::kind(&());
    // Metadata only: what is read may be someone else's (a Secret's data, say).
    let live = api
        .get_metadata(name)
        .await
        .map_err(kube_err(format!("reading {kind} {ns}/{name}")))?;
    if let Holder::Theirs(holder) = ownership::holder(live.meta(), mc_uid) {
        return Ok(Err(Taken::of(&live, holder)));
    }
    let Some(entries) = flux_shared::managed_fields::as_applied(
        &live.meta().managed_fields.clone().unwrap_or_default(),
        MANAGER,
        settled,
    ) else {
        return Ok(Ok(()));
    };
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": live.meta().resource_version,
        "managedFields": entries,
    }});
    let write = ctx.stores.echoes.begin(K::KIND, ns, name);
    let patched = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(kube_err(format!(
            "taking over the fields of {kind} {ns}/{name} for server-side apply"
        )))?;
    ctx.metrics.api_write(&kind, "patch");
    write.done(patched.meta().resource_version.as_deref());
    Ok(Ok(()))
}

/// Field manager of the hub's writes of a root Job's `suspend`: an `Update` entry of its
/// own, which the hub's applies neither fold in nor prune.
const SUSPEND_MANAGER: &str = "flux-hub-suspend";

/// Fields of `kind` the hub sets when it creates the object and never applies again:
/// their later values are another manager's (a queue manager suspends and resumes a Job),
/// or written only on a change of the spec ([`suspend_if_asked`]).
fn settled_at_creation(kind: &str) -> &'static [&'static [&'static str]] {
    match kind {
        "Job" => &[
            &["spec", "suspend"],
            &["metadata", "annotations", labels::SUSPEND],
        ],
        _ => &[],
    }
}

/// Removes the `settled` paths from an object as JSON.
fn settle(object: &mut serde_json::Value, settled: &[&[&str]]) {
    for path in settled {
        let Some((last, parents)) = path.split_last() else {
            continue;
        };
        let parent = parents
            .iter()
            .try_fold(&mut *object, |v, key| v.get_mut(*key));
        if let Some(parent) = parent.and_then(serde_json::Value::as_object_mut) {
            parent.remove(*last);
        }
    }
}

/// Writes the root Job's `suspend` when the MiniCluster's `spec.suspend` differs from the
/// one last written (the Job's [`labels::SUSPEND`] annotation), as a merge patch under
/// [`SUSPEND_MANAGER`]: a suspend or resume of anyone else since then stands until the
/// author changes `spec.suspend`. A Job still to be created carries both in its POST.
async fn suspend_if_asked(
    ctx: &Context,
    ns: &str,
    mc_uid: &str,
    desired: &Job,
) -> Result<(), ApiError> {
    let Some(wanted) = desired
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::SUSPEND))
    else {
        return Ok(());
    };
    let name = desired.metadata.name.as_deref().unwrap_or_default();
    let Some(live) = get(&ctx.stores.jobs, ns, name) else {
        return Ok(());
    };
    if !matches!(ownership::holder(live.meta(), mc_uid), Holder::Ours)
        || live.annotations().get(labels::SUSPEND) == Some(wanted)
    {
        return Ok(());
    }
    let suspend = wanted == "true";
    let patch = serde_json::json!({
        "metadata": {"annotations": {labels::SUSPEND: wanted}},
        "spec": {"suspend": suspend},
    });
    let params = PatchParams {
        field_manager: Some(SUSPEND_MANAGER.into()),
        ..PatchParams::default()
    };
    let api: Api<Partial<Job>> = Api::namespaced(ctx.client.clone(), ns);
    let write = ctx
        .stores
        .echoes
        .begin(<Job as k8s_openapi::Resource>::KIND, ns, name);
    let patched = api
        .patch(name, &params, &Patch::Merge(&patch))
        .await
        .map_err(kube_err(format!("writing suspend of Job {ns}/{name}")))?;
    ctx.metrics.api_write("Job", "patch");
    write.done(patched.meta().resource_version.as_deref());
    info!(object = %name, suspend, "wrote the Job's suspend, as spec.suspend changed");
    Ok(())
}
