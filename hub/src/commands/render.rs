//! `flux-hub render`: every object a MiniCluster turns into, per cluster, without a cluster.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
use flux_shared::api::MiniCluster;
use flux_shared::curve::CurveCert;
use flux_shared::plan::{Endpoint, Plan, Role};
use flux_shared::render::{self, Object};
use serde::Deserialize;

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Multi-document YAML with a comment naming each object's cluster.
    Yaml,
    /// One JSON document: `{"clusters": [{"cluster", "minicluster", "objects"}]}`.
    Json,
}

/// The objects one cluster gets for one MiniCluster.
#[derive(serde::Serialize)]
pub struct ClusterObjects {
    /// `root`, a spoke cluster's name, or `local` for a hand-applied burst MiniCluster.
    pub cluster: String,
    /// `namespace/name` of the MiniCluster.
    pub minicluster: String,
    /// What the role is, for a reader.
    pub role: String,
    /// The objects, in apply order.
    pub objects: Vec<Object>,
}

/// Parse every document of `text`; MiniClusters only. Errors are `FILE: location: message`.
pub fn parse_documents(file: &str, text: &str) -> Result<Vec<MiniCluster>, Vec<String>> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let value = match serde_yaml_ng::Value::deserialize(doc) {
            Ok(serde_yaml_ng::Value::Null) => continue,
            Ok(v) => v,
            Err(e) => {
                // A syntax error ends the stream: the YAML parser would repeat it forever.
                errors.push(format!("{file}: document {}: {e}", i + 1));
                break;
            }
        };
        let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        let api_version = value
            .get("apiVersion")
            .and_then(|k| k.as_str())
            .unwrap_or("");
        if kind != "MiniCluster" || api_version != "flux-framework.org/v1alpha2" {
            errors.push(format!(
                "{file}: document {}: expected kind MiniCluster, apiVersion flux-framework.org/v1alpha2 (got kind {kind:?}, apiVersion {api_version:?})",
                i + 1
            ));
            continue;
        }
        match serde_path_to_error::deserialize::<_, MiniCluster>(value) {
            Ok(mc) => out.push(mc),
            Err(e) => {
                let path = e.path().to_string();
                errors.push(format!("{file}: {path}: {}", e.into_inner()));
            }
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// Plan and render every MiniCluster of `text`, for every cluster (or only `cluster`).
pub fn render_documents(
    file: &str,
    text: &str,
    cluster: Option<&str>,
    lead: &Endpoint,
    cert_for: impl Fn(&str) -> String,
) -> Result<Vec<ClusterObjects>, Vec<String>> {
    let miniclusters = parse_documents(file, text)?;
    let mut errors = Vec::new();
    let mut plans = Vec::new();
    for mc in &miniclusters {
        match Plan::new(mc) {
            Ok(plan) => plans.push(plan),
            Err(e) => errors.extend(e.0.iter().map(|fe| format!("{file}: {fe}"))),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut out = Vec::new();
    for plan in &plans {
        let cert = cert_for(&plan.name);
        let id = format!("{}/{}", plan.namespace, plan.name);
        let roles: Vec<(String, String, Role)> = match plan.local_role() {
            Role::Root => plan
                .roles(lead)
                .into_iter()
                .flat_map(|role| match &role {
                    Role::Root => vec![(
                        "root".to_string(),
                        "root: lead broker and root brokers".to_string(),
                        role,
                    )],
                    Role::Burst { index, .. } => {
                        let b = &plan.bursts[*index];
                        let what = format!(
                            "burst {} ({} brokers) joining the lead at {}",
                            b.name,
                            b.size,
                            lead.uri()
                        );
                        if b.candidates.is_empty() {
                            return vec![(b.cluster.clone(), what, role)];
                        }
                        // Placed by the hub at run time: the same objects on each candidate.
                        let n = b.candidates.len();
                        b.candidates
                            .iter()
                            .enumerate()
                            .map(|(i, c)| {
                                (
                                    c.to_string(),
                                    format!("{what}, if placed there (candidate {} of {n})", i + 1),
                                    role.clone(),
                                )
                            })
                            .collect()
                    }
                })
                .collect(),
            role @ Role::Burst { .. } => {
                let uri = match &role {
                    Role::Burst { lead, .. } => lead.uri(),
                    Role::Root => String::new(),
                };
                vec![(
                    "local".to_string(),
                    format!("burst {} joining the lead at {uri}", plan.name),
                    role,
                )]
            }
        };
        for (name, what, role) in roles {
            if cluster.is_some_and(|c| c != name) {
                continue;
            }
            let objects = render::render(plan, &role, &cert).unwrap_or_default();
            out.push(ClusterObjects {
                cluster: name,
                minicluster: id.clone(),
                role: what,
                objects,
            });
        }
    }
    Ok(out)
}

/// Format rendered groups.
pub fn format_output(groups: &[ClusterObjects], format: Format) -> Result<String> {
    match format {
        Format::Json => {
            Ok(serde_json::to_string_pretty(&serde_json::json!({ "clusters": groups }))? + "\n")
        }
        Format::Yaml => {
            let mut out = String::new();
            for g in groups {
                for o in &g.objects {
                    let _ = writeln!(
                        out,
                        "---\n# cluster: {} | MiniCluster {} | {}",
                        g.cluster, g.minicluster, g.role
                    );
                    out.push_str(
                        &serde_yaml_ng::to_string(o)
                            .with_context(|| format!("serialising {}", o.describe()))?,
                    );
                }
            }
            Ok(out)
        }
    }
}

/// The `render` command.
pub fn run(file: &Path, cluster: Option<&str>, format: Format, lead: &Endpoint) -> Result<String> {
    let name = file.display().to_string();
    let text = std::fs::read_to_string(file).with_context(|| format!("{name}: cannot read"))?;
    match render_documents(&name, &text, cluster, lead, |mc| {
        CurveCert::generate(mc).to_zcert()
    }) {
        Ok(groups) => {
            if let Some(c) = cluster.filter(|_| groups.is_empty()) {
                bail!("{name}: no MiniCluster renders objects for cluster {c:?}");
            }
            format_output(&groups, format)
        }
        Err(errors) => bail!(errors.join("\n")),
    }
}
