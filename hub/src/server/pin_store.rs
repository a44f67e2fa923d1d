//! The hub's pinned spoke certificates ([`flux_shared::federation::pins`]): the ConfigMap
//! that holds them, watched, and the writes of `PinSpoke` and `ForgetSpoke`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use flux_shared::federation::pins;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use tonic::Status;

use super::watched_data::{Known, WatchedData, write_key};

/// The pins, as the hub currently knows them. Cheap to clone.
#[derive(Clone, Debug)]
pub struct PinStore {
    pins: WatchedData,
    /// Where they live (namespace, name); `None`: pinning is off (insecure development,
    /// or no gRPC server).
    at: Option<(String, String)>,
    /// Whether a spoke is refused while the ConfigMap is missing (`flux-hub run` without
    /// `--allow-unpinned-spokes`).
    required: bool,
    /// Whether this process has seen pins: from then on a missing ConfigMap (deleted)
    /// refuses every spoke, whatever `required` says.
    seen: Arc<AtomicBool>,
}

impl PinStore {
    /// No pinning (the insecure development mode has no certificates to pin).
    pub fn off() -> PinStore {
        PinStore::over(WatchedData::fixed(Known::Missing), None)
    }

    /// Pins kept in ConfigMap `namespace/name` of `client`'s cluster, watched from now on
    /// (on the current tokio runtime; the watch ends with the process). A spoke is refused
    /// while the ConfigMap is missing.
    pub fn watch(client: kube::Client, namespace: &str, name: &str) -> PinStore {
        PinStore::over(
            WatchedData::watch(client, namespace, name, "spoke pins"),
            Some((namespace.to_string(), name.to_string())),
        )
        .requiring(true)
    }

    fn over(pins: WatchedData, at: Option<(String, String)>) -> PinStore {
        PinStore {
            pins,
            at,
            required: false,
            seen: Arc::default(),
        }
    }

    /// Whether a spoke is refused while the ConfigMap is missing (`false`: an install older
    /// than pinning, whose spokes were never pinned, until pins appear).
    pub fn requiring(mut self, required: bool) -> PinStore {
        self.required = required;
        self
    }

    /// Whether the certificate with DER `leaf` may speak for `spoke`: `UNAVAILABLE` until
    /// the pins are listed, `PERMISSION_DENIED` (saying why) when it is not the pinned one.
    /// Without a certificate (insecure development) nothing is checked.
    pub fn check(&self, spoke: &str, leaf: Option<&[u8]>) -> Result<(), Status> {
        let Some(leaf) = leaf else {
            return Ok(());
        };
        self.pins.read(|known| {
            let pins = match known {
                Known::NotYet => {
                    return Err(Status::unavailable(
                        "the hub has not read its spoke pins yet; retry",
                    ));
                }
                Known::Missing if self.required || self.seen.load(Ordering::Relaxed) => {
                    let at = self
                        .at
                        .as_ref()
                        .map_or_else(String::new, |(ns, name)| format!(" {ns}/{name}"));
                    return Err(Status::permission_denied(format!(
                        "spoke {spoke}: the hub's spoke pins (ConfigMap{at}) are missing, so no spoke certificate is pinned; run flux-hub join {spoke} to pin its certificate"
                    )));
                }
                Known::Missing => None,
                Known::Data(p) => {
                    self.seen.store(true, Ordering::Relaxed);
                    Some(p)
                }
            };
            pins::check(pins, spoke, &pins::fingerprint(leaf)).map_err(Status::permission_denied)
        })
    }

    /// Resolves once the certificate with DER `leaf` may no longer speak for `spoke` (its
    /// pin was replaced or removed): the end of that spoke's open stream.
    pub fn revoked(
        &self,
        spoke: String,
        leaf: Option<Vec<u8>>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let store = self.clone();
        let refused = self
            .pins
            .until_refused(move || store.check(&spoke, leaf.as_deref()));
        async move {
            let status = refused.await;
            tracing::warn!(reason = %status.message(), "ending the stream of a spoke whose certificate is no longer pinned");
        }
    }

    /// Pins `fingerprint` for `spoke` (creating the ConfigMap, which turns pinning on, if
    /// needed). Returns the fingerprint it replaced, if any.
    pub async fn pin(
        &self,
        client: &kube::Client,
        spoke: &str,
        fingerprint: &str,
    ) -> Result<Option<String>, Status> {
        let (api, name) = self.api(client)?;
        write_key(&api, &name, spoke, Some(fingerprint))
            .await
            .map_err(write_error)
    }

    /// Removes `spoke`'s pin, if there is one: its certificate is refused from now on.
    pub async fn unpin(&self, client: &kube::Client, spoke: &str) -> Result<(), Status> {
        let (api, name) = self.api(client)?;
        write_key(&api, &name, spoke, None)
            .await
            .map(drop)
            .map_err(write_error)
    }

    fn api(&self, client: &kube::Client) -> Result<(Api<ConfigMap>, String), Status> {
        let Some((namespace, name)) = &self.at else {
            return Err(Status::failed_precondition(
                "this hub runs without certificates (insecure development): there is nothing to pin",
            ));
        };
        Ok((Api::namespaced(client.clone(), namespace), name.clone()))
    }
}

fn write_error(e: kube::Error) -> Status {
    Status::unavailable(format!("storing the spoke pins: {e}"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn with(known: Known) -> PinStore {
        PinStore::over(WatchedData::fixed(known), None)
    }

    #[test]
    fn a_missing_configmap_refuses_spokes_when_required_or_once_pins_were_seen() {
        let der = b"certificate";
        let fp = pins::fingerprint(der);
        let required = with(Known::Missing).requiring(true);
        assert_eq!(
            required.check("a", Some(der)).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
        // An install older than pinning: open until pins appear, then never again in this
        // process, even if the ConfigMap is deleted.
        let data = WatchedData::fixed(Known::Missing);
        let old = PinStore::over(data.clone(), None);
        assert!(old.check("a", Some(der)).is_ok());
        data.set(Known::Data(BTreeMap::from([("a".into(), fp)])));
        assert!(old.check("a", Some(der)).is_ok());
        data.set(Known::Missing);
        assert_eq!(
            old.check("a", Some(der)).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
    }
    #[test]
    fn checks_follow_what_is_known() {
        let der = b"certificate";
        let fp = pins::fingerprint(der);
        assert_eq!(
            with(Known::NotYet)
                .check("a", Some(der))
                .unwrap_err()
                .code(),
            tonic::Code::Unavailable
        );
        assert!(with(Known::Missing).check("a", Some(der)).is_ok());
        let pinned = with(Known::Data(BTreeMap::from([("a".into(), fp)])));
        assert!(pinned.check("a", Some(der)).is_ok());
        assert_eq!(
            pinned.check("a", Some(b"other")).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
        assert_eq!(
            pinned.check("b", Some(der)).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
        assert!(
            pinned.check("b", None).is_ok(),
            "insecure: nothing to check"
        );
    }
}
