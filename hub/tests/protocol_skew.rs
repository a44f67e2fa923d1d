//! The protocol revision on the hub's real services: a spoke one revision away is served
//! and told the hub's; one further away is refused with FAILED_PRECONDITION and a reason
//! that says which side to upgrade, counted, shown in `ListSpokes` until it connects, and
//! put in one Event per new reason (not one per retry) on the spoke pins' ConfigMap.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flux_hub::federation::registry::Registry;
use flux_hub::federation::served::Served;
use flux_hub::ops::metrics::Metrics;
use flux_hub::server::service::{self, Services};
use flux_hub::server::spoke_events::SpokeEvents;
use flux_shared::federation::pki::{Ca, IssuedCert};
use flux_shared::federation::proto::spoke_client::SpokeClient;
use flux_shared::federation::proto::{ReportRequest, WatchRequest};
use flux_shared::federation::protocol::{REVISION, REVISION_HEADER};
use flux_shared::federation::tls::{ServerSecurity, TransportSettings};
use kube::runtime::events::{Recorder, Reporter};
use tonic::Code;

mod grpc;

const LIMIT: Duration = Duration::from_secs(10);

struct Pki {
    ca: Ca,
    hub: IssuedCert,
}

async fn serve(
    pki: &Pki,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    events: SpokeEvents,
) -> SocketAddr {
    let listener = service::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let security = ServerSecurity::Mtls(grpc::pem(&pki.ca, &pki.hub));
    let services = Services::new(
        registry,
        security.authenticator(),
        metrics,
        grpc::no_api_server(),
    )
    .with_spoke_events(events);
    tokio::spawn(service::serve(
        listener,
        security,
        None,
        TransportSettings::default(),
        services,
        std::future::pending(),
    ));
    addr
}

async fn client(pki: &Pki, addr: SocketAddr, name: &str) -> SpokeClient<tonic::transport::Channel> {
    let leaf = pki
        .ca
        .issue_client(&flux_shared::federation::Identity::spoke(name).unwrap(), 1)
        .unwrap();
    grpc::spoke_client(&pki.ca, &leaf, addr).await
}

fn declaring<T>(message: T, revision: Option<&str>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(r) = revision {
        request
            .metadata_mut()
            .insert(REVISION_HEADER, r.parse().unwrap());
    }
    request
}

#[tokio::test]
async fn a_spoke_outside_the_window_is_refused_with_a_reason_shown_and_one_event() {
    let ca = Ca::generate("skew test CA").unwrap();
    let hub = ca
        .issue_server(&["hub.test".into()], &["127.0.0.1".parse().unwrap()], 1)
        .unwrap();
    let pki = Pki { ca, hub };
    let registry = Registry::new();
    registry.set_primed();
    let metrics = Arc::new(Metrics::new());
    // The API server the Events go to: every request it gets is seen here.
    let (api, mut requests) = tower_test::mock::pair::<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >();
    let recorder = Recorder::new(
        kube::Client::new(api, "default"),
        Reporter {
            controller: "flux-hub".into(),
            instance: Some("test".into()),
        },
    );
    let events =
        SpokeEvents::on_config_map(recorder, "flux-operator-system", "flux-hub-spoke-pins");
    let addr = serve(&pki, registry.clone(), metrics.clone(), events).await;
    let mut spoke = client(&pki, addr, "west").await;

    // Two revisions ahead: refused, twice (a spoke retries), on Watch and on Report.
    let too_new = (REVISION + 2).to_string();
    for _ in 0..2 {
        let refused = spoke
            .watch(declaring(WatchRequest::default(), Some(&too_new)))
            .await
            .expect_err("refused");
        assert_eq!(refused.code(), Code::FailedPrecondition);
        assert_eq!(
            refused.message(),
            format!(
                "spoke west speaks protocol revision {too_new}; this hub speaks {REVISION} and serves {} to {}: upgrade this hub",
                REVISION - 1,
                REVISION + 1
            )
        );
    }
    let report = spoke
        .report(declaring(ReportRequest::default(), Some(&too_new)))
        .await
        .expect_err("refused");
    assert_eq!(report.code(), Code::FailedPrecondition);
    let unreadable = spoke
        .report(declaring(ReportRequest::default(), Some("two")))
        .await
        .expect_err("refused");
    assert_eq!(unreadable.code(), Code::FailedPrecondition);
    assert!(
        unreadable.message().contains("\"two\""),
        "{}",
        unreadable.message()
    );

    // Shown to admins, with nothing connected.
    let listed = registry.spokes(&|_| true);
    let west = listed
        .spokes
        .iter()
        .find(|s| s.name == "west")
        .expect("listed");
    assert!(!west.connected);
    assert!(
        west.refusal.contains("upgrade this hub") || west.refusal.contains("\"two\""),
        "{}",
        west.refusal
    );
    assert!(west.refused_unix_millis > 0);
    assert_eq!(listed.hub_protocol_revision, REVISION);
    let text = metrics.encode();
    for line in [
        "flux_hub_spoke_refusals_total{spoke=\"west\",reason=\"protocol-too-new\"} 3",
        "flux_hub_spoke_refusals_total{spoke=\"west\",reason=\"protocol-unreadable\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }

    // One Event per new reason: the too-new one, then the unreadable one; not one per call.
    let mut notes = Vec::new();
    for _ in 0..2 {
        let (request, respond) = tokio::time::timeout(LIMIT, requests.next_request())
            .await
            .expect("an Event")
            .expect("the mock API server is open");
        assert_eq!(request.method(), http::Method::POST);
        assert_eq!(
            request.uri().path(),
            "/apis/events.k8s.io/v1/namespaces/flux-operator-system/events"
        );
        let body = request.into_body().collect_bytes().await.unwrap();
        let event: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(event["reason"], "SpokeRefused");
        assert_eq!(event["type"], "Warning");
        assert_eq!(event["regarding"]["kind"], "ConfigMap");
        assert_eq!(event["regarding"]["name"], "flux-hub-spoke-pins");
        notes.push(event["note"].as_str().unwrap_or_default().to_string());
        respond.send_response(
            http::Response::builder()
                .status(201)
                .body(kube::client::Body::from(body.to_vec()))
                .unwrap(),
        );
    }
    notes.sort();
    assert!(notes[0].contains("\"two\""), "{notes:?}");
    assert!(notes[1].contains("upgrade this hub"), "{notes:?}");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), requests.next_request())
            .await
            .is_err(),
        "no Event per retry"
    );

    // One revision away, or none declared (release 0.1.0): served, and told the hub's.
    for declared in [Some((REVISION + 1).to_string()), None] {
        let response = spoke
            .watch(declaring(WatchRequest::default(), declared.as_deref()))
            .await
            .expect("served");
        assert_eq!(
            response
                .metadata()
                .get(REVISION_HEADER)
                .map(|v| v.to_str().unwrap().to_string()),
            Some(REVISION.to_string())
        );
        let listed = registry.spokes(&|_| true);
        let west = listed
            .spokes
            .iter()
            .find(|s| s.name == "west")
            .expect("listed");
        assert!(west.connected);
        assert_eq!(west.refusal, "", "a refusal is cleared once it connects");
        let expected = declared.as_deref().map_or(1, |d| d.parse().unwrap());
        assert_eq!(west.protocol_revision, expected);
        drop(response);
        // The stream's end is seen before the next Watch under the same name.
        let deadline = tokio::time::Instant::now() + LIMIT;
        while registry
            .spokes(&|_| true)
            .spokes
            .iter()
            .any(|s| s.name == "west" && s.connected)
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the stream never ended"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
