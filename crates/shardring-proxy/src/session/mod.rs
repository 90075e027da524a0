//! One client connection, generic over the protocol: decode requests, plan each, send it on at once
//! (pipelined requests are all in flight together), and write the answers in request order.
//!
//! Only the oldest pending answer is polled: an answer makes progress without being polled (its server
//! connection task completes it), so polling the head is enough to write in order, and saves a task per
//! request. A request to one server, and each part of a fan-out, takes a slot of the session's reply
//! queue rather than a channel of its own ([`crate::backend::reply`]).

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};

mod handoff;
mod pending;

use self::handoff::Handoff;
use self::pending::Pending;
use crate::admission::Admitted;
use crate::backend::{ConnectionRoute, ReplyQueue};
use crate::buffers;
use crate::drain::Drain;
use crate::error::BackendError;
use crate::net::ClientStream;
use crate::pool::current::Pool;
use crate::pool::version::PoolVersion;
use crate::protocol::{
    Answer, Back, Incoming, Leave, PlanContext, PreviousRouting, Protocol, RequestDecoder, Step,
};
use crate::router::Routing;

/// The most requests one client may have in flight; past it the proxy stops reading from that client
/// until answers go out, which bounds each client's memory.
const MAX_PIPELINE: usize = 256;

/// Write out once this many answer bytes are ready, even if more answers are ready too.
const MAX_WRITE_BATCH: usize = 1 << 20;

/// Numbers clients, so each client's requests to a server share one server connection.
static NEXT_CLIENT_ID: AtomicU32 = AtomicU32::new(0);

/// Serves one client on worker `worker` (whose thread runs this) until it closes, fails, or `drain`
/// starts (then in-flight requests finish); `admitted` is its place among the pool's clients, given
/// back when it ends.
///
/// Not an `async fn`: the future returned is the session's own loop, with the session moved into it,
/// so what this function took is not kept beside it for the client's whole life (an idle client's
/// memory is mostly this future: BENCHMARKS.md, "proxy: memory per client connection").
pub(crate) fn serve_client<P: Protocol>(
    stream: ClientStream,
    pool: Arc<Pool<P>>,
    worker: usize,
    drain: Arc<Drain>,
    admitted: Admitted,
) -> impl Future<Output = ()> + Send {
    let stats = &pool.shared.stats;
    stats.client_connections.inc();
    stats.total_connections.inc();
    let decoder = pool.current.load().protocol.decoder();
    let session = Session {
        stream,
        rbuf: BytesMut::new(),
        decoder,
        pool,
        client_id: NEXT_CLIENT_ID.fetch_add(1, Ordering::Relaxed),
        pending: VecDeque::new(),
        replies: ReplyQueue::default(),
        state: P::ClientState::default(),
        lane: 0,
        held: false,
        planned_under: 0,
        parked: None,
        // Worker and lane numbers are small (at most the workers and server connections configured).
        worker: u32::try_from(worker).unwrap_or(u32::MAX),
        _admitted: admitted,
    };
    session.serve(drain)
}

/// What goes out to the client in one write.
enum Outgoing {
    /// One answer's own bytes (a server's reply as it came).
    Answer(Bytes),
    /// Answers encoded into a buffer lent by [`crate::buffers`], given back once written.
    Lent(BytesMut),
}

/// What an answer's latency is tallied under: its command's index and when its request was decoded.
type Timing = Option<(usize, std::time::Instant)>;

/// What waits for the answers in flight to be in before the session goes on with it.
enum Parked<P: Protocol> {
    /// A client entering a connection mode ([`Leave::Enter`]), handed to its protocol once the
    /// answers before it are written: the mode, the pool version its request was planned against,
    /// and what that request is tallied under. Nothing more is decoded until the protocol gives the
    /// client back.
    Enter(P::Mode, Arc<PoolVersion<P>>, Timing),
    /// A request decoded while the routing changed under requests in flight
    /// ([`Session::planned_under`]), with what it is tallied under: planned once they are in.
    Plan(P::Request, Timing),
}

/// One client connection's state.
struct Session<P: Protocol> {
    /// The client.
    stream: ClientStream,
    /// Bytes read and not yet decoded: at most the decoder's `max_buffer` (a whole request of the
    /// largest size) plus one read. Lent by [`crate::buffers`] when bytes arrive and given back once
    /// they are all decoded and answered: an idle session holds no buffer.
    rbuf: BytesMut,
    /// The request decoder.
    decoder: P::Decoder,
    /// The pool served.
    pool: Arc<Pool<P>>,
    /// Which connection of each server this client uses (a number that wraps: it only spreads
    /// clients over connections).
    client_id: u32,
    /// Answers in request order, each with the command (one of [`Protocol::command_names`]) and when
    /// its request was decoded, for the per-command latency (`None` for what is not tallied).
    pending: VecDeque<(Pending<P>, Timing)>,
    /// Where the servers put the replies of [`Pending::Slot`] answers.
    replies: ReplyQueue,
    /// What the protocol keeps about this client between requests.
    state: P::ClientState,
    /// The set of server connections this client's requests take ([`Protocol::lane`]).
    lane: u32,
    /// The last request started is an exchange that later requests must not overtake
    /// ([`Protocol::in_order`]): nothing more is sent until the answers in flight are in.
    held: bool,
    /// Which routing the requests in flight were planned with ([`Routing::published`]). A request
    /// whose routing is another waits until they are in: a request planned with a newer map could
    /// otherwise overtake an earlier one that the old map sent to the wrong server, and that server
    /// sends on (a cluster's `MOVED`): issue #45, a key left with an older write than the client's
    /// last. A number, not the routing's address: a freed routing's address may be given again.
    planned_under: u64,
    /// What waits for the answers in flight to be in. Boxed: rare, and a session's future stays
    /// small.
    parked: Option<Box<Parked<P>>>,
    /// The worker serving this client: its requests take that worker's server connections, on this
    /// thread.
    worker: u32,
    /// The client's place among the pool's clients, given back when the session ends.
    _admitted: Admitted,
}

impl<P: Protocol> Session<P> {
    /// Serves the client until it leaves (or `drain` ends the session), then counts it out.
    ///
    /// An `async` block, not an `async fn` taking `mut self`: such a function's future holds the
    /// session twice (the argument, and the binding the body works on).
    #[allow(clippy::manual_async_fn)] // the point of it: see above
    fn serve(mut self, drain: Arc<Drain>) -> impl Future<Output = ()> + Send {
        async move {
            let result = self.run(&drain).await;
            let stats = &self.pool.shared.stats;
            match result {
                Ok(()) => stats.client_eof.inc(),
                Err(e) => {
                    stats.client_err.inc();
                    tracing::debug!(error = %e, "client connection ended");
                }
            }
            stats.client_connections.dec();
        }
    }

    async fn run(&mut self, drain: &Drain) -> io::Result<()> {
        let mut closing = false;
        // The client's input ended (it closed, or shut down its writing): what it sent is still
        // served, the requests held behind answers in flight too, then the session closes.
        let mut ended = false;
        // One registration for the connection's life, not one per loop turn: the drain's waiter list is
        // shared by every client, and a poll is one atomic load.
        let stopped = drain.watch();
        tokio::pin!(stopped);
        loop {
            if !closing {
                closing = self.take_requests()?;
                // Once input ended, what is not taken with nothing in flight never will be (a
                // partial request): nothing holds a request when nothing is in flight.
                closing |= ended && self.pending.is_empty();
            }
            if closing && self.pending.is_empty() {
                self.stream.flush().await?;
                let _ = self.stream.shutdown().await;
                return Ok(());
            }
            if self.pending.is_empty() {
                let back = match self.hand_over(stopped.as_mut()) {
                    Some(mode) => Some(mode.await?),
                    None => None,
                };
                match back {
                    Some(Back::Close) => {
                        let _ = self.stream.flush().await;
                        let _ = self.stream.shutdown().await;
                        return Ok(());
                    }
                    Some(Back::Session) => continue,
                    None => {}
                }
            }
            // Nothing partial and nothing in flight: the read buffer goes back to the worker's list,
            // so an idle session holds none. Kept while answers are awaited: the requests split off
            // it are still alive then, so it could not be made whole again once short of room.
            if self.rbuf.is_empty() && self.pending.is_empty() && self.rbuf.capacity() > 0 {
                buffers::give(std::mem::take(&mut self.rbuf));
            }
            // A forward whose reply sent it on (a cluster's redirection) starts again, as an
            // exchange against the pool as it is now; it is always at the front (only the front is
            // polled).
            if self.pending.front().is_some_and(|(p, _)| p.is_onward()) {
                self.go_on_front();
            }
            let can_read = !closing
                && !ended
                && self.pending.len() < MAX_PIPELINE
                && self.rbuf.len() < self.decoder.max_buffer();
            // In a block, so that what the `select!` gave is not kept while the write below waits.
            let out = {
                let answer = tokio::select! {
                    biased;
                    // `None`: the front was sent on, and is started again at the loop's top.
                    answer = poll_fn(|cx| match self.pending.front_mut() {
                        Some((p, _)) => p.poll_answer(&self.replies, cx),
                        None => Poll::Pending,
                    }), if !self.pending.is_empty() => answer,
                    read = poll_fn(|cx| poll_read(&mut self.stream, &mut self.rbuf, cx)), if can_read => {
                        if read? == 0 {
                            ended = true;
                        }
                        None
                    }
                    () = &mut stopped, if !closing => {
                        closing = true;
                        None
                    }
                };
                answer.map(|a| self.answers_ready(a))
            };
            // Borrowed for the write, so the future keeps one `Outgoing` across it, not a copy per
            // arm of a match.
            let bytes: &[u8] = match &out {
                Some(Outgoing::Answer(bytes)) => bytes,
                Some(Outgoing::Lent(buf)) => buf,
                None => &[],
            };
            if !bytes.is_empty() {
                self.stream.write_all(bytes).await?;
            }
            if let Some(Outgoing::Lent(buf)) = out {
                buffers::give(buf);
            }
        }
    }

    /// Decodes, plans and sends the requests buffered, while the pipeline has room and nothing in
    /// flight must come first (a change of connection set, an exchange held in order, a client about
    /// to enter a connection mode, a change of routing: [`Session::planned_under`]). `Ok(true)` once
    /// the client is to be closed.
    fn take_requests(&mut self) -> io::Result<bool> {
        while self.pending.len() < MAX_PIPELINE {
            // After a change of connection set, nothing is sent until the answers in flight on the
            // old set are in: a request must not overtake an earlier one on another connection.
            if P::lane(&self.state) != self.lane as usize {
                if !self.pending.is_empty() {
                    return Ok(false);
                }
                self.lane = u32::try_from(P::lane(&self.state)).unwrap_or(u32::MAX);
            }
            if self.held {
                if !self.pending.is_empty() {
                    return Ok(false);
                }
                self.held = false;
            }
            let (req, timed) = match &self.parked {
                // What is parked waits for the answers in flight: nothing to take until they are
                // in (taken out and parked again on every turn, it would cost a box each time).
                Some(_) if !self.pending.is_empty() => return Ok(false),
                Some(_) => match self.unpark() {
                    Some(parked) => parked,
                    None => return Ok(false),
                },
                // Nothing buffered is always "more bytes needed": skip the decoder's call (twice
                // per request otherwise, once after the answer and once after the read).
                None if self.rbuf.is_empty() => return Ok(false),
                None => match self.decoder.decode(&mut self.rbuf)? {
                    None => break,
                    Some(Incoming::Request(req)) => {
                        self.pool.shared.stats.requests.inc();
                        let timed = P::command_index(&req).map(|i| (i, std::time::Instant::now()));
                        (req, timed)
                    }
                    Some(Incoming::Refused {
                        reply,
                        reason,
                        close,
                    }) => {
                        self.pool.shared.stats.client_errors.inc();
                        self.push(Pending::Ready(Some(Answer::Bytes(reply))), None);
                        if close {
                            tracing::info!(
                                %reason,
                                "closing a client connection: its input cannot be resynchronised"
                            );
                            return Ok(true);
                        }
                        continue;
                    }
                },
            };
            // One load of each for the check and the plan: the request is planned with the routing
            // it was checked against, however the pool changes meanwhile.
            let version = self.pool.current.load();
            let routing = version.router.load();
            if routing.published() != self.planned_under {
                if !self.pending.is_empty() {
                    self.hold(req, timed);
                    return Ok(false);
                }
                self.planned_under = routing.published();
            }
            match self.plan(&version, &routing, req) {
                Step::Leave(Leave::Close(answer)) => {
                    self.push(Pending::Ready(Some(answer)), timed);
                    return Ok(true);
                }
                Step::Leave(Leave::Enter(mode)) => {
                    let version = Arc::clone(&version);
                    self.parked = Some(Box::new(Parked::Enter(mode, version, timed)));
                    return Ok(false);
                }
                step => {
                    if let Step::Exchange(round) = &step {
                        self.held = version.protocol.in_order(&round.exchange);
                    }
                    let p = self.start(&version, step);
                    self.push(p, timed);
                }
            }
        }
        Ok(false)
    }

    /// Hands the client to its protocol for the connection mode it enters ([`Parked::Enter`]), with
    /// nothing in flight; done when the protocol gives it back. `None` when it enters none. Boxed,
    /// handoff and all: a mode is rare, and its state would otherwise make every session's future
    /// larger.
    fn hand_over<'s>(
        &'s mut self,
        stopped: Pin<&'s mut crate::drain::Watch<'_>>,
    ) -> Option<Pin<Box<dyn Future<Output = io::Result<Back>> + Send + 's>>> {
        let (mode, version, timed) = self.entering()?;
        let mut handoff = Handoff::new(self, stopped, version, timed);
        Some(Box::pin(
            async move { P::serve_mode(mode, &mut handoff).await },
        ))
    }

    /// The front answer `first` and the answers ready behind it, to go out in one write: `first`'s
    /// own bytes when it is the only one (one request at a time, the common case, copies nothing),
    /// else all of them encoded into a buffer lent for the write.
    fn answers_ready(&mut self, first: Answer) -> Outgoing {
        self.pop();
        let mut now = Context::from_waker(Waker::noop());
        let second = match self.pending.front_mut() {
            Some((p, _)) => match p.poll_answer(&self.replies, &mut now) {
                Poll::Ready(a) => a,
                Poll::Pending => None,
            },
            None => None,
        };
        let (first, second) = match (first, second) {
            (Answer::Bytes(only), None) => return Outgoing::Answer(only),
            (first, second) => (first, second),
        };
        let mut out = buffers::take();
        self.write_answer(first, &mut out);
        if let Some(second) = second {
            self.pop();
            self.write_answer(second, &mut out);
            self.write_ready(&mut out);
        }
        Outgoing::Lent(out)
    }

    /// Writes out the answers ready at the front, up to [`MAX_WRITE_BATCH`] bytes, so they go out in one
    /// write. The first one not ready is polled again, with the task's waker, by the `select!` of
    /// [`Session::run`].
    fn write_ready(&mut self, out: &mut BytesMut) {
        let mut now = Context::from_waker(Waker::noop());
        while let Some((front, _)) = self.pending.front_mut() {
            let Poll::Ready(Some(a)) = front.poll_answer(&self.replies, &mut now) else {
                break;
            };
            self.pop();
            self.write_answer(a, out);
            if out.len() > MAX_WRITE_BATCH {
                break;
            }
        }
    }

    /// Keeps `req`, decoded while the routing changed under the requests in flight, until they are
    /// in ([`Session::planned_under`]). Out of line: rare.
    #[cold]
    #[inline(never)]
    fn hold(&mut self, req: P::Request, timed: Timing) {
        self.parked = Some(Box::new(Parked::Plan(req, timed)));
    }

    /// The request parked for its routing, taken to be planned once nothing is in flight (its
    /// wait is over); `None` when a client entering a
    /// connection mode is parked, which nothing is decoded behind. Out of line: rare.
    #[cold]
    #[inline(never)]
    fn unpark(&mut self) -> Option<(P::Request, Timing)> {
        let parked = self.parked.take_if(|p| matches!(**p, Parked::Plan(..)))?;
        match *parked {
            Parked::Plan(req, timed) => Some((req, timed)),
            Parked::Enter(..) => None,
        }
    }

    /// The connection mode the client enters, taken once nothing is in flight (a request parked for
    /// its routing is planned before: [`Session::take_requests`]).
    fn entering(&mut self) -> Option<(P::Mode, Arc<PoolVersion<P>>, Timing)> {
        let parked = self.parked.take_if(|p| matches!(**p, Parked::Enter(..)))?;
        match *parked {
            Parked::Enter(mode, version, timed) => Some((mode, version, timed)),
            Parked::Plan(..) => None,
        }
    }

    /// Queues an answer on its way, with what its latency is tallied under.
    fn push(&mut self, p: Pending<P>, timed: Timing) {
        self.pending.push_back((p, timed));
    }

    /// Drops the front answer (it is ready), tallying its command's latency.
    fn pop(&mut self) {
        if let Some((_, Some((i, since)))) = self.pending.pop_front() {
            if let Some(c) = self.pool.shared.stats.commands.get(i) {
                c.latency.observe(since.elapsed());
            }
        }
    }

    /// Asks the protocol what to do with `req`, against `routing`, `version`'s routing as loaded
    /// (once per request: see [`Session::take_requests`]).
    fn plan(
        &mut self,
        version: &PoolVersion<P>,
        routing: &Arc<Routing>,
        req: P::Request,
    ) -> Step<P> {
        let previous = version.previous.load();
        let previous_routing = previous.as_ref().map(|p| p.router.load());
        let mut ctx = PlanContext {
            routing,
            previous: previous_routing.as_deref().map(|r| PreviousRouting {
                routing: r,
                now: &version.previous_now,
            }),
            next: version.next.as_deref(),
            stats: &self.pool.shared.stats,
            started: self.pool.shared.started,
        };
        // Only during a planned change: a fenced proxy plans over a routing without the keys that
        // move (`fence.rs`).
        let fence = &self.pool.shared.fence;
        if let Some((next, unconfirmed)) = version
            .next
            .as_ref()
            .and_then(|next| Some((next, fence.unconfirmed_for()?)))
        {
            let masked = Routing::masked(Arc::clone(routing), Arc::clone(next));
            ctx.routing = &masked;
            ctx.next = None;
            tracing::trace!(unconfirmed = ?unconfirmed, "fenced: planning without the keys that move");
            return version.protocol.plan(req, &mut self.state, &ctx);
        }
        version.protocol.plan(req, &mut self.state, &ctx)
    }

    /// Starts the front request again as an exchange ([`Pending::go_on`]).
    #[cold]
    fn go_on_front(&mut self) {
        let to = self.connection_route();
        let version = self.pool.current.load_full();
        if let Some((p, _)) = self.pending.front_mut() {
            p.go_on(&self.replies, version, to);
        }
    }

    /// Which server connections this client's requests take now.
    fn connection_route(&self) -> ConnectionRoute {
        ConnectionRoute {
            worker: self.worker as usize,
            lane: self.lane as usize,
            client_id: u64::from(self.client_id),
        }
    }

    fn write_answer(&self, a: Answer, out: &mut BytesMut) {
        match a {
            Answer::Bytes(b) => out.extend_from_slice(&b),
            Answer::Nothing => {}
            Answer::Failed(e) => {
                let stats = &self.pool.shared.stats;
                stats.forward_error.inc();
                // A key without a server while fenced is the fence's refusal (`fence.rs`).
                let fence = &self.pool.shared.fence;
                let unconfirmed = match e {
                    BackendError::NoServer if self.pool.current.load().next.is_some() => {
                        fence.unconfirmed_for()
                    }
                    _ => None,
                };
                P::encode_failure(&crate::fence::explain(e, fence, unconfirmed, stats), out);
            }
        }
    }
}

/// The bytes a session reads before it holds a buffer: an idle client's next request usually fits.
const FIRST_READ: usize = 4096;

/// Reads what the client sent into `rbuf`, giving how many bytes (0 at end of input). A session that
/// holds no buffer (it was idle) reads into a stack buffer first and takes one from
/// [`crate::buffers`] only when bytes arrive, so waiting costs no buffer.
fn poll_read(
    stream: &mut ClientStream,
    rbuf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    if rbuf.capacity() == 0 {
        let mut first = [MaybeUninit::<u8>::uninit(); FIRST_READ];
        let mut read = ReadBuf::uninit(&mut first);
        ready!(Pin::new(&mut *stream).poll_read(cx, &mut read))?;
        let got = read.filled();
        if !got.is_empty() {
            // A lent buffer, not one of the read's size: a lent buffer comes back whole once the
            // session is idle again, so a request costs no allocation.
            *rbuf = buffers::take();
            rbuf.extend_from_slice(got);
        }
        return Poll::Ready(Ok(got.len()));
    }
    if rbuf.capacity() - rbuf.len() < FIRST_READ {
        rbuf.reserve(buffers::BUFFER_CAPACITY);
    }
    tokio_util::io::poll_read_buf(Pin::new(stream), cx, rbuf)
}

#[cfg(test)]
mod tests;
