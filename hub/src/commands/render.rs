//! `flux-hub render`: every object a MiniCluster turns into, per cluster, without a cluster.
//! A burst placed at run time is printed for each candidate spoke, and one whose spec
//! leaves `relay` unset for each path the hub may choose.

use std::fmt::Write as _;
use std::path::Path;
use std::rc::Rc;

use anyhow::{Context, Result, bail};
use flux_shared::api::{MiniCluster, burst_path};
use flux_shared::curve::CurveCert;
use flux_shared::plan::{Endpoint, Plan, Role};
use flux_shared::render::{self, Object};
use serde::Deserialize;

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Multi-document YAML with a comment naming each object's cluster.
    Yaml,
    /// One JSON document: `{"clusters": [{"cluster", "minicluster", "role", "path",
    /// "pathChosenByHub", "objects"}]}`.
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
    /// A burst's path to the lead broker, `Direct` or `Relay` (none for the root).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<&'static str>,
    /// The hub chooses the burst's path at run time (its spec leaves `relay` unset): it is
    /// printed for each path it may take.
    #[serde(rename = "pathChosenByHub", skip_serializing_if = "std::ops::Not::not")]
    pub path_chosen_by_hub: bool,
    /// The objects, in apply order.
    pub objects: Vec<Object>,
}

/// One cluster's part of a MiniCluster to print: which cluster, what it is, its path, the
/// plan and role it renders from.
struct Part {
    cluster: String,
    what: String,
    path: Option<&'static str>,
    chosen_by_hub: bool,
    /// Shared: a plan at the limit is a few MiB, and a burst is printed many times.
    plan: Rc<Plan>,
    role: Role,
}

/// The parts of a bursting root's `plan`: the root, then each burst on each candidate
/// spoke and, for a burst whose path the hub chooses, on each path (direct, then relay).
fn root_parts(plan: &Rc<Plan>, lead: &Endpoint) -> Vec<Part> {
    // A burst whose name leaves no room for a relay Service connects directly.
    let chosen: Vec<bool> = plan
        .bursts
        .iter()
        .map(|b| b.path_chosen_by_hub() && b.can_relay())
        .collect();
    // Every burst the hub chooses for on each path at once: a burst's objects depend on
    // its own path alone.
    let routed: Vec<Rc<Plan>> = if chosen.contains(&true) {
        [false, true]
            .into_iter()
            .map(|relay| {
                let routed =
                    Plan::clone(plan).route(|i| chosen.get(i).is_some_and(|c| *c).then_some(relay));
                Rc::new(routed)
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut parts = Vec::new();
    for role in plan.roles(lead) {
        let Role::Burst { index, .. } = role else {
            parts.push(Part {
                cluster: "root".to_string(),
                what: "root: lead broker and root brokers".to_string(),
                path: None,
                chosen_by_hub: false,
                plan: Rc::clone(plan),
                role,
            });
            continue;
        };
        let b = &plan.bursts[index];
        let chosen_by_hub = chosen.get(index).is_some_and(|c| *c);
        let plans: &[Rc<Plan>] = if chosen_by_hub {
            &routed
        } else {
            std::slice::from_ref(plan)
        };
        // Placed by the hub at run time: the same objects on each candidate.
        let places: Vec<(String, String)> = if b.candidates.is_empty() {
            vec![(b.cluster.clone(), String::new())]
        } else {
            let n = b.candidates.len();
            b.candidates
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let note = format!(", if placed there (candidate {} of {n})", i + 1);
                    (c.to_string(), note)
                })
                .collect()
        };
        for (cluster, placed) in places {
            for plan in plans {
                let Some(burst_lead) = plan.burst_lead(index, Some(lead)) else {
                    continue;
                };
                let b = &plan.bursts[index];
                let path = if b.relay {
                    burst_path::RELAY
                } else {
                    burst_path::DIRECT
                };
                let mut what = format!(
                    "burst {} ({} brokers) joining the lead at {}",
                    b.name,
                    b.size,
                    burst_lead.uri()
                );
                if chosen_by_hub {
                    let _ = write!(what, ", path {path} (the hub's choice at run time)");
                }
                what.push_str(&placed);
                parts.push(Part {
                    cluster: cluster.clone(),
                    what,
                    path: Some(path),
                    chosen_by_hub,
                    plan: Rc::clone(plan),
                    role: Role::Burst {
                        index,
                        lead: burst_lead,
                    },
                });
            }
        }
    }
    parts
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

/// Plan and render every MiniCluster of `text`, for every cluster (or only `cluster`), as
/// on clusters that mount images as volumes (`image_volumes`) or not.
pub fn render_documents(
    file: &str,
    text: &str,
    cluster: Option<&str>,
    lead: &Endpoint,
    image_volumes: bool,
    cert_for: impl Fn(&str) -> String,
) -> Result<Vec<ClusterObjects>, Vec<String>> {
    let miniclusters = parse_documents(file, text)?;
    let mut errors = Vec::new();
    let mut plans = Vec::new();
    for mc in &miniclusters {
        match Plan::new(mc) {
            Ok(mut plan) => {
                plan.view_mode = plan.spec.view_mode_on(image_volumes);
                plans.push(Rc::new(plan))
            }
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
        let parts = match plan.local_role() {
            Role::Root => root_parts(plan, lead),
            role @ Role::Burst { .. } => {
                let uri = match &role {
                    Role::Burst { lead, .. } => lead.uri(),
                    Role::Root => String::new(),
                };
                vec![Part {
                    cluster: "local".to_string(),
                    what: format!("burst {} joining the lead at {uri}", plan.name),
                    path: None,
                    chosen_by_hub: false,
                    plan: Rc::clone(plan),
                    role,
                }]
            }
        };
        for part in parts {
            if cluster.is_some_and(|c| c != part.cluster) {
                continue;
            }
            let objects = render::render(&part.plan, &part.role, &cert).unwrap_or_default();
            out.push(ClusterObjects {
                cluster: part.cluster,
                minicluster: id.clone(),
                role: part.what,
                path: part.path,
                path_chosen_by_hub: part.chosen_by_hub,
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
pub fn run(
    file: &Path,
    cluster: Option<&str>,
    format: Format,
    lead: &Endpoint,
    image_volumes: bool,
) -> Result<String> {
    let name = file.display().to_string();
    let text = std::fs::read_to_string(file).with_context(|| format!("{name}: cannot read"))?;
    match render_documents(&name, &text, cluster, lead, image_volumes, |mc| {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(clusters: &str) -> Vec<(String, Option<&'static str>, bool)> {
        let text = format!(
            "apiVersion: flux-framework.org/v1alpha2\nkind: MiniCluster\nmetadata: {{name: m, namespace: hpc}}\nspec:\n  size: 1\n  containers: [{{image: rockylinux:9}}]\n  flux:\n    bursting:\n      clusters:\n{clusters}"
        );
        let lead = Endpoint {
            address: "192.0.2.1".into(),
            port: 30050,
        };
        render_documents("m.yaml", &text, None, &lead, false, |_| String::new())
            .unwrap_or_else(|e| panic!("{e:?}"))
            .into_iter()
            .skip(1)
            .map(|g| (g.cluster, g.path, g.path_chosen_by_hub))
            .collect()
    }

    #[test]
    fn a_burst_is_printed_for_each_path_only_when_the_hub_may_choose_either() {
        let once = |path| vec![("a".to_string(), Some(path), false)];
        assert_eq!(
            parts("        - {name: x, size: 1, cluster: a, relay: false}\n"),
            once("Direct")
        );
        assert_eq!(
            parts("        - {name: x, size: 1, cluster: a, relay: true}\n"),
            once("Relay")
        );
        assert_eq!(
            parts("        - {name: x, size: 1, cluster: a}\n"),
            [
                ("a".to_string(), Some("Direct"), true),
                ("a".to_string(), Some("Relay"), true)
            ]
        );
        // A name that leaves no room for a relay Service: only direct.
        let long = "x".repeat(60);
        assert_eq!(
            parts(&format!(
                "        - {{name: {long}, size: 1, cluster: a}}\n"
            )),
            once("Direct")
        );
    }
}
