//! The spoke's install manifests under `deploy/spoke/`: every document parses into its
//! `k8s_openapi` type, the RBAC grants exactly what the spoke needs (least privilege,
//! nothing missing), the Deployment runs `flux-spoke run` with the hub URL, domain and
//! spoke name from the ConfigMap, its certificates from the Secret `flux-spoke-tls`
//! mounted read-only, probes on the port `--metrics-addr` serves, a restricted security
//! context; every object passes the strict `kubernetes-validate` oracle;
//! `kustomization.yaml` installs all of it; the image (Dockerfile) ships the binary.

mod common;
#[path = "common/deploy.rs"]
mod deploy;

use std::collections::BTreeSet;
use std::path::PathBuf;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, PodSpec, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::{Metadata, Resource};
use serde::de::DeserializeOwned;

use common::root;
use deploy::{Doc, Grants, Kustomization, canonical, flag_value, is_kustomization, rule_grants};

const NAMESPACE: &str = "flux-spoke-system";
const SERVICE_ACCOUNT: &str = "flux-spoke";
const DEPLOYMENT: &str = "flux-spoke";
const CONFIG_MAP: &str = "flux-spoke-config";
const TLS_SECRET: &str = "flux-spoke-tls";
/// The hub's image, which ships both binaries.
const IMAGE: &str = flux_shared::IMAGE;
const BINARY: &str = "/usr/local/bin/flux-spoke";
const PROBE_PORT: i32 = 8081;
const UID: i64 = 65532;
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Exactly what the spoke may do, cluster-wide: `(API group, resource) -> verbs`, from the
/// list the spoke's own mock-API tests check every request against.
/// What the spoke's ClusterRoles grant together: its permissions and what measuring its
/// room reads.
fn required() -> Grants {
    let mut grants = Grants::new();
    for (group, resource, verbs) in flux_shared::federation::spoke_rbac::REQUIRED
        .iter()
        .chain(flux_shared::federation::spoke_rbac::ROOM_PERMISSIONS)
    {
        grants
            .entry(((*group).to_owned(), (*resource).to_owned()))
            .or_default()
            .extend(verbs.iter().map(|v| (*v).to_owned()));
    }
    grants
}

fn spoke_dir() -> PathBuf {
    root().join("deploy/spoke")
}

/// Every manifest file in `deploy/spoke/` (no subdirectories expected), sorted.
fn manifest_files() -> Vec<PathBuf> {
    let dir = spoke_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .inspect(|p| assert!(!p.is_dir(), "unexpected directory {}", p.display()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .filter(|p| !is_kustomization(p))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in deploy/spoke/");
    files
}

fn documents() -> Vec<Doc> {
    deploy::documents(&manifest_files())
}

/// Every object of `deploy/spoke/`, typed.
#[derive(Default)]
struct Manifests {
    namespaces: Vec<Namespace>,
    service_accounts: Vec<ServiceAccount>,
    cluster_roles: Vec<ClusterRole>,
    cluster_role_bindings: Vec<ClusterRoleBinding>,
    roles: Vec<Role>,
    role_bindings: Vec<RoleBinding>,
    config_maps: Vec<ConfigMap>,
    deployments: Vec<Deployment>,
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
            || take(&doc, ids, &mut m.config_maps)
            || take(&doc, ids, &mut m.deployments);
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
// RBAC
// ---------------------------------------------------------------------------------------

fn is_spoke_account(s: &k8s_openapi::api::rbac::v1::Subject) -> bool {
    s.kind == "ServiceAccount"
        && s.name == SERVICE_ACCOUNT
        && s.namespace.as_deref() == Some(NAMESPACE)
        && s.api_group.as_deref().unwrap_or_default().is_empty()
}

#[test]
fn every_manifest_parses_into_a_known_kind() {
    let m = manifests();
    assert_eq!(m.namespaces.len(), 1, "one Namespace");
    assert_eq!(m.namespaces[0].metadata.name.as_deref(), Some(NAMESPACE));
    let labels = m.namespaces[0].metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str),
        Some("restricted"),
        "Pod Security restricted is enforced in {NAMESPACE}"
    );
    for (kind, count) in [
        ("ServiceAccount", m.service_accounts.len()),
        // Its permissions, and what measuring its room reads.
        ("ClusterRole", m.cluster_roles.len() - 1),
        ("ClusterRoleBinding", m.cluster_role_bindings.len() - 1),
        ("Role", m.roles.len()),
        ("RoleBinding", m.role_bindings.len()),
        ("ConfigMap", m.config_maps.len()),
        ("Deployment", m.deployments.len()),
    ] {
        assert_eq!(count, 1, "one {kind} in deploy/spoke/");
    }
}

#[test]
fn cluster_role_grants_exactly_what_the_spoke_needs() {
    let m = manifests();
    let mut granted = Grants::new();
    for binding in &m.cluster_role_bindings {
        let subjects = binding.subjects.as_deref().unwrap_or_default();
        assert!(
            subjects.len() == 1 && is_spoke_account(&subjects[0]),
            "ClusterRoleBinding {:?} must bind exactly ServiceAccount {NAMESPACE}/{SERVICE_ACCOUNT}: {subjects:?}",
            binding.metadata.name
        );
        assert_eq!(binding.role_ref.api_group, RBAC_GROUP);
        assert_eq!(binding.role_ref.kind, "ClusterRole");
        let role = m
            .cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(binding.role_ref.name.as_str()))
            .unwrap_or_else(|| {
                panic!(
                    "ClusterRole {} is not in deploy/spoke/",
                    binding.role_ref.name
                )
            });
        assert!(
            role.aggregation_rule.is_none(),
            "the ClusterRole aggregates"
        );
        let mut by_role = Grants::new();
        rule_grants(
            &format!("ClusterRole {}", binding.role_ref.name),
            role.rules.as_deref().unwrap_or_default(),
            &mut by_role,
        );
        for (key, verbs) in by_role {
            granted.entry(key).or_default().extend(verbs);
        }
    }
    let expected = required();
    let empty = BTreeSet::new();
    let mut problems = Vec::new();
    for (key @ (group, resource), want) in &expected {
        for verb in want.difference(granted.get(key).unwrap_or(&empty)) {
            problems.push(format!("missing {verb} on {group:?}/{resource}"));
        }
    }
    for (key @ (group, resource), have) in &granted {
        for verb in have.difference(expected.get(key).unwrap_or(&empty)) {
            problems.push(format!(
                "{verb} on {group:?}/{resource} is more than the spoke needs"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the spoke's RBAC:\n  {}",
        problems.join("\n  ")
    );

    let accounts: Vec<&str> = m
        .service_accounts
        .iter()
        .filter_map(|a| a.metadata.name.as_deref())
        .collect();
    assert_eq!(accounts, [SERVICE_ACCOUNT]);
    assert_ne!(
        m.service_accounts[0].automount_service_account_token,
        Some(false),
        "the spoke needs its token"
    );
}

#[test]
fn role_grants_reading_the_policy_in_the_spokes_namespace_only() {
    let m = manifests();
    let binding = &m.role_bindings[0];
    assert_eq!(binding.metadata.namespace.as_deref(), Some(NAMESPACE));
    let subjects = binding.subjects.as_deref().unwrap_or_default();
    assert!(
        subjects.len() == 1 && is_spoke_account(&subjects[0]),
        "{subjects:?}"
    );
    assert_eq!(binding.role_ref.kind, "Role");
    let role = &m.roles[0];
    assert_eq!(
        role.metadata.name.as_deref(),
        Some(binding.role_ref.name.as_str())
    );
    assert_eq!(role.metadata.namespace.as_deref(), Some(NAMESPACE));
    let mut granted = Grants::new();
    rule_grants(
        "Role",
        role.rules.as_deref().unwrap_or_default(),
        &mut granted,
    );
    let mut expected = Grants::new();
    for (group, resource, verbs) in flux_shared::federation::spoke_rbac::POLICY_PERMISSIONS {
        expected
            .entry((group.to_string(), resource.to_string()))
            .or_default()
            .extend(verbs.iter().map(|v| v.to_string()));
    }
    assert_eq!(granted, expected);
}

// ---------------------------------------------------------------------------------------
// Deployment
// ---------------------------------------------------------------------------------------

fn deployment(m: &Manifests) -> &Deployment {
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

fn container(d: &Deployment) -> &Container {
    let containers = &pod_spec(d).containers;
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}

/// `--flag=value` or `--flag value` in `args`.
/// The `$(VAR)` references in `text` (Kubernetes expands them from the container's env).
fn var_refs(text: &str) -> Vec<String> {
    let mut refs = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("$(") {
        let after = &rest[at + 2..];
        let end = after.find(')').expect("unterminated $(");
        refs.push(after[..end].to_string());
        rest = &after[end + 1..];
    }
    refs
}

#[test]
fn deployment_runs_one_spoke() {
    let m = manifests();
    let d = deployment(&m);
    let spec = d.spec.as_ref().expect("Deployment spec");
    assert_eq!(spec.replicas, Some(1), "exactly one spoke per cluster");
    assert_eq!(
        spec.strategy.as_ref().and_then(|s| s.type_.as_deref()),
        Some("Recreate"),
        "never two spokes of the same name at once, not even during a rollout"
    );
    let pod_labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let selector = spec.selector.match_labels.clone().unwrap_or_default();
    assert!(!selector.is_empty(), "a selector");
    assert!(
        selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
        "the selector {selector:?} selects the pod labels {pod_labels:?}"
    );
    let pod = pod_spec(d);
    assert_eq!(pod.service_account_name.as_deref(), Some(SERVICE_ACCOUNT));
    assert_ne!(pod.automount_service_account_token, Some(false));
}

#[test]
fn container_runs_flux_spoke_with_the_config_map_and_the_tls_secret() {
    let m = manifests();
    let d = deployment(&m);
    let c = container(d);
    assert_eq!(c.image.as_deref(), Some(IMAGE));
    assert_eq!(c.command.as_deref(), Some(&[BINARY.to_string()][..]));
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(
        args.first().map(String::as_str),
        Some("run"),
        "flux-spoke run"
    );

    // Hub URL, domain and spoke name come from the ConfigMap through env expansion.
    let env = c.env.clone().unwrap_or_default();
    let config_map = &m.config_maps[0];
    assert_eq!(config_map.metadata.name.as_deref(), Some(CONFIG_MAP));
    let data = config_map.data.clone().unwrap_or_default();
    for flag in ["--hub", "--hub-domain", "--name"] {
        let value = flag_value(&args, flag).unwrap_or_else(|| panic!("{flag} is set"));
        let refs = var_refs(value);
        assert_eq!(refs.len(), 1, "{flag}={value} comes from one variable");
        let var = env
            .iter()
            .find(|e| e.name == refs[0])
            .unwrap_or_else(|| panic!("{flag}: $({}) is not in the container's env", refs[0]));
        let key_ref = var
            .value_from
            .as_ref()
            .and_then(|v| v.config_map_key_ref.as_ref())
            .unwrap_or_else(|| panic!("{} comes from a ConfigMap", var.name));
        assert_eq!(key_ref.name, CONFIG_MAP);
        assert_ne!(key_ref.optional, Some(true), "{}: required", var.name);
        let value = data
            .get(&key_ref.key)
            .unwrap_or_else(|| panic!("ConfigMap {CONFIG_MAP} has no key {}", key_ref.key));
        assert!(!value.trim().is_empty(), "{} is empty", key_ref.key);
        if flag == "--hub" {
            assert!(
                value.starts_with("https://"),
                "the hub URL is https:// (mTLS): {value}"
            );
        }
    }
    // Every $(VAR) in the args is defined before use (else Kubernetes leaves it verbatim).
    for arg in &args {
        for var in var_refs(arg) {
            assert!(
                env.iter().any(|e| e.name == var),
                "{arg}: $({var}) undefined"
            );
        }
    }
    assert!(!args.iter().any(|a| a == "--insecure"), "no plaintext");

    // Certificates: files of the Secret flux-spoke-tls, mounted read-only.
    deploy::assert_certificates_from_secret(pod_spec(d), c, TLS_SECRET, UID, false);
}

#[test]
fn probes_use_the_metrics_port() {
    let m = manifests();
    let c = container(deployment(&m));
    let args = c.args.clone().unwrap_or_default();
    let addr: std::net::SocketAddr = flag_value(&args, "--metrics-addr")
        .expect("--metrics-addr")
        .parse()
        .expect("--metrics-addr is an address");
    assert!(addr.ip().is_unspecified(), "the kubelet must reach {addr}");
    assert_eq!(i32::from(addr.port()), PROBE_PORT);
    let ports = c.ports.clone().unwrap_or_default();
    let http = ports
        .iter()
        .find(|p| p.name.as_deref() == Some("http"))
        .expect("a port named http");
    assert_eq!(http.container_port, PROBE_PORT);
    for (what, probe, path) in [
        ("livenessProbe", &c.liveness_probe, "/healthz"),
        ("readinessProbe", &c.readiness_probe, "/readyz"),
    ] {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref())
            .unwrap_or_else(|| panic!("an HTTP {what}"));
        assert_eq!(get.path.as_deref(), Some(path), "{what} path");
        let port = match &get.port {
            IntOrString::Int(p) => *p,
            IntOrString::String(name) => {
                ports
                    .iter()
                    .find(|p| p.name.as_deref() == Some(name.as_str()))
                    .unwrap_or_else(|| panic!("{what}: no port named {name}"))
                    .container_port
            }
        };
        assert_eq!(port, PROBE_PORT, "{what} port");
    }
    let resources = c.resources.as_ref().expect("resources");
    for r in ["cpu", "memory"] {
        assert!(
            resources
                .requests
                .as_ref()
                .is_some_and(|q| q.contains_key(r)),
            "a {r} request"
        );
    }
    assert!(
        resources
            .limits
            .as_ref()
            .is_some_and(|q| q.contains_key("memory")),
        "a memory limit"
    );
}

#[test]
fn security_context_is_restricted() {
    let m = manifests();
    let d = deployment(&m);
    let pod = pod_spec(d);
    for (what, v) in [
        ("hostNetwork", pod.host_network),
        ("hostPID", pod.host_pid),
        ("hostIPC", pod.host_ipc),
    ] {
        assert_ne!(v, Some(true), "{what}");
    }
    let pod_ctx = pod.security_context.clone().unwrap_or_default();
    let ctx = container(d)
        .security_context
        .clone()
        .expect("a container securityContext");
    assert_eq!(ctx.run_as_non_root.or(pod_ctx.run_as_non_root), Some(true));
    assert_eq!(ctx.run_as_user.or(pod_ctx.run_as_user), Some(UID));
    assert_eq!(ctx.read_only_root_filesystem, Some(true));
    assert_eq!(ctx.allow_privilege_escalation, Some(false));
    assert_ne!(ctx.privileged, Some(true));
    let caps = ctx.capabilities.clone().unwrap_or_default();
    assert!(caps.drop.iter().flatten().any(|c| c == "ALL"), "drop ALL");
    assert!(
        caps.add.unwrap_or_default().is_empty(),
        "no capabilities added"
    );
    let seccomp = ctx
        .seccomp_profile
        .or(pod_ctx.seccomp_profile)
        .map(|s| s.type_);
    assert_eq!(seccomp.as_deref(), Some("RuntimeDefault"));
}

// ---------------------------------------------------------------------------------------
// Oracle, kustomization, Dockerfile
// ---------------------------------------------------------------------------------------

#[test]
fn kubernetes_validate_accepts_every_manifest() {
    deploy::assert_kubernetes_validate(&manifest_files(), documents().len(), "deploy/spoke/");
}

#[test]
fn kustomization_lists_every_manifest() {
    let dir = spoke_dir();
    let text = std::fs::read_to_string(dir.join("kustomization.yaml"))
        .expect("deploy/spoke/kustomization.yaml");
    let k: Kustomization = serde_yaml_ng::from_str(&text).expect("kustomization");
    assert_eq!(k.api_version, "kustomize.config.k8s.io/v1beta1");
    assert_eq!(k.kind, "Kustomization");
    let listed: BTreeSet<PathBuf> = k
        .resources
        .iter()
        .map(|e| {
            assert!(
                !e.contains("..") && !e.contains("://"),
                "{e}: outside deploy/spoke/"
            );
            canonical(&dir.join(e))
        })
        .collect();
    assert_eq!(listed.len(), k.resources.len(), "a resource listed twice");
    let files: BTreeSet<PathBuf> = manifest_files().iter().map(|p| canonical(p)).collect();
    assert_eq!(
        listed, files,
        "kustomization.yaml resources vs the YAML files"
    );
}

/// `kubectl kustomize deploy/spoke/` (offline) builds exactly the manifests, when kubectl
/// is on PATH.
#[test]
fn kubectl_kustomize_builds_every_object() {
    let Some(built) = deploy::kustomize_build(&spoke_dir()) else {
        return;
    };
    assert_eq!(built, deploy::kinds_and_names(&documents()));
}

#[test]
fn the_image_ships_the_spoke_binary() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).expect("Dockerfile");
    assert!(
        dockerfile.contains("cargo build --release -p flux-hub -p flux-spoke --locked"),
        "the Dockerfile builds both binaries"
    );
    let lines: Vec<&str> = dockerfile.lines().map(str::trim).collect();
    assert!(
        lines.contains(&format!("COPY --from=build /out/flux-spoke {BINARY}").as_str()),
        "the image has {BINARY}"
    );
    assert!(
        dockerfile.contains("install -D -m 0755 target/release/flux-spoke /out/flux-spoke"),
        "the build stage copies the spoke binary out"
    );
    assert!(
        lines.contains(&format!("USER {UID}:{UID}").as_str()),
        "the image runs as the Deployment's runAsUser"
    );
}

// ---------------------------------------------------------------------------------------
// The per-namespace form `flux-hub join` generates from the policy
// ---------------------------------------------------------------------------------------

fn joined(rbac: &flux_hub::commands::install::SpokeRbac) -> Vec<serde_json::Value> {
    flux_hub::commands::install::spoke_objects(
        &flux_hub::commands::install::SpokeSettings {
            name: "gke".into(),
            hub_url: "https://hub.example.org:8443".into(),
            hub_domain: "hub.example.org".into(),
            labels: [("region".to_string(), "west".to_string())].into(),
            room: true,
            root_reach: Default::default(),
            fence_after_seconds: None,
            lead_unreachable_after_seconds: None,
        },
        None,
        rbac,
        "CA",
        "CERT",
        "KEY",
    )
    .expect("spoke objects")
}

/// The spoke container's arguments in `objects`.
fn spoke_args(objects: &[serde_json::Value]) -> Vec<String> {
    let deployments: Vec<Deployment> = typed(objects, "Deployment");
    deployments[0]
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers[0].args.clone())
        .unwrap_or_default()
}

fn typed<T: DeserializeOwned>(objects: &[serde_json::Value], kind: &str) -> Vec<T> {
    objects
        .iter()
        .filter(|o| o["kind"] == kind)
        .map(|o| serde_json::from_value(o.clone()).expect(kind))
        .collect()
}

#[test]
fn join_grants_a_role_in_each_namespace_of_the_policy_and_reads_only_those_namespaces() {
    use flux_hub::commands::install::SpokeRbac;
    let names: BTreeSet<String> = ["lab".to_string(), "team".to_string()].into();
    let objects = joined(&SpokeRbac::Namespaces(names.clone()));
    // The cluster-wide grant shrinks to reading these namespaces by name.
    let mut cluster_roles: Vec<ClusterRole> = typed(&objects, "ClusterRole");
    // What measuring its room reads stays cluster-wide (and only that).
    let room = cluster_roles.remove(
        cluster_roles
            .iter()
            .position(|r| r.metadata.name.as_deref() == Some("flux-spoke-room"))
            .expect("the room's ClusterRole"),
    );
    let mut room_grants = Grants::new();
    rule_grants(
        "ClusterRole flux-spoke-room",
        room.rules.as_deref().unwrap_or_default(),
        &mut room_grants,
    );
    let mut want_room = Grants::new();
    for (group, resource, verbs) in flux_shared::federation::spoke_rbac::ROOM_PERMISSIONS {
        want_room.insert(
            (group.to_string(), resource.to_string()),
            verbs.iter().map(|v| v.to_string()).collect(),
        );
    }
    assert_eq!(room_grants, want_room);
    assert_eq!(cluster_roles.len(), 1);
    let rules = cluster_roles[0].rules.as_deref().unwrap_or_default();
    assert_eq!(rules.len(), 1, "{rules:?}");
    let (group, resource, verbs) = flux_shared::federation::spoke_rbac::NAMESPACE_READ;
    assert_eq!(
        rules[0].api_groups.as_deref(),
        Some(&[group.to_string()][..])
    );
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&[resource.to_string()][..])
    );
    assert_eq!(rules[0].verbs, verbs);
    assert_eq!(
        rules[0].resource_names.as_deref(),
        Some(&["lab".to_string(), "team".to_string()][..])
    );
    // A Role with exactly NAMESPACED_REQUIRED, bound to the spoke, in each namespace.
    let mut expected = Grants::new();
    for (group, resource, verbs) in flux_shared::federation::spoke_rbac::NAMESPACED_REQUIRED {
        expected.insert(
            (group.to_string(), resource.to_string()),
            verbs.iter().map(|v| v.to_string()).collect(),
        );
    }
    let roles: Vec<Role> = typed(&objects, "Role");
    let bindings: Vec<RoleBinding> = typed(&objects, "RoleBinding");
    for ns in &names {
        let role = roles
            .iter()
            .find(|r| r.metadata.namespace.as_deref() == Some(ns.as_str()))
            .unwrap_or_else(|| panic!("no Role in {ns}"));
        let mut granted = Grants::new();
        rule_grants(
            &format!("Role {ns}/flux-spoke"),
            role.rules.as_deref().unwrap_or_default(),
            &mut granted,
        );
        assert_eq!(granted, expected, "Role in {ns}");
        let binding = bindings
            .iter()
            .find(|b| b.metadata.namespace.as_deref() == Some(ns.as_str()))
            .unwrap_or_else(|| panic!("no RoleBinding in {ns}"));
        assert_eq!(binding.role_ref.kind, "Role");
        assert_eq!(
            Some(binding.role_ref.name.as_str()),
            role.metadata.name.as_deref()
        );
        let subjects = binding.subjects.as_deref().unwrap_or_default();
        assert!(
            subjects.len() == 1 && is_spoke_account(&subjects[0]),
            "{subjects:?}"
        );
    }
    // Besides them, only the policy's Role in the spoke's namespace.
    assert_eq!(roles.len(), names.len() + 1);
    // The spoke is told where it may act.
    let args = spoke_args(&objects);
    assert_eq!(flag_value(&args, "--namespaces"), Some("lab,team"));
    // Roles come after the namespace they live in exists (join creates it first) and
    // after the account they bind; the oracle accepts every object.
    let dir = std::env::temp_dir().join(format!("flux-join-rbac-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("joined.yaml");
    let text: Vec<String> = objects
        .iter()
        .map(|o| serde_yaml_ng::to_string(o).unwrap())
        .collect();
    std::fs::write(&file, text.join("---\n")).unwrap();
    deploy::assert_kubernetes_validate(&[file], objects.len(), "join's per-namespace objects");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_spoke_whose_policy_names_no_namespace_may_read_none() {
    use flux_hub::commands::install::SpokeRbac;
    let objects = joined(&SpokeRbac::Namespaces(BTreeSet::new()));
    let cluster_roles: Vec<ClusterRole> = typed(&objects, "ClusterRole");
    // An empty resourceNames would grant every namespace: no rule at all instead.
    assert!(
        cluster_roles[0]
            .rules
            .as_deref()
            .unwrap_or_default()
            .is_empty(),
        "{:?}",
        cluster_roles[0].rules
    );
    let args = spoke_args(&objects);
    assert_eq!(flag_value(&args, "--namespaces"), Some(""));
    // The cluster-wide form is the manifests' own.
    let wide = joined(&SpokeRbac::ClusterWide);
    let wide_roles: Vec<ClusterRole> = typed(&wide, "ClusterRole");
    assert_eq!(wide_roles, manifests().cluster_roles);
}
