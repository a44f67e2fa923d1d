//! `flux-hub version`: this client's version and, as `kubectl version` shows the server's,
//! the hub's and its spokes' (from `ListSpokes`, with the admin context or the connection
//! flags of `status`). Without any hub configured it shows the client alone and says how
//! to get a context; a hub that is configured but does not answer is an error (exit 1),
//! after the client's version.

use std::io::Write;
use std::process::ExitCode;

use flux_shared::federation::proto::ListSpokesResponse;
use serde::Serialize;

use crate::commands::Format;
use crate::commands::admin_client::{AdminError, HubEndpoint, HubOptions};

/// This binary's version.
pub const CLIENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Options of `flux-hub version`.
#[derive(clap::Args, Debug, Clone)]
pub struct VersionOptions {
    /// The client's version only; do not dial the hub.
    #[arg(long)]
    pub client: bool,
    /// How to reach the hub.
    #[command(flatten)]
    pub connection: HubOptions,
    /// Output format: lines, or a JSON / YAML object (`client`, `hub`, `spokes`).
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Format,
}

/// What `flux-hub version` shows (`-o json|yaml`).
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VersionView {
    /// This client's version.
    pub client: String,
    /// The federation protocol revision this build speaks.
    pub protocol_revision: u32,
    /// The hub's, when one was asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hub: Option<HubVersion>,
}

/// The hub's version and its spokes'.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HubVersion {
    /// The hub's software version (empty from a hub older than the field).
    pub version: String,
    /// The protocol revision it speaks (1 from a hub older than the field).
    pub protocol_revision: u32,
    /// Every spoke the hub knows, by name.
    pub spokes: Vec<SpokeVersion>,
}

/// One spoke's version as the hub last heard it.
#[derive(Serialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SpokeVersion {
    /// The spoke's name.
    pub name: String,
    /// Its software version (empty when it never connected since the hub started).
    pub version: String,
    /// The protocol revision it declared; `null` when it has not connected since the hub
    /// started.
    pub protocol_revision: Option<u32>,
    /// Whether it is connected now.
    pub connected: bool,
}

/// The view of the hub's answer.
pub fn hub_version(answer: &ListSpokesResponse) -> HubVersion {
    HubVersion {
        version: answer.hub_version.clone(),
        protocol_revision: answer
            .hub_protocol_revision
            .max(flux_shared::federation::protocol::UNDECLARED),
        spokes: answer
            .spokes
            .iter()
            .map(|s| SpokeVersion {
                name: s.name.clone(),
                version: s.spoke_version.clone(),
                protocol_revision: (s.protocol_revision > 0).then_some(s.protocol_revision),
                connected: s.connected,
            })
            .collect(),
    }
}

/// The lines `-o table` prints.
pub fn text(v: &VersionView) -> String {
    let unknown = |s: &str| if s.is_empty() { "unknown" } else { s }.to_string();
    let mut out = format!(
        "client: flux-hub {}, protocol {}\n",
        v.client, v.protocol_revision
    );
    if let Some(hub) = &v.hub {
        out.push_str(&format!(
            "hub:    flux-hub {}, protocol {}\n",
            unknown(&hub.version),
            hub.protocol_revision
        ));
        for s in &hub.spokes {
            let protocol = s
                .protocol_revision
                .map(|r| format!(", protocol {r}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "spoke {}: flux-spoke {}{protocol}{}\n",
                s.name,
                unknown(&s.version),
                if s.connected { "" } else { " (not connected)" }
            ));
        }
    }
    out
}

/// Whether `opts` names a hub, by flag or by an admin context file with a context in it.
fn hub_configured(opts: &HubOptions) -> bool {
    opts.address.hub.is_some()
        || opts.insecure
        || opts.address.hub_context.is_some()
        || crate::commands::admin_context::path()
            .and_then(|p| crate::commands::admin_context::load(&p).ok())
            .is_some_and(|f| !f.contexts.is_empty())
}

/// Runs `flux-hub version`, writing to `out`.
pub async fn run(opts: &VersionOptions, out: &mut dyn Write) -> Result<(), AdminError> {
    let ask_hub = !opts.client && hub_configured(&opts.connection);
    let mut view = VersionView {
        client: CLIENT_VERSION.to_string(),
        protocol_revision: flux_shared::federation::protocol::REVISION,
        hub: None,
    };
    if ask_hub {
        let answer = async {
            let hub = HubEndpoint::new(&opts.connection)?;
            let mut client = hub.connect().await?;
            hub.spokes(&mut client).await
        }
        .await;
        match answer {
            Ok(answer) => view.hub = Some(hub_version(&answer)),
            Err(e) => {
                // The client's version still helps whoever reads the error.
                if opts.output == Format::Table {
                    out.write_all(text(&view).as_bytes())?;
                }
                return Err(e);
            }
        }
    } else if !opts.client {
        eprintln!(
            "flux-hub version: no hub configured (no --hub, no admin context): showing the client only; `flux-hub init --certs DIR --hub-dns/--hub-ip` writes a context"
        );
    }
    match crate::commands::document(opts.output, &view)? {
        Some(document) => out.write_all(document.as_bytes())?,
        None => out.write_all(text(&view).as_bytes())?,
    }
    out.flush()?;
    Ok(())
}

/// Entry point of `flux-hub version` (from `main`).
pub fn main(opts: &VersionOptions) -> ExitCode {
    crate::commands::run("flux-hub version", async |out| run(opts, out).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flux_shared::federation::proto::SpokeInfo;

    #[test]
    fn the_hub_and_its_spokes_are_shown_beside_the_client() {
        let answer = ListSpokesResponse {
            hub_epoch: "e".into(),
            hub_version: "0.2.0".into(),
            hub_protocol_revision: 2,
            hub_certificate_not_after_unix_millis: 0,
            ca_not_after_unix_millis: 0,
            spokes: vec![
                SpokeInfo {
                    name: "burst".into(),
                    connected: true,
                    spoke_version: "0.1.0".into(),
                    protocol_revision: 1,
                    ..Default::default()
                },
                SpokeInfo {
                    name: "gke".into(),
                    ..Default::default()
                },
            ],
        };
        let view = VersionView {
            client: "0.1.0".into(),
            protocol_revision: 1,
            hub: Some(hub_version(&answer)),
        };
        assert_eq!(
            text(&view),
            "client: flux-hub 0.1.0, protocol 1\nhub:    flux-hub 0.2.0, protocol 2\nspoke burst: flux-spoke 0.1.0, protocol 1\nspoke gke: flux-spoke unknown (not connected)\n"
        );
        // A hub older than the field speaks revision 1.
        let old = ListSpokesResponse {
            hub_protocol_revision: 0,
            ..answer.clone()
        };
        assert_eq!(hub_version(&old).protocol_revision, 1);
        let json = serde_json::to_value(&view).expect("json");
        assert_eq!(json["hub"]["version"], "0.2.0");
        assert_eq!(json["hub"]["spokes"][1]["connected"], false);
        let client_only = VersionView {
            client: "0.1.0".into(),
            protocol_revision: 2,
            hub: None,
        };
        assert_eq!(text(&client_only), "client: flux-hub 0.1.0, protocol 2\n");
        assert_eq!(
            crate::commands::document(Format::Yaml, &client_only)
                .expect("yaml")
                .as_deref(),
            Some("client: 0.1.0\nprotocolRevision: 2\n")
        );
    }
}
