//! One server's connections: `server_connections` pipelined connections per worker
//! ([`crate::workers`]), each owned by a task that writes queued requests, frames the replies in order,
//! and enforces the pool's `timeout`.
//!
//! A worker's connections are tasks of its runtime, and a client sends only to its own worker's
//! connections: a request and its reply stay on one thread. A client's requests to one server always
//! take the same connection (chosen by the client's id within its worker), so a `set` followed by a
//! `get` on one client connection reach the server in that order.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::health::{Ejections, ServerHealth};
use super::queue::{self, Receiver, Sender};
use super::reply::ReplyTo;
use super::stream::{ConnectError, ServerStream};
use crate::descriptors::During;
use crate::error::BackendError;
use crate::metrics::ServerStats;
use crate::protocol::{Protocol, Reply, ReplyScanner, ServerFacts};
use crate::tls::connector::ServerTls;

/// The most requests one server connection has in flight; more wait in its queue.
const MAX_IN_FLIGHT: usize = 1024;
/// The most request bytes buffered for writing on one server connection.
const MAX_WRITE_BUFFER: usize = 4 << 20;
/// How long a new connection waits for the answers to the protocol's introductions when the pool has
/// no `timeout` (a server that ignores them must not hold the connection forever).
const INTRODUCTION_TIMEOUT: Duration = Duration::from_secs(1);
/// After a failed TLS handshake, how long requests fail at once with its cause before the next
/// handshake is tried, at first and at most (it doubles while handshakes keep failing): a certificate
/// does not fix itself between two requests, and a handshake per request would load both sides.
const TLS_RETRY_MIN: Duration = Duration::from_secs(1);
const TLS_RETRY_MAX: Duration = Duration::from_secs(30);

/// A request for a server connection task.
#[derive(Debug)]
struct Job<P: Protocol> {
    /// The bytes to send.
    frame: Bytes,
    /// How to frame the reply.
    kind: P::ReplyKind,
    /// Where the reply goes.
    reply: ReplyTo,
    /// The circuit breaker's ejections when it was admitted ([`ServerHealth::admit`]): an ejection
    /// after that fails it while it waits, as it fails the requests in flight. Their low 32 bits
    /// ([`Connection::admitted_at`] has the rest): 8 bytes would make a memcached job 72 bytes
    /// rather than 64, and every request moves its job through the queue, with or without a
    /// breaker.
    admitted: u32,
}

/// How a server's connections behave; from the pool's config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BackendSettings {
    /// `host:port`, or a unix socket's path.
    pub addr: String,
    /// Connect and reply timeout; `None` waits forever (twemproxy's default).
    pub timeout: Option<Duration>,
    /// Connections to open (`server_connections`).
    pub connections: u32,
    /// The largest value accepted in a reply.
    pub max_value_len: usize,
    /// Turn on TCP keepalive (`tcpkeepalive`).
    pub keepalive: bool,
    /// The most connections of their own ([`Backend::own_connection`]) open at once.
    pub own_connections: u32,
    /// TLS on every connection (`--server-tls`); `None`: plain TCP.
    pub tls: Option<ServerTls>,
}

/// A server: its connection tasks, tallies and health.
#[derive(Debug)]
pub(crate) struct Backend<P: Protocol> {
    /// What the connections were made with (a reload keeps the backend when these are unchanged).
    settings: BackendSettings,
    /// One queue per connection task, by worker, then by set of connections ([`Protocol::lane`]);
    /// dropping them ends the tasks once their replies are in.
    queues: Vec<Vec<Vec<Sender<Job<P>>>>>,
    /// Tallies, shared with the stats renderers.
    pub stats: Arc<ServerStats>,
    /// Failure counting and ejection state.
    pub health: Arc<ServerHealth>,
    /// What the server said about itself ([`Dialect::introductions`](crate::protocol::Dialect::introductions)).
    facts: Arc<ServerFacts>,
    /// Each lane's handshake, for the connections of a client's own.
    handshakes: Vec<Vec<(Bytes, P::ReplyKind)>>,
    /// The introductions, for the same.
    introductions: Vec<(Bytes, P::ReplyKind)>,
}

impl<P: Protocol> Backend<P> {
    /// Starts the connection tasks on each worker's runtime (`workers`, by worker index): on each,
    /// `connections` for each handshake (a set per [`Protocol::lane`]). They connect on first use, or
    /// now when `preconnect` (the first set only). Every new connection sends `introductions` first.
    pub(crate) fn spawn(
        settings: BackendSettings,
        stats: Arc<ServerStats>,
        health: Arc<ServerHealth>,
        preconnect: bool,
        handshakes: Vec<Vec<(Bytes, P::ReplyKind)>>,
        introductions: Vec<(Bytes, P::ReplyKind)>,
        workers: &[Handle],
    ) -> Backend<P> {
        let handshakes = if handshakes.is_empty() {
            vec![Vec::new()]
        } else {
            handshakes
        };
        let facts = Arc::new(ServerFacts::default());
        let queues = workers
            .iter()
            .map(|worker| {
                let spawn = Spawn {
                    settings: &settings,
                    stats: &stats,
                    health: &health,
                    facts: &facts,
                    introductions: &introductions,
                };
                spawn.worker(preconnect, &handshakes, worker)
            })
            .collect();
        Backend {
            settings,
            queues,
            stats,
            health,
            facts,
            handshakes,
            introductions,
        }
    }

    /// Whether its connections greet the server with these handshakes (a reload that changes
    /// `redis_auth` or the user needs new connections).
    pub(crate) fn greets_with(&self, handshakes: &[Vec<(Bytes, P::ReplyKind)>]) -> bool {
        // `spawn` gives a protocol without handshakes one empty set.
        let frames = |h: &[Vec<(Bytes, P::ReplyKind)>]| -> Vec<Vec<Bytes>> {
            h.iter()
                .map(|set| set.iter().map(|(f, _)| f.clone()).collect::<Vec<_>>())
                .filter(|set| !set.is_empty())
                .collect()
        };
        frames(&self.handshakes) == frames(handshakes)
    }

    /// A connection of one client's own to this server, greeted for `lane`, on the runtime of the
    /// caller (a session, on its worker): it connects on its first request, carries only that client's
    /// requests, never reconnects (what the server held for it, a `WATCH`, would be gone), and closes
    /// when dropped, even with replies outstanding (a client that leaves in a blocking command frees
    /// its connection at once).
    ///
    /// # Errors
    /// [`BackendError::OwnConnectionsExhausted`] when the server has its bound of them open.
    pub(crate) fn own_connection(&self, lane: usize) -> Result<OwnConnection<P>, BackendError> {
        let slot = self.own_slot()?;
        let (tx, rx) = queue::channel();
        let conn = self.connection(lane, true);
        tokio::spawn(conn.run(rx, false));
        Ok(OwnConnection {
            queue: tx,
            stats: Arc::clone(&self.stats),
            health: Arc::clone(&self.health),
            addr: self.settings.addr.clone(),
            _slot: slot,
        })
    }

    /// One of the server's bounded connections of single clients, counted until dropped.
    ///
    /// # Errors
    /// [`BackendError::OwnConnectionsExhausted`] when the server has its bound of them open.
    pub(super) fn own_slot(&self) -> Result<OwnSlot, BackendError> {
        let limit = u64::from(self.settings.own_connections);
        if !self.stats.dedicated_connections.inc_below(limit) {
            self.stats.dedicated_refused.inc();
            return Err(BackendError::OwnConnectionsExhausted {
                addr: self.settings.addr.clone(),
                limit: self.settings.own_connections,
            });
        }
        Ok(OwnSlot {
            stats: Arc::clone(&self.stats),
        })
    }

    /// A connection task's state for `lane`, not yet connected.
    fn connection(&self, lane: usize, own: bool) -> Connection<P> {
        Connection::<P> {
            settings: self.settings.clone(),
            handshake: self
                .handshakes
                .get(lane)
                .or(self.handshakes.first())
                .cloned()
                .unwrap_or_default(),
            introductions: self.introductions.clone(),
            facts: Arc::clone(&self.facts),
            stats: Arc::clone(&self.stats),
            health: Arc::clone(&self.health),
            ejections: self.health.ejections(),
            in_flight: VecDeque::new(),
            rbuf: BytesMut::new(),
            wbuf: BytesMut::new(),
            tls_retry: Duration::ZERO,
            scanner: P::ReplyScanner::default(),
            own,
        }
    }

    /// A new connection to the server, greeted for `lane` (the handshake, within the pool's
    /// `timeout`): for a connection that is not a request/reply pipeline (a subscriber's).
    pub(super) async fn greeted(&self, lane: usize) -> Result<ServerStream, BackendError> {
        self.connection(lane, true).connect().await
    }

    /// The server's address.
    pub(super) fn addr(&self) -> &str {
        &self.settings.addr
    }

    /// What the server said about itself so far.
    pub(crate) fn facts(&self) -> &Arc<ServerFacts> {
        &self.facts
    }
}

/// What every connection task of one server is made with.
struct Spawn<'a, P: Protocol> {
    /// Where and how to connect.
    settings: &'a BackendSettings,
    /// The server's tallies.
    stats: &'a Arc<ServerStats>,
    /// The server's failure counting.
    health: &'a Arc<ServerHealth>,
    /// What the server says of itself, written by every connection.
    facts: &'a Arc<ServerFacts>,
    /// What each new connection asks before it carries the clients' requests.
    introductions: &'a [(Bytes, P::ReplyKind)],
}

impl<P: Protocol> Spawn<'_, P> {
    /// One worker's connection tasks, spawned on its runtime: by lane, then by connection.
    fn worker(
        &self,
        preconnect: bool,
        handshakes: &[Vec<(Bytes, P::ReplyKind)>],
        worker: &Handle,
    ) -> Vec<Vec<Sender<Job<P>>>> {
        let Spawn {
            settings,
            stats,
            health,
            ..
        } = *self;
        handshakes
            .iter()
            .enumerate()
            .map(|(lane, handshake)| {
                (0..settings.connections.max(1))
                    .map(|_| {
                        let (tx, rx) = queue::channel();
                        let conn = Connection::<P> {
                            settings: settings.clone(),
                            handshake: handshake.clone(),
                            introductions: self.introductions.to_vec(),
                            facts: Arc::clone(self.facts),
                            stats: Arc::clone(stats),
                            health: Arc::clone(health),
                            ejections: health.ejections(),
                            in_flight: VecDeque::new(),
                            rbuf: BytesMut::with_capacity(16 << 10),
                            wbuf: BytesMut::with_capacity(16 << 10),
                            scanner: P::ReplyScanner::default(),
                            own: false,
                            tls_retry: Duration::ZERO,
                        };
                        worker.spawn(conn.run(rx, preconnect && lane == 0));
                        tx
                    })
                    .collect()
            })
            .collect()
    }
}

impl<P: Protocol> Backend<P> {
    /// The settings the backend runs with.
    pub(crate) fn settings(&self) -> &BackendSettings {
        &self.settings
    }

    /// Queues `frame` on the connection `to` names and returns where its reply will arrive. Never
    /// waits: requests from one client reach the server in the order they were sent.
    pub(crate) fn send(
        &self,
        to: ConnectionRoute,
        frame: Bytes,
        kind: P::ReplyKind,
    ) -> oneshot::Receiver<Reply> {
        let (tx, rx) = oneshot::channel();
        self.send_to(to, frame, kind, ReplyTo::Once(tx));
        rx
    }

    /// [`Backend::send`] with the reply going to `reply` (a session's reply slot: no channel made).
    pub(crate) fn send_to(
        &self,
        to: ConnectionRoute,
        frame: Bytes,
        kind: P::ReplyKind,
        reply: ReplyTo,
    ) {
        // A route names a worker this backend has queues for; the fallback keeps a release build
        // serving should that ever break, at the price of a request crossing threads.
        debug_assert!(
            to.worker < self.queues.len(),
            "route to worker {}",
            to.worker
        );
        let worker = self.queues.get(to.worker).unwrap_or(&self.queues[0]);
        let queues = worker.get(to.lane).unwrap_or(&worker[0]);
        let client_id = to.client_id;
        let i = (client_id % queues.len() as u64) as usize;
        let admitted = match self.health.admit(&self.stats, &self.settings.addr) {
            Ok(ejections) => ejections as u32,
            Err(refused) => {
                reply.send(Err(refused));
                return;
            }
        };
        self.stats.in_queue.inc();
        let job = Job {
            frame,
            kind,
            reply,
            admitted,
        };
        if let Err(job) = queues[i].send(job) {
            self.stats.in_queue.dec();
            job.reply.send(Err(BackendError::Removed));
        }
    }
}

/// A connection of one client's own ([`Backend::own_connection`]); closed when dropped.
#[derive(Debug)]
pub(crate) struct OwnConnection<P: Protocol> {
    /// Its task's queue.
    queue: Sender<Job<P>>,
    /// The server's tallies.
    stats: Arc<ServerStats>,
    /// The server's health (its circuit breaker admits each request).
    health: Arc<ServerHealth>,
    /// The server's address, for the breaker's errors.
    addr: String,
    /// Its place in the server's bound.
    _slot: OwnSlot,
}

/// A place among a server's connections of single clients ([`Backend::own_slot`]), given back when
/// dropped.
#[derive(Debug)]
pub(crate) struct OwnSlot {
    /// The server's tallies (their gauge).
    stats: Arc<ServerStats>,
}

impl Drop for OwnSlot {
    fn drop(&mut self) {
        self.stats.dedicated_connections.dec();
    }
}

impl<P: Protocol> OwnConnection<P> {
    /// Queues `frame`, its reply going to `reply`. Out of line: few requests take one.
    #[inline(never)]
    pub(crate) fn send_to(&self, frame: Bytes, kind: P::ReplyKind, reply: ReplyTo) {
        let admitted = match self.health.admit(&self.stats, &self.addr) {
            Ok(ejections) => ejections as u32,
            Err(refused) => {
                reply.send(Err(refused));
                return;
            }
        };
        self.stats.in_queue.inc();
        let job = Job {
            frame,
            kind,
            reply,
            admitted,
        };
        if let Err(job) = self.queue.send(job) {
            self.stats.in_queue.dec();
            job.reply.send(Err(BackendError::Removed));
        }
    }
}

/// Which of a server's connections a client's request takes: its worker's, in its lane, the one its id
/// picks. The same for every request of one client in one lane, which keeps them in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectionRoute {
    /// The worker serving the client ([`crate::workers`]): only its connections are on its thread.
    pub worker: usize,
    /// The set of connections ([`Protocol::lane`]).
    pub lane: usize,
    /// The client's number, which picks one connection of the set.
    pub client_id: u64,
}

/// A request written and awaiting its reply.
#[derive(Debug)]
struct InFlight<P: Protocol> {
    /// How to frame the reply.
    kind: P::ReplyKind,
    /// Where it goes.
    reply: ReplyTo,
    /// When the connection task took it (one clock read per batch, not per request): the start of its
    /// latency and of its timeout.
    queued: Instant,
    /// The pool's `timeout` applies to its reply ([`Dialect::reply_timed`](crate::protocol::Dialect::reply_timed)).
    timed: bool,
    /// How many times its wait was reported to the circuit breaker as a stall
    /// ([`ServerHealth::stall_after`]): once it passed `slow`, and again for each further `slow`
    /// while it is the oldest. Its reply, when it comes, is not counted again.
    stalls: u32,
    /// [`Job::admitted`].
    admitted: u64,
}

/// One server connection's state, owned by its task.
#[derive(Debug)]
struct Connection<P: Protocol> {
    /// Where and how.
    settings: BackendSettings,
    /// Requests sent first on every new connection (the protocol's [`Dialect::handshakes`](crate::protocol::Dialect::handshakes)).
    handshake: Vec<(Bytes, P::ReplyKind)>,
    /// Requests sent and answered before a new connection carries the clients' requests, whose
    /// replies go to [`Dialect::introduced`](crate::protocol::Dialect::introduced) (the protocol's [`Dialect::introductions`](crate::protocol::Dialect::introductions)).
    introductions: Vec<(Bytes, P::ReplyKind)>,
    /// Where [`Dialect::introduced`](crate::protocol::Dialect::introduced) records what the server said.
    facts: Arc<ServerFacts>,
    /// Tallies.
    stats: Arc<ServerStats>,
    /// Failure counting.
    health: Arc<ServerHealth>,
    /// The circuit breaker's ejections, when the server has one ([`ServerHealth::ejections`]).
    ejections: Option<Ejections>,
    /// Requests written (or buffered for writing), oldest first: replies come back in this order.
    in_flight: VecDeque<InFlight<P>>,
    /// Reply bytes read and not yet framed.
    rbuf: BytesMut,
    /// Request bytes not yet written.
    wbuf: BytesMut,
    /// Frames the replies; may keep state across reads of the oldest reply.
    scanner: P::ReplyScanner,
    /// One client's own ([`Backend::own_connection`]): it closes as soon as its client drops it,
    /// and after a failure it fails what it is sent rather than reconnect.
    own: bool,
    /// The current hold-off after failed TLS handshakes (zero once one succeeds).
    tls_retry: Duration,
}

/// Why a connection ended.
enum End {
    /// All queues were dropped and every reply is in.
    Done,
    /// It failed; requests in flight get this error.
    Failed(BackendError),
}

impl<P: Protocol> Connection<P> {
    async fn run(mut self, mut rx: Receiver<Job<P>>, preconnect: bool) {
        let mut first = None;
        let mut try_now = preconnect;
        loop {
            if !try_now {
                match rx.recv().await {
                    Some(job) => first = Some(job),
                    None => return,
                }
            }
            try_now = false;
            let waiting = first.as_ref().map(|job| self.admitted_at(job.admitted));
            let stream = match self.watched(waiting, self.connect()).await.and_then(|r| r) {
                Ok(s) => s,
                Err(err) => {
                    // Everything queued now fails with this error: a burst toward a dead server is
                    // answered at once instead of one connect attempt per request.
                    if let Some(job) = first.take() {
                        self.fail_job(job, &err);
                    }
                    while let Some(job) = rx.try_recv() {
                        self.fail_job(job, &err);
                    }
                    // A shortage of the proxy's own descriptors was counted and logged where it
                    // happened ([`Connection::connect`]); it says nothing about the server.
                    if err.counts_against_server() {
                        self.health.record_failure(&self.stats, &err.cause());
                    }
                    if self.own {
                        while let Some(job) = rx.recv().await {
                            self.fail_job(job, &err);
                        }
                        return;
                    }
                    if matches!(err, BackendError::Tls { .. })
                        && !self.hold_off(&err, &mut rx).await
                    {
                        return;
                    }
                    continue;
                }
            };
            self.tls_retry = Duration::ZERO;
            let mut stream = stream;
            let introduced = match self.watched(waiting, self.introduce(&mut stream)).await {
                Ok(introduced) => introduced,
                Err(ejected) => {
                    // Ejected while the first request waited for the introduction: it fails, as
                    // the requests in flight do; the next request reconnects.
                    if let Some(job) = first.take() {
                        self.fail_job(job, &ejected);
                    }
                    continue;
                }
            };
            if !introduced {
                // A fresh connection without them, at once, the queued request kept: the server is
                // not failing, it just does not know the introduction.
                try_now = true;
                continue;
            }
            self.stats.server_connections.inc();
            if let Some(job) = first.take() {
                // Checked for an ejection as a watching loop checks (without a breaker there is
                // none to find): once per connection, not worth a branch.
                self.enqueue::<BreakerWatch>(job, Instant::now());
            }
            // Without a breaker, a loop that never looks at one ([`Watch`]).
            let end = if self.ejections.is_some() {
                self.serve::<BreakerWatch>(stream, &mut rx).await
            } else {
                self.serve::<NoWatch>(stream, &mut rx).await
            };
            self.stats.server_connections.dec();
            self.rbuf.clear();
            self.wbuf.clear();
            self.scanner.reset();
            match end {
                End::Done => return,
                End::Failed(err) => {
                    tracing::warn!(
                        pool = %self.health.pool_stats().name,
                        server = %self.stats.name,
                        cause = %err.cause(),
                        "server connection failed"
                    );
                    for f in self.in_flight.drain(..) {
                        self.stats.in_queue.dec();
                        f.reply.send(Err(err.clone()));
                    }
                    // A breaker's ejection ended it: the failures that caused it were counted.
                    if err.counts_against_server() {
                        self.health.record_failure(&self.stats, &err.cause());
                    }
                    if self.own {
                        // A new connection would have lost what the server held for the client.
                        while let Some(job) = rx.recv().await {
                            self.fail_job(job, &err);
                        }
                        return;
                    }
                }
            }
        }
    }

    /// `step` (a connect, an introduction) awaited: when a request waits on it (`waiting`) and a
    /// circuit breaker watches for stalls, each `slow` the step takes is one stall, as a request
    /// waiting that long for its reply is (a paused or overloaded server accepts connections in its
    /// kernel and answers nothing; the requests queued meanwhile are not in flight yet, so this is
    /// what shows their wait, a half-open probe's included). An ejection meanwhile abandons the
    /// step with the breaker's error: the waiting request gets it at once, as those in flight do.
    async fn watched<T>(
        &self,
        waiting: Option<u64>,
        step: impl std::future::Future<Output = T>,
    ) -> Result<T, BackendError> {
        let (Some(admitted), Some(ejections)) = (waiting, &self.ejections) else {
            return Ok(step.await);
        };
        let mut ejections = ejections.clone();
        let after = self.health.stall_after();
        tokio::pin!(step);
        let mut waited = Duration::ZERO;
        loop {
            tokio::select! {
                out = &mut step => return Ok(out),
                why = ejected_after(Some(&mut ejections), admitted) => {
                    return Err(self.ejected_error(&why));
                }
                () = sleep_for(after), if after.is_some() => {
                    waited += after.unwrap_or_default();
                    self.health.record_stall(&self.stats, waited);
                }
            }
        }
    }

    /// After a failed TLS handshake: fails what arrives with its error, without a handshake, for the
    /// hold-off (doubled each time, [`TLS_RETRY_MIN`] to [`TLS_RETRY_MAX`]). `false` when every queue
    /// was dropped meanwhile.
    async fn hold_off(&mut self, err: &BackendError, rx: &mut Receiver<Job<P>>) -> bool {
        self.tls_retry = (self.tls_retry * 2).clamp(TLS_RETRY_MIN, TLS_RETRY_MAX);
        tracing::warn!(
            pool = %self.health.pool_stats().name,
            server = %self.stats.name,
            cause = %err.cause(),
            retry_in = ?self.tls_retry,
            "TLS handshake with the server failed; its requests fail until the next try"
        );
        let until = tokio::time::Instant::now() + self.tls_retry;
        loop {
            match tokio::time::timeout_at(until, rx.recv()).await {
                Ok(Some(job)) => self.fail_job(job, err),
                Ok(None) => return false,
                Err(_) => return true,
            }
        }
    }

    async fn connect(&self) -> Result<ServerStream, BackendError> {
        let addr = &self.settings.addr;
        let attempt = ServerStream::connect(addr.as_str(), self.settings.tls.as_ref());
        let result = match self.settings.timeout {
            Some(t) => match tokio::time::timeout(t, attempt).await {
                Ok(r) => r,
                Err(_) => {
                    self.stats.server_timedout.inc();
                    return Err(BackendError::Connect {
                        addr: addr.clone(),
                        reason: "timed out".into(),
                    });
                }
            },
            None => attempt.await,
        };
        let mut stream = result
            .inspect(|s| {
                if let (Some(s), true) = (s.tcp(), self.settings.keepalive) {
                    crate::net::set_keepalive(s);
                }
            })
            .map_err(|e| {
                let e = match e {
                    ConnectError::Io(e) => e,
                    ConnectError::Tls(why) => {
                        self.stats.tls_handshake_errors.inc();
                        return BackendError::Tls {
                            addr: addr.clone(),
                            reason: why,
                        };
                    }
                };
                if crate::descriptors::is_shortage(&e) {
                    crate::descriptors::shortage(
                        Some(self.health.pool_stats()),
                        During::Connect(&self.stats.name),
                        &e,
                    );
                    return BackendError::LocalResources {
                        reason: e.to_string(),
                    };
                }
                self.stats.server_err.inc();
                BackendError::Connect {
                    addr: addr.clone(),
                    reason: e.to_string(),
                }
            })?;
        if !self.handshake.is_empty() {
            let greeting = async {
                match &mut stream {
                    ServerStream::Tcp(s) => self.greet(s).await,
                    ServerStream::Unix(s) => self.greet(s).await,
                    ServerStream::Tls(s) => self.greet(s).await,
                }
            };
            let outcome = match self.settings.timeout {
                Some(t) => tokio::time::timeout(t, greeting)
                    .await
                    .unwrap_or_else(|_| Err("timed out".into())),
                None => greeting.await,
            };
            outcome.map_err(|reason| {
                self.stats.server_err.inc();
                BackendError::Connect {
                    addr: addr.clone(),
                    reason,
                }
            })?;
        }
        Ok(stream)
    }

    /// Sends the protocol's handshake and checks each reply: an error reply fails the connection.
    async fn greet(
        &self,
        s: &mut (impl AsyncRead + AsyncWrite + Unpin + Send),
    ) -> Result<(), String> {
        let mut out = BytesMut::new();
        for (frame, _) in &self.handshake {
            out.extend_from_slice(frame);
        }
        s.write_all(&out).await.map_err(|e| e.to_string())?;
        let mut scanner = P::ReplyScanner::default();
        let mut buf = BytesMut::with_capacity(512);
        for (_, kind) in &self.handshake {
            loop {
                match scanner.frame(&buf, *kind, self.settings.max_value_len) {
                    Ok(Some(len)) => {
                        scanner.reset();
                        let reply = buf.split_to(len);
                        if P::is_error_reply(&reply) {
                            if let Some(why) = P::handshake_error_tolerated(&reply) {
                                self.handshake_tolerated(why, &reply);
                                break;
                            }
                            return Err(format!(
                                "handshake refused: {}",
                                String::from_utf8_lossy(
                                    reply.strip_suffix(b"\r\n").unwrap_or(&reply)
                                )
                            ));
                        }
                        break;
                    }
                    Ok(None) => {
                        if s.read_buf(&mut buf).await.map_err(|e| e.to_string())? == 0 {
                            return Err("closed during the handshake".into());
                        }
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
        }
        Ok(())
    }

    /// Counts a handshake step the server refused in a way that still lets it serve, and logs it
    /// once for the server.
    fn handshake_tolerated(&self, why: &str, reply: &[u8]) {
        self.stats.handshake_errors_tolerated.inc();
        if !self
            .stats
            .handshake_warned
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                pool = %self.health.pool_stats().name,
                server = %self.stats.name,
                reply = %String::from_utf8_lossy(reply.strip_suffix(b"\r\n").unwrap_or(reply)),
                "{why}; its connections are served"
            );
        }
    }

    /// Sends the protocol's introductions on a new connection and reads each reply into the server's
    /// facts, before any client request is written. `false` when the server does not take them: it
    /// closed the connection (as nutcracker does on a command it does not know) or answered out of
    /// step, and its later connections skip them for good; or it did not answer in time (paused,
    /// busy), and its connections skip them for a while ([`crate::protocol::INTRODUCTIONS_RETRY`])
    /// and then ask again. The connection is unusable either way. Not a client's request: not in the
    /// server's tallies, as the health probe is not.
    async fn introduce(&self, stream: &mut ServerStream) -> bool {
        if self.introductions.is_empty()
            || self.facts.skips_introductions(std::time::Instant::now())
        {
            return true;
        }
        let exchange = async {
            match stream {
                ServerStream::Tcp(s) => self.exchange_introductions(s).await,
                ServerStream::Unix(s) => self.exchange_introductions(s).await,
                ServerStream::Tls(s) => self.exchange_introductions(s).await,
            }
        };
        let wait = self.settings.timeout.unwrap_or(INTRODUCTION_TIMEOUT);
        match tokio::time::timeout(wait, exchange).await {
            Ok(true) => true,
            Ok(false) => {
                tracing::info!(
                    pool = %self.health.pool_stats().name,
                    server = %self.stats.name,
                    "the server does not take the proxy's introduction; its connections go on without it"
                );
                self.facts.set_refuses_introductions();
                false
            }
            Err(_) => {
                tracing::info!(
                    pool = %self.health.pool_stats().name,
                    server = %self.stats.name,
                    retry_in = ?crate::protocol::INTRODUCTIONS_RETRY,
                    "the server did not answer the proxy's introduction in time; its connections go on without it for a while"
                );
                self.facts
                    .set_introductions_unanswered(std::time::Instant::now());
                false
            }
        }
    }

    async fn exchange_introductions(
        &self,
        s: &mut (impl AsyncRead + AsyncWrite + Unpin + Send),
    ) -> bool {
        let mut out = BytesMut::new();
        for (frame, _) in &self.introductions {
            out.extend_from_slice(frame);
        }
        if s.write_all(&out).await.is_err() {
            return false;
        }
        let mut scanner = P::ReplyScanner::default();
        let mut buf = BytesMut::with_capacity(4096);
        for (_, kind) in &self.introductions {
            loop {
                match scanner.frame(&buf, *kind, self.settings.max_value_len) {
                    Ok(Some(len)) => {
                        scanner.reset();
                        P::introduced(&buf.split_to(len), &self.facts);
                        break;
                    }
                    Ok(None) => match s.read_buf(&mut buf).await {
                        Ok(n) if n > 0 => {}
                        _ => return false,
                    },
                    Err(_) => return false,
                }
            }
        }
        // Anything more would be read as the answer to a client's request.
        buf.is_empty()
    }

    fn fail_job(&self, job: Job<P>, err: &BackendError) {
        self.stats.in_queue.dec();
        job.reply.send(Err(err.clone()));
    }

    /// Buffers `job`'s frame for writing and puts it in flight; with a breaker (`W`), fails it
    /// instead if the server was ejected since it was admitted.
    fn enqueue<W: Watch>(&mut self, job: Job<P>, now: Instant) {
        let admitted = if W::ON {
            let admitted = self.admitted_at(job.admitted);
            if let Some(ejected) = self.ejected_since(admitted) {
                self.fail_job(job, &ejected);
                return;
            }
            admitted
        } else {
            // No breaker, no ejections: never read.
            0
        };
        self.stats.requests.inc();
        self.stats.request_bytes.add(job.frame.len() as u64);
        self.wbuf.extend_from_slice(&job.frame);
        self.in_flight.push_back(InFlight {
            timed: P::reply_timed(job.kind),
            kind: job.kind,
            reply: job.reply,
            queued: now,
            stalls: 0,
            admitted,
        });
    }

    /// The full ejection count a job was admitted at, from its low 32 bits ([`Job::admitted`]):
    /// the count only grows, and a job waits in its queue for far fewer than 2³² ejections, so it
    /// is the count now less how far the low bits moved since.
    fn admitted_at(&self, low: u32) -> u64 {
        let now = self.health.ejections_now();
        now.wrapping_sub(u64::from((now as u32).wrapping_sub(low)))
    }

    /// The breaker's error for a request admitted at `admitted` ejections, when the server has been
    /// ejected since: it is failed at once rather than sent to a server judged failing.
    fn ejected_since(&self, admitted: u64) -> Option<BackendError> {
        if self.health.ejections_now() <= admitted {
            return None;
        }
        let why = Arc::clone(&self.ejections.as_ref()?.borrow().1);
        Some(self.ejected_error(&why))
    }

    /// A request's error when the server is ejected while it waits.
    fn ejected_error(&self, why: &str) -> BackendError {
        BackendError::CircuitOpen {
            addr: self.settings.addr.clone(),
            reason: format!("ejected while the request waited, after {why}"),
        }
    }

    /// Serves the clients' requests on `stream` ([`Connection::serve_halves`]), `W` watching for
    /// the circuit breaker.
    async fn serve<W: Watch>(&mut self, stream: ServerStream, rx: &mut Receiver<Job<P>>) -> End {
        match stream {
            ServerStream::Tcp(mut s) => {
                let (rd, wr) = s.split();
                self.serve_halves::<W>(rd, wr, rx).await
            }
            ServerStream::Unix(mut s) => {
                let (rd, wr) = s.split();
                self.serve_halves::<W>(rd, wr, rx).await
            }
            ServerStream::Tls(s) => {
                let (rd, wr) = tokio::io::split(*s);
                self.serve_halves::<W>(rd, wr, rx).await
            }
        }
    }

    /// Writes queued requests and frames replies until the connection fails or every queue is dropped
    /// and every reply is in; `W` watches for the circuit breaker, or not at all.
    async fn serve_halves<W: Watch>(
        &mut self,
        mut rd: impl AsyncRead + Unpin,
        mut wr: impl AsyncWrite + Unpin,
        rx: &mut Receiver<Job<P>>,
    ) -> End {
        let addr = self.settings.addr.clone();
        let mut queues_open = true;
        loop {
            if !queues_open && self.in_flight.is_empty() {
                return End::Done;
            }
            let deadline = match (self.settings.timeout, self.in_flight.front()) {
                (Some(t), Some(f)) if f.timed => Some(f.queued + t),
                _ => None,
            };
            // The circuit breaker's watch over what is in flight, only when there is one (`W::ON` is
            // a constant: without a breaker none of this is in the loop).
            let watching = W::ON && !self.in_flight.is_empty();
            let (oldest, stall) = if watching {
                (
                    self.in_flight.front().map_or(u64::MAX, |f| f.admitted),
                    self.next_stall(),
                )
            } else {
                (u64::MAX, None)
            };
            let room = self.in_flight.len() < MAX_IN_FLIGHT && self.wbuf.len() < MAX_WRITE_BUFFER;
            tokio::select! {
                biased;
                read = rd.read_buf(&mut self.rbuf) => {
                    match read {
                        Ok(0) => {
                            self.stats.server_eof.inc();
                            return End::Failed(BackendError::Lost { addr, reason: "closed by server".into() });
                        }
                        Ok(n) => {
                            self.stats.response_bytes.add(n as u64);
                            if let Err(err) = self.deliver::<W>() {
                                self.stats.server_err.inc();
                                return End::Failed(err);
                            }
                        }
                        Err(e) => {
                            self.stats.server_err.inc();
                            return End::Failed(BackendError::Lost { addr, reason: e.to_string() });
                        }
                    }
                }
                written = wr.write_buf(&mut self.wbuf), if !self.wbuf.is_empty() => {
                    if let Err(e) = written {
                        self.stats.server_err.inc();
                        return End::Failed(BackendError::Lost { addr, reason: e.to_string() });
                    }
                }
                job = rx.recv(), if queues_open && room => {
                    match job {
                        Some(job) => {
                            let now = Instant::now();
                            self.enqueue::<W>(job, now);
                            // Let the other ready tasks (clients woken in the same poll) queue their
                            // requests first, so one write carries many: an event loop's batching.
                            tokio::task::yield_now().await;
                            while self.in_flight.len() < MAX_IN_FLIGHT && self.wbuf.len() < MAX_WRITE_BUFFER {
                                match rx.try_recv() {
                                    Some(job) => self.enqueue::<W>(job, now),
                                    None => break,
                                }
                            }
                        }
                        // A client's own connection closes when its client leaves: what it waits for
                        // (a blocking command's reply) has no one to go to.
                        None if self.own => return End::Done,
                        None => queues_open = false,
                    }
                }
                () = sleep_until(deadline), if deadline.is_some() => {
                    self.stats.server_timedout.inc();
                    return End::Failed(BackendError::Timeout { addr });
                }
                // Without a breaker (`NoWatch`) a future of no size that is never polled.
                event = W::watch(self.ejections.as_mut(), oldest, stall), if watching => {
                    match event {
                        BreakerEvent::Ejected(why) => return End::Failed(self.ejected_error(&why)),
                        BreakerEvent::Stall(i) => self.report_stall(i),
                    }
                }
            }
        }
    }

    /// With a circuit breaker watching for stalls: the next wait to report and when (its index in
    /// flight, the instant). That is the oldest timed request not yet reported, when its wait passes
    /// the breaker's `slow`; or the oldest request of all, again each further `slow` it waits. The
    /// second matters when few requests are out: with one or two clients, each waiting on its one
    /// request, no fifth request comes to stall, and without it a stopped server would be found out
    /// only by the timeout.
    fn next_stall(&self) -> Option<(usize, Instant)> {
        let after = self.health.stall_after()?;
        let fresh = self
            .in_flight
            .iter()
            .enumerate()
            .find(|(_, f)| f.timed && f.stalls == 0)
            .map(|(i, f)| (i, f.queued + after));
        let again = self
            .in_flight
            .front()
            .filter(|f| f.timed && f.stalls > 0)
            .map(|f| {
                (
                    0,
                    f.queued + after.saturating_mul(f.stalls.saturating_add(1)),
                )
            });
        match (fresh, again) {
            (Some(a), Some(b)) => Some(if b.1 < a.1 { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// Reports the wait of the request at `i` in flight as a stall, one failure for the breaker. A
    /// first report marks every later request written at the same instant too (one batch, one
    /// write), so one slow command with a few pipelined requests behind it is not five failures at
    /// once; a server that stops answering is ejected while it stalls: after `slow` when five
    /// batches wait, after five times `slow` when one does.
    #[cold]
    fn report_stall(&mut self, i: usize) {
        let Some(first) = self.in_flight.get(i).map(|f| f.queued) else {
            return;
        };
        for f in self.in_flight.iter_mut().skip(i) {
            if f.queued != first {
                break;
            }
            f.stalls = f.stalls.saturating_add(1);
        }
        let waited = Instant::now().saturating_duration_since(first);
        self.health.record_stall(&self.stats, waited);
    }

    /// Frames every complete reply in the read buffer and hands each to its request; tells the
    /// breaker, when there is one (`W`), how long each took.
    fn deliver<W: Watch>(&mut self) -> Result<(), BackendError> {
        let mut now = None;
        while let Some(front) = self.in_flight.front() {
            match self
                .scanner
                .frame(&self.rbuf, front.kind, self.settings.max_value_len)
            {
                Ok(None) => break,
                Ok(Some(len)) => {
                    self.scanner.reset();
                    let reply = self.rbuf.split_to(len).freeze();
                    let Some(f) = self.in_flight.pop_front() else {
                        break;
                    };
                    self.stats.in_queue.dec();
                    self.stats.responses.inc();
                    let now = *now.get_or_insert_with(Instant::now);
                    let latency = now.saturating_duration_since(f.queued);
                    self.stats.latency.observe(latency);
                    if !W::ON {
                        self.health.record_answer();
                    } else if f.stalls == 0 {
                        self.health.record_reply(&self.stats, latency);
                    }
                    f.reply.send(Ok(reply));
                }
                Err(e) => {
                    return Err(BackendError::Lost {
                        addr: self.settings.addr.clone(),
                        reason: e.to_string(),
                    })
                }
            }
        }
        if self.in_flight.is_empty() && !self.rbuf.is_empty() {
            return Err(BackendError::Lost {
                addr: self.settings.addr.clone(),
                reason: "unexpected bytes from server".into(),
            });
        }
        Ok(())
    }
}

/// The reason of the first ejection after the `admitted`th; never, without a breaker (or once the
/// breaker is gone).
async fn ejected_after(ejections: Option<&mut Ejections>, admitted: u64) -> Arc<str> {
    if let Some(rx) = ejections {
        if let Ok(now) = rx.wait_for(|(n, _)| *n > admitted).await {
            return Arc::clone(&now.1);
        }
    }
    std::future::pending().await
}

/// What a connection's loop watches besides its socket, its queue and its timeout: the circuit
/// breaker ([`BreakerWatch`]), or nothing ([`NoWatch`]). A type rather than a flag because a
/// `select!` builds and drops every branch's future on each turn, even a disabled one: with
/// [`NoWatch`] that future has no size and no drop, and the branch's precondition is a constant, so
/// a server without a breaker pays for the branch little more than the select's check of it
/// (`scripts/proxy-instructions` with `BIN=` builds of 7cb9deb^ and 7cb9deb: about 60 instructions
/// less per memcached `get` than the `OptionFuture` before).
trait Watch {
    /// Whether there is anything to watch.
    const ON: bool;

    /// The watch for one turn of the loop ([`breaker_watch`]'s arguments).
    fn watch(
        ejections: Option<&mut Ejections>,
        admitted: u64,
        stall: Option<(usize, Instant)>,
    ) -> impl std::future::Future<Output = BreakerEvent> + Send;
}

/// The loop of a server without a circuit breaker: nothing to watch.
struct NoWatch;

impl Watch for NoWatch {
    const ON: bool = false;

    fn watch(
        _: Option<&mut Ejections>,
        _: u64,
        _: Option<(usize, Instant)>,
    ) -> impl std::future::Future<Output = BreakerEvent> + Send {
        std::future::pending()
    }
}

/// The loop of a server with a circuit breaker: its ejections and the stalls of what is in flight.
struct BreakerWatch;

impl Watch for BreakerWatch {
    const ON: bool = true;

    fn watch(
        ejections: Option<&mut Ejections>,
        admitted: u64,
        stall: Option<(usize, Instant)>,
    ) -> impl std::future::Future<Output = BreakerEvent> + Send {
        breaker_watch(ejections, admitted, stall)
    }
}

/// What the circuit breaker's watch over a connection's requests in flight saw first.
enum BreakerEvent {
    /// The server was ejected after the oldest request in flight was admitted: why.
    Ejected(Arc<str>),
    /// The request at this index in flight has waited past the breaker's `slow`.
    Stall(usize),
}

/// Waits for the first of: an ejection after `admitted` (the oldest request in flight's), or the
/// next `stall` ([`Connection::next_stall`]).
async fn breaker_watch(
    ejections: Option<&mut Ejections>,
    admitted: u64,
    stall: Option<(usize, Instant)>,
) -> BreakerEvent {
    tokio::select! {
        biased;
        why = ejected_after(ejections, admitted) => BreakerEvent::Ejected(why),
        () = sleep_until(stall.map(|(_, at)| at)), if stall.is_some() => {
            BreakerEvent::Stall(stall.map_or(0, |(i, _)| i))
        }
    }
}

async fn sleep_for(wait: Option<Duration>) {
    match wait {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::net::TcpListener;
    use tokio::sync::Notify;

    use super::*;
    use crate::backend::EjectPolicy;
    use crate::metrics::PoolStats;
    use crate::protocol::memcache::Memcache;

    type Kind = <Memcache as crate::protocol::Dialect>::ReplyKind;

    /// A request takes its own worker's connection, which runs on that worker's runtime alone: with
    /// worker 1's runtime never driven, its requests wait while worker 0's are answered.
    #[tokio::test]
    async fn a_request_takes_a_connection_of_its_own_worker() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 256];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(b"END\r\n").await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let idle = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let settings = BackendSettings {
            addr,
            timeout: None,
            connections: 1,
            max_value_len: 1 << 20,
            keepalive: false,
            own_connections: 0,
            tls: None,
        };
        let policy = EjectPolicy {
            auto_eject: false,
            failure_limit: 2,
            retry_timeout: Duration::from_secs(30),
            breakers: None,
        };
        let health = Arc::new(ServerHealth::new(
            policy,
            Arc::new(Notify::new()),
            Arc::new(PoolStats::new("alpha")),
        ));
        let backend = Backend::<Memcache>::spawn(
            settings,
            Arc::new(ServerStats::new("one")),
            health,
            false,
            Vec::new(),
            Vec::new(),
            &[Handle::current(), idle.handle().clone()],
        );
        let to = |worker| ConnectionRoute {
            worker,
            lane: 0,
            client_id: 7,
        };
        let get = || Bytes::from_static(b"get a\r\n");
        let here = backend.send(to(0), get(), Kind::Values);
        let reply = tokio::time::timeout(Duration::from_secs(5), here)
            .await
            .expect("worker 0's connection answers")
            .unwrap();
        assert_eq!(&reply.unwrap()[..], b"END\r\n");
        let there = backend.send(to(1), get(), Kind::Values);
        assert!(
            tokio::time::timeout(Duration::from_millis(200), there)
                .await
                .is_err(),
            "worker 1's request went to a connection on another runtime"
        );
        drop(backend);
        tokio::task::spawn_blocking(move || drop(idle))
            .await
            .unwrap();
    }
}
