//! Process signals that ask a controller to stop.

/// Resolves when the process receives SIGTERM (what the kubelet sends when it stops the
/// pod) or SIGINT (Ctrl-C). If a handler cannot be installed, that signal is logged and
/// ignored: this never resolves because of an error.
pub async fn signal() {
    let ctrl_c = async {
        match tokio::signal::ctrl_c().await {
            Ok(()) => tracing::info!(signal = "SIGINT", "shutting down"),
            Err(error) => {
                tracing::warn!(%error, "cannot listen for Ctrl-C");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = terminate() => {}
    }
}

#[cfg(unix)]
async fn terminate() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut sigterm) => {
            sigterm.recv().await;
            tracing::info!(signal = "SIGTERM", "shutting down");
        }
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM");
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(not(unix))]
async fn terminate() {
    std::future::pending::<()>().await;
}
