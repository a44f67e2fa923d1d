//! Bounds on what a spoke's report says, applied before the registry keeps it: its text
//! ends up in MiniCluster status and Events (in the root cluster, read by its users), so a
//! spoke, a peer, is not trusted to keep it small. See `docs/limits.md`.

use std::time::{Duration, SystemTime};

use flux_shared::federation::proto::{
    AssignmentStatus, Condition, ReportRequest, RootPath, RootReach,
};

use crate::federation::path::{Measured, Reach};

/// Most bytes of a message (a status's, a condition's, the cluster access error).
pub const MAX_MESSAGE: usize = 1024;
/// Most bytes of a condition's type, status or reason.
pub const MAX_WORD: usize = 64;
/// Most conditions kept per assignment status.
pub const MAX_CONDITIONS: usize = 16;

/// What marks a cut text.
const ELLIPSIS: char = '…';

/// `text` cut to at most `max` bytes at a character boundary, ending in an ellipsis when
/// cut (the ellipsis counts toward `max`).
pub fn truncate(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max.saturating_sub(ELLIPSIS.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    if max >= ELLIPSIS.len_utf8() {
        text.push(ELLIPSIS);
    }
}

fn bound_condition(c: &mut Condition) {
    truncate(&mut c.r#type, MAX_WORD);
    truncate(&mut c.status, MAX_WORD);
    truncate(&mut c.reason, MAX_WORD);
    truncate(&mut c.message, MAX_MESSAGE);
}

fn bound_status(s: &mut AssignmentStatus) {
    truncate(&mut s.message, MAX_MESSAGE);
    // A reason is one CamelCase word: it names Events and status fields.
    s.reason.retain(|c| c.is_ascii_alphanumeric());
    s.reason.truncate(MAX_WORD);
    s.admitted_size = s.admitted_size.map(|n| n.max(0));
    s.conditions.truncate(MAX_CONDITIONS);
    s.conditions.iter_mut().for_each(bound_condition);
}

/// Most bytes of the `host:port` a spoke says it measured.
pub const MAX_TARGET: usize = 256;

/// What a spoke's `root_reach` says, checked: an unknown path value says nothing, and its
/// texts are cut to the bounds above. Unset (an older spoke): nothing declared or measured.
pub fn reach(said: Option<&RootReach>) -> Reach {
    let Some(said) = said else {
        return Reach::default();
    };
    let relay = |path: i32| match RootPath::try_from(path) {
        Ok(RootPath::Direct) => Some(false),
        Ok(RootPath::Relay) => Some(true),
        Ok(RootPath::Unspecified) | Err(_) => None,
    };
    let measured = relay(said.measured).map(|relay| {
        let mut target = said.measured_target.clone();
        truncate(&mut target, MAX_TARGET);
        let mut error = said.measured_error.clone();
        truncate(&mut error, MAX_MESSAGE);
        let millis = u64::try_from(said.measured_unix_millis).unwrap_or(0);
        Measured {
            relay,
            target,
            error,
            at: SystemTime::UNIX_EPOCH + Duration::from_millis(millis),
        }
    });
    Reach {
        declared: relay(said.declared),
        measured,
    }
}

/// `request` with every text and list cut to the bounds above, as the hub stores it.
pub fn bound_report(mut request: ReportRequest) -> ReportRequest {
    request.statuses.iter_mut().for_each(bound_status);
    if let Some(access) = request.cluster_access.as_mut() {
        truncate(&mut access.error, MAX_MESSAGE);
    }
    request
}

#[cfg(test)]
mod tests {
    use flux_shared::federation::proto::ClusterAccess;

    use super::*;

    #[test]
    fn short_text_is_kept_and_long_text_cut_at_a_char_boundary() {
        let mut s = "fine".to_string();
        truncate(&mut s, 10);
        assert_eq!(s, "fine");
        let mut s = "a".repeat(2000);
        truncate(&mut s, MAX_MESSAGE);
        assert_eq!(s.len(), MAX_MESSAGE);
        assert!(s.ends_with('…'));
        // Three-byte characters: the cut never splits one.
        let mut s = "€".repeat(1000);
        truncate(&mut s, MAX_MESSAGE);
        assert!(s.len() <= MAX_MESSAGE, "{}", s.len());
        assert!(s.ends_with('…'));
        assert!(s.trim_end_matches('…').chars().all(|c| c == '€'));
        // Exactly at the bound: untouched.
        let mut s = "b".repeat(MAX_WORD);
        truncate(&mut s, MAX_WORD);
        assert_eq!(s, "b".repeat(MAX_WORD));
    }

    #[test]
    fn a_spokes_reach_is_checked_and_bounded() {
        assert_eq!(reach(None), Reach::default(), "an older spoke says nothing");
        let said = RootReach {
            declared: 7,
            measured: RootPath::Relay as i32,
            measured_target: "t".repeat(10_000),
            measured_error: "e".repeat(10_000),
            measured_unix_millis: -5,
        };
        let got = reach(Some(&said));
        assert_eq!(got.declared, None, "an unknown value declares nothing");
        let m = got.measured.expect("measured");
        assert!(m.relay);
        assert_eq!((m.target.len(), m.error.len()), (MAX_TARGET, MAX_MESSAGE));
        assert_eq!(m.at, SystemTime::UNIX_EPOCH);
        let direct = reach(Some(&RootReach {
            declared: RootPath::Direct as i32,
            ..RootReach::default()
        }));
        assert_eq!((direct.declared, direct.measured), (Some(false), None));
    }

    #[test]
    fn a_report_is_bounded_everywhere_text_can_hide() {
        let long = "x".repeat(100_000);
        let condition = Condition {
            r#type: long.clone(),
            status: long.clone(),
            reason: long.clone(),
            message: long.clone(),
            last_transition_unix_millis: 7,
        };
        let request = ReportRequest {
            root_reach: None,
            room: None,
            hub_epoch: "e".into(),
            applied_version: 3,
            statuses: vec![AssignmentStatus {
                key: "ns/m/b".into(),
                message: long.clone(),
                conditions: vec![condition; 1000],
                brokers_ready: 2,
                reason: format!("No Policy\n<script>{long}"),
                admitted_size: Some(-4),
                ..Default::default()
            }],
            cluster_access: Some(ClusterAccess {
                unreachable_since_unix_millis: 5,
                error: long.clone(),
            }),
        };
        let bounded = bound_report(request);
        let s = &bounded.statuses[0];
        assert_eq!((s.key.as_str(), s.brokers_ready), ("ns/m/b", 2));
        assert_eq!(s.message.len(), MAX_MESSAGE);
        assert_eq!(s.conditions.len(), MAX_CONDITIONS);
        assert_eq!(s.reason.len(), MAX_WORD);
        assert!(s.reason.starts_with("NoPolicyscript"), "{}", s.reason);
        assert_eq!(s.admitted_size, Some(0));
        for c in &s.conditions {
            assert_eq!(c.r#type.len(), MAX_WORD);
            assert_eq!(c.status.len(), MAX_WORD);
            assert_eq!(c.reason.len(), MAX_WORD);
            assert_eq!(c.message.len(), MAX_MESSAGE);
            assert_eq!(c.last_transition_unix_millis, 7);
        }
        let access = bounded.cluster_access.expect("access");
        assert_eq!(access.error.len(), MAX_MESSAGE);
        assert_eq!(access.unreachable_since_unix_millis, 5);
        assert_eq!(bounded.applied_version, 3);
    }
}
