//! Who gets a turn at the federation port: bounds on the TLS handshakes in flight and on
//! the authenticated connections of each identity.
//!
//! The port may be a public load balancer, so anyone can open connections and send
//! nothing. A handshake therefore never waits for another to finish (a pool of permits
//! held up to the handshake deadline let 1,000 idle connections stall every admin and
//! spoke for seconds); instead the handshakes in flight are bounded per source address
//! and in total, and a new connection over a bound displaces the oldest handshake of its
//! source (or of all sources). A real client's handshake takes milliseconds, so it is
//! displaced only by more new connections in those milliseconds than the bound, while
//! idle ones make room for it. Once a peer is authenticated, each identity holds at most
//! [`Limits::per_identity`] connections: a spoke or admin certificate cannot pile them up.
//!
//! The decisions are plain data structures; [`super::tls_accept`] does the I/O.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

/// The bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Handshakes in flight from one source address.
    pub per_source: usize,
    /// Handshakes in flight in all.
    pub total: usize,
    /// Authenticated connections of one identity (spoke or admin) at once.
    pub per_identity: usize,
}

impl Limits {
    /// 32 handshakes per source address (a load balancer that rewrites sources shows many
    /// clients as one), 1,024 in all, 16 connections per identity (a spoke holds one, and a
    /// second while it reconnects; admins sharing a certificate run a few commands at once).
    pub const RECOMMENDED: Limits = Limits {
        per_source: 32,
        total: 1024,
        per_identity: 16,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::RECOMMENDED
    }
}

/// The source a connection from `peer` counts against: its IPv4 address, or the /64 of an
/// IPv6 one (a single host commonly holds a whole /64, so per address would bound nothing).
pub fn source_of(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from_bits(
                v6.to_bits() & !u128::from(u64::MAX),
            )),
        },
    }
}

/// Handshakes in flight, oldest first. Each holds the sender whose drop tells its
/// handshake to give up.
#[derive(Default)]
struct InFlight {
    next: u64,
    by_id: BTreeMap<u64, (IpAddr, oneshot::Sender<()>)>,
    by_source: HashMap<IpAddr, BTreeSet<u64>>,
}

impl InFlight {
    fn remove(&mut self, id: u64) -> bool {
        let Some((source, _displace)) = self.by_id.remove(&id) else {
            return false;
        };
        if let Some(ids) = self.by_source.get_mut(&source) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_source.remove(&source);
            }
        }
        true
    }
}

/// The handshakes in flight on one listener.
#[derive(Clone)]
pub struct Handshakes {
    limits: Limits,
    in_flight: Arc<Mutex<InFlight>>,
}

/// Why a handshake was given up before its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Displaced {
    /// Its source had [`Limits::per_source`] newer handshakes in flight.
    BySource,
    /// The listener had [`Limits::total`] newer handshakes in flight.
    ByTotal,
}

/// One handshake's turn: removed from the bounds when dropped. `displaced` resolves when a
/// newer connection took its place.
pub struct Turn {
    id: u64,
    in_flight: Arc<Mutex<InFlight>>,
    /// Resolves (with an error: its sender was dropped) when the handshake is displaced.
    pub displaced: oneshot::Receiver<()>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        lock(&self.in_flight).remove(self.id);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Handshakes {
    /// No handshake in flight yet.
    pub fn new(limits: Limits) -> Self {
        Handshakes {
            limits,
            in_flight: Arc::default(),
        }
    }

    /// A turn for a new connection from `source`, displacing the oldest handshake of that
    /// source, then of all, while a bound is reached. Returns what it displaced, for the
    /// metrics.
    pub fn admit(&self, source: IpAddr) -> (Turn, Vec<Displaced>) {
        let mut state = lock(&self.in_flight);
        let mut displaced = Vec::new();
        while state
            .by_source
            .get(&source)
            .is_some_and(|ids| ids.len() >= self.limits.per_source.max(1))
        {
            let oldest = state
                .by_source
                .get(&source)
                .and_then(|ids| ids.first().copied());
            match oldest {
                Some(id) if state.remove(id) => displaced.push(Displaced::BySource),
                _ => break,
            }
        }
        while state.by_id.len() >= self.limits.total.max(1) {
            match state.by_id.keys().next().copied() {
                Some(id) if state.remove(id) => displaced.push(Displaced::ByTotal),
                _ => break,
            }
        }
        let id = state.next;
        state.next += 1;
        let (tx, rx) = oneshot::channel();
        state.by_id.insert(id, (source, tx));
        state.by_source.entry(source).or_default().insert(id);
        (
            Turn {
                id,
                in_flight: self.in_flight.clone(),
                displaced: rx,
            },
            displaced,
        )
    }

    /// Handshakes in flight (for tests and metrics).
    pub fn in_flight(&self) -> usize {
        lock(&self.in_flight).by_id.len()
    }
}

/// The authenticated connections of each identity on one listener (also used for other
/// things an identity holds open: an admin's watches).
#[derive(Clone, Default)]
pub struct Connections {
    per_identity: usize,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

/// One authenticated connection's place in [`Connections`], given back when dropped (with
/// the connection).
pub struct Place {
    identity: String,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        if let Some(n) = open.get_mut(&self.identity) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.identity);
            }
        }
    }
}

impl Connections {
    /// No connection yet; at most `per_identity` for each identity.
    pub fn new(per_identity: usize) -> Self {
        Connections {
            per_identity: per_identity.max(1),
            open: Arc::default(),
        }
    }

    /// A place for one more connection of `identity`, or `None` when it holds its
    /// maximum already (the new connection is closed; those it has keep working).
    pub fn admit(&self, identity: &str) -> Option<Place> {
        let mut open = lock(&self.open);
        let n = open.entry(identity.to_string()).or_default();
        if *n >= self.per_identity {
            return None;
        }
        *n += 1;
        Some(Place {
            identity: identity.to_string(),
            open: self.open.clone(),
        })
    }

    /// Open connections of `identity`.
    pub fn open(&self, identity: &str) -> usize {
        lock(&self.open).get(identity).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn limits(per_source: usize, total: usize) -> Limits {
        Limits {
            per_source,
            total,
            per_identity: 2,
        }
    }

    #[test]
    fn an_ipv6_host_counts_as_its_64_and_a_mapped_ipv4_as_itself() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(source_of(a), source_of(b));
        assert_ne!(source_of(a), source_of(other));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(source_of(mapped), IpAddr::from([192, 0, 2, 7]));
        assert_eq!(
            source_of(IpAddr::from([10, 0, 0, 1])),
            IpAddr::from([10, 0, 0, 1])
        );
    }

    #[test]
    fn a_source_over_its_bound_displaces_its_own_oldest_handshake() {
        let handshakes = Handshakes::new(limits(2, 10));
        let (mut first, _) = handshakes.admit(ip(1));
        let (_second, _) = handshakes.admit(ip(1));
        let (mut other, _) = handshakes.admit(ip(2));
        let (_third, displaced) = handshakes.admit(ip(1));
        assert_eq!(displaced, [Displaced::BySource]);
        assert!(
            first.displaced.try_recv().is_err(),
            "the oldest of ip 1 gives up"
        );
        assert_eq!(
            other.displaced.try_recv(),
            Err(oneshot::error::TryRecvError::Empty),
            "another source's handshake goes on"
        );
        assert_eq!(handshakes.in_flight(), 3);
    }

    #[test]
    fn over_the_total_the_oldest_of_any_source_gives_way() {
        let handshakes = Handshakes::new(limits(10, 3));
        let (mut a, _) = handshakes.admit(ip(1));
        let (_b, _) = handshakes.admit(ip(2));
        let (_c, _) = handshakes.admit(ip(3));
        let (mut d, displaced) = handshakes.admit(ip(4));
        assert_eq!(displaced, [Displaced::ByTotal]);
        assert!(a.displaced.try_recv().is_err());
        assert_eq!(
            d.displaced.try_recv(),
            Err(oneshot::error::TryRecvError::Empty),
            "the newcomer always gets its turn"
        );
        assert_eq!(handshakes.in_flight(), 3);
    }

    #[test]
    fn a_finished_handshake_frees_its_place_and_a_displaced_one_frees_nothing_twice() {
        let handshakes = Handshakes::new(limits(1, 10));
        let (first, _) = handshakes.admit(ip(1));
        let (second, displaced) = handshakes.admit(ip(1));
        assert_eq!(displaced.len(), 1);
        drop(first);
        assert_eq!(
            handshakes.in_flight(),
            1,
            "the displaced turn was already gone"
        );
        drop(second);
        assert_eq!(handshakes.in_flight(), 0);
        let (_again, displaced) = handshakes.admit(ip(1));
        assert!(displaced.is_empty());
    }

    #[test]
    fn an_identity_holds_at_most_its_connections_until_one_closes() {
        let connections = Connections::new(2);
        let a = connections.admit("spoke:a").expect("first");
        let _b = connections.admit("spoke:a").expect("second");
        assert!(connections.admit("spoke:a").is_none(), "third refused");
        assert!(
            connections.admit("admin:x").is_some(),
            "another identity is not affected"
        );
        drop(a);
        assert_eq!(connections.open("spoke:a"), 1);
        assert!(
            connections.admit("spoke:a").is_some(),
            "a closed one makes room"
        );
    }
}
