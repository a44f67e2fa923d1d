//! How [`KubeCluster`] finds a relayed burst's broker pods, whose addresses alone its relay
//! listener admits: against a mock API server, the Job's uid from the spoke's Job cache and
//! one pod list of the burst's namespace, by the burst's Job label.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flux_spoke::cluster::{Cluster, KubeCluster, Scope, allows};
use http::{Request, Response};
use kube::client::Body;
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(30);

fn pod(name: &str, owner_uid: &str, phase: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "hpc", "uid": format!("uid-{name}"),
            "labels": {"flux-framework.org/job": "burst-x"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "burst-x",
                "uid": owner_uid, "controller": true}]},
        "status": {"phase": phase, "podIP": ip, "podIPs": [{"ip": ip}]},
    })
}

/// A mock API server with the spoke's Job `hpc/burst-x` (uid `job-uid`) and pods of it
/// and of a Job of the same name that is gone; records every path and query.
fn api_server() -> (kube::Client, Arc<Mutex<Vec<String>>>) {
    let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        let mut watches = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            let path = request.uri().path().to_string();
            let query = request.uri().query().unwrap_or("").to_string();
            record.lock().unwrap().push(format!("{path}?{query}"));
            if query.contains("watch=true") {
                // Nothing changes: the watch stays open.
                watches.push(send);
                continue;
            }
            let body = if path == "/apis/batch/v1/jobs" {
                json!({"apiVersion": "batch/v1", "kind": "JobList",
                    "metadata": {"resourceVersion": "1"},
                    "items": [{"apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": "burst-x", "namespace": "hpc", "uid": "job-uid",
                            "resourceVersion": "1",
                            "labels": {"app.kubernetes.io/managed-by": "flux-spoke"}}}]})
            } else if path == "/api/v1/namespaces/hpc/pods" {
                json!({"apiVersion": "v1", "kind": "PodList",
                "metadata": {"resourceVersion": "1"},
                "items": [
                    pod("burst-x-0", "job-uid", "Running", "10.0.0.1"),
                    pod("burst-x-1", "job-uid", "Pending", "10.0.0.2"),
                    pod("burst-x-2", "job-uid", "Succeeded", "10.0.0.3"),
                    // Of the Job's predecessor, or forged by another owner.
                    pod("old-0", "gone-uid", "Running", "10.0.0.4"),
                ]})
            } else {
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "code": 404, "reason": "NotFound", "message": "not here"})
            };
            send.send_response(
                Response::builder()
                    .status(if body["kind"] == "Status" { 404 } else { 200 })
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            );
        }
    });
    (kube::Client::new(mock, "default"), seen)
}

#[tokio::test]
async fn a_bursts_broker_pods_are_those_its_job_controls_listed_by_its_label() {
    let (client, seen) = api_server();
    let cluster = KubeCluster::new(client, Scope::Cluster);
    // The Job cache has synced.
    let jobs = tokio::time::timeout(LIMIT, cluster.jobs())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(jobs.len(), 1);
    let addresses = cluster.broker_addresses("hpc", "burst-x").await.unwrap();
    let want: BTreeSet<IpAddr> = ["10.0.0.1", "10.0.0.2"]
        .iter()
        .map(|ip| ip.parse().unwrap())
        .collect();
    assert_eq!(addresses, want);
    let pods: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.contains("/pods"))
        .cloned()
        .collect();
    assert_eq!(
        pods,
        ["/api/v1/namespaces/hpc/pods?&labelSelector=flux-framework.org%2Fjob%3Dburst-x"],
        "one list of the burst's namespace, by its Job's label"
    );
    assert!(allows("", "pods", "list"), "a permission the spoke has");

    // A Job the cache does not hold: an error, and nothing listed.
    assert!(cluster.broker_addresses("hpc", "other").await.is_err());
    let scoped = KubeCluster::new(
        api_server().0,
        Scope::Namespaces(BTreeSet::from(["elsewhere".to_string()])),
    );
    assert!(
        scoped.broker_addresses("hpc", "burst-x").await.is_err(),
        "outside the spoke's namespaces"
    );
}
