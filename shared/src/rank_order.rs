//! The rank order of a Flux instance: which hosts make it up, and in which order.
//!
//! A broker's rank is its host's position in one list that every cluster of a federated
//! instance sees in the same order: the root hosts `<name>-0 .. <name>-(maxSize-1)`
//! first, then each burst's `<burst>-0 .. <burst>-(maxSize-1)` in spec order. A MiniCluster that joins a lead
//! broker by hand (`leadBroker`) rebuilds the same list from the lead MiniCluster's name
//! and size. A verbatim `hostlist` replaces the list.
//!
//! The validator computes this list, the planner keeps it ([`crate::plan::Plan::hosts`]),
//! and broker.toml and R ([`resource_set`](crate::resource_set)) list it: one definition, so the order cannot differ between them.

use crate::api::MiniClusterSpec;
use crate::hostlist;

/// Whether the instance spans more than one cluster: it declares bursts, joins a lead
/// broker, or names its hosts with a verbatim hostlist.
pub fn is_federated(spec: &MiniClusterSpec) -> bool {
    let has_bursts = spec
        .flux
        .as_ref()
        .and_then(|f| f.bursting.as_ref())
        .is_some_and(|b| !b.clusters.is_empty());
    has_bursts || spec.lead_broker().is_some() || spec.custom_hostlist().is_some()
}

/// Every host of the instance of MiniCluster `name`, in rank order (the spec is assumed
/// valid; duplicates are the validator's to report). `Err` only for a verbatim hostlist
/// that does not parse.
pub fn hosts(name: &str, spec: &MiniClusterSpec) -> Result<Vec<String>, hostlist::HostlistError> {
    if let Some(custom) = spec.custom_hostlist() {
        return hostlist::expand(custom);
    }
    let (lead_name, lead_size) = match spec.lead_broker() {
        Some(lead) => (lead.name.as_str(), lead.size),
        None => (name, spec.max_size()),
    };
    let mut hosts = Vec::new();
    push_range(&mut hosts, lead_name, lead_size);
    for burst in spec.bursts() {
        push_range(&mut hosts, &burst.name, burst.max_size);
    }
    Ok(hosts)
}

/// Appends `<prefix>-0 .. <prefix>-(count-1)`.
fn push_range(hosts: &mut Vec<String>, prefix: &str, count: i32) {
    hosts.extend((0..count.max(0)).map(|i| format!("{prefix}-{i}")));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> MiniClusterSpec {
        serde_yaml_ng::from_str(yaml).expect("spec")
    }

    #[test]
    fn bursts_declare_their_max_size_hosts_whatever_runs() {
        let s = spec(
            "{size: 1, maxSize: 2, containers: [{image: a}], flux: {bursting: {clusters: [{name: b, size: 0, maxSize: 2}, {name: c, size: 1}]}}}",
        );
        assert_eq!(
            hosts("m", &s).expect("hosts"),
            ["m-0", "m-1", "b-0", "b-1", "c-0"]
        );
    }
}
