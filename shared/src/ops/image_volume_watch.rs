//! Whether this controller's cluster mounts images as volumes, kept up to date
//! ([`crate::image_volumes`]): the API server's version, read once when the watch starts,
//! and a watch of the Nodes, each reduced to what it says of image volumes (a node's
//! object is not kept). Needs `list` and `watch` on nodes; without them, or until both
//! are read, the cluster is taken to have none and broker pods copy the view.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::task::AbortOnDropHandle;

use crate::image_volumes::{cluster_has_image_volumes, node_has_image_volumes};

/// What is known so far.
#[derive(Default)]
struct Known {
    api_server_version: Option<String>,
    nodes: HashMap<String, Option<bool>>,
    /// A listing in progress (replaces `nodes` once done).
    listing: Option<HashMap<String, Option<bool>>>,
    listed: bool,
}

/// Whether the cluster mounts images as volumes, as its API server and Nodes say (cheap to
/// clone: clones share one watch, which stops with the last of them).
#[derive(Clone, Default)]
pub struct ImageVolumeWatch {
    known: Arc<Mutex<Known>>,
    _task: Option<Arc<AbortOnDropHandle<()>>>,
}

impl ImageVolumeWatch {
    /// A watch of `client`'s cluster, started on the current tokio runtime.
    pub fn start(client: &Client) -> ImageVolumeWatch {
        let known = Arc::new(Mutex::new(Known::default()));
        let task = tokio::spawn(follow(client.clone(), known.clone()));
        ImageVolumeWatch {
            known,
            _task: Some(Arc::new(AbortOnDropHandle::new(task))),
        }
    }

    /// Whether the cluster mounts images as volumes
    /// ([`cluster_has_image_volumes`]); `false` while the API server's version or the
    /// Nodes are not read yet, and for a watch that was never started (the default).
    pub fn available(&self) -> bool {
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        match &known.api_server_version {
            Some(version) if known.listed => {
                cluster_has_image_volumes(version, known.nodes.values().copied())
            }
            _ => false,
        }
    }
}

async fn follow(client: Client, known: Arc<Mutex<Known>>) {
    let mut backoff = crate::ops::WatchBackoff::default();
    let mut warned = false;
    loop {
        match client.apiserver_version().await {
            Ok(info) => {
                known
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .api_server_version = Some(info.git_version);
                break;
            }
            Err(error) => {
                if !warned {
                    tracing::warn!(%error, "reading the API server's version failed; retrying (the view is copied until then)");
                    warned = true;
                }
                let delay =
                    Iterator::next(&mut backoff).unwrap_or(crate::ops::WatchBackoff::MAX_DELAY);
                tokio::time::sleep(delay).await;
            }
        }
    }
    let events = watcher(Api::<Node>::all(client), watcher::Config::default())
        .backoff(crate::ops::WatchBackoff::default());
    let mut events = std::pin::pin!(events);
    let mut warned = false;
    while let Some(event) = events.next().await {
        let mut known = known.lock().unwrap_or_else(PoisonError::into_inner);
        match event {
            Ok(watcher::Event::Init) => known.listing = Some(HashMap::new()),
            Ok(watcher::Event::InitApply(node)) => {
                if let Some(listing) = known.listing.as_mut() {
                    listing.insert(node.name_any(), node_has_image_volumes(&node));
                }
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(listing) = known.listing.take() {
                    known.nodes = listing;
                }
                known.listed = true;
                warned = false;
            }
            Ok(watcher::Event::Apply(node)) => {
                known
                    .nodes
                    .insert(node.name_any(), node_has_image_volumes(&node));
            }
            Ok(watcher::Event::Delete(node)) => {
                known.nodes.remove(&node.name_any());
            }
            Err(error) => {
                if !warned {
                    tracing::warn!(%error, "watching nodes for image volumes failed; retrying");
                    warned = true;
                }
            }
        }
    }
}
