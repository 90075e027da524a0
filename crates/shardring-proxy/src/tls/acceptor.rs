//! The clients' side: a pool's listener speaking TLS. The certificate and key (and, for mutual TLS, the
//! CA clients' certificates must chain to) are read into a rustls server config; each accepted
//! connection does its handshake in its own task, so a slow or silent client delays no other.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::{pem, ListenerTls};

/// How long a client has to finish its handshake before its connection is closed: it holds a
/// descriptor and a place under `client_connections` until then.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A pool listener's TLS, ready for handshakes (cheap to clone: one shared config).
#[derive(Clone)]
pub(crate) struct Acceptor(TlsAcceptor);

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Acceptor")
    }
}

/// Reads `settings`' files into an acceptor: TLS 1.2 and 1.3 (rustls's safe defaults), no ALPN,
/// client certificates required when `client_ca` is set.
///
/// # Errors
/// What is wrong, naming the file: unreadable, not PEM, no key, a key that does not match the
/// certificate, a CA that does not parse.
pub(crate) fn build(settings: &ListenerTls) -> Result<Acceptor, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = pem::certificates(&settings.cert)?;
    let key = pem::private_key(&settings.key)?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match &settings.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = pem::roots(ca)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("{}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| pem::pair_problem(e, &settings.cert, &settings.key))?;
    Ok(Acceptor(TlsAcceptor::from(Arc::new(config))))
}

/// The server side of a client's handshake, within [`HANDSHAKE_TIMEOUT`].
///
/// # Errors
/// The handshake's ([`super::handshake_cause`] says why in words), or a timeout.
pub(crate) async fn accept(
    acceptor: &Acceptor,
    stream: TcpStream,
) -> io::Result<TlsStream<TcpStream>> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.0.accept(stream))
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not finish its TLS handshake in time",
            ))
        })
}
