//! A connection to a server: TCP for `host:port`, a unix stream socket for `/path` (twemproxy's
//! `servers:` take both), and TLS over TCP when the pool asks for it (`--server-tls`).

use std::io;

use tokio::net::{TcpStream, UnixStream};

use crate::tls::connector::ServerTls;

/// An open connection to a server.
#[derive(Debug)]
pub(crate) enum ServerStream {
    /// `host:port`.
    Tcp(TcpStream),
    /// A unix-socket path.
    Unix(UnixStream),
    /// `host:port` with TLS. Boxed: rustls's connection state is large, and the plain variants stay
    /// small for the pools that do not use it.
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// Why a connection could not be opened.
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// The TCP (or unix socket) connect failed.
    Io(io::Error),
    /// The TCP connection was made and the TLS handshake failed, for this cause (in words: an
    /// unknown CA, a name mismatch, an expiry, the server's alert…). Not the server being down, and
    /// retrying at once would fail the same way.
    Tls(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Io(e) => e.fmt(f),
            ConnectError::Tls(why) => write!(f, "TLS handshake failed: {why}"),
        }
    }
}

/// Whether `addr` names a unix socket (an absolute path, as twemproxy writes them).
pub(crate) fn is_unix_path(addr: &str) -> bool {
    addr.starts_with('/')
}

/// The host of `host:port` or `[v6]:port`: the name a server's certificate is checked against.
pub(crate) fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

impl ServerStream {
    /// Connects to `addr`: a unix socket when it is a path, else TCP (with `TCP_NODELAY`: requests are
    /// written in batches already, and Nagle would hold a lone small one back), then the TLS
    /// handshake when `tls` is given.
    ///
    /// # Errors
    /// The connect's, or the handshake's.
    pub(crate) async fn connect(
        addr: &str,
        tls: Option<&ServerTls>,
    ) -> Result<ServerStream, ConnectError> {
        if is_unix_path(addr) {
            return UnixStream::connect(addr)
                .await
                .map(ServerStream::Unix)
                .map_err(ConnectError::Io);
        }
        let s = TcpStream::connect(addr).await.map_err(ConnectError::Io)?;
        let _ = s.set_nodelay(true);
        match tls {
            None => Ok(ServerStream::Tcp(s)),
            Some(tls) => tls
                .connect(host_of(addr), s)
                .await
                .map(|s| ServerStream::Tls(Box::new(s)))
                .map_err(|e| ConnectError::Tls(crate::tls::handshake_cause(&e))),
        }
    }

    /// The TCP socket under it, for socket options; `None` for a unix socket.
    pub(crate) fn tcp(&self) -> Option<&TcpStream> {
        match self {
            ServerStream::Tcp(s) => Some(s),
            ServerStream::Tls(s) => Some(s.get_ref().0),
            ServerStream::Unix(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn the_host_a_certificate_is_checked_against() {
        assert_eq!(host_of("cache.example.com:6379"), "cache.example.com");
        assert_eq!(host_of("127.0.0.1:11211"), "127.0.0.1");
        assert_eq!(host_of("[::1]:6379"), "::1");
    }
}
