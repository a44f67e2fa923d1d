//! One reconcile of one MiniCluster: compute desired objects -> apply what differs from
//! the cache -> compute status -> patch it if it changed. Decisions live in pure
//! functions (`sizing`, `status`, `diff`, the shared planner and renderer); this module
//! only reads caches and talks to the API server.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flux_shared::api::{LeadBrokerStatus, MiniCluster, MiniClusterStatus};
use flux_shared::curve::CurveCert;
use flux_shared::federation::assignment::{self, SpokeAssignment};
use flux_shared::federation::assignment_key;
use flux_shared::layout;
use flux_shared::plan::{Plan, Role};
use flux_shared::render::{self, Object};
use futures::future::join_all;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use super::cache::{self, Compact};
use super::diff::is_subset;
use super::ownership;
use super::sizing;
use super::status::{self, Problem, minicluster_phase};
use crate::federation::{self, BurstInfo, McInfo, McKey, Registry, bursts, lead};
use crate::ops::metrics::Metrics;

/// Field manager of every write the hub makes.
pub const MANAGER: &str = "flux-hub";

/// Caches of the objects the hub manages, fed by watches.
#[derive(Clone)]
pub struct Stores {
    /// Jobs.
    pub jobs: Store<Job>,
    /// Secrets (CURVE certificates).
    pub secrets: Store<Secret>,
    /// ConfigMaps (scripts and Flux configuration).
    pub config_maps: Store<ConfigMap>,
    /// Services.
    pub services: Store<Service>,
    /// Broker pods (of the hub's Jobs): metadata and node only.
    pub broker_pods: Store<Pod>,
    /// The hub's own services pods.
    pub pods: Store<Pod>,
}

impl Stores {
    /// Resolves once every cache holds its initial list.
    pub async fn wait_until_ready(&self) {
        // A dropped writer means the hub is shutting down; nothing to wait for then.
        let _ = futures::join!(
            self.jobs.wait_until_ready(),
            self.secrets.wait_until_ready(),
            self.config_maps.wait_until_ready(),
            self.services.wait_until_ready(),
            self.broker_pods.wait_until_ready(),
            self.pods.wait_until_ready(),
        );
    }
}

/// Everything a reconcile needs.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Caches of managed objects.
    pub stores: Stores,
    /// Event recorder.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Consecutive failures per MiniCluster, for capped exponential backoff.
    pub failures: Mutex<HashMap<(String, String), u32>>,
    /// Certificates this process generated, until the Secret cache shows them: a
    /// reconcile triggered by the new Job can run before the Secret's watch event arrives,
    /// and must not generate (and force-apply) a second certificate.
    pub generated_certs: Mutex<HashMap<(String, String), String>>,
    /// Broker pods this process labelled with their `job-index` recently, by UID: until
    /// the pod cache shows the label, a reconcile must not send the same patch again.
    pub labelled: Mutex<HashMap<String, std::time::Instant>>,
    /// The status this process last wrote for each MiniCluster (a hash of it and the
    /// MiniCluster's UID) and when: a reconcile that runs before the cache shows that write
    /// would otherwise write it, and publish its Events, a second time.
    pub written_status: Mutex<HashMap<(String, String), (u64, std::time::Instant)>>,
    /// The current time (a parameter so tests are deterministic).
    pub now: fn() -> Time,
    /// Assignments for spokes and what they reported.
    pub registry: Arc<Registry>,
    /// `--lead-broker-address`: the address burst brokers reach the lead broker at, unless
    /// the spec sets one.
    pub lead_address: Option<String>,
    /// How long a deleted MiniCluster waits for spokes to confirm its bursts are gone.
    pub deletion_timeout: Duration,
}

impl Context {
    /// A context with the real clock.
    pub fn new(client: Client, stores: Stores, recorder: Recorder, metrics: Arc<Metrics>) -> Self {
        Context {
            client,
            stores,
            recorder,
            metrics,
            failures: Mutex::new(HashMap::new()),
            generated_certs: Mutex::new(HashMap::new()),
            labelled: Mutex::new(HashMap::new()),
            written_status: Mutex::new(HashMap::new()),
            now: || Time(k8s_openapi::jiff::Timestamp::now()),
            registry: Registry::new(),
            lead_address: None,
            deletion_timeout: DEFAULT_DELETION_TIMEOUT,
        }
    }

    /// Use `registry` for assignments, `lead_address` (`--lead-broker-address`) and
    /// `deletion_timeout` for bursting MiniClusters.
    pub fn with_federation(
        mut self,
        registry: Arc<Registry>,
        lead_address: Option<String>,
        deletion_timeout: Duration,
    ) -> Self {
        self.registry = registry;
        self.lead_address = lead_address;
        self.deletion_timeout = deletion_timeout;
        self
    }
}

/// Default of `--burst-deletion-timeout-seconds`.
pub const DEFAULT_DELETION_TIMEOUT: Duration = Duration::from_secs(300);

/// Errors that make a reconcile retry later.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done.
        action: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The MiniCluster has no namespace (the API server always sets one).
    #[error("MiniCluster {0} has no namespace")]
    NoNamespace(String),
}

impl Error {
    /// Short category for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Kube {
                source: kube::Error::Api(e),
                ..
            } if e.code == 409 => "conflict",
            Error::Kube {
                source: kube::Error::Api(e),
                ..
            } if e.code >= 500 => "server",
            Error::Kube {
                source: kube::Error::Api(_),
                ..
            } => "api",
            Error::Kube { .. } => "transport",
            Error::NoNamespace(_) => "invalid",
        }
    }
}

fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Kube { action, source }
}

/// Reconcile one MiniCluster.
#[tracing::instrument(skip_all, fields(namespace = mc.namespace().unwrap_or_default(), name = mc.name_any(), generation = mc.metadata.generation))]
pub async fn reconcile(mc: Arc<MiniCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile_timer();
    let ns = mc
        .namespace()
        .ok_or_else(|| Error::NoNamespace(mc.name_any()))?;
    let name = mc.name_any();
    if mc.metadata.deletion_timestamp.is_some() {
        // Owner references let the garbage collector remove the local children; bursts
        // in other clusters need their spokes (and the finalizer holds until they answer).
        return finalize(&mc, &ctx, &ns, &name).await;
    }
    // Only with complete caches: an absent Secret must mean "never created", or a
    // restarted hub would generate a new CURVE certificate.
    ctx.stores.wait_until_ready().await;
    let result = reconcile_inner(&mc, &ctx, &ns, &name).await;
    if result.is_ok()
        && let Ok(mut failures) = ctx.failures.lock()
    {
        failures.remove(&(ns, name));
    }
    result
}

async fn reconcile_inner(
    mc: &MiniCluster,
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<Action, Error> {
    let now = (ctx.now)();
    let live_job = get(&ctx.stores.jobs, ns, name);

    // Changes the running brokers cannot follow are refused, never half-applied.
    let effective = match sizing::effective(mc) {
        Ok(effective) => effective,
        Err(refusal) => {
            let problem = Problem {
                reason: refusal.reason.to_string(),
                message: refusal.message,
                invalid: false,
            };
            let declared = mc.status.as_ref().map(|s| s.maximum_size);
            retain_from_status(ctx, mc);
            finish(
                ctx,
                mc,
                declared,
                live_job.as_deref(),
                Some(&problem),
                &now,
                None,
            )
            .await?;
            return Ok(Action::await_change());
        }
    };
    let plan = match Plan::new(&effective) {
        Ok(plan) => plan,
        Err(errors) => {
            let problem = Problem {
                reason: "InvalidSpec".into(),
                message: errors.to_string(),
                invalid: true,
            };
            retain_from_status(ctx, mc);
            finish(
                ctx,
                mc,
                None,
                live_job.as_deref(),
                Some(&problem),
                &now,
                None,
            )
            .await?;
            return Ok(Action::await_change());
        }
    };

    let cert = certificate(ctx, ns, name);

    let objects = render::render(&plan, &Role::Root, &cert).unwrap_or_default();
    let mut job = live_job.as_deref().cloned();
    let mut problem = None;
    let mut created = false;
    // Broker pods mount the ConfigMaps and the Secret: those and the Services go first, all
    // at once; the Job and the services pod once they exist.
    let (config, workloads): (Vec<&Object>, Vec<&Object>) = objects
        .iter()
        .partition(|o| !matches!(o, Object::Job(_) | Object::Pod(_)));
    for stage in [config, workloads] {
        let applied = join_all(stage.iter().map(|o| apply_if_changed(ctx, ns, o))).await;
        for (object, outcome) in stage.into_iter().zip(applied) {
            match outcome {
                Ok(Applied::Unchanged | Applied::Other) => {}
                Ok(Applied::Job(applied, was_created)) => {
                    // Only a POST that made it counts: after a 409 the Job was there.
                    created |= was_created;
                    job = Some(*applied);
                }
                Err(Error::Kube {
                    source: kube::Error::Api(e),
                    ..
                }) if e.code == 422 && matches!(object, Object::Job(_)) => {
                    // The pod template of a running Job is immutable.
                    problem = Some(Problem {
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

    label_pods_with_their_index(ctx, ns, name).await?;

    let old_size = live_job.as_ref().and_then(|j| j.spec.as_ref()?.parallelism);
    let new_size = job.as_ref().and_then(|j| j.spec.as_ref()?.parallelism);
    if created {
        publish(
            ctx,
            mc,
            EventType::Normal,
            "Created",
            format!("created Job {name} with {} brokers", plan.spec.size),
        )
        .await;
    } else if let (Some(old), Some(new)) = (old_size, new_size)
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
    ctx.metrics
        .set_objects_managed(managed_objects(&ctx.stores));

    let fed = federate(ctx, mc, &plan, &cert, ns, name).await?;
    let status = finish(
        ctx,
        mc,
        Some(plan.spec.max_size()),
        job.as_ref(),
        problem.as_ref(),
        &now,
        Some(fed),
    )
    .await?;
    if plan.spec.cleanup.unwrap_or(false)
        && matches!(
            status.phase.as_deref(),
            Some(minicluster_phase::SUCCEEDED | minicluster_phase::FAILED)
        )
    {
        info!("cleanup: the Job finished; deleting the MiniCluster");
        let api: Api<MiniCluster> = Api::namespaced(ctx.client.clone(), ns);
        api.delete(name, &DeleteParams::background())
            .await
            .map_err(kube_err(format!("deleting MiniCluster {ns}/{name}")))?;
        ctx.metrics.api_write("MiniCluster", "delete");
    }
    // A spoke that just went away shows Unreachable only after a grace period; nothing
    // else would wake this MiniCluster then.
    let views = ctx.registry.bursts(&mc_key(mc));
    Ok(
        match bursts::recheck_after(&views, std::time::SystemTime::from(now.0)) {
            Some(after) => Action::requeue(after),
            None => Action::await_change(),
        },
    )
}

/// Label each broker pod with `job-index=<completion index>`, as the MiniCluster docs
/// promise (a selector for, e.g., a Service of the lead broker). Only this Job's pods are
/// touched, each once.
async fn label_pods_with_their_index(ctx: &Context, ns: &str, job: &str) -> Result<(), Error> {
    let now = std::time::Instant::now();
    let pods: Vec<(String, Option<String>, String)> = {
        let Ok(mut labelled) = ctx.labelled.lock() else {
            return Ok(());
        };
        labelled.retain(|_, at| now.duration_since(*at) < LABEL_ECHO_WAIT);
        ctx.stores
            .broker_pods
            .state()
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
            .filter(|p| p.labels().get(render::labels::JOB).map(String::as_str) == Some(job))
            .filter(|p| !p.labels().contains_key(JOB_INDEX))
            .filter_map(|p| {
                let uid = p.uid();
                let index = p.annotations().get(COMPLETION_INDEX)?;
                let recent = uid.as_ref().is_some_and(|u| labelled.contains_key(u));
                (!recent).then(|| (p.name_any(), uid, index.clone()))
            })
            .collect()
    };
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    for (pod, uid, index) in pods {
        let patch = serde_json::json!({"metadata": {"labels": {JOB_INDEX: index}}});
        match api
            .patch(&pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                ctx.metrics.api_write("Pod", "patch");
                if let (Some(uid), Ok(mut labelled)) = (uid, ctx.labelled.lock()) {
                    labelled.insert(uid, now);
                }
            }
            // Gone already (a finished or replaced pod): nothing to label.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(kube_err(format!("labelling Pod {ns}/{pod}"))(e)),
        }
    }
    Ok(())
}

/// How long a labelled pod is left alone while the pod cache does not show the label yet;
/// after that the patch is sent again (the label was removed, or the echo was lost).
const LABEL_ECHO_WAIT: Duration = Duration::from_secs(30);

/// The label the MiniCluster docs promise on every broker pod.
pub const JOB_INDEX: &str = "job-index";
/// Annotation Kubernetes puts on Indexed Job pods.
const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// The certificate in the MiniCluster's curve Secret, if the cache has one.
fn stored_certificate(ctx: &Context, ns: &str, name: &str) -> Option<String> {
    get(&ctx.stores.secrets, ns, &render::curve_secret_name(name))
        .and_then(|s| s.data.as_ref()?.get(layout::CURVE_KEY).cloned())
        .and_then(|bytes| String::from_utf8(bytes.0).ok())
}

/// The MiniCluster's CURVE certificate: created once and reused forever. The Secret
/// cache is synced before the first reconcile, so after a hub restart the stored
/// certificate is always found.
fn certificate(ctx: &Context, ns: &str, name: &str) -> String {
    let key = (ns.to_string(), name.to_string());
    let stored = stored_certificate(ctx, ns, name);
    let Ok(mut generated) = ctx.generated_certs.lock() else {
        return stored.unwrap_or_else(|| CurveCert::generate(name).to_zcert());
    };
    match stored {
        Some(cert) => {
            generated.remove(&key);
            cert
        }
        None => generated
            .entry(key)
            .or_insert_with(|| CurveCert::generate(name).to_zcert())
            .clone(),
    }
}

/// Compute the status; write it, with Events for new problems and outcomes, only when it
/// differs from the current one.
async fn finish(
    ctx: &Context,
    mc: &MiniCluster,
    declared_max: Option<i32>,
    job: Option<&Job>,
    problem: Option<&Problem>,
    now: &Time,
    fed: Option<Federated>,
) -> Result<MiniClusterStatus, Error> {
    let mut status = status::compute(mc, declared_max, job, problem, now);
    let previous = mc.status.clone().unwrap_or_default();
    let mut burst_events = Vec::new();
    if let Some(fed) = fed {
        let key = mc_key(mc);
        let info = mc_info(mc, &status, fed.lead.as_ref());
        ctx.registry.set(&key, info, fed.bursts, fed.assignments);
        let views = ctx.registry.bursts(&key);
        let statuses = bursts::statuses(
            &views,
            fed.waiting.as_deref(),
            &previous.bursts,
            std::time::SystemTime::from(now.0),
        );
        burst_events = bursts::events(&previous.bursts, &statuses);
        status = status::with_bursts(
            status,
            &previous,
            fed.lead,
            statuses,
            mc.metadata.generation,
            now,
        );
        let (connected, assignments) = ctx.registry.counts();
        ctx.metrics.set_federation(connected, assignments);
    }
    if status == previous || ctx.status_just_written(mc, &status) {
        return Ok(status);
    }
    for (warning, reason, note) in burst_events {
        let type_ = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        publish(ctx, mc, type_, reason, note).await;
    }
    if let Some(p) = problem {
        let already = previous
            .conditions
            .iter()
            .any(|c| c.type_ == "Degraded" && c.status == "True" && c.message == p.message);
        if !already {
            warn!(reason = %p.reason, message = %p.message, "spec not applied");
            publish(ctx, mc, EventType::Warning, &p.reason, p.message.clone()).await;
        }
    }
    if status.phase != previous.phase {
        match status.phase.as_deref() {
            Some(minicluster_phase::FAILED) => {
                publish(
                    ctx,
                    mc,
                    EventType::Warning,
                    "JobFailed",
                    "the Job failed".into(),
                )
                .await
            }
            Some(minicluster_phase::SUCCEEDED) => {
                publish(
                    ctx,
                    mc,
                    EventType::Normal,
                    "Completed",
                    "the Job completed".into(),
                )
                .await
            }
            _ => {}
        }
    }
    write_status(ctx, mc, &status).await?;
    ctx.status_written(mc, &status);
    Ok(status)
}

/// How long a written status is trusted over the cache's older one: the watch event of a
/// status write arrives within milliseconds; after this a write that did not show is
/// sent again.
const STATUS_ECHO_WAIT: Duration = Duration::from_secs(30);

impl Context {
    fn status_hash(mc: &MiniCluster, status: &MiniClusterStatus) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        mc.metadata.uid.hash(&mut h);
        serde_json::to_vec(status).unwrap_or_default().hash(&mut h);
        h.finish()
    }

    /// Whether this process wrote exactly `status` for `mc` within [`STATUS_ECHO_WAIT`].
    fn status_just_written(&self, mc: &MiniCluster, status: &MiniClusterStatus) -> bool {
        let hash = Self::status_hash(mc, status);
        self.written_status.lock().is_ok_and(|written| {
            written
                .get(&mc_key(mc))
                .is_some_and(|(h, at)| *h == hash && at.elapsed() < STATUS_ECHO_WAIT)
        })
    }

    fn status_written(&self, mc: &MiniCluster, status: &MiniClusterStatus) {
        let hash = Self::status_hash(mc, status);
        if let Ok(mut written) = self.written_status.lock() {
            if written.len() >= 64 {
                written.retain(|_, (_, at)| at.elapsed() < STATUS_ECHO_WAIT);
            }
            written.insert(mc_key(mc), (hash, std::time::Instant::now()));
        }
    }
}

async fn write_status(
    ctx: &Context,
    mc: &MiniCluster,
    status: &MiniClusterStatus,
) -> Result<(), Error> {
    let ns = mc.namespace().unwrap_or_default();
    let name = mc.name_any();
    let api: Api<MiniCluster> = Api::namespaced(ctx.client.clone(), &ns);
    let body = serde_json::json!({
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "status": status,
    });
    api.patch_status(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(kube_err(format!(
        "updating status of MiniCluster {ns}/{name}"
    )))?;
    ctx.metrics.api_write("MiniCluster", "patch-status");
    Ok(())
}

/// A MiniCluster whose spec cannot be applied keeps its bursts running as they are: its
/// spokes are told to retain what they run for bursts the registry has no assignment for
/// (after a hub restart), taken from the status.
fn retain_from_status(ctx: &Context, mc: &MiniCluster) {
    let (ns, name) = mc_key(mc);
    let bursts: Vec<BurstInfo> = mc
        .status
        .iter()
        .flat_map(|s| s.bursts.iter())
        .map(|b| BurstInfo {
            key: assignment_key(&ns, &name, &b.name),
            name: b.name.clone(),
            spoke: b.cluster.clone(),
            size: b.size,
        })
        .collect();
    if !bursts.is_empty() {
        ctx.registry.retain(&(ns, name), &bursts);
    }
}

/// Rebuild the registry from the MiniClusters that exist (hub start-up, caches synced),
/// then let spokes in: every spoke's first snapshot lists exactly what it ran before the
/// restart, so nothing running is deleted. Uses the last known lead broker endpoint from
/// each status and the stored certificates; reconciles refine it afterwards.
pub fn prime(ctx: &Context, miniclusters: &[MiniCluster]) {
    for mc in miniclusters {
        let key = mc_key(mc);
        let previous = mc.status.clone().unwrap_or_default();
        if mc.metadata.deletion_timestamp.is_some() {
            if has_finalizer(mc) {
                let bursts = Plan::new(mc).map(|p| burst_infos(&p)).unwrap_or_default();
                ctx.registry.withdraw(&key, McInfo::default(), bursts);
            }
            continue;
        }
        let plan = sizing::effective(mc).ok().and_then(|e| Plan::new(&e).ok());
        let Some(plan) = plan else {
            retain_from_status(ctx, mc);
            continue;
        };
        let lead = previous.lead_broker.clone();
        let cert = stored_certificate(ctx, &key.0, &key.1)
            .or_else(|| plan.spec.flux().curve_cert().map(str::to_string));
        let assignments = match (&lead, cert) {
            (Some(l), Some(cert)) if !plan.bursts.is_empty() => assignment::build(
                &plan,
                &cert,
                &flux_shared::plan::Endpoint {
                    address: l.address.clone(),
                    port: l.port,
                },
            )
            .unwrap_or_default(),
            _ => Vec::new(),
        };
        let info = mc_info(mc, &previous, lead.as_ref());
        ctx.registry
            .set(&key, info, burst_infos(&plan), assignments);
    }
    ctx.registry.set_primed();
    info!(
        miniclusters = miniclusters.len(),
        "federation state rebuilt; serving spokes"
    );
}

/// What the federation decided in one reconcile of a planned MiniCluster.
pub struct Federated {
    /// The lead broker's endpoint, when known.
    lead: Option<LeadBrokerStatus>,
    /// Why the endpoint is not known.
    waiting: Option<String>,
    /// The declared bursts.
    bursts: Vec<BurstInfo>,
    /// Assignments to send (none until the endpoint is known).
    assignments: Vec<SpokeAssignment>,
}

fn mc_key(mc: &MiniCluster) -> McKey {
    (mc.namespace().unwrap_or_default(), mc.name_any())
}

fn burst_infos(plan: &Plan) -> Vec<BurstInfo> {
    plan.bursts
        .iter()
        .enumerate()
        .map(|(index, b)| BurstInfo {
            key: assignment_key(&plan.namespace, &plan.name, &b.name),
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
        })
        .collect()
}

fn has_finalizer(mc: &MiniCluster) -> bool {
    mc.finalizers().iter().any(|f| f == federation::FINALIZER)
}

/// Replace the MiniCluster's finalizers, guarded by its resourceVersion (a concurrent
/// change makes this fail with 409 and the reconcile retry).
async fn set_finalizers(
    ctx: &Context,
    mc: &MiniCluster,
    finalizers: Vec<String>,
) -> Result<(), Error> {
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

/// Bursts: keep the finalizer, resolve the lead broker's endpoint, build the assignments.
async fn federate(
    ctx: &Context,
    mc: &MiniCluster,
    plan: &Plan,
    cert: &str,
    ns: &str,
    name: &str,
) -> Result<Federated, Error> {
    let bursts = burst_infos(plan);
    if bursts.is_empty() {
        // Bursts removed from the spec: release the finalizer once spokes confirmed.
        if has_finalizer(mc) && !ctx.registry.has_unconfirmed_withdrawals(&mc_key(mc)) {
            let rest = mc
                .finalizers()
                .iter()
                .filter(|f| *f != federation::FINALIZER)
                .cloned()
                .collect();
            set_finalizers(ctx, mc, rest).await?;
        }
        return Ok(Federated {
            lead: None,
            waiting: None,
            bursts,
            assignments: Vec::new(),
        });
    }
    if !has_finalizer(mc) {
        let mut all: Vec<String> = mc.finalizers().to_vec();
        all.push(federation::FINALIZER.to_string());
        set_finalizers(ctx, mc, all).await?;
    }
    let previous = mc.status.as_ref().and_then(|s| s.lead_broker.as_ref());
    let node_port = get(&ctx.stores.services, ns, &render::lead_service_name(plan))
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
    if lead::needs_node_lookup(&inputs)
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
        Err(reason) => (None, Some(reason)),
    };
    let assignments = match &lead {
        None => Vec::new(),
        Some(l) => {
            let endpoint = flux_shared::plan::Endpoint {
                address: l.address.clone(),
                port: l.port,
            };
            // Serialising a validated spec cannot fail; should it, nothing is sent and
            // the reason shows in the bursts' status.
            match assignment::build(plan, cert, &endpoint) {
                Ok(a) => a,
                Err(e) => {
                    warn!(error = %e, "cannot build assignments");
                    return Ok(Federated {
                        lead,
                        waiting: Some(e.to_string()),
                        bursts,
                        assignments: Vec::new(),
                    });
                }
            }
        }
    };
    Ok(Federated {
        lead,
        waiting,
        bursts,
        assignments,
    })
}

/// The node running the lead broker (completion index 0) pod of Job `job`.
fn lead_pod_node(stores: &Stores, ns: &str, job: &str) -> Option<String> {
    stores
        .broker_pods
        .state()
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.labels().get(render::labels::JOB).map(String::as_str) == Some(job))
        .filter(|p| {
            p.labels()
                .get(render::labels::COMPLETION_INDEX)
                .map(String::as_str)
                == Some("0")
                || p.annotations().get(COMPLETION_INDEX).map(String::as_str) == Some("0")
        })
        .find_map(|p| p.spec.as_ref()?.node_name.clone())
}

/// A deleted MiniCluster: withdraw its bursts, wait (bounded) for every spoke to confirm
/// them gone, then release the finalizer.
async fn finalize(mc: &MiniCluster, ctx: &Context, ns: &str, name: &str) -> Result<Action, Error> {
    if !has_finalizer(mc) {
        return Ok(Action::await_change());
    }
    let key = (ns.to_string(), name.to_string());
    // An invalid spec has no bursts the registry could know of.
    let bursts = Plan::new(mc).map(|p| burst_infos(&p)).unwrap_or_default();
    let previous = mc.status.clone().unwrap_or_default();
    ctx.registry
        .withdraw(&key, mc_info(mc, &previous, None), bursts);
    let progress = ctx.registry.deletion_progress(&key);
    let pending: Vec<_> = progress.iter().filter(|p| !p.confirmed).collect();
    let now = (ctx.now)();
    let elapsed_ms = mc
        .metadata
        .deletion_timestamp
        .as_ref()
        .map_or(0, |t| now.0.as_millisecond() - t.0.as_millisecond());
    let timeout_ms = i64::try_from(ctx.deletion_timeout.as_millis()).unwrap_or(i64::MAX);
    if pending.is_empty() {
        if !progress.is_empty() {
            publish(
                ctx,
                mc,
                EventType::Normal,
                "BurstsDeleted",
                format!(
                    "every spoke confirmed deleting the bursts ({})",
                    progress
                        .iter()
                        .map(|p| format!("{} on {}", p.burst, p.spoke))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
            .await;
        }
    } else if elapsed_ms >= timeout_ms {
        for p in &pending {
            publish(
                ctx,
                mc,
                EventType::Warning,
                "SpokeUnreachable",
                format!(
                    "spoke {} did not confirm deleting burst {} within {}s; its objects may remain in that cluster",
                    p.spoke,
                    p.burst,
                    ctx.deletion_timeout.as_secs()
                ),
            )
            .await;
        }
    } else {
        let views = ctx.registry.bursts(&key);
        let statuses = bursts::statuses(
            &views,
            None,
            &previous.bursts,
            std::time::SystemTime::from(now.0),
        );
        if statuses != previous.bursts {
            let status = status::with_bursts(
                previous.clone(),
                &previous,
                previous.lead_broker.clone(),
                statuses,
                mc.metadata.generation,
                &now,
            );
            write_status(ctx, mc, &status).await?;
        }
        let remaining = u64::try_from(timeout_ms - elapsed_ms).unwrap_or(0);
        // Reports wake the reconcile earlier; this is the deadline.
        return Ok(Action::requeue(Duration::from_millis(remaining.max(1))));
    }
    let rest = mc
        .finalizers()
        .iter()
        .filter(|f| *f != federation::FINALIZER)
        .cloned()
        .collect();
    set_finalizers(ctx, mc, rest).await?;
    ctx.registry.forget(&key);
    info!("bursts withdrawn; finalizer released");
    Ok(Action::await_change())
}

/// What the registry shows admin clients of `mc`, from a status (the one computed now, or
/// the last one written).
fn mc_info(
    mc: &MiniCluster,
    status: &MiniClusterStatus,
    lead: Option<&LeadBrokerStatus>,
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
    }
}

enum Applied {
    Unchanged,
    /// The Job as written, and whether this write created it.
    Job(Box<Job>, bool),
    Other,
}

async fn apply_if_changed(ctx: &Context, ns: &str, object: &Object) -> Result<Applied, Error> {
    let s = &ctx.stores;
    Ok(match object {
        Object::ConfigMap(o) => apply(ctx, ns, o, &s.config_maps)
            .await?
            .map_or(Applied::Unchanged, |_| Applied::Other),
        Object::Secret(o) => apply(ctx, ns, o, &s.secrets)
            .await?
            .map_or(Applied::Unchanged, |_| Applied::Other),
        Object::Service(o) => apply(ctx, ns, o, &s.services)
            .await?
            .map_or(Applied::Unchanged, |_| Applied::Other),
        Object::Pod(o) => apply(ctx, ns, o, &s.pods)
            .await?
            .map_or(Applied::Unchanged, |_| Applied::Other),
        Object::Job(o) => apply(ctx, ns, &cache::stamp(o), &s.jobs)
            .await?
            .map_or(Applied::Unchanged, |(j, created)| {
                Applied::Job(Box::new(j), created)
            }),
    })
}

/// Make the live object `desired`: nothing when the cached live object already has every
/// field, a POST when the cache has none, else a server-side apply (after taking over,
/// as this manager's apply, the fields a POST recorded: see [`ownership`]). Returns the
/// object written and whether this call created it.
async fn apply<K>(
    ctx: &Context,
    ns: &str,
    desired: &K,
    store: &Store<K>,
) -> Result<Option<(K, bool)>, Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
        + Compact,
{
    let name = desired.meta().name.clone().unwrap_or_default();
    let kind = K::kind(&());
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    if let Some(live) = get(store, ns, &name) {
        let (Ok(mut want), Ok(have)) =
            (serde_json::to_value(desired), serde_json::to_value(&*live))
        else {
            return Ok(None);
        };
        K::comparable(&mut want);
        if is_subset(&want, &have) {
            return Ok(None);
        }
    } else {
        let params = PostParams {
            field_manager: Some(MANAGER.into()),
            ..PostParams::default()
        };
        match api.create(&params, desired).await {
            Ok(created) => {
                ctx.metrics.api_write(&kind, "create");
                info!(kind = %kind, object = %name, "created");
                return Ok(Some((created, true)));
            }
            // The cache had not seen it yet: change it like any live object.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(kube_err(format!("creating {kind} {ns}/{name}"))(e)),
        }
    }
    take_over_created_fields(ctx, &api, ns, &name).await?;
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(desired),
        )
        .await
        .map_err(kube_err(format!("applying {kind} {ns}/{name}")))?;
    ctx.metrics.api_write(&kind, "apply");
    info!(kind = %kind, object = %name, "applied");
    Ok(Some((applied, false)))
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
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
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
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(kube_err(format!(
            "taking over the fields of {kind} {ns}/{name} for server-side apply"
        )))?;
    ctx.metrics.api_write(&kind, "patch");
    Ok(())
}

fn get<K>(store: &Store<K>, ns: &str, name: &str) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    store.get(&ObjectRef::new(name).within(ns))
}

fn managed_objects(s: &Stores) -> i64 {
    let n = s.jobs.len()
        + s.secrets.len()
        + s.config_maps.len()
        + s.services.len()
        + s.broker_pods.len()
        + s.pods.len();
    i64::try_from(n).unwrap_or(i64::MAX)
}

async fn publish(ctx: &Context, mc: &MiniCluster, type_: EventType, reason: &str, note: String) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    // An Event that cannot be written must not fail the reconcile.
    match ctx.recorder.publish(&event, &mc.object_ref(&())).await {
        Ok(()) => ctx.metrics.api_write("Event", "create"),
        Err(error) => warn!(%error, reason, "could not publish event"),
    }
}

/// Retry with capped exponential backoff per MiniCluster: 1 s, 2 s, 4 s ... 5 min.
pub fn error_policy(mc: Arc<MiniCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed(error.kind());
    let key = (mc.namespace().unwrap_or_default(), mc.name_any());
    let attempt = ctx
        .failures
        .lock()
        .map(|mut failures| {
            let n = failures.entry(key).or_insert(0);
            *n = n.saturating_add(1);
            *n
        })
        .unwrap_or(1);
    let delay = backoff(attempt);
    warn!(%error, attempt, delay_ms = delay.as_millis() as u64, "reconcile failed; retrying");
    Action::requeue(delay)
}

/// Delay before retry `attempt` (1-based).
pub fn backoff(attempt: u32) -> Duration {
    let exp = attempt.saturating_sub(1).min(16);
    Duration::from_secs(1u64 << exp).min(Duration::from_secs(300))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_exponential_and_capped() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(9), Duration::from_secs(256));
        assert_eq!(backoff(10), Duration::from_secs(300));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(300));
    }
}
