//! Liveness and readiness of a controller process, answered on `/healthz` and `/readyz`.

use std::sync::atomic::{AtomicBool, Ordering};

/// Liveness and readiness flags, shared (behind an `Arc`) between the controller, which
/// sets them, and the HTTP server, which reports them.
///
/// - Alive (`/healthz`): true from creation while the process runs its loops; the
///   controller clears it with [`Health::set_alive`] if a loop stops for good, so that the
///   kubelet restarts the pod.
/// - Ready (`/readyz`): false at first; the hub sets it once its caches are synced and,
///   with leader election, once leadership is known; the spoke once it has applied its
///   first snapshot.
#[derive(Debug)]
pub struct Health {
    alive: AtomicBool,
    ready: AtomicBool,
}

impl Health {
    /// Alive and not ready.
    pub fn new() -> Health {
        Health {
            alive: AtomicBool::new(true),
            ready: AtomicBool::new(false),
        }
    }

    /// Whether the process still runs its loops.
    pub fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Records whether the process still runs its loops.
    pub fn set_alive(&self, alive: bool) {
        self.alive.store(alive, Ordering::Release);
    }

    /// Whether the process is ready (the hub: caches synced and leadership known; the spoke:
    /// first snapshot applied).
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Records whether the process is ready.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }
}

impl Default for Health {
    fn default() -> Health {
        Health::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_alive_and_not_ready() {
        let h = Health::default();
        assert!(h.alive());
        assert!(!h.ready());
        h.set_ready(true);
        assert!(h.ready());
        h.set_alive(false);
        assert!(!h.alive());
    }
}
