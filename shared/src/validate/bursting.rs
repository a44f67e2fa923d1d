//! Bursting: the lead broker, burst clusters, the custom hostlist, and the rank-ordered
//! host list the planner gets from validation.

use std::collections::BTreeSet;

use crate::api::{BurstCluster, MiniClusterSpec};
use crate::{hostlist, rank_order};

use super::{Validator, is_dns_label, is_host_address, is_label_value};

/// The most `candidates` one burst names (the schema's bound too).
pub const MAX_CANDIDATES: usize = 16;

impl Validator {
    /// A burst's `candidates`: each one spoke or a non-empty set of labels, none twice,
    /// not together with `cluster`, only on a root instance.
    fn candidates(&mut self, field: &str, declared: &BurstCluster, joins_a_lead: bool) {
        if declared.candidates.is_empty() {
            return;
        }
        let field = format!("{field}.candidates");
        check!(
            self,
            declared.cluster.is_none(),
            field.clone(),
            "name either one cluster or candidates, not both",
        );
        check!(
            self,
            !joins_a_lead,
            field.clone(),
            "only a root MiniCluster's bursts are placed by the hub (this one joins a leadBroker)",
        );
        check!(
            self,
            declared.candidates.len() <= MAX_CANDIDATES,
            field.clone(),
            format!("at most {MAX_CANDIDATES} candidates"),
        );
        let mut seen = BTreeSet::new();
        for (j, c) in declared.candidates.iter().enumerate() {
            let field = format!("{field}[{j}]");
            match (&c.cluster, &c.match_labels) {
                (Some(cluster), None) => self.dns_label(cluster, format!("{field}.cluster")),
                (None, Some(labels)) => {
                    check!(
                        self,
                        !labels.is_empty() && labels.len() <= MAX_CANDIDATES,
                        format!("{field}.matchLabels"),
                        format!("must name between 1 and {MAX_CANDIDATES} labels"),
                    );
                    for (k, v) in labels {
                        self.label_key(k, format!("{field}.matchLabels[{k:?}]"));
                        check!(
                            self,
                            is_label_value(v),
                            format!("{field}.matchLabels[{k:?}]"),
                            format!(
                                "{v:?} must be a valid label value (at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric)"
                            ),
                        );
                    }
                }
                _ => self.err(field.clone(), "set exactly one of cluster and matchLabels"),
            }
            check!(
                self,
                seen.insert((&c.cluster, &c.match_labels)),
                field,
                "is named twice",
            );
        }
    }

    pub(super) fn bursting(&mut self, name: &str, spec: &MiniClusterSpec) {
        let flux = spec.flux();
        let bursting = flux.bursting.as_ref();
        let in_bursting = bursting.and_then(|b| b.lead_broker.as_ref());
        if flux.lead_broker.is_some() && in_bursting.is_some() {
            self.err(
                "spec.flux.leadBroker",
                "set the lead broker either under spec.flux or under spec.flux.bursting, not both",
            );
        }
        let lead_field = if flux.lead_broker.is_some() {
            "spec.flux.leadBroker"
        } else {
            "spec.flux.bursting.leadBroker"
        };
        let clusters = bursting.map(|b| b.clusters.as_slice()).unwrap_or_default();
        let custom = spec.custom_hostlist();
        if custom.is_some() && !clusters.is_empty() {
            self.err(
                "spec.flux.bursting.hostlist",
                "a custom hostlist cannot be combined with bursting.clusters; choose one",
            );
        }
        let bursts = spec.bursts();
        let mut names = BTreeSet::new();
        for (i, (b, declared)) in bursts.iter().zip(clusters).enumerate() {
            let field = format!("spec.flux.bursting.clusters[{i}]");
            self.dns_label(&b.name, format!("{field}.name"));
            check!(
                self,
                b.size >= 0,
                format!("{field}.size"),
                "must be at least 0"
            );
            check!(
                self,
                b.max_size >= 1,
                format!("{field}.maxSize"),
                "must be at least 1"
            );
            check!(
                self,
                b.size <= b.max_size,
                format!("{field}.size"),
                format!("{} is above the burst's maxSize {}", b.size, b.max_size),
            );
            check!(
                self,
                names.insert(b.name.as_str()),
                format!("{field}.name"),
                format!("{:?} is used by more than one burst cluster", b.name),
            );
            if let Some(cluster) = declared.cluster.as_deref() {
                self.dns_label(cluster, format!("{field}.cluster"));
            }
            self.candidates(&field, declared, spec.lead_broker().is_some());
            check!(
                self,
                (0..=b.max_size).contains(&b.min_size),
                format!("{field}.minSize"),
                format!(
                    "{} must be between 0 and the burst's maxSize {}",
                    b.min_size, b.max_size
                ),
            );
            if b.relay {
                let service = b.relay_service();
                check!(
                    self,
                    spec.lead_broker().is_none(),
                    format!("{field}.relay"),
                    "only a root MiniCluster's bursts are relayed (this one joins a leadBroker)",
                );
                check!(
                    self,
                    service.len() <= 63 && b.name.starts_with(|c: char| c.is_ascii_lowercase()),
                    format!("{field}.name"),
                    format!(
                        "a relayed burst's name must start with a letter and leave room for its Service {service:?} (at most 63 characters)"
                    ),
                );
            }
            if is_dns_label(&b.name) && b.max_size >= 1 {
                let longest = format!("{}-{}", b.name, b.max_size - 1);
                check!(
                    self,
                    longest.len() <= 63,
                    format!("{field}.name"),
                    format!("is too long: host {longest:?} would exceed 63 characters"),
                );
            }
        }
        if bursting.is_some_and(|b| b.autoscale.is_some()) && spec.autoscale().is_none() {
            self.err(
                "spec.flux.bursting.autoscale",
                "needs bursting.clusters on a root instance (no leadBroker, no hostlist): there is nothing else to scale",
            );
        }
        if let Some(b) = bursting {
            let root_with_bursts = !clusters.is_empty() && spec.lead_broker().is_none();
            // Only a burst that connects directly uses the lead's external endpoint.
            let all_relayed = !bursts.is_empty() && bursts.iter().all(|b| b.relay);
            for (field, set) in [
                ("spec.flux.bursting.leadAddress", b.lead_address.is_some()),
                (
                    "spec.flux.bursting.leadNodePort",
                    b.lead_node_port.is_some(),
                ),
            ] {
                check!(
                    self,
                    !(set && all_relayed),
                    field,
                    "every burst is relayed (relay: true), so no broker dials the lead's external address and port; remove it, or set relay: false on the bursts that connect directly",
                );
            }
            if let Some(address) = b.lead_address.as_deref() {
                check!(
                    self,
                    root_with_bursts,
                    "spec.flux.bursting.leadAddress",
                    "only a root MiniCluster with bursting.clusters exposes its lead broker",
                );
                check!(
                    self,
                    is_host_address(address),
                    "spec.flux.bursting.leadAddress",
                    "must be an IP address or a DNS name",
                );
            }
            if let Some(port) = b.lead_node_port {
                check!(
                    self,
                    root_with_bursts,
                    "spec.flux.bursting.leadNodePort",
                    "only a root MiniCluster with bursting.clusters exposes its lead broker",
                );
                check!(
                    self,
                    (1..=65535).contains(&port),
                    "spec.flux.bursting.leadNodePort",
                    "must be a port number (1-65535)",
                );
            }
        }
        match spec.lead_broker() {
            None => {
                // A root instance: bursts must not reuse the root's host prefix.
                for (i, b) in bursts.iter().enumerate() {
                    check!(
                        self,
                        b.name != name,
                        format!("spec.flux.bursting.clusters[{i}].name"),
                        "must differ from the MiniCluster's own name (its hosts would collide with the root's)",
                    );
                }
            }
            Some(lead) => {
                check!(
                    self,
                    !lead.address.trim().is_empty(),
                    format!("{lead_field}.address"),
                    "is required",
                );
                check!(
                    self,
                    !lead.address.contains(['/', ' ']),
                    format!("{lead_field}.address"),
                    "must be an IP address or host name",
                );
                self.dns_label(&lead.name, format!("{lead_field}.name"));
                check!(
                    self,
                    lead.size >= 1,
                    format!("{lead_field}.size"),
                    "must be at least 1",
                );
                if let Some(port) = lead.port {
                    check!(
                        self,
                        (1..=65535).contains(&port),
                        format!("{lead_field}.port"),
                        "must be a port number (1-65535)",
                    );
                }
                check!(
                    self,
                    lead.name != name,
                    format!("{lead_field}.name"),
                    "names the lead MiniCluster, which must differ from this (burst) MiniCluster's name",
                );
                if custom.is_none() {
                    match bursts.iter().position(|b| b.name == name) {
                        None => self.err(
                            "spec.flux.bursting.clusters",
                            format!("a MiniCluster joining a lead broker must list itself (name {name:?}) among the burst clusters so its hosts have ranks"),
                        ),
                        Some(i) => check!(self,
                            bursts[i].max_size >= spec.max_size(),
                            format!("spec.flux.bursting.clusters[{i}].{}", if clusters.get(i).is_some_and(|c| c.max_size.is_some()) { "maxSize" } else { "size" }),
                            format!("declares {} hosts but this MiniCluster can run {}", bursts[i].max_size, spec.max_size()),
                        ),
                    }
                }
            }
        }
        if let Some(custom) = custom {
            match hostlist::expand(custom) {
                Err(e) => self.err("spec.flux.bursting.hostlist", e.to_string()),
                Ok(hosts) => {
                    // A set: a list scan per host would be quadratic in the host count.
                    let listed: BTreeSet<&str> = hosts.iter().map(String::as_str).collect();
                    for i in 0..spec.max_size() {
                        let host = format!("{name}-{i}");
                        if !listed.contains(host.as_str()) {
                            self.err(
                                "spec.flux.bursting.hostlist",
                                format!("does not list this MiniCluster's host {host:?}, so that broker would have no rank"),
                            );
                            break;
                        }
                    }
                }
            }
        }
        if rank_order::is_federated(spec) && flux.topology.as_deref().is_some_and(|t| !t.is_empty())
        {
            self.err(
                "spec.flux.topology",
                "cannot be set when bursting: brokers in other clusters can only reach the lead broker, so the tree must be flat",
            );
        }
        if let Ok(hosts) = rank_order::hosts(name, spec) {
            let mut seen = BTreeSet::new();
            if let Some(dup) = hosts.iter().find(|h| !seen.insert(h.as_str())) {
                self.err(
                    "spec.flux.bursting",
                    format!("host {dup:?} appears twice in the instance's host list; every broker needs a unique host name"),
                );
            }
            self.hosts = (!hosts.is_empty()).then_some(hosts);
        }
    }
}
