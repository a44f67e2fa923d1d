//! Propagation latency of the federation: from a MiniCluster change recorded in the hub's
//! registry (what the controller does after planning) to the spoke having applied it to its
//! cluster (the in-memory cluster; a real API server adds its own write latency), over
//! real gRPC with mutual TLS on loopback, with 1, 10 and 100 connected spokes.
//!
//! Two loads per spoke count: one change at a time (each to a different spoke, in turn),
//! and every MiniCluster changed at once (fan-out to every spoke). Target: p99 <= 100 ms
//! with 100 spokes. Run with `cargo bench -p flux-e2e --bench propagation`.

#[path = "../tests/in_process/mod.rs"]
mod in_process;

use std::time::{Duration, Instant};

use flux_hub::federation::registry::Registry;
use flux_spoke::testing::FakeCluster;
use in_process::{Hub, Pki, SpokeAgent, assign, minicluster, version_of};

const NS: &str = "bench";

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn run(spokes: usize, sequential_changes: usize, fanout_rounds: usize) {
    let names: Vec<String> = (0..spokes).map(|i| format!("s{i}")).collect();
    let pki = Pki::new(&names);
    let registry = Registry::new();
    registry.set_primed();
    let hub = Hub::start(&pki, registry.clone(), "127.0.0.1:0".parse().expect("addr")).await;
    let mc = |i: usize, generation: usize| {
        minicluster(
            NS,
            &format!("mc{i}"),
            &format!("ghcr.io/converged-computing/metric-lammps:v{generation}"),
            &[(&format!("b{i}"), &names[i], 2)],
        )
    };
    for i in 0..spokes {
        assign(&registry, &mc(i, 0));
    }
    let mut agents: Vec<SpokeAgent> = names
        .iter()
        .map(|n| SpokeAgent::start(&pki, n, &hub.uri(), FakeCluster::new()))
        .collect();
    for (agent, name) in agents.iter_mut().zip(&names) {
        agent
            .applied_version(registry.epoch(), version_of(&registry, name))
            .await;
    }

    let mut one_at_a_time = Vec::with_capacity(sequential_changes);
    for change in 0..sequential_changes {
        let i = change % spokes;
        let start = Instant::now();
        assign(&registry, &mc(i, change + 1));
        let version = version_of(&registry, &names[i]);
        agents[i].applied_version(registry.epoch(), version).await;
        one_at_a_time.push(start.elapsed());
    }

    let mut all_at_once = Vec::with_capacity(fanout_rounds * spokes);
    for round in 0..fanout_rounds {
        let generation = sequential_changes + 1 + round;
        let start = Instant::now();
        for i in 0..spokes {
            assign(&registry, &mc(i, generation));
        }
        let targets: Vec<u64> = names.iter().map(|n| version_of(&registry, n)).collect();
        let epoch = registry.epoch().to_string();
        let waits = agents.iter_mut().zip(targets).map(|(agent, version)| {
            let epoch = epoch.clone();
            async move {
                agent.applied_version(&epoch, version).await;
                start.elapsed()
            }
        });
        all_at_once.extend(futures::future::join_all(waits).await);
    }

    one_at_a_time.sort();
    all_at_once.sort();
    println!(
        "{spokes:>3} spokes: one change at a time p50 {:6.2} ms p99 {:6.2} ms ({} changes); every MiniCluster at once p50 {:6.2} ms p99 {:6.2} ms ({} applies)",
        ms(percentile(&one_at_a_time, 50.0)),
        ms(percentile(&one_at_a_time, 99.0)),
        one_at_a_time.len(),
        ms(percentile(&all_at_once, 50.0)),
        ms(percentile(&all_at_once, 99.0)),
        all_at_once.len(),
    );
    for agent in agents {
        agent.stop().await;
    }
    hub.stop().await;
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        run(1, 300, 100).await;
        run(10, 300, 30).await;
        run(100, 300, 10).await;
    });
}
