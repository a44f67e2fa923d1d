//! Two-cluster end-to-end tests: `flux-hub run` (with its federation gRPC server, mTLS)
//! against the root cluster named by `KUBECONFIG`, and `flux-spoke run` against the burst
//! cluster named by `SPOKE_KUBECONFIG`, both as child processes of the test.
//!
//! A bursting MiniCluster applied in the root cluster must end up as a burst Job in the
//! burst cluster, configured to join the root's lead broker through its NodePort; the
//! MiniCluster's status and `flux-hub status` must show it; deleting the MiniCluster must
//! delete the burst (the hub's finalizer waits for the spoke). Restarting the spoke, or
//! losing the hub for a while, must never delete or re-create the burst.
//!
//! The tests assert on what the control planes produce, and that brokers really connect
//! across the clusters: on kind and GKE in the broker pods themselves (`kubectl exec`), on
//! the testbed's hollow nodes (which run no process) with real Flux booted from the objects
//! both controllers wrote (`support/dataplane.rs`). They are ignored unless asked for and
//! fail without both clusters. See README.md.

#[path = "bursting/placed_restart.rs"]
mod placed_restart;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use flux_shared::api::MiniCluster;
use flux_shared::curve::CurveCert;
use flux_shared::federation::assignment;
use flux_shared::federation::pins::{self, PINS_CONFIGMAP};
use flux_shared::layout::{BROKER_TOML_KEY, CURVE_KEY};
use flux_shared::plan::{Endpoint, Plan, Role};
use flux_shared::render::{self, Object};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ResourceQuota, Secret, Service};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::dataplane::{
    self, FluxRun, hollow_nodes, overlay_full, overlay_up, overlay_wait, run_name,
};
use support::{Federation, Probe, TestEnv, pod_ran, pod_summary, secs, yaml};

/// The MiniCluster of these tests.
const NAME: &str = "bursty";
/// Root brokers.
const ROOT_SIZE: i32 = 2;
/// Brokers of the one burst.
const BURST_SIZE: i32 = 2;
/// The label and annotation a spoke puts on everything it creates.
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
const SPOKE_MANAGER: &str = "flux-spoke";
const ASSIGNMENT_ANNOTATION: &str = "flux-framework.org/assignment";

/// How long the hub and the spoke get to create, change or delete objects (two clusters,
/// and a spoke that may be in its reconnect backoff).
fn objects_deadline() -> Duration {
    secs(90)
}

/// How long broker pods get to start.
fn pods_deadline() -> Duration {
    secs(120)
}

/// `FLUX_E2E_LEAD_ADDRESS`: the address burst pods reach the root cluster's nodes at
/// (`spec.flux.bursting.leadAddress`). Unset: the hub uses the lead pod's node address.
fn lead_address_override() -> Option<String> {
    std::env::var("FLUX_E2E_LEAD_ADDRESS")
        .ok()
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
}

/// `FLUX_E2E_IMAGE`: the application image (default `rockylinux:9`).
fn image() -> String {
    std::env::var("FLUX_E2E_IMAGE")
        .ok()
        .filter(|i| !i.trim().is_empty())
        .unwrap_or_else(|| "rockylinux:9".into())
}

// ---------------------------------------------------------------------------------------
// The tests.

/// The whole life of a burst: dispatched to the spoke, configured to join the lead broker,
/// shown in the status and by `flux-hub status`, (when pods run) joined, and deleted with
/// its MiniCluster.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn burst_runs_in_the_spoke_cluster_and_goes_with_its_minicluster() {
    support::run_federated("burst-life", "e2e-spoke", burst_lifecycle).await;
}

/// An elastic burst (`maxSize` 3) resized in place: its Job in the burst cluster keeps its
/// uid while the size goes 1 → 3 → 0 (suspended, ConfigMap/Secret/Service kept); a size
/// above `maxSize` (by the API server, or by the hub against the frozen layout) and a
/// renamed burst are refused and change nothing there.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn an_elastic_burst_is_resized_in_place_within_its_max_size() {
    support::run_federated("burst-elastic", "e2e-spoke", elastic).await;
}

/// Bursting on demand, by hand, with real Flux: a MiniCluster whose burst starts at size 0
/// (`maxSize` 2) runs its root instance; a job for all four hosts waits; `flux-hub burst
/// scale` grows the burst to 2, the spoke resizes the suspended Job, its brokers (run from
/// what the spoke wrote) join the running instance, and the waiting job runs on every root
/// and burst host. On the testbed only (`FLUX_E2E_TESTBED`).
#[tokio::test]
#[ignore = "needs two clusters and the testbed: KUBECONFIG, SPOKE_KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn a_burst_grown_by_flux_hub_burst_scale_joins_the_running_instance() {
    support::run_federated("burst-grow", "e2e-spoke", grow).await;
}

/// Bursting on demand, end to end with real Flux: an autoscaled MiniCluster whose burst
/// starts at size 0 runs its root instance; a job for four nodes waits; the hub reads the
/// lead broker's queue reporter (through a relay into the emulated pod, as a `kubectl
/// port-forward` would, named by the `flux-framework.org/queue-reporter` annotation),
/// grows the burst to 2 by itself (an Event says why), the spoke resizes its Job, the new
/// brokers join and the job runs on every host. On the testbed only.
#[tokio::test]
#[ignore = "needs two clusters and the testbed: KUBECONFIG, SPOKE_KUBECONFIG, FLUX_E2E_TESTBED (scripts/e2e.sh)"]
async fn the_autoscaler_grows_a_burst_for_a_waiting_job_and_it_runs() {
    support::run_federated("burst-autoscale", "e2e-spoke", autoscale).await;
}

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

/// `flux-hub join` against the burst cluster: the spoke's install (what `deploy/spoke/`
/// holds, its settings and its TLS Secret) is accepted; a `flux-spoke run` started with
/// exactly what the Secret and the ConfigMap hold (hollow nodes run no container) connects
/// to the hub, and join's wait sees it connected; running join again changes nothing.
/// `flux-hub unjoin` refuses while a MiniCluster bursts into the spoke, naming it; once it
/// is gone, unjoin leaves nothing of the install and the hub forgets the spoke.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn flux_hub_join_installs_a_spoke_that_connects_and_unjoin_takes_it_out() {
    support::run_federated("join", "e2e-spoke", join).await;
}

/// "Touch only what we made", in the burst cluster. Someone else's ConfigMap, Secret,
/// headless Service and Job hold every name a burst would use: the spoke refuses the burst
/// (status.bursts[] Refused, reason `NameTaken`, each object named), writes nothing (all four keep
/// their resourceVersion, also over several report intervals), and the four survive the
/// MiniCluster's deletion. Then a running burst, and a second spoke process of the same
/// federation under another name against the same cluster: its first snapshot (empty)
/// deletes none of the first spoke's objects.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn names_taken_in_the_burst_cluster_are_refused_and_other_spokes_objects_survive() {
    support::run_federated("burst-taken", "e2e-spoke", names_taken).await;
}

/// The burst cluster's owner decides, on two real API servers: a burst from a namespace
/// the spoke's policy does not name is refused (status.bursts[] Refused, reason
/// `NamespaceNotAllowed`, one `BurstRefused` Event) and nothing of it is written there; an
/// edit of the policy that still refuses its image says `ImageNotAllowed`; one that
/// admits it starts the waiting burst without anyone touching the MiniCluster; the
/// policy's broker ceiling holds against `flux-hub burst scale` (the Job keeps its size,
/// the status says `TooManyBrokers` with the admitted size); admins scoped to another
/// namespace or to reading cannot scale it; with no policy at all the spoke says so and
/// keeps what runs.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn the_spoke_policy_decides_what_runs_in_the_burst_cluster() {
    support::run_federated("burst-policy", "e2e-spoke", spoke_policy).await;
}

/// Safe bursts by default: a burst asking for the spoke's service account and its token, a
/// privileged container and the node's `/` is not assigned (status.bursts[] Invalid,
/// `UnsafeBurst`, each field named, one Event) and nothing of it reaches the burst cluster.
/// And sizes are bounded (docs/limits.md): `maxSize: 10000000` is refused by the API server
/// (the CRD's maximum); a total over the limit that no single field shows is refused by
/// the hub (status Invalid, naming the rule).
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn an_unsafe_burst_and_a_huge_minicluster_are_refused_and_write_nothing() {
    support::run_federated("burst-unsafe", "e2e-spoke", unsafe_and_huge).await;
}

/// A burst borrows nothing of its cluster: the burst cluster's owner keeps a token Secret
/// in the admitted namespace, and a MiniCluster whose burst mounts it (and names a
/// toleration) is not assigned (UnsafeBurst, each field named) and no Job of it reaches
/// the burst cluster; once the owner's policy lists both, the burst runs with them.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn a_burst_cannot_mount_the_burst_cluster_owners_secret() {
    support::run_federated("burst-borrow", "e2e-spoke", borrowing).await;
}

/// Two MiniClusters of one namespace declare bursts of the same name on one spoke: the
/// second's burst would take the first's objects in the burst cluster, so it is refused
/// (NameTaken, naming the first's assignment) and the first keeps running, untouched, also
/// when the second is deleted.
/// A tenant with nearly 1 MiB of scripts (as much as its ConfigMap can hold) and five
/// bursts on one spoke (a snapshot over gRPC's 4 MiB message limit, so it travels in parts)
/// does not stop another tenant's burst there from starting and being resized.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn a_large_tenant_does_not_stop_another_tenants_burst_from_scaling() {
    support::run_federated("burst-large", "e2e-spoke", large_tenant).await;
}

#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn a_second_minicluster_whose_burst_collides_is_refused_and_the_first_keeps_running() {
    support::run_federated("burst-collide", "e2e-spoke", collide).await;
}

/// Restarting the spoke, stopping the hub, restarting the spoke while the hub is away and
/// bringing the hub back never deletes or re-creates the burst's objects.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn spoke_restart_and_hub_outage_keep_the_burst() {
    support::run_federated("burst-outage", "e2e-spoke", outage).await;
}

/// The hub killed (SIGKILL) at every step of its start-up and first reconciles while a
/// burst runs, once more after its MiniCluster's status lost the lead broker (as if the
/// hub had died before writing it): no object of the burst is ever deleted or re-created.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn a_hub_killed_at_any_step_of_its_start_never_deletes_a_running_burst() {
    support::run_federated("burst-kill", "e2e-spoke", killed_at_start).await;
}

/// The burst cluster's API server goes away while hub and spoke run: within ~40 s the
/// MiniCluster's status says the spoke cannot see its cluster, and since when; once it is
/// back the burst is Running again with the same objects. Needs commands that stop and
/// start the burst cluster's control plane: `FLUX_E2E_BURST_STOP`, `FLUX_E2E_BURST_START`
/// (`scripts/e2e.sh` sets them on the testbed; on kind, e.g. `docker stop` / `docker
/// start` of the burst cluster's control-plane container).
#[tokio::test]
#[ignore = "needs two clusters and FLUX_E2E_BURST_STOP/START (scripts/e2e.sh)"]
async fn burst_cluster_outage_is_reported_and_survived() {
    support::run_federated("burst-apiserver", "e2e-spoke", api_outage).await;
}

/// A burst that names candidates, running past the placement timeout, through a hub
/// restart and through one while its spoke is away and reconnects late: same objects, no
/// move, no `BurstMoved` or `BurstNotPlaced` Event.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn a_hub_restart_never_moves_a_placed_burst() {
    support::run_federated(
        "burst-placed-restart",
        "e2e-spoke",
        placed_restart::restarts,
    )
    .await;
}

/// A hub restarted in the middle of a move to another spoke sends the burst there only
/// once the spoke it leaves has deleted it (its status says which spoke still holds it).
#[tokio::test]
#[ignore = "needs three clusters: KUBECONFIG, SPOKE_KUBECONFIG, SPOKE2_KUBECONFIG (scripts/e2e.sh)"]
async fn a_hub_restarted_mid_move_waits_for_the_spoke_the_burst_leaves() {
    support::run_federated_spokes(
        "burst-mid-move",
        &[
            ("e2e-spoke", "SPOKE_KUBECONFIG"),
            ("e2e-spoke2", "SPOKE2_KUBECONFIG"),
        ],
        placed_restart::mid_move,
    )
    .await;
}

/// Faults around the burst's life: the hub killed while the spoke is creating the burst
/// (it converges, nothing duplicated or lost); the spoke's certificate rotated (a new one
/// from the same CA, the spoke restarted with it: same objects, reports again); the
/// MiniCluster deleted while its spoke is down (the hub does not wait for a spoke that is
/// away) and the spoke, back, deletes what its snapshot no longer lists.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn hub_crash_certificate_rotation_and_deletion_while_the_spoke_is_away() {
    support::run_federated("burst-faults", "e2e-spoke", faults).await;
}

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

/// Without a cluster: the checks these tests make accept exactly what the hub's
/// assignment and the spoke's rendering of it produce (and reject wrong objects), so a
/// failure points at the clusters or the binaries, never at a test expecting something
/// the code does not make.
#[test]
fn checks_agree_with_the_assignment() -> Result<()> {
    const NS: &str = "flux-e2e-offline";
    let burst = "burst-abcde";
    let mut doc = minicluster(burst, "e2e-spoke", None);
    doc["metadata"]["namespace"] = json!(NS);
    doc["metadata"]["uid"] = json!("8d5e9c1a-0000-4000-8000-000000000002");
    let mc: MiniCluster = serde_json::from_value(doc)?;
    let plan = Plan::new(&mc).map_err(|e| anyhow::anyhow!("{e}"))?;
    let cert = CurveCert::generate(NAME).to_zcert();
    let root = render::render(&plan, &Role::Root, &cert).context("no root objects")?;
    let root_config = config_map(&root, &format!("{NAME}-flux-config"))?;
    let lead = Endpoint {
        address: "192.0.2.9".into(),
        port: 30123,
    };
    let assignments = assignment::build(&plan, &cert, Some(&lead))?;
    ensure!(assignments.len() == 1, "one assignment: {assignments:?}");
    ensure!(assignments[0].spoke == "e2e-spoke");
    let me = flux_shared::federation::ownership::SpokeIdentity {
        name: "e2e-spoke".into(),
        federation: flux_shared::federation::ownership::INSECURE_FEDERATION.into(),
    };
    let realized = assignment::realize(&assignments[0].assignment, &me)?;
    ensure!(realized.namespace == NS && realized.job == burst);
    let job = realized
        .objects
        .iter()
        .find_map(|o| match o {
            Object::Job(j) if j.name_any() == burst => Some(j.clone()),
            _ => None,
        })
        .context("no burst Job")?;
    check_burst_job(&job, NS, burst)?;
    let burst_config = config_map(&realized.objects, &format!("{burst}-flux-config"))?;
    check_burst_config(&burst_config, &root_config, &lead.address, lead.port)?;
    ensure!(
        check_burst_config(&burst_config, &root_config, &lead.address, lead.port + 1).is_err(),
        "a wrong lead port must be caught"
    );
    ensure!(
        check_burst_config(&root_config, &root_config, &lead.address, lead.port).is_err(),
        "a config without the lead's connect override must be caught"
    );
    let root_job = root
        .iter()
        .find_map(|o| match o {
            Object::Job(j) => Some(j.clone()),
            _ => None,
        })
        .context("no root Job")?;
    ensure!(
        check_burst_job(&root_job, NS, burst).is_err(),
        "a Job not made by the spoke must be caught"
    );
    // The curve certificate is the root's, byte for byte.
    let secret = realized
        .objects
        .iter()
        .find_map(|o| match o {
            Object::Secret(s) if s.name_any() == format!("{burst}-curve") => Some(s.clone()),
            _ => None,
        })
        .context("no burst curve Secret")?;
    ensure!(secret_cert(&secret)? == cert);
    ensure!(
        realized
            .objects
            .iter()
            .any(|o| matches!(o, Object::Service(s) if s.name_any() == burst)),
        "no burst Service {burst}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Test bodies.

async fn burst_lifecycle(env: &TestEnv, fed: &Federation) -> Result<()> {
    let burst = dispatch(env, fed).await?;

    // Pod level, only where pods run.
    brokers_join(env, &burst).await?;

    // Deleting the MiniCluster (like `kubectl delete`) deletes the burst in the spoke
    // cluster; the hub's finalizer holds the MiniCluster until the spoke confirms.
    let jobs = env.spoke_api::<Job>();
    let job = jobs.get(&burst.name).await?;
    let selector = job_selector(&job)?;
    env.api::<MiniCluster>()
        .delete(NAME, &DeleteParams::background())
        .await
        .context("deleting the MiniCluster")?;
    let pods = env.spoke_api::<Pod>();
    env.eventually(
        &format!(
            "the spoke to delete the burst's Job, ConfigMap, Secret, Service and pods in namespace {} of the burst cluster",
            env.ns
        ),
        secs(150),
        async || {
            let mut left = still_there(env, &burst.objects).await?;
            let running = pods.list(&ListParams::default().labels(&selector)).await?;
            left.extend(running.items.iter().map(|p| format!("Pod {}", p.name_any())));
            Ok(if left.is_empty() {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("still there: {}", left.join(", ")))
            })
        },
    )
    .await?;
    let mcs = env.api::<MiniCluster>();
    env.eventually(
        "the MiniCluster to disappear (the hub releases its finalizer once the spoke confirmed)",
        objects_deadline(),
        async || {
            Ok(match mcs.get_opt(NAME).await? {
                None => Probe::Done(()),
                Some(mc) => Probe::Waiting(format!(
                    "metadata:\n{}status:\n{}",
                    yaml(&mc.metadata),
                    yaml(&mc.status)
                )),
            })
        },
    )
    .await?;
    // Nothing comes back.
    env.holds_for(
        "no object of the burst re-appears in the burst cluster",
        Duration::from_secs(5),
        async || {
            let again = spoke_objects_of(env, fed.spoke(), &burst.name).await?;
            Ok((!again.is_empty()).then(|| format!("re-created: {}", again.join(", "))))
        },
    )
    .await
}

async fn elastic(env: &TestEnv, fed: &Federation) -> Result<()> {
    let burst = burst_name(&env.ns);
    let doc = |name: &str, size: i32| {
        let mut doc = minicluster(&burst, fed.spoke(), lead_address_override().as_deref());
        doc["spec"]["flux"]["bursting"]["clusters"] =
            json!([{"name": name, "size": size, "maxSize": 3, "cluster": fed.spoke()}]);
        doc
    };
    env.apply_minicluster(&doc(&burst, 1)).await?;
    let job: Job = wait_spoke_object(env, fed.spoke(), &burst).await?;
    let uid = job.uid();
    let jobs = env.spoke_api::<Job>();
    let shape = |job: &Job| {
        let spec = job.spec.clone().unwrap_or_default();
        (spec.parallelism, spec.completions, spec.suspend)
    };
    eprintln!("{}: burst {burst} Job {:?}", env.ns, shape(&job));
    ensure!(
        shape(&job) == (Some(1), Some(1), Some(false)),
        "a burst of size 1: {:?}",
        shape(&job)
    );
    let mcs = env.api::<MiniCluster>();
    let layout = mcs
        .get(NAME)
        .await?
        .status
        .map(|s| s.burst_layout)
        .unwrap_or_default();
    ensure!(
        layout.len() == 1 && layout[0].name == burst && layout[0].max_size == 3,
        "status.burstLayout: {layout:?}"
    );
    // Size 3 through the hub's Admin API (`flux-hub burst scale`), 0 by applying the spec.
    for (size, want, admin) in [
        (3, (Some(3), Some(3), Some(false)), true),
        (0, (Some(1), Some(1), Some(true)), false),
    ] {
        let started = std::time::Instant::now();
        if admin {
            let answer = fed
                .burst_scale(&env.ns, NAME, &burst, size)
                .await?
                .map_err(|e| anyhow::anyhow!("flux-hub burst scale failed: {e}"))?;
            ensure!(
                answer["previousSize"] == 1 && answer["size"] == size && answer["maxSize"] == 3,
                "flux-hub burst scale answered {answer}"
            );
            let spec_size = mcs.get(NAME).await?.spec.bursts()[0].size;
            ensure!(
                spec_size == size,
                "the hub patched size {spec_size} into the spec"
            );
        } else {
            env.apply_minicluster(&doc(&burst, size)).await?;
        }
        env.eventually(
            &format!("the burst's Job resized to {size} in place"),
            objects_deadline(),
            async || {
                let job = jobs.get(&burst).await?;
                ensure!(
                    job.uid() == uid,
                    "the Job was re-created: {:?} → {:?}",
                    uid,
                    job.uid()
                );
                Ok(if shape(&job) == want {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!("{:?}", shape(&job)))
                })
            },
        )
        .await?;
        eprintln!(
            "{}: size {size} ({}) reached the spoke's Job in {} ms (same uid)",
            env.ns,
            if admin {
                "flux-hub burst scale"
            } else {
                "applied"
            },
            started.elapsed().as_millis()
        );
    }
    // The admin call refuses what the controller would, with its reason, changing nothing.
    let declined = fed.burst_scale(&env.ns, NAME, &burst, 4).await?;
    ensure!(
        matches!(&declined, Err(e) if e.contains("SizeAboveMaximum") && e.contains("size: 4 is above the maximum size 3")),
        "flux-hub burst scale to 4 (maxSize 3) must be declined: {declined:?}"
    );
    let declined = fed.burst_scale(&env.ns, NAME, "nope", 1).await?;
    ensure!(
        matches!(&declined, Err(e) if e.contains("has no burst \"nope\"")),
        "an unknown burst must be declined: {declined:?}"
    );
    for kind in ["ConfigMap", "Secret", "Service"] {
        let name = match kind {
            "ConfigMap" => format!("{burst}-flux-config"),
            "Secret" => format!("{burst}-curve"),
            _ => burst.clone(),
        };
        ensure!(
            spoke_uid(env, kind, &name).await?.is_some(),
            "a burst scaled to 0 keeps its {kind} {name}"
        );
    }
    // Above maxSize in the same entry: the API server's CEL rule refuses it.
    let refused = env.apply_minicluster(&doc(&burst, 4)).await;
    ensure!(
        matches!(&refused, Err(kube::Error::Api(e)) if e.code == 422 && e.message.contains("maxSize")),
        "size 4 with maxSize 3 must be refused by the API server: {refused:?}"
    );
    let mut above_frozen = doc(&burst, 4);
    above_frozen["spec"]["flux"]["bursting"]["clusters"][0]
        .as_object_mut()
        .map(|b| b.remove("maxSize"));
    for (changed, reason) in [
        (above_frozen, "SizeAboveMaximum"),
        (doc("renamed", 1), "BurstLayoutImmutable"),
    ] {
        env.apply_minicluster(&changed).await?;
        env.eventually(
            &format!("the change to be refused ({reason})"),
            objects_deadline(),
            async || {
                let mc = mcs.get(NAME).await?;
                let degraded = mc
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter())
                    .find(|c| c.type_ == "Degraded" && c.status == "True")
                    .map(|c| c.reason.clone());
                Ok(if degraded.as_deref() == Some(reason) {
                    Probe::Done(())
                } else {
                    Probe::Waiting(yaml(&mc.status))
                })
            },
        )
        .await?;
        let job = jobs.get(&burst).await?;
        ensure!(
            job.uid() == uid && shape(&job) == (Some(1), Some(1), Some(true)),
            "a refused change left the burst's Job alone: {:?}",
            shape(&job)
        );
        ensure!(
            jobs.get_opt("renamed").await?.is_none(),
            "no Job for a refused burst"
        );
    }

    // The burst removed: everything of it goes from the spoke's cluster, and so does the
    // lead broker's NodePort, but the root's brokers keep the burst's hosts (its
    // ConfigMap is not touched) and the frozen layout keeps its ranks.
    let config_maps = env.api::<ConfigMap>();
    let root_config = format!("{NAME}-flux-config");
    let before = config_maps.get(&root_config).await?;
    let mut removed = doc(&burst, 0);
    removed["spec"]["flux"]["bursting"]["clusters"] = json!([]);
    let started = std::time::Instant::now();
    env.apply_minicluster(&removed).await?;
    env.eventually(
        "the removed burst's objects deleted in the burst cluster",
        objects_deadline(),
        async || {
            let mut left = Vec::new();
            for (kind, name) in [
                ("Job", burst.clone()),
                ("ConfigMap", format!("{burst}-flux-config")),
                ("Secret", format!("{burst}-curve")),
                ("Service", burst.clone()),
            ] {
                if spoke_uid(env, kind, &name).await?.is_some() {
                    left.push(format!("{kind} {name}"));
                }
            }
            Ok(if left.is_empty() {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("still there: {}", left.join(", ")))
            })
        },
    )
    .await?;
    eprintln!(
        "{}: removed burst deleted in the spoke's cluster in {} ms",
        env.ns,
        started.elapsed().as_millis()
    );
    let services = env.api::<Service>();
    env.eventually(
        "the lead broker's NodePort Service deleted once no burst runs",
        objects_deadline(),
        async || {
            Ok(match services.get_opt(&format!("{NAME}-lead")).await? {
                None => Probe::Done(()),
                Some(_) => Probe::Waiting("it still exists".into()),
            })
        },
    )
    .await?;
    let after = config_maps.get(&root_config).await?;
    ensure!(
        after.data == before.data
            && after.metadata.resource_version == before.metadata.resource_version,
        "the root's broker.toml and R changed when the burst was removed"
    );
    let status = mcs.get(NAME).await?.status.unwrap_or_default();
    ensure!(
        status.bursts.is_empty() && status.burst_layout == layout,
        "a removed burst leaves status.bursts but keeps its place in status.burstLayout: {}",
        yaml(&status)
    );

    // Put back (the same name and hosts): it runs again, in a new Job.
    env.apply_minicluster(&doc(&burst, 1)).await?;
    let job: Job = wait_spoke_object(env, fed.spoke(), &burst).await?;
    ensure!(
        job.uid() != uid && shape(&job) == (Some(1), Some(1), Some(false)),
        "a burst put back runs in a new Job of its size: {:?}",
        shape(&job)
    );
    Ok(())
}

async fn grow(env: &TestEnv, fed: &Federation) -> Result<()> {
    dataplane::testbed()?;
    let burst = burst_name(&env.ns);
    let mut doc = minicluster(&burst, fed.spoke(), lead_address_override().as_deref());
    doc["spec"]["flux"]["bursting"]["clusters"] =
        json!([{"name": burst, "size": 0, "maxSize": 2, "cluster": fed.spoke()}]);
    env.apply_minicluster(&doc).await?;
    let lead = lead_endpoint(env).await?;
    let job: Job = wait_spoke_object(env, fed.spoke(), &burst).await?;
    ensure!(
        job.spec.as_ref().and_then(|s| s.suspend) == Some(true),
        "a burst of size 0 is a suspended Job"
    );

    // The root instance runs alone; a job for every host waits for the burst.
    let root = start_root(env, &lead).await?;
    let lead_pod = format!("{NAME}-0");
    let root_hosts = dataplane::indexed(NAME, ROOT_SIZE);
    let jobid = root.flux_submit(&lead_pod, NAME, "-N 4 hostname").await?;
    let state = root
        .flux_exec(
            &lead_pod,
            NAME,
            &format!("flux jobs -no '{{state}}' {jobid}"),
        )
        .await?;
    ensure!(
        state.trim() == "SCHED",
        "job {jobid} needs the burst's hosts, so it must wait (SCHED); it is {state:?}"
    );

    // Grow the burst through the hub's Admin API; the spoke resizes its Job in place.
    let answer = fed
        .burst_scale(&env.ns, NAME, &burst, 2)
        .await?
        .map_err(|e| anyhow::anyhow!("flux-hub burst scale failed: {e}"))?;
    eprintln!("{}: flux-hub burst scale answered {answer}", env.ns);
    let jobs = env.spoke_api::<Job>();
    let uid = job.uid();
    env.eventually(
        "the burst's Job resized to 2 and resumed",
        objects_deadline(),
        async || {
            let job = jobs.get(&burst).await?;
            ensure!(job.uid() == uid, "the burst's Job was re-created");
            let spec = job.spec.clone().unwrap_or_default();
            Ok(
                if spec.parallelism == Some(2) && spec.suspend == Some(false) {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!("{:?} suspend {:?}", spec.parallelism, spec.suspend))
                },
            )
        },
    )
    .await?;

    // Its brokers, run from what the spoke wrote, join the running instance: the job runs.
    let burst_run = start_burst(env, &lead).await?;
    let mut hosts = root_hosts.clone();
    hosts.extend(dataplane::indexed(&burst, 2));
    let joined = overlay_wait(
        &root,
        &lead_pod,
        NAME,
        &hosts,
        Some(&burst_run),
        overlay_full,
    )
    .await?;
    eprintln!(
        "{}: the grown burst joined {joined:?} after it started",
        env.ns
    );
    let out = root
        .flux_exec(&lead_pod, NAME, &format!("flux job attach {jobid}"))
        .await?;
    let missing: Vec<&String> = hosts
        .iter()
        .filter(|h| !out.lines().any(|l| l == h.as_str()))
        .collect();
    ensure!(
        missing.is_empty(),
        "job {jobid} did not run on {missing:?}:\n{out}"
    );
    root.flux_exec(&lead_pod, NAME, "flux shutdown --quiet")
        .await?;
    root.finish(secs(120)).await?.all_succeeded(&root_hosts)?;
    burst_run
        .finish(secs(120))
        .await?
        .all_succeeded(&dataplane::indexed(&burst, 2))?;
    Ok(())
}

async fn autoscale(env: &TestEnv, fed: &Federation) -> Result<()> {
    dataplane::testbed()?;
    // The hub runs outside the (emulated) pod network: it reads the reporter through the
    // annotation, which it honours only when told to.
    env.stop_hub();
    env.set_hub_args({
        let mut args = env.hub_args();
        args.push("--allow-queue-reporter-annotation".into());
        args
    });
    env.start_hub().await?;
    let burst = burst_name(&env.ns);
    let mut doc = minicluster(&burst, fed.spoke(), lead_address_override().as_deref());
    doc["spec"]["flux"]["bursting"]["clusters"] =
        json!([{"name": burst, "size": 0, "maxSize": 2, "cluster": fed.spoke()}]);
    doc["spec"]["flux"]["bursting"]["autoscale"] = json!({
        "scaleUpAfterSeconds": 2, "scaleDownAfterSeconds": 3600, "intervalSeconds": 1,
    });
    env.apply_minicluster(&doc).await?;
    let mcs = env.api::<MiniCluster>();
    let lead = lead_endpoint(env).await?;
    let job: Job = wait_spoke_object(env, fed.spoke(), &burst).await?;
    let uid = job.uid();

    let root = start_root(env, &lead).await?;
    let lead_pod = format!("{NAME}-0");
    let root_hosts = dataplane::indexed(NAME, ROOT_SIZE);

    // The hub reads the reporter through a relay into the lead pod (it cannot reach the
    // emulated pod network), named by the annotation.
    let relay = root.relay(&lead_pod, NAME, 8051).await?;
    mcs.patch(
        NAME,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(
            json!({"metadata": {"annotations": {"flux-framework.org/queue-reporter": relay}}}),
        ),
    )
    .await?;
    // The burst cluster's owner admits one broker at most: with it the instance could
    // have 3 nodes, too few for the job, so the autoscaler does not grow the burst at all
    // (the ceiling holds), however long the job waits.
    let policy = |extra: &str| {
        format!(
            "namespaces: [{{name: {}, podSecurity: privileged}}]\n{extra}",
            env.ns
        )
    };
    env.set_spoke_policy_of(fed.spoke(), Some(&policy("maxBrokers: 1\n")))
        .await?;
    wait_burst(env, "the spoke to admit one broker", |b| {
        b.admitted_size == Some(1)
    })
    .await?;
    let jobid = root.flux_submit(&lead_pod, NAME, "-N 4 hostname").await?;
    let submitted = std::time::Instant::now();
    let jobs = env.spoke_api::<Job>();
    env.holds_for(
        "the ceiling: no growth past what the spoke admits",
        Duration::from_secs(8),
        async || {
            let size = mcs.get(NAME).await?.spec.bursts()[0].size;
            let suspend = jobs.get(&burst).await?.spec.and_then(|s| s.suspend);
            Ok((size != 0 || suspend != Some(true))
                .then(|| format!("size {size}, Job suspend {suspend:?}")))
        },
    )
    .await?;
    // The owner lifts the ceiling: the burst grows to what the job needs.
    env.set_spoke_policy_of(fed.spoke(), Some(&policy("")))
        .await?;

    env.eventually(
        "the autoscaler to grow the burst to 2 for the waiting job",
        secs(90),
        async || {
            let job = jobs.get(&burst).await?;
            ensure!(job.uid() == uid, "the burst's Job was re-created");
            let spec = job.spec.clone().unwrap_or_default();
            Ok(
                if spec.parallelism == Some(2) && spec.suspend == Some(false) {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!(
                        "{:?} suspend {:?}; hub log tail:\n{}",
                        spec.parallelism,
                        spec.suspend,
                        env.hub_log_tail(15)
                    ))
                },
            )
        },
    )
    .await?;
    eprintln!(
        "{}: burst grown to 2 by the autoscaler {:?} after job {jobid} was submitted (scaleUpAfterSeconds 2)",
        env.ns,
        submitted.elapsed()
    );
    let events = env
        .api::<k8s_openapi::api::core::v1::Event>()
        .list(&Default::default())
        .await?;
    let scaled: Vec<String> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("BurstScaledUp"))
        .filter_map(|e| e.message.clone())
        .collect();
    ensure!(
        scaled
            .iter()
            .any(|m| m.contains(&format!("burst {burst}: size 0 -> 2")) && m.contains("4 nodes")),
        "a BurstScaledUp Event says why: {scaled:?}"
    );

    let burst_run = start_burst(env, &lead).await?;
    let mut hosts = root_hosts.clone();
    hosts.extend(dataplane::indexed(&burst, 2));
    overlay_wait(
        &root,
        &lead_pod,
        NAME,
        &hosts,
        Some(&burst_run),
        overlay_full,
    )
    .await?;
    let out = root
        .flux_exec(&lead_pod, NAME, &format!("flux job attach {jobid}"))
        .await?;
    let missing: Vec<&String> = hosts
        .iter()
        .filter(|h| !out.lines().any(|l| l == h.as_str()))
        .collect();
    ensure!(
        missing.is_empty(),
        "job {jobid} did not run on {missing:?}:\n{out}"
    );
    eprintln!(
        "{}: job {jobid} ran on {} {:?} after it was submitted",
        env.ns,
        hosts.join(", "),
        submitted.elapsed()
    );
    root.flux_exec(&lead_pod, NAME, "flux shutdown --quiet")
        .await?;
    root.finish(secs(120)).await?.all_succeeded(&root_hosts)?;
    burst_run
        .finish(secs(120))
        .await?
        .all_succeeded(&dataplane::indexed(&burst, 2))?;
    Ok(())
}

/// The first burst of [`NAME`] once `check` holds for it (phase, reason, admitted size).
async fn wait_burst(
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

async fn spoke_policy(env: &TestEnv, fed: &Federation) -> Result<()> {
    let spoke = fed.spoke();
    let burst = burst_name(&env.ns);
    let admit = |extra: &str| {
        format!(
            "namespaces: [{{name: {}, podSecurity: privileged}}]\n{extra}",
            env.ns
        )
    };
    // 1. A namespace the policy does not name.
    env.set_spoke_policy_of(spoke, Some("namespaces: [{name: somebody-else}]\n"))
        .await?;
    let mut doc = minicluster(&burst, spoke, lead_address_override().as_deref());
    doc["spec"]["flux"]["bursting"]["clusters"][0]["maxSize"] = json!(BURST_SIZE + 2);
    env.apply_minicluster(&doc).await?;
    let b = wait_burst(env, "the burst refused by the policy", |b| {
        b.phase == "Refused" && b.reason.as_deref() == Some("NamespaceNotAllowed")
    })
    .await?;
    let message = b.message.clone().unwrap_or_default();
    ensure!(
        message.contains(&format!("namespace {:?}", env.ns)) && message.contains("somebody-else"),
        "the refusal names the namespace and what is admitted: {message}"
    );
    ensure!(
        b.admitted_size.is_some(),
        "the spoke said what it admits: {b:?}"
    );
    let refusals = env
        .events_about("MiniCluster", NAME)
        .await?
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("BurstRefused"))
        .count();
    ensure!(refusals == 1, "one BurstRefused Event, found {refusals}");
    let written = spoke_objects_of(env, spoke, &burst).await?;
    ensure!(written.is_empty(), "nothing written: {written:?}");
    let status = fed.hub_status(&env.ns).await?;
    let row = &status["miniClusters"][0]["bursts"][0];
    ensure!(
        row["phase"] == "Refused" && row["reason"] == "NamespaceNotAllowed",
        "flux-hub status shows the refusal: {row}"
    );

    // 2. Admitted namespace, but not its image.
    env.set_spoke_policy_of(spoke, Some(&admit("images: [example.org/only/]\n")))
        .await?;
    let b = wait_burst(env, "the image refused", |b| {
        b.reason.as_deref() == Some("ImageNotAllowed")
    })
    .await?;
    ensure!(
        b.message
            .as_deref()
            .is_some_and(|m| m.contains("example.org/only/")),
        "{b:?}"
    );

    // 3. An edit that admits it: the waiting burst starts, the MiniCluster untouched.
    let generation = env
        .api::<MiniCluster>()
        .get(NAME)
        .await?
        .metadata
        .generation;
    env.set_spoke_policy_of(spoke, Some(&admit(&format!("maxBrokers: {BURST_SIZE}\n"))))
        .await?;
    let jobs = env.spoke_api_of::<Job>(spoke);
    env.eventually(
        "the burst's Job in the burst cluster",
        objects_deadline(),
        async || {
            Ok(match jobs.get_opt(&burst).await? {
                Some(job) => Probe::Done(job),
                None => Probe::Waiting("no Job yet".into()),
            })
        },
    )
    .await?;
    let b = wait_burst(env, "the burst admitted", |b| {
        b.reason.is_none() && b.admitted_size == Some(BURST_SIZE)
    })
    .await?;
    ensure!(
        env.api::<MiniCluster>()
            .get(NAME)
            .await?
            .metadata
            .generation
            == generation,
        "the MiniCluster was not touched: {b:?}"
    );

    // 4. The ceiling holds against burst scale: the Job keeps its size, and says why.
    fed.burst_scale(&env.ns, NAME, &burst, BURST_SIZE + 1)
        .await?
        .map_err(|e| anyhow::anyhow!("flux-hub burst scale failed: {e}"))?;
    let b = wait_burst(env, "the growth refused by the ceiling", |b| {
        b.reason.as_deref() == Some("TooManyBrokers")
    })
    .await?;
    ensure!(b.admitted_size == Some(BURST_SIZE), "{b:?}");
    env.holds_for(
        "the burst's Job keeps its size",
        Duration::from_secs(5),
        async || {
            let parallelism = jobs.get(&burst).await?.spec.and_then(|s| s.parallelism);
            Ok((parallelism != Some(BURST_SIZE)).then(|| format!("parallelism {parallelism:?}")))
        },
    )
    .await?;

    // 4b. Admin scopes: an admin of another namespace may not scale this burst, and a
    //     read-only one may look but not scale; nothing changes.
    let hub = tokio::task::spawn_blocking(support::hub_binary).await??;
    for (admin, extra) in [
        ("other-team", vec!["--admin-namespace", "somewhere-else"]),
        ("viewer", vec!["--admin-permission", "read"]),
    ] {
        let issued = tokio::process::Command::new(&hub)
            .arg("certs")
            .arg("--out")
            .arg(&fed.certs)
            .args(["--admin", admin])
            .args(&extra)
            .output()
            .await?;
        ensure!(
            issued.status.success(),
            "flux-hub certs --admin {admin}: {}",
            String::from_utf8_lossy(&issued.stderr)
        );
        let minicluster = format!("{}/{NAME}", env.ns);
        let out = fed
            .admin_command_as(admin, &["burst", "scale", &minicluster, &burst, "1"])
            .await?;
        let said = String::from_utf8_lossy(&out.stderr).to_string();
        ensure!(
            !out.status.success() && said.contains(&format!("admin {admin} may not scale")),
            "admin {admin} must not scale {minicluster}: {said}"
        );
    }
    let out = fed
        .admin_command_as("viewer", &["status", "--namespace", &env.ns, "-o", "json"])
        .await?;
    ensure!(
        out.status.success(),
        "a read-only admin reads: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        env.api::<MiniCluster>().get(NAME).await?.spec.bursts()[0].size == BURST_SIZE + 1,
        "the refused admins changed nothing"
    );

    // 5. No policy at all: nothing new is admitted, what runs is kept.
    env.set_spoke_policy_of(spoke, None).await?;
    wait_burst(env, "the spoke says it has no policy", |b| {
        b.reason.as_deref() == Some("NoPolicy")
    })
    .await?;
    ensure!(
        jobs.get_opt(&burst).await?.is_some(),
        "a policy change never deletes running brokers"
    );
    Ok(())
}

/// Waits for Job `name` of the burst cluster (`jobs`), showing the MiniCluster's status
/// meanwhile.
async fn spoke_job(env: &TestEnv, jobs: &Api<Job>, name: &str, what: &str) -> Result<Job> {
    env.eventually(what, objects_deadline(), async || {
        Ok(match jobs.get_opt(name).await? {
            Some(job) => Probe::Done(job),
            None => Probe::Waiting(status_of(env).await),
        })
    })
    .await
}

async fn borrowing(env: &TestEnv, fed: &Federation) -> Result<()> {
    // The owner's namespace in the burst cluster, with a Secret of theirs.
    let namespaces: Api<Namespace> = Api::all(env.spoke_client());
    if namespaces.get_opt(&env.ns).await?.is_none() {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": env.ns}}))?,
            )
            .await?;
    }
    env.spoke_api::<Secret>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "owner-token"},
                "stringData": {"token": "the owner's API token"},
            }))?,
        )
        .await?;
    let burst = burst_name(&env.ns);
    let mut doc = minicluster(&burst, fed.spoke(), lead_address_override().as_deref());
    doc["spec"]["containers"][0]["volumes"] =
        json!({"token": {"secretName": "owner-token", "path": "/token"}});
    doc["spec"]["pod"] = json!({"tolerations": [{"key": "dedicated", "operator": "Exists"}]});
    env.apply_minicluster(&doc).await?;
    let (_, message) = wait_burst_phase(env, "Invalid", objects_deadline()).await?;
    for part in [
        "UnsafeBurst: ",
        "spec.containers[0].volumes[\"token\"].secretName",
        "allow.secrets",
        "spec.pod.tolerations[0]",
    ] {
        ensure!(
            message.contains(part),
            "{part:?} not in the burst's message: {message}"
        );
    }
    let jobs = env.spoke_api::<Job>();
    env.holds_for(
        "no Job of the borrowing burst in the burst cluster",
        Duration::from_secs(5),
        async || {
            Ok(jobs
                .get_opt(&burst)
                .await?
                .map(|_| "a Job was created".to_string()))
        },
    )
    .await?;

    // The owner lists the Secret and the taint: the burst runs with them.
    env.set_spoke_policy_of(
        fed.spoke(),
        Some(&format!(
            "namespaces:\n- name: {}\n  podSecurity: privileged\n  allow: {{secrets: [owner-token], tolerations: [dedicated]}}\n",
            env.ns
        )),
    )
    .await?;
    let job = spoke_job(
        env,
        &jobs,
        &burst,
        "the burst's Job, once the owner's policy lists the Secret",
    )
    .await?;
    let pod = job
        .spec
        .and_then(|s| s.template.spec)
        .context("the Job's pod template")?;
    ensure!(
        pod.volumes.iter().flatten().any(|v| v
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref())
            == Some("owner-token")),
        "the listed Secret is mounted: {:?}",
        pod.volumes
    );
    Ok(())
}

async fn unsafe_and_huge(env: &TestEnv, fed: &Federation) -> Result<()> {
    let burst = burst_name(&env.ns);
    let mut doc = minicluster(&burst, fed.spoke(), lead_address_override().as_deref());
    doc["spec"]["pod"] =
        json!({"serviceAccountName": "flux-spoke", "automountServiceAccountToken": true});
    doc["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    doc["spec"]["containers"][0]["volumes"] = json!({"root": {"hostPath": "/", "path": "/host"}});
    env.apply_minicluster(&doc).await?;
    let (_, message) = wait_burst_phase(env, "Invalid", objects_deadline()).await?;
    for part in [
        "UnsafeBurst: ",
        "spec.pod.serviceAccountName",
        "spec.pod.automountServiceAccountToken",
        "spec.containers[0].securityContext.privileged",
        "spec.containers[0].volumes[\"root\"].hostPath",
    ] {
        ensure!(
            message.contains(part),
            "{part:?} not in the burst's message: {message}"
        );
    }
    let events = env.events_about("MiniCluster", NAME).await?;
    let refusals = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("UnsafeBurst"))
        .count();
    ensure!(refusals == 1, "one UnsafeBurst Event, found {refusals}");
    // Over several report intervals: nothing of the burst in the burst cluster.
    env.holds_for(
        "nothing of the unsafe burst in the burst cluster",
        Duration::from_secs(10),
        async || {
            let mut found = spoke_objects_of(env, fed.spoke(), &burst).await?;
            let all = ListParams::default();
            let ns = &env.ns;
            for j in env.spoke_api::<Job>().list(&all).await? {
                found.push(format!("Job {ns}/{}", j.name_any()));
            }
            for c in env.spoke_api::<ConfigMap>().list(&all).await? {
                // Every namespace has the API server's CA bundle.
                if c.name_any() != "kube-root-ca.crt" {
                    found.push(format!("ConfigMap {ns}/{}", c.name_any()));
                }
            }
            for s in env.spoke_api::<Secret>().list(&all).await? {
                found.push(format!("Secret {ns}/{}", s.name_any()));
            }
            for s in env.spoke_api::<Service>().list(&all).await? {
                found.push(format!("Service {ns}/{}", s.name_any()));
            }
            Ok((!found.is_empty()).then(|| format!("written: {}", found.join(", "))))
        },
    )
    .await?;
    // The burst cluster's owner lists what the burst asks for, but for the token, which no
    // policy lifts: the hub, told by the spoke, refuses it for the token alone. Without
    // it, the burst runs, privileged, as listed.
    env.set_spoke_policy_of(
        fed.spoke(),
        Some(&format!(
            "namespaces:\n- name: {}\n  podSecurity: privileged\n  allow: {{privileged: true, hostPaths: [/], serviceAccounts: [flux-spoke, runner]}}\n",
            env.ns
        )),
    )
    .await?;
    let b = wait_burst(env, "the refusal to name the token alone", |b| {
        b.message.as_deref().is_some_and(|m| {
            m.starts_with("UnsafeBurst: ")
                && m.contains("spec.pod.automountServiceAccountToken")
                && !m.contains("privileged")
                && !m.contains("hostPath")
                && !m.contains("serviceAccountName")
        })
    })
    .await?;
    ensure!(b.phase == "Invalid", "{b:?}");
    // The same burst without the token, in a MiniCluster of its own (a running Job's pods
    // cannot change): it runs as the policy allows.
    // Its pods run as `runner`, which exists in the root's namespace (the Job controller
    // creates no pod for an account that does not).
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = env.api();
    accounts
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": "runner"}}))?,
        )
        .await?;
    let listed = format!("{burst}-ok");
    let mut ok = minicluster(&listed, fed.spoke(), lead_address_override().as_deref());
    ok["metadata"]["name"] = json!("listed");
    ok["spec"]["pod"] = json!({"serviceAccountName": "runner"});
    ok["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
    ok["spec"]["containers"][0]["volumes"] = json!({"root": {"hostPath": "/", "path": "/host"}});
    env.apply_minicluster(&ok).await?;
    let jobs = env.spoke_api::<Job>();
    let job = env
        .eventually(
            "the listed burst's Job in the burst cluster, as the policy allows",
            objects_deadline(),
            async || {
                Ok(match jobs.get_opt(&listed).await? {
                    Some(job) => Probe::Done(job),
                    None => Probe::Waiting("no Job yet".into()),
                })
            },
        )
        .await?;
    let pod = job
        .spec
        .and_then(|s| s.template.spec)
        .context("the Job's pod template")?;
    ensure!(
        pod.service_account_name.as_deref() == Some("runner")
            && pod.containers.iter().any(|c| {
                c.security_context
                    .as_ref()
                    .and_then(|s| s.privileged)
                    .unwrap_or(false)
            }),
        "the burst runs as the policy allows: {pod:?}"
    );
    eprintln!(
        "{}: the spoke's exceptions let the privileged burst run",
        env.ns
    );

    let mcs = env.api::<MiniCluster>();
    mcs.delete("listed", &DeleteParams::background()).await?;
    mcs.delete(NAME, &DeleteParams::background()).await?;
    env.eventually("the unsafe MiniCluster gone", secs(60), async || {
        Ok(match mcs.get_opt(NAME).await? {
            None => Probe::Done(()),
            Some(mc) => Probe::Waiting(yaml(&mc.status)),
        })
    })
    .await?;

    // Ten million hosts: the CRD's maximum refuses it at the API server.
    let mut huge = minicluster(&burst, fed.spoke(), None);
    huge["metadata"]["name"] = json!("huge");
    huge["spec"]["maxSize"] = json!(10_000_000);
    match env.apply_minicluster(&huge).await {
        Ok(_) => bail!("the API server accepted maxSize 10000000"),
        Err(e) => {
            let text = e.to_string();
            ensure!(
                text.contains("maxSize") && text.contains("16384"),
                "the refusal names the field and the limit: {text}"
            );
        }
    }
    // 10000 + 10000 hosts: each field within the CRD's maximum, the total refused by the hub.
    let mut total = minicluster(&burst, fed.spoke(), None);
    total["metadata"]["name"] = json!("total");
    total["spec"]["size"] = json!(1);
    total["spec"]["maxSize"] = json!(10_000);
    total["spec"]["flux"]["bursting"]["clusters"][0]["size"] = json!(10_000);
    env.apply_minicluster(&total).await?;
    let text = env
        .eventually(
            "MiniCluster total to be Invalid, naming the limit",
            objects_deadline(),
            async || {
                let mc = mcs.get("total").await?;
                let status = mc.status.as_ref();
                let said = status
                    .into_iter()
                    .flat_map(|s| s.conditions.iter())
                    .map(|c| c.message.clone())
                    .find(|m| m.contains("limit of 16384"));
                Ok(match (status.and_then(|s| s.phase.as_deref()), said) {
                    (Some("Invalid"), Some(m)) => Probe::Done(m),
                    _ => Probe::Waiting(yaml(&mc.status)),
                })
            },
        )
        .await?;
    ensure!(
        text.contains("spec.flux.bursting.clusters: the instance declares 20000 hosts"),
        "{text}"
    );
    ensure!(
        env.api::<Job>().get_opt("total").await?.is_none(),
        "no root Job for a refused MiniCluster"
    );
    eprintln!("{}: {message}; {text}", env.ns);
    Ok(())
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

async fn join(env: &TestEnv, fed: &Federation) -> Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let suffix = env.ns.rsplit('-').next().unwrap_or("x");
    let name = format!("joined-{suffix}");
    let kubeconfig = std::env::var("SPOKE_KUBECONFIG").context("SPOKE_KUBECONFIG")?;
    let hub = tokio::task::spawn_blocking(support::hub_binary).await??;
    // The documented default: the test's namespace only, every other rule at its
    // default (join creates the namespace, at the Pod Security level a plain burst meets).
    let join = |wait: bool| {
        let mut cmd = tokio::process::Command::new(&hub);
        cmd.args(["join", &name, "--kubeconfig", &kubeconfig, "--certs"])
            .arg(&fed.certs)
            .args([
                "--hub",
                &fed.hub_url(),
                "--hub-domain",
                "localhost",
                "-o",
                "json",
            ])
            .args(["--timeout-seconds", "60", &format!("--wait={wait}")])
            .args(["--allow-namespace", &env.ns])
            .kill_on_drop(true);
        cmd
    };
    let client = env.spoke_client();
    // Whether join will create the burst namespace (not when the burst cluster is the root's).
    let join_creates = Api::<Namespace>::all(client.clone())
        .get_opt(&env.ns)
        .await?
        .is_none();
    let cleanup = async || {
        let dp = DeleteParams::background();
        let _ = Api::<Namespace>::all(client.clone())
            .delete("flux-spoke-system", &dp)
            .await;
        let _ = Api::<ClusterRole>::all(client.clone())
            .delete("flux-spoke", &dp)
            .await;
        let _ = Api::<ClusterRoleBinding>::all(client.clone())
            .delete("flux-spoke", &dp)
            .await;
        let _ = Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), &env.ns)
            .delete("flux-spoke", &dp)
            .await;
        let _ = Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), &env.ns)
            .delete("flux-spoke", &dp)
            .await;
    };
    let outcome = async {
        let first = join(false).output().await?;
        ensure!(
            first.status.success(),
            "flux-hub join --wait=false failed: {}",
            String::from_utf8_lossy(&first.stderr)
        );
        // The cluster runs spoke `name` now: a join under another name (the wrong
        // --context, say) and an unjoin of another name are refused, naming what is
        // installed, and change nothing.
        let other = format!("{name}-other");
        let renaming = tokio::process::Command::new(&hub)
            .args(["join", &other, "--kubeconfig", &kubeconfig, "--certs"])
            .arg(&fed.certs)
            .args(["--hub", &fed.hub_url(), "--hub-domain", "localhost"])
            .args(["--timeout-seconds", "60", "--wait=false"])
            .output()
            .await?;
        let said = String::from_utf8_lossy(&renaming.stderr).to_string();
        ensure!(
            !renaming.status.success()
                && said.contains(&format!(
                    "its spoke name is {name:?}, join would make it {other:?}"
                )),
            "join under another name must be refused, naming both: {said}"
        );
        let wrong = tokio::process::Command::new(&hub)
            .args(["unjoin", &other, "--kubeconfig", &kubeconfig, "--certs"])
            .arg(&fed.certs)
            .args([
                "--hub",
                &fed.hub_url(),
                "--hub-domain",
                "localhost",
                "--force",
            ])
            .output()
            .await?;
        let said = String::from_utf8_lossy(&wrong.stderr).to_string();
        ensure!(
            !wrong.status.success() && said.contains(&format!("refusing to unjoin spoke {other}")),
            "unjoin of another spoke must be refused, even with --force: {said}"
        );
        // The spoke's service account has every permission the spoke uses in the one
        // namespace the policy names (a Role there), reads that namespace by name, and
        // nothing else: no other namespace, no namespace creation; but for what measuring
        // its room reads, cluster-wide (ROOM_PERMISSIONS: list and watch nodes and pods).
        let account = ("flux-spoke-system", "flux-spoke");
        let room = flux_shared::federation::spoke_rbac::ROOM_PERMISSIONS;
        let for_room = |group: &str, resource: &str, verb: &str| {
            room.iter().any(|(g, r, v)| *g == group && *r == resource && v.contains(&verb))
        };
        let mut missing = Vec::new();
        let mut beyond = Vec::new();
        for (group, resource, verbs) in flux_shared::federation::spoke_rbac::NAMESPACED_REQUIRED {
            for verb in *verbs {
                if !support::service_account_can(&client, account, group, resource, verb, &env.ns)
                    .await?
                {
                    missing.push(format!("{verb} {group}/{resource} in {}", env.ns));
                }
                if !for_room(group, resource, verb)
                    && support::service_account_can(&client, account, group, resource, verb, "some-team")
                        .await?
                {
                    beyond.push(format!("{verb} {group}/{resource} in some-team"));
                }
            }
        }
        for (group, resource, verbs) in room {
            for verb in *verbs {
                if !support::service_account_can(&client, account, group, resource, verb, "").await? {
                    missing.push(format!("{verb} {group}/{resource} everywhere (room)"));
                }
            }
        }
        for (verb, name) in [("get", "some-team"), ("create", env.ns.as_str()), ("list", "")] {
            if support::service_account_can_on(&client, account, "", "namespaces", verb, "", name)
                .await?
            {
                beyond.push(format!("{verb} namespaces {name}"));
            }
        }
        if !support::service_account_can_on(&client, account, "", "namespaces", "get", "", &env.ns)
            .await?
        {
            missing.push(format!("get namespace {}", env.ns));
        }
        ensure!(
            missing.is_empty() && beyond.is_empty(),
            "the spoke's RBAC from join's policy for {}: lacks {missing:?}; grants too much: {beyond:?}",
            env.ns
        );
        ensure!(
            !support::service_account_can(&client, account, "", "pods/exec", "create", &env.ns)
                .await?,
            "the spoke must not exec into pods"
        );
        // It reads its policy in its own namespace, and nowhere else.
        for verb in ["get", "list", "watch"] {
            ensure!(
                support::service_account_can(
                    &client,
                    ("flux-spoke-system", "flux-spoke"),
                    "",
                    "configmaps",
                    verb,
                    "flux-spoke-system",
                )
                .await?,
                "the spoke must {verb} its policy ConfigMap"
            );
        }
        ensure!(
            !support::service_account_can(
                &client,
                ("flux-spoke-system", "flux-spoke"),
                "",
                "configmaps",
                "watch",
                "some-team"
            )
            .await?,
            "the spoke watches ConfigMaps in its own namespace only"
        );
        // What the installed spoke would run with, read back from the burst cluster.
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "flux-spoke-system");
        let config: Api<ConfigMap> = Api::namespaced(client.clone(), "flux-spoke-system");
        let policy = config
            .get(flux_shared::federation::policy::POLICY_CONFIGMAP)
            .await?
            .data
            .unwrap_or_default();
        let policy = flux_shared::federation::policy::SpokePolicy::parse(
            policy
                .get(flux_shared::federation::policy::POLICY_KEY)
                .map_or("", String::as_str),
        )?;
        ensure!(
            policy.namespace_rule(&env.ns).is_some() && policy.namespace_rule("other").is_none(),
            "join --allow-namespace {} wrote {policy:?}",
            env.ns
        );
        let secret = secrets.get("flux-spoke-tls").await?;
        let settings = config
            .get("flux-spoke-config")
            .await?
            .data
            .unwrap_or_default();
        ensure!(
            settings.get("spoke-name") == Some(&name)
                && settings.get("hub-url") == Some(&fed.hub_url()),
            "the spoke's settings: {settings:?}"
        );
        let dir = support::log_file(&format!("{}-joined-tls", env.ns))?;
        std::fs::create_dir_all(&dir)?;
        for key in ["ca.crt", "tls.crt", "tls.key"] {
            let bytes = secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .with_context(|| format!("flux-spoke-tls has no {key}"))?;
            std::fs::write(dir.join(key), &bytes.0)?;
        }
        // The spoke acts where the Deployment join wrote says: in the policy's namespace.
        let deployment = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(
            client.clone(),
            "flux-spoke-system",
        )
        .get("flux-spoke")
        .await?;
        let scope = deployment
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|s| s.containers.into_iter().next())
            .and_then(|c| c.args)
            .unwrap_or_default()
            .into_iter()
            .find(|a| a.starts_with("--namespaces="))
            .context("join's Deployment runs the spoke without --namespaces")?;
        ensure!(
            scope == format!("--namespaces={}", env.ns),
            "the spoke acts in the policy's namespace only: {scope}"
        );
        // And it runs as the account join made, with nothing but join's RBAC.
        let as_spoke = support::log_file(&format!("{}-joined-spoke.kubeconfig", env.ns))?;
        support::service_account_kubeconfig(&kubeconfig, ("flux-spoke-system", "flux-spoke"), &as_spoke)
            .await?;
        let spoke_bin = tokio::task::spawn_blocking(support::spoke_binary).await??;
        let log =
            std::fs::File::create(support::log_file(&format!("{}-joined-spoke.log", env.ns))?)?;
        let mut spoke = tokio::process::Command::new(spoke_bin)
            .env("KUBECONFIG", &as_spoke)
            .args([
                "run",
                "--hub",
                &settings["hub-url"],
                "--hub-domain",
                &settings["hub-domain"],
            ])
            .args([
                "--name",
                &settings["spoke-name"],
                "--metrics-addr",
                "127.0.0.1:0",
            ])
            .arg(&scope)
            .arg("--ca")
            .arg(dir.join("ca.crt"))
            .arg("--cert")
            .arg(dir.join("tls.crt"))
            .arg("--key")
            .arg(dir.join("tls.key"))
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        let again = join(true).output().await?;
        ensure!(
            again.status.success(),
            "flux-hub join (waiting) failed: {}",
            String::from_utf8_lossy(&again.stderr)
        );
        let result: Value = serde_json::from_slice(&again.stdout)?;
        let changed: Vec<&Value> = result["applied"]
            .as_array()
            .map(|a| a.iter().filter(|o| o["outcome"] != "unchanged").collect())
            .unwrap_or_default();
        ensure!(
            result["connected"] == true && changed.is_empty(),
            "join again: connected and nothing changed: {result}"
        );
        eprintln!("{}: spoke {name} joined and connected", env.ns);

        // A burst runs there under join's per-namespace RBAC alone: its objects are made,
        // and deleted with the MiniCluster.
        env.apply_minicluster(&minicluster(
            &burst_name(&env.ns),
            &name,
            lead_address_override().as_deref(),
        ))
        .await?;
        let burst_jobs: Api<Job> = Api::namespaced(client.clone(), &env.ns);
        let spoke_made = ListParams::default().labels("app.kubernetes.io/managed-by=flux-spoke");
        env.eventually(
            "the joined spoke, as its service account, to create the burst's Job",
            objects_deadline(),
            async || {
                let jobs = burst_jobs.list_metadata(&spoke_made).await?;
                Ok(if jobs.items.is_empty() {
                    Probe::Waiting("no Job yet".into())
                } else {
                    Probe::Done(())
                })
            },
        )
        .await?;
        // The namespace join made enforces Pod Security, and the burst's pods pass it.
        let created = Api::<Namespace>::all(client.clone()).get(&env.ns).await?;
        let enforce = created
            .labels()
            .get(flux_shared::federation::policy::POD_SECURITY_ENFORCE)
            .cloned();
        ensure!(
            !join_creates || enforce.as_deref() == Some("baseline"),
            "join created {} enforcing {enforce:?}",
            env.ns
        );
        let burst_pods: Api<Pod> = Api::namespaced(client.clone(), &env.ns);
        env.eventually(
            "the burst's pods, admitted by Pod Security",
            objects_deadline(),
            async || {
                let pods = burst_pods.list_metadata(&ListParams::default()).await?;
                Ok(if pods.items.is_empty() {
                    Probe::Waiting("no pod yet".into())
                } else {
                    Probe::Done(())
                })
            },
        )
        .await?;
        env.api::<MiniCluster>()
            .delete(NAME, &DeleteParams::background())
            .await?;
        env.eventually(
            "the MiniCluster and its burst's Job gone",
            objects_deadline(),
            async || {
                let mc = env.api::<MiniCluster>().get_opt(NAME).await?;
                let jobs = burst_jobs.list_metadata(&spoke_made).await?;
                Ok(if mc.is_none() && jobs.items.is_empty() {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!(
                        "MiniCluster there: {}, Jobs: {}",
                        mc.is_some(),
                        jobs.items.len()
                    ))
                })
            },
        )
        .await?;
        eprintln!(
            "{}: a burst ran and was deleted under join's per-namespace RBAC",
            env.ns
        );

        // join pinned the spoke's certificate; --rotate pins a new one, and the old one is
        // refused from then on (its open stream ends too).
        let pin_maps: Api<ConfigMap> = env.api();
        let pinned = |data: Option<BTreeMap<String, String>>| {
            data.unwrap_or_default()
                .get(&name)
                .cloned()
                .unwrap_or_default()
        };
        let first_pin = pinned(pin_maps.get(PINS_CONFIGMAP).await?.data);
        ensure!(
            first_pin
                == pins::fingerprint_of_pem(&std::fs::read_to_string(dir.join("tls.crt"))?)
                    .map_err(anyhow::Error::msg)?,
            "join pinned the installed certificate: {first_pin}"
        );
        let rotate = tokio::process::Command::new(&hub)
            .args(["join", &name, "--kubeconfig", &kubeconfig, "--certs"])
            .arg(&fed.certs)
            .args(["--hub", &fed.hub_url(), "--hub-domain", "localhost"])
            .args(["--rotate", "--wait=false", "--allow-namespace", &env.ns])
            .output()
            .await?;
        ensure!(
            rotate.status.success(),
            "join --rotate failed: {}",
            String::from_utf8_lossy(&rotate.stderr)
        );
        let second_pin = pinned(pin_maps.get(PINS_CONFIGMAP).await?.data);
        ensure!(
            second_pin != first_pin && pins::is_fingerprint(&second_pin),
            "join --rotate pinned a new certificate: {second_pin}"
        );
        let old = support::spoke_report_with(&fed.hub_url(), &dir).await;
        // Refused in the handshake: the hub's verifier says so. The client reads the
        // access_denied alert, or (TLS 1.3 ends the client's handshake first) the
        // connection closed under its first call.
        ensure!(
            matches!(&old, Err(s) if ["AccessDenied", "broken pipe", "connection reset", "connection closed"]
                .iter()
                .any(|m| s.message().contains(m))),
            "the rotated-out certificate must be refused in the TLS handshake: {old:?}"
        );
        let hub_log =
            std::fs::read_to_string(support::log_file(&format!("{}-hub-0.log", env.ns))?)?;
        ensure!(
            hub_log.lines().any(|l| l.contains("client certificate refused in the TLS handshake")
                && l.contains(&format!("spoke {name}: this certificate"))),
            "the hub logs the refusal in its TLS handshake"
        );
        env.eventually(
            "the old certificate's stream ended",
            objects_deadline(),
            async || {
                let status = fed.hub_status(&env.ns).await?;
                let connected = status["spokes"]
                    .as_array()
                    .and_then(|a| a.iter().find(|s| s["name"] == name.as_str()))
                    .map(|s| s["connected"].clone());
                Ok(if connected == Some(json!(false)) {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!("{connected:?}"))
                })
            },
        )
        .await?;
        eprintln!(
            "{}: the rotated-out certificate is refused and its stream ended",
            env.ns
        );

        // unjoin: refused while a MiniCluster bursts into the spoke, then it removes the
        // install and the hub forgets the spoke.
        let _ = spoke.kill().await;
        let unjoin = || {
            let mut cmd = tokio::process::Command::new(&hub);
            cmd.args(["unjoin", &name, "--kubeconfig", &kubeconfig, "--certs"])
                .arg(&fed.certs)
                .args(["--hub", &fed.hub_url(), "--hub-domain", "localhost"])
                .args(["--timeout-seconds", "60"])
                .kill_on_drop(true);
            cmd
        };
        env.apply_minicluster(&minicluster(
            &burst_name(&env.ns),
            &name,
            lead_address_override().as_deref(),
        ))
        .await?;
        env.eventually(
            "the hub to list the burst into the joined spoke",
            objects_deadline(),
            async || {
                let status = fed.hub_status(&env.ns).await?;
                Ok(
                    if status
                        .to_string()
                        .contains(&format!("\"spoke\":\"{name}\""))
                    {
                        Probe::Done(())
                    } else {
                        Probe::Waiting(status.to_string())
                    },
                )
            },
        )
        .await?;
        let refused = unjoin().output().await?;
        let said = String::from_utf8_lossy(&refused.stderr).to_string();
        ensure!(
            !refused.status.success()
                && said.contains(&format!(
                    "MiniClusters still burst into spoke {name}: {}/{NAME}",
                    env.ns
                )),
            "unjoin must refuse, naming the MiniCluster: {said}"
        );
        env.api::<MiniCluster>()
            .delete(NAME, &DeleteParams::background())
            .await?;
        env.eventually("the MiniCluster gone", objects_deadline(), async || {
            Ok(match env.api::<MiniCluster>().get_opt(NAME).await? {
                None => Probe::Done(()),
                Some(_) => Probe::Waiting("still there".into()),
            })
        })
        .await?;
        let done = unjoin().output().await?;
        ensure!(
            done.status.success(),
            "unjoin failed: {}",
            String::from_utf8_lossy(&done.stderr)
        );
        ensure!(
            Api::<Namespace>::all(client.clone())
                .get_opt("flux-spoke-system")
                .await?
                .is_none()
                && Api::<ClusterRole>::all(client.clone())
                    .get_opt("flux-spoke")
                    .await?
                    .is_none()
                && Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), &env.ns)
                    .get_opt("flux-spoke")
                    .await?
                    .is_none(),
            "unjoin leaves nothing of the install, the Role in the burst namespace included"
        );
        ensure!(
            Api::<Namespace>::all(client.clone())
                .get_opt(&env.ns)
                .await?
                .is_some(),
            "unjoin leaves the burst namespace join created (it may hold more than bursts)"
        );
        let status = fed.hub_status(&env.ns).await?;
        let spokes: Vec<&str> = status["spokes"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s["name"].as_str()).collect())
            .unwrap_or_default();
        ensure!(
            !spokes.contains(&name.as_str()),
            "the hub forgot {name}: {spokes:?}"
        );
        // unjoin unpinned it: the current certificate is refused as well.
        ensure!(
            pinned(pin_maps.get(PINS_CONFIGMAP).await?.data).is_empty(),
            "unjoin removed the pin"
        );
        eprintln!(
            "{}: spoke {name} unjoined: install gone, forgotten by the hub",
            env.ns
        );

        // Installed again, then the hub is gone (its cluster deleted, say): unjoin
        // --force still removes the install, and says the hub was not told.
        let again = join(false).output().await?;
        ensure!(
            again.status.success(),
            "join again: {}",
            String::from_utf8_lossy(&again.stderr)
        );
        let gone_hub = format!("https://127.0.0.1:{}", support::free_port()?);
        let orphaned = tokio::process::Command::new(&hub)
            .args(["unjoin", &name, "--kubeconfig", &kubeconfig, "--certs"])
            .arg(&fed.certs)
            .args(["--hub", &gone_hub, "--hub-domain", "localhost", "--force"])
            .args(["--timeout-seconds", "60"])
            .output()
            .await?;
        let said = String::from_utf8_lossy(&orphaned.stdout).to_string();
        ensure!(
            orphaned.status.success() && said.contains("WITHOUT telling the hub"),
            "unjoin --force without a hub: {said}{}",
            String::from_utf8_lossy(&orphaned.stderr)
        );
        ensure!(
            Api::<Namespace>::all(client.clone())
                .get_opt("flux-spoke-system")
                .await?
                .is_none_or(|n| n.metadata.deletion_timestamp.is_some()),
            "unjoin --force leaves no install"
        );
        eprintln!(
            "{}: unjoin --force removed spoke {name} with the hub gone",
            env.ns
        );
        Ok(())
    }
    .await;
    cleanup().await;
    outcome
}

/// The lead broker's endpoint once the hub has published it in the status.
async fn lead_endpoint(env: &TestEnv) -> Result<flux_shared::api::LeadBrokerStatus> {
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
async fn start_root(env: &TestEnv, lead: &flux_shared::api::LeadBrokerStatus) -> Result<FluxRun> {
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
    )?;
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
async fn start_burst(env: &TestEnv, lead: &flux_shared::api::LeadBrokerStatus) -> Result<FluxRun> {
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
}

async fn outage(env: &TestEnv, fed: &Federation) -> Result<()> {
    let burst = dispatch(env, fed).await?;
    let objects = &burst.objects;

    // A restarted spoke rebuilds its state from the cluster and the hub's snapshot: it
    // adopts the burst's objects, neither deleting nor re-creating them.
    let restarted = now_millis();
    env.restart_spoke().await?;
    spoke_synced(env, fed, &burst.name, restarted).await?;
    env.holds_for(
        "the burst's objects survive a spoke restart (same uids)",
        Duration::from_secs(10),
        async || same_objects(env, objects).await,
    )
    .await?;

    // The hub goes away: the spoke keeps what it runs.
    env.stop_hub();
    eprintln!("outage: hub stopped");
    env.holds_for(
        "the burst's objects stay while the hub is stopped",
        secs(30),
        async || same_objects(env, objects).await,
    )
    .await?;

    // A spoke that starts while the hub is away knows only its cluster: it must not
    // delete anything either.
    env.restart_spoke().await?;
    env.holds_for(
        "the burst's objects stay when the spoke restarts while the hub is stopped",
        secs(15),
        async || same_objects(env, objects).await,
    )
    .await?;

    // The hub comes back (a new epoch, rebuilt from the API server): the spoke reconnects,
    // applies the new snapshot, and still nothing is re-created.
    let back = now_millis();
    env.start_hub().await?;
    eprintln!("outage: hub restarted");
    spoke_synced(env, fed, &burst.name, back).await?;
    env.holds_for(
        "the burst's objects survive the hub's return (same uids)",
        Duration::from_secs(10),
        async || same_objects(env, objects).await,
    )
    .await?;
    burst_status(env, fed, &burst.name).await?;
    Ok(())
}

async fn killed_at_start(env: &TestEnv, fed: &Federation) -> Result<()> {
    let burst = dispatch(env, fed).await?;
    let objects = &burst.objects;
    // Each start is killed after a delay that lands in another step: before the caches
    // sync, while the registry is rebuilt, while the spoke gets its first snapshot, during
    // the first reconciles.
    for (round, millis) in [0u64, 150, 300, 600, 1000, 1500, 2500, 4000]
        .into_iter()
        .enumerate()
    {
        env.stop_hub();
        if round == 4 {
            // What the hub needs to assign is not known when it starts: the status does
            // not name the lead broker (as if the hub had died before writing it) and the
            // lead Service is gone, its re-creation refused by a quota for a while (the
            // NodePort unknown). The hub must keep what runs meanwhile.
            env.api::<MiniCluster>()
                .patch_status(
                    NAME,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"leadBroker": null}})),
                )
                .await
                .context("removing status.leadBroker")?;
            let quota: ResourceQuota = serde_json::from_value(json!({
                "metadata": {"name": "no-node-ports"},
                "spec": {"hard": {"services.nodeports": "0"}},
            }))?;
            let quotas = env.api::<ResourceQuota>();
            quotas.create(&PostParams::default(), &quota).await?;
            env.api::<Service>()
                .delete(&format!("{NAME}-lead"), &DeleteParams::default())
                .await
                .context("deleting the lead Service")?;
            env.start_hub().await?;
            env.holds_for(
                "the burst's objects stay while the restarted hub cannot learn the lead",
                secs(12),
                async || same_objects(env, objects).await,
            )
            .await?;
            quotas
                .delete("no-node-ports", &DeleteParams::default())
                .await?;
            continue;
        }
        env.start_hub().await?;
        tokio::time::sleep(Duration::from_millis(millis)).await;
        if let Some(changed) = same_objects(env, objects).await? {
            bail!("after a hub start killed at {millis} ms: {changed}");
        }
    }
    env.stop_hub();
    env.holds_for(
        "the burst's objects stay while the hub is down",
        secs(5),
        async || same_objects(env, objects).await,
    )
    .await?;
    let back = now_millis();
    env.start_hub().await?;
    spoke_synced(env, fed, &burst.name, back).await?;
    env.holds_for(
        "the burst's objects survive every kill (same uids)",
        secs(10),
        async || same_objects(env, objects).await,
    )
    .await?;
    burst_status(env, fed, &burst.name).await?;
    Ok(())
}

async fn faults(env: &TestEnv, fed: &Federation) -> Result<()> {
    // A short deletion timeout, so that deleting with the spoke away is quick to test.
    env.stop_hub();
    env.set_hub_args({
        let mut args = env.hub_args();
        args.extend(["--burst-deletion-timeout-seconds".into(), "15".into()]);
        args
    });
    env.start_hub().await?;

    // 1. The hub dies while the spoke creates the burst: applied, then the hub is killed
    //    as soon as the burst's namespace appears in the burst cluster.
    let burst_name = burst_name(&env.ns);
    let doc = minicluster(&burst_name, fed.spoke(), lead_address_override().as_deref());
    env.apply_minicluster(&doc).await?;
    let namespaces: Api<Namespace> = Api::all(env.spoke_client());
    env.eventually(
        "the spoke to start creating the burst (its namespace in the burst cluster)",
        objects_deadline(),
        async || {
            Ok(match namespaces.get_opt(&env.ns).await? {
                Some(_) => Probe::Done(()),
                None => Probe::Waiting("no namespace yet".into()),
            })
        },
    )
    .await?;
    env.stop_hub();
    let killed = std::time::Instant::now();
    eprintln!("{}: hub killed while the burst was being created", env.ns);
    env.start_hub().await?;
    let burst = dispatch(env, fed).await?;
    eprintln!(
        "{}: after the hub's crash the burst converged {:?} after the kill",
        env.ns,
        killed.elapsed()
    );
    ensure!(
        spoke_objects_of(env, fed.spoke(), &burst.name).await?.len() == burst.objects.len(),
        "the burst cluster holds other objects of the burst than its four: {:?}",
        spoke_objects_of(env, fed.spoke(), &burst.name).await?
    );

    // 2. A new spoke certificate from the same CA: the spoke restarts with it and carries
    //    on with the same objects.
    let hub = tokio::task::spawn_blocking(support::hub_binary).await??;
    let before = std::fs::read(fed.file(&format!("spoke-{}.crt", fed.spoke())))?;
    let out = tokio::process::Command::new(&hub)
        .arg("certs")
        .arg("--out")
        .arg(&fed.certs)
        .args(["--spoke", fed.spoke(), "--force"])
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "flux-hub certs --force failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = std::fs::read(fed.file(&format!("spoke-{}.crt", fed.spoke())))?;
    ensure!(before != after, "the spoke certificate was not replaced");
    let rotated = now_millis();
    env.restart_spoke().await?;
    spoke_synced(env, fed, &burst.name, rotated).await?;
    env.holds_for(
        "the burst's objects survive the certificate rotation (same uids)",
        Duration::from_secs(5),
        async || same_objects(env, &burst.objects).await,
    )
    .await?;
    eprintln!("{}: spoke reconnected with a rotated certificate", env.ns);

    // 3. The MiniCluster is deleted while its spoke is down: the hub does not wait for a
    //    spoke that is away (a SpokeAway Event says so) and lets the MiniCluster go well
    //    before its deletion timeout; the spoke, back, deletes the burst (its snapshot no
    //    longer lists it).
    env.stop_spoke();
    let deleted = std::time::Instant::now();
    env.api::<MiniCluster>()
        .delete(NAME, &DeleteParams::background())
        .await
        .context("deleting the MiniCluster")?;
    let mcs = env.api::<MiniCluster>();
    env.eventually(
        "the MiniCluster to disappear while its spoke is down (the hub's deletion timeout is 15 s)",
        secs(90),
        async || {
            Ok(match mcs.get_opt(NAME).await? {
                None => Probe::Done(()),
                Some(mc) => Probe::Waiting(yaml(&mc.status)),
            })
        },
    )
    .await?;
    let gone_after = deleted.elapsed();
    eprintln!(
        "{}: MiniCluster gone {gone_after:?} after its deletion, its spoke away",
        env.ns
    );
    ensure!(
        gone_after < secs(15),
        "a spoke that is away must not hold the deletion until the timeout (15 s): {gone_after:?}"
    );
    let events = env
        .api::<k8s_openapi::api::core::v1::Event>()
        .list(&Default::default())
        .await?;
    ensure!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("SpokeAway")),
        "a SpokeAway Event says the burst goes when the spoke returns"
    );
    ensure!(
        !still_there(env, &burst.objects).await?.is_empty(),
        "with its spoke down, nothing can have deleted the burst yet"
    );
    env.start_spoke().await?;
    let back = std::time::Instant::now();
    env.eventually(
        "the spoke, back, to delete the burst of the deleted MiniCluster",
        objects_deadline(),
        async || {
            let left = still_there(env, &burst.objects).await?;
            Ok(if left.is_empty() {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("still there: {}", left.join(", ")))
            })
        },
    )
    .await?;
    eprintln!(
        "{}: the returning spoke deleted the burst {:?} after it started",
        env.ns,
        back.elapsed()
    );
    Ok(())
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
    )?;
    root.wait_for_output("NodePort emulation", secs(60)).await?;
    let mut early = FluxRun::start(
        &run_name(&env.ns, "early"),
        &[&early_file],
        &burst_args(&first),
    )?;
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
    )?;
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
    )?;
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
    let cert_run = FluxRun::start(&run_name(&env.ns, "cert"), &[&wrong_cert], &attach("120"))?;
    let port_run = FluxRun::start(&run_name(&env.ns, "port"), &[&wrong_port], &attach("120"))?;
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
    let good_run = FluxRun::start(&run_name(&env.ns, "good"), &[&good], &attach("120"))?;
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

async fn api_outage(env: &TestEnv, fed: &Federation) -> Result<()> {
    let stop = control_command("FLUX_E2E_BURST_STOP")?;
    let start = control_command("FLUX_E2E_BURST_START")?;
    let burst = dispatch(env, fed).await?;
    wait_burst_phase(env, "Running", objects_deadline()).await?;

    run_control(&stop).await?;
    let stopped = std::time::Instant::now();
    eprintln!("{}: burst cluster control plane stopped", env.ns);
    // Phase and condition are read from the same object, before the restart: once the burst
    // cluster is back the spoke reconnects within seconds and both turn healthy again.
    let mcs = env.api::<MiniCluster>();
    let outcome = env
        .eventually(
            &format!("status.bursts[0].phase of {NAME} to be Unknown"),
            secs(90),
            async || {
                let mc = mcs.get(NAME).await?;
                let burst = mc.status.as_ref().and_then(|s| s.bursts.first().cloned());
                let condition = support::mc_conditions(&mc)
                    .iter()
                    .find(|c| c.type_ == "BurstsReady")
                    .cloned();
                Ok(match (burst, condition) {
                    (Some(b), Some(c)) if b.phase == "Unknown" => {
                        Probe::Done((b.message.unwrap_or_default(), c))
                    }
                    _ => Probe::Waiting(yaml(&mc.status)),
                })
            },
        )
        .await;
    let said_after = stopped.elapsed();
    // Whatever happened, bring the burst cluster back before judging.
    run_control(&start).await?;
    let restarted = std::time::Instant::now();
    let (message, condition) = outcome?;
    eprintln!(
        "{}: status said the spoke cannot see its cluster {said_after:?} after the API server stopped: {message}",
        env.ns
    );
    ensure!(
        said_after <= secs(45),
        "the status took {said_after:?} to say the burst cluster is unreachable (expected ~40 s at most)"
    );
    ensure!(
        message.contains("cannot reach its cluster's API server since"),
        "the burst's message must say the spoke cannot reach its cluster, and since when: {message}"
    );
    ensure!(
        condition.status == "False" && condition.reason == "SpokeClusterUnreachable",
        "BurstsReady must be False with reason SpokeClusterUnreachable: {condition:?}"
    );

    // The spoke notices its API server's return within 5 s (its watch retries at most
    // 4 s apart): the burst is Running again at most 5 s after its pods are ready again
    // in the burst cluster (what the pods need is the kubelet's and the Job controller's).
    let jobs = env.spoke_api::<Job>();
    let (mut pods_ready, mut running) = (None, None);
    let deadline = restarted + secs(120);
    while (pods_ready.is_none() || running.is_none()) && std::time::Instant::now() < deadline {
        if pods_ready.is_none()
            && let Ok(Some(job)) = jobs.get_opt(&burst.name).await
        {
            let status = job.status.unwrap_or_default();
            let size = job.spec.and_then(|s| s.parallelism).unwrap_or(0);
            if size > 0 && status.ready.unwrap_or(0) >= size {
                pods_ready = Some(restarted.elapsed());
            }
        }
        if running.is_none() {
            let mc = env.api::<MiniCluster>().get(NAME).await?;
            if mc
                .status
                .as_ref()
                .and_then(|s| s.bursts.first())
                .is_some_and(|b| b.phase == "Running")
            {
                running = Some(restarted.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (Some(pods_ready), Some(running)) = (pods_ready, running) else {
        bail!(
            "within 120 s of the restart: burst pods ready again {pods_ready:?}, burst Running again {running:?}"
        );
    };
    eprintln!(
        "{}: after the control plane restarted, the burst's pods were ready again in {pods_ready:?} and the burst Running in {running:?}",
        env.ns
    );
    ensure!(
        running <= pods_ready + secs(5),
        "the burst was Running again {running:?} after the restart, more than 5 s after its pods were ready ({pods_ready:?})"
    );
    env.holds_for(
        "the burst's objects survive the outage (same uids)",
        Duration::from_secs(5),
        async || same_objects(env, &burst.objects).await,
    )
    .await
}

/// A shell command from the environment variable `var`.
fn control_command(var: &str) -> Result<String> {
    std::env::var(var)
        .ok()
        .filter(|c| !c.trim().is_empty())
        .with_context(|| {
            format!("{var} is not set: this test stops and starts the burst cluster's control plane with it (scripts/e2e.sh sets it on the testbed)")
        })
}

async fn run_control(command: &str) -> Result<()> {
    let out = tokio::time::timeout(
        secs(120),
        tokio::process::Command::new("bash")
            .args(["-c", command])
            .output(),
    )
    .await
    .with_context(|| format!("`{command}` timed out"))??;
    ensure!(
        out.status.success(),
        "`{command}` failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Waits until `status.bursts[0].phase` is `phase`; the burst's phase and message.
async fn wait_burst_phase(
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

// ---------------------------------------------------------------------------------------
// Steps.

/// What [`dispatch`] found.
struct Burst {
    /// Burst name (Job name and host prefix in the burst cluster).
    name: String,
    /// The burst's objects in the burst cluster.
    objects: Vec<SpokeObject>,
    /// The lead broker's endpoint from `status.leadBroker` (what burst brokers dial).
    lead_address: String,
    /// Its port (the NodePort).
    lead_port: i32,
}

/// An object of the burst in the burst cluster, by uid.
#[derive(Clone, Debug)]
struct SpokeObject {
    kind: &'static str,
    name: String,
    uid: Option<String>,
}

/// The test's MiniCluster: `ROOT_SIZE` interactive brokers and one burst of `BURST_SIZE`
/// on `spoke`.
fn minicluster(burst: &str, spoke: &str, lead_address: Option<&str>) -> Value {
    let mut bursting = json!({
        "clusters": [{"name": burst, "size": BURST_SIZE, "cluster": spoke}],
    });
    if let Some(address) = lead_address {
        bursting["leadAddress"] = json!(address);
    }
    json!({
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": NAME},
        "spec": {
            "size": ROOT_SIZE,
            "interactive": true,
            "flux": {"bursting": bursting},
            "containers": [{"image": image()}],
        },
    })
}

/// A burst name unique to this test run: `burst-<the namespace's random suffix>`.
fn burst_name(ns: &str) -> String {
    let suffix = ns.rsplit('-').next().unwrap_or("x");
    format!("burst-{suffix}")
}

/// Applies the MiniCluster and follows its burst into the burst cluster: the root Job and
/// lead Service, the lead endpoint in the status, the spoke's namespace, Job, ConfigMap,
/// Secret and Service with their key fields, the burst in the status and in
/// `flux-hub status`.
async fn dispatch(env: &TestEnv, fed: &Federation) -> Result<Burst> {
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
async fn burst_status(env: &TestEnv, fed: &Federation, burst: &str) -> Result<()> {
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
fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Waits until `flux-hub status` shows the spoke connected and up to date (it
/// acknowledged the latest snapshot the hub sent it) and reporting on `burst` since
/// `since` (Unix milliseconds): so a spoke (re)started at `since` has applied the
/// snapshot, not just opened its stream.
async fn spoke_synced(env: &TestEnv, fed: &Federation, burst: &str, since: i64) -> Result<()> {
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

/// Pod level: when the lead broker and every burst broker run, the burst reports its
/// brokers ready and (with kubectl) the lead broker's overlay shows the burst ranks online.
async fn brokers_join(env: &TestEnv, burst: &Burst) -> Result<()> {
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
async fn brokers_join_in_flux(env: &TestEnv, burst: &Burst) -> Result<()> {
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
    let mut root = FluxRun::start(&run_name(&env.ns, "root"), &[&root_file], &keep_running)?;
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
    let burst_run = FluxRun::start(&run_name(&env.ns, "burst"), &[&burst_file], &attach)?;
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

async fn overlay_status(env: &TestEnv, pod: &str) -> Result<String> {
    let mut cmd = tokio::process::Command::new("kubectl");
    cmd.args(["--namespace", &env.ns, "exec", pod, "-c", NAME, "--"])
        .args([
            "bash",
            "-c",
            &dataplane::in_flux_env("flux overlay status --no-pretty"),
        ]);
    dataplane::output_of(cmd, &format!("kubectl exec {pod}")).await
}

// ---------------------------------------------------------------------------------------
// Checks.

/// The burst Job as the spoke must create it: labelled as the spoke's, annotated with its
/// assignment key, an Indexed Job of `BURST_SIZE` brokers.
fn check_burst_job(job: &Job, ns: &str, burst: &str) -> Result<()> {
    let labels = job.labels();
    ensure!(
        labels.get(MANAGED_BY).map(String::as_str) == Some(SPOKE_MANAGER),
        "Job {burst} must carry {MANAGED_BY}={SPOKE_MANAGER}; labels {labels:?}"
    );
    let key = format!("{ns}/{NAME}/{burst}");
    let annotations = job.annotations();
    ensure!(
        annotations.get(ASSIGNMENT_ANNOTATION) == Some(&key),
        "Job {burst} must carry the annotation {ASSIGNMENT_ANNOTATION}={key}; annotations {annotations:?}"
    );
    let spec = job.spec.as_ref().context("Job without spec")?;
    ensure!(
        spec.parallelism == Some(BURST_SIZE) && spec.completions == Some(BURST_SIZE),
        "Job {burst} must run {BURST_SIZE} brokers (parallelism = completions = {BURST_SIZE}):\n{}",
        yaml(job)
    );
    ensure!(
        spec.completion_mode.as_deref() == Some("Indexed"),
        "Job {burst} must be an Indexed Job:\n{}",
        yaml(job)
    );
    Ok(())
}

/// Every host of broker.toml's `[bootstrap] hosts`, in rank order, with its `connect`
/// override.
fn bootstrap_hosts(config_map: &ConfigMap) -> Result<Vec<(String, Option<String>)>> {
    let name = config_map.name_any();
    let text = config_map
        .data
        .as_ref()
        .and_then(|d| d.get(BROKER_TOML_KEY))
        .with_context(|| format!("ConfigMap {name} has no {BROKER_TOML_KEY}"))?;
    let doc: toml::Table = text
        .parse()
        .with_context(|| format!("{BROKER_TOML_KEY} of ConfigMap {name} is not TOML:\n{text}"))?;
    let entries = doc
        .get("bootstrap")
        .and_then(|b| b.get("hosts"))
        .and_then(|h| h.as_array())
        .with_context(|| {
            format!("{BROKER_TOML_KEY} of ConfigMap {name} has no [bootstrap] hosts:\n{text}")
        })?;
    let mut hosts = Vec::new();
    for entry in entries {
        let hostlist = entry
            .get("host")
            .and_then(|h| h.as_str())
            .with_context(|| format!("a hosts entry without host in ConfigMap {name}: {entry}"))?;
        let connect = entry
            .get("connect")
            .and_then(|c| c.as_str())
            .map(str::to_string);
        let expanded = flux_shared::hostlist::expand(hostlist)
            .map_err(|e| anyhow::anyhow!("hostlist {hostlist:?} in ConfigMap {name}: {e}"))?;
        ensure!(
            connect.is_none() || expanded.len() == 1,
            "ConfigMap {name}: a connect override for several hosts ({hostlist})"
        );
        hosts.extend(expanded.into_iter().map(|h| (h, connect.clone())));
    }
    Ok(hosts)
}

/// The burst's broker.toml: the same hosts in the same order as the root's (ranks must
/// agree), the rank-0 host connecting to the lead broker's `address:port`, no other
/// override.
fn check_burst_config(
    burst: &ConfigMap,
    root: &ConfigMap,
    lead_address: &str,
    lead_port: i32,
) -> Result<()> {
    let burst_hosts = bootstrap_hosts(burst)?;
    let root_hosts = bootstrap_hosts(root)?;
    let names =
        |h: &[(String, Option<String>)]| h.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    ensure!(
        names(&burst_hosts) == names(&root_hosts),
        "the burst's broker.toml must list the root's hosts in the same order (ranks must agree):\nburst {:?}\nroot  {:?}",
        names(&burst_hosts),
        names(&root_hosts)
    );
    let expected = [
        format!("tcp://{lead_address}:{lead_port}"),
        format!("tcp://[{lead_address}]:{lead_port}"),
    ];
    let (rank0, connect) = burst_hosts.first().context("no hosts")?;
    ensure!(
        rank0 == &format!("{NAME}-0") && connect.as_ref().is_some_and(|c| expected.contains(c)),
        "the burst's rank-0 host must be {NAME}-0 with connect = {}, has {rank0} with connect {connect:?}:\n{}",
        expected[0],
        burst
            .data
            .as_ref()
            .and_then(|d| d.get(BROKER_TOML_KEY))
            .map_or("", String::as_str)
    );
    if let Some((host, connect)) = burst_hosts[1..].iter().find(|(_, c)| c.is_some()) {
        bail!("only rank 0 may have a connect override; {host} has {connect:?}");
    }
    Ok(())
}

/// The CURVE certificate in a curve Secret.
fn secret_cert(secret: &Secret) -> Result<String> {
    let name = secret.name_any();
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(CURVE_KEY))
        .with_context(|| format!("Secret {name} has no {CURVE_KEY}"))?;
    String::from_utf8(bytes.0.clone())
        .with_context(|| format!("{CURVE_KEY} in Secret {name} is not UTF-8"))
}

// ---------------------------------------------------------------------------------------
// Helpers.

fn config_map(objects: &[Object], name: &str) -> Result<ConfigMap> {
    objects
        .iter()
        .find_map(|o| match o {
            Object::ConfigMap(c) if c.name_any() == name => Some(c.clone()),
            _ => None,
        })
        .with_context(|| format!("no ConfigMap {name} rendered"))
}

/// Waits for a namespaced object in the test namespace of the burst cluster of `spoke`.
async fn wait_spoke_object<K>(env: &TestEnv, spoke: &str, name: &str) -> Result<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    <K as kube::Resource>::DynamicType: Default,
{
    let api = env.spoke_api_of::<K>(spoke);
    let kind = K::kind(&Default::default()).to_string();
    env.eventually(
        &format!("{kind} {name} in the burst cluster of spoke {spoke}"),
        objects_deadline(),
        async || {
            Ok(match api.get_opt(name).await? {
                Some(o) => Probe::Done(o),
                None => Probe::Waiting(status_of(env).await),
            })
        },
    )
    .await
}

fn spoke_object<K: kube::Resource>(kind: &'static str, o: &K) -> SpokeObject {
    SpokeObject {
        kind,
        name: o.name_any(),
        uid: o.meta().uid.clone(),
    }
}

/// The uid of an object of the burst cluster's test namespace, `None` when it is absent.
async fn spoke_uid(env: &TestEnv, kind: &str, name: &str) -> Result<Option<String>> {
    let uid = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| meta.uid.clone();
    Ok(match kind {
        "Job" => env
            .spoke_api::<Job>()
            .get_opt(name)
            .await?
            .and_then(|o| uid(&o.metadata)),
        "ConfigMap" => env
            .spoke_api::<ConfigMap>()
            .get_opt(name)
            .await?
            .and_then(|o| uid(&o.metadata)),
        "Secret" => env
            .spoke_api::<Secret>()
            .get_opt(name)
            .await?
            .and_then(|o| uid(&o.metadata)),
        "Service" => env
            .spoke_api::<Service>()
            .get_opt(name)
            .await?
            .and_then(|o| uid(&o.metadata)),
        other => bail!("unexpected kind {other}"),
    })
}

/// Which of `objects` (the very objects, by uid) still exist.
async fn still_there(env: &TestEnv, objects: &[SpokeObject]) -> Result<Vec<String>> {
    let mut left = Vec::new();
    for o in objects {
        let uid = spoke_uid(env, o.kind, &o.name).await?;
        if uid.is_some() && uid == o.uid {
            left.push(format!("{} {}", o.kind, o.name));
        }
    }
    Ok(left)
}

/// `None` while every one of `objects` exists with its uid, else what changed.
async fn same_objects(env: &TestEnv, objects: &[SpokeObject]) -> Result<Option<String>> {
    let mut changed = Vec::new();
    for o in objects {
        match spoke_uid(env, o.kind, &o.name).await? {
            None => changed.push(format!("{} {} was deleted", o.kind, o.name)),
            Some(uid) if Some(&uid) != o.uid.as_ref() => {
                changed.push(format!("{} {} was re-created (uid {uid})", o.kind, o.name))
            }
            Some(_) => {}
        }
    }
    Ok((!changed.is_empty()).then(|| changed.join("; ")))
}

/// Objects of the burst (`flux-framework.org/burst=<burst>`) in the burst cluster of
/// `spoke`.
async fn spoke_objects_of(env: &TestEnv, spoke: &str, burst: &str) -> Result<Vec<String>> {
    let by_label = ListParams::default().labels(&format!("{}={burst}", render::labels::BURST));
    let mut found = Vec::new();
    for o in env.spoke_api_of::<Job>(spoke).list(&by_label).await? {
        found.push(format!("Job {}", o.name_any()));
    }
    for o in env.spoke_api_of::<ConfigMap>(spoke).list(&by_label).await? {
        found.push(format!("ConfigMap {}", o.name_any()));
    }
    for o in env.spoke_api_of::<Secret>(spoke).list(&by_label).await? {
        found.push(format!("Secret {}", o.name_any()));
    }
    for o in env.spoke_api_of::<Service>(spoke).list(&by_label).await? {
        found.push(format!("Service {}", o.name_any()));
    }
    Ok(found)
}

/// A Job's pod selector as a label selector string.
fn job_selector(job: &Job) -> Result<String> {
    job.spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(|s| s.match_labels.as_ref())
        .filter(|l| !l.is_empty())
        .map(|l: &BTreeMap<String, String>| {
            l.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .with_context(|| format!("Job {} has no selector yet", job.name_any()))
}

/// The MiniCluster's status, for waiting messages.
async fn status_of(env: &TestEnv) -> String {
    match env.api::<MiniCluster>().get_opt(NAME).await {
        Ok(Some(mc)) => format!("MiniCluster status:\n{}", yaml(&mc.status)),
        Ok(None) => "the MiniCluster does not exist".into(),
        Err(e) => format!("cannot read the MiniCluster: {e}"),
    }
}

/// The root Job's pods, for waiting messages.
async fn root_pods(env: &TestEnv) -> String {
    let Ok(job) = env.api::<Job>().get(NAME).await else {
        return "(no root Job)\n".into();
    };
    match env.job_pods(&job).await {
        Ok(pods) => pod_summary(&pods),
        Err(e) => format!("(cannot list them: {e:#})\n"),
    }
}

/// Pod phases and the last log lines of started containers in the burst cluster.
async fn pod_report(api: &Api<Pod>, pods: &[Pod]) -> String {
    let mut out = pod_summary(pods);
    for pod in pods.iter().filter(|p| pod_ran(p)) {
        let params = kube::api::LogParams {
            container: Some(NAME.to_string()),
            tail_lines: Some(30),
            ..Default::default()
        };
        let logs = api
            .logs(&pod.name_any(), &params)
            .await
            .unwrap_or_else(|e| format!("(no logs: {e})"));
        out.push_str(&format!("--- logs of {} (tail):\n{logs}\n", pod.name_any()));
    }
    out
}

/// Someone else's objects holding the names of burst `burst` in the burst cluster's test
/// namespace: (kind, name, resourceVersion, uid) of each, as created.
async fn squat(
    env: &TestEnv,
    fed: &Federation,
    burst: &str,
) -> Result<Vec<(&'static str, String, String, String)>> {
    let ns_api: Api<Namespace> = Api::all(env.spoke_client_of(fed.spoke()));
    if ns_api.get_opt(&env.ns).await?.is_none() {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": env.ns}}))?;
        ns_api.create(&Default::default(), &ns).await?;
    }
    let labels = json!({"app.kubernetes.io/managed-by": "someone-else", "owner": "e2e"});
    let pp = Default::default();
    let mut out = Vec::new();
    let rv = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        (
            m.resource_version.clone().unwrap_or_default(),
            m.uid.clone().unwrap_or_default(),
        )
    };
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": format!("{burst}-flux-config"), "labels": labels},
        "data": {"theirs": "precious"},
    }))?;
    let cm = env
        .spoke_api_of::<ConfigMap>(fed.spoke())
        .create(&pp, &cm)
        .await?;
    let (v, u) = rv(&cm.metadata);
    out.push(("ConfigMap", cm.name_any(), v, u));
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{burst}-curve"), "labels": labels},
        "stringData": {"password": "hunter2"},
    }))?;
    let secret = env
        .spoke_api_of::<Secret>(fed.spoke())
        .create(&pp, &secret)
        .await?;
    let (v, u) = rv(&secret.metadata);
    out.push(("Secret", secret.name_any(), v, u));
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": burst, "labels": labels},
        "spec": {"clusterIP": "None", "selector": {"app": "theirs"},
                 "ports": [{"name": "db", "port": 5432}]},
    }))?;
    let svc = env
        .spoke_api_of::<Service>(fed.spoke())
        .create(&pp, &svc)
        .await?;
    let (v, u) = rv(&svc.metadata);
    out.push(("Service", svc.name_any(), v, u));
    // Suspended: it runs nothing, so nothing but a writer changes its resourceVersion.
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": burst, "labels": labels},
        "spec": {"suspend": true, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "theirs", "image": image(), "command": ["true"]}],
        }}},
    }))?;
    let job = env
        .spoke_api_of::<Job>(fed.spoke())
        .create(&pp, &job)
        .await?;
    let (v, u) = rv(&job.metadata);
    out.push(("Job", job.name_any(), v, u));
    // The API server may bump a new Job's resourceVersion once (its controller adds a
    // condition or status); take what it settles on.
    tokio::time::sleep(secs(3)).await;
    for o in &mut out {
        if let Some((v, u)) = spoke_meta(env, fed.spoke(), o.0, &o.1).await? {
            o.2 = v;
            o.3 = u;
        }
    }
    Ok(out)
}

/// (resourceVersion, uid) of an object of the burst cluster's test namespace.
async fn spoke_meta(
    env: &TestEnv,
    spoke: &str,
    kind: &str,
    name: &str,
) -> Result<Option<(String, String)>> {
    let meta = match kind {
        "Job" => env
            .spoke_api_of::<Job>(spoke)
            .get_opt(name)
            .await?
            .map(|o| o.metadata),
        "ConfigMap" => env
            .spoke_api_of::<ConfigMap>(spoke)
            .get_opt(name)
            .await?
            .map(|o| o.metadata),
        "Secret" => env
            .spoke_api_of::<Secret>(spoke)
            .get_opt(name)
            .await?
            .map(|o| o.metadata),
        "Service" => env
            .spoke_api_of::<Service>(spoke)
            .get_opt(name)
            .await?
            .map(|o| o.metadata),
        other => bail!("unexpected kind {other}"),
    };
    Ok(meta.map(|m| {
        (
            m.resource_version.unwrap_or_default(),
            m.uid.unwrap_or_default(),
        )
    }))
}

/// `None` while every squatted object is exactly as created, else what changed.
async fn untouched(
    env: &TestEnv,
    spoke: &str,
    objects: &[(&'static str, String, String, String)],
) -> Result<Option<String>> {
    let mut changed = Vec::new();
    for (kind, name, rv, uid) in objects {
        match spoke_meta(env, spoke, kind, name).await? {
            None => changed.push(format!("{kind} {name} was deleted")),
            Some((v, u)) if (&v, &u) != (rv, uid) => changed.push(format!(
                "{kind} {name} changed (resourceVersion {rv} -> {v}, uid {uid} -> {u})"
            )),
            Some(_) => {}
        }
    }
    Ok((!changed.is_empty()).then(|| changed.join("; ")))
}

async fn names_taken(env: &TestEnv, fed: &Federation) -> Result<()> {
    let mcs = env.api::<MiniCluster>();
    // 1. Every name of the burst taken by someone else.
    let taken = format!("{}-t", burst_name(&env.ns));
    let theirs = squat(env, fed, &taken).await?;
    let doc = minicluster(&taken, fed.spoke(), lead_address_override().as_deref());
    env.apply_minicluster(&doc).await?;
    let message = burst_refused_as_name_taken(env, NAME).await?;
    let (phase, message) = message;
    ensure!(
        phase == "Refused",
        "the refused burst is Refused: {phase}: {message}"
    );
    for (kind, name, _, _) in &theirs {
        ensure!(
            message.contains(&format!("{kind} {}/{name}", env.ns)),
            "the refusal names {kind} {name}: {message}"
        );
    }
    ensure!(
        message.contains("someone-else"),
        "and who owns them: {message}"
    );
    // Several report intervals: still nothing written (not retried every few seconds).
    env.holds_for("the squatted objects untouched", secs(10), async || {
        untouched(env, fed.spoke(), &theirs).await
    })
    .await?;
    eprintln!("{}: refused: {message}", env.ns);
    mcs.delete(NAME, &DeleteParams::background()).await?;
    env.eventually("the MiniCluster gone", secs(120), async || {
        Ok(match mcs.get_opt(NAME).await? {
            None => Probe::Done(()),
            Some(mc) => Probe::Waiting(yaml(&mc.status)),
        })
    })
    .await?;
    tokio::time::sleep(secs(3)).await;
    if let Some(changed) = untouched(env, fed.spoke(), &theirs).await? {
        bail!("deleting the MiniCluster touched someone else's objects: {changed}");
    }

    // 2. A running burst, and a second spoke of this federation (another name) against
    // the same cluster: its first snapshot lists nothing, and deletes nothing of ours.
    let burst = dispatch(env, fed).await?;
    let renamed = format!("{}-renamed", fed.spoke());
    let hub = tokio::task::spawn_blocking(support::hub_binary).await??;
    let out = std::process::Command::new(&hub)
        .arg("certs")
        .arg("--out")
        .arg(&fed.certs)
        .args(["--spoke", &renamed])
        .output()
        .context("running flux-hub certs")?;
    ensure!(
        out.status.success(),
        "flux-hub certs --spoke {renamed}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cluster = support::spoke_cluster_from("SPOKE_KUBECONFIG", "the renamed spoke").await;
    env.attach_spoke(
        &renamed,
        cluster.client,
        cluster.config,
        cluster.kubeconfig,
        vec![
            "--hub".into(),
            fed.hub_url(),
            "--hub-domain".into(),
            "localhost".into(),
            "--name".into(),
            renamed.clone(),
            "--ca".into(),
            fed.file("ca.crt"),
            "--cert".into(),
            fed.file(&format!("spoke-{renamed}.crt")),
            "--key".into(),
            fed.file(&format!("spoke-{renamed}.key")),
        ],
    )?;
    env.start_spoke_of(&renamed).await?;
    let log = support::log_file(&format!("{}-spoke-{renamed}-0.log", env.ns))?;
    env.eventually(
        "the renamed spoke's first snapshot applied",
        secs(60),
        async || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            Ok(if text.contains("snapshot applied") {
                Probe::Done(())
            } else {
                Probe::Waiting(text.lines().rev().take(5).collect::<Vec<_>>().join("\n"))
            })
        },
    )
    .await?;
    env.holds_for(
        "the first spoke's burst objects kept",
        secs(5),
        async || {
            let mut changed = Vec::new();
            for o in &burst.objects {
                match spoke_meta(env, fed.spoke(), o.kind, &o.name).await? {
                    Some((_, uid)) if Some(&uid) == o.uid.as_ref() => {}
                    other => changed.push(format!("{} {}: {other:?}", o.kind, o.name)),
                }
            }
            Ok((!changed.is_empty()).then(|| changed.join("; ")))
        },
    )
    .await?;
    env.stop_spoke_of(&renamed);
    if let Some(changed) = untouched(env, fed.spoke(), &theirs).await? {
        bail!("someone else's objects changed: {changed}");
    }
    eprintln!(
        "{}: spoke {renamed} left spoke {}'s burst {} alone",
        env.ns,
        fed.spoke(),
        burst.name
    );
    Ok(())
}

async fn collide(env: &TestEnv, fed: &Federation) -> Result<()> {
    const SECOND: &str = "second";
    let mcs = env.api::<MiniCluster>();
    let burst = dispatch(env, fed).await?;
    wait_burst_phase(env, "Running", objects_deadline()).await?;
    let mut second = minicluster(&burst.name, fed.spoke(), lead_address_override().as_deref());
    second["metadata"]["name"] = json!(SECOND);
    env.apply_minicluster(&second).await?;
    let (_, message) = burst_refused_as_name_taken(env, SECOND).await?;
    let first_key = format!("{}/{NAME}/{}", env.ns, burst.name);
    ensure!(
        message.contains(&first_key),
        "the refusal names the first MiniCluster's burst {first_key}: {message}"
    );
    eprintln!("{}: the colliding burst was refused: {message}", env.ns);
    let first_running = async || -> Result<Option<String>> {
        let mc = mcs.get(NAME).await?;
        let phase = mc
            .status
            .as_ref()
            .and_then(|s| s.bursts.first())
            .map(|b| b.phase.clone());
        if phase.as_deref() != Some("Running") {
            return Ok(Some(format!("the first burst is {phase:?}")));
        }
        same_objects(env, &burst.objects).await
    };
    env.holds_for(
        "the first MiniCluster's burst keeps running with the same objects",
        secs(10),
        first_running,
    )
    .await?;
    mcs.delete(SECOND, &DeleteParams::background()).await?;
    env.eventually("the second MiniCluster gone", secs(120), async || {
        Ok(match mcs.get_opt(SECOND).await? {
            None => Probe::Done(()),
            Some(mc) => Probe::Waiting(yaml(&mc.status)),
        })
    })
    .await?;
    env.holds_for(
        "the first burst survives the second MiniCluster's deletion",
        secs(5),
        first_running,
    )
    .await
}

async fn large_tenant(env: &TestEnv, fed: &Federation) -> Result<()> {
    let big_bursts: Vec<String> = (0..5).map(|i| format!("big-{i}")).collect();
    let mut bursting = json!({
        "clusters": big_bursts
            .iter()
            .map(|b| json!({"name": b, "size": 1, "cluster": fed.spoke()}))
            .collect::<Vec<_>>(),
    });
    if let Some(address) = lead_address_override() {
        bursting["leadAddress"] = json!(address);
    }
    // 900 kB: the root's ConfigMap (at most 1 MiB) holds it once, with the rest.
    let script = "echo 'one line of a large setup script, repeated'\n".repeat(18_000);
    env.apply_minicluster(&json!({
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": "big"},
        "spec": {
            "size": 1,
            "interactive": true,
            "flux": {"bursting": bursting},
            "containers": [{"image": image(), "commands": {"pre": script}}],
        },
    }))
    .await
    .context("applying the large tenant's MiniCluster")?;
    let jobs = env.spoke_api::<Job>();
    env.eventually(
        "the large tenant's five bursts in the burst cluster",
        objects_deadline(),
        async || {
            let mut missing = Vec::new();
            for b in &big_bursts {
                if jobs.get_opt(b).await?.is_none() {
                    missing.push(b.clone());
                }
            }
            Ok(if missing.is_empty() {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("no Job yet: {missing:?}"))
            })
        },
    )
    .await?;

    // The other tenant: its burst starts, then shrinks to one broker.
    let burst = dispatch(env, fed).await?;
    let mcs = env.api::<MiniCluster>();
    let mut mc = mcs.get(NAME).await?;
    let clusters = &mut mc
        .spec
        .flux
        .as_mut()
        .and_then(|f| f.bursting.as_mut())
        .context("the MiniCluster's bursting")?
        .clusters;
    clusters[0].size = Some(1);
    let patch = json!({"spec": {"flux": {"bursting": {"clusters": clusters}}}});
    mcs.patch(
        NAME,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await?;
    env.eventually(
        "the other tenant's burst Job resized to 1",
        objects_deadline(),
        async || {
            let job = jobs.get_opt(&burst.name).await?;
            let parallelism = job.as_ref().and_then(|j| j.spec.as_ref()?.parallelism);
            Ok(if parallelism == Some(1) {
                Probe::Done(())
            } else {
                Probe::Waiting(format!("parallelism {parallelism:?}"))
            })
        },
    )
    .await?;
    let log = std::fs::read_to_string(support::log_file(&format!(
        "{}-spoke-{}-0.log",
        env.ns,
        fed.spoke()
    ))?)
    .unwrap_or_default();
    ensure!(
        !log.contains("decoded message length too large"),
        "the spoke hit the message limit:\n{log}"
    );
    eprintln!(
        "{}: the other tenant's burst {} resized next to five bursts of a 900 kB spec",
        env.ns, burst.name
    );
    Ok(())
}

/// The phase and message of MiniCluster `name`'s first burst, once the spoke refused it
/// as NameTaken.
async fn burst_refused_as_name_taken(env: &TestEnv, name: &str) -> Result<(String, String)> {
    let mcs = env.api::<MiniCluster>();
    env.eventually(
        &format!("the burst of {name} refused as NameTaken"),
        objects_deadline(),
        async || {
            let mc = mcs.get(name).await?;
            let b = mc.status.as_ref().and_then(|s| s.bursts.first().cloned());
            Ok(match b {
                Some(b)
                    if b.message
                        .as_deref()
                        .is_some_and(|m| m.contains("NameTaken"))
                        && b.reason.as_deref() == Some("NameTaken") =>
                {
                    Probe::Done((b.phase, b.message.unwrap_or_default()))
                }
                _ => Probe::Waiting(yaml(&mc.status)),
            })
        },
    )
    .await
}
