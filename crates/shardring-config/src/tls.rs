//! A pool's TLS settings, as paths and switches: on its listener (clients) and to its servers. Proxy-only
//! (nutcracker's YAML has no keys for them; `shardring proxy`'s `--tls-*` and `--server-*` flags set
//! them), held in [`crate::PoolConfig`]; the files are read by [`super::acceptor`] and
//! [`super::connector`].

use std::path::PathBuf;

/// TLS on a pool's listener: every client connection is a TLS one (TLS 1.2 or 1.3, no ALPN).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerTls {
    /// The certificate chain, PEM, the pool's own certificate first (`--tls-cert`).
    pub cert: PathBuf,
    /// Its private key, PEM: PKCS#8, PKCS#1 or SEC1 (`--tls-key`).
    pub key: PathBuf,
    /// CA certificates, PEM, that clients' certificates must chain to (`--tls-client-ca`). When
    /// set, a client without a valid certificate is refused at the handshake (mutual TLS). By
    /// default, none: clients are not asked for one.
    pub client_ca: Option<PathBuf>,
}

/// TLS to a pool's servers: every connection to them (requests, health probes) is a TLS one, the
/// server's certificate checked for the host name of its `servers:` line (sent as SNI when it is a
/// name, matched against the certificate's IP addresses when it is one).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerTlsConfig {
    /// CA certificates, PEM, the servers' certificates must chain to (`--server-ca`). By default,
    /// none: the system's trusted roots.
    pub ca: Option<PathBuf>,
    /// A client certificate chain, PEM, for servers that ask for one (`--server-cert`). By
    /// default, none.
    pub cert: Option<PathBuf>,
    /// Its private key, PEM (`--server-key`). Given with `cert`, never alone.
    pub key: Option<PathBuf>,
    /// Accept any certificate from the servers, unchecked (`--server-tls-insecure`): for tests
    /// only; the traffic is encrypted but anyone on the path can read it. By default, false.
    pub insecure: bool,
}
