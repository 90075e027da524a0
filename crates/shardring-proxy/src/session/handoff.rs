//! What the session lends a protocol's connection-mode task ([`Handed`]): the client's stream and
//! buffered input, its state, the pool's placement, and the connections a mode holds of its own (one
//! to a server the client is pinned to, and a subscriber's subscription connections). These exist
//! only while the client is handed over: dropped with the [`Handoff`], they close, which ends what
//! they held on their servers (a watch, a blocked command, subscriptions).
//!
//! The session's loop knows of none of this: it hands the client over once its answers in flight are
//! written, awaits [`Protocol::serve_mode`], and serves the client again (or closes it).

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWriteExt;

use super::pending::Pending;
use super::{poll_read, Session, Timing};
use crate::backend::subscription::{Push, SubscriptionConnection, PUSH_QUEUE};
use crate::backend::{Backend, ConnectionRoute, OwnConnection};
use crate::buffers;
use crate::drain::Watch;
use crate::error::BackendError;
use crate::pool::version::PoolVersion;
use crate::protocol::{Answer, Event, Handed, Incoming, Leave, Protocol, RequestDecoder, Step};

/// A client handed to its protocol for a connection mode.
pub(super) struct Handoff<'s, 'd, P: Protocol> {
    /// The session, whose requests in flight are all answered.
    session: &'s mut Session<P>,
    /// Completes once the proxy drains.
    stopped: Pin<&'s mut Watch<'d>>,
    /// The pool version of the last plan: what its server numbers index.
    version: Arc<PoolVersion<P>>,
    /// Answers on their way, in request order.
    in_flight: VecDeque<(Pending<P>, Timing)>,
    /// What the last request decoded is tallied under, until it is sent.
    timed: Timing,
    /// The connection of the client's own to the server it is pinned to.
    own: Option<Own<P>>,
    /// A subscriber's connections and what they bring.
    subscriber: Option<Subscriber<P>>,
}

/// A client's connection of its own to one server.
struct Own<P: Protocol> {
    /// The server's index, as the plan numbered it.
    server: usize,
    /// The server (a reload may renumber the pool: requests for another server never take it).
    backend: Arc<Backend<P>>,
    /// The connection.
    connection: OwnConnection<P>,
}

/// A subscriber's connections, one per server it subscribed on, and the frames they bring.
struct Subscriber<P: Protocol> {
    /// Each server's connection, with the server (a reload may renumber the pool: a connection is
    /// kept for the server it was opened to).
    connections: Vec<(usize, Arc<Backend<P>>, SubscriptionConnection)>,
    /// What a new connection sends its frames with.
    pushes_to: tokio::sync::mpsc::Sender<Push>,
    /// The frames, in each server's order.
    pushes: tokio::sync::mpsc::Receiver<Push>,
}

impl<'s, 'd, P: Protocol> Handoff<'s, 'd, P> {
    /// The client of `session`, handed over with the request that entered the mode planned against
    /// `version` and tallied under `timed`.
    pub(super) fn new(
        session: &'s mut Session<P>,
        stopped: Pin<&'s mut Watch<'d>>,
        version: Arc<PoolVersion<P>>,
        timed: Timing,
    ) -> Self {
        Handoff {
            session,
            stopped,
            version,
            in_flight: VecDeque::new(),
            timed,
            own: None,
            subscriber: None,
        }
    }

    /// Which server connections the client's requests take: its lane as its state says now (one
    /// request at a time, so a change of lane needs no wait).
    fn route(&self) -> ConnectionRoute {
        ConnectionRoute {
            worker: self.session.worker as usize,
            lane: P::lane(&self.session.state),
            client_id: u64::from(self.session.client_id),
        }
    }

    /// The next request buffered, or `None` when more bytes are needed. A request the decoder refuses
    /// is answered here; `Err` when the stream cannot be resynchronised after it (the client is
    /// then closed).
    async fn decode(&mut self) -> io::Result<Option<Result<P::Request, ()>>> {
        let session = &mut *self.session;
        if session.rbuf.is_empty() {
            return Ok(None);
        }
        match session.decoder.decode(&mut session.rbuf)? {
            None => Ok(None),
            Some(Incoming::Request(req)) => {
                session.pool.shared.stats.requests.inc();
                self.timed = P::command_index(&req).map(|i| (i, std::time::Instant::now()));
                Ok(Some(Ok(req)))
            }
            Some(Incoming::Refused {
                reply,
                reason,
                close,
            }) => {
                session.pool.shared.stats.client_errors.inc();
                session.stream.write_all(&reply).await?;
                if close {
                    tracing::info!(
                        %reason,
                        "closing a client connection: its input cannot be resynchronised"
                    );
                    return Ok(Some(Err(())));
                }
                Ok(None)
            }
        }
    }
}

impl<P: Protocol> Handed<P> for Handoff<'_, '_, P> {
    fn state(&mut self) -> &mut P::ClientState {
        &mut self.session.state
    }

    fn plan(&mut self, request: P::Request) -> Step<P> {
        self.version = self.session.pool.current.load_full();
        let version = Arc::clone(&self.version);
        let routing = version.router.load();
        self.session.plan(&version, &routing, request)
    }

    fn pin(&mut self, server: Option<usize>) -> Result<(), BackendError> {
        let backend = server.and_then(|s| self.version.backends.get(s));
        let kept = match (&self.own, server, backend) {
            (Some(own), Some(s), Some(b)) => own.server == s && Arc::ptr_eq(&own.backend, b),
            _ => false,
        };
        if kept {
            return Ok(());
        }
        self.own = None;
        let Some(server) = server else {
            return Ok(());
        };
        let backend = backend.ok_or(BackendError::Removed)?;
        let connection = backend.own_connection(P::lane(&self.session.state))?;
        self.own = Some(Own {
            server,
            backend: Arc::clone(backend),
            connection,
        });
        Ok(())
    }

    fn send(&mut self, step: Step<P>) {
        let step = match step {
            Step::Leave(Leave::Close(a)) => Step::Answer(a),
            Step::Leave(Leave::Enter(_)) => Step::Answer(Answer::Nothing),
            step => step,
        };
        let own = self.own.as_ref().and_then(|own| match &step {
            Step::Forward {
                server: Some(s), ..
            } if *s == own.server
                && self
                    .version
                    .backends
                    .get(*s)
                    .is_some_and(|b| Arc::ptr_eq(b, &own.backend)) =>
            {
                Some(&own.connection)
            }
            _ => None,
        });
        let pending = self
            .session
            .start_on(&self.version, self.route(), step, own);
        self.in_flight.push_back((pending, self.timed.take()));
    }

    fn subscribe(
        &mut self,
        server: usize,
        frame: Bytes,
        kind: P::ReplyKind,
    ) -> Result<(), BackendError> {
        let backend = self
            .version
            .backends
            .get(server)
            .ok_or(BackendError::Removed)?;
        let lane = P::lane(&self.session.state);
        let sub = self.subscriber.get_or_insert_with(|| {
            let (pushes_to, pushes) = tokio::sync::mpsc::channel(PUSH_QUEUE);
            Subscriber {
                connections: Vec::new(),
                pushes_to,
                pushes,
            }
        });
        let open = sub
            .connections
            .iter()
            .position(|(s, b, _)| *s == server && Arc::ptr_eq(b, backend));
        let at = match open {
            Some(at) => at,
            None => {
                let c = backend.subscription(server, lane, kind, sub.pushes_to.clone())?;
                sub.connections.push((server, Arc::clone(backend), c));
                sub.connections.len() - 1
            }
        };
        sub.connections[at].2.send(frame);
        Ok(())
    }

    fn unsubscribe(&mut self) {
        self.subscriber = None;
    }

    fn in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }

    async fn next(&mut self) -> io::Result<Event<P>> {
        loop {
            if self.in_flight.is_empty() {
                match self.decode().await? {
                    Some(Ok(req)) => return Ok(Event::Request(req)),
                    Some(Err(())) => return Ok(Event::Gone),
                    None => {}
                }
            }
            let to = self.route();
            let Handoff {
                session,
                stopped,
                in_flight,
                subscriber,
                ..
            } = self;
            let Session {
                stream,
                rbuf,
                decoder,
                replies,
                pool,
                ..
            } = &mut **session;
            if let Some((p, _)) = in_flight.front_mut() {
                if p.is_onward() {
                    p.go_on(replies, pool.current.load_full(), to);
                }
            }
            let can_read = rbuf.len() < decoder.max_buffer();
            tokio::select! {
                biased;
                // `None`: the front was sent on, and is started again at the loop's top.
                answer = poll_fn(|cx| match in_flight.front_mut() {
                    Some((p, _)) => p.poll_answer(replies, cx),
                    None => Poll::Pending,
                }), if !in_flight.is_empty() => {
                    let Some(answer) = answer else { continue };
                    if let Some((_, Some((i, since)))) = in_flight.pop_front() {
                        if let Some(c) = pool.shared.stats.commands.get(i) {
                            c.latency.observe(since.elapsed());
                        }
                    }
                    return Ok(Event::Answer(answer));
                }
                push = poll_fn(|cx| poll_push(subscriber, cx)), if subscriber.is_some() => {
                    return Ok(match push {
                        Push::Frame(server, frame) => Event::Push(server, frame),
                        Push::Lost(why) => Event::Lost(why),
                    });
                }
                read = poll_fn(|cx| poll_read(stream, rbuf, cx)), if can_read => {
                    if read? == 0 {
                        return Ok(Event::Gone);
                    }
                }
                () = stopped.as_mut() => return Ok(Event::Gone),
            }
        }
    }

    async fn write(&mut self, answer: Answer) -> io::Result<()> {
        match answer {
            Answer::Nothing => Ok(()),
            Answer::Bytes(bytes) => self.session.stream.write_all(&bytes).await,
            failed => {
                let mut out = buffers::take();
                self.session.write_answer(failed, &mut out);
                let written = self.session.stream.write_all(&out).await;
                buffers::give(out);
                written
            }
        }
    }
}

/// The next frame of the client's subscription connections.
fn poll_push<P: Protocol>(
    subscriber: &mut Option<Subscriber<P>>,
    cx: &mut Context<'_>,
) -> Poll<Push> {
    match subscriber {
        // The handoff holds a sender: the queue never ends while it polls.
        Some(s) => s
            .pushes
            .poll_recv(cx)
            .map(|p| p.unwrap_or(Push::Lost("subscription queue closed".into()))),
        None => Poll::Pending,
    }
}
