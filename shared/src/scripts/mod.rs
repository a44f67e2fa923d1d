//! Entrypoint scripts of a broker pod: the flux view container's (or init container's)
//! script, the flux-running container's entrypoint, its drain hook, the queue reporter and the
//! sidecars' entrypoints.
//!
//! Every function here is pure: the same plan and target always give the same bytes.
//!
//! Shell safety: every user value that is data (paths, names, environment values,
//! the command) is emitted as a single-quoted shell word (or bare when it only holds
//! characters that are never special), so quotes, `$`, backticks or newlines in user
//! input cannot break or inject into a script. The main command keeps its documented
//! meaning of "split into words": it is split here, exactly like bash splits an unquoted
//! expansion on its default `IFS` (space, tab, newline) with globbing disabled, and each
//! word is emitted quoted. Shell syntax in it (`&&`, pipes, `$VAR`) is therefore never
//! interpreted; `commands.script` is the way to run shell logic. The `commands.*` hooks
//! are shell snippets by design and are inserted verbatim.
//!
//! Fixes relative to the reference operator's scripts:
//! - the init script takes every path from the [`crate::layout::Layout`] (the reference hard-coded
//!   `/mnt/flux/config`, breaking custom mount paths);
//! - failures of `flux start` are reflected in the container's exit status, with or
//!   without strict mode, and `commands.post` still runs;
//! - `--wrap` applies to every broker, not only the lead;
//! - the timed-mode check exits the script, not a subshell;
//! - `commands.script` is written with a quoted heredoc (no `$` expansion);
//! - sidecars wait for the broker's real socket with a plain bash loop;
//! - `-Stbon.fanout` is never passed (it silently overrides `tbon.topo`);
//! - the CURVE certificate is copied with `umask 077` and `chmod 600`.
//!
//! Decisions where the reference is silent:
//! - an absent command counts as interactive (`-Sbroker.rc2_none`, no initial program),
//!   so the instance stays up instead of running a shell on a missing TTY;
//!   `diagnostics` wins over `interactive`, which wins over `batch` and `launcher`;
//! - with `flux.completeWorkers` a worker does not restart its broker and exits 0 so
//!   its pod completes instead of being recreated, as documented;
//! - non-raw batch scripts end with `flux job wait --all` after the documented
//!   `flux queue idle` / `flux jobs -a`, so a failed job fails the batch job;
//! - the archive is restored on rank 0 only; it is saved with `flux dump` by the initial
//!   program once the command has finished (not for `diagnostics`, which never ends);
//! - `commands.script` goes to `/tmp/flux-operator-script-<index>.sh` on every broker
//!   (a job may run it anywhere) and runs directly when it has a `#!` line, else with
//!   bash; a sidecar's `commands.script` replaces its command;
//! - a sidecar's command is split into words like the main command;
//! - `<mount>/load-fluxion.sh` is written next to `flux-view.sh` / `flux-connect.sh`,
//!   as the scheduler documentation tells users to run it.
//!
//! For tests, the broker and init scripts honour two optional environment overrides:
//! `FLUX_OPERATOR_CONFIG_DIR` (default [`crate::layout::CONFIG_MOUNT`]) and
//! `FLUX_OPERATOR_CURVE_DIR` (default [`crate::layout::CURVE_MOUNT`]).
//!
//! Where each part lives: `view_container.rs` (with the plain shell file
//! `view_container.sh`: the view container beside the brokers), `init_container.rs` (the
//! copying init container), `broker.rs` (the flux-running container and its `-S`
//! attributes), `drain.rs` (with `drain.sh`), `reporter.rs` (with `reporter.py`) and
//! `sidecar.rs` are the scripts; `steps.rs` and `view_steps.rs` hold what they share,
//! `program.rs` what rank 0 runs, and `shell.rs` the emitting and quoting layer that the
//! safety argument above rests on.

mod broker;
mod drain;
mod init_container;
mod program;
mod reporter;
mod shell;
mod sidecar;
mod steps;
#[cfg(test)]
mod tests;
mod view_container;
mod view_steps;

pub use broker::{broker_attributes, broker_script};
pub use drain::drain_script;
pub use init_container::init_script;
pub use reporter::{REPORTER_TOKEN_CONTEXT, reporter_script, serves_reporter};
pub use sidecar::sidecar_script;
pub use view_container::view_container_script;

/// Where the flux view image keeps its spack view (one hash-named directory).
const VIEW_SOURCE: &str = "/opt/views/._view";

/// Seconds a container waits for the view container (its image may still be pulled), or
/// for the view it copies.
const VIEW_WAIT_SECONDS: u32 = 600;

/// Seconds a worker waits for the lead broker before starting anyway.
const LEAD_WAIT_SECONDS: u32 = 60;

/// Pause before a worker restarts a broker that failed.
const RESTART_PAUSE_SECONDS: u32 = 15;

/// Environment variable overriding [`crate::layout::CONFIG_MOUNT`] (tests only).
const CONFIG_DIR_ENV: &str = "FLUX_OPERATOR_CONFIG_DIR";

/// Environment variable overriding [`crate::layout::CURVE_MOUNT`] (tests only).
const CURVE_DIR_ENV: &str = "FLUX_OPERATOR_CURVE_DIR";

/// Commands of the `diagnostics` initial program.
const DIAGNOSTICS: &[&str] = &[
    "flux overlay status",
    "flux resource list",
    "flux lsattr -v",
    "flux module list",
    "flux dmesg",
    "sleep infinity",
];
