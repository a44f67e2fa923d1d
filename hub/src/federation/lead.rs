//! Where burst brokers reach the lead broker: a node address and the NodePort of the
//! `<name>-lead` Service. Pure decisions; the controller does the lookups.
//!
//! The address comes, in order, from `spec.flux.bursting.leadAddress`, the hub's
//! `--lead-broker-address` flag, or the ExternalIP, then InternalIP, of the node running
//! the lead broker (index-0) pod. The result is kept in `status.leadBroker`, so a restarted
//! hub, or a lead pod being rescheduled, does not withdraw the bursts' endpoint.

use flux_shared::api::LeadBrokerStatus;
use k8s_openapi::api::core::v1::NodeAddress;

/// What the controller knows when resolving the endpoint.
#[derive(Clone, Copy, Debug, Default)]
pub struct Inputs<'a> {
    /// `spec.flux.bursting.leadAddress`.
    pub spec_address: Option<&'a str>,
    /// `--lead-broker-address`.
    pub flag_address: Option<&'a str>,
    /// The NodePort allocated to the lead broker Service, once it exists.
    pub node_port: Option<i32>,
    /// The node the lead broker pod is scheduled on, if any.
    pub lead_node: Option<&'a str>,
    /// That node's addresses, when looked up.
    pub node_addresses: Option<&'a [NodeAddress]>,
    /// The endpoint in the current status.
    pub previous: Option<&'a LeadBrokerStatus>,
}

/// Whether the controller must read the lead pod's Node to resolve the endpoint: only when
/// no address is configured and the pod runs on a node other than the one recorded.
pub fn needs_node_lookup(inputs: &Inputs<'_>) -> bool {
    inputs.spec_address.is_none()
        && inputs.flag_address.is_none()
        && inputs
            .lead_node
            .is_some_and(|node| inputs.previous.and_then(|p| p.node.as_deref()) != Some(node))
}

/// The endpoint, or why it is not known yet.
pub fn resolve(inputs: &Inputs<'_>) -> Result<LeadBrokerStatus, String> {
    let Some(port) = inputs.node_port else {
        return Err("waiting for the lead broker Service's NodePort".into());
    };
    if let Some(address) = inputs.spec_address.or(inputs.flag_address) {
        return Ok(LeadBrokerStatus {
            address: address.to_string(),
            port,
            node: None,
        });
    }
    let previous = inputs
        .previous
        .filter(|p| p.node.is_some())
        .map(|p| LeadBrokerStatus { port, ..p.clone() });
    let Some(node) = inputs.lead_node else {
        // Not scheduled (yet, or again): keep the last known address.
        return previous.ok_or_else(|| {
            "waiting for the lead broker pod to be scheduled on a node".to_string()
        });
    };
    if let Some(p) = previous
        .as_ref()
        .filter(|p| p.node.as_deref() == Some(node))
    {
        return Ok(p.clone());
    }
    let Some(addresses) = inputs.node_addresses else {
        return previous.ok_or_else(|| format!("waiting for the addresses of node {node}"));
    };
    let pick = |type_: &str| {
        addresses
            .iter()
            .find(|a| a.type_ == type_ && !a.address.is_empty())
            .map(|a| a.address.clone())
    };
    match pick("ExternalIP").or_else(|| pick("InternalIP")) {
        Some(address) => Ok(LeadBrokerStatus {
            address,
            port,
            node: Some(node.to_string()),
        }),
        None => Err(format!(
            "node {node} (running the lead broker) has no ExternalIP or InternalIP address; set spec.flux.bursting.leadAddress or the hub's --lead-broker-address"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(type_: &str, address: &str) -> NodeAddress {
        NodeAddress {
            type_: type_.into(),
            address: address.into(),
        }
    }

    #[test]
    fn configured_addresses_win_in_order() {
        let inputs = Inputs {
            spec_address: Some("spec.example"),
            flag_address: Some("10.0.0.9"),
            node_port: Some(30093),
            lead_node: Some("n1"),
            ..Default::default()
        };
        assert!(!needs_node_lookup(&inputs));
        assert_eq!(resolve(&inputs).unwrap().address, "spec.example");
        let inputs = Inputs {
            spec_address: None,
            ..inputs
        };
        let got = resolve(&inputs).unwrap();
        assert_eq!(
            (got.address.as_str(), got.port, got.node),
            ("10.0.0.9", 30093, None)
        );
    }

    #[test]
    fn node_addresses_prefer_external_then_internal() {
        let both = [
            addr("Hostname", "n1"),
            addr("InternalIP", "10.1.1.1"),
            addr("ExternalIP", "203.0.113.4"),
        ];
        let inputs = Inputs {
            node_port: Some(31000),
            lead_node: Some("n1"),
            node_addresses: Some(&both),
            ..Default::default()
        };
        assert!(needs_node_lookup(&inputs));
        let got = resolve(&inputs).unwrap();
        assert_eq!(
            (got.address.as_str(), got.node.as_deref()),
            ("203.0.113.4", Some("n1"))
        );
        let internal = [addr("InternalIP", "10.1.1.1")];
        let inputs = Inputs {
            node_addresses: Some(&internal),
            ..inputs
        };
        assert_eq!(resolve(&inputs).unwrap().address, "10.1.1.1");
        let none = [addr("Hostname", "n1")];
        let inputs = Inputs {
            node_addresses: Some(&none),
            ..inputs
        };
        assert!(resolve(&inputs).unwrap_err().contains("leadAddress"));
    }

    #[test]
    fn known_endpoints_survive_rescheduling_and_restarts() {
        let previous = LeadBrokerStatus {
            address: "203.0.113.4".into(),
            port: 31000,
            node: Some("n1".into()),
        };
        // Same node: no lookup, same endpoint.
        let inputs = Inputs {
            node_port: Some(31000),
            lead_node: Some("n1"),
            previous: Some(&previous),
            ..Default::default()
        };
        assert!(!needs_node_lookup(&inputs));
        assert_eq!(resolve(&inputs).unwrap(), previous);
        // Pod gone: keep it.
        let inputs = Inputs {
            lead_node: None,
            ..inputs
        };
        assert_eq!(resolve(&inputs).unwrap(), previous);
        // Moved to another node: look it up; until then keep the old one.
        let inputs = Inputs {
            lead_node: Some("n2"),
            ..inputs
        };
        assert!(needs_node_lookup(&inputs));
        assert_eq!(resolve(&inputs).unwrap(), previous);
        let n2 = [addr("ExternalIP", "198.51.100.7")];
        let inputs = Inputs {
            node_addresses: Some(&n2),
            ..inputs
        };
        assert_eq!(resolve(&inputs).unwrap().address, "198.51.100.7");
    }

    #[test]
    fn nothing_known_says_what_it_waits_for() {
        assert!(
            resolve(&Inputs::default())
                .unwrap_err()
                .contains("NodePort")
        );
        let inputs = Inputs {
            node_port: Some(30000),
            ..Default::default()
        };
        assert!(resolve(&inputs).unwrap_err().contains("scheduled"));
    }
}
