//! The broker pod cache, indexed by Job: a reconcile reads the pods of one Job (to label
//! them, to find the lead broker's node), and scanning every broker pod of every
//! MiniCluster for that made each reconcile cost grow with the number of MiniClusters.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

use flux_shared::render::labels;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::watcher;

/// Namespace and Job name.
type JobKey = (String, String);
type Index = HashMap<JobKey, BTreeSet<String>>;

/// Read side: the broker pods, and which belong to which Job.
#[derive(Clone)]
pub struct BrokerPods {
    store: Store<Pod>,
    by_job: Arc<RwLock<Index>>,
}

/// Write side, fed by the broker pod watch (or a test).
pub struct BrokerPodsWriter {
    writer: Writer<Pod>,
    by_job: Arc<RwLock<Index>>,
    /// The index being rebuilt while the watch lists again.
    relisting: Option<Index>,
}

/// An empty broker pod cache.
pub fn store() -> (BrokerPods, BrokerPodsWriter) {
    let (store, writer) = reflector::store();
    let by_job = Arc::new(RwLock::new(Index::new()));
    (
        BrokerPods {
            store,
            by_job: by_job.clone(),
        },
        BrokerPodsWriter {
            writer,
            by_job,
            relisting: None,
        },
    )
}

fn job_key(pod: &Pod) -> Option<JobKey> {
    Some((pod.namespace()?, pod.labels().get(labels::JOB)?.clone()))
}

impl BrokerPods {
    /// The cached pods of Job `job` in `ns`.
    pub fn of_job(&self, ns: &str, job: &str) -> Vec<Arc<Pod>> {
        let Ok(by_job) = self.by_job.read() else {
            return Vec::new();
        };
        by_job
            .get(&(ns.to_string(), job.to_string()))
            .into_iter()
            .flatten()
            .filter_map(|name| self.store.get(&ObjectRef::new(name).within(ns)))
            .collect()
    }

    /// The cached pod `ns`/`name`.
    pub fn get(&self, ns: &str, name: &str) -> Option<Arc<Pod>> {
        self.store.get(&ObjectRef::new(name).within(ns))
    }

    /// How many broker pods are cached.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether no broker pod is cached.
    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// Resolves once the cache holds its initial list.
    pub async fn wait_until_ready(&self) {
        let _ = self.store.wait_until_ready().await;
    }

    /// The underlying store (what the trigger filter compares events with).
    pub fn store(&self) -> &Store<Pod> {
        &self.store
    }
}

impl BrokerPodsWriter {
    /// Apply one watch event to the cache and its index.
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<Pod>) {
        match event {
            watcher::Event::Apply(pod) => {
                if let Ok(mut by_job) = self.by_job.write() {
                    index(&mut by_job, pod);
                }
            }
            watcher::Event::Delete(pod) => {
                if let (Some(key), Ok(mut by_job)) = (job_key(pod), self.by_job.write()) {
                    let name = pod.name_any();
                    if let Some(names) = by_job.get_mut(&key) {
                        names.remove(&name);
                        if names.is_empty() {
                            by_job.remove(&key);
                        }
                    }
                }
            }
            watcher::Event::Init => self.relisting = Some(Index::new()),
            watcher::Event::InitApply(pod) => {
                if let Some(relisting) = self.relisting.as_mut() {
                    index(relisting, pod);
                }
            }
            watcher::Event::InitDone => {
                if let (Some(fresh), Ok(mut by_job)) = (self.relisting.take(), self.by_job.write())
                {
                    *by_job = fresh;
                }
            }
        }
        self.writer.apply_watcher_event(event);
    }
}

/// Pods keep the Job label they were created with; a pod's name is unique in its
/// namespace, so adding is all an update needs.
fn index(by_job: &mut Index, pod: &Pod) {
    if let Some(key) = job_key(pod) {
        by_job.entry(key).or_default().insert(pod.name_any());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, job: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "labels": {labels::JOB: job}},
        }))
        .expect("a pod")
    }

    fn names(pods: &BrokerPods, ns: &str, job: &str) -> Vec<String> {
        let mut names: Vec<String> = pods.of_job(ns, job).iter().map(|p| p.name_any()).collect();
        names.sort();
        names
    }

    #[test]
    fn pods_are_found_by_job_and_namespace_and_leave_with_their_deletion() {
        let (pods, mut w) = store();
        w.apply_watcher_event(&watcher::Event::InitDone);
        for p in [
            pod("a", "x-0", "x"),
            pod("a", "x-1", "x"),
            pod("a", "y-0", "y"),
            pod("b", "x-0", "x"),
        ] {
            w.apply_watcher_event(&watcher::Event::Apply(p));
        }
        assert_eq!(names(&pods, "a", "x"), ["x-0", "x-1"]);
        assert_eq!(names(&pods, "b", "x"), ["x-0"]);
        assert_eq!(names(&pods, "a", "z"), Vec::<String>::new());
        w.apply_watcher_event(&watcher::Event::Delete(pod("a", "x-0", "x")));
        assert_eq!(names(&pods, "a", "x"), ["x-1"]);
        assert_eq!(pods.len(), 3);
    }

    #[test]
    fn a_relist_replaces_the_index_with_what_it_lists() {
        let (pods, mut w) = store();
        w.apply_watcher_event(&watcher::Event::InitDone);
        w.apply_watcher_event(&watcher::Event::Apply(pod("a", "x-0", "x")));
        w.apply_watcher_event(&watcher::Event::Apply(pod("a", "x-1", "x")));
        // The watch lost its place; x-0 was deleted meanwhile.
        w.apply_watcher_event(&watcher::Event::Init);
        w.apply_watcher_event(&watcher::Event::InitApply(pod("a", "x-1", "x")));
        assert_eq!(
            names(&pods, "a", "x"),
            ["x-0", "x-1"],
            "until the list is complete"
        );
        w.apply_watcher_event(&watcher::Event::InitDone);
        assert_eq!(names(&pods, "a", "x"), ["x-1"]);
    }
}
