//! Names and sizes: metadata, label keys, the size fields, and the pod hostnames that
//! the name and the largest size make up.

use crate::api::MiniClusterSpec;

use super::{Validator, is_dns_label};

impl Validator {
    pub(super) fn metadata(&mut self, name: &str, namespace: Option<&str>) {
        if name.is_empty() {
            self.err("metadata.name", "is required");
        } else {
            self.dns_label(name, "metadata.name");
        }
        if let Some(ns) = namespace {
            self.dns_label(ns, "metadata.namespace");
        }
    }

    pub(super) fn label_key(&mut self, key: &str, field: String) {
        check!(
            self,
            super::is_label_key(key),
            field,
            "must be a valid label key (optional DNS prefix and '/', then at most 63 alphanumerics, '-', '_' or '.')"
        );
    }

    pub(super) fn sizes(&mut self, name: &str, spec: &MiniClusterSpec) {
        check!(
            self,
            spec.size >= 1,
            "spec.size",
            format!("must be at least 1 (got {})", spec.size),
        );
        if let Some(max) = spec.max_size {
            check!(
                self,
                max >= spec.size,
                "spec.maxSize",
                format!(
                    "must be greater than or equal to spec.size ({max} < {})",
                    spec.size
                ),
            );
        }
        if let Some(min) = spec.min_size {
            check!(
                self,
                (1..=spec.size).contains(&min),
                "spec.minSize",
                format!(
                    "must be between 1 and spec.size ({}) (got {min})",
                    spec.size
                ),
            );
        }
        if let Some(tasks) = spec.tasks {
            check!(self, tasks >= 0, "spec.tasks", "must not be negative");
        }
        if let Some(limit) = spec.backoff_limit {
            check!(
                self,
                limit >= 0,
                "spec.backoffLimit",
                "must not be negative"
            );
        }
        if let Some(deadline) = spec.deadline_seconds {
            check!(
                self,
                deadline >= 1,
                "spec.deadlineSeconds",
                "must be at least 1"
            );
        }
        // Pod hostnames are `<name>-<index>` and must fit in a DNS label.
        if is_dns_label(name) && spec.max_size() >= 1 {
            let longest = format!("{name}-{}", spec.max_size() - 1);
            check!(
                self,
                longest.len() <= 63,
                "metadata.name",
                format!("is too long: pod hostname {longest:?} would exceed 63 characters"),
            );
        }
    }
}
