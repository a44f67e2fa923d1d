//! Relayed bursts (`relay: true`): their brokers connect to the burst's relay Service,
//! whose one endpoint (an EndpointSlice the spoke writes, see [`crate::cluster`]) is a
//! listener of this spoke. Each connection accepted there is carried to the hub over the
//! spoke's own connection (`Spoke.Relay`, the burst named in the call's metadata), and
//! the hub connects it to the lead broker in the root cluster. The bytes are ZeroMQ CURVE
//! ciphertext: the spoke only carries them.
//!
//! One listener per burst, on a port the system picks: nothing in a broker's bytes says
//! which burst it belongs to. A listener holds at most the burst's hosts plus
//! [`RELAY_SLACK`] connections (the hub allows no more); one more is closed at once. While
//! the spoke has no connection to the hub, a connection is closed at once too, and the
//! broker's ZeroMQ reconnects.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use flux_shared::federation::auth::IdentityInterceptor;
use flux_shared::federation::proto::RelayFrame;
use flux_shared::federation::proto::spoke_client::SpokeClient;
use flux_shared::federation::{RELAY_KEY, RELAY_SLACK};
use flux_shared::ops::relay_read::read_chunk;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::task::AbortOnDropHandle;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::lead_reach::LeadReach;

/// The spoke's client of the hub's `Spoke` service (mTLS, the spoke's identity).
pub(crate) type HubClient = SpokeClient<InterceptedService<Channel, IdentityInterceptor>>;
type Client = HubClient;

/// Frames of one connection buffered toward the hub before reading from the broker waits.
const UPSTREAM_FRAMES: usize = 8;

/// The relay listeners of the bursts this spoke serves, and the hub connection they use.
pub(crate) struct Relays {
    client: watch::Sender<Option<Client>>,
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
    /// The hub connection new relayed connections use (`None`: there is none; they are
    /// closed at once).
    pub(crate) fn use_client(&self, client: Option<Client>) {
        self.client.send_replace(client);
    }

    /// The port of burst `key`'s listener, opened now if it has none (at most `hosts` +
    /// [`RELAY_SLACK`] connections at once).
    pub(crate) async fn listen(
        &mut self,
        key: &str,
        hosts: usize,
        reach: &LeadReach,
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

/// Accepts connections until dropped, carrying each (at most `most` at once) to the hub.
async fn accept(
    listener: TcpListener,
    key: String,
    most: usize,
    client: watch::Receiver<Option<Client>>,
    reach: LeadReach,
) {
    let room = Arc::new(Semaphore::new(most));
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
                let Ok(place) = room.clone().try_acquire_owned() else {
                    warn!(%peer, most, "a relayed connection refused: the burst holds as many as it may");
                    continue;
                };
                let Some(hub) = client.borrow().clone() else {
                    debug!(%peer, "a relayed connection closed: no connection to the hub");
                    continue;
                };
                let key = key.clone();
                let reach = reach.clone();
                carried.spawn(async move {
                    let _place = place;
                    carry(tcp, &key, hub, &reach).await;
                }.instrument(info_span!("relayed", %peer)));
            }
            Some(_) = carried.join_next(), if !carried.is_empty() => {}
        }
    }
}

/// Carries one broker connection to the hub and back until either side ends it.
async fn carry(tcp: TcpStream, key: &str, mut hub: Client, reach: &LeadReach) {
    let _ = tcp.set_nodelay(true);
    let (from_broker, mut to_broker) = tcp.into_split();
    let (frames, upstream) = mpsc::channel(UPSTREAM_FRAMES);
    // The broker's bytes go to the hub as they come; its end of stream ends the call's.
    let up = AbortOnDropHandle::new(tokio::spawn(async move {
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
            warn!(code = ?status.code(), error = %status.message(), "the hub refused a relayed connection");
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
    loop {
        match downstream.message().await {
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
        }
    }
    let _ = to_broker.shutdown().await;
    drop(up);
}
