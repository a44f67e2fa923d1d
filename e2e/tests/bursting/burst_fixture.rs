//! What every scenario starts from: the MiniCluster of these tests (its name, sizes, image,
//! lead address), the deadlines, and what a dispatched burst is.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::secs;

/// The MiniCluster of these tests.
pub(crate) const NAME: &str = "bursty";
/// Root brokers.
pub(crate) const ROOT_SIZE: i32 = 2;
/// Brokers of the one burst.
pub(crate) const BURST_SIZE: i32 = 2;
/// The label and annotation a spoke puts on everything it creates.
pub(crate) const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub(crate) const SPOKE_MANAGER: &str = "flux-spoke";
pub(crate) const ASSIGNMENT_ANNOTATION: &str = "flux-framework.org/assignment";

/// How long the hub and the spoke get to create, change or delete objects (two clusters,
/// and a spoke that may be in its reconnect backoff).
pub(crate) fn objects_deadline() -> Duration {
    secs(90)
}

/// How long broker pods get to start.
pub(crate) fn pods_deadline() -> Duration {
    secs(120)
}

/// `FLUX_E2E_LEAD_ADDRESS`: the address burst pods reach the root cluster's nodes at
/// (`spec.flux.bursting.leadAddress`). Unset: the hub uses the lead pod's node address.
pub(crate) fn lead_address_override() -> Option<String> {
    std::env::var("FLUX_E2E_LEAD_ADDRESS")
        .ok()
        .map(|a| a.trim().to_string())
        .filter(|a| !a.is_empty())
}

/// `FLUX_E2E_IMAGE`: the application image (default `rockylinux:9`).
pub(crate) fn image() -> String {
    std::env::var("FLUX_E2E_IMAGE")
        .ok()
        .filter(|i| !i.trim().is_empty())
        .unwrap_or_else(|| "rockylinux:9".into())
}

/// What [`dispatch`] found.
pub(crate) struct Burst {
    /// Burst name (Job name and host prefix in the burst cluster).
    pub(crate) name: String,
    /// The burst's objects in the burst cluster.
    pub(crate) objects: Vec<SpokeObject>,
    /// The lead broker's endpoint from `status.leadBroker` (what burst brokers dial).
    pub(crate) lead_address: String,
    /// Its port (the NodePort).
    pub(crate) lead_port: i32,
}

/// An object of the burst in the burst cluster, by uid.
#[derive(Clone, Debug)]
pub(crate) struct SpokeObject {
    pub(crate) kind: &'static str,
    pub(crate) name: String,
    pub(crate) uid: Option<String>,
}

/// The test's MiniCluster: `ROOT_SIZE` interactive brokers and one burst of `BURST_SIZE`
/// on `spoke`.
pub(crate) fn minicluster(burst: &str, spoke: &str, lead_address: Option<&str>) -> Value {
    let mut bursting = json!({
        "clusters": [{"name": burst, "size": BURST_SIZE, "cluster": spoke}],
    });
    if let Some(address) = lead_address {
        bursting["leadAddress"] = json!(address);
    }
    json!({
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": NAME},
        "spec": {
            "size": ROOT_SIZE,
            "interactive": true,
            "flux": {"bursting": bursting},
            "containers": [{"image": image()}],
        },
    })
}

/// A burst name unique to this test run: `burst-<the namespace's random suffix>`.
pub(crate) fn burst_name(ns: &str) -> String {
    let suffix = ns.rsplit('-').next().unwrap_or("x");
    format!("burst-{suffix}")
}
