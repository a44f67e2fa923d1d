//! `flux-hub`: the hub controller and command-line tool for Flux MiniClusters.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use flux_hub::commands::render;
use flux_shared::plan::Endpoint;

#[derive(Parser)]
#[command(
    name = "flux-hub",
    version,
    about = "Flux MiniCluster hub: controller and tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print every object a MiniCluster turns into, in the root and in each burst cluster.
    Render {
        /// A YAML file with one or more MiniCluster documents.
        file: PathBuf,
        /// Only the objects of this cluster (`root`, a burst's spoke cluster, or `local`).
        #[arg(long)]
        cluster: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: render::Format,
        /// Lead broker address burst brokers connect to (the hub resolves the real one from
        /// the lead broker's node at run time; this is for previewing).
        #[arg(long, default_value = "192.0.2.1")]
        lead_address: String,
        /// Lead broker NodePort burst brokers connect to (previewing only, see above).
        #[arg(long, default_value_t = 30050)]
        lead_port: i32,
        /// Render as for clusters that mount images as volumes (the controllers tell at run
        /// time, per cluster: Kubernetes 1.35+, containerd 2.1+ or CRI-O 1.31+ on every
        /// node): the view image as a volume of the pods, unless the spec says otherwise.
        #[arg(long)]
        image_volumes: bool,
    },
    /// Convert v1alpha1 MiniCluster documents to v1alpha2 (exit 0: lossless, 3: something
    /// had no v1alpha2 equivalent, reported on stderr; 1: invalid input).
    Convert {
        /// A YAML file with one or more documents; only v1alpha1 MiniClusters change.
        file: PathBuf,
        /// Output format.
        #[arg(short, long, value_enum, default_value = "yaml")]
        output: flux_hub::commands::convert::Format,
    },
    /// Print the MiniCluster CustomResourceDefinition.
    Crd,
    /// Create the federation CA (or reuse the one in --out) and issue the hub's server
    /// certificate and spoke / admin client certificates.
    Certs(flux_hub::commands::certs::CertsOptions),
    /// Run the MiniCluster controller against the cluster of KUBECONFIG (or in-cluster).
    Run(flux_hub::controller::RunOptions),
    /// Show every MiniCluster, its bursts and the spokes, from the hub's admin gRPC service
    /// (mTLS with an admin certificate from `flux-hub certs --admin NAME`).
    Status(flux_hub::commands::status::StatusOptions),
    /// Install the hub into the root cluster: certificates, CRD, RBAC, Deployment,
    /// Services and the TLS Secret; prints the endpoint spokes dial.
    Init(flux_hub::commands::init::InitOptions),
    /// Install a spoke into a burst cluster: its certificate, RBAC, Deployment and TLS
    /// Secret; waits until the hub lists it as connected.
    Join(flux_hub::commands::join::JoinOptions),
    /// Remove a spoke's install from its burst cluster and make the hub forget it (refused
    /// while bursts are assigned to it, unless --force).
    Unjoin(flux_hub::commands::unjoin::UnjoinOptions),
    /// Refuse admin certificates from now on (or --lift that): by certificate file,
    /// fingerprint or admin name, in the ConfigMap the hub watches in the root cluster.
    RevokeAdmin(flux_hub::commands::revoke_admin::RevokeAdminOptions),
    /// Change a MiniCluster's bursts through the hub's admin gRPC service (same connection
    /// flags as `status`).
    Burst {
        #[command(subcommand)]
        command: flux_hub::commands::burst::BurstCommand,
    },
    /// Print the hub's install manifests as one YAML stream, for `kubectl apply
    /// --server-side -f` (a single-cluster hub; `init` does the same and more).
    Install {
        /// Print the manifests (the only thing this command does: `init` installs).
        #[arg(long, required = true)]
        print: bool,
        /// The hub's image (default: this release's, as in deploy/deployment.yaml).
        #[arg(long)]
        image: Option<String>,
    },
    /// Show this client's version and the hub's and its spokes' (with the admin context or
    /// the connection flags of `status`; the client's alone when no hub is configured).
    Version(flux_hub::commands::version::VersionOptions),
    /// Print the shell completion script for SHELL (e.g. `source <(flux-hub completion
    /// bash)`).
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Render {
            file,
            cluster,
            output,
            lead_address,
            lead_port,
            image_volumes,
        } => render::run(
            &file,
            cluster.as_deref(),
            output,
            &Endpoint {
                address: lead_address,
                port: lead_port,
            },
            image_volumes,
        ),
        Command::Convert { file, output } => {
            return flux_hub::commands::convert::run(&file, output);
        }
        Command::Crd => flux_shared::crd::crd_yaml().map_err(anyhow::Error::from),
        Command::Install { print: _, image } => {
            flux_hub::commands::install::print(image.as_deref()).map_err(anyhow::Error::from)
        }
        Command::Completion { shell } => {
            use clap::CommandFactory;
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "flux-hub", &mut script);
            String::from_utf8(script).map_err(anyhow::Error::from)
        }
        Command::Certs(opts) => flux_hub::commands::certs::run(&opts),
        Command::Status(opts) => return flux_hub::commands::status::main(&opts),
        Command::Burst { command } => return flux_hub::commands::burst::main(&command),
        Command::Init(opts) => return flux_hub::commands::init::main(&opts),
        Command::Join(opts) => return flux_hub::commands::join::main(&opts),
        Command::Unjoin(opts) => return flux_hub::commands::unjoin::main(&opts),
        Command::RevokeAdmin(opts) => return flux_hub::commands::revoke_admin::main(&opts),
        Command::Version(opts) => return flux_hub::commands::version::main(&opts),
        Command::Run(opts) => {
            return match run_controller(opts) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("flux-hub: {e:#}");
                    ExitCode::FAILURE
                }
            };
        }
    };
    match result {
        Ok(out) => {
            let mut stdout = std::io::stdout().lock();
            if stdout.write_all(out.as_bytes()).is_err() {
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_controller(opts: flux_hub::controller::RunOptions) -> anyhow::Result<()> {
    // One thread: the controller waits on the API server, not on CPU. Measured on the
    // testbed API server (scripts/bench-apiserver.sh), against the multi-threaded runtime:
    // CPU per MiniCluster 3.5 ms instead of 5.5 ms (no cross-thread wake-ups and work
    // stealing), 1,000 cold MiniClusters to every Job in 9.1 s instead of 10.3 s.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(flux_hub::controller::run::run(opts))
}
