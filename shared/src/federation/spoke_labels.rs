//! A spoke's labels: what the root's owner says of a burst cluster (region, cost tier,
//! ...), which a burst's `candidates` select spokes by (`matchLabels`).
//!
//! They are decided in the root, not by the spoke: `flux-hub join --label KEY=VALUE`
//! grants them at the hub, which keeps them in the ConfigMap [`GRANTED_LABELS_CONFIGMAP`]
//! of its namespace (one key per spoke, its labels as [`render_granted`] writes them;
//! the root's owner may edit it). The spoke also has them (`flux-spoke run --label`) and
//! announces them when it connects (`WatchRequest.labels`); a label it announces that the
//! root did not grant is ignored, and reported ([`ungranted`]), so that whoever owns a
//! burst cluster cannot claim a label to draw other tenants' bursts (and their CURVE
//! certificates) to it.

use std::collections::BTreeMap;

use crate::validate::{is_label_key, is_label_value};

/// The most labels a spoke may have.
pub const MAX_LABELS: usize = 32;

/// Checks a spoke's labels: at most [`MAX_LABELS`], each a valid Kubernetes label key and
/// value. The error names the label and the rule.
pub fn check(labels: &BTreeMap<String, String>) -> Result<(), String> {
    if labels.len() > MAX_LABELS {
        return Err(format!(
            "labels: {} given, at most {MAX_LABELS}",
            labels.len()
        ));
    }
    for (k, v) in labels {
        if !is_label_key(k) {
            return Err(format!(
                "label {k:?}: not a label key (an optional DNS prefix and '/', then at most 63 alphanumerics, '-', '_' or '.')"
            ));
        }
        if !is_label_value(v) {
            return Err(format!(
                "label {k}={v:?}: not a label value (at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric)"
            ));
        }
    }
    Ok(())
}

/// Parses `KEY=VALUE` (a command-line flag) into a label.
pub fn parse_flag(flag: &str) -> Result<(String, String), String> {
    let (k, v) = flag
        .split_once('=')
        .ok_or_else(|| format!("--label {flag:?}: expected KEY=VALUE"))?;
    let one = BTreeMap::from([(k.to_string(), v.to_string())]);
    check(&one).map_err(|e| format!("--label {flag:?}: {e}"))?;
    Ok((k.to_string(), v.to_string()))
}

/// The ConfigMap, in the hub's namespace, of the labels the root's owner granted each
/// spoke: its keys are spoke names, its values [`render_granted`] labels.
pub const GRANTED_LABELS_CONFIGMAP: &str = "flux-hub-spoke-labels";

/// The labels of a [`GRANTED_LABELS_CONFIGMAP`] value: `KEY=VALUE` pairs separated by
/// commas (spaces around them ignored; empty: none), checked as [`check`] does. The error
/// names the pair and the rule.
pub fn parse_granted(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?}: expected KEY=VALUE"))?;
        if labels.insert(k.to_string(), v.to_string()).is_some() {
            return Err(format!("label {k}: given twice"));
        }
    }
    check(&labels)?;
    Ok(labels)
}

/// `labels` as a [`GRANTED_LABELS_CONFIGMAP`] value: `KEY=VALUE` pairs in key order,
/// separated by commas.
pub fn render_granted(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The labels a spoke announced (`announced`) that the root did not grant it (`granted`):
/// a key it was not given, or another value than the one given.
pub fn ungranted(
    announced: &BTreeMap<String, String>,
    granted: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    announced
        .iter()
        .filter(|(k, v)| granted.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_checked_by_the_kubernetes_rules_and_bounded() {
        assert_eq!(
            parse_flag("topology.kubernetes.io/region=us-east1"),
            Ok(("topology.kubernetes.io/region".into(), "us-east1".into()))
        );
        assert_eq!(parse_flag("tier="), Ok(("tier".into(), String::new())));
        for bad in ["tier", "=x", "-a=b", "a=-b", "a=b c", "Bad_/x=y"] {
            assert!(parse_flag(bad).is_err(), "{bad}");
        }
        let many: BTreeMap<String, String> = (0..=MAX_LABELS)
            .map(|i| (format!("k{i}"), "v".into()))
            .collect();
        assert!(check(&many).unwrap_err().starts_with("labels: 33 given"));
    }

    #[test]
    fn granted_labels_read_back_as_written_and_bad_ones_are_named() {
        let labels: BTreeMap<String, String> = [("region", "west"), ("tier", "gold")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(render_granted(&labels), "region=west,tier=gold");
        assert_eq!(parse_granted("region=west,tier=gold"), Ok(labels.clone()));
        assert_eq!(
            parse_granted(" tier=gold , region=west ,"),
            Ok(labels.clone())
        );
        assert_eq!(parse_granted(""), Ok(BTreeMap::new()));
        assert_eq!(
            parse_granted("tier"),
            Err("\"tier\": expected KEY=VALUE".into())
        );
        assert_eq!(
            parse_granted("tier=a,tier=b"),
            Err("label tier: given twice".into())
        );
        assert!(
            parse_granted("tier=-x")
                .unwrap_err()
                .contains("not a label value")
        );
        let announced: BTreeMap<String, String> =
            [("region", "west"), ("tier", "platinum"), ("gpu", "a100")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let extra = ungranted(&announced, &labels);
        let extra: Vec<(&str, &str)> = extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(extra, [("gpu", "a100"), ("tier", "platinum")]);
    }
}
