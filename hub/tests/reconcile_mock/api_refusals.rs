//! The API server's errors: a failed write backs off, a stage it keeps refusing shows in the
//! status, a conflict passes on its own, an immutable change is reported, an object it finds
//! invalid makes the MiniCluster Invalid without retries.

use std::sync::Arc;
use std::time::Duration;

use flux_hub::controller::reconcile;
use http::StatusCode;
use serde_json::json;

use super::fixtures::*;
use super::mock_api::*;

/// An API server that answers every write of a Job with 409 Conflict.
fn conflict_on_jobs() -> Responder {
    Arc::new(|call: &Call| {
        if call.path.contains("/jobs") && call.method != "GET" {
            (
                StatusCode::CONFLICT,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "conflict", "reason": "Conflict", "code": 409}),
            )
        } else {
            echo(call)
        }
    })
}

#[tokio::test]
async fn api_errors_fail_the_reconcile_and_back_off() {
    let (client, _server) = ApiServer::start(conflict_on_jobs());
    let (ctx, _writers) = context(client);
    let mc = Arc::new(minicluster(SPEC));
    let err = reconcile::reconcile(mc.clone(), ctx.clone())
        .await
        .expect_err("conflict");
    assert_eq!((err.stage(), err.kind()), ("apply", "conflict"));
    assert!(err.to_string().contains("Job hpc/flux-sample"), "{err}");
    let first = reconcile::error_policy(mc.clone(), &err, ctx.clone());
    let second = reconcile::error_policy(mc.clone(), &err, ctx.clone());
    assert_eq!(
        first,
        kube::runtime::controller::Action::requeue(Duration::from_secs(1))
    );
    assert_eq!(
        second,
        kube::runtime::controller::Action::requeue(Duration::from_secs(2))
    );
    let metrics = ctx.metrics.encode();
    assert!(
        metrics.contains("flux_hub_reconcile_errors_total{stage=\"apply\",kind=\"conflict\"} 2"),
        "{metrics}"
    );

    let server_error: Responder = Arc::new(|call: &Call| {
        if call.method == "PATCH" {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "etcd timeout", "reason": "InternalError", "code": 500}),
            )
        } else {
            echo(call)
        }
    });
    let (client, _server) = ApiServer::start(server_error);
    let (ctx, _writers) = context(client);
    let err = reconcile::reconcile(mc, ctx).await.expect_err("500");
    assert_eq!(err.kind(), "server");
}

#[tokio::test]
async fn a_stage_the_api_server_keeps_refusing_shows_in_status_with_its_reason() {
    let forbidden: Responder = Arc::new(|call: &Call| {
        if call.path.contains("/configmaps") && call.method == "POST" {
            (
                StatusCode::FORBIDDEN,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "configmaps is forbidden", "reason": "Forbidden", "code": 403}),
            )
        } else {
            echo(call)
        }
    });
    let (client, server) = ApiServer::start(forbidden);
    let (ctx, _writers) = context(client);
    let mc = Arc::new(minicluster(SPEC));
    let err = reconcile::reconcile(mc, ctx.clone())
        .await
        .expect_err("forbidden");
    assert_eq!(
        (err.stage(), err.kind(), err.reason()),
        ("apply", "api", "ApplyFailed")
    );
    let calls = server.calls();
    let degraded = degraded_in_status_write(&calls);
    assert_eq!(degraded["status"], "True");
    assert_eq!(degraded["reason"], "ApplyFailed");
    assert!(
        degraded["message"]
            .as_str()
            .expect("message")
            .contains("forbidden"),
        "{degraded}"
    );
    let event = calls
        .iter()
        .find(|c| c.path.ends_with("/events"))
        .expect("an Event");
    assert_eq!(event.body["reason"], "ApplyFailed");
}

#[tokio::test]
async fn a_conflict_passes_on_its_own_and_leaves_the_status_alone() {
    let (client, server) = ApiServer::start(conflict_on_jobs());
    let (ctx, _writers) = context(client);
    reconcile::reconcile(Arc::new(minicluster(SPEC)), ctx)
        .await
        .expect_err("conflict");
    assert!(
        !server.calls().iter().any(|c| c.path.ends_with("/status")),
        "a conflict is not shown in status"
    );
}

#[tokio::test]
async fn an_immutable_job_change_is_reported_not_retried() {
    // Only a change can be refused: the Job exists (created by the first pass).
    let responder: Responder = Arc::new(|call: &Call| {
        if call.path.contains("/jobs/") && call.query.contains("fieldManager") {
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "Job.batch \"flux-sample\" is invalid: spec.template: Invalid value: field is immutable", "reason": "Invalid", "code": 422}),
            )
        } else {
            echo(call)
        }
    });
    let (client, server) = ApiServer::start(responder);
    let (ctx, mut writers) = context(client);
    let mc = minicluster(SPEC);
    run(&ctx, mc.clone()).await.expect("created");
    let status = observe(&server.calls(), &mut writers).expect("status");
    let mut changed = mc;
    changed.status = Some(serde_json::from_value(status).expect("status"));
    changed.spec.containers[0].image = "rockylinux:10".into();
    changed.metadata.generation = Some(2);
    let before = server.calls().len();
    run(&ctx, changed).await.expect("reported, not an error");
    let calls = server.calls()[before..].to_vec();
    let event = calls.iter().find(|c| c.method == "POST").expect("event");
    assert_eq!(event.body["reason"], "JobSpecImmutable");
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status");
    assert!(
        status.body["status"]["conditions"]
            .to_string()
            .contains("JobSpecImmutable")
    );
}

/// An object of the spec that the API server finds invalid (a ConfigMap over its 1 MiB
/// limit): the MiniCluster is Invalid with the API server's reason, once, no Job is made,
/// and the pass is not retried in a loop.
#[tokio::test]
async fn an_object_the_api_server_refuses_makes_the_minicluster_invalid_without_retries() {
    let responder: Responder = Arc::new(|call: &Call| {
        if let Some(refusal) = config_map_too_long(call) {
            return refusal;
        }
        echo(call)
    });
    let (client, server) = ApiServer::start(responder);
    let (ctx, _writers) = context(client);
    let action = run(&ctx, minicluster(SPEC)).await.expect("not an error");
    assert_eq!(
        action,
        kube::runtime::controller::Action::await_change(),
        "no retry loop"
    );
    let calls = server.calls();
    assert!(
        !calls.iter().any(|c| c.path.contains("/jobs")),
        "no Job without its configuration: {:?}",
        calls.iter().map(Call::short).collect::<Vec<_>>()
    );
    let events: Vec<&Call> = calls
        .iter()
        .filter(|c| c.path.ends_with("/events"))
        .collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].body["reason"], "RejectedByAPIServer");
    let note = events[0].body["note"].as_str().expect("note");
    assert!(
        note.contains("ConfigMap/flux-sample-flux-config") && note.contains("1048576 bytes"),
        "{note}"
    );
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status");
    assert_eq!(status.body["status"]["phase"], "Invalid");
}
