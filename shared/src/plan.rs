//! The planner: a validated MiniCluster plus its federated rank layout (the host list in
//! [`rank_order`]), and what each cluster of the instance runs.

use crate::api::{MiniCluster, MiniClusterSpec, ResolvedBurst, ViewMode, defaults};
use crate::hostlist;
use crate::layout::Layout;
use crate::validate::{self, ValidationErrors};
use crate::{rank_order, resource_set};

/// Where a lead broker is reachable from another cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// IP address or DNS name.
    pub address: String,
    /// TCP port (a NodePort, or 8050).
    pub port: i32,
}

impl Endpoint {
    /// The ZeroMQ URI of the endpoint.
    pub fn uri(&self) -> String {
        if self.address.contains(':') {
            // IPv6 literal
            format!("tcp://[{}]:{}", self.address, self.port)
        } else {
            format!("tcp://{}:{}", self.address, self.port)
        }
    }
}

/// Which cluster's objects to render.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// The root cluster: the MiniCluster's own Job, holding rank 0.
    Root,
    /// Burst `index` (position in `flux.bursting.clusters`), whose brokers reach the lead
    /// broker at `lead`.
    Burst {
        /// Position of the burst in `flux.bursting.clusters`.
        index: usize,
        /// Externally reachable address of the lead broker.
        lead: Endpoint,
    },
}

/// A validated MiniCluster with its rank layout. Building one is the only way to get
/// past validation, so everything downstream can rely on the invariants.
#[derive(Clone, Debug)]
pub struct Plan {
    /// MiniCluster name.
    pub name: String,
    /// MiniCluster namespace.
    pub namespace: String,
    /// MiniCluster uid, when it came from the API server (used for owner references).
    pub uid: Option<String>,
    /// MiniCluster generation, when known.
    pub generation: Option<i64>,
    /// The validated spec.
    pub spec: MiniClusterSpec,
    /// Every host of the instance, in rank order.
    pub hosts: Vec<String>,
    /// `hosts` as a compressed hostlist (computed once; every config file uses it).
    pub hostlist: String,
    /// The resource set R of the instance (identical in every cluster).
    pub resources: String,
    /// Burst clusters with defaults applied.
    pub bursts: Vec<ResolvedBurst>,
    /// Index of the flux-running container.
    pub runner: usize,
    /// Paths inside the broker pods.
    pub layout: Layout,
    /// How the broker pods get the Flux view: the spec's on a cluster without image volumes
    /// ([`MiniClusterSpec::view_mode`]); the controller that applies the plan sets it for
    /// its cluster ([`MiniClusterSpec::view_mode_on`]), or as the live Job was made (see
    /// [`crate::render::live_view_mode`]).
    pub view_mode: ViewMode,
}

/// What one cluster runs: its Job and how its brokers reach each other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Role this target was built for.
    pub role: Role,
    /// Job name; pods are `<job>-<index>`.
    pub job: String,
    /// Job parallelism and completions.
    pub size: i32,
    /// Name of the headless Service (pod subdomain).
    pub headless: String,
    /// Rank 0's host name.
    pub lead_host: String,
    /// How this cluster's brokers reach rank 0 when it is not local.
    pub lead: Option<Endpoint>,
    /// A relayed burst's Service, which its spoke serves and `lead` names.
    pub relay_service: Option<String>,
    /// A hand-applied burst MiniCluster's own burst (its spec names `leadBroker`): it keeps
    /// its own size and Service name, and no spoke makes its objects.
    pub hand_applied: bool,
}

impl Target {
    /// Whether rank 0 runs in this cluster.
    pub fn is_root(&self) -> bool {
        self.lead.is_none()
    }
}

impl Plan {
    /// Validate `mc` and compute its layout; every problem is reported at once.
    pub fn new(mc: &MiniCluster) -> Result<Plan, ValidationErrors> {
        let hosts = validate::validate_hosts(mc)?;
        let name = mc.metadata.name.clone().unwrap_or_default();
        let namespace = mc
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let spec = mc.spec.clone();
        let runner = spec.flux_runner_index().ok_or_else(|| {
            ValidationErrors::single("spec.containers", "exactly one container must run Flux")
        })?;
        let hostlist = hostlist::compress(&hosts);
        let cores = spec.containers.get(runner).map_or(1, |c| c.cores());
        Ok(Plan {
            resources: resource_set::render(hosts.len(), cores, &hostlist),
            hostlist,
            bursts: spec.bursts(),
            name,
            namespace,
            uid: mc.metadata.uid.clone(),
            generation: mc.metadata.generation,
            layout: Layout::of(&spec),
            view_mode: spec.view_mode(),
            spec,
            hosts,
            runner,
        })
    }

    /// Mark the bursts named in `removed` as retired: kept in the rank order (at size 0) so
    /// no later rank moves, but given no role, assignment or status.
    pub fn retire(mut self, removed: &[String]) -> Plan {
        for burst in &mut self.bursts {
            if removed.contains(&burst.name) {
                burst.size = 0;
                burst.retired = true;
            }
        }
        self
    }

    /// Record where the hub placed the bursts that name `candidates`: `placed(index)` is
    /// the spoke chosen for burst `index`, or `None` while it has none (its `cluster`
    /// stays empty). Bursts with one `cluster` keep it.
    pub fn place(mut self, placed: impl Fn(usize) -> Option<String>) -> Plan {
        for (index, burst) in self.bursts.iter_mut().enumerate() {
            if !burst.candidates.is_empty() {
                burst.cluster = placed(index).unwrap_or_default();
            }
        }
        self
    }

    /// Record the path the hub chose for each burst whose spec leaves `relay` unset:
    /// `relayed(index)` is `Some(true)` for the relay, `Some(false)` to connect directly,
    /// `None` while not chosen (it stays direct). The choice is written into the plan's spec
    /// too (`relay` of that burst), so the spec an assignment carries names the path and
    /// the spoke renders exactly it. A burst whose spec sets `relay` keeps it.
    pub fn route(mut self, relayed: impl Fn(usize) -> Option<bool>) -> Plan {
        let declared = self
            .spec
            .flux
            .as_mut()
            .and_then(|f| f.bursting.as_mut())
            .map(|b| &mut b.clusters);
        let mut declared = declared;
        for (index, burst) in self.bursts.iter_mut().enumerate() {
            if !burst.path_chosen_by_hub() {
                continue;
            }
            let Some(relay) = relayed(index) else {
                continue;
            };
            burst.relay = relay;
            if let Some(c) = declared.as_deref_mut().and_then(|c| c.get_mut(index)) {
                c.relay = Some(relay);
            }
        }
        self
    }

    /// Whether any burst runs (is not retired): a root instance then exposes its lead
    /// broker to other clusters.
    pub fn has_running_bursts(&self) -> bool {
        self.bursts.iter().any(|b| !b.retired)
    }

    /// Whether the instance spans more than one cluster ([`rank_order::is_federated`]).
    pub fn is_federated(&self) -> bool {
        rank_order::is_federated(&self.spec)
    }

    /// The role this MiniCluster plays in the cluster it was applied to: `Root`, or for a
    /// MiniCluster with `leadBroker` the burst it names.
    pub fn local_role(&self) -> Role {
        match self.spec.lead_broker() {
            None => Role::Root,
            Some(lead) => Role::Burst {
                index: self
                    .bursts
                    .iter()
                    .position(|b| b.name == self.name)
                    .unwrap_or(0),
                lead: Endpoint {
                    address: lead.address.clone(),
                    port: lead.port.unwrap_or(defaults::BROKER_PORT),
                },
            },
        }
    }

    /// Every role the hub renders for: the root, then each burst that is not retired
    /// (given the lead's external endpoint, which a relayed burst does not use).
    pub fn roles(&self, lead: &Endpoint) -> Vec<Role> {
        std::iter::once(Role::Root)
            .chain(
                self.bursts
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| !b.retired)
                    .filter_map(|(index, _)| {
                        Some(Role::Burst {
                            index,
                            lead: self.burst_lead(index, Some(lead))?,
                        })
                    }),
            )
            .collect()
    }

    /// Where burst `index`'s brokers connect to reach the lead broker: a relayed burst's
    /// own relay Service in its cluster ([`ResolvedBurst::relay_service`]), any other the lead's
    /// external endpoint `direct` (`None` while it is not known, or for an index out of
    /// range).
    pub fn burst_lead(&self, index: usize, direct: Option<&Endpoint>) -> Option<Endpoint> {
        let burst = self.bursts.get(index)?;
        if burst.relay {
            Some(Endpoint {
                address: burst.relay_service(),
                port: defaults::BROKER_PORT,
            })
        } else {
            direct.cloned()
        }
    }

    /// Whether a burst that runs reaches the lead broker directly, so the lead broker
    /// needs an external endpoint (a NodePort at a node's address). Before the hub routes
    /// the plan ([`Plan::route`]), a burst whose path it chooses counts as direct: it may be.
    pub fn has_direct_bursts(&self) -> bool {
        self.bursts.iter().any(|b| !b.retired && !b.relay)
    }

    /// The Job and networking of one role. `None` for a burst index out of range.
    pub fn target(&self, role: &Role) -> Option<Target> {
        let lead_host = self.hosts.first().cloned().unwrap_or_default();
        match role {
            Role::Root => Some(Target {
                role: role.clone(),
                job: self.name.clone(),
                size: self.spec.size,
                headless: self.spec.headless_name(&self.name).to_string(),
                lead_host,
                lead: None,
                relay_service: None,
                hand_applied: false,
            }),
            Role::Burst { index, lead } => {
                let burst = self.bursts.get(*index)?;
                // A hand-applied burst MiniCluster keeps its own size and Service name.
                let manual = self.spec.lead_broker().is_some() && burst.name == self.name;
                Some(Target {
                    role: role.clone(),
                    job: burst.name.clone(),
                    size: if manual { self.spec.size } else { burst.size },
                    headless: if manual {
                        self.spec.headless_name(&self.name).to_string()
                    } else {
                        burst.name.clone()
                    },
                    lead_host,
                    lead: Some(lead.clone()),
                    relay_service: (burst.relay && !manual).then(|| burst.relay_service()),
                    hand_applied: manual,
                })
            }
        }
    }

    /// Broker quorum for rank 0: `minSize`, else `size` when more hosts are declared
    /// than start with the root Job (elastic or bursting), else every rank (`None`).
    pub fn quorum(&self) -> Option<i32> {
        if let Some(min) = self.spec.min_size {
            return Some(min);
        }
        let declared = i32::try_from(self.hosts.len()).unwrap_or(i32::MAX);
        (declared > self.spec.size).then_some(self.spec.size)
    }
}
