//! The output of `flux-hub status`: the aligned tables, the JSON document, and how each
//! `--watch` snapshot is framed (a redrawn terminal, or a separator line).

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use flux_shared::federation::proto::{self, ListSpokesResponse, MiniClusterSnapshot};

use super::view::{burst_phase_name, view};
use crate::commands::Format;

/// `-o json`: the [`StatusView`](super::StatusView), pretty-printed, or on one line when
/// `compact` (for `--watch`). Ends with a newline.
pub fn json(snapshot: &MiniClusterSnapshot, spokes: &ListSpokesResponse, compact: bool) -> String {
    let view = view(snapshot, spokes);
    let mut text = if compact {
        serde_json::to_string(&view)
    } else {
        serde_json::to_string_pretty(&view)
    }
    .expect("the status view serializes");
    text.push('\n');
    text
}

/// The YAML document of a snapshot (`---` first with `--watch`, so that the stream is a
/// sequence of documents).
pub fn yaml(snapshot: &MiniClusterSnapshot, spokes: &ListSpokesResponse, watch: bool) -> String {
    let text =
        serde_yaml_ng::to_string(&view(snapshot, spokes)).expect("the status view serializes");
    if watch { format!("---\n{text}") } else { text }
}

/// How long ago `then_millis` was at `now_millis`: `12s`, `5m`, `3h`, `2d`; `never` for 0
/// (not known); `0s` for a time in the future (clock skew).
pub fn age(then_millis: i64, now_millis: i64) -> String {
    if then_millis <= 0 {
        return "never".into();
    }
    let secs = (now_millis - then_millis).max(0) / 1000;
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 60 * 60 => format!("{}m", s / 60),
        s if s < 48 * 60 * 60 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// When a certificate expires, from now: `in 364d`, `EXPIRED 2d ago`; `-` when unknown.
pub fn expires(not_after_millis: i64, now_millis: i64) -> String {
    if not_after_millis <= 0 {
        return "-".into();
    }
    if not_after_millis <= now_millis {
        return format!("EXPIRED {} ago", age(not_after_millis, now_millis));
    }
    // `age` of the mirrored instant: the same units for the future.
    format!("in {}", age(2 * now_millis - not_after_millis, now_millis))
}

/// How soon before its certificate expires a spoke's health says so (the hub and the
/// spoke warn in their logs from then on too).
pub const CERTIFICATE_WARNING_MILLIS: i64 = 30 * 86_400_000;

/// A spoke's health at a glance: the first of what is wrong, most serious first, or `ok`
/// (`-` for a spoke never heard from).
pub fn health(s: &proto::SpokeInfo, now_millis: i64) -> String {
    let cert = s.certificate_not_after_unix_millis;
    if !s.connected && !s.refusal.is_empty() {
        format!("refused: {}", s.refusal)
    } else if s.cluster_unreachable_since_unix_millis > 0 {
        format!(
            "cluster unreachable for {}: {}",
            age(s.cluster_unreachable_since_unix_millis, now_millis),
            s.cluster_error
        )
    } else if !s.connected {
        if s.last_seen_unix_millis > 0 {
            "disconnected".into()
        } else {
            "-".into()
        }
    } else if cert > 0 && cert <= now_millis {
        format!("certificate {}", expires(cert, now_millis))
    } else if cert > 0 && cert - now_millis < CERTIFICATE_WARNING_MILLIS {
        format!("certificate expires {}", expires(cert, now_millis))
    } else if !s.room_error.is_empty() {
        format!("room not measured: {}", s.room_error)
    } else {
        "ok".into()
    }
}

/// `address:port`, with brackets around an IPv6 address.
fn endpoint(e: &proto::Endpoint) -> String {
    if e.address.contains(':') {
        format!("[{}]:{}", e.address, e.port)
    } else {
        format!("{}:{}", e.address, e.port)
    }
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

/// A cell: control characters (newlines in messages) become spaces, empty becomes `-`.
fn cell(text: &str) -> String {
    let clean: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.is_empty() { "-".into() } else { clean }
}

/// Aligns `rows` (the first is the header) in columns two spaces apart; the last column is
/// not padded and no line has trailing spaces.
fn align(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; columns];
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, c) in row.iter().enumerate() {
            if i + 1 < row.len() {
                let _ = write!(line, "{c:<width$}  ", width = widths[i]);
            } else {
                line.push_str(c);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `-o table`: the MiniClusters table (a root row per MiniCluster, BURST `-`, then a row
/// per burst), a blank line, and the spokes table. `now_millis` is the current time (Unix
/// milliseconds) for the LAST SEEN column.
pub fn table(
    snapshot: &MiniClusterSnapshot,
    spokes: &ListSpokesResponse,
    now_millis: i64,
) -> String {
    let mut out = String::new();
    if snapshot.miniclusters.is_empty() {
        out.push_str("No MiniClusters.\n");
    } else {
        let mut rows = vec![
            [
                "NAMESPACE",
                "MINICLUSTER",
                "BURST",
                "SPOKE",
                "CONNECTED",
                "PHASE",
                "READY",
                "JOINED",
                "SIZE",
                "MAX",
                "PATH",
                "LEAD",
                "VERSION",
                "LAST SEEN",
                "AGE",
                "MESSAGE",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for mc in &snapshot.miniclusters {
            let reference = mc.minicluster.clone().unwrap_or_default();
            let lead = mc.lead_endpoint.as_ref().map_or("-".into(), endpoint);
            // A burst is as old as its MiniCluster, which declares it.
            let created = match mc.created_unix_millis {
                0 => "-".to_string(),
                t => age(t, now_millis),
            };
            rows.push(vec![
                cell(&reference.namespace),
                cell(&reference.name),
                "-".into(),
                "-".into(),
                "-".into(),
                cell(&mc.phase),
                mc.brokers_ready.to_string(),
                "-".into(),
                mc.size.to_string(),
                "-".into(),
                "-".into(),
                lead.clone(),
                "-".into(),
                "-".into(),
                created.clone(),
                String::new(),
            ]);
            for b in &mc.bursts {
                rows.push(vec![
                    cell(&reference.namespace),
                    cell(&reference.name),
                    cell(&b.burst_name),
                    cell(&b.spoke),
                    yes_no(b.spoke_connected),
                    // The hub's phase says whether the brokers joined (Joining, Running);
                    // the spoke's only whether its pods are ready.
                    if b.hub_phase.is_empty() {
                        burst_phase_name(b.phase)
                    } else {
                        cell(&b.hub_phase)
                    },
                    b.brokers_ready.to_string(),
                    b.brokers_joined.map_or("-".into(), |n| n.to_string()),
                    b.size.to_string(),
                    b.max_size.to_string(),
                    if b.path.is_empty() {
                        "-".into()
                    } else {
                        cell(&b.path)
                    },
                    lead.clone(),
                    format!("{}/{}", b.observed_version, b.assigned_version),
                    age(b.last_report_unix_millis, now_millis),
                    created.clone(),
                    match (b.reason.is_empty(), b.message.trim().is_empty()) {
                        // Placed on no candidate yet: why not on each.
                        _ if b.spoke.is_empty() && !b.skipped.is_empty() => {
                            let why: Vec<String> = b
                                .skipped
                                .iter()
                                .map(|s| format!("{} {}", s.spoke, s.reason))
                                .collect();
                            cell(&format!("not placed: {}", why.join(", ")))
                        }
                        (true, true) => String::new(),
                        (true, false) => cell(&b.message),
                        (false, true) => cell(&b.reason),
                        (false, false) => cell(&format!("{}: {}", b.reason, b.message)),
                    },
                ]);
            }
        }
        out.push_str(&align(&rows));
    }
    out.push('\n');
    if let Some(line) = certificates_line(spokes, now_millis) {
        out.push_str(&line);
    }
    if spokes.spokes.is_empty() {
        out.push_str("No spokes.\n");
    } else {
        let mut rows = vec![
            [
                "NAME",
                "CONNECTED",
                "LAST SEEN",
                "VERSION",
                "ASSIGNMENTS",
                "SPOKE VERSION",
                "PROTOCOL",
                "CERT EXPIRES",
                "HEALTH",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for s in &spokes.spokes {
            rows.push(vec![
                cell(&s.name),
                yes_no(s.connected),
                age(s.last_seen_unix_millis, now_millis),
                format!("{}/{}", s.acknowledged_version, s.current_version),
                s.assignments.to_string(),
                cell(&s.spoke_version),
                match s.protocol_revision {
                    0 => "-".to_string(),
                    r => r.to_string(),
                },
                expires(s.certificate_not_after_unix_millis, now_millis),
                cell(&health(s, now_millis)),
            ]);
        }
        out.push_str(&align(&rows));
        for s in spokes
            .spokes
            .iter()
            .filter(|s| !s.ignored_labels.is_empty())
        {
            let ignored: std::collections::BTreeMap<&String, &String> =
                s.ignored_labels.iter().collect();
            let pairs: Vec<String> = ignored.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!(
                "spoke {} announces labels the root did not grant it, ignored: {} (flux-hub join --label grants them)\n",
                s.name,
                pairs.join(", ")
            ));
        }
    }
    out
}

/// When the hub's certificate and the first CA it trusts expire, each marked `(renew)`
/// from [`CERTIFICATE_WARNING_MILLIS`] before; `None` when the hub says neither.
fn certificates_line(spokes: &ListSpokesResponse, now_millis: i64) -> Option<String> {
    let parts: Vec<String> = [
        (
            "hub certificate",
            spokes.hub_certificate_not_after_unix_millis,
        ),
        ("CA", spokes.ca_not_after_unix_millis),
    ]
    .into_iter()
    .filter(|(_, at)| *at > 0)
    .map(|(what, at)| {
        let renew = if at - now_millis < CERTIFICATE_WARNING_MILLIS {
            " (renew)"
        } else {
            ""
        };
        match at > now_millis {
            true => format!("{what} expires {}{renew}", expires(at, now_millis)),
            false => format!("{what} {}{renew}", expires(at, now_millis)),
        }
    })
    .collect();
    (!parts.is_empty()).then(|| format!("{}\n", parts.join(", ")))
}

/// UTC time of Unix milliseconds, RFC 3339 to the second (`2025-01-31T12:00:00Z`).
pub fn utc(now_millis: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(now_millis.div_euclid(1000))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// The line before each snapshot in `--watch -o table` when the output is not a terminal.
pub fn watch_separator(snapshot: &MiniClusterSnapshot, now_millis: i64) -> String {
    format!(
        "--- {} hub epoch {} version {} ---\n",
        utc(now_millis),
        cell(&snapshot.hub_epoch),
        snapshot.version
    )
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// How to print snapshots.
pub(super) struct Printer {
    pub(super) format: Format,
    pub(super) watch: bool,
    pub(super) terminal: bool,
}

impl Printer {
    /// A snapshot and the spoke list, as this printer's format and mode want them.
    pub(super) fn render(
        &self,
        snapshot: &MiniClusterSnapshot,
        spokes: &ListSpokesResponse,
    ) -> String {
        let now = now_millis();
        match (self.format, self.watch) {
            (Format::Json, watch) => json(snapshot, spokes, watch),
            (Format::Yaml, watch) => yaml(snapshot, spokes, watch),
            (Format::Table, false) => table(snapshot, spokes, now),
            (Format::Table, true) if self.terminal => format!(
                "\x1b[H\x1b[2J{}{}",
                watch_separator(snapshot, now),
                table(snapshot, spokes, now)
            ),
            (Format::Table, true) => format!(
                "{}{}\n",
                watch_separator(snapshot, now),
                table(snapshot, spokes, now)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::status::sample::{NOW, reference, sample};
    use flux_shared::federation::proto::Endpoint;

    #[test]
    fn table_has_a_root_row_per_minicluster_and_a_row_per_burst() {
        let (snapshot, spokes) = sample();
        let expected = "\
NAMESPACE  MINICLUSTER  BURST       SPOKE       CONNECTED  PHASE       READY  JOINED  SIZE  MAX  PATH    LEAD             VERSION  LAST SEEN  AGE  MESSAGE
hpc        bursty       -           -           -          Running     2      -       2     -    -       192.0.2.1:30093  -        -          3h
hpc        bursty       burst-gke   gke         yes        Running     4      4       4     8    Direct  192.0.2.1:30093  3/3      12s        3h
hpc        bursty       burst-kind  kind-spoke  no         Unreported  0      -       2     2    -       192.0.2.1:30093  0/1      never      3h   spoke never connected
default    hello-world  -           -           -          Pending     1      -       4     -    -       -                -        -          -

NAME        CONNECTED  LAST SEEN  VERSION  ASSIGNMENTS  SPOKE VERSION  PROTOCOL  CERT EXPIRES    HEALTH
gke         yes        3s         3/3      1            0.1.0          2         in 364d         ok
kind-spoke  no         never      0/1      1            -              -         -               -
onprem      yes        1s         2/2      0            0.1.0          1         EXPIRED 1h ago  cluster unreachable for 42s: connection refused
west        no         never      0/0      0            -              -         -               refused: spoke west speaks protocol revision 4; this hub speaks 2 and serves 1 to 3: upgrade this hub
";
        assert_eq!(table(&snapshot, &spokes, NOW), expected);
    }

    #[test]
    fn health_names_the_most_serious_first() {
        use flux_shared::federation::proto::SpokeInfo;
        let ok = SpokeInfo {
            connected: true,
            last_seen_unix_millis: NOW,
            certificate_not_after_unix_millis: NOW + 90 * 86_400_000,
            ..Default::default()
        };
        assert_eq!(health(&ok, NOW), "ok");
        let soon = SpokeInfo {
            certificate_not_after_unix_millis: NOW + 12 * 86_400_000,
            ..ok.clone()
        };
        assert_eq!(health(&soon, NOW), "certificate expires in 12d");
        let expired = SpokeInfo {
            certificate_not_after_unix_millis: NOW - 3_600_000,
            ..ok.clone()
        };
        assert_eq!(health(&expired, NOW), "certificate EXPIRED 1h ago");
        let room = SpokeInfo {
            room_error: "nodes: forbidden".into(),
            ..ok.clone()
        };
        assert_eq!(health(&room, NOW), "room not measured: nodes: forbidden");
        let gone = SpokeInfo {
            connected: false,
            ..ok.clone()
        };
        assert_eq!(health(&gone, NOW), "disconnected");
        // A refusal shows only while it keeps the spoke out.
        let refused = SpokeInfo {
            refusal: "spoke a speaks protocol revision 9".into(),
            ..gone.clone()
        };
        assert_eq!(
            health(&refused, NOW),
            "refused: spoke a speaks protocol revision 9"
        );
        assert_eq!(
            health(
                &SpokeInfo {
                    connected: true,
                    ..refused
                },
                NOW
            ),
            "ok"
        );
    }

    #[test]
    fn the_hubs_certificates_show_above_the_spokes_and_say_when_to_renew() {
        let (snapshot, mut spokes) = sample();
        spokes.hub_certificate_not_after_unix_millis = NOW + 20 * 86_400_000;
        spokes.ca_not_after_unix_millis = NOW + 3000 * 86_400_000;
        let text = table(&snapshot, &spokes, NOW);
        assert!(
            text.contains(
                "\nhub certificate expires in 20d (renew), CA expires in 3000d\nNAME        CONNECTED"
            ),
            "{text}"
        );
        spokes.hub_certificate_not_after_unix_millis = 0;
        spokes.ca_not_after_unix_millis = NOW - 1000;
        assert!(table(&snapshot, &spokes, NOW).contains("\nCA EXPIRED 1s ago (renew)\n"),);
    }

    #[test]
    fn empty_tables_say_so() {
        let out = table(
            &MiniClusterSnapshot::default(),
            &ListSpokesResponse::default(),
            NOW,
        );
        assert_eq!(out, "No MiniClusters.\n\nNo spokes.\n");
    }

    #[test]
    fn columns_align_with_wide_cells() {
        let (mut snapshot, spokes) = sample();
        snapshot.miniclusters.truncate(1);
        snapshot.miniclusters[0].minicluster = reference("a-very-long-namespace", "x");
        snapshot.miniclusters[0].lead_endpoint = Some(Endpoint {
            address: "2001:db8::1".into(),
            port: 30050,
        });
        let out = table(&snapshot, &spokes, NOW);
        let lines: Vec<&str> = out.lines().take(4).collect();
        // Every column starts at the same offset on every line.
        for header in ["MINICLUSTER", "BURST", "LEAD", "VERSION", "MESSAGE"] {
            let at = lines[0].find(header).unwrap();
            // (The root row has no MESSAGE: its line ends before.)
            for line in lines[1..].iter().filter(|l| l.len() > at) {
                assert_eq!(&line[at - 2..at], "  ", "{header} in {line:?}");
                assert_ne!(line.as_bytes()[at], b' ', "{header} in {line:?}");
            }
        }
        assert!(out.contains("[2001:db8::1]:30050"));
        assert!(out.lines().all(|l| l == l.trim_end()), "no trailing spaces");
    }

    #[test]
    fn ages() {
        assert_eq!(age(0, NOW), "never");
        assert_eq!(age(NOW, NOW), "0s");
        assert_eq!(age(NOW + 5_000, NOW), "0s");
        assert_eq!(age(NOW - 59_999, NOW), "59s");
        assert_eq!(age(NOW - 60_000, NOW), "1m");
        assert_eq!(age(NOW - 5 * 60_000 - 30_000, NOW), "5m");
        assert_eq!(age(NOW - 3 * 3_600_000, NOW), "3h");
        assert_eq!(age(NOW - 47 * 3_600_000, NOW), "47h");
        assert_eq!(age(NOW - 3 * 86_400_000, NOW), "3d");
    }

    #[test]
    fn json_is_the_documented_structure() {
        let (snapshot, spokes) = sample();
        let value: serde_json::Value =
            serde_json::from_str(&json(&snapshot, &spokes, false)).unwrap();
        // Apart from the rest: one json! this deep passes the macro recursion limit.
        let bursts = serde_json::json!([
            {
                "key": "hpc/bursty/burst-gke",
                "name": "burst-gke",
                "spoke": "gke",
                "spokeConnected": true,
                "phase": "Running",
                "size": 4,
                "maxSize": 8,
                "brokersReady": 4,
                "assignedVersion": 3,
                "observedVersion": 3,
                "lastReportUnixMillis": NOW - 12_000,
                "message": "",
                "reason": "",
                "admittedSize": 8,
                "skipped": [],
                "hubPhase": "Running",
                "path": "Direct",
                "pathReason": "SpokeDeclared",
                "brokersJoined": 4,
                "conditions": [{
                    "type": "Complete",
                    "status": "False",
                    "reason": "",
                    "message": "",
                    "lastTransitionUnixMillis": null
                }]
            },
            {
                "key": "hpc/bursty/burst-kind",
                "name": "burst-kind",
                "spoke": "kind-spoke",
                "spokeConnected": false,
                "phase": "Unreported",
                "size": 2,
                "maxSize": 2,
                "brokersReady": 0,
                "assignedVersion": 1,
                "observedVersion": 0,
                "lastReportUnixMillis": null,
                "message": "spoke never\nconnected",
                "reason": "",
                "admittedSize": null,
                "skipped": [],
                "hubPhase": null,
                "path": null,
                "pathReason": null,
                "brokersJoined": null,
                "conditions": []
            }
        ]);
        let expected = serde_json::json!({
            "schemaVersion": 1,
            "hubEpoch": "e1",
            "hubCertificateNotAfterUnixMillis": null,
            "caNotAfterUnixMillis": null,
            "version": 7,
            "miniClusters": [
                {
                    "namespace": "hpc",
                    "name": "bursty",
                    "uid": "uid-bursty",
                    "generation": 3,
                    "phase": "Running",
                    "size": 2,
                    "brokersReady": 2,
                    "leadEndpoint": {"address": "192.0.2.1", "port": 30093},
                    "createdUnixMillis": NOW - 3 * 3_600_000,
                    "bursts": bursts,
                },
                {
                    "namespace": "default",
                    "name": "hello-world",
                    "uid": "uid-hello-world",
                    "generation": 3,
                    "phase": "Pending",
                    "size": 4,
                    "brokersReady": 1,
                    "leadEndpoint": null,
                    "createdUnixMillis": null,
                    "bursts": []
                }
            ],
            "spokes": [
                {
                    "name": "gke",
                    "connected": true,
                    "lastSeenUnixMillis": NOW - 3_000,
                    "currentVersion": 3,
                    "acknowledgedVersion": 3,
                    "assignments": 1,
                    "spokeVersion": "0.1.0",
                    "refusedStreams": 0,
                    "certificateNotAfterUnixMillis": NOW + 364 * 86_400_000 + 3_600_000,
                    "clusterUnreachableSinceUnixMillis": null,
                    "clusterError": "",
                    "roomObservedUnixMillis": null,
                    "roomError": "",
                    "labels": {},
                    "ignoredLabels": {},
                    "protocolRevision": 2,
                    "refusal": "",
                    "refusedUnixMillis": null,
                    "certificateIssuer": ""
                },
                {
                    "name": "kind-spoke",
                    "connected": false,
                    "lastSeenUnixMillis": null,
                    "currentVersion": 1,
                    "acknowledgedVersion": 0,
                    "assignments": 1,
                    "spokeVersion": "",
                    "refusedStreams": 0,
                    "certificateNotAfterUnixMillis": null,
                    "clusterUnreachableSinceUnixMillis": null,
                    "clusterError": "",
                    "roomObservedUnixMillis": null,
                    "roomError": "",
                    "labels": {},
                    "ignoredLabels": {},
                    "protocolRevision": null,
                    "refusal": "",
                    "refusedUnixMillis": null,
                    "certificateIssuer": ""
                },
                {
                    "name": "onprem",
                    "connected": true,
                    "lastSeenUnixMillis": NOW - 1_000,
                    "currentVersion": 2,
                    "acknowledgedVersion": 2,
                    "assignments": 0,
                    "spokeVersion": "0.1.0",
                    "refusedStreams": 2,
                    "certificateNotAfterUnixMillis": NOW - 3_600_000,
                    "clusterUnreachableSinceUnixMillis": NOW - 42_000,
                    "clusterError": "connection refused",
                    "roomObservedUnixMillis": null,
                    "roomError": "",
                    "labels": {},
                    "ignoredLabels": {},
                    "protocolRevision": 1,
                    "refusal": "",
                    "refusedUnixMillis": null,
                    "certificateIssuer": ""
                },
                {
                    "name": "west",
                    "connected": false,
                    "lastSeenUnixMillis": null,
                    "currentVersion": 0,
                    "acknowledgedVersion": 0,
                    "assignments": 0,
                    "spokeVersion": "",
                    "refusedStreams": 0,
                    "certificateNotAfterUnixMillis": null,
                    "clusterUnreachableSinceUnixMillis": null,
                    "clusterError": "",
                    "roomObservedUnixMillis": null,
                    "roomError": "",
                    "labels": {},
                    "ignoredLabels": {},
                    "protocolRevision": null,
                    "refusal": "spoke west speaks protocol revision 4; this hub speaks 2 and serves 1 to 3: upgrade this hub",
                    "refusedUnixMillis": NOW - 5_000,
                    "certificateIssuer": ""
                }
            ]
        });
        assert_eq!(value, expected);
    }

    #[test]
    fn compact_json_is_one_line() {
        let (snapshot, spokes) = sample();
        let text = json(&snapshot, &spokes, true);
        assert_eq!(text.matches('\n').count(), 1);
        assert!(text.ends_with("}\n"));
        assert!(text.starts_with("{\"schemaVersion\":1,\"hubEpoch\":\"e1\",\"version\":7,"));
    }

    #[test]
    fn separator_and_time() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(NOW), "2023-11-14T22:13:20Z");
        let (snapshot, _) = sample();
        assert_eq!(
            watch_separator(&snapshot, NOW),
            "--- 2023-11-14T22:13:20Z hub epoch e1 version 7 ---\n"
        );
    }
}
