//! The servers' side: TLS on every connection to a pool's servers. One rustls client config per pool
//! version, shared by all its servers' connections, so its session cache lets a reconnect resume
//! instead of doing a full handshake.

use std::fmt;
use std::io;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::{pem, ServerTlsConfig};

/// A pool's TLS to its servers, ready to connect. Two are equal when they were read from the same
/// file contents with the same switches, so a reload that changes nothing of it keeps the servers'
/// connections.
#[derive(Clone)]
pub(crate) struct ServerTls {
    connector: TlsConnector,
    /// xxh3 of what the config was built from (certificates, key, the insecure switch).
    digest: u64,
}

impl PartialEq for ServerTls {
    fn eq(&self, other: &ServerTls) -> bool {
        self.digest == other.digest
    }
}

impl Eq for ServerTls {}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("digest", &format_args!("{:016x}", self.digest))
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads `settings`' files: the CA bundle (else the system's roots), the client certificate
    /// and key when given.
    ///
    /// # Errors
    /// What is wrong, naming the file.
    pub(crate) fn build(settings: &ServerTlsConfig) -> Result<ServerTls, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut digest = xxhash_rust::xxh3::Xxh3::new();
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = if settings.insecure {
            digest.update(b"insecure");
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
        } else {
            let roots = match &settings.ca {
                Some(ca) => pem::roots(ca)?,
                None => pem::system_roots()?,
            };
            for root in &roots.roots {
                digest.update(root.subject_public_key_info.as_ref());
                digest.update(root.subject.as_ref());
            }
            builder.with_root_certificates(roots)
        };
        let config = match (&settings.cert, &settings.key) {
            (Some(cert), Some(key)) => {
                let certs = pem::certificates(cert)?;
                let private = pem::private_key(key)?;
                for c in &certs {
                    digest.update(c.as_ref());
                }
                digest.update(private.secret_der());
                builder
                    .with_client_auth_cert(certs, private)
                    .map_err(|e| pem::pair_problem(e, cert, key))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err("--server-cert and --server-key go together".into()),
        };
        Ok(ServerTls {
            connector: TlsConnector::from(Arc::new(config)),
            digest: digest.digest(),
        })
    }

    /// The client side of the handshake with the server `host` (a name: sent as SNI and checked
    /// against the certificate; an IP address: checked against its IP addresses) over `stream`.
    ///
    /// # Errors
    /// A host that is no valid name, or the handshake's ([`super::handshake_cause`] says why).
    pub(crate) async fn connect(
        &self,
        host: &str,
        stream: TcpStream,
    ) -> io::Result<TlsStream<TcpStream>> {
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{host:?} is no name to check a certificate against: {e}"),
            )
        })?;
        self.connector.connect(name, stream).await
    }
}

/// `--server-tls-insecure`: any certificate is taken (the handshake's signatures are still checked,
/// so the session keys are the server's; who the server is, is not).
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
