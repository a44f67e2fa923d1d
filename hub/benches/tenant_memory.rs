//! Memory that hostile tenants can make the hub and a spoke hold (issue: six MiniClusters
//! with 1.3 MB of scripts and 64 bursts each raised the hub past its 512 MiB limit).
//!
//! 20 MiniClusters at etcd's object size limit (a 1.4 MB `commands.script`) with the most
//! bursts the API accepts (64 each, over 4 spokes), every burst assigned: the hub's
//! registry holding them, and one spoke assembling its snapshot from the parts the hub
//! sends (each part encoded and decoded, as over gRPC). Measured twice in one run: with
//! the spec and R shared by a MiniCluster's bursts (as `assignment::build` and the spoke's
//! assembler do now), and with a copy per burst (as before). Live heap bytes are counted
//! by a counting allocator. Targets: hub below 128 MiB, spoke below 64 MiB. Run with
//! `cargo bench -p flux-hub --bench tenant_memory`.

use flux_hub::controller::federate::burst_infos;
use flux_hub::federation::registry::{McInfo, Registry};
use flux_hub::federation::served::Served;
use flux_shared::api::MiniCluster;
use flux_shared::federation::McKey;
use flux_shared::federation::assignment::{self, SpokeAssignment};
use flux_shared::federation::parts::{self, Assembler};
use flux_shared::federation::proto::Snapshot;
use flux_shared::plan::{Endpoint, Plan};
use prost::Message;
use prost::bytes::Bytes;

#[path = "support/counting.rs"]
mod counting;

use counting::live;

const TENANTS: usize = 20;
const BURSTS: usize = 64;
const SPOKES: usize = 4;
const SCRIPT_BYTES: usize = 1_400_000;

fn mib(bytes: usize) -> f64 {
    bytes as f64 / 1_048_576.0
}

fn minicluster(i: usize) -> MiniCluster {
    let clusters: Vec<String> = (0..BURSTS)
        .map(|b| {
            format!(
                "{{name: t{i}-b{b}, size: 1, cluster: spoke-{}}}",
                b % SPOKES
            )
        })
        .collect();
    let yaml = format!(
        r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {{name: mc-{i}, namespace: team-{i}, uid: uid-{i}, generation: 1}}
spec:
  size: 1
  containers: [{{image: ubuntu:noble, commands: {{script: "{script}"}}}}]
  flux:
    bursting:
      leadAddress: 203.0.113.10
      leadNodePort: 30093
      clusters: [{clusters}]
"#,
        script = "x".repeat(SCRIPT_BYTES),
        clusters = clusters.join(", "),
    );
    serde_yaml_ng::from_str(&yaml).expect("bench MiniCluster")
}

/// Each assignment's spec and R in a buffer of its own, as every burst carried them before.
fn copied(assignments: Vec<SpokeAssignment>) -> Vec<SpokeAssignment> {
    assignments
        .into_iter()
        .map(|mut a| {
            a.assignment.minicluster_spec_json =
                Bytes::copy_from_slice(&a.assignment.minicluster_spec_json);
            a.assignment.resource_set = Bytes::copy_from_slice(&a.assignment.resource_set);
            a
        })
        .collect()
}

/// The hub's registry with every tenant's bursts assigned, and the live heap it holds.
fn hub(plans: &[Plan], shared: bool) -> (std::sync::Arc<Registry>, usize) {
    let lead = Endpoint {
        address: "203.0.113.10".into(),
        port: 30093,
    };
    let before = live();
    let registry = Registry::new();
    registry.set_primed();
    for plan in plans {
        let built = assignment::build(plan, "cert", Some(&lead)).expect("assignments");
        let built = if shared { built } else { copied(built) };
        let bursts = burst_infos(plan);
        let key = McKey::new(&plan.namespace, &plan.name);
        registry.set(&key, McInfo::default(), bursts, built);
    }
    let held = live() - before;
    (registry, held)
}

/// What one spoke holds once it has assembled its snapshot from the hub's parts (each
/// decoded from its own buffer, as over gRPC); `share` as the assembler does now.
fn spoke(snapshot: Snapshot, share: bool) -> (Snapshot, usize) {
    let encoded: Vec<Vec<u8>> = parts::split(snapshot, parts::PART_BUDGET)
        .iter()
        .map(Message::encode_to_vec)
        .collect();
    let before = live();
    let mut assembler = Assembler::default();
    let mut whole = None;
    let mut received = Vec::new();
    for bytes in &encoded {
        let part = Snapshot::decode(Bytes::copy_from_slice(bytes)).expect("a part");
        if share {
            whole = assembler.push(part).expect("in order");
        } else {
            received.extend(part.assignments);
        }
    }
    let whole = whole.unwrap_or(Snapshot {
        assignments: received,
        ..Snapshot::default()
    });
    // The encoded parts stand for what the hub sent: not the spoke's.
    let held = live().saturating_sub(before);
    drop(encoded);
    (whole, held)
}

fn main() {
    let plans: Vec<Plan> = (0..TENANTS)
        .map(|i| Plan::new(&minicluster(i)).expect("the API accepts it"))
        .collect();
    let spec_bytes = serde_json::to_vec(&plans[0].spec).map_or(0, |s| s.len());
    println!(
        "{TENANTS} MiniClusters of {:.2} MiB spec with {BURSTS} bursts each over {SPOKES} spokes ({} assignments):",
        mib(spec_bytes),
        TENANTS * BURSTS
    );
    for shared in [false, true] {
        let (registry, hub_heap) = hub(&plans, shared);
        let (snapshot, spoke_heap) = spoke(registry.snapshot("spoke-0"), shared);
        println!(
            "  {:<28} hub registry {:>7.1} MiB (target < 128), spoke-0 snapshot ({} assignments) {:>7.1} MiB (target < 64)",
            if shared {
                "spec shared (now):"
            } else {
                "spec per burst (before):"
            },
            mib(hub_heap),
            snapshot.assignments.len(),
            mib(spoke_heap),
        );
        drop(snapshot);
        drop(registry);
    }
}
