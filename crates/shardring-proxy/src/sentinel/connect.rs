//! How a connection to a Sentinel is opened. The Sentinel client never opens a socket itself: it is given
//! a [`Connect`], so a TLS connector (Sentinels behind `tls-port`) plugs in without the client changing.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A byte stream to a Sentinel: a TCP stream, a TLS stream over one, or an in-memory pipe in tests.
pub trait AsyncReadWrite: AsyncRead + AsyncWrite {}

impl<T: AsyncRead + AsyncWrite + ?Sized> AsyncReadWrite for T {}

/// An open connection to a Sentinel.
pub type SentinelStream = Box<dyn AsyncReadWrite + Send + Unpin>;

/// What a [`Connect`] returns: the connection being opened.
pub type Connecting = Pin<Box<dyn Future<Output = io::Result<SentinelStream>> + Send>>;

/// Opens a connection to the Sentinel at `host:port`.
///
/// The client bounds every call by its own timeout ([`super::Sentinels::timeout`]), so a connector
/// needs none of its own: the TCP connect, a TLS handshake, and the password check that follows are
/// bounded together.
pub type Connect = Arc<dyn Fn(String) -> Connecting + Send + Sync>;

/// Plain TCP, with `TCP_NODELAY` (a Sentinel exchange is a few small commands, each waited on; Nagle
/// would hold the second of a pipelined pair back). The connect's timeout is the client's.
pub fn tcp_connect() -> Connect {
    Arc::new(|addr: String| -> Connecting {
        Box::pin(async move {
            let stream = TcpStream::connect(addr.as_str()).await?;
            // Only latency is lost without it.
            let _ = stream.set_nodelay(true);
            Ok(Box::new(stream) as SentinelStream)
        })
    })
}
