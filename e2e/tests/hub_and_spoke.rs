//! Hub and spokes over real gRPC with real mutual TLS on loopback, in one process: the
//! hub's registry and services, the spoke's agent, and the spoke's Kubernetes writes
//! captured by the in-memory cluster.

mod in_process;

use std::net::SocketAddr;
use std::time::Duration;

use flux_hub::federation::registry::{McInfo, Registry};
use flux_hub::federation::served::Served;
use flux_shared::federation::McKey;
use flux_shared::federation::proto::admin_client::AdminClient;
use flux_shared::federation::proto::spoke_client::SpokeClient;
use flux_shared::federation::proto::{
    BurstPhase, ListMiniClustersRequest, ListSpokesRequest, ReportRequest, ScaleBurstRequest,
    WatchRequest,
};
use flux_shared::federation::tls::{ClientSecurity, TransportSettings};
use flux_shared::layout;
use flux_shared::render::Object;
use flux_spoke::cluster::Kind;
use flux_spoke::testing::FakeCluster;
use in_process::{
    CREATED_UNIX_MILLIS, FakeApi, Hub, Link, Pki, SpokeAgent, assign, cert, eventually,
    minicluster, version_of,
};
use k8s_openapi::api::batch::v1::JobStatus;
use tonic::Code;

const NS: &str = "hpc";

fn spokes(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn any_port() -> SocketAddr {
    "127.0.0.1:0".parse().expect("addr")
}

fn job_image(cluster: &FakeCluster, job: &str) -> Option<String> {
    match cluster.get(Kind::Job, NS, job)? {
        // The broker's image: it comes after the view container.
        Object::Job(j) => j.spec?.template.spec?.containers.last()?.image.clone(),
        _ => None,
    }
}

fn job_parallelism(cluster: &FakeCluster, job: &str) -> Option<i32> {
    match cluster.get(Kind::Job, NS, job)? {
        Object::Job(j) => j.spec?.parallelism,
        _ => None,
    }
}

fn curve_cert_in(cluster: &FakeCluster, job: &str) -> Option<String> {
    match cluster.get(Kind::Secret, NS, &format!("{job}-curve"))? {
        Object::Secret(s) => String::from_utf8(s.data?.get(layout::CURVE_KEY)?.0.clone()).ok(),
        _ => None,
    }
}

/// Waits until the hub's only spoke is connected and has acknowledged its latest snapshot.
async fn caught_up(registry: &Registry) {
    eventually("the hub seeing the spoke caught up", || {
        let s = registry.spokes(&|_| true).spokes.pop()?;
        (s.connected && s.acknowledged_version == s.current_version).then_some(())
    })
    .await;
}

fn primed() -> std::sync::Arc<Registry> {
    let r = Registry::new();
    r.set_primed();
    r
}

#[tokio::test]
async fn first_snapshot_update_status_and_removal() {
    let pki = Pki::new(&spokes(&["a"]));
    let hub = Hub::start(&pki, primed(), any_port()).await;
    let registry = hub.registry.clone();
    let mc = minicluster(NS, "lammps", "ghcr.io/x/lammps:1", &[("burst-a", "a", 3)]);
    assign(&registry, &mc);
    let mut spoke = SpokeAgent::start(&pki, "a", &hub.uri(), FakeCluster::new());
    spoke
        .applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;

    // The burst Job and its companions exist, with the MiniCluster's certificate.
    assert_eq!(job_parallelism(&spoke.cluster, "burst-a"), Some(3));
    assert_eq!(
        curve_cert_in(&spoke.cluster, "burst-a"),
        Some(cert("lammps"))
    );
    assert!(spoke.cluster.namespaces().contains(&NS.to_string()));
    let key = McKey::new("hpc", "lammps");
    // The hub hears the acknowledgement and the burst's status.
    eventually("the first report", || {
        let view = registry.bursts(&key).pop()?;
        let (status, _) = view.report?;
        (status.observed_version == view.assigned_version).then_some(())
    })
    .await;
    assert!(registry.bursts(&key)[0].connected);

    // The brokers become ready: the hub sees Running.
    spoke.cluster.set_job_status(
        NS,
        "burst-a",
        JobStatus {
            ready: Some(3),
            active: Some(3),
            ..Default::default()
        },
    );
    eventually("a Running report", || {
        let (status, _) = registry.bursts(&key).pop()?.report?;
        (status.phase == BurstPhase::Running as i32 && status.brokers_ready == 3).then_some(())
    })
    .await;

    // An update (new image) reaches the spoke's Job.
    let updated = minicluster(NS, "lammps", "ghcr.io/x/lammps:2", &[("burst-a", "a", 3)]);
    assign(&registry, &updated);
    spoke
        .applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;
    assert_eq!(
        job_image(&spoke.cluster, "burst-a").as_deref(),
        Some("ghcr.io/x/lammps:2")
    );

    // The burst is removed from the spec: the spoke deletes its objects and the hub
    // counts the withdrawal as confirmed.
    registry.set(&key, McInfo::default(), vec![], vec![]);
    assert!(registry.has_unconfirmed_withdrawals(&key));
    spoke
        .applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;
    assert!(
        spoke.cluster.refs().is_empty(),
        "{:?}",
        spoke.cluster.refs()
    );
    eventually("the withdrawal confirmed", || {
        (!registry.has_unconfirmed_withdrawals(&key)).then_some(())
    })
    .await;
    spoke.stop().await;
    hub.stop().await;
}

#[tokio::test]
async fn an_elastic_burst_is_resized_in_place_and_scaled_to_zero_over_the_wire() {
    let pki = Pki::new(&spokes(&["a"]));
    let hub = Hub::start(&pki, primed(), any_port()).await;
    let registry = hub.registry.clone();
    let sized = |size: i32| {
        let mut mc = minicluster(
            NS,
            "lammps",
            "ghcr.io/x/lammps:1",
            &[("burst-a", "a", size)],
        );
        if let Some(b) = mc.spec.flux.as_mut().and_then(|f| f.bursting.as_mut()) {
            b.clusters[0].max_size = Some(4);
        }
        mc
    };
    assign(&registry, &sized(1));
    let mut spoke = SpokeAgent::start(&pki, "a", &hub.uri(), FakeCluster::new());
    spoke
        .applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;
    let suspended = |cluster: &FakeCluster| match cluster.get(Kind::Job, NS, "burst-a") {
        Some(Object::Job(j)) => j.spec.and_then(|s| s.suspend),
        _ => None,
    };
    assert_eq!(job_parallelism(&spoke.cluster, "burst-a"), Some(1));
    assert_eq!(suspended(&spoke.cluster), Some(false));
    let companions = spoke.cluster.refs();

    // Grown to 3: the same Job, 3 brokers; nothing else changes.
    assign(&registry, &sized(3));
    spoke
        .applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;
    assert_eq!(job_parallelism(&spoke.cluster, "burst-a"), Some(3));
    assert_eq!(spoke.cluster.refs(), companions, "resized in place");

    // Scaled to 0: suspended, its ConfigMap, Secret and Service kept; the report says 0.
    assign(&registry, &sized(0));
    spoke
        .applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;
    assert_eq!(suspended(&spoke.cluster), Some(true));
    assert_eq!(job_parallelism(&spoke.cluster, "burst-a"), Some(1));
    assert_eq!(
        spoke.cluster.refs(),
        companions,
        "a burst at 0 keeps its objects"
    );
    let key = McKey::new("hpc", "lammps");
    eventually("a report of the suspended burst", || {
        let view = registry.bursts(&key).pop()?;
        let (status, _) = view.report?;
        (status.observed_version == view.assigned_version && status.size == 0).then_some(())
    })
    .await;
    spoke.stop().await;
    hub.stop().await;
}

#[tokio::test]
async fn two_spokes_each_get_only_their_own_bursts_and_certificates() {
    let pki = Pki::new(&spokes(&["a", "b"]));
    let hub = Hub::start(&pki, primed(), any_port()).await;
    let registry = hub.registry.clone();
    assign(
        &registry,
        &minicluster(NS, "shared", "img:1", &[("sa", "a", 1), ("sb", "b", 2)]),
    );
    assign(
        &registry,
        &minicluster(NS, "only-a", "img:1", &[("oa", "a", 1)]),
    );
    let mut a = SpokeAgent::start(&pki, "a", &hub.uri(), FakeCluster::new());
    let mut b = SpokeAgent::start(&pki, "b", &hub.uri(), FakeCluster::new());
    a.applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;
    b.applied_version(registry.epoch(), version_of(&registry, "b"))
        .await;
    let jobs = |c: &FakeCluster| -> Vec<String> {
        c.refs()
            .into_iter()
            .filter(|r| r.kind == Kind::Job)
            .map(|r| r.name)
            .collect()
    };
    assert_eq!(jobs(&a.cluster), ["oa", "sa"]);
    assert_eq!(jobs(&b.cluster), ["sb"]);
    // b never holds only-a's certificate.
    let certs_b: Vec<String> = b
        .cluster
        .objects()
        .into_iter()
        .filter_map(|o| match o {
            Object::Secret(s) => String::from_utf8(s.data?.get(layout::CURVE_KEY)?.0.clone()).ok(),
            _ => None,
        })
        .collect();
    assert_eq!(certs_b, [cert("shared")]);
    assert!(!certs_b.contains(&cert("only-a")));

    // On the wire: while spoke b is connected, a second stream under its name is refused.
    let channel = TransportSettings::default()
        .endpoint(&hub.uri(), &pki.spoke("b"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut client = SpokeClient::new(channel);
    let second = client.watch(WatchRequest::default()).await;
    assert_eq!(
        second.err().map(|s| s.code()),
        Some(tonic::Code::AlreadyExists),
        "one stream per spoke"
    );
    // Once it is gone, b's Watch lists b's assignments only.
    b.stop().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut stream = loop {
        match client.watch(WatchRequest::default()).await {
            Ok(s) => break s.into_inner(),
            Err(s)
                if s.code() == tonic::Code::AlreadyExists
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(s) => panic!("watch: {s:?}"),
        }
    };
    let first = stream.message().await.expect("snapshot").expect("one");
    let keys: Vec<String> = first.assignments.iter().map(|a| a.key.clone()).collect();
    assert_eq!(keys, ["hpc/shared/sb"]);
    a.stop().await;
    hub.stop().await;
}

#[tokio::test]
async fn a_restarted_spoke_prunes_what_was_withdrawn_while_it_was_down() {
    let pki = Pki::new(&spokes(&["a"]));
    let hub = Hub::start(&pki, primed(), any_port()).await;
    let registry = hub.registry.clone();
    assign(
        &registry,
        &minicluster(NS, "keep", "img:1", &[("k", "a", 1)]),
    );
    assign(
        &registry,
        &minicluster(NS, "gone", "img:1", &[("g", "a", 1)]),
    );
    let mut spoke = SpokeAgent::start(&pki, "a", &hub.uri(), FakeCluster::new());
    spoke
        .applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;
    let cluster = spoke.stop().await;
    assert!(cluster.get(Kind::Job, NS, "g").is_some());

    // While the spoke is down, "gone" loses its burst.
    registry.set(&McKey::new(NS, "gone"), McInfo::default(), vec![], vec![]);
    cluster.clear_ops();
    let mut spoke = SpokeAgent::start(&pki, "a", &hub.uri(), cluster);
    spoke
        .applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;
    assert!(spoke.cluster.get(Kind::Job, NS, "g").is_none(), "pruned");
    assert!(spoke.cluster.get(Kind::Job, NS, "k").is_some(), "kept");
    assert!(
        spoke
            .cluster
            .deleted()
            .iter()
            .all(|r| r.name.starts_with('g')),
        "{:?}",
        spoke.cluster.deleted()
    );
    spoke.stop().await;
    hub.stop().await;
}

#[tokio::test]
async fn a_hub_outage_and_restart_delete_nothing_and_the_state_is_rebuilt() {
    let pki = Pki::new(&spokes(&["a"]));
    let hub = Hub::start(&pki, primed(), any_port()).await;
    let first_epoch = hub.registry.epoch().to_string();
    let mc = minicluster(NS, "lammps", "img:1", &[("burst-a", "a", 2)]);
    assign(&hub.registry, &mc);
    let mut spoke = SpokeAgent::start(&pki, "a", &hub.uri(), FakeCluster::new());
    spoke
        .applied_version(&first_epoch, version_of(&hub.registry, "a"))
        .await;
    let objects = spoke.cluster.refs();
    spoke.cluster.clear_ops();

    // The link drops: the hub goes away mid-stream.
    let addr = hub.stop().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(spoke.cluster.deleted().is_empty());

    // A restarted hub that has not rebuilt its state refuses Watch: still nothing deleted.
    let restarted = Registry::new();
    let hub = Hub::start(&pki, restarted.clone(), addr).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        spoke.cluster.deleted().is_empty(),
        "an unprimed hub sends nothing"
    );

    // The state is rebuilt from the MiniClusters (what the hub does at start-up), then
    // spokes are let in: the spoke acknowledges the new epoch, nothing was deleted and the
    // unchanged objects were not rewritten.
    assign(&restarted, &mc);
    restarted.set_primed();
    spoke
        .applied_version(restarted.epoch(), version_of(&restarted, "a"))
        .await;
    assert_ne!(restarted.epoch(), first_epoch);
    assert!(spoke.cluster.deleted().is_empty());
    assert_eq!(spoke.cluster.refs(), objects);
    assert!(
        spoke.cluster.applied().is_empty(),
        "identical assignments are not re-applied: {:?}",
        spoke.cluster.applied()
    );
    caught_up(&restarted).await;
    spoke.stop().await;
    hub.stop().await;
}

#[tokio::test]
async fn a_link_dropped_mid_stream_deletes_nothing_and_the_spoke_catches_up() {
    let pki = Pki::new(&spokes(&["a"]));
    let hub = Hub::start(&pki, primed(), any_port()).await;
    let registry = hub.registry.clone();
    let epoch = registry.epoch().to_string();
    let link = Link::start(hub.addr).await;
    let mc = minicluster(NS, "lammps", "img:1", &[("burst-a", "a", 2)]);
    assign(&registry, &mc);
    let mut spoke = SpokeAgent::start(&pki, "a", &link.uri(), FakeCluster::new());
    spoke
        .applied_version(&epoch, version_of(&registry, "a"))
        .await;
    let objects = spoke.cluster.refs();
    spoke.cluster.clear_ops();

    // The network fails while hub and spoke keep running; the hub sees the spoke go.
    link.cut();
    eventually("the hub noticing the spoke is gone", || {
        let s = registry.spokes(&|_| true).spokes.pop()?;
        (!s.connected).then_some(())
    })
    .await;
    // A change made meanwhile cannot reach the spoke; its running burst is untouched.
    let updated = minicluster(NS, "lammps", "img:2", &[("burst-a", "a", 2)]);
    assign(&registry, &updated);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        spoke.cluster.deleted().is_empty(),
        "a broken link deletes nothing"
    );
    assert_eq!(
        job_image(&spoke.cluster, "burst-a").as_deref(),
        Some("img:1")
    );

    // The link comes back: the spoke reconnects to the same hub (same epoch), receives
    // the snapshot it missed and applies only what changed.
    link.restore();
    spoke
        .applied_version(&epoch, version_of(&registry, "a"))
        .await;
    assert_eq!(registry.epoch(), epoch, "the hub did not restart");
    assert_eq!(
        job_image(&spoke.cluster, "burst-a").as_deref(),
        Some("img:2")
    );
    assert!(spoke.cluster.deleted().is_empty());
    assert_eq!(
        spoke.cluster.refs(),
        objects,
        "the same objects, updated in place"
    );
    caught_up(&registry).await;
    spoke.stop().await;
    hub.stop().await;
}

#[tokio::test]
async fn refused_identities() {
    let pki = Pki::new(&spokes(&["a"]));
    let hub = Hub::start(&pki, primed(), any_port()).await;
    assign(
        &hub.registry,
        &minicluster(NS, "m", "img:1", &[("ba", "a", 1)]),
    );
    let settings = TransportSettings::default();
    let connect = |security: ClientSecurity| {
        let endpoint = settings.endpoint(&hub.uri(), &security).expect("endpoint");
        async move { endpoint.connect().await }
    };

    // An admin certificate cannot watch a spoke's assignments.
    let channel = connect(pki.admin()).await.expect("admin connects");
    let err = SpokeClient::new(channel)
        .watch(WatchRequest::default())
        .await
        .expect_err("admin on Spoke");
    assert_eq!(err.code(), Code::PermissionDenied);

    // A spoke certificate cannot use the admin service.
    let channel = connect(pki.spoke("a")).await.expect("spoke connects");
    let err = AdminClient::new(channel)
        .list_mini_clusters(ListMiniClustersRequest::default())
        .await
        .expect_err("spoke on Admin");
    assert_eq!(err.code(), Code::PermissionDenied);

    // A certificate from another CA is refused during the handshake or on the first call.
    let refused = match connect(pki.impostor()).await {
        Err(_) => true,
        Ok(channel) => SpokeClient::new(channel)
            .watch(WatchRequest::default())
            .await
            .is_err(),
    };
    assert!(
        refused,
        "a foreign CA's certificate must not get a snapshot"
    );
    hub.stop().await;
}

/// A spoke that reports far more often than any healthy one is answered
/// RESOURCE_EXHAUSTED (not recorded); other spokes are not affected.
#[tokio::test]
async fn a_spoke_reporting_in_a_loop_is_throttled_alone() {
    let pki = Pki::new(&spokes(&["a", "b"]));
    let hub = Hub::start(&pki, primed(), any_port()).await;
    let settings = TransportSettings::default();
    let client = |name: &str| {
        let endpoint = settings
            .endpoint(&hub.uri(), &pki.spoke(name))
            .expect("endpoint");
        async move { SpokeClient::new(endpoint.connect().await.expect("connects")) }
    };
    let mut a = client("a").await;
    let burst = flux_hub::server::report_limits::REPORT_BURST as usize;
    let mut refused = None;
    // More than the burst, faster than the refill: some report must be refused.
    for i in 0..burst * 2 {
        if let Err(status) = a.report(ReportRequest::default()).await {
            refused = Some((i, status));
            break;
        }
    }
    let (i, status) = refused.expect("a report loop is throttled");
    assert!(
        i >= burst,
        "refused after {i} reports, before the burst of {burst}"
    );
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("spoke a"), "{}", status.message());
    let mut b = client("b").await;
    b.report(ReportRequest::default())
        .await
        .expect("another spoke still reports");
    hub.stop().await;
}

#[tokio::test]
async fn the_admin_client_shows_bursts_and_spokes() {
    let pki = Pki::new(&spokes(&["a", "b"]));
    let hub = Hub::start(&pki, primed(), any_port()).await;
    let registry = hub.registry.clone();
    assign(
        &registry,
        &minicluster(
            NS,
            "lammps",
            "img:1",
            &[("burst-a", "a", 2), ("burst-b", "b", 1)],
        ),
    );
    let mut a = SpokeAgent::start(&pki, "a", &hub.uri(), FakeCluster::new());
    a.applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;
    a.cluster.set_job_status(
        NS,
        "burst-a",
        JobStatus {
            ready: Some(2),
            ..Default::default()
        },
    );
    let key = McKey::new(NS, "lammps");
    eventually("burst-a running", || {
        let (s, _) = registry.bursts(&key).first()?.report.clone()?;
        (s.phase == BurstPhase::Running as i32).then_some(())
    })
    .await;

    let channel = TransportSettings::default()
        .endpoint(&hub.uri(), &pki.admin())
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut admin = AdminClient::new(channel);
    let snapshot = admin
        .list_mini_clusters(ListMiniClustersRequest::default())
        .await
        .expect("list")
        .into_inner();
    let spokes = admin
        .list_spokes(ListSpokesRequest {})
        .await
        .expect("spokes")
        .into_inner();
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis(),
    )
    .expect("millis");
    let table = flux_hub::commands::status::table(&snapshot, &spokes, now);
    let row = |burst: &str| {
        table
            .lines()
            .find(|l| l.split_whitespace().nth(2) == Some(burst))
            .unwrap_or_else(|| panic!("no row for {burst} in\n{table}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let burst_a = row("burst-a");
    // JOINED and PATH are `-`: this in-process hub writes no MiniCluster status.
    assert_eq!(
        &burst_a[..12],
        [
            "hpc",
            "lammps",
            "burst-a",
            "a",
            "yes",
            "Running",
            "2",
            "-",
            "2",
            "2",
            "-",
            "203.0.113.9:30093"
        ],
        "{table}"
    );
    let burst_b = row("burst-b");
    assert_eq!(&burst_b[3..5], ["b", "no"], "b never connected:\n{table}");
    assert_eq!(
        &burst_b[6..10],
        ["0", "-", "1", "1"],
        "READY JOINED SIZE MAX:\n{table}"
    );
    let view = flux_hub::commands::status::view(&snapshot, &spokes);
    let json = serde_json::to_value(&view).expect("json");
    assert_eq!(json["spokes"][0]["name"], "a");
    assert_eq!(json["spokes"][0]["connected"], true);
    assert_eq!(
        json["miniClusters"][0]["createdUnixMillis"], CREATED_UNIX_MILLIS,
        "the MiniCluster's creation time crosses the wire for the AGE column"
    );
    a.stop().await;
    hub.stop().await;
}

#[tokio::test]
async fn an_admin_scales_a_burst_by_patching_the_minicluster() {
    let pki = Pki::new(&spokes(&["a"]));
    let api = FakeApi::default();
    let mut mc = minicluster(NS, "lammps", "img:1", &[("burst-a", "a", 1)]);
    if let Some(b) = mc.spec.flux.as_mut().and_then(|f| f.bursting.as_mut()) {
        b.clusters[0].max_size = Some(4);
    }
    api.insert(&mc);
    let hub = Hub::start_with_api(&pki, primed(), any_port(), api.client()).await;
    let settings = TransportSettings::default();
    let connect = |security: ClientSecurity| {
        let endpoint = settings.endpoint(&hub.uri(), &security).expect("endpoint");
        async move { endpoint.connect().await }
    };
    let scale = |burst: &str, size: i32| ScaleBurstRequest {
        namespace: NS.into(),
        name: "lammps".into(),
        burst: burst.into(),
        size,
    };
    let mut admin = AdminClient::new(connect(pki.admin()).await.expect("admin connects"));

    let answer = admin
        .scale_burst(scale("burst-a", 3))
        .await
        .expect("scaled")
        .into_inner();
    assert_eq!(
        (
            answer.previous_size,
            answer.size,
            answer.max_size,
            answer.generation,
            answer.spoke.as_str()
        ),
        (1, 3, 4, 2, "a")
    );
    let stored = api.get(NS, "lammps");
    assert_eq!(
        stored.spec.bursts()[0].size,
        3,
        "the spec holds the new size"
    );
    let calls = api.calls.lock().expect("calls").clone();
    let path = "/apis/flux-framework.org/v1alpha2/namespaces/hpc/miniclusters/lammps";
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].0, format!("GET {path}?"));
    assert_eq!(
        calls[1].0,
        format!("PATCH {path}?&fieldManager=flux-hub-admin%3Aops")
    );
    assert_eq!(
        calls[1].1,
        serde_json::json!([
            {"op": "replace", "path": "/metadata/resourceVersion", "value": "1"},
            {"op": "add", "path": "/spec/flux/bursting/clusters/0/size", "value": 3},
        ])
    );

    // Refusals carry the reason and write nothing.
    for (request, code, needle) in [
        (
            scale("burst-a", 5),
            Code::FailedPrecondition,
            "spec.flux.bursting.clusters[0].size: 5 is above the burst's maxSize 4",
        ),
        (
            scale("burst-z", 1),
            Code::NotFound,
            "has no burst \"burst-z\" (its bursts are burst-a)",
        ),
        (scale("burst-a", -1), Code::InvalidArgument, "at least 0"),
        (
            ScaleBurstRequest {
                name: "absent".into(),
                ..scale("burst-a", 1)
            },
            Code::NotFound,
            "MiniCluster hpc/absent not found",
        ),
    ] {
        let writes = api.calls.lock().expect("calls").len();
        let err = admin.scale_burst(request).await.expect_err(needle);
        assert_eq!(err.code(), code, "{}", err.message());
        assert!(err.message().contains(needle), "{}", err.message());
        let calls = api.calls.lock().expect("calls").clone();
        assert!(
            calls[writes..]
                .iter()
                .all(|(line, _)| line.starts_with("GET ")),
            "a refused scale writes nothing: {calls:?}"
        );
    }

    // Someone else changed the MiniCluster between the hub's read and its write: the
    // guarded patch is refused (409), and the hub reads and decides again.
    api.interfere(1);
    let answer = admin
        .scale_burst(scale("burst-a", 0))
        .await
        .expect("scaled after a conflict")
        .into_inner();
    assert_eq!((answer.previous_size, answer.size), (3, 0));
    assert_eq!(api.get(NS, "lammps").spec.bursts()[0].size, 0);

    // Only admins: a spoke's certificate is refused, and one from another CA.
    let before = api.calls.lock().expect("calls").len();
    let channel = connect(pki.spoke("a")).await.expect("spoke connects");
    let err = AdminClient::new(channel)
        .scale_burst(scale("burst-a", 4))
        .await
        .expect_err("spoke on ScaleBurst");
    assert_eq!(err.code(), Code::PermissionDenied);
    let refused = match connect(pki.impostor()).await {
        Err(_) => true,
        Ok(channel) => AdminClient::new(channel)
            .scale_burst(scale("burst-a", 4))
            .await
            .is_err(),
    };
    assert!(refused, "a foreign CA's certificate must not scale");

    // Admin scopes: an admin scoped to another namespace, or to reading, cannot scale
    // this one; an unscoped (older) admin cannot manage spokes.
    use flux_shared::federation::proto::{ForgetSpokeRequest, ListMiniClustersRequest};
    use flux_shared::federation::scope::{AdminScope, Permission};
    let other_ns = AdminScope::new([Permission::Read, Permission::Scale], &["elsewhere".into()])
        .expect("scope");
    let mut elsewhere = AdminClient::new(
        connect(pki.scoped_admin("team", &other_ns))
            .await
            .expect("connects"),
    );
    let err = elsewhere
        .scale_burst(scale("burst-a", 2))
        .await
        .expect_err("another namespace's admin");
    assert_eq!(err.code(), Code::PermissionDenied);
    assert!(
        err.message().contains("may not scale in namespace hpc")
            && err.message().contains("read,scale in elsewhere"),
        "{}",
        err.message()
    );
    let listed = elsewhere
        .list_mini_clusters(ListMiniClustersRequest::default())
        .await
        .expect("a scoped admin lists")
        .into_inner();
    assert!(
        listed.miniclusters.is_empty(),
        "it sees no MiniCluster of hpc: {listed:?}"
    );
    let err = elsewhere
        .list_mini_clusters(ListMiniClustersRequest {
            namespace: NS.into(),
        })
        .await
        .expect_err("reading another namespace");
    assert_eq!(err.code(), Code::PermissionDenied);
    let reader = AdminScope::new([Permission::Read], &[]).expect("scope");
    let mut reader = AdminClient::new(
        connect(pki.scoped_admin("viewer", &reader))
            .await
            .expect("connects"),
    );
    let err = reader
        .scale_burst(scale("burst-a", 2))
        .await
        .expect_err("a read-only admin");
    assert_eq!(err.code(), Code::PermissionDenied);
    let err = admin
        .forget_spoke(ForgetSpokeRequest { name: "a".into() })
        .await
        .expect_err("an unscoped admin forgets no spoke");
    assert_eq!(err.code(), Code::PermissionDenied);
    assert!(
        err.message().contains("may not manage spokes"),
        "{}",
        err.message()
    );
    assert_eq!(
        api.calls.lock().expect("calls").len(),
        before,
        "refused callers never reach the API server"
    );
    hub.stop().await;
}

#[tokio::test]
async fn the_hub_serves_grpc_health_to_authenticated_callers() {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let pki = Pki::new(&spokes(&["a"]));
    let hub = Hub::start(&pki, primed(), any_port()).await;
    let channel = TransportSettings::default()
        .endpoint(&hub.uri(), &pki.spoke("a"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut health = HealthClient::new(channel);
    for service in ["", "flux.federation.v1.Spoke", "flux.federation.v1.Admin"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.to_string(),
            })
            .await
            .unwrap_or_else(|e| panic!("health of {service:?}: {e}"))
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }
    hub.stop().await;
}

#[tokio::test]
async fn a_deleted_minicluster_is_confirmed_gone_by_its_spokes() {
    use flux_hub::federation::registry::BurstInfo;
    let pki = Pki::new(&spokes(&["a", "b"]));
    let hub = Hub::start(&pki, primed(), any_port()).await;
    let registry = hub.registry.clone();
    let mc = minicluster(NS, "doomed", "img:1", &[("da", "a", 1), ("db", "b", 1)]);
    assign(&registry, &mc);
    let mut a = SpokeAgent::start(&pki, "a", &hub.uri(), FakeCluster::new());
    a.applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;
    assert!(a.cluster.get(Kind::Job, NS, "da").is_some());

    // What the controller does for a MiniCluster with a deletionTimestamp.
    let key = McKey::new(NS, "doomed");
    let bursts: Vec<BurstInfo> = registry.bursts(&key).into_iter().map(|v| v.burst).collect();
    registry.withdraw(&key, McInfo::default(), bursts);
    a.applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;
    assert!(a.cluster.refs().is_empty(), "{:?}", a.cluster.refs());
    let progress = eventually("spoke a's confirmation", || {
        let p = registry.deletion_progress(&key);
        p.iter().any(|p| p.spoke == "a" && p.confirmed).then_some(p)
    })
    .await;
    // Spoke b never connected: its burst stays unconfirmed (the controller's timeout and
    // Event take over from here).
    assert!(progress.iter().any(|p| p.spoke == "b" && !p.confirmed));
    assert!(registry.bursts(&key)[1].deleting);
    a.stop().await;
    hub.stop().await;
}

/// A tenant with 1 MiB of scripts and four bursts on one spoke, next to another tenant's
/// small burst there: the spoke's snapshot is far over gRPC's 4 MiB message limit, but it
/// travels in parts, every burst is applied, and the small tenant's burst still scales.
#[tokio::test]
async fn a_large_tenant_does_not_stop_another_tenants_burst_on_the_same_spoke() {
    let pki = Pki::new(&spokes(&["a"]));
    let hub = Hub::start(&pki, primed(), any_port()).await;
    let registry = hub.registry.clone();
    let mut big = minicluster(
        NS,
        "big",
        "ghcr.io/x/big:1",
        &[
            ("big-0", "a", 1),
            ("big-1", "a", 1),
            ("big-2", "a", 1),
            ("big-3", "a", 1),
        ],
    );
    big.spec.containers[0].commands = Some(flux_shared::api::Commands {
        pre: Some("echo 'a line of a large setup script'\n".repeat(30_000)),
        ..Default::default()
    });
    assign(&registry, &big);
    assign(
        &registry,
        &minicluster(NS, "small", "ghcr.io/x/small:1", &[("small-burst", "a", 1)]),
    );
    {
        use prost::Message as _;
        let size = registry.snapshot("a").encoded_len();
        assert!(size > 4 << 20, "the whole snapshot is {size} bytes");
    }
    let mut spoke = SpokeAgent::start(&pki, "a", &hub.uri(), FakeCluster::new());
    spoke
        .applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;
    for job in ["big-0", "big-1", "big-2", "big-3", "small-burst"] {
        assert_eq!(job_parallelism(&spoke.cluster, job), Some(1), "{job}");
    }

    assign(
        &registry,
        &minicluster(NS, "small", "ghcr.io/x/small:1", &[("small-burst", "a", 2)]),
    );
    spoke
        .applied_version(registry.epoch(), version_of(&registry, "a"))
        .await;
    assert_eq!(job_parallelism(&spoke.cluster, "small-burst"), Some(2));
    spoke.stop().await;
    hub.stop().await;
}
