//! The autoscaler: a burst grown for a job that waits (the queue reporter asked with the
//! burst's certificate), and nothing changed when the reporter refuses.

use std::sync::{Arc, Mutex};

use kube::runtime::watcher;
use serde_json::{Value, json};

use super::fixtures::*;
use super::mock_api::*;

const AUTOSCALED: &str = r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {name: bursty, namespace: hpc, uid: mc-uid, generation: 3, resourceVersion: "5"}
spec:
  size: 2
  containers: [{image: "rockylinux:9"}]
  flux:
    bursting:
      leadAddress: 192.0.2.1
      autoscale: {scaleUpAfterSeconds: 30}
      clusters: [{name: a, size: 0, maxSize: 4}]
status:
  maximumSize: 2
  burstLayout: [{name: a, maxSize: 4}]
"#;

/// The hub's Secret cache holds `bursty-curve` with the certificate text `CERT`.
fn cache_curve_cert(writers: &mut Writers) {
    writers.secrets.apply_watcher_event(&watcher::Event::Apply(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "bursty-curve", "namespace": "hpc",
                         "ownerReferences": [{"apiVersion": "flux-framework.org/v1alpha2",
                                              "kind": "MiniCluster", "name": "bursty",
                                              "uid": "mc-uid", "controller": true}]},
            "data": {"curve.cert": "Q0VSVA=="},
        }))
        .expect("secret"),
    ));
}

/// A queue reporter on 127.0.0.1 that answers `queue` to the token of `cert`, and 401
/// to anything else; the requests' Authorization headers are recorded.
async fn fake_reporter(cert: &str, queue: Value) -> (String, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("addr").to_string();
    let token = flux_hub::autoscale::queue::token(cert);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&request).to_string();
            let auth = text
                .lines()
                .find_map(|l| l.strip_prefix("Authorization: "))
                .unwrap_or_default()
                .to_string();
            recorded.lock().expect("seen").push(auth.clone());
            let (status, body) = if auth == format!("Bearer {token}") {
                ("200 OK", queue.to_string())
            } else {
                (
                    "401 Unauthorized",
                    "{\"error\": \"a bearer token is needed\"}".to_string(),
                )
            };
            let answer = format!(
                "HTTP/1.0 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    (address, seen)
}

#[tokio::test]
async fn the_autoscaler_grows_a_burst_for_a_job_that_waits_and_says_why() {
    let mc = minicluster(AUTOSCALED);
    let (client, api) = ApiServer::start(holding(serde_json::to_value(&mc).expect("json")));
    let (ctx, mut writers) = context(client);
    cache_curve_cert(&mut writers);
    // Root bursty-0/1 busy; a job for 4 nodes has waited 100 s: burst a grows by 2.
    let queue = json!({
        "version": 1, "now": 1000.0,
        "hosts": [
            {"host": "bursty-0", "rank": 0, "online": true, "drained": false, "allocated": true},
            {"host": "bursty-1", "rank": 1, "online": true, "drained": false, "allocated": true},
            {"host": "a-0", "rank": 2, "online": false, "drained": false, "allocated": false},
        ],
        "pending": [{"id": 42, "nodes": 4, "submitted": 900.0}],
    });
    let (address, seen) = fake_reporter("CERT", queue).await;
    let mut memory = flux_hub::controller::autoscaler::Tracked::default();
    let reporter = |_: &flux_shared::plan::Plan| address.clone();
    flux_hub::controller::autoscaler::poll(&ctx, &mc, &mut memory, &reporter).await;

    assert_eq!(
        seen.lock().expect("seen").as_slice(),
        [format!(
            "Bearer {}",
            flux_hub::autoscale::queue::token("CERT")
        )],
        "the reporter is read with the token of the instance's CURVE certificate"
    );
    let calls = api.calls();
    assert_permitted(&calls);
    let patch = calls
        .iter()
        .find(|c| c.method == "PATCH")
        .unwrap_or_else(|| panic!("no size patch: {calls:#?}"));
    assert!(
        patch.query.contains("fieldManager=flux-hub-autoscaler"),
        "{}",
        patch.query
    );
    assert_eq!(
        patch.body,
        json!([
            {"op": "replace", "path": "/metadata/resourceVersion", "value": "5"},
            {"op": "add", "path": "/spec/flux/bursting/clusters/0/size", "value": 2},
        ])
    );
    let event = calls
        .iter()
        .find(|c| c.path.contains("/events"))
        .expect("an Event");
    assert_eq!(event.body["reason"], "BurstScaledUp");
    assert_eq!(
        event.body["note"],
        "burst a: size 0 -> 2: job 42 has waited 100s for 4 nodes; the instance has 2"
    );
    let metrics = ctx.metrics.encode();
    assert!(
        metrics.contains("flux_hub_autoscale_decisions_total{outcome=\"grow\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "flux_hub_autoscale_burst_changes_total{direction=\"up\",reason=\"jobs_waiting\"} 1"
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_autoscaler_changes_nothing_when_the_reporter_refuses_it() {
    let mc = minicluster(AUTOSCALED);
    let (client, api) = ApiServer::start(holding(serde_json::to_value(&mc).expect("json")));
    let (ctx, mut writers) = context(client);
    cache_curve_cert(&mut writers);
    // A reporter of another instance (another certificate): 401, nothing is decided.
    let (address, _) = fake_reporter("OTHER", json!({})).await;
    let mut memory = flux_hub::controller::autoscaler::Tracked::default();
    let reporter = |_: &flux_shared::plan::Plan| address.clone();
    flux_hub::controller::autoscaler::poll(&ctx, &mc, &mut memory, &reporter).await;
    assert!(
        api.calls().iter().all(|c| c.method == "GET"),
        "{:#?}",
        api.calls()
    );
    assert!(
        ctx.metrics
            .encode()
            .contains("flux_hub_autoscale_decisions_total{outcome=\"unreachable\"} 1")
    );
}
