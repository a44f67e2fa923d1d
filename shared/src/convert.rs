//! Conversion of `flux-framework.org/v1alpha1` MiniClusters into `v1alpha2`.
//!
//! v1alpha1 is not a typed API here: a document is read as a [`serde_json::Value`],
//! every key is checked against the v1alpha1 fields (the union of the v1alpha1 releases:
//! the documented API of early 2023 and the later 0.1.x additions such as `services`,
//! `flux`, `existingVolumes` and `archive`), and an unknown key is an error naming it,
//! never a guess and never silently dropped. What still exists moves to its v1alpha2
//! place; what has no v1alpha2 equivalent is reported as a [`Loss`] with advice; a
//! lossless change worth knowing about is reported as a [`Note`]. The output is then
//! deserialized into [`MiniCluster`] and checked with [`validate::validate`], so a
//! [`Conversion`] always holds a MiniCluster that plans and renders.
//!
//! Documents that are not flux-framework.org MiniClusters, and v1alpha2 MiniClusters
//! (which are validated), pass through unchanged. A `List` (or `MiniClusterList`) has
//! each of its `items` converted, with field paths prefixed by `items[<i>].`.
//!
//! # Mapping
//!
//! | v1alpha1 | v1alpha2 |
//! |---|---|
//! | `apiVersion: flux-framework.org/v1alpha1` | `flux-framework.org/v1alpha2` |
//! | `metadata` | `metadata`, without the fields the API server wrote (`uid`, `resourceVersion`, `generation`, `creationTimestamp`, `managedFields`, `selfLink`; noted) |
//! | `status` | dropped (written by the operator; noted) |
//! | `size`, `maxSize`, `tasks`, `deadlineSeconds`, `cleanup`, `interactive`, `launcher`, `jobLabels`, `shareProcessNamespace` | same names |
//! | `network.headlessName` | `network.headlessName` |
//! | `logging.{quiet,strict,debug,timed,zeromq}` | same; the early `logging.test` becomes `logging.quiet` |
//! | `archive.path` | `archive.path` |
//! | `flux.{wrap,connectTimeout,optionFlags,minimalService,logLevel,curveCert,brokerConfig}` | same names |
//! | `flux.scheduler.queuePolicy`, `flux.bursting.{leadBroker,hostlist,clusters}` | same names |
//! | `containers[i].fluxOptionFlags` / `fluxLogLevel` (the flux runner's) | `flux.optionFlags` / `flux.logLevel` |
//! | `containers[i].preCommand` (flux runner) | prepended to `containers[i].commands.pre` |
//! | `containers[i].commands.{init,pre,post,prefix,brokerPre,workerPre}` (flux runner) | same names |
//! | `containers[i].commands.{brokerPre,workerPre,pre}` (sidecar) | joined, in that order, into `commands.servicePre` |
//! | `containers[i].existingVolumes.<name>` | `containers[i].volumes.<name>` (same fields) |
//! | `containers[i].volumes.<name>` (a mount of `spec.volumes.<name>`) | `containers[i].volumes.<name>` with `hostPath` (storage class `hostpath`) or `claimName: <name>` |
//! | `containers[i].resources.{limits,requests}` (int or string) | same, as quantity strings |
//! | `containers[i].securityContext.{privileged,addCapabilities}` | `securityContext.privileged`, `securityContext.capabilities.add` |
//! | `containers[i].{image,name,command,workingDir,environment,secrets,ports,imagePullSecret,pullAlways,runFlux,launcher,batch,batchRaw,logs,cores,fluxUser,diagnostics,lifeCycle}` | same names |
//! | `services[i]` | `services[i]`, converted like a container |
//! | `pod.{annotations,labels,serviceAccountName,nodeSelector}` | same names |
//! | (Flux inside the application image) | `flux.container.disable: true` (noted) |
//!
//! # Losses (reported, with what to do instead)
//!
//! - `spec.users`: v1alpha2 runs a single-user instance (no extra Linux users, munge or
//!   flux-accounting database).
//! - `spec.fluxRestful`: when the flux runner has no command, is not interactive and does
//!   not run diagnostics, v1alpha1 started the built-in Flux RESTful API server; v1alpha2
//!   keeps an interactive instance up instead. Run the RESTful API as a sidecar.
//! - `spec.volumes.<name>`: the operator no longer creates PersistentVolumes and claims.
//!   The containers' mounts of such a volume are kept: storage class `hostpath` (the
//!   default) becomes a `hostPath` volume of the same node directory, any other class a
//!   `claimName: <name>` volume for a claim the user creates.
//! - `spec.pod.resources`: v1alpha1 copied them into the pod overhead, which Kubernetes
//!   only accepts with a RuntimeClass; v1alpha2 requires `spec.pod.runtimeClassName` for it.
//! - `spec.flux.curveCertSecret`, `spec.flux.mungeSecret`, `spec.flux.mungeConfigMap`.
//! - `commands.runFluxAsRoot: false` set explicitly on the flux runner: v1alpha2 no longer
//!   runs Flux as the flux user.
//! - an `asFlux=` override in `preCommand`, `commands.init` or `commands.pre`: v1alpha2
//!   runs Flux directly, without the `sudo` prefix those overrides customised.
//!
//! # Judgement calls
//!
//! - **Flux view.** v1alpha1 ran the Flux installed in the application image; the
//!   equivalent is `flux.container.disable: true`, which is always set (a note, not a
//!   loss: behaviour is kept). Remove it to use a flux view image instead.
//! - **Running as root.** v1alpha1 ran Flux as the flux user unless
//!   `commands.runFluxAsRoot: true`; v1alpha2 runs it as the container's user (root in
//!   the images v1alpha1 needed, since its entrypoint used `sudo` and `useradd`).
//!   `runFluxAsRoot: true` is therefore lossless; an explicit `false` is a loss (the
//!   manifest asks for something v1alpha2 cannot do); an absent field is the v1alpha1
//!   default whose behaviour changed with the v1alpha2 design: it is noted, not reported
//!   as a loss, so that the exit status keeps its meaning for the common manifest.
//!   `fluxUser` is kept (v1alpha2 still creates that user).
//! - **`preCommand`** ran on every broker right after `asFlux` was defined and before
//!   `commands.pre`; v1alpha2's `commands.pre` runs on every broker at the same point
//!   (after the environment is set up, before `flux start`), so `preCommand` is
//!   prepended to it. `commands.init` would run it before Flux is on the `PATH`. On other
//!   containers v1alpha1 ignored `preCommand` (noted and dropped).
//! - **Sidecars.** A v1alpha1 sidecar without a command and without hooks ran its
//!   image's entrypoint: it gets `noWrapEntrypoint: true`. Sidecar hooks ran in the
//!   sidecar's start script, `brokerPre`, `workerPre`, then `pre`: v1alpha2 runs
//!   `servicePre` there.
//! - **`cores`**: unset meant 1 in the documented v1alpha1 API, as in v1alpha2 (later
//!   0.1.x releases discovered the cores of each pod instead; set `cores` explicitly).
//! - **Go zero values.** v1alpha1 could not tell an unset field from its zero value, so
//!   empty strings, empty maps and lists, and `0` for `cores`, `fluxUser.uid`,
//!   `fluxLogLevel` / `flux.logLevel` (which meant 6), `maxSize`,
//!   `flux.bursting.leadBroker.port` and `flux.bursting.clusters[].size` are treated as
//!   unset. `flux.connectTimeout: ""` is kept: it means "no timeout flag" in both.
//!   Explicit booleans are kept (`logging.strict: false` matters: its default is true).
//! - **Same meaning, same default.** `deadlineSeconds` (default 31500000 in both; an
//!   explicit 0, which kept the v1alpha1 Job from starting, fails v1alpha2 validation),
//!   `tasks`, `diagnostics` (Flux diagnostics, then the instance stays up), `interactive`,
//!   `launcher`, `batch` and `archive.path` move unchanged.
//! - **Headless Service.** Its default name changed from `flux-service` to the
//!   MiniCluster's name (noted); set `network.headlessName: flux-service` to keep the
//!   old host names.
//! - **Container images** must be given: v1alpha1's default image differed between
//!   releases, so a missing image is an error rather than a guess.
//! - **Submit command.** v1alpha2 submits with `flux submit`; an application image whose
//!   Flux predates it needs `flux.submitCommand: flux mini submit` (not set
//!   automatically: the Flux version of an image is not known here).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value};

use crate::api::{MiniCluster, MiniClusterContainer, MiniClusterSpec, MiniClusterStatus};
use crate::validate::{self, FieldError, ValidationErrors};

/// API group of the MiniCluster.
pub const API_GROUP: &str = "flux-framework.org";
/// The apiVersion this module converts from.
pub const V1ALPHA1: &str = "flux-framework.org/v1alpha1";
/// The apiVersion this module converts to.
pub const V1ALPHA2: &str = "flux-framework.org/v1alpha2";

/// Something a v1alpha1 document asked for that v1alpha2 cannot express.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// Path of the v1alpha1 field (`spec.users`, `spec.volumes["data"]`).
    pub field: String,
    /// What to do instead.
    pub advice: String,
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: no v1alpha2 equivalent: {}", self.field, self.advice)
    }
}

/// A lossless change worth knowing about (a default that moved, a dropped no-op field).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Path of the field concerned.
    pub field: String,
    /// What changed.
    pub text: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.text)
    }
}

/// The result of converting one document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conversion {
    /// The v1alpha2 document (the input itself when `passed_through`).
    pub output: Value,
    /// What has no v1alpha2 equivalent, in field order.
    pub lost: Vec<Loss>,
    /// Lossless changes worth knowing about.
    pub notes: Vec<Note>,
    /// The document was not a v1alpha1 MiniCluster and is returned unchanged.
    pub passed_through: bool,
}

impl Conversion {
    /// Whether nothing the input asked for was lost.
    pub fn is_lossless(&self) -> bool {
        self.lost.is_empty()
    }

    fn unchanged(doc: &Value) -> Self {
        Conversion {
            output: doc.clone(),
            lost: Vec::new(),
            notes: Vec::new(),
            passed_through: true,
        }
    }
}

/// Why a document could not be converted. Every problem names its field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// The input is not a valid v1alpha1 (or v1alpha2) MiniCluster: an unknown field, a
    /// wrong type, an unsupported apiVersion or a broken v1alpha1 rule (v1alpha1 paths).
    #[error("invalid MiniCluster: {0}")]
    Input(ValidationErrors),
    /// The converted document, or a v1alpha2 document passed through, is not a valid
    /// v1alpha2 MiniCluster (v1alpha2 paths).
    #[error("not a valid v1alpha2 MiniCluster: {0}")]
    Output(ValidationErrors),
}

impl ConvertError {
    /// Every problem, each with its field path.
    pub fn problems(&self) -> &[FieldError] {
        match self {
            ConvertError::Input(e) | ConvertError::Output(e) => &e.0,
        }
    }

    fn prefixed(self, prefix: &str) -> Self {
        let map = |e: ValidationErrors| {
            ValidationErrors(
                e.0.into_iter()
                    .map(|fe| FieldError {
                        field: format!("{prefix}{}", fe.field),
                        rule: fe.rule,
                    })
                    .collect(),
            )
        };
        match self {
            ConvertError::Input(e) => ConvertError::Input(map(e)),
            ConvertError::Output(e) => ConvertError::Output(map(e)),
        }
    }
}

/// Convert one document: a v1alpha1 MiniCluster becomes v1alpha2; a v1alpha2 MiniCluster
/// is validated and passed through; anything else passes through unchanged.
pub fn convert_document(doc: &Value) -> Result<Conversion, ConvertError> {
    let Some(obj) = doc.as_object() else {
        return Ok(Conversion::unchanged(doc));
    };
    let kind = obj.get("kind").and_then(Value::as_str);
    let api_version = obj.get("apiVersion").and_then(Value::as_str);
    match kind {
        Some("MiniCluster") => {}
        Some("List" | "MiniClusterList") if obj.get("items").is_some_and(Value::is_array) => {
            return convert_list(obj);
        }
        _ => return Ok(Conversion::unchanged(doc)),
    }
    match api_version {
        Some(V1ALPHA1) => convert_v1alpha1(obj),
        Some(V1ALPHA2) => {
            check_v1alpha2(doc).map_err(ConvertError::Output)?;
            Ok(Conversion::unchanged(doc))
        }
        Some(other) if other.split('/').next() != Some(API_GROUP) => Ok(Conversion::unchanged(doc)),
        other => Err(ConvertError::Input(ValidationErrors::single(
            "apiVersion",
            format!(
                "{:?} is not a MiniCluster version this tool knows (expected {V1ALPHA1} or {V1ALPHA2})",
                other.unwrap_or_default()
            ),
        ))),
    }
}

/// Convert every item of a `List` / `MiniClusterList`.
fn convert_list(obj: &Map<String, Value>) -> Result<Conversion, ConvertError> {
    let mut output = obj.clone();
    let mut lost = Vec::new();
    let mut notes = Vec::new();
    let mut passed_through = true;
    let mut items = Vec::new();
    let source = obj.get("items").and_then(Value::as_array);
    for (i, item) in source.into_iter().flatten().enumerate() {
        let prefix = format!("items[{i}].");
        let c = convert_document(item).map_err(|e| e.prefixed(&prefix))?;
        passed_through &= c.passed_through;
        lost.extend(c.lost.into_iter().map(|l| Loss {
            field: format!("{prefix}{}", l.field),
            advice: l.advice,
        }));
        notes.extend(c.notes.into_iter().map(|n| Note {
            field: format!("{prefix}{}", n.field),
            text: n.text,
        }));
        items.push(c.output);
    }
    if obj.get("apiVersion").and_then(Value::as_str) == Some(V1ALPHA1) {
        output.insert("apiVersion".into(), V1ALPHA2.into());
        passed_through = false;
    }
    if passed_through {
        return Ok(Conversion::unchanged(&Value::Object(obj.clone())));
    }
    output.insert("items".into(), Value::Array(items));
    Ok(Conversion {
        output: Value::Object(output),
        lost,
        notes,
        passed_through,
    })
}

// ---------------------------------------------------------------------------------------
// The v1alpha1 fields (union of the v1alpha1 releases).

const TOP_KEYS: &[&str] = &["apiVersion", "kind", "metadata", "spec", "status"];
const SPEC_KEYS: &[&str] = &[
    "containers",
    "services",
    "network",
    "users",
    "jobLabels",
    "interactive",
    "launcher",
    "flux",
    "volumes",
    "logging",
    "archive",
    "shareProcessNamespace",
    "fluxRestful",
    "cleanup",
    "size",
    "maxSize",
    "tasks",
    "deadlineSeconds",
    "pod",
];
const NETWORK_KEYS: &[&str] = &["headlessName"];
const USER_KEYS: &[&str] = &["name", "password"];
const LOGGING_KEYS: &[&str] = &["quiet", "strict", "debug", "timed", "zeromq", "test"];
const ARCHIVE_KEYS: &[&str] = &["path"];
const RESTFUL_KEYS: &[&str] = &["branch", "port", "secretKey", "username", "token"];
const POD_KEYS: &[&str] = &[
    "annotations",
    "labels",
    "resources",
    "serviceAccountName",
    "nodeSelector",
];
const FLUX_KEYS: &[&str] = &[
    "installRoot",
    "wrap",
    "connectTimeout",
    "optionFlags",
    "minimalService",
    "logLevel",
    "curveCert",
    "curveCertSecret",
    "scheduler",
    "mungeSecret",
    "mungeConfigMap",
    "bursting",
    "brokerConfig",
];
const SCHEDULER_KEYS: &[&str] = &["queuePolicy"];
const BURSTING_KEYS: &[&str] = &["leadBroker", "hostlist", "clusters"];
const LEAD_BROKER_KEYS: &[&str] = &["address", "name", "size", "port"];
const BURST_CLUSTER_KEYS: &[&str] = &["name", "size"];
const VOLUME_KEYS: &[&str] = &[
    "path",
    "labels",
    "annotations",
    "claimAnnotations",
    "attributes",
    "volumeHandle",
    "volumeName",
    "storageClass",
    "class",
    "PVCclass",
    "driver",
    "delete",
    "secret",
    "secretNamespace",
    "capacity",
];
const CONTAINER_KEYS: &[&str] = &[
    "image",
    "name",
    "cores",
    "workingDir",
    "diagnostics",
    "fluxUser",
    "ports",
    "environment",
    "secrets",
    "imagePullSecret",
    "command",
    "launcher",
    "batch",
    "batchRaw",
    "logs",
    "pullAlways",
    "runFlux",
    "volumes",
    "existingVolumes",
    "fluxOptionFlags",
    "fluxLogLevel",
    "preCommand",
    "lifeCycle",
    "resources",
    "commands",
    "securityContext",
];
const FLUX_USER_KEYS: &[&str] = &["name", "uid"];
const SECRET_KEYS: &[&str] = &["name", "key"];
const MOUNT_KEYS: &[&str] = &["path", "readOnly"];
const EXISTING_VOLUME_KEYS: &[&str] = &[
    "path",
    "configMapName",
    "items",
    "claimName",
    "secretName",
    "readOnly",
];
const LIFE_CYCLE_KEYS: &[&str] = &["postStartExec", "preStopExec"];
const RESOURCES_KEYS: &[&str] = &["limits", "requests"];
const COMMANDS_KEYS: &[&str] = &[
    "runFluxAsRoot",
    "prefix",
    "init",
    "pre",
    "post",
    "workerPre",
    "brokerPre",
];
const SECURITY_KEYS: &[&str] = &["privileged", "addCapabilities"];
/// Metadata the API server writes; meaningless (or harmful) in a manifest to apply.
const SERVER_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
];

// ---------------------------------------------------------------------------------------
// Reading v1alpha1 objects.

/// Problems, losses and notes collected while converting one document.
#[derive(Default)]
struct Cx {
    errors: Vec<FieldError>,
    lost: Vec<Loss>,
    notes: Vec<Note>,
}

impl Cx {
    fn err(&mut self, field: impl Into<String>, rule: impl Into<String>) {
        self.errors.push(FieldError {
            field: field.into(),
            rule: rule.into(),
        });
    }

    fn lose(&mut self, field: impl Into<String>, advice: impl Into<String>) {
        self.lost.push(Loss {
            field: field.into(),
            advice: advice.into(),
        });
    }

    fn note(&mut self, field: impl Into<String>, text: impl Into<String>) {
        self.notes.push(Note {
            field: field.into(),
            text: text.into(),
        });
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A v1alpha1 object whose keys were all checked against the known fields.
#[derive(Clone, Copy)]
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: &'a str,
}

/// Read `value` at `path` as an object with the `known` keys; reports unknown keys.
fn object<'a>(cx: &mut Cx, value: &'a Value, path: &'a str, known: &[&str]) -> Option<Obj<'a>> {
    let Value::Object(map) = value else {
        cx.err(path, "must be an object");
        return None;
    };
    for key in map.keys() {
        if !known.contains(&key.as_str()) {
            cx.err(
                join(path, key),
                "unknown v1alpha1 field (not part of the v1alpha1 MiniCluster API)",
            );
        }
    }
    Some(Obj { map, path })
}

impl<'a> Obj<'a> {
    fn at(&self, key: &str) -> String {
        join(self.path, key)
    }

    /// The value of `key`, `None` when absent or null.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn string(&self, cx: &mut Cx, key: &str) -> Option<&'a str> {
        match self.get(key)? {
            Value::String(s) => Some(s.as_str()),
            _ => {
                cx.err(self.at(key), "must be a string");
                None
            }
        }
    }

    /// A string, `None` also when empty (Go's zero value: unset).
    fn text(&self, cx: &mut Cx, key: &str) -> Option<&'a str> {
        self.string(cx, key).filter(|s| !s.is_empty())
    }

    fn boolean(&self, cx: &mut Cx, key: &str) -> Option<bool> {
        match self.get(key)? {
            Value::Bool(b) => Some(*b),
            _ => {
                cx.err(self.at(key), "must be true or false");
                None
            }
        }
    }

    /// An integer within `min..=max`.
    fn int(&self, cx: &mut Cx, key: &str, min: i64, max: i64) -> Option<i64> {
        let value = self.get(key)?;
        match value.as_i64() {
            Some(n) if (min..=max).contains(&n) => Some(n),
            Some(n) => {
                cx.err(
                    self.at(key),
                    format!("{n} is out of range ({min} to {max})"),
                );
                None
            }
            None => {
                cx.err(self.at(key), "must be an integer");
                None
            }
        }
    }

    fn int32(&self, cx: &mut Cx, key: &str) -> Option<i64> {
        self.int(cx, key, i64::from(i32::MIN), i64::from(i32::MAX))
    }

    fn object(&self, cx: &mut Cx, key: &str, path: &'a str, known: &[&str]) -> Option<Obj<'a>> {
        object(cx, self.get(key)?, path, known)
    }

    fn array(&self, cx: &mut Cx, key: &str) -> Option<&'a Vec<Value>> {
        match self.get(key)? {
            Value::Array(items) => Some(items),
            _ => {
                cx.err(self.at(key), "must be a list");
                None
            }
        }
    }

    /// A map (of any values); `None` when absent.
    fn map(&self, cx: &mut Cx, key: &str) -> Option<&'a Map<String, Value>> {
        match self.get(key)? {
            Value::Object(m) => Some(m),
            _ => {
                cx.err(self.at(key), "must be a map");
                None
            }
        }
    }

    /// A map of strings, `None` when absent or empty.
    fn string_map(&self, cx: &mut Cx, key: &str) -> Option<Value> {
        let map = self.map(cx, key)?;
        let mut ok = true;
        for (k, v) in map {
            if !v.is_string() {
                cx.err(format!("{}[{k:?}]", self.at(key)), "must be a string");
                ok = false;
            }
        }
        (ok && !map.is_empty()).then(|| Value::Object(map.clone()))
    }

    /// A map of integers or strings (a Kubernetes resource list), as quantity strings.
    fn quantities(&self, cx: &mut Cx, key: &str) -> Option<Value> {
        let map = self.map(cx, key)?;
        let mut out = Map::new();
        for (k, v) in map {
            match v {
                Value::String(s) => {
                    out.insert(k.clone(), Value::String(s.clone()));
                }
                Value::Number(n) if n.is_i64() || n.is_u64() => {
                    out.insert(k.clone(), Value::String(n.to_string()));
                }
                _ => cx.err(
                    format!("{}[{k:?}]", self.at(key)),
                    "must be an integer or a string",
                ),
            }
        }
        (!out.is_empty()).then_some(Value::Object(out))
    }
}

/// Insert `value` unless it is `None`.
fn put(out: &mut Map<String, Value>, key: &str, value: Option<impl Into<Value>>) {
    if let Some(v) = value {
        out.insert(key.to_string(), v.into());
    }
}

/// Insert a nested object unless it is empty.
fn put_object(out: &mut Map<String, Value>, key: &str, value: Map<String, Value>) {
    if !value.is_empty() {
        out.insert(key.to_string(), Value::Object(value));
    }
}

/// Two shell snippets run one after the other.
fn concat_hooks<'a>(parts: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut out = String::new();
    for part in parts.into_iter().filter(|p| !p.trim().is_empty()) {
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(part);
    }
    (!out.is_empty()).then_some(out)
}

/// Whether a hook overrides v1alpha1's `asFlux` sudo prefix.
fn sets_as_flux(hook: &str) -> bool {
    hook.lines().any(|l| {
        l.trim_start()
            .trim_start_matches("export ")
            .starts_with("asFlux=")
    })
}

// ---------------------------------------------------------------------------------------
// The conversion.

fn convert_v1alpha1(doc: &Map<String, Value>) -> Result<Conversion, ConvertError> {
    let mut cx = Cx::default();
    let mut out = Map::new();
    out.insert("apiVersion".into(), V1ALPHA2.into());
    out.insert("kind".into(), "MiniCluster".into());
    // Unknown top-level keys are errors, like everywhere else.
    for key in doc.keys().filter(|k| !TOP_KEYS.contains(&k.as_str())) {
        cx.err(
            key.as_str(),
            "unknown v1alpha1 field (not part of the v1alpha1 MiniCluster API)",
        );
    }
    match doc.get("metadata").filter(|m| !m.is_null()) {
        Some(Value::Object(meta)) => {
            let mut meta = meta.clone();
            let removed: Vec<&str> = SERVER_METADATA
                .iter()
                .copied()
                .filter(|k| meta.remove(*k).is_some())
                .collect();
            if !removed.is_empty() {
                cx.note(
                    "metadata",
                    format!(
                        "removed {}: written by the API server for the v1alpha1 object",
                        removed.join(", ")
                    ),
                );
            }
            out.insert("metadata".into(), Value::Object(meta));
        }
        Some(_) => cx.err("metadata", "must be an object"),
        None => cx.err("metadata.name", "is required"),
    }
    if doc.get("status").is_some_and(|s| !s.is_null()) {
        cx.note(
            "status",
            "dropped: the status is written by the operator, not part of the manifest",
        );
    }
    match doc.get("spec").filter(|s| !s.is_null()) {
        Some(spec) => {
            if let Some(spec) = convert_spec(&mut cx, spec) {
                out.insert("spec".into(), Value::Object(spec));
            }
        }
        None => cx.err("spec.containers", "is required"),
    }
    if !cx.errors.is_empty() {
        return Err(ConvertError::Input(ValidationErrors(cx.errors)));
    }
    let output = Value::Object(out);
    let mc = check_v1alpha2(&output).map_err(ConvertError::Output)?;
    // Everything converted must survive in the typed MiniCluster: nothing is dropped.
    let typed = serde_json::to_value(&mc).unwrap_or(Value::Null);
    let mut missing = Vec::new();
    unrepresented(&output, &typed, "", &mut missing);
    if !missing.is_empty() {
        return Err(ConvertError::Output(ValidationErrors(
            missing
                .into_iter()
                .map(|field| FieldError {
                    field,
                    rule: "is not carried by the v1alpha2 MiniCluster type".into(),
                })
                .collect(),
        )));
    }
    Ok(Conversion {
        output,
        lost: cx.lost,
        notes: cx.notes,
        passed_through: false,
    })
}

/// What the flux runner contributes to `spec.flux` and to the RESTful-server decision.
#[derive(Default)]
struct Runner {
    option_flags: Option<(String, String)>,
    log_level: Option<(String, i64)>,
    has_command: bool,
    diagnostics: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The container that runs the Flux broker.
    Runner,
    /// Another container of the broker pods.
    Sidecar,
    /// A container of the services pod.
    Service,
}

/// A `spec.volumes` entry: mounted as a node directory or as a claim of the same name.
struct SpecVolume {
    host_path: Option<String>,
}

fn convert_spec(cx: &mut Cx, value: &Value) -> Option<Map<String, Value>> {
    let s = object(cx, value, "spec", SPEC_KEYS)?;
    let mut out = Map::new();

    let volumes = spec_volumes(cx, &s);

    // The flux runner: the only container, or the one with runFlux: true.
    let containers = s.array(cx, "containers");
    let runner_index = match containers.map(Vec::as_slice) {
        None | Some([]) => {
            cx.err("spec.containers", "at least one container is required");
            None
        }
        Some([_]) => Some(0),
        Some(list) => {
            let runners: Vec<usize> = list
                .iter()
                .enumerate()
                .filter(|(_, c)| c.get("runFlux") == Some(&Value::Bool(true)))
                .map(|(i, _)| i)
                .collect();
            match runners.as_slice() {
                [one] => Some(*one),
                _ => {
                    cx.err(
                        "spec.containers",
                        format!(
                            "exactly one container must set runFlux: true when there are several (found {})",
                            runners.len()
                        ),
                    );
                    None
                }
            }
        }
    };
    let single = containers.is_some_and(|c| c.len() == 1);
    let mut runner = Runner::default();
    let mut converted = Vec::new();
    for (i, c) in containers.into_iter().flatten().enumerate() {
        let role = if Some(i) == runner_index {
            Role::Runner
        } else {
            Role::Sidecar
        };
        let path = format!("spec.containers[{i}]");
        if let Some(c) = convert_container(cx, c, &path, role, single, &volumes, &mut runner) {
            converted.push(Value::Object(c));
        }
    }
    out.insert("containers".into(), Value::Array(converted));

    if let Some(services) = s.array(cx, "services") {
        let mut converted = Vec::new();
        for (i, c) in services.iter().enumerate() {
            let path = format!("spec.services[{i}]");
            let mut ignored = Runner::default();
            if let Some(c) =
                convert_container(cx, c, &path, Role::Service, false, &volumes, &mut ignored)
            {
                converted.push(Value::Object(c));
            }
        }
        if !converted.is_empty() {
            out.insert("services".into(), Value::Array(converted));
        }
    }

    let mut network = Map::new();
    if let Some(n) = s.object(cx, "network", "spec.network", NETWORK_KEYS) {
        put(&mut network, "headlessName", n.text(cx, "headlessName"));
    }
    if network.is_empty() {
        cx.note(
            "spec.network.headlessName",
            "the headless Service is now named after the MiniCluster (v1alpha1: flux-service); set it to flux-service to keep the old host names",
        );
    }
    put_object(&mut out, "network", network);

    put(&mut out, "jobLabels", s.string_map(cx, "jobLabels"));
    let interactive = s.boolean(cx, "interactive");
    put(&mut out, "interactive", interactive);
    put(&mut out, "launcher", s.boolean(cx, "launcher"));
    put(
        &mut out,
        "shareProcessNamespace",
        s.boolean(cx, "shareProcessNamespace"),
    );
    put(&mut out, "cleanup", s.boolean(cx, "cleanup"));
    put(&mut out, "size", s.int32(cx, "size"));
    put(
        &mut out,
        "maxSize",
        s.int32(cx, "maxSize").filter(|n| *n != 0),
    );
    put(&mut out, "tasks", s.int32(cx, "tasks"));
    put(
        &mut out,
        "deadlineSeconds",
        s.int(cx, "deadlineSeconds", i64::MIN, i64::MAX),
    );

    let flux = convert_flux(cx, &s, &runner);
    put_object(&mut out, "flux", flux);
    put_object(&mut out, "logging", convert_logging(cx, &s));
    if let Some(a) = s.object(cx, "archive", "spec.archive", ARCHIVE_KEYS) {
        let mut archive = Map::new();
        put(&mut archive, "path", a.text(cx, "path"));
        put_object(&mut out, "archive", archive);
    }
    put_object(&mut out, "pod", convert_pod(cx, &s));

    users(cx, &s);
    restful(cx, &s, &runner, interactive.unwrap_or(false), runner_index);
    Some(out)
}

/// `spec.volumes`: every entry is a loss (the operator no longer creates PVs and claims).
fn spec_volumes(cx: &mut Cx, s: &Obj<'_>) -> BTreeMap<String, SpecVolume> {
    let mut out = BTreeMap::new();
    let Some(map) = s.map(cx, "volumes") else {
        return out;
    };
    for (name, value) in map {
        let path = format!("spec.volumes[{name:?}]");
        let Some(v) = object(cx, value, &path, VOLUME_KEYS) else {
            continue;
        };
        let host = v.text(cx, "path");
        if host.is_none() {
            cx.err(v.at("path"), "is required");
        }
        let class = v
            .text(cx, "storageClass")
            .or(v.text(cx, "class"))
            .unwrap_or("hostpath");
        // Type-check the rest; their values only feed the advice.
        let pvc_class = v.text(cx, "PVCclass");
        let driver = v.text(cx, "driver");
        let handle = v.text(cx, "volumeHandle").or(v.text(cx, "volumeName"));
        let secret = v.text(cx, "secret");
        let secret_namespace = v.text(cx, "secretNamespace");
        let capacity = v.text(cx, "capacity");
        let delete = v.boolean(cx, "delete");
        let extras: Vec<&str> = ["labels", "annotations", "claimAnnotations", "attributes"]
            .into_iter()
            .filter(|k| v.string_map(cx, k).is_some())
            .collect();
        let host_path = class == "hostpath";
        let mut details = vec![format!("storageClass {class:?}")];
        details.push(format!("capacity {:?}", capacity.unwrap_or("5Gi")));
        for (label, value) in [
            ("PVC storageClassName", pvc_class),
            ("driver", driver),
            ("volumeHandle", handle),
            ("secret", secret),
            ("secret namespace", secret_namespace),
        ] {
            if let Some(value) = value {
                details.push(format!("{label} {value:?}"));
            }
        }
        if !extras.is_empty() {
            details.push(format!("the same {}", extras.join(", ")));
        }
        let cleanup = if delete == Some(false) {
            ""
        } else {
            "; v1alpha1 deleted it on cleanup, so delete yours when done"
        };
        let advice = match (host_path, host) {
            (true, Some(dir)) => format!(
                "the operator no longer creates PersistentVolumes and claims: the converted containers mount the node directory {dir:?} directly (hostPath); to keep using a claim, create the PersistentVolume ({}) and a PersistentVolumeClaim yourself and mount it with claimName",
                details.join(", ")
            ),
            _ => format!(
                "the operator no longer creates PersistentVolumes and claims: create a PersistentVolumeClaim named {name:?} and its PersistentVolume ({}) before the MiniCluster{cleanup}; the converted containers mount it with claimName: {name}",
                details.join(", ")
            ),
        };
        cx.lose(path.clone(), advice);
        out.insert(
            name.clone(),
            SpecVolume {
                host_path: host.filter(|_| host_path).map(str::to_string),
            },
        );
    }
    out
}

fn convert_container(
    cx: &mut Cx,
    value: &Value,
    path: &str,
    role: Role,
    single: bool,
    spec_volumes: &BTreeMap<String, SpecVolume>,
    runner: &mut Runner,
) -> Option<Map<String, Value>> {
    let c = object(cx, value, path, CONTAINER_KEYS)?;
    let mut out = Map::new();
    match c.string(cx, "image") {
        Some(image) => {
            out.insert("image".into(), image.into());
        }
        None if c.get("image").is_none() => cx.err(c.at("image"), "is required"),
        None => {}
    }
    put(&mut out, "name", c.text(cx, "name"));
    match c.int32(cx, "cores") {
        Some(0) => cx.note(
            c.at("cores"),
            "dropped: 0 meant the default (1 core) in v1alpha1",
        ),
        other => put(&mut out, "cores", other),
    }
    put(&mut out, "workingDir", c.text(cx, "workingDir"));
    let diagnostics = c.boolean(cx, "diagnostics");
    put(&mut out, "diagnostics", diagnostics);
    let command = c.text(cx, "command");
    put(&mut out, "command", command);
    put(&mut out, "environment", c.string_map(cx, "environment"));
    put(&mut out, "imagePullSecret", c.text(cx, "imagePullSecret"));
    for key in ["launcher", "batch", "batchRaw", "pullAlways"] {
        put(&mut out, key, c.boolean(cx, key));
    }
    put(&mut out, "logs", c.text(cx, "logs"));
    match c.boolean(cx, "runFlux") {
        Some(false) if single => cx.note(
            c.at("runFlux"),
            "dropped: v1alpha1 always ran Flux in the only container",
        ),
        other => put(&mut out, "runFlux", other),
    }

    if let Some(ports) = c.array(cx, "ports") {
        let mut list = Vec::new();
        for (j, p) in ports.iter().enumerate() {
            match p.as_i64().and_then(|n| i32::try_from(n).ok()) {
                Some(n) => list.push(Value::from(n)),
                None => cx.err(format!("{}[{j}]", c.at("ports")), "must be a port number"),
            }
        }
        if !list.is_empty() {
            out.insert("ports".into(), Value::Array(list));
        }
    }

    if let Some(secrets) = c.map(cx, "secrets") {
        let mut map = Map::new();
        for (env, value) in secrets {
            let p = format!("{}[{env:?}]", c.at("secrets"));
            if let Some(o) = object(cx, value, &p, SECRET_KEYS) {
                let mut secret = Map::new();
                put(&mut secret, "name", o.string(cx, "name"));
                put(&mut secret, "key", o.string(cx, "key"));
                map.insert(env.clone(), Value::Object(secret));
            }
        }
        put_object(&mut out, "secrets", map);
    }

    let user_path = c.at("fluxUser");
    if let Some(u) = c.object(cx, "fluxUser", &user_path, FLUX_USER_KEYS) {
        let mut user = Map::new();
        put(&mut user, "name", u.text(cx, "name"));
        match u.int(cx, "uid", 0, i64::MAX) {
            Some(0) => cx.note(
                u.at("uid"),
                "dropped: 0 meant the default uid (1000) in v1alpha1",
            ),
            other => put(&mut user, "uid", other),
        }
        put_object(&mut out, "fluxUser", user);
    }

    let life_path = c.at("lifeCycle");
    if let Some(l) = c.object(cx, "lifeCycle", &life_path, LIFE_CYCLE_KEYS) {
        let mut life = Map::new();
        put(&mut life, "postStartExec", l.text(cx, "postStartExec"));
        put(&mut life, "preStopExec", l.text(cx, "preStopExec"));
        put_object(&mut out, "lifeCycle", life);
    }

    let resources_path = c.at("resources");
    if let Some(r) = c.object(cx, "resources", &resources_path, RESOURCES_KEYS) {
        let mut resources = Map::new();
        put(&mut resources, "limits", r.quantities(cx, "limits"));
        put(&mut resources, "requests", r.quantities(cx, "requests"));
        put_object(&mut out, "resources", resources);
    }

    let security_path = c.at("securityContext");
    if let Some(sc) = c.object(cx, "securityContext", &security_path, SECURITY_KEYS) {
        let mut security = Map::new();
        put(&mut security, "privileged", sc.boolean(cx, "privileged"));
        if let Some(caps) = sc.array(cx, "addCapabilities") {
            if caps.iter().all(Value::is_string) {
                if !caps.is_empty() {
                    let mut capabilities = Map::new();
                    capabilities.insert("add".into(), Value::Array(caps.clone()));
                    security.insert("capabilities".into(), Value::Object(capabilities));
                }
            } else {
                cx.err(sc.at("addCapabilities"), "must be a list of strings");
            }
        }
        put_object(&mut out, "securityContext", security);
    }

    container_volumes(cx, &c, spec_volumes, &mut out);

    // Settings v1alpha1 read from the flux runner only.
    let flags = c.string(cx, "fluxOptionFlags");
    let level = c.int32(cx, "fluxLogLevel");
    let pre_command = c.text(cx, "preCommand");
    if role == Role::Runner {
        runner.has_command = command.is_some_and(|s| !s.trim().is_empty());
        runner.diagnostics = diagnostics == Some(true);
        if let Some(flags) = flags.filter(|f| !f.is_empty()) {
            runner.option_flags = Some((c.at("fluxOptionFlags"), flags.to_string()));
        }
        match level {
            Some(0) => cx.note(
                c.at("fluxLogLevel"),
                "dropped: 0 meant the default log level (6) in v1alpha1",
            ),
            Some(n) => runner.log_level = Some((c.at("fluxLogLevel"), n)),
            None => {}
        }
    } else {
        let only = "dropped: v1alpha1 read it only from the container that runs Flux";
        if flags.is_some() {
            cx.note(c.at("fluxOptionFlags"), only);
        }
        if level.is_some() {
            cx.note(c.at("fluxLogLevel"), only);
        }
        if pre_command.is_some() {
            cx.note(c.at("preCommand"), only);
        }
    }
    if role == Role::Runner && pre_command.is_some_and(sets_as_flux) {
        cx.lose(c.at("preCommand"), AS_FLUX_ADVICE);
    }

    let commands_path = c.at("commands");
    let hooks = c.object(cx, "commands", &commands_path, COMMANDS_KEYS);
    let hook = |cx: &mut Cx, key: &str| hooks.and_then(|h| h.text(cx, key));
    let init = hook(cx, "init");
    let pre = hook(cx, "pre");
    let post = hook(cx, "post");
    let prefix = hook(cx, "prefix");
    let broker_pre = hook(cx, "brokerPre");
    let worker_pre = hook(cx, "workerPre");
    let as_root = hooks.and_then(|h| h.boolean(cx, "runFluxAsRoot"));
    let mut commands = Map::new();
    put(&mut commands, "init", init);
    put(&mut commands, "post", post);
    put(&mut commands, "prefix", prefix);
    match role {
        Role::Runner => {
            put(
                &mut commands,
                "pre",
                concat_hooks(pre_command.into_iter().chain(pre)),
            );
            if pre_command.is_some() {
                cx.note(
                    c.at("preCommand"),
                    "moved to commands.pre (ahead of any pre it already had), which runs on every broker at the same point",
                );
            }
            put(&mut commands, "brokerPre", broker_pre);
            put(&mut commands, "workerPre", worker_pre);
            for (key, text) in [("init", init), ("pre", pre)] {
                if text.is_some_and(sets_as_flux) {
                    cx.lose(format!("{commands_path}.{key}"), AS_FLUX_ADVICE);
                }
            }
            let field = format!("{commands_path}.runFluxAsRoot");
            match as_root {
                Some(true) => cx.note(
                    field,
                    "dropped: v1alpha2 always runs Flux as the container's user (root)",
                ),
                Some(false) => cx.lose(
                    field,
                    "v1alpha2 no longer runs Flux as the flux user but as the container's user (root for the images v1alpha1 needed): to run unprivileged, use an image whose USER can run Flux, or set securityContext.runAsUser",
                ),
                None => cx.note(
                    field,
                    "v1alpha2 runs Flux as the container's user (root), not as the flux user as v1alpha1 did by default",
                ),
            }
        }
        Role::Sidecar => {
            let hooks = [broker_pre, worker_pre, pre];
            if hooks.iter().any(Option::is_some) {
                put(
                    &mut commands,
                    "servicePre",
                    concat_hooks(hooks.into_iter().flatten()),
                );
                cx.note(
                    commands_path.clone(),
                    "brokerPre, workerPre and pre of a sidecar moved to commands.servicePre (v1alpha1 ran them, in that order, before the sidecar's command)",
                );
            }
            if as_root.is_some() {
                cx.note(
                    format!("{commands_path}.runFluxAsRoot"),
                    "dropped: it only applied to the container that runs Flux",
                );
            }
            let any_hook = [init, pre, post, broker_pre, worker_pre]
                .iter()
                .any(Option::is_some);
            if command.is_none() && !any_hook {
                out.insert("noWrapEntrypoint".into(), Value::Bool(true));
                cx.note(
                    c.at("noWrapEntrypoint"),
                    "set: a v1alpha1 sidecar without a command ran its image's entrypoint",
                );
            }
        }
        Role::Service => {
            put(&mut commands, "pre", pre);
            put(&mut commands, "brokerPre", broker_pre);
            put(&mut commands, "workerPre", worker_pre);
            if as_root.is_some() {
                cx.note(
                    format!("{commands_path}.runFluxAsRoot"),
                    "dropped: it only applied to the container that runs Flux",
                );
            }
        }
    }
    put_object(&mut out, "commands", commands);
    Some(out)
}

const AS_FLUX_ADVICE: &str = "it sets asFlux, the sudo prefix v1alpha1 ran Flux with; v1alpha2 runs Flux directly as the container's user: export the variables it passed with -E in commands.pre, or list them under environment";

/// A container's `volumes` (mounts of `spec.volumes`) and `existingVolumes`, merged into
/// v1alpha2's `volumes`.
fn container_volumes(
    cx: &mut Cx,
    c: &Obj<'_>,
    spec_volumes: &BTreeMap<String, SpecVolume>,
    out: &mut Map<String, Value>,
) {
    let mut volumes = Map::new();
    if let Some(mounts) = c.map(cx, "volumes") {
        for (name, value) in mounts {
            let path = format!("{}[{name:?}]", c.at("volumes"));
            let Some(m) = object(cx, value, &path, MOUNT_KEYS) else {
                continue;
            };
            let mut volume = Map::new();
            match m.text(cx, "path") {
                Some(p) => {
                    volume.insert("path".into(), p.into());
                }
                None => cx.err(m.at("path"), "is required"),
            }
            put(&mut volume, "readOnly", m.boolean(cx, "readOnly"));
            match spec_volumes.get(name) {
                Some(SpecVolume {
                    host_path: Some(dir),
                }) => {
                    volume.insert("hostPath".into(), dir.clone().into());
                }
                Some(SpecVolume { host_path: None }) => {
                    volume.insert("claimName".into(), name.clone().into());
                }
                None => cx.err(
                    path,
                    "is not defined in spec.volumes (v1alpha1 requires every container volume there)",
                ),
            }
            volumes.insert(name.clone(), Value::Object(volume));
        }
    }
    if let Some(existing) = c.map(cx, "existingVolumes") {
        for (name, value) in existing {
            let path = format!("{}[{name:?}]", c.at("existingVolumes"));
            let Some(e) = object(cx, value, &path, EXISTING_VOLUME_KEYS) else {
                continue;
            };
            let mut volume = Map::new();
            for key in ["path", "configMapName", "claimName", "secretName"] {
                put(&mut volume, key, e.text(cx, key));
            }
            put(&mut volume, "items", e.string_map(cx, "items"));
            put(&mut volume, "readOnly", e.boolean(cx, "readOnly"));
            if volumes.contains_key(name) {
                cx.err(
                    path,
                    "is also listed under volumes: v1alpha2 has one volumes map, rename one of them",
                );
                continue;
            }
            volumes.insert(name.clone(), Value::Object(volume));
        }
    }
    put_object(out, "volumes", volumes);
}

fn convert_flux(cx: &mut Cx, s: &Obj<'_>, runner: &Runner) -> Map<String, Value> {
    let mut out = Map::new();
    let mut container = Map::new();
    container.insert("disable".into(), Value::Bool(true));
    out.insert("container".into(), Value::Object(container));
    cx.note(
        "spec.flux.container.disable",
        "set to true: Flux comes from the application image, as in v1alpha1 (remove it to use a flux view image instead)",
    );

    let mut option_flags = None;
    let mut log_level = None;
    if let Some(f) = s.object(cx, "flux", "spec.flux", FLUX_KEYS) {
        if let Some(root) = f.text(cx, "installRoot") {
            cx.note(
                f.at("installRoot"),
                format!(
                    "dropped ({root:?}): v1alpha1 used it for the Flux IMP's paths; v1alpha2 runs a single-user instance without the IMP and finds flux on the image's PATH"
                ),
            );
        }
        for key in ["wrap", "curveCert", "brokerConfig"] {
            put(&mut out, key, f.text(cx, key));
        }
        // An empty connectTimeout means "no timeout flag" in both versions.
        put(&mut out, "connectTimeout", f.string(cx, "connectTimeout"));
        put(&mut out, "minimalService", f.boolean(cx, "minimalService"));
        option_flags = f
            .text(cx, "optionFlags")
            .map(|v| (f.at("optionFlags"), v.to_string()));
        match f.int32(cx, "logLevel") {
            Some(0) => cx.note(
                f.at("logLevel"),
                "dropped: 0 meant the default log level (6) in v1alpha1",
            ),
            Some(n) => log_level = Some((f.at("logLevel"), n)),
            None => {}
        }
        if let Some(secret) = f.text(cx, "curveCertSecret") {
            cx.lose(
                f.at("curveCertSecret"),
                format!(
                    "v1alpha2 takes a CURVE certificate only as text: put the certificate from Secret {secret:?} into spec.flux.curveCert (or leave both out and one is generated)"
                ),
            );
        }
        for key in ["mungeSecret", "mungeConfigMap"] {
            if f.text(cx, key).is_some() {
                cx.lose(
                    f.at(key),
                    "v1alpha2 runs a single-user Flux instance that needs no munge key: drop it, or if your jobs still read the key mount it as a container volume (secretName or configMapName) at /etc/munge",
                );
            }
        }
        if let Some(sch) = f.object(cx, "scheduler", "spec.flux.scheduler", SCHEDULER_KEYS) {
            let mut scheduler = Map::new();
            put(&mut scheduler, "queuePolicy", sch.text(cx, "queuePolicy"));
            put_object(&mut out, "scheduler", scheduler);
        }
        put_object(&mut out, "bursting", convert_bursting(cx, &f));
    }

    // fluxOptionFlags / fluxLogLevel moved from the flux runner to spec.flux.
    let option_flags = merge_setting(cx, option_flags, runner.option_flags.clone());
    put(&mut out, "optionFlags", option_flags);
    let log_level = merge_setting(cx, log_level, runner.log_level.clone());
    put(&mut out, "logLevel", log_level);
    out
}

/// A cluster-wide setting given under `spec.flux` and/or on the flux runner.
fn merge_setting<T: PartialEq + fmt::Debug>(
    cx: &mut Cx,
    spec: Option<(String, T)>,
    runner: Option<(String, T)>,
) -> Option<T> {
    match (spec, runner) {
        (Some((field, a)), Some((other, b))) if a != b => {
            cx.err(
                other,
                format!("{b:?} differs from {field} ({a:?}); v1alpha2 has one cluster-wide value"),
            );
            None
        }
        (Some((_, a)), _) => Some(a),
        (None, b) => b.map(|(_, v)| v),
    }
}

fn convert_bursting(cx: &mut Cx, f: &Obj<'_>) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(b) = f.object(cx, "bursting", "spec.flux.bursting", BURSTING_KEYS) else {
        return out;
    };
    if let Some(l) = b.object(
        cx,
        "leadBroker",
        "spec.flux.bursting.leadBroker",
        LEAD_BROKER_KEYS,
    ) {
        let mut lead = Map::new();
        put(&mut lead, "address", l.text(cx, "address"));
        put(&mut lead, "name", l.text(cx, "name"));
        put(&mut lead, "size", l.int32(cx, "size").filter(|n| *n != 0));
        put(&mut lead, "port", l.int32(cx, "port").filter(|n| *n != 0));
        // A Go zero-valued leadBroker (no address) means "no lead broker".
        if lead.contains_key("address") || lead.contains_key("name") {
            out.insert("leadBroker".into(), Value::Object(lead));
        }
    }
    put(&mut out, "hostlist", b.text(cx, "hostlist"));
    if let Some(clusters) = b.array(cx, "clusters") {
        let mut list = Vec::new();
        for (i, value) in clusters.iter().enumerate() {
            let path = format!("spec.flux.bursting.clusters[{i}]");
            if let Some(c) = object(cx, value, &path, BURST_CLUSTER_KEYS) {
                let mut cluster = Map::new();
                put(&mut cluster, "name", c.text(cx, "name"));
                put(
                    &mut cluster,
                    "size",
                    c.int32(cx, "size").filter(|n| *n != 0),
                );
                list.push(Value::Object(cluster));
            }
        }
        if !list.is_empty() {
            cx.note(
                "spec.flux.bursting.clusters",
                "the hub now creates each burst cluster's brokers through the spoke named by its cluster field (default: the burst's name); v1alpha1 left creating them to you",
            );
            out.insert("clusters".into(), Value::Array(list));
        }
    }
    out
}

fn convert_logging(cx: &mut Cx, s: &Obj<'_>) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(l) = s.object(cx, "logging", "spec.logging", LOGGING_KEYS) else {
        return out;
    };
    for key in ["strict", "debug", "timed", "zeromq"] {
        put(&mut out, key, l.boolean(cx, key));
    }
    let quiet = l.boolean(cx, "quiet");
    let test = l.boolean(cx, "test");
    match (quiet, test) {
        (Some(q), Some(t)) if q != t => cx.err(
            l.at("test"),
            "is the early name of logging.quiet and disagrees with it: keep one",
        ),
        (_, Some(t)) => {
            cx.note(l.at("test"), "renamed to logging.quiet");
            out.insert("quiet".into(), Value::Bool(t));
        }
        (q, None) => put(&mut out, "quiet", q),
    }
    out
}

fn convert_pod(cx: &mut Cx, s: &Obj<'_>) -> Map<String, Value> {
    let mut out = Map::new();
    let Some(p) = s.object(cx, "pod", "spec.pod", POD_KEYS) else {
        return out;
    };
    put(&mut out, "annotations", p.string_map(cx, "annotations"));
    put(&mut out, "labels", p.string_map(cx, "labels"));
    put(&mut out, "nodeSelector", p.string_map(cx, "nodeSelector"));
    put(
        &mut out,
        "serviceAccountName",
        p.text(cx, "serviceAccountName"),
    );
    if p.quantities(cx, "resources").is_some() {
        cx.lose(
            p.at("resources"),
            "v1alpha1 copied them into the pod overhead, which Kubernetes only accepts together with a RuntimeClass defining the same overhead: request resources per container with spec.containers[].resources, or set spec.pod.runtimeClassName and put them back under spec.pod.resources",
        );
    }
    out
}

/// `spec.users`: type-checked, and a loss when any user is listed.
fn users(cx: &mut Cx, s: &Obj<'_>) {
    let Some(list) = s.array(cx, "users") else {
        return;
    };
    for (i, value) in list.iter().enumerate() {
        let path = format!("spec.users[{i}]");
        if let Some(u) = object(cx, value, &path, USER_KEYS) {
            if u.text(cx, "name").is_none() {
                cx.err(u.at("name"), "is required");
            }
            let _ = u.string(cx, "password");
        }
    }
    if !list.is_empty() {
        cx.lose(
            "spec.users",
            "v1alpha2 runs a single-user Flux instance (no extra Linux users, munge or flux-accounting database): control who may use the MiniCluster with Kubernetes RBAC and namespaces, or run the Flux RESTful API as a sidecar container with its own users",
        );
    }
}

/// `spec.fluxRestful` and the built-in RESTful API server v1alpha1 started without a command.
fn restful(
    cx: &mut Cx,
    s: &Obj<'_>,
    runner: &Runner,
    interactive: bool,
    runner_index: Option<usize>,
) {
    let mut settings = false;
    if let Some(r) = s.object(cx, "fluxRestful", "spec.fluxRestful", RESTFUL_KEYS) {
        for key in ["branch", "secretKey", "username", "token"] {
            settings |= r.text(cx, key).is_some();
        }
        settings |= r.int32(cx, "port").is_some_and(|p| p != 0);
    }
    let server =
        runner_index.is_some() && !runner.has_command && !interactive && !runner.diagnostics;
    if server {
        let with = if settings {
            ", passing it the branch, port and credentials of spec.fluxRestful through that container's environment"
        } else {
            ""
        };
        cx.lose(
            "spec.fluxRestful",
            format!(
                "without a command v1alpha1 ran the built-in Flux RESTful API server; v1alpha2 has none and keeps an interactive instance up instead: run the RESTful API (ghcr.io/flux-framework/flux-restful-api) as a sidecar container next to the broker{with}, or give the flux container a command"
            ),
        );
    } else if settings {
        cx.note(
            "spec.fluxRestful",
            "dropped: v1alpha1 only used it to start the RESTful API server, which it did not start for this MiniCluster (it has a command, is interactive or runs diagnostics)",
        );
    }
}

// ---------------------------------------------------------------------------------------
// Checking the v1alpha2 result.

/// Deserialize into [`MiniCluster`] and validate.
fn check_v1alpha2(doc: &Value) -> Result<MiniCluster, ValidationErrors> {
    let mc: MiniCluster =
        serde_json::from_value(doc.clone()).map_err(|e| ValidationErrors(vec![locate(doc, &e)]))?;
    validate::validate(&mc)?;
    Ok(mc)
}

/// Whether a value says nothing (absent, null, empty list or map).
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Collect the paths of `output` whose values `typed` (the re-serialized MiniCluster)
/// does not carry.
fn unrepresented(output: &Value, typed: &Value, path: &str, missing: &mut Vec<String>) {
    match (output, typed) {
        (Value::Object(o), Value::Object(t)) => {
            for (k, v) in o.iter().filter(|(_, v)| !is_empty(v)) {
                match t.get(k) {
                    Some(tv) => unrepresented(v, tv, &join(path, k), missing),
                    None => missing.push(join(path, k)),
                }
            }
        }
        (Value::Array(o), Value::Array(t)) if o.len() == t.len() => {
            for (i, (v, tv)) in o.iter().zip(t).enumerate() {
                unrepresented(v, tv, &format!("{path}[{i}]"), missing);
            }
        }
        (o, t) if o == t => {}
        _ => missing.push(path.to_string()),
    }
}

/// Name the field a deserialization error comes from, by deserializing the parts alone.
fn locate(doc: &Value, err: &serde_json::Error) -> FieldError {
    let problem = |field: String, e: &serde_json::Error| FieldError {
        field,
        rule: e.to_string(),
    };
    let Some(obj) = doc.as_object() else {
        return problem("document".into(), err);
    };
    if let Some(Err(e)) = obj
        .get("metadata")
        .map(|m| serde_json::from_value::<ObjectMeta>(m.clone()))
    {
        return problem("metadata".into(), &e);
    }
    if let Some(Err(e)) = obj
        .get("status")
        .filter(|s| !s.is_null())
        .map(|s| serde_json::from_value::<MiniClusterStatus>(s.clone()))
    {
        return problem("status".into(), &e);
    }
    let Some(spec) = obj.get("spec").and_then(Value::as_object) else {
        return problem("spec".into(), err);
    };
    for (key, value) in spec {
        if let ("containers" | "services", Some(list)) = (key.as_str(), value.as_array()) {
            for (i, c) in list.iter().enumerate() {
                if let Err(e) = serde_json::from_value::<MiniClusterContainer>(c.clone()) {
                    let base = format!("spec.{key}[{i}]");
                    return c
                        .as_object()
                        .and_then(|fields| {
                            fields.iter().find_map(|(k, v)| {
                                let mut probe = Map::new();
                                probe.insert("image".into(), "".into());
                                probe.insert(k.clone(), v.clone());
                                serde_json::from_value::<MiniClusterContainer>(Value::Object(probe))
                                    .err()
                                    .map(|e| problem(format!("{base}.{k}"), &e))
                            })
                        })
                        .unwrap_or_else(|| problem(base, &e));
                }
            }
        }
        let mut probe = Map::new();
        probe.insert("containers".into(), Value::Array(Vec::new()));
        probe.insert(key.clone(), value.clone());
        if let Err(e) = serde_json::from_value::<MiniClusterSpec>(Value::Object(probe)) {
            return problem(format!("spec.{key}"), &e);
        }
    }
    problem("spec".into(), err)
}
