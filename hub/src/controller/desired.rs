//! Stages "validate" and "desired": the spec planned at its effective size (the
//! elasticity rules of [`flux_shared::elasticity`]), or why it is not applied; then the
//! MiniCluster's CURVE certificate (found in the cache, or generated once) and every
//! object the plan renders for the root cluster. (Both are skipped when the last pass's
//! objects still hold: see `verified`.)

use flux_shared::api::MiniCluster;
use flux_shared::curve::CurveCert;
use flux_shared::elasticity;
use flux_shared::layout;
use flux_shared::plan::{Plan, Role};
use flux_shared::render::{self, Object};

use crate::controller::apply::ownership::{self, Holder};
use crate::controller::context::Context;
use crate::controller::status::Problem;
use crate::controller::watch::stores::get;

/// Why a MiniCluster's spec is not applied, and the host count its status then declares.
pub(in crate::controller) struct NotApplied {
    /// The problem, for the Degraded condition and its Event.
    pub problem: Problem,
    /// The `maximumSize` to keep showing (the frozen one, for a refused resize).
    pub declared_max: Option<i32>,
}

/// The plan of `mc`, or why it is not applied: a change the running brokers cannot
/// follow is refused (never half-applied); a spec that does not plan is invalid.
pub(in crate::controller) fn validate(mc: &MiniCluster) -> Result<Plan, NotApplied> {
    let effective = elasticity::effective(mc).map_err(|refusal| NotApplied {
        problem: Problem {
            reason: refusal.reason.to_string(),
            message: refusal.message,
            invalid: false,
        },
        declared_max: mc.status.as_ref().map(|s| s.maximum_size),
    })?;
    effective.plan().map_err(|errors| NotApplied {
        problem: Problem {
            reason: "InvalidSpec".into(),
            message: errors.to_string(),
            invalid: true,
        },
        declared_max: None,
    })
}

/// The objects of `plan`'s root role, with certificate `cert`.
pub(in crate::controller) fn desired(plan: &Plan, cert: &str) -> Vec<Object> {
    render::render(plan, &Role::Root, cert).unwrap_or_default()
}

/// The certificate in the MiniCluster's curve Secret, if the cache has one and it is the
/// MiniCluster's (someone else's key is never used: the apply refuses that name).
pub(in crate::controller) fn stored_certificate(
    ctx: &Context,
    ns: &str,
    name: &str,
    uid: &str,
) -> Option<String> {
    get(&ctx.stores.secrets, ns, &render::curve_secret_name(name))
        .filter(|s| ownership::holder(&s.metadata, uid) == Holder::Ours)
        .and_then(|s| s.data.as_ref()?.get(layout::CURVE_KEY).cloned())
        .and_then(|bytes| String::from_utf8(bytes.0).ok())
}

/// The MiniCluster's CURVE certificate: created once and reused forever. The Secret
/// cache is synced before the first reconcile, so after a hub restart the stored
/// certificate is always found.
pub(in crate::controller) fn certificate(ctx: &Context, ns: &str, name: &str, uid: &str) -> String {
    let key = flux_shared::federation::McKey::new(ns, name);
    let stored = stored_certificate(ctx, ns, name, uid);
    ctx.memory.with(&key, |m| match stored {
        Some(cert) => {
            m.generated_cert = None;
            cert
        }
        None => m
            .generated_cert
            .get_or_insert_with(|| CurveCert::generate(name).to_zcert())
            .clone(),
    })
}
