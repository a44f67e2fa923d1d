//! Kubernetes Events about a MiniCluster. An Event that cannot be written is logged and
//! never fails a reconcile.

use flux_shared::api::MiniCluster;
use kube::Resource;
use kube::runtime::events::{Event, EventType};
use tracing::warn;

use super::context::Context;

pub(super) async fn publish(
    ctx: &Context,
    mc: &MiniCluster,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    // An Event that cannot be written must not fail the reconcile.
    match ctx.recorder.publish(&event, &mc.object_ref(&())).await {
        Ok(()) => ctx.metrics.api_write("Event", "create"),
        Err(error) => warn!(%error, reason, "could not publish event"),
    }
}
