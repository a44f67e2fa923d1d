//! A spoke's labels: what its owner or the hub's admin says of its cluster (region, cost
//! tier, ...), which a burst's `candidates` select spokes by (`matchLabels`). Set on the
//! spoke (`flux-spoke run --label KEY=VALUE`, written by `flux-hub join --label`) and sent
//! to the hub when it connects (`WatchRequest.labels`).

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
}
