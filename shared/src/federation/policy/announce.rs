//! What a spoke announces to the hub of its policy's exceptions, and the hub's check of
//! what it receives (bounded: it crosses a trust line).

use super::{NamespaceRule, PolicyState};
use crate::federation::proto;
use crate::validate::{Exceptions, is_dns_label};

/// The most namespace rules a spoke may announce to the hub.
pub const MAX_ANNOUNCED_RULES: usize = 256;

/// What a spoke tells the hub of its policy (`WatchRequest.exceptions`): every namespace
/// rule, in order (the first match applies), with its exceptions. Empty when no rule lifts
/// anything (the same answer for every namespace: the baseline), so that editing such a
/// policy never reconnects the spoke, and unless the policy is valid.
pub fn announce(policy: &PolicyState) -> Vec<proto::NamespaceExceptions> {
    let PolicyState::Valid(p) = policy else {
        return Vec::new();
    };
    if p.namespaces
        .iter()
        .all(|r| r.allow.as_ref().is_none_or(Exceptions::is_empty))
    {
        return Vec::new();
    }
    p.namespaces
        .iter()
        .map(|rule| {
            let e = rule.allow.clone().unwrap_or_default();
            proto::NamespaceExceptions {
                namespace: rule.name.clone(),
                privileged: e.privileged,
                capabilities: e.capabilities,
                host_namespaces: e.host_namespaces,
                host_paths: e.host_paths,
                service_accounts: e.service_accounts,
                secrets: e.secrets,
                config_maps: e.config_maps,
                tolerations: e.tolerations,
                runtime_classes: e.runtime_classes,
                schedulers: e.schedulers,
                resources: e.resources.into_iter().collect(),
            }
        })
        .collect()
}

/// The exceptions a spoke announced, as the hub keeps them: checked and bounded, for
/// [`Announced::for_namespace`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Announced(Vec<NamespaceRule>);

impl Announced {
    /// Checks what a spoke sent: at most [`MAX_ANNOUNCED_RULES`] rules, each a namespace
    /// name or prefix and well-formed exceptions. The error names the entry.
    pub fn from_proto(rules: &[proto::NamespaceExceptions]) -> Result<Announced, String> {
        if rules.len() > MAX_ANNOUNCED_RULES {
            return Err(format!(
                "exceptions: {} namespace rules, at most {MAX_ANNOUNCED_RULES}",
                rules.len()
            ));
        }
        let mut out = Vec::with_capacity(rules.len());
        for (i, r) in rules.iter().enumerate() {
            let allow = Exceptions {
                privileged: r.privileged,
                capabilities: r.capabilities.clone(),
                host_namespaces: r.host_namespaces,
                host_paths: r.host_paths.clone(),
                service_accounts: r.service_accounts.clone(),
                secrets: r.secrets.clone(),
                config_maps: r.config_maps.clone(),
                tolerations: r.tolerations.clone(),
                runtime_classes: r.runtime_classes.clone(),
                schedulers: r.schedulers.clone(),
                resources: r
                    .resources
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            };
            let rule = NamespaceRule {
                name: r.namespace.clone(),
                pod_security: None,
                allow: (!allow.is_empty()).then_some(allow),
            };
            // The policy's own checks of a name and of exceptions (not the Pod Security
            // coherence: the spoke's level is its own business).
            let base = rule.name.strip_suffix('*').unwrap_or(&rule.name);
            let name_ok = is_dns_label(&rule.name)
                || (rule.name.ends_with('*')
                    && base.len() < 63
                    && base
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
            if !name_ok {
                return Err(format!(
                    "exceptions[{i}].namespace: {:?} is neither a namespace name nor a prefix followed by *",
                    rule.name
                ));
            }
            if let Some(allow) = &rule.allow
                && let Err((field, why)) = allow.check()
            {
                return Err(format!("exceptions[{i}].{field}: {why}"));
            }
            out.push(rule);
        }
        Ok(Announced(out))
    }

    /// What bursts in `namespace` may have beyond the baseline at that spoke.
    pub fn for_namespace(&self, namespace: &str) -> Exceptions {
        self.0
            .iter()
            .find(|r| r.matches(namespace))
            .and_then(|r| r.allow.clone())
            .unwrap_or_default()
    }
}
