//! Process signals that ask a controller to stop.
//!
//! Tokio delivers a signal only to listeners that exist when it arrives, and once the
//! first listener is installed the signal no longer ends the process by default. A
//! controller that listens in several places, one after another, would lose a SIGTERM
//! that arrives between two of them and then never stop. [`Shutdown::listen`] installs
//! the handlers once, at start-up, and remembers the request for every later waiter.

use tokio::sync::watch;

/// A stop request (SIGTERM or SIGINT) observed from the moment [`Shutdown::listen`] ran,
/// that every clone sees, however late it starts waiting.
#[derive(Clone, Debug)]
pub struct Shutdown {
    requested: watch::Receiver<bool>,
}

impl Shutdown {
    /// Installs the SIGTERM and SIGINT handlers now and starts watching for either. Must
    /// be called inside a Tokio runtime. A handler that cannot be installed is logged and
    /// that signal ignored.
    pub fn listen() -> Self {
        let (tx, requested) = watch::channel(false);
        let signals = Signals::install();
        tokio::spawn(async move {
            signals.recv().await;
            tx.send_replace(true);
            // Keep the sender: receivers then never see a closed channel.
            std::future::pending::<()>().await;
        });
        Self { requested }
    }

    /// Whether a stop was requested already.
    pub fn is_requested(&self) -> bool {
        *self.requested.borrow()
    }

    /// Resolves once a stop is requested (at once if it already was).
    pub async fn requested(&self) {
        let mut requested = self.requested.clone();
        if requested.wait_for(|stop| *stop).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Resolves when the process receives SIGTERM (what the kubelet sends when it stops the
/// pod) or SIGINT (Ctrl-C) after this call's first poll. Prefer [`Shutdown`] wherever
/// a process listens more than once.
pub async fn signal() {
    Signals::install().recv().await;
}

/// The installed listeners; `None` where a handler could not be installed.
struct Signals {
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    #[cfg(unix)]
    fn install() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        let install = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(listener) => Some(listener),
            Err(error) => {
                tracing::warn!(%error, signal = name, "cannot listen for the signal");
                None
            }
        };
        Self {
            terminate: install(SignalKind::terminate(), "SIGTERM"),
            interrupt: install(SignalKind::interrupt(), "SIGINT"),
        }
    }

    #[cfg(not(unix))]
    fn install() -> Self {
        Self {}
    }

    #[cfg(unix)]
    async fn recv(mut self) {
        async fn next(listener: Option<&mut tokio::signal::unix::Signal>) {
            match listener {
                Some(listener) => {
                    listener.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = next(self.terminate.as_mut()) => tracing::info!(signal = "SIGTERM", "shutting down"),
            () = next(self.interrupt.as_mut()) => tracing::info!(signal = "SIGINT", "shutting down"),
        }
    }

    #[cfg(not(unix))]
    async fn recv(self) {
        match tokio::signal::ctrl_c().await {
            Ok(()) => tracing::info!(signal = "Ctrl-C", "shutting down"),
            Err(error) => {
                tracing::warn!(%error, "cannot listen for Ctrl-C");
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A SIGTERM that arrives while nobody is waiting is still seen by a waiter that
    /// starts later: the gap between two listeners that lost flux-hub's stop requests.
    #[tokio::test]
    async fn a_request_before_anyone_waits_is_not_lost() {
        let shutdown = Shutdown::listen();
        assert!(!shutdown.is_requested());
        let status = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let late = shutdown.clone();
        tokio::time::timeout(std::time::Duration::from_secs(10), late.requested())
            .await
            .expect("the earlier SIGTERM is remembered");
        assert!(shutdown.is_requested());
        // A second waiter, later still, returns at once.
        tokio::time::timeout(std::time::Duration::from_millis(100), shutdown.requested())
            .await
            .expect("still remembered");
    }
}
