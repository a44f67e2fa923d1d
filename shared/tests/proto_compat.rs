//! Wire compatibility of the fields this protocol grew: a spoke or hub built before them
//! still talks to one built after, both ways.

use flux_shared::federation::proto::{AssignmentStatus, BurstPhase, SpokeInfo};
use prost::Message;

/// `AssignmentStatus` as spokes and hubs knew it before `reason` (9) and `admitted_size`
/// (10).
#[derive(Clone, PartialEq, Message)]
struct OldAssignmentStatus {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(uint64, tag = "2")]
    observed_version: u64,
    #[prost(enumeration = "BurstPhase", tag = "3")]
    phase: i32,
    #[prost(int32, tag = "4")]
    brokers_ready: i32,
    #[prost(int32, tag = "5")]
    size: i32,
    #[prost(string, tag = "7")]
    message: String,
    #[prost(int32, tag = "8")]
    brokers_draining: i32,
}

/// `SpokeInfo` before `refused_streams` (10) and `certificate_not_after_unix_millis` (11).
#[derive(Clone, PartialEq, Message)]
struct OldSpokeInfo {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(bool, tag = "2")]
    connected: bool,
}

#[test]
fn an_old_spokes_report_reads_as_no_reason_and_no_admitted_size() {
    let old = OldAssignmentStatus {
        key: "ns/mc/b".into(),
        observed_version: 3,
        phase: BurstPhase::Refused.into(),
        brokers_ready: 0,
        size: 2,
        message: "refused".into(),
        brokers_draining: 0,
    };
    let new = AssignmentStatus::decode(old.encode_to_vec().as_slice()).unwrap();
    assert_eq!(
        (new.key.as_str(), new.size, new.message.as_str()),
        ("ns/mc/b", 2, "refused")
    );
    assert_eq!((new.reason.as_str(), new.admitted_size), ("", None));
}

#[test]
fn an_old_hub_reads_a_new_spokes_report_and_skips_what_it_does_not_know() {
    let new = AssignmentStatus {
        key: "ns/mc/b".into(),
        observed_version: 3,
        phase: BurstPhase::Running.into(),
        brokers_ready: 2,
        size: 2,
        reason: "TooManyBrokers".into(),
        admitted_size: Some(2),
        ..Default::default()
    };
    let old = OldAssignmentStatus::decode(new.encode_to_vec().as_slice()).unwrap();
    assert_eq!(
        (old.key.as_str(), old.brokers_ready, old.size),
        ("ns/mc/b", 2, 2)
    );
    // An admitted size of 0 is sent (the field has presence), not taken for "unset".
    let zero = AssignmentStatus {
        admitted_size: Some(0),
        ..Default::default()
    };
    let back = AssignmentStatus::decode(zero.encode_to_vec().as_slice()).unwrap();
    assert_eq!(back.admitted_size, Some(0));
}

#[test]
fn an_old_admin_client_reads_a_new_spoke_listing() {
    let new = SpokeInfo {
        name: "gke".into(),
        connected: true,
        refused_streams: 4,
        certificate_not_after_unix_millis: 1_800_000_000_000,
        ..Default::default()
    };
    let old = OldSpokeInfo::decode(new.encode_to_vec().as_slice()).unwrap();
    assert_eq!((old.name.as_str(), old.connected), ("gke", true));
}
