//! The spoke's Job watchers: a reflector over the Jobs it labelled (in every namespace, or
//! one per namespace of its scope), which wakes the agent on every change and says while
//! its API server does not answer.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use flux_shared::federation::diagnostics::error_chain;
use flux_shared::federation::ownership::spoke_selector;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

/// One Job watcher: its cache and whether its API server answers.
#[derive(Clone)]
pub(super) struct JobWatch {
    pub(super) store: Store<Job>,
    pub(super) unreachable: Arc<Mutex<Option<(SystemTime, String)>>>,
    pub(super) _task: Arc<AbortOnDropHandle<()>>,
}

/// Watches the spoke's Jobs through `api`, waking `tx` on every change (and on the first
/// error of an outage).
pub(super) fn watch_jobs(api: Api<Job>, tx: Arc<watch::Sender<u64>>) -> JobWatch {
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().labels(&spoke_selector());
    let events = reflector::reflector(writer, watcher(api, config))
        .backoff(flux_shared::ops::WatchBackoff::default());
    let unreachable = Arc::new(Mutex::new(None::<(SystemTime, String)>));
    let access = unreachable.clone();
    let task = tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            // Every event is an answer of the API server; an error is not (the watcher
            // retries with backoff, so errors keep coming while it is away).
            let first_error = {
                let mut state = access.lock().unwrap_or_else(PoisonError::into_inner);
                match &event {
                    Ok(_) => {
                        *state = None;
                        false
                    }
                    Err(error) => {
                        let first = state.is_none();
                        let since = state.as_ref().map_or_else(SystemTime::now, |(t, _)| *t);
                        *state = Some((since, error_chain(error)));
                        first
                    }
                }
            };
            match event {
                // Wait for the end of a (re)listing (InitDone) before waking the
                // reporter; that also reports a regained API server.
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Ok(_) => tx.send_modify(|n| *n = n.wrapping_add(1)),
                Err(error) => {
                    tracing::warn!(error = %error_chain(&error), "watching Jobs failed; retrying");
                    if first_error {
                        tx.send_modify(|n| *n = n.wrapping_add(1));
                    }
                }
            }
        }
    });
    JobWatch {
        store: reader,
        unreachable,
        _task: Arc::new(AbortOnDropHandle::new(task)),
    }
}
