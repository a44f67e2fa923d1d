//! Revoked admin certificates ([`flux_shared::federation::pins::admin_revoked`]): the
//! ConfigMap that lists them, watched, checked in the TLS handshake and on every admin
//! call, and ending the open streams of a certificate revoked while they run.
//!
//! Kept apart from the spoke pins: creating the pins ConfigMap turns spoke pinning on, and
//! revoking an admin must not.

use flux_shared::federation::pins;
use tonic::Status;

use super::watched_data::{Known, WatchedData};

/// The revocations, as the hub currently knows them. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Revocations {
    revoked: WatchedData,
}

impl Revocations {
    /// Nothing is revoked (insecure development: no certificates at all).
    pub fn off() -> Revocations {
        Revocations::from(WatchedData::fixed(Known::Missing))
    }

    /// Revocations kept in ConfigMap `namespace/name` of `client`'s cluster, watched from
    /// now on (on the current tokio runtime).
    pub fn watch(client: kube::Client, namespace: &str, name: &str) -> Revocations {
        Revocations::from(WatchedData::watch(
            client,
            namespace,
            name,
            "revoked admin certificates",
        ))
    }

    /// Whether admin `admin` may call with the certificate of DER `leaf`: `UNAVAILABLE`
    /// until the revocations are listed, `PERMISSION_DENIED` (saying why) when it is
    /// revoked. Without a certificate (insecure development) nothing is checked.
    pub fn check(&self, admin: &str, leaf: Option<&[u8]>) -> Result<(), Status> {
        let Some(leaf) = leaf else {
            return Ok(());
        };
        self.revoked.read(|known| match known {
            Known::NotYet => Err(Status::unavailable(
                "the hub has not read its revoked admin certificates yet; retry",
            )),
            Known::Missing => Ok(()),
            Known::Data(revoked) => {
                match pins::admin_revoked(revoked, admin, &pins::fingerprint(leaf)) {
                    Some(why) => Err(Status::permission_denied(why)),
                    None => Ok(()),
                }
            }
        })
    }

    /// Resolves once the certificate with DER `leaf` of admin `admin` is revoked: the end of
    /// that admin's open stream.
    pub fn revoked(
        &self,
        admin: String,
        leaf: Option<Vec<u8>>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let store = self.clone();
        let refused = self
            .revoked
            .until_refused(move || store.check(&admin, leaf.as_deref()));
        async move {
            let status = refused.await;
            tracing::warn!(reason = %status.message(), "ending the stream of a revoked admin certificate");
        }
    }
}

impl From<WatchedData> for Revocations {
    /// Revocations as `revoked` knows them (tests set it by hand).
    fn from(revoked: WatchedData) -> Revocations {
        Revocations { revoked }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn checks_follow_what_is_known() {
        let der = b"certificate";
        let key = pins::certificate_revocation_key(&pins::fingerprint(der));
        let data = WatchedData::fixed(Known::NotYet);
        let store = Revocations::from(data.clone());
        let code = |r: Result<(), Status>| r.err().map(|s| s.code());
        assert_eq!(
            code(store.check("a", Some(der))),
            Some(tonic::Code::Unavailable)
        );
        data.set(Known::Missing);
        assert_eq!(code(store.check("a", Some(der))), None);
        data.set(Known::Data(BTreeMap::from([(key, String::new())])));
        assert_eq!(
            code(store.check("a", Some(der))),
            Some(tonic::Code::PermissionDenied)
        );
        assert_eq!(code(store.check("a", Some(b"other"))), None);
        assert_eq!(
            code(store.check("a", None)),
            None,
            "insecure: nothing to check"
        );
    }

    #[tokio::test]
    async fn an_open_stream_ends_when_its_certificate_is_revoked() {
        let data = WatchedData::fixed(Known::Missing);
        let store = Revocations::from(data.clone());
        let mut ended = Box::pin(store.revoked("a".into(), Some(b"certificate".to_vec())));
        data.set(Known::Data(BTreeMap::from([(
            pins::admin_revocation_key("b"),
            String::new(),
        )])));
        assert!(
            futures::poll!(&mut ended).is_pending(),
            "another admin's revocation"
        );
        data.set(Known::Data(BTreeMap::from([(
            pins::admin_revocation_key("a"),
            String::new(),
        )])));
        tokio::time::timeout(std::time::Duration::from_secs(5), ended)
            .await
            .expect("the stream ends");
    }
}
