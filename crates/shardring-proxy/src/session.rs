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
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::backend::{Backend, ConnectionRoute, ReplyQueue, ReplyTo};
use crate::drain::Drain;
use crate::error::BackendError;
use crate::net::ClientStream;
use crate::pool::current::Pool;
use crate::pool::version::PoolVersion;
use crate::protocol::{
    Answer, FollowUp, Incoming, PartReply, Phase, Placement, PlanContext, PreviousRouting,
    Protocol, RequestDecoder, Round, Step,
};

/// The most requests one client may have in flight; past it the proxy stops reading from that client
/// until answers go out, which bounds each client's memory.
const MAX_PIPELINE: usize = 256;

/// Write out once this many answer bytes are ready, even if more answers are ready too.
const MAX_WRITE_BATCH: usize = 1 << 20;

/// Numbers clients, so each client's requests to a server share one server connection.
static NEXT_CLIENT_ID: AtomicU64 = AtomicU64::new(0);

/// Serves one client on worker `worker` (whose thread runs this) until it closes, fails, or `drain`
/// starts (then in-flight requests finish).
pub(crate) async fn serve_client<P: Protocol>(
    stream: Box<dyn ClientStream>,
    pool: Arc<Pool<P>>,
    worker: usize,
    drain: Arc<Drain>,
) {
    let stats = Arc::clone(&pool.shared.stats);
    stats.client_connections.inc();
    stats.total_connections.inc();
    let decoder = pool.current.load().protocol.decoder();
    let mut session = Session {
        stream,
        rbuf: BytesMut::with_capacity(16 << 10),
        out: BytesMut::with_capacity(16 << 10),
        max_buffer: decoder.max_buffer(),
        decoder,
        pool,
        client_id: NEXT_CLIENT_ID.fetch_add(1, Ordering::Relaxed),
        pending: VecDeque::with_capacity(16),
        replies: ReplyQueue::default(),
        timings: VecDeque::with_capacity(16),
        state: P::ClientState::default(),
        lane: 0,
        held: false,
        worker,
    };
    match session.run(&drain).await {
        Ok(()) => stats.client_eof.inc(),
        Err(e) => {
            stats.client_err.inc();
            tracing::debug!(error = %e, "client connection ended");
        }
    }
    stats.client_connections.dec();
}

/// An answer on its way, in the client's request order.
enum Pending<P: Protocol> {
    /// Known already.
    Ready(Option<Answer>),
    /// One server's reply in the session's reply slot of this number, and how it becomes the answer.
    Slot(u64, Option<P::Finish>),
    /// An exchange's answer, once its rounds are done.
    Joined(Pin<Box<dyn Future<Output = Answer> + Send>>),
}

impl<P: Protocol> Pending<P> {
    /// The answer, once known; `replies` is the session's reply queue (for [`Pending::Slot`]). Polled
    /// again after completing, it answers nothing.
    fn poll_answer(&mut self, replies: &ReplyQueue, cx: &mut Context<'_>) -> Poll<Answer> {
        let (reply, finish) = match self {
            Pending::Ready(a) => return Poll::Ready(a.take().unwrap_or(Answer::Nothing)),
            Pending::Joined(f) => return f.as_mut().poll(cx),
            Pending::Slot(_, None) => return Poll::Ready(Answer::Nothing),
            Pending::Slot(number, finish) => match replies.poll_take(*number, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(reply) => (reply, finish),
            },
        };
        Poll::Ready(match finish.take() {
            Some(finish) => P::finish(finish, reply),
            None => Answer::Nothing,
        })
    }
}

/// One client connection's state.
struct Session<P: Protocol> {
    /// The client.
    stream: Box<dyn ClientStream>,
    /// Bytes read and not yet decoded; at most `max_buffer` (plus one read).
    rbuf: BytesMut,
    /// Answers ready to write.
    out: BytesMut,
    /// Stop reading past this many buffered bytes: a whole request of the largest size fits.
    max_buffer: usize,
    /// The request decoder.
    decoder: P::Decoder,
    /// The pool served.
    pool: Arc<Pool<P>>,
    /// Which connection of each server this client uses.
    client_id: u64,
    /// Answers in request order.
    pending: VecDeque<Pending<P>>,
    /// Where the servers put the replies of [`Pending::Slot`] answers.
    replies: ReplyQueue,
    /// For each entry of `pending`, in step: the command (one of [`Protocol::command_names`]) and when its
    /// request was decoded, for the per-command latency; `None` for what is not tallied.
    timings: VecDeque<Option<(usize, std::time::Instant)>>,
    /// What the protocol keeps about this client between requests.
    state: P::ClientState,
    /// The set of server connections this client's requests take ([`Protocol::lane`]).
    lane: usize,
    /// The last request started is an exchange that later requests must not overtake
    /// ([`Protocol::in_order`]): nothing more is sent until the answers in flight are in.
    held: bool,
    /// The worker serving this client: its requests take that worker's server connections, on this
    /// thread.
    worker: usize,
}

impl<P: Protocol> Session<P> {
    async fn run(&mut self, drain: &Drain) -> io::Result<()> {
        let mut closing = false;
        // One registration for the connection's life, not one per loop turn: the drain's waiter list is
        // shared by every client, and a poll is one atomic load.
        let stopped = drain.watch();
        tokio::pin!(stopped);
        loop {
            while !closing && self.pending.len() < MAX_PIPELINE {
                // After a change of connection set, nothing is sent until the answers in flight on the
                // old set are in: a request must not overtake an earlier one on another connection.
                if P::lane(&self.state) != self.lane {
                    if !self.pending.is_empty() {
                        break;
                    }
                    self.lane = P::lane(&self.state);
                }
                if self.held {
                    if !self.pending.is_empty() {
                        break;
                    }
                    self.held = false;
                }
                // Nothing buffered is always "more bytes needed": skip the decoder's call (twice per
                // request otherwise, once after the answer and once after the read).
                if self.rbuf.is_empty() {
                    break;
                }
                match self.decoder.decode(&mut self.rbuf)? {
                    None => break,
                    Some(Incoming::Request(req)) => {
                        self.pool.shared.stats.requests.inc();
                        let timed = P::command_index(&req).map(|i| (i, std::time::Instant::now()));
                        let version = self.pool.current.load();
                        let step = self.plan(&version, req);
                        if let Step::Close(answer) = step {
                            self.push(Pending::Ready(Some(answer)), timed);
                            closing = true;
                            break;
                        }
                        if let Step::Exchange(round) = &step {
                            self.held = version.protocol.in_order(&round.exchange);
                        }
                        let p = self.start(&version, step);
                        self.push(p, timed);
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
                    Some(p) => p.poll_answer(&self.replies, cx),
                    None => Poll::Pending,
                }), if !self.pending.is_empty() => {
                    self.pop();
                    self.write_answer(answer);
                    self.write_ready();
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

    /// Writes out the answers ready at the front, up to [`MAX_WRITE_BATCH`] bytes, so they go out in one
    /// write. The first one not ready is polled again, with the task's waker, by the `select!` of
    /// [`Session::run`].
    fn write_ready(&mut self) {
        let mut now = Context::from_waker(Waker::noop());
        while let Some(front) = self.pending.front_mut() {
            let Poll::Ready(a) = front.poll_answer(&self.replies, &mut now) else {
                break;
            };
            self.pop();
            self.write_answer(a);
            if self.out.len() > MAX_WRITE_BATCH {
                break;
            }
        }
    }

    /// Queues an answer on its way, with what its latency is tallied under.
    fn push(&mut self, p: Pending<P>, timed: Option<(usize, std::time::Instant)>) {
        self.pending.push_back(p);
        self.timings.push_back(timed);
    }

    /// Drops the front answer (it is ready), tallying its command's latency.
    fn pop(&mut self) {
        self.pending.pop_front();
        if let Some(Some((i, since))) = self.timings.pop_front() {
            if let Some(c) = self.pool.shared.stats.commands.get(i) {
                c.latency.observe(since.elapsed());
            }
        }
    }

    /// Asks the protocol what to do with `req`, against the current placement.
    fn plan(&mut self, version: &PoolVersion<P>, req: P::Request) -> Step<P> {
        let routing = version.router.load();
        let previous = version.previous.load();
        let previous_routing = previous.as_ref().map(|p| p.router.load());
        let ctx = PlanContext {
            routing: &routing,
            previous: previous_routing.as_deref().map(|r| PreviousRouting {
                routing: r,
                now: &version.previous_now,
            }),
            stats: &self.pool.shared.stats,
            config: &version.config,
            started: self.pool.shared.started,
        };
        version.protocol.plan(req, &mut self.state, &ctx)
    }

    /// Which server connections this client's requests take now.
    fn connection_route(&self) -> ConnectionRoute {
        ConnectionRoute {
            worker: self.worker,
            lane: self.lane,
            client_id: self.client_id,
        }
    }

    /// Sends a planned request on its way: a forwarded one into a slot of the reply queue, an
    /// exchange's first round at once (pipelined with the client's other requests), its later rounds
    /// when [`Protocol::advance`] asks for them.
    fn start(&self, version: &Arc<PoolVersion<P>>, step: Step<P>) -> Pending<P> {
        match step {
            Step::Answer(a) | Step::Close(a) => Pending::Ready(Some(a)),
            // Through the finish, as a server's failure is: a `noreply` command stays silent.
            Step::Forward {
                server: None,
                finish,
                ..
            } => Pending::Ready(Some(P::finish(finish, Err(BackendError::NoServer)))),
            Step::Forward {
                server: Some(server),
                frame,
                kind,
                finish,
            } => {
                let (number, slot) = self.replies.slot();
                version.backends[server].send_to(
                    self.connection_route(),
                    frame,
                    kind,
                    ReplyTo::Slot(slot),
                );
                Pending::Slot(number, Some(finish))
            }
            Step::Exchange(round) => {
                let (replies, to) = (self.replies.clone(), self.connection_route());
                let (mut sent, mut exchange) = send_round(&replies, version, to, round);
                let version = Arc::clone(version);
                Pending::Joined(Box::pin(async move {
                    loop {
                        // Each part's reply in turn: the next move needs them all.
                        let mut replies_in = Vec::with_capacity(sent.len());
                        for (number, server) in &sent {
                            replies_in.push(PartReply {
                                reply: poll_fn(|cx| replies.poll_take(*number, cx)).await,
                                server: server
                                    .as_ref()
                                    .map_or("a server of the previous ring", |s| {
                                        &s.settings().addr
                                    }),
                            });
                        }
                        match version.protocol.advance(exchange, replies_in) {
                            Phase::Done { answer, follow_ups } => {
                                send_follow_ups(&version, to, follow_ups);
                                return answer;
                            }
                            Phase::Again(round) => {
                                (sent, exchange) = send_round(&replies, &version, to, round);
                            }
                        }
                    }
                }))
            }
        }
    }

    fn write_answer(&mut self, a: Answer) {
        match a {
            Answer::Bytes(b) => self.out.extend_from_slice(&b),
            Answer::Nothing => {}
            Answer::Failed(e) => {
                self.pool.shared.stats.forward_error.inc();
                P::encode_failure(&e, &mut self.out);
            }
        }
    }
}

/// A part sent: its reply slot, and its server (as the plan numbered them; `None` for a previous-ring
/// server whose version is gone).
type Sent<P> = (u64, Option<Arc<Backend<P>>>);

/// Sends a round of an exchange: its follow-ups, then each part to its server with a slot of the
/// session's reply queue. Gives the parts sent and what reads their replies.
///
/// Every round sends alike. A part's server is an index into `version`, the snapshot its plan was made
/// against, as a forwarded request's is, or into that snapshot's previous version
/// ([`Placement::Previous`]).
fn send_round<P: Protocol>(
    replies: &ReplyQueue,
    version: &PoolVersion<P>,
    to: ConnectionRoute,
    round: Round<P>,
) -> (Vec<Sent<P>>, P::Exchange) {
    send_follow_ups(version, to, round.follow_ups);
    let sent = round
        .parts
        .into_iter()
        .map(|part| {
            let (number, slot) = replies.slot();
            let backend = backend_of(version, part.placement, part.server);
            match &backend {
                Some(b) => b.send_to(to, part.frame, part.kind, ReplyTo::Slot(slot)),
                // The window closed since the plan: the part reads as a server gone.
                None => slot.send(Err(BackendError::Removed)),
            }
            (number, backend)
        })
        .collect();
    (sent, round.exchange)
}

/// Sends requests whose replies nobody waits for: each is awaited by a task of its own (a channel,
/// not a slot of the session), goes through its finish, and is dropped.
fn send_follow_ups<P: Protocol>(
    version: &PoolVersion<P>,
    to: ConnectionRoute,
    follow_ups: Vec<FollowUp<P>>,
) {
    for (part, finish) in follow_ups {
        let Some(b) = backend_of(version, part.placement, part.server) else {
            continue;
        };
        let rx = b.send(to, part.frame, part.kind);
        tokio::spawn(async move {
            let reply = rx.await.unwrap_or(Err(BackendError::Removed));
            drop(P::finish(finish, reply));
        });
    }
}

/// The server a part goes to: `server` of `version`, or of its previous version while that is kept.
fn backend_of<P: Protocol>(
    version: &PoolVersion<P>,
    placement: Placement,
    server: usize,
) -> Option<Arc<Backend<P>>> {
    match placement {
        Placement::Current => version.backends.get(server).map(Arc::clone),
        Placement::Previous => version
            .previous
            .load_full()
            .and_then(|old| old.backends.get(server).map(Arc::clone)),
    }
}
