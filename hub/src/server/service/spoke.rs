//! The `Spoke` service: a spoke's Watch (its snapshots, in parts) and its Reports.

use flux_shared::federation::proto::spoke_server::Spoke;
use flux_shared::federation::proto::{
    RelayFrame, ReportRequest, ReportResponse, Snapshot, WatchRequest,
};
use flux_shared::federation::{BurstKey, parts};
use futures::StreamExt;
use tokio_stream::wrappers::WatchStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument as _, debug, info, info_span, warn};

use crate::federation::served::{RelayRefusal, SubscribeError, Subscription};
use crate::server::relay;
use crate::server::report_limits::{self};

use super::{BoxStream, Services, not_ready};

#[tonic::async_trait]
impl Spoke for Services {
    type WatchStream = BoxStream<Snapshot>;
    type RelayStream = BoxStream<RelayFrame>;

    async fn relay(
        &self,
        request: Request<Streaming<RelayFrame>>,
    ) -> Result<Response<Self::RelayStream>, Status> {
        let (spoke, leaf) = self.pinned_spoke(&request)?;
        self.spoke_revision(&spoke, &request)?;
        let key = request
            .metadata()
            .get(flux_shared::federation::RELAY_KEY)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let span = info_span!("relay", %spoke, %key);
        let refused = |refusal: RelayRefusal| {
            self.metrics.relay_refused(&spoke, refusal.reason());
            // A broker's ZeroMQ retries several times a second: only what may be an attack
            // is logged at info; the metric counts every refusal.
            span.in_scope(|| match refusal {
                RelayRefusal::NotAssigned(_) => {
                    info!(reason = refusal.reason(), "relayed connection refused")
                }
                _ => debug!(reason = refusal.reason(), "relayed connection refused"),
            });
            refusal.status()
        };
        // Each call counts, refused or not: a broker refused connects again at once.
        let rates = self.relay_timeouts.rates;
        if !self
            .relays
            .rates
            .allow_call(&spoke, &rates, std::time::Instant::now())
        {
            return Err(refused(RelayRefusal::CallRate {
                spoke: spoke.clone(),
                per_second: rates.calls_per_second as u64,
            }));
        }
        // Parsed once, here: a key that is no burst key is assigned nothing, and refused
        // as any key that is not assigned.
        let burst = key
            .parse::<BurstKey>()
            .map_err(|_| refused(RelayRefusal::NotAssigned(key.clone())))?;
        let target = self
            .registry
            .relay_target(&spoke, &burst)
            .map_err(refused)?;
        let held = self.relays.take(&key, target.brokers).map_err(refused)?;
        let tcp = relay::dial(&target.lead).await.map_err(refused)?;
        let minicluster = burst.minicluster().to_string();
        let meter = self.metrics.relay_opened(&spoke, &minicluster);
        span.in_scope(|| debug!(lead = %target.lead.uri(), "relayed connection open"));
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let (registry, metrics) = (self.registry.clone(), self.metrics.clone());
        let timeouts = self.relay_timeouts;
        let budget = self.relays.rates.bytes(&spoke, &rates);
        let changes = registry.admin_changes();
        // Like Watch: a certificate unpinned or replaced (rotated) while the call is open
        // ends it, and so does the hub's stop.
        let revoked = self.pins.revoked(spoke.clone(), leaf);
        let stopped = self.stopped();
        let now = async move {
            tokio::select! {
                () = revoked => Status::permission_denied(
                    "this spoke's certificate is no longer the one pinned for it",
                ),
                () = stopped => Status::unavailable("the hub is stopping"),
            }
        };
        let inbound = request.into_inner();
        tokio::spawn(
            async move {
                let _held = held;
                let standing = || match registry.relay_target(&spoke, &burst) {
                    Ok(t) if t.lead == target.lead => relay::Standing::Relayed,
                    Err(RelayRefusal::NoBrokers(_)) => relay::Standing::Leaving,
                    _ => relay::Standing::Ended,
                };
                let ends = relay::Ends {
                    changes,
                    standing,
                    now,
                };
                let carried = relay::pump(tcp, inbound, tx, ends, timeouts, &meter, &budget).await;
                metrics.relay_closed(&spoke, &minicluster);
                debug!(
                    to_lead = carried.to_lead,
                    from_lead = carried.from_lead,
                    "relayed connection closed"
                );
            }
            .instrument(span),
        );
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let (spoke, leaf) = self.pinned_spoke(&request)?;
        let revision = self.spoke_revision(&spoke, &request)?;
        let not_after = leaf
            .as_deref()
            .and_then(flux_shared::federation::pki::not_after_unix);
        let issuer = leaf
            .as_deref()
            .and_then(flux_shared::federation::pki::issuer_key_id)
            .unwrap_or_default();
        let revoked = self.pins.revoked(spoke.clone(), leaf);
        let req = request.into_inner();
        super::report_limits::check_spoke_version(&req.spoke_version)
            .map_err(|e| Status::invalid_argument(format!("spoke {spoke}: {e}")))?;
        let span = info_span!("watch", %spoke, spoke_version = %req.spoke_version, revision);
        // What crosses the trust line is checked before it is kept.
        let exceptions = flux_shared::federation::policy::Announced::from_proto(&req.exceptions)
            .map_err(|e| {
                Status::invalid_argument(format!("spoke {spoke}'s policy exceptions: {e}"))
            })?;
        let labels: std::collections::BTreeMap<String, String> = req.labels.into_iter().collect();
        flux_shared::federation::spoke_labels::check(&labels)
            .map_err(|e| Status::invalid_argument(format!("spoke {spoke}'s {e}")))?;
        let subscription = match self.registry.clone().subscribe(
            &spoke,
            &req.spoke_version,
            exceptions,
            labels,
        ) {
            Ok(s) => s,
            Err(SubscribeError::NotReady) => return Err(not_ready()),
            Err(SubscribeError::AlreadyConnected) => {
                self.metrics.spoke_stream_refused();
                self.metrics.fleet.spoke_refused(&spoke, "second-stream");
                span.in_scope(|| {
                    warn!("refusing a second Watch stream under a connected spoke's name")
                });
                return Err(Status::already_exists(format!(
                    "spoke {spoke} already holds a Watch stream: another process is using its certificate, or its previous connection has not timed out yet (then a retry succeeds)"
                )));
            }
        };
        span.in_scope(|| {
            info!(
                applied_epoch = %req.applied_hub_epoch,
                applied_version = req.applied_version,
                "spoke connected"
            )
        });
        self.registry.set_protocol_revision(&spoke, revision);
        if let Some(not_after) = not_after {
            self.registry.set_certificate(&spoke, not_after, &issuer);
            self.metrics
                .set_certificate_expiry(&format!("spoke/{spoke}"), not_after);
        }
        let Subscription { versions, guard } = subscription;
        self.metrics.fleet.set_spoke_connected(&spoke, true);
        // Marked gone before the registry lets another stream of the spoke in.
        let guard = Held {
            _connected: Connected(self.metrics.clone(), spoke.clone()),
            _registry: guard,
        };
        let (metrics, registry) = (self.metrics.clone(), self.registry.clone());
        let (accepts_parts, accepts_shared) = (req.accepts_parts, req.accepts_shared_specs);
        let stream = WatchStream::new(versions)
            .flat_map(move |_| {
                // The guard lives as long as the stream: dropping the stream (the spoke went
                // away) marks the spoke disconnected.
                let _connected = &guard;
                metrics.snapshot_sent();
                let mut snapshot = registry.snapshot(&spoke);
                if accepts_shared {
                    // Each MiniCluster's spec once per snapshot, not once per burst.
                    parts::send_shared(&mut snapshot);
                }
                // Parts of bounded size for spokes that assemble them: no tenant's size
                // can make a spoke's snapshot unsendable.
                let parts = if accepts_parts {
                    parts::split(snapshot, parts::PART_BUDGET)
                } else {
                    vec![snapshot]
                };
                futures::stream::iter(parts.into_iter().map(Ok))
            })
            .take_until(self.stopped())
            // A certificate unpinned while its stream is open loses the stream; the
            // spoke's next Watch is refused.
            .take_until(revoked);
        let mut response = Response::new(Box::pin(stream) as Self::WatchStream);
        // The spoke checks the hub's revision before it reads a snapshot.
        response.metadata_mut().insert(
            flux_shared::federation::protocol::REVISION_HEADER,
            flux_shared::federation::protocol::revision_value(),
        );
        Ok(response)
    }

    async fn report(
        &self,
        request: Request<ReportRequest>,
    ) -> Result<Response<ReportResponse>, Status> {
        let (spoke, _) = self.pinned_spoke(&request)?;
        self.spoke_revision(&spoke, &request)?;
        let req = request.into_inner();
        let _span = info_span!("report", %spoke, applied_version = req.applied_version).entered();
        if !self.reports.allow(&spoke, std::time::Instant::now()) {
            // Not recorded: the spoke keeps it unsent and reports again later (every
            // report carries its whole state, so none is lost for good).
            warn!("spoke reports too often; report refused");
            self.metrics.fleet.spoke_refused(&spoke, "report-rate");
            return Err(Status::resource_exhausted(format!(
                "spoke {spoke} reports more often than {} per second; report again later",
                report_limits::REPORTS_PER_SECOND
            )));
        }
        self.metrics.report_received();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.metrics.fleet.spoke_reported(&spoke, now);
        let outcome = self.registry.report(&spoke, req);
        if let Some(waited) = outcome.applied_after {
            self.metrics
                .fleet
                .snapshot_applied(&spoke, waited.as_secs_f64());
        }
        for waited in outcome.first_ready {
            self.metrics.fleet.first_broker_ready(waited.as_secs_f64());
        }
        let mut response = Response::new(ReportResponse {});
        response.metadata_mut().insert(
            flux_shared::federation::protocol::REVISION_HEADER,
            flux_shared::federation::protocol::revision_value(),
        );
        Ok(response)
    }
}

/// A spoke's Watch stream held: fields drop in order, so the spoke is marked gone in the
/// metrics before the registry's guard lets a new stream of it in.
struct Held {
    _connected: Connected,
    _registry: Box<dyn Send + Sync>,
}

/// Sets `flux_hub_spoke_connected` to 0 when the stream ends.
struct Connected(std::sync::Arc<crate::ops::metrics::Metrics>, String);

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.fleet.set_spoke_connected(&self.1, false);
    }
}
