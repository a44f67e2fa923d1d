//! A burst's size set in its MiniCluster's spec, as the admin API's `ScaleBurst` and the
//! autoscaler both do: the MiniCluster read, the size decided
//! ([`crate::federation::scale::decide`], a pure function) and patched, guarded by its
//! resourceVersion.

use flux_shared::api::MiniCluster;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use tracing::info;

use crate::federation::scale::{ScaleChange, ScaleRefusal, decide};
use crate::ops::metrics::Metrics;

/// How often [`set_size`] reads the MiniCluster again after its patch lost a race with
/// another writer (the controller's finalizer, `kubectl edit`).
const ATTEMPTS: usize = 3;

/// One burst of one MiniCluster.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// Namespace of the MiniCluster.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// The burst.
    pub burst: &'a str,
}

/// Why [`set_size`] changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum SetSizeError {
    /// The hub would not apply the size ([`decide`]).
    #[error("{}", .0.message)]
    Refused(ScaleRefusal),
    /// No such MiniCluster.
    #[error("{0}")]
    NotFound(String),
    /// Every attempt lost a race with another writer.
    #[error("{0}")]
    KeptChanging(String),
    /// An API call failed.
    #[error("{doing}: {error}")]
    Api {
        /// What was being done.
        doing: String,
        /// The failure.
        error: kube::Error,
    },
}

/// Set `target`'s size to `size` in its MiniCluster's spec: read it, [`decide`], and
/// patch it guarded by the resourceVersion read (a lost race reads and decides again),
/// as field manager `manager`. The change and the MiniCluster's generation after it.
pub async fn set_size(
    client: &kube::Client,
    metrics: &Metrics,
    target: &Target<'_>,
    size: i32,
    manager: &str,
) -> Result<(ScaleChange, i64), SetSizeError> {
    let key = format!("{}/{}", target.namespace, target.name);
    let api: Api<MiniCluster> = Api::namespaced(client.clone(), target.namespace);
    let params = PatchParams {
        field_manager: Some(manager.chars().take(128).collect()),
        ..Default::default()
    };
    for _ in 0..ATTEMPTS {
        let mc = api
            .get_opt(target.name)
            .await
            .map_err(|error| SetSizeError::Api {
                doing: format!("reading MiniCluster {key}"),
                error,
            })?
            .ok_or_else(|| SetSizeError::NotFound(format!("MiniCluster {key} not found")))?;
        let change = decide(&mc, target.burst, size).map_err(SetSizeError::Refused)?;
        if change.is_noop() {
            info!(size = change.size, "burst already at this size");
            return Ok((change, mc.metadata.generation.unwrap_or_default()));
        }
        let patch = change.patch(&mc.resource_version().unwrap_or_default());
        match api
            .patch(target.name, &params, &Patch::<()>::Json(patch))
            .await
        {
            Ok(stored) => {
                metrics.api_write("MiniCluster", "patch");
                let generation = stored.metadata.generation.unwrap_or_default();
                info!(
                    previous = change.previous,
                    size = change.size,
                    generation,
                    "burst scaled"
                );
                return Ok((change, generation));
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                info!("the MiniCluster changed while scaling; reading it again");
            }
            Err(error) => {
                return Err(SetSizeError::Api {
                    doing: format!("patching MiniCluster {key}"),
                    error,
                });
            }
        }
    }
    Err(SetSizeError::KeptChanging(format!(
        "MiniCluster {key} kept changing while scaling ({ATTEMPTS} attempts); retry"
    )))
}
