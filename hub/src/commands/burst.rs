//! `flux-hub burst scale NAMESPACE/MINICLUSTER BURST SIZE`: sets one burst's size through
//! the hub's Admin API (`ScaleBurst`, admin certificate only; the same connection flags
//! as `flux-hub status`).
//!
//! The hub patches the MiniCluster's spec, so the API object stays the source of truth
//! (`kubectl get` shows the new size, and a GitOps tool that owns the spec sees the
//! change), and refuses what its controller would refuse (a size above the burst's
//! maxSize, a removed burst, a spec that is not applied), saying why. The spoke resizes
//! the burst's Job in place with the next snapshot.
//!
//! Output: one line saying what changed (`-o json`: the hub's answer as a JSON object).
//! Exit status 0 when the size is set (or already was), 1 otherwise.

use std::io::Write;
use std::process::ExitCode;

use flux_shared::federation::proto::{ScaleBurstRequest, ScaleBurstResponse};
use serde::Serialize;

use crate::commands::Format;
use crate::commands::admin_client::{AdminError, HubEndpoint, HubOptions};

/// `flux-hub burst` subcommands.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum BurstCommand {
    /// Set how many brokers a burst runs (0 up to its maxSize), through the hub.
    Scale(ScaleOptions),
}

/// Options of `flux-hub burst scale`.
#[derive(clap::Args, Debug, Clone)]
pub struct ScaleOptions {
    /// The MiniCluster: NAME (in --namespace), or NAMESPACE/NAME.
    #[arg(value_name = "MINICLUSTER")]
    pub minicluster: String,
    /// The MiniCluster's namespace, as with kubectl (default: `default`).
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// The burst's name (`spec.flux.bursting.clusters[].name`).
    pub burst: String,
    /// Brokers the burst should run: 0 (none, the burst's objects kept) up to its maxSize.
    #[arg(value_parser = clap::value_parser!(i32).range(0..))]
    pub size: i32,
    /// How to reach the hub.
    #[command(flatten)]
    pub connection: HubOptions,
    /// Output format: one line, or a JSON / YAML object (`namespace`, `name`, `burst`,
    /// `previousSize`, `size`, `maxSize`, `changed`, `generation`, `spoke`).
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Format,
}

/// What `-o json` prints.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScaleView {
    /// Namespace of the MiniCluster.
    pub namespace: String,
    /// Name of the MiniCluster.
    pub name: String,
    /// The burst.
    pub burst: String,
    /// Its size before.
    pub previous_size: i32,
    /// Its size now.
    pub size: i32,
    /// Its maxSize.
    pub max_size: i32,
    /// Whether the spec changed.
    pub changed: bool,
    /// The MiniCluster's generation holding the size (applied once
    /// `status.observedGeneration` reaches it).
    pub generation: i64,
    /// The spoke that runs the burst.
    pub spoke: String,
}

/// The MiniCluster an argument names: `NAMESPACE/NAME`, or `NAME` in `namespace`
/// (`default` when not given, as with kubectl); an error names the argument and the form.
pub fn parse_minicluster(
    arg: &str,
    namespace: Option<&str>,
) -> Result<(String, String), AdminError> {
    let bad = || {
        AdminError::Setup(format!(
            "MINICLUSTER: {arg:?} is neither NAME nor NAMESPACE/NAME (for example bursty -n hpc, or hpc/bursty)"
        ))
    };
    let (ns, name) = match arg.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            if let Some(flag) = namespace.filter(|n| *n != ns) {
                return Err(AdminError::Setup(format!(
                    "MINICLUSTER {arg:?} is in namespace {ns:?}, but --namespace says {flag:?}"
                )));
            }
            (ns, name)
        }
        Some(_) => return Err(bad()),
        None if !arg.is_empty() => (namespace.unwrap_or("default"), arg),
        None => return Err(bad()),
    };
    if !flux_shared::validate::is_dns_label(ns) {
        return Err(AdminError::Setup(format!(
            "--namespace {ns:?} is not a namespace name"
        )));
    }
    Ok((ns.to_string(), name.to_string()))
}

/// The view of the hub's answer.
pub fn view(namespace: &str, name: &str, burst: &str, answer: &ScaleBurstResponse) -> ScaleView {
    ScaleView {
        namespace: namespace.to_string(),
        name: name.to_string(),
        burst: burst.to_string(),
        previous_size: answer.previous_size,
        size: answer.size,
        max_size: answer.max_size,
        changed: answer.previous_size != answer.size,
        generation: answer.generation,
        spoke: answer.spoke.clone(),
    }
}

/// The line `-o text` prints.
pub fn text(v: &ScaleView) -> String {
    let target = format!("{}/{} burst {}", v.namespace, v.name, v.burst);
    // A burst that names candidates and runs nowhere yet has no spoke.
    let spoke = if v.spoke.is_empty() {
        "not placed yet".to_string()
    } else {
        format!("spoke {}", v.spoke)
    };
    if v.changed {
        format!(
            "{target}: size {} -> {} (maxSize {}, {spoke}); the spoke resizes its Job once the hub applies generation {}",
            v.previous_size, v.size, v.max_size, v.generation
        )
    } else {
        format!(
            "{target}: already at size {} (maxSize {}, {spoke}); nothing changed",
            v.size, v.max_size
        )
    }
}

/// Runs `flux-hub burst scale`, writing to `out`.
pub async fn scale(opts: &ScaleOptions, out: &mut dyn Write) -> Result<(), AdminError> {
    let (namespace, name) = parse_minicluster(&opts.minicluster, opts.namespace.as_deref())?;
    let hub = HubEndpoint::new(&opts.connection)?;
    let mut client = hub.connect().await?;
    let answer = hub
        .scale_burst(
            &mut client,
            ScaleBurstRequest {
                namespace: namespace.clone(),
                name: name.clone(),
                burst: opts.burst.clone(),
                size: opts.size,
            },
        )
        .await?;
    let v = view(&namespace, &name, &opts.burst, &answer);
    match crate::commands::document(opts.output, &v)? {
        Some(document) => out.write_all(document.as_bytes())?,
        None => writeln!(out, "{}", text(&v))?,
    }
    out.flush()?;
    Ok(())
}

/// Entry point of `flux-hub burst` (from `main`).
pub fn main(command: &BurstCommand) -> ExitCode {
    let BurstCommand::Scale(opts) = command;
    crate::commands::run("flux-hub burst scale", async |out| scale(opts, out).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_minicluster_is_a_name_in_a_namespace_or_namespace_slash_name() {
        let ok = |arg, ns| parse_minicluster(arg, ns).ok();
        let pair = |a: &str, b: &str| Some((a.to_string(), b.to_string()));
        assert_eq!(ok("hpc/bursty", None), pair("hpc", "bursty"));
        assert_eq!(ok("hpc/bursty", Some("hpc")), pair("hpc", "bursty"));
        assert_eq!(ok("bursty", Some("hpc")), pair("hpc", "bursty"));
        assert_eq!(ok("bursty", None), pair("default", "bursty"));
        for bad in ["", "/bursty", "hpc/", "a/b/c"] {
            let e = parse_minicluster(bad, None).expect_err(bad).to_string();
            assert!(e.contains("neither NAME nor NAMESPACE/NAME"), "{e}");
        }
        let e = parse_minicluster("hpc/bursty", Some("lab"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("but --namespace says \"lab\""), "{e}");
        let e = parse_minicluster("bursty", Some("Not Valid"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a namespace name"), "{e}");
    }

    #[test]
    fn text_says_what_changed() {
        let answer = ScaleBurstResponse {
            previous_size: 1,
            size: 3,
            max_size: 4,
            generation: 7,
            spoke: "gke".into(),
        };
        assert_eq!(
            text(&view("hpc", "bursty", "burst-gke", &answer)),
            "hpc/bursty burst burst-gke: size 1 -> 3 (maxSize 4, spoke gke); the spoke resizes its Job once the hub applies generation 7"
        );
        let same = ScaleBurstResponse {
            previous_size: 3,
            ..answer
        };
        assert_eq!(
            text(&view("hpc", "bursty", "burst-gke", &same)),
            "hpc/bursty burst burst-gke: already at size 3 (maxSize 4, spoke gke); nothing changed"
        );
    }
}
