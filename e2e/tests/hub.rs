//! End-to-end tests of `flux-hub run` against the cluster named by `KUBECONFIG`.
//!
//! Every test gets its own namespace and, when it needs one, its own hub process watching
//! only that namespace, so the tests run in parallel and leave nothing behind. They assert
//! on what the control plane produces (objects, owner references, statuses, Events,
//! admission errors, garbage collection) and on pod statuses; what runs inside the pods is
//! checked with real Flux in `flux.rs`. They are ignored unless asked for and fail without
//! a reachable `KUBECONFIG` cluster. See README.md.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use flux_shared::api::MiniCluster;
use flux_shared::curve::CurveCert;
use flux_shared::layout::{BROKER_TOML_KEY, CURVE_KEY, R_KEY};
use flux_shared::plan::{Plan, Role};
use flux_shared::render::{self, Object, labels};
use flux_shared::validate::author_rules;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use support::{
    FIELD_MANAGER, Probe, TestEnv, describe_event, ensure_controlled_by, mc_conditions,
    mentions_max, pod_ran, pod_summary, secs, selector_matches, yaml,
};

/// The Flux broker port (the lead broker's Service exposes it).
const BROKER_PORT: i32 = flux_shared::api::defaults::BROKER_PORT;

/// How long the hub gets to create or change objects.
fn objects_deadline() -> Duration {
    secs(60)
}

/// How long broker pods get to start.
fn pods_deadline() -> Duration {
    secs(60)
}

// ---------------------------------------------------------------------------------------
// The tests.

/// hello-world: every child object with its key fields, the status, a certificate that
/// survives a re-apply and a hub restart, and (when pods run) ready brokers.
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG (scripts/e2e.sh)"]
async fn hello_world_creates_every_child_object() {
    support::run("hello", true, hello_world).await;
}

/// drift: a child edited or deleted by hand is put back at once, woken by its own watch
/// event (nothing else changes on a quiet cluster).
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG (scripts/e2e.sh)"]
async fn an_edited_or_deleted_child_is_put_back() {
    support::run("drift", true, drift).await;
}

/// elasticity: the scale subresource resizes the Job in place; above maxSize is refused.
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG (scripts/e2e.sh)"]
async fn scale_subresource_resizes_the_job_in_place() {
    support::run("scale", true, scaling).await;
}

/// A MiniCluster without maxSize declared its hosts at its first size: scaling above is
/// accepted by the API server but refused by the hub (condition, Event, Job untouched).
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG (scripts/e2e.sh)"]
async fn scaling_above_the_declared_hosts_is_refused_by_the_hub() {
    support::run("above-max", true, scaling_above_declared_hosts).await;
}

/// The CRD's CEL rules reject bad MiniClusters at apply time (no hub involved).
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG (scripts/e2e.sh)"]
async fn crd_rejects_invalid_miniclusters_at_apply_time() {
    support::run("crd", false, crd_validation).await;
}

/// Deleting a MiniCluster garbage-collects its children through owner references.
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG (scripts/e2e.sh)"]
async fn deleting_a_minicluster_removes_its_children() {
    support::run("delete", true, deletion).await;
}

/// A bursting MiniCluster's root objects: the lead broker's NodePort Service and the
/// hostlist of every cluster in rank order; with bursting removed, the Service goes.
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG (scripts/e2e.sh)"]
async fn someone_elses_objects_with_the_roots_names_are_never_touched() {
    support::run("taken", true, taken_names).await;
}

#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG (scripts/e2e.sh)"]
async fn bursting_root_exposes_the_lead_broker_until_bursting_is_removed() {
    support::run("burst", true, bursting_root).await;
}

/// A queue manager's say on the root Job stands: Kueue's protocol (suspended at creation,
/// resumed on admission, suspended again on preemption) played by a stand-in manager on
/// the real API server, while the hub applies changes to the same Job.
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG (scripts/e2e.sh)"]
async fn a_queue_managers_suspend_and_resume_stand() {
    support::run("queue", true, queue_manager).await;
}

/// The install's admission policy (deploy/admission-policy.yaml) on a real API server: a
/// user who may only create MiniClusters is refused every rule of the table the policy is
/// generated from (`flux_shared::validate::author_rules`: privileges, capabilities, unconfined
/// seccomp and AppArmor, SELinux labels, unsafe sysctls, host namespaces and paths,
/// tolerations, service accounts, tokens, Secrets, ConfigMaps, PVCs, inline CSI volumes, in
/// the containers, the services and the flux view), each naming the field and the rule,
/// and keeps a useful operator (a plain MiniCluster, node selection, label edits of one an
/// admin made); a user who may also create pods gets each of them.
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG (scripts/e2e.sh)"]
async fn a_minicluster_grants_its_author_nothing_they_could_not_do() {
    support::run("author", false, author_rights).await;
}

/// Without a cluster: the checks these tests make accept exactly what the renderer
/// produces for the same examples (and reject a wrong object), so an e2e failure points
/// at the cluster or the hub, never at a test expecting what the renderer does not make.
#[test]
fn checks_agree_with_the_renderer() -> Result<()> {
    const NS: &str = "flux-e2e-offline";
    let (mc, plan, objects) = rendered("hello-world.yaml", NS)?;
    let hello = children_of(&objects, "hello-world")?;
    check_root_objects(NS, &hello, &mc, 4, &["hello-world-[0-3]"], "0-3")?;
    ensure!(selector_matches(
        &render::selector(&plan),
        &template_labels(&hello.job)
    )?);
    ensure!(
        check_root_objects(NS, &hello, &mc, 4, &["hello-world-[0-4]"], "0-4").is_err(),
        "a wrong hostlist must be caught"
    );
    ensure!(
        check_root_objects("elsewhere", &hello, &mc, 4, &["hello-world-[0-3]"], "0-3").is_err(),
        "a broker.toml of another namespace must be caught"
    );

    let (mc, plan, objects) = rendered("bursting.yaml", NS)?;
    let bursty = children_of(&objects, "bursty")?;
    let hosts = ["bursty-[0-2]", "burst-gke-[0-3]", "burst-kind-[0-1]"];
    check_root_objects(NS, &bursty, &mc, 2, &hosts, "0-8")?;
    ensure!(
        check_hosts(&bursty.config_map, &["burst-gke-[0-3]", "bursty-[0-2]"]).is_err(),
        "hosts out of rank order must be caught"
    );
    let lead = objects
        .iter()
        .find_map(|o| match o {
            Object::Service(s) if s.name_any() == "bursty-lead" => Some(s.clone()),
            _ => None,
        })
        .context("no bursty-lead Service rendered")?;
    check_lead_service(&lead, &bursty.job, &mc)?;
    ensure!(selector_matches(
        &render::selector(&plan),
        &template_labels(&bursty.job)
    )?);
    ensure!(
        check_lead_service(&lead, &hello.job, &mc).is_err(),
        "a lead Service selecting another Job's pods must be caught"
    );

    let (_, _, objects) = rendered("elasticity.yaml", NS)?;
    let elastic = children_of(&objects, "elastic")?;
    check_hosts(&elastic.config_map, &["elastic-[0-5]"])?;
    ensure!(job_sizes(&elastic.job) == (Some(2), Some(2)));

    let (_, _, objects) = rendered("interactive.yaml", NS)?;
    check_hosts(
        &children_of(&objects, "interactive")?.config_map,
        &["interactive-[0-1]"],
    )?;
    Ok(())
}

#[test]
fn selectors_match_like_the_api_server() -> Result<()> {
    let labels = BTreeMap::from([
        ("a".to_string(), "1".to_string()),
        ("b".to_string(), "2".to_string()),
    ]);
    for (selector, expected) in [
        ("a=1", true),
        ("a==1,b=2", true),
        ("a=1,b=3", false),
        ("a!=2", true),
        ("b!=2", false),
        ("a", true),
        ("c", false),
        ("!c", true),
        ("!a", false),
        ("", true),
    ] {
        ensure!(
            selector_matches(selector, &labels)? == expected,
            "{selector:?} should match: {expected}"
        );
    }
    ensure!(selector_matches("a in (1)", &labels).is_err());
    Ok(())
}

/// An example as the API server would hand it to the hub (namespace and uid set), its
/// plan and its root objects.
fn rendered(file: &str, ns: &str) -> Result<(MiniCluster, Plan, Vec<Object>)> {
    let mut doc = support::example(file)?;
    doc["metadata"]["namespace"] = json!(ns);
    doc["metadata"]["uid"] = json!("8d5e9c1a-0000-4000-8000-000000000001");
    let mc: MiniCluster = serde_json::from_value(doc)?;
    let plan = Plan::new(&mc).map_err(|e| anyhow::anyhow!("examples/{file}: {e}"))?;
    let name = mc.name_any();
    let objects = render::render(&plan, &Role::Root, &CurveCert::generate(&name).to_zcert())
        .context("no root objects")?;
    Ok((mc, plan, objects))
}

fn children_of(objects: &[Object], name: &str) -> Result<Children> {
    let (mut job, mut service, mut config_map, mut secret) = (None, None, None, None);
    for o in objects {
        match o {
            Object::Job(j) if j.name_any() == name => job = Some(j.clone()),
            Object::Service(s) if s.name_any() == name => service = Some(s.clone()),
            Object::ConfigMap(c) if c.name_any() == format!("{name}-flux-config") => {
                config_map = Some(c.clone())
            }
            Object::Secret(s) if s.name_any() == format!("{name}-curve") => {
                secret = Some(s.clone())
            }
            _ => {}
        }
    }
    Ok(Children {
        job: job.context("no Job")?,
        service: service.context("no headless Service")?,
        config_map: config_map.context("no ConfigMap")?,
        secret: secret.context("no Secret")?,
    })
}

// ---------------------------------------------------------------------------------------
// Test bodies.

async fn hello_world(env: &TestEnv) -> Result<()> {
    const NAME: &str = "hello-world";
    const SIZE: i32 = 4;
    let mcs = env.api::<MiniCluster>();
    env.apply_example("hello-world.yaml").await?;

    let children = wait_for_children(env, NAME).await?;
    let mc = mcs.get(NAME).await?;
    check_root_objects(&env.ns, &children, &mc, SIZE, &["hello-world-[0-3]"], "0-3")?;

    let mc = wait_for_status(env, NAME, SIZE, SIZE).await?;
    check_selector(&mc, &children.job)?;

    // The certificate is generated once: neither a re-apply nor a hub restart rotates it,
    // and nothing is re-created.
    let cert = curve_cert(&children.secret)?;
    let secret_uid = children.secret.metadata.uid.clone();
    let job_uid = children.job.metadata.uid.clone();
    env.apply_example("hello-world.yaml").await?;
    env.restart_hub().await?;
    let (secrets, jobs) = (env.api::<Secret>(), env.api::<Job>());
    env.holds_for(
        "the CURVE certificate and the Job stay the same after a re-apply and a hub restart",
        Duration::from_secs(10),
        async || {
            let Some(secret) = secrets.get_opt("hello-world-curve").await? else {
                return Ok(Some("Secret hello-world-curve was deleted".into()));
            };
            let Some(job) = jobs.get_opt(NAME).await? else {
                return Ok(Some("Job hello-world was deleted".into()));
            };
            Ok(if secret.metadata.uid != secret_uid {
                Some("Secret hello-world-curve was re-created".into())
            } else if curve_cert(&secret).ok().as_ref() != Some(&cert) {
                Some("the certificate in Secret hello-world-curve changed (rotated)".into())
            } else if job.metadata.uid != job_uid {
                Some("Job hello-world was re-created".into())
            } else {
                None
            })
        },
    )
    .await?;

    // Pod-level outcomes.
    let job = jobs.get(NAME).await?;
    let started = env
        .poll(pods_deadline(), async || {
            let pods = env.job_pods(&job).await?;
            Ok(if pods.iter().any(pod_ran) {
                Probe::Done(())
            } else {
                Probe::Waiting(pod_summary(&pods))
            })
        })
        .await?;
    if let Err(pods) = started {
        bail!(
            "no broker pod reached Running within {:?}; pods:\n{pods}",
            pods_deadline()
        );
    }
    // The hub labels every broker pod with its completion index, as the docs promise (a
    // selector for, e.g., a Service of the lead broker).
    env.eventually(
        "every broker pod labelled job-index=<its completion index>",
        objects_deadline(),
        async || {
            let pods = env.job_pods(&job).await?;
            let unlabelled: Vec<String> = pods
                .iter()
                .filter(|p| {
                    let index = p
                        .annotations()
                        .get("batch.kubernetes.io/job-completion-index");
                    index.is_none() || p.labels().get("job-index") != index
                })
                .map(|p| p.name_any())
                .collect();
            Ok(if pods.is_empty() || !unlabelled.is_empty() {
                Probe::Waiting(format!(
                    "pods without their job-index label: {unlabelled:?}"
                ))
            } else {
                Probe::Done(())
            })
        },
    )
    .await?;
    enum Outcome {
        BrokersReady(i32),
        Completed,
        Failed(Box<Job>),
    }
    let outcome = env
        .eventually(
            "status.brokersReady > 0 (or the Job to finish)",
            secs(120),
            async || {
                let mc = mcs.get(NAME).await?;
                let job = jobs.get(NAME).await?;
                let ready = mc.status.as_ref().map_or(0, |s| s.brokers_ready);
                Ok(if ready > 0 {
                    Probe::Done(Outcome::BrokersReady(ready))
                } else if job_condition(&job, "Complete") {
                    Probe::Done(Outcome::Completed)
                } else if job_condition(&job, "Failed") {
                    Probe::Done(Outcome::Failed(Box::new(job)))
                } else {
                    Probe::Waiting(format!(
                        "MiniCluster status:\n{}Job status:\n{}",
                        yaml(&mc.status),
                        yaml(&job.status)
                    ))
                })
            },
        )
        .await?;
    match outcome {
        Outcome::BrokersReady(n) => eprintln!("hello: pods run; status.brokersReady reached {n}"),
        Outcome::Completed => {
            eprintln!(
                "hello: the Job completed before ready brokers were seen; checking the phase"
            );
            env.eventually(
                "MiniCluster phase Succeeded after the Job completed",
                objects_deadline(),
                async || {
                    let mc = mcs.get(NAME).await?;
                    let phase = mc.status.as_ref().and_then(|s| s.phase.clone());
                    Ok(if phase.as_deref() == Some("Succeeded") {
                        Probe::Done(())
                    } else {
                        Probe::Waiting(yaml(&mc.status))
                    })
                },
            )
            .await?;
        }
        Outcome::Failed(job) => {
            let pods = env.job_pods(&job).await.unwrap_or_default();
            bail!(
                "the Job hello-world failed although its pods ran; Job status:\n{}Pods:\n{}",
                yaml(&job.status),
                env.pod_report(&pods).await
            );
        }
    }
    Ok(())
}

async fn scaling(env: &TestEnv) -> Result<()> {
    const NAME: &str = "elastic";
    let mcs = env.api::<MiniCluster>();
    env.apply_example("elasticity.yaml").await?;

    let children = wait_for_children(env, NAME).await?;
    let uid = children.job.metadata.uid.clone();
    ensure!(
        job_sizes(&children.job) == (Some(2), Some(2)),
        "Job elastic should start with completions = parallelism = 2:\n{}",
        yaml(&children.job)
    );
    check_hosts(&children.config_map, &["elastic-[0-5]"])?;
    let mc = wait_for_status(env, NAME, 2, 6).await?;

    // The scale subresource reads spec.size, status.size and status.selector.
    let scale = mcs.get_scale(NAME).await?;
    let selector = mc.status.as_ref().map(|s| s.selector.clone());
    ensure!(
        scale.spec.as_ref().and_then(|s| s.replicas) == Some(2)
            && scale.status.as_ref().map(|s| s.replicas) == Some(2)
            && scale.status.as_ref().and_then(|s| s.selector.clone()) == selector,
        "the scale subresource should show 2 replicas and selector {selector:?}:\n{}",
        yaml(&scale)
    );

    // Up to 4: the Job is resized, not re-created, and the declared hosts stay.
    let scale = patch_scale(&mcs, NAME, 4)
        .await
        .context("patching the scale subresource to 4")?;
    ensure!(
        scale.spec.as_ref().and_then(|s| s.replicas) == Some(4),
        "the scale subresource did not take 4:\n{}",
        yaml(&scale)
    );
    wait_for_job_size(env, NAME, 4, &uid).await?;
    wait_for_status(env, NAME, 4, 6).await?;
    let scale = mcs.get_scale(NAME).await?;
    ensure!(
        scale.status.as_ref().map(|s| s.replicas) == Some(4),
        "the scale subresource should report 4 replicas:\n{}",
        yaml(&scale)
    );
    let config_map = env.api::<ConfigMap>().get("elastic-flux-config").await?;
    check_hosts(&config_map, &["elastic-[0-5]"])?;
    // The hub created the Job with a POST and resized it with a server-side apply: from
    // then on its fields are the hub's applied ones (an apply prunes what it stops
    // sending), not left under the POST's Update entry.
    let job = env.api::<Job>().get(NAME).await?;
    let hub_entries: Vec<_> = job
        .managed_fields()
        .iter()
        .filter(|e| e.manager.as_deref() == Some("flux-hub") && e.subresource.is_none())
        .map(|e| e.operation.clone().unwrap_or_default())
        .collect();
    ensure!(
        hub_entries == ["Apply"],
        "the resized Job's flux-hub managedFields entries are {hub_entries:?}, not one Apply entry"
    );

    // Above maxSize (9 > 6). The CRD's CEL rule (maxSize >= size) is evaluated on scale
    // subresource writes too, so a conformant API server rejects it; should one accept
    // it, the hub must refuse it instead.
    match patch_scale(&mcs, NAME, 9).await {
        Err(kube::Error::Api(status)) if status.code == 422 => {
            ensure!(
                status.message.contains("spec.maxSize"),
                "scaling to 9 was rejected, but not by the maxSize rule: {}",
                status.message
            );
            eprintln!(
                "scale: the API server rejected 9 > maxSize 6: {}",
                status.message
            );
            let mc = mcs.get(NAME).await?;
            ensure!(
                mc.spec.size == 4,
                "a rejected scale changed spec.size:\n{}",
                yaml(&mc)
            );
        }
        Err(e) => return Err(e).context("patching the scale subresource to 9"),
        Ok(_) => {
            eprintln!(
                "scale: the API server accepted 9 > maxSize 6 (no CEL on the scale subresource here); the hub must refuse it"
            );
            let generation = mcs.get(NAME).await?.metadata.generation.unwrap_or(0);
            expect_size_refusal(env, NAME, generation).await?;
        }
    }
    job_stays(env, NAME, 4, &uid, Duration::from_secs(5)).await?;

    // And down to 3, in place again.
    patch_scale(&mcs, NAME, 3)
        .await
        .context("patching the scale subresource to 3")?;
    wait_for_job_size(env, NAME, 3, &uid).await?;
    wait_for_status(env, NAME, 3, 6).await?;
    Ok(())
}

/// The stand-in queue manager's write of a Job's `suspend`, as Kueue's Update would be.
async fn queue_sets_suspend(env: &TestEnv, name: &str, suspend: bool) -> Result<()> {
    env.api::<Job>()
        .patch(
            name,
            &PatchParams {
                field_manager: Some("kueue-stand-in".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"spec": {"suspend": suspend}})),
        )
        .await
        .with_context(|| format!("the queue manager setting suspend: {suspend}"))?;
    Ok(())
}

/// The Job keeps `suspend` as `suspend` for `window`, through the hub's applies.
async fn suspend_stays(env: &TestEnv, name: &str, suspend: bool, window: Duration) -> Result<()> {
    let jobs = env.api::<Job>();
    env.holds_for(
        &format!("Job {name} stays suspend: {suspend}"),
        window,
        async || {
            let job = jobs.get(name).await?;
            let now = job.spec.as_ref().and_then(|s| s.suspend).unwrap_or(false);
            Ok((now != suspend).then(|| format!("suspend is {now}:\n{}", yaml(&job.spec))))
        },
    )
    .await
}

async fn wait_for_phase(env: &TestEnv, name: &str, phase: &str) -> Result<()> {
    let mcs = env.api::<MiniCluster>();
    env.eventually(
        &format!("MiniCluster {name} in phase {phase}"),
        objects_deadline(),
        async || {
            let mc = mcs.get(name).await?;
            let now = mc.status.as_ref().and_then(|s| s.phase.clone());
            Ok(if now.as_deref() == Some(phase) {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("phase {now:?}"))
            })
        },
    )
    .await
}

async fn queue_manager(env: &TestEnv) -> Result<()> {
    const NAME: &str = "queued";
    let mcs = env.api::<MiniCluster>();
    let mut doc = support::example("elasticity.yaml")?;
    doc["metadata"]["name"] = json!(NAME);
    doc["spec"]["suspend"] = json!(true);
    doc["spec"]["jobLabels"] = json!({"kueue.x-k8s.io/queue-name": "user-queue"});
    env.apply_minicluster(&doc).await?;

    // Created suspended, as Kueue's webhook would leave it; the status says so.
    let children = wait_for_children(env, NAME).await?;
    ensure!(
        children.job.spec.as_ref().and_then(|s| s.suspend) == Some(true),
        "the Job should be created suspended:\n{}",
        yaml(&children.job.spec)
    );
    wait_for_phase(env, NAME, "Suspended").await?;

    // Admitted: the queue manager resumes it. The hub applies a resize meanwhile and the
    // Job stays resumed.
    queue_sets_suspend(env, NAME, false).await?;
    patch_scale(&mcs, NAME, 3).await?;
    wait_for_job_size(env, NAME, 3, &children.job.metadata.uid).await?;
    suspend_stays(env, NAME, false, secs(5)).await?;

    // Preempted: suspended again, through another resize and a hub restart.
    queue_sets_suspend(env, NAME, true).await?;
    patch_scale(&mcs, NAME, 2).await?;
    wait_for_job_size(env, NAME, 2, &children.job.metadata.uid).await?;
    env.restart_hub().await?;
    suspend_stays(env, NAME, true, secs(5)).await?;
    wait_for_phase(env, NAME, "Suspended").await?;

    // The author's own change of spec.suspend is written, once.
    mcs.patch(
        NAME,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": false}})),
    )
    .await?;
    let jobs = env.api::<Job>();
    env.eventually(
        "the Job resumed by spec.suspend: false",
        objects_deadline(),
        async || {
            let job = jobs.get(NAME).await?;
            Ok(match job.spec.as_ref().and_then(|s| s.suspend) {
                Some(false) | None => Probe::Done(()),
                other => Probe::Waiting(format!("suspend {other:?}")),
            })
        },
    )
    .await?;
    Ok(())
}

/// A client that acts as user `user` (impersonated by the test's own credentials).
async fn as_user(user: &str) -> Result<kube::Client> {
    let (_, mut config) = support::client().await;
    config.auth_info.impersonate = Some(user.to_string());
    config.auth_info.impersonate_groups = Some(vec!["system:authenticated".to_string()]);
    Ok(kube::Client::try_from(config)?)
}

/// Creates `doc` as `client` without keeping it (a dry run): the admission answer.
async fn dry_create(client: &kube::Client, ns: &str, doc: &Value) -> Result<(), String> {
    let api: Api<MiniCluster> = Api::namespaced(client.clone(), ns);
    let mc: MiniCluster = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
    let params = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    api.create(&params, &mc)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

async fn author_rights(env: &TestEnv) -> Result<()> {
    use kube::api::{ApiResource, DynamicObject};
    // The policy, applied as `flux-hub install` applies it (left installed: other tests'
    // writers may create pods, and the hub's own writes leave specs unchanged).
    for doc in
        serde_yaml_ng::Deserializer::from_str(include_str!("../../deploy/admission-policy.yaml"))
    {
        let object: Value = serde::Deserialize::deserialize(doc)?;
        let (resource, _) = flux_hub::commands::install::resource_of(&object)
            .context("a kind the installer knows")?;
        let api: Api<DynamicObject> = Api::all_with(env.client.clone(), &resource);
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&object),
        )
        .await
        .with_context(|| format!("applying {name}"))?;
    }
    // alice may create MiniClusters; bob may also create pods.
    let rbac = |kind: &str, doc: Value| -> Result<DynamicObject> {
        let mut doc = doc;
        doc["apiVersion"] = json!("rbac.authorization.k8s.io/v1");
        doc["kind"] = json!(kind);
        Ok(serde_json::from_value(doc)?)
    };
    let role = ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "Role"),
        "roles",
    );
    let binding = ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "RoleBinding"),
        "rolebindings",
    );
    let roles: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &env.ns, &role);
    let bindings: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &env.ns, &binding);
    let post = kube::api::PostParams::default();
    roles
        .create(
            &post,
            &rbac(
                "Role",
                json!({"metadata": {"name": "minicluster-author"},
            "rules": [{"apiGroups": ["flux-framework.org"], "resources": ["miniclusters"],
                       "verbs": ["create", "get", "list", "watch", "update", "patch"]}]}),
            )?,
        )
        .await?;
    roles
        .create(
            &post,
            &rbac(
                "Role",
                json!({"metadata": {"name": "pod-creator"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]}),
            )?,
        )
        .await?;
    for (name, role, users) in [
        ("authors", "minicluster-author", vec!["alice", "bob"]),
        ("pod-creators", "pod-creator", vec!["bob"]),
    ] {
        let subjects: Vec<Value> = users
            .iter()
            .map(|u| json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": u}))
            .collect();
        bindings
            .create(
                &post,
                &rbac(
                    "RoleBinding",
                    json!({"metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": subjects}),
                )?,
            )
            .await?;
    }
    let alice = as_user("alice").await?;
    let bob = as_user("bob").await?;
    let plain = {
        let mut doc = support::example("hello-world.yaml")?;
        doc["metadata"]["namespace"] = json!(env.ns);
        doc["metadata"]["name"] = json!("authored");
        doc
    };
    let privileged = {
        let mut doc = plain.clone();
        doc["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
        doc
    };
    // Every rule of the table the policy is generated from, each with a MiniCluster that
    // asks for it alone: refused to alice, naming the field and the rule; bob gets it.
    let asking = |rule: &author_rules::AuthorRule| {
        let mut doc = plain.clone();
        doc["spec"] = author_rules::merged(doc["spec"].clone(), &rule.example());
        doc
    };
    let rules = author_rules::rules();
    // The policy is compiled by the API server after it is written: wait for this version
    // of it (an earlier one, on a reused cluster, may still act for a moment) to act.
    let last = rules.last().context("the author rules")?;
    env.eventually(
        "the admission policy refusing alice with this version's messages",
        secs(30),
        async || {
            Ok(match dry_create(&alice, &env.ns, &asking(last)).await {
                Err(e) if e.contains(&last.message()) => Probe::Done(()),
                other => Probe::Waiting(format!("{other:?}")),
            })
        },
    )
    .await?;
    let mut problems = Vec::new();
    for rule in &rules {
        let doc = asking(rule);
        match dry_create(&alice, &env.ns, &doc).await {
            Err(e) if e.contains(&rule.message()) => {}
            other => problems.push(format!(
                "alice asking for {}: expected {:?}, got {other:?}",
                rule.field(),
                rule.message()
            )),
        }
        if let Err(e) = dry_create(&bob, &env.ns, &doc).await {
            problems.push(format!(
                "bob may create pods, so {} is his to ask for: {e}",
                rule.field()
            ));
        }
    }
    ensure!(
        problems.is_empty(),
        "{} of {} rules:\n{}",
        problems.len(),
        rules.len(),
        problems.join("\n")
    );
    eprintln!(
        "author: {} rules refused to alice, each naming its field, and granted to bob",
        rules.len()
    );
    // What stays open to alice: a plain MiniCluster, and one that picks its nodes, confines
    // itself, sets a safe sysctl and mounts scratch space.
    let open = author_rules::merged(
        plain["spec"].clone(),
        &json!({"pod": {"nodeSelector": {"kubernetes.io/os": "linux"},
            "nodeAffinity": {"kubernetes.io/arch": ["amd64"]},
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "annotations": {"seccomp.security.alpha.kubernetes.io/pod": "runtime/default"},
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"},
                "seLinuxOptions": {"type": "container_t"},
                "sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]}}}),
    );
    for spec in [plain["spec"].clone(), open] {
        let mut doc = plain.clone();
        doc["spec"] = spec;
        dry_create(&alice, &env.ns, &doc)
            .await
            .map_err(|e| anyhow::anyhow!("alice's plain MiniCluster: {e}"))?;
    }
    dry_create(&bob, &env.ns, &privileged)
        .await
        .map_err(|e| anyhow::anyhow!("bob may create pods, so a privileged MiniCluster: {e}"))?;

    // One an admin made: alice may label it, not change its spec.
    env.apply_minicluster(&privileged).await?;
    let mcs: Api<MiniCluster> = Api::namespaced(alice.clone(), &env.ns);
    mcs.patch(
        "authored",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .context("alice's label edit of the admin's MiniCluster")?;
    let refused = mcs
        .patch(
            "authored",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .map(drop)
        .map_err(|e| e.to_string());
    ensure!(
        refused.as_ref().is_err_and(|e| e.contains("privileged")),
        "alice's spec change of a privileged MiniCluster: {refused:?}"
    );
    Ok(())
}

async fn scaling_above_declared_hosts(env: &TestEnv) -> Result<()> {
    const NAME: &str = "interactive";
    let mcs = env.api::<MiniCluster>();
    // Size 2 and no maxSize: the brokers are configured with exactly 2 hosts.
    env.apply_example("interactive.yaml").await?;
    let children = wait_for_children(env, NAME).await?;
    let uid = children.job.metadata.uid.clone();
    check_hosts(&children.config_map, &["interactive-[0-1]"])?;
    wait_for_status(env, NAME, 2, 2).await?;

    // No CRD rule forbids size 3 without maxSize, so the API server takes it ...
    patch_scale(&mcs, NAME, 3).await.context(
        "patching the scale subresource to 3 (no maxSize, so the API server must accept it)",
    )?;
    let generation = mcs.get(NAME).await?.metadata.generation.unwrap_or(0);
    // ... and the hub refuses it: running brokers cannot learn a third host.
    expect_size_refusal(env, NAME, generation).await?;
    job_stays(env, NAME, 2, &uid, Duration::from_secs(5)).await?;
    let mc = mcs.get(NAME).await?;
    ensure!(
        mc.status.as_ref().map(|s| s.maximum_size) == Some(2),
        "status.maximumSize must stay 2:\n{}",
        yaml(&mc.status)
    );

    // Back to 2: the refusal clears.
    patch_scale(&mcs, NAME, 2)
        .await
        .context("patching the scale subresource back to 2")?;
    env.eventually(
        "the refusal to clear after scaling back to 2",
        objects_deadline(),
        async || {
            let mc = mcs.get(NAME).await?;
            let generation = mc.metadata.generation;
            let conditions = mc_conditions(&mc);
            let current = conditions
                .iter()
                .any(|c| generation.is_some() && c.observed_generation == generation);
            let refusing = conditions.iter().any(|c| {
                c.status == "True" && (mentions_max(&c.reason) || mentions_max(&c.message))
            });
            Ok(if current && !refusing {
                Probe::Done(())
            } else {
                Probe::Waiting(yaml(&mc.status))
            })
        },
    )
    .await?;
    job_stays(env, NAME, 2, &uid, Duration::from_secs(2)).await
}

async fn crd_validation(env: &TestEnv) -> Result<()> {
    let mcs = env.api::<MiniCluster>();
    let doc = |name: &str, spec: Value| {
        json!({
            "apiVersion": "flux-framework.org/v1alpha2",
            "kind": "MiniCluster",
            "metadata": {"name": name, "namespace": env.ns},
            "spec": spec,
        })
    };

    // Controls: valid MiniClusters pass the same validation (dry run: nothing is created),
    // among them the reference docs' advice for several containers: leave runFlux unset
    // (it defaults to true) on the runner and set runFlux: false on the others.
    let valid = [
        (
            "valid",
            json!({"size": 2, "maxSize": 4, "containers": [{"image": "busybox"}]}),
        ),
        (
            "runflux-default",
            json!({"size": 2, "containers": [
                {"image": "busybox"},
                {"name": "side", "image": "busybox", "runFlux": false},
            ]}),
        ),
    ];
    for (name, spec) in valid {
        mcs.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).dry_run(),
            &Patch::Apply(&doc(name, spec)),
        )
        .await
        .with_context(|| {
            format!("MiniCluster {name} is valid and must pass the CRD's validation (server-side dry run)")
        })?;
    }

    let cases = [
        (
            "max-below-size",
            json!({"size": 4, "maxSize": 2, "containers": [{"image": "busybox"}]}),
            &["spec.maxSize", "greater than or equal to spec.size"][..],
        ),
        (
            "no-flux-runner",
            json!({"size": 2, "containers": [
                {"name": "first", "image": "busybox"},
                {"name": "second", "image": "busybox"},
            ]}),
            &["spec.containers", "runFlux"][..],
        ),
    ];
    for (name, spec, rule) in cases {
        match env.apply_minicluster(&doc(name, spec)).await {
            Ok(mc) => bail!(
                "MiniCluster {name} should have been rejected by the CRD ({}), but was stored:\n{}",
                rule.join(" ... "),
                yaml(&mc)
            ),
            Err(kube::Error::Api(status)) => {
                ensure!(
                    status.code == 422,
                    "MiniCluster {name}: expected 422 Invalid, got {}: {}",
                    status.code,
                    status.message
                );
                for part in rule {
                    ensure!(
                        status.message.contains(part),
                        "MiniCluster {name} was rejected, but the message does not name the rule ({part:?}): {}",
                        status.message
                    );
                }
                eprintln!("crd: {name} rejected as expected: {}", status.message);
            }
            Err(e) => return Err(e).with_context(|| format!("applying MiniCluster {name}")),
        }
        ensure!(
            mcs.get_opt(name).await?.is_none(),
            "the rejected MiniCluster {name} exists"
        );
    }
    Ok(())
}

async fn drift(env: &TestEnv) -> Result<()> {
    const NAME: &str = "hello-world";
    // Well under the time anything else would wake the MiniCluster.
    const BACK_WITHIN: Duration = Duration::from_secs(15);
    env.apply_example("hello-world.yaml").await?;
    let children = wait_for_children(env, NAME).await?;
    wait_for_status(env, NAME, 4, 4).await?;
    let config_maps = env.api::<ConfigMap>();
    let services = env.api::<Service>();
    let cm_name = format!("{NAME}-flux-config");
    let rendered = children.config_map.data.clone();

    let edit = json!({"data": {BROKER_TOML_KEY: "# edited by hand\n"}});
    config_maps
        .patch(&cm_name, &PatchParams::default(), &Patch::Merge(&edit))
        .await?;
    let edited = std::time::Instant::now();
    env.eventually(
        "the hand-edited broker.toml put back",
        BACK_WITHIN,
        async || {
            let cm = config_maps.get(&cm_name).await?;
            Ok(if cm.data == rendered {
                Probe::Done(())
            } else {
                Probe::Waiting(yaml(&cm.data))
            })
        },
    )
    .await?;
    eprintln!(
        "drift: the edited ConfigMap was put back after {:?}",
        edited.elapsed()
    );

    // One at a time: the Service's deletion changes nothing else the hub watches.
    let old_uid = children.service.uid();
    services.delete(NAME, &DeleteParams::default()).await?;
    let deleted = std::time::Instant::now();
    env.eventually("the deleted Service re-created", BACK_WITHIN, async || {
        Ok(match services.get_opt(NAME).await? {
            Some(svc) if svc.uid() != old_uid => Probe::Done(()),
            svc => Probe::Waiting(format!("uid {:?}", svc.and_then(|o| o.uid()))),
        })
    })
    .await?;
    eprintln!(
        "drift: the deleted Service was back after {:?}",
        deleted.elapsed()
    );
    let old_uid = children.config_map.uid();
    config_maps
        .delete(&cm_name, &DeleteParams::default())
        .await?;
    let deleted = std::time::Instant::now();
    env.eventually(
        "the deleted ConfigMap re-created",
        BACK_WITHIN,
        async || {
            Ok(match config_maps.get_opt(&cm_name).await? {
                Some(cm) if cm.uid() != old_uid => {
                    ensure!(cm.data == rendered, "ConfigMap re-created with other data");
                    Probe::Done(())
                }
                cm => Probe::Waiting(format!("uid {:?}", cm.and_then(|o| o.uid()))),
            })
        },
    )
    .await?;
    eprintln!(
        "drift: the deleted ConfigMap was back after {:?}",
        deleted.elapsed()
    );
    Ok(())
}

async fn deletion(env: &TestEnv) -> Result<()> {
    const NAME: &str = "hello-world";
    let mcs = env.api::<MiniCluster>();
    env.apply_example("hello-world.yaml").await?;
    let children = wait_for_children(env, NAME).await?;

    // Everything of the MiniCluster, by uid (so a re-created object does not count as
    // still there, nor a deleted one as gone).
    let owned = owned_objects(env, NAME).await?;
    for (kind, name) in [
        ("Job", NAME),
        ("Service", NAME),
        ("ConfigMap", "hello-world-flux-config"),
        ("Secret", "hello-world-curve"),
    ] {
        ensure!(
            owned.iter().any(|o| o.kind == kind && o.name == name),
            "{kind} {name} does not carry the label {}={NAME}; labelled objects: {owned:?}",
            labels::MINICLUSTER
        );
    }
    let uid = mcs.get(NAME).await?.metadata.uid;
    for object in &owned {
        ensure!(
            object.owner_uid.is_some() && object.owner_uid == uid,
            "{} {} is not owned by the MiniCluster (uid {uid:?}), so deleting it would leave it behind: owner uid {:?}",
            object.kind,
            object.name,
            object.owner_uid
        );
    }
    drop(children);

    // What `kubectl delete` does: background propagation.
    mcs.delete(NAME, &DeleteParams::background()).await?;
    env.eventually(
        "MiniCluster hello-world to be deleted",
        objects_deadline(),
        async || {
            Ok(match mcs.get_opt(NAME).await? {
                None => Probe::Done(()),
                Some(mc) => Probe::Waiting(yaml(&mc.metadata)),
            })
        },
    )
    .await?;
    env.eventually(
        "the garbage collector to delete every child of hello-world",
        secs(120),
        async || {
            let mut left = Vec::new();
            for object in &owned {
                if object.exists(env).await? {
                    left.push(format!("{} {}", object.kind, object.name));
                }
            }
            Ok(if left.is_empty() {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("still there: {}", left.join(", ")))
            })
        },
    )
    .await?;
    // Nothing comes back: the hub does not re-create children of a deleted MiniCluster.
    env.holds_for(
        "no object of hello-world re-appears",
        Duration::from_secs(3),
        async || {
            let again = owned_objects(env, NAME).await?;
            Ok((!again.is_empty()).then(|| format!("re-created: {again:?}")))
        },
    )
    .await
}

async fn bursting_root(env: &TestEnv) -> Result<()> {
    const NAME: &str = "bursty";
    let mcs = env.api::<MiniCluster>();
    env.apply_example("bursting.yaml").await?;

    // Root brokers bursty-[0-2] (size 2, maxSize 3) come first, then every burst in spec
    // order: 3 + 4 + 2 = 9 ranks, the same list in every cluster.
    let children = wait_for_children(env, NAME).await?;
    let mc = mcs.get(NAME).await?;
    check_root_objects(
        &env.ns,
        &children,
        &mc,
        2,
        &["bursty-[0-2]", "burst-gke-[0-3]", "burst-kind-[0-1]"],
        "0-8",
    )?;

    let services = env.api::<Service>();
    let lead_name = format!("{NAME}-lead");
    let lead = env
        .eventually(
            &format!(
                "the lead broker's NodePort Service {lead_name}, with its node port allocated"
            ),
            objects_deadline(),
            async || {
                Ok(match services.get_opt(&lead_name).await? {
                    Some(svc)
                        if node_ports(&svc).iter().all(|p| *p > 0)
                            && !node_ports(&svc).is_empty() =>
                    {
                        Probe::Done(svc)
                    }
                    Some(svc) => Probe::Waiting(yaml(&svc)),
                    None => Probe::Waiting(format!("Service {lead_name} does not exist")),
                })
            },
        )
        .await?;
    check_lead_service(&lead, &children.job, &mc)?;
    eprintln!(
        "burst: lead broker exposed on node port {:?}",
        node_ports(&lead)
    );

    let mc = wait_for_status(env, NAME, 2, 3).await?;
    check_selector(&mc, &children.job)?;

    // Pod level: once the lead broker runs, its Service has its address.
    let lead_pod = env
        .eventually(
            "the lead broker pod (index 0) Running with an IP",
            pods_deadline(),
            async || {
                let pods = env.job_pods(&children.job).await?;
                let lead = pods.iter().find(|p| {
                    p.labels().get(labels::COMPLETION_INDEX).map(String::as_str) == Some("0")
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                        && p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some()
                });
                Ok(match lead {
                    Some(pod) => Probe::Done(pod.clone()),
                    None => Probe::Waiting(pod_summary(&pods)),
                })
            },
        )
        .await?;
    let lead_pod = &lead_pod;
    let ip = lead_pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default();
    let slices = env.api::<EndpointSlice>();
    let by_service =
        ListParams::default().labels(&format!("kubernetes.io/service-name={lead_name}"));
    env.eventually(
        &format!("an endpoint {ip} (the lead broker pod) behind Service {lead_name}"),
        objects_deadline(),
        async || {
            let list = slices.list(&by_service).await?;
            let addresses: Vec<&String> = list
                .items
                .iter()
                .flat_map(|s| &s.endpoints)
                .flat_map(|e| &e.addresses)
                .collect();
            Ok(if addresses.contains(&&ip) {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("endpoint addresses: {addresses:?}"))
            })
        },
    )
    .await?;

    // Bursting removed from the running MiniCluster: the lead broker's NodePort Service
    // (a port held on every node) goes at once; the Job and the headless Service stay, and
    // the brokers' config keeps every host's rank (the frozen layout).
    let job_uid = children.job.metadata.uid.clone();
    let config_maps = env.api::<ConfigMap>();
    let config_name = format!("{NAME}-flux-config");
    let config = config_maps.get(&config_name).await?;
    mcs.patch(
        NAME,
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"flux": {"bursting": null}}})),
    )
    .await?;
    env.eventually(
        &format!("Service {lead_name} deleted once the spec has no bursts"),
        objects_deadline(),
        async || {
            Ok(match services.get_opt(&lead_name).await? {
                None => Probe::Done(()),
                Some(svc) => Probe::Waiting(format!(
                    "Service {lead_name} still exists (deletionTimestamp {:?})",
                    svc.metadata.deletion_timestamp
                )),
            })
        },
    )
    .await?;
    let job = env.api::<Job>().get(NAME).await?;
    ensure!(
        job.metadata.uid == job_uid,
        "Job {NAME} was re-created when bursting was removed"
    );
    ensure!(
        services.get_opt(NAME).await?.is_some(),
        "the headless Service {NAME} was deleted with the lead Service"
    );
    let kept = config_maps.get(&config_name).await?;
    ensure!(
        kept.data == config.data,
        "ConfigMap {config_name} changed when bursting was removed: the running brokers' ranks would move"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Shared checks.

/// The four children every MiniCluster has in its own cluster.
struct Children {
    job: Job,
    service: Service,
    config_map: ConfigMap,
    secret: Secret,
}

/// Waits for the Job and headless Service `<name>`, the ConfigMap `<name>-flux-config` and
/// the Secret `<name>-curve`.
async fn wait_for_children(env: &TestEnv, name: &str) -> Result<Children> {
    let jobs = env.api::<Job>();
    let services = env.api::<Service>();
    let config_maps = env.api::<ConfigMap>();
    let secrets = env.api::<Secret>();
    let mcs = env.api::<MiniCluster>();
    let config_map_name = format!("{name}-flux-config");
    let secret_name = format!("{name}-curve");
    env.eventually(
        &format!(
            "Job {name}, Service {name}, ConfigMap {config_map_name} and Secret {secret_name}"
        ),
        objects_deadline(),
        async || {
            let job = jobs.get_opt(name).await?;
            let service = services.get_opt(name).await?;
            let config_map = config_maps.get_opt(&config_map_name).await?;
            let secret = secrets.get_opt(&secret_name).await?;
            Ok(match (job, service, config_map, secret) {
                (Some(job), Some(service), Some(config_map), Some(secret)) => {
                    Probe::Done(Children {
                        job,
                        service,
                        config_map,
                        secret,
                    })
                }
                (job, service, config_map, secret) => {
                    let missing: Vec<&str> = [
                        ("Job", job.is_none()),
                        ("Service", service.is_none()),
                        ("ConfigMap", config_map.is_none()),
                        ("Secret", secret.is_none()),
                    ]
                    .into_iter()
                    .filter_map(|(kind, missing)| missing.then_some(kind))
                    .collect();
                    let status = match mcs.get_opt(name).await? {
                        Some(mc) => yaml(&mc.status),
                        None => "(the MiniCluster does not exist)".into(),
                    };
                    Probe::Waiting(format!(
                        "missing: {}; MiniCluster status:\n{status}",
                        missing.join(", ")
                    ))
                }
            })
        },
    )
    .await
}

/// Key fields of the root objects: an Indexed Job of `size` with the headless Service as
/// subdomain; a headless Service publishing not-ready addresses and selecting the Job's
/// pods; broker.toml and R listing `hosts` in order; a parseable CURVE certificate; all
/// controlled by the MiniCluster.
fn check_root_objects(
    ns: &str,
    c: &Children,
    mc: &MiniCluster,
    size: i32,
    hosts: &[&str],
    ranks: &str,
) -> Result<()> {
    let job_name = c.job.name_any();
    let service_name = c.service.name_any();
    let spec = c.job.spec.as_ref().context("Job without spec")?;
    ensure!(
        spec.completion_mode.as_deref() == Some("Indexed"),
        "Job {job_name} must be an Indexed Job:\n{}",
        yaml(&c.job)
    );
    ensure!(
        job_sizes(&c.job) == (Some(size), Some(size)),
        "Job {job_name} must have completions = parallelism = {size}:\n{}",
        yaml(&c.job)
    );
    let pod = spec
        .template
        .spec
        .as_ref()
        .context("Job without pod template spec")?;
    ensure!(
        pod.subdomain.as_deref() == Some(service_name.as_str()),
        "the pods of Job {job_name} must have subdomain {service_name} (the headless Service), have {:?}",
        pod.subdomain
    );

    let svc = c.service.spec.as_ref().context("Service without spec")?;
    ensure!(
        svc.cluster_ip.as_deref() == Some("None"),
        "Service {service_name} must be headless (clusterIP: None):\n{}",
        yaml(&c.service)
    );
    ensure!(
        svc.publish_not_ready_addresses == Some(true),
        "Service {service_name} must publish not-ready addresses (brokers connect before they are ready):\n{}",
        yaml(&c.service)
    );
    let selector = svc.selector.clone().unwrap_or_default();
    let pod_labels = template_labels(&c.job);
    ensure!(
        !selector.is_empty() && selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
        "Service {service_name} must select the pods of Job {job_name}: selector {selector:?}, pod labels {pod_labels:?}"
    );

    check_hosts(&c.config_map, hosts)?;
    let data = c.config_map.data.clone().unwrap_or_default();
    let broker_toml = data.get(BROKER_TOML_KEY).map_or("", String::as_str);
    let connect = format!("%h.{service_name}.{ns}.svc.cluster.local");
    ensure!(
        broker_toml.contains(&connect),
        "broker.toml must connect to brokers through {connect}:\n{broker_toml}"
    );
    let r: Value = serde_json::from_str(data.get(R_KEY).map_or("", String::as_str))
        .with_context(|| format!("R in ConfigMap {} is not JSON", c.config_map.name_any()))?;
    let nodelist: Vec<&str> = r["execution"]["nodelist"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    ensure!(
        nodelist.join(",") == hosts.join(",") && r["execution"]["R_lite"][0]["rank"] == ranks,
        "R must declare ranks {ranks} on {}: {r}",
        hosts.join(",")
    );

    curve_cert(&c.secret)?;

    ensure_controlled_by(&format!("Job {job_name}"), &c.job.metadata, mc)?;
    ensure_controlled_by(&format!("Service {service_name}"), &c.service.metadata, mc)?;
    ensure_controlled_by(
        &format!("ConfigMap {}", c.config_map.name_any()),
        &c.config_map.metadata,
        mc,
    )?;
    ensure_controlled_by(
        &format!("Secret {}", c.secret.name_any()),
        &c.secret.metadata,
        mc,
    )?;
    Ok(())
}

/// The lead broker's Service: NodePort, selecting completion index 0 of the root Job's
/// pods, exposing the broker port, controlled by the MiniCluster.
fn check_lead_service(lead: &Service, job: &Job, mc: &MiniCluster) -> Result<()> {
    let lead_name = lead.name_any();
    let spec = lead.spec.as_ref().context("lead Service without spec")?;
    ensure!(
        spec.type_.as_deref() == Some("NodePort"),
        "Service {lead_name} must be a NodePort Service:\n{}",
        yaml(lead)
    );
    let selector = spec.selector.clone().unwrap_or_default();
    ensure!(
        selector.get(labels::COMPLETION_INDEX).map(String::as_str) == Some("0"),
        "Service {lead_name} must select {}: \"0\" (the lead broker only):\n{}",
        labels::COMPLETION_INDEX,
        yaml(lead)
    );
    // The rest of the selector must match the root Job's pods (Kubernetes adds the
    // completion index label to each pod itself).
    let pod_labels = template_labels(job);
    for (k, v) in selector
        .iter()
        .filter(|(k, _)| *k != labels::COMPLETION_INDEX)
    {
        ensure!(
            pod_labels.get(k) == Some(v),
            "Service {lead_name} selects {k}={v}, which the pods of Job {} do not carry ({pod_labels:?}):\n{}",
            job.name_any(),
            yaml(lead)
        );
    }
    let ports = spec.ports.clone().unwrap_or_default();
    ensure!(
        ports.len() == 1
            && ports[0].port == BROKER_PORT
            && matches!(
                ports[0].target_port,
                None | Some(IntOrString::Int(BROKER_PORT))
            )
            && ports[0].protocol.as_deref().is_none_or(|p| p == "TCP"),
        "Service {lead_name} must expose exactly TCP port {BROKER_PORT} to the broker port:\n{}",
        yaml(lead)
    );
    ensure_controlled_by(&format!("Service {lead_name}"), &lead.metadata, mc)?;
    Ok(())
}

/// broker.toml's `[bootstrap] hosts` lists `hosts` in this order.
fn check_hosts(config_map: &ConfigMap, hosts: &[&str]) -> Result<()> {
    let name = config_map.name_any();
    let data = config_map.data.clone().unwrap_or_default();
    let toml = data
        .get(BROKER_TOML_KEY)
        .with_context(|| format!("ConfigMap {name} has no {BROKER_TOML_KEY}"))?;
    let section = toml
        .find("hosts")
        .map(|at| &toml[at..])
        .with_context(|| format!("broker.toml in ConfigMap {name} has no hosts:\n{toml}"))?;
    let mut rest = section;
    for host in hosts {
        match rest.find(host) {
            Some(at) => rest = &rest[at + host.len()..],
            None => bail!(
                "broker.toml in ConfigMap {name} must list the hosts {} in this order:\n{toml}",
                hosts.join(", ")
            ),
        }
    }
    Ok(())
}

/// The certificate in a curve Secret, checked to parse as a Flux CURVE certificate.
fn curve_cert(secret: &Secret) -> Result<String> {
    let name = secret.name_any();
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(CURVE_KEY))
        .with_context(|| format!("Secret {name} has no {CURVE_KEY}"))?;
    let text = String::from_utf8(bytes.0.clone())
        .with_context(|| format!("{CURVE_KEY} in Secret {name} is not UTF-8"))?;
    CurveCert::parse(&text)
        .with_context(|| format!("{CURVE_KEY} in Secret {name} is not a CURVE certificate"))?;
    Ok(text)
}

/// Waits until the hub reports `size` brokers of at most `max`, a selector, and a Ready or
/// Progressing condition for the current generation.
async fn wait_for_status(env: &TestEnv, name: &str, size: i32, max: i32) -> Result<MiniCluster> {
    let mcs = env.api::<MiniCluster>();
    env.eventually(
        &format!(
            "status of MiniCluster {name}: size {size}, maximumSize {max}, a selector, and a Ready or Progressing condition of the current generation"
        ),
        objects_deadline(),
        async || {
            let mc = mcs.get(name).await?;
            let generation = mc.metadata.generation;
            let ok = mc.status.as_ref().is_some_and(|s| {
                s.size == size
                    && s.maximum_size == max
                    && !s.selector.is_empty()
                    && s.conditions.iter().any(|c| {
                        (c.type_ == "Ready" || c.type_ == "Progressing")
                            && generation.is_some()
                            && c.observed_generation == generation
                    })
            });
            Ok(if ok {
                Probe::Done(mc)
            } else {
                Probe::Waiting(format!(
                    "generation {generation:?}, status:\n{}",
                    yaml(&mc.status)
                ))
            })
        },
    )
    .await
}

/// `status.selector` (the scale subresource's and autoscalers' selector) must select the
/// Job's pods.
fn check_selector(mc: &MiniCluster, job: &Job) -> Result<()> {
    let selector = mc
        .status
        .as_ref()
        .map(|s| s.selector.clone())
        .unwrap_or_default();
    let pod_labels = template_labels(job);
    ensure!(
        selector_matches(&selector, &pod_labels)?,
        "status.selector {selector:?} does not select the pods of Job {} (labels {pod_labels:?})",
        job.name_any()
    );
    Ok(())
}

/// Waits for a condition of the MiniCluster (of generation `generation` or later) whose
/// reason or message is about the maximum size, and an Event saying so.
async fn expect_size_refusal(env: &TestEnv, name: &str, generation: i64) -> Result<()> {
    let mcs = env.api::<MiniCluster>();
    let mc = env
        .eventually(
            &format!(
                "a condition of MiniCluster {name} (generation {generation}) saying its size is above the maximum"
            ),
            objects_deadline(),
            async || {
                let mc = mcs.get(name).await?;
                let refused = mc_conditions(&mc).iter().any(|c| {
                    (mentions_max(&c.reason) || mentions_max(&c.message))
                        && c.observed_generation.is_none_or(|g| g >= generation)
                });
                Ok(if refused {
                    Probe::Done(mc)
                } else {
                    Probe::Waiting(yaml(&mc.status))
                })
            },
        )
        .await?;
    for c in mc_conditions(&mc)
        .iter()
        .filter(|c| mentions_max(&c.reason) || mentions_max(&c.message))
    {
        eprintln!(
            "{name}: condition {}={} {}: {}",
            c.type_, c.status, c.reason, c.message
        );
    }
    let event = env
        .eventually(
            &format!("an Event about MiniCluster {name} mentioning the maximum"),
            secs(30),
            async || {
                let events = env.events_about("MiniCluster", name).await?;
                let hit = events.iter().find(|e| {
                    mentions_max(e.reason.as_deref().unwrap_or(""))
                        || mentions_max(e.note.as_deref().unwrap_or(""))
                });
                Ok(match hit {
                    Some(e) => Probe::Done(describe_event(e)),
                    None => Probe::Waiting(format!(
                        "Events about it:\n{}",
                        events
                            .iter()
                            .map(describe_event)
                            .collect::<Vec<_>>()
                            .join("\n")
                    )),
                })
            },
        )
        .await?;
    eprintln!("{name}: event {event}");
    Ok(())
}

/// Patches the scale subresource, as `kubectl scale` or an autoscaler does.
async fn patch_scale(
    mcs: &Api<MiniCluster>,
    name: &str,
    replicas: i32,
) -> Result<Scale, kube::Error> {
    let params = PatchParams {
        field_manager: Some("flux-e2e-scaler".into()),
        ..PatchParams::default()
    };
    mcs.patch_scale(
        name,
        &params,
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
}

/// Waits until Job `name` has parallelism `size`, and checks it is the same Job (`uid`)
/// with completions = parallelism.
async fn wait_for_job_size(
    env: &TestEnv,
    name: &str,
    size: i32,
    uid: &Option<String>,
) -> Result<Job> {
    let jobs = env.api::<Job>();
    let job = env
        .eventually(
            &format!("Job {name} to be scaled to {size}"),
            objects_deadline(),
            async || {
                let job = jobs.get(name).await?;
                let (completions, parallelism) = job_sizes(&job);
                Ok(if job.metadata.uid != *uid || parallelism == Some(size) {
                    Probe::Done(job)
                } else {
                    Probe::Waiting(format!(
                        "completions {completions:?}, parallelism {parallelism:?}"
                    ))
                })
            },
        )
        .await?;
    ensure!(
        job.metadata.uid == *uid,
        "Job {name} was re-created (uid {uid:?} -> {:?}) instead of scaled in place",
        job.metadata.uid
    );
    ensure!(
        job_sizes(&job) == (Some(size), Some(size)),
        "Job {name} must have completions = parallelism = {size}:\n{}",
        yaml(&job.spec)
    );
    Ok(job)
}

/// Checks for `window` that Job `name` is still the same Job with parallelism `size`.
async fn job_stays(
    env: &TestEnv,
    name: &str,
    size: i32,
    uid: &Option<String>,
    window: Duration,
) -> Result<()> {
    let jobs = env.api::<Job>();
    env.holds_for(
        &format!("Job {name} stays at {size} brokers"),
        window,
        async || {
            Ok(match jobs.get_opt(name).await? {
                None => Some("the Job was deleted".into()),
                Some(job) if job.metadata.uid != *uid => Some("the Job was re-created".into()),
                Some(job) if job_sizes(&job).1 != Some(size) => {
                    Some(format!("parallelism is {:?}", job_sizes(&job).1))
                }
                Some(_) => None,
            })
        },
    )
    .await
}

/// (completions, parallelism).
fn job_sizes(job: &Job) -> (Option<i32>, Option<i32>) {
    job.spec
        .as_ref()
        .map_or((None, None), |s| (s.completions, s.parallelism))
}

fn job_condition(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

fn template_labels(job: &Job) -> BTreeMap<String, String> {
    job.spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default()
}

fn node_ports(svc: &Service) -> Vec<i32> {
    svc.spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .map(|ports| ports.iter().map(|p| p.node_port.unwrap_or(0)).collect())
        .unwrap_or_default()
}

/// An object carrying a MiniCluster's label.
#[derive(Debug)]
struct Owned {
    kind: &'static str,
    name: String,
    uid: Option<String>,
    owner_uid: Option<String>,
}

impl Owned {
    fn of<K: kube::Resource>(kind: &'static str, obj: &K) -> Owned {
        Owned {
            kind,
            name: obj.name_any(),
            uid: obj.meta().uid.clone(),
            owner_uid: obj
                .owner_references()
                .iter()
                .find(|r| r.kind == "MiniCluster")
                .map(|r| r.uid.clone()),
        }
    }

    /// Whether this very object (same uid) still exists.
    async fn exists(&self, env: &TestEnv) -> Result<bool> {
        let uid = match self.kind {
            "Job" => uid_of(env.api::<Job>(), &self.name).await?,
            "Service" => uid_of(env.api::<Service>(), &self.name).await?,
            "ConfigMap" => uid_of(env.api::<ConfigMap>(), &self.name).await?,
            "Secret" => uid_of(env.api::<Secret>(), &self.name).await?,
            other => bail!("unexpected kind {other}"),
        };
        Ok(uid.is_some() && uid == self.uid)
    }
}

/// The uid of an object, `None` when it does not exist.
async fn uid_of<K>(api: Api<K>, name: &str) -> Result<Option<String>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api.get_opt(name).await?.and_then(|o| o.meta().uid.clone()))
}

/// Jobs, Services, ConfigMaps and Secrets labelled as belonging to MiniCluster `name`.
async fn owned_objects(env: &TestEnv, name: &str) -> Result<Vec<Owned>> {
    let by_label = ListParams::default().labels(&format!("{}={name}", labels::MINICLUSTER));
    let mut owned = Vec::new();
    for o in env.api::<Job>().list(&by_label).await? {
        owned.push(Owned::of("Job", &o));
    }
    for o in env.api::<Service>().list(&by_label).await? {
        owned.push(Owned::of("Service", &o));
    }
    for o in env.api::<ConfigMap>().list(&by_label).await? {
        owned.push(Owned::of("ConfigMap", &o));
    }
    for o in env.api::<Secret>().list(&by_label).await? {
        owned.push(Owned::of("Secret", &o));
    }
    Ok(owned)
}

/// `flux-hub init` against the cluster of `KUBECONFIG`: the hub's install (what `deploy/`
/// holds and its TLS Secret) is accepted by the API server; the hub's service account then
/// has every permission the controller's REQUIRED list names and not more (a few it must
/// not have are checked); running init again changes nothing (every resourceVersion
/// stays). What it installed is removed afterwards (the shared CRD stays).
#[tokio::test]
#[ignore = "needs a cluster: KUBECONFIG (scripts/e2e.sh)"]
async fn flux_hub_init_installs_the_hub_and_running_it_again_changes_nothing() {
    support::run("init", false, async |env| {
        let kubeconfig = std::env::var("KUBECONFIG").context("KUBECONFIG")?;
        let certs = support::log_file(&format!("{}-certs", env.ns))?;
        let _ = std::fs::remove_dir_all(&certs);
        let hub = tokio::task::spawn_blocking(support::hub_binary).await??;
        let context_file = support::log_file(&format!("{}-flux-hub-config.yaml", env.ns))?;
        let _ = std::fs::remove_file(&context_file);
        let init = |extra: &[&str]| {
            let mut cmd = std::process::Command::new(&hub);
            cmd.env("FLUX_HUB_CONFIG", &context_file)
                .args(["init", "--kubeconfig", &kubeconfig, "--certs"])
                .arg(&certs)
                .args(["--hub-dns", "hub.example.org", "-o", "json"])
                .args(extra);
            if !extra.contains(&"--timeout-seconds") {
                cmd.args(["--timeout-seconds", "90"]);
            }
            cmd
        };
        let cleanup = async || {
            use k8s_openapi::api::core::v1::Namespace;
            use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
            let dp = DeleteParams::background();
            let _ = Api::<Namespace>::all(env.client.clone())
                .delete("flux-operator-system", &dp)
                .await;
            let _ = Api::<ClusterRole>::all(env.client.clone())
                .delete("flux-hub", &dp)
                .await;
            let _ = Api::<ClusterRoleBinding>::all(env.client.clone())
                .delete("flux-hub", &dp)
                .await;
        };
        // The reference operator's Deployment (scaled to zero) in the cluster: init
        // refuses, naming it, before it issues or applies anything.
        {
            use k8s_openapi::api::apps::v1::Deployment;
            use k8s_openapi::api::core::v1::Namespace;
            let namespaces = Api::<Namespace>::all(env.client.clone());
            let reference = "operator-system";
            namespaces
                .create(
                    &Default::default(),
                    &serde_json::from_value(json!({"metadata": {"name": reference}}))?,
                )
                .await?;
            let deployments = Api::<Deployment>::namespaced(env.client.clone(), reference);
            deployments
                .create(
                    &Default::default(),
                    &serde_json::from_value(json!({
                        "metadata": {"name": "operator-controller-manager"},
                        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "ref"}},
                                 "template": {"metadata": {"labels": {"app": "ref"}},
                                              "spec": {"containers": [{"name": "manager",
                                                  "image": "ghcr.io/flux-framework/flux-operator:latest"}]}}},
                    }))?,
                )
                .await?;
            let refused = tokio::task::spawn_blocking({
                let mut cmd = init(&[]);
                move || cmd.output()
            })
            .await??;
            // Gone before the real init below looks again.
            deployments
                .delete("operator-controller-manager", &DeleteParams::background())
                .await?;
            env.eventually("the stand-in Deployment gone", secs(60), async || {
                Ok(
                    match deployments.get_opt("operator-controller-manager").await? {
                        None => Probe::Done(()),
                        Some(_) => Probe::Waiting("still there".into()),
                    },
                )
            })
            .await?;
            let _ = namespaces
                .delete(reference, &DeleteParams::background())
                .await;
            let said = String::from_utf8_lossy(&refused.stderr).to_string();
            ensure!(
                !refused.status.success()
                    && said.contains("another controller of MiniClusters")
                    && said.contains("Deployment operator-system/operator-controller-manager runs ghcr.io/flux-framework/flux-operator:latest")
                    && said.contains("--take-over"),
                "init must refuse beside the reference operator, naming it: {said}"
            );
            ensure!(
                namespaces.get_opt("flux-operator-system").await?.is_none()
                    && !certs.join("ca.crt").exists(),
                "a refused init installs and issues nothing"
            );
        }
        // `--wait=false` with `--hub-dns` alone: init applies and returns at once, the
        // balancer's address not known yet (no admin context without it).
        let started = std::time::Instant::now();
        let quick = tokio::task::spawn_blocking({
            let mut cmd = init(&["--wait=false"]);
            move || cmd.output()
        })
        .await??;
        let took = started.elapsed();
        let quick_result: Value = serde_json::from_slice(&quick.stdout).unwrap_or(Value::Null);
        if !(quick.status.success()
            && took < secs(30)
            && quick_result["ready"] == false
            && quick_result["endpoint"].is_null()
            && !context_file.exists())
        {
            cleanup().await;
            bail!(
                "init --wait=false must return at once without an endpoint (took {took:?}): {quick_result} {}",
                String::from_utf8_lossy(&quick.stderr)
            );
        }
        // `--hub-dns` alone: init waits for the federation Service's load balancer
        // address. The testbed has no cloud; this task plays its part, as GKE's does, a
        // few seconds after the Service appears.
        const BALANCER: &str = "203.0.113.7";
        let services = Api::<Service>::namespaced(env.client.clone(), "flux-operator-system");
        let cloud = {
            let services = services.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(secs(3)).await;
                    if services.get_opt("flux-hub-federation").await?.is_some() {
                        let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": BALANCER}]}}});
                        services
                            .patch_status(
                                "flux-hub-federation",
                                &PatchParams::default(),
                                &Patch::Merge(&status),
                            )
                            .await?;
                        return anyhow::Ok(());
                    }
                }
            })
        };
        let first = tokio::task::spawn_blocking({
            let mut cmd = init(&[]);
            move || cmd.output()
        })
        .await??;
        cloud.abort();
        if !first.status.success() {
            cleanup().await;
            bail!(
                "flux-hub init failed: {}",
                String::from_utf8_lossy(&first.stderr)
            );
        }
        let result: Value = serde_json::from_slice(&first.stdout)?;
        ensure!(result["ready"] == true, "{result}");
        ensure!(
            result["endpoint"] == format!("https://{BALANCER}:8443"),
            "init waits for the load balancer's address: {result}"
        );

        // The admin context for the hub it installed, current: admin commands need no flags.
        let contexts = std::fs::read_to_string(&context_file)?;
        ensure!(
            contexts.contains("current: default")
                && contexts.contains(result["endpoint"].as_str().unwrap_or("?"))
                && contexts.contains("admin-flux-hub-admin.crt"),
            "init wrote the admin context: {contexts}"
        );

        // Every permission the controller needs, as the hub's service account, and not more.
        let can_on = async |group: &str, resource: &str, verb: &str, ns: &str, name: &str| {
            support::service_account_can_on(
                &env.client,
                ("flux-operator-system", "flux-hub"),
                group,
                resource,
                verb,
                ns,
                name,
            )
            .await
        };
        let can = async |group: &str, resource: &str, verb: &str, ns: &str| {
            can_on(group, resource, verb, ns, "").await
        };
        let mut missing = Vec::new();
        for p in flux_hub::controller::permissions::REQUIRED {
            let ns = if p.own_namespace_only {
                "flux-operator-system"
            } else {
                "some-team"
            };
            // A rule limited by name grants those objects only: asked by name, and not
            // without one.
            let names: &[&str] = if p.resource_names.is_empty() { &[""] } else { p.resource_names };
            for verb in p.verbs {
                for name in names {
                    if !can_on(p.group, p.resource, verb, ns, name).await? {
                        missing.push(format!("{verb} {}/{} {name} in {ns}", p.group, p.resource));
                    }
                }
                if !p.resource_names.is_empty() && can(p.group, p.resource, verb, ns).await? {
                    missing.push(format!("{verb} {}/{} is not limited to {names:?}", p.group, p.resource));
                }
            }
        }
        for (group, resource, verb) in [
            ("", "pods/exec", "create"),
            ("", "nodes", "patch"),
            ("apps", "deployments", "patch"),
            ("rbac.authorization.k8s.io", "clusterroles", "create"),
            ("", "serviceaccounts/token", "create"),
        ] {
            ensure!(
                !can(group, resource, verb, "some-team").await?,
                "the hub must not be allowed to {verb} {group}/{resource}"
            );
        }
        if !missing.is_empty() {
            cleanup().await;
            bail!("the installed RBAC lacks: {missing:?}");
        }

        // Again: nothing changes.
        let second = tokio::task::spawn_blocking({
            let mut cmd = init(&[]);
            move || cmd.output()
        })
        .await??;
        let again: Value = serde_json::from_slice(&second.stdout)?;
        let changed: Vec<&Value> = again["applied"]
            .as_array()
            .map(|a| a.iter().filter(|o| o["outcome"] != "unchanged").collect())
            .unwrap_or_default();

        // A cluster without a load balancer controller (kind): init says what it waited
        // for and what to do, and --endpoint node-port is the name on the node port.
        services
            .patch_status(
                "flux-hub-federation",
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"loadBalancer": {"ingress": null}}})),
            )
            .await?;
        let pending = tokio::task::spawn_blocking({
            let mut cmd = init(&["--timeout-seconds", "4"]);
            move || cmd.output()
        })
        .await??;
        let said = String::from_utf8_lossy(&pending.stderr).to_string();
        let node_port = tokio::task::spawn_blocking({
            let mut cmd = init(&["--endpoint", "node-port"]);
            move || cmd.output()
        })
        .await??;
        let node_port: Value = serde_json::from_slice(&node_port.stdout).unwrap_or_default();
        cleanup().await;
        ensure!(
            !pending.status.success()
                && said.contains("flux-hub-federation got no load balancer address in 4s")
                && said.contains("--endpoint node-port"),
            "without a balancer init fails, saying what it waited for: {said}"
        );
        ensure!(
            node_port["endpoint"]
                .as_str()
                .is_some_and(|e| e.starts_with("https://hub.example.org:3")),
            "--endpoint node-port: the given name on the federation Service's node port: {node_port}"
        );
        ensure!(
            second.status.success() && changed.is_empty(),
            "running init again must change nothing: {changed:?}\n{}",
            String::from_utf8_lossy(&second.stderr)
        );
        eprintln!(
            "{}: flux-hub init applied {} objects; again: all unchanged",
            env.ns,
            again["applied"].as_array().map_or(0, Vec::len)
        );
        Ok(())
    })
    .await;
}

/// Someone else's ConfigMap, Secret and headless Service carry the names hello-world's
/// children would take: the hub writes none of them (same resourceVersion throughout),
/// refuses the MiniCluster with each named, goes on when one of them goes (a watch of
/// the blocking objects wakes it, not a retry loop), and deleting the MiniCluster leaves
/// them all in place.
async fn taken_names(env: &TestEnv) -> Result<()> {
    const NAME: &str = "hello-world";
    let mcs = env.api::<MiniCluster>();
    let cms = env.api::<ConfigMap>();
    let secrets = env.api::<Secret>();
    let services = env.api::<Service>();
    let theirs = json!({"team": "data"});
    let pp = kube::api::PostParams::default();
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "hello-world-flux-config", "labels": theirs},
        "data": {"theirs": "yes"}}))?;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "hello-world-curve", "labels": theirs},
        "stringData": {"token": "theirs"}}))?;
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": NAME, "labels": theirs},
        "spec": {"clusterIP": "None", "selector": {"app": "theirs"},
                 "ports": [{"port": 80}]}}))?;
    let cm = cms.create(&pp, &cm).await?;
    let secret = secrets.create(&pp, &secret).await?;
    let service = services.create(&pp, &service).await?;
    let versions = async || -> Result<Vec<Option<String>>> {
        Ok(vec![
            cms.get_opt("hello-world-flux-config")
                .await?
                .and_then(|o| o.metadata.resource_version),
            secrets
                .get_opt("hello-world-curve")
                .await?
                .and_then(|o| o.metadata.resource_version),
            services
                .get_opt(NAME)
                .await?
                .and_then(|o| o.metadata.resource_version),
        ])
    };
    let before = vec![
        cm.metadata.resource_version.clone(),
        secret.metadata.resource_version.clone(),
        service.metadata.resource_version.clone(),
    ];

    env.apply_example("hello-world.yaml").await?;
    let refused = async |names: &[&str]| -> Result<Probe<String>> {
        let mc = mcs.get(NAME).await?;
        let degraded = mc_conditions(&mc)
            .iter()
            .find(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == "NameTaken")
            .map(|c| c.message.clone());
        Ok(match degraded {
            Some(m) if names.iter().all(|n| m.contains(n)) => Probe::Done(m),
            _ => Probe::Waiting(yaml(&mc.status)),
        })
    };
    let message = env
        .eventually(
            "the MiniCluster to be refused with the three names",
            objects_deadline(),
            async || {
                refused(&[
                    "ConfigMap",
                    "hello-world-flux-config",
                    "Secret",
                    "hello-world-curve",
                    "Service",
                ])
                .await
            },
        )
        .await?;
    ensure!(message.contains("made by someone else"), "{message}");
    env.holds_for(
        "someone else's objects stay as they were, and no Job is made",
        Duration::from_secs(4),
        async || {
            let now = versions().await?;
            if now != before {
                return Ok(Some(format!("resourceVersions {before:?} became {now:?}")));
            }
            let job = env.api::<Job>().get_opt(NAME).await?;
            Ok(job.map(|j| format!("a Job was made: {}", yaml(&j.metadata))))
        },
    )
    .await?;
    let events = env
        .api::<k8s_openapi::api::events::v1::Event>()
        .list(&ListParams::default())
        .await?;
    let refusals: Vec<String> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("NameTaken"))
        .map(describe_event)
        .collect();
    ensure!(
        refusals.len() == 1,
        "one NameTaken Event, not a retry loop: {refusals:?}"
    );

    // The ConfigMap's owner deletes it: the hub hears of it and goes on, still refused
    // for the other two.
    cms.delete("hello-world-flux-config", &DeleteParams::default())
        .await?;
    env.eventually(
        "the refusal to name only the Secret and the Service",
        objects_deadline(),
        async || {
            Ok(match refused(&["hello-world-curve", "Service"]).await? {
                Probe::Done(m) if !m.contains("ConfigMap") => Probe::Done(()),
                Probe::Done(m) => Probe::Waiting(m),
                Probe::Waiting(w) => Probe::Waiting(w),
            })
        },
    )
    .await?;
    let ours = cms.get("hello-world-flux-config").await?;
    let mc = mcs.get(NAME).await?;
    ensure_controlled_by(
        "the ConfigMap made once the name was free",
        &ours.metadata,
        &mc,
    )?;

    // Deleting the MiniCluster takes what it made and nothing else.
    mcs.delete(NAME, &DeleteParams::background()).await?;
    env.eventually(
        "the MiniCluster and its ConfigMap to be gone",
        secs(120),
        async || {
            let mc = mcs.get_opt(NAME).await?;
            let cm = cms.get_opt("hello-world-flux-config").await?;
            Ok(match (mc, cm) {
                (None, None) => Probe::Done(()),
                (mc, cm) => Probe::Waiting(format!(
                    "MiniCluster there: {}, ConfigMap there: {}",
                    mc.is_some(),
                    cm.is_some()
                )),
            })
        },
    )
    .await?;
    env.holds_for(
        "someone else's Secret and Service survive the MiniCluster, unchanged",
        Duration::from_secs(4),
        async || {
            let now = versions().await?;
            Ok((now[1..] != before[1..])
                .then(|| format!("resourceVersions {:?} became {:?}", &before[1..], &now[1..])))
        },
    )
    .await
}
