//! `flux-hub run`: the MiniCluster controller process, as its start-up steps:
//!
//! 1. the ops server (`/metrics`, `/healthz`, `/readyz`) and the CRD check;
//! 2. leader election (with `--leader-elect`): a standby waits here, ready;
//! 3. the watches of every managed kind, and the reconcile context;
//! 4. the federation gRPC server (spokes, `flux-hub status`);
//! 5. the federation registry rebuilt from the MiniClusters that exist, once the caches
//!    are synced: only then is this replica ready and labelled as the federation endpoint;
//! 6. the controller, until SIGTERM, lost leadership or the gRPC server ends;
//! 7. the stop: endpoint label cleared, Lease released, servers drained.
//!
//! Size: the seven steps in the order they run, each a function here, so that the start-up
//! and its stop read top to bottom in one place.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use flux_shared::api::MiniCluster;
use flux_shared::federation::tls::{ServerSecurity, TlsPem, TransportSettings};
use flux_shared::ops::health::Health;
use flux_shared::ops::shutdown::Shutdown;
use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector;
use kube::runtime::{Controller, PredicateConfig, WatchStreamExt, controller, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::controller::context::{self, Context};
use crate::controller::federate::rebuild;
use crate::controller::watch::partial_decode::Partial;
use crate::controller::watch::triggers;
use crate::controller::watch::watches::{
    self, LIST_PAGE_SIZE, Watches, list_partial, unwrap_partial,
};
use crate::controller::{GrpcSetup, RunOptions, reconcile};
use crate::federation::Registry;
use crate::ops;
use crate::ops::leader::LeaderElection;
use crate::ops::leader_pod;
use crate::ops::metrics::Metrics;

/// How long a stop waits for reconciles in flight: under the kubelet's default
/// `terminationGracePeriodSeconds` (30), leaving time to release the Lease.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// `flux-hub run`: the MiniCluster controller with its metrics and health server.
pub async fn run(opts: RunOptions) -> anyhow::Result<()> {
    link_malloc_arena_limit();
    flux_shared::ops::logging::init(opts.log_json);
    // Listen once, now: a SIGTERM between two `select!`s below must not be lost.
    let shutdown = Shutdown::listen();
    let grpc_security = opts.grpc_security()?;
    let lead_address = opts.lead_address()?;
    let client = flux_shared::ops::kube_client::infer()
        .await
        .context("set KUBECONFIG or run inside a cluster")?;
    let ops = OpsServer::start(&opts);
    check_crd_installed(&client, opts.namespace.as_deref()).await?;
    check_crd_owner(&client, opts.take_over).await?;

    // A standby replica is healthy and ready (so rollouts and drains proceed). A replica
    // that reconciles (the leader, or the only one without --leader-elect) is ready once
    // its caches are synced and the federation state is rebuilt, not before.
    ops.health.set_ready(opts.leader_elect);
    let identity = opts
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "flux-hub".to_string());
    let endpoint = FederationEndpoint::clear(&client, &opts, &identity).await;
    let election = match elect(&opts, &client, &identity, &shutdown, &ops).await? {
        Elected::Stopped => return Ok(()),
        Elected::Leader(lease) => Some(*lease),
        Elected::Alone => None,
    };

    let ns = opts.namespace.as_deref();
    let Watches {
        stores,
        triggers,
        task: watches,
    } = watches::start(&client, ns, &Arc::default());
    let registry = Registry::new();
    let ctx = Arc::new(
        Context::new(
            client.clone(),
            stores,
            recorder(&client, &identity),
            ops.metrics.clone(),
        )
        .with_federation(
            registry.clone(),
            lead_address,
            Duration::from_secs(opts.burst_deletion_timeout_seconds),
        )
        .with_placement_timeout(Duration::from_secs(opts.placement_timeout_seconds))
        .with_lost_cluster_grace(Duration::from_secs(opts.lost_cluster_grace_seconds))
        .with_image_volumes(flux_shared::ops::ImageVolumeWatch::start(&client)),
    );
    let grpc = serve_federation(&opts, grpc_security, &client, &registry, &ops, &identity).await?;
    let miniclusters: Api<Partial<MiniCluster>> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    tokio::select! {
        () = rebuild_registry(&ctx, &miniclusters) => {
            ops.health.set_ready(true);
            endpoint.mark().await?;
        }
        () = shutdown.requested() => {
            watches.abort();
            ops.stop().await;
            return Ok(());
        }
    }

    let mut grpc = grpc;
    let outcome = run_controller(
        &opts,
        ctx,
        miniclusters,
        &registry,
        triggers,
        &shutdown,
        election.as_ref(),
        grpc.as_mut(),
    )
    .await;
    watches.abort();
    ops.health.set_ready(false);
    endpoint.unmark().await;
    if let Some(lease) = &election {
        lease.release().await;
        ops.metrics.set_leader(false);
    }
    ops.stop().await;
    if let Some(task) = grpc
        && !task.is_finished()
    {
        // Stopped with the ops server's stop signal; wait for streams to close.
        let _ = task.await;
    }
    info!("stopped");
    outcome
}

/// The ops HTTP server, the metrics and health it serves, and the stop signal that also
/// ends the federation gRPC server.
struct OpsServer {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    stop: watch::Sender<bool>,
    task: JoinHandle<std::io::Result<()>>,
}

impl OpsServer {
    fn start(opts: &RunOptions) -> Self {
        let metrics =
            Arc::new(Metrics::new().with_minicluster_labels(opts.metrics_minicluster_labels));
        let health = Arc::new(Health::new());
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(ops::routes::serve(
            opts.metrics_addr,
            metrics.clone(),
            health.clone(),
            async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            },
        ));
        OpsServer {
            metrics,
            health,
            stop,
            task,
        }
    }

    /// Resolves once the stop is signalled.
    fn stopped(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut stopped = self.stop.subscribe();
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }
    }

    /// Signal the stop and wait for the ops server to end.
    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Fail fast, with an install hint, when the CRD is missing.
async fn check_crd_installed(client: &Client, ns: Option<&str>) -> anyhow::Result<()> {
    let probe: Api<MiniCluster> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    match probe.list(&kube::api::ListParams::default().limit(1)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => anyhow::bail!(
            "the MiniCluster CRD is not installed: kubectl apply --server-side -f crds/miniclusters.flux-framework.org.yaml"
        ),
        Err(e) => Err(anyhow::Error::from(e).context("cannot list MiniClusters")),
    }
}

/// Refuse to run beside another controller of MiniClusters: the installed CRD must be
/// flux-hub's ([`crate::controller::coexist::run_check`]), unless `--take-over`. A hub whose
/// RBAC predates the check (it may not read the CRD) says so and runs.
async fn check_crd_owner(client: &Client, take_over: bool) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let meta = match crds.get_metadata_opt(flux_shared::crd::CRD_NAME).await {
        Ok(Some(crd)) => crd.metadata,
        // Missing: check_crd_installed has said so already.
        Ok(None) => return Ok(()),
        Err(kube::Error::Api(e)) if e.code == 403 => {
            tracing::warn!(
                "cannot read the MiniCluster CRD (RBAC from an older install: run flux-hub init again); not checking for another controller of MiniClusters"
            );
            return Ok(());
        }
        Err(e) => return Err(anyhow::Error::from(e).context("reading the MiniCluster CRD")),
    };
    match crate::controller::coexist::run_check(&meta, take_over) {
        Ok(None) => Ok(()),
        Ok(Some(warning)) => {
            tracing::warn!("{warning}");
            Ok(())
        }
        Err(refusal) => anyhow::bail!("{refusal}"),
    }
}

/// This replica's pod as the federation Service's endpoint: only the replica serving gRPC
/// carries the label (none without `--grpc-addr`).
struct FederationEndpoint {
    pods: Option<Api<Pod>>,
    identity: String,
}

impl FederationEndpoint {
    /// Clear a label a previous run of this container may have left.
    async fn clear(client: &Client, opts: &RunOptions, identity: &str) -> Self {
        let endpoint = FederationEndpoint {
            pods: opts
                .grpc_addr
                .map(|_| Api::namespaced(client.clone(), &opts.lease_namespace)),
            identity: identity.to_string(),
        };
        if let Some(pods) = &endpoint.pods
            && let Err(error) = leader_pod::mark(pods, identity, false).await
        {
            warn!(%error, pod = %identity, "cannot clear the federation endpoint label");
        }
        endpoint
    }

    async fn mark(&self) -> anyhow::Result<()> {
        if let Some(pods) = &self.pods {
            leader_pod::mark(pods, &self.identity, true)
                .await
                .context("labelling this pod as the federation endpoint")?;
        }
        Ok(())
    }

    /// Clear the label on the way out, bounded: a stop must not hang on it.
    async fn unmark(&self) {
        if let Some(pods) = &self.pods {
            let unmark = leader_pod::mark(pods, &self.identity, false);
            match tokio::time::timeout(Duration::from_secs(5), unmark).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => warn!(%error, "cannot clear the federation endpoint label"),
                Err(_) => warn!("timed out clearing the federation endpoint label"),
            }
        }
    }
}

/// The outcome of leader election.
enum Elected {
    /// No `--leader-elect`: this replica reconciles.
    Alone,
    /// This replica holds the Lease.
    Leader(Box<LeaderElection>),
    /// Stopped while waiting as a standby.
    Stopped,
}

/// With `--leader-elect`, wait (ready, as a standby) until this replica holds the Lease.
async fn elect(
    opts: &RunOptions,
    client: &Client,
    identity: &str,
    shutdown: &Shutdown,
    ops: &OpsServer,
) -> anyhow::Result<Elected> {
    if !opts.leader_elect {
        return Ok(Elected::Alone);
    }
    let lease = LeaderElection::new(
        Api::namespaced(client.clone(), &opts.lease_namespace),
        &opts.lease_name,
        identity,
    );
    info!(lease = %opts.lease_name, %identity, "waiting for leadership");
    tokio::select! {
        acquired = lease.acquire() => acquired.context("leader election")?,
        () = shutdown.requested() => return Ok(Elected::Stopped),
    }
    ops.metrics.set_leader(true);
    ops.health.set_ready(false);
    info!("leading");
    Ok(Elected::Leader(Box::new(lease)))
}

fn recorder(client: &Client, identity: &str) -> Recorder {
    Recorder::new(
        client.clone(),
        Reporter {
            controller: context::MANAGER.into(),
            instance: Some(identity.to_string()),
        },
    )
}

type GrpcTask = JoinHandle<Result<(), crate::server::service::ServeError>>;

/// The federation gRPC server, when `--grpc-addr` is set; it ends with the ops server's
/// stop signal. With its certificate files still missing it listens once they exist
/// (checked every [`crate::server::service::TLS_RELOAD_INTERVAL`]).
async fn serve_federation(
    opts: &RunOptions,
    setup: Option<GrpcSetup>,
    client: &Client,
    registry: &Arc<Registry>,
    ops: &OpsServer,
    identity: &str,
) -> anyhow::Result<Option<GrpcTask>> {
    let (Some(addr), Some(setup)) = (opts.grpc_addr, setup) else {
        return Ok(None);
    };
    let (pins, revocations, grants, spoke_events) = if opts.insecure {
        (
            crate::server::pin_store::PinStore::off(),
            crate::server::revocations::Revocations::off(),
            crate::server::label_grants::GrantStore::off(),
            None,
        )
    } else {
        let (namespace, name) = opts.spoke_pins()?;
        info!(pins = %format!("{namespace}/{name}"), "spoke certificates are checked against their pins");
        let pins = crate::server::pin_store::PinStore::watch(client.clone(), &namespace, &name)
            .requiring(!opts.allow_unpinned_spokes);
        let spoke_events = crate::server::spoke_events::SpokeEvents::on_config_map(
            recorder(client, identity),
            &namespace,
            &name,
        );
        let (namespace, name) = opts.revoked_admins()?;
        info!(revoked = %format!("{namespace}/{name}"), "admin certificates are checked against their revocations");
        let revoked =
            crate::server::revocations::Revocations::watch(client.clone(), &namespace, &name);
        let (namespace, name) = opts.spoke_labels()?;
        info!(grants = %format!("{namespace}/{name}"), "spokes are selected by the labels granted them there");
        let grants =
            crate::server::label_grants::GrantStore::watch(client.clone(), &namespace, &name);
        (pins, revoked, grants, Some(spoke_events))
    };
    // No spoke is let in before the registry knows whose word its labels are.
    registry.set_label_grants(grants.current());
    tokio::spawn(grants.follow(registry.clone()));
    let tls_files = opts.tls.files().ok().filter(|_| !opts.insecure);
    let start = {
        let (client, registry, metrics) = (client.clone(), registry.clone(), ops.metrics.clone());
        let (namespace, stop, stopped) =
            (opts.namespace.clone(), ops.stop.subscribe(), ops.stopped());
        let (insecure, relay_mib) = (opts.insecure, opts.relay_mib_per_second);
        move |security: ServerSecurity, listener: tokio::net::TcpListener| {
            info!(%addr, insecure, "federation gRPC server listening");
            if let ServerSecurity::Mtls(pem) = &security {
                crate::server::service::serving_certificates(pem, &metrics, registry.as_ref());
            }
            let mut services = crate::server::service::Services::new(
                registry,
                security.authenticator(),
                metrics,
                client,
            );
            if let Some(events) = spoke_events.clone() {
                services = services.with_spoke_events(events);
            }
            let services = services
                .in_namespace(namespace)
                .with_stop(stop)
                .with_pins(pins)
                .with_label_grants(grants)
                .with_revocations(revocations)
                .with_relay_timeouts(crate::server::relay::Timeouts {
                    rates: crate::server::relay::Rates::default().with_mib_per_second(relay_mib),
                    ..Default::default()
                });
            crate::server::service::serve(
                listener,
                security,
                tls_files,
                TransportSettings::default(),
                services,
                stopped,
            )
        }
    };
    match setup {
        GrpcSetup::Serve(security) => {
            let listener = crate::server::service::bind(addr).await?;
            Ok(Some(tokio::spawn(start(security, listener))))
        }
        GrpcSetup::AwaitFiles(files) => {
            info!(
                ca = %files.ca.display(),
                cert = %files.cert.display(),
                key = %files.key.display(),
                "no federation certificates yet: MiniClusters run in this cluster, and the federation gRPC server starts once they exist (flux-hub init --hub-dns/--hub-ip creates them)"
            );
            let mut stop = ops.stop.subscribe();
            Ok(Some(tokio::spawn(async move {
                let interval = crate::server::service::TLS_RELOAD_INTERVAL;
                let mut reported: Option<String> = None;
                let pem = loop {
                    tokio::select! {
                        () = tokio::time::sleep(interval) => {}
                        _ = stop.wait_for(|s| *s) => return Ok(()),
                    }
                    match TlsPem::from_files(&files.ca, &files.cert, &files.key) {
                        Ok(pem) => break pem,
                        // Some there, some not (a Secret being written), or not loading:
                        // said once, then checked again.
                        Err(error)
                            if [&files.ca, &files.cert, &files.key]
                                .iter()
                                .any(|p| p.exists()) =>
                        {
                            let error = error.to_string();
                            if reported.as_deref() != Some(error.as_str()) {
                                tracing::warn!(%error, "the federation certificate files do not load yet");
                                reported = Some(error);
                            }
                        }
                        Err(_) => {}
                    }
                };
                info!("federation certificates found");
                let listener = crate::server::service::bind(addr).await?;
                start(ServerSecurity::Mtls(pem), listener).await
            })))
        }
    }
}

/// Rebuild the federation state before the first reconcile: spokes are let in only once
/// the registry holds what they ran before, and no reconcile races the rebuild.
async fn rebuild_registry(ctx: &Context, miniclusters: &Api<Partial<MiniCluster>>) {
    ctx.stores.wait_until_ready().await;
    info!("caches synced");
    let mut delay = Duration::from_secs(1);
    loop {
        match list_partial(miniclusters).await {
            Ok(all) => return rebuild::prime(ctx, &all),
            Err(error) => {
                error!(%error, "cannot list MiniClusters to rebuild the federation state; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(60));
            }
        }
    }
}

/// Run the controller until it ends, SIGTERM (bounded by [`SHUTDOWN_GRACE`]), lost
/// leadership or the federation gRPC server's end.
#[allow(clippy::too_many_arguments)]
async fn run_controller(
    opts: &RunOptions,
    ctx: Arc<Context>,
    miniclusters: Api<Partial<MiniCluster>>,
    registry: &Arc<Registry>,
    triggers: watches::Triggers,
    shutdown: &Shutdown,
    election: Option<&LeaderElection>,
    grpc: Option<&mut GrpcTask>,
) -> anyhow::Result<()> {
    // The MiniCluster watch: a deleted MiniCluster leaves the registry (and admin listings)
    // here, since no reconcile runs for an object that is gone.
    let (mc_store, mc_writer) = reflector::store();
    let forget = ctx.clone();
    let mc_events = watcher(
        miniclusters,
        watcher::Config::default().page_size(LIST_PAGE_SIZE),
    )
    .backoff(flux_shared::ops::WatchBackoff::default())
    .map_ok(unwrap_partial)
    .reflect(mc_writer)
    .inspect(move |event| {
        if let Ok(watcher::Event::Delete(mc)) = event {
            forget.forget(&flux_shared::federation::McKey::new(
                mc.namespace().unwrap_or_default(),
                mc.name_any(),
            ));
        }
    })
    .applied_objects()
    .predicate_filter(triggers::minicluster, PredicateConfig::default());
    let changes = registry
        .take_changes()
        .map(tokio_stream::wrappers::UnboundedReceiverStream::new)
        .context("the federation registry's change stream was taken twice")?
        .map(|mc| reflector::ObjectRef::<MiniCluster>::new(&mc.name).within(&mc.namespace));
    // MiniClusters refused for a taken name, whose blocking object changed or went.
    let unblocked = ctx
        .blockers
        .take_woken()
        .map(tokio_stream::wrappers::UnboundedReceiverStream::new)
        .context("the blockers' wake stream was taken twice")?
        .map(|mc| reflector::ObjectRef::<MiniCluster>::new(&mc.name).within(&mc.namespace));
    let changes = futures::stream::select(changes, unblocked);
    let mc_synced = mc_store.clone();
    let autoscaler = crate::controller::autoscaler::run(
        ctx.clone(),
        mc_store.clone(),
        opts.allow_queue_reporter_annotation,
    );
    let controller = Controller::for_stream(mc_events, mc_store)
        .with_config(controller::Config::default().concurrency(opts.concurrency))
        .owns_shared_stream(triggers.jobs)
        .owns_shared_stream(triggers.secrets)
        .owns_shared_stream(triggers.config_maps)
        .owns_shared_stream(triggers.services)
        // Broker pods belong to the Job, not to the MiniCluster: map them by label.
        .watches_shared_stream(triggers.pods, |pod| triggers::pod_owner(&pod))
        .reconcile_on(changes)
        .graceful_shutdown_on({
            let shutdown = shutdown.clone();
            async move { shutdown.requested().await }
        })
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile error");
            }
        });
    let lost = async {
        match election {
            Some(lease) => lease.hold().await.map_err(anyhow::Error::from),
            None => std::future::pending().await,
        }
    };
    let grpc_ended = async {
        match grpc {
            Some(task) => match task.await {
                Ok(Ok(())) => anyhow::bail!("the federation gRPC server stopped"),
                Ok(Err(e)) => Err(anyhow::Error::from(e)),
                Err(e) => Err(anyhow::Error::from(e).context("federation gRPC server task")),
            },
            None => std::future::pending().await,
        }
    };
    // kube's controller starts no reconcile before the MiniCluster cache is synced, and its
    // graceful shutdown ends the watch that would sync it: a stop requested before then
    // would wait forever. Stop at once in that case (nothing runs), and never wait longer
    // than the kubelet's grace period for reconciles in flight.
    let forced_stop = async {
        shutdown.requested().await;
        let synced = mc_synced
            .wait_until_ready()
            .now_or_never()
            .is_some_and(|ready| ready.is_ok());
        if synced {
            tokio::time::sleep(SHUTDOWN_GRACE).await;
            warn!(grace = ?SHUTDOWN_GRACE, "reconciles still running; stopping without them");
        } else {
            info!("stopping before the MiniCluster cache synced");
        }
    };
    tokio::select! {
        () = controller => Ok(()),
        () = autoscaler => Ok(()),
        () = forced_stop => Ok(()),
        result = lost => result.context("lost leadership; exiting so another replica takes over"),
        result = grpc_ended => result,
    }
}

/// Limits glibc's malloc to one arena. By default every thread that allocates gets its
/// own arena (up to eight per core), and memory freed in one arena is not reused by
/// another: the caches, filled by whichever worker thread polled the watch, left the
/// hub's resident memory well above its live heap. The tokio workers share one arena
/// (each keeps its per-thread cache), so reconciles are not slowed. It runs before
/// `main` (from `.init_array`): a thread that allocated before would keep its own arena.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" fn limit_malloc_arenas() {
    unsafe extern "C" {
        fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
    }
    /// `M_ARENA_MAX` in glibc's malloc.h.
    const M_ARENA_MAX: std::ffi::c_int = -8;
    // SAFETY: mallopt only sets a malloc tunable, here before any thread is started.
    unsafe {
        mallopt(M_ARENA_MAX, 1);
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[used]
#[unsafe(link_section = ".init_array")]
static LIMIT_MALLOC_ARENAS: extern "C" fn() = limit_malloc_arenas;

/// Keeps [`LIMIT_MALLOC_ARENAS`] in every binary that can run the controller: a static
/// of a library is linked in only if something refers to it.
fn link_malloc_arena_limit() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: a plain read of an initialized static.
    let _ = unsafe { std::ptr::read_volatile(&raw const LIMIT_MALLOC_ARENAS) };
}
