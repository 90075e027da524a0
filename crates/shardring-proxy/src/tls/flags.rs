//! The TLS flags (`--tls-cert`, `--tls-key`, `--tls-client-ca` on the listeners; `--server-tls` and
//! `--server-*` to the servers), for every pool or the ones named, in either protocol; and the check
//! that their files can be used, at start, by `-t` and on every reload.

use std::path::PathBuf;

use crate::config::{ConfigErrors, Listen, ListenerTls, PoolConfig, ServerTlsConfig};
use crate::flags::per_pool::{
    for_pool, named, parse_pool_path, parse_pool_switch, refuse_unknown, switched_on,
    switches_named,
};
use crate::flags::ApplyToPools;

use super::PoolTls;

/// TLS on the pools' listeners and to their servers, as paths and switches. [`Default`]: none given,
/// plain TCP on both sides.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct TlsFlags {
    /// TLS on a pool's listener: its certificate chain (PEM, its own certificate first). `PATH`
    /// applies to every pool, `POOL=PATH` to one (repeat the flag for several). Needs --tls-key.
    #[arg(long, value_name = "[POOL=]PATH", value_parser = parse_pool_path, help_heading = "TLS")]
    pub tls_cert: Vec<(Option<String>, PathBuf)>,
    /// The listener certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1), as --tls-cert.
    #[arg(long, value_name = "[POOL=]PATH", value_parser = parse_pool_path, help_heading = "TLS")]
    pub tls_key: Vec<(Option<String>, PathBuf)>,
    /// Mutual TLS on the listener: clients must present a certificate signed by one of these CAs
    /// (PEM); one without is refused at the handshake, before any command is read.
    #[arg(long, value_name = "[POOL=]PATH", value_parser = parse_pool_path, help_heading = "TLS")]
    pub tls_client_ca: Vec<(Option<String>, PathBuf)>,
    /// TLS to the servers: of every pool (`--server-tls`), or of one (`--server-tls=POOL`, repeat
    /// for several). Certificates are checked against --server-ca, else the system's CAs, for the
    /// host name of each server line (sent as SNI).
    #[arg(long, value_name = "POOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "", value_parser = parse_pool_switch, help_heading = "TLS")]
    pub server_tls: Vec<Option<String>>,
    /// The CA certificates (PEM) the servers' certificates must chain to. [default: the system's]
    #[arg(long, value_name = "[POOL=]PATH", value_parser = parse_pool_path, help_heading = "TLS")]
    pub server_ca: Vec<(Option<String>, PathBuf)>,
    /// A client certificate chain (PEM) for servers that ask for one. Needs --server-key.
    #[arg(long, value_name = "[POOL=]PATH", value_parser = parse_pool_path, help_heading = "TLS")]
    pub server_cert: Vec<(Option<String>, PathBuf)>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "[POOL=]PATH", value_parser = parse_pool_path, help_heading = "TLS")]
    pub server_key: Vec<(Option<String>, PathBuf)>,
    /// FOR TESTS ONLY: take any certificate from the servers, unchecked (encrypted, but anyone on
    /// the path can pose as a server). Every pool, or `=POOL`.
    #[arg(long, value_name = "POOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "", value_parser = parse_pool_switch, help_heading = "TLS")]
    pub server_tls_insecure: Vec<Option<String>>,
}

impl ApplyToPools for TlsFlags {
    /// Every pool, or the ones named.
    fn apply(&self, pools: &mut [PoolConfig]) -> Result<(), ConfigErrors> {
        let mut errors = ConfigErrors::default();
        for pool in pools.iter_mut() {
            self.listener(pool, &mut errors);
            self.servers(pool, &mut errors);
        }
        let per_pool = [
            ("--tls-cert", &self.tls_cert),
            ("--tls-key", &self.tls_key),
            ("--tls-client-ca", &self.tls_client_ca),
            ("--server-ca", &self.server_ca),
            ("--server-cert", &self.server_cert),
            ("--server-key", &self.server_key),
        ];
        for (flag, values) in per_pool {
            refuse_unknown(flag, named(values), pools, &mut errors);
        }
        for (flag, switches) in [
            ("--server-tls", &self.server_tls),
            ("--server-tls-insecure", &self.server_tls_insecure),
        ] {
            refuse_unknown(flag, switches_named(switches), pools, &mut errors);
        }
        errors.into_result()
    }

    /// The files last, and only when the settings make sense: -t, the start and every reload read
    /// them, so a certificate that cannot be used is refused like a bad config.
    fn check(&self, pools: &[PoolConfig]) -> Result<(), ConfigErrors> {
        let mut errors = ConfigErrors::default();
        for pool in pools {
            if let Err(e) = PoolTls::of(pool) {
                errors.problems.extend(e.problems);
            }
        }
        errors.into_result()
    }
}

impl TlsFlags {
    /// Sets `pool`'s listener TLS, pushing what does not fit together.
    fn listener(&self, pool: &mut PoolConfig, errors: &mut ConfigErrors) {
        let cert = for_pool(&self.tls_cert, &pool.name);
        let key = for_pool(&self.tls_key, &pool.name);
        let client_ca = for_pool(&self.tls_client_ca, &pool.name);
        pool.tls = match (cert, key) {
            (Some(cert), Some(key)) => Some(ListenerTls {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: client_ca.cloned(),
            }),
            (None, None) => {
                if client_ca.is_some() {
                    errors.push(
                        &pool.name,
                        "--tls-client-ca needs --tls-cert and --tls-key".into(),
                    );
                }
                None
            }
            _ => {
                errors.push(&pool.name, "--tls-cert and --tls-key go together".into());
                None
            }
        };
        if pool.tls.is_some() && matches!(pool.listen, Listen::Unix { .. }) {
            errors.push(
                &pool.name,
                "TLS listeners take a TCP listen address, not a unix socket".into(),
            );
        }
    }

    /// Sets `pool`'s TLS to its servers, pushing what does not fit together.
    fn servers(&self, pool: &mut PoolConfig, errors: &mut ConfigErrors) {
        let name = pool.name.clone();
        let mut problem = |p: &str| errors.push(&name, p.to_owned());
        let server = ServerTlsConfig {
            ca: for_pool(&self.server_ca, &pool.name).cloned(),
            cert: for_pool(&self.server_cert, &pool.name).cloned(),
            key: for_pool(&self.server_key, &pool.name).cloned(),
            insecure: switched_on(&self.server_tls_insecure, &pool.name),
        };
        if !switched_on(&self.server_tls, &pool.name) {
            if server != ServerTlsConfig::default() {
                problem("--server-ca, --server-cert, --server-key and --server-tls-insecure need --server-tls");
            }
            pool.server_tls = None;
            return;
        }
        if server.cert.is_some() != server.key.is_some() {
            problem("--server-cert and --server-key go together");
        }
        if server.insecure && server.ca.is_some() {
            problem(
                "--server-tls-insecure checks no certificate, so --server-ca would not be used",
            );
        }
        // twemproxy's unix-socket servers are absolute paths.
        if pool.servers.iter().any(|s| s.host.starts_with('/')) {
            problem("--server-tls: TLS is for TCP servers, and this pool has a unix-socket server");
        }
        pool.server_tls = Some(server);
    }
}
