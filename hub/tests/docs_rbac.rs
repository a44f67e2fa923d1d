//! The RBAC tables users read (`docs/operations.md`) say exactly what the hub and the spoke
//! are granted: each table equals the permission list the install manifests are checked
//! against (`deploy_manifests.rs`, `deploy_spoke_manifests.rs`), so a permission added to
//! the code without the docs, or the other way round, fails here.

use std::collections::BTreeSet;

use flux_hub::controller::permissions;
use flux_shared::federation::spoke_rbac;

const DOC: &str = "docs/operations.md";

/// (API group, resource, verbs) as a set, for comparing without caring about order.
type Rules = BTreeSet<(String, String, BTreeSet<String>)>;

fn doc() -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(DOC);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The rows of the table directly under the heading `heading` (a whole line).
fn table(doc: &str, heading: &str) -> Rules {
    let after = doc
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("{DOC} has no heading {heading:?}"))
        .1;
    let rows: Vec<&str> = after
        .lines()
        .skip_while(|l| l.trim().is_empty())
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(
        rows.len() > 2 && rows[0].contains("| API group | Resource | Verbs |"),
        "{heading}: a table `| API group | Resource | Verbs | For |` must follow it"
    );
    rows[2..]
        .iter()
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            assert!(cells.len() >= 5, "{heading}: a row of four cells: {row}");
            let group = match cells[1] {
                "core" => String::new(),
                g => g.trim_matches('`').to_string(),
            };
            let resource = cells[2].trim_matches('`').to_string();
            let verbs = cells[3].split(',').map(|v| v.trim().to_string()).collect();
            (group, resource, verbs)
        })
        .collect()
}

fn rules<'a>(list: impl IntoIterator<Item = (&'a str, &'a str, &'a [&'a str])>) -> Rules {
    list.into_iter()
        .map(|(g, r, v)| {
            (
                g.to_string(),
                r.to_string(),
                v.iter().map(|s| s.to_string()).collect(),
            )
        })
        .collect()
}

fn hub(own_namespace_only: bool) -> Rules {
    rules(
        permissions::REQUIRED
            .iter()
            .filter(|p| p.own_namespace_only == own_namespace_only)
            .map(|p| (p.group, p.resource, p.verbs)),
    )
}

#[test]
fn the_hubs_rbac_tables_are_its_permissions() {
    let doc = doc();
    assert_eq!(
        table(&doc, "### Hub: cluster-wide (ClusterRole `flux-hub`)"),
        hub(false)
    );
    assert_eq!(
        table(
            &doc,
            "### Hub: leader election (Role `flux-hub-leader-election` in `flux-operator-system`)"
        ),
        hub(true)
    );
}

#[test]
fn the_spokes_rbac_tables_are_its_permissions() {
    let doc = doc();
    assert_eq!(
        table(&doc, "### Spoke (Role and ClusterRole `flux-spoke`)"),
        rules(spoke_rbac::REQUIRED.iter().copied())
    );
    assert_eq!(
        table(
            &doc,
            "### Spoke: its policy (Role `flux-spoke-policy` in `flux-spoke-system`)"
        ),
        rules(spoke_rbac::POLICY_PERMISSIONS.iter().copied())
    );
    assert_eq!(
        table(&doc, "### Spoke: its room (ClusterRole `flux-spoke-room`)"),
        rules(spoke_rbac::ROOM_PERMISSIONS.iter().copied())
    );
}

#[test]
fn a_changed_row_is_noticed() {
    // The comparison can fail: a verb dropped from a row makes the table differ.
    let doc = doc().replacen(
        "| get, list, watch, create, patch |",
        "| get, list, watch |",
        1,
    );
    assert_ne!(
        table(&doc, "### Hub: cluster-wide (ClusterRole `flux-hub`)"),
        hub(false)
    );
}
