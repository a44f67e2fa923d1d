//! Specs and API-server answers more than one scenario uses: the bursting and candidate
//! MiniClusters, a deleted MiniCluster, refusals and what a pass wrote.

use std::sync::{Arc, Mutex};

use flux_shared::api::MiniCluster;
use http::StatusCode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::mock_api::*;

/// The Degraded condition of the first status write among `calls`.
pub(crate) fn degraded_in_status_write(calls: &[Call]) -> Value {
    let status = calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("a status write");
    status.body["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Degraded")
        .expect("Degraded")
        .clone()
}

pub(crate) const BURSTING: &str = r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {name: flux-sample, namespace: hpc, uid: mc-uid, generation: 1, resourceVersion: "7"}
spec:
  size: 2
  containers: [{image: "rockylinux:9", command: hostname}]
  flux:
    bursting:
      clusters: [{name: burst-gke, size: 3, cluster: gke}]
"#;

/// Answers like `echo`, plus a Node with addresses for `GET /api/v1/nodes/n1`.
pub(crate) fn with_node(call: &Call) -> (StatusCode, Value) {
    if call.method == "GET" && call.path == "/api/v1/nodes/n1" {
        return (
            StatusCode::OK,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                   "status": {"addresses": [
                       {"type": "InternalIP", "address": "10.0.0.4"},
                       {"type": "ExternalIP", "address": "203.0.113.4"}]}}),
        );
    }
    if call.path.ends_with("/miniclusters/flux-sample") && call.method == "PATCH" {
        let mut mc = serde_json::to_value(minicluster(BURSTING)).expect("json");
        mc["metadata"]["finalizers"] = call.body["metadata"]["finalizers"].clone();
        return (StatusCode::OK, mc);
    }
    echo(call)
}

pub(crate) fn deleted(seconds_ago: i64) -> MiniCluster {
    deleted_from(BURSTING, seconds_ago)
}

/// MiniCluster `yaml` with the hub's finalizer, deleted `seconds_ago`.
pub(crate) fn deleted_from(yaml: &str, seconds_ago: i64) -> MiniCluster {
    let mut mc = minicluster(yaml);
    mc.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    mc.metadata.deletion_timestamp = Some(Time(
        k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 - seconds_ago).expect("time"),
    ));
    mc
}

/// The body of a failed API call.
pub(crate) fn status_error(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": reason})
}

/// The API server holding `mc`: GET answers it, a JSON patch is applied to it for real.
pub(crate) fn holding(mc: Value) -> Responder {
    let stored = Arc::new(Mutex::new(mc));
    Arc::new(move |call: &Call| {
        let mut mc = stored.lock().expect("mc");
        match call.method.as_str() {
            "GET" if call.path.ends_with("/miniclusters/bursty") => (StatusCode::OK, mc.clone()),
            "PATCH" if call.path.ends_with("/miniclusters/bursty") => {
                let patch: json_patch::Patch =
                    serde_json::from_value(call.body.clone()).expect("a JSON patch");
                json_patch::patch(&mut mc, &patch).expect("applies");
                (StatusCode::OK, mc.clone())
            }
            _ => echo(call),
        }
    })
}

/// The API server's answer to the POST of a ConfigMap over its 1 MiB limit.
pub(crate) fn config_map_too_long(call: &Call) -> Option<(StatusCode, Value)> {
    (call.method == "POST" && call.path.ends_with("/configmaps")).then(|| {
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "message": "ConfigMap \"flux-sample-flux-config\" is invalid: []: Too long: may not be more than 1048576 bytes",
                   "reason": "Invalid", "code": 422}),
        )
    })
}

pub(crate) const CANDIDATES: &str = r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {name: flux-sample, namespace: hpc, uid: mc-uid, generation: 1, resourceVersion: "7"}
spec:
  size: 2
  containers: [{image: "rockylinux:9", command: hostname}]
  flux:
    bursting:
      clusters:
        - name: burst
          size: 3
          relay: true
          candidates: [{cluster: a}, {matchLabels: {tier: spot}}]
"#;

/// The last status the hub wrote, and the Events it posted, since call `from`.
pub(crate) fn written(server: &ApiServer, from: usize) -> (Value, Vec<Value>) {
    let calls = server.calls()[from..].to_vec();
    assert_permitted(&calls);
    let status = calls
        .iter()
        .rev()
        .find(|c| c.path.ends_with("/status"))
        .map(|c| c.body["status"].clone())
        .expect("a status write");
    let events = calls
        .iter()
        .filter(|c| c.path.contains("/events"))
        .map(|c| c.body.clone())
        .collect();
    (status, events)
}
