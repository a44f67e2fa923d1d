//! The spoke policy's decisions, field by field and refusal by refusal.

use std::collections::BTreeMap;

use flux_shared::federation::BurstKey;
use flux_shared::federation::policy::{
    Candidate, Level, NamespaceState, PolicyState, SpokePolicy, Verdict, admit, reason,
};
use flux_shared::quantity::thousandths;
use k8s_openapi::api::core::v1::PodSpec;
use serde_json::json;

fn policy(yaml: &str) -> PolicyState {
    PolicyState::Valid(SpokePolicy::parse(yaml).unwrap_or_else(|e| panic!("{e}")))
}

fn parse_error(yaml: &str) -> String {
    match SpokePolicy::parse(yaml) {
        Ok(p) => panic!("{yaml:?} parsed: {p:?}"),
        Err(e) => e.to_string(),
    }
}

/// A pod of one broker container of `image`, with the view init container, both with
/// `limits` (JSON) when given.
fn pod(image: &str, limits: Option<serde_json::Value>) -> PodSpec {
    let resources = limits.map_or(json!({}), |l| json!({"limits": l}));
    serde_json::from_value(json!({
        "initContainers": [{"name": "flux-view", "image": "ghcr.io/flux/view:1", "resources": resources}],
        "containers": [{"name": "mc", "image": image, "resources": resources}],
        "volumes": [
            {"name": "flux-view", "emptyDir": {}},
            {"name": "flux-config", "configMap": {"name": "c"}},
            {"name": "flux-curve", "secret": {"secretName": "s"}},
        ],
    }))
    .unwrap()
}

fn candidate<'a>(
    key: &'a str,
    namespace: &'a str,
    size: i32,
    running: i32,
    pod: &'a PodSpec,
) -> Candidate<'a> {
    let mc = key.parse::<BurstKey>().expect("a burst key").minicluster();
    Candidate {
        key,
        minicluster: mc.to_string(),
        namespace,
        size,
        pod: Some(pod),
        running,
    }
}

fn existing(namespaces: &[(&str, Option<&str>)]) -> BTreeMap<String, NamespaceState> {
    namespaces
        .iter()
        .map(|(n, enforce)| {
            (
                n.to_string(),
                NamespaceState::Exists {
                    enforce: enforce.map(str::to_string),
                },
            )
        })
        .collect()
}

fn refusal(v: &Verdict) -> Option<(&'static str, &str)> {
    v.refusal.as_ref().map(|r| (r.reason, r.message.as_str()))
}

#[test]
fn a_policy_parses_with_its_defaults_and_round_trips() {
    let p = SpokePolicy::parse("namespaces: [{name: default}]").unwrap();
    assert_eq!(p.version, 1);
    assert_eq!(p.max_brokers(), 32);
    assert_eq!(p.max_brokers_per_minicluster(), 32);
    assert!(p.image_allowed("anything:1"));
    let full = "version: 1\nnamespaces:\n- name: default\n- name: hpc-*\n  podSecurity: baseline\nmaxBrokers: 16\nmaxBrokersPerMiniCluster: 4\nperBroker:\n  cpu: '2'\n  memory: 4Gi\nimages:\n- ghcr.io/flux-framework/\nvolumes:\n- persistentVolumeClaim\n";
    let p = SpokePolicy::parse(full).unwrap();
    assert_eq!(p.max_brokers_per_minicluster(), 4);
    assert_eq!(
        p.namespace_rule("hpc-a").and_then(|r| r.pod_security),
        Some(Level::Baseline)
    );
    assert_eq!(SpokePolicy::parse(&p.to_yaml()).unwrap(), p);
    // JSON is YAML too.
    assert!(SpokePolicy::parse(r#"{"namespaces": [{"name": "a"}]}"#).is_ok());
    assert_eq!(
        SpokePolicy::parse(&SpokePolicy::allowing(&["default".into()]).to_yaml()).unwrap(),
        SpokePolicy::allowing(&["default".into()])
    );
}

#[test]
fn a_policy_that_breaks_a_rule_names_the_field() {
    for (yaml, expect) in [
        ("", "empty"),
        (
            "namespaces: [{name: a}]\nmaxBroker: 3",
            "unknown field `maxBroker`",
        ),
        ("version: 2", "version: 2 is not a known version"),
        ("namespaces: [{name: Default}]", "namespaces[0].name"),
        (
            "namespaces: [{name: a}, {name: 'a b*'}]",
            "namespaces[1].name",
        ),
        ("namespaces: [{name: kube-system}]", "kube-* namespaces"),
        ("namespaces: [{name: kube-*}]", "kube-* namespaces"),
        (
            "namespaces: [{name: a, podSecurity: lax}]",
            "unknown variant `lax`",
        ),
        ("maxBrokers: -1", "maxBrokers: -1 is not between 0"),
        (
            "maxBrokersPerMiniCluster: 100000",
            "maxBrokersPerMiniCluster: 100000",
        ),
        (
            "perBroker: {cpu: two}",
            "perBroker.cpu: \"two\" is not a quantity",
        ),
        ("perBroker: {memory: 4GB}", "perBroker.memory"),
        ("images: ['']", "images[0]"),
        ("volumes: [hostPath]", "unknown variant `hostPath`"),
    ] {
        let e = parse_error(yaml);
        assert!(e.contains(expect), "{yaml:?}: {e}");
    }
}

#[test]
fn quantities_in_thousandths() {
    for (q, v) in [
        ("2", Some(2000)),
        ("500m", Some(500)),
        ("1.5", Some(1500)),
        ("0.0001", Some(1)),
        ("4Gi", Some(4000u128 << 30)),
        ("1k", Some(1_000_000)),
        ("1e3", Some(1_000_000)),
        ("128Mi", Some(128_000u128 << 20)),
        ("-1", None),
        ("", None),
        ("1Z", None),
        ("Gi", None),
        ("1.2.3", None),
    ] {
        assert_eq!(thousandths(q), v, "{q:?}");
    }
}

#[test]
fn image_prefixes_match_whole_name_components() {
    let p = SpokePolicy::parse("images: [ghcr.io/flux, 'localhost/']").unwrap();
    for (image, ok) in [
        ("ghcr.io/flux", true),
        ("ghcr.io/flux:1", true),
        ("ghcr.io/flux/view:1", true),
        ("ghcr.io/flux@sha256:00", true),
        ("ghcr.io/flux-evil/x", false),
        ("localhost/app", true),
        ("docker.io/library/ubuntu", false),
        ("", false),
    ] {
        assert_eq!(p.image_allowed(image), ok, "{image:?}");
    }
}

#[test]
fn without_a_valid_policy_every_burst_is_refused_and_nothing_admitted() {
    let p = pod("app", None);
    let c = [candidate("ns/mc/b", "ns", 2, 0, &p)];
    let v = admit(&PolicyState::Missing, &c, &BTreeMap::new());
    let (r, m) = refusal(&v["ns/mc/b"]).unwrap();
    assert_eq!(r, reason::NO_POLICY);
    assert!(m.contains("flux-hub join --allow-namespace"), "{m}");
    assert_eq!(v["ns/mc/b"].admitted_size, 0);
    assert_eq!(v["ns/mc/b"].create_namespace, None);
    let invalid = PolicyState::of(Some("maxBrokers: x"));
    let v = admit(&invalid, &c, &BTreeMap::new());
    let (r, m) = refusal(&v["ns/mc/b"]).unwrap();
    assert_eq!(r, reason::POLICY_INVALID);
    assert!(m.contains("maxBrokers"), "{m}");
    assert_eq!(PolicyState::of(None), PolicyState::Missing);
}

#[test]
fn only_the_namespaces_the_policy_names_are_admitted() {
    let p = pod("app", None);
    let policy = policy("namespaces: [{name: default}, {name: 'hpc-*'}]");
    let ns = existing(&[("default", None), ("hpc-a", None), ("other", None)]);
    let c = [
        candidate("default/mc/b", "default", 1, 0, &p),
        candidate("hpc-a/mc/b", "hpc-a", 1, 0, &p),
        candidate("other/mc/b", "other", 1, 0, &p),
    ];
    let v = admit(&policy, &c, &ns);
    assert_eq!(refusal(&v["default/mc/b"]), None);
    assert_eq!(refusal(&v["hpc-a/mc/b"]), None);
    let (r, m) = refusal(&v["other/mc/b"]).unwrap();
    assert_eq!(r, reason::NAMESPACE_NOT_ALLOWED);
    assert!(
        m.contains("\"other\"") && m.contains("default, hpc-*"),
        "{m}"
    );
}

#[test]
fn broker_ceilings_count_what_runs_first_whatever_the_key_order() {
    let p = pod("app", None);
    let policy = policy("namespaces: [{name: ns}]\nmaxBrokers: 5\nmaxBrokersPerMiniCluster: 4");
    let ns = existing(&[("ns", None)]);
    // "z" runs 4; "a" (earlier key, new) asks 2: only 1 is left.
    let c = [
        candidate("ns/one/a", "ns", 2, 0, &p),
        candidate("ns/two/z", "ns", 4, 4, &p),
    ];
    let v = admit(&policy, &c, &ns);
    assert_eq!(refusal(&v["ns/two/z"]), None);
    assert_eq!(v["ns/two/z"].admitted_size, 4);
    let (r, m) = refusal(&v["ns/one/a"]).unwrap();
    assert_eq!(r, reason::TOO_MANY_BROKERS);
    assert!(m.contains("2 brokers asked, 1 admitted now"), "{m}");
    assert_eq!(v["ns/one/a"].admitted_size, 1);

    // One MiniCluster's bursts share maxBrokersPerMiniCluster.
    let c = [
        candidate("ns/mc/a", "ns", 3, 3, &p),
        candidate("ns/mc/b", "ns", 2, 0, &p),
    ];
    let v = admit(&policy, &c, &ns);
    assert_eq!(refusal(&v["ns/mc/a"]), None);
    assert_eq!(
        refusal(&v["ns/mc/b"]).map(|r| r.0),
        Some(reason::TOO_MANY_BROKERS)
    );
    assert_eq!(v["ns/mc/b"].admitted_size, 1);

    // A growth past the ceiling is refused; a shrink is admitted.
    let v = admit(&policy, &[candidate("ns/mc/a", "ns", 5, 3, &p)], &ns);
    assert_eq!(v["ns/mc/a"].admitted_size, 4);
    assert!(v["ns/mc/a"].refusal.is_some());
    let v = admit(&policy, &[candidate("ns/mc/a", "ns", 1, 3, &p)], &ns);
    assert_eq!(refusal(&v["ns/mc/a"]), None);

    // Admitted bursts count with their new size for the ones after them.
    let c = [
        candidate("ns/one/a", "ns", 3, 0, &p),
        candidate("ns/two/b", "ns", 3, 0, &p),
    ];
    let v = admit(&policy, &c, &ns);
    assert_eq!(refusal(&v["ns/one/a"]), None);
    assert_eq!(v["ns/two/b"].admitted_size, 2);
}

#[test]
fn images_outside_the_prefixes_are_refused_init_containers_included() {
    let wide = policy("namespaces: [{name: ns}]\nimages: [ghcr.io/flux/]");
    let ns = existing(&[("ns", None)]);
    let ok = pod("ghcr.io/flux/app:1", None);
    let bad = pod("docker.io/evil:1", None);
    let v = admit(&wide, &[candidate("ns/mc/b", "ns", 1, 0, &ok)], &ns);
    assert_eq!(refusal(&v["ns/mc/b"]), None);
    let v = admit(&wide, &[candidate("ns/mc/b", "ns", 1, 0, &bad)], &ns);
    let (r, m) = refusal(&v["ns/mc/b"]).unwrap();
    assert_eq!(r, reason::IMAGE_NOT_ALLOWED);
    assert!(
        m.contains("docker.io/evil:1") && m.contains("\"mc\""),
        "{m}"
    );
    let narrow = policy("namespaces: [{name: ns}]\nimages: [ghcr.io/flux/app]");
    let v = admit(&narrow, &[candidate("ns/mc/b", "ns", 1, 0, &ok)], &ns);
    let (_, m) = refusal(&v["ns/mc/b"]).unwrap();
    assert!(
        m.contains("\"flux-view\""),
        "the view init container's image: {m}"
    );
}

#[test]
fn volume_kinds_beyond_the_bursts_own_need_the_policy() {
    let mut p = pod("app", None);
    p.volumes.get_or_insert_default().push(
        serde_json::from_value(
            json!({"name": "data", "persistentVolumeClaim": {"claimName": "d"}}),
        )
        .unwrap(),
    );
    let ns = existing(&[("ns", None)]);
    let v = admit(
        &policy("namespaces: [{name: ns}]"),
        &[candidate("ns/mc/b", "ns", 1, 0, &p)],
        &ns,
    );
    let (r, m) = refusal(&v["ns/mc/b"]).unwrap();
    assert_eq!(r, reason::VOLUME_NOT_ALLOWED);
    assert!(
        m.contains("\"data\" is a persistentVolumeClaim volume"),
        "{m}"
    );
    let v = admit(
        &policy("namespaces: [{name: ns}]\nvolumes: [persistentVolumeClaim]"),
        &[candidate("ns/mc/b", "ns", 1, 0, &p)],
        &ns,
    );
    assert_eq!(refusal(&v["ns/mc/b"]), None);
    // Kinds no rule admits.
    p.volumes.get_or_insert_default().push(
        serde_json::from_value(json!({"name": "nfs", "nfs": {"server": "s", "path": "/"}}))
            .unwrap(),
    );
    let v = admit(
        &policy("namespaces: [{name: ns}]\nvolumes: [persistentVolumeClaim, csi]"),
        &[candidate("ns/mc/b", "ns", 1, 0, &p)],
        &ns,
    );
    assert_eq!(
        refusal(&v["ns/mc/b"]).map(|r| r.0),
        Some(reason::VOLUME_NOT_ALLOWED)
    );
}

#[test]
fn per_broker_bounds_need_limits_and_count_the_pod_as_kubernetes_does() {
    let policy = policy("namespaces: [{name: ns}]\nperBroker: {cpu: '2', memory: 1Gi}");
    let ns = existing(&[("ns", None)]);
    let none = pod("app", None);
    let v = admit(&policy, &[candidate("ns/mc/b", "ns", 1, 0, &none)], &ns);
    let (r, m) = refusal(&v["ns/mc/b"]).unwrap();
    assert_eq!(r, reason::RESOURCES_NOT_ALLOWED);
    assert!(m.contains("cpu limit; none on flux-view, mc"), "{m}");
    // One container and the init container of 1 CPU each: the pod needs max(1, 1) = 1.
    let fits = pod("app", Some(json!({"cpu": "1", "memory": "512Mi"})));
    let v = admit(&policy, &[candidate("ns/mc/b", "ns", 1, 0, &fits)], &ns);
    assert_eq!(refusal(&v["ns/mc/b"]), None);
    let big = pod("app", Some(json!({"cpu": "2500m", "memory": "512Mi"})));
    let v = admit(&policy, &[candidate("ns/mc/b", "ns", 1, 0, &big)], &ns);
    let (_, m) = refusal(&v["ns/mc/b"]).unwrap();
    assert!(m.contains("2500m cpu, more than the 2"), "{m}");
    // Two regular containers add up.
    let mut two = fits.clone();
    let mut second = two.containers[0].clone();
    second.name = "sidecar".into();
    two.containers.push(second.clone());
    two.containers.push(second);
    let v = admit(&policy, &[candidate("ns/mc/b", "ns", 1, 0, &two)], &ns);
    assert!(
        refusal(&v["ns/mc/b"]).is_some_and(|(_, m)| m.contains("memory")),
        "3 x 512Mi > 1Gi"
    );
}

#[test]
fn a_namespace_the_spoke_creates_enforces_the_policys_level_baseline_by_default() {
    let p = pod("app", None);
    let nothing = BTreeMap::new();
    // The documented default (`join --allow-namespace NEW`) runs a plain burst.
    let v = admit(
        &policy("namespaces: [{name: ns}]"),
        &[candidate("ns/mc/b", "ns", 1, 0, &p)],
        &nothing,
    );
    assert_eq!(refusal(&v["ns/mc/b"]), None);
    assert_eq!(v["ns/mc/b"].create_namespace, Some(Level::Baseline));

    let v = admit(
        &policy("namespaces: [{name: ns, podSecurity: restricted}]"),
        &[candidate("ns/mc/b", "ns", 1, 0, &p)],
        &nothing,
    );
    let (r, m) = refusal(&v["ns/mc/b"]).unwrap();
    assert_eq!(r, reason::POD_SECURITY);
    assert!(
        m.contains("The baseline level admits this burst")
            && m.contains("policy create namespace \"ns\" at podSecurity: baseline"),
        "says which level admits it and how: {m}"
    );
    assert!(
        m.contains("\"mc\" needs allowPrivilegeEscalation: false"),
        "{m}"
    );
    assert!(
        m.contains("runAsNonRoot: true") && m.contains("seccompProfile"),
        "{m}"
    );
    assert_eq!(
        v["ns/mc/b"].create_namespace, None,
        "nothing is created for a refused burst"
    );

    let v = admit(
        &policy("namespaces: [{name: ns, podSecurity: baseline}]"),
        &[candidate("ns/mc/b", "ns", 1, 0, &p)],
        &nothing,
    );
    assert_eq!(refusal(&v["ns/mc/b"]), None);
    assert_eq!(v["ns/mc/b"].create_namespace, Some(Level::Baseline));

    // Hardened pods pass restricted.
    let hardened = json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
    let mut h = p.clone();
    h.security_context = Some(
        serde_json::from_value(json!({"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}}))
            .unwrap(),
    );
    for c in h
        .init_containers
        .iter_mut()
        .flatten()
        .chain(h.containers.iter_mut())
    {
        c.security_context = Some(serde_json::from_value(hardened.clone()).unwrap());
    }
    let v = admit(
        &policy("namespaces: [{name: ns, podSecurity: restricted}]"),
        &[candidate("ns/mc/b", "ns", 1, 0, &h)],
        &nothing,
    );
    assert_eq!(refusal(&v["ns/mc/b"]), None);
    assert_eq!(v["ns/mc/b"].create_namespace, Some(Level::Restricted));

    // An existing namespace keeps its own level: none (privileged), or its label.
    let v = admit(
        &policy("namespaces: [{name: ns}]"),
        &[candidate("ns/mc/b", "ns", 1, 0, &p)],
        &existing(&[("ns", None)]),
    );
    assert_eq!(refusal(&v["ns/mc/b"]), None);
    assert_eq!(v["ns/mc/b"].create_namespace, None);
    let v = admit(
        &policy("namespaces: [{name: ns, podSecurity: baseline}]"),
        &[candidate("ns/mc/b", "ns", 1, 0, &p)],
        &existing(&[("ns", Some("restricted"))]),
    );
    let (r, m) = refusal(&v["ns/mc/b"]).expect("refused");
    assert_eq!(r, reason::POD_SECURITY);
    assert!(
        m.contains(
            "kubectl label namespace ns pod-security.kubernetes.io/enforce=baseline --overwrite"
        ),
        "an existing namespace's label is what to change: {m}"
    );
}

#[test]
fn every_rule_a_burst_breaks_is_in_the_message_the_first_gives_the_reason() {
    let p = pod("docker.io/x", None);
    let policy = policy("namespaces: [{name: ns}]\nimages: [ghcr.io/]\nmaxBrokers: 1");
    let v = admit(
        &policy,
        &[candidate("other/mc/b", "other", 2, 0, &p)],
        &existing(&[("other", None)]),
    );
    let (r, m) = refusal(&v["other/mc/b"]).unwrap();
    assert_eq!(r, reason::NAMESPACE_NOT_ALLOWED);
    assert!(
        m.contains("2 brokers asked, 1 admitted") && m.contains("docker.io/x"),
        "{m}"
    );
}

proptest::proptest! {
    /// Policies and pods come from other people: no text makes the parsers panic.
    #[test]
    fn no_text_makes_the_parsers_panic(s in "\\PC{0,24}", q in "[0-9.eEkMGTPimn-]{0,12}") {
        let _ = thousandths(&s);
        let _ = thousandths(&q);
        let _ = SpokePolicy::parse(&s);
    }
}

#[test]
fn per_namespace_rbac_covers_the_named_namespaces_and_prefixes_need_the_cluster_wide_form() {
    let named = SpokePolicy::parse("namespaces: [{name: b}, {name: a}, {name: a}]").unwrap();
    assert_eq!(
        named.granted_namespaces(),
        Ok(["a".to_string(), "b".to_string()].into_iter().collect())
    );
    let prefixed = SpokePolicy::parse("namespaces: [{name: a}, {name: hpc-*}]").unwrap();
    assert_eq!(
        prefixed.granted_namespaces(),
        Err(vec!["hpc-*".to_string()])
    );
}

#[test]
fn a_namespace_the_spokes_rbac_does_not_cover_is_refused_even_when_the_policy_admits_it() {
    let policy = PolicyState::Valid(SpokePolicy::allowing(&["team".into(), "lab".into()]));
    let pod = PodSpec::default();
    let candidates = [
        candidate("team/mc/0", "team", 2, 0, &pod),
        candidate("lab/mc/0", "lab", 2, 0, &pod),
    ];
    let mut namespaces = existing(&[("team", Some("restricted"))]);
    namespaces.insert(
        "lab".into(),
        NamespaceState::NotGranted {
            granted: vec!["team".into()],
        },
    );
    let verdicts = admit(&policy, &candidates, &namespaces);
    assert_eq!(refusal(&verdicts["team/mc/0"]), None);
    let (reason, message) = refusal(&verdicts["lab/mc/0"]).unwrap();
    assert_eq!(reason, "NamespaceNotAllowed");
    assert!(
        message.contains("does not cover namespace \"lab\" (it covers: team;"),
        "{message}"
    );
    assert_eq!(verdicts["lab/mc/0"].create_namespace, None);
}

#[test]
fn a_namespace_rule_may_lift_baseline_rules_its_pod_security_level_permits() {
    let p = SpokePolicy::parse(
        "namespaces:\n- name: lab\n  podSecurity: privileged\n  allow: {privileged: true, capabilities: [SYS_PTRACE], hostNamespaces: true, hostPaths: [/scratch], serviceAccounts: [runner]}\n- name: team\n",
    )
    .unwrap();
    let lab = p.exceptions_for("lab");
    assert!(lab.privileged && lab.host_namespaces);
    assert_eq!(lab.capabilities, ["SYS_PTRACE"]);
    assert_eq!(lab.host_paths, ["/scratch"]);
    assert_eq!(lab.service_accounts, ["runner"]);
    assert!(p.exceptions_for("team").is_empty());
    assert!(p.exceptions_for("elsewhere").is_empty());
    assert_eq!(SpokePolicy::parse(&p.to_yaml()).unwrap(), p);
    for (yaml, expect) in [
        (
            "namespaces: [{name: lab, allow: {privileged: true}}]",
            "namespaces[0].allow.privileged: needs podSecurity: privileged",
        ),
        (
            "namespaces: [{name: lab, podSecurity: baseline, allow: {hostPaths: [/x]}}]",
            "namespaces[0].allow.hostPaths: needs podSecurity: privileged",
        ),
        (
            "namespaces: [{name: lab, podSecurity: baseline, allow: {hostNamespaces: true}}]",
            "namespaces[0].allow.hostNamespaces: needs podSecurity: privileged",
        ),
        (
            "namespaces: [{name: lab, podSecurity: restricted, allow: {capabilities: [NET_ADMIN]}}]",
            "namespaces[0].allow.capabilities: needs podSecurity: baseline or privileged",
        ),
        (
            "namespaces: [{name: lab, podSecurity: privileged, allow: {hostPaths: [relative]}}]",
            "namespaces[0].allow.hostPaths[0]",
        ),
        (
            "namespaces: [{name: lab, allow: {root: true}}]",
            "unknown field `root`",
        ),
    ] {
        let err = SpokePolicy::parse(yaml).unwrap_err().to_string();
        assert!(err.contains(expect), "{yaml}: {err}");
    }
    // Capabilities need no more than baseline; a named service account nothing at all.
    assert!(
        SpokePolicy::parse(
            "namespaces: [{name: lab, podSecurity: baseline, allow: {capabilities: [NET_ADMIN]}}, {name: t, allow: {serviceAccounts: [runner]}}]"
        )
        .is_ok()
    );
}

#[test]
fn the_hub_learns_a_spokes_exceptions_rule_by_rule_and_checks_them() {
    use flux_shared::federation::policy::{Announced, announce};
    use flux_shared::federation::proto::NamespaceExceptions;
    // Nothing lifted: nothing said.
    let plain = PolicyState::of(Some("namespaces: [{name: a}, {name: b*}]"));
    assert!(announce(&plain).is_empty());
    assert!(announce(&PolicyState::Missing).is_empty());
    let lifting = PolicyState::of(Some(
        "namespaces:\n- name: hpc-plain\n- name: hpc-*\n  podSecurity: privileged\n  allow: {privileged: true}\n",
    ));
    let said = announce(&lifting);
    assert_eq!(said.len(), 2);
    let heard = Announced::from_proto(&said).unwrap();
    // The first matching rule decides, as at the spoke.
    assert!(heard.for_namespace("hpc-plain").is_empty());
    assert!(heard.for_namespace("hpc-lab").privileged);
    assert!(heard.for_namespace("other").is_empty());
    // What a spoke sends is checked before the hub keeps it.
    let bad = |e: NamespaceExceptions| Announced::from_proto(&[e]).unwrap_err();
    assert!(
        bad(NamespaceExceptions {
            namespace: "Not A Namespace".into(),
            ..Default::default()
        })
        .starts_with("exceptions[0].namespace")
    );
    assert!(
        bad(NamespaceExceptions {
            namespace: "a".into(),
            host_paths: vec!["relative".into()],
            ..Default::default()
        })
        .starts_with("exceptions[0].hostPaths[0]")
    );
    let many = vec![
        NamespaceExceptions {
            namespace: "a".into(),
            ..Default::default()
        };
        flux_shared::federation::policy::MAX_ANNOUNCED_RULES + 1
    ];
    assert!(
        Announced::from_proto(&many)
            .unwrap_err()
            .contains("at most")
    );
}
