//! Real Flux on the testbed from what the control planes wrote: two bursts in two spoke
//! clusters and the root forming one instance, and a wrong certificate or lead port keeping
//! burst brokers out.

use std::time::Duration;

use anyhow::{Result, bail, ensure};
use flux_shared::api::MiniCluster;
use flux_shared::curve::CurveCert;
use flux_shared::layout::{BROKER_TOML_KEY, CURVE_KEY};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use serde_json::json;

use crate::support;
use crate::support::dataplane::{self, FluxRun, overlay_full, overlay_up, overlay_wait, run_name};
use crate::support::{Federation, Probe, TestEnv, secs, yaml};

use super::burst_fixture::*;
use super::burst_steps::*;
use super::spoke_objects::*;

/// Two bursts of 3 in two spoke clusters (one `flux-spoke run` each, `SPOKE_KUBECONFIG`
/// and `SPOKE2_KUBECONFIG`) next to a root of 2: 8 brokers in one flat instance, run with
/// real Flux from what the hub and both spokes wrote. Each burst's objects appear in its
/// own spoke's cluster only. The first burst starts before the root's lead broker (its
/// brokers wait for it), a job for all 8 hosts is submitted while the second burst does
/// not run yet and waits, the second burst starts, and the job runs on every root and
/// burst host. On the testbed only (`FLUX_E2E_TESTBED`).
#[tokio::test]
#[ignore = "needs three clusters and the testbed: KUBECONFIG, SPOKE_KUBECONFIG, SPOKE2_KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn two_bursts_in_two_spoke_clusters_and_the_root_form_one_instance_of_eight_brokers() {
    support::run_federated_spokes(
        "burst-two",
        &[
            ("e2e-spoke", "SPOKE_KUBECONFIG"),
            ("e2e-spoke2", "SPOKE2_KUBECONFIG"),
        ],
        two_bursts,
    )
    .await;
}

/// The data plane refuses a burst that does not match its root: with the burst cluster's
/// objects read back and broken on purpose (a CURVE certificate other than the root's; a
/// lead port other than the NodePort), run next to the root's real objects, the burst
/// brokers never join the lead broker's overlay: with the wrong certificate they hang in
/// `join`, with the wrong port the entrypoint says the lead is not reachable. The same
/// burst objects unbroken then join at once (the control). On the testbed only
/// (`FLUX_E2E_TESTBED`); the hub cannot see either mistake (its objects are right).
#[tokio::test]
#[ignore = "needs two clusters and the testbed: KUBECONFIG, SPOKE_KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn a_wrong_certificate_or_lead_port_keeps_burst_brokers_out() {
    support::run_federated("burst-mismatch", "e2e-spoke", mismatch).await;
}

async fn two_bursts(env: &TestEnv, fed: &Federation) -> Result<()> {
    const SIZE: i32 = 3;
    dataplane::testbed()?;
    let [early_spoke, late_spoke] = fed.spokes.as_slice() else {
        bail!("this test needs exactly two spokes, got {:?}", fed.spokes);
    };
    let suffix = env.ns.rsplit('-').next().unwrap_or("x");
    let (first, second) = (format!("early-{suffix}"), format!("late-{suffix}"));
    let mut doc = minicluster(&first, early_spoke, lead_address_override().as_deref());
    doc["spec"]["flux"]["bursting"]["clusters"] = json!([
        {"name": first, "size": SIZE, "cluster": early_spoke},
        {"name": second, "size": SIZE, "cluster": late_spoke},
    ]);
    env.apply_minicluster(&doc).await?;
    let mcs = env.api::<MiniCluster>();
    let lead = env
        .eventually(
            "status.leadBroker of the MiniCluster with two bursts",
            objects_deadline(),
            async || {
                let mc = mcs.get(NAME).await?;
                Ok(
                    match mc.status.as_ref().and_then(|s| s.lead_broker.clone()) {
                        Some(l) if !l.address.is_empty() && l.port > 0 => Probe::Done(l),
                        _ => Probe::Waiting(yaml(&mc.status)),
                    },
                )
            },
        )
        .await?;
    for (burst, spoke) in [(&first, early_spoke), (&second, late_spoke)] {
        wait_spoke_object::<Job>(env, spoke, burst).await?;
        wait_spoke_object::<ConfigMap>(env, spoke, &format!("{burst}-flux-config")).await?;
        wait_spoke_object::<Secret>(env, spoke, &format!("{burst}-curve")).await?;
        wait_spoke_object::<Service>(env, spoke, burst).await?;
    }
    // Each spoke applies its whole snapshot at once: with both bursts in place, a burst in
    // the other spoke's cluster too would be there by now.
    for (burst, other) in [(&first, late_spoke), (&second, early_spoke)] {
        let misplaced = spoke_objects_of(env, other, burst).await?;
        ensure!(
            misplaced.is_empty(),
            "burst {burst} also appeared in the cluster of spoke {other}: {misplaced:?}"
        );
    }
    eprintln!(
        "{}: burst {first} in the cluster of spoke {early_spoke}, {second} in that of {late_spoke}",
        env.ns
    );

    // The root's objects, with the lead broker held back 15 s so that the first burst
    // starts before it.
    let root_file = support::log_file(&format!("{}-root-objects.yaml", env.ns))?;
    dataplane::export_edited(&env.client, &env.ns, &root_file, |o| {
        dataplane::start_late(
            o,
            "e2e-lead-later",
            "[ \"$JOB_COMPLETION_INDEX\" != 0 ]",
            15,
        )
    })
    .await?;
    // Each burst's objects as its own cluster's API server has them.
    let early_file = support::log_file(&format!("{}-early-objects.yaml", env.ns))?;
    dataplane::export(&env.spoke_client_of(early_spoke), &env.ns, &early_file).await?;
    let late_file = support::log_file(&format!("{}-late-objects.yaml", env.ns))?;
    dataplane::export(&env.spoke_client_of(late_spoke), &env.ns, &late_file).await?;
    let burst_args = |job: &str| {
        vec![
            "--timeout".to_string(),
            "240".to_string(),
            "--attach".to_string(),
            lead.address.clone(),
            "--job".to_string(),
            job.to_string(),
        ]
    };
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
    let mut early = FluxRun::start(
        &run_name(&env.ns, "early"),
        &[&early_file],
        &burst_args(&first),
    )
    .await?;
    early
        .wait_for_output(&format!("{first}-0: started main container"), secs(60))
        .await?;
    ensure!(
        !root
            .output()
            .contains(&format!("{NAME}-0: started main container")),
        "the lead broker started before the first burst; the test needs the burst first:\n{}",
        root.output()
    );
    eprintln!("{}: burst {first} started before the lead broker", env.ns);

    let lead_pod = format!("{NAME}-0");
    let hosts = |burst: &str| {
        (0..SIZE)
            .map(|i| format!("{burst}-{i}"))
            .collect::<Vec<_>>()
    };
    let mut up: Vec<String> = (0..ROOT_SIZE).map(|i| format!("{NAME}-{i}")).collect();
    up.extend(hosts(&first));
    let took = overlay_wait(&root, &lead_pod, NAME, &up, Some(&early), overlay_up).await?;
    eprintln!(
        "{}: the root and the early burst are one instance {took:?} after it started",
        env.ns
    );
    let submit = "flux submit -N 8 hostname";
    let jobid = root.flux_submit(&lead_pod, NAME, "-N 8 hostname").await?;
    let state = root
        .flux_exec(
            &lead_pod,
            NAME,
            &format!("flux jobs -no '{{state}}' {jobid}"),
        )
        .await?;
    ensure!(
        state.trim() == "SCHED",
        "job {jobid} needs the second burst's hosts, so it must wait (SCHED); it is {state:?}"
    );

    let late = FluxRun::start(
        &run_name(&env.ns, "late"),
        &[&late_file],
        &burst_args(&second),
    )
    .await?;
    let mut all = up.clone();
    all.extend(hosts(&second));
    let joined = overlay_wait(&root, &lead_pod, NAME, &all, Some(&late), overlay_full).await?;
    eprintln!(
        "{}: all 8 brokers online {joined:?} after the second burst started",
        env.ns
    );
    let out = root
        .flux_exec(&lead_pod, NAME, &format!("flux job attach {jobid}"))
        .await?;
    let missing: Vec<&String> = all
        .iter()
        .filter(|h| !out.lines().any(|l| l == h.as_str()))
        .collect();
    ensure!(
        missing.is_empty(),
        "job {jobid} (`{submit}`) did not run on {missing:?}:\n{out}"
    );
    eprintln!("{}: job {jobid} ran on {}", env.ns, all.join(", "));
    root.flux_exec(&lead_pod, NAME, "flux shutdown --quiet")
        .await?;
    root.finish(secs(120))
        .await?
        .all_succeeded(&dataplane::indexed(NAME, ROOT_SIZE))?;
    early
        .finish(secs(120))
        .await?
        .all_succeeded(&hosts(&first))?;
    late.finish(secs(120))
        .await?
        .all_succeeded(&hosts(&second))?;
    Ok(())
}

async fn mismatch(env: &TestEnv, fed: &Federation) -> Result<()> {
    dataplane::testbed()?;
    let burst = dispatch(env, fed).await?;
    let root_file = support::log_file(&format!("{}-root-objects.yaml", env.ns))?;
    dataplane::export(&env.client, &env.ns, &root_file).await?;
    let spoke = env.spoke_client();
    let file = |what: &str| support::log_file(&format!("{}-burst-{what}-objects.yaml", env.ns));
    let (good, wrong_cert, wrong_port) = (file("good")?, file("wrong-cert")?, file("wrong-port")?);
    dataplane::export(&spoke, &env.ns, &good).await?;
    let secret = format!("{}-curve", burst.name);
    let other_cert = CurveCert::generate("not-the-root").to_zcert();
    dataplane::export_edited(&spoke, &env.ns, &wrong_cert, |o| {
        if o["kind"] == "Secret" && o["metadata"]["name"] == secret.as_str() {
            o["data"][CURVE_KEY] =
                serde_json::to_value(k8s_openapi::ByteString(other_cert.clone().into_bytes()))?;
        }
        Ok(())
    })
    .await?;
    let config = format!("{}-flux-config", burst.name);
    let (lead, port) = (&burst.lead_address, burst.lead_port);
    dataplane::export_edited(&spoke, &env.ns, &wrong_port, |o| {
        // Everywhere the burst's config names the lead endpoint: broker.toml and the
        // entrypoint's wait for the lead.
        if o["kind"] == "ConfigMap" && o["metadata"]["name"] == config.as_str() {
            let toml = o["data"][BROKER_TOML_KEY].as_str().unwrap_or_default();
            let right = format!("tcp://{lead}:{port}");
            ensure!(toml.contains(&right), "no {right} in broker.toml:\n{toml}");
            if let Some(data) = o["data"].as_object_mut() {
                for value in data.values_mut() {
                    let text = value.as_str().unwrap_or_default();
                    *value = json!(
                        text.replace(&right, &format!("tcp://{lead}:{}", port + 1))
                            .replace(
                                &format!("lead-probe {lead} {port}"),
                                &format!("lead-probe {lead} {}", port + 1)
                            )
                    );
                }
            }
        }
        Ok(())
    })
    .await?;

    let mut root = FluxRun::start(
        &run_name(&env.ns, "root"),
        &[&root_file],
        &[
            "--timeout".into(),
            "300".into(),
            "--nodeport-ip".into(),
            lead.clone(),
            "--serve-nodeport".into(),
        ],
    )
    .await?;
    root.wait_for_output("NodePort emulation", secs(60)).await?;
    let attach = |timeout: &str| {
        vec![
            "--timeout".to_string(),
            timeout.to_string(),
            "--attach".to_string(),
            lead.clone(),
        ]
    };
    let lead_pod = format!("{NAME}-0");
    let burst_hosts: Vec<String> = (0..BURST_SIZE)
        .map(|i| format!("{}-{i}", burst.name))
        .collect();
    let first = format!("{}-0", burst.name);

    // Both broken bursts at once; the wrong port needs the entrypoint's full wait for the
    // lead (60 s) before it says so.
    let cert_run =
        FluxRun::start(&run_name(&env.ns, "cert"), &[&wrong_cert], &attach("120")).await?;
    let port_run =
        FluxRun::start(&run_name(&env.ns, "port"), &[&wrong_port], &attach("120")).await?;
    let started = std::time::Instant::now();
    let said = format!(
        "tcp://{lead}:{} is not reachable yet; starting anyway",
        port + 1
    );
    let mut port_log = String::new();
    while started.elapsed() < secs(100) {
        port_log = port_run.log(&first, NAME).unwrap_or_default();
        if port_log.contains(&said) {
            break;
        }
        let overlay = root
            .flux_exec(&lead_pod, NAME, "flux overlay status --no-pretty")
            .await
            .unwrap_or_default();
        ensure!(
            !burst_hosts.iter().any(|h| overlay
                .lines()
                .any(|l| l.contains(&format!("{h}:")) && !l.contains("offline"))),
            "a burst broker with a wrong certificate or lead port joined the lead broker:\n{overlay}"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    ensure!(
        port_log.contains(&said),
        "the burst broker with the wrong lead port never said {said:?}:\n{port_log}"
    );
    let cert_log = cert_run.log(&first, NAME)?;
    ensure!(
        cert_log.contains("starting Flux") && !cert_log.contains("parent-ready"),
        "the burst broker with the wrong certificate must have started Flux and never reached its parent:\n{cert_log}"
    );
    eprintln!(
        "{}: neither broken burst joined in {:?}; the wrong port was reported by the entrypoint",
        env.ns,
        started.elapsed()
    );
    drop(cert_run);
    drop(port_run);

    // The control: the objects as the spoke wrote them join at once.
    let good_run = FluxRun::start(&run_name(&env.ns, "good"), &[&good], &attach("120")).await?;
    let mut all = vec![lead_pod.clone(), format!("{NAME}-1")];
    all.extend(burst_hosts.iter().cloned());
    let joined = overlay_wait(&root, &lead_pod, NAME, &all, Some(&good_run), overlay_full).await?;
    eprintln!("{}: the unbroken burst joined in {joined:?}", env.ns);
    root.flux_exec(&lead_pod, NAME, "flux shutdown --quiet")
        .await?;
    root.finish(secs(120)).await?;
    good_run.finish(secs(120)).await?;
    Ok(())
}
