//! A real hub (the hub's registry and gRPC services, mTLS on 127.0.0.1) and real spokes
//! (the spoke agent with an in-memory cluster) in one process, shared by the federation
//! tests (`hub_and_spoke.rs`) and the propagation benchmark (`#[path]`-included from
//! both). They live in the e2e crate, the one that depends on both the hub and the spoke:
//! each of those crates' own tests depends only on itself and `flux-shared`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flux_hub::federation::registry::{BurstInfo, McInfo, Registry};
use flux_hub::federation::served::Served;
use flux_hub::server::relay::Timeouts;
use flux_hub::server::service::{self, Services};
use flux_shared::api::MiniCluster;
use flux_shared::federation::assignment::{self, SpokeAssignment};
use flux_shared::federation::pki::{Ca, IssuedCert};
use flux_shared::federation::tls::{ClientSecurity, ServerSecurity, TlsPem, TransportSettings};
use flux_shared::federation::{BurstKey, Identity, McKey};
use flux_shared::plan::{Endpoint, Plan};
use flux_spoke::testing::FakeCluster;
use flux_spoke::{Agent, AgentConfig, AppliedSnapshot, Metrics};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// DNS name in the hub's server certificate.
pub const HUB_DNS: &str = "hub.flux.test";
/// The lead broker endpoint the hub hands out.
pub const LEAD: (&str, i32) = ("203.0.113.9", 30093);
/// `metadata.creationTimestamp` of every test MiniCluster, Unix milliseconds.
pub const CREATED_UNIX_MILLIS: i64 = 1_700_000_000_000;
/// How long the test hub still carries the relayed connections of a burst scaled to 0.
pub const RELAY_LEAVE_GRACE: Duration = Duration::from_secs(2);

/// A CA, the hub's certificate, one client certificate per spoke, an admin's, and a
/// certificate from another CA.
pub struct Pki {
    /// The federation CA.
    pub ca: Ca,
    hub: IssuedCert,
    spokes: BTreeMap<String, IssuedCert>,
    admin: IssuedCert,
    foreign: (Ca, IssuedCert),
}

impl Pki {
    /// Certificates for `spokes`.
    pub fn new(spokes: &[String]) -> Pki {
        let ca = Ca::generate("federation test CA").expect("CA");
        let hub = ca
            .issue_server(
                &[HUB_DNS.to_string()],
                &["127.0.0.1".parse().expect("ip")],
                1,
            )
            .expect("hub cert");
        let spokes = spokes
            .iter()
            .map(|name| {
                let id = Identity::spoke(name).expect("spoke name");
                (name.clone(), ca.issue_client(&id, 1).expect("spoke cert"))
            })
            .collect();
        let admin = ca
            .issue_client(&Identity::admin("ops").expect("admin"), 1)
            .expect("admin cert");
        let other = Ca::generate("someone else's CA").expect("CA");
        let impostor = other
            .issue_client(&Identity::spoke("a").expect("spoke"), 1)
            .expect("impostor");
        Pki {
            ca,
            hub,
            spokes,
            admin,
            foreign: (other, impostor),
        }
    }

    fn pem(&self, ca: &Ca, leaf: &IssuedCert) -> TlsPem {
        TlsPem::new(
            ca.cert_pem().to_string(),
            leaf.cert_pem.clone(),
            leaf.key_pem.clone(),
        )
        .expect("pem")
    }

    /// The hub's server side.
    pub fn server(&self) -> ServerSecurity {
        ServerSecurity::Mtls(self.pem(&self.ca, &self.hub))
    }

    fn client(&self, leaf: &IssuedCert) -> ClientSecurity {
        ClientSecurity::Mtls {
            tls: self.pem(&self.ca, leaf),
            domain: HUB_DNS.to_string(),
        }
    }

    /// Spoke `name`'s client side.
    pub fn spoke(&self, name: &str) -> ClientSecurity {
        self.client(&self.spokes[name])
    }

    /// The admin's client side.
    pub fn admin(&self) -> ClientSecurity {
        self.client(&self.admin)
    }

    /// An admin `name` of the federation's CA whose certificate carries `scope`.
    pub fn scoped_admin(
        &self,
        name: &str,
        scope: &flux_shared::federation::scope::AdminScope,
    ) -> ClientSecurity {
        let leaf = self
            .ca
            .issue_admin(name, scope, 1)
            .expect("scoped admin cert");
        self.client(&leaf)
    }

    /// A spoke certificate for `a` from another CA (trusting the real CA for the hub).
    pub fn impostor(&self) -> ClientSecurity {
        let (_, leaf) = &self.foreign;
        ClientSecurity::Mtls {
            tls: TlsPem::new(
                self.ca.cert_pem().to_string(),
                leaf.cert_pem.clone(),
                leaf.key_pem.clone(),
            )
            .expect("pem"),
            domain: HUB_DNS.to_string(),
        }
    }
}

/// The hub: a registry served over mTLS.
pub struct Hub {
    /// The registry (what a controller would fill in).
    pub registry: Arc<Registry>,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its metrics.
    pub metrics: Arc<flux_hub::ops::metrics::Metrics>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Hub {
    /// Serve `registry` on `addr` (port 0: any free port), with no API server behind
    /// `ScaleBurst`. Rebinding the port of a hub that just stopped is retried briefly.
    pub async fn start(pki: &Pki, registry: Arc<Registry>, addr: SocketAddr) -> Hub {
        Hub::start_with_api(pki, registry, addr, FakeApi::unreachable()).await
    }

    /// Like [`Hub::start`], writing MiniClusters through `api`.
    pub async fn start_with_api(
        pki: &Pki,
        registry: Arc<Registry>,
        addr: SocketAddr,
        api: kube::Client,
    ) -> Hub {
        let listener = {
            let mut attempt = 0;
            loop {
                match service::bind(addr).await {
                    Ok(l) => break l,
                    Err(e) if attempt < 50 => {
                        attempt += 1;
                        let _ = e;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => panic!("bind {addr}: {e}"),
                }
            }
        };
        let addr = listener.local_addr().expect("addr");
        let (stop, _) = watch::channel(false);
        // The tests tell MiniClusters' relays apart by their series (the hub's
        // `--metrics-minicluster-labels`).
        let metrics =
            Arc::new(flux_hub::ops::metrics::Metrics::new().with_minicluster_labels(true));
        let services = Services::new(
            registry.clone(),
            pki.server().authenticator(),
            metrics.clone(),
            api,
        )
        .with_stop(stop.subscribe())
        .with_relay_timeouts(Timeouts {
            leave_grace: RELAY_LEAVE_GRACE,
            ..Timeouts::default()
        });
        let mut stopped = stop.subscribe();
        let security = pki.server();
        let task = tokio::spawn(async move {
            service::serve(
                listener,
                security,
                None,
                TransportSettings::default(),
                services,
                async move {
                    let _ = stopped.wait_for(|s| *s).await;
                },
            )
            .await
            .expect("hub serves");
        });
        Hub {
            registry,
            addr,
            metrics,
            stop,
            task,
        }
    }

    /// The URI spokes dial.
    pub fn uri(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Stop serving; open streams end.
    pub async fn stop(self) -> SocketAddr {
        let _ = self.stop.send(true);
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("the hub stops")
            .expect("hub task");
        self.addr
    }
}

/// The hub's API server, holding MiniClusters: GET answers the stored object, PATCH
/// applies a JSON patch to it for real (`json-patch`), refusing with 409 a patch whose
/// resourceVersion is not the stored one, like an API server. Every request is recorded.
#[derive(Clone, Default)]
pub struct FakeApi {
    objects: Arc<Mutex<BTreeMap<String, serde_json::Value>>>,
    /// `METHOD path?query` and the body, in order.
    pub calls: Arc<Mutex<Vec<(String, serde_json::Value)>>>,
    /// Writes by someone else to make before answering the next GETs (one per GET).
    interference: Arc<Mutex<usize>>,
}

impl FakeApi {
    /// A client whose every request fails (no API server).
    pub fn unreachable() -> kube::Client {
        let (service, _) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        kube::Client::new(service, "default")
    }

    /// Store `mc` (resourceVersion 1).
    pub fn insert(&self, mc: &MiniCluster) {
        let mut value = serde_json::to_value(mc).expect("json");
        value["metadata"]["resourceVersion"] = "1".into();
        let path = format!(
            "/apis/flux-framework.org/v1alpha2/namespaces/{}/miniclusters/{}",
            mc.metadata.namespace.as_deref().unwrap_or_default(),
            mc.metadata.name.as_deref().unwrap_or_default()
        );
        self.objects.lock().expect("objects").insert(path, value);
    }

    /// The stored MiniCluster `ns/name`.
    pub fn get(&self, ns: &str, name: &str) -> MiniCluster {
        let path = format!("/apis/flux-framework.org/v1alpha2/namespaces/{ns}/miniclusters/{name}");
        serde_json::from_value(self.objects.lock().expect("objects")[&path].clone())
            .expect("MiniCluster")
    }

    /// After each of the next `n` GETs, someone else changes the object.
    pub fn interfere(&self, n: usize) {
        *self.interference.lock().expect("interference") = n;
    }

    /// A client of this API server.
    pub fn client(&self) -> kube::Client {
        let (service, mut handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let api = self.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.expect("body");
                let body: serde_json::Value =
                    serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
                let (status, reply) = api.answer(&parts, &body);
                let line = format!(
                    "{} {}?{}",
                    parts.method,
                    parts.uri.path(),
                    parts.uri.query().unwrap_or_default()
                );
                api.calls.lock().expect("calls").push((line, body));
                send.send_response(
                    http::Response::builder()
                        .status(status)
                        .body(kube::client::Body::from(
                            serde_json::to_vec(&reply).expect("json"),
                        ))
                        .expect("response"),
                );
            }
        });
        kube::Client::new(service, "default")
    }

    fn answer(
        &self,
        parts: &http::request::Parts,
        body: &serde_json::Value,
    ) -> (u16, serde_json::Value) {
        let status = |code: u16, reason: &str| {
            (
                code,
                serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": reason, "reason": reason, "code": code}),
            )
        };
        let mut objects = self.objects.lock().expect("objects");
        let Some(stored) = objects.get_mut(parts.uri.path()) else {
            return status(404, "NotFound");
        };
        let version = |v: &serde_json::Value| {
            v["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(0)
        };
        match parts.method.as_str() {
            "GET" => {
                let reply = stored.clone();
                let mut pending = self.interference.lock().expect("interference");
                if *pending > 0 {
                    *pending -= 1;
                    stored["metadata"]["resourceVersion"] =
                        (version(stored) + 1).to_string().into();
                }
                (200, reply)
            }
            "PATCH" => {
                let patch: json_patch::Patch = match serde_json::from_value(body.clone()) {
                    Ok(p) => p,
                    Err(_) => return status(400, "BadRequest"),
                };
                let current = version(stored);
                let mut patched = stored.clone();
                if json_patch::patch(&mut patched, &patch).is_err() {
                    return status(422, "Invalid");
                }
                if version(&patched) != current {
                    return status(409, "Conflict");
                }
                let generation = stored["metadata"]["generation"].as_i64().unwrap_or(0);
                if patched["spec"] != stored["spec"] {
                    patched["metadata"]["generation"] = (generation + 1).into();
                }
                patched["metadata"]["resourceVersion"] = (current + 1).to_string().into();
                *stored = patched.clone();
                (200, patched)
            }
            _ => status(405, "MethodNotAllowed"),
        }
    }
}

/// One spoke agent applying into an in-memory cluster.
pub struct SpokeAgent {
    /// Its cluster (survives restarts of the agent).
    pub cluster: FakeCluster,
    /// The last snapshot it fully applied.
    pub applied: watch::Receiver<Option<AppliedSnapshot>>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl SpokeAgent {
    /// Start spoke `name` against `hub_uri`, applying into `cluster`.
    pub fn start(pki: &Pki, name: &str, hub_uri: &str, cluster: FakeCluster) -> SpokeAgent {
        SpokeAgent::start_with(pki, name, hub_uri, cluster, None)
    }

    /// Like [`SpokeAgent::start`], with pods reaching the spoke at `relay_address`.
    pub fn start_with(
        pki: &Pki,
        name: &str,
        hub_uri: &str,
        cluster: FakeCluster,
        relay_address: Option<std::net::IpAddr>,
    ) -> SpokeAgent {
        let config = AgentConfig {
            relay_address,
            lead_unreachable_after: Duration::ZERO,
            // Reconnect quickly: tests restart hubs.
            min_reconnect_delay: Duration::from_millis(20),
            max_reconnect_delay: Duration::from_millis(500),
            refused_retry_delay: Duration::from_millis(500),
            report_debounce: Duration::from_millis(10),
            ..AgentConfig::new(hub_uri, pki.spoke(name)).unwrap()
        };
        let agent = Agent::new(config, cluster.clone(), Arc::new(Metrics::new()));
        let applied = agent.applied();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(agent.run(async move {
            let _ = stopped.await;
        }));
        SpokeAgent {
            cluster,
            applied,
            stop,
            task,
        }
    }

    /// Stop the agent; returns its cluster.
    pub async fn stop(self) -> FakeCluster {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("the agent stops")
            .expect("agent task");
        self.cluster
    }

    /// Wait until the agent has applied `version` (or later) of `epoch`.
    pub async fn applied_version(&mut self, epoch: &str, version: u64) {
        let wait = self.applied.wait_for(|a| {
            a.as_ref()
                .is_some_and(|a| a.hub_epoch == epoch && a.version >= version)
        });
        tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .unwrap_or_else(|_| panic!("spoke never applied {epoch}/{version}"))
            .expect("agent alive");
    }
}

/// A bursting MiniCluster `ns/name` of 2 root brokers, with `bursts` (burst, spoke, size)
/// and container `image`.
pub fn minicluster(ns: &str, name: &str, image: &str, bursts: &[(&str, &str, i32)]) -> MiniCluster {
    let clusters: Vec<serde_json::Value> = bursts
        .iter()
        .map(|(burst, spoke, size)| serde_json::json!({"name": burst, "cluster": spoke, "size": size}))
        .collect();
    serde_json::from_value(serde_json::json!({
        "apiVersion": "flux-framework.org/v1alpha2",
        "kind": "MiniCluster",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"), "generation": 1},
        "spec": {
            "size": 2,
            "containers": [{"image": image, "command": "hostname"}],
            "flux": {"bursting": {"clusters": clusters}},
        },
    }))
    .expect("test MiniCluster")
}

/// `mc` with every burst relayed (`relay: true`).
pub fn relayed(mut mc: MiniCluster) -> MiniCluster {
    if let Some(b) = mc.spec.flux.as_mut().and_then(|f| f.bursting.as_mut()) {
        for c in &mut b.clusters {
            c.relay = Some(true);
        }
    }
    mc
}

/// Polls `check` every 20 ms until it yields a value; panics after 30 s saying `what` it
/// waited for.
pub async fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The curve certificate of MiniCluster `name` (fixed per name).
pub fn cert(name: &str) -> String {
    let mut seed = [0u8; 32];
    for (i, b) in name.bytes().enumerate() {
        seed[i % 32] ^= b;
    }
    flux_shared::curve::CurveCert::from_secret(seed, name).to_zcert()
}

/// What the hub controller does for a planned bursting MiniCluster once its lead endpoint
/// is known: record its bursts and assignments in the registry. Returns the assignments.
pub fn assign(registry: &Registry, mc: &MiniCluster) -> Vec<SpokeAssignment> {
    assign_with(registry, mc, None)
}

/// [`assign`], with the lead broker's address inside the root cluster that relayed
/// bursts' connections go to (`relay_to`).
pub fn assign_with(
    registry: &Registry,
    mc: &MiniCluster,
    relay_to: Option<Endpoint>,
) -> Vec<SpokeAssignment> {
    let plan = Plan::new(mc).expect("valid MiniCluster");
    let lead = Endpoint {
        address: LEAD.0.to_string(),
        port: LEAD.1,
    };
    let assignments =
        assignment::build(&plan, &cert(&plan.name), Some(&lead)).expect("assignments");
    let bursts = plan
        .bursts
        .iter()
        .map(|b| BurstInfo {
            skipped: Vec::new(),
            route: None,
            key: BurstKey::new(&plan.namespace, &plan.name, &b.name),
            name: b.name.clone(),
            spoke: b.cluster.clone(),
            size: b.size,
            max_size: b.max_size,
            relayed: b.relay,
        })
        .collect();
    registry.set(
        &McKey::new(&plan.namespace, &plan.name),
        McInfo {
            uid: plan.uid.clone().unwrap_or_default(),
            generation: 1,
            phase: "Running".into(),
            size: plan.spec.size,
            brokers_ready: plan.spec.size,
            lead: Some(lead),
            created_unix_millis: CREATED_UNIX_MILLIS,
            relay_to,
        },
        bursts,
        assignments.clone(),
    );
    assignments
}

/// The snapshot version spoke `spoke` currently has in `registry`.
pub fn version_of(registry: &Registry, spoke: &str) -> u64 {
    registry.snapshot(spoke).version
}

/// A TCP relay between spokes and the hub whose link can be cut (every open connection
/// closed, new ones dropped at once) and restored while both ends keep running: a
/// network failure, not a restart.
pub struct Link {
    addr: SocketAddr,
    up: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Link {
    /// Relay 127.0.0.1:<any port> to `target`.
    pub async fn start(target: SocketAddr) -> Link {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the relay");
        let addr = listener.local_addr().expect("relay address");
        let (up, state) = watch::channel(true);
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut state = state.clone();
                if !*state.borrow() {
                    continue;
                }
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = state.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Link { addr, up, task }
    }

    /// The URI spokes dial to go through the relay.
    pub fn uri(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Drop every connection through the relay and refuse new ones.
    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    /// Relay again.
    pub fn restore(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A lead broker on loopback that answers every connection with `lead:` and then echoes
/// what it reads.
pub async fn echo_lead() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                if tcp.write_all(b"lead:").await.is_err() {
                    return;
                }
                let (mut r, mut w) = tcp.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// Where the spoke pointed the relay Service `ns/name` of `cluster` (its listener).
pub fn relay_endpoint(cluster: &FakeCluster, service: &str) -> Option<SocketAddr> {
    cluster.ops().into_iter().rev().find_map(|op| match op {
        flux_spoke::testing::Op::ServeRelay(s, at) if s == service => Some(at),
        _ => None,
    })
}

/// Spoke `a` of `pki` (its pods reach it at 127.0.0.1) started against `hub`, once it has
/// applied `mc`, whose bursts on `a` are relayed to `lead`; with the address of the relay
/// listener of `mc`'s burst `burst` (its relay Service's endpoint).
pub async fn relaying_spoke(
    pki: &Pki,
    hub: &Hub,
    mc: &MiniCluster,
    burst: &str,
    lead: SocketAddr,
) -> (SpokeAgent, SocketAddr) {
    let endpoint = Endpoint {
        address: lead.ip().to_string(),
        port: i32::from(lead.port()),
    };
    assign_with(&hub.registry, mc, Some(endpoint));
    let mut spoke = SpokeAgent::start_with(
        pki,
        "a",
        &hub.uri(),
        FakeCluster::new(),
        Some(std::net::IpAddr::from([127, 0, 0, 1])),
    );
    spoke
        .applied_version(hub.registry.epoch(), version_of(&hub.registry, "a"))
        .await;
    let ns = mc.metadata.namespace.as_deref().unwrap_or_default();
    let at = relay_endpoint(&spoke.cluster, &format!("{ns}/{burst}-relay"))
        .expect("the relay Service points at the spoke");
    (spoke, at)
}
