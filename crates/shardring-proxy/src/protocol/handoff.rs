//! A client handed by the session to its protocol for a connection mode the protocol serves itself
//! (Redis: a subscriber, a client inside `WATCH`, one blocked in `BLPOP`), the way mini-redis's
//! `Subscribe::apply` owns a subscriber's loop while its connection handler knows nothing of pub/sub.
//!
//! The session hands the client over once its answers in flight are written ([`super::Leave::Enter`])
//! and takes it back when the protocol's task returns ([`Back`]). What the task has of the client and
//! of the pool is [`Handed`], which the session implements: the protocol needs nothing above its own
//! floor, and the session knows no mode.

use std::future::Future;
use std::io;

use bytes::Bytes;

use super::{Answer, Protocol, Step};
use crate::error::BackendError;

/// What happened next, for a client in a connection mode ([`Handed::next`]).
#[derive(Debug)]
pub(crate) enum Event<P: Protocol> {
    /// The client's next request; decoded only while nothing is in flight (a mode serves its client
    /// one request at a time, so one on a connection of its own and one on a shared connection are
    /// never both on their way).
    Request(P::Request),
    /// The answer of the oldest request sent ([`Handed::send`]), for [`Handed::write`].
    Answer(Answer),
    /// A frame the subscription connection to `server` brought.
    Push(usize, Bytes),
    /// A subscription connection closed or failed (why): the client's subscriptions there are gone.
    Lost(String),
    /// The client left, or the proxy is draining. Not waited for: a blocked command's reply may
    /// never come.
    Gone,
}

/// How a connection mode ended ([`super::Protocol::serve_mode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Back {
    /// The mode is over: the session serves the client again.
    Session,
    /// The client is to be closed (it asked, left, or cannot be kept).
    Close,
}

/// What a protocol's connection-mode task has of the client the session handed it, and of the pool.
pub(crate) trait Handed<P: Protocol> {
    /// The client's state.
    fn state(&mut self) -> &mut P::ClientState;

    /// Plans `request` as the session plans every request: against the pool's current placement,
    /// fenced while a planned change is unconfirmed.
    fn plan(&mut self, request: P::Request) -> Step<P>;

    /// Takes a connection of the client's own to `server` (as the last plan numbered servers) for the
    /// requests sent to it from now on, keeping the one held when it is to that server already; `None`
    /// gives it back. Dropped first: a server's bound counts the connection given back.
    ///
    /// # Errors
    /// The server has its bound of such connections open, or is no longer in the pool.
    fn pin(&mut self, server: Option<usize>) -> Result<(), BackendError>;

    /// Sends a planned step on its way (a forward to the pinned server on the client's own
    /// connection, the rest as the session sends them): its answer comes as [`Event::Answer`], in
    /// order. A [`Step::Leave`] is answered with its answer, or nothing: the task decides what it means.
    fn send(&mut self, step: Step<P>);

    /// Sends `frame` on the client's subscription connection to `server` (as the last plan numbered
    /// servers), opening it when the client has none there; what that server sends comes as
    /// [`Event::Push`].
    ///
    /// # Errors
    /// The connection could not be opened (the server's bound, or the server left the pool).
    fn subscribe(
        &mut self,
        server: usize,
        frame: Bytes,
        kind: P::ReplyKind,
    ) -> Result<(), BackendError>;

    /// Closes the client's subscription connections, which ends whatever they held on their servers.
    fn unsubscribe(&mut self);

    /// Whether an answer is on its way.
    fn in_flight(&self) -> bool;

    /// Waits for what comes next: the answer in flight, a push, the next request (while nothing is in
    /// flight), or the end.
    ///
    /// # Errors
    /// Reading from the client failed.
    fn next(&mut self) -> impl Future<Output = io::Result<Event<P>>> + Send;

    /// Writes an answer to the client (a failure as the protocol encodes it).
    ///
    /// # Errors
    /// Writing to the client failed.
    fn write(&mut self, answer: Answer) -> impl Future<Output = io::Result<()>> + Send;
}
