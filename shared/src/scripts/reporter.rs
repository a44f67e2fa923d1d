//! The queue reporter of a root instance that declares bursts (its Python source is
//! `reporter.py`, beside this file).

use crate::layout;
use crate::plan::{Plan, Target};

use super::CURVE_DIR_ENV;
use super::program::qualified_name;
use super::shell::one_line;

/// Prefix of the bearer token of the queue reporter: the token is the SHA-256 (hex) of
/// this and the instance's CURVE certificate, so whoever can read the certificate (and
/// could join the instance anyway) can read the queue, and nobody else.
pub const REPORTER_TOKEN_CONTEXT: &[u8] = b"flux-operator reporter\0";

/// The queue reporter's source, with `__NAME__`-style placeholders.
const REPORTER_PY: &str = include_str!("reporter.py");

/// Whether `target`'s lead broker runs the queue reporter: the root of an instance that
/// declares bursts. The ConfigMap's key, the pod's volume item and the entrypoint's line
/// all ask this one question, so none can be left out without the others.
pub fn serves_reporter(plan: &Plan, target: &Target) -> bool {
    target.is_root() && plan.spec.is_bursting_root()
}

/// The queue reporter (ConfigMap key [`layout::REPORTER_SCRIPT_KEY`]) of a root instance
/// that declares bursts ([`crate::api::MiniClusterSpec::is_bursting_root`]); `None`
/// otherwise. The hub reads it to size bursts on demand (`autoscale`), to tell when a
/// burst's brokers joined the instance, and whether a silent cluster's ranks are down.
///
/// The lead broker's entrypoint runs it with `flux python` next to the broker. It serves
/// one read-only document, `GET /v1/queue` on port [`crate::api::defaults::REPORTER_PORT`]
/// with `Authorization: Bearer <token>` ([`REPORTER_TOKEN_CONTEXT`]): every host's rank,
/// whether its broker is online, drained and allocated, and every pending job with the
/// nodes it asks for and when it was submitted. It changes nothing in the instance.
pub fn reporter_script(plan: &Plan, target: &Target) -> Option<String> {
    if !serves_reporter(plan, target) {
        return None;
    }
    let context = String::from_utf8_lossy(REPORTER_TOKEN_CONTEXT).replace('\0', "\\0");
    // Placeholders rather than format! braces: reporter.py stays plain Python.
    Some(
        REPORTER_PY
            .replace("__PORT__", &crate::api::defaults::REPORTER_PORT.to_string())
            .replace("__CURVE_ENV__", CURVE_DIR_ENV)
            .replace("__CURVE_MOUNT__", layout::CURVE_MOUNT)
            .replace("__CURVE_KEY__", layout::CURVE_KEY)
            .replace("__CONTEXT__", &context)
            // Last: the name is the only value a user chose.
            .replace("__NAME__", &one_line(&qualified_name(plan))),
    )
}
