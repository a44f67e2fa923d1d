//! What `flux-hub init` checks before it narrows the hub's trust: the end of a CA renewal
//! (`flux-hub certs --drop-previous-ca`) makes the hub refuse every certificate of the
//! previous CA, so a spoke still connected with one would be cut off, and with it the
//! relays of its bursts, until it is joined again. Init asks the hub which CA issued each
//! connected spoke's certificate and refuses, naming the spokes, unless `--force`. A hub
//! installed again with a CA of another federation is not a renewal, and is not checked.

use anyhow::bail;
use flux_shared::federation::pki::key_ids_of_pem;
use flux_shared::federation::proto::SpokeInfo;
use flux_shared::federation::tls_flags::TlsFlags;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::commands::admin_client::{HubEndpoint, HubOptions};
use crate::commands::admin_context::HubAddress;
use crate::commands::install::{HUB_NAMESPACE, HUB_TLS_SECRET};

/// The key identifiers of the CAs `installed` trusts and `next` does not.
pub fn dropped_cas(installed: &str, next: &str) -> Vec<String> {
    let kept = key_ids_of_pem(next);
    key_ids_of_pem(installed)
        .into_iter()
        .filter(|id| !kept.contains(id))
        .collect()
}

/// Whether two trusts are of one federation (a renewal's), both readable.
pub fn same_federation(installed: &str, next: &str) -> bool {
    use flux_shared::federation::pki::renewal::federation_of_trust;
    matches!(
        (federation_of_trust(installed), federation_of_trust(next)),
        (Ok(a), Ok(b)) if a == b
    )
}

/// The connected spokes that a hub no longer trusting `dropped` would cut off: those whose
/// certificate one of them issued, and those whose issuer the hub does not know.
pub fn cut_off(dropped: &[String], spokes: &[SpokeInfo]) -> Vec<String> {
    spokes
        .iter()
        .filter(|s| {
            s.connected
                && (s.certificate_issuer.is_empty() || dropped.contains(&s.certificate_issuer))
        })
        .map(|s| s.name.clone())
        .collect()
}

/// Refuses, unless `force`, to install `next_ca_pem` as the hub's trust while it drops a CA
/// a connected spoke's certificate comes from. `hub_context` names the admin context to
/// ask the hub with (init's own).
pub async fn refuse_to_cut_off_spokes(
    client: &kube::Client,
    next_ca_pem: &str,
    hub_context: &str,
    force: bool,
) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), HUB_NAMESPACE);
    let installed = secrets
        .get_opt(HUB_TLS_SECRET)
        .await?
        .and_then(|s| s.data?.remove("ca.crt"))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned());
    let Some(installed) = installed else {
        return Ok(());
    };
    let dropped = dropped_cas(&installed, next_ca_pem);
    if dropped.is_empty() || !same_federation(&installed, next_ca_pem) {
        // Nothing dropped, or another federation altogether (a hub installed again with a
        // new CA): not the end of a renewal.
        return Ok(());
    }
    if force {
        eprintln!(
            "the hub stops trusting CA {} (--force): spokes still connected with its certificates are cut off",
            dropped.join(", ")
        );
        return Ok(());
    }
    let asked = async {
        let hub = HubEndpoint::new(&HubOptions {
            address: HubAddress {
                hub: None,
                hub_context: Some(hub_context.to_string()),
                hub_domain: None,
            },
            tls: TlsFlags::default(),
            insecure: false,
            admin_name: None,
        })?;
        let mut connection: crate::commands::admin_client::Client = hub.connect().await?;
        hub.spokes(&mut connection).await
    }
    .await;
    let spokes = match asked {
        Ok(listing) => listing.spokes,
        Err(e) => bail!(
            "this init makes the hub stop trusting CA {}, and the hub could not be asked which spokes still connect with its certificates ({e}); run flux-hub init before flux-hub certs --drop-previous-ca, or pass --force to drop it anyway",
            dropped.join(", ")
        ),
    };
    let cut = cut_off(&dropped, &spokes);
    if !cut.is_empty() {
        bail!(
            "this init makes the hub stop trusting CA {}, and spoke(s) {} still connect with a certificate it issued (or one the hub cannot tell): run flux-hub join NAME for each first, or pass --force to cut them off",
            dropped.join(", "),
            cut.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use flux_shared::federation::pki::Ca;
    use flux_shared::federation::pki::renewal::trust_during_renewal;

    use super::*;

    #[test]
    fn only_a_connected_spoke_of_a_dropped_ca_or_of_an_unknown_one_is_cut_off() {
        let old = Ca::generate("old").unwrap();
        let new = old.renew("new", 10).unwrap().ca;
        let both = trust_during_renewal(&new, old.cert_pem());
        let old_id = old.key_id().unwrap();
        let new_id = new.key_id().unwrap();
        assert_eq!(
            dropped_cas(&both, new.cert_pem()),
            std::slice::from_ref(&old_id)
        );
        assert!(dropped_cas(old.cert_pem(), &both).is_empty());
        assert!(dropped_cas(&both, &both).is_empty());
        assert!(same_federation(&both, new.cert_pem()));
        let stranger = Ca::generate("another federation").unwrap();
        assert!(!dropped_cas(&both, stranger.cert_pem()).is_empty());
        assert!(!same_federation(&both, stranger.cert_pem()));

        let spoke = |name: &str, connected: bool, issuer: &str| SpokeInfo {
            name: name.into(),
            connected,
            certificate_issuer: issuer.into(),
            ..SpokeInfo::default()
        };
        let spokes = [
            spoke("renewed", true, &new_id),
            spoke("stale", true, &old_id),
            spoke("gone", false, &old_id),
            spoke("unknown", true, ""),
        ];
        assert_eq!(
            cut_off(std::slice::from_ref(&old_id), &spokes),
            ["stale", "unknown"]
        );
    }
}
