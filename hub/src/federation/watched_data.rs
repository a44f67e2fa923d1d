//! The data of one ConfigMap that an operator keeps beside the hub (the spoke pins, the
//! revoked admin certificates, the spokes' granted labels), watched: what the hub knows of it at any moment, and a
//! signal on every change so that open streams can re-check their callers.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tonic::Status;

/// What the hub knows of the ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Known {
    /// Not listed yet: callers wait.
    NotYet,
    /// No such ConfigMap.
    Missing,
    /// Its data.
    Data(BTreeMap<String, String>),
}

/// A ConfigMap's data as currently known. Cheap to clone.
#[derive(Clone, Debug)]
pub struct WatchedData {
    known: Arc<RwLock<Known>>,
    /// Bumped on every change.
    changes: Arc<watch::Sender<u64>>,
}

impl WatchedData {
    /// Always `known` (no pinning in insecure development; tests).
    pub fn fixed(known: Known) -> WatchedData {
        WatchedData {
            known: Arc::new(RwLock::new(known)),
            changes: Arc::new(watch::channel(0).0),
        }
    }

    /// ConfigMap `namespace/name` of `client`'s cluster, watched from now on (on the current
    /// tokio runtime; the watch ends with the process). `what` names it in logs.
    pub fn watch(
        client: kube::Client,
        namespace: &str,
        name: &str,
        what: &'static str,
    ) -> WatchedData {
        let data = WatchedData::fixed(Known::NotYet);
        let (known, changes) = (data.known.clone(), data.changes.clone());
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let at = format!("{namespace}/{name}");
        tokio::spawn(async move {
            let events = watcher(api, config).backoff(flux_shared::ops::WatchBackoff::default());
            let mut events = std::pin::pin!(events);
            // A (re)listing is gathered whole before it replaces what is known.
            let mut listing: Option<BTreeMap<String, String>> = None;
            while let Some(event) = events.next().await {
                let set = |k: Known| {
                    *known.write().unwrap_or_else(PoisonError::into_inner) = k;
                    changes.send_modify(|n| *n = n.wrapping_add(1));
                };
                match event {
                    Ok(watcher::Event::Init) => listing = None,
                    Ok(watcher::Event::InitApply(cm)) => {
                        listing = Some(cm.data.unwrap_or_default());
                    }
                    Ok(watcher::Event::InitDone) => {
                        set(listing.take().map_or(Known::Missing, Known::Data));
                    }
                    Ok(watcher::Event::Apply(cm)) => set(Known::Data(cm.data.unwrap_or_default())),
                    Ok(watcher::Event::Delete(_)) => set(Known::Missing),
                    Err(e) => {
                        tracing::warn!(configmap = %at, what, error = %e, "watching failed; retrying");
                    }
                }
            }
        });
        data
    }

    /// `f` of what is known now.
    pub fn read<R>(&self, f: impl FnOnce(&Known) -> R) -> R {
        f(&self.known.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Resolves once `check` refuses with `PERMISSION_DENIED` after a change of the data:
    /// the end of an open stream whose caller lost its right to it.
    pub fn until_refused(
        &self,
        check: impl Fn() -> Result<(), Status> + Send + 'static,
    ) -> impl std::future::Future<Output = Status> + Send + 'static {
        let mut rx = self.changes.subscribe();
        async move {
            loop {
                if rx.changed().await.is_err() {
                    // Nobody can change the data any more.
                    std::future::pending::<()>().await;
                }
                if let Err(status) = check()
                    && status.code() == tonic::Code::PermissionDenied
                {
                    return status;
                }
            }
        }
    }

    /// A receiver that sees every change of what is known.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Replaces what is known, as a watch event does (tests of the stores built on this).
    pub fn set(&self, known: Known) {
        *self.known.write().unwrap_or_else(PoisonError::into_inner) = known;
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}
