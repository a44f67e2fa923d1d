//! A hub snapshot and spoke list for the tests of the view model and the output: two
//! MiniClusters (one with a connected and a never-connected burst), three spokes (one that
//! cannot reach its own cluster).

use flux_shared::federation::proto::{BurstPhase, ListSpokesResponse, MiniClusterSnapshot};
use flux_shared::federation::proto::{
    BurstStatus, Condition, Endpoint, MiniClusterRef, MiniClusterStatus, SpokeInfo,
};

pub(super) const NOW: i64 = 1_700_000_000_000;

pub(super) fn reference(ns: &str, name: &str) -> Option<MiniClusterRef> {
    Some(MiniClusterRef {
        namespace: ns.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        generation: 3,
    })
}

pub(super) fn sample() -> (MiniClusterSnapshot, ListSpokesResponse) {
    let snapshot = MiniClusterSnapshot {
        hub_epoch: "e1".into(),
        version: 7,
        miniclusters: vec![
            MiniClusterStatus {
                minicluster: reference("hpc", "bursty"),
                phase: "Running".into(),
                size: 2,
                brokers_ready: 2,
                lead_endpoint: Some(Endpoint {
                    address: "192.0.2.1".into(),
                    port: 30093,
                }),
                created_unix_millis: NOW - 3 * 3_600_000,
                bursts: vec![
                    BurstStatus {
                        skipped: Vec::new(),
                        key: "hpc/bursty/burst-gke".into(),
                        burst_name: "burst-gke".into(),
                        spoke: "gke".into(),
                        spoke_connected: true,
                        size: 4,
                        max_size: 8,
                        brokers_ready: 4,
                        phase: BurstPhase::Running.into(),
                        assigned_version: 3,
                        observed_version: 3,
                        conditions: vec![Condition {
                            r#type: "Complete".into(),
                            status: "False".into(),
                            reason: "".into(),
                            message: "".into(),
                            last_transition_unix_millis: 0,
                        }],
                        message: String::new(),
                        last_report_unix_millis: NOW - 12_000,
                        reason: String::new(),
                        admitted_size: Some(8),
                        path: "Direct".into(),
                        path_reason: "SpokeDeclared".into(),
                        brokers_joined: Some(4),
                        hub_phase: "Running".into(),
                    },
                    BurstStatus {
                        skipped: Vec::new(),
                        key: "hpc/bursty/burst-kind".into(),
                        burst_name: "burst-kind".into(),
                        spoke: "kind-spoke".into(),
                        spoke_connected: false,
                        size: 2,
                        max_size: 2,
                        brokers_ready: 0,
                        phase: 0,
                        assigned_version: 1,
                        observed_version: 0,
                        conditions: vec![],
                        message: "spoke never\nconnected".into(),
                        last_report_unix_millis: 0,
                        reason: String::new(),
                        admitted_size: None,
                        path: String::new(),
                        path_reason: String::new(),
                        brokers_joined: None,
                        hub_phase: String::new(),
                    },
                ],
            },
            MiniClusterStatus {
                minicluster: reference("default", "hello-world"),
                phase: "Pending".into(),
                size: 4,
                brokers_ready: 1,
                lead_endpoint: None,
                created_unix_millis: 0,
                bursts: vec![],
            },
        ],
    };
    let spokes = ListSpokesResponse {
        hub_epoch: "e1".into(),
        hub_version: "0.1.0".into(),
        hub_protocol_revision: 2,
        hub_certificate_not_after_unix_millis: 0,
        ca_not_after_unix_millis: 0,
        spokes: vec![
            SpokeInfo {
                name: "gke".into(),
                connected: true,
                last_seen_unix_millis: NOW - 3_000,
                current_version: 3,
                acknowledged_version: 3,
                assignments: 1,
                spoke_version: "0.1.0".into(),
                protocol_revision: 2,
                certificate_not_after_unix_millis: NOW + 364 * 86_400_000 + 3_600_000,
                ..Default::default()
            },
            SpokeInfo {
                name: "kind-spoke".into(),
                connected: false,
                last_seen_unix_millis: 0,
                current_version: 1,
                acknowledged_version: 0,
                assignments: 1,
                spoke_version: String::new(),
                ..Default::default()
            },
            SpokeInfo {
                name: "onprem".into(),
                connected: true,
                last_seen_unix_millis: NOW - 1_000,
                current_version: 2,
                acknowledged_version: 2,
                assignments: 0,
                spoke_version: "0.1.0".into(),
                cluster_unreachable_since_unix_millis: NOW - 42_000,
                cluster_error: "connection refused".into(),
                refused_streams: 2,
                protocol_revision: 1,
                certificate_not_after_unix_millis: NOW - 3_600_000,
                ..Default::default()
            },
            SpokeInfo {
                name: "west".into(),
                connected: false,
                last_seen_unix_millis: 0,
                refusal: "spoke west speaks protocol revision 4; this hub speaks 2 and serves 1 to 3: upgrade this hub".into(),
                refused_unix_millis: NOW - 5_000,
                ..Default::default()
            },
        ],
    };
    (snapshot, spokes)
}
