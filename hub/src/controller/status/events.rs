//! Kubernetes Events about a MiniCluster. An Event that cannot be written is logged and
//! never fails a reconcile.

use flux_shared::api::MiniCluster;
use kube::Resource;
use kube::runtime::events::{Event, EventType};
use tracing::warn;

use crate::controller::context::Context;

/// The most bytes the API server takes in an Event's note (`events.k8s.io/v1`).
pub(in crate::controller) const MAX_NOTE_BYTES: usize = 1024;

/// `note` cut to [`MAX_NOTE_BYTES`] at a character boundary, ending in `...` when cut: an
/// Event whose note is longer is refused by the API server and would be lost whole.
pub(in crate::controller) fn bounded_note(mut note: String) -> String {
    if note.len() <= MAX_NOTE_BYTES {
        return note;
    }
    let mut end = MAX_NOTE_BYTES - 3;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    note.truncate(end);
    note.push_str("...");
    note
}

pub(in crate::controller) async fn publish(
    ctx: &Context,
    mc: &MiniCluster,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_string(),
        note: Some(bounded_note(note)),
        action: "Reconcile".into(),
        secondary: None,
    };
    // An Event that cannot be written must not fail the reconcile.
    match ctx.recorder.publish(&event, &mc.object_ref(&())).await {
        Ok(()) => ctx.metrics.api_write("Event", "create"),
        Err(error) => warn!(%error, reason, "could not publish event"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_note_is_cut_at_a_character_boundary() {
        assert_eq!(bounded_note("short".into()), "short");
        let exact = "x".repeat(MAX_NOTE_BYTES);
        assert_eq!(bounded_note(exact.clone()), exact);
        let long = "é".repeat(MAX_NOTE_BYTES);
        let cut = bounded_note(long);
        assert!(
            cut.len() <= MAX_NOTE_BYTES && cut.ends_with("..."),
            "{}",
            cut.len()
        );
        assert!(cut.trim_end_matches("...").chars().all(|c| c == 'é'));
    }
}
