//! Who may use a relayed burst's relay listener: the pods of the burst's own Job, by the
//! addresses they hold. The relay Service is reachable from every pod of the burst
//! cluster (a pod in `default` once held a thousand connections of a relayed burst and
//! kept its brokers out), so the listener accepts a connection only from an address that
//! one of those pods holds ([`from_a_broker`]); everything else is closed before any
//! call to the hub is made.
//!
//! A pod is the burst's when the spoke's Job of the burst controls it (its controlling
//! owner reference names the Job's uid, as the Job controller sets it) in the Job's
//! namespace. A pod that finished holds no broker; a terminating pod still does (its
//! broker tells the lead it leaves, through this listener). Anyone who may create pods in
//! the burst's namespace could forge such an owner reference: that is the burst's tenant,
//! whose brokers these are anyway.

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Pod;

/// The addresses of the pods in `namespace` that the Job with uid `job_uid` controls and
/// that may still run a broker (not `Succeeded` or `Failed`). Addresses that do not parse
/// are left out; IPv4-mapped IPv6 addresses count as their IPv4 address.
pub fn broker_addresses<'a>(
    namespace: &str,
    job_uid: &str,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> BTreeSet<IpAddr> {
    let mut out = BTreeSet::new();
    if job_uid.is_empty() {
        return out;
    }
    for pod in pods {
        if pod.metadata.namespace.as_deref() != Some(namespace) {
            continue;
        }
        let controlled = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.kind == "Job" && o.uid == job_uid);
        if !controlled {
            continue;
        }
        let Some(status) = &pod.status else { continue };
        if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
            continue;
        }
        let listed = status.pod_ips.iter().flatten().map(|p| p.ip.as_str());
        for ip in status.pod_ip.as_deref().into_iter().chain(listed) {
            if let Ok(ip) = ip.parse::<IpAddr>() {
                out.insert(ip.to_canonical());
            }
        }
    }
    out
}

/// Whether a connection from `peer` comes from one of the burst's brokers, whose pods
/// hold `brokers` ([`broker_addresses`]). An address not (yet) known is refused: a new
/// broker's ZeroMQ connects again, and by then its pod is listed.
pub fn from_a_broker(peer: IpAddr, brokers: &BTreeSet<IpAddr>) -> bool {
    brokers.contains(&peer.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodIP, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    fn pod(namespace: &str, owner: Option<(&str, &str, bool)>, phase: &str, ips: &[&str]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some("p".into()),
                owner_references: owner.map(|(kind, uid, controller)| {
                    vec![OwnerReference {
                        api_version: "batch/v1".into(),
                        kind: kind.into(),
                        name: "burst".into(),
                        uid: uid.into(),
                        controller: Some(controller),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            status: Some(PodStatus {
                phase: Some(phase.into()),
                pod_ip: ips.first().map(|ip| ip.to_string()),
                pod_ips: Some(ips.iter().map(|ip| PodIP { ip: ip.to_string() }).collect()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ips(list: &[&str]) -> BTreeSet<IpAddr> {
        list.iter()
            .map(|ip| ip.parse().expect("an address"))
            .collect()
    }

    #[test]
    fn only_the_pods_the_bursts_job_controls_and_that_may_run_a_broker_count() {
        let job = Some(("Job", "uid-1", true));
        let pods = [
            pod("hpc", job, "Running", &["10.0.0.1", "fd00::1"]),
            pod("hpc", job, "Pending", &["10.0.0.2"]),
            // Finished: its address may already be another pod's.
            pod("hpc", job, "Succeeded", &["10.0.0.3"]),
            pod("hpc", job, "Failed", &["10.0.0.4"]),
            // Someone else's pods, wherever they run.
            pod("default", job, "Running", &["10.0.0.5"]),
            pod(
                "hpc",
                Some(("Job", "uid-2", true)),
                "Running",
                &["10.0.0.6"],
            ),
            pod(
                "hpc",
                Some(("Job", "uid-1", false)),
                "Running",
                &["10.0.0.7"],
            ),
            pod(
                "hpc",
                Some(("ReplicaSet", "uid-1", true)),
                "Running",
                &["10.0.0.8"],
            ),
            pod("hpc", None, "Running", &["10.0.0.9"]),
            // Not scheduled yet, or an address that is none.
            pod("hpc", job, "Pending", &[]),
            pod("hpc", job, "Running", &["not-an-address"]),
        ];
        assert_eq!(
            broker_addresses("hpc", "uid-1", &pods),
            ips(&["10.0.0.1", "10.0.0.2", "fd00::1"])
        );
        assert!(
            broker_addresses("hpc", "", &pods).is_empty(),
            "a Job without a uid controls nothing"
        );
    }

    #[test]
    fn a_connection_is_admitted_only_from_an_address_a_broker_pod_holds() {
        let brokers = ips(&["10.0.0.1", "fd00::1"]);
        assert!(from_a_broker("10.0.0.1".parse().unwrap(), &brokers));
        assert!(from_a_broker("fd00::1".parse().unwrap(), &brokers));
        assert!(
            from_a_broker("::ffff:10.0.0.1".parse().unwrap(), &brokers),
            "an IPv4-mapped address is its IPv4 address"
        );
        // Any other pod of the cluster, the node, loopback: refused.
        for other in ["10.0.0.2", "10.0.1.1", "127.0.0.1", "::1", "fd00::2"] {
            assert!(!from_a_broker(other.parse().unwrap(), &brokers), "{other}");
        }
        assert!(
            !from_a_broker("10.0.0.1".parse().unwrap(), &BTreeSet::new()),
            "nothing listed yet: nobody"
        );
    }
}
