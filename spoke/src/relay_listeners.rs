//! Relayed bursts (`relay: true`): their brokers connect to the burst's relay Service,
//! whose one endpoint (an EndpointSlice the spoke writes, see [`crate::cluster`]) is a
//! listener of this spoke. Each connection accepted there is carried to the hub over the
//! spoke's own connection (`Spoke.Relay`, the burst named in the call's metadata), and
//! the hub connects it to the lead broker in the root cluster. The bytes are ZeroMQ CURVE
//! ciphertext: the spoke only carries them.
//!
//! One listener per burst, on a port the system picks: nothing in a broker's bytes says
//! which burst it belongs to. The relay Service is reachable from any pod of the cluster,
//! so a listener serves only the burst's own broker pods: a connection from any other
//! address is closed before a call to the hub is made
//! ([`from_a_broker`](crate::cluster::from_a_broker)). The addresses of the burst's pods
//! are listed from the API server when the listener opens, when one of the spoke's Jobs
//! changes, every [`RELIST_EVERY`], and when a connection comes from an address not known
//! yet (a new broker's: it waits up to [`UNKNOWN_WAIT`] for that listing; never more than
//! one listing per [`RELIST_AT_MOST_EVERY`]); a connection whose address is no longer a
//! broker pod's is closed. A connection ends when either side closes: the hub ends the
//! call when the lead closes, and the broker closing ends the call's stream, the call
//! itself ending at most [`LINGER`] later. A listener holds at most the burst's hosts plus
//! [`RELAY_SLACK`] connections (the hub allows no more); one more is closed at once. While
//! the spoke has no connection to the hub, a connection is closed at once too, and the
//! broker's ZeroMQ reconnects.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use flux_shared::federation::auth::IdentityInterceptor;
use flux_shared::federation::proto::RelayFrame;
use flux_shared::federation::proto::spoke_client::SpokeClient;
use flux_shared::federation::{RELAY_KEY, RELAY_SLACK};
use flux_shared::ops::relay_read::read_chunk;
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::task::AbortOnDropHandle;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::cluster::{Cluster, from_a_broker};
use crate::lead_reach::LeadReach;

/// The fewest time between two listings of a burst's broker pods: connections from
/// addresses not known (a stranger's, say) cost at most one listing this often.
pub const RELIST_AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// How often a burst's broker pods are listed without a reason (a pod gone while no Job
/// changed): its address may be another pod's by then.
pub const RELIST_EVERY: Duration = Duration::from_secs(30);

/// How long a connection from an address not known yet waits for the listing it asks
/// for before it is closed.
pub const UNKNOWN_WAIT: Duration = Duration::from_secs(3);

/// Connections from addresses not known yet that may wait at once, per burst; more are
/// closed at once (their brokers connect again).
pub const UNKNOWN_WAITING: usize = 8;

/// The spoke's client of the hub's `Spoke` service (mTLS, the spoke's identity).
pub(crate) type HubClient = SpokeClient<InterceptedService<Channel, IdentityInterceptor>>;

/// How long the lead may still answer after the broker closed its connection (the hub
/// ends the call when the lead closes, at once for a ZeroMQ lead); then the call ends and
/// the burst's place is given back.
pub const LINGER: Duration = Duration::from_secs(5);

/// Frames of one connection buffered toward the hub before reading from the broker waits.
const UPSTREAM_FRAMES: usize = 8;

/// Relayed connections carried on one connection to the hub: below the hub's 200 streams
/// per connection, leaving the session's own calls room on the first.
pub const STREAMS_PER_CONNECTION: usize = 150;

/// Connections to the hub relayed connections ride on, the session's included: the hub
/// accepts 16 per identity, and a reconnecting spoke briefly holds its old ones too.
/// So a spoke carries at most 13 x 150 = 1,950 relayed connections at once.
pub const CONNECTIONS: usize = 13;

/// The connections to the hub of one session that relayed connections ride on: the
/// session's own, then more to the same address as those fill up. One that carries
/// nothing more (but the session's) is closed when the next relayed connection comes.
pub(crate) struct HubConnections {
    open: Box<dyn Fn() -> HubClient + Send + Sync>,
    slots: Mutex<Vec<Slot>>,
}

struct Slot {
    client: HubClient,
    room: Arc<Semaphore>,
}

impl HubConnections {
    /// Relayed connections on `session` first, then on connections `open` makes (lazily
    /// connected, to the same address with the same certificate).
    pub(crate) fn new(
        session: HubClient,
        open: impl Fn() -> HubClient + Send + Sync + 'static,
    ) -> Self {
        HubConnections {
            open: Box::new(open),
            slots: Mutex::new(vec![Slot::new(session)]),
        }
    }

    /// A connection with room for one more relayed connection, and the place it holds
    /// there until dropped; `None` when all [`CONNECTIONS`] are full.
    fn take(&self) -> Option<(HubClient, OwnedSemaphorePermit)> {
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let mut first = true;
        slots.retain(|slot| {
            let keep = first || slot.room.available_permits() < STREAMS_PER_CONNECTION;
            first = false;
            keep
        });
        for slot in slots.iter() {
            if let Ok(place) = slot.room.clone().try_acquire_owned() {
                return Some((slot.client.clone(), place));
            }
        }
        if slots.len() >= CONNECTIONS {
            return None;
        }
        let slot = Slot::new((self.open)());
        let taken = slot.room.clone().try_acquire_owned().ok()?;
        let client = slot.client.clone();
        slots.push(slot);
        debug!(
            connections = slots.len(),
            "one more connection to the hub for relayed connections"
        );
        Some((client, taken))
    }
}

impl Slot {
    fn new(client: HubClient) -> Self {
        Slot {
            client,
            room: Arc::new(Semaphore::new(STREAMS_PER_CONNECTION)),
        }
    }
}

/// The relay listeners of the bursts this spoke serves, and the hub connections they use.
pub(crate) struct Relays {
    client: watch::Sender<Option<Arc<HubConnections>>>,
    listeners: BTreeMap<String, Listener>,
}

/// One burst's listener.
struct Listener {
    port: u16,
    /// Where its EndpointSlice was last written to point (namespace, Service, port).
    written: Option<(String, String, u16)>,
    /// The accept loop; dropping it closes the listener and every connection it carries.
    _task: AbortOnDropHandle<()>,
}

impl Default for Relays {
    fn default() -> Self {
        Relays {
            client: watch::channel(None).0,
            listeners: BTreeMap::new(),
        }
    }
}

impl std::fmt::Debug for Relays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relays")
            .field("bursts", &self.listeners.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Relays {
    /// The hub connections new relayed connections use (`None`: there is none; they are
    /// closed at once).
    pub(crate) fn use_client(&self, client: Option<Arc<HubConnections>>) {
        self.client.send_replace(client);
    }

    /// The port of burst `key`'s listener, opened now if it has none (at most `hosts` +
    /// [`RELAY_SLACK`] connections at once, from the addresses of `pods` alone).
    pub(crate) async fn listen<C: Cluster>(
        &mut self,
        key: &str,
        hosts: usize,
        reach: &LeadReach,
        pods: BurstPods<C>,
    ) -> std::io::Result<u16> {
        if let Some(l) = self.listeners.get(key) {
            return Ok(l.port);
        }
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))).await?;
        let port = listener.local_addr()?.port();
        let span = info_span!("relay", burst = %key, port);
        let task = tokio::spawn(
            accept(
                listener,
                key.to_string(),
                hosts + RELAY_SLACK,
                self.client.subscribe(),
                reach.clone(),
                pods,
            )
            .instrument(span),
        );
        info!(burst = %key, port, "relay listener open");
        self.listeners.insert(
            key.to_string(),
            Listener {
                port,
                written: None,
                _task: AbortOnDropHandle::new(task),
            },
        );
        Ok(port)
    }

    /// Whether burst `key`'s EndpointSlice already points at its listener as
    /// `(namespace, service, port)`.
    pub(crate) fn written(&self, key: &str, at: &(String, String, u16)) -> bool {
        self.listeners
            .get(key)
            .is_some_and(|l| l.written.as_ref() == Some(at))
    }

    /// Records that burst `key`'s EndpointSlice points at `at`.
    pub(crate) fn wrote(&mut self, key: &str, at: (String, String, u16)) {
        if let Some(l) = self.listeners.get_mut(key) {
            l.written = Some(at);
        }
    }

    /// Forgets that burst `key`'s EndpointSlice was written (its Service was applied
    /// again, and may be a new one).
    pub(crate) fn unwritten(&mut self, key: &str) {
        if let Some(l) = self.listeners.get_mut(key) {
            l.written = None;
        }
    }

    /// Closes the listeners (and their connections) of every burst not in `keep`.
    pub(crate) fn retain(&mut self, keep: &std::collections::BTreeSet<String>) {
        self.listeners.retain(|key, _| {
            let kept = keep.contains(key);
            if !kept {
                info!(burst = %key, "relay listener closed");
            }
            kept
        });
    }
}

/// Where a relayed burst's broker pods are: the spoke's cluster, and the burst's Job.
pub(crate) struct BurstPods<C> {
    /// The spoke's cluster.
    pub(crate) cluster: C,
    /// The burst's namespace there.
    pub(crate) namespace: String,
    /// The burst's Job.
    pub(crate) job: String,
}

/// A listing of a burst's broker pods.
#[derive(Debug, Default)]
struct Listed {
    /// Which listing (0: none yet); listings that failed count too, keeping the addresses
    /// listed before.
    id: u64,
    /// The addresses the burst's broker pods hold.
    brokers: Arc<BTreeSet<IpAddr>>,
}

/// What one listener knows of its burst's broker pods.
#[derive(Debug, Default)]
struct Known {
    listed: watch::Sender<Listed>,
    /// Listings started.
    started: AtomicU64,
    /// Asks for a listing (a connection from an address not known).
    ask: Notify,
}

impl Known {
    /// Whether `peer` is one of the burst's brokers: at once when its address is known,
    /// else after a listing that started after this question (waiting at most
    /// [`UNKNOWN_WAIT`]).
    async fn admits(&self, peer: IpAddr) -> bool {
        if from_a_broker(peer, &self.listed.borrow().brokers) {
            return true;
        }
        let asked = self.started.load(Ordering::SeqCst);
        self.ask.notify_one();
        let mut listed = self.listed.subscribe();
        let fresh = listed.wait_for(|l| l.id > asked);
        match tokio::time::timeout(UNKNOWN_WAIT, fresh).await {
            Ok(Ok(l)) => from_a_broker(peer, &l.brokers),
            _ => false,
        }
    }
}

/// Lists the burst's broker pods into `known`: now, then when asked, when the spoke's
/// Jobs change and every [`RELIST_EVERY`], never twice within [`RELIST_AT_MOST_EVERY`].
async fn list_brokers<C: Cluster>(pods: BurstPods<C>, known: Arc<Known>) {
    let mut changes = std::pin::pin!(pods.cluster.changes());
    let mut failing = false;
    loop {
        let started = tokio::time::Instant::now();
        let id = known.started.fetch_add(1, Ordering::SeqCst) + 1;
        match pods
            .cluster
            .broker_addresses(&pods.namespace, &pods.job)
            .await
        {
            Ok(brokers) => {
                if failing {
                    info!(
                        brokers = brokers.len(),
                        "the burst's broker pods are listed again"
                    );
                }
                failing = false;
                debug!(brokers = ?brokers, "the burst's broker pods listed");
                known.listed.send_modify(|l| {
                    l.id = id;
                    l.brokers = Arc::new(brokers);
                });
            }
            Err(e) => {
                if !failing {
                    warn!(error = %e, "cannot list the burst's broker pods; connections from addresses not listed before are closed");
                }
                failing = true;
                known.listed.send_modify(|l| l.id = id);
            }
        }
        tokio::select! {
            () = known.ask.notified() => {}
            Some(()) = changes.next() => {}
            () = tokio::time::sleep(RELIST_EVERY) => {}
        }
        tokio::time::sleep_until(started + RELIST_AT_MOST_EVERY).await;
    }
}

/// Counts connections refused because they come from no broker pod, and says so at most
/// once a minute.
#[derive(Default)]
struct Strangers {
    refused: AtomicU64,
    said: Mutex<Option<std::time::Instant>>,
}

impl Strangers {
    fn refused(&self, peer: SocketAddr) {
        debug!(%peer, "a relayed connection refused: not from one of the burst's broker pods");
        let n = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        let mut said = self.said.lock().unwrap_or_else(PoisonError::into_inner);
        if said.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
            *said = Some(std::time::Instant::now());
            warn!(%peer, refused = n, "relayed connections refused: not from one of the burst's broker pods (refused since the listener opened)");
        }
    }
}

/// Accepts connections until dropped, carrying each (at most `most` at once) from the
/// burst's broker pods (listed from `pods`) to the hub.
async fn accept<C: Cluster>(
    listener: TcpListener,
    key: String,
    most: usize,
    client: watch::Receiver<Option<Arc<HubConnections>>>,
    reach: LeadReach,
    pods: BurstPods<C>,
) {
    let known = Arc::new(Known::default());
    let _listing = AbortOnDropHandle::new(tokio::spawn(
        list_brokers(pods, known.clone()).in_current_span(),
    ));
    let room = Arc::new(Semaphore::new(most));
    let waiting = Arc::new(Semaphore::new(UNKNOWN_WAITING));
    let strangers = Arc::new(Strangers::default());
    let mut carried = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (tcp, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors, say: a pause, not a busy loop.
                        warn!(error = %e, "accepting a relayed connection failed");
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                        continue;
                    }
                };
                // A broker pod's address is known: on at once. Another waits for a
                // listing (a new broker's pod), a few at a time.
                let wait = if from_a_broker(peer.ip(), &known.listed.borrow().brokers) {
                    None
                } else {
                    match waiting.clone().try_acquire_owned() {
                        Ok(w) => Some(w),
                        Err(_) => {
                            strangers.refused(peer);
                            continue;
                        }
                    }
                };
                let (known, room, client) = (known.clone(), room.clone(), client.clone());
                let (key, reach, strangers) = (key.clone(), reach.clone(), strangers.clone());
                carried.spawn(async move {
                    if let Some(wait) = wait {
                        let admitted = known.admits(peer.ip()).await;
                        drop(wait);
                        if !admitted {
                            strangers.refused(peer);
                            return;
                        }
                    }
                    let Ok(place) = room.try_acquire_owned() else {
                        warn!(most, "a relayed connection refused: the burst holds as many as it may");
                        return;
                    };
                    let Some(hub) = client.borrow().clone() else {
                        debug!("a relayed connection closed: no connection to the hub");
                        return;
                    };
                    let Some((hub, on_connection)) = hub.take() else {
                        warn!(most = CONNECTIONS * STREAMS_PER_CONNECTION, "a relayed connection refused: the spoke carries as many as it may");
                        return;
                    };
                    let _places = (place, on_connection);
                    // Its pod gone (its address no longer a broker's): closed.
                    let gone = async {
                        let mut listed = known.listed.subscribe();
                        let _ = listed.wait_for(|l| !from_a_broker(peer.ip(), &l.brokers)).await;
                        debug!("its pod is no longer one of the burst's brokers: closed");
                    };
                    tokio::select! {
                        () = carry(tcp, &key, hub, &reach) => {}
                        () = gone => {}
                    }
                }.instrument(info_span!("relayed", %peer)));
            }
            Some(_) = carried.join_next(), if !carried.is_empty() => {}
        }
    }
}

/// Carries one broker connection to the hub and back until either side ends it.
async fn carry(tcp: TcpStream, key: &str, mut hub: HubClient, reach: &LeadReach) {
    let _ = tcp.set_nodelay(true);
    let (from_broker, mut to_broker) = tcp.into_split();
    let (frames, upstream) = mpsc::channel(UPSTREAM_FRAMES);
    // The broker's bytes go to the hub as they come; its end of stream ends the call's.
    let mut up = AbortOnDropHandle::new(tokio::spawn(async move {
        while let Ok(Some(data)) = read_chunk(&from_broker).await {
            if frames.send(RelayFrame { data }).await.is_err() {
                break;
            }
        }
    }));
    let mut request = tonic::Request::new(ReceiverStream::new(upstream));
    match key.parse() {
        Ok(value) => {
            request.metadata_mut().insert(RELAY_KEY, value);
        }
        Err(_) => {
            warn!(burst = %key, "a burst key that is no metadata value; not relayed");
            return;
        }
    }
    let mut downstream = match hub.relay(request).await {
        Ok(response) => {
            reach.record(key, Ok(()));
            response.into_inner()
        }
        Err(status) => {
            // A broker's ZeroMQ retries several times a second: a refusal is news once
            // per change of the lead's reachability (LeadReach), not once per attempt.
            debug!(code = ?status.code(), error = %status.message(), "the hub refused a relayed connection");
            // Only "the lead does not answer" (or no hub to carry it) says the path is
            // broken; a burst scaled to 0 or not assigned here refuses for other reasons.
            if status.code() == tonic::Code::Unavailable {
                reach.record(
                    key,
                    Err(format!(
                        "a relayed connection, through the hub: {}",
                        status.message()
                    )),
                );
            }
            return;
        }
    };
    // Once the broker closed: when the hub must have ended the call.
    let mut linger_until: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            message = downstream.message() => match message {
                Ok(Some(frame)) => {
                    if to_broker.write_all(&frame.data).await.is_err() {
                        break;
                    }
                }
                Ok(None) => break,
                Err(status) => {
                    debug!(code = ?status.code(), error = %status.message(), "a relayed connection ended");
                    break;
                }
            },
            // The broker closed its side: the call's end of stream is sent; the lead may
            // still answer for the linger, then the call (and the burst's place) ends.
            _ = &mut up, if linger_until.is_none() => {
                linger_until = Some(tokio::time::Instant::now() + LINGER);
            }
            () = tokio::time::sleep_until(linger_until.unwrap_or_else(tokio::time::Instant::now)), if linger_until.is_some() => {
                debug!("the broker closed and the call did not end in time: ended");
                break;
            }
        }
    }
    let _ = to_broker.shutdown().await;
    drop(up);
}
