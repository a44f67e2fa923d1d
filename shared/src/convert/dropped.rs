//! v1alpha1 features v1alpha2 dropped altogether: `spec.users` and the built-in Flux
//! RESTful API server (`spec.fluxRestful`), reported as losses with what to do instead.

use super::containers::Runner;
use super::fields::{RESTFUL_KEYS, USER_KEYS};
use super::input::{Cx, Obj, object};

/// `spec.users`: type-checked, and a loss when any user is listed.
pub(super) fn users(cx: &mut Cx, s: &Obj<'_>) {
    let Some(list) = s.array(cx, "users") else {
        return;
    };
    for (i, value) in list.iter().enumerate() {
        let path = format!("spec.users[{i}]");
        if let Some(u) = object(cx, value, &path, USER_KEYS) {
            if u.text(cx, "name").is_none() {
                cx.err(u.at("name"), "is required");
            }
            let _ = u.string(cx, "password");
        }
    }
    if !list.is_empty() {
        cx.lose(
            "spec.users",
            "v1alpha2 runs a single-user Flux instance (no extra Linux users, munge or flux-accounting database): control who may use the MiniCluster with Kubernetes RBAC and namespaces, or run the Flux RESTful API as a sidecar container with its own users",
        );
    }
}

/// `spec.fluxRestful` and the built-in RESTful API server v1alpha1 started without a command.
pub(super) fn restful(
    cx: &mut Cx,
    s: &Obj<'_>,
    runner: &Runner,
    interactive: bool,
    runner_index: Option<usize>,
) {
    let mut settings = false;
    if let Some(r) = s.object(cx, "fluxRestful", "spec.fluxRestful", RESTFUL_KEYS) {
        for key in ["branch", "secretKey", "username", "token"] {
            settings |= r.text(cx, key).is_some();
        }
        settings |= r.int32(cx, "port").is_some_and(|p| p != 0);
    }
    let server =
        runner_index.is_some() && !runner.has_command && !interactive && !runner.diagnostics;
    if server {
        let with = if settings {
            ", passing it the branch, port and credentials of spec.fluxRestful through that container's environment"
        } else {
            ""
        };
        cx.lose(
            "spec.fluxRestful",
            format!(
                "without a command v1alpha1 ran the built-in Flux RESTful API server; v1alpha2 has none and keeps an interactive instance up instead: run the RESTful API (ghcr.io/flux-framework/flux-restful-api) as a sidecar container next to the broker{with}, or give the flux container a command"
            ),
        );
    } else if settings {
        cx.note(
            "spec.fluxRestful",
            "dropped: v1alpha1 only used it to start the RESTful API server, which it did not start for this MiniCluster (it has a command, is interactive or runs diagnostics)",
        );
    }
}
