//! The watches that feed the hub's caches and wake its reconciles: one per kind of
//! managed object, each decoding only what its cache keeps (`partial_decode`, `cache`).

use std::sync::Arc;

use flux_shared::api::MiniCluster;
use flux_shared::render::labels;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tracing::error;

use super::cache;
use super::context::Stores;
use super::partial_decode::{Partial, Selection};

/// Size of the buffer between a shared watch and its subscribers.
const SHARED_BUFFER: usize = 256;

/// Objects per page of every initial LIST (the watches' and the federation rebuild's).
/// A page is deserialized whole, before the cache compacts its objects one by one: at
/// kube's default of 500, the pages of the five watches listed at once (whole Jobs,
/// ConfigMaps, Secrets, Services, Pods with their managedFields) more than doubled the
/// hub's start-up memory with 1,000 MiniClusters. Local round trips are cheap.
pub(super) const LIST_PAGE_SIZE: u32 = 25;

/// An event stream that wakes reconciles.
pub(super) type Events<K> = std::pin::Pin<Box<dyn futures::Stream<Item = Arc<K>> + Send>>;

/// The caches of the managed objects, the streams that wake reconciles on their changes,
/// and the task driving the watches.
pub(super) struct Watches {
    /// The caches.
    pub stores: Stores,
    /// What wakes reconciles.
    pub triggers: Triggers,
    /// Drives every watch; aborted at stop.
    pub task: tokio::task::JoinHandle<()>,
}

/// The changes of each managed kind, as they reach the caches.
pub(super) struct Triggers {
    /// Jobs.
    pub jobs: Events<Job>,
    /// Secrets.
    pub secrets: Events<Secret>,
    /// ConfigMaps.
    pub config_maps: Events<ConfigMap>,
    /// Services.
    pub services: Events<Service>,
    /// Broker pods and services pods.
    pub pods: Events<Pod>,
}

/// Start the watches of every managed kind (only the hub's objects, by label).
pub(super) fn start(client: &Client, ns: Option<&str>) -> Watches {
    let ours = format!("{}={}", labels::MANAGED_BY, labels::MANAGER);
    let (jobs, job_events, jobs_watch) = shared_watch::<Job, Job>(client, ns, &ours);
    let (secrets, secret_events, secrets_watch) = shared_watch::<Secret, Secret>(client, ns, &ours);
    let (config_maps, cm_events, cms_watch) =
        shared_watch::<ConfigMap, ConfigMap>(client, ns, &ours);
    let (services, svc_events, svcs_watch) = shared_watch::<Service, Service>(client, ns, &ours);
    // Pods of our Jobs (the Job controller labels them with the Job's name) are read for
    // a few fields only; the hub's own services pods are compared whole.
    let (broker_pods, broker_pod_events, broker_pods_watch) = shared_watch::<Pod, cache::BrokerPod>(
        client,
        ns,
        &format!("{ours},{}", cache::JOB_NAME_LABEL),
    );
    let (pods, services_pod_events, pods_watch) =
        shared_watch::<Pod, Pod>(client, ns, &format!("{ours},!{}", cache::JOB_NAME_LABEL));
    let task = tokio::spawn(async move {
        futures::future::join(
            futures::future::join5(jobs_watch, secrets_watch, cms_watch, svcs_watch, pods_watch),
            broker_pods_watch,
        )
        .await;
    });
    Watches {
        stores: Stores {
            jobs,
            secrets,
            config_maps,
            services,
            broker_pods,
            pods,
        },
        triggers: Triggers {
            jobs: job_events.boxed(),
            secrets: secret_events.boxed(),
            config_maps: cm_events.boxed(),
            services: svc_events.boxed(),
            pods: futures::stream::select(broker_pod_events, services_pod_events).boxed(),
        },
        task,
    }
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
pub(super) fn unwrap_partial<K, S>(event: watcher::Event<Partial<K, S>>) -> watcher::Event<K> {
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
pub(super) async fn list_partial(
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
