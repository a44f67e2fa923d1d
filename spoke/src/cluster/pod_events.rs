//! Kubernetes Events about the spoke itself, on its own Pod, where the burst cluster's
//! owner looks for them (`kubectl describe pod` in the spoke's namespace): a hub it does
//! not serve, for one. Written in the background; one that cannot be written is logged.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::warn;

/// Where the spoke's Events go, and who writes them.
#[derive(Clone)]
pub struct PodEvents {
    recorder: Recorder,
    regarding: ObjectReference,
}

impl PodEvents {
    /// Events on Pod `namespace/name` (the spoke's own), written with `client`.
    pub fn of_pod(client: Client, namespace: &str, name: &str) -> PodEvents {
        PodEvents {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: super::FIELD_MANAGER.into(),
                    instance: Some(name.to_string()),
                },
            ),
            regarding: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                ..ObjectReference::default()
            },
        }
    }

    /// A Warning with `reason` and `note`, written in the background.
    pub fn warn(&self, reason: &'static str, note: String) {
        let (recorder, regarding) = (self.recorder.clone(), self.regarding.clone());
        tokio::spawn(async move {
            let event = Event {
                type_: EventType::Warning,
                reason: reason.into(),
                note: Some(note),
                action: "Connect".into(),
                secondary: None,
            };
            if let Err(error) = recorder.publish(&event, &regarding).await {
                warn!(%error, reason, "could not publish an event");
            }
        });
    }
}
