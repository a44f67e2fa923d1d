//! Ceilings on how many brokers a MiniCluster may declare, checked before any host name
//! is built: the rest of validation and the planner spend memory and time in proportion
//! to the host count, so an absurd `maxSize` must be refused in O(number of bursts).
//! Why the numbers are what they are: `docs/limits.md`.

use crate::api::{MAX_BROKERS, MiniClusterSpec};
use crate::hostlist;

use super::error::{FieldError, ValidationErrors};

/// The rule every size error carries, naming the limit and where it is explained.
fn above(value: i64) -> String {
    format!("{value} is above the limit of {MAX_BROKERS} brokers per MiniCluster (docs/limits.md)")
}

/// Check every size field against [`MAX_BROKERS`], and the total host count the instance
/// would declare, without building any host name. `Err` lists every field over the limit.
pub fn check_host_count(spec: &MiniClusterSpec) -> Result<(), ValidationErrors> {
    let mut errors = Vec::new();
    let mut field = |value: i32, name: String| {
        if value > MAX_BROKERS {
            errors.push(FieldError {
                field: name,
                rule: above(value.into()),
            });
        }
    };
    field(spec.size, "spec.size".into());
    if let Some(max) = spec.max_size {
        field(max, "spec.maxSize".into());
    }
    if let Some(min) = spec.min_size {
        field(min, "spec.minSize".into());
    }
    let flux = spec.flux();
    let lead_field = if flux.lead_broker.is_some() {
        "spec.flux.leadBroker.size"
    } else {
        "spec.flux.bursting.leadBroker.size"
    };
    let lead_size = spec.lead_broker().map(|l| l.size);
    if let Some(size) = lead_size {
        field(size, lead_field.into());
    }
    let clusters = flux
        .bursting
        .as_ref()
        .map(|b| b.clusters.as_slice())
        .unwrap_or_default();
    // Widened: the sum of many i32 fields must not overflow before it is compared.
    let mut total = i64::from(lead_size.unwrap_or_else(|| spec.max_size()).max(0));
    for (i, c) in clusters.iter().enumerate() {
        let prefix = format!("spec.flux.bursting.clusters[{i}]");
        for (value, name) in [
            (c.size, "size"),
            (c.max_size, "maxSize"),
            (c.min_size, "minSize"),
        ] {
            if let Some(v) = value {
                field(v, format!("{prefix}.{name}"));
            }
        }
        // The burst's declared hosts, as `ResolvedBurst` defaults them.
        let declared = c.max_size.or(c.size).unwrap_or(spec.size);
        total += i64::from(declared.max(0));
    }
    if let Some(custom) = spec.custom_hostlist() {
        // A verbatim hostlist replaces the generated one; count it without expanding.
        let from_bursting = flux
            .bursting
            .as_ref()
            .and_then(|b| b.hostlist.as_deref())
            .is_some_and(|h| !h.is_empty());
        let field = if from_bursting {
            "spec.flux.bursting.hostlist".to_string()
        } else {
            lead_field.replace(".size", ".hostlist")
        };
        match hostlist::count(custom) {
            Ok(n) if n > MAX_BROKERS as usize => errors.push(FieldError {
                field,
                rule: format!("lists {}", above(i64::try_from(n).unwrap_or(i64::MAX))),
            }),
            Ok(_) => {}
            Err(e) => errors.push(FieldError {
                field,
                rule: e.to_string(),
            }),
        }
    } else if total > i64::from(MAX_BROKERS) && errors.is_empty() {
        // Only when no single field is over: the per-field errors already say it better.
        let what = if lead_size.is_some() {
            "the lead's leadBroker.size"
        } else {
            "spec.maxSize"
        };
        errors.push(FieldError {
            field: "spec.flux.bursting.clusters".into(),
            rule: format!(
                "the instance declares {total} hosts in total ({what} plus every burst's maxSize): {}",
                above(total)
            ),
        });
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ValidationErrors(errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> MiniClusterSpec {
        serde_yaml_ng::from_str(yaml).expect("test spec parses")
    }

    fn fields(yaml: &str) -> Vec<String> {
        match check_host_count(&spec(yaml)) {
            Ok(()) => Vec::new(),
            Err(e) => e.0.into_iter().map(|f| f.field).collect(),
        }
    }

    #[test]
    fn sizes_at_the_limit_pass() {
        assert_eq!(
            fields("{size: 1, maxSize: 16384, containers: [{image: a}]}"),
            Vec::<String>::new()
        );
        assert_eq!(
            fields(
                "{size: 1, maxSize: 8192, containers: [{image: a}], flux: {bursting: {clusters: [{name: b, size: 0, maxSize: 8192}]}}}"
            ),
            Vec::<String>::new()
        );
    }

    #[test]
    fn every_size_field_over_the_limit_is_named() {
        assert_eq!(
            fields("{size: 16385, containers: [{image: a}]}"),
            ["spec.size"]
        );
        assert_eq!(
            fields("{size: 1, maxSize: 10000000, containers: [{image: a}]}"),
            ["spec.maxSize"]
        );
        assert_eq!(
            fields(
                "{size: 1, containers: [{image: a}], flux: {bursting: {clusters: [{name: b, size: 10000000, maxSize: 10000000, minSize: 20000}]}}}"
            ),
            [
                "spec.flux.bursting.clusters[0].size",
                "spec.flux.bursting.clusters[0].maxSize",
                "spec.flux.bursting.clusters[0].minSize"
            ]
        );
        assert_eq!(
            fields(
                "{size: 1, containers: [{image: a}], flux: {leadBroker: {name: l, address: x, size: 20000}, bursting: {clusters: [{name: m, size: 1}]}}}"
            ),
            ["spec.flux.leadBroker.size"]
        );
    }

    #[test]
    fn the_total_of_root_and_bursts_is_bounded() {
        let err = check_host_count(&spec(
            "{size: 1, maxSize: 10000, containers: [{image: a}], flux: {bursting: {clusters: [{name: b, size: 10000}]}}}",
        ))
        .expect_err("20000 hosts in total");
        assert_eq!(err.0.len(), 1);
        assert_eq!(err.0[0].field, "spec.flux.bursting.clusters");
        assert!(err.0[0].rule.contains("20000 hosts in total"), "{err}");
        assert!(err.0[0].rule.contains("limit of 16384"), "{err}");
        // A burst without size or maxSize declares the MiniCluster's size.
        assert_eq!(
            fields(
                "{size: 9000, containers: [{image: a}], flux: {bursting: {clusters: [{name: b}]}}}"
            ),
            ["spec.flux.bursting.clusters"]
        );
    }

    #[test]
    fn many_bursts_cannot_overflow_the_total() {
        let clusters: Vec<String> = (0..300)
            .map(|i| format!("{{name: b{i}, size: 16384}}"))
            .collect();
        let yaml = format!(
            "{{size: 16384, containers: [{{image: a}}], flux: {{bursting: {{clusters: [{}]}}}}}}",
            clusters.join(", ")
        );
        assert_eq!(fields(&yaml), ["spec.flux.bursting.clusters"]);
    }

    #[test]
    fn a_verbatim_hostlist_is_counted_not_expanded() {
        assert_eq!(
            fields(
                "{size: 1, containers: [{image: a}], flux: {bursting: {hostlist: 'n-[0-999999]'}}}"
            ),
            ["spec.flux.bursting.hostlist"]
        );
        assert_eq!(
            fields(
                "{size: 1, containers: [{image: a}], flux: {bursting: {hostlist: 'n-[0-16383]'}}}"
            ),
            Vec::<String>::new()
        );
        // Past the hostlist parser's own ceiling: its error, still without expanding.
        assert_eq!(
            fields(
                "{size: 1, containers: [{image: a}], flux: {bursting: {hostlist: 'n-[0-99999999]'}}}"
            ),
            ["spec.flux.bursting.hostlist"]
        );
    }
}
