//! Steps the scenarios share: dispatching a burst and following it into the burst cluster,
//! its status and `flux-hub status`, the spoke's sync, waiting for a burst or its phase.

use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use flux_shared::api::MiniCluster;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use kube::api::Api;
use serde_json::json;

use crate::support::{Federation, Probe, TestEnv, yaml};

use super::burst_checks::*;
use super::burst_fixture::*;
use super::spoke_objects::*;

/// The first burst of [`NAME`] once `check` holds for it (phase, reason, admitted size).
pub(crate) async fn wait_burst(
    env: &TestEnv,
    what: &str,
    check: impl Fn(&flux_shared::api::BurstStatus) -> bool,
) -> Result<flux_shared::api::BurstStatus> {
    let mcs = env.api::<MiniCluster>();
    env.eventually(what, objects_deadline(), async || {
        let mc = mcs.get(NAME).await?;
        Ok(
            match mc.status.as_ref().and_then(|s| s.bursts.first().cloned()) {
                Some(b) if check(&b) => Probe::Done(b),
                _ => Probe::Waiting(yaml(&mc.status)),
            },
        )
    })
    .await
}

/// Waits until `status.bursts[0].phase` is `phase`; the burst's phase and message.
pub(crate) async fn wait_burst_phase(
    env: &TestEnv,
    phase: &str,
    timeout: Duration,
) -> Result<(String, String)> {
    let mcs = env.api::<MiniCluster>();
    env.eventually(
        &format!("status.bursts[0].phase of {NAME} to be {phase}"),
        timeout,
        async || {
            let mc = mcs.get(NAME).await?;
            let burst = mc.status.as_ref().and_then(|s| s.bursts.first().cloned());
            Ok(match burst {
                Some(b) if b.phase == phase => {
                    Probe::Done((b.phase, b.message.unwrap_or_default()))
                }
                _ => Probe::Waiting(yaml(&mc.status)),
            })
        },
    )
    .await
}

/// Applies the MiniCluster and follows its burst into the burst cluster: the root Job and
/// lead Service, the lead endpoint in the status, the spoke's namespace, Job, ConfigMap,
/// Secret and Service with their key fields, the burst in the status and in
/// `flux-hub status`.
pub(crate) async fn dispatch(env: &TestEnv, fed: &Federation) -> Result<Burst> {
    let burst = burst_name(&env.ns);
    let lead_override = lead_address_override();
    let doc = minicluster(&burst, fed.spoke(), lead_override.as_deref());
    env.apply_minicluster(&doc)
        .await
        .context("applying the bursting MiniCluster")?;
    eprintln!(
        "{}: MiniCluster {NAME} with burst {burst} on spoke {}",
        env.ns,
        fed.spoke()
    );

    // Root cluster: the Job and the lead broker's NodePort Service.
    let jobs = env.api::<Job>();
    env.eventually(
        &format!("the root Job {NAME}"),
        objects_deadline(),
        async || {
            Ok(match jobs.get_opt(NAME).await? {
                Some(job) => Probe::Done(job),
                None => Probe::Waiting(status_of(env).await),
            })
        },
    )
    .await?;
    let services = env.api::<Service>();
    let lead_name = format!("{NAME}-lead");
    let node_port = env
        .eventually(
            &format!("the NodePort Service {lead_name} with its node port"),
            objects_deadline(),
            async || {
                let Some(svc) = services.get_opt(&lead_name).await? else {
                    return Ok(Probe::Waiting(format!("no Service {lead_name}")));
                };
                let spec = svc.spec.clone().unwrap_or_default();
                let port = spec
                    .ports
                    .unwrap_or_default()
                    .first()
                    .and_then(|p| p.node_port);
                Ok(match port {
                    Some(port) if spec.type_.as_deref() == Some("NodePort") && port > 0 => {
                        Probe::Done(port)
                    }
                    _ => Probe::Waiting(yaml(&svc)),
                })
            },
        )
        .await?;

    // The lead endpoint bursts connect to.
    let mcs = env.api::<MiniCluster>();
    let (lead_address, lead_port) = env
        .eventually(
            &format!(
                "status.leadBroker of {NAME} (address and port {node_port}); without FLUX_E2E_LEAD_ADDRESS the hub needs the lead pod scheduled on a node with an address"
            ),
            objects_deadline(),
            async || {
                let mc = mcs.get(NAME).await?;
                let lead = mc.status.as_ref().and_then(|s| s.lead_broker.clone());
                Ok(match lead {
                    Some(l) if !l.address.is_empty() && l.port == node_port => {
                        Probe::Done((l.address, l.port))
                    }
                    _ => Probe::Waiting(format!(
                        "status:\n{}root pods:\n{}",
                        yaml(&mc.status),
                        root_pods(env).await
                    )),
                })
            },
        )
        .await?;
    if let Some(expected) = &lead_override {
        ensure!(
            &lead_address == expected,
            "status.leadBroker.address is {lead_address}, but spec.flux.bursting.leadAddress is {expected}"
        );
    }
    eprintln!("{}: lead broker at {lead_address}:{lead_port}", env.ns);

    // Burst cluster: the namespace, then the Job, ConfigMap, Secret and Service.
    let namespaces: Api<Namespace> = Api::all(env.spoke_client());
    env.eventually(
        &format!(
            "namespace {} in the burst cluster (created by the spoke)",
            env.ns
        ),
        objects_deadline(),
        async || {
            Ok(match namespaces.get_opt(&env.ns).await? {
                Some(_) => Probe::Done(()),
                None => Probe::Waiting(status_of(env).await),
            })
        },
    )
    .await?;
    let spoke_jobs = env.spoke_api::<Job>();
    let job = spoke_job(
        env,
        &spoke_jobs,
        &burst,
        &format!("the burst Job {burst} in the burst cluster"),
    )
    .await?;
    check_burst_job(&job, &env.ns, &burst)?;

    let config_name = format!("{burst}-flux-config");
    let secret_name = format!("{burst}-curve");
    let burst_config = wait_spoke_object::<ConfigMap>(env, fed.spoke(), &config_name).await?;
    let root_config = env
        .api::<ConfigMap>()
        .get(&format!("{NAME}-flux-config"))
        .await?;
    check_burst_config(&burst_config, &root_config, &lead_address, lead_port)?;
    let burst_secret = wait_spoke_object::<Secret>(env, fed.spoke(), &secret_name).await?;
    let root_secret = env.api::<Secret>().get(&format!("{NAME}-curve")).await?;
    ensure!(
        secret_cert(&burst_secret)? == secret_cert(&root_secret)?,
        "Secret {secret_name} in the burst cluster must hold the root's CURVE certificate (Secret {NAME}-curve): brokers with different certificates cannot connect"
    );
    let burst_service = wait_spoke_object::<Service>(env, fed.spoke(), &burst).await?;
    ensure!(
        burst_service
            .spec
            .as_ref()
            .and_then(|s| s.cluster_ip.as_deref())
            == Some("None"),
        "Service {burst} in the burst cluster must be headless:\n{}",
        yaml(&burst_service)
    );

    burst_status(env, fed, &burst).await?;

    let objects = vec![
        spoke_object("Job", &job),
        spoke_object("ConfigMap", &burst_config),
        spoke_object("Secret", &burst_secret),
        spoke_object("Service", &burst_service),
    ];
    Ok(Burst {
        name: burst,
        objects,
        lead_address,
        lead_port,
    })
}

/// The burst in `status.bursts` (cluster = the spoke, phase Dispatched or Running) and in
/// `flux-hub status -o json` (its spoke connected).
pub(crate) async fn burst_status(env: &TestEnv, fed: &Federation, burst: &str) -> Result<()> {
    let mcs = env.api::<MiniCluster>();
    let phase = env
        .eventually(
            &format!(
                "status.bursts[0] of {NAME}: name {burst}, cluster {}, phase Dispatched or Running",
                fed.spoke()
            ),
            objects_deadline(),
            async || {
                let mc = mcs.get(NAME).await?;
                let bursts = mc
                    .status
                    .as_ref()
                    .map(|s| s.bursts.clone())
                    .unwrap_or_default();
                Ok(match bursts.first() {
                    Some(b)
                        if b.name == burst
                            && b.cluster == fed.spoke()
                            && matches!(b.phase.as_str(), "Dispatched" | "Running") =>
                    {
                        Probe::Done(b.phase.clone())
                    }
                    _ => Probe::Waiting(yaml(&mc.status)),
                })
            },
        )
        .await?;
    eprintln!("{}: burst {burst} is {phase}", env.ns);

    let view = env
        .eventually(
            &format!(
                "flux-hub status to list burst {burst} of {NAME} on spoke {} (connected)",
                fed.spoke()
            ),
            objects_deadline(),
            async || {
                let status = fed.hub_status(&env.ns).await?;
                let listed = status["miniClusters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|m| m["namespace"] == env.ns.as_str() && m["name"] == NAME)
                    .flat_map(|m| m["bursts"].as_array().cloned().unwrap_or_default())
                    .any(|b| {
                        b["name"] == burst
                            && b["spoke"] == fed.spoke()
                            && b["spokeConnected"] == true
                    });
                let spoke_connected = status["spokes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|s| s["name"] == fed.spoke() && s["connected"] == true);
                Ok(if listed && spoke_connected {
                    Probe::Done(status)
                } else {
                    Probe::Waiting(serde_json::to_string_pretty(&status)?)
                })
            },
        )
        .await?;
    let mc = view["miniClusters"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == NAME)
        .cloned()
        .unwrap_or_default();
    let status_lead = mcs
        .get(NAME)
        .await?
        .status
        .and_then(|s| s.lead_broker)
        .map(|l| json!({"address": l.address, "port": l.port}));
    ensure!(
        status_lead.is_none() || mc["leadEndpoint"] == status_lead.clone().unwrap_or_default(),
        "flux-hub status shows lead endpoint {} but the MiniCluster's status.leadBroker is {:?}",
        mc["leadEndpoint"],
        status_lead
    );
    Ok(())
}

/// Unix time in milliseconds (the hub runs on this machine: same clock).
pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Waits until `flux-hub status` shows the spoke connected and up to date (it
/// acknowledged the latest snapshot the hub sent it) and reporting on `burst` since
/// `since` (Unix milliseconds): so a spoke (re)started at `since` has applied the
/// snapshot, not just opened its stream.
pub(crate) async fn spoke_synced(
    env: &TestEnv,
    fed: &Federation,
    burst: &str,
    since: i64,
) -> Result<()> {
    env.eventually(
        &format!(
            "spoke {} to be connected, to acknowledge the hub's latest snapshot and to report on burst {burst} again",
            fed.spoke()
        ),
        objects_deadline(),
        async || {
            let status = fed.hub_status(&env.ns).await?;
            let spoke = status["spokes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|s| s["name"] == fed.spoke())
                .cloned()
                .unwrap_or_default();
            let synced = spoke["connected"] == true
                && spoke["currentVersion"].as_u64().is_some_and(|v| v > 0)
                && spoke["acknowledgedVersion"] == spoke["currentVersion"];
            let reported = status["miniClusters"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|m| m["bursts"].as_array().cloned().unwrap_or_default())
                .any(|b| {
                    b["name"] == burst
                        && b["lastReportUnixMillis"].as_i64().is_some_and(|t| t >= since)
                });
            Ok(if synced && reported {
                Probe::Done(())
            } else {
                Probe::Waiting(serde_json::to_string_pretty(&status)?)
            })
        },
    )
    .await
}
