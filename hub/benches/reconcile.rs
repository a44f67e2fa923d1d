//! Reconcile cost against kube's mock API server: API requests per MiniCluster created
//! (target <= 6) and CPU time per reconcile, for a create and for a no-op pass (the
//! steady state, which must make no requests). Run with `cargo bench -p flux-hub`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use flux_hub::controller::context::Context;
use flux_hub::controller::reconcile;
use flux_hub::controller::watch::stores::Stores;
use flux_hub::ops::metrics::Metrics;
use flux_shared::api::MiniCluster;
use http::{Request, Response};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector;
use kube::runtime::watcher;
use serde_json::Value;

const SPEC: &str = r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {name: bench, namespace: hpc, uid: mc-uid, generation: 1}
spec:
  size: 4
  containers: [{image: "rockylinux:9", command: hostname}]
"#;

/// CPU time of this process (user + system), from /proc.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: u64 = fields.get(11).and_then(|u| u.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse().ok()).unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (mock, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let requests = Arc::new(AtomicUsize::new(0));
        let applied: Arc<std::sync::Mutex<Vec<Value>>> = Arc::default();
        let (count, keep) = (requests.clone(), applied.clone());
        tokio::spawn(async move {
            // What was written, by object path: a read (the hub reads an object it created
            // before its first apply) gets it back, as an API server would answer.
            let mut stored: std::collections::HashMap<String, Value> = Default::default();
            while let Some((request, send)) = handle.next_request().await {
                count.fetch_add(1, Ordering::Relaxed);
                let path = request.uri().path().to_string();
                let method = request.method().clone();
                let body: Value = serde_json::from_slice(&request.into_body().collect_bytes().await.expect("body")).unwrap_or(Value::Null);
                let reply = if path.ends_with("/status") {
                    let mut mc = serde_yaml_ng::from_str::<Value>(SPEC).expect("spec");
                    mc["status"] = body["status"].clone();
                    mc
                } else if method == http::Method::GET {
                    match stored.get(&path) {
                        Some(object) => object.clone(),
                        None => {
                            let missing = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404});
                            let mut response = Response::new(Body::from(serde_json::to_vec(&missing).expect("json")));
                            *response.status_mut() = http::StatusCode::NOT_FOUND;
                            send.send_response(response);
                            continue;
                        }
                    }
                } else {
                    if body.get("metadata").is_some() && !path.contains("/events") {
                        keep.lock().expect("lock").push(body.clone());
                        let name = body["metadata"]["name"].as_str().unwrap_or_default();
                        let object_path = if method == http::Method::POST { format!("{path}/{name}") } else { path.clone() };
                        stored.insert(object_path, body.clone());
                    }
                    body
                };
                send.send_response(Response::new(Body::from(serde_json::to_vec(&reply).expect("json"))));
            }
        });
        let client = kube::Client::new(mock, "default");
        let (jobs, mut jw) = reflector::store::<Job>();
        let (secrets, mut sw) = reflector::store::<Secret>();
        let (config_maps, mut cw) = reflector::store::<ConfigMap>();
        let (services, mut vw) = reflector::store::<Service>();
        let (broker_pods, mut bw) = flux_hub::controller::watch::broker_pods::store();
        let (pods, mut pw) = reflector::store();
        bw.apply_watcher_event(&watcher::Event::InitDone);
        pw.apply_watcher_event(&watcher::Event::InitDone);
        jw.apply_watcher_event(&watcher::Event::InitDone);
        sw.apply_watcher_event(&watcher::Event::InitDone);
        cw.apply_watcher_event(&watcher::Event::InitDone);
        vw.apply_watcher_event(&watcher::Event::InitDone);
        let recorder = Recorder::new(client.clone(), Reporter { controller: "flux-hub".into(), instance: None });
        let ctx = Arc::new(Context::new(client, Stores { jobs, secrets, config_maps, services, broker_pods, pods, echoes: Arc::default() }, recorder, Arc::new(Metrics::new())));
        let mc: MiniCluster = serde_yaml_ng::from_str(SPEC).expect("spec");

        // Create from nothing, many times (fresh names so every pass creates).
        let n = 300;
        let cpu = cpu_time();
        let wall = Instant::now();
        for i in 0..n {
            let mut fresh = mc.clone();
            fresh.metadata.name = Some(format!("bench-{i}"));
            reconcile::reconcile(Arc::new(fresh), ctx.clone()).await.expect("reconcile");
        }
        let create_cpu = (cpu_time() - cpu) / n;
        let create_wall = wall.elapsed() / n;
        let per_mc = requests.load(Ordering::Relaxed) as f64 / f64::from(n);
        println!("create: {per_mc:.1} API requests per MiniCluster, {create_wall:?} wall / {create_cpu:?} CPU per reconcile (including the in-process mock server)");

        // Steady state: caches hold what was applied; the status is what was written.
        for obj in applied.lock().expect("lock").drain(..) {
            match obj["kind"].as_str() {
                Some("Job") => jw.apply_watcher_event(&watcher::Event::Apply(serde_json::from_value(obj).expect("job"))),
                Some("Secret") => sw.apply_watcher_event(&watcher::Event::Apply(serde_json::from_value(obj).expect("secret"))),
                Some("ConfigMap") => cw.apply_watcher_event(&watcher::Event::Apply(serde_json::from_value(obj).expect("cm"))),
                Some("Service") => vw.apply_watcher_event(&watcher::Event::Apply(serde_json::from_value(obj).expect("svc"))),
                _ => {}
            }
        }
        let mut steady = mc.clone();
        steady.metadata.name = Some("bench-0".into());
        reconcile::reconcile(Arc::new(steady.clone()), ctx.clone()).await.expect("reconcile");
        let before = requests.load(Ordering::Relaxed);
        let n = 2000;
        let cpu = cpu_time();
        let wall = Instant::now();
        // The status the previous pass computed makes this a true no-op.
        let status = flux_hub::controller::status::compute(
            &steady,
            Some(4),
            ctx.stores.jobs.get(&kube::runtime::reflector::ObjectRef::new("bench-0").within("hpc")).as_deref(),
            None,
            &(ctx.now)(),
        );
        steady.status = Some(status);
        let steady = Arc::new(steady);
        for _ in 0..n {
            reconcile::reconcile(steady.clone(), ctx.clone()).await.expect("reconcile");
        }
        let idle = requests.load(Ordering::Relaxed) - before;
        println!(
            "no-op: {idle} API requests in {n} reconciles, {:?} wall / {:?} CPU per reconcile",
            wall.elapsed() / n,
            (cpu_time() - cpu) / n
        );
    });
}
