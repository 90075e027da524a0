//! Network helpers shared by the client listeners, the server connections and the stats listeners:
//! binding a pool's `listen` address, accepting with back-off, and socket options.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream, UnixListener, UnixStream};
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;

use crate::config::Listen;
use crate::descriptors::{self, During};
use crate::error::ProxyError;
use crate::metrics::PoolStats;

/// How long an accept loop pauses after a failed accept, instead of spinning on the error. Out of
/// descriptors (`EMFILE`), the waiting client stays in the listen backlog and the next accept fails
/// the same way at once: without the pause the loop would take a core while clients already
/// connected go unserved (tokio's `TcpListener::accept` docs and mini-redis's accept loop say the
/// same). Accepting resumes by itself, within one pause, once a descriptor is free.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// A bound listener: TCP or a unix socket.
#[derive(Debug)]
pub enum Listener {
    /// TCP.
    Tcp(TcpListener),
    /// A unix socket.
    Unix(UnixListener),
}

/// A client connection: TCP or a unix socket.
///
/// An enum held in the session, not a boxed trait object: every client connection, idle or not,
/// would pay the box's allocation (BENCHMARKS.md, "proxy: memory per client connection").
#[derive(Debug)]
pub(crate) enum ClientStream {
    /// TCP.
    Tcp(TcpStream),
    /// A unix socket.
    Unix(UnixStream),
    /// TCP with TLS (a pool with `--tls-cert`). Boxed: rustls's connection state is large, and the
    /// plain variants stay small for every idle client of a plain pool.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl AsyncRead for ClientStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Unix(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            ClientStream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            ClientStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl Listener {
    /// The local address, for logs and tests.
    ///
    /// # Errors
    /// The socket's.
    pub fn local_addr(&self) -> io::Result<String> {
        match self {
            Listener::Tcp(l) => l.local_addr().map(|a| a.to_string()),
            Listener::Unix(l) => l.local_addr().map(|a| format!("{:?}", a.as_pathname())),
        }
    }

    /// This listener for each of `workers` (each worker's runtime): the same listening socket, one
    /// copy registered in each runtime, so every worker accepts clients itself and serves them on its
    /// own thread (why one shared socket and not `SO_REUSEPORT`: [`crate::workers`]).
    ///
    /// # Errors
    /// When the socket cannot be duplicated or registered.
    pub(crate) fn for_workers(self, workers: &[Handle]) -> io::Result<Vec<Listener>> {
        enum Std {
            Tcp(std::net::TcpListener),
            Unix(std::os::unix::net::UnixListener),
        }
        // Out of this runtime's reactor (tokio leaves it non-blocking, as `from_std` needs), then one
        // duplicate per worker, registered in that worker's runtime.
        let std = match self {
            Listener::Tcp(l) => Std::Tcp(l.into_std()?),
            Listener::Unix(l) => Std::Unix(l.into_std()?),
        };
        workers
            .iter()
            .map(|worker| {
                let _in_worker = worker.enter();
                Ok(match &std {
                    Std::Tcp(l) => Listener::Tcp(TcpListener::from_std(l.try_clone()?)?),
                    Std::Unix(l) => Listener::Unix(UnixListener::from_std(l.try_clone()?)?),
                })
            })
            .collect()
    }

    /// The next client, set up for serving (`TCP_NODELAY`, and keepalive when asked), or `None` once
    /// `stop` is cancelled. A descriptor shortage is counted in `pool`'s tallies.
    pub(crate) async fn accept(
        &self,
        keepalive: bool,
        stop: &CancellationToken,
        pool: &PoolStats,
    ) -> Option<ClientStream> {
        match self {
            Listener::Tcp(l) => accept_tcp(l, stop, "clients", Some(pool)).await.map(|s| {
                let _ = s.set_nodelay(true);
                if keepalive {
                    set_keepalive(&s);
                }
                ClientStream::Tcp(s)
            }),
            Listener::Unix(l) => loop {
                tokio::select! {
                    () = stop.cancelled() => return None,
                    a = l.accept() => match a {
                        Ok((s, _)) => return Some(ClientStream::Unix(s)),
                        Err(e) => backoff(&e, "clients", Some(pool)).await,
                    },
                }
            },
        }
    }
}

/// The next connection on a TCP listener, or `None` once `stop` is cancelled. Accept errors are logged
/// and retried after a pause.
pub(crate) async fn accept_with_backoff(
    listener: &TcpListener,
    stop: &CancellationToken,
    what: &str,
) -> Option<tokio::net::TcpStream> {
    accept_tcp(listener, stop, what, None).await
}

/// [`accept_with_backoff`], counting descriptor shortages in `pool`'s tallies when the listener is
/// a pool's.
async fn accept_tcp(
    listener: &TcpListener,
    stop: &CancellationToken,
    what: &str,
    pool: Option<&PoolStats>,
) -> Option<tokio::net::TcpStream> {
    loop {
        tokio::select! {
            () = stop.cancelled() => return None,
            a = listener.accept() => match a {
                Ok((s, _)) => return Some(s),
                Err(e) => backoff(&e, what, pool).await,
            },
        }
    }
}

/// Logs a failed accept (a descriptor shortage counted and rate-limited: [`descriptors::shortage`])
/// and pauses for [`ACCEPT_BACKOFF`].
async fn backoff(e: &io::Error, what: &str, pool: Option<&PoolStats>) {
    if descriptors::is_shortage(e) {
        descriptors::shortage(pool, During::Accept(what), e);
    } else {
        tracing::warn!(error = %e, listener = what, "accept failed");
    }
    tokio::time::sleep(ACCEPT_BACKOFF).await;
}

/// Binds pool `pool`'s `listen` address with its `backlog`.
///
/// # Errors
/// [`ProxyError::Bind`].
pub(crate) async fn bind(
    listen: &Listen,
    backlog: u32,
    pool: &str,
) -> Result<Listener, ProxyError> {
    let bind_err = |source| ProxyError::Bind {
        addr: listen.to_string(),
        what: crate::error::BindTarget::Pool(pool.to_owned()),
        source,
    };
    match listen {
        Listen::Tcp { .. } => {
            let sock_addr = tokio::net::lookup_host(listen.to_string())
                .await
                .map_err(bind_err)?
                .next()
                .ok_or_else(|| bind_err(io::Error::new(io::ErrorKind::NotFound, "no address")))?;
            let socket = if sock_addr.is_ipv4() {
                TcpSocket::new_v4()
            } else {
                TcpSocket::new_v6()
            }
            .map_err(bind_err)?;
            socket.set_reuseaddr(true).map_err(bind_err)?;
            socket.bind(sock_addr).map_err(bind_err)?;
            Ok(Listener::Tcp(socket.listen(backlog).map_err(bind_err)?))
        }
        Listen::Unix { path, permissions } => {
            let _ = std::fs::remove_file(path);
            let l = UnixListener::bind(path).map_err(bind_err)?;
            if *permissions != 0 {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(*permissions))
                    .map_err(bind_err)?;
            }
            Ok(Listener::Unix(l))
        }
    }
}

/// Turns on TCP keepalive (`SO_KEEPALIVE`, the kernel's probe timings) on a connection; a failure is
/// logged, never fatal (the connection works without it).
pub(crate) fn set_keepalive(stream: &tokio::net::TcpStream) {
    if let Err(e) = socket2::SockRef::from(stream).set_keepalive(true) {
        tracing::warn!(error = %e, "could not turn on TCP keepalive");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keepalive_is_turned_on() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        assert!(!socket2::SockRef::from(&client).keepalive().unwrap());
        set_keepalive(&client);
        assert!(socket2::SockRef::from(&client).keepalive().unwrap());
    }
}
