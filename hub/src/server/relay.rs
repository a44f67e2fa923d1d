//! Relayed broker connections (`Spoke.Relay`): a burst broker's TCP connection, accepted by
//! its spoke in the burst cluster and carried over the spoke's own mTLS connection, is
//! connected here to the lead broker inside the root cluster. The bytes are ZeroMQ CURVE
//! ciphertext; the hub only carries them.
//!
//! What crosses the trust line is bounded before anything is dialled: the burst must be
//! assigned to the calling spoke and relayed, and each burst holds at most its brokers
//! plus [`RELAY_SLACK`] connections. A connection ends when either side ends it (the lead
//! closing its TCP side ends the call at once; the spoke ending its stream closes the
//! lead's side, which has [`LINGER`] to answer and close; the spoke cancelling the call
//! closes the lead's connection at once), when none of its own bytes moved for [`IDLE`],
//! when the spoke's certificate is no longer pinned (unpinned, or replaced by a rotation)
//! or the hub stops, or when the burst stops being relayed to that spoke, which the registry's changes wake
//! it for: at once when it is deleted or reassigned (it is no
//! longer this spoke's), within [`LEAVE_GRACE`] when it is scaled to 0 (its brokers are
//! leaving: they tell the lead through this connection, and closing it under them would
//! leave them waiting on their drain instead).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flux_shared::federation::proto::RelayFrame;
use flux_shared::federation::{RELAY_MAX_FRAME, RELAY_SLACK};
use flux_shared::ops::relay_read::read_chunk;
use flux_shared::plan::Endpoint;
use futures::{Stream, StreamExt};
use prometheus_client::metrics::counter::Counter;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tonic::Status;

use crate::federation::served::RelayRefusal;

mod limits;
pub use limits::{
    BYTE_BURST, BYTES_PER_SECOND, ByteBudget, CALL_BURST, CALLS_PER_SECOND, MAX_MIB_PER_SECOND,
    MIB_PER_SECOND, Rates, SpokeRates, TokenBucket, spend,
};

/// A relayed connection through which nothing moved for this long is closed (Flux's
/// overlay sends heartbeats far more often). Only the connection's own bytes put it off.
pub const IDLE: Duration = Duration::from_secs(300);

/// How long dialling the lead broker may take.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the lead may still answer after the spoke ended its stream (its broker
/// closed): ZeroMQ does not half-close, so the lead closes too, at once; one that does not
/// holds the burst's place no longer than this.
pub const LINGER: Duration = Duration::from_secs(5);

/// How long the connections of a burst scaled to 0 are still carried while its brokers
/// leave (they close them themselves within seconds; new ones are refused at once).
pub const LEAVE_GRACE: Duration = Duration::from_secs(60);

/// Whether a relayed connection may go on, after a registry change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// The burst is still relayed to this spoke, to the same lead.
    Relayed,
    /// The burst was scaled to 0: its brokers are leaving.
    Leaving,
    /// Deleted, reassigned, no longer relayed, or its lead moved.
    Ended,
}

impl RelayRefusal {
    /// The gRPC status the spoke gets.
    pub fn status(&self) -> Status {
        let message = self.to_string();
        match self {
            RelayRefusal::NotAssigned(_) => Status::permission_denied(message),
            RelayRefusal::NotRelayed(_) | RelayRefusal::NoBrokers(_) | RelayRefusal::NoLead(_) => {
                Status::failed_precondition(message)
            }
            RelayRefusal::TooMany { .. } | RelayRefusal::CallRate { .. } => {
                Status::resource_exhausted(message)
            }
            RelayRefusal::Unreachable(..) => Status::unavailable(message),
        }
    }
}

/// The relayed connections each burst holds, and each spoke's rates.
#[derive(Debug, Default)]
pub struct OpenRelays {
    held: Mutex<HashMap<String, usize>>,
    /// New calls and bytes of each spoke.
    pub rates: SpokeRates,
}

/// One held connection; dropping it gives the place back.
#[derive(Debug)]
pub struct Held {
    open: Arc<OpenRelays>,
    key: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self
            .open
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = held.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

impl OpenRelays {
    /// A place for one more connection of burst `key`, within `brokers` + [`RELAY_SLACK`].
    pub fn take(self: &Arc<Self>, key: &str, brokers: usize) -> Result<Held, RelayRefusal> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let n = held.entry(key.to_string()).or_insert(0);
        if *n >= brokers + RELAY_SLACK {
            return Err(RelayRefusal::TooMany {
                key: key.to_string(),
                held: *n,
                brokers,
            });
        }
        *n += 1;
        Ok(Held {
            open: self.clone(),
            key: key.to_string(),
        })
    }

    /// Connections held over every burst.
    pub fn total(&self) -> usize {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .sum()
    }
}

/// Dials the lead broker.
pub async fn dial(lead: &Endpoint) -> Result<TcpStream, RelayRefusal> {
    let address = format!("{}:{}", lead.address, lead.port);
    let unreachable = |e: String| RelayRefusal::Unreachable(address.clone(), e);
    match tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(address.as_str())).await {
        Ok(Ok(tcp)) => {
            let _ = tcp.set_nodelay(true);
            Ok(tcp)
        }
        Ok(Err(e)) => Err(unreachable(e.to_string())),
        Err(_) => Err(unreachable(format!("no answer in {DIAL_TIMEOUT:?}"))),
    }
}

/// Bytes carried, for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Carried {
    /// From the burst broker to the lead.
    pub to_lead: u64,
    /// From the lead to the burst broker.
    pub from_lead: u64,
}

/// How long a relayed connection may last without traffic, and once its burst is leaving;
/// and the rates of each spoke's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timeouts {
    /// Nothing moved for this long: closed ([`IDLE`]).
    pub idle: Duration,
    /// The burst was scaled to 0 this long ago: closed ([`LEAVE_GRACE`]).
    pub leave_grace: Duration,
    /// The spoke ended its stream this long ago and the lead has not closed: closed
    /// ([`LINGER`]).
    pub linger: Duration,
    /// The rates each spoke's relayed connections are held to ([`Rates`]; here because
    /// these are the relay's one setting of the services).
    pub rates: Rates,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            idle: IDLE,
            leave_grace: LEAVE_GRACE,
            linger: LINGER,
            rates: Rates::default(),
        }
    }
}

/// The counters a relayed connection adds its bytes to as they move: (to the lead, from
/// the lead).
pub type Meter = (Counter, Counter);

/// What ends a relayed connection besides its two sides and its timeouts.
pub struct Ends<F, E> {
    /// The registry's changes: `standing` is asked again on each.
    pub changes: watch::Receiver<u64>,
    /// Whether the connection may go on, after a registry change.
    pub standing: F,
    /// Resolves, with what the spoke is told, when the connection must end at once: the
    /// spoke's certificate is no longer the one pinned for it (unpinned, or replaced by a
    /// rotation), or the hub stops.
    pub now: E,
}

/// Carries bytes both ways between the spoke's frames (`inbound`, answered on `outbound`)
/// and the lead broker (`tcp`), counting them on `meter` and holding them to the spoke's
/// byte rate (`budget`, both ways), until either side ends (the
/// lead's end of stream ends the call; the spoke's closes the lead's side, which has the
/// linger to close in turn; the spoke cancelling the call, or no longer reading its
/// answers, ends it at once), nothing moves for the idle time, `ends.now` resolves, the
/// standing says [`Standing::Ended`] after a registry change, or the leave grace passed
/// since it said [`Standing::Leaving`].
pub async fn pump<S, F, E>(
    tcp: TcpStream,
    mut inbound: S,
    outbound: mpsc::Sender<Result<RelayFrame, Status>>,
    ends: Ends<F, E>,
    timeouts: Timeouts,
    meter: &Meter,
    budget: &ByteBudget,
) -> Carried
where
    S: Stream<Item = Result<RelayFrame, Status>> + Unpin,
    F: Fn() -> Standing,
    E: std::future::Future<Output = Status>,
{
    let Ends {
        mut changes,
        standing,
        now: end_now,
    } = ends;
    let mut end_now = std::pin::pin!(end_now);
    let (from_lead, mut to_lead) = tcp.into_split();
    let mut carried = Carried::default();
    let mut spoke_open = true;
    let mut leave_by: Option<tokio::time::Instant> = None;
    // Once the spoke ended its stream: when the lead must have closed.
    let mut linger_until: Option<tokio::time::Instant> = None;
    // Only this connection's bytes put the idle close off: registry changes (an admin's
    // scale, every spoke's report) come all the time in a live federation.
    let mut idle_at = tokio::time::Instant::now() + timeouts.idle;
    let not_relayed = || {
        Err(Status::failed_precondition(
            "the burst is no longer relayed to this spoke",
        ))
    };
    loop {
        tokio::select! {
            frame = inbound.next(), if spoke_open => match frame {
                Some(Ok(frame)) if frame.data.len() <= RELAY_MAX_FRAME => {
                    idle_at = tokio::time::Instant::now() + timeouts.idle;
                    carried.to_lead += frame.data.len() as u64;
                    meter.0.inc_by(frame.data.len() as u64);
                    spend(budget, frame.data.len()).await;
                    if to_lead.write_all(&frame.data).await.is_err() {
                        break;
                    }
                }
                Some(Ok(frame)) => {
                    let _ = outbound
                        .send(Err(Status::invalid_argument(format!(
                            "a frame of {} bytes: at most {RELAY_MAX_FRAME}",
                            frame.data.len()
                        ))))
                        .await;
                    break;
                }
                // The broker closed its side: the lead reads the end, and may still answer
                // for the linger.
                None => {
                    spoke_open = false;
                    linger_until = Some(tokio::time::Instant::now() + timeouts.linger);
                    let _ = to_lead.shutdown().await;
                }
                // The spoke cancelled the call (its broker's connection is gone).
                Some(Err(_)) => break,
            },
            read = read_chunk(&from_lead) => match read {
                Ok(Some(data)) => {
                    idle_at = tokio::time::Instant::now() + timeouts.idle;
                    carried.from_lead += data.len() as u64;
                    meter.1.inc_by(data.len() as u64);
                    spend(budget, data.len()).await;
                    if outbound.send(Ok(RelayFrame { data })).await.is_err() {
                        break;
                    }
                }
                // The lead closed (ZeroMQ closes a connection it refuses, and does not
                // half-close): the call ends, and with it the spoke's place.
                Ok(None) | Err(_) => break,
            },
            // Nobody reads the answers any more: the spoke went away.
            () = outbound.closed() => break,
            () = tokio::time::sleep_until(linger_until.unwrap_or_else(tokio::time::Instant::now)), if linger_until.is_some() => break,
            // The spoke's certificate is no longer pinned, or the hub stops.
            status = &mut end_now => {
                let _ = outbound.send(Err(status)).await;
                break;
            },
            changed = changes.changed() => {
                let now = if changed.is_err() { Standing::Ended } else { standing() };
                match now {
                    Standing::Relayed => leave_by = None,
                    Standing::Leaving => {
                        leave_by.get_or_insert_with(|| {
                            tokio::time::Instant::now() + timeouts.leave_grace
                        });
                    }
                    Standing::Ended => {
                        let _ = outbound.send(not_relayed()).await;
                        break;
                    }
                }
            },
            () = tokio::time::sleep_until(leave_by.unwrap_or_else(tokio::time::Instant::now)), if leave_by.is_some() => {
                let _ = outbound.send(not_relayed()).await;
                break;
            },
            () = tokio::time::sleep_until(idle_at) => {
                let _ = outbound
                    .send(Err(Status::deadline_exceeded(format!(
                        "nothing moved through this relayed connection for {:?}",
                        timeouts.idle
                    ))))
                    .await;
                break;
            }
        }
    }
    carried
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_holds_its_brokers_plus_the_slack_and_gets_places_back() {
        let open = Arc::new(OpenRelays::default());
        let held: Vec<Held> = (0..2 + RELAY_SLACK)
            .map(|_| open.take("ns/mc/b", 2).expect("a place"))
            .collect();
        assert!(matches!(
            open.take("ns/mc/b", 2),
            Err(RelayRefusal::TooMany {
                held: 4,
                brokers: 2,
                ..
            })
        ));
        assert!(
            open.take("ns/mc/other", 1).is_ok(),
            "other bursts are apart"
        );
        drop(held);
        assert_eq!(open.total(), 0);
        assert!(open.take("ns/mc/b", 2).is_ok());
    }

    #[test]
    fn every_refusal_has_its_own_reason_and_status() {
        let all = [
            RelayRefusal::NotAssigned("k".into()),
            RelayRefusal::NotRelayed("k".into()),
            RelayRefusal::NoBrokers("k".into()),
            RelayRefusal::NoLead("k".into()),
            RelayRefusal::TooMany {
                key: "k".into(),
                held: 1,
                brokers: 1,
            },
            RelayRefusal::Unreachable("a:1".into(), "refused".into()),
            RelayRefusal::CallRate {
                spoke: "a".into(),
                per_second: 1,
            },
        ];
        let reasons: std::collections::BTreeSet<_> = all.iter().map(|r| r.reason()).collect();
        assert_eq!(reasons.len(), all.len());
        assert_eq!(all[0].status().code(), tonic::Code::PermissionDenied);
        assert_eq!(all[4].status().code(), tonic::Code::ResourceExhausted);
        assert_eq!(all[5].status().code(), tonic::Code::Unavailable);
        assert_eq!(all[6].status().code(), tonic::Code::ResourceExhausted);
    }
}
