//! The labels the root's owner granted each spoke
//! ([`flux_shared::federation::spoke_labels`]): the ConfigMap that holds them, watched and
//! followed into the registry, and the writes of `PinSpoke` (with labels, from `flux-hub
//! join --label`) and `ForgetSpoke`.

use std::collections::BTreeMap;
use std::sync::Arc;

use flux_shared::federation::spoke_labels::{parse_granted, render_granted};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use tonic::Status;
use tracing::warn;

use super::watched_data::{Known, WatchedData, write_key};
use crate::federation::registry::{LabelGrants, Registry};

/// The grants, as the hub currently knows them. Cheap to clone.
#[derive(Clone, Debug)]
pub struct GrantStore {
    data: WatchedData,
    /// Where they live (namespace, name); `None`: the labels spokes announce are taken
    /// as they are (a hub without certificates).
    at: Option<(String, String)>,
}

impl GrantStore {
    /// No grants: spokes' own labels count (insecure development, where any caller may
    /// name itself any spoke anyway).
    pub fn off() -> GrantStore {
        GrantStore {
            data: WatchedData::fixed(Known::Missing),
            at: None,
        }
    }

    /// Grants kept in ConfigMap `namespace/name` of `client`'s cluster, watched from now
    /// on (on the current tokio runtime; the watch ends with the process).
    pub fn watch(client: kube::Client, namespace: &str, name: &str) -> GrantStore {
        GrantStore {
            data: WatchedData::watch(client, namespace, name, "spoke label grants"),
            at: Some((namespace.to_string(), name.to_string())),
        }
    }

    /// A store over `data` at `at` (tests of what is read).
    pub fn fixed(known: Known, at: Option<(String, String)>) -> GrantStore {
        GrantStore {
            data: WatchedData::fixed(known),
            at,
        }
    }

    /// What the registry is to take the spokes' labels from, as known now: not yet
    /// while the ConfigMap is not listed; a missing ConfigMap grants no spoke any label;
    /// a value that does not parse grants that spoke none (and says so).
    pub fn current(&self) -> LabelGrants {
        if self.at.is_none() {
            return LabelGrants::Announced;
        }
        self.data.read(|known| match known {
            Known::NotYet => LabelGrants::NotYet,
            Known::Missing => LabelGrants::Granted(BTreeMap::new()),
            Known::Data(data) => LabelGrants::Granted(parsed(data)),
        })
    }

    /// Keeps `registry`'s [`LabelGrants`] as this store knows them, from now until the
    /// process ends.
    pub fn follow(&self, registry: Arc<Registry>) -> impl Future<Output = ()> + Send + 'static {
        let store = self.clone();
        let mut changes = self.data.subscribe();
        async move {
            loop {
                registry.set_label_grants(store.current());
                if changes.changed().await.is_err() {
                    return;
                }
            }
        }
    }

    /// Grants `spoke` exactly `labels` (none: takes its grant away), creating the
    /// ConfigMap if needed.
    pub async fn grant(
        &self,
        client: &kube::Client,
        spoke: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), Status> {
        let (api, name) = self.api(client)?;
        let value = (!labels.is_empty()).then(|| render_granted(labels));
        write_key(&api, &name, spoke, value.as_deref())
            .await
            .map(drop)
            .map_err(write_error)
    }

    /// Takes `spoke`'s grant away, if it has one.
    pub async fn revoke(&self, client: &kube::Client, spoke: &str) -> Result<(), Status> {
        let (api, name) = self.api(client)?;
        write_key(&api, &name, spoke, None)
            .await
            .map(drop)
            .map_err(write_error)
    }

    fn api(&self, client: &kube::Client) -> Result<(Api<ConfigMap>, String), Status> {
        let Some((namespace, name)) = &self.at else {
            return Err(Status::failed_precondition(
                "this hub runs without certificates (insecure development): spokes' labels are their own, there is nothing to grant",
            ));
        };
        Ok((Api::namespaced(client.clone(), namespace), name.clone()))
    }
}

/// Each spoke's granted labels; a value that does not parse grants none.
fn parsed(data: &BTreeMap<String, String>) -> BTreeMap<String, BTreeMap<String, String>> {
    data.iter()
        .filter_map(|(spoke, text)| match parse_granted(text) {
            Ok(labels) => Some((spoke.clone(), labels)),
            Err(e) => {
                warn!(%spoke, error = %e, "ignoring the labels granted to a spoke: they do not parse");
                None
            }
        })
        .collect()
}

fn write_error(e: kube::Error) -> Status {
    Status::unavailable(format!("storing the spoke label grants: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_read_from_the_configmap_and_a_bad_value_grants_nothing() {
        let at = Some(("flux-operator-system".to_string(), "grants".to_string()));
        assert_eq!(GrantStore::off().current(), LabelGrants::Announced);
        assert_eq!(
            GrantStore::fixed(Known::NotYet, at.clone()).current(),
            LabelGrants::NotYet
        );
        assert_eq!(
            GrantStore::fixed(Known::Missing, at.clone()).current(),
            LabelGrants::Granted(BTreeMap::new())
        );
        let data = BTreeMap::from([
            ("east".to_string(), "tier=gold,region=east".to_string()),
            ("broken".to_string(), "tier".to_string()),
        ]);
        let LabelGrants::Granted(granted) = GrantStore::fixed(Known::Data(data), at).current()
        else {
            panic!("granted");
        };
        assert_eq!(granted.keys().collect::<Vec<_>>(), ["east"]);
        assert_eq!(granted["east"]["tier"], "gold");
    }
}
