//! Checks shared by the hub's and the spoke's install-manifest tests
//! (`deploy_manifests.rs`, `deploy_spoke_manifests.rs`).

use std::any::TypeId;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, NamespaceResourceScope, Resource};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::common::root;

/// The canonical form of an existing path.
pub fn canonical(path: &Path) -> PathBuf {
    path.canonicalize()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Whether `path` is a kustomization file.
pub fn is_kustomization(path: &Path) -> bool {
    matches!(
        path.file_name().and_then(|n| n.to_str()),
        Some("kustomization.yaml" | "kustomization.yml" | "Kustomization")
    )
}

/// One YAML document of a manifest file.
pub struct Doc {
    /// `<file> document <n>`, for messages.
    pub origin: String,
    /// The document.
    pub value: serde_yaml_ng::Value,
}

impl Doc {
    /// A top-level string field, which must be there.
    pub fn field(&self, name: &str) -> &str {
        self.value
            .get(name)
            .and_then(|v| v.as_str())
            .unwrap_or_else(|| panic!("{}: no {name}", self.origin))
    }

    /// `metadata.name`, or empty.
    pub fn name(&self) -> &str {
        self.value
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(|n| n.as_str())
            .unwrap_or_default()
    }
}

/// Every non-empty YAML document of `files`.
pub fn documents(files: &[PathBuf]) -> Vec<Doc> {
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).expect("read manifest");
        let rel = file
            .strip_prefix(root())
            .unwrap_or(file)
            .display()
            .to_string();
        for (i, de) in serde_yaml_ng::Deserializer::from_str(&text).enumerate() {
            let origin = format!("{rel} document {i}");
            let value = serde_yaml_ng::Value::deserialize(de)
                .unwrap_or_else(|e| panic!("{origin}: invalid YAML: {e}"));
            if !value.is_null() {
                docs.push(Doc { origin, value });
            }
        }
    }
    docs
}

/// `(kind, name)` of every document.
pub fn kinds_and_names(docs: &[Doc]) -> BTreeSet<(String, String)> {
    docs.iter()
        .map(|d| (d.field("kind").to_owned(), d.name().to_owned()))
        .collect()
}

/// Parses `doc` into `out` when it is a `T`; checks where it lives: namespaced objects
/// explicitly in `namespace` (the kustomizations set none), cluster-scoped ones in none;
/// and that `(kind, namespace, name)` is not in `ids` yet.
pub fn take<T>(
    doc: &Doc,
    namespace: &str,
    ids: &mut BTreeSet<(String, String, String)>,
    out: &mut Vec<T>,
) -> bool
where
    T: Resource + Metadata<Ty = ObjectMeta> + DeserializeOwned + 'static,
{
    if doc.field("apiVersion") != T::API_VERSION || doc.field("kind") != T::KIND {
        return false;
    }
    let object: T = serde_yaml_ng::from_value(doc.value.clone())
        .unwrap_or_else(|e| panic!("{}: not a valid {}: {e}", doc.origin, T::KIND));
    let meta = object.metadata();
    let name = meta
        .name
        .clone()
        .unwrap_or_else(|| panic!("{}: {} without a name", doc.origin, T::KIND));
    let own = meta.namespace.clone().unwrap_or_default();
    if TypeId::of::<T::Scope>() == TypeId::of::<NamespaceResourceScope>() {
        assert_eq!(
            own,
            namespace,
            "{}: {} {name} must set metadata.namespace {namespace}",
            doc.origin,
            T::KIND
        );
    } else {
        assert!(
            own.is_empty(),
            "{}: cluster-scoped {} {name} has a namespace",
            doc.origin,
            T::KIND
        );
    }
    assert!(
        ids.insert((T::KIND.to_owned(), own, name.clone())),
        "{}: a second {} {name}",
        doc.origin,
        T::KIND
    );
    out.push(object);
    true
}

/// Verbs granted per `(API group, resource)`; a rule limited to some objects by name has
/// the resource as [`named`] writes it.
pub type Grants = BTreeMap<(String, String), BTreeSet<String>>;

/// The key of a rule's resource: `resource`, or `resource[name,...]` when it is limited to
/// those names.
pub fn named(resource: &str, names: &[String]) -> String {
    if names.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}[{}]", names.join(","))
    }
}

/// The grants of `rules`, which must be one plain rule per group/resource: one API group,
/// one resource, no wildcard, no nonResourceURLs, no duplicate verb.
pub fn rule_grants(owner: &str, rules: &[PolicyRule], out: &mut Grants) {
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("{owner} rule {i}");
        let groups = rule.api_groups.as_deref().unwrap_or_default();
        let resources = rule.resources.as_deref().unwrap_or_default();
        assert!(
            groups.len() == 1 && resources.len() == 1,
            "{at}: one API group and one resource per rule, got {groups:?} {resources:?}"
        );
        assert!(
            rule.non_resource_urls.is_none(),
            "{at}: nonResourceURLs are not expected"
        );
        let (group, resource) = (&groups[0], &resources[0]);
        assert!(
            group != "*" && resource != "*" && !rule.verbs.iter().any(|v| v == "*"),
            "{at}: wildcard"
        );
        let verbs: BTreeSet<String> = rule.verbs.iter().cloned().collect();
        assert_eq!(verbs.len(), rule.verbs.len(), "{at}: a verb twice");
        assert!(!verbs.is_empty(), "{at}: no verbs");
        let resource = named(resource, rule.resource_names.as_deref().unwrap_or_default());
        assert!(
            out.insert((group.clone(), resource.clone()), verbs)
                .is_none(),
            "{owner}: a second rule for {group:?}/{resource}"
        );
    }
}

/// `files` pass `kubernetes-validate --strict` for the oldest Kubernetes our types target
/// and the newest the oracle knows, with exactly `expected` objects checked (the oracle
/// only warns, and exits 0, on a kind it has no schema for).
pub fn assert_kubernetes_validate(files: &[PathBuf], expected: usize, what: &str) {
    let validator = crate::common::kubernetes_validate();
    for version in ["1.33.0", "1.37.0"] {
        let out = Command::new(&validator)
            .args(["--strict", "-k", version])
            .args(files)
            .output()
            .expect("run kubernetes-validate");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "kubernetes-validate --strict -k {version} rejected {what}:\n{text}"
        );
        let passed = text.matches("passed for resource").count();
        assert_eq!(
            passed, expected,
            "kubernetes-validate -k {version} checked {passed} of {expected} objects:\n{text}"
        );
    }
}

/// A `kustomization.yaml`, the fields these tests read.
#[derive(Deserialize)]
pub struct Kustomization {
    /// `apiVersion`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// `resources`.
    #[serde(default)]
    pub resources: Vec<String>,
}

/// `(kind, name)` of every object `kubectl kustomize DIR` (offline) builds; `None`, saying
/// so, when kubectl is not on PATH.
pub fn kustomize_build(dir: &Path) -> Option<BTreeSet<(String, String)>> {
    let out = match Command::new("kubectl").arg("kustomize").arg(dir).output() {
        Ok(out) => out,
        Err(e) => {
            eprintln!("kubectl not runnable ({e}); skipping the kustomize build");
            return None;
        }
    };
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let mut built = BTreeSet::new();
    for de in serde_yaml_ng::Deserializer::from_str(&text) {
        let v = serde_yaml_ng::Value::deserialize(de).expect("kustomize output");
        let field = |path: &[&str]| {
            path.iter()
                .try_fold(&v, |v, k| v.get(*k))
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        built.insert((field(&["kind"]), field(&["metadata", "name"])));
    }
    Some(built)
}

/// The value of `--flag VALUE` or `--flag=VALUE` in `args`.
pub fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter().enumerate().find_map(|(i, a)| {
        if a == flag {
            args.get(i + 1).map(String::as_str)
        } else {
            a.strip_prefix(flag).and_then(|rest| rest.strip_prefix('='))
        }
    })
}

/// `--ca`, `--cert` and `--key` of container `c` name files of the Secret `secret`,
/// mounted read-only, `optional` or required, readable by the pod's group `uid` (fsGroup)
/// and by nobody else.
pub fn assert_certificates_from_secret(
    pod: &PodSpec,
    c: &Container,
    secret: &str,
    uid: i64,
    optional: bool,
) {
    let args = c.args.as_deref().unwrap_or_default();
    let (volume, source) = pod
        .volumes
        .iter()
        .flatten()
        .find_map(|v| {
            v.secret
                .as_ref()
                .filter(|s| s.secret_name.as_deref() == Some(secret))
                .map(|s| (v.name.clone(), s.clone()))
        })
        .unwrap_or_else(|| panic!("a volume of the Secret {secret}"));
    assert_eq!(
        source.optional.unwrap_or(false),
        optional,
        "{secret}: optional only where the process runs without it"
    );
    let mode = source.default_mode.expect("a defaultMode");
    assert_eq!(
        mode & 0o007,
        0,
        "the key is not world-readable (mode {mode:o})"
    );
    assert_eq!(mode & 0o040, 0o040, "group-readable (mode {mode:o})");
    assert_eq!(
        pod.security_context.as_ref().and_then(|s| s.fs_group),
        Some(uid),
        "fsGroup lets user {uid} read the certificate files"
    );
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|vm| vm.name == volume)
        .expect("the TLS volume is mounted");
    assert_eq!(mount.read_only, Some(true), "mounted read-only");
    let items: BTreeMap<String, String> = source
        .items
        .iter()
        .flatten()
        .map(|i| (i.path.clone(), i.key.clone()))
        .collect();
    for flag in ["--ca", "--cert", "--key"] {
        let path = flag_value(args, flag).unwrap_or_else(|| panic!("{flag} is set"));
        let file = Path::new(path)
            .strip_prefix(&mount.mount_path)
            .unwrap_or_else(|_| panic!("{flag}={path} is not under {}", mount.mount_path))
            .to_str()
            .expect("UTF-8 path");
        assert!(
            items.is_empty() || items.contains_key(file),
            "{flag}={path}: the Secret volume projects no {file} (items {items:?})"
        );
    }
}
