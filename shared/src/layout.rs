//! Where things live inside a broker pod. The init container, the entrypoint scripts,
//! the broker.toml and the volume mounts all take their paths from here.

use crate::api::MiniClusterSpec;

/// Mount path of the ConfigMap holding the scripts, broker.toml and R.
pub const CONFIG_MOUNT: &str = "/flux_operator";
/// Mount path of the Secret holding the CURVE certificate.
pub const CURVE_MOUNT: &str = "/flux_operator_curve";
/// Key of the CURVE certificate in its Secret.
pub const CURVE_KEY: &str = "curve.cert";
/// Key of broker.toml in the ConfigMap.
pub const BROKER_TOML_KEY: &str = "broker.toml";
/// Key of the resource set R in the ConfigMap.
pub const R_KEY: &str = "R";
/// Key of the drain script (the broker container's preStop hook) in the ConfigMap.
pub const DRAIN_SCRIPT_KEY: &str = "flux-drain.sh";
/// Key of the queue reporter (bursting on demand) in the ConfigMap.
pub const REPORTER_SCRIPT_KEY: &str = "flux-reporter.py";
/// Key of the init container's script in the ConfigMap.
pub const INIT_SCRIPT_KEY: &str = "flux-init.sh";
/// Key of the view container's script in the ConfigMap.
pub const VIEW_SCRIPT_KEY: &str = "flux-view-container.sh";
/// Fallback home directory (an emptyDir) for images whose HOME is `/`.
pub const HOME_MOUNT: &str = "/home/flux-operator";
/// Name of the pod's image volume of the view image.
pub const VIEW_IMAGE_VOLUME: &str = "flux-view-image";
/// Mount path of the view image as an image volume (read-only), which the containers link
/// the view and its software tree to.
pub const VIEW_IMAGE_MOUNT: &str = "/flux_operator_view";
/// Where the view's spack install tree must sit for its symlinks to resolve.
pub const SOFTWARE_MOUNT: &str = "/opt/software";

/// ConfigMap key of the entrypoint of container `index` (the flux runner or a sidecar).
pub fn entrypoint_key(index: usize, runs_flux: bool) -> String {
    if runs_flux {
        format!("broker-{index}.sh")
    } else {
        format!("start-{index}.sh")
    }
}

/// Paths under the flux view mount, computed once per plan (scripts use them a lot).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The shared emptyDir mount (default `/mnt/flux`).
    pub mount: String,
    view: String,
    software: String,
    view_exchange: String,
    config_root: String,
    broker_config_dir: String,
    r_path: String,
    curve_cert: String,
    rundir: String,
    local_socket: String,
    statedir: String,
    cron_dir: String,
}

impl Layout {
    /// The layout of a MiniCluster.
    pub fn of(spec: &MiniClusterSpec) -> Layout {
        let mount = spec.flux().view().mount_path();
        let config = format!("{mount}/config");
        Layout {
            view: format!("{mount}/view"),
            software: format!("{mount}/software"),
            view_exchange: format!("{mount}/.view-container"),
            broker_config_dir: format!("{config}/etc/flux/config"),
            r_path: format!("{config}/etc/flux/system/R"),
            curve_cert: format!("{config}/curve/curve.cert"),
            rundir: format!("{config}/run/flux"),
            local_socket: format!("{config}/run/flux/local"),
            statedir: format!("{config}/var/lib/flux"),
            cron_dir: format!("{config}/etc/flux/system/cron.d"),
            config_root: config,
            mount: mount.to_string(),
        }
    }
    /// Copy of the flux view (bin, lib, ...).
    pub fn view(&self) -> &str {
        &self.view
    }
    /// Copy of the view's spack install tree: the init container's (copied back to
    /// `/opt/software` by the broker), or where the view container mounts the pod's
    /// software volume.
    pub fn software(&self) -> &str {
        &self.software
    }
    /// Where the view container and the pod's other containers meet: the files `copied`
    /// (the copy's outcome: `ok`, or `error` and why), `broker` (the broker entrypoint's
    /// PID and process namespace) and `exit` (its exit status), and the FIFO `requests`
    /// (the broker's wake-up once `exit` is written).
    pub fn view_exchange(&self) -> &str {
        &self.view_exchange
    }
    /// Root of Flux's configuration and state.
    pub fn config_root(&self) -> &str {
        &self.config_root
    }
    /// Directory holding broker.toml (`flux start --config-path`).
    pub fn broker_config_dir(&self) -> &str {
        &self.broker_config_dir
    }
    /// The resource set R.
    pub fn r_path(&self) -> &str {
        &self.r_path
    }
    /// The CURVE certificate as Flux reads it (mode 0600).
    pub fn curve_cert(&self) -> &str {
        &self.curve_cert
    }
    /// Broker run directory.
    pub fn rundir(&self) -> &str {
        &self.rundir
    }
    /// The broker's local socket.
    pub fn local_socket(&self) -> &str {
        &self.local_socket
    }
    /// Broker state directory.
    pub fn statedir(&self) -> &str {
        &self.statedir
    }
    /// Cron directory.
    pub fn cron_dir(&self) -> &str {
        &self.cron_dir
    }
}
