//! The install manifests under `deploy/`: every document parses into its `k8s_openapi`
//! type, the RBAC grants exactly `permissions::REQUIRED` (least privilege, nothing
//! missing), the bindings, the Deployment's flags, probes, downward-API env and security
//! context line up with what `flux-hub run` needs, every object passes the strict
//! `kubernetes-validate` oracle, and `kustomization.yaml` installs all of it plus the CRD.

mod common;
#[path = "common/deploy.rs"]
mod deploy;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use clap::Parser;
use flux_hub::controller::RunOptions;
use flux_hub::controller::permissions::REQUIRED;
use flux_shared::validate::author_rules;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, Namespace, PodSpec, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::{Metadata, Resource};
use serde::de::DeserializeOwned;

const NAMESPACE: &str = "flux-operator-system";
const SERVICE_ACCOUNT: &str = "flux-hub";
const DEPLOYMENT: &str = "flux-hub";
const IMAGE: &str = flux_shared::IMAGE;
const BINARY: &str = "/usr/local/bin/flux-hub";
const CRD: &str = "crds/miniclusters.flux-framework.org.yaml";
const UID: i64 = 65532;
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const METRICS_SERVICE: &str = "flux-hub-metrics";
const FEDERATION_SERVICE: &str = "flux-hub-federation";
const TLS_SECRET: &str = "flux-hub-tls";

use common::root;
use deploy::{Doc, Grants, Kustomization, canonical, flag_value, is_kustomization, rule_grants};

fn deploy_dir() -> PathBuf {
    root().join("deploy")
}

/// The spoke's manifests, a separate install (hub/tests/deploy_spoke_manifests.rs).
fn spoke_dir() -> PathBuf {
    deploy_dir().join("spoke")
}

/// The alerting rules, not part of the install (hub/tests/alert_rules.rs).
fn prometheus_dir() -> PathBuf {
    deploy_dir().join("prometheus")
}

/// `deploy/install.yaml`: everything below in one file, generated (`flux-hub install
/// --print`), checked on its own.
fn install_yaml() -> PathBuf {
    deploy_dir().join("install.yaml")
}

/// Every YAML file under `deploy/` (recursively, but not `deploy/spoke/`,
/// `deploy/prometheus/` nor the generated `install.yaml`), sorted.
fn yaml_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("directory entry").path();
            if path == spoke_dir() || path == prometheus_dir() || path == install_yaml() {
                continue;
            }
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&deploy_dir(), &mut files);
    files.sort();
    assert!(!files.is_empty(), "no YAML under deploy/");
    files
}

/// The manifest files: every YAML file under `deploy/` but the kustomization.
fn manifest_files() -> Vec<PathBuf> {
    yaml_files()
        .into_iter()
        .filter(|p| !is_kustomization(p))
        .collect()
}

fn documents() -> Vec<Doc> {
    let docs = deploy::documents(&manifest_files());
    assert!(!docs.is_empty(), "no manifests under deploy/");
    docs
}

/// Every object of `deploy/`, typed.
#[derive(Default)]
struct Manifests {
    namespaces: Vec<Namespace>,
    service_accounts: Vec<ServiceAccount>,
    cluster_roles: Vec<ClusterRole>,
    cluster_role_bindings: Vec<ClusterRoleBinding>,
    roles: Vec<Role>,
    role_bindings: Vec<RoleBinding>,
    deployments: Vec<Deployment>,
    services: Vec<Service>,
    pdbs: Vec<PodDisruptionBudget>,
    admission_policies: Vec<ValidatingAdmissionPolicy>,
    admission_bindings: Vec<ValidatingAdmissionPolicyBinding>,
    /// `(kind, namespace, name)` of every object, to catch duplicates.
    ids: BTreeSet<(String, String, String)>,
}

/// [`deploy::take`] in this install's namespace.
fn take<T>(doc: &Doc, ids: &mut BTreeSet<(String, String, String)>, out: &mut Vec<T>) -> bool
where
    T: Resource + Metadata<Ty = ObjectMeta> + DeserializeOwned + 'static,
{
    deploy::take(doc, NAMESPACE, ids, out)
}

fn manifests() -> Manifests {
    let mut m = Manifests::default();
    for doc in documents() {
        let ids = &mut m.ids;
        let known = take(&doc, ids, &mut m.namespaces)
            || take(&doc, ids, &mut m.service_accounts)
            || take(&doc, ids, &mut m.cluster_roles)
            || take(&doc, ids, &mut m.cluster_role_bindings)
            || take(&doc, ids, &mut m.roles)
            || take(&doc, ids, &mut m.role_bindings)
            || take(&doc, ids, &mut m.deployments)
            || take(&doc, ids, &mut m.services)
            || take(&doc, ids, &mut m.pdbs)
            || take(&doc, ids, &mut m.admission_policies)
            || take(&doc, ids, &mut m.admission_bindings);
        assert!(
            known,
            "{}: {} {} is not one of the kinds this test checks",
            doc.origin,
            doc.field("apiVersion"),
            doc.field("kind")
        );
    }
    m
}

// ---------------------------------------------------------------------------------------
// Admission
// ---------------------------------------------------------------------------------------

/// The author policy is bound, denies, and checks what MiniCluster writes change (not the
/// status or scale subresources the hub and HPAs write); each rule names its field and
/// asks the authorizer about the requesting user.
#[test]
fn the_author_policy_denies_minicluster_writes_and_names_each_field() {
    let m = manifests();
    let [policy] = m.admission_policies.as_slice() else {
        panic!("one ValidatingAdmissionPolicy");
    };
    let [binding] = m.admission_bindings.as_slice() else {
        panic!("one ValidatingAdmissionPolicyBinding");
    };
    let spec = policy.spec.as_ref().expect("spec");
    let bound = binding.spec.as_ref().expect("spec");
    assert_eq!(
        bound.policy_name.as_deref(),
        policy.metadata.name.as_deref()
    );
    assert_eq!(
        bound.validation_actions.as_deref(),
        Some(&["Deny".to_string()][..])
    );
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    let rules = spec
        .match_constraints
        .as_ref()
        .and_then(|c| c.resource_rules.clone())
        .expect("resource rules");
    let [rule] = rules.as_slice() else {
        panic!("one resource rule");
    };
    assert_eq!(
        rule.api_groups.as_deref(),
        Some(&["flux-framework.org".to_string()][..])
    );
    assert_eq!(
        rule.resources.as_deref(),
        Some(&["miniclusters".to_string()][..])
    );
    assert_eq!(
        rule.operations.as_deref(),
        Some(&["CREATE".to_string(), "UPDATE".to_string()][..])
    );
    let variables = spec.variables.clone().unwrap_or_default();
    assert!(
        variables.iter().any(|v| v
            .expression
            .contains("authorizer.group('').resource('pods')")
            && v.expression.contains("check('create')")),
        "asks whether the user may create pods"
    );
    let validations = spec.validations.clone().unwrap_or_default();
    let rules = author_rules::rules();
    assert_eq!(
        validations.len(),
        rules.len(),
        "one validation per author rule"
    );
    for (v, rule) in validations.iter().zip(&rules) {
        assert_eq!(v.expression, rule.validation());
        assert_eq!(v.message.as_deref(), Some(rule.message().as_str()));
        assert_eq!(v.reason.as_deref(), Some("Forbidden"));
        let message = v.message.as_deref().unwrap_or_default();
        assert!(message.starts_with("spec."), "names the field: {message}");
        assert!(
            v.expression.starts_with("!variables.checked || "),
            "{}",
            v.expression
        );
    }
}

/// `deploy/admission-policy.yaml` is what `flux_shared::validate::author_rules` generates
/// from its table of rules (the table the Rust checks use too), so the policy and the Rust
/// checks cannot drift. `UPDATE_GOLDEN=1` rewrites the file; then regenerate
/// `deploy/install.yaml` (`cargo run -p flux-hub -- install --print > deploy/install.yaml`).
#[test]
fn the_admission_policy_is_generated_from_the_author_rules() {
    let path = deploy_dir().join("admission-policy.yaml");
    let generated = author_rules::admission_policy_yaml();
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &generated).expect("write deploy/admission-policy.yaml");
    }
    let file = std::fs::read_to_string(&path).expect("deploy/admission-policy.yaml");
    assert!(
        file == generated,
        "deploy/admission-policy.yaml drifted from flux_shared::validate::author_rules: run \
         `UPDATE_GOLDEN=1 cargo test -p flux-hub --test deploy_manifests admission`, then \
         `cargo run -p flux-hub -- install --print > deploy/install.yaml`"
    );
    // What flux-hub install applies is the same file.
    assert_eq!(
        flux_hub::commands::install::HUB_MANIFESTS
            .iter()
            .find(|(name, _)| *name == "admission-policy.yaml")
            .map(|(_, text)| *text),
        Some(generated.as_str())
    );
}

// ---------------------------------------------------------------------------------------
// RBAC
// ---------------------------------------------------------------------------------------

fn required(own_namespace_only: bool) -> Grants {
    let mut grants = Grants::new();
    for p in REQUIRED
        .iter()
        .filter(|p| p.own_namespace_only == own_namespace_only)
    {
        let names: Vec<String> = p.resource_names.iter().map(|n| n.to_string()).collect();
        grants
            .entry((p.group.to_owned(), deploy::named(p.resource, &names)))
            .or_default()
            .extend(p.verbs.iter().map(|v| (*v).to_owned()));
    }
    grants
}

fn assert_grants_exactly(what: &str, actual: &Grants, expected: &Grants) {
    let mut problems = Vec::new();
    let empty = BTreeSet::new();
    for (key @ (group, resource), want) in expected {
        let have = actual.get(key).unwrap_or(&empty);
        for verb in want.difference(have) {
            problems.push(format!("missing {verb} on {group:?}/{resource}"));
        }
    }
    for (key @ (group, resource), have) in actual {
        let want = expected.get(key).unwrap_or(&empty);
        for verb in have.difference(want) {
            problems.push(format!(
                "{verb} on {group:?}/{resource} is not in permissions::REQUIRED"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{what} differs from permissions::REQUIRED:\n  {}",
        problems.join("\n  ")
    );
}

fn is_hub_account(subject: &Subject) -> bool {
    subject.kind == "ServiceAccount"
        && subject.name == SERVICE_ACCOUNT
        && subject.namespace.as_deref() == Some(NAMESPACE)
}

/// What the hub's ServiceAccount is granted cluster-wide: the ClusterRoles its
/// ClusterRoleBindings name.
fn cluster_wide_grants(m: &Manifests) -> Grants {
    let mut grants = Grants::new();
    for binding in &m.cluster_role_bindings {
        if !binding.subjects.iter().flatten().any(is_hub_account) {
            continue;
        }
        let role = m
            .cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(binding.role_ref.name.as_str()))
            .expect("bound ClusterRole exists (checked by the bindings test)");
        assert!(
            role.aggregation_rule.is_none(),
            "ClusterRole {} aggregates",
            binding.role_ref.name
        );
        let mut own = Grants::new();
        rule_grants(
            &format!("ClusterRole {}", binding.role_ref.name),
            role.rules.as_deref().unwrap_or_default(),
            &mut own,
        );
        for (key, verbs) in own {
            grants.entry(key).or_default().extend(verbs);
        }
    }
    grants
}

/// What the hub's ServiceAccount is granted in the hub's namespace by RoleBindings.
fn own_namespace_grants(m: &Manifests) -> Grants {
    let mut grants = Grants::new();
    for binding in &m.role_bindings {
        if !binding.subjects.iter().flatten().any(is_hub_account) {
            continue;
        }
        let role = m
            .roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(binding.role_ref.name.as_str()))
            .expect("bound Role exists (checked by the bindings test)");
        let mut own = Grants::new();
        rule_grants(
            &format!("Role {}", binding.role_ref.name),
            role.rules.as_deref().unwrap_or_default(),
            &mut own,
        );
        for (key, verbs) in own {
            grants.entry(key).or_default().extend(verbs);
        }
    }
    grants
}

#[test]
fn every_manifest_parses_into_a_known_kind() {
    let m = manifests();
    assert_eq!(m.namespaces.len(), 1, "one Namespace");
    assert_eq!(m.namespaces[0].metadata.name.as_deref(), Some(NAMESPACE));
    for (kind, count) in [
        ("ServiceAccount", m.service_accounts.len()),
        ("ClusterRole", m.cluster_roles.len()),
        ("ClusterRoleBinding", m.cluster_role_bindings.len()),
        ("Role", m.roles.len()),
        ("RoleBinding", m.role_bindings.len()),
        ("Deployment", m.deployments.len()),
        ("Service", m.services.len()),
    ] {
        assert!(count >= 1, "no {kind} under deploy/");
    }
}

#[test]
fn cluster_role_grants_exactly_the_cluster_wide_permissions() {
    let m = manifests();
    assert!(
        required(false)
            .keys()
            .all(|(_, resource)| resource != "leases"),
        "leases are expected own-namespace only"
    );
    assert_grants_exactly(
        "the hub's cluster-wide grants (ClusterRoleBindings)",
        &cluster_wide_grants(&m),
        &required(false),
    );
}

#[test]
fn role_grants_exactly_the_own_namespace_permissions() {
    let m = manifests();
    assert_grants_exactly(
        &format!("the hub's grants in {NAMESPACE} (RoleBindings)"),
        &own_namespace_grants(&m),
        &required(true),
    );
}

#[test]
fn bindings_name_the_service_account_and_existing_roles() {
    let m = manifests();
    let accounts: Vec<&str> = m
        .service_accounts
        .iter()
        .filter_map(|a| a.metadata.name.as_deref())
        .collect();
    assert_eq!(
        accounts,
        [SERVICE_ACCOUNT],
        "exactly the hub's ServiceAccount"
    );
    assert_ne!(
        m.service_accounts[0].automount_service_account_token,
        Some(false),
        "the hub needs its token"
    );

    let check_subjects = |what: &str, subjects: Option<&Vec<Subject>>| {
        let subjects = subjects.map(Vec::as_slice).unwrap_or_default();
        assert_eq!(subjects.len(), 1, "{what}: one subject");
        let s = &subjects[0];
        assert!(
            is_hub_account(s) && s.api_group.as_deref().unwrap_or_default().is_empty(),
            "{what}: subject must be ServiceAccount {NAMESPACE}/{SERVICE_ACCOUNT}, got {s:?}"
        );
    };

    let mut bound_cluster_roles = BTreeSet::new();
    for b in &m.cluster_role_bindings {
        let what = format!(
            "ClusterRoleBinding {}",
            b.metadata.name.as_deref().unwrap_or("")
        );
        check_subjects(&what, b.subjects.as_ref());
        assert_eq!(b.role_ref.api_group, RBAC_GROUP, "{what}: roleRef.apiGroup");
        assert_eq!(b.role_ref.kind, "ClusterRole", "{what}: roleRef.kind");
        assert!(
            m.cluster_roles
                .iter()
                .any(|r| r.metadata.name.as_deref() == Some(b.role_ref.name.as_str())),
            "{what}: ClusterRole {} is not in deploy/",
            b.role_ref.name
        );
        bound_cluster_roles.insert(b.role_ref.name.clone());
    }
    let mut bound_roles = BTreeSet::new();
    for b in &m.role_bindings {
        let what = format!("RoleBinding {}", b.metadata.name.as_deref().unwrap_or(""));
        check_subjects(&what, b.subjects.as_ref());
        assert_eq!(b.role_ref.api_group, RBAC_GROUP, "{what}: roleRef.apiGroup");
        assert_eq!(b.role_ref.kind, "Role", "{what}: roleRef.kind");
        assert!(
            m.roles.iter().any(|r| {
                r.metadata.name.as_deref() == Some(b.role_ref.name.as_str())
                    && r.metadata.namespace == b.metadata.namespace
            }),
            "{what}: Role {} is not in deploy/ in the binding's namespace",
            b.role_ref.name
        );
        bound_roles.insert(b.role_ref.name.clone());
    }
    for r in &m.cluster_roles {
        let name = r.metadata.name.clone().unwrap_or_default();
        assert!(
            bound_cluster_roles.contains(&name),
            "ClusterRole {name} is bound by nothing"
        );
    }
    for r in &m.roles {
        let name = r.metadata.name.clone().unwrap_or_default();
        assert!(
            bound_roles.contains(&name),
            "Role {name} is bound by nothing"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Deployment, Service, PodDisruptionBudget
// ---------------------------------------------------------------------------------------

fn hub_deployment(m: &Manifests) -> &Deployment {
    assert_eq!(m.deployments.len(), 1, "one Deployment");
    let d = &m.deployments[0];
    assert_eq!(d.metadata.name.as_deref(), Some(DEPLOYMENT));
    d
}

fn pod_spec(d: &Deployment) -> &PodSpec {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("Deployment pod spec")
}

fn pod_labels(d: &Deployment) -> BTreeMap<String, String> {
    d.spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default()
}

fn hub_container(d: &Deployment) -> &Container {
    let spec = pod_spec(d);
    assert_eq!(spec.containers.len(), 1, "one container");
    assert!(spec.init_containers.is_none(), "no init containers");
    &spec.containers[0]
}

/// Whether every label of `selector` is on `labels`.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn match_labels(what: &str, selector: Option<&LabelSelector>) -> BTreeMap<String, String> {
    let selector = selector.unwrap_or_else(|| panic!("{what}: no selector"));
    assert!(
        selector.match_expressions.is_none(),
        "{what}: matchLabels only"
    );
    selector.match_labels.clone().unwrap_or_default()
}

#[derive(Parser)]
#[command(name = "flux-hub run")]
struct RunCli {
    #[command(flatten)]
    run: RunOptions,
}

/// The container's arguments parsed by the real `flux-hub run` flags.
fn run_options(c: &Container) -> RunOptions {
    if let Some(command) = &c.command {
        assert_eq!(
            command,
            &[BINARY],
            "the container's command is the hub binary"
        );
    }
    let args = c.args.as_deref().unwrap_or_default();
    assert_eq!(
        args.first().map(String::as_str),
        Some("run"),
        "args replace the image's CMD, so they start with the `run` subcommand: {args:?}"
    );
    RunCli::try_parse_from(
        std::iter::once("flux-hub run").chain(args[1..].iter().map(String::as_str)),
    )
    .unwrap_or_else(|e| panic!("Deployment args {args:?} are not `flux-hub run` flags: {e}"))
    .run
}

/// The container port `port` names (by name or number).
fn container_port(c: &Container, port: &IntOrString) -> i32 {
    let ports = c.ports.as_deref().unwrap_or_default();
    match port {
        IntOrString::Int(n) => {
            assert!(
                ports.iter().any(|p| p.container_port == *n),
                "port {n} is not a container port"
            );
            *n
        }
        IntOrString::String(name) => {
            ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .unwrap_or_else(|| panic!("no container port named {name}"))
                .container_port
        }
    }
}

#[test]
fn deployment_runs_the_hub_with_leader_election_as_its_service_account() {
    let m = manifests();
    let d = hub_deployment(&m);
    let spec = d.spec.as_ref().expect("Deployment spec");
    assert_eq!(spec.replicas, Some(2), "two replicas");
    assert!(
        selects(
            &match_labels("Deployment", Some(&spec.selector)),
            &pod_labels(d)
        ),
        "the Deployment's selector matches its pod labels"
    );
    let pod = pod_spec(d);
    assert_eq!(pod.service_account_name.as_deref(), Some(SERVICE_ACCOUNT));
    assert!(
        m.service_accounts
            .iter()
            .any(|a| a.metadata.name.as_deref() == Some(SERVICE_ACCOUNT)),
        "the Deployment's ServiceAccount is in deploy/"
    );
    assert_ne!(
        pod.automount_service_account_token,
        Some(false),
        "the hub needs its token"
    );

    let c = hub_container(d);
    assert_eq!(c.image.as_deref(), Some(IMAGE));
    let opts = run_options(c);
    assert!(opts.leader_elect, "--leader-elect");
    assert!(opts.log_json, "--log-json");
    let args = c.args.as_deref().unwrap_or_default();
    // The Lease lives where the Role grants leases: the pod's own namespace, from
    // POD_NAMESPACE, unless a flag says otherwise.
    if let Some(ns) = flag_value(args, "--lease-namespace") {
        assert_eq!(ns, NAMESPACE, "--lease-namespace must be where the Role is");
    }

    let resources = c.resources.as_ref().expect("resources");
    let requests = resources.requests.clone().unwrap_or_default();
    let limits = resources.limits.clone().unwrap_or_default();
    for r in ["cpu", "memory"] {
        assert!(requests.contains_key(r), "a {r} request");
    }
    assert!(limits.contains_key("memory"), "a memory limit");
}

#[test]
fn deployment_sets_pod_name_and_namespace_from_the_downward_api() {
    let m = manifests();
    let c = hub_container(hub_deployment(&m));
    let env = c.env.as_deref().unwrap_or_default();
    for (name, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let vars: Vec<_> = env.iter().filter(|e| e.name == name).collect();
        assert_eq!(vars.len(), 1, "{name} set once");
        assert!(vars[0].value.is_none(), "{name} is not a literal");
        let path = vars[0]
            .value_from
            .as_ref()
            .and_then(|v| v.field_ref.as_ref())
            .map(|f| f.field_path.as_str());
        assert_eq!(path, Some(field), "{name} from the downward API");
    }
}

#[test]
fn probes_and_service_use_the_port_and_paths_the_hub_serves() {
    let m = manifests();
    let d = hub_deployment(&m);
    let c = hub_container(d);
    let opts = run_options(c);
    assert!(
        opts.metrics_addr.ip().is_unspecified(),
        "--metrics-addr {} must listen on every address for the kubelet and Prometheus",
        opts.metrics_addr
    );
    let port = i32::from(opts.metrics_addr.port());

    let http = c
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("http"))
        .expect("a container port named http");
    assert_eq!(
        http.container_port, port,
        "port http is --metrics-addr's port"
    );
    assert_eq!(http.protocol.as_deref().unwrap_or("TCP"), "TCP");

    for (what, probe, path) in [
        ("livenessProbe", &c.liveness_probe, "/healthz"),
        ("readinessProbe", &c.readiness_probe, "/readyz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("an HTTP {what}"));
        assert_eq!(get.path.as_deref(), Some(path), "{what} path");
        assert_eq!(container_port(c, &get.port), port, "{what} port");
        assert_eq!(
            get.scheme.as_deref().unwrap_or("HTTP"),
            "HTTP",
            "{what} scheme"
        );
    }

    let labels = pod_labels(d);
    let service = service(&m, METRICS_SERVICE);
    let spec = service.spec.as_ref().expect("Service spec");
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert!(
        selects(&spec.selector.clone().unwrap_or_default(), &labels),
        "the Service selects the hub's pods"
    );
    let ports = spec.ports.as_deref().unwrap_or_default();
    assert_eq!(ports.len(), 1, "one Service port");
    assert_eq!(ports[0].port, port);
    let target = ports[0]
        .target_port
        .clone()
        .unwrap_or(IntOrString::Int(ports[0].port));
    assert_eq!(
        container_port(c, &target),
        port,
        "the Service targets the metrics port"
    );
}

fn service<'a>(m: &'a Manifests, name: &str) -> &'a Service {
    let found: Vec<_> = m
        .services
        .iter()
        .filter(|s| s.metadata.name.as_deref() == Some(name))
        .collect();
    assert_eq!(found.len(), 1, "one Service {name}");
    found[0]
}

#[test]
fn only_the_two_services_are_installed() {
    let m = manifests();
    let names: BTreeSet<_> = m
        .services
        .iter()
        .filter_map(|s| s.metadata.name.as_deref())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from([METRICS_SERVICE, FEDERATION_SERVICE]),
        "Services in deploy/"
    );
}

#[test]
fn federation_service_reaches_only_the_leaders_grpc_port() {
    let m = manifests();
    let d = hub_deployment(&m);
    let c = hub_container(d);
    let opts = run_options(c);
    let addr = opts
        .grpc_addr
        .expect("--grpc-addr: spokes need the federation port");
    assert!(
        addr.ip().is_unspecified(),
        "--grpc-addr {addr} must listen on every address for the Service"
    );
    assert!(!opts.insecure, "no plaintext gRPC in the install manifests");
    let grpc = c
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("grpc"))
        .expect("a container port named grpc");
    assert_eq!(
        grpc.container_port,
        i32::from(addr.port()),
        "port grpc is --grpc-addr's port"
    );

    let service = service(&m, FEDERATION_SERVICE);
    let spec = service.spec.as_ref().expect("Service spec");
    assert_eq!(
        spec.type_.as_deref(),
        Some("LoadBalancer"),
        "reachable from other clusters"
    );
    let selector = spec.selector.clone().unwrap_or_default();
    // The leader adds the endpoint label to its own pod; the standby, which does not
    // listen on the gRPC port, never matches.
    assert_eq!(
        selector
            .get(flux_hub::ops::leader_pod::LABEL)
            .map(String::as_str),
        Some("true"),
        "the Service selects the pod labelled by the leader"
    );
    let mut leader = pod_labels(d);
    assert!(
        !selects(&selector, &leader),
        "a replica is not selected before it leads"
    );
    leader.insert(
        flux_hub::ops::leader_pod::LABEL.to_string(),
        "true".to_string(),
    );
    assert!(selects(&selector, &leader), "the leader's pod is selected");
    let ports = spec.ports.as_deref().unwrap_or_default();
    assert_eq!(ports.len(), 1, "one Service port");
    let target = ports[0]
        .target_port
        .clone()
        .unwrap_or(IntOrString::Int(ports[0].port));
    assert_eq!(
        container_port(c, &target),
        i32::from(addr.port()),
        "the Service targets the gRPC port"
    );
}

#[test]
fn grpc_certificates_come_from_the_tls_secret() {
    let m = manifests();
    let d = hub_deployment(&m);
    deploy::assert_certificates_from_secret(pod_spec(d), hub_container(d), TLS_SECRET, UID, true);
}

#[test]
fn deployment_security_context_is_restricted() {
    let m = manifests();
    let d = hub_deployment(&m);
    let pod = pod_spec(d);
    for (what, v) in [
        ("hostNetwork", pod.host_network),
        ("hostPID", pod.host_pid),
        ("hostIPC", pod.host_ipc),
    ] {
        assert_ne!(v, Some(true), "{what}");
    }
    let pod_ctx = pod.security_context.clone().unwrap_or_default();
    let c = hub_container(d);
    let ctx = c
        .security_context
        .clone()
        .expect("a container securityContext");
    // The container's settings win over the pod's.
    assert_eq!(
        ctx.run_as_non_root.or(pod_ctx.run_as_non_root),
        Some(true),
        "runAsNonRoot"
    );
    assert_eq!(
        ctx.run_as_user.or(pod_ctx.run_as_user),
        Some(UID),
        "runAsUser"
    );
    assert_eq!(
        ctx.read_only_root_filesystem,
        Some(true),
        "readOnlyRootFilesystem"
    );
    assert_eq!(
        ctx.allow_privilege_escalation,
        Some(false),
        "allowPrivilegeEscalation"
    );
    assert_ne!(ctx.privileged, Some(true), "privileged");
    let caps = ctx.capabilities.clone().unwrap_or_default();
    assert!(
        caps.drop.iter().flatten().any(|c| c == "ALL"),
        "capabilities.drop ALL"
    );
    assert!(
        caps.add.unwrap_or_default().is_empty(),
        "no capabilities added"
    );
    let seccomp = ctx
        .seccomp_profile
        .or(pod_ctx.seccomp_profile)
        .map(|s| s.type_);
    assert_eq!(seccomp.as_deref(), Some("RuntimeDefault"), "seccompProfile");
}

#[test]
fn pod_disruption_budget_lets_one_replica_go() {
    let m = manifests();
    let labels = pod_labels(hub_deployment(&m));
    for pdb in &m.pdbs {
        let spec = pdb.spec.as_ref().expect("PodDisruptionBudget spec");
        assert!(
            selects(
                &match_labels("PodDisruptionBudget", spec.selector.as_ref()),
                &labels
            ),
            "the PodDisruptionBudget selects the hub's pods"
        );
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        assert!(spec.min_available.is_none());
    }
}

// ---------------------------------------------------------------------------------------
// Oracle, kustomization, Dockerfile
// ---------------------------------------------------------------------------------------

#[test]
fn kubernetes_validate_accepts_every_manifest() {
    let mut files = manifest_files();
    files.push(root().join(CRD));
    // Every document and the CRD.
    deploy::assert_kubernetes_validate(&files, documents().len() + 1, "deploy/");
}

fn kustomization(dir: &Path) -> Option<Kustomization> {
    ["kustomization.yaml", "kustomization.yml", "Kustomization"]
        .iter()
        .map(|n| dir.join(n))
        .find(|p| p.is_file())
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read kustomization");
            serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        })
}

/// The files `dir`'s kustomization installs, following directory entries the way
/// kustomize does: a file entry must be inside the kustomization's own directory
/// (kustomize refuses others: "security; file ... is not in or below ..."), a directory
/// entry must hold a kustomization of its own.
fn kustomized_files(dir: &Path, out: &mut BTreeSet<PathBuf>) {
    let k =
        kustomization(dir).unwrap_or_else(|| panic!("{} has no kustomization.yaml", dir.display()));
    assert_eq!(
        k.api_version,
        "kustomize.config.k8s.io/v1beta1",
        "{}",
        dir.display()
    );
    assert_eq!(k.kind, "Kustomization", "{}", dir.display());
    let own = canonical(dir);
    let mut seen = BTreeSet::new();
    for entry in &k.resources {
        assert!(
            seen.insert(entry),
            "{}: {entry} listed twice",
            dir.display()
        );
        assert!(!entry.contains("://"), "{}: remote {entry}", dir.display());
        let path = dir.join(entry);
        assert!(path.exists(), "{}: {entry} does not exist", dir.display());
        if path.is_dir() {
            assert!(
                kustomization(&path).is_some(),
                "{}: {entry} is a directory without a kustomization.yaml (kustomize needs one \
                 there; for ../crds: crds/kustomization.yaml with \
                 `resources: [miniclusters.flux-framework.org.yaml]`)",
                dir.display()
            );
            kustomized_files(&path, out);
        } else {
            let file = canonical(&path);
            assert!(
                file.starts_with(&own)
                    && !Path::new(entry)
                        .components()
                        .any(|c| c == Component::ParentDir),
                "{}: kustomize refuses {entry}, a file outside the kustomization's directory; \
                 list its directory instead, with a kustomization.yaml there",
                dir.display()
            );
            out.insert(file);
        }
    }
}

#[test]
fn kustomization_lists_every_manifest() {
    let deploy = deploy_dir();
    let k = kustomization(&deploy).expect("deploy/kustomization.yaml");
    let listed: BTreeSet<PathBuf> = k
        .resources
        .iter()
        .map(|e| deploy.join(e))
        .filter(|p| p.is_file())
        .map(|p| canonical(&p))
        .collect();
    let manifests: BTreeSet<PathBuf> = manifest_files().iter().map(|p| canonical(p)).collect();
    assert_eq!(
        listed, manifests,
        "deploy/kustomization.yaml resources vs the YAML files in deploy/"
    );
}

#[test]
fn kustomization_installs_the_crd() {
    let crd = root().join(CRD);
    assert!(crd.is_file(), "{CRD} does not exist");
    let mut files = BTreeSet::new();
    kustomized_files(&deploy_dir(), &mut files);
    assert!(
        files.contains(&canonical(&crd)),
        "deploy/kustomization.yaml does not install {CRD}: list ../crds, whose \
         crds/kustomization.yaml lists miniclusters.flux-framework.org.yaml"
    );
}

/// `kubectl kustomize deploy/` (offline) builds exactly the manifests and the CRD, when
/// kubectl is on PATH.
#[test]
fn kubectl_kustomize_builds_every_object() {
    let Some(built) = deploy::kustomize_build(&deploy_dir()) else {
        return;
    };
    let mut expected = deploy::kinds_and_names(&documents());
    expected.insert((
        "CustomResourceDefinition".into(),
        "miniclusters.flux-framework.org".into(),
    ));
    assert_eq!(
        built, expected,
        "objects built by kubectl kustomize deploy/"
    );
}

#[test]
fn dockerfile_matches_the_deployment() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).expect("Dockerfile");
    let lines: Vec<&str> = dockerfile.lines().map(str::trim).collect();
    let m = manifests();
    let d = hub_deployment(&m);
    let ctx = hub_container(d)
        .security_context
        .clone()
        .unwrap_or_default();
    let uid = ctx
        .run_as_user
        .or(pod_spec(d)
            .security_context
            .as_ref()
            .and_then(|s| s.run_as_user))
        .expect("runAsUser");
    assert!(
        lines.contains(&format!("USER {uid}:{uid}").as_str()),
        "the image runs as the Deployment's runAsUser {uid}"
    );
    assert!(
        lines.contains(&format!("ENTRYPOINT [\"{BINARY}\"]").as_str()),
        "ENTRYPOINT"
    );
    assert!(lines.contains(&"CMD [\"run\"]"), "CMD");
    assert!(dockerfile.contains("cargo build --release -p flux-hub -p flux-spoke --locked"));
    // As flux_e2e::images::without_debug_info does for the image built offline.
    for bin in ["flux-hub", "flux-spoke"] {
        assert!(
            dockerfile.contains(&format!("objcopy --strip-debug /out/{bin}")),
            "the Dockerfile strips {bin}'s debug information"
        );
    }
    assert!(
        root().join("Cargo.lock").is_file(),
        "--locked needs Cargo.lock"
    );

    let ignore = std::fs::read_to_string(root().join(".dockerignore")).expect(".dockerignore");
    let ignored: BTreeSet<&str> = ignore
        .lines()
        .map(|l| l.trim().trim_end_matches('/'))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for dir in ["target", ".venv", ".git", ".quickstart"] {
        assert!(ignored.contains(dir), ".dockerignore excludes {dir}/");
    }
    // The quickstart's keys and kubeconfigs stay out of git too.
    let git = std::fs::read_to_string(root().join(".gitignore")).expect(".gitignore");
    assert!(
        git.lines().any(|l| l.trim() == "/.quickstart/"),
        ".gitignore excludes .quickstart/"
    );
    assert!(
        !ignored
            .iter()
            .any(|p| p.contains("Cargo.lock") || p.contains("*.lock")),
        "the build context keeps Cargo.lock"
    );
}

/// `deploy/install.yaml` is what `flux-hub install --print` prints (regenerate it with
/// `cargo run -p flux-hub -- install --print > deploy/install.yaml`): the objects of the
/// files above, with this release's image, and valid.
#[test]
fn install_yaml_is_install_print_of_these_manifests() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flux-hub"))
        .args(["install", "--print"])
        .output()
        .expect("run flux-hub install --print");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).expect("UTF-8");
    let file = std::fs::read_to_string(install_yaml()).expect("deploy/install.yaml");
    assert!(
        printed == file,
        "deploy/install.yaml is stale: run `cargo run -p flux-hub -- install --print > deploy/install.yaml`"
    );
    // The same objects as the files (plus the CRD), in the same order.
    let objects: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&file)
        .map(|d| {
            <serde_json::Value as serde::Deserialize>::deserialize(d).expect("a YAML document")
        })
        .collect();
    let ids = |v: &serde_json::Value| {
        (
            v["kind"].as_str().unwrap_or_default().to_string(),
            v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    };
    let expected: Vec<_> = documents()
        .iter()
        .map(|d| (d.field("kind").to_string(), d.name().to_string()))
        .collect();
    let mut printed_ids: Vec<_> = objects.iter().map(ids).collect();
    printed_ids.retain(|(kind, _)| kind != "CustomResourceDefinition");
    let mut expected = expected;
    expected.sort();
    printed_ids.sort();
    assert_eq!(printed_ids, expected);
    assert!(
        file.contains(&format!("image: {IMAGE}\n")),
        "the release's image"
    );
    deploy::assert_kubernetes_validate(&[install_yaml()], objects.len(), "deploy/install.yaml");
}
