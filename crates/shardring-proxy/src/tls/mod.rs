//! TLS on a pool's two sides, with rustls (no OpenSSL to build or link): [`acceptor`] terminates the
//! clients' TLS on the pool's listener, [`connector`] speaks TLS to the pool's servers. What the
//! flags ask for (paths and switches, [`flags`]) is the configuration's ([`ListenerTls`],
//! [`ServerTlsConfig`] in [`crate::config::PoolConfig`]); [`pem`] reads the files. Both sides read their files when a pool's config is checked (at start, by `-t`, on every
//! reload: a file that cannot be used is a config problem, and a reload with one keeps the running
//! config) and again when the pool's version is built, so a SIGHUP with the same paths picks up renewed
//! certificates for new connections while established ones stay up.

pub(crate) mod acceptor;
pub(crate) mod connector;
pub(crate) mod flags;
mod pem;

use crate::config::{ListenerTls, ServerTlsConfig};

use self::connector::ServerTls;

/// A pool's TLS, read from its files: what its listener hands each new client's handshake and what its
/// servers' connections connect with. `None` on a side without TLS.
// `pub` in this private module: [`crate::ServedPool::reload_with_tls`] takes one, and nothing
// outside the crate can name or build it.
#[derive(Debug, Clone, Default)]
pub struct PoolTls {
    /// The clients' side.
    pub(crate) acceptor: Option<acceptor::Acceptor>,
    /// The servers' side.
    pub(crate) servers: Option<ServerTls>,
}

impl PoolTls {
    /// The TLS of the pool `config`, read from its files (both sides; nothing when it has none).
    ///
    /// # Errors
    /// Every file that cannot be used, as the pool's problems.
    pub(crate) fn of(config: &crate::config::PoolConfig) -> Result<PoolTls, crate::ConfigErrors> {
        PoolTls::load(config.tls.as_ref(), config.server_tls.as_ref()).map_err(|problems| {
            let mut errors = crate::ConfigErrors::default();
            for p in problems {
                errors.push(&config.name, p);
            }
            errors
        })
    }

    /// Reads both sides' files.
    ///
    /// # Errors
    /// Every problem, one line each, naming the flag's side and the file.
    pub(crate) fn load(
        listener: Option<&ListenerTls>,
        servers: Option<&ServerTlsConfig>,
    ) -> Result<PoolTls, Vec<String>> {
        let mut problems = Vec::new();
        let acceptor = listener.and_then(|l| {
            acceptor::build(l)
                .map_err(|e| problems.push(format!("TLS listener: {e}")))
                .ok()
        });
        let servers = servers.and_then(|s| {
            ServerTls::build(s)
                .map_err(|e| problems.push(format!("TLS to servers: {e}")))
                .ok()
        });
        if problems.is_empty() {
            Ok(PoolTls { acceptor, servers })
        } else {
            Err(problems)
        }
    }
}

/// Why a TLS handshake failed, in words an operator can act on: the certificate problem rustls found
/// (an unknown CA, a name mismatch, an expired certificate, …) or the alert the peer sent, else the
/// I/O error.
pub(crate) fn handshake_cause(e: &std::io::Error) -> String {
    use rustls::{CertificateError, Error};
    let Some(tls) = e.get_ref().and_then(|inner| inner.downcast_ref::<Error>()) else {
        return e.to_string();
    };
    match tls {
        Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => {
                "certificate signed by an unknown CA (not in the trusted roots)".into()
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!("certificate not valid for this name ({c:?})")
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                format!("certificate expired ({c:?})")
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                format!("certificate not valid yet ({c:?})")
            }
            other => format!("invalid certificate: {other:?}"),
        },
        Error::AlertReceived(alert) => format!("the peer refused the handshake: alert {alert:?}"),
        Error::NoCertificatesPresented => "no client certificate presented".into(),
        Error::InvalidMessage(_) | Error::InappropriateMessage { .. } => {
            format!("not TLS, or a broken handshake: {tls}")
        }
        other => other.to_string(),
    }
}
