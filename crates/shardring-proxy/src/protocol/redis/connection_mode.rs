//! A Redis client in a connection mode, served by a task of Redis's own that the session handed it to
//! ([`crate::protocol::Protocol::serve_mode`]), the way mini-redis's `Subscribe::apply` owns a
//! subscriber's loop:
//!
//! - **pinned**: inside `WATCH` (whose `EXEC` must come on the watch's server connection) or blocked
//!   in `BLPOP` and friends (which would stall the clients sharing a connection), the client's
//!   requests to that server take a connection of its own (`features/transaction.rs` says which server);
//! - **subscribed**: its subscriber commands go on subscription connections, one per server it
//!   subscribed on, and what those servers send reaches it as it comes (`features/pubsub.rs` rewrites the
//!   confirmations).
//!
//! The task serves one request at a time, so a request on the client's own connection and one on a
//! shared connection are never both in flight. The mode ends, and the client goes back to the
//! session, once nothing is in flight and the client is neither pinned nor subscribed; the
//! connections it held are closed then, which ends what they held on their servers.

use bytes::Bytes;

use super::client_state::ClientState;
use super::features::pubsub;
use super::reply::Resp;
use crate::protocol::{Answer, Back, Event, Handed, Leave, Protocol, Step};

/// What a protocol is to this file: Redis, whose client state and modes these are. Generic, so that
/// the mode's task takes the protocol value's type without importing the planner that holds it.
pub(crate) trait RedisLike:
    Protocol<ClientState = ClientState, Mode = Mode<Self>, ReplyKind = Resp>
{
}

impl<P: Protocol<ClientState = ClientState, Mode = Mode<P>, ReplyKind = Resp>> RedisLike for P {}

/// How a client enters a connection mode: the request that entered it, as planned.
#[derive(Debug)]
pub(crate) enum Mode<P: Protocol> {
    /// A request for the server the client is pinned to now (`WATCH`, a blocking command), or the
    /// first to go back to the shared connections.
    Pinned(Box<Step<P>>),
    /// A subscriber's command: each frame for its server's subscription connection, and the
    /// client's answer now (none: the confirmations are pushes; `+RESET`).
    Subscribe {
        /// Each server's frame.
        sends: Vec<(usize, Bytes)>,
        /// The client's answer now.
        answer: Answer,
    },
}

/// Serves a client in a connection mode, starting with the request that entered it, until the mode
/// ends ([`Back::Session`]) or the client is to be closed.
pub(crate) async fn serve<P: RedisLike>(
    mode: Mode<P>,
    client: &mut impl Handed<P>,
) -> std::io::Result<Back> {
    if !enter(mode, client).await? {
        return Ok(Back::Close);
    }
    let mut next = None;
    loop {
        if let Some(step) = next.take() {
            if !take(step, client).await? {
                return Ok(Back::Close);
            }
        }
        if !client.in_flight()
            && client.state().pinned().is_none()
            && !pubsub::subscribed(client.state())
        {
            // Its connections close with the handoff, ending the watch or subscriptions there.
            pubsub::forget(client.state());
            client.state().tidy();
            return Ok(Back::Session);
        }
        match client.next().await? {
            Event::Request(req) => next = Some(client.plan(req)),
            Event::Answer(answer) => client.write(answer).await?,
            Event::Push(server, frame) => {
                if let Some(out) = pubsub::pushed(client.state(), server, frame) {
                    client.write(Answer::Bytes(out)).await?;
                }
            }
            Event::Lost(why) => {
                // Its subscriptions there are gone: closed, as the server would close it.
                tracing::info!(%why, "closing a subscriber: a subscription connection ended");
                return Ok(Back::Close);
            }
            Event::Gone => return Ok(Back::Close),
        }
    }
}

/// Takes one planned step, on the client's own connection when it is for the server the client is
/// pinned to. `Ok(false)` once the client is to be closed.
async fn take<P: RedisLike>(step: Step<P>, client: &mut impl Handed<P>) -> std::io::Result<bool> {
    let step = match step {
        Step::Leave(Leave::Close(answer)) => {
            client.write(answer).await?;
            return Ok(false);
        }
        Step::Leave(Leave::Enter(mode)) => return enter(mode, client).await,
        step => step,
    };
    let server = client.state().pinned();
    match client.pin(server) {
        Ok(()) => client.send(step),
        Err(e) => {
            // No connection of its own to be had: the pin is forgotten, the request answered why.
            if let Some(t) = client
                .state()
                .rare
                .as_deref_mut()
                .and_then(|r| r.transaction.as_mut())
            {
                t.unpin();
            }
            client.write(Answer::Failed(e)).await?;
        }
    }
    Ok(true)
}

/// Takes a request that enters a mode, or one planned inside it: a subscriber's frames to their
/// connections, a pinned client's request as any other. `Ok(false)` once the client is to be closed.
async fn enter<P: RedisLike>(mode: Mode<P>, client: &mut impl Handed<P>) -> std::io::Result<bool> {
    let (sends, answer) = match mode {
        Mode::Pinned(step) => return Box::pin(take(*step, client)).await,
        Mode::Subscribe { sends, answer } => (sends, answer),
    };
    for (server, frame) in sends {
        if let Err(e) = client.subscribe(server, frame, Resp::Reply) {
            // It cannot be left subscribed on some servers only: answered, then closed.
            client.write(Answer::Failed(e)).await?;
            return Ok(false);
        }
    }
    if !pubsub::subscribed(client.state()) {
        // `RESET`, or the last subscription ended: what its connections still hold ends with them.
        client.unsubscribe();
    }
    client.write(answer).await?;
    Ok(true)
}
