//! Assignments: what the hub sends a spoke for one burst ([`build`]), and the objects a
//! spoke makes of one ([`realize`]).
//!
//! Both sides run the same planner and renderer. The hub ships the MiniCluster's spec
//! verbatim together with the broker.toml and R it rendered; the spoke re-plans, renders the
//! burst role and refuses the assignment unless its broker.toml and R are byte-identical to
//! the hub's (mismatched rank maps would make brokers refuse each other at run time).
//!
//! Objects a spoke creates carry `app.kubernetes.io/managed-by: flux-spoke`, the spoke's
//! name and its federation's identity and the assignment key in the
//! [`ASSIGNMENT_ANNOTATION`] annotation (all defined in [`super::ownership`]): the spoke
//! rebuilds what it owns from those after a restart ([`super::ownership::ownership`]).
//!
//! Size: about 260 of its lines are the tests.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use prost::bytes::Bytes;

use super::assignment_key;
use super::ownership::{
    ASSIGNMENT_ANNOTATION, FEDERATION_LABEL, SPOKE_LABEL, SPOKE_MANAGER, SpokeIdentity,
};
use super::proto;
use crate::api::{MiniCluster, MiniClusterSpec};
use crate::broker_toml;
use crate::plan::{Endpoint, Plan, Role};
use crate::render::{self, Object, labels};

/// Annotation holding the uid of the MiniCluster (in the hub's cluster) an object of a
/// spoke belongs to.
pub const MINICLUSTER_UID_ANNOTATION: &str = "flux-framework.org/minicluster-uid";

/// One assignment and the spoke it is for.
#[derive(Clone, Debug, PartialEq)]
pub struct SpokeAssignment {
    /// Name of the spoke (the burst's `cluster`).
    pub spoke: String,
    /// The assignment, complete but for versions (which the hub's registry keeps).
    pub assignment: proto::Assignment,
}

/// Errors building an assignment on the hub.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    /// The spec cannot be serialised (never happens for a spec that validated).
    #[error("cannot serialise the MiniCluster spec: {0}")]
    Spec(String),
    /// A burst connects to the lead broker directly and its external endpoint is not known.
    #[error(
        "burst {0:?} connects to the lead broker directly, whose external endpoint is not known yet"
    )]
    NoLead(String),
}

/// The assignments of every running (not retired) burst of `plan`, in spec order: the MiniCluster's spec,
/// `curve_cert` (zcert text; the spec's own `curveCert` wins, as in the renderer), where
/// its brokers reach the lead broker (`lead`, its external endpoint, which only bursts
/// that connect directly need: [`Plan::burst_lead`]), and the burst's broker.toml and R.
pub fn build(
    plan: &Plan,
    curve_cert: &str,
    lead: Option<&Endpoint>,
) -> Result<Vec<SpokeAssignment>, BuildError> {
    if !plan.has_running_bursts() {
        return Ok(Vec::new());
    }
    // One buffer each for the spec and R, shared by every burst's assignment.
    let spec_json: prost::bytes::Bytes = serde_json::to_vec(&plan.spec)
        .map_err(|e| BuildError::Spec(e.to_string()))?
        .into();
    let resource_set = prost::bytes::Bytes::from(plan.resources.clone());
    let cert = plan.spec.flux().curve_cert().unwrap_or(curve_cert);
    let minicluster = proto::MiniClusterRef {
        namespace: plan.namespace.clone(),
        name: plan.name.clone(),
        uid: plan.uid.clone().unwrap_or_default(),
        generation: plan.generation.unwrap_or_default(),
    };
    let mut out = Vec::with_capacity(plan.bursts.len());
    for (index, burst) in plan.bursts.iter().enumerate() {
        // Retired, or (naming candidates) placed on no spoke yet: nothing to send.
        if burst.retired || burst.cluster.is_empty() {
            continue;
        }
        let lead = plan
            .burst_lead(index, lead)
            .ok_or_else(|| BuildError::NoLead(burst.name.clone()))?;
        let role = Role::Burst {
            index,
            lead: lead.clone(),
        };
        let Some(target) = plan.target(&role) else {
            continue;
        };
        out.push(SpokeAssignment {
            spoke: burst.cluster.clone(),
            assignment: proto::Assignment {
                key: assignment_key(&plan.namespace, &plan.name, &burst.name),
                minicluster: Some(minicluster.clone()),
                burst_name: burst.name.clone(),
                burst_size: target.size,
                burst_index: u32::try_from(index).unwrap_or(u32::MAX),
                minicluster_spec_json: spec_json.clone(),
                curve_cert: cert.to_string(),
                lead_endpoint: Some((&lead).into()),
                broker_toml: broker_toml::render(plan, &target),
                resource_set: resource_set.clone(),
                shares_with: String::new(),
            },
        });
    }
    Ok(out)
}

/// Why a spoke refuses an assignment (reported as `BURST_PHASE_REFUSED`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RealizeError {
    /// A required field is missing or malformed.
    #[error("assignment {key:?}: {problem}")]
    Malformed {
        /// Assignment key.
        key: String,
        /// What is wrong.
        problem: String,
    },
    /// The shipped spec does not validate here (for example a hub/spoke version skew).
    #[error("assignment {key:?}: the MiniCluster spec does not validate in this spoke: {problem}")]
    InvalidSpec {
        /// Assignment key.
        key: String,
        /// Validation errors.
        problem: String,
    },
    /// The spoke renders a different broker.toml or R than the hub did.
    #[error(
        "assignment {key:?}: this spoke renders a different {what} than the hub; refusing to start brokers with a different rank map (is the spoke's version {version} the hub's?)"
    )]
    ConfigMismatch {
        /// Assignment key.
        key: String,
        /// `broker.toml` or `R`.
        what: &'static str,
        /// This spoke's version.
        version: &'static str,
    },
}

/// The objects of one assignment, ready to apply in the spoke's cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct Realized {
    /// Assignment key.
    pub key: String,
    /// Namespace of every object (the MiniCluster's namespace in the hub's cluster).
    pub namespace: String,
    /// Name of the burst's Indexed Job.
    pub job: String,
    /// Brokers the Job runs.
    pub size: i32,
    /// Objects in apply order (ConfigMap and Secret before the Job).
    pub objects: Vec<Object>,
    /// Hosts the burst declares (its `maxSize`): the most brokers it ever runs.
    pub hosts: i32,
    /// A relayed burst's relay Service (among `objects`), which the spoke serves.
    pub relay_service: Option<String>,
}

impl Realized {
    /// The metadata of the relayed burst's relay Service, as rendered and claimed.
    pub fn relay(&self) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta> {
        let name = self.relay_service.as_deref()?;
        self.objects.iter().find_map(|o| match o {
            Object::Service(s) if s.metadata.name.as_deref() == Some(name) => Some(&s.metadata),
            _ => None,
        })
    }
}

/// Re-plan and render one assignment's burst role, checking config identity with the hub,
/// and label every object as made by the spoke `me`.
pub fn realize(a: &proto::Assignment, me: &SpokeIdentity) -> Result<Realized, RealizeError> {
    Ok(prepare(a, &mut PlanCache::default())?.realize(&a.curve_cert, me))
}

/// Plans shared by the bursts of one MiniCluster: the spec they carry (one buffer, which
/// the spoke's assembler shares between them) is parsed, validated and planned once, with
/// the view as the spoke's cluster gives a new Job's pods.
#[derive(Default)]
pub struct PlanCache {
    /// By MiniCluster (namespace, name, uid): the spec it was planned from, and the plan.
    plans: HashMap<(String, String, String), (Bytes, Arc<Plan>)>,
    /// Whether the cluster mounts images as volumes.
    image_volumes: bool,
}

impl PlanCache {
    /// Plans for a cluster that mounts images as volumes (`image_volumes`) or not
    /// ([`crate::api::MiniClusterSpec::view_mode_on`]): a burst whose live Job was made
    /// otherwise copies its plan ([`Prepared::render_view`]), the others share one.
    pub fn for_cluster(image_volumes: bool) -> PlanCache {
        PlanCache {
            plans: HashMap::new(),
            image_volumes,
        }
    }

    fn plan(
        &mut self,
        mc: &proto::MiniClusterRef,
        spec_json: &Bytes,
    ) -> Result<Arc<Plan>, PlanError> {
        let id = (mc.namespace.clone(), mc.name.clone(), mc.uid.clone());
        if let Some((spec, plan)) = self.plans.get(&id)
            // The same buffer (shared by the assembler), or equal bytes.
            && ((spec.as_ptr() == spec_json.as_ptr() && spec.len() == spec_json.len())
                || spec == spec_json)
        {
            return Ok(plan.clone());
        }
        let spec: MiniClusterSpec =
            serde_json::from_slice(spec_json).map_err(|e| PlanError::Parse(e.to_string()))?;
        let minicluster = MiniCluster {
            metadata: ObjectMeta {
                name: Some(mc.name.clone()),
                namespace: Some(mc.namespace.clone()),
                ..Default::default()
            },
            spec,
            status: None,
        };
        let mut plan = Plan::new(&minicluster).map_err(|e| PlanError::Invalid(e.to_string()))?;
        plan.view_mode = plan.spec.view_mode_on(self.image_volumes);
        let plan = Arc::new(plan);
        self.plans.insert(id, (spec_json.clone(), plan.clone()));
        Ok(plan)
    }
}

/// Why a carried spec gives no plan.
enum PlanError {
    /// It is not a MiniCluster spec.
    Parse(String),
    /// It does not validate here.
    Invalid(String),
}

/// One assignment checked against the spec it carries (its key, lead endpoint, burst,
/// size, broker.toml and R), planned but not rendered: what a spoke's policy needs
/// ([`Prepared::pod`]) before anything as large as the scripts is built
/// ([`Prepared::realize`]).
#[derive(Clone, Debug)]
pub struct Prepared {
    /// Assignment key.
    pub key: String,
    /// Namespace of every object (the MiniCluster's namespace in the hub's cluster).
    pub namespace: String,
    /// Name of the burst's Indexed Job.
    pub job: String,
    /// Brokers the Job runs.
    pub size: i32,
    plan: Arc<Plan>,
    role: Role,
    uid: String,
}

impl Prepared {
    /// The MiniCluster spec the assignment carries, as parsed.
    pub fn spec(&self) -> &MiniClusterSpec {
        &self.plan.spec
    }

    /// Renders the burst's pods with the view as its live Job was made (`mode`:
    /// [`render::live_view_mode`]). The plan this burst shares with its MiniCluster's
    /// other bursts is copied for it only when that changes it (a Job made by an earlier
    /// release, or before the cluster's image volumes were known).
    pub fn render_view(&mut self, mode: crate::api::ViewMode) {
        if self.plan.view_mode != mode {
            Arc::make_mut(&mut self.plan).view_mode = mode;
        }
    }

    /// The pod the burst's Job runs, as rendered.
    pub fn pod(&self) -> Option<k8s_openapi::api::core::v1::PodSpec> {
        render::render_job(&self.plan, &self.role)?
            .spec?
            .template
            .spec
    }

    /// Every object of the burst, labelled as made by the spoke `me`, with the instance's
    /// CURVE certificate `curve_cert`.
    pub fn realize(&self, curve_cert: &str, me: &SpokeIdentity) -> Realized {
        let mut objects = render::render(&self.plan, &self.role, curve_cert).unwrap_or_default();
        for object in &mut objects {
            claim(object, &self.key, &self.uid, me);
        }
        let target = self.plan.target(&self.role);
        Realized {
            key: self.key.clone(),
            namespace: self.namespace.clone(),
            job: self.job.clone(),
            size: self.size,
            objects,
            hosts: match &self.role {
                Role::Burst { index, .. } => self.plan.bursts.get(*index).map_or(0, |b| b.max_size),
                Role::Root => 0,
            },
            relay_service: target.and_then(|t| t.relay_service),
        }
    }
}

/// Checks assignment `a` and plans its burst (with `cache`, shared by the bursts of one
/// MiniCluster), without rendering it.
pub fn prepare(a: &proto::Assignment, cache: &mut PlanCache) -> Result<Prepared, RealizeError> {
    let key = a.key.clone();
    let malformed = |problem: &str| RealizeError::Malformed {
        key: key.clone(),
        problem: problem.to_string(),
    };
    let mc_ref = a
        .minicluster
        .as_ref()
        .ok_or_else(|| malformed("no MiniCluster reference"))?;
    if a.key != assignment_key(&mc_ref.namespace, &mc_ref.name, &a.burst_name) {
        return Err(malformed(
            "the key does not match the MiniCluster reference and burst name",
        ));
    }
    let lead: Endpoint = a
        .lead_endpoint
        .as_ref()
        .ok_or_else(|| malformed("no lead broker endpoint"))?
        .into();
    if lead.address.is_empty() || !(1..=65535).contains(&lead.port) {
        return Err(malformed(
            "the lead broker endpoint needs an address and a port",
        ));
    }
    let plan = cache
        .plan(mc_ref, &a.minicluster_spec_json)
        .map_err(|e| match e {
            PlanError::Parse(e) => malformed(&format!("the MiniCluster spec does not parse: {e}")),
            PlanError::Invalid(problem) => RealizeError::InvalidSpec {
                key: key.clone(),
                problem,
            },
        })?;
    let index = usize::try_from(a.burst_index).unwrap_or(usize::MAX);
    match plan.bursts.get(index) {
        Some(b) if b.name == a.burst_name => {}
        _ => {
            return Err(malformed(
                "the burst index does not name this burst in the spec",
            ));
        }
    }
    // A relayed burst's brokers connect to its relay Service, which this spoke serves.
    if let Some(relay) = plan.burst_lead(index, None)
        && relay != lead
    {
        return Err(malformed(&format!(
            "the burst is relayed: its lead broker endpoint must be its relay Service {}",
            relay.uri()
        )));
    }
    let role = Role::Burst { index, lead };
    let target = plan
        .target(&role)
        .ok_or_else(|| malformed("the burst index is out of range"))?;
    if target.size != a.burst_size {
        return Err(malformed("the burst size does not match the spec"));
    }
    let version = env!("CARGO_PKG_VERSION");
    if broker_toml::render(&plan, &target) != a.broker_toml {
        return Err(RealizeError::ConfigMismatch {
            key,
            what: "broker.toml",
            version,
        });
    }
    if plan.resources.as_bytes() != a.resource_set.as_ref() {
        return Err(RealizeError::ConfigMismatch {
            key,
            what: "R",
            version,
        });
    }
    Ok(Prepared {
        key,
        namespace: plan.namespace.clone(),
        job: target.job,
        size: target.size,
        uid: mc_ref.uid.clone(),
        plan,
        role,
    })
}

/// Mark an object (and a Job's pod template) as the spoke `me`'s, for assignment `key`.
fn claim(object: &mut Object, key: &str, uid: &str, me: &SpokeIdentity) {
    let mark = |meta: &mut ObjectMeta| {
        let l = meta.labels.get_or_insert_with(BTreeMap::new);
        l.insert(labels::MANAGED_BY.into(), SPOKE_MANAGER.into());
        l.insert(SPOKE_LABEL.into(), me.name.clone());
        l.insert(FEDERATION_LABEL.into(), me.federation.clone());
        let annotations = meta.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(ASSIGNMENT_ANNOTATION.into(), key.into());
        if !uid.is_empty() {
            annotations.insert(MINICLUSTER_UID_ANNOTATION.into(), uid.into());
        }
        // The MiniCluster lives in another cluster: nothing here can own these objects.
        meta.owner_references = None;
    };
    match object {
        Object::ConfigMap(o) => mark(&mut o.metadata),
        Object::Secret(o) => mark(&mut o.metadata),
        Object::Service(o) => mark(&mut o.metadata),
        Object::Pod(o) => mark(&mut o.metadata),
        Object::Job(o) => {
            mark(&mut o.metadata);
            if let Some(template) = o.spec.as_mut().and_then(|s| s.template.metadata.as_mut())
                && let Some(l) = template.labels.as_mut()
                && l.contains_key(labels::MANAGED_BY)
            {
                l.insert(labels::MANAGED_BY.into(), SPOKE_MANAGER.into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::federation::ownership::owned_key;

    fn bursting() -> Plan {
        let yaml = r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {name: root, namespace: hpc, uid: u-1, generation: 3}
spec:
  size: 2
  containers: [{image: "ghcr.io/converged-computing/metric-lammps:latest", command: "lmp -in in.reaxc.hns"}]
  flux:
    bursting:
      clusters:
        - {name: gke, size: 3}
        - {name: kind-b, size: 1, cluster: edge}
"#;
        let mc: MiniCluster = serde_yaml_ng::from_str(yaml).unwrap();
        Plan::new(&mc).unwrap()
    }

    fn me() -> SpokeIdentity {
        SpokeIdentity {
            name: "edge".into(),
            federation: "0123456789abcdef0123456789abcdef".into(),
        }
    }

    fn lead() -> Endpoint {
        Endpoint {
            address: "203.0.113.9".into(),
            port: 30093,
        }
    }

    #[test]
    fn one_assignment_per_burst_for_its_spoke() {
        let plan = bursting();
        let out = build(&plan, "CERT", Some(&lead())).unwrap();
        let spokes: Vec<_> = out.iter().map(|s| s.spoke.as_str()).collect();
        assert_eq!(spokes, ["gke", "edge"]);
        let a = &out[1].assignment;
        assert_eq!(a.key, "hpc/root/kind-b");
        assert_eq!(a.burst_index, 1);
        assert_eq!(a.burst_size, 1);
        assert_eq!(a.curve_cert, "CERT");
        assert_eq!(a.minicluster.as_ref().unwrap().uid, "u-1");
        assert_eq!(a.minicluster.as_ref().unwrap().generation, 3);
        assert!(a.broker_toml.contains("tcp://203.0.113.9:30093"));
    }

    #[test]
    fn the_bursts_of_one_minicluster_share_one_plan_and_render_only_when_asked() {
        let plan = bursting();
        let out = build(&plan, "CERT", Some(&lead())).unwrap();
        let mut cache = PlanCache::default();
        let a = prepare(&out[0].assignment, &mut cache).unwrap();
        let b = prepare(&out[1].assignment, &mut cache).unwrap();
        assert!(Arc::ptr_eq(&a.plan, &b.plan), "one plan for both bursts");
        assert_eq!((a.size, b.size), (3, 1));
        let pod = b.pod().expect("the Job's pod");
        assert_eq!(
            // After the view container.
            pod.containers.last().and_then(|c| c.image.as_deref()),
            Some("ghcr.io/converged-computing/metric-lammps:latest")
        );
        assert_eq!(
            b.realize("CERT", &me()),
            realize(&out[1].assignment, &me()).unwrap(),
            "the same objects as realizing at once"
        );
        // Another spec under the same MiniCluster is planned anew.
        let mut changed = out[1].assignment.clone();
        let mut spec: serde_json::Value =
            serde_json::from_slice(&changed.minicluster_spec_json).unwrap();
        spec["containers"][0]["image"] = "ghcr.io/example/other:1".into();
        changed.minicluster_spec_json = serde_json::to_vec(&spec).unwrap().into();
        let c = prepare(&changed, &mut cache).unwrap();
        assert!(!Arc::ptr_eq(&b.plan, &c.plan));
        assert_eq!(
            c.pod()
                .unwrap()
                .containers
                .last()
                .and_then(|c| c.image.as_deref()),
            Some("ghcr.io/example/other:1")
        );
    }

    /// On a cluster that mounts images as volumes, new bursts of one MiniCluster still
    /// share one plan, which mounts the view image; only a burst whose live Job was made
    /// otherwise gets a copy.
    #[test]
    fn bursts_share_a_plan_with_the_view_their_cluster_gives() {
        let plan = bursting();
        let out = build(&plan, "CERT", Some(&lead())).unwrap();
        let mut cache = PlanCache::for_cluster(true);
        let a = prepare(&out[0].assignment, &mut cache).unwrap();
        let mut b = prepare(&out[1].assignment, &mut cache).unwrap();
        assert!(Arc::ptr_eq(&a.plan, &b.plan), "one plan for both bursts");
        assert_eq!(a.plan.view_mode, crate::api::ViewMode::ImageVolume);
        b.render_view(crate::api::ViewMode::ImageVolume);
        assert!(Arc::ptr_eq(&a.plan, &b.plan), "the same view: no copy");
        b.render_view(crate::api::ViewMode::Alongside);
        assert!(
            !Arc::ptr_eq(&a.plan, &b.plan),
            "a view as made: its own copy"
        );
        assert_eq!(a.plan.view_mode, crate::api::ViewMode::ImageVolume);
    }

    #[test]
    fn a_spoke_realizes_what_the_hub_built() {
        let plan = bursting();
        for sa in build(&plan, "CERT", Some(&lead())).unwrap() {
            let r = realize(&sa.assignment, &me()).unwrap();
            assert_eq!(r.namespace, "hpc");
            assert_eq!(r.job, sa.assignment.burst_name);
            let expected = render::render(
                &plan,
                &Role::Burst {
                    index: sa.assignment.burst_index as usize,
                    lead: lead(),
                },
                "CERT",
            )
            .unwrap();
            assert_eq!(r.objects.len(), expected.len());
            for o in &r.objects {
                let value = serde_json::to_value(o).unwrap();
                let meta: ObjectMeta = serde_json::from_value(value["metadata"].clone()).unwrap();
                assert_eq!(owned_key(&meta), Some(sa.assignment.key.as_str()));
                assert!(crate::federation::ownership::is_ours(
                    &meta,
                    &me(),
                    &sa.assignment.key
                ));
                assert!(meta.owner_references.is_none());
                assert_eq!(
                    meta.annotations.as_ref().unwrap()[MINICLUSTER_UID_ANNOTATION],
                    "u-1"
                );
            }
            let job = r
                .objects
                .iter()
                .find_map(|o| match o {
                    Object::Job(j) => Some(j),
                    _ => None,
                })
                .unwrap();
            let template_labels = job
                .spec
                .as_ref()
                .unwrap()
                .template
                .metadata
                .as_ref()
                .unwrap()
                .labels
                .as_ref()
                .unwrap();
            assert_eq!(template_labels[labels::MANAGED_BY], SPOKE_MANAGER);
        }
    }

    #[test]
    fn a_retired_burst_gets_no_assignment_and_the_others_keep_their_ranks() {
        let mut mc: MiniCluster = serde_yaml_ng::from_str(
            "metadata: {name: root, namespace: hpc}\nspec: {size: 2, containers: [{image: a}]}",
        )
        .unwrap();
        mc.spec.flux = Some(
            serde_yaml_ng::from_str(
                "bursting: {clusters: [{name: gke, size: 0, maxSize: 3}, {name: kind-b, size: 1}]}",
            )
            .unwrap(),
        );
        let plan = Plan::new(&mc).unwrap().retire(&["gke".to_string()]);
        assert!(plan.has_running_bursts());
        let out = build(&plan, "CERT", Some(&lead())).unwrap();
        let keys: Vec<_> = out.iter().map(|s| s.assignment.key.as_str()).collect();
        assert_eq!(keys, ["hpc/root/kind-b"]);
        assert_eq!(out[0].assignment.burst_index, 1);
        // The spoke sees gke as a burst of size 0: same hosts, same broker.toml and R.
        assert_eq!(realize(&out[0].assignment, &me()).unwrap().size, 1);
        let root = render::render(&plan, &Role::Root, "CERT").unwrap();
        assert!(
            root.iter().any(|o| matches!(o, Object::Service(s)
                if s.metadata.name.as_deref() == Some("root-lead"))),
            "kind-b still runs: the lead broker stays exposed"
        );

        let plan = plan.retire(&["kind-b".to_string()]);
        assert!(build(&plan, "CERT", Some(&lead())).unwrap().is_empty());
        assert_eq!(plan.roles(&lead()), [Role::Root]);
        let root = render::render(&plan, &Role::Root, "CERT").unwrap();
        assert!(
            !root.iter().any(|o| matches!(o, Object::Service(s)
                if s.metadata.name.as_deref() == Some("root-lead"))),
            "no burst runs: the lead broker's NodePort goes"
        );
    }

    #[test]
    fn config_identity_is_enforced() {
        let plan = bursting();
        let mut a = build(&plan, "CERT", Some(&lead()))
            .unwrap()
            .remove(0)
            .assignment;
        a.broker_toml.push('\n');
        assert!(matches!(
            realize(&a, &me()),
            Err(RealizeError::ConfigMismatch {
                what: "broker.toml",
                ..
            })
        ));
        let mut a = build(&plan, "CERT", Some(&lead()))
            .unwrap()
            .remove(0)
            .assignment;
        a.resource_set = String::from_utf8_lossy(&a.resource_set)
            .replace("root", "other")
            .into();
        assert!(matches!(
            realize(&a, &me()),
            Err(RealizeError::ConfigMismatch { what: "R", .. })
        ));
    }

    #[test]
    fn malformed_assignments_are_refused_with_the_reason() {
        let plan = bursting();
        let good = build(&plan, "CERT", Some(&lead()))
            .unwrap()
            .remove(0)
            .assignment;
        let cases: Vec<(proto::Assignment, &str)> = vec![
            (
                proto::Assignment {
                    lead_endpoint: None,
                    ..good.clone()
                },
                "no lead broker endpoint",
            ),
            (
                proto::Assignment {
                    key: "hpc/root/other".into(),
                    ..good.clone()
                },
                "key does not match",
            ),
            (
                proto::Assignment {
                    burst_index: 1,
                    ..good.clone()
                },
                "burst index",
            ),
            (
                proto::Assignment {
                    burst_size: 7,
                    ..good.clone()
                },
                "burst size",
            ),
            (
                proto::Assignment {
                    minicluster_spec_json: "{".into(),
                    ..good.clone()
                },
                "does not parse",
            ),
            (
                proto::Assignment {
                    minicluster_spec_json: r#"{"size": 0, "containers": []}"#.into(),
                    ..good.clone()
                },
                "does not validate",
            ),
        ];
        for (a, needle) in cases {
            let err = realize(&a, &me()).unwrap_err().to_string();
            assert!(err.contains(needle), "{err} lacks {needle}");
        }
    }
}
