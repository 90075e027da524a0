//! A request on its way, as the session sends it and waits for its answer: a forwarded request
//! in a slot of the session's reply queue, an exchange's rounds (each part to its server with a slot,
//! the follow-ups whose replies nobody waits for), and the answer they become ([`Pending`]).

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::Session;
use crate::backend::{Backend, ConnectionRoute, OwnConnection, ReplyQueue, ReplyTo};
use crate::error::BackendError;
use crate::pool::version::PoolVersion;
use crate::protocol::{
    Answer, FollowUp, Leave, PartReply, Phase, Placement, Protocol, Round, Step,
};

/// An answer on its way, in the client's request order.
pub(super) enum Pending<P: Protocol> {
    /// Known already.
    Ready(Option<Answer>),
    /// One server's reply in the session's reply slot of this number, and how it becomes the answer.
    Slot(u64, Option<P::Finish>),
    /// An exchange's answer, once its rounds are done.
    Joined(Pin<Box<dyn Future<Output = Answer> + Send>>),
    /// A forward whose reply sent it on ([`Protocol::sends_on`]): the exchange it becomes and that
    /// reply, until the session starts it ([`Pending::go_on`]).
    Onward(Box<(P::Exchange, crate::protocol::Reply)>),
}

impl<P: Protocol> Pending<P> {
    /// The answer, once known (`Some`); `replies` is the session's reply queue (for
    /// [`Pending::Slot`]). Polled again after completing, it answers nothing. `None`: a forward
    /// whose reply sent it on ([`Protocol::sends_on`]), now [`Pending::Onward`], which the session
    /// starts again as an exchange ([`Pending::go_on`]) before it polls again.
    // Inline for a forward's reply, the answer nearly every request is; the other kinds out of
    // line ([`Pending::poll_other`]).
    #[inline(always)]
    pub(super) fn poll_answer(
        &mut self,
        replies: &ReplyQueue,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Answer>> {
        if let Pending::Slot(number, slot @ Some(_)) = self {
            let Poll::Ready(reply) = replies.poll_take(*number, cx) else {
                return Poll::Pending;
            };
            if let Some(finish) = slot.take() {
                if P::sends_on(&finish, &reply) {
                    return Poll::Ready(self.sent_on(finish, reply));
                }
                return Poll::Ready(Some(P::finish(finish, reply)));
            }
        }
        self.poll_other(cx)
    }

    /// [`Pending::poll_answer`] of every kind but a forward whose reply is still to be taken.
    #[inline(never)]
    fn poll_other(&mut self, cx: &mut Context<'_>) -> Poll<Option<Answer>> {
        match self {
            Pending::Ready(a) => Poll::Ready(Some(a.take().unwrap_or(Answer::Nothing))),
            Pending::Joined(f) => f.as_mut().poll(cx).map(Some),
            // A forward whose answer was given: polled again, it answers nothing.
            Pending::Slot(..) => Poll::Ready(Some(Answer::Nothing)),
            Pending::Onward(_) => Poll::Ready(None),
        }
    }

    /// A forward whose reply sent it on: kept as [`Pending::Onward`] for the session to start
    /// again (`None`), or answered when the protocol has no exchange for it. Out of line: rare.
    #[cold]
    #[inline(never)]
    fn sent_on(&mut self, finish: P::Finish, reply: crate::protocol::Reply) -> Option<Answer> {
        match P::go_on(finish) {
            Ok(exchange) => {
                *self = Pending::Onward(Box::new((*exchange, reply)));
                None
            }
            Err(finish) => Some(P::finish(finish, reply)),
        }
    }

    /// Whether this is a forward its reply sent on, waiting for [`Pending::go_on`].
    #[inline(always)]
    pub(super) fn is_onward(&self) -> bool {
        matches!(self, Pending::Onward(_))
    }

    /// A forward its reply sent on, started again as an exchange against `version` (the pool's
    /// now) on the connections `to`, its first round's reply the one that sent it on.
    #[cold]
    pub(super) fn go_on(
        &mut self,
        replies: &ReplyQueue,
        version: Arc<PoolVersion<P>>,
        to: ConnectionRoute,
    ) {
        let Pending::Onward(boxed) = std::mem::replace(self, Pending::Ready(None)) else {
            return;
        };
        let (exchange, reply) = *boxed;
        let first = First::Replied(exchange, reply);
        *self = Pending::Joined(joined(replies.clone(), version, to, first));
    }
}

/// How an exchange starts: a round to send, or a forward's reply that sent it on.
enum First<P: Protocol> {
    /// Send this round.
    Round(Round<P>),
    /// Read this reply (of no server the exchange knows) with this.
    Replied(P::Exchange, crate::protocol::Reply),
}

/// An exchange's answer, once its rounds are done: its rounds sent on `to` of `version`, each
/// part's reply in a slot of `replies`; the first round sent before this returns.
fn joined<P: Protocol>(
    replies: ReplyQueue,
    version: Arc<PoolVersion<P>>,
    to: ConnectionRoute,
    first: First<P>,
) -> Pin<Box<dyn Future<Output = Answer> + Send>> {
    // The first round goes now, not when the answer is first polled: in the client's request
    // order, before the requests planned after it (a dual write's `noreply` before the `get` that
    // follows it).
    let (mut sent, mut exchange) = match first {
        First::Round(round) => send_round(&replies, &version, to, round),
        First::Replied(exchange, reply) => {
            let replies_in = vec![PartReply { reply, server: "" }];
            match version.protocol.advance(exchange, replies_in) {
                Phase::Done { answer, follow_ups } => {
                    send_follow_ups(&version, to, follow_ups);
                    return Box::pin(std::future::ready(answer));
                }
                Phase::Again(round) => send_round(&replies, &version, to, round),
            }
        }
    };
    Box::pin(async move {
        loop {
            // Each part's reply in turn: the next move needs them all.
            let mut replies_in = Vec::with_capacity(sent.len());
            for (number, server) in &sent {
                replies_in.push(PartReply {
                    reply: poll_fn(|cx| replies.poll_take(*number, cx)).await,
                    server: server
                        .as_ref()
                        .map_or("a server of the previous ring", |s| &s.settings().addr),
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
    })
}

impl<P: Protocol> Session<P> {
    /// Sends a planned request on its way: a forwarded one into a slot of the reply queue, an
    /// exchange's first round at once (pipelined with the client's other requests), its later rounds
    /// when [`Protocol::advance`] asks for them.
    pub(super) fn start(&self, version: &Arc<PoolVersion<P>>, step: Step<P>) -> Pending<P> {
        self.start_on(version, self.connection_route(), step, None)
    }

    /// [`Session::start`] on the server connections of `to`; a forward goes on `own` when given (a
    /// connection of the client's own to the forward's server: `handoff.rs`).
    pub(super) fn start_on(
        &self,
        version: &Arc<PoolVersion<P>>,
        to: ConnectionRoute,
        step: Step<P>,
        own: Option<&OwnConnection<P>>,
    ) -> Pending<P> {
        match step {
            // What leaves the session is answered by it: here only its answer is left.
            Step::Answer(a) | Step::Leave(Leave::Close(a)) => Pending::Ready(Some(a)),
            Step::Leave(Leave::Enter(_)) => Pending::Ready(None),
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
                let backend = &version.backends[server];
                let reply = ReplyTo::Slot(slot);
                match own {
                    None => backend.send_to(to, frame, kind, reply),
                    Some(own) => own.send_to(frame, kind, reply),
                }
                Pending::Slot(number, Some(finish))
            }
            Step::Exchange(round) => Pending::Joined(joined(
                self.replies.clone(),
                Arc::clone(version),
                to,
                First::Round(round),
            )),
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
