//! The ConfigMap (scripts, broker.toml, R) and the CURVE certificate Secret.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use crate::api::ViewMode;
use crate::{broker_toml, layout, scripts};

use super::{Renderer, config_map_name, curve_secret_name};

impl Renderer<'_> {
    pub(super) fn config_map(&self) -> ConfigMap {
        let mut data = BTreeMap::from([
            (
                layout::BROKER_TOML_KEY.to_string(),
                broker_toml::render(self.plan, self.target),
            ),
            (layout::R_KEY.to_string(), self.plan.resources.clone()),
        ]);
        match self.plan.view_mode {
            ViewMode::Alongside => {
                data.insert(
                    layout::VIEW_SCRIPT_KEY.to_string(),
                    scripts::view_container_script(self.plan, self.target),
                );
            }
            ViewMode::InitContainer => {
                data.insert(
                    layout::INIT_SCRIPT_KEY.to_string(),
                    scripts::init_script(self.plan, self.target),
                );
            }
            ViewMode::Image | ViewMode::ImageVolume => {}
        }
        if let Some(drain) = scripts::drain_script(self.plan, self.target) {
            data.insert(layout::DRAIN_SCRIPT_KEY.to_string(), drain);
        }
        if let Some(reporter) = scripts::reporter_script(self.plan, self.target) {
            data.insert(layout::REPORTER_SCRIPT_KEY.to_string(), reporter);
        }
        for (i, c) in self.plan.spec.containers.iter().enumerate() {
            if i == self.plan.runner {
                data.insert(
                    layout::entrypoint_key(i, true),
                    scripts::broker_script(self.plan, self.target),
                );
            } else if !c.no_wrap_entrypoint.unwrap_or(false) {
                data.insert(
                    layout::entrypoint_key(i, false),
                    scripts::sidecar_script(self.plan, self.target, i),
                );
            }
        }
        ConfigMap {
            metadata: self.meta(config_map_name(&self.target.job)),
            data: Some(data),
            ..Default::default()
        }
    }

    pub(super) fn curve_secret(&self, cert: &str) -> Secret {
        Secret {
            metadata: self.meta(curve_secret_name(&self.target.job)),
            type_: Some("Opaque".into()),
            data: Some(BTreeMap::from([(
                layout::CURVE_KEY.to_string(),
                ByteString(cert.as_bytes().to_vec()),
            )])),
            ..Default::default()
        }
    }
}
