//! A client's connection modes, as the session keeps them: a client pinned to a server
//! ([`Protocol::pinned`]: inside `WATCH`/`MULTI`, blocked in `BLPOP`) holds a connection of its own
//! there, and a subscriber ([`Step::Subscribe`]) holds subscription connections whose frames come
//! back as pushes. Boxed in the session ([`Pinned`]), as most clients never are in one; the
//! session's loop asks this file only whether a client is pinned and what a subscriber was pushed.
//!
//! These modes are a protocol's (Redis's) and belong to it: the next step is to hand a client in one
//! to a task the protocol owns, on its dedicated connection, and take it back when the mode ends,
//! so that the generic session knows none of them.

use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;

use super::{Pending, Session, Timing};
use crate::backend::subscription::{Push, SubscriptionConnection, PUSH_QUEUE};
use crate::backend::{Backend, OwnConnection};
use crate::error::BackendError;
use crate::pool::version::PoolVersion;
use crate::protocol::{Answer, Protocol, Step};

/// What a client pinned to a server ([`Protocol::pinned`]) or subscribed ([`Step::Subscribe`])
/// holds; boxed, as most clients never are.
pub(super) struct Pinned<P: Protocol> {
    /// Its connection of its own, to the server it is pinned to.
    own: Option<Own<P>>,
    /// A request planned while the pin changed, waiting for the answers before it to be in.
    pub(super) parked: Option<Parked<P>>,
    /// Its subscription connections and what they bring.
    pub(super) subscriber: Option<Subscriber<P>>,
    /// A subscription connection could not be opened: the client is answered, then closed (it
    /// cannot be left subscribed on some servers only).
    pub(super) failed: bool,
}

impl<P: Protocol> Pinned<P> {
    pub(super) fn new() -> Box<Pinned<P>> {
        Box::new(Pinned {
            own: None,
            parked: None,
            subscriber: None,
            failed: false,
        })
    }

    /// The connection of its own for a request to `server` (`backend`), when it holds one there.
    pub(super) fn own_to(
        &self,
        server: usize,
        backend: &Arc<Backend<P>>,
    ) -> Option<&OwnConnection<P>> {
        self.own
            .as_ref()
            .filter(|o| o.server == server && Arc::ptr_eq(&o.backend, backend))
            .map(|o| &o.connection)
    }

    /// Nothing held: the box can go.
    fn is_idle(&self) -> bool {
        self.own.is_none() && self.parked.is_none() && self.subscriber.is_none()
    }
}

/// A subscriber's connections, one per server it subscribed on, and the frames they bring.
pub(super) struct Subscriber<P: Protocol> {
    /// Each server's connection, with the server (a reload may renumber the pool).
    connections: Vec<(usize, Arc<Backend<P>>, SubscriptionConnection)>,
    /// What a new connection sends its frames with.
    pushes_to: tokio::sync::mpsc::Sender<Push>,
    /// The frames, in each server's order.
    pushes: tokio::sync::mpsc::Receiver<Push>,
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

/// A planned request waiting to be sent.
pub(super) struct Parked<P: Protocol> {
    /// The pool version it was planned against.
    pub(super) version: Arc<PoolVersion<P>>,
    /// What to do with it.
    pub(super) step: Step<P>,
    /// What its latency is tallied under.
    pub(super) timed: Timing,
}

impl<P: Protocol> Session<P> {
    /// Takes, keeps or gives back the connection of its own the client's pin asks for now
    /// ([`Protocol::pinned`]), with nothing in flight, then sends `step`. When no connection can be
    /// had, the protocol forgets the pin and `step` is answered with why.
    pub(super) fn repin_and_start(
        &mut self,
        version: &Arc<PoolVersion<P>>,
        step: Step<P>,
    ) -> Pending<P> {
        let wanted = P::pinned(&self.state);
        let pin = self.pin.get_or_insert_with(Pinned::new);
        let kept = match (&pin.own, wanted) {
            (Some(own), Some(server)) => {
                own.server == server
                    && version
                        .backends
                        .get(server)
                        .is_some_and(|b| Arc::ptr_eq(b, &own.backend))
            }
            _ => false,
        };
        if !kept {
            // Dropped first: a server's bound counts the connection given back.
            pin.own = None;
            if let Some(server) = wanted {
                let opened = match version.backends.get(server) {
                    Some(backend) => backend
                        .own_connection(self.lane as usize)
                        .map(|connection| Own {
                            server,
                            backend: Arc::clone(backend),
                            connection,
                        }),
                    None => Err(BackendError::Removed),
                };
                match opened {
                    Ok(own) => pin.own = Some(own),
                    Err(e) => {
                        P::pin_refused(&mut self.state);
                        if pin.is_idle() {
                            self.pin = None;
                        }
                        return Pending::Ready(Some(Answer::Failed(e)));
                    }
                }
            }
        }
        if let Step::Subscribe {
            sends,
            kind,
            answer,
        } = step
        {
            return self.subscribe(version, sends, kind, answer);
        }
        if pin.is_idle() {
            self.pin = None;
        }
        self.start(version, step)
    }

    /// Sends a subscriber's frames on its subscription connections, opening those it lacks, and
    /// answers `answer`. When one cannot be opened, the client gets why and is closed.
    fn subscribe(
        &mut self,
        version: &PoolVersion<P>,
        sends: Vec<(usize, Bytes)>,
        kind: P::ReplyKind,
        answer: Answer,
    ) -> Pending<P> {
        let lane = self.lane as usize;
        let pin = self.pin.get_or_insert_with(Pinned::new);
        let sub = pin.subscriber.get_or_insert_with(|| {
            let (pushes_to, pushes) = tokio::sync::mpsc::channel(PUSH_QUEUE);
            Subscriber {
                connections: Vec::new(),
                pushes_to,
                pushes,
            }
        });
        for (server, frame) in sends {
            let Some(backend) = version.backends.get(server) else {
                continue;
            };
            let open = sub
                .connections
                .iter()
                .position(|(s, b, _)| *s == server && Arc::ptr_eq(b, backend));
            let at = match open {
                Some(at) => at,
                None => match backend.subscription(server, lane, kind, sub.pushes_to.clone()) {
                    Ok(c) => {
                        sub.connections.push((server, Arc::clone(backend), c));
                        sub.connections.len() - 1
                    }
                    Err(e) => {
                        pin.failed = true;
                        return Pending::Ready(Some(Answer::Failed(e)));
                    }
                },
            };
            sub.connections[at].2.send(frame);
        }
        Pending::Ready(Some(answer))
    }
}

/// The next frame of the client's subscription connections (pending while it has none).
pub(super) fn poll_push<P: Protocol>(
    pin: &mut Option<Box<Pinned<P>>>,
    cx: &mut Context<'_>,
) -> Poll<Push> {
    match pin.as_deref_mut().and_then(|p| p.subscriber.as_mut()) {
        // The session holds a sender: the queue never ends while it polls.
        Some(s) => s
            .pushes
            .poll_recv(cx)
            .map(|p| p.unwrap_or(Push::Lost("subscription queue closed".into()))),
        None => Poll::Pending,
    }
}
