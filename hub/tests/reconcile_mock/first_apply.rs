//! A MiniCluster's objects created from nothing, re-applied without writes, put back when
//! edited; its certificate kept; a resize within (and above) its maximum; an invalid spec.

use std::sync::Arc;

use http::StatusCode;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::mock_api::*;

#[tokio::test]
async fn creates_every_object_from_nothing_then_makes_no_writes() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let calls = server.calls();
    let writes: Vec<String> = calls.iter().map(Call::short).collect();
    assert_eq!(
        writes,
        [
            "POST /api/v1/namespaces/hpc/configmaps",
            "POST /api/v1/namespaces/hpc/secrets",
            "POST /api/v1/namespaces/hpc/services",
            "POST /apis/batch/v1/namespaces/hpc/jobs",
            "POST /apis/events.k8s.io/v1/namespaces/hpc/events",
            "PATCH /apis/flux-framework.org/v1alpha2/namespaces/hpc/miniclusters/flux-sample/status",
        ],
        "at most 6 requests per MiniCluster created"
    );
    for c in &calls[..4] {
        assert!(
            c.query.contains("fieldManager=flux-hub"),
            "created under the hub's field manager: {}",
            c.query
        );
    }
    let status_write = &calls[5];
    assert!(
        status_write.query.contains("fieldManager=flux-hub")
            && status_write.query.contains("force=true"),
        "server-side apply: {}",
        status_write.query
    );
    assert_eq!(calls[4].body["reason"], "Created");
    let status = &calls[5].body["status"];
    assert_eq!(status["maximumSize"], 4);
    assert_eq!(status["size"], 2);
    assert_eq!(status["selector"], "flux-framework.org/job=flux-sample");
    assert_eq!(status["phase"], "Pending");
    assert_eq!(status["observedGeneration"], 1);
    assert_permitted(&calls);

    // Second pass with the caches holding what was applied: no writes at all.
    let applied_status = observe(&calls, &mut writers).expect("status");
    let mut again = mc.clone();
    again.status = Some(serde_json::from_value(applied_status).expect("status"));
    let before = server.calls().len();
    run(&ctx, again).await.expect("reconcile");
    let extra: Vec<String> = server.calls()[before..].iter().map(Call::short).collect();
    assert!(
        extra.is_empty(),
        "a no-op reconcile made requests: {extra:?}"
    );
}

/// A pass woken by the Job's status writes only the status; a child edited since the
/// last pass (a new resourceVersion, other data) is put back.
#[tokio::test]
async fn a_status_change_writes_only_the_status_and_an_edited_child_is_put_back() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let first = server.calls();
    let applied_status = observe(&first, &mut writers).expect("status");
    let mut mc = mc;
    mc.status = Some(serde_json::from_value(applied_status).expect("status"));

    let job = first
        .iter()
        .find(|c| writes_object(c, "jobs", "flux-sample"))
        .expect("the Job was created");
    let (_, mut job) = echo(job);
    job["metadata"]["resourceVersion"] = json!("2");
    job["status"] = json!({"active": 2, "ready": 2});
    writers
        .jobs
        .apply_watcher_event(&watcher::Event::Apply(watched::<Job, Job>(job)));
    let before = server.calls().len();
    run(&ctx, mc.clone()).await.expect("reconcile");
    let writes: Vec<String> = server.calls()[before..].iter().map(Call::short).collect();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert!(writes[0].contains("/status"), "{writes:?}");

    let cm = first
        .iter()
        .find(|c| writes_object(c, "configmaps", "flux-sample-flux-config"))
        .expect("the ConfigMap was created");
    let (_, mut cm) = echo(cm);
    cm["metadata"]["resourceVersion"] = json!("3");
    cm["data"]["broker.toml"] = json!("# edited by hand");
    writers
        .config_maps
        .apply_watcher_event(&watcher::Event::Apply(watched::<ConfigMap, ConfigMap>(cm)));
    let before = server.calls().len();
    run(&ctx, mc).await.expect("reconcile");
    let put_back = server.calls()[before..]
        .iter()
        .any(|c| writes_object(c, "configmaps", "flux-sample-flux-config"));
    assert!(
        put_back,
        "the edited ConfigMap was left: {:?}",
        server.calls()[before..]
            .iter()
            .map(Call::short)
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn reuses_the_certificate_it_created() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, _writers) = context(client.clone());
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let first = server.calls();
    let secret_body = first
        .iter()
        .find(|c| writes_object(c, "secrets", "flux-sample-curve"))
        .expect("secret")
        .body
        .clone();
    // A restarted hub: a fresh context, remembering nothing of the first pass, whose
    // caches list what that pass wrote (as a new process's watches would) keeps the Secret.
    let (restarted, mut writers) = context(client);
    observe(&first, &mut writers);
    let mut changed = mc.clone();
    changed.spec.size = 3;
    let before = server.calls().len();
    run(&restarted, changed).await.expect("reconcile");
    let later = &server.calls()[before..];
    assert!(
        later.iter().all(|c| !c.path.contains("/secrets")),
        "the certificate was rewritten: {:?}",
        later.iter().map(Call::short).collect::<Vec<_>>()
    );
    assert!(secret_body["data"]["curve.cert"].is_string());
}

#[tokio::test]
async fn a_reconcile_before_the_secret_reaches_the_cache_keeps_the_same_certificate() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, _writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("reconcile");
    // The Job's watch event triggers a second pass before the Secret's event arrived.
    run(&ctx, mc).await.expect("reconcile");
    let certs: Vec<Value> = server
        .calls()
        .iter()
        .filter(|c| writes_object(c, "secrets", "flux-sample-curve"))
        .map(|c| c.body["data"]["curve.cert"].clone())
        .collect();
    assert_eq!(certs.len(), 2);
    assert_eq!(
        certs[0], certs[1],
        "a second certificate would split the instance"
    );
}

/// The echoes of a new MiniCluster's objects can start a second reconcile before the
/// caches show the first one's writes: the Job's POST then finds it there (409), and
/// neither a second `Created` Event nor the same status is written again.
#[tokio::test]
async fn a_second_pass_before_the_caches_catch_up_repeats_no_event_or_status() {
    let posted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = posted.clone();
    let responder: Responder = Arc::new(move |call: &Call| {
        if call.method == "POST"
            && call.path.ends_with("/jobs")
            && seen.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return (
                StatusCode::CONFLICT,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "jobs.batch \"flux-sample\" already exists", "reason": "AlreadyExists", "code": 409}),
            );
        }
        echo(call)
    });
    let (client, server) = ApiServer::start(responder);
    let (ctx, _writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("first pass");
    let first = server.calls();
    assert_eq!(
        first.iter().filter(|c| c.path.ends_with("/events")).count(),
        1
    );
    assert_eq!(
        first.iter().filter(|c| c.path.ends_with("/status")).count(),
        1
    );

    run(&ctx, mc).await.expect("second pass");
    let second: Vec<String> = server.calls()[first.len()..]
        .iter()
        .map(Call::short)
        .collect();
    assert!(
        second.contains(&"POST /apis/batch/v1/namespaces/hpc/jobs".to_string()),
        "the cache has no Job yet: {second:?}"
    );
    assert!(
        second.contains(&"GET /apis/batch/v1/namespaces/hpc/jobs/flux-sample".to_string()),
        "the existing Job is read to take over its fields: {second:?}"
    );
    assert!(
        !second
            .iter()
            .any(|c| c.ends_with("/events") || c.ends_with("/status")),
        "no second Created Event or status write: {second:?}"
    );
}

#[tokio::test]
async fn scaling_within_the_maximum_patches_only_the_job_and_status() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let status = observe(&server.calls(), &mut writers).expect("status");
    let mut scaled = mc.clone();
    scaled.status = Some(serde_json::from_value(status).expect("status"));
    scaled.spec.size = 3;
    scaled.metadata.generation = Some(2);
    let before = server.calls().len();
    run(&ctx, scaled).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    let writes: Vec<String> = calls.iter().map(Call::short).collect();
    assert!(
        writes.contains(&"PATCH /apis/batch/v1/namespaces/hpc/jobs/flux-sample".to_string()),
        "{writes:?}"
    );
    assert!(
        !writes.iter().any(|w| w.contains("/services/")),
        "the Service does not change: {writes:?}"
    );
    let job = calls
        .iter()
        .find(|c| writes_object(c, "jobs", "flux-sample"))
        .expect("job patch");
    let take_over = calls
        .iter()
        .find(|c| {
            c.method == "PATCH"
                && c.path.ends_with("/jobs/flux-sample")
                && !c.query.contains("fieldManager")
        })
        .expect("the POST's fields taken over before the first apply");
    assert_eq!(
        take_over.body["metadata"]["managedFields"][0]["operation"],
        "Apply"
    );
    assert_eq!(take_over.body["metadata"]["resourceVersion"], "1");
    assert_eq!(job.body["spec"]["parallelism"], 3);
    assert_eq!(job.body["spec"]["completions"], 3);
    let event = calls.iter().find(|c| c.method == "POST").expect("event");
    assert_eq!(event.body["reason"], "Scaled");
    assert_eq!(event.body["note"], "scaled from 2 to 3 brokers");
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status");
    assert_eq!(status.body["status"]["size"], 3);
    assert_eq!(
        status.body["status"]["maximumSize"], 4,
        "the declared hosts do not change"
    );
    assert_permitted(&calls);
}

#[tokio::test]
async fn a_size_above_the_maximum_is_refused_with_a_condition_and_an_event() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let status = observe(&server.calls(), &mut writers).expect("status");
    let mut too_big = mc.clone();
    too_big.status = Some(serde_json::from_value(status).expect("status"));
    too_big.spec.max_size = None;
    too_big.spec.size = 9;
    let before = server.calls().len();
    let action = run(&ctx, too_big.clone())
        .await
        .expect("refusal is not an error");
    assert_eq!(
        action,
        kube::runtime::controller::Action::await_change(),
        "no retry loop"
    );
    let calls = server.calls()[before..].to_vec();
    let writes: Vec<String> = calls.iter().map(Call::short).collect();
    assert_eq!(
        writes,
        [
            "POST /apis/events.k8s.io/v1/namespaces/hpc/events",
            "PATCH /apis/flux-framework.org/v1alpha2/namespaces/hpc/miniclusters/flux-sample/status",
        ]
    );
    assert_eq!(calls[0].body["type"], "Warning");
    assert_eq!(calls[0].body["reason"], "SizeAboveMaximum");
    let degraded = calls[1].body["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Degraded")
        .expect("degraded")
        .clone();
    assert_eq!(degraded["status"], "True");
    assert!(
        degraded["message"]
            .as_str()
            .expect("message")
            .starts_with("spec.size: 9 is above the maximum size 4")
    );

    // Reconciling the same refused spec again writes nothing new.
    too_big.status = Some(serde_json::from_value(calls[1].body["status"].clone()).expect("status"));
    let before = server.calls().len();
    run(&ctx, too_big).await.expect("reconcile");
    assert!(
        server.calls()[before..].is_empty(),
        "repeated refusal must not spam events or writes"
    );
}

#[tokio::test]
async fn an_invalid_spec_gets_a_status_and_an_event_but_no_objects() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, _writers) = context(client);
    let mc = minicluster(&SPEC.replace("maxSize: 4", "maxSize: 4\n  flux: {connectTimeout: soon}"));
    let action = run(&ctx, mc).await.expect("invalid spec is not retried");
    assert_eq!(action, kube::runtime::controller::Action::await_change());
    let calls = server.calls();
    assert!(
        calls
            .iter()
            .all(|c| c.path.contains("/events") || c.path.ends_with("/status")),
        "{:?}",
        calls.iter().map(Call::short).collect::<Vec<_>>()
    );
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status");
    assert_eq!(status.body["status"]["phase"], "Invalid");
    let event = calls.iter().find(|c| c.method == "POST").expect("event");
    assert_eq!(event.body["reason"], "InvalidSpec");
    assert!(
        event.body["note"]
            .as_str()
            .expect("note")
            .contains("spec.flux.connectTimeout")
    );
}

/// A Job whose pods mount the view image keeps them when a restarted hub does not (yet)
/// know that its cluster has image volumes, and when the spec leaves `imageVolume` unset
/// by then: the live Job's annotation decides, so nothing is written to the Job or the
/// ConfigMap its pods mount.
#[tokio::test]
async fn a_job_made_with_the_view_image_volume_keeps_its_pods_after_a_restart() {
    let (client, server) = ApiServer::start(ok_responder());
    let (earlier, _) = context(client.clone());
    let mounted = SPEC.replace(
        "  maxSize: 4\n",
        "  maxSize: 4\n  flux: {container: {imageVolume: true}}\n",
    );
    run(&earlier, minicluster(&mounted))
        .await
        .expect("reconcile");
    let first = server.calls();
    let job = first
        .iter()
        .find(|c| writes_object(c, "jobs", "flux-sample"))
        .expect("the Job was created");
    assert_eq!(
        job.body["metadata"]["annotations"]["flux-framework.org/view"],
        "image-volume"
    );
    let pod = &job.body["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["name"], "flux-sample");
    assert!(pod.get("initContainers").is_none());

    // A restarted hub that knows of no image volumes, the field now unset.
    let (restarted, mut writers) = context(client);
    let applied_status = observe(&first, &mut writers).expect("status");
    let mut mc = minicluster(SPEC);
    mc.status = Some(serde_json::from_value(applied_status).expect("status"));
    let before = server.calls().len();
    run(&restarted, mc).await.expect("reconcile");
    let writes: Vec<String> = server.calls()[before..].iter().map(Call::short).collect();
    assert!(
        writes
            .iter()
            .all(|w| !w.contains("/jobs") && !w.contains("/configmaps")),
        "the Job and its ConfigMap were rewritten: {writes:?}"
    );
}

/// A Job made with the view's init container (by a release before the view container:
/// the same objects as `flux.container.initContainer` renders, byte for byte) keeps its
/// pods after an upgrade: a restarted hub whose caches list it writes nothing to it, and
/// its ConfigMap keeps the init container's script its pods mount. A new Job has the view
/// container.
#[tokio::test]
async fn a_job_made_with_the_view_init_container_keeps_its_pods_after_an_upgrade() {
    let (client, server) = ApiServer::start(ok_responder());
    let (earlier, _) = context(client.clone());
    let copying = SPEC.replace(
        "  maxSize: 4\n",
        "  maxSize: 4\n  flux: {container: {initContainer: true}}\n",
    );
    run(&earlier, minicluster(&copying))
        .await
        .expect("reconcile");
    let first = server.calls();
    let job = first
        .iter()
        .find(|c| writes_object(c, "jobs", "flux-sample"))
        .expect("the Job was created");
    assert!(
        job.body["metadata"]["annotations"]
            .get("flux-framework.org/view")
            .is_none()
    );
    let pod = &job.body["spec"]["template"]["spec"];
    assert_eq!(pod["initContainers"][0]["name"], "flux-view");

    // The upgraded hub, with the spec as it was before `initContainer` existed.
    let (upgraded, mut writers) = context(client);
    let applied_status = observe(&first, &mut writers).expect("status");
    let mut mc = minicluster(SPEC);
    mc.status = Some(serde_json::from_value(applied_status).expect("status"));
    let before = server.calls().len();
    run(&upgraded, mc).await.expect("reconcile");
    let writes: Vec<String> = server.calls()[before..].iter().map(Call::short).collect();
    assert!(
        writes
            .iter()
            .all(|w| !w.contains("/jobs") && !w.contains("/configmaps")),
        "the Job and its ConfigMap were rewritten: {writes:?}"
    );

    // A new MiniCluster of the same spec has the view container.
    let (client, server) = ApiServer::start(ok_responder());
    let (fresh, _) = context(client);
    run(&fresh, minicluster(SPEC)).await.expect("reconcile");
    let job = server
        .calls()
        .into_iter()
        .find(|c| writes_object(c, "jobs", "flux-sample"))
        .expect("the Job was created");
    assert_eq!(
        job.body["metadata"]["annotations"]["flux-framework.org/view"],
        "alongside"
    );
    assert_eq!(
        job.body["spec"]["template"]["spec"]["containers"][0]["name"],
        "flux-view"
    );
}
