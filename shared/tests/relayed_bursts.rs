//! Relayed bursts (`relay: true`): what the plan, the renderer, the validator and the
//! assignments make of them, beside a burst that connects directly.

use flux_shared::api::MiniCluster;
use flux_shared::federation::assignment::{BuildError, PlanCache, RealizeError, build, prepare};
use flux_shared::federation::ownership::SpokeIdentity;
use flux_shared::plan::{Endpoint, Plan, Role};
use flux_shared::render::{Object, render};
use flux_shared::validate::validate;

const CERT: &str = "#  ZeroMQ CURVE **Secret** Certificate\n#  DO NOT DISTRIBUTE\n\nmetadata\n    name = \"test\"\ncurve\n    public-key = \"x\"\n    secret-key = \"y\"\n";

fn mc(clusters: &str, extra: &str) -> MiniCluster {
    let yaml = format!(
        "apiVersion: flux-framework.org/v1alpha2\nkind: MiniCluster\nmetadata: {{name: root, namespace: hpc, uid: u-1}}\nspec:\n  size: 2\n  containers: [{{image: rockylinux:9}}]\n  flux:\n    bursting:\n{extra}      clusters:\n{clusters}"
    );
    serde_yaml_ng::from_str(&yaml).expect("yaml")
}

const MIXED: &str = "        - {name: gke, size: 2, relay: true}\n        - {name: lab, size: 1}\n";
const RELAYED: &str = "        - {name: gke, size: 2, relay: true}\n";

fn plan(clusters: &str) -> Plan {
    Plan::new(&mc(clusters, "")).expect("valid")
}

fn lead() -> Endpoint {
    Endpoint {
        address: "203.0.113.7".into(),
        port: 31000,
    }
}

fn service<'a>(
    objects: &'a [Object],
    name: &str,
) -> Option<&'a k8s_openapi::api::core::v1::Service> {
    objects.iter().find_map(|o| match o {
        Object::Service(s) if s.metadata.name.as_deref() == Some(name) => Some(s),
        _ => None,
    })
}

#[test]
fn a_relayed_burst_dials_its_own_relay_service_and_a_direct_one_the_lead() {
    let plan = plan(MIXED);
    let roles = plan.roles(&lead());
    let relay = Endpoint {
        address: "gke-relay".into(),
        port: 8050,
    };
    assert_eq!(plan.bursts[0].relay_service(), "gke-relay");
    assert_eq!(
        roles,
        [
            Role::Root,
            Role::Burst {
                index: 0,
                lead: relay.clone()
            },
            Role::Burst {
                index: 1,
                lead: lead()
            },
        ]
    );
    assert_eq!(plan.burst_lead(0, None), Some(relay));
    assert_eq!(
        plan.burst_lead(1, None),
        None,
        "a direct burst needs the lead's endpoint"
    );
    assert!(plan.has_direct_bursts());
    assert!(!self::plan(RELAYED).has_direct_bursts());

    let gke = plan.target(&roles[1]).expect("target");
    assert_eq!(gke.relay_service.as_deref(), Some("gke-relay"));
    let toml = flux_shared::broker_toml::render(&plan, &gke);
    assert!(toml.contains("tcp://gke-relay:8050"), "{toml}");
    let lab = plan.target(&roles[2]).expect("target");
    assert_eq!(lab.relay_service, None);
    assert!(flux_shared::broker_toml::render(&plan, &lab).contains("tcp://203.0.113.7:31000"));
}

#[test]
fn the_relay_service_has_no_selector_and_the_lead_is_a_nodeport_only_for_direct_bursts() {
    let plan = plan(MIXED);
    let roles = plan.roles(&lead());
    let gke = render(&plan, &roles[1], CERT).expect("rendered");
    let relay = service(&gke, "gke-relay").expect("the relay Service");
    let spec = relay.spec.as_ref().expect("spec");
    assert_eq!(
        spec.selector, None,
        "its endpoint is the spoke's, written by the spoke"
    );
    assert_eq!(spec.type_, None, "a ClusterIP Service");
    let ports = spec.ports.as_ref().expect("ports");
    assert_eq!(
        (ports.len(), ports[0].port, ports[0].name.as_deref()),
        (1, 8050, Some("flux-broker"))
    );
    let lab = render(&plan, &roles[2], CERT).expect("rendered");
    assert!(service(&lab, "lab-relay").is_none());

    let lead_type = |plan: &Plan| {
        let root = render(plan, &Role::Root, CERT).expect("rendered");
        service(&root, "root-lead")
            .and_then(|s| s.spec.as_ref()?.type_.clone())
            .expect("a lead Service")
    };
    assert_eq!(lead_type(&plan), "NodePort");
    assert_eq!(lead_type(&self::plan(RELAYED)), "ClusterIP");
}

#[test]
fn relayed_bursts_are_assigned_before_the_lead_has_an_external_endpoint() {
    let relayed = plan(RELAYED);
    let out = build(&relayed, CERT, None).expect("no external endpoint needed");
    assert_eq!(out.len(), 1);
    let endpoint = out[0].assignment.lead_endpoint.as_ref().expect("endpoint");
    assert_eq!(
        (endpoint.address.as_str(), endpoint.port),
        ("gke-relay", 8050)
    );

    let mixed = plan(MIXED);
    assert_eq!(
        build(&mixed, CERT, None).map(|_| ()),
        Err(BuildError::NoLead("lab".into()))
    );
    assert_eq!(build(&mixed, CERT, Some(&lead())).expect("built").len(), 2);
}

#[test]
fn a_spoke_refuses_a_relayed_burst_pointed_anywhere_but_its_relay_service() {
    let relayed = plan(RELAYED);
    let good = build(&relayed, CERT, None)
        .expect("built")
        .remove(0)
        .assignment;
    let me = SpokeIdentity {
        name: "gke".into(),
        federation: "test".into(),
    };
    let prepared = prepare(&good, &mut PlanCache::default()).expect("prepared");
    let realized = prepared.realize(CERT, &me);
    assert_eq!(realized.relay_service.as_deref(), Some("gke-relay"));
    assert_eq!(realized.hosts, 2);
    assert_eq!(
        realized.relay().and_then(|m| m.name.as_deref()),
        Some("gke-relay"),
        "the relay Service is among the objects, claimed like them"
    );

    let mut elsewhere = good.clone();
    elsewhere.lead_endpoint = Some((&lead()).into());
    match prepare(&elsewhere, &mut PlanCache::default()) {
        Err(RealizeError::Malformed { problem, .. }) => {
            assert!(
                problem.contains("relay Service tcp://gke-relay:8050"),
                "{problem}"
            );
        }
        other => panic!("refused as malformed, got {other:?}"),
    }
}

#[test]
fn the_validator_names_what_a_relayed_burst_cannot_have() {
    let errors = |m: MiniCluster| -> Vec<String> {
        validate(&m)
            .err()
            .map(|e| e.0.iter().map(ToString::to_string).collect())
            .unwrap_or_default()
    };
    assert_eq!(
        errors(mc(MIXED, "      leadNodePort: 31000\n")),
        Vec::<String>::new()
    );
    for extra in [
        "      leadNodePort: 31000\n",
        "      leadAddress: 203.0.113.7\n",
    ] {
        let e = errors(mc(RELAYED, extra));
        assert!(
            e.iter().any(|e| e.contains("every burst is relayed")),
            "{extra}: {e:?}"
        );
    }
    let long = "a".repeat(58);
    let e = errors(mc(
        &format!("        - {{name: {long}, size: 1, relay: true}}\n"),
        "",
    ));
    assert!(
        e.iter()
            .any(|e| e.starts_with("spec.flux.bursting.clusters[0].name: a relayed burst's name")),
        "{e:?}"
    );
    let e = errors(mc("        - {name: 9lives, size: 1, relay: true}\n", ""));
    assert!(
        e.iter().any(|e| e.contains("must start with a letter")),
        "{e:?}"
    );
}

fn lead_path(objects: &[Object]) -> Option<String> {
    objects.iter().find_map(|o| match o {
        Object::Job(j) => j
            .metadata
            .annotations
            .as_ref()?
            .get(flux_shared::render::labels::LEAD_PATH)
            .cloned(),
        _ => None,
    })
}

#[test]
fn a_spokes_burst_job_names_its_path_and_a_hand_applied_or_root_job_does_not() {
    let plan = plan(MIXED);
    let roles = plan.roles(&lead());
    let path = |role: &Role| lead_path(&render(&plan, role, CERT).expect("rendered"));
    assert_eq!(path(&roles[0]), None, "the root's Job");
    assert_eq!(path(&roles[1]).as_deref(), Some("relay"));
    assert_eq!(path(&roles[2]).as_deref(), Some("direct"));
    // On the Job only: the pod template is the same on either path.
    let job = |role: &Role| {
        render(&plan, role, CERT)
            .expect("rendered")
            .into_iter()
            .find_map(|o| match o {
                Object::Job(j) => j.spec?.template.metadata,
                _ => None,
            })
    };
    assert!(
        job(&roles[1])
            .and_then(|m| m.annotations)
            .is_none_or(|a| !a.contains_key(flux_shared::render::labels::LEAD_PATH))
    );

    // The hub's choice, written into the plan, is what the Job says.
    let chosen = self::plan("        - {name: gke, size: 2}\n");
    let burst = |plan: &Plan| Role::Burst {
        index: 0,
        lead: plan.burst_lead(0, Some(&lead())).expect("lead"),
    };
    assert_eq!(
        lead_path(&render(&chosen, &burst(&chosen), CERT).expect("rendered")).as_deref(),
        Some("direct"),
        "not chosen yet: direct"
    );
    let relayed = chosen.clone().route(|_| Some(true));
    assert_eq!(
        lead_path(&render(&relayed, &burst(&relayed), CERT).expect("rendered")).as_deref(),
        Some("relay")
    );

    // A burst MiniCluster applied by hand next to its lead's endpoint: rendered as before.
    let manual: MiniCluster =
        serde_yaml_ng::from_str(include_str!("../../examples/burst-manual.yaml")).expect("yaml");
    let manual = Plan::new(&manual).expect("valid");
    let role = manual.local_role();
    assert!(matches!(role, Role::Burst { .. }));
    assert_eq!(
        lead_path(&render(&manual, &role, CERT).expect("rendered")),
        None
    );
}
