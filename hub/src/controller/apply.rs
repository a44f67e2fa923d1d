//! Stage "apply": make the live objects what was rendered, writing only what differs from
//! the caches. Objects are created with POST and changed with server-side apply.

use std::fmt::Debug;

use flux_shared::api::MiniCluster;
use flux_shared::plan::Plan;
use flux_shared::render::Object;
use futures::future::join_all;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::info;

use super::cache::{self, Compact};
use super::context::{Context, Error, MANAGER, get, kube_err};
use super::diff::is_subset;
use super::events::publish;
use super::ownership;
use super::partial_decode::{Partial, Selection};
use super::status::Problem;
use super::verified::{self, Kind, Version};

/// What the apply stage wrote.
pub(super) struct Outcome {
    /// The Job as written by this pass, if it wrote it.
    pub job: Option<Job>,
    /// Whether this pass created the Job (a POST that made it: after a 409 it was there).
    pub created: bool,
    /// A change the running Job cannot take (its pod template is immutable).
    pub problem: Option<Problem>,
    /// Every object as this pass left it (incomplete when one was not left as rendered).
    pub versions: Vec<Version>,
}

impl Outcome {
    /// A pass that found every object as the previous one left it.
    pub fn unchanged() -> Self {
        Outcome {
            job: None,
            created: false,
            problem: None,
            versions: Vec::new(),
        }
    }
}

/// Apply every object: ConfigMaps, Secret and Services first, all at once (broker pods
/// mount them), then the Job and the services pod.
pub(super) async fn apply_all(
    ctx: &Context,
    ns: &str,
    objects: &[Object],
) -> Result<Outcome, Error> {
    let mut outcome = Outcome::unchanged();
    let (config, workloads): (Vec<&Object>, Vec<&Object>) = objects
        .iter()
        .partition(|o| !matches!(o, Object::Job(_) | Object::Pod(_)));
    for stage in [config, workloads] {
        let applied = join_all(stage.iter().map(|o| apply_if_changed(ctx, ns, o))).await;
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
                Err(Error::Kube {
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
                Err(e) => return Err(e),
            }
        }
    }
    Ok(outcome)
}

/// An Event for a Job this pass created or resized.
pub(super) async fn announce(
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
}

/// Applies `object` if it differs; returns what was written and the object's version as
/// this pass leaves it.
async fn apply_if_changed(
    ctx: &Context,
    ns: &str,
    object: &Object,
) -> Result<(Applied, Option<Version>), Error> {
    let s = &ctx.stores;
    fn other<K>(
        (written, version): (Option<(K, bool)>, Option<Version>),
    ) -> (Applied, Option<Version>) {
        let applied = written.map_or(Applied::Unchanged, |_| Applied::Other);
        (applied, version)
    }
    Ok(match object {
        Object::ConfigMap(o) => other(apply(ctx, ns, o, &s.config_maps, Kind::ConfigMap).await?),
        Object::Secret(o) => other(apply(ctx, ns, o, &s.secrets, Kind::Secret).await?),
        Object::Service(o) => other(apply(ctx, ns, o, &s.services, Kind::Service).await?),
        Object::Pod(o) => other(apply(ctx, ns, o, &s.pods, Kind::Pod).await?),
        Object::Job(o) => {
            let (written, version) = apply(ctx, ns, &cache::stamp(o), &s.jobs, Kind::Job).await?;
            let applied = written.map_or(Applied::Unchanged, |(j, created)| {
                Applied::Job(Box::new(j), created)
            });
            (applied, version)
        }
    })
}

/// Make the live object `desired`: nothing when the cached live object already has every
/// field, a POST when the cache has none, else a server-side apply (after taking over,
/// as this manager's apply, the fields a POST recorded: see [`ownership`]). Returns the
/// object written and whether this call created it, and the object's version as left.
async fn apply<K>(
    ctx: &Context,
    ns: &str,
    desired: &K,
    store: &Store<K>,
    kind_of: Kind,
) -> Result<(Option<(K, bool)>, Option<Version>), Error>
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
    // The answers are decoded as the cache decodes watch events: they are compared with
    // the cache and never carry what it drops (managedFields, a Job's pod template).
    let api: Api<Partial<K>> = Api::namespaced(ctx.client.clone(), ns);
    if let Some(live) = get(store, ns, &name) {
        let (Ok(mut want), Ok(have)) =
            (serde_json::to_value(desired), serde_json::to_value(&*live))
        else {
            return Ok((None, None));
        };
        K::comparable(&mut want);
        if is_subset(&want, &have) {
            return Ok((None, Some(verified::of(kind_of, &*live))));
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
                return Ok((Some((created, true)), Some(version)));
            }
            // The cache had not seen it yet: change it like any live object.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(kube_err(format!("creating {kind} {ns}/{name}"))(e)),
        }
    }
    // Reads the managedFields: the whole object.
    let whole: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    take_over_created_fields(ctx, &whole, ns, &name).await?;
    let write = ctx.stores.echoes.begin(K::KIND, ns, &name);
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(desired),
        )
        .await
        .map_err(kube_err(format!("applying {kind} {ns}/{name}")))?
        .into_inner();
    ctx.metrics.api_write(&kind, "apply");
    write.done(applied.meta().resource_version.as_deref());
    info!(kind = %kind, object = %name, "applied");
    let version = verified::of(kind_of, &applied);
    Ok((Some((applied, false)), Some(version)))
}

/// Rewrites the `Update` entry a POST by this manager left on the object as its `Apply`
/// entry, so the apply that follows prunes what it no longer sends. One GET, and a PATCH
/// only the first time (guarded by the resourceVersion read: a concurrent change makes it
/// fail with 409 and the reconcile retry).
async fn take_over_created_fields<K>(
    ctx: &Context,
    api: &Api<K>,
    ns: &str,
    name: &str,
) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + k8s_openapi::Resource + Clone + Debug + DeserializeOwned,
{
    let kind = K::kind(&());
    let live = api
        .get(name)
        .await
        .map_err(kube_err(format!("reading {kind} {ns}/{name}")))?;
    let Some(entries) = ownership::as_applied(
        &live.meta().managed_fields.clone().unwrap_or_default(),
        MANAGER,
    ) else {
        return Ok(());
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
    Ok(())
}
