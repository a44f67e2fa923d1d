//! Validation of a MiniCluster: every problem at once, each naming the field and the rule.
//!
//! The CRD's CEL rules catch the common cross-field mistakes at `kubectl apply` time; this
//! module is the complete check that the planner relies on.

use crate::api::{MiniCluster, MiniClusterSpec};

/// Record a problem when `ok` is false; field and rule are only formatted on failure
/// (validation runs on every reconcile, so the passing path must not allocate).
macro_rules! check {
    ($v:expr, $ok:expr, $field:expr, $rule:expr $(,)?) => {
        if !$ok {
            $v.err($field, $rule);
        }
    };
}

pub mod author_rules;
mod burst_exceptions;
mod burst_safety;
mod bursting;
mod containers;
mod error;
mod flux;
mod formats;
mod limits;
mod pod;
pub mod pod_security;
mod sizes;
mod volumes;

pub use author_rules::author_violations;
pub use burst_exceptions::{Exceptions, MAX_EXCEPTION_ENTRIES, liftable};
pub use burst_safety::{
    DEFAULT_SPOKE_NAMESPACE, describe_violations, unsafe_burst, unsafe_burst_except,
};
pub use error::{FieldError, ValidationErrors};
pub use formats::{
    configmap_location, is_dns_label, is_dns_subdomain, is_fsd, is_host_address, is_label_key,
    is_label_value,
};
pub use limits::check_host_count;

/// Check a MiniCluster; `Ok` means the planner and renderer can run without surprises.
pub fn validate(mc: &MiniCluster) -> Result<(), ValidationErrors> {
    validate_hosts(mc).map(drop)
}

/// Validate, and hand the planner the rank-ordered host list computed on the way.
///
/// The host count is bounded first ([`check_host_count`], O(number of bursts)): every later
/// check, and the list returned, costs time and memory in proportion to it, so an absurd
/// size is refused here alone, before any host name exists.
pub(crate) fn validate_hosts(mc: &MiniCluster) -> Result<Vec<String>, ValidationErrors> {
    check_host_count(&mc.spec)?;
    let mut v = Validator::default();
    let name = mc.metadata.name.as_deref().unwrap_or("");
    v.metadata(name, mc.metadata.namespace.as_deref());
    v.spec(name, &mc.spec);
    match v.hosts.take() {
        Some(hosts) if v.errors.is_empty() => Ok(hosts),
        _ if v.errors.is_empty() => Err(ValidationErrors::single(
            "spec.flux.bursting.hostlist",
            "does not describe any host",
        )),
        _ => Err(ValidationErrors(v.errors)),
    }
}

#[derive(Default)]
struct Validator {
    errors: Vec<FieldError>,
    /// The instance's hosts in rank order, once computed.
    hosts: Option<Vec<String>>,
}

impl Validator {
    fn err(&mut self, field: impl Into<String>, rule: impl Into<String>) {
        self.errors.push(FieldError {
            field: field.into(),
            rule: rule.into(),
        });
    }

    fn dns_label(&mut self, value: &str, field: impl Into<String>) {
        check!(
            self,
            is_dns_label(value),
            field,
            format!(
                "{value:?} must be a DNS-1123 label: at most 63 lowercase letters, digits or '-', starting and ending with a letter or digit"
            ),
        );
    }

    fn spec(&mut self, name: &str, spec: &MiniClusterSpec) {
        self.sizes(name, spec);
        self.containers(name, spec);
        self.services(spec);
        self.flux(name, spec);
        self.pod(spec);
        if let Some(path) = spec.archive.as_ref().and_then(|a| a.path.as_deref()) {
            check!(
                self,
                path.starts_with('/'),
                "spec.archive.path",
                "must be an absolute path",
            );
        }
        for key in spec.job_labels.keys() {
            self.label_key(key, format!("spec.jobLabels[{key:?}]"));
        }
    }
}
