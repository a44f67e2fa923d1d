//! The room of the spoke's cluster ([`flux_shared::federation::room`]): watches of its
//! Nodes and of the pods bound to them, kept as the few facts room is measured from (a
//! node's allocatable resources and whether a pod may land there, a pod's node and
//! requests), not as whole objects. Needs `list` and `watch` on nodes and pods in every
//! namespace ([`ROOM_PERMISSIONS`](flux_shared::federation::spoke_rbac::ROOM_PERMISSIONS));
//! without them the room is reported as not measured and the hub places bursts without it.
//! With the same permissions, whether the cluster mounts images as volumes
//! ([`flux_shared::ops::ImageVolumeWatch`]): new burst Jobs then mount the view image.

use super::NodesRoom;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use flux_shared::federation::diagnostics::error_chain;
use flux_shared::federation::room::{NodeFacts, Shape, measure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::task::AbortOnDropHandle;

/// What one watch keeps: its facts by key, a listing in progress, and its last error.
struct Facts<T> {
    by_key: HashMap<String, T>,
    listing: Option<HashMap<String, T>>,
    listed: bool,
    error: Option<String>,
}

impl<T> Default for Facts<T> {
    fn default() -> Facts<T> {
        Facts {
            by_key: HashMap::new(),
            listing: None,
            listed: false,
            error: None,
        }
    }
}

impl<T> Facts<T> {
    /// One watch event, its object already reduced to `fact` (`None`: not counted).
    fn apply(&mut self, event: watcher::Event<(String, Option<T>)>) {
        match event {
            watcher::Event::Init => self.listing = Some(HashMap::new()),
            watcher::Event::InitApply((key, fact)) => {
                if let (Some(listing), Some(fact)) = (self.listing.as_mut(), fact) {
                    listing.insert(key, fact);
                }
            }
            watcher::Event::InitDone => {
                if let Some(listing) = self.listing.take() {
                    self.by_key = listing;
                }
                self.listed = true;
                self.error = None;
            }
            watcher::Event::Apply((key, Some(fact))) => {
                self.by_key.insert(key, fact);
            }
            watcher::Event::Apply((key, None)) | watcher::Event::Delete((key, _)) => {
                self.by_key.remove(&key);
            }
        }
    }
}

/// The two watches and what they keep.
#[derive(Clone)]
pub(super) struct RoomWatch {
    nodes: Arc<Mutex<Facts<NodeFacts>>>,
    pods: Arc<Mutex<Facts<(String, Shape)>>>,
    /// Whether the nodes (and the API server) mount images as volumes.
    image_volumes: flux_shared::ops::ImageVolumeWatch,
    _tasks: Arc<[AbortOnDropHandle<()>; 2]>,
}

/// A pod's node and shape, when it is bound to one.
fn pod_fact(pod: &Pod) -> Option<(String, Shape)> {
    let spec = pod.spec.as_ref()?;
    let node = spec.node_name.clone().filter(|n| !n.is_empty())?;
    Some((node, Shape::of_pod(spec)))
}

fn spawn_watch<K, T>(
    api: Api<K>,
    config: watcher::Config,
    what: &'static str,
    facts: Arc<Mutex<Facts<T>>>,
    fact: fn(&K) -> Option<T>,
) -> AbortOnDropHandle<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    K::DynamicType: Default,
    T: Send + 'static,
{
    let events = watcher(api, config).backoff(flux_shared::ops::WatchBackoff::default());
    AbortOnDropHandle::new(tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            let mut facts = facts.lock().unwrap_or_else(PoisonError::into_inner);
            match event {
                Ok(event) => {
                    let reduce = |o: K| {
                        let key = match o.namespace() {
                            Some(ns) => format!("{ns}/{}", o.name_any()),
                            None => o.name_any(),
                        };
                        let f = fact(&o);
                        (key, f)
                    };
                    facts.apply(match event {
                        watcher::Event::Init => watcher::Event::Init,
                        watcher::Event::InitDone => watcher::Event::InitDone,
                        watcher::Event::InitApply(o) => watcher::Event::InitApply(reduce(o)),
                        watcher::Event::Apply(o) => watcher::Event::Apply(reduce(o)),
                        watcher::Event::Delete(o) => watcher::Event::Delete(reduce(o)),
                    });
                }
                Err(error) => {
                    let error = error_chain(&error);
                    if facts.error.is_none() {
                        tracing::warn!(%error, "watching {what} for the cluster's room failed; retrying");
                    }
                    facts.error = Some(error);
                }
            }
        }
    }))
}

impl RoomWatch {
    /// Starts the watches (on the current tokio runtime).
    pub(super) fn start(client: &Client) -> RoomWatch {
        let nodes = Arc::new(Mutex::new(Facts::default()));
        let pods = Arc::new(Mutex::new(Facts::default()));
        let node_task = spawn_watch(
            Api::<Node>::all(client.clone()),
            watcher::Config::default(),
            "nodes",
            nodes.clone(),
            |n: &Node| Some(NodeFacts::of(n)),
        );
        // Finished pods hold nothing of their node: a pod that finishes leaves the watch.
        let pod_task = spawn_watch(
            Api::<Pod>::all(client.clone()),
            watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed"),
            "pods",
            pods.clone(),
            pod_fact,
        );
        RoomWatch {
            nodes,
            pods,
            image_volumes: flux_shared::ops::ImageVolumeWatch::start(client),
            _tasks: Arc::new([node_task, pod_task]),
        }
    }

    /// Whether the cluster mounts images as volumes, as far as known.
    pub(super) fn image_volumes(&self) -> bool {
        self.image_volumes.available()
    }

    /// The room now: node groups and nodes left out, or why it is not known.
    pub(super) fn measure(&self) -> NodesRoom {
        let nodes = self.nodes.lock().unwrap_or_else(PoisonError::into_inner);
        let pods = self.pods.lock().unwrap_or_else(PoisonError::into_inner);
        for (what, listed, error) in [
            ("nodes", nodes.listed, &nodes.error),
            ("pods", pods.listed, &pods.error),
        ] {
            if !listed {
                return Err(match error {
                    Some(e) => format!("cannot list {what}: {e}"),
                    None => format!("{what} not listed yet"),
                });
            }
        }
        let by_name: BTreeMap<String, NodeFacts> = nodes
            .by_key
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(measure(
            &by_name,
            pods.by_key
                .values()
                .map(|(node, shape)| (node.as_str(), shape)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relisting_replaces_what_was_kept_and_deletes_drop_it() {
        let mut f: Facts<i32> = Facts::default();
        f.apply(watcher::Event::Apply(("a".into(), Some(1))));
        f.apply(watcher::Event::Init);
        f.apply(watcher::Event::InitApply(("b".into(), Some(2))));
        f.apply(watcher::Event::InitApply(("skipped".into(), None)));
        assert!(f.by_key.contains_key("a"), "kept until the listing is done");
        f.apply(watcher::Event::InitDone);
        assert_eq!(f.by_key.keys().collect::<Vec<_>>(), ["b"]);
        assert!(f.listed);
        f.apply(watcher::Event::Apply(("b".into(), None)));
        f.apply(watcher::Event::Apply(("c".into(), Some(3))));
        f.apply(watcher::Event::Delete(("c".into(), Some(3))));
        assert!(f.by_key.is_empty());
    }
}
