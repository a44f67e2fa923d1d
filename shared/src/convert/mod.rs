//! Conversion of `flux-framework.org/v1alpha1` MiniClusters into `v1alpha2`.
//!
//! v1alpha1 is not a typed API here: a document is read as a [`serde_json::Value`],
//! every key is checked against the v1alpha1 fields (the union of the v1alpha1 releases:
//! the documented API of early 2023 and the later 0.1.x additions such as `services`,
//! `flux`, `existingVolumes` and `archive`), and an unknown key is an error naming it,
//! never a guess and never silently dropped. What still exists moves to its v1alpha2
//! place; what has no v1alpha2 equivalent is reported as a [`Loss`] with advice; a
//! lossless change worth knowing about is reported as a [`Note`]. The output is then
//! deserialized into [`MiniCluster`](crate::api::MiniCluster) and checked with
//! [`validate::validate`](crate::validate::validate), so a [`Conversion`] always holds a
//! MiniCluster that plans and renders.
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

mod check;
mod containers;
mod document;
mod dropped;
mod fields;
mod flux;
mod input;
mod outcome;
mod spec;
mod volumes;

pub use document::convert_document;
pub use outcome::{Conversion, ConvertError, Loss, Note};

/// API group of the MiniCluster.
pub const API_GROUP: &str = "flux-framework.org";
/// The apiVersion this module converts from.
pub const V1ALPHA1: &str = "flux-framework.org/v1alpha1";
/// The apiVersion this module converts to.
pub const V1ALPHA2: &str = "flux-framework.org/v1alpha2";
