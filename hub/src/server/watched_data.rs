//! The data of one ConfigMap that an operator keeps beside the hub (the spoke pins, the
//! revoked admin certificates, the spokes' granted labels), watched: what the hub knows of
//! it at any moment, and a signal on every change so that open streams can re-check their
//! callers; and one key of it written ([`write_key`]).

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
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

/// Sets key `key` of ConfigMap `name` of `api` to `value` (`None`: removes it), creating
/// the ConfigMap, labelled as the hub's, when a value is set and it does not exist yet.
/// Returns the value it replaced.
pub async fn write_key(
    api: &Api<ConfigMap>,
    name: &str,
    key: &str,
    value: Option<&str>,
) -> Result<Option<String>, kube::Error> {
    let previous = match api.get_opt(name).await? {
        Some(cm) => cm.data.and_then(|mut d| d.remove(key)),
        None => {
            let Some(value) = value else {
                return Ok(None);
            };
            let mut cm = ConfigMap::default();
            cm.metadata.name = Some(name.to_string());
            cm.metadata.labels = Some(BTreeMap::from([
                ("app.kubernetes.io/name".to_string(), "flux-hub".to_string()),
                (
                    "app.kubernetes.io/part-of".to_string(),
                    "flux-operator".to_string(),
                ),
            ]));
            cm.data = Some(BTreeMap::from([(key.to_string(), value.to_string())]));
            match api.create(&PostParams::default(), &cm).await {
                Ok(_) => return Ok(None),
                // Created meanwhile: patched below.
                Err(kube::Error::Api(e)) if e.code == 409 => None,
                Err(e) => return Err(e),
            }
        }
    };
    let patch = serde_json::json!({"data": {key: value}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(previous),
        // Deleted meanwhile: nothing to remove.
        Err(kube::Error::Api(e)) if e.code == 404 && value.is_none() => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::client::Body;

    /// Runs `write_key` against an API server that answers each request in turn with
    /// `(status, body)` from `answers`; returns its result and the requests (method, path,
    /// body).
    async fn against(
        value: Option<&str>,
        answers: Vec<(u16, serde_json::Value)>,
    ) -> (
        Result<Option<String>, kube::Error>,
        Vec<(String, String, String)>,
    ) {
        let (mock, mut handle) =
            tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            for (status, body) in answers {
                let Some((request, send)) = handle.next_request().await else {
                    break;
                };
                let (parts, body_in) = request.into_parts();
                let bytes = body_in.collect_bytes().await.unwrap_or_default();
                seen.push((
                    parts.method.to_string(),
                    parts.uri.path().to_string(),
                    String::from_utf8_lossy(&bytes).to_string(),
                ));
                let response = http::Response::builder()
                    .status(status)
                    .body(Body::from(body.to_string().into_bytes()));
                if let Ok(response) = response {
                    send.send_response(response);
                }
            }
            seen
        });
        let api: Api<ConfigMap> = Api::namespaced(kube::Client::new(mock, "default"), "hub");
        let result = write_key(&api, "pins", "east", value).await;
        (result, server.await.unwrap_or_default())
    }

    fn not_found() -> serde_json::Value {
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": "NotFound", "code": 404})
    }

    fn configmap(data: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "pins", "namespace": "hub"}, "data": data})
    }

    #[tokio::test]
    async fn a_key_is_written_creating_the_configmap_patched_or_removed() {
        // Missing: created with the key, labelled as the hub's.
        let (result, seen) = against(
            Some("sha256:1"),
            vec![
                (404, not_found()),
                (201, configmap(serde_json::json!({"east": "sha256:1"}))),
            ],
        )
        .await;
        assert_eq!(result.ok(), Some(None));
        assert_eq!(seen[1].0, "POST");
        assert!(
            seen[1].2.contains("\"east\":\"sha256:1\"") && seen[1].2.contains("flux-hub"),
            "{}",
            seen[1].2
        );
        // Present: patched, the replaced value returned.
        let (result, seen) = against(
            Some("sha256:2"),
            vec![
                (200, configmap(serde_json::json!({"east": "sha256:1"}))),
                (200, configmap(serde_json::json!({"east": "sha256:2"}))),
            ],
        )
        .await;
        assert_eq!(result.ok(), Some(Some("sha256:1".to_string())));
        assert_eq!(
            (seen[1].0.as_str(), seen[1].2.as_str()),
            ("PATCH", "{\"data\":{\"east\":\"sha256:2\"}}")
        );
        // Removed: a null patch; from a missing ConfigMap, nothing is written.
        let (result, seen) = against(
            None,
            vec![
                (200, configmap(serde_json::json!({"east": "sha256:2"}))),
                (200, configmap(serde_json::json!({}))),
            ],
        )
        .await;
        assert_eq!(result.ok(), Some(Some("sha256:2".to_string())));
        assert_eq!(seen[1].2, "{\"data\":{\"east\":null}}");
        let (result, seen) = against(None, vec![(404, not_found())]).await;
        assert_eq!((result.ok(), seen.len()), (Some(None), 1));
    }
}
