//! The mutual TLS flags every federation process takes (`flux-hub run`, the admin
//! commands, `flux-spoke run`): declared once, so that their names, environment
//! variables and checks cannot drift apart.

use std::path::PathBuf;

use super::tls::TlsFiles;

/// `--ca`, `--cert` and `--key`: the files of a federation certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
pub struct TlsFlags {
    /// The federation CA's certificate (PEM): `ca.crt` of `flux-hub certs`.
    #[arg(long, env = "FLUX_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// This process's certificate (PEM), issued by `flux-hub certs`: the hub's server
    /// certificate (`hub.crt`), a spoke's (`spoke-<name>.crt`) or an admin's
    /// (`admin-<name>.crt`).
    #[arg(long, env = "FLUX_CERT", value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, env = "FLUX_KEY", value_name = "FILE")]
    pub key: Option<PathBuf>,
}

/// The ids of [`TlsFlags`]' arguments, for `conflicts_with_all` of an `--insecure` flag.
pub const TLS_FLAG_IDS: [&str; 3] = ["ca", "cert", "key"];

impl TlsFlags {
    /// The flags given, as written on the command line (`--ca`, ...).
    pub fn given(&self) -> Vec<&'static str> {
        self.named()
            .filter(|(_, v)| v.is_some())
            .map(|(f, _)| f)
            .collect()
    }

    /// The three files, or the flags that are missing.
    pub fn files(&self) -> Result<TlsFiles, Vec<&'static str>> {
        match (&self.ca, &self.cert, &self.key) {
            (Some(ca), Some(cert), Some(key)) => Ok(TlsFiles {
                ca: ca.clone(),
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => Err(self
                .named()
                .filter(|(_, v)| v.is_none())
                .map(|(f, _)| f)
                .collect()),
        }
    }

    fn named(&self) -> impl Iterator<Item = (&'static str, &Option<PathBuf>)> {
        [
            ("--ca", &self.ca),
            ("--cert", &self.cert),
            ("--key", &self.key),
        ]
        .into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_missing_flags_are_named() {
        let some = |p: &str| Some(PathBuf::from(p));
        let none = TlsFlags::default();
        assert!(none.given().is_empty());
        assert_eq!(none.files(), Err(vec!["--ca", "--cert", "--key"]));
        let half = TlsFlags {
            ca: some("ca.crt"),
            key: some("k"),
            ..TlsFlags::default()
        };
        assert_eq!(half.given(), ["--ca", "--key"]);
        assert_eq!(half.files(), Err(vec!["--cert"]));
        let all = TlsFlags {
            ca: some("a"),
            cert: some("b"),
            key: some("c"),
        };
        assert_eq!(
            all.files(),
            Ok(TlsFiles {
                ca: "a".into(),
                cert: "b".into(),
                key: "c".into()
            })
        );
    }

    #[test]
    fn the_ids_are_the_fields() {
        use clap::CommandFactory;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            tls: TlsFlags,
        }
        let cmd = Cli::command();
        for id in TLS_FLAG_IDS {
            assert!(cmd.get_arguments().any(|a| a.get_id() == id), "{id}");
        }
    }
}
