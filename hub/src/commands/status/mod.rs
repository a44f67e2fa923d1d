//! `flux-hub status`: the admin client. Shows every MiniCluster the hub manages, each of
//! its bursts with the spoke that runs it, and every spoke, from the hub's `Admin` gRPC
//! service.
//!
//! ```text
//! flux-hub status --hub https://hub.example.org:8443 \
//!     --ca ca.crt --cert admin-ops.crt --key admin-ops.key [-n NS] [--watch] [-o table|json]
//! ```
//!
//! The connection is mutual TLS with an admin client certificate (`flux-hub certs --admin
//! NAME`); the hub's certificate must name `--hub-domain` (default: the URL's host).
//! `--insecure` talks plaintext to a hub started with `--insecure` (development only),
//! naming the admin (`--admin-name`) in a request header.
//!
//! # Table output
//!
//! One row per MiniCluster (BURST `-`: the root instance, with its own phase and
//! brokers), followed by one row per burst:
//!
//! ```text
//! NAMESPACE  MINICLUSTER  BURST      SPOKE  CONNECTED  PHASE    READY  JOINED  SIZE  MAX  PATH    LEAD             VERSION  LAST SEEN  AGE  MESSAGE
//! hpc        bursty       -          -      -          Running  2      -       2     -    -       192.0.2.1:30093  -        -          3h
//! hpc        bursty       burst-gke  gke    yes        Running  4      4       4     8    Direct  192.0.2.1:30093  3/3      12s        3h
//! ```
//!
//! PHASE is a burst's phase in the MiniCluster's status (`Joining` until the lead broker
//! sees one of its brokers online; the spoke's report before the hub wrote one), READY
//! counts the brokers ready, JOINED a burst's brokers the lead broker sees online (`-`
//! before the hub read the lead's view), SIZE those the instance or burst should run, MAX
//! the most a burst can grow to (its `maxSize`), PATH how its brokers reach the lead
//! (`Direct`, `Relay`; `-` before the hub chose), LEAD where burst brokers reach the lead
//! broker (`-` until known), VERSION the spoke's observed / the hub's assigned snapshot
//! version, LAST SEEN the time since the spoke last reported on the burst (`never` before
//! its first report),
//! AGE the time since the MiniCluster was created.
//! A second table lists the spokes: NAME, CONNECTED, LAST SEEN, VERSION
//! (acknowledged/current), ASSIGNMENTS, SPOKE VERSION, CLUSTER (`ok`, or since when and why
//! the spoke cannot reach its own cluster's API server).
//!
//! # JSON output
//!
//! A [`StatusView`]: a stable structure of this command (camelCase field names, documented
//! on the types of [`view`](mod@view)), not the wire messages, so that scripts do not
//! break when the protocol grows. `schemaVersion` changes only on incompatible changes;
//! new fields may appear at any time. Timestamps are Unix milliseconds, `null` when never. Without
//! `--watch` the document is pretty-printed; with `--watch` every snapshot is one compact
//! document on its own line (JSON Lines).
//!
//! # Watching
//!
//! `--watch` opens `WatchMiniClusters` and prints again after every change (the hub's
//! heartbeats, which resend the same version, print nothing). In table mode a terminal is
//! cleared and redrawn; otherwise each snapshot follows a separator line with the time,
//! the hub epoch and the version. When the stream breaks (hub restart, network), the
//! command reconnects with backoff; refusals (certificate, permissions) end it.
//!
//! # Exit status
//!
//! 0 on success, 1 on any error, with a message saying what to do: the hub cannot be
//! reached, the certificate was refused (an admin certificate is needed), a PEM file is
//! missing or invalid (naming the file).
//!
//! # Layout
//!
//! * [`view`](mod@view): the view model, what is shown ([`StatusView`], also the JSON
//!   document);
//! * [`output`]: the tables, the JSON text, and framing `--watch` snapshots;
//! * [`crate::commands::admin_client`]: dialing the hub with the admin certificate, the calls, what
//!   failures mean; reconnecting a broken `--watch` is here.

use std::io::{IsTerminal as _, Write};
use std::process::ExitCode;
use std::time::Duration;

use backon::{BackoffBuilder as _, ExponentialBackoff, ExponentialBuilder};
use flux_shared::federation::proto::WatchMiniClustersRequest;

pub mod output;
#[cfg(test)]
mod sample;
pub mod view;

use crate::commands::Format;
use crate::commands::admin_client::{AdminError, Client, HubEndpoint, HubOptions};
use output::Printer;
pub use output::{age, json, table, utc, watch_separator};
pub use view::{
    BurstRow, ConditionView, EndpointView, MiniClusterView, SCHEMA_VERSION, SpokeView, StatusView,
    burst_phase_name, view,
};

/// Options of `flux-hub status`.
#[derive(clap::Args, Debug, Clone)]
pub struct StatusOptions {
    /// How to reach the hub.
    #[command(flatten)]
    pub connection: HubOptions,
    /// Only MiniClusters in this namespace (default: every namespace).
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Keep running and print again after every change.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Output format: tables (MiniClusters and bursts, then spokes), or the
    /// [`StatusView`] as JSON (with --watch: one compact document per line) or YAML (with
    /// --watch: one document per snapshot, each after `---`).
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Format,
}

/// First `--watch` reconnect delay.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Largest `--watch` reconnect delay.
const MAX_RETRY: Duration = Duration::from_secs(30);

/// The `--watch` reconnect delays: 1 s, doubling up to 30 s, no jitter (one admin at a
/// terminal, not a fleet), for as long as the failures are transient.
fn reconnect_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(FIRST_RETRY)
        .with_factor(2.0)
        .with_max_delay(MAX_RETRY)
        .without_max_times()
}

/// After a broken `--watch` stream (`reason`): waits the next delay of `backoff`, dials
/// again, and repeats while the failure is transient, saying so on standard error each
/// time. A fatal failure (refused, bad setup) ends it.
async fn reconnect(
    hub: &HubEndpoint,
    reason: &str,
    backoff: &mut ExponentialBackoff,
) -> Result<Client, AdminError> {
    loop {
        // Never `None`: the backoff has no maximum number of attempts.
        let delay = backoff.next().unwrap_or(MAX_RETRY);
        eprintln!(
            "flux-hub status: {reason}; reconnecting in {}s",
            delay.as_secs()
        );
        tokio::time::sleep(delay).await;
        match hub.connect().await {
            Ok(client) => return Ok(client),
            Err(e) if e.is_fatal() => return Err(e),
            Err(e) => eprintln!("flux-hub status: {e}"),
        }
    }
}

/// Runs `flux-hub status`, writing to `out` (standard output; `terminal` when it is one).
pub async fn run(
    opts: &StatusOptions,
    out: &mut dyn Write,
    terminal: bool,
) -> Result<(), AdminError> {
    let hub = HubEndpoint::new(&opts.connection)?;
    let namespace = opts.namespace.clone().unwrap_or_default();
    let printer = Printer {
        format: opts.output,
        watch: opts.watch,
        terminal,
    };
    let mut client = hub.connect().await?;
    if !opts.watch {
        let (snapshot, spokes) = hub.list(&mut client, &namespace).await?;
        out.write_all(printer.render(&snapshot, &spokes).as_bytes())?;
        out.flush()?;
        return Ok(());
    }

    let delays = reconnect_backoff();
    let mut backoff = delays.build();
    let mut last: Option<(String, u64)> = None;
    let mut printed_any = false;
    loop {
        let mut printed = false;
        let ended = watch(
            &hub,
            &mut client,
            &namespace,
            &printer,
            out,
            &mut last,
            &mut printed,
        )
        .await;
        printed_any |= printed;
        let reason = match ended {
            Ok(()) => "the hub ended the stream".to_string(),
            // The first stream must work; after that, keep trying unless refused.
            Err(e) if e.is_fatal() || !printed_any => return Err(e),
            Err(e) => e.to_string(),
        };
        if printed {
            // This stream delivered: start the backoff over.
            backoff = delays.build();
        }
        client = reconnect(&hub, &reason, &mut backoff).await?;
    }
}

/// One WatchMiniClusters stream: prints every new snapshot until the stream ends.
async fn watch(
    hub: &HubEndpoint,
    client: &mut Client,
    namespace: &str,
    printer: &Printer,
    out: &mut dyn Write,
    last: &mut Option<(String, u64)>,
    printed: &mut bool,
) -> Result<(), AdminError> {
    let mut stream = client
        .watch_mini_clusters(WatchMiniClustersRequest {
            namespace: namespace.to_string(),
        })
        .await
        .map_err(|s| hub.call_error("WatchMiniClusters", &s))?
        .into_inner();
    loop {
        let snapshot = match stream.message().await {
            Ok(Some(snapshot)) => snapshot,
            Ok(None) => return Ok(()),
            Err(s) => return Err(hub.call_error("WatchMiniClusters", &s)),
        };
        let id = (snapshot.hub_epoch.clone(), snapshot.version);
        if last.as_ref() == Some(&id) {
            continue; // a heartbeat
        }
        let spokes = hub.spokes(client).await?;
        out.write_all(printer.render(&snapshot, &spokes).as_bytes())?;
        out.flush()?;
        *last = Some(id);
        *printed = true;
    }
}

/// Entry point of `flux-hub status` (from `main`): exit status 0, or 1 after printing the
/// error. A closed standard output (`| head`) ends the command quietly.
pub fn main(opts: &StatusOptions) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("flux-hub status: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stdout = std::io::stdout();
    let terminal = stdout.is_terminal();
    let mut out = stdout.lock();
    match runtime.block_on(run(opts, &mut out, terminal)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(AdminError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("flux-hub status: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_reconnects_after_1s_doubling_up_to_30s_forever() {
        let delays: Vec<u64> = reconnect_backoff()
            .build()
            .take(8)
            .map(|d| d.as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert!(reconnect_backoff().build().nth(10_000).is_some());
    }
}
