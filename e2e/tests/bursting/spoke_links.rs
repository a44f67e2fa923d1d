//! A spoke's link to the hub: a hub without certificates opens its federation port once
//! they appear; a burst for a spoke that never joined says so and does not hold deletion.

use std::time::Duration;

use anyhow::{Result, ensure};
use flux_shared::api::MiniCluster;
use kube::api::DeleteParams;
use serde_json::json;

use crate::support;
use crate::support::{Federation, Probe, TestEnv, secs, yaml};

use super::burst_fixture::*;

/// Single cluster first: a hub whose certificate files do not exist yet (no Secret, a
/// single-cluster install) runs, with its federation port closed; once the files appear
/// (the Secret created by `flux-hub init --hub-dns/--hub-ip`), the port opens without a
/// restart and the spoke connects.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG, SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn a_hub_without_certificates_opens_its_federation_port_once_they_appear() {
    support::run_federated("certs-later", "e2e-spoke", certificates_later).await;
}

/// A setup mistake stays cheap: a burst whose `cluster` names no spoke that joined (a
/// typo) shows Unreachable, saying that no spoke of that name has connected and which
/// spokes have; deleting the MiniCluster then does not wait for that spoke.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn a_burst_for_a_spoke_that_never_joined_says_so_and_does_not_hold_deletion() {
    support::run_federated("burst-typo", "e2e-spoke", typo).await;
}

async fn certificates_later(env: &TestEnv, fed: &Federation) -> Result<()> {
    let later = support::log_file(&format!("{}-certs-later", env.ns))?;
    let _ = std::fs::remove_dir_all(&later);
    let args: Vec<String> = env
        .hub_args()
        .into_iter()
        .map(|a| {
            match std::path::Path::new(&a)
                .file_name()
                .and_then(|f| f.to_str())
            {
                Some(f @ ("ca.crt" | "hub.crt" | "hub.key")) if a.starts_with('/') => {
                    later.join(f).display().to_string()
                }
                _ => a,
            }
        })
        .collect();
    ensure!(
        args.iter()
            .filter(|a| a.starts_with(&*later.to_string_lossy()))
            .count()
            == 3,
        "the hub's --ca, --cert and --key now name missing files: {args:?}"
    );
    env.stop_hub();
    env.set_hub_args(args);
    env.start_hub().await?;
    let grpc = fed.hub_url().trim_start_matches("https://").to_string();
    env.holds_for(
        "the federation port closed without certificates",
        Duration::from_secs(3),
        async || {
            Ok(tokio::net::TcpStream::connect(&grpc)
                .await
                .is_ok()
                .then(|| "the port accepts connections".to_string()))
        },
    )
    .await?;
    ensure!(
        env.hub_log_tail(50)
            .contains("no federation certificates yet"),
        "the hub says why its federation port is closed"
    );
    std::fs::create_dir_all(&later)?;
    for f in ["ca.crt", "hub.crt", "hub.key"] {
        std::fs::copy(fed.certs.join(f), later.join(f))?;
    }
    env.eventually(
        "the spoke connected through the port opened late",
        secs(60),
        async || {
            let status = fed.hub_status(&env.ns).await;
            Ok(match status {
                Ok(s)
                    if s["spokes"]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|x| x["connected"] == true)) =>
                {
                    Probe::Done(())
                }
                other => Probe::Waiting(format!("{other:?}")),
            })
        },
    )
    .await?;
    Ok(())
}

async fn typo(env: &TestEnv, fed: &Federation) -> Result<()> {
    let burst = burst_name(&env.ns);
    let mut doc = minicluster(&burst, "e2e-spoek", lead_address_override().as_deref());
    doc["spec"]["flux"]["bursting"]["clusters"][0]["cluster"] = json!("e2e-spoek");
    env.apply_minicluster(&doc).await?;
    let mcs = env.api::<MiniCluster>();
    let message = env
        .eventually(
            "the burst Unreachable, saying no spoke of that name connected",
            secs(90),
            async || {
                let mc = mcs.get(NAME).await?;
                let b = mc.status.as_ref().and_then(|s| s.bursts.first().cloned());
                Ok(match b {
                    Some(b) if b.phase == "Unreachable" => {
                        Probe::Done(b.message.unwrap_or_default())
                    }
                    _ => Probe::Waiting(yaml(&mc.status)),
                })
            },
        )
        .await?;
    ensure!(
        message.contains("no spoke named e2e-spoek has connected to this hub")
            && message.contains(&format!("connected spokes: {}", fed.spoke())),
        "the status names the missing spoke and the connected ones: {message}"
    );
    let deleted = std::time::Instant::now();
    mcs.delete(NAME, &DeleteParams::background()).await?;
    env.eventually("the MiniCluster gone", secs(60), async || {
        Ok(match mcs.get_opt(NAME).await? {
            None => Probe::Done(()),
            Some(mc) => Probe::Waiting(yaml(&mc.status)),
        })
    })
    .await?;
    ensure!(
        deleted.elapsed() < secs(10),
        "nothing can be waiting at a spoke that never came: deletion took {:?}",
        deleted.elapsed()
    );
    eprintln!("{}: {message}; deleted in {:?}", env.ns, deleted.elapsed());
    Ok(())
}
