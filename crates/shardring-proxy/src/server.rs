//! The accept loop and the per-client task.
//!
//! [`run`] takes its listener and its shutdown trigger as arguments (tests bind `127.0.0.1:0` and stop it
//! when they like). A semaphore caps clients at `client_connections`. Each client is one task that reads
//! requests, sends each to its server at once (pipelined requests are all in flight together), and writes
//! the replies in request order. An error on one client connection ends that connection only.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, UnixListener};
use tokio::sync::{oneshot, Semaphore};
use tokio_util::codec::Decoder;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backend::{Backend, Reply};
use crate::cluster::{Cluster, Pool};
use crate::config::{Listen, DEFAULT_CLIENT_CONNECTIONS};
use crate::error::{BackendError, ProxyError};
use crate::protocol::memcache::{
    is_error_reply, status_code, Command, Decoded, GetKind, MetaKind, Request, RequestCodec,
    StatsRequest, ValueBlocks,
};

/// The most requests one client may have in flight; past it the proxy stops reading from that client
/// until replies go out, which bounds each client's memory.
const MAX_PIPELINE: usize = 256;

/// The reply to `version`: the memcached protocol level the proxy speaks, then its own name and version.
/// Clients read the first word as `major.minor.micro` and refuse a reply that does not start so
/// (libmemcached's `memcached_version`, used by `memcping` and `memcstat`, fails on
/// `VERSION shardring-proxy-…`); some enable features by it (1.6 has the meta commands).
pub const VERSION_REPLY: &[u8] = concat!(
    "VERSION 1.6.0 shardring-proxy-",
    env!("CARGO_PKG_VERSION"),
    "\r\n"
)
.as_bytes();

/// Numbers clients, so each client's requests to a server share one server connection.
static NEXT_CLIENT_ID: AtomicU64 = AtomicU64::new(0);

/// A bound listener: TCP or a unix socket.
#[derive(Debug)]
pub enum Listener {
    /// TCP.
    Tcp(TcpListener),
    /// A unix socket.
    Unix(UnixListener),
}

impl Listener {
    /// The local address, for logs and tests.
    pub fn local_addr(&self) -> io::Result<String> {
        match self {
            Listener::Tcp(l) => l.local_addr().map(|a| a.to_string()),
            Listener::Unix(l) => l.local_addr().map(|a| format!("{:?}", a.as_pathname())),
        }
    }
}

/// Binds a pool's `listen` address with its `backlog`.
///
/// # Errors
/// [`ProxyError::Bind`].
pub async fn bind(listen: &Listen, backlog: u32) -> Result<Listener, ProxyError> {
    let bind_err = |source| ProxyError::Bind {
        addr: listen.to_string(),
        source,
    };
    match listen {
        Listen::Tcp(addr) => {
            let sock_addr = tokio::net::lookup_host(addr.as_str())
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
        Listen::Unix { path, mode } => {
            let _ = std::fs::remove_file(path);
            let l = UnixListener::bind(path).map_err(bind_err)?;
            if let Some(m) = mode {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(*m))
                    .map_err(bind_err)?;
            }
            Ok(Listener::Unix(l))
        }
    }
}

/// Serves `pool`'s clients from `listener` until `shutdown` completes, then stops accepting, lets every
/// client's in-flight requests finish, and returns once every client task has ended.
pub async fn run(listener: Listener, pool: Arc<Pool>, shutdown: impl Future<Output = ()>) {
    let stop = CancellationToken::new();
    let tracker = TaskTracker::new();
    let cap = match pool.current.load().config.client_connections {
        0 => DEFAULT_CLIENT_CONNECTIONS,
        n => n,
    };
    let keepalive = pool.current.load().config.tcpkeepalive;
    let permits = Arc::new(Semaphore::new(cap as usize));
    let accept = async {
        loop {
            let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                return;
            };
            let accepted = match &listener {
                Listener::Tcp(l) => l.accept().await.map(|(s, _)| {
                    let _ = s.set_nodelay(true);
                    if keepalive {
                        set_keepalive(&s);
                    }
                    Box::new(s) as Box<dyn Stream>
                }),
                Listener::Unix(l) => l
                    .accept()
                    .await
                    .map(|(s, _)| Box::new(s) as Box<dyn Stream>),
            };
            match accepted {
                Ok(stream) => {
                    let pool = Arc::clone(&pool);
                    let stop = stop.clone();
                    tracker.spawn(async move {
                        serve_client(stream, pool, stop).await;
                        drop(permit);
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::error!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    };
    tokio::select! {
        () = accept => {}
        () = shutdown => {}
    }
    stop.cancel();
    tracker.close();
    tracker.wait().await;
}

/// Turns on TCP keepalive (`SO_KEEPALIVE`, the kernel's probe timings) on a connection; a failure is
/// logged, never fatal (the connection works without it).
pub(crate) fn set_keepalive(stream: &tokio::net::TcpStream) {
    if let Err(e) = socket2::SockRef::from(stream).set_keepalive(true) {
        tracing::warn!(error = %e, "could not turn on TCP keepalive");
    }
}

/// What a client connection is: bytes both ways.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

async fn serve_client(stream: Box<dyn Stream>, pool: Arc<Pool>, stop: CancellationToken) {
    let stats = Arc::clone(&pool.shared.stats);
    stats.client_connections.inc();
    stats.total_connections.inc();
    let limits = pool.current.load().config.limits;
    let mut handler = Handler {
        stream,
        rbuf: BytesMut::with_capacity(16 << 10),
        out: BytesMut::with_capacity(16 << 10),
        codec: RequestCodec::new(limits),
        max_buffer: limits.max_request_len(),
        pool,
        client_id: NEXT_CLIENT_ID.fetch_add(1, Ordering::Relaxed),
        pending: VecDeque::with_capacity(16),
    };
    match handler.run(stop).await {
        Ok(()) => stats.client_eof.inc(),
        Err(e) => {
            stats.client_err.inc();
            tracing::debug!(error = %e, "client connection ended");
        }
    }
    stats.client_connections.dec();
}

/// A server's error reply to a request the proxy split or broadcast, as a [`BackendError`].
fn refused(server: &Backend, reply: &[u8]) -> BackendError {
    BackendError::Refused {
        addr: server.settings().addr.clone(),
        reply: String::from_utf8_lossy(reply.strip_suffix(b"\r\n").unwrap_or(reply)).into_owned(),
    }
}

/// A reply for the client, once known.
enum Answer {
    /// Bytes from a server (or built here).
    Bytes(Bytes),
    /// A fixed line.
    Static(&'static [u8]),
    /// Nothing (noreply, quiet meta).
    Nothing,
    /// The server failed: `SERVER_ERROR <reason>`.
    Failed(BackendError),
}

/// How a single-server reply becomes the client's answer.
#[derive(Clone, Copy)]
enum Mode {
    /// As it is.
    Plain,
    /// Hidden (the client sent `noreply`).
    NoReply,
    /// A quiet meta command: hidden when its status is one `q` hides.
    Quiet(MetaKind),
}

/// A reply on its way, in the client's request order.
enum Pending {
    /// Known already.
    Ready(Option<Answer>),
    /// One server's reply.
    Single(oneshot::Receiver<Reply>, Mode),
    /// Anything that takes more work (multi-server get, flush_all).
    Boxed(Pin<Box<dyn Future<Output = Answer> + Send>>),
}

impl Future for Pending {
    type Output = Answer;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer> {
        match self.get_mut() {
            Pending::Ready(a) => Poll::Ready(a.take().unwrap_or(Answer::Nothing)),
            Pending::Single(rx, mode) => match Pin::new(rx).poll(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Err(_)) => Poll::Ready(Answer::Failed(BackendError::Removed)),
                Poll::Ready(Ok(Err(e))) => Poll::Ready(match mode {
                    Mode::NoReply => Answer::Nothing,
                    _ => Answer::Failed(e),
                }),
                Poll::Ready(Ok(Ok(bytes))) => Poll::Ready(match mode {
                    Mode::Plain => Answer::Bytes(bytes),
                    Mode::NoReply => Answer::Nothing,
                    Mode::Quiet(kind) => {
                        if kind.quiet_hides(status_code(&bytes)) {
                            Answer::Nothing
                        } else {
                            Answer::Bytes(bytes)
                        }
                    }
                }),
            },
            Pending::Boxed(f) => f.as_mut().poll(cx),
        }
    }
}

/// One client connection.
struct Handler {
    /// The client.
    stream: Box<dyn Stream>,
    /// Bytes read and not yet parsed; at most `max_buffer` (plus one read).
    rbuf: BytesMut,
    /// Replies ready to write.
    out: BytesMut,
    /// The request parser.
    codec: RequestCodec,
    /// Stop reading past this many buffered bytes: a whole request of the largest size fits.
    max_buffer: usize,
    /// The pool served.
    pool: Arc<Pool>,
    /// Which connection of each server this client uses.
    client_id: u64,
    /// Replies in request order. Only the oldest is polled: a reply makes progress without being polled
    /// (its server connection task completes it), so polling the head is enough to write in order, and
    /// saves a task allocation per request.
    pending: VecDeque<Pending>,
}

impl Handler {
    async fn run(&mut self, stop: CancellationToken) -> io::Result<()> {
        let mut closing = false;
        // One registration for the connection's life, not one per loop turn: the token's waiter list is
        // shared by every client.
        let stopped = stop.cancelled();
        tokio::pin!(stopped);
        loop {
            while !closing && self.pending.len() < MAX_PIPELINE {
                match self.codec.decode(&mut self.rbuf)? {
                    None => break,
                    Some(Decoded::Request(req)) => {
                        self.pool.shared.stats.requests.inc();
                        if req.command == Command::Quit {
                            closing = true;
                            break;
                        }
                        let p = self.dispatch(req);
                        self.pending.push_back(p);
                    }
                    Some(Decoded::Refused(err)) => {
                        self.pool.shared.stats.client_errors.inc();
                        self.pending
                            .push_back(Pending::Ready(Some(Answer::Static(err.kind.reply()))));
                        if err.close {
                            tracing::info!(
                                reason = %err.kind,
                                "closing a client connection: its input cannot be resynchronised"
                            );
                            closing = true;
                        }
                    }
                }
            }
            if closing && self.pending.is_empty() {
                self.stream.flush().await?;
                let _ = self.stream.shutdown().await;
                return Ok(());
            }
            let can_read =
                !closing && self.pending.len() < MAX_PIPELINE && self.rbuf.len() < self.max_buffer;
            if can_read && self.rbuf.capacity() - self.rbuf.len() < 4096 {
                self.rbuf.reserve(16 << 10);
            }
            tokio::select! {
                biased;
                answer = poll_fn(|cx| match self.pending.front_mut() {
                    Some(p) => Pin::new(p).poll(cx),
                    None => Poll::Pending,
                }), if !self.pending.is_empty() => {
                    self.pending.pop_front();
                    self.write_answer(answer);
                    while let Some(front) = self.pending.front_mut() {
                        let Some(a) = front.now_or_never() else {
                            break;
                        };
                        self.pending.pop_front();
                        self.write_answer(a);
                        if self.out.len() > 1 << 20 {
                            break;
                        }
                    }
                    if !self.out.is_empty() {
                        self.stream.write_all(&self.out).await?;
                        self.out.clear();
                    }
                }
                read = self.stream.read_buf(&mut self.rbuf), if can_read => {
                    if read? == 0 {
                        closing = true;
                    }
                }
                () = &mut stopped, if !closing => closing = true,
            }
        }
    }

    fn write_answer(&mut self, a: Answer) {
        match a {
            Answer::Bytes(b) => self.out.extend_from_slice(&b),
            Answer::Static(s) => self.out.extend_from_slice(s),
            Answer::Nothing => {}
            Answer::Failed(e) => {
                self.pool.shared.stats.forward_error.inc();
                self.out.extend_from_slice(b"SERVER_ERROR ");
                self.out.extend_from_slice(e.to_string().as_bytes());
                self.out.extend_from_slice(b"\r\n");
            }
        }
    }

    fn dispatch(&self, req: Request) -> Pending {
        let cluster = self.pool.current.load();
        match &req.command {
            Command::Get {
                kind,
                exptime,
                keys,
            } => {
                let (kind, exptime, keys) = (*kind, exptime.clone(), keys.clone());
                self.get(&cluster, req, kind, exptime, keys)
            }
            Command::Keyed { key, noreply } => {
                let mode = if *noreply { Mode::NoReply } else { Mode::Plain };
                self.single(&cluster, &req, key.clone(), mode)
            }
            Command::Meta {
                kind, key, quiet, ..
            } => {
                let mode = if *quiet {
                    Mode::Quiet(*kind)
                } else {
                    Mode::Plain
                };
                self.single(&cluster, &req, key.clone(), mode)
            }
            Command::MetaNoop => Pending::Ready(Some(Answer::Static(b"MN\r\n"))),
            Command::Version => Pending::Ready(Some(Answer::Static(VERSION_REPLY))),
            Command::Quit => Pending::Ready(None),
            Command::Verbosity { noreply } => Pending::Ready(Some(if *noreply {
                Answer::Nothing
            } else {
                Answer::Static(b"OK\r\n")
            })),
            Command::FlushAll { noreply } => self.flush_all(&cluster, &req, *noreply),
            Command::Stats(request) => Pending::Ready(Some(match request {
                StatsRequest::Proxy => Answer::Bytes(self.local_stats(&cluster)),
                StatsRequest::Reset => Answer::Static(b"RESET\r\n"),
                StatsRequest::Toggle => Answer::Static(b"OK\r\n"),
                StatsRequest::PerServer => Answer::Static(b"END\r\n"),
            })),
        }
    }

    fn single(&self, cluster: &Cluster, req: &Request, key: Range<usize>, mode: Mode) -> Pending {
        let routing = cluster.router.load();
        let Some(server) = req.with_routing_key(&key, |k| routing.server_for(k)) else {
            return Pending::Ready(Some(Answer::Failed(BackendError::NoServer)));
        };
        let kind = req.command.response_kind();
        let rx = cluster.backends[server].send(self.client_id, req.to_forward(), kind);
        Pending::Single(rx, mode)
    }

    fn get(
        &self,
        cluster: &Cluster,
        req: Request,
        kind: GetKind,
        exptime: Option<Range<usize>>,
        keys: Vec<Range<usize>>,
    ) -> Pending {
        let routing = cluster.router.load();
        // Each key's server; usize::MAX when no server is live.
        let owners: Vec<usize> = keys
            .iter()
            .map(|k| routing.server_for(req.bytes(k)).unwrap_or(usize::MAX))
            .collect();
        let first = owners[0];
        if first != usize::MAX && owners.iter().all(|&o| o == first) {
            let rx = cluster.backends[first].send(
                self.client_id,
                req.frame.clone(),
                req.command.response_kind(),
            );
            return Pending::Single(rx, Mode::Plain);
        }
        // Split: one request per server, keys in the client's order.
        let mut groups: Vec<(usize, BytesMut)> = Vec::new();
        let mut group_of = Vec::with_capacity(keys.len());
        for (k, &owner) in keys.iter().zip(&owners) {
            if owner == usize::MAX {
                group_of.push(usize::MAX);
                continue;
            }
            let g = match groups.iter().position(|(s, _)| *s == owner) {
                Some(g) => g,
                None => {
                    let mut line = BytesMut::with_capacity(256);
                    line.extend_from_slice(kind.word().as_bytes());
                    if let Some(e) = &exptime {
                        line.extend_from_slice(b" ");
                        line.extend_from_slice(req.bytes(e));
                    }
                    groups.push((owner, line));
                    groups.len() - 1
                }
            };
            groups[g].1.extend_from_slice(b" ");
            groups[g].1.extend_from_slice(req.bytes(k));
            group_of.push(g);
        }
        let all_or_nothing = cluster.config.multiget_all_or_nothing;
        let any_unrouted = group_of.contains(&usize::MAX);
        self.pool.shared.stats.fragments.add(groups.len() as u64);
        let (servers, receivers): (Vec<_>, Vec<_>) = groups
            .into_iter()
            .map(|(server, mut line)| {
                line.extend_from_slice(b"\r\n");
                let backend = &cluster.backends[server];
                let rx = backend.send(self.client_id, line.freeze(), req.command.response_kind());
                (Arc::clone(backend), rx)
            })
            .unzip();
        Pending::Boxed(Box::pin(async move {
            let replies: Vec<Reply> = futures_util::future::join_all(receivers)
                .await
                .into_iter()
                .zip(&servers)
                .map(|(r, server)| match r {
                    Ok(Ok(b)) if is_error_reply(&b) => Err(refused(server, &b)),
                    Ok(r) => r,
                    Err(_) => Err(BackendError::Removed),
                })
                .collect();
            let first_err = replies.iter().find_map(|r| r.as_ref().err().cloned());
            if let Some(err) = &first_err {
                if all_or_nothing || replies.iter().all(Result::is_err) {
                    return Answer::Failed(err.clone());
                }
            }
            if all_or_nothing && any_unrouted {
                return Answer::Failed(BackendError::NoServer);
            }
            if replies.is_empty() {
                return Answer::Failed(BackendError::NoServer);
            }
            let mut cursors: Vec<_> = replies
                .iter()
                .map(|r| match r {
                    Ok(b) => ValueBlocks::new(b).peekable(),
                    Err(_) => ValueBlocks::new(&[]).peekable(),
                })
                .collect();
            let total: usize = replies
                .iter()
                .map(|r| r.as_ref().map_or(0, Bytes::len))
                .sum();
            let mut out = BytesMut::with_capacity(total + 5);
            for (k, &g) in keys.iter().zip(&group_of) {
                if g == usize::MAX {
                    continue;
                }
                let cursor = &mut cursors[g];
                if let Some((key, block)) = cursor.peek() {
                    if *key == &req.frame[k.clone()] {
                        out.extend_from_slice(block);
                        cursor.next();
                    }
                }
            }
            out.extend_from_slice(b"END\r\n");
            Answer::Bytes(out.freeze())
        }))
    }

    fn flush_all(&self, cluster: &Cluster, req: &Request, noreply: bool) -> Pending {
        let frame = req.to_forward();
        let (servers, receivers): (Vec<_>, Vec<_>) = cluster
            .backends
            .iter()
            .filter(|b| !b.health.is_ejected())
            .map(|b| {
                let rx = b.send(self.client_id, frame.clone(), req.command.response_kind());
                (Arc::clone(b), rx)
            })
            .unzip();
        Pending::Boxed(Box::pin(async move {
            let replies = futures_util::future::join_all(receivers).await;
            let mut failure = None;
            for (r, server) in replies.into_iter().zip(&servers) {
                match r {
                    Ok(Ok(b)) if &b[..] == b"OK\r\n" => {}
                    Ok(Ok(b)) => failure = Some(refused(server, &b)),
                    Ok(Err(e)) => failure = Some(e),
                    Err(_) => failure = Some(BackendError::Removed),
                }
            }
            match (failure, noreply) {
                (_, true) => Answer::Nothing,
                (Some(e), false) => Answer::Failed(e),
                (None, false) => Answer::Static(b"OK\r\n"),
            }
        }))
    }

    /// `stats` answered by the proxy: its own counters, memcached's names where they exist.
    fn local_stats(&self, cluster: &Cluster) -> Bytes {
        use std::fmt::Write as _;
        let mut s = String::new();
        {
            let st = &self.pool.shared.stats;
            let _ = write!(
                s,
                "STAT pid {}\r\nSTAT uptime {}\r\nSTAT time {}\r\nSTAT version shardring-proxy-{}\r\n\
                 STAT curr_connections {}\r\nSTAT total_connections {}\r\nSTAT cmd_total {}\r\n\
                 STAT forward_error {}\r\nSTAT servers {}\r\nSTAT servers_live {}\r\n",
                std::process::id(),
                self.pool.shared.started.elapsed().as_secs(),
                crate::metrics::unix_time(),
                env!("CARGO_PKG_VERSION"),
                st.client_connections.get(),
                st.total_connections.get(),
                st.requests.get(),
                st.forward_error.get(),
                cluster.backends.len(),
                cluster.router.load().live_servers(),
            );
        }
        s.push_str("END\r\n");
        Bytes::from(s)
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
