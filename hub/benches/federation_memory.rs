//! Hub memory with 1,000 bursting MiniClusters (target <= 60 MiB): everything the hub
//! holds for them in steady state — the MiniCluster objects, the watch caches of the
//! objects it manages (ConfigMap, Secret, Services, Job of each root, and its 4 broker
//! pods as the Job controller creates them), reduced the way `flux-hub run` reduces them
//! (`controller::watch::cache::Compact`), and the federation registry with every burst
//! assignment (2 bursts per MiniCluster over 100 spokes), each spoke's current snapshot,
//! and a report per burst.
//!
//! Live heap bytes are counted exactly by a counting global allocator; the process RSS is
//! read from /proc for comparison. Run with `cargo bench -p flux-hub --bench
//! federation_memory`.

use flux_hub::controller::federate::burst_infos;
use flux_hub::controller::watch::cache::{self, Compact};
use flux_hub::federation::registry::{McInfo, Registry};
use flux_hub::federation::served::Served;
use flux_shared::api::MiniCluster;
use flux_shared::curve::CurveCert;
use flux_shared::federation::proto::{AssignmentStatus, BurstPhase, ReportRequest};
use flux_shared::federation::{McKey, assignment};
use flux_shared::plan::{Endpoint, Plan, Role};
use flux_shared::render::{self, Object};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::runtime::reflector;
use kube::runtime::watcher;

#[path = "support/counting.rs"]
mod counting;

use counting::live;

const MINICLUSTERS: usize = 1_000;
const SPOKES: usize = 100;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// What enters a watch cache: the object as the hub's watch reduces it.
fn cached<K: Compact + Clone>(mut object: K) -> watcher::Event<K> {
    object.compact();
    watcher::Event::Apply(object)
}

/// A broker pod as the Job controller creates it from the template, scheduled and
/// running (what the API server sends the hub's pod watch).
fn broker_pod(job: &Job, index: usize) -> Pod {
    let name = job.metadata.name.clone().unwrap_or_default();
    let template = job.spec.clone().map(|s| s.template).unwrap_or_default();
    let mut metadata = template.metadata.unwrap_or_default();
    metadata.name = Some(format!("{name}-{index}-abcde"));
    metadata.namespace = job.metadata.namespace.clone();
    metadata.annotations = Some(
        [(
            "batch.kubernetes.io/job-completion-index".to_string(),
            index.to_string(),
        )]
        .into(),
    );
    metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "batch/v1".into(),
            kind: "Job".into(),
            name: name.clone(),
            uid: format!("uid-job-{name}"),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
    ]);
    let mut spec = template.spec.unwrap_or_default();
    spec.node_name = Some(format!("node-{index}"));
    spec.hostname = Some(format!("{name}-{index}"));
    Pod {
        metadata,
        spec: Some(spec),
        status: Some(
            serde_json::from_value(serde_json::json!({
                "phase": "Running", "podIP": "10.0.0.1", "hostIP": "192.168.0.1",
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "flux", "ready": true, "restartCount": 0, "image": "x", "imageID": "x",
                                       "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]
            }))
            .expect("pod status"),
        ),
    }
}

fn minicluster(i: usize) -> MiniCluster {
    let yaml = format!(
        r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {{name: mc-{i}, namespace: team-{ns}, uid: uid-{i}, generation: 1}}
spec:
  size: 4
  containers: [{{image: "ghcr.io/converged-computing/metric-lammps:latest", command: "lmp -v x 2 -in in.reaxc.hns"}}]
  flux:
    bursting:
      clusters:
        - {{name: b{i}-a, size: 4, cluster: spoke-{a}}}
        - {{name: b{i}-b, size: 2, cluster: spoke-{b}}}
"#,
        ns = i % 20,
        a = i % SPOKES,
        b = (i + 1) % SPOKES,
    );
    serde_yaml_ng::from_str(&yaml).expect("bench MiniCluster")
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = rt.enter();
    let lead = Endpoint {
        address: "203.0.113.10".into(),
        port: 30093,
    };
    let heap_before = live();
    let rss_before = rss_kib();

    let (mcs, mut mc_writer) = reflector::store::<MiniCluster>();
    let (jobs, mut job_writer) = reflector::store::<Job>();
    let (cms, mut cm_writer) = reflector::store::<ConfigMap>();
    let (secrets, mut secret_writer) = reflector::store::<Secret>();
    let (services, mut svc_writer) = reflector::store::<Service>();
    let (pods, mut pod_writer) = reflector::store::<Pod>();
    let registry = Registry::new();
    registry.set_primed();
    // Each spoke holds a Watch stream (its snapshot receiver) as a connected spoke would.
    let subscriptions: Vec<_> = (0..SPOKES)
        .map(|s| {
            registry
                .clone()
                .subscribe(
                    &format!("spoke-{s}"),
                    "bench",
                    Default::default(),
                    Default::default(),
                )
                .expect("primed")
        })
        .collect();

    // Heap held by the watch caches of rendered objects (the rest is the MiniCluster
    // objects, the registry and the runtime).
    let mut cache_heap = 0usize;
    for i in 0..MINICLUSTERS {
        let mc = minicluster(i);
        let plan = Plan::new(&mc).expect("valid");
        let cert = CurveCert::generate(&plan.name).to_zcert();
        let before_cache = live();
        for object in render::render(&plan, &Role::Root, &cert).expect("root") {
            match object {
                Object::ConfigMap(o) => cm_writer.apply_watcher_event(&cached(o)),
                Object::Secret(o) => secret_writer.apply_watcher_event(&cached(o)),
                Object::Service(o) => svc_writer.apply_watcher_event(&cached(o)),
                Object::Job(o) => {
                    for index in 0..4 {
                        pod_writer.apply_watcher_event(&cached(broker_pod(&o, index)));
                    }
                    job_writer.apply_watcher_event(&cached(cache::stamp(&o)));
                }
                Object::Pod(_) => {}
            }
        }
        cache_heap += live() - before_cache;
        let bursts = burst_infos(&plan);
        let assignments = assignment::build(&plan, &cert, Some(&lead)).expect("assignments");
        let key = McKey::new(&plan.namespace, &plan.name);
        registry.set(
            &key,
            McInfo {
                uid: format!("uid-{i}"),
                generation: 1,
                phase: "Running".into(),
                size: 4,
                brokers_ready: 4,
                lead: Some(lead.clone()),
                created_unix_millis: 1_700_000_000_000,
                relay_to: None,
            },
            bursts.clone(),
            assignments,
        );
        for b in &bursts {
            registry.report(
                &b.spoke,
                ReportRequest {
                    room: None,
                    root_reach: None,
                    hub_epoch: registry.epoch().to_string(),
                    applied_version: 0,
                    statuses: vec![AssignmentStatus {
                        key: b.key.to_string(),
                        observed_version: 1,
                        phase: BurstPhase::Running as i32,
                        brokers_ready: b.size,
                        size: b.size,
                        ..Default::default()
                    }],
                    cluster_access: None,
                },
            );
        }
        mc_writer.apply_watcher_event(&watcher::Event::Apply(mc));
    }
    // The payload of every spoke's current snapshot (built on demand when sent).
    let snapshot_bytes: usize = (0..SPOKES)
        .map(|s| {
            registry
                .snapshot(&format!("spoke-{s}"))
                .assignments
                .iter()
                .map(|a| {
                    a.minicluster_spec_json.len()
                        + a.broker_toml.len()
                        + a.resource_set.len()
                        + a.curve_cert.len()
                })
                .sum::<usize>()
        })
        .sum();

    let heap = live().saturating_sub(heap_before);
    let rss = rss_kib().saturating_sub(rss_before);
    let (connected, assignments) = registry.counts();
    println!(
        "hub memory with {MINICLUSTERS} bursting MiniClusters ({} cached objects, {assignments} assignments over {connected} connected spokes, snapshots ~{:.1} MiB of payload):",
        mcs.len() + jobs.len() + cms.len() + secrets.len() + services.len() + pods.len(),
        snapshot_bytes as f64 / 1_048_576.0,
    );
    println!(
        "  live heap {:.1} MiB (target <= 60 MiB), of which {:.1} MiB watch caches of managed objects; RSS growth {:.1} MiB; RSS total {:.1} MiB",
        heap as f64 / 1_048_576.0,
        cache_heap as f64 / 1_048_576.0,
        rss as f64 / 1024.0,
        rss_kib() as f64 / 1024.0
    );
    drop(subscriptions);
}
