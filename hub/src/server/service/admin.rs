//! The `Admin` service: what an admin certificate may see and do (`flux-hub status`,
//! `burst scale`, `join`'s pins, `unjoin`'s forget), each call checked against its scope.

use std::collections::BTreeMap;

use flux_shared::federation::proto::admin_server::Admin;
use flux_shared::federation::proto::{
    ForgetSpokeRequest, ForgetSpokeResponse, ListMiniClustersRequest, ListSpokesRequest,
    ListSpokesResponse, MiniClusterSnapshot, PinSpokeRequest, PinSpokeResponse, ScaleBurstRequest,
    ScaleBurstResponse, WatchMiniClustersRequest,
};
use flux_shared::federation::scope::{AdminScope, Permission};
use futures::StreamExt;
use tokio_stream::wrappers::WatchStream;
use tonic::{Request, Response, Status};
use tracing::{Instrument as _, info, info_span, warn};

use crate::resize;

use super::{ADMIN_WATCHES_PER_IDENTITY, BoxStream, Services};

#[tonic::async_trait]
impl Admin for Services {
    async fn list_mini_clusters(
        &self,
        request: Request<ListMiniClustersRequest>,
    ) -> Result<Response<MiniClusterSnapshot>, Status> {
        let (admin, scope) = self.admin_scope(&request)?;
        let namespace = request.into_inner().namespace;
        require(&admin, &scope, Permission::Read, non_empty(&namespace))?;
        Ok(Response::new(visible(
            self.registry.admin_snapshot(&namespace),
            &scope,
        )))
    }

    type WatchMiniClustersStream = BoxStream<MiniClusterSnapshot>;

    async fn watch_mini_clusters(
        &self,
        request: Request<WatchMiniClustersRequest>,
    ) -> Result<Response<Self::WatchMiniClustersStream>, Status> {
        let (admin, scope) = self.admin_scope(&request)?;
        let leaf = request
            .peer_certs()
            .and_then(|c| c.first().map(|c| c.as_ref().to_vec()));
        let revoked = self.revocations.revoked(admin.clone(), leaf);
        let namespace = request.into_inner().namespace;
        require(&admin, &scope, Permission::Read, non_empty(&namespace))?;
        let Some(place) = self.admin_watches.admit(&admin) else {
            warn!(%admin, "admin watch refused: too many open");
            return Err(Status::resource_exhausted(format!(
                "admin {admin} holds {ADMIN_WATCHES_PER_IDENTITY} open watches already, the most one admin may; end one (flux-hub status --watch) first"
            )));
        };
        let registry = self.registry.clone();
        let stream = WatchStream::new(self.registry.admin_changes())
            .map(move |_| {
                // The place is given back when the stream ends.
                let _watching = &place;
                Ok(visible(registry.admin_snapshot(&namespace), &scope))
            })
            .take_until(self.stopped())
            .take_until(revoked);
        info!(%admin, "admin watching MiniClusters");
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_spokes(
        &self,
        request: Request<ListSpokesRequest>,
    ) -> Result<Response<ListSpokesResponse>, Status> {
        let (admin, scope) = self.admin_scope(&request)?;
        require(&admin, &scope, Permission::Read, None)?;
        Ok(Response::new(self.registry.spokes(&|ns| scope.sees(ns))))
    }

    async fn forget_spoke(
        &self,
        request: Request<ForgetSpokeRequest>,
    ) -> Result<Response<ForgetSpokeResponse>, Status> {
        let (admin, scope) = self.admin_scope(&request)?;
        require(&admin, &scope, Permission::Spokes, None)?;
        let name = request.into_inner().name;
        let span = info_span!("forget_spoke", %admin, spoke = %name);
        let known = self
            .registry
            .forget_spoke(&name)
            .map_err(Status::failed_precondition)?;
        // Known or not (a hub restart forgets idle spokes), its certificate and its
        // labels go.
        let insecure_is_fine = |e: Status| {
            if e.code() == tonic::Code::FailedPrecondition {
                Ok(()) // nothing pinned or granted in insecure development
            } else {
                Err(e)
            }
        };
        self.pins
            .unpin(&self.client, &name)
            .instrument(span.clone())
            .await
            .or_else(insecure_is_fine)?;
        self.grants
            .revoke(&self.client, &name)
            .instrument(span.clone())
            .await
            .or_else(insecure_is_fine)?;
        let _span = span.entered();
        if known {
            info!("spoke forgotten and its certificate unpinned");
            Ok(Response::new(ForgetSpokeResponse {}))
        } else {
            Err(Status::not_found(format!(
                "this hub does not know a spoke named {name} (its pin, if any, is removed)"
            )))
        }
    }

    async fn pin_spoke(
        &self,
        request: Request<PinSpokeRequest>,
    ) -> Result<Response<PinSpokeResponse>, Status> {
        let (admin, scope) = self.admin_scope(&request)?;
        require(&admin, &scope, Permission::Spokes, None)?;
        let req = request.into_inner();
        let span = info_span!("pin_spoke", %admin, spoke = %req.name);
        flux_shared::federation::Identity::spoke(&req.name)
            .map_err(|e| Status::invalid_argument(format!("name {:?}: {e}", req.name)))?;
        if !flux_shared::federation::pins::is_fingerprint(&req.certificate_sha256) {
            return Err(Status::invalid_argument(format!(
                "certificate_sha256 {:?}: must be sha256: and 64 lowercase hex digits",
                req.certificate_sha256
            )));
        }
        let labels: BTreeMap<String, String> = req.labels.into_iter().collect();
        if req.grant_labels {
            flux_shared::federation::spoke_labels::check(&labels)
                .map_err(|e| Status::invalid_argument(format!("labels: {e}")))?;
        }
        let previous = self
            .pins
            .pin(&self.client, &req.name, &req.certificate_sha256)
            .instrument(span.clone())
            .await?;
        span.in_scope(|| info!(replaced = previous.is_some(), "spoke certificate pinned"));
        if req.grant_labels {
            self.grants
                .grant(&self.client, &req.name, &labels)
                .instrument(span.clone())
                .await?;
            span.in_scope(|| info!(?labels, "spoke labels granted"));
        }
        Ok(Response::new(PinSpokeResponse {
            previous_sha256: previous.unwrap_or_default(),
        }))
    }

    async fn scale_burst(
        &self,
        request: Request<ScaleBurstRequest>,
    ) -> Result<Response<ScaleBurstResponse>, Status> {
        let (admin, scope) = self.admin_scope(&request)?;
        let req = request.into_inner();
        require(&admin, &scope, Permission::Scale, Some(&req.namespace))?;
        let span = info_span!(
            "scale_burst",
            %admin,
            namespace = %req.namespace,
            minicluster = %req.name,
            burst = %req.burst,
            size = req.size,
        );
        self.scale(&admin.to_string(), req)
            .instrument(span)
            .await
            .map(Response::new)
    }
}

impl Services {
    /// `ScaleBurst`, for admin `admin` ([`resize::set_size`]).
    async fn scale(
        &self,
        admin: &str,
        req: ScaleBurstRequest,
    ) -> Result<ScaleBurstResponse, Status> {
        if req.namespace.is_empty() || req.name.is_empty() || req.burst.is_empty() {
            return Err(Status::invalid_argument(
                "namespace, name and burst are required",
            ));
        }
        if let Some(only) = self.namespace.as_deref().filter(|ns| *ns != req.namespace) {
            return Err(Status::not_found(format!(
                "MiniCluster {}/{}: this hub manages namespace {only} only",
                req.namespace, req.name
            )));
        }
        // The field manager names the admin, so managedFields shows who scaled.
        let manager = format!("flux-hub-admin:{admin}");
        let target = resize::Target {
            namespace: &req.namespace,
            name: &req.name,
            burst: &req.burst,
        };
        let (change, generation) =
            resize::set_size(&self.client, &self.metrics, &target, req.size, &manager)
                .await
                .map_err(|e| match e {
                    resize::SetSizeError::Refused(r) => Status::new(r.code, r.message),
                    resize::SetSizeError::NotFound(m) => Status::not_found(m),
                    resize::SetSizeError::KeptChanging(m) => Status::aborted(m),
                    resize::SetSizeError::Api { doing, error } => api_status(&doing, error),
                })?;
        Ok(ScaleBurstResponse {
            previous_size: change.previous,
            size: change.size,
            max_size: change.max_size,
            generation,
            spoke: change.spoke,
        })
    }
}

/// A failed API call of `ScaleBurst` as a gRPC status: the API server's refusals keep
/// their meaning (422: the API server's validation, with its message), the rest is
/// `Unavailable` (retry).
fn api_status(doing: &str, e: kube::Error) -> Status {
    match e {
        kube::Error::Api(e) if e.code == 404 => Status::not_found(format!("{doing}: not found")),
        kube::Error::Api(e) if e.code == 422 || e.code == 400 => Status::failed_precondition(
            format!("{doing}: the API server refused it: {}", e.message),
        ),
        kube::Error::Api(e) if e.code == 403 => Status::failed_precondition(format!(
            "{doing}: the hub's service account may not do it: {}",
            e.message
        )),
        e => Status::unavailable(format!("{doing}: {e}")),
    }
}

/// `PERMISSION_DENIED`, naming what the admin's certificate allows, unless `scope` allows
/// `permission` for `namespace`.
fn require(
    admin: &str,
    scope: &AdminScope,
    permission: Permission,
    namespace: Option<&str>,
) -> Result<(), Status> {
    if scope.allows(permission, namespace) {
        return Ok(());
    }
    let what = match namespace {
        Some(ns) => format!("{permission} in namespace {ns}"),
        None if permission == Permission::Spokes => "manage spokes".to_string(),
        None => format!("{permission} in every namespace"),
    };
    Err(Status::permission_denied(format!(
        "admin {admin} may not {what}: its certificate allows {scope} (flux-hub certs --admin NAME --admin-permission ... --admin-namespace ... issues another)"
    )))
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// `snapshot` with only the MiniClusters `scope` sees.
fn visible(mut snapshot: MiniClusterSnapshot, scope: &AdminScope) -> MiniClusterSnapshot {
    snapshot.miniclusters.retain(|m| {
        m.minicluster
            .as_ref()
            .is_some_and(|r| scope.sees(&r.namespace))
    });
    snapshot
}
