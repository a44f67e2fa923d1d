//! The Services: headless (or minimal), the lead broker's (a NodePort while a burst
//! connects directly), a relayed burst's relay Service, and one per sidecar that has ports.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::api::defaults;

use super::{Renderer, labels, lead_service_name};

impl Renderer<'_> {
    pub(super) fn headless_service(&self) -> Service {
        let minimal = self.plan.spec.flux().minimal_service.unwrap_or(false);
        let spec = if minimal {
            // Only the lead broker needs to be reachable by name.
            let mut selector = self.job_selector();
            selector.insert(labels::COMPLETION_INDEX.into(), "0".into());
            ServiceSpec {
                selector: Some(selector),
                ports: Some(vec![broker_port()]),
                ..Default::default()
            }
        } else {
            ServiceSpec {
                cluster_ip: Some("None".into()),
                selector: Some(BTreeMap::from([(
                    labels::NETWORK.to_string(),
                    self.target.headless.clone(),
                )])),
                // DNS records as soon as pods have IPs: brokers connect before Ready.
                publish_not_ready_addresses: Some(true),
                ..Default::default()
            }
        };
        Service {
            metadata: self.meta(self.target.headless.clone()),
            spec: Some(spec),
            ..Default::default()
        }
    }

    pub(super) fn lead_service(&self) -> Service {
        let mut selector = self.job_selector();
        selector.insert(labels::COMPLETION_INDEX.into(), "0".into());
        // Relayed bursts reach the lead at its cluster address, through the hub: a
        // NodePort only while a burst connects directly.
        let direct = self.plan.has_direct_bursts();
        let node_port = self
            .plan
            .spec
            .flux()
            .bursting
            .as_ref()
            .and_then(|b| b.lead_node_port)
            .filter(|_| direct);
        Service {
            metadata: self.meta(lead_service_name(&self.plan.name)),
            spec: Some(ServiceSpec {
                type_: Some(if direct { "NodePort" } else { "ClusterIP" }.into()),
                selector: Some(selector),
                ports: Some(vec![ServicePort {
                    node_port,
                    ..broker_port()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// A relayed burst's Service `name`: no selector, as its one endpoint is the spoke's
    /// relay listener (a pod of another namespace), which the spoke writes in an
    /// EndpointSlice of the same name.
    pub(super) fn relay_service(&self, name: &str) -> Service {
        Service {
            metadata: self.meta(name.to_string()),
            spec: Some(ServiceSpec {
                ports: Some(vec![broker_port()]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub(super) fn sidecar_services(&self) -> Vec<Service> {
        self.plan
            .spec
            .containers
            .iter()
            .enumerate()
            .filter(|(i, c)| *i != self.plan.runner && !c.ports.is_empty())
            .map(|(_, c)| {
                let name = c.name.clone().unwrap_or_default();
                Service {
                    metadata: self.meta(format!("{}-{name}", self.target.job)),
                    spec: Some(ServiceSpec {
                        selector: Some(self.job_selector()),
                        ports: Some(
                            c.ports
                                .iter()
                                .map(|p| ServicePort {
                                    name: Some(format!("tcp-{p}")),
                                    port: *p,
                                    target_port: Some(IntOrString::Int(*p)),
                                    protocol: Some("TCP".into()),
                                    ..Default::default()
                                })
                                .collect(),
                        ),
                        ..Default::default()
                    }),
                    ..Default::default()
                }
            })
            .collect()
    }
}

fn broker_port() -> ServicePort {
    ServicePort {
        name: Some("flux-broker".into()),
        port: defaults::BROKER_PORT,
        target_port: Some(IntOrString::Int(defaults::BROKER_PORT)),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}
