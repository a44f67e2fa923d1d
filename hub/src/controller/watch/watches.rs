//! The watches that feed the hub's caches and wake its reconciles: one per kind of
//! managed object, each decoding only what its cache keeps (`partial_decode`, `cache`).

use std::sync::Arc;

use flux_shared::api::MiniCluster;
use flux_shared::render::labels;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tracing::error;

use crate::controller::watch::broker_pods::{self, BrokerPodsWriter};
use crate::controller::watch::cache;
use crate::controller::watch::echoes::Echoes;
use crate::controller::watch::partial_decode::{Partial, Selection};
use crate::controller::watch::stores::Stores;
use crate::controller::watch::triggers;

/// Objects waiting for the controller to take them (a full buffer holds the watch back).
const WAKE_BUFFER: usize = 256;

/// Objects per page of every initial LIST (the watches' and the federation rebuild's).
/// A page is deserialized whole, before the cache compacts its objects one by one: at
/// kube's default of 500, the pages of the five watches listed at once (whole Jobs,
/// ConfigMaps, Secrets, Services, Pods with their managedFields) more than doubled the
/// hub's start-up memory with 1,000 MiniClusters. Local round trips are cheap.
pub(in crate::controller) const LIST_PAGE_SIZE: u32 = 25;

/// An event stream that wakes reconciles.
pub(in crate::controller) type Events<K> =
    std::pin::Pin<Box<dyn futures::Stream<Item = Arc<K>> + Send>>;

/// The caches of the managed objects, the streams that wake reconciles on their changes,
/// and the task driving the watches.
pub(in crate::controller) struct Watches {
    /// The caches.
    pub stores: Stores,
    /// What wakes reconciles.
    pub triggers: Triggers,
    /// Drives every watch; aborted at stop.
    pub task: tokio::task::JoinHandle<()>,
}

/// The changes of each managed kind, as they reach the caches.
pub(in crate::controller) struct Triggers {
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

/// Start the watches of every managed kind (only the hub's objects, by label). `echoes`
/// holds the hub's own writes, whose events wake nothing.
pub(in crate::controller) fn start(
    client: &Client,
    ns: Option<&str>,
    echoes: &Arc<Echoes>,
) -> Watches {
    let ours = format!("{}={}", labels::MANAGED_BY, labels::MANAGER);
    let (jobs, jobs_w) = reflector::store();
    let (job_events, jobs_watch) = watch::<Job, Job, _>(client, ns, &ours, jobs_w, &jobs, echoes);
    let (secrets, secrets_w) = reflector::store();
    let (secret_events, secrets_watch) =
        watch::<Secret, Secret, _>(client, ns, &ours, secrets_w, &secrets, echoes);
    let (config_maps, cms_w) = reflector::store();
    let (cm_events, cms_watch) =
        watch::<ConfigMap, ConfigMap, _>(client, ns, &ours, cms_w, &config_maps, echoes);
    let (services, svcs_w) = reflector::store();
    let (svc_events, svcs_watch) =
        watch::<Service, Service, _>(client, ns, &ours, svcs_w, &services, echoes);
    // Pods of our Jobs (the Job controller labels them with the Job's name) are read for
    // a few fields only; the hub's own services pods are compared whole.
    let (broker_pods, broker_pods_w) = broker_pods::store();
    let (broker_pod_events, broker_pods_watch) = watch::<Pod, cache::BrokerPod, _>(
        client,
        ns,
        &format!("{ours},{}", cache::JOB_NAME_LABEL),
        broker_pods_w,
        broker_pods.store(),
        echoes,
    );
    let (pods, pods_w) = reflector::store();
    let (services_pod_events, pods_watch) = watch::<Pod, Pod, _>(
        client,
        ns,
        &format!("{ours},!{}", cache::JOB_NAME_LABEL),
        pods_w,
        &pods,
        echoes,
    );
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
            echoes: echoes.clone(),
        },
        triggers: Triggers {
            jobs: job_events,
            secrets: secret_events,
            config_maps: cm_events,
            services: svc_events,
            pods: futures::stream::select(broker_pod_events, services_pod_events).boxed(),
        },
        task,
    }
}

/// What feeds a cache: kube's store writer, or the broker pod cache's (with its index).
pub(in crate::controller) trait CacheWriter<K> {
    /// Apply one watch event.
    fn apply_watcher_event(&mut self, event: &watcher::Event<K>);
}

impl<K> CacheWriter<K> for Writer<K>
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn apply_watcher_event(&mut self, event: &watcher::Event<K>) {
        Writer::apply_watcher_event(self, event);
    }
}

impl CacheWriter<Pod> for BrokerPodsWriter {
    fn apply_watcher_event(&mut self, event: &watcher::Event<Pod>) {
        BrokerPodsWriter::apply_watcher_event(self, event);
    }
}

/// Watch one kind of managed object (only ours, by `selector`) into a cache through
/// `writer`, decoding only the fields `S` selects; returns the stream of objects whose
/// owners must be reconciled ([`triggers::ChildEvents`]) and the future driving the watch.
fn watch<K, S, W>(
    client: &Client,
    namespace: Option<&str>,
    selector: &str,
    mut writer: W,
    cache: &Store<K>,
    echoes: &Arc<Echoes>,
) -> (
    Events<K>,
    impl std::future::Future<Output = ()> + Send + 'static,
)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + k8s_openapi::Resource
        + Clone
        + PartialEq
        + std::fmt::Debug
        + DeserializeOwned
        + cache::Compact
        + Send
        + Sync
        + 'static,
    S: Selection + 'static,
    W: CacheWriter<K> + Send + 'static,
{
    let api: Api<Partial<K, S>> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let config = watcher::Config::default()
        .labels(selector)
        .page_size(LIST_PAGE_SIZE);
    let (wake, woken) = tokio::sync::mpsc::channel(WAKE_BUFFER);
    let cache = cache.clone();
    let echoes = echoes.clone();
    let driver = async move {
        let events = watcher(api, config)
            .backoff(flux_shared::ops::WatchBackoff::default())
            .map_ok(unwrap_partial)
            .modify(cache::Compact::compact);
        futures::pin_mut!(events);
        let mut triggers = triggers::ChildEvents::<K>::default();
        let mut settled = echoes.settled();
        loop {
            let woken = tokio::select! {
                event = events.next() => match event {
                    None => break,
                    Some(Ok(event)) => {
                        let woken = triggers.before(&event, &cache, &echoes);
                        writer.apply_watcher_event(&event);
                        woken
                    }
                    Some(Err(error)) => {
                        error!(%error, kind = %K::KIND, "watch error");
                        continue;
                    }
                },
                Ok(()) = settled.changed(), if triggers.waiting() => triggers.settle(&echoes),
            };
            for object in woken.objects(&cache) {
                // The controller stopped: keep the cache current for the shutdown.
                let _ = wake.send(object).await;
            }
        }
    };
    (
        tokio_stream::wrappers::ReceiverStream::new(woken).boxed(),
        driver,
    )
}

/// The watch event of a partially decoded object, as one of the object itself.
pub(in crate::controller) fn unwrap_partial<K, S>(
    event: watcher::Event<Partial<K, S>>,
) -> watcher::Event<K> {
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
pub(in crate::controller) async fn list_partial(
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
