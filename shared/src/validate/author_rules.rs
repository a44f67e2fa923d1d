//! What a MiniCluster's author may ask for in the root cluster only when they may create pods
//! in its namespace: one table ([`rules`]) from which come both the Rust check
//! ([`author_violations`]) and the CEL of the install's ValidatingAdmissionPolicy
//! (`deploy/admission-policy.yaml` is [`admission_policy_yaml`], checked by a test in
//! `hub/tests/deploy_manifests.rs`).
//!
//! The hub creates a MiniCluster's pods with its own service account, which may create any
//! pod. An author who may not create pods in the namespace must get nothing through a
//! MiniCluster that a pod of theirs would need that permission for beyond a plain pod of
//! the namespace: nothing of the node (privileges, capabilities, host namespaces and
//! paths, unconfined seccomp or AppArmor, SELinux labels, unmasked /proc, unsafe sysctls,
//! Windows host processes), nothing of the namespace's objects (service accounts and
//! tokens, Secrets, ConfigMaps, PersistentVolumeClaims, inline CSI volumes) and no node
//! the cluster's admin reserved (tolerations, runtime classes, which may add tolerations,
//! other schedulers). These are the Pod Security baseline rules of `pod_security` (the very
//! same [`ScRule`] and [`AnnotationRule`], Rust and CEL side by side) and the burst checks'
//! rules (`burst_safety`, the spoke policy's volume kinds), taken field by field;
//! [`BURST_ONLY`] says why the others do not apply in the root cluster.
//!
//! Size: about 260 of its lines are the tests, which evaluate the generated CEL.

use serde_json::{Value, json};

use super::FieldError;
use super::pod_security::{AnnotationRule, Sc, ScRule};
use crate::api::{ContainerVolume, MiniClusterContainer, MiniClusterSpec};

/// The name of the ValidatingAdmissionPolicy and of its binding.
pub const POLICY_NAME: &str = "flux-hub-minicluster-author";

/// The end of every rule's message.
const NEEDS: &str = "needs an author who may create pods in this namespace";

/// A list of containers a rule looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum List {
    /// `spec.containers` (the brokers' pods).
    Containers,
    /// `spec.services` (the services pod, in the root cluster only).
    Services,
    /// `spec.flux.container` (the flux view, an init container of the brokers' pods).
    View,
}

impl List {
    const ALL: [List; 3] = [List::Containers, List::Services, List::View];

    /// The field, as a message names it.
    fn field(self) -> &'static str {
        match self {
            List::Containers => "spec.containers[]",
            List::Services => "spec.services[]",
            List::View => "spec.flux.container",
        }
    }

    /// The policy's variable holding the list.
    fn cel(self) -> &'static str {
        match self {
            List::Containers => "variables.containers",
            List::Services => "variables.services",
            List::View => "variables.view",
        }
    }

    /// The MiniCluster containers of the list (the view is not one).
    fn containers(
        self,
        spec: &MiniClusterSpec,
    ) -> impl Iterator<Item = (String, &MiniClusterContainer)> {
        let (name, list) = match self {
            List::Containers => ("spec.containers", spec.containers.as_slice()),
            List::Services => ("spec.services", spec.services.as_slice()),
            List::View => ("", &[][..]),
        };
        list.iter()
            .enumerate()
            .map(move |(i, c)| (format!("{name}[{i}]"), c))
    }

    /// A spec patch that puts a container with `extra` into the list.
    fn example(self, extra: Value) -> Value {
        match self {
            List::Containers => {
                json!({"containers": [merged(json!({"image": "busybox"}), &extra)]})
            }
            List::Services => {
                json!({"services": [merged(json!({"name": "svc", "image": "busybox"}), &extra)]})
            }
            List::View => json!({"flux": {"container": extra}}),
        }
    }
}

/// A volume source of the namespace or of the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A directory of the node.
    HostPath,
    /// A Secret of the namespace.
    SecretName,
    /// A ConfigMap of the namespace.
    ConfigMapName,
    /// A PersistentVolumeClaim of the namespace.
    ClaimName,
    /// An inline CSI volume.
    CsiDriver,
}

impl Source {
    const ALL: [Source; 5] = [
        Source::HostPath,
        Source::SecretName,
        Source::ConfigMapName,
        Source::ClaimName,
        Source::CsiDriver,
    ];

    fn key(self) -> &'static str {
        match self {
            Source::HostPath => "hostPath",
            Source::SecretName => "secretName",
            Source::ConfigMapName => "configMapName",
            Source::ClaimName => "claimName",
            Source::CsiDriver => "csiDriver",
        }
    }

    fn get(self, v: &ContainerVolume) -> Option<&str> {
        match self {
            Source::HostPath => &v.host_path,
            Source::SecretName => &v.secret_name,
            Source::ConfigMapName => &v.config_map_name,
            Source::ClaimName => &v.claim_name,
            Source::CsiDriver => &v.csi_driver,
        }
        .as_deref()
        .filter(|s| !s.is_empty())
    }

    fn grants(self) -> &'static str {
        match self {
            Source::HostPath => "a directory of the node",
            Source::SecretName => "a Secret of the namespace",
            Source::ConfigMapName => "a ConfigMap of the namespace",
            Source::ClaimName => "a PersistentVolumeClaim of the namespace (anyone's data)",
            Source::CsiDriver => {
                "an inline CSI volume (a driver may hand out what the pod's identity reaches)"
            }
        }
    }

    fn example(self) -> &'static str {
        match self {
            Source::HostPath => "/",
            Source::SecretName => "token",
            Source::ConfigMapName => "settings",
            Source::ClaimName => "someone-elses-data",
            Source::CsiDriver => "secrets-store.csi.k8s.io",
        }
    }

    /// How a burst is refused the same.
    fn burst(self) -> &'static str {
        match self {
            Source::HostPath | Source::SecretName | Source::ConfigMapName => "unsafe_burst",
            Source::ClaimName | Source::CsiDriver => "the spoke policy's volumes",
        }
    }
}

/// What a rule checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    Sc(List, ScRule),
    PodSc(ScRule),
    Annotations(AnnotationRule),
    ImagePullSecret(List),
    Secrets(List),
    Volume(List, Source),
    HostIpc,
    HostPid,
    ServiceAccount,
    Token,
    Tolerations,
    RuntimeClass,
    Scheduler,
}

/// One thing a MiniCluster may ask for only of an author who may create pods in its
/// namespace: a field, what it grants, its check in Rust and in CEL, and an example.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthorRule(Check);

/// The pod's field `name` is set and `cond` (of `p`, the field) holds, in CEL.
fn pod_cel(name: &str, cond: &str) -> String {
    let p = format!("object.spec.pod.{name}");
    format!(
        "has(object.spec.pod) && has({p}) && {}",
        cond.replace("$p", &p)
    )
}

impl AuthorRule {
    /// The field, as the admission message names it (`spec.services[].securityContext.privileged`).
    pub fn field(&self) -> String {
        match self.0 {
            Check::Sc(list, rule) => format!("{}.securityContext.{}", list.field(), rule.field()),
            Check::PodSc(rule) => format!("spec.pod.securityContext.{}", rule.field()),
            Check::Annotations(rule) => rule.field().into(),
            Check::ImagePullSecret(list) => format!("{}.imagePullSecret", list.field()),
            Check::Secrets(list) => format!("{}.secrets", list.field()),
            Check::Volume(list, source) => format!("{}.volumes[].{}", list.field(), source.key()),
            Check::HostIpc => "spec.pod.hostIPC".into(),
            Check::HostPid => "spec.pod.hostPID".into(),
            Check::ServiceAccount => "spec.pod.serviceAccountName".into(),
            Check::Token => "spec.pod.automountServiceAccountToken".into(),
            Check::Tolerations => "spec.pod.tolerations".into(),
            Check::RuntimeClass => "spec.pod.runtimeClassName".into(),
            Check::Scheduler => "spec.pod.schedulerName".into(),
        }
    }

    /// What asking for it gets, and that it needs an author who may create pods.
    pub fn rule(&self) -> String {
        let grants = match self.0 {
            Check::Sc(_, rule) | Check::PodSc(rule) => rule.grants(),
            Check::Annotations(rule) => rule.grants(),
            Check::ImagePullSecret(_) | Check::Secrets(_) => "a Secret of the namespace".into(),
            Check::Volume(_, source) => source.grants().into(),
            Check::HostIpc => "the node's IPC namespace".into(),
            Check::HostPid => "the node's process namespace".into(),
            Check::ServiceAccount => "a named service account lends its permissions".into(),
            Check::Token => "a mounted token acts on the API as the pod's service account".into(),
            Check::Tolerations => {
                "a toleration lets the pods onto nodes the cluster's admin tainted (the control plane's among them)".into()
            }
            Check::RuntimeClass => {
                "a runtime class picks the node's runtime and may add tolerations".into()
            }
            Check::Scheduler => {
                "another scheduler than default-scheduler places pods by its own rules".into()
            }
        };
        format!("{grants}: it {NEEDS}")
    }

    /// The admission message: the field and the rule.
    pub fn message(&self) -> String {
        format!("{}: {}", self.field(), self.rule())
    }

    /// CEL that is true when the MiniCluster (`object`, with the policy's variables) asks
    /// for it.
    pub fn cel(&self) -> String {
        match self.0 {
            Check::Sc(list, rule) => format!(
                "{}.exists(c, has(c.securityContext) && {})",
                list.cel(),
                rule.cel("c.securityContext")
            ),
            Check::PodSc(rule) => pod_cel("securityContext", &rule.cel("$p")),
            Check::Annotations(rule) => pod_cel("annotations", &rule.cel("$p")),
            Check::ImagePullSecret(list) => format!(
                "{}.exists(c, has(c.imagePullSecret) && c.imagePullSecret != '')",
                list.cel()
            ),
            Check::Secrets(list) => format!(
                "{}.exists(c, has(c.secrets) && size(c.secrets) > 0)",
                list.cel()
            ),
            Check::Volume(list, source) => {
                let k = source.key();
                format!(
                    "{}.exists(c, has(c.volumes) && c.volumes.exists(v, has(c.volumes[v].{k}) && c.volumes[v].{k} != ''))",
                    list.cel()
                )
            }
            Check::HostIpc => pod_cel("hostIPC", "$p"),
            Check::HostPid => pod_cel("hostPID", "$p"),
            Check::ServiceAccount => pod_cel("serviceAccountName", "!($p in ['', 'default'])"),
            Check::Token => pod_cel("automountServiceAccountToken", "$p"),
            Check::Tolerations => pod_cel("tolerations", "size($p) > 0"),
            Check::RuntimeClass => pod_cel("runtimeClassName", "$p != ''"),
            Check::Scheduler => pod_cel("schedulerName", "!($p in ['', 'default-scheduler'])"),
        }
    }

    /// The policy's validation: true (admitted) unless checked and asked for.
    pub fn validation(&self) -> String {
        format!("!variables.checked || !({})", self.cel())
    }

    /// The fields of `spec` that ask for it (empty: it does not), as the burst checks name
    /// them (`spec.containers[0].volumes["data"].claimName`).
    pub fn asks(&self, spec: &MiniClusterSpec) -> Vec<String> {
        let pod = spec.pod();
        let view = spec.flux().view();
        let mut out = Vec::new();
        match self.0 {
            Check::Sc(list, rule) => {
                let contexts: Vec<(String, _)> = match list {
                    List::View => vec![(
                        "spec.flux.container".to_string(),
                        view.security_context.as_ref(),
                    )],
                    _ => list
                        .containers(spec)
                        .map(|(f, c)| (f, c.security_context.as_ref()))
                        .collect(),
                };
                for (field, sc) in contexts {
                    for b in sc
                        .map(|sc| rule.broken(&Sc::container(sc)))
                        .unwrap_or_default()
                    {
                        out.push(format!("{field}.securityContext.{}", b.field));
                    }
                }
            }
            Check::PodSc(rule) => {
                for b in pod
                    .security_context
                    .as_ref()
                    .map(|sc| rule.broken(&Sc::pod(sc)))
                    .unwrap_or_default()
                {
                    out.push(format!("spec.pod.securityContext.{}", b.field));
                }
            }
            Check::Annotations(rule) => {
                for (key, _) in rule.broken(&pod.annotations) {
                    out.push(format!("spec.pod.annotations[{key:?}]"));
                }
            }
            Check::ImagePullSecret(List::View)
                if view
                    .image_pull_secret
                    .as_deref()
                    .is_some_and(|s| !s.is_empty()) =>
            {
                out.push("spec.flux.container.imagePullSecret".into());
            }
            Check::ImagePullSecret(list) => {
                for (field, c) in list.containers(spec) {
                    if c.image_pull_secret
                        .as_deref()
                        .is_some_and(|s| !s.is_empty())
                    {
                        out.push(format!("{field}.imagePullSecret"));
                    }
                }
            }
            Check::Secrets(list) => {
                for (field, c) in list.containers(spec) {
                    for var in c.secrets.keys() {
                        out.push(format!("{field}.secrets[{var:?}]"));
                    }
                }
            }
            Check::Volume(list, source) => {
                for (field, c) in list.containers(spec) {
                    for (name, v) in &c.volumes {
                        if source.get(v).is_some() {
                            out.push(format!("{field}.volumes[{name:?}].{}", source.key()));
                        }
                    }
                }
            }
            Check::HostIpc if pod.host_ipc == Some(true) => out.push("spec.pod.hostIPC".into()),
            Check::HostPid if pod.host_pid == Some(true) => out.push("spec.pod.hostPID".into()),
            Check::ServiceAccount
                if pod
                    .service_account_name
                    .as_deref()
                    .is_some_and(|a| !a.is_empty() && a != "default") =>
            {
                out.push("spec.pod.serviceAccountName".into());
            }
            Check::Token if pod.automount_service_account_token == Some(true) => {
                out.push("spec.pod.automountServiceAccountToken".into());
            }
            Check::Tolerations => {
                for i in 0..pod.tolerations.len() {
                    out.push(format!("spec.pod.tolerations[{i}]"));
                }
            }
            Check::RuntimeClass
                if pod
                    .runtime_class_name
                    .as_deref()
                    .is_some_and(|r| !r.is_empty()) =>
            {
                out.push("spec.pod.runtimeClassName".into());
            }
            Check::Scheduler
                if pod
                    .scheduler_name
                    .as_deref()
                    .is_some_and(|s| !s.is_empty() && s != "default-scheduler") =>
            {
                out.push("spec.pod.schedulerName".into());
            }
            _ => {}
        }
        out
    }

    /// A spec patch (JSON merge patch) that asks for it: [`merged`] with a plain spec, it
    /// makes a MiniCluster this rule refuses and no other.
    pub fn example(&self) -> Value {
        let sc = |rule: ScRule| match rule {
            ScRule::Privileged => json!({"privileged": true}),
            ScRule::CapabilitiesAdd => json!({"capabilities": {"add": ["NET_ADMIN"]}}),
            ScRule::ProcMount => json!({"procMount": "Unmasked"}),
            ScRule::Seccomp => json!({"seccompProfile": {"type": "Unconfined"}}),
            ScRule::AppArmor => json!({"appArmorProfile": {"type": "Unconfined"}}),
            ScRule::SeLinuxUserRole => json!({"seLinuxOptions": {"user": "system_u"}}),
            ScRule::SeLinuxType => json!({"seLinuxOptions": {"type": "spc_t"}}),
            ScRule::HostProcess => json!({"windowsOptions": {"hostProcess": true}}),
            ScRule::Sysctls => json!({"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}),
        };
        match self.0 {
            Check::Sc(list, rule) => list.example(json!({"securityContext": sc(rule)})),
            Check::PodSc(rule) => json!({"pod": {"securityContext": sc(rule)}}),
            Check::Annotations(AnnotationRule::AppArmor) => json!({"pod": {"annotations": {
                "container.apparmor.security.beta.kubernetes.io/busybox": "unconfined"}}}),
            Check::Annotations(AnnotationRule::Seccomp) => json!({"pod": {"annotations": {
                "seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}}),
            Check::ImagePullSecret(list) => list.example(json!({"imagePullSecret": "registry"})),
            Check::Secrets(list) => {
                list.example(json!({"secrets": {"TOKEN": {"name": "token", "key": "token"}}}))
            }
            Check::Volume(list, source) => list.example(json!({"volumes": {"v": {
                source.key(): source.example(), "path": "/v"}}})),
            Check::HostIpc => json!({"pod": {"hostIPC": true}}),
            Check::HostPid => json!({"pod": {"hostPID": true}}),
            Check::ServiceAccount => json!({"pod": {"serviceAccountName": "admin"}}),
            Check::Token => json!({"pod": {"automountServiceAccountToken": true}}),
            Check::Tolerations => json!({"pod": {"tolerations": [{
                "key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                "effect": "NoSchedule"}]}}),
            Check::RuntimeClass => json!({"pod": {"runtimeClassName": "unsandboxed"}}),
            Check::Scheduler => json!({"pod": {"schedulerName": "my-scheduler"}}),
        }
    }

    /// How a burst is refused the same (in a burst cluster the rule binds the spoke's
    /// owner's cluster, whoever wrote the MiniCluster).
    pub fn burst(&self) -> &'static str {
        match self.0 {
            Check::Sc(List::Services, _)
            | Check::ImagePullSecret(List::Services)
            | Check::Secrets(List::Services)
            | Check::Volume(List::Services, _) => {
                "none: the services pod runs in the root cluster only"
            }
            Check::Volume(_, source) => source.burst(),
            Check::Scheduler => "unsafe_burst (default-scheduler too, unless the policy lists it)",
            _ => "unsafe_burst",
        }
    }
}

/// Every rule, in the policy's order: the pod's, then each container list's.
pub fn rules() -> Vec<AuthorRule> {
    let mut out: Vec<AuthorRule> = [
        Check::HostIpc,
        Check::HostPid,
        Check::ServiceAccount,
        Check::Token,
    ]
    .into_iter()
    .chain(ScRule::POD.into_iter().map(Check::PodSc))
    .chain(AnnotationRule::ALL.into_iter().map(Check::Annotations))
    .chain([Check::Tolerations, Check::RuntimeClass, Check::Scheduler])
    .map(AuthorRule)
    .collect();
    for list in List::ALL {
        out.extend(
            ScRule::CONTAINER
                .into_iter()
                .map(|r| AuthorRule(Check::Sc(list, r))),
        );
        out.push(AuthorRule(Check::ImagePullSecret(list)));
        if list != List::View {
            out.push(AuthorRule(Check::Secrets(list)));
            out.extend(
                Source::ALL
                    .into_iter()
                    .map(|s| AuthorRule(Check::Volume(list, s))),
            );
        }
    }
    out
}

/// Everything in `spec` that needs an author who may create pods in its namespace, each
/// naming the field and the rule: what the admission policy refuses to other authors.
pub fn author_violations(spec: &MiniClusterSpec) -> Vec<FieldError> {
    rules()
        .iter()
        .flat_map(|r| {
            let rule = r.rule();
            r.asks(spec).into_iter().map(move |field| FieldError {
                field,
                rule: rule.clone(),
            })
        })
        .collect()
}

/// The burst checks' rules that do not apply to a root MiniCluster's author, with why:
/// (what the burst check's field starts or ends with, the reason).
pub const BURST_ONLY: &[(&str, &str)] = &[
    (
        "metadata.namespace",
        "the spoke's own and kube-* namespaces: in the root cluster, RBAC decided where the author may create MiniClusters",
    ),
    (
        ".resources.",
        "resources beyond cpu and memory: the namespace's ResourceQuota bounds them in the root cluster whoever creates the pods, as it bounds cpu and memory; a burst cluster's owner granted the namespace nothing",
    ),
    (
        "spec.pod.resources[",
        "pod overhead: needs a runtimeClassName, which is refused, and the quota bounds it",
    ),
];

/// Whether a burst check's `violation` is one of [`BURST_ONLY`].
pub fn burst_only(violation: &FieldError) -> bool {
    let f = violation.field.as_str();
    BURST_ONLY
        .iter()
        .any(|(p, _)| f.starts_with(p) || f.contains(p))
}

/// The policy's variables, in order: whether the write changes the spec, whether the
/// requesting user may create pods in the namespace, and the container lists.
pub const VARIABLES: &[(&str, &str)] = &[
    (
        "unchanged",
        "request.operation == 'UPDATE' && object.spec == oldObject.spec",
    ),
    (
        "mayCreatePods",
        "authorizer.group('').resource('pods').namespace(object.metadata.namespace).check('create').allowed()",
    ),
    (
        "checked",
        "!variables.unchanged && !variables.mayCreatePods",
    ),
    (
        "containers",
        "has(object.spec.containers) ? object.spec.containers : []",
    ),
    (
        "services",
        "has(object.spec.services) ? object.spec.services : []",
    ),
    (
        "view",
        "has(object.spec.flux) && has(object.spec.flux.container) ? [object.spec.flux.container] : []",
    ),
];

/// The first lines of `deploy/admission-policy.yaml`.
const HEADER: &str = "\
# Generated from flux_shared::validate::author_rules (one table serves this policy and the
# Rust checks); a test fails when this file drifts. Regenerate it with
#   UPDATE_GOLDEN=1 cargo test -p flux-hub --test deploy_manifests admission
# and then deploy/install.yaml (cargo run -p flux-hub -- install --print > deploy/install.yaml).
#
# A MiniCluster grants its author nothing they could not do themselves. The hub creates the
# pods of a MiniCluster with its own service account, so without this policy whoever may
# create MiniClusters in a namespace could get privileged or unconfined pods, the node's
# namespaces and directories, nodes the admin tainted, any service account and any Secret,
# ConfigMap or PersistentVolumeClaim of the namespace, although they may not create pods
# there. The API server asks its authorizer whether the requesting user may create pods in
# the MiniCluster's namespace; if not, a MiniCluster that asks for any of that is refused,
# naming the field and the rule. Everything else of a MiniCluster stays open to authors who
# may only create MiniClusters. Writes that leave the spec as it was (the hub's finalizers,
# labels) and the scale subresource are not checked.
";

/// A YAML scalar of `s` (a JSON string is a YAML double-quoted scalar).
fn scalar(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// `deploy/admission-policy.yaml`: the ValidatingAdmissionPolicy with one validation per
/// rule of [`rules`], and its binding.
pub fn admission_policy_yaml() -> String {
    let mut out = String::from(HEADER);
    let labels = "  labels:\n    app.kubernetes.io/name: flux-hub\n    app.kubernetes.io/part-of: flux-operator\n";
    out.push_str("apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\n");
    out.push_str(&format!("metadata:\n  name: {POLICY_NAME}\n{labels}"));
    out.push_str(
        "spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [flux-framework.org]
        apiVersions: [\"*\"]
        operations: [CREATE, UPDATE]
        resources: [miniclusters]
  variables:
",
    );
    for (name, expression) in VARIABLES {
        out.push_str(&format!(
            "    - name: {name}\n      expression: {}\n",
            scalar(expression)
        ));
    }
    out.push_str("  validations:\n");
    for rule in rules() {
        out.push_str(&format!(
            "    # burst clusters: {}\n    - expression: {}\n      reason: Forbidden\n      message: {}\n",
            rule.burst(),
            scalar(&rule.validation()),
            scalar(&rule.message())
        ));
    }
    out.push_str("---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\n");
    out.push_str(&format!(
        "metadata:\n  name: {POLICY_NAME}\n{labels}spec:\n  policyName: {POLICY_NAME}\n  validationActions: [Deny]\n"
    ));
    out
}

/// `patch` applied to `base` as a JSON merge patch (RFC 7386): objects merge, `null`
/// removes, anything else replaces.
pub fn merged(mut base: Value, patch: &Value) -> Value {
    merge(&mut base, patch);
    base
}

fn merge(base: &mut Value, patch: &Value) {
    let Some(fields) = patch.as_object() else {
        *base = patch.clone();
        return;
    };
    if !base.is_object() {
        *base = json!({});
    }
    if let Some(target) = base.as_object_mut() {
        for (k, v) in fields {
            if v.is_null() {
                target.remove(k);
            } else {
                merge(target.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use kube::core::cel::{KubeCelExt, cel};

    use super::*;
    use crate::validate::{unsafe_burst, validate};

    fn plain() -> Value {
        json!({"size": 1, "containers": [{"image": "busybox"}]})
    }

    fn spec_of(v: &Value) -> MiniClusterSpec {
        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    /// The messages of the validations that refuse `spec`, evaluated as the API server
    /// would (the authorizer's answer given), on a CREATE or on an UPDATE from `old`.
    fn cel_refusals(spec: &Value, may_create_pods: bool, old: Option<&Value>) -> Vec<String> {
        let object = |s: &Value| json!({"metadata": {"name": "m", "namespace": "ns"}, "spec": s});
        let value = |v: &Value| cel::to_value(v).unwrap_or_else(|e| panic!("{v}: {e}"));
        let mut ctx = cel::Context::default();
        ctx.register_all();
        ctx.add_variable_from_value("object", value(&object(spec)));
        ctx.add_variable_from_value(
            "oldObject",
            old.map_or(cel::Value::Null, |o| value(&object(o))),
        );
        let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
        ctx.add_variable_from_value("request", value(&json!({"operation": operation})));
        let run = |ctx: &cel::Context, e: &str| {
            cel::Program::compile(e)
                .unwrap_or_else(|err| panic!("{e}: {err}"))
                .execute(ctx)
                .unwrap_or_else(|err| panic!("{e}: {err}"))
        };
        let mut variables: HashMap<String, cel::Value> = HashMap::new();
        for (name, expression) in VARIABLES {
            let v = if *name == "mayCreatePods" {
                cel::Value::Bool(may_create_pods)
            } else {
                run(&ctx, expression)
            };
            variables.insert(name.to_string(), v);
            ctx.add_variable_from_value("variables", cel::Value::from(variables.clone()));
        }
        rules()
            .iter()
            .filter_map(|r| match run(&ctx, &r.validation()) {
                cel::Value::Bool(true) => None,
                cel::Value::Bool(false) => Some(r.message()),
                other => panic!("{}: not a bool: {other:?}", r.validation()),
            })
            .collect()
    }

    fn rust_refusals(spec: &Value) -> Vec<String> {
        let spec = spec_of(spec);
        rules()
            .iter()
            .filter(|r| !r.asks(&spec).is_empty())
            .map(AuthorRule::message)
            .collect()
    }

    /// Each rule's example: a valid MiniCluster that the Rust check and the CEL refuse for
    /// that rule alone, and admit of an author who may create pods.
    #[test]
    fn every_rule_refuses_its_example_alone_in_rust_and_in_cel() {
        let rules = rules();
        let messages: BTreeSet<String> = rules.iter().map(AuthorRule::message).collect();
        assert_eq!(messages.len(), rules.len(), "one message per rule");
        for rule in &rules {
            let spec = merged(plain(), &rule.example());
            validate(&crate::api::MiniCluster::new("m", spec_of(&spec))).unwrap_or_else(|e| {
                panic!("{}: the example is otherwise valid: {e}", rule.field())
            });
            assert_eq!(rust_refusals(&spec), [rule.message()], "Rust, {spec}");
            assert_eq!(
                cel_refusals(&spec, false, None),
                [rule.message()],
                "CEL, {spec}"
            );
            assert_eq!(
                cel_refusals(&spec, true, None),
                Vec::<String>::new(),
                "{spec}"
            );
            let message = rule.message();
            assert!(
                message.starts_with("spec.") && message.ends_with(NEEDS),
                "{message}"
            );
        }
    }

    /// What stays open to authors who may only create MiniClusters: refused by neither.
    #[test]
    fn plain_settings_are_admitted_in_rust_and_in_cel() {
        let sc = json!({"privileged": false, "capabilities": {"add": [], "drop": ["ALL"]},
            "procMount": "Default", "seccompProfile": {"type": "RuntimeDefault"},
            "appArmorProfile": {"type": "Localhost", "localhostProfile": "p"},
            "seLinuxOptions": {"type": "container_t", "level": "s0:c1"},
            "windowsOptions": {"hostProcess": false}, "runAsUser": 1000});
        let allowed = [
            plain(),
            json!({"containers": [{"image": "busybox", "securityContext": sc,
                "volumes": {"scratch": {"emptyDir": true}}, "imagePullSecret": ""}]}),
            json!({"services": [{"name": "s", "image": "busybox", "securityContext": sc}]}),
            json!({"flux": {"container": {"securityContext": sc, "image": "view"}}}),
            json!({"pod": {"serviceAccountName": "default", "automountServiceAccountToken": false,
                "hostIPC": false, "hostPID": false, "schedulerName": "default-scheduler",
                "nodeSelector": {"disk": "ssd"}, "nodeAffinity": {"zone": ["a"]},
                "labels": {"team": "a"}, "dnsPolicy": "ClusterFirst",
                "annotations": {"container.apparmor.security.beta.kubernetes.io/busybox": "localhost/p",
                    "seccomp.security.alpha.kubernetes.io/pod": "runtime/default", "team": "a"},
                "securityContext": {"seccompProfile": {"type": "RuntimeDefault"},
                    "seLinuxOptions": {"type": "", "user": ""},
                    "sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}],
                    "runAsNonRoot": true}}}),
        ];
        for patch in allowed {
            let spec = merged(plain(), &patch);
            assert_eq!(rust_refusals(&spec), Vec::<String>::new(), "{spec}");
            assert_eq!(
                cel_refusals(&spec, false, None),
                Vec::<String>::new(),
                "{spec}"
            );
        }
    }

    /// Everything at once: each rule named once by both; an UPDATE that leaves the spec as
    /// it was is not checked (labels, the hub's finalizer), one that changes it is.
    #[test]
    fn everything_at_once_and_updates() {
        let mut spec = plain();
        for rule in rules() {
            spec = merged(spec, &rule.example());
        }
        // The list examples replace each other's list: merge those lists by hand.
        let lists = |key: &str| -> Vec<Value> {
            rules()
                .iter()
                .filter_map(|r| r.example().get(key).and_then(|l| l.get(0)).cloned())
                .collect()
        };
        let merge_all = |items: Vec<Value>| items.iter().fold(json!({}), merged);
        spec["containers"] = json!([merge_all(lists("containers"))]);
        spec["services"] = json!([merge_all(lists("services"))]);
        let all: Vec<String> = rules().iter().map(AuthorRule::message).collect();
        assert_eq!(rust_refusals(&spec), all);
        assert_eq!(cel_refusals(&spec, false, None), all);
        assert_eq!(cel_refusals(&spec, true, None), Vec::<String>::new());
        assert_eq!(
            cel_refusals(&spec, false, Some(&spec)),
            Vec::<String>::new()
        );
        let mut old = spec.clone();
        old["size"] = json!(2);
        assert_eq!(cel_refusals(&spec, false, Some(&old)), all);
        // The Rust check names each field as the burst checks do.
        let fields: Vec<String> = author_violations(&spec_of(&spec))
            .into_iter()
            .map(|v| v.field)
            .collect();
        assert!(fields.contains(&"spec.containers[0].volumes[\"v\"].claimName".to_string()));
        assert!(fields.contains(&"spec.pod.securityContext.sysctls[0].name".to_string()));
        assert!(
            fields.contains(&"spec.services[0].securityContext.seLinuxOptions.user".to_string())
        );
    }

    /// The burst checks and these rules cannot drift apart: every field the burst checks
    /// refuse is refused to an author who may not create pods, or is one of [`BURST_ONLY`];
    /// and every rule the burst checks have names the same field in both.
    #[test]
    fn every_burst_refusal_is_an_author_rule_or_burst_only() {
        let mut spec = json!({"size": 1, "containers": [{"image": "busybox",
            "imagePullSecret": "r",
            "secrets": {"T": {"name": "t", "key": "k"}},
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
            "volumes": {"h": {"hostPath": "/", "path": "/h"}, "s": {"secretName": "s", "path": "/s"},
                "c": {"configMapName": "c", "path": "/c"}}}],
            "flux": {"container": {"imagePullSecret": "r", "resources": {"limits": {"hugepages-2Mi": "1Gi"}}}},
            "pod": {"serviceAccountName": "admin", "automountServiceAccountToken": true,
                "hostIPC": true, "hostPID": true, "runtimeClassName": "r", "schedulerName": "s",
                "resources": {"example.com/x": "1"},
                "tolerations": [{"operator": "Exists"}],
                "annotations": {"container.apparmor.security.beta.kubernetes.io/a": "unconfined",
                    "container.seccomp.security.alpha.kubernetes.io/a": "unconfined"}}});
        let sc = json!({"privileged": true, "capabilities": {"add": ["SYS_ADMIN"]},
            "procMount": "Unmasked", "seccompProfile": {"type": "Unconfined"},
            "appArmorProfile": {"type": "Unconfined"},
            "seLinuxOptions": {"user": "u", "role": "r", "type": "spc_t"},
            "windowsOptions": {"hostProcess": true}});
        spec["containers"][0]["securityContext"] = sc.clone();
        spec["flux"]["container"]["securityContext"] = sc.clone();
        let mut pod_sc = sc;
        for k in ["privileged", "capabilities", "procMount"] {
            pod_sc.as_object_mut().map(|o| o.remove(k));
        }
        pod_sc["sysctls"] = json!([{"name": "kernel.msgmax", "value": "1"}]);
        spec["pod"]["securityContext"] = pod_sc;
        let spec = spec_of(&spec);
        let author: BTreeSet<String> = author_violations(&spec)
            .into_iter()
            .map(|v| v.field)
            .collect();
        let burst = unsafe_burst(&spec, "kube-system", None);
        assert!(burst.len() > 30, "{burst:#?}");
        let mut burst_only_seen = 0;
        for v in &burst {
            if burst_only(v) {
                burst_only_seen += 1;
                assert!(!author.contains(&v.field), "{} is both", v.field);
            } else {
                assert!(
                    author.contains(&v.field),
                    "the burst checks refuse {v}, the author rules do not"
                );
            }
        }
        assert_eq!(
            burst_only_seen, 4,
            "the namespace, two containers' resources, the overhead"
        );
        // The other way: what the author rules refuse here, a burst refuses too (the
        // services and the spoke policy's volume kinds are not in this spec).
        let burst_fields: BTreeSet<String> = burst.iter().map(|v| v.field.clone()).collect();
        for field in &author {
            assert!(
                burst_fields.contains(field),
                "{field}: refused to authors, not to bursts"
            );
        }
    }

    /// The policy lists each rule once, with its field and rule as the message.
    #[test]
    fn the_policy_has_one_validation_per_rule() {
        let yaml = admission_policy_yaml();
        let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&yaml)
            .map(|d| serde::Deserialize::deserialize(d).expect("a YAML document"))
            .collect();
        assert_eq!(docs.len(), 2);
        let validations = docs[0]["spec"]["validations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let expected: Vec<Value> = rules()
            .iter()
            .map(|r| json!({"expression": r.validation(), "reason": "Forbidden", "message": r.message()}))
            .collect();
        assert_eq!(validations, expected);
        let variables = docs[0]["spec"]["variables"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(variables.len(), VARIABLES.len());
        assert_eq!(docs[1]["spec"]["policyName"], json!(POLICY_NAME));
    }
}
