//! Sample assignments, built the way the hub builds them, and the identity and CURVE
//! certificate they carry.

use flux_shared::api::MiniCluster;
use flux_shared::federation::assignment::build;
use flux_shared::federation::ownership::{INSECURE_FEDERATION, SpokeIdentity};
use flux_shared::federation::proto::Assignment;
use flux_shared::plan::{Endpoint, Plan};

/// The identity of a spoke named `name` running with `--insecure` (the one
/// [`crate::AgentConfig::new`] derives for an insecure development identity).
pub fn sample_identity(name: &str) -> SpokeIdentity {
    SpokeIdentity {
        name: name.to_string(),
        federation: INSECURE_FEDERATION.to_string(),
    }
}

/// Curve certificate of [`sample_assignments`] (a fixed, valid zcert).
pub fn sample_curve_cert() -> String {
    flux_shared::curve::CurveCert::from_secret([7; 32], "sample").to_zcert()
}

/// The assignments the hub would send for MiniCluster `namespace/name` (2 root brokers
/// running `hostname`) bursting to `bursts` (name, size), in order, built with the hub's
/// own [`build`]: they realize in a spoke of the same version.
///
/// # Panics
///
/// If the MiniCluster does not validate (a burst name that is not a DNS label, a size
/// below 1): this is test support.
pub fn sample_assignments(namespace: &str, name: &str, bursts: &[(&str, i32)]) -> Vec<Assignment> {
    sample(namespace, name, bursts, false, &sample_lead())
}

/// [`sample_assignments`] whose brokers reach the lead broker at `lead`.
///
/// # Panics
///
/// As [`sample_assignments`].
pub fn sample_assignments_led_by(
    namespace: &str,
    name: &str,
    bursts: &[(&str, i32)],
    lead: &Endpoint,
) -> Vec<Assignment> {
    sample(namespace, name, bursts, false, lead)
}

/// The lead broker endpoint of [`sample_assignments`] (a documentation address).
pub fn sample_lead() -> Endpoint {
    Endpoint {
        address: "203.0.113.9".into(),
        port: 30093,
    }
}

/// [`sample_assignments`] of relayed bursts (`relay: true`): their brokers reach the lead
/// broker through the spoke's relay listener.
///
/// # Panics
///
/// As [`sample_assignments`].
pub fn sample_relayed_assignments(
    namespace: &str,
    name: &str,
    bursts: &[(&str, i32)],
) -> Vec<Assignment> {
    sample(namespace, name, bursts, true, &sample_lead())
}

/// [`sample_assignments`] whose bursts leave `relay` unset, with the path the hub chose
/// (`relayed`) written into the spec they carry, as the hub's `Plan::route` writes it.
///
/// # Panics
///
/// As [`sample_assignments`].
pub fn sample_routed_assignments(
    namespace: &str,
    name: &str,
    bursts: &[(&str, i32)],
    relayed: bool,
) -> Vec<Assignment> {
    built(
        plan(namespace, name, bursts, false).route(|_| Some(relayed)),
        &sample_lead(),
    )
}

fn sample(
    namespace: &str,
    name: &str,
    bursts: &[(&str, i32)],
    relay: bool,
    lead: &Endpoint,
) -> Vec<Assignment> {
    built(plan(namespace, name, bursts, relay), lead)
}

fn plan(namespace: &str, name: &str, bursts: &[(&str, i32)], relay: bool) -> Plan {
    let clusters: Vec<serde_json::Value> = bursts
        .iter()
        .map(|(burst, size)| {
            let mut c = serde_json::json!({"name": burst, "size": size});
            if relay {
                c["relay"] = true.into();
            }
            c
        })
        .collect();
    let mc: MiniCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"), "generation": 1},
        "spec": {
            "size": 2,
            "containers": [{"image": "ghcr.io/converged-computing/metric-lammps:latest", "command": "hostname"}],
            "flux": {"bursting": {"clusters": clusters}},
        },
    }))
    .expect("sample MiniCluster");
    Plan::new(&mc).expect("sample MiniCluster validates")
}

fn built(plan: Plan, lead: &Endpoint) -> Vec<Assignment> {
    build(&plan, &sample_curve_cert(), Some(lead))
        .expect("sample assignments")
        .into_iter()
        .map(|s| s.assignment)
        .collect()
}
