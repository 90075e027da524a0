//! A connection to a server: TCP for `host:port`, a unix stream socket for `/path` (twemproxy's
//! `servers:` take both).

use std::io;

use tokio::net::{TcpStream, UnixStream};

/// An open connection to a server.
#[derive(Debug)]
pub(crate) enum ServerStream {
    /// `host:port`.
    Tcp(TcpStream),
    /// A unix-socket path.
    Unix(UnixStream),
}

/// Whether `addr` names a unix socket (an absolute path, as twemproxy writes them).
pub(crate) fn is_unix_path(addr: &str) -> bool {
    addr.starts_with('/')
}

impl ServerStream {
    /// Connects to `addr`: a unix socket when it is a path, else TCP (with `TCP_NODELAY`: requests are
    /// written in batches already, and Nagle would hold a lone small one back).
    ///
    /// # Errors
    /// The connect's.
    pub(crate) async fn connect(addr: &str) -> io::Result<ServerStream> {
        if is_unix_path(addr) {
            return UnixStream::connect(addr).await.map(ServerStream::Unix);
        }
        let s = TcpStream::connect(addr).await?;
        let _ = s.set_nodelay(true);
        Ok(ServerStream::Tcp(s))
    }
}
