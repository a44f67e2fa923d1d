//! The objects a MiniCluster owns over time: deleted with cleanup when its Jobs finish,
//! broker pods labelled, owner references, pruning what a spec change drops, and the root
//! Job's `suspend` left to another manager (Kueue).

use std::sync::Arc;

use flux_hub::controller::context::Context;
use flux_hub::controller::watch::cache::BrokerPod;
use flux_shared::api::MiniCluster;
use http::StatusCode;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Resource;
use kube::runtime::reflector::{self};
use kube::runtime::watcher;
use serde_json::json;

use super::mock_api::*;

#[tokio::test]
async fn finished_jobs_with_cleanup_delete_the_minicluster() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let mc = minicluster(&SPEC.replace("maxSize: 4", "maxSize: 4\n  cleanup: true"));
    run(&ctx, mc.clone()).await.expect("reconcile");
    observe(&server.calls(), &mut writers);
    // The Job completes.
    let mut job: Job = (*writers.jobs.as_reader().state()[0]).clone();
    job.status = Some(
        serde_json::from_value(
            json!({"conditions": [{"type": "Complete", "status": "True"}], "ready": 0}),
        )
        .expect("status"),
    );
    writers
        .jobs
        .apply_watcher_event(&watcher::Event::Apply(job));
    let before = server.calls().len();
    run(&ctx, mc).await.expect("reconcile");
    let writes: Vec<String> = server.calls()[before..].iter().map(Call::short).collect();
    assert!(
        writes.contains(
            &"DELETE /apis/flux-framework.org/v1alpha2/namespaces/hpc/miniclusters/flux-sample"
                .to_string()
        ),
        "{writes:?}"
    );
    assert_permitted(&server.calls());
}

#[tokio::test]
async fn broker_pods_get_their_job_index_label_once() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let status = observe(&server.calls(), &mut writers).expect("status");
    let pod = |name: &str, index: &str, labelled: bool| -> Pod {
        let mut labels = json!({"flux-framework.org/job": "flux-sample", "app.kubernetes.io/managed-by": "flux-hub"});
        if labelled {
            labels["job-index"] = json!(index);
        }
        watched::<Pod, BrokerPod>(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "hpc", "uid": format!("uid-{name}"), "labels": labels,
                         "annotations": {"batch.kubernetes.io/job-completion-index": index},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "flux-sample", "uid": "uid-1"}]},
            "spec": {"containers": [{"name": "flux", "image": "x"}]},
            "status": {"phase": "Pending"},
        }))
    };
    writers
        .broker_pods
        .apply_watcher_event(&watcher::Event::Apply(pod(
            "flux-sample-0-abcde",
            "0",
            false,
        )));
    writers
        .broker_pods
        .apply_watcher_event(&watcher::Event::Apply(pod(
            "flux-sample-1-fghij",
            "1",
            true,
        )));
    let mut steady = mc.clone();
    steady.status = Some(serde_json::from_value(status).expect("status"));
    let before = server.calls().len();
    run(&ctx, steady.clone()).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    let writes: Vec<String> = calls.iter().map(Call::short).collect();
    assert_eq!(
        writes,
        ["PATCH /api/v1/namespaces/hpc/pods/flux-sample-0-abcde"],
        "only the unlabelled pod"
    );
    assert_eq!(calls[0].body["metadata"]["labels"]["job-index"], "0");
    assert_permitted(&calls);

    // Reconciled again before the pod cache shows the label: the patch is not sent twice.
    let before = server.calls().len();
    run(&ctx, steady).await.expect("reconcile");
    let writes: Vec<String> = server.calls()[before..].iter().map(Call::short).collect();
    assert!(writes.is_empty(), "{writes:?}");
}

#[test]
fn objects_carry_owner_references_to_the_minicluster() {
    let mc = minicluster(SPEC);
    let plan = flux_shared::plan::Plan::new(&mc).expect("plan");
    for object in
        flux_shared::render::render(&plan, &flux_shared::plan::Role::Root, "cert").expect("render")
    {
        let value = serde_json::to_value(&object).expect("json");
        let owner = &value["metadata"]["ownerReferences"][0];
        assert_eq!(owner["uid"], "mc-uid", "{}", object.describe());
        assert_eq!(owner["kind"], MiniCluster::kind(&()).as_ref());
    }
}

#[tokio::test]
async fn objects_a_spec_change_drops_are_deleted_by_uid_and_nothing_else() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let services = "  services: [{name: nginx, image: \"nginx:1.27\", ports: [80]}]\n";
    let with_services = minicluster(&format!("{SPEC}{services}"));
    run(&ctx, with_services.clone()).await.expect("reconcile");
    let status = observe(&server.calls(), &mut writers).expect("status");

    // The plan without `services` drops the services pod and its Service(s).
    let rendered = |mc: &MiniCluster| -> Vec<String> {
        let plan = flux_shared::plan::Plan::new(mc).expect("plan");
        flux_shared::render::render(&plan, &flux_shared::plan::Role::Root, "cert")
            .expect("render")
            .iter()
            .map(|o| o.describe())
            .collect()
    };
    let mut without = minicluster(SPEC);
    without.metadata.generation = Some(2);
    without.status = Some(serde_json::from_value(status).expect("status"));
    let kept = rendered(&without);
    let dropped: Vec<String> = rendered(&with_services)
        .into_iter()
        .filter(|o| !kept.contains(o))
        .collect();
    assert_eq!(dropped, ["Pod/flux-sample-services"]);

    let before = server.calls().len();
    run(&ctx, without.clone()).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    assert_permitted(&calls);
    let deleted: Vec<String> = calls
        .iter()
        .filter(|c| c.method == "DELETE")
        .map(|c| {
            // Only the object the cache saw: a re-created one has another UID.
            assert_eq!(c.body["preconditions"]["uid"], "uid-1", "{}", c.short());
            let mut parts = c.path.rsplit('/');
            let name = parts.next().unwrap_or_default();
            let kind = match parts.next() {
                Some("pods") => "Pod",
                Some("services") => "Service",
                Some("configmaps") => "ConfigMap",
                Some("secrets") => "Secret",
                other => panic!("unexpected DELETE of {other:?}"),
            };
            format!("{kind}/{name}")
        })
        .collect();
    let mut expected = dropped.clone();
    expected.sort();
    let mut got = deleted.clone();
    got.sort();
    assert_eq!(got, expected, "exactly what the plan dropped is deleted");
    let pruned = calls
        .iter()
        .find(|c| c.method == "POST" && c.path.contains("/events") && c.body["reason"] == "Pruned")
        .expect("a Pruned Event");
    for object in &dropped {
        assert!(
            pruned.body["note"]
                .as_str()
                .unwrap_or_default()
                .contains(object.as_str()),
            "{object} missing from {}",
            pruned.body["note"]
        );
    }

    // Orphans come from spec changes: at the same generation the caches are not scanned
    // again, at the next one they are.
    let stray: Service = serde_json::from_value(json!({
        "metadata": {"name": "flux-sample-stray", "namespace": "hpc", "uid": "uid-stray",
            "labels": {"app.kubernetes.io/managed-by": "flux-hub"},
            "ownerReferences": [{"apiVersion": "flux-framework.org/v1alpha2", "kind": "MiniCluster",
                "name": "flux-sample", "uid": "mc-uid", "controller": true}]}
    }))
    .expect("service");
    writers
        .services
        .apply_watcher_event(&watcher::Event::Apply(stray));
    let deletes_after = |before: usize| -> Vec<String> {
        server.calls()[before..]
            .iter()
            .filter(|c| c.method == "DELETE")
            .map(Call::short)
            .collect()
    };
    let before = server.calls().len();
    run(&ctx, without.clone()).await.expect("reconcile");
    let again = deletes_after(before);
    assert!(again.is_empty(), "{again:?}");
    // The watch shows the services pod gone.
    let mut gone = Pod::default();
    gone.metadata.name = Some("flux-sample-services".into());
    gone.metadata.namespace = Some("hpc".into());
    writers
        .pods
        .apply_watcher_event(&watcher::Event::Delete(gone));
    let mut next = without.clone();
    next.metadata.generation = Some(3);
    let before = server.calls().len();
    run(&ctx, next).await.expect("reconcile");
    assert_eq!(
        deletes_after(before),
        ["DELETE /api/v1/namespaces/hpc/services/flux-sample-stray"]
    );
}

#[tokio::test]
async fn nothing_is_pruned_while_the_running_job_cannot_take_the_change() {
    // The Job's pod template is immutable: a 422 leaves the running pods on the old plan,
    // which may still use what the new one dropped.
    let responder: Responder = Arc::new(|call: &Call| {
        if call.method == "PATCH"
            && call.path.contains("/jobs/")
            && call.query.contains("fieldManager")
        {
            return (
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "message": "field is immutable", "reason": "Invalid", "code": 422}),
            );
        }
        echo(call)
    });
    let (client, server) = ApiServer::start(responder);
    let (ctx, mut writers) = context(client);
    let services = "  services: [{name: nginx, image: \"nginx:1.27\", ports: [80]}]\n";
    let with_services = minicluster(&format!("{SPEC}{services}"));
    run(&ctx, with_services).await.expect("reconcile");
    let status = observe(&server.calls(), &mut writers).expect("status");
    // Also a new image: the Job's pod template changes, which the API server refuses.
    let mut without = minicluster(&SPEC.replace("rockylinux:9", "rockylinux:10"));
    without.metadata.generation = Some(2);
    without.status = Some(serde_json::from_value(status).expect("status"));
    let before = server.calls().len();
    run(&ctx, without).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    assert!(
        calls
            .iter()
            .any(|c| c.method == "PATCH" && c.path.contains("/jobs/")),
        "the Job change was tried"
    );
    let deletes: Vec<String> = calls
        .iter()
        .filter(|c| c.method == "DELETE")
        .map(Call::short)
        .collect();
    assert!(deletes.is_empty(), "{deletes:?}");
}

/// The job of `writers`' cache, changed by `edit` as another manager's write would.
fn edit_cached_job(writers: &mut Writers, ctx: &Context, edit: impl FnOnce(&mut Job)) {
    let mut job = (*ctx
        .stores
        .jobs
        .get(&reflector::ObjectRef::new("flux-sample").within("hpc"))
        .expect("cached job"))
    .clone();
    edit(&mut job);
    let rv: u64 = job
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or("1")
        .parse()
        .unwrap_or(1);
    job.metadata.resource_version = Some((rv + 1).to_string());
    writers
        .jobs
        .apply_watcher_event(&watcher::Event::Apply(job));
}

/// Kueue's protocol on the root Job (suspended at creation, resumed on admission, suspended
/// again on preemption) is never undone: the hub sends `suspend` in its POST only, its
/// applies neither send nor own it, and it writes it again only when `spec.suspend` changes.
#[tokio::test]
async fn a_suspend_or_resume_of_another_manager_stands_until_spec_suspend_changes() {
    // The POST recorded suspend under the hub's Update entry (as a Kueue webhook's mutation
    // of the hub's POST would be too).
    let respond: Responder = Arc::new(|c: &Call| {
        if c.method == "GET" && c.path.ends_with("/jobs/flux-sample") {
            let mut job = created_by_post(&c.path);
            job["metadata"]["managedFields"][0]["fieldsV1"] = json!({
                "f:metadata": {"f:labels": {}, "f:annotations": {"f:flux-framework.org/suspend": {}}},
                "f:spec": {"f:suspend": {}, "f:parallelism": {}},
            });
            return (StatusCode::OK, job);
        }
        echo(c)
    });
    let (client, server) = ApiServer::start(respond);
    let (ctx, mut writers) = context(client);
    let mut mc = minicluster(SPEC);
    mc.spec.suspend = Some(true);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let calls = server.calls();
    let post = calls
        .iter()
        .find(|c| c.method == "POST" && c.path.ends_with("/jobs"))
        .expect("job created");
    assert_eq!(post.body["spec"]["suspend"], true, "created suspended");
    assert_eq!(
        post.body["metadata"]["annotations"]["flux-framework.org/suspend"],
        "true"
    );
    let status = observe(&calls, &mut writers).expect("status");
    assert_eq!(status["phase"], "Suspended");
    mc.status = Some(serde_json::from_value(status).expect("status"));

    // The queue manager admits the Job (resumes it); the author then scales, which applies
    // the Job: the apply does not carry suspend, and nothing writes it back.
    edit_cached_job(&mut writers, &ctx, |j| {
        j.spec.as_mut().expect("spec").suspend = Some(false);
    });
    let mut scaled = mc.clone();
    scaled.spec.size = 3;
    scaled.metadata.generation = Some(2);
    let before = server.calls().len();
    run(&ctx, scaled.clone()).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    let apply = calls
        .iter()
        .find(|c| writes_object(c, "jobs", "flux-sample"))
        .expect("job applied");
    assert_eq!(apply.body["spec"]["parallelism"], 3);
    assert!(
        apply.body["spec"].get("suspend").is_none()
            && apply.body["metadata"]["annotations"]
                .get("flux-framework.org/suspend")
                .is_none(),
        "the apply owns neither suspend nor its record: {}",
        apply.body
    );
    let take_over = calls
        .iter()
        .find(|c| {
            c.method == "PATCH"
                && c.path.ends_with("/jobs/flux-sample")
                && !c.query.contains("fieldManager")
        })
        .expect("the POST's fields taken over");
    let fields = &take_over.body["metadata"]["managedFields"][0]["fieldsV1"];
    assert_eq!(
        *fields,
        json!({"f:metadata": {"f:labels": {}}, "f:spec": {"f:parallelism": {}}}),
        "suspend is released to whoever writes it next"
    );
    assert!(
        !calls.iter().any(|c| c.query.contains("flux-hub-suspend")),
        "no write of suspend while spec.suspend is unchanged"
    );

    // Preempted: suspended again by the queue manager; still not taken back.
    observe(&calls, &mut writers);
    edit_cached_job(&mut writers, &ctx, |j| {
        j.spec.as_mut().expect("spec").suspend = Some(true);
    });
    let before = server.calls().len();
    run(&ctx, scaled.clone()).await.expect("reconcile");
    assert!(
        !server.calls()[before..]
            .iter()
            .any(|c| c.path.contains("/jobs/")),
        "the Job is left as the queue manager set it"
    );

    // The author resumes it: written once, as a merge patch of its own manager.
    let mut resumed = scaled.clone();
    resumed.spec.suspend = Some(false);
    resumed.metadata.generation = Some(3);
    let before = server.calls().len();
    run(&ctx, resumed).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    let written: Vec<&Call> = calls
        .iter()
        .filter(|c| c.query.contains("fieldManager=flux-hub-suspend"))
        .collect();
    assert_eq!(
        written.len(),
        1,
        "{:?}",
        calls.iter().map(Call::short).collect::<Vec<_>>()
    );
    assert_eq!(
        written[0].body,
        json!({"metadata": {"annotations": {"flux-framework.org/suspend": "false"}},
               "spec": {"suspend": false}})
    );
    assert_permitted(&calls);
}

/// Without `spec.suspend` the hub never sends the root Job's `suspend`.
#[tokio::test]
async fn without_spec_suspend_the_root_job_carries_no_suspend() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, _writers) = context(client);
    run(&ctx, minicluster(SPEC)).await.expect("reconcile");
    let post = server
        .calls()
        .into_iter()
        .find(|c| c.method == "POST" && c.path.ends_with("/jobs"))
        .expect("job created");
    assert!(post.body["spec"].get("suspend").is_none(), "{}", post.body);
}
