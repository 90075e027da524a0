//! Reading certificates, keys and CA bundles from PEM files, each failure naming the file and what is
//! wrong with it.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

/// Every certificate in `path`, in file order (a chain: the end entity's first).
pub(super) fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: not PEM certificates: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{}: no certificate in it (PEM, -----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

/// The one private key in `path` (PKCS#8, PKCS#1 or SEC1).
pub(super) fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes)
        .map_err(|e| format!("{}: no usable private key in it: {e}", path.display()))
}

/// The CA certificates in `path`, as trusted roots.
pub(super) fn roots(path: &Path) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    for cert in certificates(path)? {
        store
            .add(cert)
            .map_err(|e| format!("{}: not a usable CA certificate: {e}", path.display()))?;
    }
    Ok(store)
}

/// The system's trusted roots (Debian: /etc/ssl/certs), as rustls-native-certs finds them. A
/// certificate the system has that rustls cannot use is skipped, as every client of that crate does;
/// none at all is an error.
pub(super) fn system_roots() -> Result<RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut store = RootCertStore::empty();
    let (added, _skipped) = store.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or_else(|| "none found".to_owned(), ToString::to_string);
        return Err(format!(
            "no system CA certificates to check the servers' against ({why}); give --server-ca"
        ));
    }
    Ok(store)
}

/// What rustls said of a certificate and key that do not go together, naming both files.
pub(super) fn pair_problem(e: rustls::Error, cert: &Path, key: &Path) -> String {
    let why = match e {
        rustls::Error::InconsistentKeys(_) => "the key does not match the certificate".into(),
        other => other.to_string(),
    };
    format!("{} with {}: {why}", cert.display(), key.display())
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}
