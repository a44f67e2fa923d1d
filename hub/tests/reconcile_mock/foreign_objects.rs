//! Objects that are not the MiniCluster's: someone else's object with a name it needs is
//! never written, and a cached object it does not control stops the pass before any write.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::fixtures::*;
use super::mock_api::*;

/// An object of someone else with a name the MiniCluster needs, as the API server has it.
fn someone_elses(resource: &str, name: &str, labels: Value) -> Value {
    let (api_version, kind) = match resource {
        "configmaps" => ("v1", "ConfigMap"),
        "secrets" => ("v1", "Secret"),
        "services" => ("v1", "Service"),
        "jobs" => ("batch/v1", "Job"),
        other => panic!("no such test resource {other}"),
    };
    json!({"apiVersion": api_version, "kind": kind,
           "metadata": {"name": name, "namespace": "hpc", "uid": "theirs", "resourceVersion": "77",
                        "labels": labels}})
}

fn already_exists(name: &str) -> (StatusCode, Value) {
    (
        StatusCode::CONFLICT,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": format!("\"{name}\" already exists"), "reason": "AlreadyExists", "code": 409}),
    )
}

/// Someone else's Secret holds the name of the MiniCluster's CURVE Secret and is not
/// labelled as the hub's (so the caches never see it): its POST gets a 409, it is read,
/// and then nothing is written to it, no Job is created, and the MiniCluster is refused
/// with the object named, once; a watch of that one object (by name) is opened so that its
/// change or deletion wakes the MiniCluster.
#[tokio::test]
async fn someone_elses_object_with_a_needed_name_is_never_written_and_refuses_the_minicluster() {
    let responder: Responder = Arc::new(|call: &Call| {
        let secret = "flux-sample-curve";
        if call.method == "POST" && call.path.ends_with("/secrets") {
            return already_exists(secret);
        }
        if call.method == "GET" && call.path.ends_with(&format!("/secrets/{secret}")) {
            return (
                StatusCode::OK,
                someone_elses("secrets", secret, json!({"team": "data"})),
            );
        }
        if call.method == "GET" && call.path.ends_with("/secrets") {
            // The blocker's watch: its listing, then a watch that stays open (empty).
            if call.query.contains("watch=true") {
                return (StatusCode::OK, Value::Null);
            }
            return (
                StatusCode::OK,
                json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                       "metadata": {"resourceVersion": "77"},
                       "items": [someone_elses("secrets", secret, json!({"team": "data"}))]}),
            );
        }
        echo(call)
    });
    let (client, server) = ApiServer::start(responder);
    let (ctx, _writers) = context(client);
    let mc = minicluster(SPEC);
    let action = run(&ctx, mc.clone())
        .await
        .expect("a refusal is not an error");
    assert_eq!(
        action,
        kube::runtime::controller::Action::await_change(),
        "no retry loop"
    );
    let calls = server.calls();
    let secret_name = calls
        .iter()
        .find(|c| c.method == "POST" && c.path.ends_with("/secrets"))
        .and_then(|c| c.body["metadata"]["name"].as_str().map(str::to_string))
        .expect("the Secret was POSTed");
    assert_eq!(
        secret_name, "flux-sample-curve",
        "test names the real Secret"
    );
    let read = calls
        .iter()
        .find(|c| c.method == "GET" && c.path.ends_with("/secrets/flux-sample-curve"))
        .expect("the Secret behind the 409 is read");
    assert!(
        read.accept.contains("PartialObjectMetadata"),
        "only its metadata: someone else's Secret data is never read ({})",
        read.accept
    );
    for c in &calls {
        assert!(
            !(c.method == "PATCH" && c.path.contains("/secrets/")),
            "someone else's Secret was patched: {}",
            c.short()
        );
        assert!(c.method != "DELETE", "nothing is deleted: {}", c.short());
        assert!(
            !c.path.contains("/jobs"),
            "no Job without its configuration: {}",
            c.short()
        );
    }
    let event = calls
        .iter()
        .find(|c| c.path.ends_with("/events"))
        .expect("one Event");
    assert_eq!(event.body["type"], "Warning");
    assert_eq!(event.body["reason"], "NameTaken");
    let note = event.body["note"].as_str().expect("note");
    assert!(
        note.contains("Secret hpc/flux-sample-curve (made by someone else)"),
        "{note}"
    );
    let degraded = degraded_in_status_write(&calls);
    assert_eq!(degraded["status"], "True");
    assert_eq!(degraded["reason"], "NameTaken");
    assert_permitted(&calls);

    // The blocking Secret is watched, by name, metadata only.
    let mut watched = None;
    for _ in 0..100 {
        watched = server
            .calls()
            .into_iter()
            .find(|c| c.method == "GET" && c.path == "/api/v1/namespaces/hpc/secrets");
        if watched.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let watched = watched.expect("a watch of the blocking Secret");
    assert!(
        watched
            .query
            .contains("fieldSelector=metadata.name%3Dflux-sample-curve"),
        "{}",
        watched.query
    );
    assert_eq!(ctx.blockers.len(), 1);

    // Reconciled again with the refusal in its status: no second Event, no status write.
    let mut again = mc.clone();
    let written = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("a status write");
    again.status = Some(serde_json::from_value(written.body["status"].clone()).expect("status"));
    let before = server.calls().len();
    run(&ctx, again).await.expect("refused again");
    let repeated: Vec<String> = server.calls()[before..]
        .iter()
        .filter(|c| c.path.ends_with("/events") || c.path.ends_with("/status"))
        .map(Call::short)
        .collect();
    assert!(repeated.is_empty(), "{repeated:?}");
}

/// An object in the caches (labelled as the hub's by someone) that no MiniCluster
/// controls is found before anything is written: the pass writes no object at all.
#[tokio::test]
async fn a_cached_object_not_controlled_by_the_minicluster_stops_the_pass_before_any_write() {
    let (client, server) = ApiServer::start(ok_responder());
    let (ctx, mut writers) = context(client);
    let other_minicluster = json!([{"apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster", "name": "flux-sample", "uid": "an-earlier-uid", "controller": true}]);
    let mut cm = someone_elses(
        "configmaps",
        "flux-sample-flux-config",
        json!({"app.kubernetes.io/managed-by": "flux-hub"}),
    );
    cm["metadata"]["ownerReferences"] = other_minicluster;
    writers
        .config_maps
        .apply_watcher_event(&watcher::Event::Apply(watched::<ConfigMap, ConfigMap>(cm)));
    run(&ctx, minicluster(SPEC)).await.expect("refused");
    let calls = server.calls();
    let writes: Vec<String> = calls
        .iter()
        .filter(|c| !c.path.ends_with("/events") && !c.path.ends_with("/status"))
        .filter(|c| c.method != "GET")
        .map(Call::short)
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
    let event = calls
        .iter()
        .find(|c| c.path.ends_with("/events"))
        .expect("Event");
    assert!(
        event.body["note"]
            .as_str()
            .expect("note")
            .contains("ConfigMap hpc/flux-sample-flux-config (controlled by another MiniCluster hpc/flux-sample (uid an-earlier-uid))"),
        "{}",
        event.body["note"]
    );
}
