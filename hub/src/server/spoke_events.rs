//! Kubernetes Events about spokes, where the root's owner looks for them: on the ConfigMap
//! that pins the spokes' certificates (`kubectl describe configmap` of `flux-hub run
//! --spoke-pins`), one per new reason a spoke is refused (never one per retry: the
//! registry says when a reason is new). An Event that cannot be written is logged.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tracing::warn;

/// Where spoke Events go, and who writes them.
#[derive(Clone)]
pub struct SpokeEvents {
    recorder: Recorder,
    regarding: ObjectReference,
}

impl SpokeEvents {
    /// Events about spokes on ConfigMap `namespace/name` (the spoke pins).
    pub fn on_config_map(recorder: Recorder, namespace: &str, name: &str) -> SpokeEvents {
        SpokeEvents {
            recorder,
            regarding: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("ConfigMap".into()),
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                ..ObjectReference::default()
            },
        }
    }

    /// A Warning `SpokeRefused` saying why, written in the background (the refused call
    /// does not wait for the API server).
    pub fn refused(&self, note: String) {
        let (recorder, regarding) = (self.recorder.clone(), self.regarding.clone());
        tokio::spawn(async move {
            let event = Event {
                type_: EventType::Warning,
                reason: "SpokeRefused".into(),
                note: Some(note),
                action: "Connect".into(),
                secondary: None,
            };
            if let Err(error) = recorder.publish(&event, &regarding).await {
                warn!(%error, "could not publish the SpokeRefused event");
            }
        });
    }
}
