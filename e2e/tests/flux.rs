//! Data-plane tests with real Flux: `flux-hub run` turns a MiniCluster into objects in the
//! cluster named by `KUBECONFIG`; the test reads them back from the API server and runs
//! them with the testbed's `run-rendered.sh` (real flux-core brokers in Linux-namespace
//! pods, see `support/dataplane.rs`), then asserts on the Flux job's output and on every
//! pod's exit.
//!
//! They need `KUBECONFIG`, `FLUX_E2E_TESTBED` and root, so they are ignored unless asked
//! for; `scripts/e2e.sh` runs them. See README.md.

mod support;

use std::time::Duration;

use anyhow::{Result, ensure};
use flux_shared::api::MiniCluster;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use support::dataplane::{
    FluxRun, Outcome, export_edited, indexed, overlay_full, overlay_up, overlay_wait, run_name,
    start_late,
};
use support::{FIELD_MANAGER, Probe, TestEnv, secs};

/// `run-rendered.sh --timeout` of a run that is expected to finish by itself.
const RUN_TIMEOUT: &str = "120";

/// Backstop on top of the run's own timeout.
fn run_deadline() -> Duration {
    secs(180)
}

// ---------------------------------------------------------------------------------------
// The tests.

/// `examples/hello-world.yaml`: four brokers form one instance, the command runs once under
/// Flux, and every pod (lead and workers) completes.
#[tokio::test]
#[ignore = "needs a cluster and the testbed: KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn hello_world_runs_under_real_flux() {
    support::run("flux-hello", true, async |env| {
        env.apply_example("hello-world.yaml").await?;
        let outcome = finish(env, "hello-world", "hw").await?;
        outcome.all_succeeded(&indexed("hello-world", 4))?;
        let lead = lead_log(&outcome, "hello-world", "hello-world")?;
        ensure!(
            lead.lines().any(|l| l == "hello world"),
            "the lead broker's log lacks the job's output `hello world`:\n{lead}"
        );
        Ok(())
    })
    .await;
}

/// `tasks` equal to `size`: the job gets one task on every broker, so every host name is
/// printed (the brokers' hosts, R and broker.toml agree).
#[tokio::test]
#[ignore = "needs a cluster and the testbed: KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn tasks_run_on_every_broker() {
    support::run("flux-tasks", true, async |env| {
        let doc = minicluster("tasks", json!({"size": 3, "tasks": 3}), "hostname");
        env.apply_minicluster(&doc).await?;
        let outcome = finish(env, "tasks", "tasks").await?;
        outcome.all_succeeded(&indexed("tasks", 3))?;
        let lead = lead_log(&outcome, "tasks", "tasks")?;
        for host in indexed("tasks", 3) {
            ensure!(
                lead.lines().any(|l| l == host),
                "no task ran on {host}; the lead broker's log:\n{lead}"
            );
        }
        Ok(())
    })
    .await;
}

/// `examples/batch.yaml`: every line of the command is its own job inside `flux batch`,
/// each writes its output under `logs`, and `commands.post` (run by every broker) prints
/// them where the batch ran.
#[tokio::test]
#[ignore = "needs a cluster and the testbed: KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn batch_jobs_run_and_post_runs_on_every_broker() {
    support::run("flux-batch", true, async |env| {
        env.apply_example("batch.yaml").await?;
        let outcome = finish(env, "batch", "batch").await?;
        outcome.all_succeeded(&indexed("batch", 2))?;
        let logs = [
            outcome.log("batch-0", "batch")?,
            outcome.log("batch-1", "batch")?,
        ]
        .join("\n");
        for n in 1..=3 {
            let line = format!("hello world {n}");
            ensure!(
                logs.lines().any(|l| l == line),
                "no broker printed `{line}` (the batch's job {} output):\n{logs}",
                n - 1
            );
        }
        Ok(())
    })
    .await;
}

/// `launcher: true`: the command is run as is in the instance and submits its own job,
/// here one that spans both brokers.
#[tokio::test]
#[ignore = "needs a cluster and the testbed: KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn launcher_command_submits_its_own_jobs() {
    support::run("flux-launcher", true, async |env| {
        let doc = minicluster(
            "launcher",
            json!({"size": 2, "launcher": true}),
            "flux run -N 2 hostname",
        );
        env.apply_minicluster(&doc).await?;
        let outcome = finish(env, "launcher", "launch").await?;
        outcome.all_succeeded(&indexed("launcher", 2))?;
        let lead = lead_log(&outcome, "launcher", "launcher")?;
        for host in indexed("launcher", 2) {
            ensure!(
                lead.lines().any(|l| l == host),
                "`flux run -N 2 hostname` printed no {host}; the lead broker's log:\n{lead}"
            );
        }
        Ok(())
    })
    .await;
}

/// `flux.completeWorkers`: a worker whose broker is disconnected (it exits with an error)
/// is not restarted; its pod completes successfully and says why.
#[tokio::test]
#[ignore = "needs a cluster and the testbed: KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn complete_workers_completes_a_disconnected_worker() {
    support::run("flux-complete", true, async |env| {
        let doc = minicluster(
            "complete",
            json!({"size": 3, "launcher": true, "flux": {"completeWorkers": true}}),
            "flux overlay disconnect 2",
        );
        env.apply_minicluster(&doc).await?;
        let outcome = finish(env, "complete", "complete").await?;
        outcome.all_succeeded(&indexed("complete", 3))?;
        let worker = outcome.log("complete-2", "complete")?;
        ensure!(
            worker.contains("completing (flux.completeWorkers)"),
            "the disconnected worker complete-2 did not complete through completeWorkers:\n{worker}"
        );
        let lead = lead_log(&outcome, "complete", "complete")?;
        ensure!(
            lead.contains("to disconnect child complete-2 (rank 2)"),
            "the lead broker did not disconnect rank 2:\n{lead}"
        );
        Ok(())
    })
    .await;
}

/// `examples/interactive.yaml`: the instance stays up with no command; from outside the
/// broker (`run-rendered.sh --exec`, like `kubectl exec`) `flux proxy` to its socket runs a
/// job on both brokers, and `flux shutdown` through the proxy ends it: every pod completes.
#[tokio::test]
#[ignore = "needs a cluster and the testbed: KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn interactive_instance_answers_flux_proxy() {
    support::run("flux-interactive", true, async |env| {
        env.apply_example("interactive.yaml").await?;
        let name = run_name(&env.ns, "inter");
        let mut run = env
            .run_flux("interactive", &name, &timeout_args())
            .await?;
        run.wait_for_output("interactive-0: started main container", secs(60))
            .await?;
        let hosts = indexed("interactive", 2);
        let mut last = String::new();
        let deadline = std::time::Instant::now() + secs(60);
        // The broker takes a moment to create its socket and see the worker online.
        while std::time::Instant::now() < deadline {
            match run
                .flux_exec(
                    "interactive-0",
                    "interactive",
                    "flux proxy \"$fluxsocket\" flux run -N 2 hostname",
                )
                .await
            {
                Ok(out) if hosts.iter().all(|h| out.lines().any(|l| l == h)) => {
                    last.clear();
                    break;
                }
                Ok(out) => last = out,
                Err(e) => last = format!("{e:#}"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        ensure!(
            last.is_empty(),
            "`flux proxy ... flux run -N 2 hostname` in the lead pod never printed {hosts:?}; last answer:\n{last}"
        );
        // The instance that shuts down closes the proxy's own connection, so `flux proxy`
        // may exit non-zero ("Lost connection to Flux") although the shutdown worked; what
        // proves it is that every broker then exits cleanly (below).
        if let Err(error) = run
            .flux_exec(
                "interactive-0",
                "interactive",
                "flux proxy \"$fluxsocket\" flux shutdown --quiet",
            )
            .await
        {
            eprintln!("{}: flux shutdown through flux proxy: {error:#}", env.ns);
        }
        let outcome = run.finish(run_deadline()).await?;
        outcome.all_succeeded(&hosts)
    })
    .await;
}

/// `examples/elasticity.yaml` (size 2, maxSize 6) scaled to 4 while it runs: the hub
/// resizes the Job in place; its new brokers (indices 2 and 3, whose pods a real Job
/// controller creates only after the scale: here their start is held back 20 s by an init
/// container the test adds) join the running instance, and a job submitted for 4 nodes
/// before they came waits for them, then runs on all four.
#[tokio::test]
#[ignore = "needs a cluster and the testbed: KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn elastic_brokers_added_by_a_scale_up_join_the_running_instance() {
    support::run("flux-elastic", true, async |env| {
        env.apply_example("elasticity.yaml").await?;
        env.wait_for_children("elastic").await?;
        env.api::<MiniCluster>()
            .patch(
                "elastic",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"size": 4}})),
            )
            .await?;
        let jobs = env.api::<Job>();
        env.eventually(
            "the hub to resize the Job to 4 brokers",
            secs(60),
            async || {
                let job = jobs.get("elastic").await?;
                let parallelism = job.spec.as_ref().and_then(|s| s.parallelism);
                Ok(if parallelism == Some(4) {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!("parallelism {parallelism:?}"))
                })
            },
        )
        .await?;

        let name = run_name(&env.ns, "elastic");
        let file = support::log_file(&format!("{name}-objects.yaml"))?;
        export_edited(&env.client, &env.ns, &file, |o| {
            start_late(
                o,
                "e2e-scaled-later",
                "[ \"$JOB_COMPLETION_INDEX\" -lt 2 ]",
                20,
            )
        })
        .await?;
        let run = FluxRun::start(&name, &[&file], &timeout_args()).await?;
        let first = indexed("elastic", 2);
        let all = indexed("elastic", 4);
        overlay_wait(&run, "elastic-0", "elastic", &first, None, overlay_up).await?;
        let overlay = run
            .flux_exec("elastic-0", "elastic", "flux overlay status --no-pretty")
            .await?;
        ensure!(
            overlay_up(&overlay, &first) && !overlay_up(&overlay, &all[2..]),
            "only the first two brokers may run before the new ones start:\n{overlay}"
        );
        let jobid = run
            .flux_submit("elastic-0", "elastic", "-N 4 hostname")
            .await?;
        let state = run
            .flux_exec(
                "elastic-0",
                "elastic",
                &format!("flux jobs -no '{{state}}' {jobid}"),
            )
            .await?;
        ensure!(
            state.trim() == "SCHED",
            "job {jobid} needs the new brokers, so it must wait (SCHED); it is {state:?}"
        );
        let joined = overlay_wait(&run, "elastic-0", "elastic", &all, None, overlay_up).await?;
        eprintln!("{}: the scaled-up brokers joined within {joined:?}", env.ns);
        let out = run
            .flux_exec("elastic-0", "elastic", &format!("flux job attach {jobid}"))
            .await?;
        for host in &all {
            ensure!(
                out.lines().any(|l| l == host),
                "job {jobid} did not run on {host}:\n{out}"
            );
        }
        run.flux_exec("elastic-0", "elastic", "flux shutdown --quiet")
            .await?;
        run.finish(run_deadline()).await?.all_succeeded(&all)
    })
    .await;
}

/// A leaving worker drains first (`flux.drainTimeoutSeconds`): the preStop hook the hub
/// wrote into the Job, run in a worker pod as the kubelet would, drains the node in Flux
/// and returns only once the job running there has finished (the job completes); with a
/// job that outlasts the timeout it gives up after the timeout and says so (exit 1). A
/// broker of a drained host that comes back (its pod re-created when the Job grows again;
/// here its broker restarted) takes the drain back, and a job on every node runs.
#[tokio::test]
#[ignore = "needs a cluster and the testbed: KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn a_leaving_worker_drains_and_waits_for_its_jobs() {
    support::run("flux-drain", true, async |env| {
        const NAME: &str = "drain";
        let mut doc = minicluster(
            NAME,
            json!({"size": 3, "interactive": true, "flux": {"drainTimeoutSeconds": 12}}),
            "",
        );
        doc["spec"]["containers"][0]
            .as_object_mut()
            .map(|c| c.remove("command"));
        env.apply_minicluster(&doc).await?;
        env.wait_for_children(NAME).await?;
        let job = env.api::<Job>().get(NAME).await?;
        let pod = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .cloned()
            .unwrap_or_default();
        ensure!(
            pod.termination_grace_period_seconds == Some(42),
            "terminationGracePeriodSeconds: the drain timeout and 30 s to stop, got {:?}",
            pod.termination_grace_period_seconds
        );
        // The broker's container, after the view container.
        let pre_stop: Vec<String> = pod
            .containers
            .last()
            .and_then(|c| c.lifecycle.as_ref())
            .and_then(|l| l.pre_stop.as_ref())
            .and_then(|h| h.exec.as_ref())
            .and_then(|e| e.command.clone())
            .unwrap_or_default();
        ensure!(
            !pre_stop.is_empty(),
            "no preStop hook on the broker container"
        );

        let name = run_name(&env.ns, "drain");
        let args = vec![
            "--timeout".to_string(),
            "300".into(),
            "--tail".into(),
            "60".into(),
        ];
        let run = env.run_flux(NAME, &name, &args).await?;
        let hosts = indexed(NAME, 3);
        overlay_wait(&run, "drain-0", NAME, &hosts, None, overlay_full).await?;
        let lead = async |script: String| run.flux_exec("drain-0", NAME, &script).await;
        let state = async |rank: u32| -> Result<String> {
            Ok(
                lead(format!("flux resource drain -i {rank} -no '{{state}}'"))
                    .await?
                    .trim()
                    .to_string(),
            )
        };

        // 1. A job on drain-2 outlives the start of the hook by ~6 s: the hook waits for it.
        let short = run
            .flux_submit("drain-0", NAME, "--requires=rank:2 sleep 8")
            .await?;
        lead(format!("flux job wait-event -t 30 {short} start")).await?;
        tokio::time::sleep(secs(2)).await;
        let started = std::time::Instant::now();
        let (code, out) = run.exec_argv("drain-2", NAME, &pre_stop, secs(60)).await?;
        let waited = started.elapsed();
        eprintln!(
            "{}: preStop on drain-2 exited {code:?} after {waited:?}: {out}",
            env.ns
        );
        ensure!(
            code == Some(0),
            "the hook must succeed once the job is done: {code:?} {out}"
        );
        ensure!(
            waited >= secs(4),
            "the hook returned after {waited:?}, before the job on its node could finish"
        );
        let result = lead(format!("flux jobs -no '{{result}}' {short}")).await?;
        ensure!(
            result.trim() == "COMPLETED",
            "the job on the leaving node must complete, not be killed: {result:?}"
        );
        ensure!(state(2).await? == "drained", "drain-2 must be drained");

        // 2. A job that outlasts the drain timeout: the hook gives up and says so.
        let long = run
            .flux_submit("drain-0", NAME, "--requires=rank:1 sleep 120")
            .await?;
        lead(format!("flux job wait-event -t 30 {long} start")).await?;
        let started = std::time::Instant::now();
        let (code, out) = run.exec_argv("drain-1", NAME, &pre_stop, secs(60)).await?;
        let waited = started.elapsed();
        eprintln!(
            "{}: preStop on drain-1 exited {code:?} after {waited:?}",
            env.ns
        );
        ensure!(
            code == Some(1)
                && out.contains("drain-1 still runs jobs after 12s; leaving anyway")
                && waited >= secs(11),
            "past the timeout the hook must give up and say so: {code:?} after {waited:?}: {out}"
        );
        lead(format!("flux cancel {long}")).await?;

        // 3. Their brokers die and start again (a broker killed outright is restarted by
        //    the entrypoint, as a re-created pod's would start): they take the drain back.
        for host in ["drain-1", "drain-2"] {
            // The broker names its process flux-broker-<rank>; the bracket keeps this shell out.
            run.flux_exec(host, NAME, "pkill -KILL -f '[f]lux-broker'")
                .await?;
        }
        let deadline = std::time::Instant::now() + secs(90);
        loop {
            let drained = lead("flux resource drain -no '{ranks} {state} {reason}'".into()).await?;
            if drained.trim().is_empty() {
                break;
            }
            ensure!(
                std::time::Instant::now() < deadline,
                "the restarted brokers never took their drain back:
{drained}"
            );
            tokio::time::sleep(secs(1)).await;
        }
        overlay_wait(&run, "drain-0", NAME, &hosts, None, overlay_full).await?;
        let out = lead("flux run -N 3 hostname".into()).await?;
        for host in &hosts {
            ensure!(
                out.lines().any(|l| l == host),
                "no job ran on {host}:
{out}"
            );
        }
        run.flux_exec("drain-0", NAME, "flux shutdown --quiet")
            .await?;
        let outcome = run.finish(run_deadline()).await?;
        ensure!(
            outcome.pods.get("drain-0").map(String::as_str) == Some("Succeeded"),
            "the lead broker must end cleanly: {:?}",
            outcome.pods
        );
        Ok(())
    })
    .await;
}

/// Bursting on demand: the lead broker of an autoscaled MiniCluster runs the queue
/// reporter the hub reads; with real Flux (the root's objects as the hub wrote them) it
/// refuses a request without the instance's token, and with it answers what `flux` itself
/// says: every host with its broker online or not and allocated or not, and the pending
/// job with the nodes it waits for.
#[tokio::test]
#[ignore = "needs a cluster and the testbed: KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn the_queue_reporter_answers_what_flux_says() {
    support::run("flux-reporter", true, async |env| {
        const NAME: &str = "demand";
        let mut doc = minicluster(
            NAME,
            json!({"size": 2, "interactive": true, "flux": {"bursting": {
                "leadAddress": "192.0.2.1",
                "autoscale": {"scaleUpAfterSeconds": 5},
                "clusters": [{"name": "grow", "size": 0, "maxSize": 2}],
            }}}),
            "",
        );
        doc["spec"]["containers"][0]
            .as_object_mut()
            .map(|c| c.remove("command"));
        env.apply_minicluster(&doc).await?;
        let name = run_name(&env.ns, "reporter");
        let args = vec!["--timeout".to_string(), "240".into(), "--tail".into(), "60".into()];
        let run = env.run_flux(NAME, &name, &args).await?;
        let root = indexed(NAME, 2);
        overlay_wait(&run, "demand-0", NAME, &root, None, overlay_up).await?;
        let busy = run
            .flux_submit("demand-0", NAME, "--requires=rank:1 sleep 60")
            .await?;
        run.flux_exec("demand-0", NAME, &format!("flux job wait-event -t 30 {busy} start"))
            .await?;
        let waiting = run.flux_submit("demand-0", NAME, "-N 4 hostname").await?;

        let curl = "curl -s -w '\\n%{http_code}' http://127.0.0.1:8051/v1/queue";
        let denied = run.flux_exec("demand-0", NAME, curl).await?;
        ensure!(
            denied.trim_end().ends_with("401"),
            "without the token the reporter must refuse: {denied}"
        );
        let token = "$(python3 -c 'import hashlib; print(hashlib.sha256(b\"flux-operator reporter\\0\" + open(\"/flux_operator_curve/curve.cert\", \"rb\").read()).hexdigest())')";
        let deadline = std::time::Instant::now() + secs(30);
        let queue: Value = loop {
            let out = run
                .flux_exec(
                    "demand-0",
                    NAME,
                    &format!("curl -sf -H \"Authorization: Bearer {token}\" http://127.0.0.1:8051/v1/queue"),
                )
                .await;
            match out.map(|o| serde_json::from_str::<Value>(o.trim())) {
                Ok(Ok(q)) => break q,
                other if std::time::Instant::now() > deadline => {
                    anyhow::bail!("the reporter never answered with a queue: {other:?}")
                }
                _ => tokio::time::sleep(secs(1)).await,
            }
        };
        eprintln!("{}: reporter answered {queue}", env.ns);

        // What flux itself says.
        let hosts: Vec<(String, bool, bool)> = queue["hosts"]
            .as_array()
            .map(|hs| {
                hs.iter()
                    .map(|h| {
                        (
                            h["host"].as_str().unwrap_or_default().to_string(),
                            h["online"] == true,
                            h["allocated"] == true,
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let listed: Vec<&str> = hosts.iter().map(|(h, _, _)| h.as_str()).collect();
        ensure!(
            listed == ["demand-0", "demand-1", "grow-0", "grow-1"],
            "every host of R in rank order: {listed:?}"
        );
        let online = run
            .flux_exec("demand-0", NAME, "flux resource status -s online -no '{nodelist}'")
            .await?;
        let allocated = run
            .flux_exec("demand-0", NAME, "flux resource list -s allocated -no '{nodelist}'")
            .await?;
        let expand = |hostlist: &str| -> Vec<String> {
            flux_shared::hostlist::expand(hostlist.trim()).unwrap_or_default()
        };
        for (host, up, busy_here) in &hosts {
            ensure!(
                *up == expand(&online).contains(host),
                "online of {host}: reporter {up}, flux {online:?}"
            );
            ensure!(
                *busy_here == expand(&allocated).contains(host),
                "allocated of {host}: reporter {busy_here}, flux {allocated:?}"
            );
        }
        let pending = run
            .flux_exec("demand-0", NAME, "flux jobs --filter=pending -no '{id.dec} {nnodes}'")
            .await?;
        let reported: Vec<String> = queue["pending"]
            .as_array()
            .map(|js| {
                js.iter()
                    .map(|j| format!("{} {}", j["id"], j["nodes"]))
                    .collect()
            })
            .unwrap_or_default();
        let flux_says: Vec<String> = pending.lines().map(|l| l.trim().to_string()).collect();
        ensure!(
            reported == flux_says,
            "pending jobs: reporter {reported:?}, flux {flux_says:?} (waiting job {waiting})"
        );
        run.flux_exec("demand-0", NAME, "flux shutdown --quiet").await?;
        run.finish(run_deadline()).await?.all_succeeded(&root)
    })
    .await;
}

/// `flux.brokerConfig`: the brokers run with the given config, not a generated one (its
/// distinctive `tbon.connect_timeout` is what `flux config get` answers), and the worker
/// joins through the config's own `default_connect`.
#[tokio::test]
#[ignore = "needs a cluster and the testbed: KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn custom_broker_config_is_what_flux_runs() {
    support::run("flux-config", true, async |env| {
        let config = format!(
            r#"[access]
allow-guest-user = true
allow-root-owner = true

[resource]
path = "/mnt/flux/config/etc/flux/system/R"
noverify = true

[bootstrap]
curve_cert = "/mnt/flux/config/curve/curve.cert"
default_port = 8050
default_bind = "tcp://eth0:%p"
default_connect = "tcp://%h.custom-config.{ns}.svc.cluster.local:%p"
hosts = [ {{ host = "custom-config-[0-1]" }} ]

[tbon]
connect_timeout = "17s"
"#,
            ns = env.ns
        );
        let doc = minicluster(
            "custom-config",
            json!({"size": 2, "flux": {"brokerConfig": config}}),
            "flux config get tbon.connect_timeout",
        );
        env.apply_minicluster(&doc).await?;
        let outcome = finish(env, "custom-config", "config").await?;
        outcome.all_succeeded(&indexed("custom-config", 2))?;
        let lead = lead_log(&outcome, "custom-config", "custom-config")?;
        ensure!(
            lead.lines().any(|l| l.trim_matches('"') == "17s"),
            "`flux config get tbon.connect_timeout` did not answer 17s:\n{lead}"
        );
        Ok(())
    })
    .await;
}

/// The volume kinds the testbed runs: a hostPath folder, a PVC shared by the brokers, a
/// Secret, a ConfigMap with `items`, and a memory-backed emptyDir. Each broker's
/// `commands.pre` writes its host name into the PVC; the job on the lead reads them all.
#[tokio::test]
#[ignore = "needs a cluster and the testbed: KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn volumes_are_mounted_where_the_spec_says() {
    support::run("flux-volumes", true, async |env| {
        let host_dir = std::env::temp_dir().join(format!("{}-hostpath", env.ns));
        std::fs::create_dir_all(&host_dir)?;
        std::fs::write(host_dir.join("marker"), "from the host\n")?;
        let params = PatchParams::apply(FIELD_MANAGER).force();
        env.api::<Secret>()
            .patch(
                "certs",
                &params,
                &Patch::Apply(json!({
                    "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "certs"},
                    "stringData": {"token": "secret token\n"},
                })),
            )
            .await?;
        env.api::<ConfigMap>()
            .patch(
                "app-config",
                &params,
                &Patch::Apply(json!({
                    "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config"},
                    "data": {"app.conf": "setting = 1\n", "ignored.conf": "not mounted\n"},
                })),
            )
            .await?;
        let mut doc = minicluster(
            "volumes",
            json!({"size": 2}),
            "cat /data/marker /etc/certs/token /etc/app/settings.conf /workflow/volumes-0 /workflow/volumes-1",
        );
        doc["spec"]["containers"][0]["commands"] =
            json!({"pre": "hostname > /workflow/$(hostname); mountpoint -q /dev/shm; test ! -e /etc/app/ignored.conf"});
        doc["spec"]["containers"][0]["volumes"] = json!({
            "host-data": {"path": "/data", "hostPath": host_dir.display().to_string()},
            "workflow": {"path": "/workflow", "claimName": "data"},
            "certs": {"path": "/etc/certs", "secretName": "certs", "readOnly": true},
            "app-config": {
                "path": "/etc/app",
                "configMapName": "app-config",
                "items": {"app.conf": "settings.conf"},
            },
            "shm": {"emptyDir": true, "emptyDirMedium": "memory"},
        });
        env.apply_minicluster(&doc).await?;
        let outcome = finish(env, "volumes", "volumes").await;
        let _ = std::fs::remove_dir_all(&host_dir);
        let outcome = outcome?;
        outcome.all_succeeded(&indexed("volumes", 2))?;
        let lead = lead_log(&outcome, "volumes", "volumes")?;
        for line in [
            "from the host",
            "secret token",
            "setting = 1",
            "volumes-0",
            "volumes-1",
        ] {
            ensure!(
                lead.lines().any(|l| l == line),
                "the job's output lacks `{line}`:\n{lead}"
            );
        }
        Ok(())
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// Steps.

/// A one-container MiniCluster named `name` with `spec` fields and `command`.
fn minicluster(name: &str, spec: Value, command: &str) -> Value {
    let mut doc = json!({
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": name},
        "spec": spec,
    });
    doc["spec"]["logging"] = json!({"quiet": true});
    doc["spec"]["containers"] = json!([{"image": "rockylinux:9", "command": command}]);
    doc
}

fn timeout_args() -> Vec<String> {
    vec![
        "--timeout".into(),
        RUN_TIMEOUT.into(),
        "--tail".into(),
        "60".into(),
    ]
}

/// Runs what the hub wrote for MiniCluster `name` to its end.
async fn finish(env: &TestEnv, name: &str, prefix: &str) -> Result<Outcome> {
    let run: FluxRun = env
        .run_flux(name, &run_name(&env.ns, prefix), &timeout_args())
        .await?;
    let outcome = run.finish(run_deadline()).await?;
    eprintln!(
        "{}: run-rendered.sh finished (success {}), pods {:?}",
        env.ns, outcome.success, outcome.pods
    );
    Ok(outcome)
}

/// The main container's log of the lead broker (`<job>-0`).
fn lead_log(outcome: &Outcome, job: &str, container: &str) -> Result<String> {
    outcome.log(&format!("{job}-0"), container)
}
