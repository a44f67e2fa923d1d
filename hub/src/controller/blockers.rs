//! Objects of someone else that hold a name a MiniCluster needs (see `ownership`): the
//! MiniCluster is refused, not retried, and tried again only when one of them changes or
//! goes (or the MiniCluster changes, which wakes it anyway).
//!
//! The hub's caches see only objects labelled as its own, so each blocking object gets a
//! watch of its own: metadata only, selected by name, ended at the first change. There
//! are as many as refused names (a handful per refused MiniCluster), none otherwise.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Mutex, PoisonError};

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_stream};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;
use tracing::{debug, info};

use flux_shared::federation::McKey;

/// Whether a blocking object last found at `blocked` (its resourceVersion) has changed
/// or gone, given what a watch now shows of it (`None`: not there).
pub fn moved(blocked: Option<&str>, now: Option<&str>) -> bool {
    match (blocked, now) {
        (_, None) => true,
        (Some(then), Some(now)) => then != now,
        // Never seen with a version: any sighting is news.
        (None, Some(_)) => true,
    }
}

/// The watches of blocking objects, per MiniCluster, and the stream of MiniClusters they
/// wake.
pub struct Blockers {
    client: Client,
    wake: mpsc::UnboundedSender<McKey>,
    woken: Mutex<Option<mpsc::UnboundedReceiver<McKey>>>,
    watching: Mutex<HashMap<McKey, Watching>>,
}

/// What blocks one MiniCluster, and the watches of those objects.
type Watching = (Vec<Taken>, Vec<AbortOnDropHandle<()>>);

impl Debug for Blockers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blockers").finish_non_exhaustive()
    }
}

impl Blockers {
    /// No watches yet; they will use `client`.
    pub fn new(client: Client) -> Blockers {
        let (wake, woken) = mpsc::unbounded_channel();
        Blockers {
            client,
            wake,
            woken: Mutex::new(Some(woken)),
            watching: Mutex::new(HashMap::new()),
        }
    }

    /// The MiniClusters to reconcile because an object blocking them changed or went
    /// (once: `None` after the first call).
    pub fn take_woken(&self) -> Option<mpsc::UnboundedReceiver<McKey>> {
        self.woken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Watch `taken` (in namespace `ns`) for MiniCluster `mc`, instead of what was watched
    /// for it before; the same objects at the same versions keep their watches. Must be
    /// called within a tokio runtime.
    pub fn watch(&self, mc: &McKey, taken: &[Taken], ns: &str) {
        let mut watching = self.watching.lock().unwrap_or_else(PoisonError::into_inner);
        if watching.get(mc).is_some_and(|(t, _)| t.as_slice() == taken) {
            return;
        }
        let tasks = taken
            .iter()
            .map(|t| {
                info!(kind = t.kind, object = %t.name, holder = %t.holder, "name taken; watching it");
                let (client, wake, mc, t) =
                    (self.client.clone(), self.wake.clone(), mc.clone(), t.clone());
                let ns = ns.to_string();
                AbortOnDropHandle::new(tokio::spawn(async move {
                    let gone = match t.kind {
                        "Job" => until_moved::<Job>(client, &ns, &t).await,
                        "Pod" => until_moved::<Pod>(client, &ns, &t).await,
                        "Service" => until_moved::<Service>(client, &ns, &t).await,
                        "Secret" => until_moved::<Secret>(client, &ns, &t).await,
                        _ => until_moved::<ConfigMap>(client, &ns, &t).await,
                    };
                    if gone {
                        debug!(kind = t.kind, object = %t.name, "a blocking object changed");
                        let _ = wake.send(mc);
                    }
                }))
            })
            .collect();
        watching.insert(mc.clone(), (taken.to_vec(), tasks));
    }

    /// Stop watching for `mc` (its names are free, or it is gone).
    pub fn clear(&self, mc: &McKey) {
        let mut watching = self.watching.lock().unwrap_or_else(PoisonError::into_inner);
        if !watching.is_empty() {
            watching.remove(mc);
        }
    }

    /// How many MiniClusters are refused for a taken name (watched now).
    pub fn len(&self) -> usize {
        self.watching
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no MiniCluster is refused for a taken name.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Watches object `t` until it differs from what blocked (true), or the watch ends
/// (false: only when the stream does, which a watcher never does on its own).
async fn until_moved<K>(client: Client, ns: &str, t: &Taken) -> bool
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + 'static,
{
    // Metadata only: nothing else of someone else's object is read.
    let api: Api<PartialObjectMeta<K>> = Api::namespaced(client, ns);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", t.name));
    let mut events = std::pin::pin!(
        watch_stream(api, config).backoff(flux_shared::ops::WatchBackoff::default())
    );
    // The version of the listing in progress (a relist after an error starts again).
    let mut listed: Option<String> = None;
    let blocked = t.resource_version.as_deref();
    while let Some(event) = events.next().await {
        let now = match event {
            Ok(Event::Init) => {
                listed = None;
                continue;
            }
            Ok(Event::InitApply(o)) => {
                listed = o.metadata.resource_version;
                continue;
            }
            Ok(Event::InitDone) => listed.take(),
            Ok(Event::Apply(o)) => o.metadata.resource_version,
            Ok(Event::Delete(_)) => None,
            Err(_) => continue,
        };
        if moved(blocked, now.as_deref()) {
            return true;
        }
    }
    false
}

/// An existing object, not the MiniCluster's, holding a name its plan needs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Taken {
    /// Its kind (`ConfigMap`, `Secret`, `Service`, `Job`, `Pod`).
    pub kind: &'static str,
    /// Its name (in the MiniCluster's namespace).
    pub name: String,
    /// Whose it is, as far as its metadata tells.
    pub holder: String,
    /// Its resourceVersion when found: a change or its deletion is worth another try.
    pub resource_version: Option<String>,
}

impl Taken {
    /// `object`, held by `holder`.
    pub(in crate::controller) fn of<K: Resource<DynamicType = ()>>(
        object: &K,
        holder: String,
    ) -> Taken {
        Taken {
            kind: static_kind::<K>(),
            name: object.meta().name.clone().unwrap_or_default(),
            holder,
            resource_version: object.meta().resource_version.clone(),
        }
    }
}

/// The kind name of `K` as a static string (the kinds the hub writes).
fn static_kind<K: Resource<DynamicType = ()>>() -> &'static str {
    match K::kind(&()).as_ref() {
        "Job" => "Job",
        "Pod" => "Pod",
        "Service" => "Service",
        "Secret" => "Secret",
        _ => "ConfigMap",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blocker_moves_when_it_changes_or_goes() {
        assert!(!moved(Some("7"), Some("7")), "unchanged");
        assert!(moved(Some("7"), Some("8")), "changed");
        assert!(moved(Some("7"), None), "gone");
        assert!(moved(None, None), "gone, never versioned");
        assert!(moved(None, Some("1")), "never versioned");
    }
}
