//! The MiniCluster controller (`flux-hub run`).

pub mod permissions;

use std::net::SocketAddr;
use std::path::PathBuf;

use flux_shared::federation::tls::{ServerSecurity, TlsPem, TransportSettings};

/// Flags of `flux-hub run`.
#[derive(Clone, Debug, clap::Args)]
pub struct RunOptions {
    /// Watch MiniClusters in this namespace only (default: every namespace).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Address of the HTTP server for /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Take a coordination.k8s.io Lease before reconciling, so several replicas can run.
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace of the leader election Lease (the hub's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "flux-operator-system")]
    pub lease_namespace: String,
    /// Name of the leader election Lease.
    #[arg(long, default_value = "flux-hub")]
    pub lease_name: String,
    /// Identity of this replica in the Lease (default: the pod name or host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Log JSON lines instead of human-readable text.
    #[arg(long)]
    pub log_json: bool,
    /// How many MiniClusters are reconciled at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: u16,
    /// Address of the federation gRPC server (spokes and `flux-hub status`); without it
    /// no spoke can connect and bursts stay Unreachable.
    #[arg(long, env = "FLUX_GRPC_ADDR")]
    pub grpc_addr: Option<SocketAddr>,
    /// CA certificate (PEM) that issued spoke and admin client certificates.
    #[arg(long, env = "FLUX_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// The hub's server certificate (PEM), from `flux-hub certs`.
    #[arg(long, env = "FLUX_CERT", value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// The hub's server key (PEM).
    #[arg(long, env = "FLUX_KEY", value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// LOCAL DEVELOPMENT ONLY: serve gRPC in plaintext; callers name themselves, so anyone
    /// who can reach the port can act as any spoke and read every curve certificate.
    #[arg(long, conflicts_with_all = ["ca", "cert", "key"])]
    pub insecure: bool,
    /// Address burst brokers reach the lead broker's NodePort at, for MiniClusters that do
    /// not set spec.flux.bursting.leadAddress (default: the lead pod's node address).
    #[arg(long, env = "FLUX_LEAD_BROKER_ADDRESS")]
    pub lead_broker_address: Option<String>,
    /// How long a deleted MiniCluster with bursts waits for every spoke to confirm its
    /// burst deleted before the finalizer is released anyway (with a Warning Event).
    #[arg(long, default_value_t = 300)]
    pub burst_deletion_timeout_seconds: u64,
}

impl RunOptions {
    /// The gRPC server's security, when the server is enabled; errors name the flag.
    pub fn grpc_security(&self) -> anyhow::Result<Option<ServerSecurity>> {
        if self.grpc_addr.is_none() {
            if self.insecure || self.ca.is_some() || self.cert.is_some() || self.key.is_some() {
                anyhow::bail!(
                    "--ca, --cert, --key and --insecure configure the gRPC server: set --grpc-addr too"
                );
            }
            return Ok(None);
        }
        if self.insecure {
            return Ok(Some(ServerSecurity::InsecureDevelopment));
        }
        match (&self.ca, &self.cert, &self.key) {
            (Some(ca), Some(cert), Some(key)) => Ok(Some(ServerSecurity::Mtls(
                TlsPem::from_files(ca, cert, key).context("loading the gRPC server's TLS files")?,
            ))),
            _ => anyhow::bail!(
                "--grpc-addr needs --ca, --cert and --key (from `flux-hub certs`), or --insecure for local development"
            ),
        }
    }

    /// `--lead-broker-address`, checked.
    pub fn lead_address(&self) -> anyhow::Result<Option<String>> {
        match &self.lead_broker_address {
            Some(a) if !flux_shared::validate::is_host_address(a) => {
                anyhow::bail!("--lead-broker-address {a:?}: must be an IP address or a DNS name")
            }
            other => Ok(other.clone()),
        }
    }
}

mod apply;
pub mod cache;
pub mod context;
mod desired;
pub mod diff;
mod events;
mod federate;
mod finalize;
pub mod orphans;
pub mod ownership;
pub mod partial_decode;
mod pod_labels;
pub mod rebuild;
pub mod reconcile;
pub mod sizing;
pub mod status;
mod status_write;
pub mod triggers;
mod validate;

use std::sync::Arc;

use anyhow::Context as _;
use flux_shared::api::MiniCluster;
use flux_shared::render::labels;
use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{Controller, PredicateConfig, WatchStreamExt, controller, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use partial_decode::{Partial, Selection};
use tracing::{error, info, warn};

use crate::ops;
use crate::ops::leader_pod;

/// Size of the buffer between a shared watch and its subscribers.
const SHARED_BUFFER: usize = 256;

/// Objects per page of every initial LIST (the watches' and the federation rebuild's).
/// A page is deserialized whole, before the cache compacts its objects one by one: at
/// kube's default of 500, the pages of the five watches listed at once (whole Jobs,
/// ConfigMaps, Secrets, Services, Pods with their managedFields) more than doubled the
/// hub's start-up memory with 1,000 MiniClusters. Local round trips are cheap.
const LIST_PAGE_SIZE: u32 = 25;

/// How long a stop waits for reconciles in flight: under the kubelet's default
/// `terminationGracePeriodSeconds` (30), leaving time to release the Lease.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(20);

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

/// Watch one kind of managed object (only ours, by `selector`) into a shared cache,
/// decoding only the fields `S` selects; returns the cache, a trigger stream for the
/// controller and the future driving the watch.
fn shared_watch<K, S>(
    client: &Client,
    namespace: Option<&str>,
    selector: &str,
) -> (
    Store<K>,
    impl futures::Stream<Item = Arc<K>> + Send + 'static,
    impl std::future::Future<Output = ()> + Send + 'static,
)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + DeserializeOwned
        + cache::Compact
        + Send
        + Sync
        + 'static,
    S: Selection + 'static,
{
    let api: Api<Partial<K, S>> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let (reader, writer) = reflector::store_shared(SHARED_BUFFER);
    let subscriber = writer
        .subscribe()
        .expect("a shared store always has subscribers");
    let config = watcher::Config::default()
        .labels(selector)
        .page_size(LIST_PAGE_SIZE);
    let driver = watcher(api, config)
        .default_backoff()
        .map_ok(unwrap_partial)
        .modify(cache::Compact::compact)
        .reflect_shared(writer)
        .for_each(|event| async move {
            if let Err(error) = event {
                error!(%error, kind = %K::kind(&()), "watch error");
            }
        });
    (reader, subscriber, driver)
}

/// The watch event of a partially decoded object, as one of the object itself.
fn unwrap_partial<K, S>(event: watcher::Event<Partial<K, S>>) -> watcher::Event<K> {
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(o.into_inner()),
        watcher::Event::Delete(o) => watcher::Event::Delete(o.into_inner()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(o.into_inner()),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Every MiniCluster, listed page by page, without their managedFields (never read, and
/// most of a small object's size).
async fn list_partial(
    miniclusters: &Api<Partial<MiniCluster>>,
) -> Result<Vec<MiniCluster>, kube::Error> {
    let mut all = Vec::new();
    let mut params = kube::api::ListParams::default().limit(LIST_PAGE_SIZE);
    loop {
        let page = miniclusters.list(&params).await?;
        all.extend(page.items.into_iter().map(Partial::into_inner));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(all),
        }
    }
}

/// `flux-hub run`: the MiniCluster controller with its metrics and health server.
pub async fn run(opts: RunOptions) -> anyhow::Result<()> {
    link_malloc_arena_limit();
    flux_shared::ops::logging::init(opts.log_json);
    // Listen once, now: a SIGTERM between two `select!`s below must not be lost.
    let shutdown = flux_shared::ops::shutdown::Shutdown::listen();
    let grpc_security = opts.grpc_security()?;
    let lead_address = opts.lead_address()?;
    let client = Client::try_default()
        .await
        .context("no Kubernetes configuration: set KUBECONFIG or run inside a cluster")?;
    let metrics = Arc::new(ops::metrics::Metrics::new());
    let health = Arc::new(flux_shared::ops::health::Health::new());
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let stopped = async move {
        let _ = stop_rx.wait_for(|stop| *stop).await;
    };
    let server = tokio::spawn(ops::server::serve(
        opts.metrics_addr,
        metrics.clone(),
        health.clone(),
        stopped,
    ));

    // Fail fast with an install hint when the CRD is missing.
    let probe: Api<MiniCluster> = match opts.namespace.as_deref() {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    match probe.list(&kube::api::ListParams::default().limit(1)).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => anyhow::bail!(
            "the MiniCluster CRD is not installed: kubectl apply --server-side -f crds/miniclusters.flux-framework.org.yaml"
        ),
        Err(e) => return Err(anyhow::Error::from(e).context("cannot list MiniClusters")),
    }

    // A standby replica is healthy and ready (so rollouts and drains proceed). A replica
    // that reconciles (the leader, or the only one without --leader-elect) is ready once
    // its caches are synced and the federation state is rebuilt, not before.
    health.set_ready(opts.leader_elect);
    let identity = opts
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "flux-hub".to_string());
    // Only the replica serving gRPC carries the federation Service's label; clear one a
    // previous run of this container may have left.
    let endpoint_pods: Option<Api<Pod>> = opts
        .grpc_addr
        .map(|_| Api::namespaced(client.clone(), &opts.lease_namespace));
    if let Some(pods) = &endpoint_pods
        && let Err(error) = leader_pod::mark(pods, &identity, false).await
    {
        warn!(%error, pod = %identity, "cannot clear the federation endpoint label");
    }
    let election = if opts.leader_elect {
        let lease = ops::leader::LeaderElection::new(
            Api::namespaced(client.clone(), &opts.lease_namespace),
            &opts.lease_name,
            &identity,
        );
        info!(lease = %opts.lease_name, %identity, "waiting for leadership");
        tokio::select! {
            acquired = lease.acquire() => acquired.context("leader election")?,
            () = shutdown.requested() => return Ok(()),
        }
        metrics.set_leader(true);
        health.set_ready(false);
        info!("leading");
        Some(lease)
    } else {
        None
    };

    let ns = opts.namespace.as_deref();
    let ours = format!("{}={}", labels::MANAGED_BY, labels::MANAGER);
    let (jobs, job_events, jobs_watch) = shared_watch::<Job, Job>(&client, ns, &ours);
    let (secrets, secret_events, secrets_watch) =
        shared_watch::<Secret, Secret>(&client, ns, &ours);
    let (config_maps, cm_events, cms_watch) =
        shared_watch::<ConfigMap, ConfigMap>(&client, ns, &ours);
    let (services, svc_events, svcs_watch) = shared_watch::<Service, Service>(&client, ns, &ours);
    // Pods of our Jobs (the Job controller labels them with the Job's name) are read for
    // a few fields only; the hub's own services pods are compared whole.
    let (broker_pods, broker_pod_events, broker_pods_watch) = shared_watch::<Pod, cache::BrokerPod>(
        &client,
        ns,
        &format!("{ours},{}", cache::JOB_NAME_LABEL),
    );
    let (pods, services_pod_events, pods_watch) =
        shared_watch::<Pod, Pod>(&client, ns, &format!("{ours},!{}", cache::JOB_NAME_LABEL));
    let pod_events = futures::stream::select(broker_pod_events, services_pod_events);
    let stores = context::Stores {
        jobs,
        secrets,
        config_maps,
        services,
        broker_pods,
        pods,
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: context::MANAGER.into(),
            instance: Some(identity.clone()),
        },
    );
    let registry = crate::federation::Registry::new();
    let changes = registry
        .take_changes()
        .map(tokio_stream::wrappers::UnboundedReceiverStream::new)
        .context("the federation registry's change stream was taken twice")?
        .map(|(ns, name)| reflector::ObjectRef::<MiniCluster>::new(&name).within(&ns));
    let ctx = Arc::new(
        context::Context::new(client.clone(), stores.clone(), recorder, metrics.clone())
            .with_federation(
                registry.clone(),
                lead_address,
                std::time::Duration::from_secs(opts.burst_deletion_timeout_seconds),
            ),
    );
    let grpc = match (opts.grpc_addr, grpc_security) {
        (Some(addr), Some(security)) => {
            let listener = crate::federation::service::bind(addr).await?;
            info!(%addr, insecure = opts.insecure, "federation gRPC server listening");
            let services = crate::federation::service::Services::new(
                registry.clone(),
                security.authenticator(),
                metrics.clone(),
            )
            .with_stop(stop_tx.subscribe());
            let mut stop = stop_tx.subscribe();
            Some(tokio::spawn(crate::federation::service::serve(
                listener,
                security,
                TransportSettings::default(),
                services,
                async move {
                    let _ = stop.wait_for(|stop| *stop).await;
                },
            )))
        }
        _ => None,
    };
    let miniclusters: Api<Partial<MiniCluster>> = match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let watches = tokio::spawn(futures::future::join(
        futures::future::join5(jobs_watch, secrets_watch, cms_watch, svcs_watch, pods_watch),
        broker_pods_watch,
    ));
    // Rebuild the federation state before the first reconcile: spokes are let in only once
    // the registry holds what they ran before, and no reconcile races the rebuild.
    let rebuild = async {
        stores.wait_until_ready().await;
        info!("caches synced");
        let mut delay = std::time::Duration::from_secs(1);
        loop {
            match list_partial(&miniclusters).await {
                Ok(all) => break rebuild::prime(&ctx, &all),
                Err(error) => {
                    error!(%error, "cannot list MiniClusters to rebuild the federation state; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(std::time::Duration::from_secs(60));
                }
            }
        }
    };
    tokio::select! {
        () = rebuild => {
            health.set_ready(true);
            if let Some(pods) = &endpoint_pods {
                leader_pod::mark(pods, &identity, true)
                    .await
                    .context("labelling this pod as the federation endpoint")?;
            }
        }
        () = shutdown.requested() => {
            watches.abort();
            let _ = stop_tx.send(true);
            let _ = server.await;
            return Ok(());
        }
    }

    // The MiniCluster watch: a deleted MiniCluster leaves the registry (and admin listings)
    // here, since no reconcile runs for an object that is gone.
    let (mc_store, mc_writer) = reflector::store();
    let forget = registry.clone();
    let mc_events = watcher(
        miniclusters,
        watcher::Config::default().page_size(LIST_PAGE_SIZE),
    )
    .default_backoff()
    .map_ok(unwrap_partial)
    .reflect(mc_writer)
    .inspect(move |event| {
        if let Ok(watcher::Event::Delete(mc)) = event {
            forget.forget(&(mc.namespace().unwrap_or_default(), mc.name_any()));
        }
    })
    .applied_objects()
    .predicate_filter(triggers::minicluster, PredicateConfig::default());
    // Only pod events that change what a reconcile reads (triggers::PodFilter).
    let mut pod_filter = triggers::PodFilter::default();
    let pod_events = pod_events.filter(move |pod| {
        futures::future::ready(triggers::pod_owner(pod).is_some() && pod_filter.pass(pod))
    });
    let mc_synced = mc_store.clone();
    let controller = Controller::for_stream(mc_events, mc_store)
        .with_config(controller::Config::default().concurrency(opts.concurrency))
        .owns_shared_stream(job_events)
        .owns_shared_stream(secret_events)
        .owns_shared_stream(cm_events)
        .owns_shared_stream(svc_events)
        // Broker pods belong to the Job, not to the MiniCluster: map them by label.
        .watches_shared_stream(pod_events, |pod| triggers::pod_owner(&pod))
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
        match &election {
            Some(lease) => lease.hold().await.map_err(anyhow::Error::from),
            None => std::future::pending().await,
        }
    };
    let mut grpc = grpc;
    let grpc_ended = async {
        match grpc.as_mut() {
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
    let outcome = tokio::select! {
        () = controller => Ok(()),
        () = forced_stop => Ok(()),
        result = lost => result.context("lost leadership; exiting so another replica takes over"),
        result = grpc_ended => result,
    };
    watches.abort();
    health.set_ready(false);
    if let Some(pods) = &endpoint_pods {
        let unmark = leader_pod::mark(pods, &identity, false);
        match tokio::time::timeout(std::time::Duration::from_secs(5), unmark).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => warn!(%error, "cannot clear the federation endpoint label"),
            Err(_) => warn!("timed out clearing the federation endpoint label"),
        }
    }
    if let Some(lease) = &election {
        lease.release().await;
        metrics.set_leader(false);
    }
    let _ = stop_tx.send(true);
    let _ = server.await;
    if let Some(task) = grpc
        && !task.is_finished()
    {
        // Stopped by stop_tx above; wait for streams to close.
        let _ = task.await;
    }
    info!("stopped");
    outcome
}
