//! Brokers joining across the clusters: in the broker pods (`kubectl exec`), or in real Flux
//! booted on the testbed from the objects both controllers wrote (root and burst runs).

use anyhow::{Context as _, Result, bail, ensure};
use flux_shared::api::MiniCluster;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt as _;
use kube::api::ListParams;

use crate::support;
use crate::support::dataplane::{
    self, FluxRun, hollow_nodes, overlay_full, overlay_up, overlay_wait, run_name,
};
use crate::support::{Probe, TestEnv, pod_ran, pod_summary, secs, yaml};

use super::burst_fixture::*;
use super::spoke_objects::*;

/// The lead broker's endpoint once the hub has published it in the status.
pub(crate) async fn lead_endpoint(env: &TestEnv) -> Result<flux_shared::api::LeadBrokerStatus> {
    let mcs = env.api::<MiniCluster>();
    env.eventually("status.leadBroker", objects_deadline(), async || {
        let mc = mcs.get(NAME).await?;
        Ok(
            match mc.status.as_ref().and_then(|s| s.lead_broker.clone()) {
                Some(l) if !l.address.is_empty() && l.port > 0 => Probe::Done(l),
                _ => Probe::Waiting(yaml(&mc.status)),
            },
        )
    })
    .await
}

/// The root's objects, as the API server has them, run with real Flux (serving the lead
/// broker's NodePort at `lead`), until the root brokers are up.
pub(crate) async fn start_root(
    env: &TestEnv,
    lead: &flux_shared::api::LeadBrokerStatus,
) -> Result<FluxRun> {
    let root_file = support::log_file(&format!("{}-root-objects.yaml", env.ns))?;
    dataplane::export(&env.client, &env.ns, &root_file).await?;
    let mut root = FluxRun::start(
        &run_name(&env.ns, "root"),
        &[&root_file],
        &[
            "--timeout".into(),
            "240".into(),
            "--nodeport-ip".into(),
            lead.address.clone(),
            "--serve-nodeport".into(),
        ],
    )
    .await?;
    root.wait_for_output("NodePort emulation", secs(60)).await?;
    let root_hosts = dataplane::indexed(NAME, ROOT_SIZE);
    overlay_wait(
        &root,
        &format!("{NAME}-0"),
        NAME,
        &root_hosts,
        None,
        overlay_up,
    )
    .await?;
    Ok(root)
}

/// The burst's objects, as the spoke's cluster has them, run with real Flux attached to
/// the root run's NodePort at `lead`.
pub(crate) async fn start_burst(
    env: &TestEnv,
    lead: &flux_shared::api::LeadBrokerStatus,
) -> Result<FluxRun> {
    let burst_file = support::log_file(&format!("{}-burst-objects.yaml", env.ns))?;
    dataplane::export(&env.spoke_client(), &env.ns, &burst_file).await?;
    FluxRun::start(
        &run_name(&env.ns, "burst"),
        &[&burst_file],
        &[
            "--timeout".into(),
            "240".into(),
            "--attach".into(),
            lead.address.clone(),
        ],
    )
    .await
}

/// Pod level: when the lead broker and every burst broker run, the burst reports its
/// brokers ready and (with kubectl) the lead broker's overlay shows the burst ranks online.
pub(crate) async fn brokers_join(env: &TestEnv, burst: &Burst) -> Result<()> {
    let root_job = env.api::<Job>().get(NAME).await?;
    let burst_job = env.spoke_api::<Job>().get(&burst.name).await?;
    let burst_selector = job_selector(&burst_job)?;
    let spoke_pods = env.spoke_api::<Pod>();
    let running = env
        .poll(pods_deadline(), async || {
            let root = env.job_pods(&root_job).await?;
            let lead = root.iter().find(|p| {
                p.labels()
                    .get("batch.kubernetes.io/job-completion-index")
                    .map(String::as_str)
                    == Some("0")
                    && pod_ran(p)
            });
            let bursts = spoke_pods
                .list(&ListParams::default().labels(&burst_selector))
                .await?
                .items;
            let all_burst = bursts.len() == BURST_SIZE as usize && bursts.iter().all(pod_ran);
            Ok(match lead {
                Some(lead) if all_burst => Probe::Done(lead.name_any()),
                _ => Probe::Waiting(format!(
                    "root pods:\n{}burst pods:\n{}",
                    pod_summary(&root),
                    pod_summary(&bursts)
                )),
            })
        })
        .await?;
    let lead_pod = match running {
        Ok(pod) => pod,
        Err(pods) => bail!(
            "the lead and burst broker pods did not all reach Running within {:?}; pods:\n{pods}",
            pods_deadline()
        ),
    };

    let mcs = env.api::<MiniCluster>();
    let joined = env
        .poll(secs(180), async || {
            let mc = mcs.get(NAME).await?;
            let status = mc.status.clone().unwrap_or_default();
            let b = status.bursts.first().cloned().unwrap_or_default();
            // `kubectl get`'s Bursts column: running / declared.
            let running = status
                .bursts
                .iter()
                .filter(|b| b.phase == "Running")
                .count();
            let column = format!("{running}/{}", status.bursts.len());
            Ok(
                if b.brokers_ready == BURST_SIZE
                    && b.phase == "Running"
                    && status.bursts_running.as_deref() == Some(column.as_str())
                {
                    Probe::Done(())
                } else {
                    Probe::Waiting(yaml(&mc.status))
                },
            )
        })
        .await?;
    if let Err(last) = joined {
        let burst_pods = spoke_pods
            .list(&ListParams::default().labels(&burst_selector))
            .await?
            .items;
        bail!(
            "the burst's pods run but the burst never reported {BURST_SIZE} brokers ready and phase Running; last status:\n{last}burst pods:\n{}",
            pod_report(&spoke_pods, &burst_pods).await
        );
    }
    eprintln!(
        "{}: burst {} reports {BURST_SIZE} brokers ready",
        env.ns, burst.name
    );

    // The lead broker's own view: every burst rank online in its overlay. Hollow nodes
    // run no process: there the evidence comes from real Flux run from the same objects.
    if hollow_nodes(&env.client).await? || hollow_nodes(&env.spoke_client()).await? {
        return brokers_join_in_flux(env, burst).await;
    }
    let kubectl_works = tokio::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .await
        .is_ok_and(|o| o.status.success());
    ensure!(
        kubectl_works,
        "kubectl is not on PATH: the overlay check (flux overlay status in the lead broker's pod) needs it"
    );
    let hosts: Vec<String> = (0..BURST_SIZE)
        .map(|i| format!("{}-{i}", burst.name))
        .collect();
    let overlay = env
        .poll(secs(180), async || {
            let text = overlay_status(env, &lead_pod).await?;
            Ok(if overlay_full(&text, &hosts) {
                Probe::Done(text)
            } else {
                Probe::Waiting(text)
            })
        })
        .await?;
    match overlay {
        Ok(text) => {
            eprintln!(
                "{}: flux overlay status on the lead broker:\n{text}",
                env.ns
            );
            Ok(())
        }
        Err(last) => {
            let lead = env.api::<Pod>().get(&lead_pod).await?;
            bail!(
                "the burst brokers {} never came online in the lead broker's overlay; last `flux overlay status`:\n{last}\nlead pod:\n{}",
                hosts.join(", "),
                env.pod_report(&[lead]).await
            )
        }
    }
}

/// `flux overlay status` inside the lead broker's container (kubectl exec, KUBECONFIG).
/// The data plane of a burst with real Flux: the root cluster's objects and the burst
/// cluster's objects, read back from both API servers, run by two `run-rendered.sh` runs
/// joined by the lead broker's NodePort (the root run serves it on the node address the
/// hub wrote into the burst's broker.toml). A job that needs every root and burst host is
/// submitted while only the root runs and waits; the burst starts, its brokers come online
/// in the lead broker's overlay, the job runs on every host, and `flux shutdown` ends the
/// instance with every pod of both runs completed.
pub(crate) async fn brokers_join_in_flux(env: &TestEnv, burst: &Burst) -> Result<()> {
    let root_file = support::log_file(&format!("{}-root-objects.yaml", env.ns))?;
    let burst_file = support::log_file(&format!("{}-burst-objects.yaml", env.ns))?;
    dataplane::export(&env.client, &env.ns, &root_file).await?;
    dataplane::export(&env.spoke_client(), &env.ns, &burst_file).await?;
    let keep_running = vec![
        "--timeout".to_string(),
        "240".to_string(),
        "--nodeport-ip".to_string(),
        burst.lead_address.clone(),
        "--serve-nodeport".to_string(),
    ];
    let mut root = FluxRun::start(&run_name(&env.ns, "root"), &[&root_file], &keep_running).await?;
    root.wait_for_output("NodePort emulation", secs(60)).await?;
    let served = format!("{}:{}", burst.lead_address, burst.lead_port);
    ensure!(
        root.output().contains(&served),
        "the root run does not serve the lead endpoint {served} of status.leadBroker:\n{}",
        root.output()
    );
    let attach = vec![
        "--timeout".to_string(),
        "240".to_string(),
        "--attach".to_string(),
        burst.lead_address.clone(),
    ];
    let lead = format!("{NAME}-0");
    let root_hosts: Vec<String> = (0..ROOT_SIZE).map(|i| format!("{NAME}-{i}")).collect();
    let mut hosts = root_hosts.clone();
    hosts.extend((0..BURST_SIZE).map(|i| format!("{}-{i}", burst.name)));

    // The root instance runs alone; a job that needs every host is submitted before the
    // burst exists, and waits.
    let up = overlay_wait(&root, &lead, NAME, &root_hosts, None, overlay_up).await?;
    eprintln!("{}: the root brokers are online after {up:?}", env.ns);
    let submit = format!("flux submit -N {} hostname", hosts.len());
    let jobid = root
        .flux_submit(&lead, NAME, &format!("-N {} hostname", hosts.len()))
        .await?;
    let state = root
        .flux_exec(&lead, NAME, &format!("flux jobs -no '{{state}}' {jobid}"))
        .await?;
    ensure!(
        state.trim() == "SCHED",
        "job {jobid} needs the burst's hosts, so it must wait (SCHED) until they join; it is {state:?}"
    );

    // The burst starts after the root's job began waiting: its brokers join the running
    // instance through the NodePort, and the job runs on every root and burst host.
    let burst_run = FluxRun::start(&run_name(&env.ns, "burst"), &[&burst_file], &attach).await?;
    let joined = overlay_wait(&root, &lead, NAME, &hosts, Some(&burst_run), overlay_full).await?;
    eprintln!(
        "{}: every root and burst broker online {joined:?} after the burst started",
        env.ns
    );
    let out = root
        .flux_exec(&lead, NAME, &format!("flux job attach {jobid}"))
        .await?;
    let missing: Vec<&String> = hosts
        .iter()
        .filter(|h| !out.lines().any(|l| l == h.as_str()))
        .collect();
    ensure!(
        missing.is_empty(),
        "job {jobid} (`{submit}`) did not run on {missing:?}:\n{out}"
    );
    eprintln!("{}: job {jobid} ran on {}", env.ns, hosts.join(", "));
    root.flux_exec(&lead, NAME, "flux shutdown --quiet")
        .await
        .context("flux shutdown on the lead broker")?;
    let root_outcome = root.finish(secs(120)).await?;
    root_outcome.all_succeeded(&root_hosts)?;
    let burst_outcome = burst_run.finish(secs(120)).await?;
    burst_outcome.all_succeeded(&dataplane::indexed(&burst.name, BURST_SIZE))?;
    Ok(())
}

pub(crate) async fn overlay_status(env: &TestEnv, pod: &str) -> Result<String> {
    let mut cmd = tokio::process::Command::new("kubectl");
    cmd.args(["--namespace", &env.ns, "exec", pod, "-c", NAME, "--"])
        .args([
            "bash",
            "-c",
            &dataplane::in_flux_env("flux overlay status --no-pretty"),
        ]);
    dataplane::output_of(cmd, &format!("kubectl exec {pod}")).await
}
